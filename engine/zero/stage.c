/*
 * stage: the four stage policies (engine/zero/stage.h): their hooks over the
 * reducers, the all-gather and the gather window, and their memory and
 * traffic formulas (the ZeRO paper's, in this layout's padded elements).
 */
#include "engine/zero/stage.h"

#include <string.h>

#include "engine/zero/allgather.h"

/* ---- Hooks shared by several stages. ---- */

static zt_status stage_init_reducer(zt_stage_ctx *c)
{
    return zt_zero_reducer_init(&c->reducer, c->cfg, c->be, c->world, c->layout, c->grads,
                                c->grad_dt);
}

/* unit_grad_dt, persist: what reduce_unit hands the reducer (reduce.h). */
static zt_status stage_init_rs_with(zt_stage_ctx *c, zt_dtype unit_grad_dt, bool persist)
{
    c->rs_target.unit_grad_dt = unit_grad_dt;
    c->rs_target.unit_grads_persist = persist;
    return zt_zero_rs_init(&c->rs, c->cfg, c->be, c->part, c->replica, c->layout, &c->rs_target,
                           c->rs_send, c->rs_recv);
}

/* Stages 2-3 hand the reducer each unit's fresh fp32 gradient, reused after. */
static zt_status stage_init_rs(zt_stage_ctx *c) { return stage_init_rs_with(c, ZT_F32, false); }

static void stage_free(zt_stage_ctx *c)
{
    zt_zero_reducer_free(&c->reducer);
    zt_zero_rs_free(&c->rs);
    zt_zero_gather_free(&c->gather);
}

/* Unit u's slice of the full flat parameters. */
static zt_status stage_fetch_full(zt_stage_ctx *c, int u, zt_gather_dir dir, void **params)
{
    (void)dir;
    *params = zt_zero_at(c->params, c->layout->units[u].offset, c->param_dt);
    return ZT_OK;
}

static zt_status stage_release_none(zt_stage_ctx *c, int u, zt_gather_dir dir, bool last_use)
{
    (void)c;
    (void)u;
    (void)dir;
    (void)last_use;
    return ZT_OK;
}

static zt_status stage_nothing(zt_stage_ctx *c)
{
    (void)c;
    return ZT_OK;
}

static void stage_rs_begin(zt_stage_ctx *c, bool accumulate) { zt_zero_rs_begin(&c->rs, accumulate); }

static zt_status stage_rs_finish(zt_stage_ctx *c) { return zt_zero_rs_finish(&c->rs); }

static zt_status stage_grad_buffer_none(zt_stage_ctx *c, int u, float **g)
{
    (void)c;
    (void)u;
    *g = NULL;
    return ZT_OK;
}

/* Stages 2-3: a large unit's fresh gradient is written into its bucket. */
static zt_status stage_rs_grad_buffer(zt_stage_ctx *c, int u, float **g)
{
    void *buf;
    ZT_TRY(zt_zero_rs_unit_buffer(&c->rs, u, &buf));
    *g = buf;
    return ZT_OK;
}

/* Stages 2-3: the unit's fresh gradient goes straight into the buckets. */
static zt_status stage_rs_fresh(zt_stage_ctx *c, int u, const float *g)
{
    return zt_zero_rs_unit(&c->rs, u, g, ZT_F32);
}

static zt_status stage_allgather(zt_stage_ctx *c)
{
    return zt_zero_allgather_params(c->cfg, c->be, c->part, c->layout, c->params, c->ag_buf,
                                    c->param_dt);
}

/* ---- Stage 0. ---- */

static void stage0_reduce_begin(zt_stage_ctx *c, bool accumulate)
{
    (void)accumulate;
    zt_zero_reducer_begin(&c->reducer);
}

static zt_status stage0_reduce_unit(zt_stage_ctx *c, int u, const float *g)
{
    (void)g;
    return zt_zero_reducer_unit_done(&c->reducer, u);
}

static zt_status stage0_reduce_finish(zt_stage_ctx *c) { return zt_zero_reducer_finish(&c->reducer); }

/* ---- Stage 1: the full gradients, accumulated over the micro-steps, are
 * reduce-scattered at the boundary. ---- */

