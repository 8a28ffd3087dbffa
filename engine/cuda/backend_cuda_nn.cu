/*
 * backend_cuda_nn: the transformer-layer ops of the CUDA backend (backend.h's
 * "Transformer layers" block; gemm_batched lives with the other cuBLAS calls in
 * backend_cuda.cu). The CPU backend (engine/cpu/backend_cpu_nn.c, and the
 * cross-entropy in backend_cpu.c) is the reference these kernels are compared
 * with op by op, so they keep its expressions term for term.
 *
 * Work layout: row ops (layernorm, softmax, dropout) give a row to a warp, with
 * the row in registers up to 16 float4 per lane and streamed from memory (L1)
 * beyond; elementwise ops are grid-stride loops. float4 accesses are used when
 * the row length is a multiple of 4 and every pointer is 16-byte aligned,
 * checked at run time. Grids are capped from the SM count.
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
 * Determinism: no floating-point atomics. Every sum has an order fixed by the
 * shape alone (not by timing, grid size or SM count): column sums walk rows in
 * increasing order in one thread, trees have a fixed shape, and the loss total
 * sums fixed row parts then the parts in index order.
 *
 * Memory: ops allocate nothing. xent_forward_backward writes the total and
 * up to ZT_XENT_PARTS partial sums, (1 + 1024) doubles = 8200 bytes, at the
 * start of the backend's fixed scratch (impl->scratch; a smaller scratch just
 * means fewer parts) and reads its result back through impl->host_result;
 * everything else works in registers and shared memory. Collective: none.
 */
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
#include "engine/rng.h"
}
#include "engine/cuda/cuda_impl.h"

/* Block size of most kernels: eight warps. */
#define ZT_NN_THREADS 256
#define ZT_NN_WARPS (ZT_NN_THREADS / 32)
/* Grid cap of grid-stride kernels: 2048 resident threads per SM. */
#define ZT_NN_BLOCKS_PER_SM 8

/* Cross-entropy rows are summed in at most this many fixed parts, one block
 * each; the partial sums and the total are doubles in the scratch. */
#define ZT_XENT_PARTS 1024
/* Classes at or above which a whole block, not a warp, works on one row. */
#define ZT_XENT_BLOCK_CLASSES 4096

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

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation (as on the CPU). */
#define ZT_GELU_K0 0.7978845608028654f
#define ZT_GELU_K1 0.044715f

/* ---- host helpers ---- */

static zt_cuda_impl *nn_impl(const zt_backend *be) { return (zt_cuda_impl *)be->impl; }

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static __host__ __device__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Blocks for `items` work items at `per_block` per block, capped at what the
 * GPU holds at once; the kernels loop over the rest. */
static unsigned nn_grid(const zt_cuda_impl *impl, int64_t items, int64_t per_block)
{
    int64_t want = (items + per_block - 1) / per_block;
    int64_t cap = (int64_t)(impl->sm_count > 0 ? impl->sm_count : 1) * ZT_NN_BLOCKS_PER_SM;
    want = min_i64(want, cap);
    return (unsigned)(want < 1 ? 1 : want);
}

/* Block shape of row-elementwise kernels: x runs along a row's units, as few
 * warps as cover it, so short rows do not idle lanes; y takes further rows. */
static dim3 row_block(int64_t units)
{
    unsigned tx = 32;
    while (tx < ZT_NN_THREADS && (int64_t)tx < units)
        tx *= 2;
    return dim3(tx, ZT_NN_THREADS / tx);
}

static void nn_record(const zt_backend *be, const char *what)
{
    zt_cuda_record(nn_impl(be), cudaGetLastError(), what);
}

/* ---- device helpers ---- */

/* W consecutive floats: one float4 access when W == 4. */
template <int W> struct zt_vec {
    float v[W];
};

template <int W> static __device__ __forceinline__ zt_vec<W> vload(const float *p)
{
    zt_vec<W> a;
    if constexpr (W == 4) {
        float4 q = *reinterpret_cast<const float4 *>(p);
        a.v[0] = q.x;
        a.v[1] = q.y;
        a.v[2] = q.z;
        a.v[3] = q.w;
    } else {
        a.v[0] = *p;
    }
    return a;
}

