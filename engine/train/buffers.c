/*
 * buffers: the plan of every buffer the trainer holds, one list walked twice
 * (planned, then carved out of the reservation) so plan and use cannot
 * disagree; --estimate-memory walks the same list for other stages and world
 * sizes (zt_trainer_plan). The model states follow the stage policy's
 * properties; zt_trainer_stage_shape gives its formulas the same run.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checked.h"
#include "engine/train/trainer_impl.h"
#include "engine/zero/allgather.h"

int64_t zt_train_max_unit_field(const zt_model *m, size_t field)
{
    int64_t w = 0;
    for (int u = 0; u < m->n_units; u++) {
        int64_t v = *(const int64_t *)((const char *)&m->units[u] + field);
        w = v > w ? v : w;
    }
    return w;
}

/* The widest activation gradient a dact buffer holds: every unit's input
 * and output gradient, less the logits' when this stage computes the loss
 * and writes its gradient over the logits (model->loss_in_place), which keeps
 * a (rows, vocabulary) buffer out of WORK. */
static int64_t buffers_max_dact_numel(const zt_trainer *t, const zt_model *m)
{
    bool loss_here = !zt_pipe_active(&t->pipe) || zt_pipe_has_loss(&t->pipe);
    int64_t w = zt_train_max_unit_field(m, offsetof(zt_unit, in_numel));
    for (int u = 0; u < m->n_units; u++) {
        int64_t out = m->units[u].out_numel;
        if ((u < m->n_units - 1 || !m->loss_in_place || !loss_here) && out > w)
            w = out;
    }
    return m->in_numel > w ? m->in_numel : w;
}

/* Host logits a forward-only pass reads back: every row of a classification
 * batch, or the one position a language model samples from. */
static size_t buffers_logits_host_bytes(zt_trainer *t, const zt_model *m, int64_t micro)
{
    if (m->labels_per_token)
        return zt_train_plan_bytes(t, m->logits_ld, 1, sizeof(float));
    int64_t rows = 0;
    if (!zt_checked_mul(micro, m->labels_numel, &rows))
        t->plan_overflow = true;
    return zt_train_plan_bytes(t, rows, m->logits_ld, sizeof(float));
}

zt_status zt_train_buf(zt_memory *mem, bool reserved, zt_mem_loc loc, zt_mem_class cls,
                       size_t bytes, void *out)
{
    if (!reserved) {
        zt_memory_plan(mem, loc, cls, bytes);
        return ZT_OK;
    }
    return zt_arena_alloc(zt_memory_arena(mem, loc, cls), bytes, (void **)out);
}

/* Model states (PARAMS, GRADS, MASTER, OPTIM) where the stage keeps them. */
static zt_status buffers_model_states(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_stage_policy *pol = t->policy;
    const zt_layout *lay = &t->layout;
    zt_dtype c = t->cdt;
    zt_mem_loc opt_loc = t->offload_opt ? ZT_MEM_HOST : ZT_MEM_DEVICE;
    zt_mem_loc shard_loc = t->offload_param ? ZT_MEM_HOST : ZT_MEM_DEVICE;

    if (!pol->params_sharded) {
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS,
                            zt_train_plan_bytes(t, lay->padded_numel, 1, zt_dtype_size(c)), &t->params));
    } else {
        for (int u = 0; u < lay->n_units; u++) {
            const zt_unit_layout *ul = &lay->units[u];
            /* Swapped to nvme: the shard is in a file (and a SWAP buffer). */
            if (t->nvme_plan.param_swapped && t->nvme_plan.param_swapped[u]) {
                t->unit_store[u] = NULL;
                continue;
            }
            ZT_TRY(zt_train_buf(mem, reserved, ul->persistent ? ZT_MEM_DEVICE : shard_loc,
                                ZT_MEM_PARAMS,
                                zt_train_plan_bytes(t, ul->persistent ? ul->padded_numel
                                                                   : ul->shard_numel,
                                                    1, zt_dtype_size(c)),
                                &t->unit_store[u]));
        }
        int64_t h = t->cfg->zero.zero_hpz_partition_size;
        for (int u = 0; h > 1 && u < lay->n_units; u++)
            if (!lay->units[u].persistent)
                ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS,
                                    zt_train_plan_bytes(t, lay->units[u].padded_numel / h, 1, zt_dtype_size(c)),
                                    &t->secondary[u]));
    }
    /* Offloaded, a sharded gradient partition lives on the host only. */
    if (!pol->grads_sharded || !t->offload_opt)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_GRADS,
                            zt_train_plan_bytes(t,
                                                pol->grads_sharded ? lay->partition_numel
                                                                   : lay->padded_numel,
                                                1, zt_dtype_size(t->gdt)),
                            &t->grads));
    /* Swapped with the optimizer (nvme), the partition is in the gradient
     * file and its SWAP buffers. */
    if (t->offload_opt && !t->nvme_opt)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_GRADS,
                            zt_train_plan_bytes(t, lay->partition_numel, 1, sizeof(float)), &t->host_grads));
    int64_t span = zt_stage_optim_numel(pol, lay);
    /* Offloaded to nvme, master and states are in files and SWAP buffers. */
    if (t->nvme_opt)
        return ZT_OK;
    if (t->has_master)
        ZT_TRY(zt_train_buf(mem, reserved, opt_loc, ZT_MEM_MASTER, zt_train_plan_bytes(t, span, 1, sizeof(float)),
                            &t->master));
    int64_t state = zt_optim_state_numel(&t->cfg->optimizer, span);
    if (state > 0)
        ZT_TRY(zt_train_buf(mem, reserved, opt_loc, ZT_MEM_OPTIM, zt_train_plan_bytes(t, state, 1, sizeof(float)),
                            &t->optim_state));
    return ZT_OK;
}

