/*
 * gather: the stage-3 gather window. A unit's parameters are all-gathered from
 * the shards into a block of the COMM arena before its forward and again
 * before its backward, and released after use unless the parameters gathered
 * before its next use number fewer than stage3_max_reuse_distance. Gathers of
 * the next units are issued ahead (non-blocking) while the prefetched elements
 * stay within stage3_prefetch_bucket_size and the live elements within
 * stage3_max_live_parameters. With hpZ (zero_hpz_partition_size h > 1), each
 * forward gather also keeps this rank's 1/h slice of the unit as a secondary
 * partition, and the backward gather runs over the h-rank group only. With
 * qwZ (zero_quantized_weights) the gathers carry int8 chunks
 * (engine/zero/quant.h), staged in a second COMM block per gather in flight
 * and dequantized into the unit's block when the gather completes.
 *
 * Memory: the window owns its host bookkeeping; it allocates and frees its
 * blocks in the COMM arena it is given. The shards and secondary partitions
 * are the caller's (PARAMS).
 * Collective: zt_zero_gather_fetch, zt_zero_gather_release,
 * zt_zero_gather_flush, zt_zero_gather_end_step: all ranks call them in the
 * same order (the group collectives of hpZ run within the group).
 */
#ifndef ZT_GATHER_H
#define ZT_GATHER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/arena.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/zero/layout.h"

/* RECOMPUTE: activation checkpointing's forward re-run of a segment during
 * backward. It gathers like BWD (hpZ: from the group's secondary copy), does not
 * prefetch (the next unit needed after a segment is not the next by index), and
 * releases like FWD (the unit's backward follows soon). */
typedef enum { ZT_GATHER_FWD = 0, ZT_GATHER_BWD = 1, ZT_GATHER_RECOMPUTE = 2 } zt_gather_dir;

typedef enum { ZT_UNIT_RELEASED = 0, ZT_UNIT_INFLIGHT, ZT_UNIT_READY } zt_unit_state;

typedef struct {
    zt_unit_state state;
    bool in_use;     /* between fetch and release */
    bool retained;   /* released by compute but kept for a near reuse */
    bool from_world; /* in flight over the world (else the hpZ group) */
    void *buf;       /* (padded_numel) in the COMM arena, or the persistent copy */
    void *qbuf;      /* qwZ: the chunks in flight (COMM), else NULL */
    zt_comm_req req;
} zt_gather_unit;

/* Where non-persistent shards come from when they are in no memory
 * (offload_param to nvme: their shard pointer is NULL): get returns unit
 * u's shard in host memory, valid until put; dir is where the window goes
 * next, so the source may read ahead. */
typedef struct {
    zt_status (*get)(void *ctx, int u, zt_gather_dir dir, const void **shard);
    void (*put)(void *ctx, int u);
    void *ctx;
} zt_zero_shard_source;

typedef struct {
    const zt_backend *be;
    zt_comm *comm;       /* world */
    zt_comm *group;      /* hpZ group (h ranks) or NULL */
    const zt_layout *layout;
    zt_arena *pool;      /* COMM arena the blocks come from */
    zt_dtype dt;         /* parameters' dtype */
    void *const *shard;  /* per unit: own shard (shard_numel) or the persistent full copy */
    bool shard_host;     /* offload_param: non-persistent shards are host memory */
    zt_zero_shard_source source; /* shard_host: where NULL shards come from (set after init) */
    void *const *secondary; /* hpZ: per unit (padded_numel / h), else NULL */
    int hpz;
    const zt_config *cfg;
    int64_t max_live, prefetch, reuse_distance;
    int64_t live_numel;  /* elements of gathered (or in-flight) non-persistent units */
    int64_t peak_live_numel;
    zt_gather_unit *units;
    int64_t *gathered_before; /* (n_units + 1) non-persistent elements of units < u */
} zt_zero_gather;

/* Elements of COMM the window may need at once (its reservation). */
int64_t zt_zero_gather_pool_numel(const zt_config *cfg, const zt_layout *layout);
/* Bytes of COMM the qwZ chunks in flight may need at once on top of that (0
 * without qwZ). world: the ranks the layout partitions over; hpz: the hpZ
 * group size (<= 1: none). */
size_t zt_zero_gather_qwz_bytes(const zt_config *cfg, const zt_layout *layout, int world,
                                int hpz);
/* Elements of one rank's hpZ secondary partition (0 without hpZ). */
int64_t zt_zero_secondary_numel(const zt_config *cfg, const zt_layout *layout);

/* shard_host: the non-persistent shards live in host memory (offload_param);
 * each gather first copies the shard into its own slot of the gathered block
 * and gathers in place. */
zt_status zt_zero_gather_init(zt_zero_gather *g, const zt_config *cfg, const zt_backend *be,
                              zt_comm *comm, zt_comm *group, const zt_layout *layout,
                              zt_arena *pool, zt_dtype dt, void *const *shard, bool shard_host,
                              void *const *secondary);
void zt_zero_gather_free(zt_zero_gather *g);
/* Unit u's full parameters (padded_numel) for compute, gathering if needed and
 * prefetching the following units in direction `dir`. */
zt_status zt_zero_gather_fetch(zt_zero_gather *g, int u, zt_gather_dir dir, void **params);
/* Compute is done with unit u. last_use: the parameters change before the unit
 * is used again (the boundary micro-step's backward), so nothing is retained. */
zt_status zt_zero_gather_release(zt_zero_gather *g, int u, zt_gather_dir dir, bool last_use);
/* After a forward-only pass (evaluation, generation): finishes and drops
 * every gather not in use, prefetches included. */
zt_status zt_zero_gather_flush(zt_zero_gather *g);
/* After the optimizer step: drops everything retained and re-gathers the
 * persistent units from their updated slices. */
zt_status zt_zero_gather_end_step(zt_zero_gather *g);

#endif
