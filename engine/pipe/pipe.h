/*
 * pipe: pipeline parallelism. The world of P x D ranks is P stages, each
 * replicated D times: world rank = stage * D + dp_rank (DeepSpeed's
 * PipeDataParallelTopology: the data-parallel index varies fastest, so a
 * stage's replicas are neighbours, within a node where they fit). A stage
 * runs a contiguous range of the model's units (engine/pipe/partition.h);
 * its D replicas form the data-parallel group inside which ZeRO (stage 0 or
 * 1) partitions and reduces; the P ranks with the same dp_rank form the
 * pipeline group, over which activations flow forward and their gradients
 * backward between neighbouring stages (send_recv, engine/comm/comm.h). One
 * optimizer step runs the schedule's program (engine/pipe/schedule.h) over
 * the step's gradient accumulation micro-batches; the trainer supplies the
 * forward and backward of one micro-batch on its stage (zt_pipe_hooks) and
 * asks this module where transfers land.
 *
 * Without pipelining (P = 1) the same path runs: one stage holds every unit,
 * the data-parallel group is the world's communicator, no transfer is ever
 * posted, and the 1F1B program is the plain loop (forward, backward of each
 * micro-batch in turn).
 *
 * What crosses stages: activations in the compute dtype (the dtype a unit
 * stores its output in, so nothing is rounded that a P = 1 run would not
 * round), their gradients in fp32 (the dtype the trainer's backward carries
 * between units): a pipelined run computes what the P = 1 run computes.
 * Every stage reads the micro-batch itself (the sampler is a pure function of
 * the step), so only activations and gradients travel.
 *
 * Buffers (zt_pipe_buffers, planned into the trainer's arenas): per
 * activation slot the received input (ACTS: it is kept until the backward),
 * one received output gradient and two outgoing input gradients (COMM), none
 * of them on a stage that does not receive or send them.
 *
 * Measured (zt_pipe_times): per step the time in the hooks (forward,
 * backward), the time spent waiting for transfers (idle: the bubble, plus
 * any transfer not hidden behind compute), and the schedule's wall time;
 * with a device backend each hook ends with a sync, so the times are the
 * device's. Steps 3 on are `timed` (DeepSpeed's throughput timer skips two).
 *
 * Memory: a pipe owns its bounds, the stage's copy of its units, the program,
 * the split communicators and the request array; the buffers are blocks of
 * the caller's arenas. Collective: zt_pipe_init and zt_pipe_free over the
 * world (the splits); zt_pipe_run_step, zt_pipe_recv_act / zt_pipe_send_act,
 * zt_pipe_bcast_last and zt_pipe_sum_f64 over the pipeline group in the
 * order the schedule gives.
 */
#ifndef ZT_PIPE_H
#define ZT_PIPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/arena.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/pipe/schedule.h"
#include "models/model.h"

/* What the trainer runs for the schedule. */
typedef struct {
    /* Micro-batch m's forward on this stage, its activations in slot `slot`. */
    zt_status (*forward)(void *ctx, int64_t micro, int slot);
    /* m's backward from slot `slot`: the gradient of the stage's output is
     * zt_pipe_grad_in's (the loss's on the last stage); the gradient of its
     * input goes to grad_out (NULL on the first stage). */
    zt_status (*backward)(void *ctx, int64_t micro, int slot, float *grad_out);
    /* The stage's output of slot `slot` (what goes to the next stage). */
    void *(*output)(void *ctx, int slot);
    void *ctx;
} zt_pipe_hooks;

typedef struct {
    double fwd_s, bwd_s; /* in the hooks */
    double idle_s;       /* waiting for transfers */
    double step_s;       /* the program, first operation to the last wait */
    int64_t steps;
} zt_pipe_times;

