/*
 * plan: sub-groups, swapped units and buffer sizes (engine/nvme/plan.h).
 */
#include "engine/nvme/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/nvme/aio.h"

int64_t zt_nvme_pad(int64_t n) { return (n + ZT_AIO_ALIGN - 1) / ZT_AIO_ALIGN * ZT_AIO_ALIGN; }

static zt_status plan_optimizer(zt_nvme_plan *p, const zt_config *cfg, const zt_layout *lay)
{
    int states = zt_config_optim_state_floats(&cfg->optimizer);
    p->opt_tensors = 1 + states;
    p->opt_names[0] = "fp32_master";
    p->opt_names[1] = states == 2 ? "exp_avg" : "momentum_buffer";
    p->opt_names[2] = "exp_avg_sq";
    p->groups = calloc((size_t)lay->n_units, sizeof *p->groups);
    p->group_of = calloc((size_t)lay->n_units, sizeof *p->group_of);
    if (!p->groups || !p->group_of)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the nvme sub-group table");
    /* DeepSpeed's rule: append until the sub-group reaches sub_group_size. */
    const int64_t size = cfg->zero.sub_group_size > 0 ? cfg->zero.sub_group_size : 1;
    zt_nvme_group *g = NULL;
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        if (!g || g->numel >= size) {
            g = &p->groups[p->n_groups++];
            *g = (zt_nvme_group){.u0 = u, .lo = ul->part_offset, .file_offset = p->opt_file_bytes};
        }
        g->u1 = u + 1;
        g->numel += ul->shard_numel;
        p->group_of[u] = p->n_groups - 1;
        int64_t bytes = zt_nvme_pad(g->numel * (int64_t)sizeof(float));
        p->opt_file_bytes = g->file_offset + bytes;
        g->bytes = bytes;
        if (bytes > p->group_bytes)
            p->group_bytes = bytes;
        if (g->numel > p->group_numel)
            p->group_numel = g->numel;
    }
    int64_t slots = cfg->zero.offload_optimizer.buffer_count / p->opt_tensors;
    p->opt_slots = (int)(slots < p->n_groups ? slots : p->n_groups);
    p->opt_swap_bytes = (size_t)(p->opt_slots * p->opt_tensors * p->group_bytes + ZT_AIO_ALIGN);
    p->disk_bytes += p->opt_tensors * p->opt_file_bytes;
    p->grad_slots = p->n_groups < 2 ? p->n_groups : 2;
    p->grad_file_bytes = p->opt_file_bytes;
    p->grad_swap_bytes = (size_t)(p->grad_slots * p->group_bytes + ZT_AIO_ALIGN);
    p->stage_numel = p->group_numel;
    p->disk_bytes += p->grad_file_bytes;
    return ZT_OK;
}

static zt_status plan_params(zt_nvme_plan *p, const zt_config *cfg, const zt_layout *lay,
                             zt_dtype dt)
{
    const zt_offload_config *o = &cfg->zero.offload_param;
    p->param_swapped = calloc((size_t)lay->n_units, sizeof *p->param_swapped);
    if (!p->param_swapped)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the nvme parameter table");
    int64_t largest = 0;
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        if (ul->persistent)
            continue;
        if (p->param_in_cpu_numel + ul->shard_numel <= o->max_in_cpu) {
            p->param_in_cpu_numel += ul->shard_numel;
            continue;
        }
        if (ul->shard_numel > o->buffer_size) {
            char hint[160];
            snprintf(hint, sizeof hint,
                     "raise zero_optimization.offload_param.buffer_size to at least %lld",
                     (long long)ul->shard_numel);
            return zt_fail(ZT_ERR_CONFIG, hint,
                           "zero_optimization.offload_param: More elements %lld than buffer "
                           "size %lld (the shard of unit %d, which a buffer must hold whole)",
                           (long long)ul->shard_numel, (long long)o->buffer_size, u);
        }
        p->param_swapped[u] = true;
        p->n_param_swapped++;
        p->param_swapped_numel += ul->shard_numel;
        p->param_file_bytes += zt_nvme_pad(ul->shard_numel * (int64_t)zt_dtype_size(dt));
        largest = ul->shard_numel > largest ? ul->shard_numel : largest;
    }
    if (p->n_param_swapped == 0)
        return ZT_OK;
    p->param_buffer_bytes = zt_nvme_pad(largest * (int64_t)zt_dtype_size(dt));
    p->param_buffers = (int)(o->buffer_count < p->n_param_swapped ? o->buffer_count
                                                                  : p->n_param_swapped);
    p->param_swap_bytes = (size_t)(p->param_buffers * p->param_buffer_bytes + ZT_AIO_ALIGN);
    p->disk_bytes += p->param_file_bytes;
    return ZT_OK;
}

zt_status zt_nvme_plan_init(zt_nvme_plan *p, const zt_config *cfg, const zt_layout *lay,
                            bool opt, bool param, zt_dtype param_dt)
{
    memset(p, 0, sizeof *p);
    p->opt = opt;
    p->param = param;
    if (opt)
        ZT_TRY(plan_optimizer(p, cfg, lay));
    if (param)
        ZT_TRY(plan_params(p, cfg, lay, param_dt));
    return ZT_OK;
}

size_t zt_nvme_plan_swap_bytes(const zt_nvme_plan *p)
{
    return p->opt_swap_bytes + p->grad_swap_bytes + p->param_swap_bytes;
}

void zt_nvme_plan_free(zt_nvme_plan *p)
{
    free(p->groups);
    free(p->group_of);
    free(p->param_swapped);
    memset(p, 0, sizeof *p);
}
