/*
 * preempt: SIGTERM and SIGUSR1 ask a training run to stop at the next step
 * boundary, save a checkpoint and exit, as preemptible clusters expect (Slurm
 * sends SIGTERM before it kills a job, or a chosen signal ahead of the time
 * limit with --signal; Open MPI's mpirun forwards SIGUSR1 to every rank). The
 * handler only records the signal in a flag the trainer reads once per step
 * (zt_trainer_options.stop_request): the ranks agree inside the step's loss
 * all-reduce, so a signal that reached one rank stops them all after the same
 * step. Later signals of either kind are recorded too and change nothing:
 * a launcher that forwards one signal twice must not kill a save under way.
 *
 * Memory: a static flag. Collective: none.
 */
#ifndef ZT_CMD_PREEMPT_H
#define ZT_CMD_PREEMPT_H

#include <signal.h>
#include <stdint.h>

/* The flag's bits, as the trainer counts them (zt_trainer_stopped). */
#define CMD_PREEMPT_TERM 1 /* SIGTERM */
#define CMD_PREEMPT_USR1 2 /* SIGUSR1 */

/* The flag the handlers set (for the trainer's options, before they are
 * installed). */
const volatile sig_atomic_t *cmd_preempt_flag(void);

/* Installs the handlers (just before training: a signal during start-up
 * still ends the process at once, with nothing to save yet). */
void cmd_preempt_install(void);

/* "SIGTERM" or "SIGUSR1", by which reason reached most ranks (SIGTERM on a
 * tie), from the trainer's counts. */
const char *cmd_preempt_name(const int64_t ranks_per_reason[2]);

/* The exit code of a run stopped without a checkpoint to save: 128 + the
 * signal's number, the shell's code for a process the signal ended, so a
 * scheduler sees the run as terminated, not as finished. */
int cmd_preempt_exit_code(const int64_t ranks_per_reason[2]);

#endif
