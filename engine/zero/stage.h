/*
 * stage: the ZeRO stage policy, the one place that says what each stage keeps
 * and does. The trainer asks it instead of testing stage numbers.
 *
 *   stage 0  params, grads, master + optimizer state: full on every rank.
 *            Gradients all-reduced in buckets at the accumulation boundary.
 *   stage 1  optimizer sharded: master + moments only for the rank's
 *            partition. Boundary: reduce-scatter the full gradients into the
 *            partition, step it, all-gather the parameters.
 *   stage 2  + gradients sharded: only the rank's reduced partition persists;
 *            every micro-step reduce-scatters each unit's fresh gradient into
 *            it as backward produces it. Step, all-gather the parameters.
 *   stage 3  + parameters sharded: only the rank's shard persists (plus
 *            persistent small units); a unit is gathered before its forward
 *            and again before its backward (engine/zero/gather.h) and
 *            released after; after the step the persistent units re-gather.
 *
 * A policy is a table entry (nccl-tests' per-collective struct is the model):
 * named properties, hooks that run on a stage context (zt_stage_ctx, not the
 * trainer), and the stage's statement of its memory per class and its
 * communication per optimizer step (zt_stage_memory, zt_stage_traffic), which
 * --estimate-memory prints and the report carries next to the measured
 * counters.
 *
 * Memory: a stage context owns its reducers and gather window (host
 * bookkeeping; their device buffers are the caller's arena blocks, handed in
 * through the context). Collective: every hook except the formulas; all
 * ranks call them in the same order.
 */
#ifndef ZT_STAGE_H
#define ZT_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/arena.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/zero/gather.h"
#include "engine/zero/layout.h"
#include "engine/zero/reduce.h"

typedef struct zt_stage_policy zt_stage_policy;

/* What the hooks work on: handed in by the trainer at init, owned by it,
 * except the machinery at the bottom, which the hooks own. */
typedef struct {
    const zt_stage_policy *policy;
    const zt_config *cfg;
    const zt_backend *be;
    const zt_layout *layout;
    zt_comm *world;           /* every rank */
    zt_comm *part;            /* the group the layout partitions over (the world or a MiCS shard group) */
    zt_comm *replica;         /* MiCS: the ranks holding the same slices, else NULL */
    zt_comm *hpz;             /* hpZ group, else NULL */
    zt_dtype param_dt;        /* parameters (the compute dtype) */
    zt_dtype grad_dt;         /* full gradients (GRADS) when not grads_sharded */
    void *params;             /* full flat parameters (padded_numel) unless params_sharded */
    void *grads;              /* full flat gradients (padded_numel) unless grads_sharded */
    void *ag_buf;             /* all-gather bucket when allgather_after_step */
    zt_zero_rs_target rs_target; /* where reduced slices go (optimizer_sharded) */
    void *rs_send[2], *rs_recv[2]; /* reduce buckets (COMM) */
    zt_arena *pool;           /* params_sharded: COMM arena for gathered units */
    void *const *unit_store;  /* params_sharded, per unit: own shard or persistent copy */
    bool shard_host;          /* offload_param: non-persistent shards on the host */
    zt_zero_shard_source shard_source; /* offload_param to nvme: the swapped shards */
    void *const *secondary;   /* hpZ secondary partitions, per unit, or NULL */

    zt_zero_reducer reducer;  /* stage 0 */
    zt_zero_rs rs;            /* stages 1-3 */
    zt_zero_gather gather;    /* stage 3 */
} zt_stage_ctx;

/* The run's shape in the terms of the stage formulas. */
typedef struct {
    int64_t padded;           /* Psi_p: padded parameters */
    int64_t persistent;       /* padded elements of persistent units (params_sharded) */
    int partition;            /* N: ranks the layout partitions over */
    int64_t hpz;              /* hpZ group size h (<= 1: off) */
    int64_t mics;             /* MiCS shard size m (0: off) */
    int world;                /* all ranks */
    int64_t gas;              /* micro-steps per optimizer step */
    size_t param_bytes;       /* bytes of a parameter (compute dtype) */
    size_t grad_bytes;        /* bytes of a full-gradient element (GRADS dtype) */
    size_t comm_bytes;        /* bytes of a gradient element as reduced (comm dtype) */
    /* ZeRO++ (engine/zero/quant.h), bytes per pass over every non-persistent
     * unit: one quantized gather over the partition and over the hpZ group
     * (0: unquantized); one reducing backward on qgZ's intra- and inter-node
     * groups (both 0: the plain reduce-scatter), whose intra group has
     * qgz_local ranks. */
    int64_t qwz_bytes, qwz_group_bytes;
    int64_t qgz_intra_bytes, qgz_inter_bytes;
    int qgz_local;
    bool reduce_scatter;      /* reduce_scatter (false: all-reduce, then slice) */
    bool allgather_partitions; /* allgather_partitions (false: a broadcast per owner) */
    bool reuse;               /* stage3_max_reuse_distance > 0: retained units skip gathers */
    int64_t optim_floats;     /* optimizer state floats per parameter (Adam 2) */
    bool master;              /* an fp32 master copy is kept */
    bool offload_optimizer;   /* master, moments, grad partition on the host */
    bool offload_param;       /* non-persistent shards on the host */
    bool optimizer_swapped;   /* offload_optimizer to nvme: master, moments, grad partition in files */
    int64_t param_swapped;    /* offload_param to nvme: shard elements in files, not the host */
} zt_stage_shape;

