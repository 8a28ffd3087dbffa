/*
 * backend_cuda_head: the CUDA backend's ops at a model's output: mean pooling
 * over the sequence (the classifier's head, forward and backward) and the
 * softmax cross-entropy with its gradient. Work layout, numerics and
 * determinism: cuda_nn.cuh. All three are typed: their kernels are
 * templates on the dtype of the tensors (logits and dlogits; x and y; dy
 * and dx), read widened and written rounded once.
 *
 * Memory: ops allocate nothing. xent_forward_backward writes the total and
 * up to ZT_XENT_PARTS partial sums, (1 + 1024) doubles = 8200 bytes, at the
 * start of the backend's fixed scratch (impl->scratch; a smaller scratch just
 * means fewer parts) and reads its result back through impl->host_result;
 * everything else works in registers and shared memory. Collective: none.
 */
#include "engine/cuda/cuda_nn.cuh"

/* Cross-entropy rows are summed in at most this many fixed parts, one block
 * each; the partial sums and the total are doubles in the scratch. */
#define ZT_XENT_PARTS 1024
/* Classes at or above which a whole block, not a warp, works on one row. */
#define ZT_XENT_BLOCK_CLASSES 4096

/* ---- cross-entropy ---- */

/* An online softmax's state: the max m of the values seen and the sum s of
 * exp(v - m) over them (0 and -inf: none seen). */
struct xent_ms {
    float m;
    double s;
};

/* s rescaled from max m to max mx >= m (0 when m is -inf: nothing seen). */
static __device__ __forceinline__ double xent_rescale(double s, float m, float mx)
{
    return m == -INFINITY ? 0.0 : s * exp((double)m - (double)mx);
}

/* Merging is symmetric in its arguments (a max and a commutative add), so
 * the xor butterfly leaves the same bits in every lane. */
static __device__ __forceinline__ xent_ms xent_merge(xent_ms a, xent_ms b)
{
    float mx = fmaxf(a.m, b.m);
    return {mx, xent_rescale(a.s, a.m, mx) + xent_rescale(b.s, b.m, mx)};
}

/* The state of the threads that share a row: a warp, or (kBlock) the block,
 * whose warp states are merged in warp order so every thread gets the same
 * bits. sh_m, sh_s hold ZT_NN_WARPS values and are free again on return. */
template <bool kBlock>
static __device__ __forceinline__ xent_ms group_merge(xent_ms v, float *sh_m, double *sh_s)
{
    for (int o = 16; o > 0; o >>= 1)
        v = xent_merge(v, {__shfl_xor_sync(0xffffffffu, v.m, o),
                           __shfl_xor_sync(0xffffffffu, v.s, o)});
    if constexpr (kBlock) {
        if ((threadIdx.x & 31) == 0) {
            sh_m[threadIdx.x >> 5] = v.m;
            sh_s[threadIdx.x >> 5] = v.s;
        }
        __syncthreads();
        v = {sh_m[0], sh_s[0]};
        for (int w = 1; w < ZT_NN_WARPS; w++)
            v = xent_merge(v, {sh_m[w], sh_s[w]});
        __syncthreads();
    } else {
        (void)sh_m;
        (void)sh_s;
    }
    return v;
}

template <bool kBlock> static __device__ __forceinline__ double group_sum(double v, double *sh)
{
    v = warp_sum(v);
    if constexpr (kBlock) {
        if ((threadIdx.x & 31) == 0)
            sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = sh[0];
        for (int w = 1; w < ZT_NN_WARPS; w++)
            v += sh[w];
        __syncthreads();
    } else {
        (void)sh;
    }
    return v;
}

/* Block b owns rows [b * part_rows, (b + 1) * part_rows) and writes their loss
 * sum to parts[b]: a warp per row (rows warp, warp + 8, ... summed per warp,
 * then the warps in order) or, for wide rows, the block per row (rows in
 * order). A row is read once: each thread walks its strided chunks of W
 * columns keeping an online softmax state (a running max, the sum rescaled
 * when the max grows), the states merge across the group, and a second pass
 * writes dlogits, recomputing exp(l - max). dlogits may be logits: a thread
 * writes only what it has just read, and the label's logit is read before
 * the merge that precedes every write. Columns [classes, ld) are padding:
 * skipped, their dlogits 0. logits and dlogits are tensors of T, read
 * widened and written rounded. */
