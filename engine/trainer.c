#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>

#include "monitor.h"
#include "rng.h"

static double trainer_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host scalars (loss sums, norms) travel over MPI directly: they are not the
 * tensor traffic the comm counters account for. */
static zt_status trainer_sum_f64(MPI_Comm comm, double *v, int n)
{
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, comm);
    if (rc != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "a peer rank may have died; check the other ranks' output",
                       "all-reduce of %d scalars failed (MPI error %d)", n, rc);
    return ZT_OK;
}

static int64_t trainer_max_act_numel(const zt_model *m)
{
    int64_t w = m->in_numel;
    for (int u = 0; u < m->n_units; u++) {
        if (m->units[u].in_numel > w)
            w = m->units[u].in_numel;
        if (m->units[u].out_numel > w)
            w = m->units[u].out_numel;
    }
    return w;
}

static int64_t trainer_max_work_numel(const zt_model *m)
{
    int64_t w = 0;
    for (int u = 0; u < m->n_units; u++)
        if (m->units[u].work_numel > w)
            w = m->units[u].work_numel;
    return w;
}

/* Host logits a forward-only pass reads back: every row of a classification
 * batch, or the one position a language model samples from. */
static int64_t trainer_logits_host_numel(const zt_model *m, int64_t micro)
{
    return m->labels_per_token ? m->n_classes : micro * m->labels_numel * m->n_classes;
}

/* One buffer of the trainer: planned into `mem` on the first pass, carved out
 * of the reservation on the second, so plan and use cannot disagree. */
static zt_status trainer_buf(zt_memory *mem, bool reserved, zt_mem_loc loc, zt_mem_class cls,
                             size_t bytes, void *out)
{
    if (!reserved) {
        zt_memory_plan(mem, loc, cls, bytes);
        return ZT_OK;
    }
    return zt_arena_alloc(zt_memory_arena(mem, loc, cls), bytes, (void **)out);
}

static size_t trainer_floats(int64_t numel) { return (size_t)numel * sizeof(float); }

/* Elements the optimizer steps on: everything at stage 0, the partition above. */
static int64_t trainer_optim_span(const zt_trainer *t)
{
    return t->cfg->zero.stage == 0 ? t->layout.padded_numel : t->layout.partition_numel;
}

/* Every buffer the trainer holds, in one list (see trainer.h for what each
 * stage keeps). */
static zt_status trainer_buffers(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_config *cfg = t->cfg;
    const zt_model *m = t->model;
    const zt_layout *lay = &t->layout;
    int stage = cfg->zero.stage;
    int64_t mb = cfg->micro_batch_size;
    zt_mem_loc opt_loc = cfg->zero.offload_optimizer.device != ZT_OFFLOAD_NONE && stage > 0
                             ? ZT_MEM_HOST
                             : ZT_MEM_DEVICE;
    zt_mem_loc shard_loc = cfg->zero.offload_param.device != ZT_OFFLOAD_NONE && stage == 3
                               ? ZT_MEM_HOST
                               : ZT_MEM_DEVICE;

    if (stage < 3) {
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS,
                           trainer_floats(lay->padded_numel), &t->params));
    } else {
        for (int u = 0; u < lay->n_units; u++) {
            const zt_unit_layout *ul = &lay->units[u];
            ZT_TRY(trainer_buf(mem, reserved, ul->persistent ? ZT_MEM_DEVICE : shard_loc,
                               ZT_MEM_PARAMS,
                               trainer_floats(ul->persistent ? ul->padded_numel : ul->shard_numel),
                               &t->unit_store[u]));
        }
        int64_t h = cfg->zero.zero_hpz_partition_size;
        for (int u = 0; h > 1 && u < lay->n_units; u++)
            if (!lay->units[u].persistent)
                ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS,
                                   trainer_floats(lay->units[u].padded_numel / h),
                                   &t->secondary[u]));
    }
    ZT_TRY(trainer_buf(mem, reserved, stage < 2 ? ZT_MEM_DEVICE : opt_loc, ZT_MEM_GRADS,
                       trainer_floats(stage < 2 ? lay->padded_numel : lay->partition_numel),
                       &t->grads));
    int64_t state = zt_optim_state_numel(&cfg->optimizer, trainer_optim_span(t));
    if (state > 0)
        ZT_TRY(trainer_buf(mem, reserved, opt_loc, ZT_MEM_OPTIM, trainer_floats(state),
                           &t->optim_state));

    if (stage > 0) {
        int count;
        int64_t send_numel, recv_numel;
        zt_zero_rs_buffers(cfg, lay, &count, &send_numel, &recv_numel);
        for (int i = 0; i < count; i++) {
            ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                               trainer_floats(send_numel), &t->rs_send[i]));
            if (recv_numel > 0)
                ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                                   trainer_floats(recv_numel), &t->rs_recv[i]));
        }
    }
    if (stage == 1 || stage == 2)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                           trainer_floats(zt_zero_allgather_buffer_numel(cfg, lay)), &t->ag_buf));
    if (stage >= 2)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                           trainer_floats(lay->max_unit_numel), &t->unit_grad));
    /* The gather window allocates its own blocks from this part of COMM. */
    int64_t pool = zt_zero_gather_pool_numel(cfg, lay);
    if (pool > 0 && !reserved)
        zt_memory_plan(mem, ZT_MEM_DEVICE, ZT_MEM_COMM, trainer_floats(pool));

    /* The micro-batch: model inputs and labels (ACTS), their host staging (WORK). */
    size_t tok_bytes = (size_t)(mb * m->seq_len) * sizeof(int32_t);
    size_t lab_bytes = (size_t)(mb * m->labels_numel) * sizeof(int32_t);
    if (m->in_numel > 0) {
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                           trainer_floats(mb * m->in_numel), &t->x));
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                           trainer_floats(mb * m->in_numel), &t->x_host));
    }
    if (m->seq_len > 0) {
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, tok_bytes, &t->tokens));
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                           (size_t)mb * sizeof(int32_t), &t->lengths));
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, tok_bytes, &t->tokens_host));
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, (size_t)mb * sizeof(int32_t),
                           &t->lengths_host));
    }
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, (size_t)mb * sizeof(uint64_t),
                       &t->row_keys));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, lab_bytes, &t->labels));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, (size_t)mb * sizeof(uint64_t),
                       &t->row_keys_host));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, lab_bytes, &t->labels_host));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, (size_t)mb * sizeof(int64_t),
                       &t->index_host));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                       trainer_floats(trainer_logits_host_numel(m, mb)), &t->logits_host));
    for (int u = 0; u < m->n_units; u++) {
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                           trainer_floats(mb * m->units[u].out_numel), &t->acts[u]));
        if (m->units[u].saved_numel > 0)
            ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                               trainer_floats(mb * m->units[u].saved_numel), &t->saved[u]));
    }
    int64_t work = trainer_max_work_numel(m);
    if (work > 0)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, trainer_floats(mb * work),
                           &t->work));
    size_t dact = trainer_floats(mb * trainer_max_act_numel(m));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[0]));
    return trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[1]);
}