/* The hpZ group size the stage uses (1: none). */
static int buffers_hpz(const zt_trainer *t)
{
    int64_t h = t->cfg->zero.zero_hpz_partition_size;
    return t->policy->params_sharded && h > 1 ? (int)h : 1;
}

/* The offload's host staging of one reduced bucket: the bucket's width, cut
 * to the largest sub-group when the optimizer is swapped (so that it does
 * not grow with the model). */
int64_t zt_train_stage_numel(const zt_trainer *t)
{
    int64_t w = zt_zero_rs_width(t->cfg, &t->layout);
    int64_t cap = t->nvme_plan.stage_numel;
    return t->nvme_opt && cap > 0 && cap < w ? cap : w;
}

/* COMM: the reduce buckets of a sharded optimizer, the all-gather bucket, one
 * unit's fp32 gradient when gradients are sharded in fp32, the gather window. */
static zt_status buffers_comm(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_stage_policy *pol = t->policy;
    const zt_config *cfg = t->cfg;
    const zt_layout *lay = &t->layout;
    if (pol->optimizer_sharded) {
        int count;
        int64_t send_numel, recv_numel;
        zt_zero_rs_buffers(cfg, lay, &count, &send_numel, &recv_numel);
        for (int i = 0; i < count; i++) {
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                                zt_train_plan_bytes(t, send_numel, 1, zt_dtype_size(t->kdt)), &t->rs_send[i]));
            if (recv_numel > 0)
                ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                                    zt_train_plan_bytes(t, recv_numel, 1, zt_dtype_size(t->kdt)), &t->rs_recv[i]));
        }
        if (t->offload_opt)
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                                zt_train_plan_bytes(t, zt_train_stage_numel(t), 1,
                                                    zt_dtype_size(t->kdt)),
                                &t->rs_stage));
        /* qgZ's work areas; a plan without a world (--estimate-memory)
         * cannot tell whether the ranks span nodes, and counts them. */
        bool qgz = t->world ? t->qgz.active
                            : pol->params_sharded && cfg->zero.zero_quantized_gradients &&
                                  lay->world_size > 1;
        for (int i = 0; qgz && i < count; i++)
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                                zt_qgz_work_bytes(zt_zero_rs_width(cfg, lay), lay->world_size,
                                                  t->qgz.n_nodes),
                                &t->qgz_work[i]));
    }
    if (pol->allgather_after_step)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                            zt_train_plan_bytes(t, zt_zero_allgather_buffer_numel(cfg, lay), 1,
                                                zt_dtype_size(t->cdt)),
                            &t->ag_buf));
    if (pol->grads_sharded && !t->mixed)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_COMM,
                            zt_train_plan_bytes(t, lay->max_unit_numel, 1, sizeof(float)), &t->unit_grad));
    /* The gather window allocates its own blocks from this part of COMM. */
    int64_t pool = zt_zero_gather_pool_numel(cfg, lay);
    if (pool > 0 && !reserved)
        zt_memory_plan(mem, ZT_MEM_DEVICE, ZT_MEM_COMM, zt_train_plan_bytes(t, pool, 1, zt_dtype_size(t->cdt)));
    /* qwZ's chunks in flight come from the same part of COMM. */
    size_t qwz = zt_zero_gather_qwz_bytes(cfg, lay, lay->world_size, buffers_hpz(t));
    if (qwz > 0 && !reserved)
        zt_memory_plan(mem, ZT_MEM_DEVICE, ZT_MEM_COMM, qwz);
    return ZT_OK;
}

