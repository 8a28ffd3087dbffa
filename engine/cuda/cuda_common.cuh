/*
 * cuda_common: what the CUDA backend's .cu files share (CUDA C++, private to
 * engine/cuda): element access with engine/dtype.c's bit-level rules (fp16
 * and bf16 widened to fp32 and rounded back, x86's NaN rules), the
 * grid-stride map kernel the element-wise ops run on, and the host helpers
 * that launch kernels, pick a typed op's kernels by its dtype (with_dtype)
 * and record failures (zt_cuda_record, cuda_impl.h).
 *
 * Everything here has internal linkage (an anonymous namespace), so each .cu
 * compiles its own copy; host functions are inline so that a file using only
 * some of them gets no unused-function warning.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#ifndef ZT_CUDA_COMMON_CUH
#define ZT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

extern "C" {
#include "engine/backend.h"
#include "engine/dtype.h"
#include "engine/status.h"
}
#include "engine/cuda/cuda_impl.h"
#include "engine/cuda/kernel_launch.cuh"
#include "engine/cuda/launch.h"

namespace {

/* ---- Element access. All types are read as fp32 and written from fp32 with
 * the bit-level rules of engine/dtype.c. ---- */

__device__ __forceinline__ bool nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* A NaN result the way x86 SSE forms it: the first NaN operand, quieted, or
 * the default NaN (negative, quiet) when the operands are numbers. When both
 * operands are NaN the CPU's pick depends on its compiler's operand order. */
__device__ __forceinline__ float x86_nan(float r, float first, float second)
{
    uint32_t f = __float_as_uint(first), s = __float_as_uint(second);
    if (!nan_bits(__float_as_uint(r)))
        return r;
    if (nan_bits(f))
        return __uint_as_float(f | 0x00400000u);
    if (nan_bits(s))
        return __uint_as_float(s | 0x00400000u);
    return __uint_as_float(0xffc00000u);
}

__device__ __forceinline__ float x86_mul(float a, float b)
{
    return x86_nan(__fmul_rn(a, b), a, b);
}

__device__ __forceinline__ float x86_add(float a, float b)
{
    return x86_nan(__fadd_rn(a, b), a, b);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t a = h & 0x7fffu;
    uint32_t mag;
    if (a >= 0x7c00u) /* inf, or NaN with its payload, made quiet */
        mag = 0x7f800000u | ((a & 0x3ffu) << 13) | ((uint32_t)(a > 0x7c00u) << 22);
    else if (a >= 0x0400u)
        mag = (a << 13) + ((uint32_t)(127 - 15) << 23);
    else /* zero or subnormal: a * 2^-24 is exact */
        mag = __float_as_uint(__fmul_rn((float)a, 0x1p-24f));
    return __uint_as_float(sign | mag);
}

/* The hardware conversion rounds to nearest even and overflows to inf; it
 * would turn every NaN into one canonical NaN, so NaNs are done by hand. */
