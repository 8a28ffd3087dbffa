/*
 * placement: precision and offload. Where each unit's own slices live (the
 * parameters, the reduced gradient, the fp32 values the optimizer steps),
 * fp32 views of 16-bit tensors, the initial weights, the optimizer step on
 * the rank's span with the stepped values written back into the parameters
 * across host and device, the global gradient norm and overflow test where
 * the optimizer works, and the dumps built from the rank's slices
 * (engine/train/trainer.h has the rules).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/train/trainer_impl.h"

float *zt_train_fp32(const zt_trainer *t, const void *x, int64_t n, float *scratch)
{
    if (!t->mixed)
        return (float *)x;
    t->be->convert(t->be, scratch, ZT_F32, x, t->cdt, n, 1.0f, false);
    return scratch;
}

void zt_train_store(const zt_trainer *t, void *y, const float *scratch, int64_t n)
{
    if (t->mixed)
        t->be->convert(t->be, y, t->cdt, scratch, ZT_F32, n, 1.0f, false);
}

/* n bytes from host memory to a buffer at loc. */
static void placement_put(const zt_trainer *t, void *dst, zt_mem_loc loc, const void *src,
                          size_t n)
{
    if (loc == ZT_MEM_HOST)
        memcpy(dst, src, n);
    else
        t->be->copy_h2d(t->be, dst, src, n);
}

/* n bytes from a buffer at loc to host memory. */
static void placement_get(const zt_trainer *t, void *dst, const void *src, zt_mem_loc loc,
                          size_t n)
{
    if (loc == ZT_MEM_HOST)
        memcpy(dst, src, n);
    else
        t->be->copy_d2h(t->be, dst, src, n);
}

static zt_mem_loc placement_opt_loc(const zt_trainer *t)
{
    return t->offload_opt ? ZT_MEM_HOST : ZT_MEM_DEVICE;
}

/* Where unit u's own parameter slice lives. */
static zt_mem_loc placement_param_loc(const zt_trainer *t, int u)
{
    return t->offload_param && !t->layout.units[u].persistent ? ZT_MEM_HOST : ZT_MEM_DEVICE;
}

/* Every rank builds the same initial weights from the counter PRNG in fp32;
 * the master copy takes them as they are, the parameters rounded to the
 * compute dtype. When parameters are sharded each rank makes only its own
 * slices (and the persistent units whole). */
zt_status zt_train_init_params(zt_trainer *t)
{
    const zt_layout *lay = &t->layout;
    const zt_stage_policy *pol = t->policy;
    float *host = malloc(zt_train_floats(lay->max_unit_numel));
    void *cast = t->mixed ? malloc(zt_train_bytes(lay->max_unit_numel, t->cdt)) : host;
    if (!host || !cast) {
        free(host);
        if (t->mixed)
            free(cast);
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to initialise parameters",
                       (long long)lay->max_unit_numel);
    }
    zt_status st = ZT_OK;
    for (int u = 0; u < lay->n_units && st == ZT_OK; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        bool whole = !pol->params_sharded || ul->persistent;
        int64_t lo = whole ? 0 : (int64_t)lay->rank * ul->shard_numel;
        int64_t hi = whole ? ul->padded_numel : lo + ul->shard_numel;
        int64_t real_hi = hi < ul->numel ? hi : ul->numel;
        memset(host, 0, zt_train_floats(hi - lo));
        if (real_hi > lo)
            zt_unit_init_range(&t->model->units[u], t->seed, ul->global_index, lo, real_hi, host);
        if (t->mixed)
            zt_convert_host(cast, t->cdt, host, ZT_F32, hi - lo, 1.0f, false);
        void *dst = pol->params_sharded ? t->unit_store[u]
                                        : zt_zero_at(t->params, ul->offset, t->cdt);
        size_t pbytes = zt_train_bytes(hi - lo, t->cdt);
        if (zt_train_nvme_param_swapped(t, u)) {
            st = zt_train_nvme_param_begin(t, u, &dst);
            if (st == ZT_OK)
                memcpy(dst, cast, pbytes);
            if (st == ZT_OK)
                st = zt_train_nvme_param_end(t, u);
        } else {
            placement_put(t, dst, placement_param_loc(t, u), cast, pbytes);
        }
        if (!t->has_master || st != ZT_OK)
            continue;
        /* The master holds the whole unit unless the optimizer is sharded. */
        bool full = !pol->optimizer_sharded;
        const float *own = full ? host
                                : host + (whole ? (int64_t)lay->rank * ul->shard_numel : 0);
        int64_t n = full ? ul->padded_numel : ul->shard_numel;
        float *m = full ? t->master + ul->offset : t->own_m[u];
        if (t->nvme_opt) { /* swapped: the states start at zero too */
            float *states[ZT_TRAINER_MAX_STATES];
            st = zt_train_nvme_piece(t, u, true, &m, states);
            for (int k = 0; st == ZT_OK && k + 1 < t->nvme_plan.opt_tensors; k++)
                memset(states[k], 0, zt_train_floats(n));
            zt_train_nvme_mark_written(t);
        }
        if (st == ZT_OK)
            placement_put(t, m, placement_opt_loc(t), own, zt_train_floats(n));
    }
    free(host);
    if (t->mixed)
        free(cast);
    if (st == ZT_OK)
        st = zt_train_nvme_flush(t);
    return st;
}