template <int W> static __device__ __forceinline__ void vstore(float *p, const zt_vec<W> &a)
{
    if constexpr (W == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(a.v[0], a.v[1], a.v[2], a.v[3]);
    else
        *p = a.v[0];
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

/* A lane's units of one row: fill() loads (and keeps, when U > 0), get()
 * returns what fill() loaded. */
template <int W, int U> struct zt_row_cache {
    zt_vec<W> c[U > 0 ? U : 1];

    __device__ __forceinline__ zt_vec<W> fill(const float *row, int k, int64_t u)
    {
        zt_vec<W> a = vload<W>(row + u * W);
        if constexpr (U > 0)
            c[k] = a;
        return a;
    }

    __device__ __forceinline__ zt_vec<W> get(const float *row, int k, int64_t u) const
    {
        if constexpr (U > 0) {
            (void)row;
            (void)u;
            return c[k];
        } else {
            (void)k;
            return vload<W>(row + u * W);
        }
    }
};

/* ---- cross-entropy ---- */

/* Reductions over the threads that share a row: a warp, or (kBlock) the
 * block, whose warp results are combined in warp order so every thread gets
 * the same bits. sh holds ZT_NN_WARPS values and is free again on return. */
template <bool kBlock> static __device__ __forceinline__ float group_max(float v, float *sh)
{
    v = warp_max(v);
    if constexpr (kBlock) {
        if ((threadIdx.x & 31) == 0)
            sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = sh[0];
        for (int w = 1; w < ZT_NN_WARPS; w++)
            v = fmaxf(v, sh[w]);
        __syncthreads();
    } else {
        (void)sh;
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
 * then the warps in order) or the block per row (rows in order). The CPU's
 * per-row expressions, with exp(l - max) recomputed for dlogits rather than
 * stored and re-read. */
template <bool kBlock, int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    xent_kernel(double *parts, const float *__restrict__ logits,
                const int32_t *__restrict__ labels, int64_t rows, int64_t classes,
                int32_t ignore_index, float dscale, float *__restrict__ dlogits,
                int64_t part_rows)
{
    __shared__ float sh_max[ZT_NN_WARPS];
    __shared__ double sh_sum[ZT_NN_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = kBlock ? (int)threadIdx.x : lane;
    const int gsize = kBlock ? ZT_NN_THREADS : 32;
    const int64_t nu = classes / W;
    const int64_t begin = (int64_t)blockIdx.x * part_rows;
    const int64_t end = min_i64(rows, begin + part_rows);
    double loss = 0.0; // this group's rows, in increasing order
    for (int64_t r = begin + (kBlock ? 0 : warp); r < end; r += kBlock ? 1 : ZT_NN_WARPS) {
        const float *lr = logits + r * classes;                // (classes)
        float *dl = dlogits ? dlogits + r * classes : nullptr; // (classes)
        const int32_t label = labels[r];
        if (label == ignore_index) {
            if (dl)
                for (int64_t u = g; u < nu; u += gsize)
                    vstore<W>(dl + u * W, vzero<W>());
            continue;
        }
        float mx = -INFINITY;
        for (int64_t u = g; u < nu; u += gsize) {
            zt_vec<W> a = vload<W>(lr + u * W);
#pragma unroll
            for (int e = 0; e < W; e++)
                mx = fmaxf(mx, a.v[e]);
        }
        mx = group_max<kBlock>(mx, sh_max);
        double sum = 0.0;
        for (int64_t u = g; u < nu; u += gsize) {
            zt_vec<W> a = vload<W>(lr + u * W);
#pragma unroll
            for (int e = 0; e < W; e++)
                sum += (double)expf(a.v[e] - mx);
        }
        sum = group_sum<kBlock>(sum, sh_sum);
        if (g == 0)
            loss += log(sum) - ((double)lr[label] - (double)mx);
        if (!dl)
            continue;
        const float inv = (float)(1.0 / sum);
        for (int64_t u = g; u < nu; u += gsize) {
            zt_vec<W> a = vload<W>(lr + u * W);
#pragma unroll
            for (int e = 0; e < W; e++) {
                float p = __fmul_rn(expf(a.v[e] - mx), inv);
                bool hit = u * W + e == (int64_t)label;
                a.v[e] = __fmul_rn(dscale, hit ? __fsub_rn(p, 1.0f) : p);
            }
            vstore<W>(dl + u * W, a);
        }
    }
    if (kBlock ? threadIdx.x == 0 : lane == 0)
        sh_sum[kBlock ? 0 : warp] = loss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = sh_sum[0];
        for (int w = 1; w < (kBlock ? 1 : ZT_NN_WARPS); w++)
            total += sh_sum[w];
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

static double cuda_xent_forward_backward(const zt_backend *be, const float *logits,
                                         const int32_t *labels, int64_t rows, int64_t classes,
                                         int32_t ignore_index, float dscale, float *dlogits)
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
    bool vec = classes % 4 == 0 && aligned16(logits) && (!dlogits || aligned16(dlogits));
    bool block = classes >= ZT_XENT_BLOCK_CLASSES;
    dim3 grid((unsigned)nparts);
    cudaStream_t st = impl->stream;
    if (block && vec)
        xent_kernel<true, 4><<<grid, ZT_NN_THREADS, 0, st>>>(
            parts, logits, labels, rows, classes, ignore_index, dscale, dlogits, part_rows);
    else if (block)
        xent_kernel<true, 1><<<grid, ZT_NN_THREADS, 0, st>>>(
            parts, logits, labels, rows, classes, ignore_index, dscale, dlogits, part_rows);
    else if (vec)
        xent_kernel<false, 4><<<grid, ZT_NN_THREADS, 0, st>>>(
            parts, logits, labels, rows, classes, ignore_index, dscale, dlogits, part_rows);
    else
        xent_kernel<false, 1><<<grid, ZT_NN_THREADS, 0, st>>>(
            parts, logits, labels, rows, classes, ignore_index, dscale, dlogits, part_rows);
    nn_record(be, "xent_forward_backward");
    sum_parts_kernel<<<1, ZT_NN_THREADS, 0, st>>>(total, parts, nparts);
    nn_record(be, "xent_forward_backward (sum)");
    if (!zt_cuda_record(impl,
                        cudaMemcpyAsync(impl->host_result, total, sizeof(double),
                                        cudaMemcpyDeviceToHost, st),
                        "xent_forward_backward (copy)") ||
        !zt_cuda_record(impl, cudaStreamSynchronize(st), "xent_forward_backward (sync)"))
        return NAN;
    return *(const double *)impl->host_result;
}

/* ---- embedding ---- */

template <int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    embedding_forward_kernel(float *__restrict__ y, const int32_t *__restrict__ ids,
                             const float *__restrict__ table, int64_t rows, int64_t cols,
                             bool accumulate)
{
    const int64_t nu = cols / W;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
         r += (int64_t)gridDim.x * blockDim.y) {
        const float *src = table + (int64_t)ids[r] * cols; // (cols)
        float *dst = y + r * cols;                         // (cols)
        for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
            zt_vec<W> a = vload<W>(src + u * W);
            if (accumulate) {
                zt_vec<W> b = vload<W>(dst + u * W);
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = b.v[e] + a.v[e];
            }
            vstore<W>(dst + u * W, a);
        }
    }
}

static void cuda_embedding_forward(const zt_backend *be, float *y, const int32_t *ids,
                                   const float *table, int64_t rows, int64_t cols,
                                   bool accumulate)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (rows <= 0 || cols <= 0)
        return;
    bool vec = cols % 4 == 0 && aligned16(y) && aligned16(table);
    dim3 block = row_block(vec ? cols / 4 : cols);
    unsigned grid = nn_grid(impl, rows, block.y);
    if (vec)
        embedding_forward_kernel<4>
            <<<grid, block, 0, impl->stream>>>(y, ids, table, rows, cols, accumulate);
    else
        embedding_forward_kernel<1>
            <<<grid, block, 0, impl->stream>>>(y, ids, table, rows, cols, accumulate);
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
template <int W>
static __global__ void __launch_bounds__(ZT_EMB_THREADS)
    embedding_backward_kernel(float *__restrict__ dtable, const int32_t *__restrict__ ids,
                              const float *__restrict__ dy, int64_t r0, int nr, int64_t cols)
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
                    g[b] = vload<W>(dy + (r0 + (int64_t)(uint32_t)keys[q0 + b]) * cols + u * W);
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

static void cuda_embedding_backward(const zt_backend *be, float *dtable, const int32_t *ids,
                                    const float *dy, int64_t rows, int64_t cols, int64_t vocab,
                                    bool accumulate)
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
    bool vec = cols % 4 == 0 && aligned16(dtable) && aligned16(dy);
    int64_t tiles = ((vec ? cols / 4 : cols) + 31) / 32;
    int64_t cap = 2 * (int64_t)(impl->sm_count > 0 ? impl->sm_count : 1);
    for (int64_t r0 = 0; r0 < rows; r0 += ZT_EMB_CHUNK) {
        int nr = (int)min_i64(ZT_EMB_CHUNK, rows - r0);
        /* Every block sorts, so use no more blocks than the items need. */
        unsigned grid = (unsigned)min_i64(cap, (nr * tiles + ZT_EMB_THREADS / 32 - 1) /
                                                   (ZT_EMB_THREADS / 32));
        if (vec)
            embedding_backward_kernel<4>
                <<<grid, ZT_EMB_THREADS, 0, impl->stream>>>(dtable, ids, dy, r0, nr, cols);
        else
            embedding_backward_kernel<1>
                <<<grid, ZT_EMB_THREADS, 0, impl->stream>>>(dtable, ids, dy, r0, nr, cols);
        nn_record(be, "embedding_backward");
    }
}

/* ---- positional encoding ---- */

/* A thread per (position i, column j): the float64 sin/cos run once and the
 * value is added to all n samples. */
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    sinusoid_add_kernel(float *y, int64_t n, int64_t t, int64_t cols, double log_base)
{
    for (int64_t q = thread_index(); q < t * cols; q += thread_count()) {
        int64_t i = q / cols, j = q % cols, two_k = j - j % 2;
        double wk = exp(-(double)two_k * log_base / (double)cols);
        double angle = (double)i * wk;
        float pe = (float)(j % 2 == 0 ? sin(angle) : cos(angle));
        for (int64_t s = 0; s < n; s++)
            y[(s * t + i) * cols + j] += pe;
    }
}

static void cuda_sinusoid_add(const zt_backend *be, float *y, int64_t n, int64_t t, int64_t cols)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0 || cols <= 0)
        return;
    /* The host's log, so the frequencies start from the CPU's exact value. */
    sinusoid_add_kernel<<<nn_grid(impl, t * cols, ZT_NN_THREADS), ZT_NN_THREADS, 0,
                          impl->stream>>>(y, n, t, cols, log(10000.0));
    nn_record(be, "sinusoid_add");
}

