/*
 * torch_names: the PyTorch state_dict of each built-in model. A model's
 * parameters are one flat vector in unit order (the --dump-params and
 * consolidate layout); this module cuts it into the tensors of the nn.Module
 * that scripts/zt_torch.py builds, each a contiguous run of that vector, in
 * the same order. The names are the ones ../shared/reference/models.md
 * implies; docs/interop.md lists them:
 *   - the units "embed" and "head" are not modules: their prefix is dropped
 *     ("head.lm_head.weight" -> "lm_head.weight");
 *   - a bare tensor of those units is an nn.Embedding's weight
 *     ("embed.wte" -> "wte.weight");
 *   - GPT-lite's stacked "attn.qkv.weight" (3C, C) and "attn.qkv.bias" (3C)
 *     are models.md's three Linear(C, C): "attn.query.weight",
 *     "attn.key.weight", "attn.value.weight" (rows [0, C), [C, 2C), [2C, 3C)),
 *     and the same for the biases. The classifier's in_proj_weight stays
 *     stacked, as nn.MultiheadAttention keeps it.
 * Everything else already has its PyTorch name ("layers.0.weight",
 * "h.3.mlp.fc.bias", "layers.1.self_attn.in_proj_weight").
 *
 * Memory: zt_torch_tensors_get returns a malloc'd array the caller frees.
 * Collective: none.
 */
#ifndef ZT_TORCH_NAMES_H
#define ZT_TORCH_NAMES_H

#include <stdint.h>

#include "engine/status.h"
#include "models/model.h"

typedef struct {
    char name[96];       /* the PyTorch state_dict key */
    char zt_name[72];    /* "unit.tensor", the consolidate index's name */
    int ndim;
    int64_t shape[4];
    int64_t numel;
    int64_t offset;      /* first element in the model's flat vector */
    int unit;            /* the unit it belongs to */
    int64_t unit_offset; /* first element within that unit's packed slice */
    int64_t zt_shape[4]; /* the zerotrain tensor's shape (ndim dims): a split's whole */
    int64_t zt_offset;   /* where this piece starts within the zerotrain tensor */
} zt_torch_tensor;

/* The tensors of model m in flat order (they tile it exactly). *out is
 * malloc'd; *n its length. */
zt_status zt_torch_tensors_get(const zt_model *m, zt_torch_tensor **out, int *n);

#endif
