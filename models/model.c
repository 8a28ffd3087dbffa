/*
 * model: building a model from its resolved arguments through the registry,
 * and what the builders share.
 */
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "engine/checked.h"
#include "models/registry.h"

zt_status zt_model_alloc_units(zt_model *m, int n)
{
    m->n_units = n;
    m->units = calloc((size_t)n, sizeof *m->units);
    if (!m->units)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %d units", n);
    return ZT_OK;
}

/* Shape checks shared by the transformers. */
zt_status zt_model_check_transformer(const char *name, int64_t layers, int64_t width,
                                     int64_t heads, int64_t seq, double dropout, int64_t vocab)
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

/* The schema's bounds keep every per-unit size within int64_t; arguments
 * that did not come through the flags (a checkpoint's manifest) are held to
 * them here too. */
static zt_status model_check_bounds(const zt_model_args *a)
{
    int n;
    const zt_model_arg *rows = zt_model_args_schema(&n);
    for (int i = 0; i < n; i++) {
        const zt_model_arg *r = &rows[i];
        double v = zt_model_arg_value(r, a);
        bool set = r->kind == ZT_MODEL_ARG_INT ? v > 0 : r->kind == ZT_MODEL_ARG_REAL && v >= 0;
        if (strcmp(r->model, a->name) != 0 || !set || (v >= r->min && v <= r->max))
            continue;
        return zt_fail(ZT_ERR_USAGE, "give a value in range (see zerotrain --help)",
                       "%s: %s %.17g is outside [%.17g, %.17g]", a->name, r->flag, v, r->min,
                       r->max);
    }
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
    const zt_model_entry *e = zt_model_find(a->name);
    if (!e)
        return zt_fail(ZT_ERR_USAGE, "models: mlp, gptlite, classifier", "unknown model '%s'",
                       a->name);
    zt_status st = model_check_bounds(a);
    if (st == ZT_OK)
        st = e->build(a, m);
    if (st != ZT_OK) {
        zt_model_free(m);
        return st;
    }
    if (m->logits_ld == 0)
        m->logits_ld = m->n_classes;
    for (int u = 0; u < m->n_units; u++) {
        m->units[u].index = u;
        if (!zt_checked_add(m->n_params, m->units[u].param_numel, &m->n_params)) {
            zt_model_free(m);
            return zt_fail(ZT_ERR_USAGE, "choose fewer layers or smaller widths",
                           "model %s has more than 2^63 parameters", a->name);
        }
    }
    return ZT_OK;
}

void zt_model_free(zt_model *m)
{
    free(m->units);
    m->units = NULL;
}
