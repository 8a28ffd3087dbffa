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

#endif
