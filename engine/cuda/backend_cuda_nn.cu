/*
 * backend_cuda_nn: the CUDA backend's transformer-layer ops along the
 * residual stream: embedding (forward and backward), sinusoidal positions,
 * layernorm (and residual add + layernorm), GELU and keyed dropout
 * (backend.h's "Transformer layers" block, less the attention softmax in
 * backend_cuda_attn.cu and the pooling and cross-entropy in
 * backend_cuda_head.cu; gemm_batched lives with the other cuBLAS calls in
 * backend_cuda_gemm.cu). Work layout, numerics and determinism: cuda_nn.cuh.
 * The typed ops (embedding, sinusoidal positions, layernorm, residual +
 * layernorm, dropout) are kernel templates on their dtype; residual +
 * layernorm normalises x1 as stored, rounded to it.
 *
 * Memory: ops allocate nothing; everything works in registers and shared
 * memory. Collective: none.
 */
#include "engine/cuda/cuda_act.cuh"
#include "engine/cuda/cuda_nn.cuh"

extern "C" {
#include "engine/rng.h"
}

/* Rows of ids sorted per embedding-backward launch: the keys fill 32 KB of
 * shared memory, which leaves room for two blocks per SM. */
#define ZT_EMB_CHUNK 4096
#define ZT_EMB_THREADS 512

/* Layernorm dw/db: columns per block and rows per shared-memory tile. Eight
 * columns are one 32-byte sector per row, so a 768-wide model still gets 96
 * blocks; the tile (32 KB for dw terms and dy) keeps 16 loads per thread in
 * flight while the previous tile is summed. */
#define ZT_LNP_COLS 8
#define ZT_LNP_ROWS 512
/* ... and rows per segment: each (segment, 8 columns) is a block, so GPT-2
 * small's 16,384 rows at C 768 make 16 x 96 = 1,536 blocks where one serial
 * chain per column gave 96 (under one block per SM of an H100); up to 1,024
 * rows stay one segment, the CPU's order. */
#define ZT_LNP_SEG_ROWS 1024

/* ---- embedding ---- */

template <int W, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    embedding_forward_kernel(raw_t<T> *__restrict__ y, const int32_t *__restrict__ ids,
                             const raw_t<T> *__restrict__ table, int64_t rows, int64_t cols,
                             bool accumulate)
{
    const int64_t nu = cols / W;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
         r += (int64_t)gridDim.x * blockDim.y) {
        const raw_t<T> *src = table + (int64_t)ids[r] * cols; // (cols)
        raw_t<T> *dst = y + r * cols;                         // (cols)
        for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
            zt_vec<W> a = vload<W, T>(src + u * W);
            if (accumulate) {
                zt_vec<W> b = vload<W, T>(dst + u * W);
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = b.v[e] + a.v[e];
            }
            vstore<W, T>(dst + u * W, a);
        }
    }
}

static void cuda_embedding_forward(const zt_backend *be, zt_dtype dt, void *y,
                                   const int32_t *ids, const void *table, int64_t rows,
                                   int64_t cols, bool accumulate)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (rows <= 0 || cols <= 0)
        return;
    bool vec = cols % 4 == 0 && vec_aligned(y, dt) && vec_aligned(table, dt);
    dim3 block = row_block(vec ? cols / 4 : cols);
    unsigned grid = nn_grid(impl, rows, block.y);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        raw_t<T> *yt = static_cast<raw_t<T> *>(y);
        const raw_t<T> *tt = static_cast<const raw_t<T> *>(table);
        if (vec)
            ZT_LAUNCH(grid, block, 0, impl->stream, embedding_forward_kernel<4, T>)
            (yt, ids, tt, rows, cols, accumulate);
        else
            ZT_LAUNCH(grid, block, 0, impl->stream, embedding_forward_kernel<1, T>)
            (yt, ids, tt, rows, cols, accumulate);
    });
    nn_record(be, "embedding_forward");
}

