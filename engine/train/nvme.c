/*
 * nvme: the trainer's side of the nvme offload (ZeRO-Infinity, docs/nvme.md)
 * on engine/nvme. The plan (engine/nvme/plan.h) says what is swapped; this
 * file opens the rank's swap folders, runs the optimizer step sub-group by
 * sub-group through the optimizer's swapper, gives checkpoints and dumps the
 * swapped state unit by unit, stores new parameter shards and serves them to
 * the stage-3 gather window.
 *
 * The step (docs/nvme.md has the timeline): for each sub-group g, its master
 * weights and states are got from the swapper (a read, unless a slot holds
 * them), the read of g + 1 is started (pipeline_read), every unit of g is
 * stepped exactly as the CPU offload steps it (zt_train_step_piece: the same
 * host gradient, the same kernel, the same write-back) and g is put back with
 * its write in flight, waited for at once unless pipeline_write. So the
 * result is bit-identical to offload_optimizer "cpu"; only where the values
 * rest between steps differs.
 *
 * Gradients: the fp32 partition lives in the "gradient" file of the
 * optimizer folder, behind grad_slots buffers of one sub-group each. The
 * reduction asks for a unit's slice as it delivers (nvme_grad_deliver): the
 * sub-group is got (overwritten on the first touch of a pass that assigns,
 * read and added into otherwise) and held until the reduction moves to
 * another sub-group, then written back with the write in flight. Gradient
 * accumulation is the cpu offload's: the same fp32 adds, in the same order,
 * only with the sum resting in the file between micro-steps. As each
 * sub-group leaves the reduction whole, its units' sums of squares and
 * inf/nan tests are taken with the cpu offload's functions, so the overflow
 * check and the clipping norm of the step need no read of their own (a pass
 * over the file, last sub-group first, computes them where a reduction
 * pass did not); the step then reads each sub-group's gradients with its
 * state, read ahead with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/nvme/aio.h"
#include "engine/nvme/swapdir.h"
#include "engine/nvme/swapper.h"
#include "engine/train/trainer_impl.h"

struct zt_train_nvme {
    zt_aio *aio;
    zt_swap_dir opt_dir, param_dir;
    zt_swapper opt, grad, param;
    bool opt_on, grad_on, param_on;
    /* Gradients: the sub-group held for the reduction or a piece (-1:
     * none) and whether it changed; per sub-group, the reduction pass that
     * last touched it (an assigning pass overwrites on the first touch). */
    int grad_group;
    bool grad_dirty;
    int64_t grad_pass, *grad_stamp;
    /* Per sub-group, the elements the current pass has delivered: when they
     * are all there, the held sub-group's units get their statistics as it
     * is put back (grad_final); groups_final counts those of the pass. */
    int64_t *grad_count;
    bool grad_final;
    int groups_final;
    /* Per unit, of the gradients as they are now (valid while grad_scanned):
     * from the last reduction pass, or a pass over the file. */
    bool grad_scanned;
    double *grad_sumsq;
    bool *grad_bad;
    int *param_item;      /* per unit: its item in the parameter swapper, or -1 */
    /* Piece access (zt_train_nvme_piece): the sub-group held, or -1. */
    int piece_group;
    bool piece_written;
    void *piece[ZT_SWAP_MAX_TENSORS];
};

zt_status zt_train_nvme_plan(zt_trainer *t)
{
    zt_nvme_plan_free(&t->nvme_plan);
    if (!t->nvme_opt && !t->nvme_param)
        return ZT_OK;
    return zt_nvme_plan_init(&t->nvme_plan, t->cfg, &t->layout, t->nvme_opt, t->nvme_param,
                             t->cdt);
}

static void *nvme_aligned(void *p)
{
    uintptr_t a = ((uintptr_t)p + ZT_AIO_ALIGN - 1) / ZT_AIO_ALIGN * ZT_AIO_ALIGN;
    return (void *)a;
}

