/*
 * sampler: which samples each rank reads, keyed by global position so the
 * global batch never depends on the world size, the stage or the accumulation
 * split.
 *
 * Optimizer step s reads global positions base + [0, train_batch) with
 * steps_per_epoch = n_samples / train_batch (the last partial batch of an epoch
 * is dropped, like drop_last), epoch = s / steps_per_epoch and
 * base = (s % steps_per_epoch) * train_batch. Micro-step m on rank r takes
 * positions base + m * micro * world + r * micro + [0, micro).
 * Position p maps to sample index p (no shuffle) or perm_epoch(p) (shuffle): a
 * keyed bijection of [0, n_samples) - a 4-round Feistel network on the smallest
 * even bit width covering n_samples, cycle-walked back into range, round keys
 * zt_rng_u64(seed, ZT_RNG_STREAM_SHUFFLE, epoch * 4 + round).
 * So the data position has no state to restore: a checkpoint records where a
 * step stands (zt_sampler_state) for the reader and for the resume check of
 * the data set's size.
 *
 * Memory: plain value. Collective: none.
 */
#ifndef ZT_SAMPLER_H
#define ZT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct {
    int64_t n_samples, train_batch, micro_batch;
    int world_size, rank;
    int64_t steps_per_epoch;
    bool shuffle;
    uint64_t seed;
} zt_sampler;

zt_status zt_sampler_init(zt_sampler *s, int64_t n_samples, int64_t train_batch,
                          int64_t micro_batch, int world_size, int rank, bool shuffle,
                          uint64_t seed);

/* Position of element k of this rank's micro-batch `micro_step` within its
 * step's global batch: micro_step * micro * world + rank * micro + k. */
int64_t zt_sampler_offset(const zt_sampler *s, int64_t micro_step, int64_t k);

/* Sample index of element k of this rank's micro-batch `micro_step` in `step`. */
int64_t zt_sampler_index(const zt_sampler *s, int64_t step, int64_t micro_step, int64_t k);

/* Where the data order stands after `step` optimizer steps, as a checkpoint
 * records it. */
typedef struct {
    int64_t n_samples, steps_per_epoch;
    int64_t epoch;    /* of the next step */
    int64_t position; /* its first global position within the epoch */
    bool shuffle;
} zt_sampler_state;

void zt_sampler_state_get(const zt_sampler *s, int64_t step, zt_sampler_state *out);

/* The keyed permutation itself (exposed for tests). */
int64_t zt_sampler_permute(int64_t n, uint64_t seed, int64_t epoch, int64_t p);

#endif
