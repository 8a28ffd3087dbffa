/*
 * backend_cuda_fused: the CUDA backend's GEMM epilogues (backend.h's fused
 * ops; residual + layernorm sits with layernorm in backend_cuda_nn.cu).
 *
 * linear_act_forward is the backend's own gemm (cuBLAS, honouring --tf32 and
 * the 16-bit GEMM setting) followed by one kernel that adds the bias and
 * applies the activation, in place of bias_add's pass and the activation's.
 * With 16-bit tensors the GEMM reads them as they are and adds its product
 * to the bias placed in its output (the pre-activation is rounded once, as
 * the contract says), and the kernel applies the activation.
 * cuBLASLt's epilogues (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, RELU_BIAS) would fold
 * that pass into the GEMM, but their GELU is not the CPU's expression (so the
 * ops would no longer agree bit for bit) and the simulator has no cuBLASLt.
 *
 * act_bias_grad is bias_grad's two kernels with the activation's derivative
 * applied as each element is read: the segment kernel writes dpre and sums it
 * as stored (rounded to the op's dtype), the join adds the segments in order
 * (bias_grad's plan, launch.h). Kernels are templates on the dtype.
 *
 * Numerics: the CPU's expressions with every operation rounded separately
 * (cuda_act.cuh), so dpre and y match the CPU up to tanhf; dbias is
 * bias_grad's order. Memory: act_bias_grad's segment sums use the backend's
 * fixed scratch; nothing is allocated. Collective: none.
 */
#include "engine/cuda/cuda_act.cuh"
#include "engine/cuda/cuda_common.cuh"

namespace {

template <zt_act A> __device__ __forceinline__ float act_forward(float v)
{
    if constexpr (A == ZT_ACT_GELU)
        return gelu(v);
    else if constexpr (A == ZT_ACT_RELU)
        return v < 0.0f ? 0.0f : v; /* NaN passes, as relu_forward */
    else
        return v;
}

/* dy through the activation at v (ReLU: v is the output y, a select). */
template <zt_act A> __device__ __forceinline__ float act_backward(float dy, float v)
{
    if constexpr (A == ZT_ACT_GELU)
        return gelu_grad(dy, v);
    else if constexpr (A == ZT_ACT_RELU)
        return v > 0.0f ? dy : 0.0f;
    else
        return dy;
}

/* v = gemm output + bias; pre = v where given; y = act(v as stored). The
 * vector form needs cols % W == 0, so a vector never straddles rows. */
template <zt_act A, zt_dtype T> struct bias_act_op {
    void *y, *pre;
    const void *v, *bias;
    int64_t cols;
    template <int W> __device__ void run(int64_t i) const
    {
        float a[W], bv[W];
        load_elems<T, W>(v, i, a);
        if (bias) {
            load_elems<T, W>(bias, i % cols, bv);
#pragma unroll
            for (int k = 0; k < W; k++)
                a[k] = stored<T>(__fadd_rn(a[k], bv[k]));
            if (pre)
                store_elems<T, W>(pre, i, a);
        }
#pragma unroll
        for (int k = 0; k < W; k++)
            a[k] = act_forward<A>(a[k]);
        store_elems<T, W>(y, i, a);
    }
};

/* v (T) = the bias, broadcast over rows (cols % W == 0 for the vector form). */
template <zt_dtype T> struct bias_fill_op {
    void *v;
    const void *bias;
    int64_t cols;
    template <int W> __device__ void run(int64_t i) const
    {
        float b[W];
        load_elems<T, W>(bias, i % cols, b);
        store_elems<T, W>(v, i, b);
    }
};

/* First pass: thread (segment s, column j) walks its segment's rows in order,
 * writing dpre and summing it as stored (rounded to T); segment 0 starts from
 * the initial dbias. out is dbias when there is one segment, else the (segs,
 * cols) partial sums. */
template <zt_act A, zt_dtype T>
__global__ void act_bias_grad_seg_kernel(float *out, raw_t<T> *dpre, const float *dbias,
                                         const raw_t<T> *dy, const raw_t<T> *pre, int64_t rows,
                                         int64_t cols, int64_t seg_rows, bool accumulate)
{
    using E = elem<T>;
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    const int64_t s = blockIdx.y;
    const int64_t r0 = s * seg_rows;
    const int64_t r1 = rows - r0 < seg_rows ? rows : r0 + seg_rows;
    float acc = s == 0 && accumulate ? dbias[j] : 0.0f;
#pragma unroll 4
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = r * cols + j;
        raw_t<T> g =
            E::narrow(act_backward<A>(E::widen(dy[i]), A == ZT_ACT_NONE ? 0.0f : E::widen(pre[i])));
        dpre[i] = g;
        acc = __fadd_rn(acc, E::widen(g));
    }
    out[s * cols + j] = acc;
}

