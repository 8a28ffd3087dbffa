/*
 * backend_cuda_elementwise: the CUDA backend's element-wise ops (bias_add,
 * relu, scale, axpy), its reductions (bias_grad, sum_squares, has_inf_nan)
 * and convert, as functors run by the map kernel (cuda_common.cuh) and a few
 * reduction kernels. The typed ones (bias_add, axpy, bias_grad) are
 * templates on their dtype: 16-bit tensors are read and written as they are
 * stored, the math is fp32 and each 16-bit output is rounded once.
 *
 * Numerics: axpy and convert round exactly like the CPU loops (no FMA).
 * sum_squares uses engine/dtype.c's chunk geometry and adds the chunk sums on
 * the host in the same order: its float64 result is the CPU's bit for bit.
 * convert keeps dtype.c's NaN rules (x86's for the arithmetic: a NaN operand
 * comes out quieted with its sign, an invalid operation gives the default
 * NaN), so conversions match the CPU bit for bit as well. bias_grad sums each
 * column in row order within fixed segments of rows and then adds the
 * segments in order (launch.h); up to 127 rows that is the CPU's order.
 * Other ops produce the GPU's canonical NaN where the CPU would keep a
 * payload.
 *
 * Memory: bias_grad's segment sums, sum_squares' chunk sums and has_inf_nan's
 * flag use the backend's fixed scratch, and values return through its pinned
 * result slot; nothing is allocated. Collective: none.
 */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

namespace {

/* ---- Element-wise functors. ---- */

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

template <zt_dtype T> struct axpy_op {
    void *y;
    const void *x;
    float a;
    template <int W> __device__ void run(int64_t i) const
    {
        float yv[W], xv[W];
        load_elems<T, W>(y, i, yv);
        load_elems<T, W>(x, i, xv);
#pragma unroll
        for (int k = 0; k < W; k++)
            yv[k] = __fadd_rn(yv[k], __fmul_rn(a, xv[k]));
        store_elems<T, W>(y, i, yv);
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

/* The vector form needs cols % W == 0, so a vector never straddles rows. */
template <zt_dtype T> struct bias_add_op {
    void *y;
    const void *bias;
    int64_t cols;
    template <int W> __device__ void run(int64_t i) const
    {
        float yv[W], bv[W];
        load_elems<T, W>(y, i, yv);
        load_elems<T, W>(bias, i % cols, bv);
#pragma unroll
        for (int k = 0; k < W; k++)
            yv[k] = __fadd_rn(yv[k], bv[k]);
        store_elems<T, W>(y, i, yv);
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
 * rows of dy (T) in order; segment 0 starts from the initial dbias. out is
 * dbias when there is one segment, else the (segs, cols) partial sums. */
template <zt_dtype T>
__global__ void bias_grad_seg_kernel(float *out, const float *dbias, const raw_t<T> *dy,
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
    const raw_t<T> *col = dy + r0 * cols + j; // (r1 - r0) rows, stride cols
#pragma unroll 8
    for (int64_t r = r0; r < r1; r++, col += cols)
        acc = __fadd_rn(acc, elem<T>::widen(*col));
    out[s * cols + j] = acc;
}

/* ---- Element-wise ops. ---- */

void cuda_bias_add(const zt_backend *be, zt_dtype dt, void *y, const void *bias, int64_t rows,
                   int64_t cols)
{
    bool vec = cols % vec_elems(dt) == 0 && aligned(y, 16) && aligned(bias, 16);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        launch_map_vec<T>(impl_of(be), bias_add_op<T>{y, bias, cols}, rows * cols, vec,
                          "bias_add");
    });
}

void cuda_bias_grad(const zt_backend *be, zt_dtype dt, float *dbias, const void *dy,
                    int64_t rows, int64_t cols, bool accumulate)
{
    zt_cuda_impl *impl = impl_of(be);
    if (cols <= 0)
        return;
    if (rows <= 0) {
        if (!accumulate)
            be->memset_zero(be, dbias, (size_t)cols * sizeof(float));
        return;
    }
    zt_launch_bias_plan p =
        zt_launch_bias_grad(rows, cols, (int64_t)(impl->scratch_bytes / sizeof(float)));
    float *part = static_cast<float *>(impl->scratch);
    dim3 grid(p.grid_x, (unsigned)p.segs);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        ZT_LAUNCH(grid, p.block, 0, impl->stream, bias_grad_seg_kernel<T>)
        (p.segs == 1 ? dbias : part, dbias, static_cast<const raw_t<T> *>(dy), rows, cols,
         p.seg_rows, accumulate);
    });
    launched(impl, "bias_grad");
    if (p.segs > 1) {
        ZT_LAUNCH(p.grid_x, p.block, 0, impl->stream, bias_grad_join_kernel<>)
        (dbias, part, p.segs, cols);
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

void cuda_axpy(const zt_backend *be, zt_dtype dt, void *y, float a, const void *x, int64_t n)
{
    bool vec = aligned(y, 16) && aligned(x, 16);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        launch_map_vec<T>(impl_of(be), axpy_op<T>{y, x, a}, n, vec, "axpy");
    });
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
            ZT_LAUNCH(d.grid, d.block, 0, impl->stream, sum_squares_kernel<ZT_F16>)
            (xs, n - lo, nc, part);
        else if (dt == ZT_BF16)
            ZT_LAUNCH(d.grid, d.block, 0, impl->stream, sum_squares_kernel<ZT_BF16>)
            (xs, n - lo, nc, part);
        else
            ZT_LAUNCH(d.grid, d.block, 0, impl->stream, sum_squares_kernel<ZT_F32>)
            (xs, n - lo, nc, part);
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
    /* 8 elements a step when either side is 16-bit: its 16 bytes are one
     * vector, an fp32 side's 32 bytes two. */
    constexpr zt_dtype V = D == ZT_F32 ? S : D;
    launch_map_vec<V>(impl, convert_op<D, S, ACC>{dst, src, alpha}, n,
                      aligned(dst, 16) && aligned(src, 16), "convert");
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
        be->copy_d2d(be, dst, src, (size_t)n * sizeof(float));
        return;
    }
    convert_fns[dst_dt][src_dt][accumulate](impl, dst, src, n, alpha);
}

} // namespace

cudaError_t zt_cuda_probe_kernels(struct cudaFuncAttributes *attr)
{
    return cudaFuncGetAttributes(attr, map_kernel<1, scale_op>);
}

void zt_backend_cuda_elementwise_ops(zt_backend *be)
{
    be->bias_add = cuda_bias_add;
    be->bias_grad = cuda_bias_grad;
    be->relu_forward = cuda_relu_forward;
    be->relu_backward = cuda_relu_backward;
    be->scale = cuda_scale;
    be->axpy = cuda_axpy;
    be->sum_squares = cuda_sum_squares;
    be->has_inf_nan = cuda_has_inf_nan;
    be->convert = cuda_convert;
}
