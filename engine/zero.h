/*
 * zero: the flat parameter layout every stage shares, and the per-stage
 * gradient/parameter policies.
 *
 * Layout: all parameters in unit order in one flat vector; each unit's slice is
 * padded to a multiple of world_size * 16 elements so every rank owns an equal,
 * aligned, contiguous slice of every unit (rank r owns elements
 * [offset + r * shard, offset + (r + 1) * shard) of unit u). A rank's partition
 * is the concatenation of its slices. Padding elements are zero and stay zero
 * (zero gradients; Adam and SGD leave a zero parameter with zero gradient at 0).
 *
 * Stage 0 policy: full params, grads and optimizer state on every rank.
 * Gradients are all-reduced at the accumulation boundary in buckets of
 * reduce_bucket_size elements cut from the flat gradient (in place, so no
 * bucket buffer exists); with overlap_comm each bucket is issued non-blocking
 * as soon as backward has finished the units it covers, overlapping the
 * backward of earlier units, and MPI progress is driven between units.
 * Averaging follows DeepSpeed: prescale_gradients divides by world size before
 * the sum; otherwise multiply by 1/gradient_predivide_factor before and by
 * predivide/world_size after.
 *
 * Memory: zt_layout owns its host unit table. zt_zero_reducer owns its host
 * request table; gradient memory belongs to the trainer.
 * Collective: zt_zero_reducer_unit_done (when it issues a bucket) and
 * zt_zero_reducer_finish.
 */
#ifndef ZT_ZERO_H
#define ZT_ZERO_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "model.h"
#include "status.h"

#define ZT_ZERO_ALIGN 16

typedef struct {
    int64_t offset;       /* start in the flat padded vector */
    int64_t numel;        /* unpadded parameter count */
    int64_t padded_numel; /* multiple of world_size * ZT_ZERO_ALIGN */
    int64_t shard_numel;  /* padded_numel / world_size */
    int64_t global_index; /* first parameter's index in unpadded model order */
} zt_unit_layout;

typedef struct {
    int world_size, rank;
    int n_units;
    zt_unit_layout *units;
    int64_t numel;           /* unpadded total */
    int64_t padded_numel;    /* flat vector length */
    int64_t partition_numel; /* this rank's share = padded_numel / world_size */
} zt_layout;

zt_status zt_layout_init(zt_layout *l, const zt_model *m, int world_size, int rank);
void zt_layout_free(zt_layout *l);

/* Stage-0 boundary gradient all-reduce. */
typedef struct {
    const zt_backend *be;
    zt_comm *comm;
    const zt_layout *layout;
    float *grads;         /* flat (padded_numel) */
    int64_t bucket_numel; /* reduce_bucket_size */
    bool overlap;
    float pre_scale, post_scale;
    int64_t issued_lo;    /* grads [issued_lo, padded_numel) have been issued */
    int64_t done_lo;      /* grads [done_lo, padded_numel) are final */
    zt_comm_req *reqs;
    int n_reqs, cap_reqs;
} zt_zero_reducer;

zt_status zt_zero_reducer_init(zt_zero_reducer *r, const zt_config *cfg, const zt_backend *be,
                               zt_comm *comm, const zt_layout *layout, float *grads);
void zt_zero_reducer_free(zt_zero_reducer *r);
/* Start of a boundary micro-step's backward. */
void zt_zero_reducer_begin(zt_zero_reducer *r);
/* Unit u's gradients are final for this step (called in reverse unit order). */
zt_status zt_zero_reducer_unit_done(zt_zero_reducer *r, int u);
/* Issues what is left, waits for everything and applies the post-scale. */
zt_status zt_zero_reducer_finish(zt_zero_reducer *r);

#endif
