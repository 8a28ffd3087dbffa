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
 * y (n, out_numel), saved (n, saved_numel) and the scratch `work`
 * (n, work_numel) are engine buffers (ACTS; WORK for work), sized per sample
 * at the model's largest shape. With token inputs a batch may be shorter
 * (b->t <= the model's sequence length): units then use (n, b->t, ...) prefixes
 * laid out densely, so a (n, t, C) tensor occupies n * t * C floats.
 * `work` holds nothing between calls.
 *
 * Typed units: a unit whose `typed` is set runs on 16-bit tensors itself.
 * When the trainer runs it so (zt_batch.dt 16-bit), params, x, y, saved,
 * dy, dx and work's tensors are all of b->dt, through the backend's typed ops
 * (engine/backend.h), and only dparams is fp32: no fp32 copy of any of them
 * exists. Other units always get b->dt == ZT_F32 and fp32 tensors (the
 * trainer converts around them). Sizes stay counted in elements.
 * Collective: none.
 */
#ifndef ZT_UNIT_H
#define ZT_UNIT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"

#define ZT_UNIT_MAX_PARAMS 16
#define ZT_UNIT_MAX_DIMS 8

typedef enum {
    ZT_INIT_UNIFORM = 0, /* U(-bound, bound); Linear: bound = 1/sqrt(fan_in) */
    ZT_INIT_NORMAL,      /* N(0, bound^2) (Box-Muller on two counter draws) */
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

/* One micro-batch as the units see it. Device pointers unless stated. */
typedef struct {
    int64_t n;                 /* samples */
    int64_t t;                 /* tokens per sample in this batch (0: no tokens) */
    const int32_t *tokens;     /* (n, t) token ids, or NULL */
    const int32_t *lengths;    /* (n) valid tokens per sample (>= 1), or NULL: all t */
    const uint64_t *row_keys;  /* (n) global sample positions: dropout keys */
    uint64_t seed;
    int64_t step;
    bool training;             /* dropout on */
    zt_dtype dt;               /* the units' tensors (see "Typed units"); ZT_F32 unless typed */
} zt_batch;

typedef struct zt_unit zt_unit;

/* A unit's forward cost for n samples of t tokens (t = 0: no tokens),
 * counted as DeepSpeed's flops profiler counts the torch ops of the PyTorch
 * reference module (profiling/flops_profiler): a Linear of `rows` rows is
 * rows * in * out MACs and 2 FLOPs per MAC (its bias uncounted, as F.linear's
 * rule has it); attention's two matrix products n * t * t * C MACs each;
 * ReLU, GELU, softmax, attention scaling and element-wise adds one FLOP per
 * element, LayerNorm five, mean pooling one; embedding lookups and dropout
 * nothing. Backward is not counted (the profiler takes it as 2x forward). */
typedef struct {
    int64_t macs, flops;
} zt_unit_cost;

typedef struct {
    /* The unit's kind, named like the PyTorch class a model would use for it
     * ("Block"): what pipeline partitioning's type:REGEX matches. */
    const char *type;
    /* y = f(x); writes what backward needs into `saved`. x is NULL for a unit
     * that reads b->tokens instead (the embedding). Tensors of b->dt. */
    void (*forward)(const zt_unit *u, const zt_backend *be, const void *params, const void *x,
                    void *y, void *saved, void *work, const zt_batch *b);
    /* From dy (may be overwritten: it is scratch after this call) computes dx
     * (skipped when NULL: the first unit) and dparams (fp32; = or += when
     * accumulate). Tensors but dparams of b->dt. */
    void (*backward)(const zt_unit *u, const zt_backend *be, const void *params, const void *x,
                     const void *y, const void *saved, void *dy, void *dx, float *dparams,
                     void *work, bool accumulate, const zt_batch *b);
    /* The forward cost (zt_unit_cost) for n samples of t tokens. */
    zt_unit_cost (*cost)(const zt_unit *u, int64_t n, int64_t t);
} zt_unit_ops;

struct zt_unit {
    char name[32];
    const zt_unit_ops *ops;
    int n_params;
    zt_param_spec params[ZT_UNIT_MAX_PARAMS];
    int64_t param_numel;
    /* Per sample, in elements of the tensors' dtype; work_numel in floats
     * (work is fp32-sized, so a typed unit's 16-bit regions take half). */
    int64_t in_numel, out_numel, saved_numel, work_numel;
    bool typed;          /* runs on b->dt tensors itself ("Typed units") */
    int index;           /* position in the model: keys the unit's dropout sites */
    float dropout;       /* drop probability of the unit's dropout sites */
    int64_t dims[ZT_UNIT_MAX_DIMS];
};

/* The zt_dropout_desc.site of dropout k (< 16) of unit `index`. */
static inline uint64_t zt_dropout_site(int index, int k) { return (uint64_t)index * 16 + (uint64_t)k; }

/* u's forward cost; {0, 0} for a unit kind without a cost function. */
zt_unit_cost zt_unit_forward_cost(const zt_unit *u, int64_t n, int64_t t);

/* Clears u and names it: the start of every unit constructor. */
void zt_unit_reset(zt_unit *u, const char *name, const zt_unit_ops *ops);

/* Appends a parameter tensor to the unit's packed slice. */
void zt_unit_add_param(zt_unit *u, const char *name, int ndim, const int64_t *shape,
                       zt_init_kind init, float bound);

/* out[i] = where tensor i starts in the packed slice at `base`, elements of
 * dt (n_params pointers). */
void zt_unit_param_views(const zt_unit *u, const void *base, zt_dtype dt, void **out);

/* Initial values of elements [lo, hi) of the unit's packed slice, keyed by
 * (seed, global parameter index g = global_offset + i) so any rank can make any
 * shard without the rest. out has hi - lo floats. With
 * u(c) = zt_rng_uniform(seed, ZT_RNG_STREAM_INIT, c):
 *   UNIFORM  bound * (2 u(g) - 1)                  (float32 arithmetic)
 *   NORMAL   bound * sqrt(-2 ln(1 - u(g))) * cos(2 pi u(g ^ 2^63))  (float64, rounded) */
void zt_unit_init_range(const zt_unit *u, uint64_t seed, int64_t global_offset, int64_t lo,
                        int64_t hi, float *out);

/* Linear(in, out) + ReLU: the MLP's unit. Params: weight (out, in), bias (out). */
void zt_unit_linear_relu(zt_unit *u, const char *name, int64_t in, int64_t out);

#endif
