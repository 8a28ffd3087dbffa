#include "engine/train/trainer.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>

#include "engine/monitor/monitor.h"
#include "engine/rng.h"

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

/* The largest of one per-sample size field (offsetof(zt_unit, ...)) over units. */
static int64_t trainer_max_unit_field(const zt_model *m, size_t field)
{
    int64_t w = 0;
    for (int u = 0; u < m->n_units; u++) {
        int64_t v = *(const int64_t *)((const char *)&m->units[u] + field);
        w = v > w ? v : w;
    }
    return w;
}

static int64_t trainer_max_act_numel(const zt_model *m)
{
    int64_t in = trainer_max_unit_field(m, offsetof(zt_unit, in_numel));
    int64_t out = trainer_max_unit_field(m, offsetof(zt_unit, out_numel));
    int64_t w = in > out ? in : out;
    return m->in_numel > w ? m->in_numel : w;
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

static size_t trainer_bytes(int64_t numel, zt_dtype dt)
{
    return (size_t)numel * zt_dtype_size(dt);
}

/* Element i of a typed buffer. */
static void *trainer_at(const void *p, int64_t i, zt_dtype dt)
{
    return (char *)p + trainer_bytes(i, dt);
}

/* Elements the optimizer steps on: everything at stage 0, the partition above. */
static int64_t trainer_optim_span(const zt_trainer *t)
{
    return t->cfg->zero.stage == 0 ? t->layout.padded_numel : t->layout.partition_numel;
}

/* Precision, placement and checkpointing from the config (trainer.h). */
static void trainer_resolve(zt_trainer *t)
{
    const zt_config *cfg = t->cfg;
    int stage = cfg->zero.stage;
    t->cdt = zt_config_compute_dtype(cfg);
    t->gdt = zt_config_grad_dtype(cfg);
    t->kdt = zt_config_comm_dtype(cfg);
    t->mixed = t->cdt != ZT_F32;
    t->offload_opt = cfg->zero.offload_optimizer.device == ZT_OFFLOAD_CPU && stage > 0;
    t->offload_param = cfg->zero.offload_param.device == ZT_OFFLOAD_CPU && stage == 3;
    t->has_master = t->mixed || t->offload_opt || t->offload_param;
    t->ogdt = t->offload_opt ? ZT_F32 : t->gdt;
    t->check_overflow = cfg->fp16.enabled || (cfg->bf16.enabled && cfg->bf16.check_grad_overflow);
    t->ckpt_interval = zt_config_checkpoint_interval(cfg, t->model->n_units);
    t->ckpt_host = t->ckpt_interval > 0 && cfg->activation_checkpointing.cpu_checkpointing;
}

/* Checkpointing: the slot unit u's output and saved tensors use. */
static int trainer_slot(const zt_trainer *t, int u)
{
    return t->ckpt_interval > 0 ? (int)(u % t->ckpt_interval) : u;
}

/* Checkpointing: unit u starts a segment after the first (its input is kept). */
static bool trainer_kept_input(const zt_trainer *t, int u)
{
    return t->ckpt_interval > 0 && u > 0 && u % t->ckpt_interval == 0;
}

/* Unit outputs and saved tensors: one buffer per unit, or with checkpointing
 * K slots (slot j sized for the largest unit at position j of a segment) plus
 * the kept segment inputs. */
static zt_status trainer_activation_buffers(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_model *m = t->model;
    int64_t mb = t->cfg->micro_batch_size;
    zt_dtype c = t->cdt;
    int n = m->n_units;
    int64_t K = t->ckpt_interval;
    int slots = K > 0 && K < n ? (int)K : n;
    for (int j = 0; j < slots; j++) {
        int64_t out = 0, sv = 0;
        for (int u = j; u < n; u += slots) {
            out = m->units[u].out_numel > out ? m->units[u].out_numel : out;
            sv = m->units[u].saved_numel > sv ? m->units[u].saved_numel : sv;
        }
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, trainer_bytes(mb * out, c),
                           &t->acts[j]));
        if (sv > 0)
            ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                               trainer_bytes(mb * sv, c), &t->saved[j]));
    }
    int64_t max_kept = 0;
    zt_mem_loc loc = t->ckpt_host ? ZT_MEM_HOST : ZT_MEM_DEVICE;
    for (int u = 1; u < n; u++) {
        if (!trainer_kept_input(t, u))
            continue;
        int64_t kept = m->units[u - 1].out_numel;
        max_kept = kept > max_kept ? kept : max_kept;
        ZT_TRY(trainer_buf(mem, reserved, loc, ZT_MEM_ACTS, trainer_bytes(mb * kept, c),
                           &t->ckpt[u]));
    }
    if (t->ckpt_host && max_kept > 0)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                           trainer_bytes(mb * max_kept, c), &t->ckpt_in));
    if (reserved)
        for (int u = slots; u < n; u++) {
            t->acts[u] = t->acts[trainer_slot(t, u)];
            t->saved[u] = t->saved[trainer_slot(t, u)];
        }
    return ZT_OK;
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
    zt_dtype c = t->cdt;
    zt_mem_loc opt_loc = t->offload_opt ? ZT_MEM_HOST : ZT_MEM_DEVICE;
    zt_mem_loc shard_loc = t->offload_param ? ZT_MEM_HOST : ZT_MEM_DEVICE;
    int64_t max_shard = lay->max_unit_numel / lay->world_size;

    if (stage < 3) {
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS,
                           trainer_bytes(lay->padded_numel, c), &t->params));
    } else {
        for (int u = 0; u < lay->n_units; u++) {
            const zt_unit_layout *ul = &lay->units[u];
            ZT_TRY(trainer_buf(mem, reserved, ul->persistent ? ZT_MEM_DEVICE : shard_loc,
                               ZT_MEM_PARAMS,
                               trainer_bytes(ul->persistent ? ul->padded_numel : ul->shard_numel,
                                             c),
                               &t->unit_store[u]));
        }
        int64_t h = cfg->zero.zero_hpz_partition_size;
        for (int u = 0; h > 1 && u < lay->n_units; u++)
            if (!lay->units[u].persistent)
                ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS,
                                   trainer_bytes(lay->units[u].padded_numel / h, c),
                                   &t->secondary[u]));
    }
    if (stage < 2 || !t->offload_opt)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_GRADS,
                           trainer_bytes(stage < 2 ? lay->padded_numel : lay->partition_numel,
                                         t->gdt),
                           &t->grads));
    if (t->offload_opt)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_GRADS,
                           trainer_floats(lay->partition_numel), &t->host_grads));
    if (t->has_master)
        ZT_TRY(trainer_buf(mem, reserved, opt_loc, ZT_MEM_MASTER,
                           trainer_floats(trainer_optim_span(t)), &t->master));
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
                               trainer_bytes(send_numel, t->kdt), &t->rs_send[i]));
            if (recv_numel > 0)
                ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                                   trainer_bytes(recv_numel, t->kdt), &t->rs_recv[i]));
        }
        if (t->offload_opt)
            ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                               trainer_bytes(zt_zero_rs_width(cfg, lay), t->kdt), &t->rs_stage));
    }
    if (stage == 1 || stage == 2)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                           trainer_bytes(zt_zero_allgather_buffer_numel(cfg, lay), c),
                           &t->ag_buf));
    if (stage >= 2 && !t->mixed)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                           trainer_floats(lay->max_unit_numel), &t->unit_grad));
    /* The gather window allocates its own blocks from this part of COMM. */
    int64_t pool = zt_zero_gather_pool_numel(cfg, lay);
    if (pool > 0 && !reserved)
        zt_memory_plan(mem, ZT_MEM_DEVICE, ZT_MEM_COMM, trainer_bytes(pool, c));
    if (t->has_master && (t->offload_opt || t->offload_param))
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, trainer_bytes(max_shard, c),
                           &t->param_stage));

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
    ZT_TRY(trainer_activation_buffers(t, mem, reserved));
    int64_t work = trainer_max_unit_field(m, offsetof(zt_unit, work_numel));
    if (work > 0)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, trainer_floats(mb * work),
                           &t->work));
    /* The plan for --estimate-memory has no backend: it leaves this block out. */
    if (t->be && t->be->workspace_bytes > 0)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, t->be->workspace_bytes,
                           &t->be_workspace));
    size_t dact = trainer_floats(mb * trainer_max_act_numel(m));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[0]));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[1]));
    if (!t->mixed)
        return ZT_OK;
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK,
                       trainer_floats(lay->max_unit_numel), &t->pw));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK,
                       trainer_floats(lay->max_unit_numel), &t->gw));
    int64_t in = trainer_max_unit_field(m, offsetof(zt_unit, in_numel));
    int64_t out = trainer_max_unit_field(m, offsetof(zt_unit, out_numel));
    int64_t sv = trainer_max_unit_field(m, offsetof(zt_unit, saved_numel));
    if (in > 0)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, trainer_floats(mb * in),
                           &t->xin));
    ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, trainer_floats(mb * out),
                       &t->yout));
    if (sv > 0)
        ZT_TRY(trainer_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, trainer_floats(mb * sv),
                           &t->sw));
    return ZT_OK;
}

