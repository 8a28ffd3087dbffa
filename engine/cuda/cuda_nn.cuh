/*
 * cuda_nn: what the CUDA backend's transformer-layer op files share
 * (backend_cuda_nn.cu, backend_cuda_attn.cu, backend_cuda_head.cu; CUDA C++,
 * private to engine/cuda): block and grid sizing, float4 access, warp
 * reductions and the warp-per-row machinery, and the rules below, which hold
 * for every one of their ops. The CPU backend (engine/cpu/backend_cpu_nn.c,
 * and the cross-entropy in backend_cpu.c) is the reference these kernels are
 * compared with op by op, so they keep its expressions term for term.
 *
 * Work layout: row ops (layernorm, softmax, dropout) give a row to a warp, with
 * the row in registers up to 16 units of 4 per lane and streamed from memory
 * (L1) beyond; elementwise ops are grid-stride loops. Vector accesses of 4
 * elements (float4, or ushort4 for 16-bit tensors) are used when the row
 * length is a multiple of 4 and every pointer is aligned to 4 elements,
 * checked at run time. Grids are capped from the SM count.
 *
 * Typed ops (engine/backend.h) are kernel templates on the dtype T of their
 * (dt) tensors: vload/vstore widen and round them as they are read and
 * written (cuda_common.cuh's element rules), so a 16-bit tensor is never
 * copied to fp32 and the math below is the fp32 op's.
 *
 * Numerics: the CPU rounds every float operation separately (x86-64-v2 has no
 * FMA), so kernels write a * b + c with __fmul_rn/__fadd_rn, which nvcc never
 * contracts into an FMA; with IEEE division (__fdiv_rn) and the same row order
 * this makes these ops bit-identical to the CPU: embedding forward and
 * backward, dropout, mean pooling, layernorm dw/db (given the same mean/rstd).
 * Row reductions (layernorm statistics and dx sums, softmax max/sum/dot, the
 * cross-entropy exp-sum and loss total) use a fixed warp/block tree instead of
 * the CPU's order, and expf/tanhf/log/exp/sin/cos are CUDA's (within 1-2 ulp of
 * glibc's), so those results differ from the CPU's by rounding only.
 *
 * Determinism: no floating-point atomics (the tensor-core attention's dQ,
 * backend_cuda_flash_mma.cu, is the one exception: FlashAttention-2's
 * schedule). Every sum has an order fixed by the
 * shape alone (not by timing, grid size or SM count): column sums walk rows in
 * increasing order in one thread, trees have a fixed shape, and the loss total
 * sums fixed row parts then the parts in index order.
 *
 * Functions here are static inline (templates static), so each .cu compiles
 * its own copy and one that uses only some of them gets no unused-function
 * warning.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#ifndef ZT_CUDA_NN_CUH
#define ZT_CUDA_NN_CUH

#include <cuda_runtime.h>
#include <math.h>
/* The system headers the C headers include, first: inside extern "C" their
 * includes are then no-ops. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "engine/backend.h"
}
#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/cuda_impl.h"
#include "engine/cuda/kernel_launch.cuh"

/* Block size of most kernels: eight warps. */
#define ZT_NN_THREADS 256
#define ZT_NN_WARPS (ZT_NN_THREADS / 32)
/* Grid cap of grid-stride kernels: 2048 resident threads per SM. */
#define ZT_NN_BLOCKS_PER_SM 8

/* ---- host helpers ---- */

static inline zt_cuda_impl *nn_impl(const zt_backend *be) { return (zt_cuda_impl *)be->impl; }

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static inline __host__ __device__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Blocks for `items` work items at `per_block` per block, capped at what the
 * GPU holds at once; the kernels loop over the rest. */
static inline unsigned nn_grid(const zt_cuda_impl *impl, int64_t items, int64_t per_block)
{
    int64_t want = (items + per_block - 1) / per_block;
    int64_t cap = (int64_t)(impl->sm_count > 0 ? impl->sm_count : 1) * ZT_NN_BLOCKS_PER_SM;
    want = min_i64(want, cap);
    return (unsigned)(want < 1 ? 1 : want);
}

/* Block shape of row-elementwise kernels: x runs along a row's units, as few
 * warps as cover it, so short rows do not idle lanes; y takes further rows. */
static inline dim3 row_block(int64_t units)
{
    unsigned tx = 32;
    while (tx < ZT_NN_THREADS && (int64_t)tx < units)
        tx *= 2;
    return dim3(tx, ZT_NN_THREADS / tx);
}

