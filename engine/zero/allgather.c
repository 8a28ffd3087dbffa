/*
 * allgather: the parameter all-gather after a partitioned step
 * (engine/zero/allgather.h).
 */
#include "engine/zero/allgather.h"

int64_t zt_zero_allgather_buffer_numel(const zt_config *cfg, const zt_layout *layout)
{
    return zt_layout_bucket_width(layout, cfg->zero.allgather_bucket_size) * layout->world_size;
}

/* Copies between rank q's slices of the flat params and block q of a bucket
 * covering partition coordinates [b0, b0 + width). */
static void allgather_move(const zt_backend *be, const zt_layout *l, void *params, void *buf,
                           zt_dtype dt, int64_t b0, int64_t width, int q, bool to_buf)
{
    for (int u = 0; u < l->n_units; u++) {
        const zt_unit_layout *ul = &l->units[u];
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

zt_status zt_zero_allgather_params(const zt_config *cfg, const zt_backend *be, zt_comm *comm,
                                   const zt_layout *layout, void *params, void *buf,
                                   zt_dtype dt)
{
    int world = layout->world_size, me = layout->rank;
    int64_t step = zt_layout_bucket_width(layout, cfg->zero.allgather_bucket_size);
    for (int64_t b0 = 0; b0 < layout->partition_numel; b0 += step) {
        int64_t width = layout->partition_numel - b0 < step ? layout->partition_numel - b0 : step;
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