typedef struct {
    int stages, stage;          /* P, this rank's stage */
    int dp_size, dp_rank;       /* D, this rank's place in its stage's data-parallel group */
    int *bounds;                /* (stages + 1) first unit of each stage, then n_units */
    const zt_model *model;      /* the whole model (borrowed) */
    zt_model stage_model;       /* this stage's units (copies, global index kept) */
    char partition[128];        /* the method, as given */
    zt_pipe_schedule_kind schedule;
    int64_t micro_batches;      /* M: gradient accumulation steps */
    zt_pipe_program program;
    zt_comm *dp;                /* the data-parallel group (the world's comm when P = 1) */
    zt_comm dp_own, line;       /* P > 1: the split data-parallel and pipeline groups */
    const zt_backend *be;
    /* Transfers: per sample, the stage's input and output elements. */
    int64_t micro, in_numel, out_numel;
    zt_dtype act_dt;
    void **act_in;              /* (slots) (micro, in_numel) act_dt, or NULL (first stage) */
    float *grad_in;             /* (micro, out_numel) fp32, or NULL (last stage) */
    float *grad_out[2];         /* (micro, in_numel) fp32, or NULL (first stage) */
    zt_comm_req *reqs;          /* one per post of the program */
    zt_pipe_times all, timed;
    int in_flight_max;          /* most micro-batches between forward and backward, measured */
} zt_pipe;

/* Partitions m (cfg->pipeline), splits `world` into the groups and builds this
 * stage's program for cfg's gradient_accumulation_steps. Collective over
 * world. */
zt_status zt_pipe_init(zt_pipe *p, const zt_model *m, const zt_config *cfg, zt_comm *world,
                       const zt_backend *be);
void zt_pipe_free(zt_pipe *p);

/* The transfer buffers for micro-batches of `micro` samples with activations
 * in act_dt: planned into mem (reserved false) or carved from it. */
zt_status zt_pipe_buffers(zt_pipe *p, zt_memory *mem, bool reserved, int64_t micro,
                          zt_dtype act_dt);

/* Activation slots: the most micro-batches the program keeps in flight. */
static inline int zt_pipe_slots(const zt_pipe *p) { return p->program.slots; }
/* Slot k's received input, or NULL on the first stage. */
static inline void *zt_pipe_act_in(const zt_pipe *p, int k) { return p->act_in ? p->act_in[k] : NULL; }
/* The received gradient of the stage's output, or NULL on the last stage
 * (which computes it from the loss). */
static inline float *zt_pipe_grad_in(const zt_pipe *p) { return p->grad_in; }
/* Whether this stage computes the loss (the last stage). */
static inline bool zt_pipe_has_loss(const zt_pipe *p) { return p->stage == p->stages - 1; }
/* Whether zt_pipe_init made p (a plan for --estimate-memory has none). */
static inline bool zt_pipe_active(const zt_pipe *p) { return p->program.n_ops > 0; }
/* This stage's first unit in the whole model. */
static inline int zt_pipe_first_unit(const zt_pipe *p) { return p->bounds[p->stage]; }

/* One optimizer step's program. */
zt_status zt_pipe_run_step(zt_pipe *p, const zt_pipe_hooks *h);

/* Forward-only passes (evaluation, sampling), one micro-batch of n samples
 * at a time: receive slot 0's input (first stage: nothing), and send the
 * stage's output (last stage: nothing); blocking. */
zt_status zt_pipe_recv_act(zt_pipe *p, int64_t n);
zt_status zt_pipe_send_act(zt_pipe *p, const void *out, int64_t n);
/* The last stage's `bytes` at buf reach every stage of the pipeline group. */
zt_status zt_pipe_bcast_last(zt_pipe *p, void *buf, int bytes);
/* Sums n doubles over the pipeline group (host MPI under the group's watchdog:
 * not counted). */
zt_status zt_pipe_sum_f64(const zt_pipe *p, double *v, int n);

/* The stage holding whole-model unit u, and the world rank of (stage, dp). */
int zt_pipe_unit_stage(const zt_pipe *p, int u);
static inline int zt_pipe_world_rank(const zt_pipe *p, int stage, int dp_rank)
{
    return stage * p->dp_size + dp_rank;
}

/* DeepSpeed's partition printout (rank 0 prints it): "stage=S layers=K" with
 * the stage's parameter count, one "    IDX: NAME" line per unit, "  loss:". */
void zt_pipe_print(const zt_pipe *p, FILE *f);

/* Bytes per optimizer step this rank sends and receives point to point, by
 * its program and the transfer sizes: what the comm counters must show. */
void zt_pipe_traffic(const zt_pipe *p, uint64_t *sent, uint64_t *received);

#endif
