/*
 * backend: what is common to every backend (engine/backend.h).
 *
 * Memory: frees what the backend's init made. Collective: none.
 */
#include "engine/backend.h"

void zt_backend_free(zt_backend *be)
{
    if (be->kind == ZT_DEVICE_CUDA)
        zt_backend_cuda_free(be);
    else
        zt_backend_cpu_free(be);
}