static zt_status nvme_init_opt(zt_trainer *t, zt_train_nvme *n)
{
    const zt_nvme_plan *p = &t->nvme_plan;
    int k = p->opt_tensors;
    char sub[64];
    snprintf(sub, sizeof sub, "zero_stage_%d/optimizer", t->cfg->zero.stage);
    /* The optimizer's files, then the gradient file, in one folder. */
    int64_t bytes[ZT_NVME_MAX_TENSORS + 1];
    const char *names[ZT_NVME_MAX_TENSORS + 1];
    for (int j = 0; j < k; j++) {
        bytes[j] = p->opt_file_bytes;
        names[j] = p->opt_names[j];
    }
    bytes[k] = p->grad_file_bytes;
    names[k] = "gradient";
    ZT_TRY(zt_swap_dir_open(&n->opt_dir, t->cfg->zero.offload_optimizer.nvme_path, sub,
                            t->world->rank, names, bytes, k + 1));
    zt_swap_extent *ext = malloc((size_t)(p->n_groups * k) * sizeof *ext);
    if (!ext)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the sub-group extents");
    for (int g = 0; g < p->n_groups; g++)
        for (int j = 0; j < k; j++)
            ext[g * k + j] = (zt_swap_extent){j, p->groups[g].file_offset, p->groups[g].bytes};
    zt_status st = zt_swap_init(&n->opt, n->aio, n->opt_dir.files, k, ext, p->n_groups, k,
                                p->opt_slots, p->group_bytes, nvme_aligned(t->swap_opt_mem));
    n->opt_on = st == ZT_OK;
    for (int g = 0; g < p->n_groups; g++)
        ext[g] = (zt_swap_extent){0, p->groups[g].file_offset, p->groups[g].bytes};
    if (st == ZT_OK)
        st = zt_swap_init(&n->grad, n->aio, n->opt_dir.files + k, 1, ext, p->n_groups, 1,
                          p->grad_slots, p->group_bytes, nvme_aligned(t->swap_grad_mem));
    free(ext);
    n->grad_on = st == ZT_OK;
    n->grad_stamp = calloc((size_t)p->n_groups, sizeof *n->grad_stamp);
    n->grad_count = calloc((size_t)p->n_groups, sizeof *n->grad_count);
    n->grad_sumsq = calloc((size_t)t->layout.n_units, sizeof *n->grad_sumsq);
    n->grad_bad = calloc((size_t)t->layout.n_units, sizeof *n->grad_bad);
    if (st == ZT_OK && (!n->grad_stamp || !n->grad_count || !n->grad_sumsq || !n->grad_bad))
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the gradient swap tables");
    return st;
}

static zt_status nvme_init_param(zt_trainer *t, zt_train_nvme *n)
{
    const zt_nvme_plan *p = &t->nvme_plan;
    const zt_layout *lay = &t->layout;
    int m = p->n_param_swapped;
    char sub[64], (*names)[32] = calloc((size_t)m, sizeof *names);
    const char **name_ptrs = calloc((size_t)m, sizeof *name_ptrs);
    int64_t *bytes = calloc((size_t)m, sizeof *bytes);
    zt_swap_extent *ext = calloc((size_t)m, sizeof *ext);
    n->param_item = malloc((size_t)lay->n_units * sizeof *n->param_item);
    zt_status st = ZT_OK;
    if (!names || !name_ptrs || !bytes || !ext || !n->param_item)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the parameter swap tables");
    for (int u = 0, i = 0; st == ZT_OK && u < lay->n_units; u++) {
        n->param_item[u] = p->param_swapped[u] ? i : -1;
        if (!p->param_swapped[u])
            continue;
        snprintf(names[i], sizeof names[i], "%d_param", u);
        name_ptrs[i] = names[i];
        bytes[i] = zt_nvme_pad(lay->units[u].shard_numel * (int64_t)zt_dtype_size(t->cdt));
        ext[i] = (zt_swap_extent){i, 0, bytes[i]};
        i++;
    }
    /* DeepSpeed's folder names: float16params, bfloat16params. */
    const char *dt = t->cdt == ZT_F16 ? "float16" : t->cdt == ZT_BF16 ? "bfloat16" : "float32";
    snprintf(sub, sizeof sub, "zero_stage_3/%sparams", dt);
    if (st == ZT_OK)
        st = zt_swap_dir_open(&n->param_dir, t->cfg->zero.offload_param.nvme_path, sub,
                              t->world->rank, name_ptrs, bytes, m);
    if (st == ZT_OK)
        st = zt_swap_init(&n->param, n->aio, n->param_dir.files, m, ext, m, 1, p->param_buffers,
                          p->param_buffer_bytes, nvme_aligned(t->swap_param_mem));
    n->param_on = st == ZT_OK;
    free(names);
    free(name_ptrs);
    free(bytes);
    free(ext);
    return st;
}