/* Stage 1 hands the reducer its accumulated gradients, untouched until finish. */
static zt_status stage1_init(zt_stage_ctx *c) { return stage_init_rs_with(c, c->grad_dt, true); }

static zt_status stage1_reduce_unit(zt_stage_ctx *c, int u, const float *g)
{
    (void)g;
    return zt_zero_rs_unit(&c->rs, u, zt_zero_at(c->grads, c->layout->units[u].offset, c->grad_dt),
                           c->grad_dt);
}

/* ---- Stage 3. ---- */

static zt_status stage3_init(zt_stage_ctx *c)
{
    ZT_TRY(stage_init_rs(c));
    ZT_TRY(zt_zero_gather_init(&c->gather, c->cfg, c->be, c->part, c->hpz, c->layout, c->pool,
                               c->param_dt, c->unit_store, c->shard_host, c->secondary));
    c->gather.source = c->shard_source;
    return ZT_OK;
}

static zt_status stage3_fetch(zt_stage_ctx *c, int u, zt_gather_dir dir, void **params)
{
    return zt_zero_gather_fetch(&c->gather, u, dir, params);
}

static zt_status stage3_release(zt_stage_ctx *c, int u, zt_gather_dir dir, bool last_use)
{
    return zt_zero_gather_release(&c->gather, u, dir, last_use);
}

static zt_status stage3_flush(zt_stage_ctx *c) { return zt_zero_gather_flush(&c->gather); }

static zt_status stage3_after_step(zt_stage_ctx *c) { return zt_zero_gather_end_step(&c->gather); }

/* ---- Memory (bytes per rank). ---- */

/* One formula for every stage: what it keeps follows from its properties. */
static void stage_memory(const zt_stage_policy *p, const zt_stage_shape *s, zt_stage_memory *out)
{
    memset(out, 0, sizeof *out);
    int64_t P = s->padded, N = s->partition, pers = s->persistent, q = P - pers;
    size_t(*b)[ZT_MEM_NCLASS] = out->bytes;
    zt_mem_loc opt_loc = s->offload_optimizer ? ZT_MEM_HOST : ZT_MEM_DEVICE;
    int64_t span = p->optimizer_sharded ? P / N : P;
    if (p->params_sharded) {
        b[ZT_MEM_DEVICE][ZT_MEM_PARAMS] = s->param_bytes * (size_t)pers;
        b[s->offload_param ? ZT_MEM_HOST : ZT_MEM_DEVICE][ZT_MEM_PARAMS] +=
            s->param_bytes * (size_t)(q / N - s->param_swapped);
        if (s->hpz > 1)
            b[ZT_MEM_DEVICE][ZT_MEM_PARAMS] += s->param_bytes * (size_t)(q / s->hpz);
    } else {
        b[ZT_MEM_DEVICE][ZT_MEM_PARAMS] = s->param_bytes * (size_t)P;
    }
    /* Offloaded, the grads_sharded partition lives on the host in fp32; stage
     * 1 still accumulates full gradients on the device first. */
    if (!p->grads_sharded)
        b[ZT_MEM_DEVICE][ZT_MEM_GRADS] = s->grad_bytes * (size_t)P;
    else if (!s->offload_optimizer)
        b[ZT_MEM_DEVICE][ZT_MEM_GRADS] = s->grad_bytes * (size_t)(P / N);
    /* Swapped with the optimizer (nvme), the fp32 partition is in a file too:
     * only buffers (SWAP) are memory. */
    if (s->optimizer_swapped)
        return;
    if (s->offload_optimizer)
        b[ZT_MEM_HOST][ZT_MEM_GRADS] = sizeof(float) * (size_t)(P / N);
    if (s->master)
        b[opt_loc][ZT_MEM_MASTER] = sizeof(float) * (size_t)span;
    b[opt_loc][ZT_MEM_OPTIM] = sizeof(float) * (size_t)(s->optim_floats * span);
}

/* ---- Traffic (elements per optimizer step). ---- */

/* The kinds the reduce and all-gather of the partitioned stages use. */
static zt_comm_kind stage_rs_kind(const zt_stage_shape *s)
{
    return s->reduce_scatter ? ZT_COMM_REDUCE_SCATTER : ZT_COMM_ALL_REDUCE;
}

