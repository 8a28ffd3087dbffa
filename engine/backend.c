/*
 * backend: what is common to every backend (engine/backend.h): the backend
 * table and freeing through a backend's destroy.
 *
 * Memory: frees what the backend's init made. Collective: none.
 */
#include "engine/backend.h"

#include <stddef.h>

/* A new backend adds its row here and defines it in its own folder. */
static const zt_backend_entry *const zt_backend_table[] = {
    &zt_backend_cpu_entry,
    &zt_backend_cuda_entry,
};

const zt_backend_entry *zt_backend_find(zt_device_kind kind)
{
    for (size_t i = 0; i < sizeof zt_backend_table / sizeof zt_backend_table[0]; i++)
        if (zt_backend_table[i]->kind == kind)
            return zt_backend_table[i];
    return NULL;
}

void zt_backend_free(zt_backend *be)
{
    if (be->destroy)
        be->destroy(be);
}

void zt_backend_unfuse(zt_backend *be)
{
    be->residual_layernorm_forward = NULL;
    be->linear_act_forward = NULL;
    be->act_bias_grad = NULL;
    be->linear_backward = NULL;
}
