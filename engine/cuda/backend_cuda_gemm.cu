/*
 * backend_cuda_gemm: the CUDA backend's gemm and gemm_batched on cuBLAS.
 * GEMMs are deterministic run to run on one GPU model, not bit-equal to
 * OpenBLAS; fp32 GEMMs use TF32 tensor cores only when the backend was made
 * with tf32. A typed gemm with 16-bit operands (dt fp16/bf16) hands them to
 * cublasGemmEx as they are stored (CUDA_R_16F/CUDA_R_16BF, fp32 compute, C
 * fp32 or of dt), whatever gemm_dtype says: the cast path below is for fp32
 * operands only.
 *
 * GEMM with gemm_dtype fp16/bf16 and a workspace: A and B are rounded into the
 * two cast buffers (compact, row-major) and multiplied on tensor cores with
 * fp32 accumulation and fp32 C; products too big for the buffers run in tiles
 * of C (batched ones in chunks of entries, or entry by entry in tiles). None
 * falls back to fp32: a product whose one row of A alone exceeds a buffer
 * (k > ZT_CUDA_GEMM_WORKSPACE_MB's elements) fails with a message. Without a
 * workspace every GEMM is fp32.
 *
 * Memory: the cast buffers are the backend's workspace (set_workspace);
 * nothing is allocated. Collective: none.
 */
#include <cublas_v2.h>

#include "engine/cuda/cuda_common.cuh"

namespace {

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

/* C (T) = beta C, beta == 0 writing zeros without reading C (BLAS's rule). */
template <zt_dtype T>
__global__ void scale_matrix_kernel(raw_t<T> *c, int64_t batch, int64_t rows, int64_t cols,
                                    int64_t ld, int64_t stride, float beta)
{
    using E = elem<T>;
    const int64_t nrows = batch * rows;
    const int64_t cstep = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = blockIdx.y; q < nrows; q += gridDim.y) {
        const int64_t b = q / rows;
        raw_t<T> *row = c + b * stride + (q - b * rows) * ld; // (cols)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += cstep)
            row[j] = E::narrow(beta == 0.0f ? 0.0f : __fmul_rn(beta, E::widen(row[j])));
    }
}

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

/* k == 0: C (c_dt) = beta C for every batch entry. */
void gemm_scale_only(zt_cuda_impl *impl, zt_dtype c_dt, void *c, int64_t batch, int64_t m,
                     int64_t n, int64_t ldc, int64_t sc, float beta, const char *what)
{
    if (beta == 1.0f)
        return;
    dim3 grid, block;
    rows_dims(impl, batch * m, n, &grid, &block);
    with_dtype(c_dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        ZT_LAUNCH(grid, block, 0, impl->stream, scale_matrix_kernel<T>)
        (static_cast<raw_t<T> *>(c), batch, m, n, ldc, sc, beta);
    });
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
        ZT_LAUNCH(grid, block, 0, impl->stream, cast_kernel<ZT_BF16>)
        (d, src, batch, rows, cols, ld, stride);
    else
        ZT_LAUNCH(grid, block, 0, impl->stream, cast_kernel<ZT_F16>)
        (d, src, batch, rows, cols, ld, stride);
    launched(impl, what);
}

/* One product (batch 1) in tiles of C: B's columns of a tile into cast_b,
 * then A's rows of each tile into cast_a (see the top of the file). */
