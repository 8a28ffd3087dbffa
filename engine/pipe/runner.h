/*
 * runner: the stage runner, private to engine/pipe. Runs one optimizer
 * step's program (engine/pipe/schedule.h) on this stage: posts each transfer
 * without blocking, waits only where an operation needs a transfer, calls the
 * trainer's hooks for the computation, and measures compute and idle time
 * (engine/pipe/pipe.h has the public entry, zt_pipe_run_step).
 *
 * Memory: none of its own (the pipe's requests). Collective: over the
 * pipeline group, as the program says.
 */
#ifndef ZT_PIPE_RUNNER_H
#define ZT_PIPE_RUNNER_H

#include "engine/pipe/pipe.h"

/* p2p.c: the comm transfer of schedule transfer t (buffer, size, dtype, peer). */
zt_comm_xfer zt_pipe_xfer_of(const zt_pipe *p, const zt_pipe_hooks *h, zt_pipe_xfer t);

#endif
