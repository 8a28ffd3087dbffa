/*
 * model: the built-in models as sequences of units, chosen by name.
 *
 *   mlp   models.md §1: Linear(in, W)+ReLU, (L-2) x Linear(W, W)+ReLU,
 *         Linear(W, out)+ReLU (ReLU on the logits, as users run it); one unit per
 *         layer; softmax cross-entropy over `out` classes.
 *
 * The loss is applied by the engine to the last unit's output (n, n_classes)
 * with the batch labels (mean over counted rows).
 *
 * Memory: zt_model owns its unit array (host). Collective: none.
 */
#ifndef ZT_MODEL_H
#define ZT_MODEL_H

#include <stdint.h>

#include "status.h"
#include "unit.h"

typedef struct {
    char name[32];
    /* mlp */
    int64_t width, layers, in_size, out_size; /* in/out <= 0: = width */
} zt_model_args;

typedef struct {
    char name[32];
    int n_units;
    zt_unit *units;
    int64_t n_params;   /* unpadded total */
    int64_t in_numel;   /* floats per input sample */
    int64_t n_classes;  /* width of the last unit's output */
    int32_t ignore_index;
} zt_model;

void zt_model_args_init(zt_model_args *a); /* mlp defaults: W 1024, L 4 */
zt_status zt_model_build(const zt_model_args *a, zt_model *m);
void zt_model_free(zt_model *m);

#endif