/* Per-unit pointer tables (host bookkeeping, outside the arenas). */
static zt_status trainer_tables(zt_trainer *t)
{
    size_t n = (size_t)t->model->n_units;
    t->acts = calloc(n, sizeof *t->acts);
    t->saved = calloc(n, sizeof *t->saved);
    t->ckpt = calloc(n, sizeof *t->ckpt);
    t->unit_store = calloc(n, sizeof *t->unit_store);
    t->own_p = calloc(n, sizeof *t->own_p);
    t->own_g = calloc(n, sizeof *t->own_g);
    t->own_m = calloc(n, sizeof *t->own_m);
    t->secondary = calloc(n, sizeof *t->secondary);
    if (!t->acts || !t->saved || !t->ckpt || !t->unit_store || !t->own_p || !t->own_g ||
        !t->own_m || !t->secondary)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate per-unit tables");
    return ZT_OK;
}

static void trainer_tables_free(zt_trainer *t)
{
    free(t->acts);
    free(t->saved);
    free(t->ckpt);
    free(t->unit_store);
    free(t->own_p);
    free(t->own_g);
    free(t->own_m);
    free(t->secondary);
    t->acts = t->saved = t->ckpt = t->unit_store = t->own_p = t->own_g = t->secondary = NULL;
    t->own_m = NULL;
}

