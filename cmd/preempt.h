/*
 * preempt: SIGTERM and SIGUSR1 ask a training run to stop at the next step
 * boundary, save a checkpoint and exit, as preemptible clusters expect (Slurm
 * sends SIGTERM before it kills a job, or a chosen signal ahead of the time
 * limit with --signal; Open MPI's mpirun forwards SIGUSR1 to every rank). The
 * handler only records the signal in a flag the trainer reads once per step
 * (zt_trainer_options.stop_request): the ranks agree inside the step's loss
 * all-reduce, so a signal that reached one rank stops them all after the same
 * step.
 *
 * A stop must end: the first request starts a timer of ZT_STOP_GRACE
 * seconds (default 300, engine/env.h), and a run still going when it fires
 * (a save stuck on a dead file system, a hung collective with the watchdog
 * off) exits at once with 128 + the signal and a line saying why. So does a
 * second SIGTERM (the user insisting), and SIGINT (Ctrl-C) at any time. A
 * repeated SIGUSR1 changes nothing: an sbatch script that forwards the
 * warning signal to mpirun must not kill the save it asked for.
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

/* Installs the handlers of SIGTERM, SIGUSR1, SIGINT and SIGALRM (the
 * grace timer's) just before training: a signal during start-up still ends
 * the process at once, with nothing to save yet. grace_s: ZT_STOP_GRACE. */
void cmd_preempt_install(double grace_s);

/* "SIGTERM" or "SIGUSR1", by which reason reached most ranks (SIGTERM on a
 * tie), from the trainer's counts. */
const char *cmd_preempt_name(const int64_t ranks_per_reason[2]);

/* The exit code of a run stopped without a checkpoint to save: 128 + the
 * signal's number, the shell's code for a process the signal ended, so a
 * scheduler sees the run as terminated, not as finished. */
int cmd_preempt_exit_code(const int64_t ranks_per_reason[2]);

#endif
