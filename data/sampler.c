#include "data/sampler.h"

#include "engine/rng.h"

zt_status zt_sampler_init(zt_sampler *s, int64_t n_samples, int64_t train_batch,
                          int64_t micro_batch, int world_size, int rank, bool shuffle,
                          uint64_t seed)
{
    if (train_batch > n_samples)
        return zt_fail(ZT_ERR_DATA, "use a smaller train_batch_size or a larger data set",
                       "the data set has %lld samples, fewer than one global batch of %lld",
                       (long long)n_samples, (long long)train_batch);
    *s = (zt_sampler){.n_samples = n_samples,
                      .train_batch = train_batch,
                      .micro_batch = micro_batch,
                      .world_size = world_size,
                      .rank = rank,
                      .steps_per_epoch = n_samples / train_batch,
                      .shuffle = shuffle,
                      .seed = seed};
    return ZT_OK;
}

int64_t zt_sampler_permute(int64_t n, uint64_t seed, int64_t epoch, int64_t p)
{
    int half = 1;
    while (((int64_t)1 << (2 * half)) < n)
        half++;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t x = (uint64_t)p;
    /* Cycle walking: a permutation of [0, 4^half) restricted to [0, n) by
     * re-applying it until the value lands in range stays a bijection. */
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t key = zt_rng_u64(seed, ZT_RNG_STREAM_SHUFFLE, (uint64_t)epoch * 4 + round);
            uint64_t f = zt_rng_mix(r ^ key) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t zt_sampler_offset(const zt_sampler *s, int64_t micro_step, int64_t k)
{
    return micro_step * s->micro_batch * s->world_size + s->rank * s->micro_batch + k;
}

int64_t zt_sampler_index(const zt_sampler *s, int64_t step, int64_t micro_step, int64_t k)
{
    int64_t epoch = step / s->steps_per_epoch;
    int64_t base = (step % s->steps_per_epoch) * s->train_batch;
    int64_t p = base + zt_sampler_offset(s, micro_step, k);
    return s->shuffle ? zt_sampler_permute(s->n_samples, s->seed, epoch, p) : p;
}

void zt_sampler_state_get(const zt_sampler *s, int64_t step, zt_sampler_state *out)
{
    *out = (zt_sampler_state){.n_samples = s->n_samples,
                              .steps_per_epoch = s->steps_per_epoch,
                              .epoch = step / s->steps_per_epoch,
                              .position = step % s->steps_per_epoch * s->train_batch,
                              .shuffle = s->shuffle};
}
