/*
 * zero: the flat parameter layout every stage shares, and the machinery of the
 * ZeRO stages: gradient reduction (all-reduce for stage 0, bucketed
 * reduce-scatter into the rank's partition for stages 1-3), the parameter
 * all-gather after a partitioned step (stages 1-2), and the stage-3 gather
 * window that materialises one unit's parameters at a time.
 *
 * Layout: all parameters in unit order in one flat vector; each unit's slice is
 * padded to a multiple of world_size * 16 elements so every rank owns an equal,
 * aligned, contiguous slice of every unit (rank r owns elements
 * [offset + r * shard, offset + (r + 1) * shard) of unit u). A rank's partition
 * is the concatenation of its slices: "partition coordinate" p of unit u's
 * column c (0 <= c < shard) is part_offset + c. Padding elements are zero and
 * stay zero (zero gradients; Adam and SGD leave a zero parameter with zero
 * gradient at 0). Stage 3 keeps units of at most
 * stage3_param_persistence_threshold parameters whole on every rank (while the
 * running total stays within stage3_model_persistence_threshold).
 *
 * Stage 0 (zt_zero_reducer): gradients all-reduced at the accumulation boundary
 * in buckets of reduce_bucket_size elements cut from the flat gradient, in
 * place; with overlap_comm each bucket is issued non-blocking as soon as
 * backward has finished the units it covers. Averaging follows DeepSpeed:
 * prescale_gradients divides by world size before the sum; otherwise multiply
 * by 1/gradient_predivide_factor before and by predivide/world_size after.
 *
 * Stages 1-3 (zt_zero_rs): a bucket is a range [b0, b1) of partition
 * coordinates whose width is reduce_bucket_size / world_size, so it holds
 * reduce_bucket_size elements over all ranks. Units are fed in reverse order;
 * each unit's columns are packed rank-major into the bucket's send buffer
 * (block q holds rank q's columns), and a full bucket is reduce-scattered (or,
 * with reduce_scatter false, all-reduced and sliced) into this rank's
 * destination slices: assigned (stage 1 at the boundary) or accumulated
 * (stages 2-3, every micro-step). With overlap_comm two buckets alternate, so
 * one reduces while backward fills the other.
 *
 * Stages 1-2 (zt_zero_allgather_params): after the step, each rank's updated
 * slices are all-gathered in allgather_bucket_size buckets of partition
 * coordinates (or broadcast from each owner when allgather_partitions is false).
 *
 * MiCS (mics_shard_size m): the layout partitions over groups of m consecutive
 * ranks instead of the world; each group holds a full replica of the sharded
 * model state, and a reduced gradient slice is all-reduced over the N/m ranks
 * that hold the same slice.
 *
 * Stage 3 (zt_zero_gather): a unit's parameters are all-gathered from the
 * shards into a block of the COMM arena before its forward and again before its
 * backward, and released after use unless the parameters gathered before its
 * next use number fewer than stage3_max_reuse_distance. Gathers of the next
 * units are issued ahead (non-blocking) while the prefetched elements stay
 * within stage3_prefetch_bucket_size and the live elements within
 * stage3_max_live_parameters. With hpZ (zero_hpz_partition_size h > 1), each
 * forward gather also keeps this rank's 1/h slice of the unit as a secondary
 * partition, and the backward gather runs over the h-rank group only.
 *
 * Memory: zt_layout owns its host unit table; the reducers and the gather
 * window own their host bookkeeping. Every device buffer they use is handed in
 * by the trainer from its arenas (the gather window allocates and frees its
 * blocks in the COMM arena it is given).
 * Collective: zt_zero_reducer_unit_done and zt_zero_rs_unit (when they issue a
 * bucket), the *_finish calls, zt_zero_allgather_params, zt_zero_gather_fetch,
 * zt_zero_gather_end_step: all ranks call them in the same order (the group
 * collectives of hpZ run within the group).
 */
#ifndef ZT_ZERO_H
#define ZT_ZERO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/arena.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/dtype.h"
#include "models/model.h"
#include "engine/status.h"

#define ZT_ZERO_ALIGN 16

