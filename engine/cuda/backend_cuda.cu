/*
 * backend_cuda: the CUDA backend (engine/backend.h) on one device: memory,
 * copies and error recording; GEMMs on cuBLAS; the element-wise, reduction,
 * conversion and optimizer kernels. The transformer-layer ops come from
 * backend_cuda_nn.cu (zt_backend_cuda_nn_ops); launch sizes and plans from
 * launch.c. Every op is enqueued on one non-blocking compute stream.
 *
 * Numerics follow the CPU backend operation for operation: products that
 * feed a sum are __fmul_rn/__fadd_rn intrinsics, which nvcc never fuses into
 * an FMA, so adam, sgd, axpy and convert round exactly like the CPU loops.
 * sum_squares uses engine/dtype.c's chunk geometry and adds the chunk sums on
 * the host in the same order: its float64 result is the CPU's bit for bit.
 * convert keeps dtype.c's NaN rules (x86's for the arithmetic: a NaN operand
 * comes out quieted with its sign, an invalid operation gives the default
 * NaN), so conversions match the CPU bit for bit as well. bias_grad sums each
 * column in row order within fixed segments of rows and then adds the
 * segments in order (launch.h); up to 127 rows that is the CPU's order.
 * Other ops produce the GPU's canonical NaN where the CPU would keep a
 * payload. GEMMs are cuBLAS: deterministic run to run on one GPU model, not
 * bit-equal to OpenBLAS.
 *
 * GEMM with gemm_dtype fp16/bf16 and a workspace: A and B are rounded into the
 * two cast buffers (compact, row-major) and multiplied on tensor cores with
 * fp32 accumulation and fp32 C; products too big for the buffers run in
 * chunks of rows of C (or of batch entries), or in fp32 when one B (or one
 * batch entry) alone does not fit. Without a workspace every GEMM is fp32.
 *
 * Ops must be called from a thread whose current device is this backend's
 * (init makes it current on the calling thread).
 *
 * Memory: the zt_cuda_impl (be->impl), its stream, cuBLAS handle, device
 * scratch and pinned result slot are made by init and freed by its destroy
 * (zt_backend_free). alloc/host_alloc memory belongs to the caller (the
 * arenas), and so does the workspace block passed to set_workspace.
 * Collective: none.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "engine/backend.h"
#include "engine/dtype.h"
#include "engine/status.h"
}
#include "engine/cuda/cuda_impl.h"
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

/* W elements from element index i (W == 4: one vector access; i is then a
 * multiple of 4 and the pointer aligned to 4 elements). */
template <zt_dtype T, int W>
__device__ __forceinline__ void load_elems(const void *p, int64_t i, float (&out)[W])
{
    using E = elem<T>;
    if constexpr (W == 4) {
        typename E::raw4 q = static_cast<const typename E::raw4 *>(p)[i / 4];
        out[0] = E::widen(q.x);
        out[1] = E::widen(q.y);
        out[2] = E::widen(q.z);
        out[3] = E::widen(q.w);
    } else {
        static_assert(W == 1, "1 or 4 elements");
        out[0] = E::widen(static_cast<const typename E::raw *>(p)[i]);
    }
}

template <zt_dtype T, int W>
__device__ __forceinline__ void store_elems(void *p, int64_t i, const float (&in)[W])
{
    using E = elem<T>;
    if constexpr (W == 4) {
        typename E::raw4 q;
        q.x = E::narrow(in[0]);
        q.y = E::narrow(in[1]);
        q.z = E::narrow(in[2]);
        q.w = E::narrow(in[3]);
        static_cast<typename E::raw4 *>(p)[i / 4] = q;
    } else {
        static_assert(W == 1, "1 or 4 elements");
        static_cast<typename E::raw *>(p)[i] = E::narrow(in[0]);
    }
}

/* ---- Element-wise ops: a functor's run<W>(i) handles elements [i, i + W). */

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

struct scale_op {
    float *x;
    float a;
    template <int W> __device__ void run(int64_t i) const
    {
        float v[W];
        load_elems<ZT_F32, W>(x, i, v);
#pragma unroll
        for (int k = 0; k < W; k++)
            v[k] = __fmul_rn(v[k], a);
        store_elems<ZT_F32, W>(x, i, v);
    }
};

struct axpy_op {
    float *y;
    const float *x;
    float a;
    template <int W> __device__ void run(int64_t i) const
    {
        float yv[W], xv[W];
        load_elems<ZT_F32, W>(y, i, yv);
        load_elems<ZT_F32, W>(x, i, xv);
#pragma unroll
        for (int k = 0; k < W; k++)
            yv[k] = __fadd_rn(yv[k], __fmul_rn(a, xv[k]));
        store_elems<ZT_F32, W>(y, i, yv);
    }
};

/* `x < 0 ? 0 : x` as the CPU: NaN passes through. */
struct relu_forward_op {
    float *y;
    const float *x;
    template <int W> __device__ void run(int64_t i) const
    {
        float v[W];
        load_elems<ZT_F32, W>(x, i, v);
#pragma unroll
        for (int k = 0; k < W; k++)
            v[k] = v[k] < 0.0f ? 0.0f : v[k];
        store_elems<ZT_F32, W>(y, i, v);
    }
};

/* A select, not a product: a non-finite dy where the unit is off gives 0. */
struct relu_backward_op {
    float *dx;
    const float *dy;
    const float *y;
    template <int W> __device__ void run(int64_t i) const
    {
        float g[W], yv[W];
        load_elems<ZT_F32, W>(dy, i, g);
        load_elems<ZT_F32, W>(y, i, yv);
#pragma unroll
        for (int k = 0; k < W; k++)
            g[k] = yv[k] > 0.0f ? g[k] : 0.0f;
        store_elems<ZT_F32, W>(dx, i, g);
    }
};

/* The vector form needs cols % 4 == 0, so a vector never straddles rows. */
struct bias_add_op {
    float *y;
    const float *bias;
    int64_t cols;
    template <int W> __device__ void run(int64_t i) const
    {
        float yv[W], bv[W];
        load_elems<ZT_F32, W>(y, i, yv);
        load_elems<ZT_F32, W>(bias, i % cols, bv);
#pragma unroll
        for (int k = 0; k < W; k++)
            yv[k] = __fadd_rn(yv[k], bv[k]);
        store_elems<ZT_F32, W>(y, i, yv);
    }
};

