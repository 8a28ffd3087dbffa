/*
 * preempt: the stop-request signal handlers (cmd/preempt.h).
 */
#include "cmd/preempt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t preempt_flag;
static unsigned preempt_grace_s;
/* The lines the handlers write: formatted at install, since a handler may
 * only call async-signal-safe functions (write, _exit, alarm). */
static char preempt_grace_line[2][200];

static void preempt_exit_now(const char *line, int code)
{
    ssize_t ignored = write(STDERR_FILENO, line, strlen(line));
    (void)ignored;
    _exit(code);
}

static void preempt_handler(int sig)
{
    if (sig == SIGINT)
        preempt_exit_now("zerotrain: SIGINT: exiting now, without a checkpoint of this step\n",
                         128 + SIGINT);
    if (sig == SIGALRM)
        preempt_exit_now(preempt_grace_line[(preempt_flag & CMD_PREEMPT_TERM) ? 0 : 1],
                         128 + ((preempt_flag & CMD_PREEMPT_TERM) ? SIGTERM : SIGUSR1));
    if (sig == SIGTERM && (preempt_flag & CMD_PREEMPT_TERM))
        preempt_exit_now("zerotrain: a second SIGTERM: exiting now, without a checkpoint of "
                         "this step\n",
                         128 + SIGTERM);
    if (!preempt_flag)
        alarm(preempt_grace_s);
    preempt_flag |= sig == SIGTERM ? CMD_PREEMPT_TERM : CMD_PREEMPT_USR1;
}

const volatile sig_atomic_t *cmd_preempt_flag(void) { return &preempt_flag; }

void cmd_preempt_install(double grace_s)
{
    /* alarm counts whole seconds: a fraction rounds up, never to 0 (no
     * alarm at all). */
    preempt_grace_s = (unsigned)grace_s + ((double)(unsigned)grace_s < grace_s);
    const char *names[2] = {"SIGTERM", "SIGUSR1"};
    for (int i = 0; i < 2; i++)
        snprintf(preempt_grace_line[i], sizeof preempt_grace_line[i],
                 "zerotrain: still running %u s after %s (ZT_STOP_GRACE): exiting now, "
                 "without a checkpoint of this step\n",
                 preempt_grace_s, names[i]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = preempt_handler;
    sigemptyset(&sa.sa_mask);
    /* Interrupted reads and writes restart: the flag is read at a step
     * boundary, nothing has to notice the signal sooner. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
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