void zt_train_views(zt_trainer *t)
{
    const zt_layout *lay = &t->layout;
    const zt_stage_policy *pol = t->policy;
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        int64_t own = ul->offset + (int64_t)lay->rank * ul->shard_numel;
        if (!pol->params_sharded)
            t->own_p[u] = zt_zero_at(t->params, own, t->cdt);
        else if (t->unit_store[u]) /* NULL: swapped to nvme */
            t->own_p[u] = zt_zero_at(t->unit_store[u],
                                     ul->persistent ? (int64_t)lay->rank * ul->shard_numel : 0,
                                     t->cdt);
        else
            t->own_p[u] = NULL;
        if (t->offload_opt) /* NULL: swapped to nvme (zt_train_nvme_grad_piece) */
            t->own_g[u] = t->host_grads ? t->host_grads + ul->part_offset : NULL;
        else
            t->own_g[u] = zt_zero_at(t->grads, pol->grads_sharded ? ul->part_offset : own, t->gdt);
        if (!t->has_master)
            t->own_m[u] = t->own_p[u];
        else if (t->nvme_opt) /* swapped: zt_train_nvme_piece */
            t->own_m[u] = NULL;
        else
            t->own_m[u] = t->master + (pol->optimizer_sharded ? ul->part_offset : own);
    }
}

/* Sum of squares, inf/nan test and in-place scaling of memory where the
 * optimizer works (own_g, own_m): the host when it is offloaded. */
static double placement_opt_sumsq(const zt_trainer *t, const void *x, zt_dtype dt, int64_t n)
{
    return t->offload_opt ? zt_sum_squares_host(x, dt, n) : t->be->sum_squares(t->be, x, dt, n);
}

static bool placement_opt_bad(const zt_trainer *t, const void *x, zt_dtype dt, int64_t n)
{
    return t->offload_opt ? zt_has_inf_nan_host(x, dt, n) : t->be->has_inf_nan(t->be, x, dt, n);
}

static void placement_opt_scale(const zt_trainer *t, float *x, int64_t n, float a)
{
    if (t->offload_opt)
        zt_convert_host(x, ZT_F32, x, ZT_F32, n, a, false);
    else
        t->be->convert(t->be, x, ZT_F32, x, ZT_F32, n, a, false);
}

/* DeepSpeed's overflow check: each rank tests its own slices; all_reduce MIN
 * over the world, so an overflow on any pipeline stage skips the step on
 * every rank. Units are numbered in the whole model. */
zt_status zt_train_first_overflow(zt_trainer *t, int *first)
{
    int n = t->layout.n_units, total = t->whole->n_units;
    bool swapped = zt_train_nvme_grads_swapped(t);
    zt_status st = ZT_OK;
    *first = total;
    for (int u = 0; u < n && *first == total && st == ZT_OK; u++) {
        bool bad = false;
        double sq;
        if (swapped)
            st = zt_train_nvme_grad_stats(t, u, &sq, &bad);
        else
            bad = placement_opt_bad(t, t->own_g[u], t->ogdt, t->layout.units[u].shard_numel);
        if (bad)
            *first = zt_pipe_first_unit(&t->pipe) + u;
    }
    zt_status red = zt_comm_side_all_reduce(t->comm, t->world->comm, first, 1, MPI_INT, MPI_MIN,
                                            "the overflow flag");
    /* Swapped in, a rank may fail: every rank joined the reduction. */
    return swapped ? zt_world_agree(t->world, st == ZT_OK ? red : st, NULL) : red;
}