/* The micro-batch: model inputs and labels of every slot (ACTS), their host
 * staging (WORK). */
static zt_status buffers_batch(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_model *m = t->model;
    int64_t mb = t->cfg->micro_batch_size;
    size_t tok_bytes = zt_train_plan_bytes(t, mb, m->seq_len, sizeof(int32_t));
    size_t lab_bytes = zt_train_plan_bytes(t, mb, m->labels_numel, sizeof(int32_t));
    zt_dtype xdt = zt_train_unit_dtype(t);
    size_t x_bytes = zt_train_plan_bytes(t, mb, m->in_numel, zt_dtype_size(xdt));
    for (int k = 0; k < t->n_slots; k++) {
        zt_train_slot *s = &t->slots[k];
        if (m->in_numel > 0)
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, x_bytes, &s->x));
        if (m->seq_len > 0) {
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, tok_bytes, &s->tokens));
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                                zt_train_plan_bytes(t, mb, 1, sizeof(int32_t)), &s->lengths));
        }
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                            zt_train_plan_bytes(t, mb, 1, sizeof(uint64_t)), &s->row_keys));
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, lab_bytes, &s->labels));
    }
    if (m->in_numel > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                            zt_train_plan_bytes(t, mb, m->in_numel, sizeof(float)), &t->x_host));
    if (m->in_numel > 0 && xdt != ZT_F32)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, x_bytes, &t->x_stage));
    if (m->seq_len > 0) {
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, tok_bytes,
                            &t->tokens_host));
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                            zt_train_plan_bytes(t, mb, 1, sizeof(int32_t)), &t->lengths_host));
    }
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, zt_train_plan_bytes(t, mb, 1, sizeof(uint64_t)),
                        &t->row_keys_host));
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, lab_bytes, &t->labels_host));
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK, zt_train_plan_bytes(t, mb, 1, sizeof(int64_t)),
                        &t->index_host));
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                        buffers_logits_host_bytes(t, m, mb), &t->logits_host));
    if (!t->typed)
        return ZT_OK;
    return zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                        zt_train_plan_bytes(t, m->logits_ld, 1, zt_dtype_size(t->cdt)),
                        &t->logits_stage);
}

size_t zt_train_workspace_bytes(const zt_trainer *t)
{
    if (!t->be)
        return 0;
    /* Typed units' GEMMs read their 16-bit tensors as stored: no operand casts. */
    return t->be->workspace_bytes - (t->typed ? t->be->workspace_cast_bytes : 0);
}

/* WORK: the units' scratch, the backend's workspace, the activation-gradient
 * ping-pong and, under mixed precision, the fp32 gradient of one unit and
 * (units not typed) the fp32 copies of one unit. */
static zt_status buffers_work(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_model *m = t->model;
    const zt_layout *lay = &t->layout;
    int64_t mb = t->cfg->micro_batch_size;
    int64_t work = zt_train_max_unit_field(m, offsetof(zt_unit, work_numel));
    if (work > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK,
                            zt_train_plan_bytes(t, mb, work, sizeof(float)), &t->work));
    /* The plan for --estimate-memory has no backend: it leaves this block out. */
    size_t ws = zt_train_workspace_bytes(t);
    if (ws > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, ws, &t->be_workspace));
    size_t dact = zt_train_plan_bytes(t, mb, buffers_max_dact_numel(t, m), sizeof(float));
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[0]));
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[1]));
    if (!t->mixed)
        return ZT_OK;
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK,
                        zt_train_plan_bytes(t, lay->max_unit_numel, 1, sizeof(float)), &t->gw));
    if (t->typed) /* the units read and write cdt tensors: no fp32 copies */
        return ZT_OK;
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK,
                        zt_train_plan_bytes(t, lay->max_unit_numel, 1, sizeof(float)), &t->pw));
    int64_t in = zt_train_max_unit_field(m, offsetof(zt_unit, in_numel));
    int64_t out = zt_train_max_unit_field(m, offsetof(zt_unit, out_numel));
    int64_t sv = zt_train_max_unit_field(m, offsetof(zt_unit, saved_numel));
    if (in > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, zt_train_plan_bytes(t, mb, in, sizeof(float)),
                            &t->xin));
    ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, zt_train_plan_bytes(t, mb, out, sizeof(float)),
                        &t->yout));
    if (sv > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, zt_train_plan_bytes(t, mb, sv, sizeof(float)),
                            &t->sw));
    return ZT_OK;
}