/* Per-unit pointer tables (host bookkeeping, outside the arenas). */
static zt_status trainer_tables(zt_trainer *t)
{
    size_t n = (size_t)t->model->n_units;
    t->acts = calloc(n, sizeof *t->acts);
    t->saved = calloc(n, sizeof *t->saved);
    t->unit_store = calloc(n, sizeof *t->unit_store);
    t->own_p = calloc(n, sizeof *t->own_p);
    t->own_g = calloc(n, sizeof *t->own_g);
    t->secondary = calloc(n, sizeof *t->secondary);
    t->segs = calloc(n, sizeof *t->segs);
    if (!t->acts || !t->saved || !t->unit_store || !t->own_p || !t->own_g || !t->secondary ||
        !t->segs)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate per-unit tables");
    return ZT_OK;
}

static void trainer_tables_free(zt_trainer *t)
{
    free(t->acts);
    free(t->saved);
    free(t->unit_store);
    free(t->own_p);
    free(t->own_g);
    free(t->secondary);
    free(t->segs);
    t->acts = t->saved = t->unit_store = t->own_p = t->own_g = t->secondary = NULL;
    t->segs = NULL;
}

zt_status zt_trainer_plan(const zt_config *cfg, const zt_model *m, int world_size,
                          zt_memory *mem)
{
    zt_trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.model = m;
    /* MiCS partitions over its shard groups, not the world. */
    int part = cfg->zero.stage == 3 && cfg->zero.mics_shard_size > 0
                   ? (int)cfg->zero.mics_shard_size
                   : world_size;
    zt_status st = zt_layout_init(&t.layout, m, &cfg->zero, part, 0);
    if (st == ZT_OK)
        st = trainer_tables(&t);
    if (st == ZT_OK)
        st = trainer_buffers(&t, mem, false);
    trainer_tables_free(&t);
    zt_layout_free(&t.layout);
    return st;
}

/* Every rank builds the same initial weights from the counter PRNG; at stage 3
 * each rank makes only its own slices (and the persistent units whole). */
static zt_status trainer_init_params(zt_trainer *t)
{
    const zt_backend *be = t->be;
    const zt_layout *lay = &t->layout;
    float *host = malloc(trainer_floats(lay->max_unit_numel));
    if (!host)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to initialise parameters",
                       (long long)lay->max_unit_numel);
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        bool whole = t->cfg->zero.stage < 3 || ul->persistent;
        int64_t lo = whole ? 0 : (int64_t)lay->rank * ul->shard_numel;
        int64_t hi = whole ? ul->padded_numel : lo + ul->shard_numel;
        int64_t real_hi = hi < ul->numel ? hi : ul->numel;
        memset(host, 0, trainer_floats(hi - lo));
        if (real_hi > lo)
            zt_unit_init_range(&t->model->units[u], t->seed, ul->global_index, lo, real_hi, host);
        float *dst = t->cfg->zero.stage < 3 ? t->params + ul->offset : t->unit_store[u];
        be->copy_h2d(be, dst, host, trainer_floats(hi - lo));
    }
    free(host);
    return ZT_OK;
}