/* ---- layernorm ---- */

template <int W, int U>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    layernorm_forward_kernel(float *__restrict__ y, float *__restrict__ mean,
                             float *__restrict__ rstd, const float *__restrict__ x,
                             const float *__restrict__ w, const float *__restrict__ b,
                             int64_t rows, int64_t cols, float eps)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = cols / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        const float *xr = x + r * cols; // (cols)
        float *yr = y + r * cols;       // (cols)
        zt_row_cache<W, U> xc;
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> a = xc.fill(xr, k, u);
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
                zt_vec<W> a = xc.get(xr, k, u), wv = vload<W>(w + u * W),
                          bv = vload<W>(b + u * W);
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(a.v[e], mf), rs), wv.v[e]),
                                       bv.v[e]);
                vstore<W>(yr + u * W, a);
            }
        }
    }
}

static void cuda_layernorm_forward(const zt_backend *be, float *y, float *mean, float *rstd,
                                   const float *x, const float *w, const float *b, int64_t rows,
                                   int64_t cols, float eps)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (rows <= 0)
        return;
    bool vec = cols % 4 == 0 && aligned16(y) && aligned16(x) && aligned16(w) && aligned16(b);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    row_dispatch(vec, cols, [&](auto shape) {
        constexpr int W = decltype(shape)::w, U = decltype(shape)::u;
        layernorm_forward_kernel<W, U>
            <<<grid, ZT_NN_THREADS, 0, impl->stream>>>(y, mean, rstd, x, w, b, rows, cols, eps);
    });
    nn_record(be, "layernorm_forward");
}