zt_status zt_train_nvme_init(zt_trainer *t)
{
    const zt_nvme_plan *p = &t->nvme_plan;
    if (!p->opt && p->n_param_swapped == 0)
        return ZT_OK;
    zt_train_nvme *n = calloc(1, sizeof *n);
    if (!n)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the nvme offload");
    n->piece_group = -1;
    n->grad_group = -1;
    n->grad_pass = 1;
    t->nvme = n;
    ZT_TRY(zt_aio_init(&n->aio, &t->cfg->aio, ZT_AIO_AUTO));
    if (p->opt)
        ZT_TRY(nvme_init_opt(t, n));
    if (p->n_param_swapped > 0)
        ZT_TRY(nvme_init_param(t, n));
    return ZT_OK;
}

void zt_train_nvme_free(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    if (n) {
        (void)zt_train_nvme_flush(t);
        if (n->opt_on)
            zt_swap_free(&n->opt);
        if (n->grad_on)
            zt_swap_free(&n->grad);
        if (n->param_on)
            zt_swap_free(&n->param);
        zt_swap_dir_close(&n->opt_dir);
        zt_swap_dir_close(&n->param_dir);
        zt_aio_free(n->aio);
        free(n->param_item);
        free(n->grad_stamp);
        free(n->grad_count);
        free(n->grad_sumsq);
        free(n->grad_bad);
        free(n);
        t->nvme = NULL;
    }
    zt_nvme_plan_free(&t->nvme_plan);
}

/* ------------------------------------------------------------------ gradients */

/* Unit u's slice in its sub-group's gradient buffer g. */
static void *nvme_grad_at(const zt_trainer *t, int u, void *g)
{
    const zt_nvme_plan *p = &t->nvme_plan;
    return (float *)g + (t->layout.units[u].part_offset - p->groups[p->group_of[u]].lo);
}

static zt_status nvme_grad_get(zt_trainer *t, int g, zt_swap_mode mode, void **buf)
{
    return zt_swap_get(&t->nvme->grad, g, mode, buf);
}

/* Every unit of sub-group g: its sum of squares and inf/nan test, with the
 * functions the cpu offload uses on the same slices (the same bits). */
static void nvme_grad_unit_stats(zt_trainer *t, int g, const void *buf)
{
    zt_train_nvme *n = t->nvme;
    const zt_nvme_group *grp = &t->nvme_plan.groups[g];
    for (int u = grp->u0; u < grp->u1; u++) {
        const float *x = nvme_grad_at(t, u, (void *)buf);
        int64_t numel = t->layout.units[u].shard_numel;
        n->grad_bad[u] = zt_has_inf_nan_host(x, ZT_F32, numel);
        n->grad_sumsq[u] = zt_sum_squares_host(x, ZT_F32, numel);
    }
}

/* Puts the held sub-group back, written when it changed; one the reduction
 * has delivered whole gets its units' statistics first. */
static zt_status nvme_grad_release(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    if (!n || n->grad_group < 0)
        return ZT_OK;
    int g = n->grad_group;
    bool write = n->grad_dirty;
    if (n->grad_final) {
        nvme_grad_unit_stats(t, g, n->grad.slots[n->grad.where[g]].mem);
        n->groups_final++;
    }
    n->grad_group = -1;
    n->grad_dirty = false;
    n->grad_final = false;
    return zt_swap_put(&n->grad, g, write);
}

/* Holds sub-group g's gradients: dirty, for the reduction (mode says how
 * the buffer is got), else to read. */