/* zt_convert_host per element: `alpha * src`, plus dst when accumulating,
 * in fp32, rounded once to D. */
template <zt_dtype D, zt_dtype S, bool ACC> struct convert_op {
    void *dst;
    const void *src;
    float alpha;
    template <int W> __device__ void run(int64_t i) const
    {
        float s[W], r[W];
        load_elems<S, W>(src, i, s);
        if constexpr (ACC) {
            float d[W];
            load_elems<D, W>(dst, i, d);
#pragma unroll
            for (int k = 0; k < W; k++)
                r[k] = x86_add(d[k], x86_mul(alpha, s[k]));
        } else {
#pragma unroll
            for (int k = 0; k < W; k++)
                r[k] = x86_mul(alpha, s[k]);
        }
        store_elems<D, W>(dst, i, r);
    }
};

/* Inf and NaN are the all-ones exponent in every format. Threads that see
 * one store 1; all others leave the flag alone. */
__device__ __forceinline__ bool f32_bad(uint32_t w)
{
    return (w & 0x7f800000u) == 0x7f800000u;
}

__device__ __forceinline__ bool half_pair_bad(uint32_t w, uint32_t m)
{
    return (w & m) == m || ((w >> 16) & m) == m;
}

template <zt_dtype T> struct inf_nan_op {
    const void *x;
    int *flag;
    /* W is 1, or a whole 16-byte vector: 4 fp32 or 8 16-bit elements. */
    template <int W> __device__ void run(int64_t i) const
    {
        constexpr uint32_t m = T == ZT_F16 ? 0x7c00u : 0x7f80u;
        bool bad;
        if constexpr (W == 1 && T == ZT_F32) {
            bad = f32_bad(static_cast<const uint32_t *>(x)[i]);
        } else if constexpr (W == 1) {
            bad = (static_cast<const uint16_t *>(x)[i] & m) == m;
        } else {
            uint4 q = static_cast<const uint4 *>(x)[i / W];
            if constexpr (T == ZT_F32)
                bad = f32_bad(q.x) | f32_bad(q.y) | f32_bad(q.z) | f32_bad(q.w);
            else
                bad = half_pair_bad(q.x, m) | half_pair_bad(q.y, m) | half_pair_bad(q.z, m) |
                      half_pair_bad(q.w, m);
        }
        if (bad)
            *flag = 1;
    }
};

/* FusedAdam per element, operation for operation as zt_adam_cpu. */
struct adam_coeffs {
    float lr, b1, b2, eps, wd, bc1, bc2, omb1, omb2;
};

template <bool ADAMW> struct adam_op {
    float *p;
    const float *g;
    float *m;
    float *v;
    adam_coeffs c;
    template <int W> __device__ void run(int64_t i) const
    {
        float pv[W], gv[W], mv[W], vv[W];
        load_elems<ZT_F32, W>(p, i, pv);
        load_elems<ZT_F32, W>(g, i, gv);
        load_elems<ZT_F32, W>(m, i, mv);
        load_elems<ZT_F32, W>(v, i, vv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float pi = pv[k];
            float gi = gv[k];
            if constexpr (!ADAMW)
                gi = __fadd_rn(gi, __fmul_rn(c.wd, pi));
            float mi = __fadd_rn(__fmul_rn(c.b1, mv[k]), __fmul_rn(c.omb1, gi));
            float vi = __fadd_rn(__fmul_rn(c.b2, vv[k]), __fmul_rn(__fmul_rn(c.omb2, gi), gi));
            float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, c.bc2)), c.eps);
            float update = __fdiv_rn(__fdiv_rn(mi, c.bc1), denom);
            if constexpr (ADAMW)
                update = __fadd_rn(update, __fmul_rn(c.wd, pi));
            mv[k] = mi;
            vv[k] = vi;
            pv[k] = __fsub_rn(pi, __fmul_rn(c.lr, update));
        }
        store_elems<ZT_F32, W>(m, i, mv);
        store_elems<ZT_F32, W>(v, i, vv);
        store_elems<ZT_F32, W>(p, i, pv);
    }
};

/* zt_sgd_cpu's five loops, in its order of choice. */
enum sgd_mode { SGD_PLAIN, SGD_FIRST_NESTEROV, SGD_FIRST, SGD_NESTEROV, SGD_MOMENTUM };

template <int MODE> struct sgd_op {
    float *p;
    const float *g;
    float *buf; /* unused (may be NULL) in SGD_PLAIN */
    float lr, mom, wd, omd;
    template <int W> __device__ void run(int64_t i) const
    {
        float pv[W], gv[W], bv[W];
        load_elems<ZT_F32, W>(p, i, pv);
        load_elems<ZT_F32, W>(g, i, gv);
        if constexpr (MODE == SGD_NESTEROV || MODE == SGD_MOMENTUM)
            load_elems<ZT_F32, W>(buf, i, bv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float pi = pv[k];
            float gi = __fadd_rn(gv[k], __fmul_rn(wd, pi));
            float step;
            if constexpr (MODE == SGD_PLAIN) {
                step = gi;
            } else if constexpr (MODE == SGD_FIRST_NESTEROV) {
                bv[k] = gi;
                step = __fadd_rn(gi, __fmul_rn(mom, gi));
            } else if constexpr (MODE == SGD_FIRST) {
                bv[k] = gi;
                step = gi;
            } else if constexpr (MODE == SGD_NESTEROV) {
                bv[k] = __fadd_rn(__fmul_rn(mom, bv[k]), __fmul_rn(omd, gi));
                step = __fadd_rn(gi, __fmul_rn(mom, bv[k]));
            } else {
                bv[k] = __fadd_rn(__fmul_rn(mom, bv[k]), __fmul_rn(omd, gi));
                step = bv[k];
            }
            pv[k] = __fsub_rn(pi, __fmul_rn(lr, step));
        }
        if constexpr (MODE != SGD_PLAIN)
            store_elems<ZT_F32, W>(buf, i, bv);
        store_elems<ZT_F32, W>(p, i, pv);
    }
};

/* ---- Reductions. ---- */

