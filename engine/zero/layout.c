/*
 * layout: the flat padded layout (engine/zero/layout.h).
 */
#include "engine/zero/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checked.h"
#include "engine/zero/stage.h"

zt_status zt_layout_init(zt_layout *l, const zt_model *m, const zt_zero_config *z,
                         int world_size, int rank)
{
    memset(l, 0, sizeof *l);
    l->world_size = world_size;
    l->rank = rank;
    l->params_sharded = zt_stage_policy_get(z->stage)->params_sharded;
    l->n_units = m->n_units;
    l->units = calloc((size_t)m->n_units, sizeof *l->units);
    if (!l->units)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the layout of %d units", m->n_units);
    int64_t align = (int64_t)world_size * ZT_ZERO_ALIGN;
    int64_t offset = 0, global = m->param_offset, persistent_unpadded = 0;
    for (int u = 0; u < m->n_units; u++) {
        zt_unit_layout *ul = &l->units[u];
        ul->offset = offset;
        ul->numel = m->units[u].param_numel;
        if (!zt_checked_add(ul->numel, align - 1, &ul->padded_numel) ||
            !zt_checked_add(offset, ul->padded_numel, &l->padded_numel)) {
            zt_layout_free(l);
            return zt_fail(ZT_ERR_USAGE, "choose a smaller model or fewer ranks",
                           "the flat layout of %d units padded for %d ranks has more than "
                           "2^63 elements",
                           m->n_units, world_size);
        }
        ul->padded_numel = ul->padded_numel / align * align;
        ul->shard_numel = ul->padded_numel / world_size;
        ul->part_offset = offset / world_size;
        ul->global_index = global;
        /* DeepSpeed's rule per parameter, applied per unit (our gather grain),
         * with the model-wide cap counted in unpadded elements as DeepSpeed does. */
        if (l->params_sharded && ul->numel <= z->stage3_param_persistence_threshold &&
            persistent_unpadded + ul->numel <= z->stage3_model_persistence_threshold) {
            ul->persistent = true;
            persistent_unpadded += ul->numel;
            l->persistent_numel += ul->padded_numel;
        }
        if (ul->padded_numel > l->max_unit_numel)
            l->max_unit_numel = ul->padded_numel;
        offset += ul->padded_numel;
        global += ul->numel;
    }
    l->numel = global - m->param_offset;
    l->padded_numel = offset;
    l->partition_numel = offset / world_size;
    return ZT_OK;
}

void zt_layout_free(zt_layout *l)
{
    free(l->units);
    l->units = NULL;
}

int64_t zt_layout_bucket_width(const zt_layout *l, int64_t bucket_numel)
{
    int64_t w = bucket_numel / l->world_size;
    if (w < 1)
        w = 1;
    return w < l->partition_numel ? w : l->partition_numel;
}

void zt_layout_persistence_warning(const zt_layout *l, const zt_zero_config *z, char *buf,
                                   size_t n)
{
    buf[0] = '\0';
    if (!l->params_sharded || l->n_units == 0)
        return;
    int64_t largest = 0;
    for (int u = 0; u < l->n_units; u++) {
        if (!l->units[u].persistent)
            return;
        if (l->units[u].numel > largest)
            largest = l->units[u].numel;
    }
    snprintf(buf, n,
             "ZeRO stage 3 partitions nothing: all %d units are persistent (the largest has "
             "%lld parameters, stage3_param_persistence_threshold is %lld), so every rank keeps "
             "every parameter; set zero_optimization.stage3_param_persistence_threshold below "
             "%lld (HF's \"auto\" is 10 x the hidden size) to shard them",
             l->n_units, (long long)largest, (long long)z->stage3_param_persistence_threshold,
             (long long)largest);
}