template <zt_act A, zt_dtype T>
void launch_act_bias_grad(zt_cuda_impl *impl, void *dpre, float *dbias, const void *dy,
                          const void *pre, int64_t rows, int64_t cols, bool accumulate)
{
    zt_launch_bias_plan p =
        zt_launch_bias_grad(rows, cols, (int64_t)(impl->scratch_bytes / sizeof(float)));
    float *part = static_cast<float *>(impl->scratch);
    dim3 grid(p.grid_x, (unsigned)p.segs);
    ZT_LAUNCH(grid, p.block, 0, impl->stream, act_bias_grad_seg_kernel<A, T>)
    (p.segs == 1 ? dbias : part, static_cast<raw_t<T> *>(dpre), dbias,
     static_cast<const raw_t<T> *>(dy), static_cast<const raw_t<T> *>(pre), rows, cols,
     p.seg_rows, accumulate);
    launched(impl, "act_bias_grad");
    if (p.segs > 1) {
        ZT_LAUNCH(p.grid_x, p.block, 0, impl->stream, bias_grad_join_kernel<>)
        (dbias, part, p.segs, cols);
        launched(impl, "act_bias_grad");
    }
}

} // namespace

static void cuda_linear_act_forward(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                                    const void *x, const void *w, const void *bias,
                                    int64_t rows, int64_t in, int64_t out, zt_act act)
{
    zt_cuda_impl *impl = impl_of(be);
    if (rows <= 0 || out <= 0)
        return;
    void *v = pre ? pre : y; // (rows, out)
    const int64_t n = rows * out;
    /* fp32: the bias is added by the kernel after the GEMM. 16-bit: v is x w^T
     * + bias rounded once, so the bias is put in v first and the GEMM adds
     * its product to it (beta 1, one rounding to dt); the kernel then only
     * applies the activation. */
    const void *kbias = dt == ZT_F32 ? bias : nullptr;
    float beta = 0.0f;
    if (bias && dt != ZT_F32) {
        bool vec = out % vec_elems(dt) == 0 && aligned(v, 16) && aligned(bias, 16);
        with_dtype(dt, [&](auto tag) {
            constexpr zt_dtype T = decltype(tag)::value;
            launch_map_vec<T>(impl, bias_fill_op<T>{v, bias, out}, n, vec,
                              "linear_act_forward");
        });
        beta = 1.0f;
    }
    be->gemm(be, dt, dt, false, true, rows, out, in, 1.0f, x, in, w, in, beta, v, out);
    if (!kbias && act == ZT_ACT_NONE && v == y)
        return;
    bool vec = out % vec_elems(dt) == 0 && aligned(y, 16) && aligned(v, 16) &&
               (!kbias || aligned(kbias, 16));
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        if (act == ZT_ACT_GELU)
            launch_map_vec<T>(impl, bias_act_op<ZT_ACT_GELU, T>{y, pre, v, kbias, out}, n, vec,
                              "linear_act_forward");
        else if (act == ZT_ACT_RELU)
            launch_map_vec<T>(impl, bias_act_op<ZT_ACT_RELU, T>{y, pre, v, kbias, out}, n, vec,
                              "linear_act_forward");
        else
            launch_map_vec<T>(impl, bias_act_op<ZT_ACT_NONE, T>{y, pre, v, kbias, out}, n, vec,
                              "linear_act_forward");
    });
}

static void cuda_act_bias_grad(const zt_backend *be, zt_dtype dt, void *dpre, float *dbias,
                               const void *dy, const void *pre, int64_t rows, int64_t cols,
                               zt_act act, bool accumulate)
{
    zt_cuda_impl *impl = impl_of(be);
    if (cols <= 0)
        return;
    if (rows <= 0) {
        if (!accumulate)
            be->memset_zero(be, dbias, (size_t)cols * sizeof(float));
        return;
    }
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        if (act == ZT_ACT_GELU)
            launch_act_bias_grad<ZT_ACT_GELU, T>(impl, dpre, dbias, dy, pre, rows, cols,
                                                 accumulate);
        else if (act == ZT_ACT_RELU)
            launch_act_bias_grad<ZT_ACT_RELU, T>(impl, dpre, dbias, dy, pre, rows, cols,
                                                 accumulate);
        else
            launch_act_bias_grad<ZT_ACT_NONE, T>(impl, dpre, dbias, dy, pre, rows, cols,
                                                 accumulate);
    });
}

void zt_backend_cuda_fused_ops(zt_backend *be)
{
    be->linear_act_forward = cuda_linear_act_forward;
    be->act_bias_grad = cuda_act_bias_grad;
}