/* One pass of zt_sum_squares_host: thread (chunk c, lane j) sums the squares
 * of elements j, j + 8, ... of its chunk's whole groups of 8 in float64,
 * lane 0 then the leftover elements; the lanes join as ((0+1)+(2+3)) +
 * ((4+5)+(6+7)), which the xor shuffles give exactly (float addition is
 * commutative). x and n are relative to the pass's first chunk. */
template <zt_dtype T>
__global__ void sum_squares_kernel(const void *x, int64_t n, int64_t nc, double *part)
{
    using E = elem<T>;
    const typename E::raw *xs = static_cast<const typename E::raw *>(x);
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t c = t / ZT_SUMSQ_LANES;
    const int lane = (int)(t % ZT_SUMSQ_LANES);
    double acc = 0.0;
    if (c < nc) {
        const int64_t lo = c * ZT_SUMSQ_CHUNK;
        const int64_t len = n - lo < ZT_SUMSQ_CHUNK ? n - lo : ZT_SUMSQ_CHUNK;
        const int64_t whole = len / ZT_SUMSQ_LANES * ZT_SUMSQ_LANES;
#pragma unroll 8
        for (int64_t i = lane; i < whole; i += ZT_SUMSQ_LANES) {
            double v = E::widen(xs[lo + i]);
            acc = __dadd_rn(acc, __dmul_rn(v, v));
        }
        if (lane == 0)
            for (int64_t i = whole; i < len; i++) {
                double v = E::widen(xs[lo + i]);
                acc = __dadd_rn(acc, __dmul_rn(v, v));
            }
    }
    /* Every lane of the warp reaches the shuffles, in range or not. */
    for (int d = 1; d < ZT_SUMSQ_LANES; d *= 2)
        acc = __dadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, d));
    if (c < nc && lane == 0)
        part[c] = acc;
}

/* bias_grad, first pass: thread (segment s, column j) sums its segment's
 * rows in order; segment 0 starts from the initial dbias. out is dbias when
 * there is one segment, else the (segs, cols) partial sums. */
__global__ void bias_grad_seg_kernel(float *out, const float *dbias, const float *dy,
                                     int64_t rows, int64_t cols, int64_t seg_rows,
                                     bool accumulate)
{
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    const int64_t s = blockIdx.y;
    const int64_t r0 = s * seg_rows;
    const int64_t r1 = rows - r0 < seg_rows ? rows : r0 + seg_rows;
    float acc = s == 0 && accumulate ? dbias[j] : 0.0f;
    const float *col = dy + r0 * cols + j; // (r1 - r0) rows, stride cols
#pragma unroll 8
    for (int64_t r = r0; r < r1; r++, col += cols)
        acc = __fadd_rn(acc, *col);
    out[s * cols + j] = acc;
}

/* bias_grad, second pass: the segment sums of a column, in segment order. */
__global__ void bias_grad_join_kernel(float *dbias, const float *part, int64_t segs,
                                      int64_t cols)
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

/* ---- GEMM helpers, over `batch` row-major matrices of (rows, cols) with a
 * row stride and a matrix stride; grid-stride over both (zt_launch_rows). */

/* Rounds fp32 matrices into the compact 16-bit buffer dst (batch, rows, cols). */
template <zt_dtype T>
__global__ void cast_kernel(uint16_t *dst, const float *src, int64_t batch, int64_t rows,
                            int64_t cols, int64_t ld, int64_t stride)
{
    const int64_t nrows = batch * rows;
    const int64_t cstep = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = blockIdx.y; q < nrows; q += gridDim.y) {
        const int64_t b = q / rows;
        const float *s = src + b * stride + (q - b * rows) * ld; // (cols)
        uint16_t *d = dst + q * cols;                             // (cols)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += cstep)
            d[j] = elem<T>::narrow(s[j]);
    }
}

/* C = beta C, beta == 0 writing zeros without reading C (BLAS's rule). */
__global__ void scale_matrix_kernel(float *c, int64_t batch, int64_t rows, int64_t cols,
                                    int64_t ld, int64_t stride, float beta)
{
    const int64_t nrows = batch * rows;
    const int64_t cstep = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = blockIdx.y; q < nrows; q += gridDim.y) {
        const int64_t b = q / rows;
        float *row = c + b * stride + (q - b * rows) * ld; // (cols)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += cstep)
            row[j] = beta == 0.0f ? 0.0f : __fmul_rn(beta, row[j]);
    }
}

/* ---- Host side. ---- */

zt_cuda_impl *impl_of(const zt_backend *be) { return static_cast<zt_cuda_impl *>(be->impl); }

bool aligned(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }

/* A launch's configuration error, or an earlier kernel's failure. */
void launched(zt_cuda_impl *impl, const char *what)
{
    zt_cuda_record(impl, cudaGetLastError(), what);
}

template <int V, class Op>
void launch_map(zt_cuda_impl *impl, const Op &op, int64_t n, const char *what)
{
    if (n <= 0)
        return;
    zt_launch_dims d = zt_launch_1d(n, V, impl->sm_count);
    map_kernel<V><<<d.grid, d.block, 0, impl->stream>>>(op, n);
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

void rows_dims(const zt_cuda_impl *impl, int64_t nrows, int64_t cols, dim3 *grid, dim3 *block)
{
    zt_launch_grid2d g = zt_launch_rows(nrows, cols, impl->sm_count);
    *grid = dim3(g.grid_x, g.grid_y);
    *block = dim3(g.block);
}

void sync_stream(zt_cuda_impl *impl, const char *what)
{
    zt_cuda_record(impl, cudaStreamSynchronize(impl->stream), what);
}

/* ---- Memory, copies, errors. ---- */

zt_status cuda_alloc(const zt_backend *be, size_t bytes, void **out)
{
    zt_cuda_impl *impl = impl_of(be);
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc == cudaSuccess) {
        *out = p;
        return ZT_OK;
    }
    /* A failed allocation is not a device fault: clear it so that `check`
     * does not report it again. */
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        cudaGetLastError();
    if (rc != cudaErrorMemoryAllocation)
        return zt_fail(ZT_ERR_DEVICE, "the GPU is in an error state; earlier messages say why",
                       "cuda backend: cannot allocate %zu bytes on device %d: %s", bytes,
                       impl->device, cudaGetErrorString(rc));
    return zt_fail(ZT_ERR_OOM,
                   "lower the micro-batch size, use a higher ZeRO stage, offload the "
                   "optimizer, or use fewer ranks per GPU",
                   "cuda backend: cannot allocate %zu bytes on device %d (%zu of %zu bytes "
                   "free): %s",
                   bytes, impl->device, free_b, total_b, cudaGetErrorString(rc));
}

