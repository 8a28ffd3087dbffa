#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier.h"
#include "data/dataset.h"
#include "models/gptlite.h"

void zt_model_args_init(zt_model_args *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "mlp");
    a->width = 1024;
    a->layers = 4;
    a->dropout = -1.0;
}

static zt_status model_alloc_units(zt_model *m, int n)
{
    m->n_units = n;
    m->units = calloc((size_t)n, sizeof *m->units);
    if (!m->units)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %d units", n);
    return ZT_OK;
}

static zt_status model_build_mlp(const zt_model_args *a, zt_model *m)
{
    int64_t w = a->width, in = a->in_size > 0 ? a->in_size : w;
    int64_t out = a->out_size > 0 ? a->out_size : w;
    if (w <= 0)
        return zt_fail(ZT_ERR_USAGE, "pass --width W with W >= 1", "mlp width %lld must be >= 1",
                       (long long)w);
    if (a->layers < 2)
        return zt_fail(ZT_ERR_USAGE, "the mlp has an input and an output layer: use --layers >= 2",
                       "mlp layers %lld must be >= 2", (long long)a->layers);
    if (out < 2)
        return zt_fail(ZT_ERR_USAGE, "classification needs at least 2 classes: --out-size >= 2",
                       "mlp out size %lld must be >= 2", (long long)out);
    ZT_TRY(model_alloc_units(m, (int)a->layers));
    for (int l = 0; l < m->n_units; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d", l);
        int64_t fi = l == 0 ? in : w, fo = l == m->n_units - 1 ? out : w;
        zt_unit_linear_relu(&m->units[l], name, fi, fo);
    }
    m->in_numel = in;
    m->labels_numel = 1;
    m->n_classes = out;
    return ZT_OK;
}

static void model_default(int64_t *v, int64_t dflt)
{
    if (*v <= 0)
        *v = dflt;
}

/* models.md §2 and §3 defaults. */
void zt_model_args_resolve(zt_model_args *a)
{
    bool gpt = strcmp(a->name, "gptlite") == 0;
    if (!gpt && strcmp(a->name, "classifier") != 0)
        return;
    model_default(&a->n_layer, gpt ? 12 : 6);
    model_default(&a->n_embd, gpt ? 768 : 256);
    model_default(&a->n_head, gpt ? 12 : 8);
    if (gpt)
        model_default(&a->block_size, 2048);
    else {
        model_default(&a->hidden_dim, 1024);
        model_default(&a->max_len, 1024);
    }
    if (a->dropout < 0.0)
        a->dropout = gpt ? 0.1 : 0.2;
}

/* Shape checks shared by the transformers. */
static zt_status model_check_transformer(const char *name, int64_t layers, int64_t width,
                                         int64_t heads, int64_t seq, double dropout,
                                         int64_t vocab)
{
    if (vocab <= 0)
        return zt_fail(ZT_ERR_INTERNAL, "", "%s built without a vocabulary", name);
    if (layers < 1 || width < 1 || heads < 1 || seq < 1)
        return zt_fail(ZT_ERR_USAGE, "layers, width, heads and sequence length are >= 1",
                       "%s: layers %lld, width %lld, heads %lld, sequence %lld", name,
                       (long long)layers, (long long)width, (long long)heads, (long long)seq);
    if (width % heads != 0)
        return zt_fail(ZT_ERR_USAGE, "choose a width that is a multiple of the head count",
                       "%s: width %lld is not divisible by %lld heads", name, (long long)width,
                       (long long)heads);
    if (!(dropout >= 0.0 && dropout < 1.0))
        return zt_fail(ZT_ERR_USAGE, "--dropout takes a probability in [0, 1)",
                       "%s: dropout %g is not in [0, 1)", name, dropout);
    return ZT_OK;
}

static zt_status model_build_gptlite(const zt_model_args *a, zt_model *m)
{
    int64_t layers = a->n_layer, c = a->n_embd, heads = a->n_head, seq = a->block_size;
    int64_t vocab = a->vocab_size;
    double p = a->dropout;
    ZT_TRY(model_check_transformer("gptlite", layers, c, heads, seq, p, vocab));
    ZT_TRY(model_alloc_units(m, (int)layers + 2));
    zt_gptlite_embed(&m->units[0], vocab, seq, c);
    for (int l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%d", l);
        zt_gptlite_block(&m->units[1 + l], name, seq, c, heads, (float)p, a->gelu);
    }
    zt_gptlite_head(&m->units[layers + 1], seq, c, vocab);
    m->seq_len = seq;
    m->vocab_size = vocab;
    m->labels_numel = seq;
    m->labels_per_token = true;
    m->n_classes = vocab;
    return ZT_OK;
}

/* Two classes: negative, positive. */
static zt_status model_build_classifier(const zt_model_args *a, zt_model *m)
{
    int64_t layers = a->n_layer, e = a->n_embd, heads = a->n_head, hidden = a->hidden_dim;
    int64_t seq = a->max_len, vocab = a->vocab_size;
    double p = a->dropout;
    ZT_TRY(model_check_transformer("classifier", layers, e, heads, seq, p, vocab));
    ZT_TRY(model_alloc_units(m, (int)layers + 2));
    zt_classifier_embed(&m->units[0], vocab, seq, e, (float)p);
    for (int l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d", l);
        zt_classifier_layer(&m->units[1 + l], name, seq, e, heads, hidden, (float)p, a->gelu);
    }
    zt_classifier_head(&m->units[layers + 1], seq, e, hidden, 2, (float)p);
    m->seq_len = seq;
    m->vocab_size = vocab;
    m->labels_numel = 1;
    m->n_classes = 2;
    return ZT_OK;
}

zt_status zt_model_build(const zt_model_args *args, zt_model *m)
{
    zt_model_args resolved = *args;
    const zt_model_args *a = &resolved;
    zt_model_args_resolve(&resolved);
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", args->name);
    m->ignore_index = ZT_IGNORE_INDEX;
    zt_status st;
    if (strcmp(a->name, "mlp") == 0)
        st = model_build_mlp(a, m);
    else if (strcmp(a->name, "gptlite") == 0)
        st = model_build_gptlite(a, m);
    else if (strcmp(a->name, "classifier") == 0)
        st = model_build_classifier(a, m);
    else
        return zt_fail(ZT_ERR_USAGE, "models: mlp, gptlite, classifier", "unknown model '%s'",
                       a->name);
    if (st != ZT_OK) {
        zt_model_free(m);
        return st;
    }
    for (int u = 0; u < m->n_units; u++) {
        m->units[u].index = u;
        m->n_params += m->units[u].param_numel;
    }
    return ZT_OK;
}

void zt_model_free(zt_model *m)
{
    free(m->units);
    m->units = NULL;
}