template <bool kBlock, int W, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    xent_kernel(double *parts, const raw_t<T> *logits, const int32_t *__restrict__ labels,
                int64_t rows, int64_t classes, int64_t ld, int32_t ignore_index, float dscale,
                raw_t<T> *dlogits, int64_t part_rows)
{
    __shared__ float sh_m[ZT_NN_WARPS];
    __shared__ double sh_s[ZT_NN_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = kBlock ? (int)threadIdx.x : lane;
    const int gsize = kBlock ? ZT_NN_THREADS : 32;
    const int64_t nu = ld / W;
    const int64_t begin = (int64_t)blockIdx.x * part_rows;
    const int64_t end = min_i64(rows, begin + part_rows);
    double loss = 0.0; // this group's rows, in increasing order
    for (int64_t r = begin + (kBlock ? 0 : warp); r < end; r += kBlock ? 1 : ZT_NN_WARPS) {
        const raw_t<T> *lr = logits + r * ld;                // (ld)
        raw_t<T> *dl = dlogits ? dlogits + r * ld : nullptr; // (ld)
        const int32_t label = labels[r];
        if (label == ignore_index) {
            if (dl)
                for (int64_t u = g; u < nu; u += gsize)
                    vstore<W, T>(dl + u * W, vzero<W>());
            continue;
        }
        const float target = g == 0 ? elem<T>::widen(lr[label]) : 0.0f;
        xent_ms st = {-INFINITY, 0.0};
        for (int64_t u = g; u < nu; u += gsize) {
            zt_vec<W> a = vload<W, T>(lr + u * W);
            float cm = -INFINITY;
#pragma unroll
            for (int e = 0; e < W; e++)
                if (u * W + e < classes)
                    cm = fmaxf(cm, a.v[e]);
            if (cm > st.m) {
                st.s = xent_rescale(st.s, st.m, cm);
                st.m = cm;
            }
#pragma unroll
            for (int e = 0; e < W; e++)
                if (u * W + e < classes)
                    st.s += (double)expf(a.v[e] - st.m);
        }
        st = group_merge<kBlock>(st, sh_m, sh_s);
        if (g == 0)
            loss += log(st.s) - ((double)target - (double)st.m);
        if (!dl)
            continue;
        const float inv = (float)(1.0 / st.s);
        for (int64_t u = g; u < nu; u += gsize) {
            zt_vec<W> a = vload<W, T>(lr + u * W);
#pragma unroll
            for (int e = 0; e < W; e++) {
                int64_t col = u * W + e;
                float p = __fmul_rn(expf(a.v[e] - st.m), inv);
                float d = __fmul_rn(dscale, col == (int64_t)label ? __fsub_rn(p, 1.0f) : p);
                a.v[e] = col < classes ? d : 0.0f;
            }
            vstore<W, T>(dl + u * W, a);
        }
    }
    if (kBlock ? threadIdx.x == 0 : lane == 0)
        sh_s[kBlock ? 0 : warp] = loss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = sh_s[0];
        for (int w = 1; w < (kBlock ? 1 : ZT_NN_WARPS); w++)
            total += sh_s[w];
        parts[blockIdx.x] = total;
    }
}

/* out = sum of parts(n): strided per thread, then a fixed tree. One block. */
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    sum_parts_kernel(double *out, const double *__restrict__ parts, int64_t n)
{
    __shared__ double sh[ZT_NN_WARPS];
    double v = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += ZT_NN_THREADS)
        v += parts[i];
    v = group_sum<true>(v, sh);
    if (threadIdx.x == 0)
        *out = v;
}

static double cuda_xent_forward_backward(const zt_backend *be, zt_dtype dt, const void *logits,
                                         const int32_t *labels, int64_t rows, int64_t classes,
                                         int64_t ld, int32_t ignore_index, float dscale,
                                         void *dlogits)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (rows <= 0)
        return 0.0;
    int64_t max_parts = min_i64(ZT_XENT_PARTS, (int64_t)(impl->scratch_bytes / sizeof(double)) - 1);
    if (!impl->scratch || max_parts < 1) {
        zt_cuda_record(impl, cudaErrorInvalidValue, "xent_forward_backward (scratch too small)");
        return NAN;
    }
    /* Parts depend on rows only, so the summation order never depends on the
     * GPU the op runs on. */
    int64_t part_rows = (rows + max_parts - 1) / max_parts;
    int64_t nparts = (rows + part_rows - 1) / part_rows;
    double *total = (double *)impl->scratch; // then the parts
    double *parts = total + 1;
    /* A padded row stride (a multiple of 128) gets vector loads whatever the
     * class count. */
    bool vec = ld % 4 == 0 && vec_aligned(logits, dt) && (!dlogits || vec_aligned(dlogits, dt));
    bool block = classes >= ZT_XENT_BLOCK_CLASSES;
    dim3 grid((unsigned)nparts);
    cudaStream_t st = impl->stream;
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        const raw_t<T> *l = static_cast<const raw_t<T> *>(logits);
        raw_t<T> *d = static_cast<raw_t<T> *>(dlogits);
        if (block && vec)
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, st, xent_kernel<true, 4, T>)
            (parts, l, labels, rows, classes, ld, ignore_index, dscale, d, part_rows);
        else if (block)
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, st, xent_kernel<true, 1, T>)
            (parts, l, labels, rows, classes, ld, ignore_index, dscale, d, part_rows);
        else if (vec)
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, st, xent_kernel<false, 4, T>)
            (parts, l, labels, rows, classes, ld, ignore_index, dscale, d, part_rows);
        else
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, st, xent_kernel<false, 1, T>)
            (parts, l, labels, rows, classes, ld, ignore_index, dscale, d, part_rows);
    });
    nn_record(be, "xent_forward_backward");
    ZT_LAUNCH(1, ZT_NN_THREADS, 0, st, sum_parts_kernel)(total, parts, nparts);
    nn_record(be, "xent_forward_backward (sum)");
    if (!zt_cuda_record(impl,
                        cudaMemcpyAsync(impl->host_result, total, sizeof(double),
                                        cudaMemcpyDeviceToHost, st),
                        "xent_forward_backward (copy)") ||
        !zt_cuda_record(impl, cudaStreamSynchronize(st), "xent_forward_backward (sync)"))
        return NAN;
    return *(const double *)impl->host_result;
}