/* dw, db over columns [blockIdx.x * 8, + 8): all threads stage a tile of rows
 * (the dw term dy * xhat, and dy) in shared memory, then 16 threads (dw and db
 * of each column) add the tile's rows in increasing order to registers that
 * started at the old value or 0: the CPU's exact sequence of roundings. The
 * next tile's loads are issued before that serial sum, so they overlap it. */
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    layernorm_param_grads_kernel(float *__restrict__ dw, float *__restrict__ db,
                                 const float *__restrict__ dy, const float *__restrict__ x,
                                 const float *__restrict__ mean, const float *__restrict__ rstd,
                                 int64_t rows, int64_t cols, bool accumulate)
{
    constexpr int kRowsPerPass = ZT_NN_THREADS / ZT_LNP_COLS;
    constexpr int kPer = ZT_LNP_ROWS / kRowsPerPass; // tile elements per thread
    __shared__ float tile[ZT_LNP_ROWS][2 * ZT_LNP_COLS]; // [row][dw terms | dy]
    const int c = threadIdx.x % ZT_LNP_COLS, rr = threadIdx.x / ZT_LNP_COLS;
    const int64_t j = (int64_t)blockIdx.x * ZT_LNP_COLS + c;
    float dyv[kPer], xv[kPer], mv[kPer], rv[kPer];

    auto load = [&](int64_t r0) {
#pragma unroll
        for (int k = 0; k < kPer; k++) {
            int64_t r = r0 + rr + (int64_t)k * kRowsPerPass;
            bool ok = r < rows && j < cols;
            dyv[k] = ok ? dy[r * cols + j] : 0.0f;
            xv[k] = ok ? x[r * cols + j] : 0.0f;
            mv[k] = ok ? mean[r] : 0.0f;
            rv[k] = ok ? rstd[r] : 0.0f;
        }
    };

    /* Thread t < 16 sums column (t % 8) of half t / 8 (0: dw, 1: db). */
    const bool summer = threadIdx.x < 2 * ZT_LNP_COLS;
    const int64_t sj = (int64_t)blockIdx.x * ZT_LNP_COLS + threadIdx.x % ZT_LNP_COLS;
    float *out = threadIdx.x < ZT_LNP_COLS ? dw : db;
    float acc = 0.0f;
    if (summer && sj < cols && accumulate)
        acc = out[sj];

    load(0);
    for (int64_t r0 = 0; r0 < rows; r0 += ZT_LNP_ROWS) {
#pragma unroll
        for (int k = 0; k < kPer; k++) {
            int i = rr + k * kRowsPerPass;
            tile[i][c] = __fmul_rn(dyv[k], __fmul_rn(__fsub_rn(xv[k], mv[k]), rv[k]));
            tile[i][ZT_LNP_COLS + c] = dyv[k];
        }
        __syncthreads();
        if (r0 + ZT_LNP_ROWS < rows)
            load(r0 + ZT_LNP_ROWS);
        if (summer) {
            int nr = (int)min_i64(ZT_LNP_ROWS, rows - r0);
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
template <int W, int U>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    layernorm_dx_kernel(float *dx, const float *dy, const float *__restrict__ x,
                        const float *__restrict__ mean, const float *__restrict__ rstd,
                        const float *__restrict__ w, int64_t rows, int64_t cols,
                        bool accumulate)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = cols / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        const float *dyr = dy + r * cols; // (cols)
        const float *xr = x + r * cols;   // (cols)
        float *dxr = dx + r * cols;       // (cols)
        const float m = mean[r], rs = rstd[r];
        zt_row_cache<W, U> dyc, xc;
        float sg = 0.0f, sgx = 0.0f; // sums of dy*w and dy*w*xhat
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> g = dyc.fill(dyr, k, u), a = xc.fill(xr, k, u),
                          wv = vload<W>(w + u * W);
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
                          wv = vload<W>(w + u * W);
                zt_vec<W> o = accumulate ? vload<W>(dxr + u * W) : vzero<W>();
#pragma unroll
                for (int e = 0; e < W; e++) {
                    float xhat = __fmul_rn(__fsub_rn(a.v[e], m), rs);
                    float d = __fmul_rn(rs, __fsub_rn(__fsub_rn(__fmul_rn(g.v[e], wv.v[e]), mean_g),
                                                      __fmul_rn(xhat, mean_gx)));
                    o.v[e] = accumulate ? __fadd_rn(o.v[e], d) : d;
                }
                vstore<W>(dxr + u * W, o);
            }
        }
    }
}

