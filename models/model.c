#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zt_model_args_init(zt_model_args *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "mlp");
    a->width = 1024;
    a->layers = 4;
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
    m->n_units = (int)a->layers;
    m->units = calloc((size_t)m->n_units, sizeof *m->units);
    if (!m->units)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %d units", m->n_units);
    for (int l = 0; l < m->n_units; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d", l);
        int64_t fi = l == 0 ? in : w, fo = l == m->n_units - 1 ? out : w;
        zt_unit_linear_relu(&m->units[l], name, fi, fo);
    }
    m->in_numel = in;
    m->n_classes = out;
    return ZT_OK;
}

zt_status zt_model_build(const zt_model_args *a, zt_model *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", a->name);
    m->ignore_index = -100;
    if (strcmp(a->name, "mlp") == 0) {
        ZT_TRY(model_build_mlp(a, m));
    } else {
        return zt_fail(ZT_ERR_USAGE, "models: mlp (gptlite and classifier come later)",
                       "unknown model '%s'", a->name);
    }
    for (int u = 0; u < m->n_units; u++)
        m->n_params += m->units[u].param_numel;
    return ZT_OK;
}

void zt_model_free(zt_model *m)
{
    free(m->units);
    m->units = NULL;
}