/* ---- mean pooling ---- */

/* A thread per (sample, unit of W columns) sums rows in increasing i, then
 * divides: the CPU's sequence of roundings, on x widened; y rounded once. */
template <int W, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    mean_pool_forward_kernel(raw_t<T> *__restrict__ y, const raw_t<T> *__restrict__ x,
                             const int32_t *__restrict__ lengths, int64_t n, int64_t t,
                             int64_t cols)
{
    const int64_t nu = cols / W;
    for (int64_t q = thread_index(); q < n * nu; q += thread_count()) {
        int64_t s = q / nu, u = q % nu;
        int64_t len = lengths ? lengths[s] : t;
        const raw_t<T> *xs = x + s * t * cols + u * W; // column unit of (t, cols)
        zt_vec<W> acc = vzero<W>();
#pragma unroll 4
        for (int64_t i = 0; i < len; i++) {
            zt_vec<W> a = vload<W, T>(xs + i * cols);
#pragma unroll
            for (int e = 0; e < W; e++)
                acc.v[e] += a.v[e];
        }
        const float fl = (float)len;
#pragma unroll
        for (int e = 0; e < W; e++)
            acc.v[e] = __fdiv_rn(acc.v[e], fl);
        vstore<W, T>(y + s * cols + u * W, acc);
    }
}

static void cuda_mean_pool_forward(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                                   const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || cols <= 0)
        return;
    /* 4-wide only when the thread count still fills the GPU: a column sum is a
     * serial chain, so more threads means more loads in flight. */
    bool vec = cols % 4 == 0 && vec_aligned(y, dt) && vec_aligned(x, dt) &&
               n * cols / 4 >= (int64_t)impl->sm_count * ZT_NN_THREADS * ZT_NN_BLOCKS_PER_SM;
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        raw_t<T> *yt = static_cast<raw_t<T> *>(y);
        const raw_t<T> *xt = static_cast<const raw_t<T> *>(x);
        if (vec)
            ZT_LAUNCH(nn_grid(impl, n * cols / 4, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                      mean_pool_forward_kernel<4, T>)
            (yt, xt, lengths, n, t, cols);
        else
            ZT_LAUNCH(nn_grid(impl, n * cols, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                      mean_pool_forward_kernel<1, T>)
            (yt, xt, lengths, n, t, cols);
    });
    nn_record(be, "mean_pool_forward");
}

/* dy widened, divided, rounded once; zeros past the length. */
template <int W, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    mean_pool_backward_kernel(raw_t<T> *__restrict__ dx, const raw_t<T> *__restrict__ dy,
                              const int32_t *__restrict__ lengths, int64_t n, int64_t t,
                              int64_t cols)
{
    const int64_t nu = cols / W;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < n * t;
         r += (int64_t)gridDim.x * blockDim.y) {
        int64_t s = r / t, i = r % t;
        int64_t len = lengths ? lengths[s] : t;
        const raw_t<T> *dys = dy + s * cols; // (cols)
        raw_t<T> *dxr = dx + r * cols;       // (cols)
        const float fl = (float)len;
        for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
            zt_vec<W> a = i < len ? vload<W, T>(dys + u * W) : vzero<W>();
            if (i < len) {
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = __fdiv_rn(a.v[e], fl);
            }
            vstore<W, T>(dxr + u * W, a);
        }
    }
}

static void cuda_mean_pool_backward(const zt_backend *be, zt_dtype dt, void *dx, const void *dy,
                                    const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0 || cols <= 0)
        return;
    bool vec = cols % 4 == 0 && vec_aligned(dx, dt) && vec_aligned(dy, dt);
    dim3 block = row_block(vec ? cols / 4 : cols);
    unsigned grid = nn_grid(impl, n * t, block.y);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        raw_t<T> *dxt = static_cast<raw_t<T> *>(dx);
        const raw_t<T> *dyt = static_cast<const raw_t<T> *>(dy);
        if (vec)
            ZT_LAUNCH(grid, block, 0, impl->stream, mean_pool_backward_kernel<4, T>)
            (dxt, dyt, lengths, n, t, cols);
        else
            ZT_LAUNCH(grid, block, 0, impl->stream, mean_pool_backward_kernel<1, T>)
            (dxt, dyt, lengths, n, t, cols);
    });
    nn_record(be, "mean_pool_backward");
}

void zt_backend_cuda_head_ops(zt_backend *be)
{
    be->xent_forward_backward = cuda_xent_forward_backward;
    be->mean_pool_forward = cuda_mean_pool_forward;
    be->mean_pool_backward = cuda_mean_pool_backward;
}