static zt_status nvme_grad_hold(zt_trainer *t, int g, zt_swap_mode mode, bool dirty, void **buf)
{
    zt_train_nvme *n = t->nvme;
    if (n->grad_group != g) {
        ZT_TRY(nvme_grad_release(t));
        ZT_TRY(nvme_grad_get(t, g, mode, buf));
        n->grad_group = g;
    } else {
        *buf = n->grad.slots[n->grad.where[g]].mem;
    }
    n->grad_dirty = n->grad_dirty || dirty;
    return ZT_OK;
}

static zt_status nvme_grad_deliver(void *ctx, int u, int64_t numel, bool accumulate, void **slice)
{
    zt_trainer *t = ctx;
    zt_train_nvme *n = t->nvme;
    int g = t->nvme_plan.group_of[u];
    bool first = n->grad_stamp[g] != n->grad_pass;
    if (first) {
        n->grad_stamp[g] = n->grad_pass;
        n->grad_count[g] = 0;
    }
    n->grad_scanned = false;
    void *buf;
    /* A pass that assigns writes every element: its first touch of a
     * sub-group reads nothing. */
    ZT_TRY(nvme_grad_hold(t, g, first && !accumulate ? ZT_SWAP_OVERWRITE : ZT_SWAP_UPDATE, true,
                          &buf));
    n->grad_count[g] += numel;
    /* The caller writes these numel now: the sub-group is whole once it
     * moves on (nvme_grad_release). */
    n->grad_final = n->grad_count[g] == t->nvme_plan.groups[g].numel;
    *slice = nvme_grad_at(t, u, buf);
    return ZT_OK;
}

static zt_status nvme_grad_delivered(void *ctx)
{
    zt_trainer *t = ctx;
    zt_train_nvme *n = t->nvme;
    zt_status st = nvme_grad_release(t);
    /* Every sub-group came whole out of this pass: the statistics are the
     * gradients' as they are now, and the step needs no pass of its own. */
    n->grad_scanned = st == ZT_OK && n->groups_final == t->nvme_plan.n_groups;
    n->groups_final = 0;
    n->grad_pass++;
    return st;
}

bool zt_train_nvme_grads_swapped(const zt_trainer *t) { return t->nvme && t->nvme->grad_on; }

zt_zero_dest_source zt_train_nvme_grad_source(zt_trainer *t)
{
    zt_zero_dest_source s = {0};
    if (zt_train_nvme_grads_swapped(t))
        s = (zt_zero_dest_source){nvme_grad_deliver, nvme_grad_delivered, t};
    return s;
}

zt_status zt_train_nvme_grad_piece(zt_trainer *t, int u, void **g)
{
    void *buf;
    ZT_TRY(nvme_grad_hold(t, t->nvme_plan.group_of[u], ZT_SWAP_READ, false, &buf));
    *g = nvme_grad_at(t, u, buf);
    return ZT_OK;
}

/* Every unit's sum of squares and inf/nan test, last sub-group first. */
static zt_status nvme_grad_scan(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    const zt_nvme_plan *p = &t->nvme_plan;
    ZT_TRY(nvme_grad_release(t));
    for (int g = p->n_groups - 1; g >= 0; g--) {
        void *buf;
        ZT_TRY(nvme_grad_get(t, g, ZT_SWAP_READ, &buf));
        if (g > 0)
            ZT_TRY(zt_swap_prefetch(&n->grad, g - 1));
        nvme_grad_unit_stats(t, g, buf);
        ZT_TRY(zt_swap_put(&n->grad, g, false));
    }
    n->grad_scanned = true;
    return ZT_OK;
}

zt_status zt_train_nvme_grad_stats(zt_trainer *t, int u, double *sumsq, bool *bad)
{
    if (!t->nvme->grad_scanned)
        ZT_TRY(nvme_grad_scan(t));
    *sumsq = t->nvme->grad_sumsq[u];
    *bad = t->nvme->grad_bad[u];
    return ZT_OK;
}

/* ------------------------------------------------------------------ the step */

zt_status zt_train_nvme_begin_step(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    if (!n)
        return ZT_OK;
    return zt_train_nvme_flush(t);
}