static void cuda_layernorm_backward(const zt_backend *be, float *dx, float *dw, float *db,
                                    const float *dy, const float *x, const float *mean,
                                    const float *rstd, const float *w, int64_t rows, int64_t cols,
                                    bool accumulate_dx, bool accumulate_params)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (cols <= 0)
        return;
    /* Parameter gradients first: they read dy, which dx may overwrite. With no
     * rows they still assign 0 (or keep the accumulated value). */
    unsigned pgrid = (unsigned)((cols + ZT_LNP_COLS - 1) / ZT_LNP_COLS);
    layernorm_param_grads_kernel<<<pgrid, ZT_NN_THREADS, 0, impl->stream>>>(
        dw, db, dy, x, mean, rstd, rows, cols, accumulate_params);
    nn_record(be, "layernorm_backward (dw, db)");
    if (rows <= 0)
        return;
    bool vec = cols % 4 == 0 && aligned16(dx) && aligned16(dy) && aligned16(x) && aligned16(w);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    row_dispatch(vec, cols, [&](auto shape) {
        constexpr int W = decltype(shape)::w, U = decltype(shape)::u;
        layernorm_dx_kernel<W, U><<<grid, ZT_NN_THREADS, 0, impl->stream>>>(
            dx, dy, x, mean, rstd, w, rows, cols, accumulate_dx);
    });
    nn_record(be, "layernorm_backward (dx)");
}

/* ---- GELU ---- */

/* sqrt(2/pi) (x + 0.044715 x^3), rounded step by step as the CPU does. */
static __device__ __forceinline__ float gelu_inner(float v)
{
    float cube = __fmul_rn(__fmul_rn(__fmul_rn(ZT_GELU_K1, v), v), v);
    return __fmul_rn(ZT_GELU_K0, __fadd_rn(v, cube));
}

