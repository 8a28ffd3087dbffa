/*
 * backend_cuda_attn: the CUDA backend's attention softmax, forward (in place
 * on the scores, causal and length masks) and backward; the batched GEMMs
 * around it are gemm_batched (backend_cuda_gemm.cu). A warp per row. Work
 * layout, numerics and determinism: cuda_nn.cuh.
 *
 * Memory: ops allocate nothing; everything works in registers.
 * Collective: none.
 */
#include "engine/cuda/cuda_nn.cuh"

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
        ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream, attn_softmax_forward_kernel<W, U>)
        (att, rows, h, t, scale, causal, lengths);
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
        ZT_LAUNCH(grid, ZT_NN_THREADS, 0, impl->stream, attn_softmax_backward_kernel<W, U>)
        (datt, p, rows, t, scale);
    });
    nn_record(be, "attn_softmax_backward");
}

void zt_backend_cuda_attn_ops(zt_backend *be)
{
    be->attn_softmax_forward = cuda_attn_softmax_forward;
    be->attn_softmax_backward = cuda_attn_softmax_backward;
}
