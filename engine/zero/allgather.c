/*
 * allgather: the parameter all-gather after a partitioned step
 * (engine/zero/allgather.h).
 */
#include "engine/zero/allgather.h"

int64_t zt_zero_allgather_buffer_numel(const zt_config *cfg, const zt_layout *layout)
{
    return zt_layout_bucket_width(layout, cfg->zero.allgather_bucket_size) * layout->world_size;
}

/* A unit whose shard is at least this many elements is gathered in place: its
 * world_size shards already lie side by side in the flat params, exactly the
 * layout all_gather writes, so the bucket's two copies (own slice in, others'
 * slices out) are pure overhead (about a tenth of a stage-1 step for the
 * benchmark MLP at np 2). Smaller units share bucketed collectives, where one
 * call's latency would outweigh the copies. */
#define ALLGATHER_INPLACE_MIN_NUMEL ((int64_t)1 << 15)

static bool allgather_inplace(const zt_unit_layout *ul)
{
    return ul->shard_numel >= ALLGATHER_INPLACE_MIN_NUMEL;
}

/* Copies between rank q's slices of the flat params and block q of a bucket
 * covering partition coordinates [b0, b0 + width). */
static void allgather_move(const zt_backend *be, const zt_layout *l, void *params, void *buf,
                           zt_dtype dt, int64_t b0, int64_t width, int q, bool to_buf)
{
    for (int u = 0; u < l->n_units; u++) {
        const zt_unit_layout *ul = &l->units[u];
        if (allgather_inplace(ul))
            continue;
        int64_t lo = b0 > ul->part_offset ? b0 - ul->part_offset : 0;
        int64_t end = b0 + width - ul->part_offset;
        int64_t hi = end < ul->shard_numel ? end : ul->shard_numel;
        if (hi <= lo)
            continue;
        void *slice = zt_zero_at(params, ul->offset + q * ul->shard_numel + lo, dt);
        void *block = zt_zero_at(buf, q * width + ul->part_offset + lo - b0, dt);
        size_t bytes = (size_t)(hi - lo) * zt_dtype_size(dt);
        if (to_buf)
            be->copy_d2d(be, block, slice, bytes);
        else
            be->copy_d2d(be, slice, block, bytes);
    }
}

/* Whether any bucketed (not in-place) unit has elements in [b0, b0 + width). */
static bool allgather_bucket_used(const zt_layout *l, int64_t b0, int64_t width)
{
    for (int u = 0; u < l->n_units; u++) {
        const zt_unit_layout *ul = &l->units[u];
        if (!allgather_inplace(ul) && ul->part_offset < b0 + width &&
            ul->part_offset + ul->shard_numel > b0)
            return true;
    }
    return false;
}

static zt_status allgather_unit_inplace(const zt_config *cfg, zt_comm *comm,
                                        const zt_unit_layout *ul, void *params, zt_dtype dt)
{
    int64_t shard = ul->shard_numel;
    if (cfg->zero.allgather_partitions)
        return comm->ops->all_gather(comm, zt_zero_at(params, ul->offset + comm->rank * shard, dt),
                                     zt_zero_at(params, ul->offset, dt), shard, dt, NULL);
    for (int q = 0; q < comm->size; q++)
        ZT_TRY(comm->ops->broadcast(comm, zt_zero_at(params, ul->offset + q * shard, dt), shard,
                                    dt, q, NULL));
    return ZT_OK;
}

zt_status zt_zero_allgather_params(const zt_config *cfg, const zt_backend *be, zt_comm *comm,
                                   const zt_layout *layout, void *params, void *buf,
                                   zt_dtype dt)
{
    int world = layout->world_size, me = layout->rank;
    for (int u = 0; u < layout->n_units; u++)
        if (allgather_inplace(&layout->units[u]))
            ZT_TRY(allgather_unit_inplace(cfg, comm, &layout->units[u], params, dt));
    int64_t step = zt_layout_bucket_width(layout, cfg->zero.allgather_bucket_size);
    for (int64_t b0 = 0; b0 < layout->partition_numel; b0 += step) {
        int64_t width = layout->partition_numel - b0 < step ? layout->partition_numel - b0 : step;
        if (!allgather_bucket_used(layout, b0, width))
            continue;
        allgather_move(be, layout, params, buf, dt, b0, width, me, true);
        if (cfg->zero.allgather_partitions) {
            ZT_TRY(comm->ops->all_gather(comm, zt_zero_at(buf, me * width, dt), buf, width, dt,
                                         NULL));
        } else {
            for (int q = 0; q < world; q++)
                ZT_TRY(comm->ops->broadcast(comm, zt_zero_at(buf, q * width, dt), width, dt, q,
                                            NULL));
        }
        for (int q = 0; q < world; q++)
            if (q != me)
                allgather_move(be, layout, params, buf, dt, b0, width, q, false);
    }
    return ZT_OK;
}