/* Sorts keys(n) ascending in place; n is a power of two, the whole block calls
 * it. A bitonic network: each step compares n/2 disjoint pairs. */
static __device__ void block_bitonic_sort(uint64_t *keys, int n)
{
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int q = threadIdx.x; q < n / 2; q += blockDim.x) {
                int i = 2 * q - (q & (j - 1)); // bit j of i clear: partner i + j
                uint64_t a = keys[i], b = keys[i + j];
                if ((a > b) == ((i & k) == 0)) {
                    keys[i] = b;
                    keys[i + j] = a;
                }
            }
            __syncthreads();
        }
}

/* Rows [r0, r0 + nr) of one chunk into dtable. Every block sorts the chunk's
 * (id, row) keys in shared memory (cheaper than a second launch and scratch
 * proportional to rows), which groups the rows of each id in increasing row
 * order. A work item is (first sorted position of an id, column tile of 32
 * units); its warp adds that id's dy rows to the table row in order, in
 * registers, and writes each element once. Chunks run in launch order, so
 * every element receives its additions in increasing r, as on the CPU. */
template <int W, zt_dtype T>
static __global__ void __launch_bounds__(ZT_EMB_THREADS)
    embedding_backward_kernel(float *__restrict__ dtable, const int32_t *__restrict__ ids,
                              const raw_t<T> *__restrict__ dy, int64_t r0, int nr, int64_t cols)
{
    /* Loads a warp keeps in flight while walking one id's rows. */
    constexpr int kBatch = 32 / W;
    __shared__ uint64_t keys[ZT_EMB_CHUNK];
    int n2 = 2;
    while (n2 < nr)
        n2 <<= 1;
    for (int q = threadIdx.x; q < n2; q += blockDim.x)
        keys[q] = q < nr ? ((uint64_t)(uint32_t)ids[r0 + q] << 32) | (uint32_t)q : UINT64_MAX;
    __syncthreads();
    block_bitonic_sort(keys, n2);

    const int lane = threadIdx.x & 31;
    const int64_t nu = cols / W, tiles = (nu + 31) / 32, items = (int64_t)nr * tiles;
    for (int64_t it = warp_index(); it < items; it += warp_count()) {
        const int p = (int)(it / tiles);
        const uint64_t id = keys[p] >> 32;
        if (p > 0 && (keys[p - 1] >> 32) == id)
            continue; // the id's first position sums its rows
        /* First position past this id: binary search of the sorted keys. */
        int lo = p + 1, hi = nr;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if ((keys[mid] >> 32) == id)
                lo = mid + 1;
            else
                hi = mid;
        }
        const int end = lo;
        const int64_t u = (it % tiles) * 32 + lane;
        if (u >= nu)
            continue;
        float *dst = dtable + (int64_t)id * cols + u * W; // (W)
        zt_vec<W> acc = vload<W>(dst);
        for (int q0 = p; q0 < end; q0 += kBatch) {
            zt_vec<W> g[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; b++)
                if (q0 + b < end)
                    g[b] = vload<W, T>(dy + (r0 + (int64_t)(uint32_t)keys[q0 + b]) * cols + u * W);
#pragma unroll
            for (int b = 0; b < kBatch; b++) {
                if (q0 + b < end) {
#pragma unroll
                    for (int e = 0; e < W; e++)
                        acc.v[e] += g[b].v[e];
                }
            }
        }
        vstore<W>(dst, acc);
    }
}