/* The piece of the optimizer's span that unit u is: the whole unit when the
 * optimizer is not sharded (every rank steps everything), the rank's slice
 * when it is; swapped in when it lives in nvme swap files. */
static zt_status placement_piece(zt_trainer *t, int u, void **g, zt_optim_seg *s)
{
    const zt_unit_layout *ul = &t->layout.units[u];
    if (t->policy->optimizer_sharded) {
        *g = t->own_g[u];
        *s = (zt_optim_seg){.params = t->own_m[u], .offset = ul->part_offset,
                            .numel = ul->shard_numel};
        return t->nvme_opt ? zt_train_nvme_piece(t, u, false, &s->params, s->state) : ZT_OK;
    }
    *g = zt_zero_at(t->grads, ul->offset, t->gdt);
    float *m = t->has_master ? t->master + ul->offset : (float *)t->params + ul->offset;
    *s = (zt_optim_seg){.params = m, .offset = ul->offset, .numel = ul->padded_numel};
    return ZT_OK;
}

/* The rank's slice of unit u where the optimizer works: slices[u], or with
 * slices NULL the fp32 values (own_m, swapped in under nvme). */
static zt_status placement_slice(zt_trainer *t, void *const *slices, int u, const void **out)
{
    if (slices == t->own_g && zt_train_nvme_grads_swapped(t))
        return zt_train_nvme_grad_piece(t, u, (void **)out);
    if (slices) {
        *out = slices[u];
        return ZT_OK;
    }
    void *g;
    zt_optim_seg s;
    ZT_TRY(placement_piece(t, u, &g, &s));
    *out = s.params;
    return ZT_OK;
}

/* Per-unit pointers to optimizer-side memory, summed over the partition group
 * (MiCS replicas hold the same slices), then over the pipeline stages:
 * DeepSpeed's global norm, the same value on every rank. */
zt_status zt_train_slices_sumsq(zt_trainer *t, void *const *slices, zt_dtype dt, double *sq)
{
    *sq = 0.0;
    zt_status st = ZT_OK;
    /* Swapped gradients: each unit's sum from the pass over the file. */
    bool swapped = slices == t->own_g && zt_train_nvme_grads_swapped(t);
    for (int u = 0; u < t->layout.n_units && st == ZT_OK; u++) {
        const void *x = NULL;
        double unit_sq = 0.0;
        bool bad;
        if (swapped) {
            st = zt_train_nvme_grad_stats(t, u, &unit_sq, &bad);
        } else {
            st = placement_slice(t, slices, u, &x);
            if (st == ZT_OK)
                unit_sq = placement_opt_sumsq(t, x, dt, t->layout.units[u].shard_numel);
        }
        *sq += unit_sq;
    }
    if (slices && !swapped) {
        ZT_TRY(zt_train_sum_f64(t->zcomm, t->zcomm->side, sq, 1, "the gradient norm"));
        return zt_pipe_sum_f64(&t->pipe, sq, 1);
    }
    /* Swapped in, a rank may fail: every rank joins the sum, then the
     * failure is agreed on. */
    if (st == ZT_OK)
        st = zt_train_nvme_flush(t);
    zt_status sum = zt_train_sum_f64(t->zcomm, t->zcomm->side, sq, 1, "the gradient norm");
    if (sum == ZT_OK)
        sum = zt_pipe_sum_f64(&t->pipe, sq, 1);
    return zt_world_agree(t->world, st == ZT_OK ? sum : st, NULL);
}

/* Writes the stepped fp32 values of piece s (unit u) back into the
 * parameters, rounded to the compute dtype, across host and device (and into
 * the unit's swap file when its shard is swapped). */
static zt_status placement_write_back(zt_trainer *t, int u, const zt_optim_seg *s)
{
    const zt_backend *be = t->be;
    const zt_unit_layout *ul = &t->layout.units[u];
    void *dst = t->policy->optimizer_sharded ? t->own_p[u]
                                             : zt_zero_at(t->params, ul->offset, t->cdt);
    zt_mem_loc ploc = placement_param_loc(t, u);
    size_t bytes = zt_train_bytes(s->numel, t->cdt);
    bool swapped = zt_train_nvme_param_swapped(t, u);
    if (swapped)
        ZT_TRY(zt_train_nvme_param_begin(t, u, &dst));
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
    return swapped ? zt_train_nvme_param_end(t, u) : ZT_OK;
}

