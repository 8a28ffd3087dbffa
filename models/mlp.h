/*
 * mlp: the benchmark MLP (models.md §1): Linear(in, W)+ReLU, (L-2) x
 * Linear(W, W)+ReLU, Linear(W, out)+ReLU (ReLU on the logits, as users run
 * it); one unit per layer ("layers.l": weight (out, in), bias (out)). It reads
 * the keyed synthetic data set (data/synthetic.h).
 *
 * Memory: the model's unit array (zt_model owns it). Collective: none.
 */
#ifndef ZT_MLP_H
#define ZT_MLP_H

#include "engine/status.h"
#include "models/model.h"

/* Builds the mlp from resolved arguments (width, layers, in_size, out_size). */
zt_status zt_mlp_build(const zt_model_args *a, zt_model *m);

#endif
