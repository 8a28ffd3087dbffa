/*
 * preempt: the stop-request signal handlers (cmd/preempt.h).
 */
#include "cmd/preempt.h"

#include <string.h>

static volatile sig_atomic_t preempt_flag;

static void preempt_handler(int sig)
{
    preempt_flag |= sig == SIGTERM ? CMD_PREEMPT_TERM : CMD_PREEMPT_USR1;
}

const volatile sig_atomic_t *cmd_preempt_flag(void) { return &preempt_flag; }

void cmd_preempt_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = preempt_handler;
    sigemptyset(&sa.sa_mask);
    /* Interrupted reads and writes restart: the flag is read at a step
     * boundary, nothing has to notice the signal sooner. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

static int preempt_signal(const int64_t ranks_per_reason[2])
{
    return ranks_per_reason[1] > ranks_per_reason[0] ? SIGUSR1 : SIGTERM;
}

const char *cmd_preempt_name(const int64_t ranks_per_reason[2])
{
    return preempt_signal(ranks_per_reason) == SIGTERM ? "SIGTERM" : "SIGUSR1";
}

int cmd_preempt_exit_code(const int64_t ranks_per_reason[2])
{
    return 128 + preempt_signal(ranks_per_reason);
}
