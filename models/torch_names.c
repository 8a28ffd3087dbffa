/*
 * torch_names: cutting a model's flat parameters into PyTorch's tensors
 * (models/torch_names.h has the rules).
 */
#include "models/torch_names.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The PyTorch name of unit u's tensor p, before any split. */
static void torch_name(const zt_unit *u, const zt_param_spec *p, char *out, size_t n)
{
    bool module_unit = strcmp(u->name, "embed") != 0 && strcmp(u->name, "head") != 0;
    bool bare = !module_unit && strchr(p->name, '.') == NULL;
    snprintf(out, n, "%s%s%s%s", module_unit ? u->name : "", module_unit ? "." : "", p->name,
             bare ? ".weight" : "");
}

zt_status zt_torch_tensors_get(const zt_model *m, zt_torch_tensor **out, int *n)
{
    static const char *const qkv[3] = {"query", "key", "value"};
    static const char stacked_key[] = "attn.qkv.";
    int cap = 0;
    for (int u = 0; u < m->n_units; u++)
        cap += 3 * m->units[u].n_params; /* a split makes three */
    zt_torch_tensor *ts = calloc((size_t)(cap > 0 ? cap : 1), sizeof *ts);
    if (!ts)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %d tensor names", cap);
    int k = 0;
    int64_t offset = 0;
    for (int u = 0; u < m->n_units; u++) {
        const zt_unit *unit = &m->units[u];
        int64_t in_unit = 0;
        for (int i = 0; i < unit->n_params; i++) {
            const zt_param_spec *p = &unit->params[i];
            char name[96];
            torch_name(unit, p, name, sizeof name);
            const char *stacked = strstr(name, stacked_key);
            int parts = stacked && p->shape[0] % 3 == 0 ? 3 : 1;
            for (int s = 0; s < parts; s++) {
                zt_torch_tensor *t = &ts[k++];
                if (parts == 3)
                    snprintf(t->name, sizeof t->name, "%.*sattn.%s.%s", (int)(stacked - name),
                             name, qkv[s], stacked + strlen(stacked_key));
                else
                    snprintf(t->name, sizeof t->name, "%s", name);
                snprintf(t->zt_name, sizeof t->zt_name, "%s.%s", unit->name, p->name);
                t->ndim = p->ndim;
                memcpy(t->shape, p->shape, sizeof t->shape);
                memcpy(t->zt_shape, p->shape, sizeof t->zt_shape);
                t->shape[0] = p->shape[0] / parts;
                t->numel = p->numel / parts;
                t->offset = offset;
                t->unit = u;
                t->unit_offset = in_unit;
                t->zt_offset = s * t->numel;
                offset += t->numel;
                in_unit += t->numel;
            }
        }
    }
    *out = ts;
    *n = k;
    return ZT_OK;
}
