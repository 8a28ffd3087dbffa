/*
 * cuda_absent: the CUDA backend's entry points and table row in a binary built
 * without nvcc (the Makefile compiles this file instead of the .cu files
 * there), so the CLI can tell the user what is missing instead of failing to
 * link.
 *
 * Memory: none. Collective: none.
 */
#include "engine/cuda/cuda.h"

#define ZT_CUDA_ABSENT "this zerotrain was built without CUDA (no nvcc found at build time)"

bool zt_backend_cuda_built(void) { return false; }

int zt_backend_cuda_device_count(const char **why)
{
    if (why)
        *why = ZT_CUDA_ABSENT;
    return 0;
}

zt_status zt_backend_cuda_init(zt_backend *be, const zt_backend_options *opt)
{
    (void)be, (void)opt;
    return zt_fail(ZT_ERR_UNSUPPORTED,
                   "rebuild with the CUDA toolkit installed (make CUDA_HOME=/path/to/cuda), "
                   "or run with --device cpu",
                   "--device cuda: %s", ZT_CUDA_ABSENT);
}

const zt_backend_entry zt_backend_cuda_entry = {
    .name = "cuda",
    .kind = ZT_DEVICE_CUDA,
    .built = zt_backend_cuda_built,
    .device_count = zt_backend_cuda_device_count,
    .init = zt_backend_cuda_init,
};