static zt_comm_kind stage_ag_kind(const zt_stage_shape *s)
{
    return s->allgather_partitions ? ZT_COMM_ALL_GATHER : ZT_COMM_BROADCAST;
}

static bool stage_traffic_begin(const zt_stage_shape *s, zt_stage_traffic *out)
{
    memset(out, 0, sizeof *out);
    out->exact = true;
    return s->world > 1; /* a world of one rank sends nothing */
}

/* Bytes of the unquantized entries: reductions move the communication
 * dtype, gathers and broadcasts the parameters'. */
static void stage_traffic_bytes(const zt_stage_shape *s, zt_stage_traffic *out)
{
    for (int g = 0; g < ZT_STAGE_GROUP_N; g++)
        for (int k = 0; k < ZT_COMM_NKINDS; k++) {
            bool reduce = k == ZT_COMM_ALL_REDUCE || k == ZT_COMM_REDUCE_SCATTER;
            out->bytes[g][k] =
                out->elements[g][k] * (int64_t)(reduce ? s->comm_bytes : s->param_bytes);
        }
}

static void stage0_traffic(const zt_stage_shape *s, zt_stage_traffic *out)
{
    if (stage_traffic_begin(s, out))
        out->elements[ZT_STAGE_GROUP_WORLD][ZT_COMM_ALL_REDUCE] = s->padded;
    stage_traffic_bytes(s, out);
}

/* Stages 1-2: one reduce per step (stage 1) or per micro-step (stage 2), one
 * parameter all-gather per step. */
static void stage12_traffic(const zt_stage_shape *s, zt_stage_traffic *out, int64_t reduces)
{
    if (!stage_traffic_begin(s, out))
        return;
    out->elements[ZT_STAGE_GROUP_WORLD][stage_rs_kind(s)] = reduces * s->padded;
    out->elements[ZT_STAGE_GROUP_WORLD][stage_ag_kind(s)] = s->padded;
    stage_traffic_bytes(s, out);
}

static void stage1_traffic(const zt_stage_shape *s, zt_stage_traffic *out)
{
    stage12_traffic(s, out, 1);
}

static void stage2_traffic(const zt_stage_shape *s, zt_stage_traffic *out)
{
    stage12_traffic(s, out, s->gas);
}

/* Stage 3: per micro-step a reduce of everything, a forward and a backward
 * gather of every non-persistent unit (hpZ: the backward one inside the
 * group), and the persistent units once after the step. MiCS moves the
 * world's share to the shard group and all-reduces each reduced slice over
 * the replica group. ZeRO++: qwZ gathers move their int8 chunks (the
 * persistent units' gather stays unquantized); qgZ moves the reduction to
 * its two groups' all-to-alls. */
static void stage3_traffic(const zt_stage_shape *s, zt_stage_traffic *out)
{
    if (!stage_traffic_begin(s, out)) {
        stage_traffic_bytes(s, out);
        return;
    }
    int64_t P = s->padded, q = P - s->persistent, gas = s->gas;
    zt_stage_group part = s->mics > 0 ? ZT_STAGE_GROUP_MICS_SHARD : ZT_STAGE_GROUP_WORLD;
    bool qgz = s->qgz_inter_bytes > 0;
    if (qgz) {
        if (s->qgz_local > 1)
            out->elements[ZT_STAGE_GROUP_QGZ_INTRA][ZT_COMM_ALL_TO_ALL] = gas * P;
        out->elements[ZT_STAGE_GROUP_QGZ_INTER][ZT_COMM_ALL_TO_ALL] = gas * P / s->qgz_local;
    } else {
        out->elements[part][stage_rs_kind(s)] = gas * P;
    }
    if (s->mics > 0)
        out->elements[ZT_STAGE_GROUP_MICS_REPLICA][ZT_COMM_ALL_REDUCE] = gas * P / s->partition;
    int64_t passes = s->hpz > 1 ? 1 : 2; /* gathers of q over the partition per micro-step */
    out->elements[part][ZT_COMM_ALL_GATHER] = s->persistent + passes * gas * q;
    if (s->hpz > 1)
        out->elements[ZT_STAGE_GROUP_HPZ][ZT_COMM_ALL_GATHER] = gas * q;
    out->exact = !s->reuse;
    stage_traffic_bytes(s, out);
    if (s->qwz_bytes > 0)
        out->bytes[part][ZT_COMM_ALL_GATHER] =
            s->persistent * (int64_t)s->param_bytes + passes * gas * s->qwz_bytes;
    if (s->hpz > 1 && s->qwz_group_bytes > 0)
        out->bytes[ZT_STAGE_GROUP_HPZ][ZT_COMM_ALL_GATHER] = gas * s->qwz_group_bytes;
    if (qgz) {
        out->bytes[ZT_STAGE_GROUP_QGZ_INTRA][ZT_COMM_ALL_TO_ALL] = gas * s->qgz_intra_bytes;
        out->bytes[ZT_STAGE_GROUP_QGZ_INTER][ZT_COMM_ALL_TO_ALL] = gas * s->qgz_inter_bytes;
    }
}

