/*
 * mlp: the benchmark MLP's builder (models/mlp.h).
 */
#include "models/mlp.h"

#include <stdio.h>

zt_status zt_mlp_build(const zt_model_args *a, zt_model *m)
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
    ZT_TRY(zt_model_alloc_units(m, (int)a->layers));
    for (int l = 0; l < m->n_units; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d", l);
        int64_t fi = l == 0 ? in : w, fo = l == m->n_units - 1 ? out : w;
        zt_unit_linear_relu(&m->units[l], name, fi, fo);
    }
    m->in_numel = in;
    m->hidden_size = w;
    m->labels_numel = 1;
    m->n_classes = out;
    return ZT_OK;
}
