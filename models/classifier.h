/*
 * classifier: the transformer classifier's units (models.md §3; tensor names
 * and order in model.h): the embedding (token embedding + fixed sinusoidal
 * positions + dropout), one post-LayerNorm encoder layer per unit with
 * PyTorch nn.TransformerEncoderLayer semantics (key padding masked out of
 * attention), and the head (mean over non-padded positions, Linear + ReLU +
 * dropout + Linear to 2 classes). Dropout sites: embedding 0; layer 0
 * attention weights, 1 after attention, 2 inside the feed-forward, 3 after
 * it; head 0.
 *
 * Memory: none beyond the unit values (see unit.h). Collective: none.
 */
#ifndef ZT_CLASSIFIER_H
#define ZT_CLASSIFIER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"
#include "models/model.h"
#include "models/unit.h"

void zt_classifier_embed(zt_unit *u, int64_t vocab, int64_t max_len, int64_t e, float dropout);
void zt_classifier_layer(zt_unit *u, const char *name, int64_t max_len, int64_t e, int64_t heads,
                         int64_t hidden, float dropout, bool gelu, bool unfused_attention);
void zt_classifier_head(zt_unit *u, int64_t max_len, int64_t e, int64_t hidden, int64_t classes,
                        float dropout);

/* The model: "embed", layers "layers.0".."layers.{N-1}", "head" (models/model.h),
 * two classes, from resolved arguments (n_layer, n_embd as E, n_head,
 * hidden_dim, max_len, dropout, activation, vocab_size). */
zt_status zt_classifier_build(const zt_model_args *a, zt_model *m);

#endif