void cuda_free(const zt_backend *be, void *ptr)
{
    if (ptr)
        zt_cuda_record(impl_of(be), cudaFree(ptr), "free (cudaFree)");
}

zt_status cuda_host_alloc(const zt_backend *be, size_t bytes, void **out)
{
    (void)be;
    void *p = NULL;
    cudaError_t rc = cudaMallocHost(&p, bytes);
    if (rc == cudaSuccess) {
        *out = p;
        return ZT_OK;
    }
    cudaGetLastError();
    return zt_fail(ZT_ERR_OOM,
                   "host arenas are page-locked: lower the offloaded state (fewer parameters "
                   "per rank, more ranks) or raise the locked-memory limit (ulimit -l, the "
                   "container's memory)",
                   "cuda backend: cannot allocate %zu bytes of page-locked host memory: %s",
                   bytes, cudaGetErrorString(rc));
}

void cuda_host_free(const zt_backend *be, void *ptr)
{
    if (ptr)
        zt_cuda_record(impl_of(be), cudaFreeHost(ptr), "host_free (cudaFreeHost)");
}

void cuda_set_workspace(const zt_backend *be, void *ptr, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    /* GEMMs already queued may still use the old block, which the caller is
     * about to reuse or release. */
    sync_stream(impl, "set_workspace");
    impl->workspace = NULL;
    impl->workspace_bytes = 0;
    impl->cast_a = impl->cast_b = NULL;
    impl->cast_bytes = 0;
    if (!ptr || bytes == 0) {
        /* Setting the stream hands cuBLAS back its own workspace pool. */
        zt_cuda_record_blas(impl, cublasSetStream(impl->cublas, impl->stream),
                            "set_workspace (cublasSetStream)");
        return;
    }
    zt_launch_ws plan;
    plan.blas_bytes = impl->plan_blas_bytes;
    plan.cast_bytes = impl->plan_cast_bytes;
    plan.total_bytes = be->workspace_bytes;
    zt_launch_ws_parts parts = zt_launch_workspace_split((uintptr_t)ptr, bytes, &plan);
    char *base = static_cast<char *>(ptr);
    if (!zt_cuda_record_blas(impl,
                             cublasSetWorkspace(impl->cublas,
                                                parts.blas_bytes ? base + parts.blas_off : NULL,
                                                parts.blas_bytes),
                             "set_workspace (cublasSetWorkspace)"))
        return;
    impl->workspace = ptr;
    impl->workspace_bytes = bytes;
    if (parts.cast_bytes > 0) {
        impl->cast_a = base + parts.a_off;
        impl->cast_b = base + parts.b_off;
        impl->cast_bytes = parts.cast_bytes;
    }
}

zt_status cuda_check(const zt_backend *be)
{
    zt_cuda_impl *impl = impl_of(be);
    sync_stream(impl, "check (cudaStreamSynchronize)");
    zt_cuda_record(impl, cudaGetLastError(), "check (cudaGetLastError)");
    if (impl->error == ZT_OK)
        return ZT_OK;
    return zt_fail(impl->error,
                   "a device failure is reported by the first op that sees it, which may "
                   "come after the one that caused it: rerun with CUDA_LAUNCH_BLOCKING=1, or "
                   "under compute-sanitizer, to find that one",
                   "cuda backend: %s", impl->error_msg);
}

void cuda_copy_h2d(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0)
        return;
    zt_cuda_record(impl, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl->stream),
                   "copy_h2d (cudaMemcpyAsync)");
    sync_stream(impl, "copy_h2d (cudaStreamSynchronize)");
}

void cuda_copy_d2h(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0)
        return;
    zt_cuda_record(impl, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl->stream),
                   "copy_d2h (cudaMemcpyAsync)");
    sync_stream(impl, "copy_d2h (cudaStreamSynchronize)");
}

void cuda_copy_d2d(const zt_backend *be, void *dst, const void *src, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0 || dst == src)
        return;
    zt_cuda_record(impl, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl->stream),
                   "copy_d2d (cudaMemcpyAsync)");
}

void cuda_memset_zero(const zt_backend *be, void *dst, size_t bytes)
{
    zt_cuda_impl *impl = impl_of(be);
    if (bytes == 0)
        return;
    zt_cuda_record(impl, cudaMemsetAsync(dst, 0, bytes, impl->stream),
                   "memset_zero (cudaMemsetAsync)");
}

void cuda_sync(const zt_backend *be) { sync_stream(impl_of(be), "sync"); }

/* ---- GEMM. ---- */

/* One (batched) row-major product, as backend.h's gemm_batched. */
struct gemm_args {
    bool ta, tb;
    int64_t m, n, k;
    float alpha;
    const float *a;
    int64_t lda, sa;
    const float *b;
    int64_t ldb, sb;
    float beta;
    float *c;
    int64_t ldc, sc;
    int64_t batch;
};