static void cuda_embedding_backward(const zt_backend *be, zt_dtype dt, float *dtable,
                                    const int32_t *ids, const void *dy, int64_t rows,
                                    int64_t cols, int64_t vocab, bool accumulate)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (cols <= 0 || vocab <= 0)
        return;
    if (!accumulate) {
        zt_cuda_record(impl,
                       cudaMemsetAsync(dtable, 0, (size_t)(vocab * cols) * sizeof(float),
                                       impl->stream),
                       "embedding_backward (clear)");
    }
    bool vec = cols % 4 == 0 && aligned16(dtable) && vec_aligned(dy, dt);
    int64_t tiles = ((vec ? cols / 4 : cols) + 31) / 32;
    int64_t cap = 2 * (int64_t)(impl->sm_count > 0 ? impl->sm_count : 1);
    for (int64_t r0 = 0; r0 < rows; r0 += ZT_EMB_CHUNK) {
        int nr = (int)min_i64(ZT_EMB_CHUNK, rows - r0);
        /* Every block sorts, so use no more blocks than the items need. */
        unsigned grid = (unsigned)min_i64(cap, (nr * tiles + ZT_EMB_THREADS / 32 - 1) /
                                                   (ZT_EMB_THREADS / 32));
        with_dtype(dt, [&](auto tag) {
            constexpr zt_dtype T = decltype(tag)::value;
            const raw_t<T> *g = static_cast<const raw_t<T> *>(dy);
            if (vec)
                ZT_LAUNCH(grid, ZT_EMB_THREADS, 0, impl->stream, embedding_backward_kernel<4, T>)
                (dtable, ids, g, r0, nr, cols);
            else
                ZT_LAUNCH(grid, ZT_EMB_THREADS, 0, impl->stream, embedding_backward_kernel<1, T>)
                (dtable, ids, g, r0, nr, cols);
        });
        nn_record(be, "embedding_backward");
    }
}

/* ---- positional encoding ---- */

/* A thread per (position i, column j): the float64 sin/cos run once and the
 * value is added to all n samples, y widened, the fp32 sum rounded once. */
template <zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    sinusoid_add_kernel(raw_t<T> *y, int64_t n, int64_t t, int64_t cols, double log_base)
{
    for (int64_t q = thread_index(); q < t * cols; q += thread_count()) {
        int64_t i = q / cols, j = q % cols, two_k = j - j % 2;
        double wk = exp(-(double)two_k * log_base / (double)cols);
        double angle = (double)i * wk;
        float pe = (float)(j % 2 == 0 ? sin(angle) : cos(angle));
        for (int64_t s = 0; s < n; s++) {
            float v[1];
            load_elems<T, 1>(y, (s * t + i) * cols + j, v);
            v[0] += pe;
            store_elems<T, 1>(y, (s * t + i) * cols + j, v);
        }
    }
}

static void cuda_sinusoid_add(const zt_backend *be, zt_dtype dt, void *y, int64_t n, int64_t t,
                              int64_t cols)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0 || cols <= 0)
        return;
    /* The host's log, so the frequencies start from the CPU's exact value. */
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        ZT_LAUNCH(nn_grid(impl, t * cols, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                  sinusoid_add_kernel<T>)
        (static_cast<raw_t<T> *>(y), n, t, cols, log(10000.0));
    });
    nn_record(be, "sinusoid_add");
}

/* ---- layernorm ---- */

/* With RES (residual_layernorm_forward) the row is x + branch, written to x1
 * as it is loaded; the statistics and y then read it as stored (rounded to
 * T) from registers, or from x1 (which this lane wrote) beyond the cached
 * units. x1 may alias x or branch, so those three are not __restrict__. */
template <int W, int U, bool RES, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    layernorm_forward_kernel(raw_t<T> *__restrict__ y, float *__restrict__ mean,
                             float *__restrict__ rstd, const raw_t<T> *x,
                             const raw_t<T> *branch, raw_t<T> *x1,
                             const raw_t<T> *__restrict__ w, const raw_t<T> *__restrict__ b,
                             int64_t rows, int64_t cols, float eps)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = cols / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        const raw_t<T> *xr = (RES ? x1 : x) + r * cols; // (cols) what is normalised
        raw_t<T> *yr = y + r * cols;                    // (cols)
        zt_row_cache<W, U, T> xc;
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> a;
                if constexpr (RES) {
                    zt_vec<W> xv = vload<W, T>(x + r * cols + u * W),
                              bv = vload<W, T>(branch + r * cols + u * W);
#pragma unroll
                    for (int e = 0; e < W; e++)
                        xv.v[e] = stored<T>(__fadd_rn(xv.v[e], bv.v[e]));
                    vstore<W, T>(x1 + r * cols + u * W, xv);
                    if constexpr (U > 0)
                        xc.c[k] = xv;
                    a = xv;
                } else {
                    a = xc.fill(xr, k, u);
                }
