#include "data/synthetic.h"

#include <math.h>

#include "engine/rng.h"

static void synthetic_get(const zt_dataset *ds, int64_t index, zt_sample *out)
{
    float *x = out->x;
    int64_t in = ds->x_numel;
    double sq = 0.0;
    for (int64_t j = 0; j < in; j++) {
        float u = zt_rng_uniform(ds->seed, ZT_RNG_STREAM_DATA, (uint64_t)(index * in + j));
        x[j] = -10.0f + 20.0f * u;
        sq += (double)x[j] * (double)x[j];
    }
    out->labels[0] = (int32_t)((int64_t)floor(sq) % ds->n_classes);
    out->length = 0;
}

static void synthetic_free(zt_dataset *ds) { (void)ds; }

void zt_synthetic_init(zt_dataset *ds, int64_t n_samples, int64_t in_size, int64_t n_classes,
                       uint64_t seed)
{
    *ds = (zt_dataset){.name = "synthetic",
                       .n_samples = n_samples,
                       .x_numel = in_size,
                       .labels_numel = 1,
                       .n_classes = n_classes,
                       .get = synthetic_get,
                       .free = synthetic_free,
                       .seed = seed};
}
