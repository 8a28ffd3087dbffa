/*
 * kernel_launch: ZT_LAUNCH, the one way engine/cuda launches a kernel:
 *
 *     ZT_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...);
 *
 * is exactly kernel<<<grid, block, shared_bytes, stream>>>(args...) under
 * nvcc. In the CUDA simulator's build (ZT_CUDASIM: `make sim`, where the .cu
 * files are host C++17 and `<<<` is no token) it is the simulator's launcher
 * (tests/cudasim/include/zs_launch.h), which checks the configuration and
 * every pointer argument and queues the kernel on the stream. The kernel
 * comes last so that a template with commas in its arguments
 * (xent_kernel<true, 4>) needs no parentheses.
 *
 * A kernel reaches the launch's shared_bytes through zt_dynamic_shared(),
 * `extern __shared__` under nvcc and the simulator's buffer under
 * ZT_CUDASIM (whose `static` __shared__ cannot be extern); over 48 KiB the
 * kernel must first be opted in with zt_shared_optin.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#ifndef ZT_KERNEL_LAUNCH_CUH
#define ZT_KERNEL_LAUNCH_CUH

#include <cuda_runtime.h>

#ifdef ZT_CUDASIM
#define ZT_LAUNCH(grid, block, shared_bytes, stream, ...)                                         \
    ::zs_launch(                                                                                  \
        grid, block, shared_bytes, stream, #__VA_ARGS__, __FILE__, __LINE__,                      \
        [](auto &&...zs_a) { __VA_ARGS__(zs_a...); },                                             \
        [](auto &&...zs_a) {                                                                      \
            return ::zs_entry<std::decay_t<decltype(zs_a)>...>(::zs_rank<2>{}, __VA_ARGS__);      \
        })
#else
#define ZT_LAUNCH(grid, block, shared_bytes, stream, ...)                                         \
    __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif

#ifdef ZT_CUDASIM
__device__ __forceinline__ uint4 *zt_dynamic_shared()
{
    return static_cast<uint4 *>(::zs_dynamic_shared());
}
#else
__device__ __forceinline__ uint4 *zt_dynamic_shared()
{
    extern __shared__ uint4 zt_dynamic_smem[];
    return zt_dynamic_smem;
}
#endif

/* Lets `kernel` take `bytes` of dynamic shared memory on the current device
 * (over 48 KiB needs the opt-in): cudaErrorInvalidValue past the device's
 * limit, so the caller can tell the kernel does not fit. */
template <class K> cudaError_t zt_shared_optin(K *kernel, size_t bytes)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel),
                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#endif