#pragma unroll
                for (int e = 0; e < W; e++)
                    s += (double)a.v[e];
            }
        }
        const double m = warp_sum(s) / (double)cols;
        /* Two passes, as on the CPU: E[x^2] - m^2 cancels when |mean| >> std. */
        double q = 0.0;
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> a = xc.get(xr, k, u);
#pragma unroll
                for (int e = 0; e < W; e++) {
                    double d = (double)a.v[e] - m;
                    q += d * d;
                }
            }
        }
        const double var = warp_sum(q) / (double)cols;
        /* y uses the rounded statistics that are stored, so backward recomputes
         * exactly the xhat forward used. */
        const float mf = (float)m, rs = (float)(1.0 / sqrt(var + (double)eps));
        if (lane == 0) {
            mean[r] = mf;
            rstd[r] = rs;
        }
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> a = xc.get(xr, k, u), wv = vload<W, T>(w + u * W),
                          bv = vload<W, T>(b + u * W);
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(a.v[e], mf), rs), wv.v[e]),
                                       bv.v[e]);
                vstore<W, T>(yr + u * W, a);
            }
        }
    }
}

/* Both forms: x1 and branch are NULL for the plain layernorm. */
static void layernorm_forward_launch(const zt_backend *be, zt_dtype dt, void *x1, void *y,
                                     float *mean, float *rstd, const void *x,
                                     const void *branch, const void *w, const void *b,
                                     int64_t rows, int64_t cols, float eps, const char *what)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (rows <= 0)
        return;
    const bool res = x1 != nullptr;
    bool vec = cols % 4 == 0 && vec_aligned(y, dt) && vec_aligned(x, dt) && vec_aligned(w, dt) &&
               vec_aligned(b, dt) && (!res || (vec_aligned(branch, dt) && vec_aligned(x1, dt)));
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        using R = raw_t<T>;
        R *yt = static_cast<R *>(y), *x1t = static_cast<R *>(x1);
        const R *xt = static_cast<const R *>(x), *bt = static_cast<const R *>(branch);
        const R *wt = static_cast<const R *>(w), *bs = static_cast<const R *>(b);
        row_dispatch(vec, cols, [&](auto shape) {
            constexpr int W = decltype(shape)::w, U = decltype(shape)::u;
            if (res)
                ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream,
                          layernorm_forward_kernel<W, U, true, T>)
                (yt, mean, rstd, xt, bt, x1t, wt, bs, rows, cols, eps);
            else
                ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream,
                          layernorm_forward_kernel<W, U, false, T>)
                (yt, mean, rstd, xt, nullptr, nullptr, wt, bs, rows, cols, eps);
        });
    });
    nn_record(be, what);
}

static void cuda_layernorm_forward(const zt_backend *be, zt_dtype dt, void *y, float *mean,
                                   float *rstd, const void *x, const void *w, const void *b,
                                   int64_t rows, int64_t cols, float eps)
{
    layernorm_forward_launch(be, dt, nullptr, y, mean, rstd, x, nullptr, w, b, rows, cols, eps,
                             "layernorm_forward");
}

static void cuda_residual_layernorm_forward(const zt_backend *be, zt_dtype dt, void *x1,
                                            void *y, float *mean, float *rstd, const void *x,
                                            const void *branch, const void *w, const void *b,
                                            int64_t rows, int64_t cols, float eps)
{
    layernorm_forward_launch(be, dt, x1, y, mean, rstd, x, branch, w, b, rows, cols, eps,
                             "residual_layernorm_forward");
}