static __device__ __forceinline__ float gelu(float v)
{
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, tanhf(gelu_inner(v))));
}

static __device__ __forceinline__ float gelu_grad(float dy, float v)
{
    float th = tanhf(gelu_inner(v));
    float du = __fmul_rn(ZT_GELU_K0,
                         __fadd_rn(1.0f, __fmul_rn(__fmul_rn(__fmul_rn(3.0f, ZT_GELU_K1), v), v)));
    float d = __fadd_rn(__fmul_rn(0.5f, __fadd_rn(1.0f, th)),
                        __fmul_rn(__fmul_rn(__fmul_rn(0.5f, v), __fsub_rn(1.0f, __fmul_rn(th, th))),
                                  du));
    return __fmul_rn(dy, d);
}

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
        gelu_forward_kernel<4>
            <<<nn_grid(impl, n / 4 + 1, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream>>>(y, x, n);
    else
        gelu_forward_kernel<1>
            <<<nn_grid(impl, n, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream>>>(y, x, n);
    nn_record(be, "gelu_forward");
}

static void cuda_gelu_backward(const zt_backend *be, float *dx, const float *dy, const float *x,
                               int64_t n)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0)
        return;
    if (aligned16(dx) && aligned16(dy) && aligned16(x))
        gelu_backward_kernel<4><<<nn_grid(impl, n / 4 + 1, ZT_NN_THREADS), ZT_NN_THREADS, 0,
                                  impl->stream>>>(dx, dy, x, n);
    else
        gelu_backward_kernel<1><<<nn_grid(impl, n, ZT_NN_THREADS), ZT_NN_THREADS, 0,
                                  impl->stream>>>(dx, dy, x, n);
    nn_record(be, "gelu_backward");
}

/* ---- attention softmax ---- */

/* Row (s, hh, i) of att (n, h, t, t): softmax over its first `allowed` keys,
 * zeros after. Only allowed entries are read; max, exp and 1/sum are the
 * CPU's expressions, e is recomputed in the last pass instead of stored. */
template <int W, int U>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    attn_softmax_forward_kernel(float *att, int64_t rows, int64_t h, int64_t t, float scale,
                                bool causal, const int32_t *__restrict__ lengths)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = t / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        float *row = att + r * t; // (t)
        int64_t allowed = causal ? r % t + 1 : t;
        if (lengths)
            allowed = min_i64(allowed, lengths[r / (h * t)]);
        const int64_t nua = (allowed + W - 1) / W; // units holding an allowed key
        zt_row_cache<W, U> xc;
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u >= nua)
                break;
            zt_vec<W> a = xc.fill(row, k, u);
#pragma unroll
            for (int e = 0; e < W; e++)
                if (u * W + e < allowed)
                    mx = fmaxf(mx, __fmul_rn(scale, a.v[e]));
        }
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u >= nua)
                break;
            zt_vec<W> a = xc.get(row, k, u);
#pragma unroll
            for (int e = 0; e < W; e++)
                if (u * W + e < allowed)
                    sum += expf(__fmul_rn(scale, a.v[e]) - mx);
        }
        /* The maximum contributes exp(0) = 1, so sum >= 1 and inv is finite
         * (a row with no allowed key is all zeros and never uses it). */
        const float inv = __fdiv_rn(1.0f, warp_sum(sum));
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> a = u < nua ? xc.get(row, k, u) : vzero<W>();
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = u * W + e < allowed
                                 ? __fmul_rn(expf(__fmul_rn(scale, a.v[e]) - mx), inv)
                                 : 0.0f;
                vstore<W>(row + u * W, a);
            }
        }
    }
}

static void cuda_attn_softmax_forward(const zt_backend *be, float *att, int64_t n, int64_t h,
                                      int64_t t, float scale, bool causal,
                                      const int32_t *lengths)
{
    zt_cuda_impl *impl = nn_impl(be);
    int64_t rows = n * h * t;
    if (rows <= 0)
        return;
    bool vec = t % 4 == 0 && aligned16(att);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    row_dispatch(vec, t, [&](auto shape) {
        constexpr int W = decltype(shape)::w, U = decltype(shape)::u;
        attn_softmax_forward_kernel<W, U>
            <<<grid, ZT_NN_THREADS, 0, impl->stream>>>(att, rows, h, t, scale, causal, lengths);
    });
    nn_record(be, "attn_softmax_forward");
}