zt_status zt_train_nvme_end_step(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    if (!n)
        return ZT_OK;
    if (n->param_on)
        ZT_TRY(zt_swap_sync(&n->param));
    if (!n->opt_on)
        return ZT_OK;
    ZT_TRY(zt_swap_sync(&n->opt));
    ZT_TRY(zt_swap_sync(&n->grad));
    /* The next step starts at sub-group 0: its read can run during the
     * forward and backward passes. */
    if (t->cfg->zero.offload_optimizer.pipeline_read)
        ZT_TRY(zt_swap_prefetch(&n->opt, 0));
    return ZT_OK;
}

/* Unit u's piece in the tensors of its sub-group (k tensors of the plan). */
static zt_optim_seg nvme_seg(const zt_trainer *t, int u, void *const *tensors)
{
    const zt_unit_layout *ul = &t->layout.units[u];
    const zt_nvme_plan *p = &t->nvme_plan;
    int64_t at = ul->part_offset - p->groups[p->group_of[u]].lo;
    zt_optim_seg s = {.params = (float *)tensors[0] + at,
                      .offset = ul->part_offset,
                      .numel = ul->shard_numel};
    for (int j = 1; j < p->opt_tensors; j++)
        s.state[j - 1] = (float *)tensors[j] + at;
    return s;
}

zt_status zt_train_nvme_apply(zt_trainer *t, float coef, double lr, double b1, double b2)
{
    zt_train_nvme *n = t->nvme;
    const zt_nvme_plan *p = &t->nvme_plan;
    const zt_offload_config *o = &t->cfg->zero.offload_optimizer;
    zt_optim_begin_step(&t->optim);
    /* The reduction's writes finish first: a buffer with a write in flight
     * cannot take a read ahead. */
    ZT_TRY(nvme_grad_release(t));
    ZT_TRY(zt_swap_sync(&n->grad));
    for (int g = 0; g < p->n_groups; g++) {
        void *tensors[ZT_SWAP_MAX_TENSORS], *grad;
        ZT_TRY(zt_swap_get(&n->opt, g, ZT_SWAP_UPDATE, tensors));
        /* UPDATE: the step scales them in place, so a write of them still
         * in flight is finished first. */
        ZT_TRY(nvme_grad_get(t, g, ZT_SWAP_UPDATE, &grad));
        if (o->pipeline_read && g + 1 < p->n_groups) {
            ZT_TRY(zt_swap_prefetch(&n->opt, g + 1));
            ZT_TRY(zt_swap_prefetch(&n->grad, g + 1));
        }
        for (int u = p->groups[g].u0; u < p->groups[g].u1; u++) {
            zt_optim_seg s = nvme_seg(t, u, tensors);
            ZT_TRY(zt_train_step_piece(t, u, &s, nvme_grad_at(t, u, grad), coef, lr, b1, b2));
        }
        /* The step scaled the gradients in the buffer: they are dead, and
         * the buffer must not serve them again. */
        ZT_TRY(zt_swap_put(&n->grad, g, false));
        ZT_TRY(zt_swap_drop(&n->grad, g));
        ZT_TRY(zt_swap_put(&n->opt, g, true));
        if (!o->pipeline_write)
            ZT_TRY(zt_swap_flush(&n->opt, g));
    }
    return ZT_OK;
}

/* ------------------------------------------------------------------ pieces */

zt_status zt_train_nvme_piece(zt_trainer *t, int u, bool overwrite, float **values,
                              float **states)
{
    zt_train_nvme *n = t->nvme;
    int g = t->nvme_plan.group_of[u];
    if (n->piece_group != g) {
        ZT_TRY(zt_train_nvme_flush(t));
        ZT_TRY(zt_swap_get(&n->opt, g, overwrite ? ZT_SWAP_OVERWRITE : ZT_SWAP_UPDATE,
                           n->piece));
        n->piece_group = g;
    }
    zt_optim_seg s = nvme_seg(t, u, n->piece);
    *values = s.params;
    for (int j = 0; j + 1 < t->nvme_plan.opt_tensors; j++)
        states[j] = s.state[j];
    return ZT_OK;
}

void zt_train_nvme_mark_written(zt_trainer *t) { t->nvme->piece_written = true; }