__device__ __forceinline__ uint16_t f32_to_f16(float x)
{
    uint32_t u = __float_as_uint(x);
    if (nan_bits(u))
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
    return __half_as_ushort(__float2half_rn(x));
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    return __uint_as_float(nan_bits(u) ? u | 0x00400000u : u);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float x)
{
    uint32_t u = __float_as_uint(x);
    if (nan_bits(u))
        return (uint16_t)((u >> 16) | 0x0040u);
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

template <zt_dtype T> struct elem;

template <> struct elem<ZT_F32> {
    using raw = float;
    using raw4 = float4;
    static __device__ __forceinline__ float widen(float x) { return x; }
    static __device__ __forceinline__ float narrow(float x) { return x; }
};

template <> struct elem<ZT_F16> {
    using raw = uint16_t;
    using raw4 = ushort4;
    static __device__ __forceinline__ float widen(uint16_t h) { return f16_to_f32(h); }
    static __device__ __forceinline__ uint16_t narrow(float x) { return f32_to_f16(x); }
};

template <> struct elem<ZT_BF16> {
    using raw = uint16_t;
    using raw4 = ushort4;
    static __device__ __forceinline__ float widen(uint16_t h) { return bf16_to_f32(h); }
    static __device__ __forceinline__ uint16_t narrow(float x) { return f32_to_bf16(x); }
};

/* A tensor of T's storage type: float, or the 16 bits of an fp16 or bf16. */
template <zt_dtype T> using raw_t = typename elem<T>::raw;

/* x as a tensor of T holds it: rounded to T and read back (x itself for
 * fp32). Where the contract rounds an intermediate, later math reads this. */
template <zt_dtype T> __device__ __forceinline__ float stored(float x)
{
    return elem<T>::widen(elem<T>::narrow(x));
}

/* One 16-byte vector of T holds VEC_ELEMS<T> elements: 4 fp32 or 8 16-bit
 * ones, so a 16-bit tensor streams through LDG.128/STG.128 like an fp32 one
 * (64-bit ushort4 accesses would halve the bytes each load instruction moves). */
template <zt_dtype T> constexpr int VEC_ELEMS = T == ZT_F32 ? 4 : 8;

/* The low (even element) and high (odd element) halves of a 32-bit word:
 * little-endian, element 2k is word k's low 16 bits. */
__device__ __forceinline__ uint16_t lo16(uint32_t w) { return (uint16_t)(w & 0xffffu); }
__device__ __forceinline__ uint16_t hi16(uint32_t w) { return (uint16_t)(w >> 16); }
__device__ __forceinline__ uint32_t pack16(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* W elements from element index i: W == 1, or W == 4 / 8 as whole 16-byte
 * vectors (i a multiple of W, the pointer 16-byte aligned): fp32 at 8 is two
 * float4, 16-bit at 8 one uint4; 16-bit at 4 one ushort4. */
template <zt_dtype T, int W>
__device__ __forceinline__ void load_elems(const void *p, int64_t i, float (&out)[W])
{
    using E = elem<T>;
    if constexpr (W == 8 && T == ZT_F32) {
        const float4 *q = static_cast<const float4 *>(p) + i / 4;
        const float4 a = q[0], b = q[1];
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
        out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else if constexpr (W == 8) {
        const uint4 q = static_cast<const uint4 *>(p)[i / 8];
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            out[2 * k] = E::widen(lo16(w[k]));
            out[2 * k + 1] = E::widen(hi16(w[k]));
        }
    } else if constexpr (W == 4) {
        typename E::raw4 q = static_cast<const typename E::raw4 *>(p)[i / 4];
        out[0] = E::widen(q.x);
        out[1] = E::widen(q.y);
        out[2] = E::widen(q.z);
        out[3] = E::widen(q.w);
    } else {
        static_assert(W == 1, "1, 4 or 8 elements");
        out[0] = E::widen(static_cast<const typename E::raw *>(p)[i]);
    }
}

template <zt_dtype T, int W>
__device__ __forceinline__ void store_elems(void *p, int64_t i, const float (&in)[W])
{
    using E = elem<T>;
    if constexpr (W == 8 && T == ZT_F32) {
        float4 *q = static_cast<float4 *>(p) + i / 4;
        q[0] = make_float4(in[0], in[1], in[2], in[3]);
        q[1] = make_float4(in[4], in[5], in[6], in[7]);
    } else if constexpr (W == 8) {
        uint4 q;
        q.x = pack16(E::narrow(in[0]), E::narrow(in[1]));
        q.y = pack16(E::narrow(in[2]), E::narrow(in[3]));
        q.z = pack16(E::narrow(in[4]), E::narrow(in[5]));
        q.w = pack16(E::narrow(in[6]), E::narrow(in[7]));
        static_cast<uint4 *>(p)[i / 8] = q;
    } else if constexpr (W == 4) {
        typename E::raw4 q;
        q.x = E::narrow(in[0]);
        q.y = E::narrow(in[1]);
        q.z = E::narrow(in[2]);
        q.w = E::narrow(in[3]);
        static_cast<typename E::raw4 *>(p)[i / 4] = q;
    } else {
        static_assert(W == 1, "1, 4 or 8 elements");
        static_cast<typename E::raw *>(p)[i] = E::narrow(in[0]);
    }
}

/* ---- The map kernel: a functor's run<W>(i) handles elements [i, i + W). */

/* Grid-stride over n elements, V at a time, then the n % V tail one by one. */
template <int V, class Op> __global__ void map_kernel(Op op, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nv = n / V;
    for (int64_t v = first; v < nv; v += stride)
        op.template run<V>(v * V);
    for (int64_t i = nv * V + first; i < n; i += stride)
        op.template run<1>(i);
}

/* ---- Segmented column sums (bias_grad, act_bias_grad). ---- */

/* Second pass: the (segs, cols) segment sums of each column, added in segment
 * order. A template only so that files that never launch it do not warn of an
 * unused function. */
template <int = 0>
__global__ void bias_grad_join_kernel(float *dbias, const float *part, int64_t segs, int64_t cols)
{
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    float acc = part[j];
#pragma unroll 8
    for (int64_t s = 1; s < segs; s++)
        acc = __fadd_rn(acc, part[s * cols + j]);
    dbias[j] = acc;
}

/* ---- Host side: launching and recording. ---- */

/* The storage dtype of a typed op (engine/backend.h, "Typed tensors") as a
 * type: with_dtype(dt, f) calls f(dtype_tag<dt>{}), so that the op's host
 * code instantiates its kernel templates for the dtype it was given and the
 * kernels load and store that type themselves. */
template <zt_dtype T> struct dtype_tag {
    static constexpr zt_dtype value = T;
};

template <class F> void with_dtype(zt_dtype dt, F &&f)
{
    if (dt == ZT_F16)
        f(dtype_tag<ZT_F16>{});
    else if (dt == ZT_BF16)
        f(dtype_tag<ZT_BF16>{});
    else
        f(dtype_tag<ZT_F32>{});
}

inline zt_cuda_impl *impl_of(const zt_backend *be)
{
    return static_cast<zt_cuda_impl *>(be->impl);
}

inline bool aligned(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }

/* Whether p may be accessed four elements of dt at a time. */
inline bool vec_aligned(const void *p, zt_dtype dt) { return aligned(p, 4 * zt_dtype_size(dt)); }

/* Elements of dt in one 16-byte vector (VEC_ELEMS on the host); a map op
 * takes that form (launch_map_vec) when its pointers are 16-byte aligned. */
inline int64_t vec_elems(zt_dtype dt) { return dt == ZT_F32 ? 4 : 8; }

/* A launch's configuration error, or an earlier kernel's failure. */
inline void launched(zt_cuda_impl *impl, const char *what)
{
    zt_cuda_record(impl, cudaGetLastError(), what);
}

template <int V, class Op>
void launch_map(zt_cuda_impl *impl, const Op &op, int64_t n, const char *what)
{
    if (n <= 0)
        return;
    zt_launch_dims d = zt_launch_1d(n, V, impl->sm_count);
    ZT_LAUNCH(d.grid, d.block, 0, impl->stream, map_kernel<V>)(op, n);
    launched(impl, what);
}

/* The 4-wide form when every pointer the op touches is 4-element aligned. */
template <class Op>
void launch_map4(zt_cuda_impl *impl, const Op &op, int64_t n, bool vec4, const char *what)
{
    if (vec4)
        launch_map<4>(impl, op, n, what);
    else
        launch_map<1>(impl, op, n, what);
}

/* The 16-byte form of an op on tensors of T (VEC_ELEMS<T> elements a
 * thread-step: 8 for 16-bit) when vec, the scalar form otherwise. */
template <zt_dtype T, class Op>
void launch_map_vec(zt_cuda_impl *impl, const Op &op, int64_t n, bool vec, const char *what)
{
    if (vec)
        launch_map<VEC_ELEMS<T>>(impl, op, n, what);
    else
        launch_map<1>(impl, op, n, what);
}

inline void rows_dims(const zt_cuda_impl *impl, int64_t nrows, int64_t cols, dim3 *grid,
                      dim3 *block)
{
    zt_launch_grid2d g = zt_launch_rows(nrows, cols, impl->sm_count);
    *grid = dim3(g.grid_x, g.grid_y);
    *block = dim3(g.block);
}

inline void sync_stream(zt_cuda_impl *impl, const char *what)
{
    zt_cuda_record(impl, cudaStreamSynchronize(impl->stream), what);
}

} // namespace

#endif