zt_status zt_trainer_plan(const zt_config *cfg, const zt_model *m, int world_size,
                          zt_memory *mem)
{
    zt_trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.model = m;
    trainer_resolve(&t);
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

/* n bytes from host memory to a buffer at loc. */
static void trainer_put(const zt_trainer *t, void *dst, zt_mem_loc loc, const void *src, size_t n)
{
    if (loc == ZT_MEM_HOST)
        memcpy(dst, src, n);
    else
        t->be->copy_h2d(t->be, dst, src, n);
}

/* n bytes from a buffer at loc to host memory. */
static void trainer_get(const zt_trainer *t, void *dst, const void *src, zt_mem_loc loc, size_t n)
{
    if (loc == ZT_MEM_HOST)
        memcpy(dst, src, n);
    else
        t->be->copy_d2h(t->be, dst, src, n);
}

static zt_mem_loc trainer_opt_loc(const zt_trainer *t)
{
    return t->offload_opt ? ZT_MEM_HOST : ZT_MEM_DEVICE;
}

/* Where unit u's own parameter slice lives. */
static zt_mem_loc trainer_param_loc(const zt_trainer *t, int u)
{
    return t->offload_param && !t->layout.units[u].persistent ? ZT_MEM_HOST : ZT_MEM_DEVICE;
}

/* Every rank builds the same initial weights from the counter PRNG in fp32;
 * the master copy takes them as they are, the parameters rounded to the
 * compute dtype. At stage 3 each rank makes only its own slices (and the
 * persistent units whole). */
static zt_status trainer_init_params(zt_trainer *t)
{
    const zt_layout *lay = &t->layout;
    int stage = t->cfg->zero.stage;
    float *host = malloc(trainer_floats(lay->max_unit_numel));
    void *cast = t->mixed ? malloc(trainer_bytes(lay->max_unit_numel, t->cdt)) : host;
    if (!host || !cast) {
        free(host);
        if (t->mixed)
            free(cast);
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to initialise parameters",
                       (long long)lay->max_unit_numel);
    }
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        bool whole = stage < 3 || ul->persistent;
        int64_t lo = whole ? 0 : (int64_t)lay->rank * ul->shard_numel;
        int64_t hi = whole ? ul->padded_numel : lo + ul->shard_numel;
        int64_t real_hi = hi < ul->numel ? hi : ul->numel;
        memset(host, 0, trainer_floats(hi - lo));
        if (real_hi > lo)
            zt_unit_init_range(&t->model->units[u], t->seed, ul->global_index, lo, real_hi, host);
        if (t->mixed)
            zt_convert_host(cast, t->cdt, host, ZT_F32, hi - lo, 1.0f, false);
        void *dst = stage < 3 ? trainer_at(t->params, ul->offset, t->cdt) : t->unit_store[u];
        trainer_put(t, dst, trainer_param_loc(t, u), cast, trainer_bytes(hi - lo, t->cdt));
        if (!t->has_master)
            continue;
        /* The master holds the whole unit at stage 0, the own slice above. */
        const float *own = stage == 0 ? host
                                      : host + (whole ? (int64_t)lay->rank * ul->shard_numel : 0);
        int64_t n = stage == 0 ? ul->padded_numel : ul->shard_numel;
        float *m = stage == 0 ? t->master + ul->offset : t->own_m[u];
        trainer_put(t, m, trainer_opt_loc(t), own, trainer_floats(n));
    }
    free(host);
    if (t->mixed)
        free(cast);
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
            t->own_p[u] = trainer_at(t->params, own, t->cdt);
        else
            t->own_p[u] = trainer_at(t->unit_store[u],
                                     ul->persistent ? (int64_t)lay->rank * ul->shard_numel : 0,
                                     t->cdt);
        if (t->offload_opt)
            t->own_g[u] = t->host_grads + ul->part_offset;
        else
            t->own_g[u] = trainer_at(t->grads, stage < 2 ? own : ul->part_offset, t->gdt);
        if (!t->has_master)
            t->own_m[u] = t->own_p[u];
        else
            t->own_m[u] = t->master + (stage == 0 ? own : ul->part_offset);
    }
}

/* A communicator of the main comm's backend over the ranks sharing `color`,
 * owned by the trainer. */
static zt_status trainer_split(zt_trainer *t, int color, zt_comm **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate a group communicator");
    return t->comm->ops->split(t->comm, color, t->world->rank, *out);
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
        ZT_TRY(trainer_split(t, (int)(w->rank / m), &t->shard_comm));
        ZT_TRY(trainer_split(t, (int)(w->rank % m), &t->replica_comm));
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
    ZT_TRY(trainer_split(t, (int)(w->rank / h), &t->hpz_comm));
    int node_lo = w->node, node_hi = w->node;
    MPI_Allreduce(MPI_IN_PLACE, &node_lo, 1, MPI_INT, MPI_MIN, t->hpz_comm->mpi);
    MPI_Allreduce(MPI_IN_PLACE, &node_hi, 1, MPI_INT, MPI_MAX, t->hpz_comm->mpi);
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
    trainer_resolve(t);
    if (cfg->activation_checkpointing.cpu_checkpointing && t->ckpt_interval == 0)
        return zt_fail(ZT_ERR_CONFIG,
                       "set activation_checkpointing.number_checkpoints or "
                       "--activation-checkpoint-interval",
                       "activation_checkpointing.cpu_checkpointing moves kept activations to the "
                       "host, but activation checkpointing is off");
    ZT_TRY(zt_sampler_init(&t->sampler, data->n_samples, cfg->train_batch_size,
                           cfg->micro_batch_size, w->size, w->rank, data->shuffle, seed));
    ZT_TRY(trainer_groups_init(t));
    ZT_TRY(zt_layout_init(&t->layout, m, &cfg->zero, t->zcomm->size, t->zcomm->rank));
    ZT_TRY(trainer_tables(t));
    zt_memory_init(&t->mem, be);
    ZT_TRY(trainer_buffers(t, &t->mem, false));
    ZT_TRY(zt_memory_reserve(&t->mem));
    ZT_TRY(trainer_buffers(t, &t->mem, true));
    if (t->be_workspace)
        be->set_workspace(be, t->be_workspace, be->workspace_bytes);
    trainer_views(t);

    ZT_TRY(trainer_init_params(t));
    int stage = cfg->zero.stage;
    if (t->grads)
        be->memset_zero(be, t->grads,
                        trainer_bytes(stage < 2 ? t->layout.padded_numel
                                                : t->layout.partition_numel,
                                      t->gdt));
    if (t->host_grads)
        memset(t->host_grads, 0, trainer_floats(t->layout.partition_numel));
    zt_optim_init(&t->optim, &cfg->optimizer, be, t->offload_opt, trainer_optim_span(t),
                  t->optim_state);
    zt_sched_init(&t->sched, &cfg->scheduler, &cfg->optimizer);
    zt_scaler_init(&t->scaler, &cfg->fp16, stage > 0);
    if (stage == 0)
        return zt_zero_reducer_init(&t->reducer, cfg, be, comm, &t->layout, t->grads, t->gdt);
    zt_zero_rs_target target = {.dest = t->own_g,
                                .dest_dt = t->ogdt,
                                .dest_host = t->offload_opt,
                                .host_stage = t->rs_stage,
                                .comm_dt = t->kdt};
    ZT_TRY(zt_zero_rs_init(&t->rs, cfg, be, t->zcomm, t->replica_comm, &t->layout, &target,
                           t->rs_send, t->rs_recv));
    if (stage == 3) {
        zt_arena *pool = zt_memory_arena(&t->mem, ZT_MEM_DEVICE, ZT_MEM_COMM);
        ZT_TRY(zt_zero_gather_init(&t->gather, cfg, be, t->zcomm, t->hpz_comm, &t->layout, pool,
                                   t->cdt, t->unit_store, t->offload_param, t->secondary));
    }
    return ZT_OK;
}

