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
    zt_swapper opt, param;
    bool opt_on, param_on;
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
    int64_t bytes[ZT_NVME_MAX_TENSORS];
    for (int j = 0; j < k; j++)
        bytes[j] = p->opt_file_bytes;
    ZT_TRY(zt_swap_dir_open(&n->opt_dir, t->cfg->zero.offload_optimizer.nvme_path, sub,
                            t->world->rank, p->opt_names, bytes, k));
    zt_swap_extent *ext = malloc((size_t)(p->n_groups * k) * sizeof *ext);
    if (!ext)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the sub-group extents");
    for (int g = 0; g < p->n_groups; g++)
        for (int j = 0; j < k; j++)
            ext[g * k + j] = (zt_swap_extent){j, p->groups[g].file_offset, p->groups[g].bytes};
    zt_status st = zt_swap_init(&n->opt, n->aio, n->opt_dir.files, k, ext, p->n_groups, k,
                                p->opt_slots, p->group_bytes, nvme_aligned(t->swap_opt_mem));
    free(ext);
    n->opt_on = st == ZT_OK;
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
        if (n->param_on)
            zt_swap_free(&n->param);
        zt_swap_dir_close(&n->opt_dir);
        zt_swap_dir_close(&n->param_dir);
        zt_aio_free(n->aio);
        free(n->param_item);
        free(n);
        t->nvme = NULL;
    }
    zt_nvme_plan_free(&t->nvme_plan);
}

/* ------------------------------------------------------------------ the step */

zt_status zt_train_nvme_begin_step(zt_trainer *t)
{
    zt_train_nvme *n = t->nvme;
    if (!n)
        return ZT_OK;
    ZT_TRY(zt_train_nvme_flush(t));
    if (n->opt_on)
        ZT_TRY(zt_swap_check(&n->opt));
    if (n->param_on)
        ZT_TRY(zt_swap_check(&n->param));
    return ZT_OK;
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
    for (int g = 0; g < p->n_groups; g++) {
        void *tensors[ZT_SWAP_MAX_TENSORS];
        ZT_TRY(zt_swap_get(&n->opt, g, ZT_SWAP_UPDATE, tensors));
        if (o->pipeline_read && g + 1 < p->n_groups)
            ZT_TRY(zt_swap_prefetch(&n->opt, g + 1));
        for (int u = p->groups[g].u0; u < p->groups[g].u1; u++) {
            zt_optim_seg s = nvme_seg(t, u, tensors);
            ZT_TRY(zt_train_step_piece(t, u, &s, t->own_g[u], coef, lr, b1, b2));
        }
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
    s->swap_bytes = p->opt_swap_bytes + p->param_swap_bytes;
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
    if (n->param_on)
        s->param_io = n->param.stats;
}