zt_status zt_train_step_piece(zt_trainer *t, int u, zt_optim_seg *s, void *g, float coef,
                              double lr, double b1, double b2)
{
    const zt_backend *be = t->be;
    /* The optimizer reads fp32: fp32 gradients are scaled in place (they
     * are dead after the step), 16-bit ones widened into the scratch. */
    if (t->ogdt != ZT_F32)
        be->convert(be, t->gw, ZT_F32, g, t->ogdt, s->numel, coef, false);
    else if (coef != 1.0f)
        placement_opt_scale(t, g, s->numel, coef);
    s->grads = t->ogdt != ZT_F32 ? t->gw : g;
    zt_optim_step_seg(&t->optim, s, lr, b1, b2);
    return t->has_master ? placement_write_back(t, u, s) : ZT_OK;
}

zt_status zt_train_apply(zt_trainer *t, float coef, double lr, double b1, double b2)
{
    ZT_TRY(zt_train_nvme_begin_step(t));
    if (t->nvme_opt) {
        ZT_TRY(zt_train_nvme_apply(t, coef, lr, b1, b2));
    } else {
        zt_optim_begin_step(&t->optim);
        for (int u = 0; u < t->layout.n_units; u++) {
            void *g;
            zt_optim_seg s;
            ZT_TRY(placement_piece(t, u, &g, &s));
            ZT_TRY(zt_train_step_piece(t, u, &s, g, coef, lr, b1, b2));
        }
    }
    ZT_TRY(zt_train_nvme_end_step(t));
    return t->policy->after_step(&t->stage);
}

/* Host MPI, outside the comm counters: a dump is not training traffic. Each
 * unit of the whole model is collected from the slices of the stage holding
 * it, so no rank needs the whole model in one buffer: the stage's partition
 * group gathers it to its root, which sends it on to world rank 0 (itself,
 * on the first stage); slices[u] (shard_numel of dt) lives where the
 * optimizer works (own_g and own_m both do). Every rank walks every unit, so
 * each unit's agreement covers the world. */
