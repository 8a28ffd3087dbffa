/*
 * gptlite: GPT-lite's units (models.md §2; tensor names and order in
 * model.h): the embedding (token + learned position), one pre-LayerNorm
 * decoder block per unit, and the head (final LayerNorm + Linear to the
 * vocabulary). Dropout sites: block 0 attention weights, 1 after the
 * attention projection, 2 after the MLP.
 *
 * Memory: none beyond the unit values (see unit.h). Collective: none.
 */
#ifndef ZT_GPTLITE_H
#define ZT_GPTLITE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"
#include "models/model.h"
#include "models/unit.h"

void zt_gptlite_embed(zt_unit *u, int64_t vocab, int64_t seq_len, int64_t c);
void zt_gptlite_block(zt_unit *u, const char *name, int64_t seq_len, int64_t c, int64_t heads,
                      float dropout, bool gelu, bool unfused_attention);
/* The head's output, the logits, is (seq_len, zt_gptlite_padded_vocab(vocab))
 * per sample: vocab columns, then padding. */
void zt_gptlite_head(zt_unit *u, int64_t seq_len, int64_t c, int64_t vocab);

/* Logits rows are padded to a multiple of this many columns (llm.c's 128):
 * aligned rows for the GEMM's output and the loss's vector loads. */
#define ZT_GPTLITE_VOCAB_ALIGN 128
/* vocab rounded up to ZT_GPTLITE_VOCAB_ALIGN. */
int64_t zt_gptlite_padded_vocab(int64_t vocab);

/* The model: "embed", blocks "h.0".."h.{L-1}", "head" (models/model.h), from
 * resolved arguments (n_layer, n_embd, n_head, block_size, dropout,
 * activation, vocab_size). */
zt_status zt_gptlite_build(const zt_model_args *a, zt_model *m);

#endif