/* dw, db over columns [blockIdx.x * 8, + 8) and the rows of segment
 * blockIdx.y (seg_rows each): all threads stage a tile of rows (the dw term
 * dy * xhat, and dy) in shared memory, then 16 threads (dw and db of each
 * column) add the tile's rows in increasing order to registers that started
 * at the old value (segment 0 when accumulating) or 0. One segment is the
 * CPU's exact sequence of roundings and writes dw, db; with more, segment s
 * writes part[s] (dw) and part[segs + s] (db), (cols) each, and the join adds
 * them in segment order. The next tile's loads are issued before the serial
 * sum, so they overlap it. */
template <zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    layernorm_param_grads_kernel(float *__restrict__ dw, float *__restrict__ db,
                                 float *__restrict__ part, const raw_t<T> *__restrict__ dy,
                                 const raw_t<T> *__restrict__ x, const float *__restrict__ mean,
                                 const float *__restrict__ rstd, int64_t rows, int64_t cols,
                                 int64_t seg_rows, bool accumulate)
{
    constexpr int kRowsPerPass = ZT_NN_THREADS / ZT_LNP_COLS;
    constexpr int kPer = ZT_LNP_ROWS / kRowsPerPass; // tile elements per thread
    __shared__ float tile[ZT_LNP_ROWS][2 * ZT_LNP_COLS]; // [row][dw terms | dy]
    const int c = threadIdx.x % ZT_LNP_COLS, rr = threadIdx.x / ZT_LNP_COLS;
    const int64_t j = (int64_t)blockIdx.x * ZT_LNP_COLS + c;
    const int64_t seg = blockIdx.y, segs = gridDim.y;
    const int64_t r_begin = seg * seg_rows, r_end = min_i64(rows, r_begin + seg_rows);
    float dyv[kPer], xv[kPer], mv[kPer], rv[kPer];

    auto load = [&](int64_t r0) {
#pragma unroll
        for (int k = 0; k < kPer; k++) {
            int64_t r = r0 + rr + (int64_t)k * kRowsPerPass;
            bool ok = r < r_end && j < cols;
            dyv[k] = ok ? elem<T>::widen(dy[r * cols + j]) : 0.0f;
            xv[k] = ok ? elem<T>::widen(x[r * cols + j]) : 0.0f;
            mv[k] = ok ? mean[r] : 0.0f;
            rv[k] = ok ? rstd[r] : 0.0f;
        }
    };

    /* Thread t < 16 sums column (t % 8) of half t / 8 (0: dw, 1: db). */
    const bool summer = threadIdx.x < 2 * ZT_LNP_COLS;
    const int64_t sj = (int64_t)blockIdx.x * ZT_LNP_COLS + threadIdx.x % ZT_LNP_COLS;
    const int half = threadIdx.x < ZT_LNP_COLS ? 0 : 1;
    float *param = half == 0 ? dw : db;
    float *out = segs == 1 ? param : part + (half * segs + seg) * cols;
    float acc = 0.0f;
    if (summer && sj < cols && accumulate && seg == 0)
        acc = param[sj];

    load(r_begin);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += ZT_LNP_ROWS) {
#pragma unroll
        for (int k = 0; k < kPer; k++) {
            int i = rr + k * kRowsPerPass;
            tile[i][c] = __fmul_rn(dyv[k], __fmul_rn(__fsub_rn(xv[k], mv[k]), rv[k]));
            tile[i][ZT_LNP_COLS + c] = dyv[k];
        }
        __syncthreads();
        if (r0 + ZT_LNP_ROWS < r_end)
            load(r0 + ZT_LNP_ROWS);
        if (summer) {
            int nr = (int)min_i64(ZT_LNP_ROWS, r_end - r0);
#pragma unroll 8
            for (int i = 0; i < nr; i++)
                acc += tile[i][threadIdx.x];
        }
        __syncthreads();
    }
    if (summer && sj < cols)
        out[sj] = acc;
}