zt_status zt_train_dump_slices(zt_trainer *t, void *const *slices, zt_dtype dt, float alpha,
                               const char *path)
{
    const zt_layout *lay = &t->layout;
    const zt_pipe *pipe = &t->pipe;
    const zt_model *whole = t->whole;
    /* Every partition group gathers its copy to its own root (MiCS has
     * several groups per stage); the first group's root sends it on. */
    bool gatherer = t->zcomm->rank == 0;
    bool root = gatherer && pipe->dp_rank == 0, writer = t->world->rank == 0;
    zt_status st = ZT_OK;
    FILE *f = NULL;
    if (writer && !(f = fopen(path, "wb")))
        st = zt_fail(ZT_ERR_IO, "check that the directory exists and is writable",
                     "cannot write dump %s: %s", path, strerror(errno));
    int64_t max_unit = 0;
    for (int g = 0; g < whole->n_units; g++)
        max_unit = whole->units[g].param_numel > max_unit ? whole->units[g].param_numel : max_unit;
    int64_t shard_max = lay->max_unit_numel / lay->world_size;
    int64_t unit_cap = lay->max_unit_numel > max_unit ? lay->max_unit_numel : max_unit;
    void *raw = malloc(zt_train_bytes(shard_max, dt));
    float *mine = malloc(zt_train_floats(shard_max));
    float *unit = gatherer || writer ? malloc(zt_train_floats(unit_cap)) : NULL;
    if (!raw || !mine || ((gatherer || writer) && !unit))
        st = zt_fail(ZT_ERR_OOM, "", "cannot stage one unit for the dump");
    st = zt_world_agree(t->world, st, NULL);
    int first = zt_pipe_first_unit(pipe);
    for (int g = 0; g < whole->n_units && st == ZT_OK; g++) {
        int u = g - first, owner = zt_pipe_unit_stage(pipe, g);
        int64_t numel = whole->units[g].param_numel;
        bool held = owner == pipe->stage;
        const zt_unit_layout *ul = held ? &lay->units[u] : NULL;
        if (held) {
            const void *x = NULL;
            st = placement_slice(t, slices, u, &x);
            if (st == ZT_OK) {
                placement_get(t, raw, x, placement_opt_loc(t),
                              zt_train_bytes(ul->shard_numel, dt));
                zt_convert_host(mine, ZT_F32, raw, dt, ul->shard_numel, alpha, false);
            }
        }
        st = zt_world_agree(t->world, st, NULL);
        if (st != ZT_OK)
            break;
        if (held) {
            if (MPI_Gather(mine, (int)ul->shard_numel, MPI_FLOAT, unit, (int)ul->shard_numel,
                           MPI_FLOAT, 0, t->zcomm->side) != MPI_SUCCESS)
                st = zt_fail(ZT_ERR_COMM, "a peer rank may have died", "gathering the dump failed");
            if (st == ZT_OK && root && !writer &&
                MPI_Send(unit, (int)numel, MPI_FLOAT, 0, 0, t->world->comm) != MPI_SUCCESS)
                st = zt_fail(ZT_ERR_COMM, "a peer rank may have died",
                             "sending unit %d to rank 0 for the dump failed", g);
        }
        if (st == ZT_OK && writer && !held &&
            MPI_Recv(unit, (int)numel, MPI_FLOAT, zt_pipe_world_rank(pipe, owner, 0), 0,
                     t->world->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            st = zt_fail(ZT_ERR_COMM, "a peer rank may have died",
                         "receiving unit %d for the dump failed", g);
        if (st == ZT_OK && writer && fwrite(unit, sizeof(float), (size_t)numel, f) != (size_t)numel)
            st = zt_fail(ZT_ERR_IO, "check free disk space", "writing dump %s failed", path);
        st = zt_world_agree(t->world, st, NULL);
    }
    if (f && fclose(f) != 0 && st == ZT_OK)
        st = zt_fail(ZT_ERR_IO, "check free disk space", "closing %s failed: %s", path,
                     strerror(errno));
    if (st == ZT_OK)
        st = zt_train_nvme_flush(t);
    free(raw);
    free(mine);
    free(unit);
    return zt_world_agree(t->world, st, NULL);
}

/* The fp32 values: own_m, or swapped in piece by piece (NULL slices). */
static void *const *placement_values(const zt_trainer *t)
{
    return t->nvme_opt ? NULL : (void *const *)t->own_m;
}

double zt_trainer_param_norm(zt_trainer *t)
{
    double sq = 0.0;
    return zt_train_slices_sumsq(t, placement_values(t), ZT_F32, &sq) == ZT_OK ? sqrt(sq) : NAN;
}

zt_status zt_trainer_dump_params(zt_trainer *t, const char *path)
{
    return zt_train_dump_slices(t, placement_values(t), ZT_F32, 1.0f, path);
}

zt_status zt_trainer_unit_span(zt_trainer *t, int u, zt_trainer_span *s)
{
    void *g;
    zt_optim_seg seg;
    memset(s, 0, sizeof *s);
    ZT_TRY(placement_piece(t, u, &g, &seg));
    int64_t span = zt_stage_optim_numel(t->policy, &t->layout);
    s->values = seg.params;
    s->n_states = (int)zt_optim_state_numel(&t->cfg->optimizer, 1);
    for (int k = 0; k < s->n_states; k++)
        s->state[k] = seg.state[0] ? seg.state[k] : t->optim_state + k * span + seg.offset;
    s->lo = zt_stage_optim_lo(t->policy, &t->layout, u);
    s->numel = seg.numel;
    s->loc = placement_opt_loc(t);
    return ZT_OK;
}

void zt_trainer_span_written(zt_trainer *t)
{
    if (t->nvme_opt)
        zt_train_nvme_mark_written(t);
}

zt_status zt_trainer_refresh_params(zt_trainer *t)
{
    ZT_TRY(zt_train_nvme_flush(t));
    for (int u = 0; t->has_master && u < t->layout.n_units; u++) {
        void *g;
        zt_optim_seg seg;
        ZT_TRY(placement_piece(t, u, &g, &seg));
        ZT_TRY(placement_write_back(t, u, &seg));
    }
    ZT_TRY(zt_train_nvme_flush(t));
    ZT_TRY(zt_train_nvme_end_step(t));
    ZT_TRY(t->policy->after_step(&t->stage));
    return t->be->check(t->be);
}