/* Where each unit's own slices live, by stage (see trainer.h). */
static void trainer_views(zt_trainer *t)
{
    const zt_layout *lay = &t->layout;
    int stage = t->cfg->zero.stage;
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        int64_t own = ul->offset + (int64_t)lay->rank * ul->shard_numel;
        if (stage < 3)
            t->own_p[u] = t->params + own;
        else
            t->own_p[u] = t->unit_store[u] +
                          (ul->persistent ? (int64_t)lay->rank * ul->shard_numel : 0);
        t->own_g[u] = stage < 2 ? t->grads + own : t->grads + ul->part_offset;
        t->segs[u] = (zt_optim_seg){t->own_p[u], t->own_g[u], ul->part_offset, ul->shard_numel};
    }
}

/* A communicator over the ranks sharing `color`, owned by the trainer. */
static zt_status trainer_split(const zt_world *w, int color, MPI_Comm *group, zt_comm **out)
{
    if (MPI_Comm_split(w->comm, color, w->rank, group) != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "", "cannot split the world into groups");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate a group communicator");
    return zt_comm_mpi_init(*out, *group);
}

/* hpZ: groups of h consecutive ranks, each inside one node. MiCS: shard groups
 * of m consecutive ranks, replica groups of the ranks with the same index in
 * their shard group. */
static zt_status trainer_groups_init(zt_trainer *t)
{
    const zt_world *w = t->world;
    const zt_zero_config *z = &t->cfg->zero;
    t->zcomm = t->comm;
    int64_t m = z->mics_shard_size;
    if (z->stage == 3 && m > 0) {
        if (w->size % m != 0)
            return zt_fail(ZT_ERR_CONFIG, "use a shard size that divides the number of ranks",
                           "zero_optimization.mics_shard_size %lld does not divide the world "
                           "size %d",
                           (long long)m, w->size);
        MPI_Comm shard, replica;
        ZT_TRY(trainer_split(w, (int)(w->rank / m), &shard, &t->shard_comm));
        MPI_Comm_free(&shard);
        ZT_TRY(trainer_split(w, (int)(w->rank % m), &replica, &t->replica_comm));
        MPI_Comm_free(&replica);
        t->zcomm = t->shard_comm;
    }
    int64_t h = z->zero_hpz_partition_size;
    if (z->stage != 3 || h <= 1)
        return ZT_OK;
    if (w->size % h != 0)
        return zt_fail(ZT_ERR_CONFIG,
                       "set zero_hpz_partition_size to the ranks per node (or a divisor of it)",
                       "zero_optimization.zero_hpz_partition_size %lld does not divide the "
                       "world size %d",
                       (long long)h, w->size);
    MPI_Comm group;
    ZT_TRY(trainer_split(w, (int)(w->rank / h), &group, &t->hpz_comm));
    int node_lo = w->node, node_hi = w->node;
    MPI_Allreduce(MPI_IN_PLACE, &node_lo, 1, MPI_INT, MPI_MIN, group);
    MPI_Allreduce(MPI_IN_PLACE, &node_hi, 1, MPI_INT, MPI_MAX, group);
    MPI_Comm_free(&group);
    if (node_lo != node_hi)
        return zt_fail(ZT_ERR_CONFIG,
                       "hpZ keeps the backward gather inside a node: use a size that divides "
                       "the ranks per node (ZT_RANKS_PER_NODE simulates nodes)",
                       "zero_optimization.zero_hpz_partition_size %lld: ranks %lld-%lld span "
                       "nodes %d-%d",
                       (long long)h, (long long)(w->rank / h * h),
                       (long long)(w->rank / h * h + h - 1), node_lo, node_hi);
    return ZT_OK;
}

static void trainer_comm_free(zt_comm **c)
{
    if (*c) {
        zt_comm_free(*c);
        free(*c);
        *c = NULL;
    }
}

