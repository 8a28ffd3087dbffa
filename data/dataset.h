/*
 * dataset: the interface the trainer reads samples through. A sample is a pure
 * function of its global index, so which rank reads it never matters.
 *
 * Memory: a dataset owns whatever its impl holds (freed by `free`); callers own
 * the x / label buffers they pass. Collective: none.
 */
#ifndef ZT_DATASET_H
#define ZT_DATASET_H

#include <stdbool.h>
#include <stdint.h>

typedef struct zt_dataset zt_dataset;

struct zt_dataset {
    const char *name;
    int64_t n_samples;
    int64_t x_numel;   /* floats per sample input */
    int64_t n_classes;
    /* x: (x_numel) floats; label: one class index */
    void (*get)(const zt_dataset *ds, int64_t index, float *x, int32_t *label);
    void (*free)(zt_dataset *ds);
    void *impl;
    uint64_t seed;
    bool shuffle; /* the sampler permutes positions each epoch */
};

#endif