void gemm_16bit_tiled(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    const int64_t cap = (int64_t)(impl->cast_bytes / sizeof(uint16_t));
    const cudaDataType dt = impl->opt.gemm_dtype == ZT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    zt_launch_gemm_tiles p = zt_launch_gemm_tile(g.m, g.n, g.k, cap);
    if (!p.cast) {
        zt_cuda_record_msg(impl, ZT_ERR_DEVICE,
                           "%s: a 16-bit GEMM row of k = %lld elements does not fit the %lld "
                           "element cast buffer (raise ZT_CUDA_GEMM_WORKSPACE_MB)",
                           what, (long long)g.k, (long long)cap);
        return;
    }
    for (int64_t j0 = 0; j0 < g.n; j0 += p.n_step) {
        const int64_t nc = g.n - j0 < p.n_step ? g.n - j0 : p.n_step;
        /* Columns j0.. of op(B): columns of B, or its rows when transposed. */
        const int64_t br = g.tb ? nc : g.k, bc = g.tb ? g.k : nc;
        cast_operand(impl, impl->cast_b, g.tb ? g.b + j0 * g.ldb : g.b + j0, br, bc, g.ldb, 0, 1,
                     what);
        for (int64_t i0 = 0; i0 < g.m; i0 += p.m_step) {
            const int64_t mc = g.m - i0 < p.m_step ? g.m - i0 : p.m_step;
            /* Rows i0.. of op(A): rows of A, or its columns when transposed. */
            const int64_t ar = g.ta ? g.k : mc, ac = g.ta ? mc : g.k;
            cast_operand(impl, impl->cast_a, g.ta ? g.a + i0 : g.a + i0 * g.lda, ar, ac, g.lda,
                         0, 1, what);
            cublasStatus_t st = cublasGemmEx_64(
                impl->cublas, op_of(g.tb), op_of(g.ta), nc, mc, g.k, &g.alpha, impl->cast_b, dt,
                bc, impl->cast_a, dt, ac, &g.beta, g.c + i0 * g.ldc + j0, CUDA_R_32F, g.ldc,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            zt_cuda_record_blas(impl, st, what);
        }
    }
}

/* The 16-bit path (see the top of the file). */
void gemm_16bit(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    const int64_t cap = (int64_t)(impl->cast_bytes / sizeof(uint16_t));
    const cudaDataType dt = impl->opt.gemm_dtype == ZT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    /* Stored shapes: A is (k, m) when transposed, else (m, k); B likewise. */
    const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    zt_launch_gemm_plan p = zt_launch_gemm_batches(g.m, g.n, g.k, g.batch, cap);
    if (g.batch == 1 || !p.cast) {
        /* Entry by entry, each in tiles. */
        for (int64_t e = 0; e < g.batch; e++) {
            gemm_args one = g;
            one.a = g.a + e * g.sa;
            one.b = g.b + e * g.sb;
            one.c = g.c + e * g.sc;
            one.batch = 1;
            gemm_16bit_tiled(impl, one, what);
        }
        return;
    }
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
}

void gemm_run(zt_cuda_impl *impl, const gemm_args &g, const char *what)
{
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0)
        return;
    if (g.k <= 0) {
        gemm_scale_only(impl, ZT_F32, g.c, g.batch, g.m, g.n, g.ldc, g.sc, g.beta, what);
        return;
    }
    if (impl->opt.gemm_dtype != ZT_F32 && impl->cast_bytes > 0)
        gemm_16bit(impl, g, what);
    else
        gemm_f32(impl, g, what);
}

cudaDataType cuda_type_of(zt_dtype dt)
{
    return dt == ZT_BF16 ? CUDA_R_16BF : dt == ZT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Typed 16-bit operands go to cuBLAS as they are, with no cast (fp32
 * accumulation; C of c_dt, fp32 or dt itself, which cuBLAS rounds once from
 * alpha AB + beta C); fp32 ones take gemm_run's path (cast when the
 * backend's gemm_dtype says so). */
void cuda_gemm(const zt_backend *be, zt_dtype dt, zt_dtype c_dt, bool trans_a, bool trans_b,
               int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
               const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
    zt_cuda_impl *impl = impl_of(be);
    if (dt == ZT_F32 && c_dt == ZT_F32) {
        gemm_args g = {trans_a, trans_b, m,    n,   k, alpha, static_cast<const float *>(a),
                       lda,     0,       static_cast<const float *>(b),
                       ldb,     0,       beta, static_cast<float *>(c),   ldc, 0, 1};
        gemm_run(impl, g, "gemm");
        return;
    }
    if (dt == ZT_F32 || (c_dt != ZT_F32 && c_dt != dt)) {
        zt_cuda_record_msg(impl, ZT_ERR_INTERNAL, "gemm: %s operands with a %s C",
                           zt_dtype_name(dt), zt_dtype_name(c_dt));
        return;
    }
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        gemm_scale_only(impl, c_dt, c, 1, m, n, ldc, 0, beta, "gemm");
        return;
    }
    const cudaDataType at = cuda_type_of(dt);
    cublasStatus_t st = cublasGemmEx_64(impl->cublas, op_of(trans_b), op_of(trans_a), n, m, k,
                                        &alpha, b, at, ldb, a, at, lda, &beta, c,
                                        cuda_type_of(c_dt), ldc, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT);
    zt_cuda_record_blas(impl, st, "gemm");
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

} // namespace

void zt_backend_cuda_gemm_ops(zt_backend *be)
{
    be->gemm = cuda_gemm;
    be->gemm_batched = cuda_gemm_batched;
}