size_t zt_train_plan_bytes(zt_trainer *t, int64_t n, int64_t m, size_t elem)
{
    size_t bytes;
    if (zt_checked_bytes(n, m, elem, &bytes))
        return bytes;
    t->plan_overflow = true;
    return 0;
}

zt_status zt_train_buffers(zt_trainer *t, zt_memory *mem, bool reserved)
{
    t->plan_overflow = false;
    ZT_TRY(buffers_model_states(t, mem, reserved));
    ZT_TRY(buffers_comm(t, mem, reserved));
    if (t->has_master && (t->offload_opt || t->offload_param))
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                            zt_train_plan_bytes(t, t->layout.max_unit_numel / t->layout.world_size, 1,
                                                zt_dtype_size(t->cdt)),
                            &t->param_stage));
    const zt_nvme_plan *np = &t->nvme_plan;
    if (np->opt_swap_bytes > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_SWAP, np->opt_swap_bytes,
                            &t->swap_opt_mem));
    if (np->grad_swap_bytes > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_SWAP, np->grad_swap_bytes,
                            &t->swap_grad_mem));
    if (np->param_swap_bytes > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_HOST, ZT_MEM_SWAP, np->param_swap_bytes,
                            &t->swap_param_mem));
    ZT_TRY(buffers_batch(t, mem, reserved));
    ZT_TRY(zt_train_activation_buffers(t, mem, reserved));
    if (zt_pipe_active(&t->pipe))
        ZT_TRY(zt_pipe_buffers(&t->pipe, mem, reserved, t->cfg->micro_batch_size, t->cdt));
    ZT_TRY(buffers_work(t, mem, reserved));
    if (t->plan_overflow)
        return zt_fail(ZT_ERR_USAGE,
                       "use a smaller micro batch (train_micro_batch_size_per_gpu) or a smaller "
                       "model",
                       "the buffers of model %s with micro batch %lld need more than 2^63 "
                       "elements or bytes",
                       t->model->name, (long long)t->cfg->micro_batch_size);
    return ZT_OK;
}

zt_status zt_train_tables(zt_trainer *t)
{
    size_t n = (size_t)t->model->n_units;
    t->slots = calloc((size_t)t->n_slots, sizeof *t->slots);
    bool ok = t->slots != NULL;
    for (int k = 0; ok && k < t->n_slots; k++) {
        zt_train_slot *s = &t->slots[k];
        s->acts = calloc(n, sizeof *s->acts);
        s->saved = calloc(n, sizeof *s->saved);
        s->ckpt = calloc(n, sizeof *s->ckpt);
        ok = s->acts && s->saved && s->ckpt;
    }
    t->unit_store = calloc(n, sizeof *t->unit_store);
    t->own_p = calloc(n, sizeof *t->own_p);
    t->own_g = calloc(n, sizeof *t->own_g);
    t->own_m = calloc(n, sizeof *t->own_m);
    t->secondary = calloc(n, sizeof *t->secondary);
    if (!ok || !t->unit_store || !t->own_p || !t->own_g || !t->own_m || !t->secondary)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate per-unit tables");
    return ZT_OK;
}

void zt_train_tables_free(zt_trainer *t)
{
    for (int k = 0; t->slots && k < t->n_slots; k++) {
        free(t->slots[k].acts);
        free(t->slots[k].saved);
        free(t->slots[k].ckpt);
    }
    free(t->slots);
    free(t->unit_store);
    free(t->own_p);
    free(t->own_g);
    free(t->own_m);
    free(t->secondary);
    t->slots = NULL;
    t->acts = t->saved = t->ckpt = t->unit_store = t->own_p = t->own_g = t->secondary = NULL;
    t->own_m = NULL;
}