/* dx of a row: the two row means as float32 warp sums, then the CPU's
 * expression. Each lane reads its elements before writing them and the sums
 * come first, so dx == dy works in place. */
template <int W, int U, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    layernorm_dx_kernel(raw_t<T> *dx, const raw_t<T> *dy, const raw_t<T> *__restrict__ x,
                        const float *__restrict__ mean, const float *__restrict__ rstd,
                        const raw_t<T> *__restrict__ w, int64_t rows, int64_t cols,
                        bool accumulate)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = cols / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        const raw_t<T> *dyr = dy + r * cols; // (cols)
        const raw_t<T> *xr = x + r * cols;   // (cols)
        raw_t<T> *dxr = dx + r * cols;       // (cols)
        const float m = mean[r], rs = rstd[r];
        zt_row_cache<W, U, T> dyc, xc;
        float sg = 0.0f, sgx = 0.0f; // sums of dy*w and dy*w*xhat
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> g = dyc.fill(dyr, k, u), a = xc.fill(xr, k, u),
                          wv = vload<W, T>(w + u * W);
#pragma unroll
                for (int e = 0; e < W; e++) {
                    float gw = __fmul_rn(g.v[e], wv.v[e]);
                    sg = __fadd_rn(sg, gw);
                    sgx = __fadd_rn(sgx, __fmul_rn(gw, __fmul_rn(__fsub_rn(a.v[e], m), rs)));
                }
            }
        }
        const float mean_g = __fdiv_rn(warp_sum(sg), (float)cols);
        const float mean_gx = __fdiv_rn(warp_sum(sgx), (float)cols);
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> g = dyc.get(dyr, k, u), a = xc.get(xr, k, u),
                          wv = vload<W, T>(w + u * W);
                zt_vec<W> o = accumulate ? vload<W, T>(dxr + u * W) : vzero<W>();
#pragma unroll
                for (int e = 0; e < W; e++) {
                    float xhat = __fmul_rn(__fsub_rn(a.v[e], m), rs);
                    float d = __fmul_rn(rs, __fsub_rn(__fsub_rn(__fmul_rn(g.v[e], wv.v[e]), mean_g),
                                                      __fmul_rn(xhat, mean_gx)));
                    o.v[e] = accumulate ? __fadd_rn(o.v[e], d) : d;
                }
                vstore<W, T>(dxr + u * W, o);
            }
        }
    }
}