zt_status zt_train_nvme_flush(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    if (n)
        ZT_TRY(nvme_grad_release(t));
    if (!n || n->piece_group < 0)
        return ZT_OK;
    int g = n->piece_group;
    bool write = n->piece_written;
    n->piece_group = -1;
    n->piece_written = false;
    ZT_TRY(zt_swap_put(&n->opt, g, write));
    return zt_swap_flush(&n->opt, g);
}

/* ------------------------------------------------------------------ parameters */

bool zt_train_nvme_param_swapped(const zt_trainer *t, int u)
{
    return t->nvme && t->nvme->param_on && t->nvme->param_item[u] >= 0;
}

zt_status zt_train_nvme_param_begin(zt_trainer *t, int u, void **buf)
{
    return zt_swap_get(&t->nvme->param, t->nvme->param_item[u], ZT_SWAP_OVERWRITE, buf);
}

zt_status zt_train_nvme_param_end(zt_trainer *t, int u)
{
    return zt_swap_put(&t->nvme->param, t->nvme->param_item[u], true);
}

/* The gather's source: unit u's shard, and reads of the swapped units the
 * window goes to next, as many as the other buffers hold. */
static zt_status nvme_shard_get(void *ctx, int u, zt_gather_dir dir, const void **shard)
{
    zt_trainer *t = ctx;
    zt_train_nvme *n = t->nvme;
    void *buf;
    ZT_TRY(zt_swap_get(&n->param, n->param_item[u], ZT_SWAP_READ, &buf));
    *shard = buf;
    if (dir == ZT_GATHER_RECOMPUTE)
        return ZT_OK;
    int step = dir == ZT_GATHER_FWD ? 1 : -1, ahead = 0;
    for (int v = u + step; v >= 0 && v < t->layout.n_units && ahead + 1 < n->param.n_slots;
         v += step)
        if (n->param_item[v] >= 0) {
            ZT_TRY(zt_swap_prefetch(&n->param, n->param_item[v]));
            ahead++;
        }
    return ZT_OK;
}

static void nvme_shard_put(void *ctx, int u)
{
    zt_trainer *t = ctx;
    (void)zt_swap_put(&t->nvme->param, t->nvme->param_item[u], false);
}

zt_zero_shard_source zt_train_nvme_shard_source(zt_trainer *t)
{
    zt_zero_shard_source s = {0};
    if (t->nvme && t->nvme->param_on)
        s = (zt_zero_shard_source){nvme_shard_get, nvme_shard_put, t};
    return s;
}

/* ------------------------------------------------------------------ stats */

void zt_trainer_nvme_stats_get(const zt_trainer *t, zt_trainer_nvme_stats *s)
{
    memset(s, 0, sizeof *s);
    const zt_train_nvme *n = t->nvme;
    const zt_nvme_plan *p = &t->nvme_plan;
    s->optimizer = p->opt;
    s->param = p->param;
    s->n_groups = p->n_groups;
    s->opt_slots = p->opt_slots;
    s->n_param_swapped = p->n_param_swapped;
    s->param_buffers = p->param_buffers;
    s->param_in_cpu_numel = p->param_in_cpu_numel;
    s->disk_bytes = p->disk_bytes;
    if (p->opt) {
        s->master_file_bytes = p->opt_file_bytes;
        s->optim_file_bytes = (p->opt_tensors - 1) * p->opt_file_bytes;
    }
    s->param_file_bytes = p->param_file_bytes;
    s->swap_bytes = zt_nvme_plan_swap_bytes(p);
    s->grad_file_bytes = p->opt ? p->grad_file_bytes : 0;
    if (!n)
        return;
    s->engine = zt_aio_engine_name(n->aio);
    s->direct = true;
    for (int i = 0; i < n->opt_dir.n_files; i++)
        s->direct = s->direct && n->opt_dir.files[i].direct;
    for (int i = 0; i < n->param_dir.n_files; i++)
        s->direct = s->direct && n->param_dir.files[i].direct;
    s->opt_dir = n->opt_on ? n->opt_dir.dir : NULL;
    s->param_dir = n->param_on ? n->param_dir.dir : NULL;
    if (n->opt_on)
        s->opt_io = n->opt.stats;
    if (n->grad_on)
        s->grad_io = n->grad.stats;
    if (n->param_on)
        s->param_io = n->param.stats;
}
