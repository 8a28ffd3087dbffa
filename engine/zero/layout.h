/*
 * layout: the flat parameter layout every ZeRO stage shares. All parameters
 * in unit order in one flat vector; each unit's slice is padded to a multiple
 * of world_size * 16 elements so every rank owns an equal, aligned, contiguous
 * slice of every unit (rank r owns elements [offset + r * shard, offset +
 * (r + 1) * shard) of unit u). A rank's partition is the concatenation of its
 * slices: "partition coordinate" p of unit u's column c (0 <= c < shard) is
 * part_offset + c. Padding elements are zero and stay zero (zero gradients;
 * Adam and SGD leave a zero parameter with zero gradient at 0). When the stage
 * shards parameters (engine/zero/stage.h), units of at most
 * stage3_param_persistence_threshold parameters stay whole on every rank
 * (while the running total stays within stage3_model_persistence_threshold).
 *
 * MiCS (mics_shard_size m): the layout partitions over groups of m
 * consecutive ranks instead of the world (world_size is then m).
 *
 * Memory: zt_layout owns its host unit table. Collective: none.
 */
#ifndef ZT_LAYOUT_H
#define ZT_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "models/model.h"

#define ZT_ZERO_ALIGN 16

typedef struct {
    int64_t offset;       /* start in the flat padded vector */
    int64_t numel;        /* unpadded parameter count */
    int64_t padded_numel; /* multiple of world_size * ZT_ZERO_ALIGN */
    int64_t shard_numel;  /* padded_numel / world_size */
    int64_t part_offset;  /* start of this unit's slice in a rank's partition */
    int64_t global_index; /* first parameter's index in unpadded (whole) model order */
    bool persistent;      /* stage 3: kept whole on every rank */
} zt_unit_layout;

typedef struct {
    int world_size, rank;
    bool params_sharded;      /* the stage keeps only shards of parameters (stage 3) */
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

/* The warning of a stage that shards parameters but whose every unit is
 * persistent (each has at most stage3_param_persistence_threshold
 * parameters): it partitions nothing, and every rank holds every parameter.
 * Writes the warning into buf, with the numbers and the key to change; ""
 * when the layout partitions something or does not shard parameters. */
void zt_layout_persistence_warning(const zt_layout *l, const zt_zero_config *z, char *buf,
                                   size_t n);

/* Per-rank width of a bucket of bucket_numel elements over the layout's
 * ranks: bucket_numel / world_size, at least 1, at most the partition. */
int64_t zt_layout_bucket_width(const zt_layout *l, int64_t bucket_numel);

/* Element i of a typed buffer. */
static inline void *zt_zero_at(const void *p, int64_t i, zt_dtype dt)
{
    return (char *)p + (size_t)i * zt_dtype_size(dt);
}

#endif
