/*
 * unit: the grain of a model. A model is an ordered list of units (the MLP's
 * Linear+ReLU layers; later a transformer's embedding, blocks and head). A unit
 * declares its parameter tensors (name, shape, init) and runs forward and
 * backward on views into the engine's flat buffers. The engine, not the model,
 * decides where those views live, so no model knows which ZeRO stage runs it:
 * the unit is what ZeRO-3 gathers, what activation checkpointing keeps, and
 * what gradient buckets are cut along.
 *
 * A unit's parameters are packed, in declaration order, into one contiguous
 * slice of `param_numel` floats; `params`/`dparams` below point at that slice.
 *
 * Memory: units own nothing on the device. Activations x (n, in_numel),
 * y (n, out_numel) and saved (n, saved_numel) are engine buffers (ACTS arena).
 * Collective: none.
 */
#ifndef ZT_UNIT_H
#define ZT_UNIT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#define ZT_UNIT_MAX_PARAMS 16
#define ZT_UNIT_MAX_DIMS 8

typedef enum {
    ZT_INIT_UNIFORM = 0, /* U(-bound, bound), bound = 1/sqrt(fan_in) for Linear */
    ZT_INIT_ZEROS,
    ZT_INIT_ONES
} zt_init_kind;

typedef struct {
    char name[32];
    int ndim;
    int64_t shape[4];
    int64_t numel;
    zt_init_kind init;
    float bound;
} zt_param_spec;

/* One micro-batch as the units see it. */
typedef struct {
    int64_t n;              /* samples */
    const int32_t *labels;  /* (n) host copy for losses */
    uint64_t seed;
    int64_t step;
    bool training;
} zt_batch;

typedef struct zt_unit zt_unit;

typedef struct {
    /* y = f(x); writes what backward needs into `saved`. */
    void (*forward)(const zt_unit *u, const zt_backend *be, const float *params, const float *x,
                    float *y, float *saved, const zt_batch *b);
    /* From dy (may be overwritten: it is scratch after this call) computes dx
     * (skipped when NULL: the first unit) and dparams (= or += when accumulate). */
    void (*backward)(const zt_unit *u, const zt_backend *be, const float *params, const float *x,
                     const float *y, const float *saved, float *dy, float *dx, float *dparams,
                     bool accumulate, const zt_batch *b);
} zt_unit_ops;

struct zt_unit {
    char name[32];
    const zt_unit_ops *ops;
    int n_params;
    zt_param_spec params[ZT_UNIT_MAX_PARAMS];
    int64_t param_numel;
    int64_t in_numel, out_numel, saved_numel; /* per sample */
    int64_t dims[ZT_UNIT_MAX_DIMS];
};

/* Appends a parameter tensor to the unit's packed slice. */
void zt_unit_add_param(zt_unit *u, const char *name, int ndim, const int64_t *shape,
                       zt_init_kind init, float bound);

/* Initial values of elements [lo, hi) of the unit's packed slice, keyed by
 * (seed, global parameter index = global_offset + i) so any rank can make any
 * shard without the rest. out has hi - lo floats. */
void zt_unit_init_range(const zt_unit *u, uint64_t seed, int64_t global_offset, int64_t lo,
                        int64_t hi, float *out);

/* Linear(in, out) + ReLU: the MLP's unit. Params: weight (out, in), bias (out). */
void zt_unit_linear_relu(zt_unit *u, const char *name, int64_t in, int64_t out);

#endif
