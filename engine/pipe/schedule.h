/*
 * schedule: what one pipeline stage does in one optimizer step, as a program
 * of operations over the step's M micro-batches (the gradient accumulation
 * steps): forward and backward of a micro-batch, and posts of point-to-point
 * transfers with the neighbouring stages, each post one send_recv call
 * (engine/comm/comm.h) of one or two transfers issued together.
 *
 *   1f1b   PipeDream-flush (Narayanan et al. 2021; Megatron-LM's
 *          non-interleaved schedule): stage s of P runs w = min(P - s - 1, M)
 *          warm-up forwards, then alternates one forward and one backward,
 *          then drains the remaining backwards. At most min(P - s, M)
 *          micro-batches are in flight (forward done, backward not), so
 *          activation memory is bounded by the pipeline depth, not by M.
 *          Each steady-state exchange is one call: the activation just
 *          computed goes to the next stage together with the receive of the
 *          gradient the next backward needs (and the gradient just computed
 *          goes back together with the receive of the next forward's input).
 *   gpipe  all M forwards, then all M backwards (GPipe): M micro-batches in
 *          flight; the comparison 1f1b's bound is measured against.
 * Both keep the flush semantics: every backward of the step finishes before
 * the optimizer steps, so the update equals a non-pipelined run's.
 *
 * Waits. A post is non-blocking; the stage runner waits for a post only when
 * an operation needs it, which the program states: a forward waits for the
 * receive of its input and for the send that last used its activation slot
 * (micro-batch m - slots); a backward waits for the receive of its output's
 * gradient and for the send that last used its gradient buffer (m - 2); the
 * step ends waiting for every post. Each rank's transfers run in issue order
 * to completion (the comm thread's queue, NCCL's comm stream, or the staged
 * comm's blocking calls), and transfers between two ranks match in order, so
 * the programs of neighbouring stages must issue them in orders that cannot
 * wait on each other in a cycle. tests/unit/test_pipe_schedule.c simulates
 * every stage's program under those rules (rendezvous sends: no eager
 * buffering), for both schedules over many P and M, and checks that no
 * stage waits forever, that each receive gets the transfer it names, and the
 * in-flight bounds.
 *
 * Memory: a program owns its operation array (zt_pipe_program_free).
 * Collective: none.
 */
#ifndef ZT_PIPE_SCHEDULE_H
#define ZT_PIPE_SCHEDULE_H

#include <stdint.h>

#include "engine/status.h"

typedef enum { ZT_PIPE_1F1B = 0, ZT_PIPE_GPIPE } zt_pipe_schedule_kind;

/* "1f1b", "gpipe". */
const char *zt_pipe_schedule_name(zt_pipe_schedule_kind k);

typedef enum {
    ZT_PIPE_SEND_ACT = 0, /* this stage's output of micro-batch m, to the next stage */
    ZT_PIPE_RECV_ACT,     /* this stage's input of m, from the previous stage */
    ZT_PIPE_SEND_GRAD,    /* the gradient of this stage's input of m, to the previous stage */
    ZT_PIPE_RECV_GRAD,    /* the gradient of this stage's output of m, from the next stage */
    ZT_PIPE_NXFER
} zt_pipe_xfer_kind;

typedef struct {
    zt_pipe_xfer_kind kind;
    int64_t micro;
} zt_pipe_xfer;

typedef enum { ZT_PIPE_OP_FORWARD = 0, ZT_PIPE_OP_BACKWARD, ZT_PIPE_OP_POST } zt_pipe_op_kind;

typedef struct {
    zt_pipe_op_kind kind;
    int64_t micro;           /* FORWARD, BACKWARD */
    int n_xfers;             /* POST: 1 or 2 transfers in one call */
    zt_pipe_xfer xfers[2];
    int waits[2];            /* FORWARD, BACKWARD: indices of the posts to wait for first, -1: none */
} zt_pipe_op;

typedef struct {
    zt_pipe_op *ops;
    int n_ops, n_posts;
    int slots;               /* the most micro-batches in flight: activation slots */
} zt_pipe_program;

/* The program of `stage` of `stages` for `micro_batches` (>= 1) micro-batches. */
zt_status zt_pipe_program_build(zt_pipe_schedule_kind kind, int stages, int stage,
                                int64_t micro_batches, zt_pipe_program *out);
void zt_pipe_program_free(zt_pipe_program *p);

/* The index of post k among the program's ops (posts are numbered in order
 * from 0), or -1. */
int zt_pipe_program_post_op(const zt_pipe_program *p, int post);

#endif
