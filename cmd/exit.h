/*
 * exit: how zerotrain ends. Exit codes: 0 success; 2 bad flags, config or data
 * (the user's input); 1 anything that went wrong while running. An error
 * every rank agrees on is printed once (by the lowest failing rank) and all
 * ranks exit; an error on one rank alone is printed by that rank and ends the
 * job with MPI_Abort, so no rank is left waiting in a collective. cmd/ is the
 * only place that exits.
 *
 * Memory: none. Collective: cmd_agreed_failure (and cmd_fatal ends the job).
 */
#ifndef ZT_CMD_EXIT_H
#define ZT_CMD_EXIT_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "engine/status.h"
#include "engine/world/world.h"

/* Before MPI is up every rank would print the same usage error: only the
 * first process does (Open MPI tells each process its rank in the
 * environment). */
bool cmd_is_first_process(void);

/* Prints "zerotrain: error: ..." and the --help hint (first process only);
 * returns 2. */
int cmd_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The user's input (flags, config, data, files) is exit 2; the rest 1. */
int cmd_exit_code(zt_status st);

/* "[rank R host] error: ..." and the hint of the last zt_fail. */
void cmd_print_error(const zt_world *w);

/* An error all ranks know about: 0 when every rank is fine; otherwise the
 * first failing rank prints, the world and MPI are finalised and the exit
 * code is returned. A communication failure (ZT_ERR_COMM here, or the
 * agreement's own watchdog: a lost peer) is printed and ends the job with
 * MPI_Abort instead, since the lost peer cannot be waited for. */
int cmd_agreed_failure(zt_world *w, zt_status local);

/* cmd_agreed_failure without its ending, for a command that holds what
 * must be released while MPI is up (a trainer, whose swap folders and
 * communicators go with it): the exit code, 0 when every rank is fine, the
 * error printed once; the caller frees and ends with cmd_end. Collective. */
int cmd_agree(zt_world *w, zt_status local);

/* Frees the world, finalises MPI; returns rc. */
int cmd_end(zt_world *w, int rc);

/* An error on this rank alone mid-run: print and take the whole job down. */
void cmd_fatal(const zt_world *w, zt_comm *comm, zt_status st);

/* MPI and the world up (zt_world_init), then every rank agrees on its
 * environment (w->env_status): 0, or the exit code after the lowest failing
 * rank printed (2 for a bad variable). A failure of MPI itself is printed by
 * every rank (there is no world to agree in) and is exit 1. Collective. */
int cmd_world_start(zt_world *w, int *argc, char ***argv);

/* An error of a subcommand that runs without a world: print, exit code. */
int cmd_local_failure(zt_status st);

/* MPI and the world are done: 0. */
int cmd_finish(zt_world *w);

#endif