zt_status zt_trainer_init(zt_trainer *t, const zt_config *cfg, const zt_model *m,
                          zt_dataset *data, const zt_world *w, const zt_backend *be,
                          zt_comm *comm, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->model = m;
    t->world = w;
    t->be = be;
    t->comm = comm;
    t->data = data;
    t->seed = seed;
    if (data->x_numel != m->in_numel || data->tokens_numel != m->seq_len ||
        data->labels_numel != m->labels_numel || data->n_classes != m->n_classes ||
        data->vocab_size > m->vocab_size || (data->variable_length && m->labels_per_token))
        return zt_fail(ZT_ERR_INTERNAL, "",
                       "data (%lld inputs, %lld tokens, %lld labels, %lld classes, vocab %lld) "
                       "does not fit model %s",
                       (long long)data->x_numel, (long long)data->tokens_numel,
                       (long long)data->labels_numel, (long long)data->n_classes,
                       (long long)data->vocab_size, m->name);
    ZT_TRY(zt_sampler_init(&t->sampler, data->n_samples, cfg->train_batch_size,
                           cfg->micro_batch_size, w->size, w->rank, data->shuffle, seed));
    ZT_TRY(trainer_groups_init(t));
    ZT_TRY(zt_layout_init(&t->layout, m, &cfg->zero, t->zcomm->size, t->zcomm->rank));
    ZT_TRY(trainer_tables(t));
    zt_memory_init(&t->mem, be);
    ZT_TRY(trainer_buffers(t, &t->mem, false));
    ZT_TRY(zt_memory_reserve(&t->mem));
    ZT_TRY(trainer_buffers(t, &t->mem, true));
    trainer_views(t);

    ZT_TRY(trainer_init_params(t));
    int stage = cfg->zero.stage;
    be->memset_zero(be, t->grads,
                    trainer_floats(stage < 2 ? t->layout.padded_numel : t->layout.partition_numel));
    zt_optim_init(&t->optim, &cfg->optimizer, be, trainer_optim_span(t), t->optim_state);
    zt_sched_init(&t->sched, &cfg->scheduler, &cfg->optimizer);
    if (stage == 0)
        return zt_zero_reducer_init(&t->reducer, cfg, be, comm, &t->layout, t->grads);
    ZT_TRY(zt_zero_rs_init(&t->rs, cfg, be, t->zcomm, t->replica_comm, &t->layout, t->own_g,
                           t->rs_send, t->rs_recv));
    if (stage == 3) {
        zt_arena *pool = zt_memory_arena(&t->mem, ZT_MEM_DEVICE, ZT_MEM_COMM);
        ZT_TRY(zt_zero_gather_init(&t->gather, cfg, be, t->zcomm, t->hpz_comm, &t->layout, pool,
                                   t->unit_store, t->secondary));
    }
    return ZT_OK;
}

void zt_trainer_free(zt_trainer *t)
{
    zt_zero_reducer_free(&t->reducer);
    zt_zero_rs_free(&t->rs);
    zt_zero_gather_free(&t->gather);
    trainer_comm_free(&t->hpz_comm);
    trainer_comm_free(&t->shard_comm);
    trainer_comm_free(&t->replica_comm);
    zt_memory_free(&t->mem);
    zt_layout_free(&t->layout);
    trainer_tables_free(t);
    free(t->loss_history);
    free(t->evals);
    t->loss_history = NULL;
    t->evals = NULL;
}

int64_t zt_trainer_steps_per_epoch(const zt_trainer *t) { return t->sampler.steps_per_epoch; }

/* Reads samples index_host[0, n) of ds (< 0: a filler row, sample 0 with
 * every label ignored) with dropout keys row_keys_host into the device batch.
 * Variable-length samples are packed densely at the longest length of the
 * batch and padded with ds->pad_id. */
static void trainer_load(zt_trainer *t, const zt_dataset *ds, int64_t n, zt_batch *b)
{
    const zt_model *m = t->model;
    const zt_backend *be = t->be;
    int64_t T = m->seq_len, L = m->labels_numel, tb = 0;
    for (int64_t k = 0; k < n; k++) {
        zt_sample s = {.x = t->x ? t->x_host + k * m->in_numel : NULL,
                       .tokens = T > 0 ? t->tokens_host + k * T : NULL,
                       .labels = t->labels_host + k * L};
        int64_t idx = t->index_host[k];
        ds->get(ds, idx >= 0 ? idx : 0, &s);
        for (int64_t j = 0; idx < 0 && j < L; j++)
            s.labels[j] = ZT_IGNORE_INDEX;
        if (T > 0) {
            t->lengths_host[k] = (int32_t)(ds->variable_length ? s.length : T);
            if (t->lengths_host[k] > tb)
                tb = t->lengths_host[k];
        }
    }
    /* Row k moves from k * T down to k * tb <= k * T: ascending k never
     * overwrites a row not yet moved. */
    for (int64_t k = 0; T > 0 && ds->variable_length && k < n; k++) {
        int32_t *dst = t->tokens_host + k * tb;
        memmove(dst, t->tokens_host + k * T, (size_t)t->lengths_host[k] * sizeof(int32_t));
        for (int64_t i = t->lengths_host[k]; i < tb; i++)
            dst[i] = ds->pad_id;
    }
    if (t->x)
        be->copy_h2d(be, t->x, t->x_host, trainer_floats(n * m->in_numel));
    if (T > 0) {
        be->copy_h2d(be, t->tokens, t->tokens_host, (size_t)(n * tb) * sizeof(int32_t));
        be->copy_h2d(be, t->lengths, t->lengths_host, (size_t)n * sizeof(int32_t));
    }
    be->copy_h2d(be, t->labels, t->labels_host, (size_t)(n * L) * sizeof(int32_t));
    be->copy_h2d(be, t->row_keys, t->row_keys_host, (size_t)n * sizeof(uint64_t));
    *b = (zt_batch){.n = n,
                    .t = tb,
                    .tokens = T > 0 ? t->tokens : NULL,
                    .lengths = ds->variable_length ? t->lengths : NULL,
                    .row_keys = t->row_keys,
                    .seed = t->seed,
                    .step = t->global_steps,
                    .training = false};
}