typedef struct {
    int64_t offset;       /* start in the flat padded vector */
    int64_t numel;        /* unpadded parameter count */
    int64_t padded_numel; /* multiple of world_size * ZT_ZERO_ALIGN */
    int64_t shard_numel;  /* padded_numel / world_size */
    int64_t part_offset;  /* start of this unit's slice in a rank's partition */
    int64_t global_index; /* first parameter's index in unpadded model order */
    bool persistent;      /* stage 3: kept whole on every rank */
} zt_unit_layout;

typedef struct {
    int world_size, rank, stage;
    int n_units;
    zt_unit_layout *units;
    int64_t numel;            /* unpadded total */
    int64_t padded_numel;     /* flat vector length */
    int64_t partition_numel;  /* this rank's share = padded_numel / world_size */
    int64_t persistent_numel; /* padded elements of persistent units (stage 3) */
    int64_t max_unit_numel;   /* largest padded_numel of a unit */
} zt_layout;

zt_status zt_layout_init(zt_layout *l, const zt_model *m, const zt_zero_config *z,
                         int world_size, int rank);
void zt_layout_free(zt_layout *l);

/* Averaging factors of DeepSpeed's gradient reduction for `world_size` ranks. */
void zt_zero_scales(const zt_config *cfg, int world_size, float *pre_scale, float *post_scale);

/* ---- Stage 0: boundary gradient all-reduce, in place. ---- */
typedef struct {
    const zt_backend *be;
    zt_comm *comm;
    const zt_layout *layout;
    void *grads;          /* flat (padded_numel) of dt, reduced in place */
    zt_dtype dt;
    int64_t bucket_numel; /* reduce_bucket_size */
    bool overlap;
    float pre_scale, post_scale;
    int64_t issued_lo;    /* grads [issued_lo, padded_numel) have been issued */
    int64_t done_lo;      /* grads [done_lo, padded_numel) are final */
    zt_comm_req *reqs;
    int n_reqs, cap_reqs;
} zt_zero_reducer;

zt_status zt_zero_reducer_init(zt_zero_reducer *r, const zt_config *cfg, const zt_backend *be,
                               zt_comm *comm, const zt_layout *layout, void *grads, zt_dtype dt);
void zt_zero_reducer_free(zt_zero_reducer *r);
/* Start of a boundary micro-step's backward. */
void zt_zero_reducer_begin(zt_zero_reducer *r);
/* Unit u's gradients are final for this step (called in reverse unit order). */
zt_status zt_zero_reducer_unit_done(zt_zero_reducer *r, int u);
/* Issues what is left, waits for everything and applies the post-scale. */
zt_status zt_zero_reducer_finish(zt_zero_reducer *r);

/* ---- Stages 1-3: bucketed reduce-scatter into the partition. ---- */
typedef struct {
    int unit;
    int64_t lo, hi; /* columns [lo, hi) of the unit's shard */
} zt_zero_seg;

typedef struct {
    void *send;          /* (world_size, width) rank-major, comm_dt */
    void *recv;          /* (width); NULL when reduce_scatter is off (own block of send) */
    int64_t b0, b1;      /* partition coordinates covered; width = b1 - b0 */
    zt_zero_seg *segs;   /* at most one per unit */
    int n_segs;
    zt_comm_req req;
    bool pending;        /* issued, not yet delivered */
} zt_zero_bucket;

typedef struct {
    const zt_backend *be;
    zt_comm *comm;       /* the partition group (the world, or a MiCS shard group) */
    zt_comm *replica;    /* MiCS: ranks holding the same slices, else NULL */
    const zt_layout *layout;
    void *const *dest;   /* per unit: shard_numel destination slice of dest_dt */
    zt_dtype comm_dt, dest_dt;
    bool dest_host;      /* dest is host memory (offloaded optimizer): staged through */
    void *host_stage;    /* (width) comm_dt host buffer when dest_host */
    int64_t width;       /* per-rank bucket width in elements */
    bool overlap, use_reduce_scatter, accumulate;
    float pre_scale, post_scale;
    zt_zero_bucket buckets[2];
    int n_buckets;
    int open;            /* bucket being filled, or -1 */
    int next;            /* bucket to open next */
} zt_zero_rs;

