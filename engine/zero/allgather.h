/*
 * allgather: after a partitioned optimizer step (stages 1-2), each rank's
 * updated slices are all-gathered into every rank's full parameters in
 * allgather_bucket_size buckets of partition coordinates (or broadcast from
 * each owner when allgather_partitions is false).
 *
 * Memory: the gather bucket is the caller's (COMM). Collective:
 * zt_zero_allgather_params.
 */
#ifndef ZT_ALLGATHER_H
#define ZT_ALLGATHER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/zero/layout.h"

/* Elements of the gather buffer: world_size * width, width =
 * allgather_bucket_size / world_size (at least 1, at most partition_numel). */
int64_t zt_zero_allgather_buffer_numel(const zt_config *cfg, const zt_layout *layout);
/* params: full flat (padded_numel) of dt; own slices are params + offset +
 * rank * shard. buf: zt_zero_allgather_buffer_numel elements of dt. */
zt_status zt_zero_allgather_params(const zt_config *cfg, const zt_backend *be, zt_comm *comm,
                                   const zt_layout *layout, void *params, void *buf,
                                   zt_dtype dt);

#endif