/* Loss rows of one sample in batch b. */
static int64_t trainer_rows_per_sample(const zt_trainer *t, const zt_batch *b)
{
    return t->model->labels_per_token ? b->t : t->model->labels_numel;
}

/* The parameters unit u computes with: the full flat vector's slice, or at
 * stage 3 the gathered copy. */
static zt_status trainer_unit_params(zt_trainer *t, int u, zt_gather_dir dir, float **p)
{
    if (t->cfg->zero.stage < 3) {
        *p = t->params + t->layout.units[u].offset;
        return ZT_OK;
    }
    return zt_zero_gather_fetch(&t->gather, u, dir, p);
}

/* Runs every unit forward on the loaded batch b (dropout as b says). At
 * stage 3 each unit is gathered for it and released; last_use (a pass with no
 * backward: evaluation, sampling) keeps nothing for a reuse. */
static zt_status trainer_forward(zt_trainer *t, const zt_batch *b, bool last_use)
{
    const zt_model *model = t->model;
    const float *in = t->x;
    for (int u = 0; u < model->n_units; u++) {
        float *p;
        ZT_TRY(trainer_unit_params(t, u, ZT_GATHER_FWD, &p));
        model->units[u].ops->forward(&model->units[u], t->be, p, in, t->acts[u], t->saved[u],
                                     t->work, b);
        if (t->cfg->zero.stage == 3)
            ZT_TRY(zt_zero_gather_release(&t->gather, u, ZT_GATHER_FWD, last_use));
        in = t->acts[u];
    }
    return ZT_OK;
}

/* One micro-step: forward, loss, backward. Returns this rank's loss sum. */
static zt_status trainer_micro_step(zt_trainer *t, int64_t m, double *loss_sum, double *timers)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    const zt_layout *lay = &t->layout;
    int stage = t->cfg->zero.stage;
    int64_t mb = t->cfg->micro_batch_size, gas = t->cfg->gradient_accumulation_steps;
    bool boundary = m == gas - 1;
    int last = model->n_units - 1;
    zt_batch b;
    /* Dropout keys: positions in the training stream, the same at any world size. */
    for (int64_t k = 0; k < mb; k++) {
        t->index_host[k] = zt_sampler_index(&t->sampler, t->global_steps, m, k);
        t->row_keys_host[k] = (uint64_t)(t->global_steps * t->cfg->train_batch_size +
                                         zt_sampler_offset(&t->sampler, m, k));
    }
    trainer_load(t, t->data, mb, &b);
    b.training = true;
    double t0 = trainer_now();
    ZT_TRY(trainer_forward(t, &b, false));
    /* The mean over this micro-batch, divided by GAS as DeepSpeed scales the loss. */
    int64_t per_sample = trainer_rows_per_sample(t, &b), rows = mb * per_sample;
    float dscale = 1.0f / (float)(rows * gas);
    *loss_sum += be->xent_forward_backward(be, t->acts[last], t->labels, rows, model->n_classes,
                                           model->ignore_index, dscale, t->dact[0]) /
                 (double)per_sample;
    double t1 = trainer_now();
    timers[ZT_TIMER_FWD] += 1e3 * (t1 - t0);

    /* Stages 0-1 accumulate full gradients and reduce at the boundary; stages
     * 2-3 reduce every micro-step from a one-unit buffer into the partition. */
    bool reduce = stage >= 2 || boundary;
    if (reduce && stage == 0)
        zt_zero_reducer_begin(&t->reducer);
    else if (reduce)
        zt_zero_rs_begin(&t->rs, stage >= 2 && m > 0);
    int cur = 0;
    for (int u = last; u >= 0; u--) {
        const zt_unit_layout *ul = &lay->units[u];
        const float *x = u > 0 ? t->acts[u - 1] : t->x;
        float *dx = u > 0 ? t->dact[1 - cur] : NULL;
        float *p;
        ZT_TRY(trainer_unit_params(t, u, ZT_GATHER_BWD, &p));
        float *dp = stage < 2 ? t->grads + ul->offset : t->unit_grad;
        model->units[u].ops->backward(&model->units[u], be, p, x, t->acts[u], t->saved[u],
                                      t->dact[cur], dx, dp, t->work, stage < 2 && m > 0, &b);
        if (stage == 3)
            ZT_TRY(zt_zero_gather_release(&t->gather, u, ZT_GATHER_BWD, boundary));
        if (stage >= 2) /* the buffer's tail past this unit's parameters is padding */
            be->memset_zero(be, dp + ul->numel, trainer_floats(ul->padded_numel - ul->numel));
        if (reduce && stage == 0)
            ZT_TRY(zt_zero_reducer_unit_done(&t->reducer, u));
        else if (reduce)
            ZT_TRY(zt_zero_rs_unit(&t->rs, u, dp));
        cur = 1 - cur;
    }
    double t2 = trainer_now();
    timers[ZT_TIMER_BWD_INNER] += 1e3 * (t2 - t1);
    if (reduce && stage == 0)
        ZT_TRY(zt_zero_reducer_finish(&t->reducer));
    else if (reduce)
        ZT_TRY(zt_zero_rs_finish(&t->rs));
    double t3 = trainer_now();
    timers[ZT_TIMER_BWD_ALLREDUCE] += 1e3 * (t3 - t2);
    timers[ZT_TIMER_BWD] += 1e3 * (t3 - t1);
    return ZT_OK;
}