static void cuda_layernorm_backward(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                                    float *db, const void *dy, const void *x, const float *mean,
                                    const float *rstd, const void *w, int64_t rows, int64_t cols,
                                    bool accumulate_dx, bool accumulate_params)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (cols <= 0)
        return;
    /* Segments of at least ZT_LNP_SEG_ROWS rows, as many as the scratch
     * holds partial dw and db for; they depend on rows, cols and the scratch
     * size only, so the sums' order is the same on every GPU. */
    const int64_t cap_segs = (int64_t)(impl->scratch_bytes / (2 * sizeof(float))) / cols;
    int64_t segs = min_i64(min_i64(rows / ZT_LNP_SEG_ROWS, cap_segs), 65535);
    segs = segs < 1 ? 1 : segs;
    const int64_t seg_rows = rows > 0 ? (rows + segs - 1) / segs : 0;
    if (rows > 0)
        segs = (rows + seg_rows - 1) / seg_rows;
    float *part = static_cast<float *>(impl->scratch);
    dim3 pgrid((unsigned)((cols + ZT_LNP_COLS - 1) / ZT_LNP_COLS), (unsigned)segs);
    bool vec = cols % 4 == 0 && vec_aligned(dx, dt) && vec_aligned(dy, dt) &&
               vec_aligned(x, dt) && vec_aligned(w, dt);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        using R = raw_t<T>;
        const R *dyt = static_cast<const R *>(dy), *xt = static_cast<const R *>(x);
        /* Parameter gradients first: they read dy, which dx may overwrite.
         * With no rows they still assign 0 (or keep the accumulated value). */
        ZT_LAUNCH(pgrid, ZT_NN_THREADS, 0, impl->stream, layernorm_param_grads_kernel<T>)
        (dw, db, part, dyt, xt, mean, rstd, rows, cols, seg_rows, accumulate_params);
        nn_record(be, "layernorm_backward (dw, db)");
        if (segs > 1) {
            const unsigned jgrid = (unsigned)((cols + ZT_NN_THREADS - 1) / ZT_NN_THREADS);
            ZT_LAUNCH(jgrid, ZT_NN_THREADS, 0, impl->stream, bias_grad_join_kernel<>)
            (dw, part, segs, cols);
            ZT_LAUNCH(jgrid, ZT_NN_THREADS, 0, impl->stream, bias_grad_join_kernel<>)
            (db, part + segs * cols, segs, cols);
            nn_record(be, "layernorm_backward (dw, db join)");
        }
        if (rows <= 0)
            return;
        row_dispatch(vec, cols, [&](auto shape) {
            constexpr int W = decltype(shape)::w, U = decltype(shape)::u;
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream, layernorm_dx_kernel<W, U, T>)
            (static_cast<R *>(dx), dyt, xt, mean, rstd, static_cast<const R *>(w), rows, cols,
             accumulate_dx);
        });
        nn_record(be, "layernorm_backward (dx)");
    });
}

/* ---- GELU ---- */

/* Whole units of W, then the n % W elements after them. */
template <int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    gelu_forward_kernel(float *y, const float *x, int64_t n)
{
    const int64_t nu = n / W;
    for (int64_t u = thread_index(); u < nu; u += thread_count()) {
        zt_vec<W> a = vload<W>(x + u * W);
#pragma unroll
        for (int e = 0; e < W; e++)
            a.v[e] = gelu(a.v[e]);
        vstore<W>(y + u * W, a);
    }
    for (int64_t i = nu * W + thread_index(); i < n; i += thread_count())
        y[i] = gelu(x[i]);
}

template <int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    gelu_backward_kernel(float *dx, const float *dy, const float *__restrict__ x, int64_t n)
{
    const int64_t nu = n / W;
    for (int64_t u = thread_index(); u < nu; u += thread_count()) {
        zt_vec<W> g = vload<W>(dy + u * W), a = vload<W>(x + u * W);
#pragma unroll
        for (int e = 0; e < W; e++)
            g.v[e] = gelu_grad(g.v[e], a.v[e]);
        vstore<W>(dx + u * W, g);
    }
    for (int64_t i = nu * W + thread_index(); i < n; i += thread_count())
        dx[i] = gelu_grad(dy[i], x[i]);
}

