/*
 * registry: the model table and the argument schema (models/registry.h).
 * models.md gives the defaults: the mlp W 1024, L 4; gptlite 12 layers, width
 * 768, 12 heads, context 2048, dropout 0.1; the classifier 6 layers, E 256,
 * 8 heads, H 1024, 1024 tokens, dropout 0.2.
 */
#include "models/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier.h"
#include "models/gptlite.h"
#include "models/mlp.h"

static const zt_model_entry registry_models[] = {
    {"mlp", "the benchmark MLP on keyed synthetic data", ZT_DATA_SYNTHETIC, 0, "", NULL,
     zt_mlp_build},
    {"gptlite", "a GPT-2-shaped decoder language model on a text file", ZT_DATA_TEXT, 65,
     "tiny shakespeare is ../shared/data/tinyshakespeare/input.txt in the project's checkout",
     "block_size", zt_gptlite_build},
    {"classifier", "a transformer encoder that classifies reviews", ZT_DATA_LABELLED, 50257,
     "the IMDB sample is ../shared/data/imdb/imdb-2500.csv in the project's checkout",
     "max_len", zt_classifier_build},
};
#define REGISTRY_N_MODELS ((int)(sizeof registry_models / sizeof *registry_models))

/* Upper bounds of the dimensions, so that every per-unit size the builders
 * compute (a weight of width x width, attention scores heads x T x T per
 * sample, an embedding vocab x width) fits in int64_t with room to spare;
 * sums over units are checked where the model is built. Token ids are int32. */
#define MAX_WIDTH (INT64_C(1) << 24)
#define MAX_LAYERS (INT64_C(1) << 16)
#define MAX_HEADS (INT64_C(1) << 16)
#define MAX_SEQ (INT64_C(1) << 20)
#define MAX_VOCAB ((int64_t)INT32_MAX)

#define ARG_OFF(f) offsetof(zt_model_args, f)
#define NONE {NULL, NULL}

static const zt_model_arg registry_args[] = {
    {"width", "--width", "mlp", ZT_MODEL_ARG_INT, ARG_OFF(width), 1, MAX_WIDTH, 1024, NULL, NONE,
     "W", "mlp width"},
    {"layers", "--layers", "mlp", ZT_MODEL_ARG_INT, ARG_OFF(layers), 2, MAX_LAYERS, 4, NULL,
     NONE, "L", "mlp Linear layers (>= 2)"},
    {"in_size", "--in-size", "mlp", ZT_MODEL_ARG_INT, ARG_OFF(in_size), 1, MAX_WIDTH, 0,
     "width", NONE, "N", "mlp input features"},
    {"out_size", "--out-size", "mlp", ZT_MODEL_ARG_INT, ARG_OFF(out_size), 2, MAX_WIDTH, 0,
     "width", NONE, "N", "mlp classes"},
    {"n_layer", "--n-layer", "gptlite", ZT_MODEL_ARG_INT, ARG_OFF(n_layer), 1, MAX_LAYERS, 12,
     NULL, NONE, "N", "transformer layers"},
    {"n_layer", "--n-layer", "classifier", ZT_MODEL_ARG_INT, ARG_OFF(n_layer), 1, MAX_LAYERS, 6,
     NULL, NONE, "N", "transformer layers"},
    {"n_embd", "--n-embd", "gptlite", ZT_MODEL_ARG_INT, ARG_OFF(n_embd), 1, MAX_WIDTH, 768, NULL,
     NONE, "C", "gptlite width"},
    {"n_embd", "--embed-dim", "classifier", ZT_MODEL_ARG_INT, ARG_OFF(n_embd), 1, MAX_WIDTH, 256,
     NULL, NONE, "E", "classifier width"},
    {"n_head", "--n-head", "gptlite", ZT_MODEL_ARG_INT, ARG_OFF(n_head), 1, MAX_HEADS, 12, NULL,
     NONE, "N", "attention heads"},
    {"n_head", "--n-head", "classifier", ZT_MODEL_ARG_INT, ARG_OFF(n_head), 1, MAX_HEADS, 8,
     NULL, NONE, "N", "attention heads"},
    {"block_size", "--block-size", "gptlite", ZT_MODEL_ARG_INT, ARG_OFF(block_size), 1,
     MAX_SEQ, 2048, NULL, NONE, "T", "gptlite context length"},
    {"hidden_dim", "--hidden-dim", "classifier", ZT_MODEL_ARG_INT, ARG_OFF(hidden_dim), 1,
     MAX_WIDTH, 1024, NULL, NONE, "H", "classifier feed-forward width"},
    {"max_len", "--max-len", "classifier", ZT_MODEL_ARG_INT, ARG_OFF(max_len), 1, MAX_SEQ,
     1024, NULL, NONE, "N", "classifier tokens per review"},
    {"vocab_size", "--vocab-size", "gptlite", ZT_MODEL_ARG_INT, ARG_OFF(vocab_size), 1,
     MAX_VOCAB, 0, NULL, NONE, "N", "embedding rows, at least the tokenizer's (default: its)"},
    {"vocab_size", "--vocab-size", "classifier", ZT_MODEL_ARG_INT, ARG_OFF(vocab_size), 1,
     MAX_VOCAB, 0, NULL, NONE, "N", "embedding rows, at least the tokenizer's (default: its)"},
    {"activation", "--activation", "gptlite", ZT_MODEL_ARG_CHOICE, ARG_OFF(gelu), 0, 1, 0, NULL,
     {"relu", "gelu"}, "relu|gelu", "feed-forward activation (gelu: GPT-2's tanh form)"},
    {"activation", "--activation", "classifier", ZT_MODEL_ARG_CHOICE, ARG_OFF(gelu), 0, 1, 0,
     NULL, {"relu", "gelu"}, "relu|gelu", "feed-forward activation (gelu: GPT-2's tanh form)"},
    {"dropout", "--dropout", "gptlite", ZT_MODEL_ARG_REAL, ARG_OFF(dropout), 0, 1, 0.1, NULL,
     NONE, "P", "dropout"},
    {"dropout", "--dropout", "classifier", ZT_MODEL_ARG_REAL, ARG_OFF(dropout), 0, 1, 0.2, NULL,
     NONE, "P", "dropout"},
};
#define REGISTRY_N_ARGS ((int)(sizeof registry_args / sizeof *registry_args))