template <int W, int U>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    attn_softmax_backward_kernel(float *datt, const float *__restrict__ p, int64_t rows,
                                 int64_t t, float scale)
{
    const int lane = threadIdx.x & 31;
    const int64_t nu = t / W;
    for (int64_t r = warp_index(); r < rows; r += warp_count()) {
        float *dr = datt + r * t;    // (t) dL/dP, becomes dL/dscores
        const float *pr = p + r * t; // (t)
        zt_row_cache<W, U> dc, pc;
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> d = dc.fill(dr, k, u), q = pc.fill(pr, k, u);
#pragma unroll
                for (int e = 0; e < W; e++)
                    dot = __fadd_rn(dot, __fmul_rn(d.v[e], q.v[e]));
            }
        }
        dot = warp_sum(dot);
#pragma unroll
        for (int k = 0; k < lane_iters<U>(nu); k++) {
            int64_t u = lane + 32 * (int64_t)k;
            if (u < nu) {
                zt_vec<W> d = dc.get(dr, k, u), q = pc.get(pr, k, u);
#pragma unroll
                for (int e = 0; e < W; e++)
                    d.v[e] = __fmul_rn(__fmul_rn(scale, q.v[e]), d.v[e] - dot);
                vstore<W>(dr + u * W, d);
            }
        }
    }
}

static void cuda_attn_softmax_backward(const zt_backend *be, float *datt, const float *p,
                                       int64_t rows, int64_t t, float scale)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (rows <= 0 || t <= 0)
        return;
    bool vec = t % 4 == 0 && aligned16(datt) && aligned16(p);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    row_dispatch(vec, t, [&](auto shape) {
        constexpr int W = decltype(shape)::w, U = decltype(shape)::u;
        attn_softmax_backward_kernel<W, U>
            <<<grid, ZT_NN_THREADS, 0, impl->stream>>>(datt, p, rows, t, scale);
    });
    nn_record(be, "attn_softmax_backward");
}

/* ---- dropout ---- */

/* A warp per row (s, i, j) of c elements: the row seed's seven mixes are paid
 * once per warp, each element then costs one mix. The draw is rng.h's
 * zt_rng_uniform(row_seed, 0, ctr) with its two ctr-free mixes hoisted, as on
 * the CPU; kept elements are x * scale, dropped ones x * 0 (NaN for inf/nan). */
template <int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    dropout_kernel(float *y, const float *x, const uint64_t *__restrict__ row_keys,
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
        const float *xr = x + r * c; // (c)
        float *yr = y + r * c;       // (c)
        for (int64_t u = lane; u < nu; u += 32) {
            zt_vec<W> v = vload<W>(xr + u * W);
#pragma unroll
            for (int e = 0; e < W; e++) {
                uint64_t ctr = ctr0 + (uint64_t)(u * W + e);
                float draw = (float)(zt_rng_mix(key ^ ctr) >> 40) * (1.0f / 16777216.0f);
                v.v[e] = __fmul_rn(v.v[e], draw >= p ? scale : 0.0f);
            }
            vstore<W>(yr + u * W, v);
        }
    }
}

static void cuda_dropout(const zt_backend *be, float *y, const float *x, const zt_dropout_desc *d)
{
    zt_cuda_impl *impl = nn_impl(be);
    int64_t rows = d->n * d->a * d->b, total = rows * d->c;
    if (total <= 0)
        return;
    if (d->p == 0.0f) {
        if (y != x)
            zt_cuda_record(impl,
                           cudaMemcpyAsync(y, x, (size_t)total * sizeof(float),
                                           cudaMemcpyDeviceToDevice, impl->stream),
                           "dropout (copy)");
        return;
    }
    /* Rounded once to float32 on the host, exactly as the CPU does. */
    const float scale = 1.0f / (1.0f - d->p);
    unsigned grid = nn_grid(impl, rows, ZT_NN_WARPS);
    if (d->c % 4 == 0 && aligned16(y) && aligned16(x))
        dropout_kernel<4><<<grid, ZT_NN_THREADS, 0, impl->stream>>>(
            y, x, d->row_keys, d->seed, d->site, d->step, rows, d->a, d->b, d->c, d->key_b,
            d->key_c, d->p, scale);
    else
        dropout_kernel<1><<<grid, ZT_NN_THREADS, 0, impl->stream>>>(
            y, x, d->row_keys, d->seed, d->site, d->step, rows, d->a, d->b, d->c, d->key_b,
            d->key_c, d->p, scale);
    nn_record(be, "dropout");
}

/* ---- mean pooling ---- */

/* A thread per (sample, unit of W columns) sums rows in increasing i, then
 * divides: the CPU's sequence of roundings. */