/* ---- The table. ---- */

static const zt_stage_policy stage_policies[4] = {
    {
        .stage = 0,
        .name = "stage 0",
        .summary = "nothing sharded: gradients all-reduced at the boundary",
        .init = stage_init_reducer,
        .free = stage_free,
        .fetch = stage_fetch_full,
        .release = stage_release_none,
        .flush = stage_nothing,
        .reduce_begin = stage0_reduce_begin,
        .unit_grad_buffer = stage_grad_buffer_none,
        .reduce_unit = stage0_reduce_unit,
        .reduce_finish = stage0_reduce_finish,
        .after_step = stage_nothing,
        .memory = stage_memory,
        .traffic = stage0_traffic,
    },
    {
        .stage = 1,
        .name = "stage 1",
        .summary = "optimizer state sharded",
        .optimizer_sharded = true,
        .allgather_after_step = true,
        .scaler_hysteresis = true,
        .init = stage1_init,
        .free = stage_free,
        .fetch = stage_fetch_full,
        .release = stage_release_none,
        .flush = stage_nothing,
        .reduce_begin = stage_rs_begin,
        .unit_grad_buffer = stage_grad_buffer_none,
        .reduce_unit = stage1_reduce_unit,
        .reduce_finish = stage_rs_finish,
        .after_step = stage_allgather,
        .memory = stage_memory,
        .traffic = stage1_traffic,
    },
    {
        .stage = 2,
        .name = "stage 2",
        .summary = "optimizer state and gradients sharded",
        .optimizer_sharded = true,
        .grads_sharded = true,
        .allgather_after_step = true,
        .reduce_every_micro_step = true,
        .scaler_hysteresis = true,
        .init = stage_init_rs,
        .free = stage_free,
        .fetch = stage_fetch_full,
        .release = stage_release_none,
        .flush = stage_nothing,
        .reduce_begin = stage_rs_begin,
        .unit_grad_buffer = stage_rs_grad_buffer,
        .reduce_unit = stage_rs_fresh,
        .reduce_finish = stage_rs_finish,
        .after_step = stage_allgather,
        .memory = stage_memory,
        .traffic = stage2_traffic,
    },
    {
        .stage = 3,
        .name = "stage 3",
        .summary = "optimizer state, gradients and parameters sharded",
        .optimizer_sharded = true,
        .grads_sharded = true,
        .params_sharded = true,
        .reduce_every_micro_step = true,
        .scaler_hysteresis = true,
        .init = stage3_init,
        .free = stage_free,
        .fetch = stage3_fetch,
        .release = stage3_release,
        .flush = stage3_flush,
        .reduce_begin = stage_rs_begin,
        .unit_grad_buffer = stage_rs_grad_buffer,
        .reduce_unit = stage_rs_fresh,
        .reduce_finish = stage_rs_finish,
        .after_step = stage3_after_step,
        .memory = stage_memory,
        .traffic = stage3_traffic,
    },
};

const zt_stage_policy *zt_stage_policy_get(int stage) { return &stage_policies[stage]; }

int64_t zt_stage_optim_numel(const zt_stage_policy *p, const zt_layout *l)
{
    return p->optimizer_sharded ? l->partition_numel : l->padded_numel;
}

int64_t zt_stage_optim_lo(const zt_stage_policy *p, const zt_layout *l, int u)
{
    return p->optimizer_sharded ? (int64_t)l->rank * l->units[u].shard_numel : 0;
}