/* Buffers one zt_zero_rs needs: `count` send buffers of send_numel and (when
 * recv_numel > 0) as many receive buffers of recv_numel, all in COMM, in the
 * communication dtype; with a host destination also one host staging buffer of
 * zt_zero_rs_width elements. */
void zt_zero_rs_buffers(const zt_config *cfg, const zt_layout *layout, int *count,
                        int64_t *send_numel, int64_t *recv_numel);
int64_t zt_zero_rs_width(const zt_config *cfg, const zt_layout *layout);
/* Where a zt_zero_rs delivers and in which types it communicates. */
typedef struct {
    void *const *dest;  /* per unit: shard_numel slice */
    zt_dtype dest_dt;
    bool dest_host;     /* dest is host memory: each bucket is copied to host_stage first */
    void *host_stage;   /* zt_zero_rs_width elements of comm_dt, host */
    zt_dtype comm_dt;
} zt_zero_rs_target;
/* send/recv: `count` buffers each as zt_zero_rs_buffers says (recv may be NULL
 * entries when recv_numel is 0). comm: the group the layout partitions over;
 * replica: with MiCS, the group each reduced slice is then all-reduced over
 * (NULL otherwise). */
zt_status zt_zero_rs_init(zt_zero_rs *r, const zt_config *cfg, const zt_backend *be,
                          zt_comm *comm, zt_comm *replica, const zt_layout *layout,
                          const zt_zero_rs_target *target, void *const *send,
                          void *const *recv);
void zt_zero_rs_free(zt_zero_rs *r);
/* Start of a reducing backward; accumulate: add into dest instead of assigning. */
void zt_zero_rs_begin(zt_zero_rs *r, bool accumulate);
/* Unit u's full padded gradient `g` (padded_numel of g_dt, natural layout) is
 * ready (units in reverse order); it is converted into the bucket's dtype as it
 * is packed. `g` may be reused when this returns. */
zt_status zt_zero_rs_unit(zt_zero_rs *r, int u, const void *g, zt_dtype g_dt);
/* Waits for every bucket and delivers it. */
zt_status zt_zero_rs_finish(zt_zero_rs *r);

/* ---- Stages 1-2: all-gather of the updated slices into the full params. ---- */
/* Elements of the gather buffer: world_size * width, width =
 * allgather_bucket_size / world_size (at least 1, at most partition_numel). */
int64_t zt_zero_allgather_buffer_numel(const zt_config *cfg, const zt_layout *layout);
/* params: full flat (padded_numel) of dt; own slices are params + offset +
 * rank * shard. buf: zt_zero_allgather_buffer_numel elements of dt. */
zt_status zt_zero_allgather_params(const zt_config *cfg, const zt_backend *be, zt_comm *comm,
                                   const zt_layout *layout, void *params, void *buf,
                                   zt_dtype dt);

/* ---- Stage 3: the gather window. ---- */
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
    zt_comm_req req;
} zt_gather_unit;

typedef struct {
    const zt_backend *be;
    zt_comm *comm;       /* world */
    zt_comm *group;      /* hpZ group (h ranks) or NULL */
    const zt_layout *layout;
    zt_arena *pool;      /* COMM arena the blocks come from */
    zt_dtype dt;         /* parameters' dtype */
    void *const *shard;  /* per unit: own shard (shard_numel) or the persistent full copy */
    bool shard_host;     /* offload_param: non-persistent shards are host memory */
    void *const *secondary; /* hpZ: per unit (padded_numel / h), else NULL */
    int hpz;
    int64_t max_live, prefetch, reuse_distance;
    int64_t live_numel;  /* elements of gathered (or in-flight) non-persistent units */
    int64_t peak_live_numel;
    zt_gather_unit *units;
    int64_t *gathered_before; /* (n_units + 1) non-persistent elements of units < u */
} zt_zero_gather;

/* Elements of COMM the window may need at once (its reservation). */
int64_t zt_zero_gather_pool_numel(const zt_config *cfg, const zt_layout *layout);
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