/* Sum of squares (float64) of this rank's slices (per-unit pointers), summed
 * over the partition group (MiCS replicas hold the same slices): DeepSpeed's
 * global norm, the same value on every rank. */
static zt_status trainer_slices_sumsq(zt_trainer *t, float *const *slices, double *sq)
{
    const zt_layout *lay = &t->layout;
    *sq = 0.0;
    for (int u = 0; u < lay->n_units; u++)
        *sq += t->be->sum_squares(t->be, slices[u], lay->units[u].shard_numel);
    return trainer_sum_f64(t->zcomm->mpi, sq, 1);
}

/* The optimizer step and what makes every rank's parameters current again. */
static zt_status trainer_apply(zt_trainer *t, double lr, double b1, double b2)
{
    const zt_config *cfg = t->cfg;
    int stage = cfg->zero.stage;
    if (stage == 0) {
        zt_optim_step(&t->optim, t->params, t->grads, lr, b1, b2);
        return ZT_OK;
    }
    zt_optim_step_segs(&t->optim, t->segs, t->layout.n_units, lr, b1, b2);
    if (stage < 3)
        return zt_zero_allgather_params(cfg, t->be, t->zcomm, &t->layout, t->params, t->ag_buf);
    return zt_zero_gather_end_step(&t->gather);
}

/* Rank 0 collects each unit from every rank's slices (host MPI, outside the
 * comm counters: a dump is not training traffic), so no stage needs the whole
 * model in one buffer. */
static zt_status trainer_dump_slices(zt_trainer *t, float *const *slices, const char *path)
{
    const zt_layout *lay = &t->layout;
    /* Every partition group gathers its copy; world rank 0 (root of the first
     * group) writes it. */
    bool root = t->zcomm->rank == 0, writer = t->world->rank == 0;
    zt_status st = ZT_OK;
    FILE *f = NULL;
    if (writer && !(f = fopen(path, "wb")))
        st = zt_fail(ZT_ERR_IO, "check that the directory exists and is writable",
                     "cannot write dump %s: %s", path, strerror(errno));
    float *mine = malloc(trainer_floats(lay->max_unit_numel / lay->world_size));
    float *unit = root ? malloc(trainer_floats(lay->max_unit_numel)) : NULL;
    if (!mine || (root && !unit))
        st = zt_fail(ZT_ERR_OOM, "", "cannot stage one unit for the dump");
    st = zt_world_agree(t->world, st, NULL);
    for (int u = 0; u < lay->n_units && st == ZT_OK; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        t->be->copy_d2h(t->be, mine, slices[u], trainer_floats(ul->shard_numel));
        if (MPI_Gather(mine, (int)ul->shard_numel, MPI_FLOAT, unit, (int)ul->shard_numel,
                       MPI_FLOAT, 0, t->zcomm->mpi) != MPI_SUCCESS)
            st = zt_fail(ZT_ERR_COMM, "a peer rank may have died", "gathering the dump failed");
        else if (writer && fwrite(unit, sizeof(float), (size_t)ul->numel, f) != (size_t)ul->numel)
            st = zt_fail(ZT_ERR_IO, "check free disk space", "writing dump %s failed", path);
        st = zt_world_agree(t->world, st, NULL);
    }
    if (f && fclose(f) != 0 && st == ZT_OK)
        st = zt_fail(ZT_ERR_IO, "check free disk space", "closing %s failed: %s", path,
                     strerror(errno));
    free(mine);
    free(unit);
    return zt_world_agree(t->world, st, NULL);
}

