/*
 * model: the built-in models as sequences of units, chosen by name
 * (../shared/reference/models.md is the spec; PyTorch reference tests rebuild
 * each one from the names and orders below).
 *
 *   mlp         Linear(in, W)+ReLU, (L-2) x Linear(W, W)+ReLU, Linear(W, out)+ReLU
 *               (ReLU on the logits, as users run it); one unit per layer
 *               ("layers.l": weight (out, in), bias (out)).
 *   gptlite     units: "embed" (wte (V, C), wpe (T, C)), "h.0".."h.{L-1}" (one
 *               pre-LN block each), "head" (ln_f.weight, ln_f.bias (C),
 *               lm_head.weight (V, C), lm_head.bias (V)). A block's tensors:
 *               ln_1.weight, ln_1.bias (C); attn.qkv.weight (3C, C) = the query,
 *               key and value Linear(C, C) weights stacked in that order;
 *               attn.qkv.bias (3C); attn.proj.weight (C, C), attn.proj.bias (C);
 *               ln_2.weight, ln_2.bias (C); mlp.fc.weight (4C, C),
 *               mlp.fc.bias (4C); mlp.proj.weight (C, 4C), mlp.proj.bias (C).
 *               Block: x += drop(proj(attn(ln_1(x)))); x += drop(mlp(ln_2(x))),
 *               attention causal with dropout on its weights, mlp = fc, act
 *               (ReLU, or GELU-tanh with --activation gelu), proj. Loss: mean
 *               cross-entropy over all n * T positions.
 *   classifier  units: "embed" (embedding.weight (V, E); + the fixed sinusoidal
 *               table, then dropout), "layers.0".."layers.{N-1}" (PyTorch's
 *               nn.TransformerEncoderLayer, batch_first, post-LN: tensors in its
 *               state_dict order: self_attn.in_proj_weight (3E, E),
 *               self_attn.in_proj_bias (3E), self_attn.out_proj.weight (E, E),
 *               self_attn.out_proj.bias (E), linear1.weight (H, E),
 *               linear1.bias (H), linear2.weight (E, H), linear2.bias (E),
 *               norm1.weight, norm1.bias, norm2.weight, norm2.bias (E)), "head"
 *               (masked mean pool, fc1.weight (H, E), fc1.bias (H), ReLU,
 *               dropout, fc2.weight (2, H), fc2.bias (2)). Layer:
 *               x = norm1(x + drop(attn(x, key padding))),
 *               x = norm2(x + drop(linear2(drop(act(linear1(x)))))). Loss: mean
 *               cross-entropy over samples.
 *
 * Initialisation follows PyTorch's module defaults: Linear U(+-1/sqrt(fan_in))
 * for weight and bias; Embedding N(0, 1); LayerNorm weight 1, bias 0;
 * MultiheadAttention's in_proj_weight xavier-uniform U(+-sqrt(6 / (E + 3E)))
 * with zero in_proj_bias and out_proj.bias (out_proj.weight as a Linear).
 * gptlite's stacked query/key/value weight is three Linear(C, C) and its bias
 * U(+-1/sqrt(C)); wpe is an Embedding. LayerNorm eps 1e-5, attention scale
 * 1/sqrt(head size). Dropout sites are keyed per unit (zt_dropout_site).
 *
 * The loss is applied by the engine to the last unit's output, read as
 * (rows, logits_ld) logits of which the first n_classes columns count (the
 * rest is padding: gptlite pads its vocabulary to a multiple of 128, as
 * llm.c does, in the logits only, never in the parameters): rows = n *
 * seq_len when labels_per_token (gptlite), n otherwise, with the batch labels
 * (mean over counted rows). A model whose last unit's backward never reads
 * that unit's output sets loss_in_place: the engine then writes the logits'
 * gradient over the logits instead of into a buffer of its own.
 *
 * Which models exist, their arguments and defaults: models/registry.h.
 *
 * Memory: zt_model owns its unit array (host). Collective: none.
 */
#ifndef ZT_MODEL_H
#define ZT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"
#include "models/unit.h"

typedef struct {
    char name[32];
    /* mlp */
    int64_t width, layers, in_size, out_size; /* in/out <= 0: = width */
    /* gptlite and classifier (<= 0: the model's default, zt_model_args_resolve) */
    int64_t n_layer, n_embd, n_head, block_size; /* n_embd is E for the classifier */
    int64_t hidden_dim, max_len;                 /* classifier */
    double dropout;                              /* < 0: default */
    bool gelu;                                   /* --activation gelu */
    /* --attention unfused: the three-op attention path, for comparison. Not a
     * registry argument (no parameter depends on it, checkpoints do not
     * record it); the train flags set it. */
    bool unfused_attention;
    int64_t vocab_size;                          /* from the data's tokenizer */
} zt_model_args;

typedef struct {
    char name[32];
    int n_units;
    zt_unit *units;
    int64_t n_params;      /* unpadded total */
    /* A pipeline stage's view of a model (engine/pipe/pipe.h) holds a copy of
     * some of its units (their `index` stays their place in the whole model,
     * which keys dropout) and the whole model's index of its first parameter
     * here (which keys initial values); 0 for a whole model. */
    int64_t param_offset;
    int64_t in_numel;      /* floats per input sample (mlp), 0 for token models */
    int64_t seq_len;       /* tokens per sample at most (0: no tokens) */
    int64_t vocab_size;    /* token ids lie in [0, vocab_size) */
    int64_t hidden_size;   /* HF's config.hidden_size: the MLP's width, a transformer's C/E */
    int64_t labels_numel;  /* labels per sample: 1, or seq_len when labels_per_token */
    bool labels_per_token; /* language model: one label per position */
    int64_t n_classes;     /* logits per loss row */
    int64_t logits_ld;     /* floats from one row of logits to the next, >= n_classes */
    bool loss_in_place;    /* the last unit's backward does not read its output */
    int32_t ignore_index;
} zt_model;

/* mlp defaults (W 1024, L 4); every other field at "use the default"
 * (models/registry.c, with the schema). */
void zt_model_args_init(zt_model_args *a);
/* Replaces the unset fields of a->name's arguments by the model's defaults
 * (the registry's schema; zt_model_build does the same on its own copy). */
void zt_model_args_resolve(zt_model_args *a);
/* Builds the model the registry names a->name. */
zt_status zt_model_build(const zt_model_args *a, zt_model *m);
void zt_model_free(zt_model *m);

/* For the builders: m->units as n zeroed units. */
zt_status zt_model_alloc_units(zt_model *m, int n);
/* Shape checks the transformers share (ZT_ERR_USAGE naming the model). */
zt_status zt_model_check_transformer(const char *name, int64_t layers, int64_t width,
                                     int64_t heads, int64_t seq, double dropout, int64_t vocab);

#endif