void zt_trainer_free(zt_trainer *t)
{
    if (t->be_workspace)
        t->be->set_workspace(t->be, NULL, 0);
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
    free(t->scale_history);
    free(t->evals);
    t->loss_history = t->scale_history = NULL;
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


/* The parameters unit u computes with (compute dtype): the full flat vector's
 * slice, or at stage 3 the gathered copy. */
static zt_status trainer_unit_params(zt_trainer *t, int u, zt_gather_dir dir, void **p)
{
    if (t->cfg->zero.stage < 3) {
        *p = trainer_at(t->params, t->layout.units[u].offset, t->cdt);
        return ZT_OK;
    }
    return zt_zero_gather_fetch(&t->gather, u, dir, p);
}

static zt_status trainer_unit_release(zt_trainer *t, int u, zt_gather_dir dir, bool last_use)
{
    if (t->cfg->zero.stage < 3)
        return ZT_OK;
    return zt_zero_gather_release(&t->gather, u, dir, last_use);
}

/* Unit u's input: the model input, a segment's kept input, or the previous
 * unit's output. */
static const void *trainer_unit_input(const zt_trainer *t, int u)
{
    if (u == 0)
        return t->x;
    if (trainer_kept_input(t, u))
        return t->ckpt_host ? t->ckpt_in : t->ckpt[u];
    return t->acts[u - 1];
}

/* An fp32 view of n elements of a compute-dtype tensor: the tensor itself in
 * fp32 training, else its conversion into `scratch`. */
static float *trainer_fp32(const zt_trainer *t, const void *x, int64_t n, float *scratch)
{
    if (!t->mixed)
        return (float *)x;
    t->be->convert(t->be, scratch, ZT_F32, x, t->cdt, n, 1.0f, false);
    return scratch;
}

/* Rounds n fp32 values computed in `scratch` into the stored tensor y. */
static void trainer_store(const zt_trainer *t, void *y, const float *scratch, int64_t n)
{
    if (t->mixed)
        t->be->convert(t->be, y, t->cdt, scratch, ZT_F32, n, 1.0f, false);
}

/* Unit u's input as fp32; the model input (unit 0) is fp32 data already. */
static const float *trainer_input_fp32(const zt_trainer *t, int u, int64_t n)
{
    if (u == 0)
        return t->x;
    return trainer_fp32(t, trainer_unit_input(t, u), n * t->model->units[u].in_numel, t->xin);
}

static void trainer_run_forward(zt_trainer *t, int u, const void *p, const zt_batch *b)
{
    const zt_unit *unit = &t->model->units[u];
    const zt_backend *be = t->be;
    int64_t n = b->n;
    const float *x = trainer_input_fp32(t, u, n);
    const float *pf = trainer_fp32(t, p, unit->param_numel, t->pw);
    float *y = t->mixed ? t->yout : t->acts[u];
    float *sv = unit->saved_numel > 0 ? (t->mixed ? t->sw : t->saved[u]) : NULL;
    unit->ops->forward(unit, be, pf, x, y, sv, t->work, b);
    trainer_store(t, t->acts[u], y, n * unit->out_numel);
    if (sv)
        trainer_store(t, t->saved[u], sv, n * unit->saved_numel);
}

/* Checkpointing: unit u + 1 starts a segment; keep u's output as its input. */
static void trainer_keep(zt_trainer *t, int u, int64_t n)
{
    const zt_backend *be = t->be;
    size_t bytes = trainer_bytes(n * t->model->units[u].out_numel, t->cdt);
    if (t->ckpt_host) {
        be->copy_d2h(be, t->ckpt[u + 1], t->acts[u], bytes);
        be->copy_d2d(be, t->ckpt_in, t->acts[u], bytes);
    } else {
        be->copy_d2d(be, t->ckpt[u + 1], t->acts[u], bytes);
    }
}

/* Runs every unit forward on the loaded batch b (dropout as b says). At
 * stage 3 each unit is gathered for it and released; last_use (a pass with no
 * backward: evaluation, sampling) keeps nothing for a reuse. */
static zt_status trainer_forward(zt_trainer *t, const zt_batch *b, bool last_use)
{
    const zt_model *model = t->model;
    for (int u = 0; u < model->n_units; u++) {
        void *p;
        ZT_TRY(trainer_unit_params(t, u, ZT_GATHER_FWD, &p));
        trainer_run_forward(t, u, p, b);
        ZT_TRY(trainer_unit_release(t, u, ZT_GATHER_FWD, last_use));
        if (u + 1 < model->n_units && trainer_kept_input(t, u + 1))
            trainer_keep(t, u, b->n);
    }
    return ZT_OK;
}

/* The last unit's output (logits) as fp32: under mixed precision the stored
 * 16-bit logits, widened into the output scratch. */
static float *trainer_logits(zt_trainer *t, int64_t n)
{
    int last = t->model->n_units - 1;
    return trainer_fp32(t, t->acts[last], n * t->model->units[last].out_numel, t->yout);
}

/* Unit u's backward from dy (fp32) into dx (fp32, NULL for unit 0) and the
 * unit's fp32 parameter gradient: written to (or, in fp32 training, added to
 * when accumulate) `dp`; under mixed precision always written to t->gw. */
static void trainer_run_backward(zt_trainer *t, int u, const void *p, float *dy, float *dx,
                                 float *dp, bool accumulate, const zt_batch *b)
{
    const zt_unit *unit = &t->model->units[u];
    int64_t n = b->n;
    const float *x = trainer_input_fp32(t, u, n);
    const float *pf = trainer_fp32(t, p, unit->param_numel, t->pw);
    const float *y = trainer_fp32(t, t->acts[u], n * unit->out_numel, t->yout);
    const float *sv = unit->saved_numel > 0
                          ? trainer_fp32(t, t->saved[u], n * unit->saved_numel, t->sw)
                          : NULL;
    unit->ops->backward(unit, t->be, pf, x, y, sv, dy, dx, t->mixed ? t->gw : dp, t->work,
                        accumulate && !t->mixed, b);
}

/* Checkpointing: re-runs segment [a, e) forward from its kept input. */
static zt_status trainer_recompute(zt_trainer *t, int a, int e, const zt_batch *b)
{
    if (t->ckpt_host && a > 0)
        t->be->copy_h2d(t->be, t->ckpt_in, t->ckpt[a],
                        trainer_bytes(b->n * t->model->units[a - 1].out_numel, t->cdt));
    for (int u = a; u < e; u++) {
        void *p;
        ZT_TRY(trainer_unit_params(t, u, ZT_GATHER_RECOMPUTE, &p));
        trainer_run_forward(t, u, p, b);
        ZT_TRY(trainer_unit_release(t, u, ZT_GATHER_RECOMPUTE, false));
    }
    return ZT_OK;
}

/* Unit u's fresh fp32 gradient g (padded_numel, zero padding) goes where the
 * stage keeps gradients: added into the full GRADS (stages 0-1, m > 0
 * accumulates), or into the reduce-scatter (stages 2-3). */
static zt_status trainer_route_grad(zt_trainer *t, int u, const float *g, int64_t m, bool reduce)
{
    const zt_unit_layout *ul = &t->layout.units[u];
    int stage = t->cfg->zero.stage;
    void *full = stage < 2 ? trainer_at(t->grads, ul->offset, t->gdt) : NULL;
    if (full && t->mixed)
        t->be->convert(t->be, full, t->gdt, g, ZT_F32, ul->padded_numel, 1.0f, m > 0);
    if (!reduce)
        return ZT_OK;
    if (stage == 0)
        return zt_zero_reducer_unit_done(&t->reducer, u);
    if (stage == 1)
        return zt_zero_rs_unit(&t->rs, u, full, t->gdt);
    return zt_zero_rs_unit(&t->rs, u, g, ZT_F32);
}

/* --inject-overflow: an inf in this rank's fresh gradient of a unit. */
static void trainer_inject(zt_trainer *t, float *g)
{
    if (t->world->rank != t->world->size - 1)
        return;
    for (int i = 0; i < t->n_inject_steps; i++)
        if (t->inject_steps[i] == t->global_steps + 1) {
            const float inf = INFINITY;
            t->be->copy_h2d(t->be, g, &inf, sizeof inf);
        }
}

/* One micro-step: forward, loss, backward. Returns this rank's loss sum
 * (unscaled). */
static zt_status trainer_micro_step(zt_trainer *t, int64_t m, double *loss_sum, double *timers)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    const zt_layout *lay = &t->layout;
    int stage = t->cfg->zero.stage;
    int64_t mb = t->cfg->micro_batch_size, gas = t->cfg->gradient_accumulation_steps;
    bool boundary = m == gas - 1;
    int n_units = model->n_units, last = n_units - 1;
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
    /* The mean over this micro-batch, divided by GAS as DeepSpeed scales the
     * loss, times the loss scale (1 unless fp16). */
    int64_t per_sample = trainer_rows_per_sample(t, &b), rows = mb * per_sample;
    float dscale = (float)(t->scaler.scale / (double)(rows * gas));
    *loss_sum += be->xent_forward_backward(be, trainer_logits(t, mb), t->labels, rows,
                                           model->n_classes, model->ignore_index, dscale,
                                           t->dact[0]) /
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
    int64_t K = t->ckpt_interval > 0 ? t->ckpt_interval : n_units;
    int cur = 0;
    for (int a = (int)(last / K * K); a >= 0; a -= (int)K) {
        int e = a + K < n_units ? (int)(a + K) : n_units;
        if (e < n_units) /* the last segment's activations are still in the slots */
            ZT_TRY(trainer_recompute(t, a, e, &b));
        for (int u = e - 1; u >= a; u--) {
            const zt_unit_layout *ul = &lay->units[u];
            void *p;
            ZT_TRY(trainer_unit_params(t, u, ZT_GATHER_BWD, &p));
            float *g = t->mixed ? t->gw
                       : stage < 2 ? (float *)t->grads + ul->offset
                                   : t->unit_grad;
            trainer_run_backward(t, u, p, t->dact[cur], u > 0 ? t->dact[1 - cur] : NULL, g,
                                 stage < 2 && m > 0, &b);
            ZT_TRY(trainer_unit_release(t, u, ZT_GATHER_BWD, boundary));
            if (boundary && u == t->inject_unit)
                trainer_inject(t, g);
            /* The buffer's tail past this unit's parameters is padding (a
             * fresh buffer: stages 0-1 in fp32 keep their zero tail). */
            if (t->mixed || stage >= 2)
                be->memset_zero(be, g + ul->numel, trainer_floats(ul->padded_numel - ul->numel));
            ZT_TRY(trainer_route_grad(t, u, g, m, reduce));
            cur = 1 - cur;
        }
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

/* Sum of squares, inf/nan test and in-place scaling of memory where the
 * optimizer works (own_g, own_m): the host when it is offloaded. */
static double trainer_opt_sumsq(const zt_trainer *t, const void *x, zt_dtype dt, int64_t n)
{
    return t->offload_opt ? zt_sum_squares_host(x, dt, n) : t->be->sum_squares(t->be, x, dt, n);
}

static bool trainer_opt_bad(const zt_trainer *t, const void *x, zt_dtype dt, int64_t n)
{
    return t->offload_opt ? zt_has_inf_nan_host(x, dt, n) : t->be->has_inf_nan(t->be, x, dt, n);
}

static void trainer_opt_scale(const zt_trainer *t, float *x, int64_t n, float a)
{
    if (t->offload_opt)
        zt_convert_host(x, ZT_F32, x, ZT_F32, n, a, false);
    else
        t->be->convert(t->be, x, ZT_F32, x, ZT_F32, n, a, false);
}

/* The first unit whose reduced gradients hold an inf or nan on any rank, or
 * n_units when none does: DeepSpeed's overflow check (each rank tests its own
 * slices; all_reduce MIN over the world). */
static zt_status trainer_first_overflow(zt_trainer *t, int *first)
{
    int n = t->layout.n_units;
    *first = n;
    for (int u = 0; u < n && *first == n; u++)
        if (trainer_opt_bad(t, t->own_g[u], t->ogdt, t->layout.units[u].shard_numel))
            *first = u;
    int rc = MPI_Allreduce(MPI_IN_PLACE, first, 1, MPI_INT, MPI_MIN, t->world->comm);
    if (rc != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "a peer rank may have died; check the other ranks' output",
                       "all-reduce of the overflow flag failed (MPI error %d)", rc);
    return ZT_OK;
}

/* Sum of squares (float64) of this rank's slices (per-unit pointers to
 * optimizer-side memory), summed over the partition group (MiCS replicas hold
 * the same slices): DeepSpeed's global norm, the same value on every rank. */
static zt_status trainer_slices_sumsq(zt_trainer *t, void *const *slices, zt_dtype dt,
                                      double *sq)
{
    *sq = 0.0;
    for (int u = 0; u < t->layout.n_units; u++)
        *sq += trainer_opt_sumsq(t, slices[u], dt, t->layout.units[u].shard_numel);
    return trainer_sum_f64(t->zcomm->mpi, sq, 1);
}

/* The piece of the optimizer's span that unit u is: the whole unit at stage 0
 * (every rank steps everything), the rank's slice above. */
static zt_optim_seg trainer_piece(const zt_trainer *t, int u, void **g)
{
    const zt_unit_layout *ul = &t->layout.units[u];
    if (t->cfg->zero.stage > 0) {
        *g = t->own_g[u];
        return (zt_optim_seg){t->own_m[u], NULL, ul->part_offset, ul->shard_numel};
    }
    *g = trainer_at(t->grads, ul->offset, t->gdt);
    float *m = t->has_master ? t->master + ul->offset : (float *)t->params + ul->offset;
    return (zt_optim_seg){m, NULL, ul->offset, ul->padded_numel};
}

/* Writes the stepped fp32 values of piece s (unit u) back into the
 * parameters, rounded to the compute dtype, across host and device. */
static void trainer_write_back(zt_trainer *t, int u, const zt_optim_seg *s)
{
    const zt_backend *be = t->be;
    const zt_unit_layout *ul = &t->layout.units[u];
    void *dst = t->cfg->zero.stage == 0 ? trainer_at(t->params, ul->offset, t->cdt) : t->own_p[u];
    zt_mem_loc ploc = trainer_param_loc(t, u);
    size_t bytes = trainer_bytes(s->numel, t->cdt);
    if (!t->offload_opt && ploc == ZT_MEM_DEVICE) {
        be->convert(be, dst, t->cdt, s->params, ZT_F32, s->numel, 1.0f, false);
    } else if (t->offload_opt && ploc == ZT_MEM_HOST) {
        zt_convert_host(dst, t->cdt, s->params, ZT_F32, s->numel, 1.0f, false);
    } else if (t->offload_opt) {
        const void *src = s->params;
        if (t->mixed) {
            zt_convert_host(t->param_stage, t->cdt, s->params, ZT_F32, s->numel, 1.0f, false);
            src = t->param_stage;
        }
        be->copy_h2d(be, dst, src, bytes);
    } else {
        const void *src = s->params;
        if (t->mixed) {
            be->convert(be, t->gw, t->cdt, s->params, ZT_F32, s->numel, 1.0f, false);
            src = t->gw;
        }
        be->copy_d2h(be, dst, src, bytes);
    }
}

/* The optimizer step with the gradients multiplied by `coef` (unscale and
 * clip in one), and what makes every rank's parameters current again. */
static zt_status trainer_apply(zt_trainer *t, float coef, double lr, double b1, double b2)
{
    const zt_config *cfg = t->cfg;
    const zt_backend *be = t->be;
    int stage = cfg->zero.stage;
    zt_optim_begin_step(&t->optim);
    for (int u = 0; u < t->layout.n_units; u++) {
        void *g;
        zt_optim_seg s = trainer_piece(t, u, &g);
        /* The optimizer reads fp32: fp32 gradients are scaled in place (they
         * are dead after the step), 16-bit ones widened into the scratch. */
        if (t->ogdt != ZT_F32)
            be->convert(be, t->gw, ZT_F32, g, t->ogdt, s.numel, coef, false);
        else if (coef != 1.0f)
            trainer_opt_scale(t, g, s.numel, coef);
        s.grads = t->ogdt != ZT_F32 ? t->gw : g;
        zt_optim_step_seg(&t->optim, &s, lr, b1, b2);
        if (t->has_master)
            trainer_write_back(t, u, &s);
    }
    if (stage == 1 || stage == 2)
        return zt_zero_allgather_params(cfg, be, t->zcomm, &t->layout, t->params, t->ag_buf,
                                        t->cdt);
    if (stage == 3)
        return zt_zero_gather_end_step(&t->gather);
    return ZT_OK;
}

/* Rank 0 collects each unit from every rank's slices (host MPI, outside the
 * comm counters: a dump is not training traffic), widened to fp32 and
 * multiplied by `alpha`, so no stage needs the whole model in one buffer.
 * slices[u] (shard_numel of dt) lives where the optimizer works (own_g and
 * own_m both do). */
static zt_status trainer_dump_slices(zt_trainer *t, void *const *slices, zt_dtype dt,
                                     float alpha, const char *path)
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
    int64_t shard_max = lay->max_unit_numel / lay->world_size;
    void *raw = malloc(trainer_bytes(shard_max, dt));
    float *mine = malloc(trainer_floats(shard_max));
    float *unit = root ? malloc(trainer_floats(lay->max_unit_numel)) : NULL;
    if (!raw || !mine || (root && !unit))
        st = zt_fail(ZT_ERR_OOM, "", "cannot stage one unit for the dump");
    st = zt_world_agree(t->world, st, NULL);
    for (int u = 0; u < lay->n_units && st == ZT_OK; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        trainer_get(t, raw, slices[u], trainer_opt_loc(t), trainer_bytes(ul->shard_numel, dt));
        zt_convert_host(mine, ZT_F32, raw, dt, ul->shard_numel, alpha, false);
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
    free(raw);
    free(mine);
    free(unit);
    return zt_world_agree(t->world, st, NULL);
}

/* Room for the histories of steps [1, n]; a resumed run starts past 1. */
static zt_status trainer_history_reserve(zt_trainer *t, int64_t n)
{
    if (n <= t->loss_cap)
        return ZT_OK;
    int64_t cap = t->loss_cap ? t->loss_cap : 256;
    while (cap < n)
        cap *= 2;
    double *h = realloc(t->loss_history, (size_t)cap * sizeof *h);
    if (h)
        t->loss_history = h;
    double *s = realloc(t->scale_history, (size_t)cap * sizeof *s);
    if (s)
        t->scale_history = s;
    if (!h || !s)
        return zt_fail(ZT_ERR_OOM, "", "cannot grow the loss history to %lld steps",
                       (long long)n);
    t->loss_cap = cap;
    return ZT_OK;
}

static zt_status trainer_record(zt_trainer *t, double loss, double scale)
{
    ZT_TRY(trainer_history_reserve(t, t->global_steps));
    t->loss_history[t->global_steps - 1] = loss;
    t->scale_history[t->global_steps - 1] = scale;
    return ZT_OK;
}

zt_status zt_trainer_set_history(zt_trainer *t, const double *loss, const double *scale,
                                 int64_t n)
{
    ZT_TRY(trainer_history_reserve(t, n));
    if (n > 0) {
        memcpy(t->loss_history, loss, (size_t)n * sizeof *loss);
        memcpy(t->scale_history, scale, (size_t)n * sizeof *scale);
    }
    return ZT_OK;
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
    double scale = t->scaler.scale;
    if (t->grad_dump_path && (t->global_steps == 0 || strstr(t->grad_dump_path, "%d"))) {
        char path[1024];
        const char *at = strstr(t->grad_dump_path, "%d");
        if (at)
            snprintf(path, sizeof path, "%.*s%lld%s", (int)(at - t->grad_dump_path),
                     t->grad_dump_path, (long long)(t->global_steps + 1), at + 2);
        else
            snprintf(path, sizeof path, "%s", t->grad_dump_path);
        ZT_TRY(trainer_dump_slices(t, t->own_g, t->ogdt, (float)(1.0 / scale), path));
    }
    int first_bad = t->layout.n_units;
    if (t->check_overflow)
        ZT_TRY(trainer_first_overflow(t, &first_bad));
    bool overflow = first_bad < t->layout.n_units;
    zt_scaler_event ev = zt_scaler_update(&t->scaler, overflow);
    if (ev.at_min)
        return zt_fail(ZT_ERR_NUMERIC,
                       "lower the learning rate, look for extreme values in the data, or train "
                       "in bf16 (fp32's range)",
                       "step %lld: gradients overflow with the fp16 loss scale already at its "
                       "minimum (%g, fp16.min_loss_scale); the first unit whose gradients hold "
                       "inf or nan is %s (unit %d)",
                       (long long)(t->global_steps + 1), ev.prev_scale,
                       t->model->units[first_bad].name, first_bad);
    double lr = zt_sched_lr(&t->sched);
    double b1 = -1.0, b2 = -1.0;
    zt_sched_momentum(&t->sched, &b1, &b2);
    if (overflow) {
        /* DeepSpeed: no optimizer or scheduler step; the gradients are
         * overwritten by the next step's first micro-step. */
        t->skipped_steps++;
        t->last_grad_norm = -1.0;
        if (cfg->zero.stage == 3)
            ZT_TRY(zt_zero_gather_flush(&t->gather));
        zt_monitor_overflow(mon, &ev, cfg->fp16.enabled);
    } else {
        double norm = 0.0;
        ZT_TRY(trainer_slices_sumsq(t, t->own_g, t->ogdt, &norm));
        norm = sqrt(norm);
        /* DeepSpeed unscales and clips in one multiply on the scaled norm. */
        double clip = 1.0;
        if (cfg->gradient_clipping > 0.0 && isfinite(norm)) {
            double c = (norm / scale + 1e-6) / cfg->gradient_clipping;
            clip = c > 1.0 ? c : 1.0;
        }
        t->last_grad_norm = isfinite(norm) ? norm / scale : -1.0;
        ZT_TRY(trainer_apply(t, (float)(1.0 / (clip * scale)), lr, b1, b2));
        zt_sched_step(&t->sched);
    }
    /* check synchronises, and a device failure surfaces within this step. */
    ZT_TRY(t->be->check(t->be));
    double t1 = trainer_now();
    timers[ZT_TIMER_STEP] += 1e3 * (t1 - ts);

    t->last_lr = lr;
    t->global_steps++;
    t->global_samples += cfg->train_batch_size;
    ZT_TRY(trainer_record(t, loss, scale));

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
        .loss_scale = cfg->fp16.enabled ? t->scaler.scale : -1.0,
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
        if (st == ZT_OK && t->after_step)
            st = t->after_step(t, t->after_step_ctx);
    }
    zt_monitor_free(&mon);
    return st;
}

double zt_trainer_param_norm(zt_trainer *t)
{
    double sq = 0.0;
    return trainer_slices_sumsq(t, (void *const *)t->own_m, ZT_F32, &sq) == ZT_OK ? sqrt(sq)
                                                                                : NAN;
}

zt_status zt_trainer_dump_params(zt_trainer *t, const char *path)
{
    return trainer_dump_slices(t, (void *const *)t->own_m, ZT_F32, 1.0f, path);
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
        const float *logits = trainer_logits(t, mb);
        acc[0] += be->xent_forward_backward(be, logits, t->labels, rows, model->n_classes,
                                            model->ignore_index, 1.0f, NULL);
        for (int64_t r = 0; r < rows; r++)
            acc[1] += t->labels_host[r] != model->ignore_index;
        if (!classify)
            continue;
        be->copy_d2h(be, t->logits_host, logits, trainer_floats(rows * model->n_classes));
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
    return zt_trainer_generate_from(t, &start, 1, n_new, 1.0, seed, out);
}

/* The token drawn from logits (V) at temperature temp with uniform u. */
static int64_t trainer_pick(const float *logits, int64_t V, double temp, double u)
{
    int64_t best = 0;
    for (int64_t c = 1; c < V; c++)
        if (logits[c] > logits[best])
            best = c;
    if (temp == 0.0)
        return best;
    double mx = logits[best], sum = 0.0;
    for (int64_t c = 0; c < V; c++)
        sum += exp(((double)logits[c] - mx) / temp);
    double target = u * sum, cum = 0.0;
    for (int64_t c = 0; c < V; c++) {
        cum += exp(((double)logits[c] - mx) / temp);
        if (target < cum)
            return c;
    }
    return V - 1;
}

zt_status zt_trainer_generate_from(zt_trainer *t, const int32_t *prompt, int64_t n_prompt,
                                   int64_t n_new, double temperature, uint64_t seed,
                                   int32_t *out)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    int64_t T = model->seq_len, V = model->n_classes;
    if (!model->labels_per_token)
        return zt_fail(ZT_ERR_USAGE, "sampling needs a language model (--model gptlite)",
                       "model %s does not generate text", model->name);
    if (n_prompt < 1)
        return zt_fail(ZT_ERR_USAGE, "give at least one prompt token", "empty prompt");
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    for (int64_t i = 0; i < n_new; i++) {
        int64_t len = n_prompt + i, ctx = len < T ? len : T;
        be->copy_h2d(be, t->tokens, out + len - ctx, (size_t)ctx * sizeof(int32_t));
        /* Dropout is off: the row keys are never read. */
        zt_batch b = {.n = 1, .t = ctx, .tokens = t->tokens, .row_keys = t->row_keys,
                      .seed = t->seed, .step = t->global_steps};
        ZT_TRY(trainer_forward(t, &b, true));
        be->copy_d2h(be, t->logits_host, trainer_logits(t, 1) + (ctx - 1) * V,
                     trainer_floats(V));
        double u = (double)zt_rng_uniform(seed, ZT_RNG_STREAM_SAMPLE, (uint64_t)i);
        out[len] = (int32_t)trainer_pick(t->logits_host, V, temperature, u);
    }
    if (t->cfg->zero.stage == 3)
        ZT_TRY(zt_zero_gather_flush(&t->gather));
    return ZT_OK;
}