/* A trainer with what a plan needs: config, model, resolved placement and the
 * layout the run would partition over. */
static zt_status buffers_plan_trainer(zt_trainer *t, const zt_config *cfg, const zt_model *m,
                                      int world_size)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->model = t->whole = m;
    t->n_slots = 1;
    zt_train_resolve(t);
    /* MiCS partitions over its shard groups, not the world. */
    int part = t->policy->params_sharded && cfg->zero.mics_shard_size > 0
                   ? (int)cfg->zero.mics_shard_size
                   : world_size;
    ZT_TRY(zt_layout_init(&t->layout, m, &cfg->zero, part, 0));
    return zt_train_nvme_plan(t);
}

static void buffers_plan_free(zt_trainer *t)
{
    zt_nvme_plan_free(&t->nvme_plan);
    zt_layout_free(&t->layout);
}

zt_status zt_trainer_plan(const zt_config *cfg, const zt_model *m, int world_size,
                          zt_memory *mem)
{
    zt_trainer t;
    zt_status st = buffers_plan_trainer(&t, cfg, m, world_size);
    if (st == ZT_OK)
        st = zt_train_tables(&t);
    if (st == ZT_OK)
        st = zt_train_buffers(&t, mem, false);
    zt_train_tables_free(&t);
    buffers_plan_free(&t);
    return st;
}

zt_status zt_trainer_nvme_plan(const zt_config *cfg, const zt_model *m, int world_size,
                               int64_t *disk_bytes, size_t *swap_bytes)
{
    zt_trainer t;
    zt_status st = buffers_plan_trainer(&t, cfg, m, world_size);
    *disk_bytes = t.nvme_plan.disk_bytes;
    *swap_bytes = zt_nvme_plan_swap_bytes(&t.nvme_plan);
    buffers_plan_free(&t);
    return st;
}

/* qwZ's bytes per pass over every gathered unit, for the traffic formulas. */
static void buffers_qwz_shape(const zt_trainer *t, zt_stage_shape *out)
{
    const zt_layout *lay = &t->layout;
    int h = buffers_hpz(t);
    if (!t->policy->params_sharded || !t->cfg->zero.zero_quantized_weights ||
        lay->world_size <= 1)
        return;
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        if (ul->persistent)
            continue;
        out->qwz_bytes += (int64_t)zt_qwz_buffer_bytes(ul->shard_numel, lay->world_size);
        if (h > 1)
            out->qwz_group_bytes += (int64_t)zt_qwz_buffer_bytes(ul->padded_numel / h, h);
    }
}

zt_status zt_trainer_stage_shape(const zt_config *cfg, const zt_model *m, int world_size,
                                 zt_stage_shape *out)
{
    zt_trainer t;
    zt_status st = buffers_plan_trainer(&t, cfg, m, world_size);
    if (st == ZT_OK) {
        const zt_zero_config *z = &cfg->zero;
        *out = (zt_stage_shape){
            .padded = t.layout.padded_numel,
            .persistent = t.layout.persistent_numel,
            .partition = t.layout.world_size,
            .hpz = t.policy->params_sharded ? z->zero_hpz_partition_size : 0,
            .mics = t.policy->params_sharded && z->mics_shard_size > 0 ? z->mics_shard_size : 0,
            .world = world_size,
            .gas = cfg->gradient_accumulation_steps,
            .param_bytes = zt_dtype_size(t.cdt),
            .grad_bytes = zt_dtype_size(t.gdt),
            .comm_bytes = zt_dtype_size(t.kdt),
            .reduce_scatter = z->reduce_scatter,
            .allgather_partitions = z->allgather_partitions,
            .reuse = z->stage3_max_reuse_distance > 0,
            .optim_floats = zt_optim_state_numel(&cfg->optimizer, 1),
            .master = t.has_master,
            .offload_optimizer = t.offload_opt,
            .offload_param = t.offload_param,
            .optimizer_swapped = t.nvme_opt,
            .param_swapped = t.nvme_plan.param_swapped_numel,
        };
        buffers_qwz_shape(&t, out);
    }
    buffers_plan_free(&t);
    return st;
}
