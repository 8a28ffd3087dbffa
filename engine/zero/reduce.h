/*
 * reduce: gradient reduction, the half of ZeRO that runs during backward.
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
 * with reduce_scatter false, all-reduced and sliced; with qgZ, reduced by
 * engine/zero/quant.h's hierarchical quantized all-to-all) into this rank's
 * destination slices: assigned (stage 1 at the boundary) or accumulated
 * (stages 2-3, every micro-step). With overlap_comm two buckets alternate, so
 * one reduces while backward fills the other. MiCS: a reduced gradient slice
 * is then all-reduced over the N/m ranks that hold the same slice.
 *
 * Memory: the reducers own their host bookkeeping; every device buffer they
 * use is handed in by the caller (the trainer's COMM and GRADS arenas).
 * Collective: zt_zero_reducer_unit_done and zt_zero_rs_unit (when they issue a
 * bucket) and the *_finish calls: all ranks call them in the same order.
 */
#ifndef ZT_REDUCE_H
#define ZT_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/zero/layout.h"
#include "engine/zero/quant.h"

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
/* Host destination slices handed out one at a time: get gives unit u's slice
 * (shard_numel of dest_dt), valid until the next get or release, into which
 * the caller then writes numel elements; accumulate says whether this pass
 * adds into it or assigns it (a pass that assigns writes every element of
 * every slice before release). release: the pass is delivered
 * (zt_zero_rs_finish). */
typedef struct {
    zt_status (*get)(void *ctx, int unit, int64_t numel, bool accumulate, void **slice);
    zt_status (*release)(void *ctx);
    void *ctx;
} zt_zero_dest_source;

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
    void *host_stage;    /* (stage_numel) comm_dt host buffer when dest_host */
    int64_t stage_numel; /* host_stage's elements: a bucket is staged in pieces of it */
    zt_zero_dest_source source; /* source.get set: where dest slices come from */
    int64_t width;       /* per-rank bucket width in elements */
    bool overlap, use_reduce_scatter, accumulate;
    float pre_scale, post_scale;
    zt_zero_bucket buckets[2];
    const zt_qgz *qgz;   /* active qgZ, else NULL */
    void *qgz_work[2];   /* per bucket, zt_qgz_work_bytes (COMM) */
    int n_buckets;
    bool direct;         /* large units are reduce-scattered from their own gradients */
    bool in_bucket;      /* large units are reduce-scattered from the bucket backward wrote */
    int prepared;        /* the unit whose bucket rs_unit_buffer opened, or -1 */
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
    void *host_stage;   /* stage_numel elements of comm_dt, host */
    int64_t stage_numel; /* > 0: host_stage's size, below the width; 0: zt_zero_rs_width */
    /* source.get set (host dest only): dest slices are asked for as they are
     * delivered instead of read from dest (the nvme offload's swapped
     * gradients). */
    zt_zero_dest_source source;
    zt_dtype comm_dt;
    /* qgZ (when q->active): each bucket goes through the hierarchical
     * quantized all-to-all, with one work area of zt_qgz_work_bytes per
     * bucket; NULL: the plain reduce-scatter. */
    const zt_qgz *qgz;
    void *qgz_work[2];
    /* What the stage hands zt_zero_rs_unit: the gradients' dtype, and whether
     * they stay untouched until zt_zero_rs_finish (stage 1's accumulated full
     * gradients) or may be reused when the call returns (stages 2-3). */
    zt_dtype unit_grad_dt;
    bool unit_grads_persist;
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
 * is packed. `g` may be reused when this returns, unless the target said the
 * gradients persist: then a large unit is reduce-scattered straight from `g`
 * (its shards already lie rank-major, the layout reduce_scatter reads). */
zt_status zt_zero_rs_unit(zt_zero_rs *r, int u, const void *g, zt_dtype g_dt);
/* Where unit u's backward may write its gradient (padded_numel of the target's
 * unit_grad_dt) so that zt_zero_rs_unit sends it without packing: the send
 * buffer of the bucket the unit goes alone in, once that bucket's previous
 * collective is delivered. NULL when the unit is packed, or gradients go
 * direct from where they are. Overlapped stages 2-3 (fresh gradients, reused
 * as soon as rs_unit returns) with fp32 communication: a large unit's copy
 * into the bucket is the only work the pack would do. Called just before
 * the unit's backward, in the same order as zt_zero_rs_unit. */
zt_status zt_zero_rs_unit_buffer(zt_zero_rs *r, int u, void **g);
/* Waits for every bucket and delivers it. */
zt_status zt_zero_rs_finish(zt_zero_rs *r);

#endif