cublasOperation_t op_of(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* k == 0: C = beta C for every batch entry. */
void gemm_scale_only(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    if (g.beta == 1.0f)
        return;
    dim3 grid, block;
    rows_dims(impl, g.batch * g.m, g.n, &grid, &block);
    scale_matrix_kernel<<<grid, block, 0, impl->stream>>>(g.c, g.batch, g.m, g.n, g.ldc, g.sc,
                                                          g.beta);
    launched(impl, what);
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
 * gets B first, with m and n swapped; each row stride is the column-major
 * leading dimension of the transposed view. */
void gemm_f32(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    cublasComputeType_t ct = impl->opt.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t st;
    if (g.batch == 1)
        st = cublasGemmEx_64(impl->cublas, op_of(g.tb), op_of(g.ta), g.n, g.m, g.k, &g.alpha,
                             g.b, CUDA_R_32F, g.ldb, g.a, CUDA_R_32F, g.lda, &g.beta, g.c,
                             CUDA_R_32F, g.ldc, ct, CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx_64(impl->cublas, op_of(g.tb), op_of(g.ta), g.n, g.m,
                                           g.k, &g.alpha, g.b, CUDA_R_32F, g.ldb, g.sb, g.a,
                                           CUDA_R_32F, g.lda, g.sa, &g.beta, g.c, CUDA_R_32F,
                                           g.ldc, g.sc, g.batch, ct, CUBLAS_GEMM_DEFAULT);
    zt_cuda_record_blas(impl, st, what);
}

/* Rounds `batch` fp32 matrices (rows, cols), row stride ld, matrix stride
 * `stride`, into dst compactly: (batch, rows, cols). */
void cast_operand(zt_cuda_impl *impl, void *dst, const float *src, int64_t rows, int64_t cols,
                  int64_t ld, int64_t stride, int64_t batch, const char *what)
{
    dim3 grid, block;
    rows_dims(impl, batch * rows, cols, &grid, &block);
    uint16_t *d = static_cast<uint16_t *>(dst);
    if (impl->opt.gemm_dtype == ZT_BF16)
        cast_kernel<ZT_BF16><<<grid, block, 0, impl->stream>>>(d, src, batch, rows, cols, ld,
                                                                stride);
    else
        cast_kernel<ZT_F16><<<grid, block, 0, impl->stream>>>(d, src, batch, rows, cols, ld,
                                                               stride);
    launched(impl, what);
}

/* The 16-bit path (see the top of the file). False: the operands do not fit
 * the cast buffers and nothing was done. */
bool gemm_16bit(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    const int64_t cap = (int64_t)(impl->cast_bytes / sizeof(uint16_t));
    const cudaDataType dt = impl->opt.gemm_dtype == ZT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    /* Stored shapes: A is (k, m) when transposed, else (m, k); B likewise. */
    const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    if (g.batch == 1) {
        zt_launch_gemm_plan p = zt_launch_gemm_rows(g.m, g.n, g.k, cap);
        if (!p.cast)
            return false;
        cast_operand(impl, impl->cast_b, g.b, b_rows, b_cols, g.ldb, 0, 1, what);
        for (int64_t i0 = 0; i0 < g.m; i0 += p.step) {
            const int64_t mc = g.m - i0 < p.step ? g.m - i0 : p.step;
            /* Rows i0.. of op(A): rows of A, or its columns when transposed. */
            const int64_t ar = g.ta ? g.k : mc, ac = g.ta ? mc : g.k;
            const float *a0 = g.ta ? g.a + i0 : g.a + i0 * g.lda;
            cast_operand(impl, impl->cast_a, a0, ar, ac, g.lda, 0, 1, what);
            cublasStatus_t st = cublasGemmEx_64(
                impl->cublas, op_of(g.tb), op_of(g.ta), g.n, mc, g.k, &g.alpha, impl->cast_b, dt,
                b_cols, impl->cast_a, dt, ac, &g.beta, g.c + i0 * g.ldc, CUDA_R_32F, g.ldc,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            zt_cuda_record_blas(impl, st, what);
        }
        return true;
    }
    zt_launch_gemm_plan p = zt_launch_gemm_batches(g.m, g.n, g.k, g.batch, cap);
    if (!p.cast)
        return false;
    for (int64_t b0 = 0; b0 < g.batch; b0 += p.step) {
        const int64_t nb = g.batch - b0 < p.step ? g.batch - b0 : p.step;
        cast_operand(impl, impl->cast_a, g.a + b0 * g.sa, a_rows, a_cols, g.lda, g.sa, nb, what);
        cast_operand(impl, impl->cast_b, g.b + b0 * g.sb, b_rows, b_cols, g.ldb, g.sb, nb, what);
        cublasStatus_t st = cublasGemmStridedBatchedEx_64(
            impl->cublas, op_of(g.tb), op_of(g.ta), g.n, g.m, g.k, &g.alpha, impl->cast_b, dt,
            b_cols, b_rows * b_cols, impl->cast_a, dt, a_cols, a_rows * a_cols, &g.beta,
            g.c + b0 * g.sc, CUDA_R_32F, g.ldc, g.sc, nb, CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
        zt_cuda_record_blas(impl, st, what);
    }
    return true;
}

void gemm_run(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0)
        return;
    if (g.k <= 0) {
        gemm_scale_only(impl, g, what);
        return;
    }
    if (impl->opt.gemm_dtype != ZT_F32 && impl->cast_bytes > 0 && gemm_16bit(impl, g, what))
        return;
    gemm_f32(impl, g, what);
}

void cuda_gemm(const zt_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
               float beta, float *c, int64_t ldc)
{
    gemm_args g = {trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1};
    gemm_run(impl_of(be), g, "gemm");
}

void cuda_gemm_batched(const zt_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                       const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                       int64_t ldc, int64_t stride_c, int64_t batch)
{
    gemm_args g = {trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                   beta, c, ldc, stride_c, batch};
    gemm_run(impl_of(be), g, "gemm_batched");
}

/* ---- Element-wise ops. ---- */

void cuda_bias_add(const zt_backend *be, float *y, const float *bias, int64_t rows,
                   int64_t cols)
{
    bool vec4 = cols % 4 == 0 && aligned(y, 16) && aligned(bias, 16);
    launch_map4(impl_of(be), bias_add_op{y, bias, cols}, rows * cols, vec4, "bias_add");
}

void cuda_bias_grad(const zt_backend *be, float *dbias, const float *dy, int64_t rows,
                    int64_t cols, bool accumulate)
{
    zt_cuda_impl *impl = impl_of(be);
    if (cols <= 0)
        return;
    if (rows <= 0) {
        if (!accumulate)
            cuda_memset_zero(be, dbias, (size_t)cols * sizeof(float));
        return;
    }
    zt_launch_bias_plan p =
        zt_launch_bias_grad(rows, cols, (int64_t)(impl->scratch_bytes / sizeof(float)));
    float *part = static_cast<float *>(impl->scratch);
    dim3 grid(p.grid_x, (unsigned)p.segs);
    bias_grad_seg_kernel<<<grid, p.block, 0, impl->stream>>>(p.segs == 1 ? dbias : part, dbias,
                                                             dy, rows, cols, p.seg_rows,
                                                             accumulate);
    launched(impl, "bias_grad");
    if (p.segs > 1) {
        bias_grad_join_kernel<<<p.grid_x, p.block, 0, impl->stream>>>(dbias, part, p.segs, cols);
        launched(impl, "bias_grad");
    }
}

void cuda_relu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    launch_map4(impl_of(be), relu_forward_op{y, x}, n, aligned(y, 16) && aligned(x, 16),
                "relu_forward");
}

void cuda_relu_backward(const zt_backend *be, float *dx, const float *dy, const float *y,
                        int64_t n)
{
    bool vec4 = aligned(dx, 16) && aligned(dy, 16) && aligned(y, 16);
    launch_map4(impl_of(be), relu_backward_op{dx, dy, y}, n, vec4, "relu_backward");
}

void cuda_scale(const zt_backend *be, float *x, float a, int64_t n)
{
    launch_map4(impl_of(be), scale_op{x, a}, n, aligned(x, 16), "scale");
}

void cuda_axpy(const zt_backend *be, float *y, float a, const float *x, int64_t n)
{
    launch_map4(impl_of(be), axpy_op{y, x, a}, n, aligned(y, 16) && aligned(x, 16), "axpy");
}

/* ---- Reductions returning to the host. ---- */

double cuda_sum_squares(const zt_backend *be, const void *x, zt_dtype dt, int64_t n)
{
    zt_cuda_impl *impl = impl_of(be);
    const size_t esz = zt_dtype_size(dt);
    const int64_t nchunks = zt_launch_sum_squares_chunks(n);
    double *part = static_cast<double *>(impl->scratch);
    const double *host = static_cast<const double *>(impl->host_result);
    double total = 0.0;
    for (int64_t c0 = 0; c0 < nchunks; c0 += ZT_SUMSQ_PASS_CHUNKS) {
        const int64_t nc =
            nchunks - c0 < ZT_SUMSQ_PASS_CHUNKS ? nchunks - c0 : ZT_SUMSQ_PASS_CHUNKS;
        const int64_t lo = c0 * ZT_SUMSQ_CHUNK;
        const void *xs = static_cast<const char *>(x) + lo * (int64_t)esz;
        zt_launch_dims d = zt_launch_sum_squares_pass(nc);
        if (dt == ZT_F16)
            sum_squares_kernel<ZT_F16><<<d.grid, d.block, 0, impl->stream>>>(xs, n - lo, nc, part);
        else if (dt == ZT_BF16)
            sum_squares_kernel<ZT_BF16><<<d.grid, d.block, 0, impl->stream>>>(xs, n - lo, nc,
                                                                               part);
        else
            sum_squares_kernel<ZT_F32><<<d.grid, d.block, 0, impl->stream>>>(xs, n - lo, nc, part);
        launched(impl, "sum_squares");
        zt_cuda_record(impl,
                       cudaMemcpyAsync(impl->host_result, part, (size_t)nc * sizeof(double),
                                       cudaMemcpyDeviceToHost, impl->stream),
                       "sum_squares (cudaMemcpyAsync)");
        sync_stream(impl, "sum_squares (cudaStreamSynchronize)");
        if (impl->error != ZT_OK)
            return NAN;
        /* dtype.c's order: chunk sums added one by one in index order. */
        for (int64_t c = 0; c < nc; c++)
            total += host[c];
    }
    return total;
}

bool cuda_has_inf_nan(const zt_backend *be, const void *x, zt_dtype dt, int64_t n)
{
    zt_cuda_impl *impl = impl_of(be);
    if (n <= 0)
        return false;
    int *flag = static_cast<int *>(impl->scratch);
    zt_cuda_record(impl, cudaMemsetAsync(flag, 0, sizeof *flag, impl->stream),
                   "has_inf_nan (cudaMemsetAsync)");
    const bool vec = aligned(x, 16);
    if (dt == ZT_F16) {
        if (vec)
            launch_map<8>(impl, inf_nan_op<ZT_F16>{x, flag}, n, "has_inf_nan");
        else
            launch_map<1>(impl, inf_nan_op<ZT_F16>{x, flag}, n, "has_inf_nan");
    } else if (dt == ZT_BF16) {
        if (vec)
            launch_map<8>(impl, inf_nan_op<ZT_BF16>{x, flag}, n, "has_inf_nan");
        else
            launch_map<1>(impl, inf_nan_op<ZT_BF16>{x, flag}, n, "has_inf_nan");
    } else {
        launch_map4(impl, inf_nan_op<ZT_F32>{x, flag}, n, vec, "has_inf_nan");
    }
    zt_cuda_record(impl,
                   cudaMemcpyAsync(impl->host_result, flag, sizeof *flag, cudaMemcpyDeviceToHost,
                                   impl->stream),
                   "has_inf_nan (cudaMemcpyAsync)");
    sync_stream(impl, "has_inf_nan (cudaStreamSynchronize)");
    /* After a device failure the answer is unknown: say "overflow", so that
     * no update is applied from garbage before `check` stops the run. */
    if (impl->error != ZT_OK)
        return true;
    return *static_cast<const int *>(impl->host_result) != 0;
}

/* ---- Conversion. ---- */

typedef void (*convert_fn)(zt_cuda_impl *impl, void *dst, const void *src, int64_t n,
                           float alpha);

template <zt_dtype D, zt_dtype S, bool ACC>
void convert_launch(zt_cuda_impl *impl, void *dst, const void *src, int64_t n, float alpha)
{
    bool vec4 = aligned(dst, 4 * sizeof(typename elem<D>::raw)) &&
                aligned(src, 4 * sizeof(typename elem<S>::raw));
    launch_map4(impl, convert_op<D, S, ACC>{dst, src, alpha}, n, vec4, "convert");
}

#define ZT_CONVERT_PAIR(D, S) {convert_launch<D, S, false>, convert_launch<D, S, true>}

/* [dst][src][accumulate] */
const convert_fn convert_fns[ZT_NDTYPES][ZT_NDTYPES][2] = {
    {ZT_CONVERT_PAIR(ZT_F32, ZT_F32), ZT_CONVERT_PAIR(ZT_F32, ZT_F16),
     ZT_CONVERT_PAIR(ZT_F32, ZT_BF16)},
    {ZT_CONVERT_PAIR(ZT_F16, ZT_F32), ZT_CONVERT_PAIR(ZT_F16, ZT_F16),
     ZT_CONVERT_PAIR(ZT_F16, ZT_BF16)},
    {ZT_CONVERT_PAIR(ZT_BF16, ZT_F32), ZT_CONVERT_PAIR(ZT_BF16, ZT_F16),
     ZT_CONVERT_PAIR(ZT_BF16, ZT_BF16)},
};

#undef ZT_CONVERT_PAIR

void cuda_convert(const zt_backend *be, void *dst, zt_dtype dst_dt, const void *src,
                  zt_dtype src_dt, int64_t n, float alpha, bool accumulate)
{
    zt_cuda_impl *impl = impl_of(be);
    if (n <= 0)
        return;
    /* As the host: an unscaled fp32 copy is a byte copy (signalling NaNs
     * included), or nothing in place. */
    if (dst_dt == ZT_F32 && src_dt == ZT_F32 && alpha == 1.0f && !accumulate) {
        cuda_copy_d2d(be, dst, src, (size_t)n * sizeof(float));
        return;
    }
    convert_fns[dst_dt][src_dt][accumulate](impl, dst, src, n, alpha);
}

/* ---- Optimizers. ---- */

void cuda_adam(const zt_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
               const zt_adam_hparams *hp)
{
    zt_cuda_impl *impl = impl_of(be);
    /* As zt_adam_cpu: beta^t in double on the host, then fp32 per element. */
    float bc1 = 1.0f, bc2 = 1.0f;
    if (hp->bias_correction) {
        bc1 = (float)(1.0 - pow((double)hp->beta1, (double)hp->step));
        bc2 = (float)(1.0 - pow((double)hp->beta2, (double)hp->step));
    }
    adam_coeffs c;
    c.lr = hp->lr;
    c.b1 = hp->beta1;
    c.b2 = hp->beta2;
    c.eps = hp->eps;
    c.wd = hp->weight_decay;
    c.bc1 = bc1;
    c.bc2 = bc2;
    c.omb1 = 1.0f - hp->beta1;
    c.omb2 = 1.0f - hp->beta2;
    bool vec4 = aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16);
    if (hp->adam_w_mode)
        launch_map4(impl, adam_op<true>{p, g, m, v, c}, n, vec4, "adam");
    else
        launch_map4(impl, adam_op<false>{p, g, m, v, c}, n, vec4, "adam");
}

template <int MODE>
void sgd_launch(zt_cuda_impl *impl, float *p, const float *g, float *buf, int64_t n,
                const zt_sgd_hparams *hp)
{
    sgd_op<MODE> op{p, g, buf, hp->lr, hp->momentum, hp->weight_decay, 1.0f - hp->dampening};
    bool vec4 = aligned(p, 16) && aligned(g, 16) && (MODE == SGD_PLAIN || aligned(buf, 16));
    launch_map4(impl, op, n, vec4, "sgd");
}

void cuda_sgd(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
              const zt_sgd_hparams *hp)
{
    zt_cuda_impl *impl = impl_of(be);
    if (hp->momentum == 0.0f)
        sgd_launch<SGD_PLAIN>(impl, p, g, buf, n, hp);
    else if (hp->first_step && hp->nesterov)
        sgd_launch<SGD_FIRST_NESTEROV>(impl, p, g, buf, n, hp);
    else if (hp->first_step)
        sgd_launch<SGD_FIRST>(impl, p, g, buf, n, hp);
    else if (hp->nesterov)
        sgd_launch<SGD_NESTEROV>(impl, p, g, buf, n, hp);
    else
        sgd_launch<SGD_MOMENTUM>(impl, p, g, buf, n, hp);
}

/* ---- Lifetime. ---- */

/* Releases whatever init made, in reverse order; NULL members are skipped. */
void impl_destroy(zt_cuda_impl *impl)
{
    if (impl->stream)
        cudaStreamSynchronize(impl->stream);
    if (impl->cublas)
        cublasDestroy(impl->cublas);
    if (impl->host_result)
        cudaFreeHost(impl->host_result);
    if (impl->scratch)
        cudaFree(impl->scratch);
    if (impl->stream)
        cudaStreamDestroy(impl->stream);
    /* Teardown after a device fault fails too; nothing is left to report to. */
    cudaGetLastError();
    free(impl);
}

const char *const init_hint =
    "check nvidia-smi and CUDA_VISIBLE_DEVICES, or run with --device cpu";

zt_status fail_cuda(zt_cuda_impl *impl, cudaError_t rc, const char *what)
{
    cudaGetLastError();
    return zt_fail(ZT_ERR_DEVICE, init_hint, "cuda backend: device %d: %s: %s", impl->device,
                   what, cudaGetErrorString(rc));
}

zt_status fail_blas(zt_cuda_impl *impl, cublasStatus_t rc, const char *what)
{
    return zt_fail(ZT_ERR_DEVICE, init_hint, "cuda backend: device %d: %s: %s", impl->device,
                   what, cublasGetStatusString(rc));
}

zt_status impl_init(zt_cuda_impl *impl)
{
    cudaError_t rc;
    cublasStatus_t st;
    if ((rc = cudaSetDevice(impl->device)) != cudaSuccess)
        return fail_cuda(impl, rc, "cudaSetDevice");
    cudaDeviceProp prop;
    if ((rc = cudaGetDeviceProperties(&prop, impl->device)) != cudaSuccess)
        return fail_cuda(impl, rc, "cudaGetDeviceProperties");
    impl->sm_count = prop.multiProcessorCount;
    /* A GPU this build has no code for fails every launch; say so now. */
    cudaFuncAttributes attr;
    if ((rc = cudaFuncGetAttributes(&attr, map_kernel<1, scale_op>)) != cudaSuccess) {
        cudaGetLastError();
        return zt_fail(ZT_ERR_UNSUPPORTED,
                       "rebuild with an nvcc -gencode for this GPU's compute capability",
                       "cuda backend: this build has no kernels for device %d (%s, compute "
                       "capability %d.%d): %s",
                       impl->device, prop.name, prop.major, prop.minor, cudaGetErrorString(rc));
    }
    if ((rc = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return fail_cuda(impl, rc, "cudaStreamCreateWithFlags");
    if ((st = cublasCreate(&impl->cublas)) != CUBLAS_STATUS_SUCCESS) {
        impl->cublas = NULL;
        return fail_blas(impl, st, "cublasCreate");
    }
    if ((st = cublasSetStream(impl->cublas, impl->stream)) != CUBLAS_STATUS_SUCCESS)
        return fail_blas(impl, st, "cublasSetStream");
    /* TF32 only when asked: by default fp32 GEMMs are exact fp32. */
    cublasMath_t math = impl->opt.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if ((st = cublasSetMathMode(impl->cublas, math)) != CUBLAS_STATUS_SUCCESS)
        return fail_blas(impl, st, "cublasSetMathMode");
    if ((rc = cudaMalloc(&impl->scratch, ZT_CUDA_SCRATCH_BYTES)) != cudaSuccess) {
        impl->scratch = NULL;
        return fail_cuda(impl, rc, "cudaMalloc of the scratch");
    }
    impl->scratch_bytes = ZT_CUDA_SCRATCH_BYTES;
    if ((rc = cudaMallocHost(&impl->host_result, ZT_CUDA_HOST_RESULT_BYTES)) != cudaSuccess) {
        impl->host_result = NULL;
        return fail_cuda(impl, rc, "cudaMallocHost of the result slot");
    }
    impl->host_result_bytes = ZT_CUDA_HOST_RESULT_BYTES;
    return ZT_OK;
}

void cuda_destroy(zt_backend *be)
{
    if (be->impl)
        impl_destroy(impl_of(be));
    /* Clearing makes use after free fail loudly. */
    *be = zt_backend{};
}

} // namespace

/* ---- Exported. ---- */

bool zt_cuda_record(zt_cuda_impl *impl, cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return true;
    if (impl->error == ZT_OK) {
        impl->error = ZT_ERR_DEVICE;
        snprintf(impl->error_msg, sizeof impl->error_msg, "%s: %s (%s)", what,
                 cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
    return false;
}

bool zt_cuda_record_blas(zt_cuda_impl *impl, cublasStatus_t rc, const char *what)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return true;
    if (impl->error == ZT_OK) {
        impl->error = ZT_ERR_DEVICE;
        snprintf(impl->error_msg, sizeof impl->error_msg, "%s: %s (%s)", what,
                 cublasGetStatusString(rc), cublasGetStatusName(rc));
    }
    return false;
}

struct CUstream_st *zt_backend_cuda_stream(const zt_backend *be)
{
    return be->impl ? impl_of(be)->stream : NULL;
}

extern "C" bool zt_backend_cuda_built(void) { return true; }

extern "C" int zt_backend_cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    const char *reason = NULL;
    if (rc == cudaErrorInsufficientDriver)
        reason = "no CUDA driver, or one older than this build's CUDA runtime "
                 "(cudaErrorInsufficientDriver)";
    else if (rc == cudaErrorNoDevice)
        reason = "no CUDA device (cudaErrorNoDevice)";
    else if (rc != cudaSuccess)
        reason = cudaGetErrorString(rc); /* static text of the runtime */
    else if (n == 0)
        reason = "no CUDA device";
    if (!reason)
        return n;
    cudaGetLastError();
    if (why)
        *why = reason;
    return 0;
}

extern "C" zt_status zt_backend_cuda_init(zt_backend *be, const zt_backend_options *opt)
{
    *be = zt_backend{};
    if (opt->gemm_dtype != ZT_F32 && opt->gemm_dtype != ZT_F16 && opt->gemm_dtype != ZT_BF16)
        return zt_fail(ZT_ERR_INTERNAL, "", "cuda backend: GEMM dtype %d is not a dtype",
                       (int)opt->gemm_dtype);
    zt_launch_ws ws;
    ZT_TRY(zt_launch_workspace(getenv("ZT_CUDA_GEMM_WORKSPACE_MB"), opt->gemm_dtype != ZT_F32,
                               &ws));
    const char *why = "";
    int count = zt_backend_cuda_device_count(&why);
    if (count == 0)
        return zt_fail(ZT_ERR_DEVICE, init_hint, "cuda backend: %s", why);
    if (opt->device < 0 || opt->device >= count)
        return zt_fail(ZT_ERR_DEVICE, init_hint,
                       "cuda backend: device %d does not exist (%d visible)", opt->device, count);

    zt_cuda_impl *impl = static_cast<zt_cuda_impl *>(calloc(1, sizeof *impl));
    if (!impl)
        return zt_fail(ZT_ERR_OOM, "", "cuda backend: cannot allocate its state");
    impl->device = opt->device;
    impl->opt = *opt;
    impl->error = ZT_OK;
    impl->plan_blas_bytes = ws.blas_bytes;
    impl->plan_cast_bytes = ws.cast_bytes;
    zt_status st = impl_init(impl);
    if (st != ZT_OK) {
        impl_destroy(impl);
        return st;
    }

    be->name = "cuda";
    be->kind = ZT_DEVICE_CUDA;
    be->impl = impl;
    be->destroy = cuda_destroy;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->workspace_bytes = ws.total_bytes;
    be->set_workspace = cuda_set_workspace;
    be->check = cuda_check;
    be->copy_h2d = cuda_copy_h2d;
    be->copy_d2h = cuda_copy_d2h;
    be->copy_d2d = cuda_copy_d2d;
    be->memset_zero = cuda_memset_zero;
    be->sync = cuda_sync;
    be->gemm = cuda_gemm;
    be->gemm_batched = cuda_gemm_batched;
    be->bias_add = cuda_bias_add;
    be->bias_grad = cuda_bias_grad;
    be->relu_forward = cuda_relu_forward;
    be->relu_backward = cuda_relu_backward;
    be->scale = cuda_scale;
    be->axpy = cuda_axpy;
    be->sum_squares = cuda_sum_squares;
    be->has_inf_nan = cuda_has_inf_nan;
    be->convert = cuda_convert;
    be->adam = cuda_adam;
    be->sgd = cuda_sgd;
    zt_backend_cuda_nn_ops(be);
    return ZT_OK;
}

extern "C" const zt_backend_entry zt_backend_cuda_entry = {
    "cuda", ZT_DEVICE_CUDA, zt_backend_cuda_built, zt_backend_cuda_device_count,
    zt_backend_cuda_init,
};