static inline void nn_record(const zt_backend *be, const char *what)
{
    zt_cuda_record(nn_impl(be), cudaGetLastError(), what);
}

/* ---- device helpers ---- */

/* W consecutive elements as floats: one vector access when W == 4. */
template <int W> struct zt_vec {
    float v[W];
};

/* Loads W elements of a tensor of T, widened (fp32 by default). */
template <int W, zt_dtype T = ZT_F32>
static __device__ __forceinline__ zt_vec<W> vload(const raw_t<T> *p)
{
    zt_vec<W> a;
    load_elems<T, W>(p, 0, a.v);
    return a;
}

/* Stores W elements into a tensor of T, each rounded once. */
template <int W, zt_dtype T = ZT_F32>
static __device__ __forceinline__ void vstore(raw_t<T> *p, const zt_vec<W> &a)
{
    store_elems<T, W>(p, 0, a.v);
}

template <int W> static __device__ __forceinline__ zt_vec<W> vzero()
{
    zt_vec<W> a;
#pragma unroll
    for (int e = 0; e < W; e++)
        a.v[e] = 0.0f;
    return a;
}

/* Butterfly sums: the two partners of a step add the same two values, and
 * a + b == b + a bit for bit, so every lane ends with identical bits. */
template <typename T> static __device__ __forceinline__ T warp_sum(T v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* fmaxf is symmetric (NaN loses on both sides), so lanes agree here too. */
static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ int64_t warp_index()
{
    return ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}

static __device__ __forceinline__ int64_t warp_count()
{
    return ((int64_t)gridDim.x * blockDim.x) >> 5;
}

static __device__ __forceinline__ int64_t thread_index()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ int64_t thread_count()
{
    return (int64_t)gridDim.x * blockDim.x;
}

/* ---- warp-per-row kernels: a row of nu units of W floats, lane l owns units
 * l, l + 32, ...; U > 0 keeps them in registers (the loops below then have a
 * constant trip count and unroll), U == 0 re-reads them from memory. ---- */

template <int W, int U> struct zt_row_shape {
    static constexpr int w = W, u = U;
};

/* Calls f(zt_row_shape<W, U>{}) with the smallest U of 1, 2, 4, 8, 16 that
 * holds a row of len floats, or U = 0 for longer rows. */
template <typename F> static void row_dispatch(bool vec, int64_t len, F &&f)
{
    int64_t per_lane = ((vec ? len / 4 : len) + 31) / 32;
    if (vec) {
        if (per_lane <= 1)
            f(zt_row_shape<4, 1>{});
        else if (per_lane <= 2)
            f(zt_row_shape<4, 2>{});
        else if (per_lane <= 4)
            f(zt_row_shape<4, 4>{});
        else if (per_lane <= 8)
            f(zt_row_shape<4, 8>{});
        else if (per_lane <= 16)
            f(zt_row_shape<4, 16>{});
        else
            f(zt_row_shape<4, 0>{});
    } else {
        if (per_lane <= 1)
            f(zt_row_shape<1, 1>{});
        else if (per_lane <= 2)
            f(zt_row_shape<1, 2>{});
        else if (per_lane <= 4)
            f(zt_row_shape<1, 4>{});
        else if (per_lane <= 8)
            f(zt_row_shape<1, 8>{});
        else if (per_lane <= 16)
            f(zt_row_shape<1, 16>{});
        else
            f(zt_row_shape<1, 0>{});
    }
}

template <int U> static __device__ __forceinline__ int lane_iters(int64_t nu)
{
    return U > 0 ? U : (int)((nu + 31) / 32);
}

/* A lane's units of one row of a tensor of T: fill() loads (and keeps, when
 * U > 0), get() returns what fill() loaded. */
template <int W, int U, zt_dtype T = ZT_F32> struct zt_row_cache {
    zt_vec<W> c[U > 0 ? U : 1];

    __device__ __forceinline__ zt_vec<W> fill(const raw_t<T> *row, int k, int64_t u)
    {
        zt_vec<W> a = vload<W, T>(row + u * W);
        if constexpr (U > 0)
            c[k] = a;
        return a;
    }

    __device__ __forceinline__ zt_vec<W> get(const raw_t<T> *row, int k, int64_t u) const
    {
        if constexpr (U > 0) {
            (void)row;
            (void)u;
            return c[k];
        } else {
            (void)k;
            return vload<W, T>(row + u * W);
        }
    }
};

#endif