static zt_status trainer_step(zt_trainer *t, zt_monitor *mon)
{
    const zt_config *cfg = t->cfg;
    double timers[ZT_TIMER_N] = {0};
    double t0 = trainer_now();
    double loss_sum = 0.0;
    for (int64_t m = 0; m < cfg->gradient_accumulation_steps; m++)
        ZT_TRY(trainer_micro_step(t, m, &loss_sum, timers));
    ZT_TRY(trainer_sum_f64(t->world->comm, &loss_sum, 1));
    double loss = loss_sum / (double)cfg->train_batch_size;

    double ts = trainer_now();
    double norm = 0.0;
    ZT_TRY(trainer_slices_sumsq(t, t->own_g, &norm));
    norm = sqrt(norm);
    t->last_grad_norm = isfinite(norm) ? norm : -1.0;
    if (t->grad_dump_path && t->global_steps == 0)
        ZT_TRY(trainer_dump_slices(t, t->own_g, t->grad_dump_path));
    if (cfg->gradient_clipping > 0.0 && isfinite(norm)) {
        double coef = cfg->gradient_clipping / (norm + 1e-6);
        /* Stage 0 steps on the whole vector; above, each rank on its slices. */
        if (coef < 1.0 && cfg->zero.stage == 0)
            t->be->scale(t->be, t->grads, (float)coef, t->layout.padded_numel);
        else if (coef < 1.0)
            for (int u = 0; u < t->layout.n_units; u++)
                t->be->scale(t->be, t->own_g[u], (float)coef, t->layout.units[u].shard_numel);
    }
    double lr = zt_sched_lr(&t->sched);
    double b1 = -1.0, b2 = -1.0;
    zt_sched_momentum(&t->sched, &b1, &b2);
    ZT_TRY(trainer_apply(t, lr, b1, b2));
    zt_sched_step(&t->sched);
    t->be->sync(t->be);
    double t1 = trainer_now();
    timers[ZT_TIMER_STEP] += 1e3 * (t1 - ts);

    t->last_lr = lr;
    t->global_steps++;
    t->global_samples += cfg->train_batch_size;
    if (t->global_steps > t->loss_cap) {
        t->loss_cap = t->loss_cap ? 2 * t->loss_cap : 256;
        double *h = realloc(t->loss_history, (size_t)t->loss_cap * sizeof *h);
        if (!h)
            return zt_fail(ZT_ERR_OOM, "", "cannot grow the loss history");
        t->loss_history = h;
    }
    t->loss_history[t->global_steps - 1] = loss;

    /* DeepSpeed's throughput timer leaves the first two steps out (warm-up). */
    double dt = t1 - t0;
    t->train_seconds += dt;
    if (t->global_steps > 2) {
        t->timed_seconds += dt;
        t->timed_steps++;
    }
    zt_step_info info = {
        .global_steps = t->global_steps,
        .skipped_steps = t->skipped_steps,
        .micro_steps = t->global_steps * cfg->gradient_accumulation_steps,
        .epoch = (t->global_steps - 1) / t->sampler.steps_per_epoch,
        .global_samples = t->global_samples,
        .loss = loss,
        .lr = lr,
        .grad_norm = t->last_grad_norm,
        .beta1 = b1 >= 0 ? b1 : (cfg->optimizer.type == ZT_OPTIM_SGD ? cfg->optimizer.momentum
                                                                     : cfg->optimizer.beta1),
        .beta2 = b2 >= 0 ? b2 : cfg->optimizer.beta2,
        .is_sgd = cfg->optimizer.type == ZT_OPTIM_SGD,
        .curr_samples_per_sec = t->global_steps > 2 ? (double)cfg->train_batch_size / dt : 0.0,
        .running_samples_per_sec =
            t->timed_steps > 0
                ? (double)cfg->train_batch_size * (double)t->timed_steps / t->timed_seconds
                : 0.0,
        .mem_allocated = t->mem.total_current[ZT_MEM_DEVICE],
        .max_mem_allocated = t->mem.total_peak[ZT_MEM_DEVICE],
    };
    memcpy(info.timers_ms, timers, sizeof timers);
    zt_monitor_step(mon, &info);
    return ZT_OK;
}

static zt_status trainer_eval_point(zt_trainer *t, zt_monitor *mon)
{
    zt_eval_point e = {.step = t->global_steps};
    double t0 = trainer_now();
    ZT_TRY(zt_trainer_eval(t, t->eval_data, t->eval_iters, &e.loss, &e.accuracy));
    e.seconds = trainer_now() - t0;
    if (t->n_evals == t->eval_cap) {
        t->eval_cap = t->eval_cap ? 2 * t->eval_cap : 16;
        zt_eval_point *h = realloc(t->evals, (size_t)t->eval_cap * sizeof *h);
        if (!h)
            return zt_fail(ZT_ERR_OOM, "", "cannot grow the evaluation history");
        t->evals = h;
    }
    t->evals[t->n_evals++] = e;
    zt_monitor_eval(mon, &e);
    return ZT_OK;
}