const zt_model_entry *zt_model_registry(int *n)
{
    *n = REGISTRY_N_MODELS;
    return registry_models;
}

const zt_model_entry *zt_model_find(const char *name)
{
    for (int i = 0; i < REGISTRY_N_MODELS; i++)
        if (!strcmp(registry_models[i].name, name))
            return &registry_models[i];
    return NULL;
}

const char *zt_model_names(void) { return "mlp, gptlite, classifier"; }

int64_t zt_model_args_seq_len(const zt_model_args *a)
{
    const zt_model_entry *e = zt_model_find(a->name);
    for (int i = 0; e && e->seq_key && i < REGISTRY_N_ARGS; i++)
        if (!strcmp(registry_args[i].key, e->seq_key) && !strcmp(registry_args[i].model, a->name))
            return (int64_t)zt_model_arg_value(&registry_args[i], a);
    return 0;
}

const zt_model_arg *zt_model_args_schema(int *n)
{
    *n = REGISTRY_N_ARGS;
    return registry_args;
}

const zt_model_arg *zt_model_arg_for(const char *flag, const char *model)
{
    for (int i = 0; i < REGISTRY_N_ARGS; i++)
        if (!strcmp(registry_args[i].flag, flag) && !strcmp(registry_args[i].model, model))
            return &registry_args[i];
    return NULL;
}

bool zt_model_arg_is_flag(const char *flag)
{
    for (int i = 0; i < REGISTRY_N_ARGS; i++)
        if (!strcmp(registry_args[i].flag, flag))
            return true;
    return false;
}

void zt_model_arg_models(const char *flag, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < REGISTRY_N_ARGS && len < n; i++)
        if (!strcmp(registry_args[i].flag, flag))
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " " : "",
                                    registry_args[i].model);
}

static void *registry_field(const zt_model_arg *r, const zt_model_args *a)
{
    return (char *)a + r->offset;
}

bool zt_model_arg_parse(const zt_model_arg *r, const char *text, zt_model_args *a)
{
    void *f = registry_field(r, a);
    char *end = NULL;
    errno = 0;
    switch (r->kind) {
    case ZT_MODEL_ARG_INT: {
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end != '\0' || v < r->min || (double)v > r->max)
            return false;
        *(int64_t *)f = v;
        return true;
    }
    case ZT_MODEL_ARG_REAL: {
        double v = strtod(text, &end);
        if (errno || end == text || *end != '\0' || !isfinite(v) || v < r->min || v >= r->max)
            return false;
        *(double *)f = v;
        return true;
    }
    case ZT_MODEL_ARG_CHOICE:
        for (int c = 0; c < 2; c++)
            if (!strcmp(text, r->choices[c])) {
                *(bool *)f = c == 1;
                return true;
            }
        return false;
    }
    return false;
}

double zt_model_arg_value(const zt_model_arg *r, const zt_model_args *a)
{
    const void *f = registry_field(r, a);
    switch (r->kind) {
    case ZT_MODEL_ARG_INT: return (double)*(const int64_t *)f;
    case ZT_MODEL_ARG_REAL: return *(const double *)f;
    case ZT_MODEL_ARG_CHOICE: return *(const bool *)f ? 1.0 : 0.0;
    }
    return 0.0;
}

const char *zt_model_arg_choice(const zt_model_arg *r, const zt_model_args *a)
{
    return r->choices[zt_model_arg_value(r, a) != 0.0];
}

void zt_model_arg_set(const zt_model_arg *r, zt_model_args *a, double v)
{
    void *f = registry_field(r, a);
    switch (r->kind) {
    case ZT_MODEL_ARG_INT: *(int64_t *)f = (int64_t)v; break;
    case ZT_MODEL_ARG_REAL: *(double *)f = v; break;
    case ZT_MODEL_ARG_CHOICE: *(bool *)f = v != 0.0; break;
    }
}

void zt_model_args_init(zt_model_args *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "mlp");
    a->width = 1024;
    a->layers = 4;
    a->dropout = -1.0;
}

static bool registry_unset(const zt_model_arg *r, const zt_model_args *a)
{
    double v = zt_model_arg_value(r, a);
    return r->kind == ZT_MODEL_ARG_INT ? v <= 0 : r->kind == ZT_MODEL_ARG_REAL && v < 0;
}

void zt_model_args_resolve(zt_model_args *a)
{
    for (int i = 0; i < REGISTRY_N_ARGS; i++) {
        const zt_model_arg *r = &registry_args[i];
        if (strcmp(r->model, a->name) != 0 || !registry_unset(r, a))
            continue;
        if (r->dflt_from) {
            const zt_model_arg *from = NULL;
            for (int k = 0; k < REGISTRY_N_ARGS && !from; k++)
                if (!strcmp(registry_args[k].key, r->dflt_from) &&
                    !strcmp(registry_args[k].model, a->name))
                    from = &registry_args[k];
            if (from)
                zt_model_arg_set(r, a, zt_model_arg_value(from, a));
        } else if (r->dflt > 0) {
            zt_model_arg_set(r, a, r->dflt);
        }
    }
}