void zt_trainer_unit_span(const zt_trainer *t, int u, zt_trainer_span *s)
{
    const zt_unit_layout *ul = &t->layout.units[u];
    void *g;
    zt_optim_seg seg = trainer_piece(t, u, &g);
    int64_t span = trainer_optim_span(t);
    memset(s, 0, sizeof *s);
    s->values = seg.params;
    s->n_states = (int)zt_optim_state_numel(&t->cfg->optimizer, 1);
    for (int k = 0; k < s->n_states; k++)
        s->state[k] = t->optim_state + k * span + seg.offset;
    s->lo = t->cfg->zero.stage == 0 ? 0 : (int64_t)t->layout.rank * ul->shard_numel;
    s->numel = seg.numel;
    s->loc = trainer_opt_loc(t);
}

zt_status zt_trainer_refresh_params(zt_trainer *t)
{
    int stage = t->cfg->zero.stage;
    for (int u = 0; t->has_master && u < t->layout.n_units; u++) {
        void *g;
        zt_optim_seg seg = trainer_piece(t, u, &g);
        trainer_write_back(t, u, &seg);
    }
    if (stage == 1 || stage == 2)
        ZT_TRY(zt_zero_allgather_params(t->cfg, t->be, t->zcomm, &t->layout, t->params,
                                        t->ag_buf, t->cdt));
    else if (stage == 3)
        ZT_TRY(zt_zero_gather_end_step(&t->gather));
    return t->be->check(t->be);
}