static void cuda_gelu_forward(const zt_backend *be, float *y, const float *x, int64_t n)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0)
        return;
    if (aligned16(y) && aligned16(x))
        ZT_LAUNCH(nn_grid(impl, n / 4 + 1, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                  gelu_forward_kernel<4>)
        (y, x, n);
    else
        ZT_LAUNCH(nn_grid(impl, n, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                  gelu_forward_kernel<1>)
        (y, x, n);
    nn_record(be, "gelu_forward");
}

static void cuda_gelu_backward(const zt_backend *be, float *dx, const float *dy, const float *x,
                               int64_t n)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0)
        return;
    if (aligned16(dx) && aligned16(dy) && aligned16(x))
        ZT_LAUNCH(nn_grid(impl, n / 4 + 1, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                  gelu_backward_kernel<4>)
        (dx, dy, x, n);
    else
        ZT_LAUNCH(nn_grid(impl, n, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
                  gelu_backward_kernel<1>)
        (dx, dy, x, n);
    nn_record(be, "gelu_backward");
}

/* ---- dropout ---- */

/* A warp per row (s, i, j) of c elements: the row seed's seven mixes are paid
 * once per warp, each element then costs one mix. The draw is rng.h's
 * zt_rng_uniform(row_seed, 0, ctr) with its two ctr-free mixes hoisted, as on
 * the CPU; kept elements are x * scale, dropped ones x * 0 (NaN for inf/nan). */
template <int W, zt_dtype T>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    dropout_kernel(raw_t<T> *y, const raw_t<T> *x, const uint64_t *__restrict__ row_keys,
                   uint64_t seed, uint64_t site, int64_t step, int64_t rows, int64_t a,
                   int64_t b, int64_t c, int64_t key_b, int64_t key_c, float p, float scale)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = c / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        int64_t s = r / (a * b), i = r / b % a, j = r % b;
        uint64_t row_seed = zt_dropout_row_seed(seed, site, step, row_keys[s]);
        uint64_t key = zt_rng_mix(zt_rng_mix(row_seed));
        uint64_t ctr0 = (uint64_t)((i * key_b + j) * key_c);
        const raw_t<T> *xr = x + r * c; // (c)
        raw_t<T> *yr = y + r * c;       // (c)
        for (int64_t u = lane; u < nu; u += 32) {
            zt_vec<W> v = vload<W, T>(xr + u * W);
#pragma unroll
            for (int e = 0; e < W; e++) {
                uint64_t ctr = ctr0 + (uint64_t)(u * W + e);
                float draw = (float)(zt_rng_mix(key ^ ctr) >> 40) * (1.0f / 16777216.0f);
                v.v[e] = __fmul_rn(v.v[e], draw >= p ? scale : 0.0f);
            }
            vstore<W, T>(yr + u * W, v);
        }
    }
}

static void cuda_dropout(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                         const zt_dropout_desc *d)
{
    zt_cuda_impl *impl = nn_impl(be);
    int64_t rows = d->n * d->a * d->b, total = rows * d->c;
    if (total <= 0)
        return;
    if (d->p == 0.0f) {
        if (y != x)
            zt_cuda_record(impl,
                           cudaMemcpyAsync(y, x, (size_t)total * zt_dtype_size(dt),
                                           cudaMemcpyDeviceToDevice, impl->stream),
                           "dropout (copy)");
        return;
    }
    /* Rounded once to float32 on the host, exactly as the CPU does. */
    const float scale = 1.0f / (1.0f - d->p);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    bool vec = d->c % 4 == 0 && vec_aligned(y, dt) && vec_aligned(x, dt);
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        raw_t<T> *yt = static_cast<raw_t<T> *>(y);
        const raw_t<T> *xt = static_cast<const raw_t<T> *>(x);
        if (vec)
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream, dropout_kernel<4, T>)
            (yt, xt, d->row_keys, d->seed, d->site, d->step, rows, d->a, d->b, d->c, d->key_b,
             d->key_c, d->p, scale);
        else
            ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream, dropout_kernel<1, T>)
            (yt, xt, d->row_keys, d->seed, d->site, d->step, rows, d->a, d->b, d->c, d->key_b,
             d->key_c, d->p, scale);
    });
    nn_record(be, "dropout");
}

void zt_backend_cuda_nn_ops(zt_backend *be)
{
    be->embedding_forward = cuda_embedding_forward;
    be->embedding_backward = cuda_embedding_backward;
    be->sinusoid_add = cuda_sinusoid_add;
    be->layernorm_forward = cuda_layernorm_forward;
    be->layernorm_backward = cuda_layernorm_backward;
    be->gelu_forward = cuda_gelu_forward;
    be->gelu_backward = cuda_gelu_backward;
    be->residual_layernorm_forward = cuda_residual_layernorm_forward;
    be->dropout = cuda_dropout;
}