/* Model-state bytes per rank (PARAMS, GRADS, MASTER, OPTIM) at each location;
 * the other classes are 0. */
typedef struct {
    size_t bytes[ZT_MEM_NLOC][ZT_MEM_NCLASS];
} zt_stage_memory;

/* Communication groups the traffic is counted on. */
typedef enum {
    ZT_STAGE_GROUP_WORLD = 0,
    ZT_STAGE_GROUP_HPZ,
    ZT_STAGE_GROUP_MICS_SHARD,
    ZT_STAGE_GROUP_MICS_REPLICA,
    ZT_STAGE_GROUP_QGZ_INTRA,
    ZT_STAGE_GROUP_QGZ_INTER,
    ZT_STAGE_GROUP_N
} zt_stage_group;

/* Elements per optimizer step by communicator and kind, counted as the comm
 * counters count (an all-reduce its buffer once, a reduce-scatter its input,
 * an all-gather its output, an all-to-all its input), and the bytes they
 * take: elements times the dtype's size, except for ZeRO++'s quantized
 * collectives, whose bytes are their chunks' (elements there are the
 * parameters or gradients they stand for). exact: the counters must equal
 * the bytes; otherwise (stage 3 with a reuse distance) the all-gathers are
 * at most these. */
typedef struct {
    int64_t elements[ZT_STAGE_GROUP_N][ZT_COMM_NKINDS];
    int64_t bytes[ZT_STAGE_GROUP_N][ZT_COMM_NKINDS];
    bool exact;
} zt_stage_traffic;

struct zt_stage_policy {
    int stage;
    const char *name;
    const char *summary;          /* one line: what it shards */
    bool optimizer_sharded;       /* master + moments: the rank's partition only */
    bool grads_sharded;           /* only the rank's reduced gradient partition persists */
    bool params_sharded;          /* only the rank's parameter shard persists; units gathered */
    bool allgather_after_step;    /* the full parameters are all-gathered after the step */
    bool reduce_every_micro_step; /* gradients reduced as each micro-step's backward runs */
    bool scaler_hysteresis;       /* fp16: DeepSpeed's ZeRO optimizer (stages 1-3) applies
                                   * the loss scaler's hysteresis; its stage-0 optimizer not */

    zt_status (*init)(zt_stage_ctx *c);
    void (*free)(zt_stage_ctx *c);
    /* Unit u's parameters (padded_numel, param_dt) for compute in direction
     * dir; release says compute is done with them (last_use: they change
     * before the unit is used again). flush drops every gather not in use
     * after a forward-only pass. */
    zt_status (*fetch)(zt_stage_ctx *c, int u, zt_gather_dir dir, void **params);
    zt_status (*release)(zt_stage_ctx *c, int u, zt_gather_dir dir, bool last_use);
    zt_status (*flush)(zt_stage_ctx *c);
    /* A reducing backward: begin (accumulate: add into the partition), one
     * call per unit in reverse order once its gradient is final (g: the unit's
     * fresh fp32 gradient, padded_numel, when grads_sharded; the full
     * gradients hold it otherwise), finish waits and delivers. */
    void (*reduce_begin)(zt_stage_ctx *c, bool accumulate);
    /* Just before unit u's backward in a reducing backward: where to write
     * its fp32 gradient instead of the trainer's own buffer, so reduce_unit
     * sends it without a copy (zt_zero_rs_unit_buffer); *g NULL: no such
     * place. */
    zt_status (*unit_grad_buffer)(zt_stage_ctx *c, int u, float **g);
    zt_status (*reduce_unit)(zt_stage_ctx *c, int u, const float *g);
    zt_status (*reduce_finish)(zt_stage_ctx *c);
    /* After the rank's slices were stepped (or written from a checkpoint):
     * makes every rank's parameters current. */
    zt_status (*after_step)(zt_stage_ctx *c);

    void (*memory)(const zt_stage_policy *self, const zt_stage_shape *s, zt_stage_memory *out);
    void (*traffic)(const zt_stage_shape *s, zt_stage_traffic *out);
};

/* The policy of ZeRO stage `stage` (0-3; the config checks the range). */
const zt_stage_policy *zt_stage_policy_get(int stage);

/* Elements the optimizer steps: the partition when optimizer_sharded, else
 * everything. */
int64_t zt_stage_optim_numel(const zt_stage_policy *p, const zt_layout *l);

/* Where the stepped slice of unit u starts in the unit (0, or rank * shard). */
int64_t zt_stage_optim_lo(const zt_stage_policy *p, const zt_layout *l, int u);

#endif