zt_status zt_trainer_train(zt_trainer *t, int64_t until_step)
{
    zt_monitor mon;
    ZT_TRY(zt_monitor_init(&mon, t->cfg, t->world->rank));
    zt_status st = ZT_OK;
    while (st == ZT_OK && t->global_steps < until_step) {
        st = trainer_step(t, &mon);
        bool due = t->eval_data && t->eval_interval > 0 &&
                   (t->global_steps % t->eval_interval == 0 || t->global_steps == until_step);
        if (st == ZT_OK && due)
            st = trainer_eval_point(t, &mon);
    }
    zt_monitor_free(&mon);
    return st;
}

double zt_trainer_param_norm(zt_trainer *t)
{
    double sq = 0.0;
    return trainer_slices_sumsq(t, t->own_p, &sq) == ZT_OK ? sqrt(sq) : NAN;
}

zt_status zt_trainer_dump_params(zt_trainer *t, const char *path)
{
    return trainer_dump_slices(t, t->own_p, path);
}

zt_status zt_trainer_eval(zt_trainer *t, const zt_dataset *ds, int64_t iters, double *loss,
                          double *accuracy)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    int64_t mb = t->cfg->micro_batch_size, per_iter = mb * t->world->size;
    int64_t all = (ds->n_samples + per_iter - 1) / per_iter;
    if (iters <= 0 || iters > all)
        iters = all;
    int last = model->n_units - 1;
    bool classify = !model->labels_per_token;
    double acc[3] = {0.0, 0.0, 0.0}; /* loss sum, counted rows, argmax hits */
    for (int64_t it = 0; it < iters; it++) {
        for (int64_t k = 0; k < mb; k++) {
            int64_t pos = it * per_iter + (int64_t)t->world->rank * mb + k;
            t->index_host[k] = pos < ds->n_samples ? pos : -1;
            t->row_keys_host[k] = (uint64_t)pos;
        }
        zt_batch b;
        trainer_load(t, ds, mb, &b);
        ZT_TRY(trainer_forward(t, &b, true));
        int64_t rows = mb * trainer_rows_per_sample(t, &b);
        acc[0] += be->xent_forward_backward(be, t->acts[last], t->labels, rows, model->n_classes,
                                            model->ignore_index, 1.0f, NULL);
        for (int64_t r = 0; r < rows; r++)
            acc[1] += t->labels_host[r] != model->ignore_index;
        if (!classify)
            continue;
        be->copy_d2h(be, t->logits_host, t->acts[last], trainer_floats(rows * model->n_classes));
        for (int64_t r = 0; r < rows; r++) {
            const float *row = t->logits_host + r * model->n_classes;
            int64_t best = 0;
            for (int64_t c = 1; c < model->n_classes; c++)
                if (row[c] > row[best])
                    best = c;
            acc[2] += t->labels_host[r] == best;
        }
    }
    if (t->cfg->zero.stage == 3)
        ZT_TRY(zt_zero_gather_flush(&t->gather));
    ZT_TRY(trainer_sum_f64(t->world->comm, acc, 3));
    *loss = acc[1] > 0 ? acc[0] / acc[1] : NAN;
    *accuracy = classify && acc[1] > 0 ? acc[2] / acc[1] : NAN;
    return ZT_OK;
}

zt_status zt_trainer_generate(zt_trainer *t, int32_t start, int64_t n_new, uint64_t seed,
                              int32_t *out)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    int64_t T = model->seq_len, V = model->n_classes;
    if (!model->labels_per_token)
        return zt_fail(ZT_ERR_USAGE, "sampling needs a language model (--model gptlite)",
                       "model %s does not generate text", model->name);
    out[0] = start;
    for (int64_t i = 0; i < n_new; i++) {
        int64_t len = i + 1, ctx = len < T ? len : T;
        be->copy_h2d(be, t->tokens, out + len - ctx, (size_t)ctx * sizeof(int32_t));
        /* Dropout is off: the row keys are never read. */
        zt_batch b = {.n = 1, .t = ctx, .tokens = t->tokens, .row_keys = t->row_keys,
                      .seed = t->seed, .step = t->global_steps};
        ZT_TRY(trainer_forward(t, &b, true));
        be->copy_d2h(be, t->logits_host, t->acts[model->n_units - 1] + (ctx - 1) * V,
                     trainer_floats(V));
        double mx = t->logits_host[0], sum = 0.0;
        for (int64_t c = 1; c < V; c++)
            mx = t->logits_host[c] > mx ? t->logits_host[c] : mx;
        for (int64_t c = 0; c < V; c++)
            sum += exp((double)t->logits_host[c] - mx);
        double u = (double)zt_rng_uniform(seed, ZT_RNG_STREAM_SAMPLE, (uint64_t)i) * sum, cum = 0.0;
        int64_t pick = V - 1;
        for (int64_t c = 0; c < V; c++) {
            cum += exp((double)t->logits_host[c] - mx);
            if (u < cum) {
                pick = c;
                break;
            }
        }
        out[len] = (int32_t)pick;
    }
    if (t->cfg->zero.stage == 3)
        ZT_TRY(zt_zero_gather_flush(&t->gather));
    return ZT_OK;
}