template <int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    mean_pool_forward_kernel(float *__restrict__ y, const float *__restrict__ x,
                             const int32_t *__restrict__ lengths, int64_t n, int64_t t,
                             int64_t cols)
{
    const int64_t nu = cols / W;
    for (int64_t q = thread_index(); q < n * nu; q += thread_count()) {
        int64_t s = q / nu, u = q % nu;
        int64_t len = lengths ? lengths[s] : t;
        const float *xs = x + s * t * cols + u * W; // column unit of (t, cols)
        zt_vec<W> acc = vzero<W>();
#pragma unroll 4
        for (int64_t i = 0; i < len; i++) {
            zt_vec<W> a = vload<W>(xs + i * cols);
#pragma unroll
            for (int e = 0; e < W; e++)
                acc.v[e] += a.v[e];
        }
        const float fl = (float)len;
#pragma unroll
        for (int e = 0; e < W; e++)
            acc.v[e] = __fdiv_rn(acc.v[e], fl);
        vstore<W>(y + s * cols + u * W, acc);
    }
}

static void cuda_mean_pool_forward(const zt_backend *be, float *y, const float *x,
                                   const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || cols <= 0)
        return;
    /* float4 only when the thread count still fills the GPU: a column sum is a
     * serial chain, so more threads means more loads in flight. */
    bool vec = cols % 4 == 0 && aligned16(y) && aligned16(x) &&
               n * cols / 4 >= (int64_t)impl->sm_count * ZT_NN_THREADS * ZT_NN_BLOCKS_PER_SM;
    if (vec)
        mean_pool_forward_kernel<4>
            <<<nn_grid(impl, n * cols / 4, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream>>>(
                y, x, lengths, n, t, cols);
    else
        mean_pool_forward_kernel<1>
            <<<nn_grid(impl, n * cols, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream>>>(
                y, x, lengths, n, t, cols);
    nn_record(be, "mean_pool_forward");
}

template <int W>
static __global__ void __launch_bounds__(ZT_NN_THREADS)
    mean_pool_backward_kernel(float *__restrict__ dx, const float *__restrict__ dy,
                              const int32_t *__restrict__ lengths, int64_t n, int64_t t,
                              int64_t cols)
{
    const int64_t nu = cols / W;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < n * t;
         r += (int64_t)gridDim.x * blockDim.y) {
        int64_t s = r / t, i = r % t;
        int64_t len = lengths ? lengths[s] : t;
        const float *dys = dy + s * cols; // (cols)
        float *dxr = dx + r * cols;       // (cols)
        const float fl = (float)len;
        for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
            zt_vec<W> a = i < len ? vload<W>(dys + u * W) : vzero<W>();
            if (i < len) {
#pragma unroll
                for (int e = 0; e < W; e++)
                    a.v[e] = __fdiv_rn(a.v[e], fl);
            }
            vstore<W>(dxr + u * W, a);
        }
    }
}

static void cuda_mean_pool_backward(const zt_backend *be, float *dx, const float *dy,
                                    const int32_t *lengths, int64_t n, int64_t t, int64_t cols)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0 || cols <= 0)
        return;
    bool vec = cols % 4 == 0 && aligned16(dx) && aligned16(dy);
    dim3 block = row_block(vec ? cols / 4 : cols);
    unsigned grid = nn_grid(impl, n * t, block.y);
    if (vec)
        mean_pool_backward_kernel<4>
            <<<grid, block, 0, impl->stream>>>(dx, dy, lengths, n, t, cols);
    else
        mean_pool_backward_kernel<1>
            <<<grid, block, 0, impl->stream>>>(dx, dy, lengths, n, t, cols);
    nn_record(be, "mean_pool_backward");
}

void zt_backend_cuda_nn_ops(zt_backend *be)
{
    be->xent_forward_backward = cuda_xent_forward_backward;
    be->embedding_forward = cuda_embedding_forward;
    be->embedding_backward = cuda_embedding_backward;
    be->sinusoid_add = cuda_sinusoid_add;
    be->layernorm_forward = cuda_layernorm_forward;
    be->layernorm_backward = cuda_layernorm_backward;
    be->gelu_forward = cuda_gelu_forward;
    be->gelu_backward = cuda_gelu_backward;
    be->attn_softmax_forward = cuda_attn_softmax_forward;
    be->attn_softmax_backward = cuda_attn_softmax_backward;
    be->dropout = cuda_dropout;
    be->mean_pool_forward = cuda_mean_pool_forward;
    be->mean_pool_backward = cuda_mean_pool_backward;
}
