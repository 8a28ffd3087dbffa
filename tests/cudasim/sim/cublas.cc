/*
 * cublas: the cuBLAS calls zerotrain makes (tests/cudasim/include/cublas_v2.h)
 * with cuBLAS's argument checks and status codes, its column-major
 * semantics, and GEMMs as stream operations on the handle's stream.
 *
 * Checks, in cuBLAS's order: a live handle (CUBLAS_STATUS_NOT_INITIALIZED);
 * operations N, T or C, no negative size, leading dimensions at least the
 * stored rows (max(1, rows)), non-null scalars (CUBLAS_STATUS_INVALID_VALUE);
 * type combinations cublasGemmEx supports with an fp32 compute type:
 * fp32/fp32/fp32, and fp16 or bf16 A and B with C of the same type or fp32
 * (FAST_TF32 and the other fast modes: fp32 only; anything else
 * CUBLAS_STATUS_NOT_SUPPORTED). m, n or batch 0 does nothing; k 0 scales C by
 * beta (beta 0 writes zeros without reading C). Every matrix must be device
 * memory of the handle's device: otherwise the call is reported and fails the
 * device as the GEMM kernel's fault would (CUBLAS_STATUS_EXECUTION_FAILED).
 *
 * Execution: OpenBLAS sgemm on fp32 copies (fp16 and bf16 widen exactly; the
 * TF32 compute type, or TF32 math mode with CUBLAS_COMPUTE_32F, first rounds
 * the operands to TF32's 10-bit mantissa, nearest even); 16-bit C is widened
 * for beta and rounded back to nearest even. Sizes and leading dimensions
 * must fit OpenBLAS's int (else CUBLAS_STATUS_NOT_SUPPORTED). The race
 * checker sees each column actually read or written.
 *
 * Memory: a handle is made by cublasCreate and freed by cublasDestroy; the
 * workspace is the caller's (checked, not used). Thread safety: as cuBLAS,
 * one host thread per handle at a time.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cblas.h>
#include <limits.h>
#include <string.h>

#include <set>

struct cublasContext {
    int device;
    cudaStream_t stream;
    cublasMath_t math;
    void *workspace;
    size_t workspace_bytes;
};

namespace {

std::mutex g_lock;
std::set<cublasContext *> *g_live;

bool live(cublasContext *h)
{
    std::lock_guard<std::mutex> l(g_lock);
    return g_live && g_live->count(h);
}

size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

float widen(const void *p, int64_t i, cudaDataType t)
{
    if (t == CUDA_R_32F)
        return static_cast<const float *>(p)[i];
    uint16_t h = static_cast<const uint16_t *>(p)[i];
    return t == CUDA_R_16F ? __half2float(__half{h}) : __bfloat162float(__nv_bfloat16{h});
}

uint16_t narrow(float x, cudaDataType t)
{
    return t == CUDA_R_16F ? __half_as_ushort(__float2half_rn(x))
                           : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

float tf32(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u)
        return x;
    u += 0xfffu + ((u >> 13) & 1u);
    return __uint_as_float(u & ~0x1fffu);
}

/* A column-major matrix of one GEMM: element (r, c) at p + (c * ld + r). */
struct matrix {
    const void *p;
    cudaDataType type;
    int64_t rows, cols, ld;
};

/* Every column's bytes, for the race checker. */
void race_columns(const matrix &m, bool write)
{
    size_t es = type_size(m.type);
    for (int64_t c = 0; c < m.cols; c++)
        zs_race_range(static_cast<const char *>(m.p) + (size_t)(c * m.ld) * es,
                      (size_t)m.rows * es, write);
}

/* m as compact fp32 (ld = rows), rounded to TF32 when asked. */
std::vector<float> to_f32(const matrix &m, bool round_tf32)
{
    std::vector<float> out((size_t)(m.rows * m.cols));
    for (int64_t c = 0; c < m.cols; c++)
        for (int64_t r = 0; r < m.rows; r++) {
            float v = widen(m.p, c * m.ld + r, m.type);
            out[(size_t)(c * m.rows + r)] = round_tf32 ? tf32(v) : v;
        }
    return out;
}

class gemm_op final : public zs_op {
public:
    cublasOperation_t ta, tb;
    int64_t m, n, k, batch;
    float alpha, beta;
    matrix a, b, c;
    int64_t sa, sb, sc;
    bool round_tf32;

    bool start() override
    {
        const size_t esa = type_size(a.type), esb = type_size(b.type), esc = type_size(c.type);
        for (int64_t i = 0; i < batch; i++) {
            matrix ai = a, bi = b, ci = c;
            ai.p = static_cast<const char *>(a.p) + (ptrdiff_t)(i * sa) * (ptrdiff_t)esa;
            bi.p = static_cast<const char *>(b.p) + (ptrdiff_t)(i * sb) * (ptrdiff_t)esb;
            ci.p = static_cast<const char *>(c.p) + (ptrdiff_t)(i * sc) * (ptrdiff_t)esc;
            one(ai, bi, ci);
        }
        return true;
    }

private:
    void one(const matrix &ai, const matrix &bi, const matrix &ci)
    {
        if (k > 0) {
            race_columns(ai, false);
            race_columns(bi, false);
        }
        if (beta != 0.0f)
            race_columns(ci, false);
        race_columns(ci, true);
        std::vector<float> af, bf, cf;
        const float *ap = static_cast<const float *>(ai.p), *bp = static_cast<const float *>(bi.p);
        int64_t lda = ai.ld, ldb = bi.ld, ldc = ci.ld;
        if (k > 0 && (ai.type != CUDA_R_32F || round_tf32)) {
            af = to_f32(ai, round_tf32);
            ap = af.data();
            lda = ai.rows;
        }
        if (k > 0 && (bi.type != CUDA_R_32F || round_tf32)) {
            bf = to_f32(bi, round_tf32);
            bp = bf.data();
            ldb = bi.rows;
        }
        float *cp = static_cast<float *>(const_cast<void *>(ci.p));
        if (ci.type != CUDA_R_32F) {
            /* beta 0 never reads C, so NaN there cannot leak in. */
            cf = beta != 0.0f ? to_f32(ci, false) : std::vector<float>((size_t)(m * n), 0.0f);
            cp = cf.data();
            ldc = m;
        }
        /* With k == 0, lda/ldb are unused but must satisfy sgemm's checks. */
        cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, alpha,
                    ap, (int)(lda > 0 ? lda : 1), bp, (int)(ldb > 0 ? ldb : 1), beta, cp,
                    (int)ldc);
        if (ci.type != CUDA_R_32F) {
            uint16_t *out = static_cast<uint16_t *>(const_cast<void *>(ci.p));
            for (int64_t col = 0; col < n; col++)
                for (int64_t r = 0; r < m; r++)
                    out[col * ci.ld + r] = narrow(cf[(size_t)(col * m + r)], ci.type);
        }
    }
};

bool supported(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute)
{
    if (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC) {
        if (at == CUDA_R_32F)
            return bt == CUDA_R_32F && ct == CUDA_R_32F;
        if (at == CUDA_R_16F || at == CUDA_R_16BF)
            return bt == at && (ct == at || ct == CUDA_R_32F);
        return false;
    }
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16F ||
        compute == CUBLAS_COMPUTE_32F_FAST_16BF)
        return at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F;
    return false;
}

/* The matrices of batch entries 0 and batch - 1 must be device memory. */
bool operand_ok(const char *call, const char *name, const matrix &x, int64_t stride,
                int64_t batch, int device)
{
    size_t es = type_size(x.type);
    size_t span = (size_t)((x.cols - 1) * x.ld + x.rows) * es;
    for (int64_t i : {(int64_t)0, batch - 1}) {
        const char *p = static_cast<const char *>(x.p) + (ptrdiff_t)(i * stride) * (ptrdiff_t)es;
        zs_ptr_info info;
        if (zs_device_range(p, span, &info) && info.device == device)
            continue;
        zs_fault(device, cudaErrorIllegalAddress);
        zs_report("%s: %s of batch entry %lld (%lld x %lld, ld %lld) at %s is not a range of "
                  "device %d's memory (%s): the GEMM would fault on a GPU",
                  call, name, (long long)i, (long long)x.rows, (long long)x.cols,
                  (long long)x.ld, zs_describe_ptr(p).c_str(), device,
                  zs_ptr_kind_name(info.kind));
        return false;
    }
    return true;
}

cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                    int64_t m, int64_t n, int64_t k, const void *alpha, const void *A,
                    cudaDataType at, int64_t lda, int64_t sa, const void *B, cudaDataType bt,
                    int64_t ldb, int64_t sb, const void *beta, void *C, cudaDataType ct,
                    int64_t ldc, int64_t sc, int64_t batch, cublasComputeType_t compute,
                    cublasGemmAlgo_t algo)
{
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    auto op_ok = [](cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T || o == CUBLAS_OP_C; };
    const int64_t ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
    if (!op_ok(ta) || !op_ok(tb) || m < 0 || n < 0 || k < 0 || batch < 0 ||
        lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1) || !alpha ||
        !beta || (int)algo < -1 || (int)algo > 115)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!supported(at, bt, ct, compute))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (zs_sticky(h->device) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX) {
        zs_report("%s: sizes beyond 2^31 - 1 are not simulated (OpenBLAS takes int)", call);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    std::unique_ptr<gemm_op> op(new gemm_op());
    op->ta = ta;
    op->tb = tb;
    op->m = m;
    op->n = n;
    op->k = k;
    op->batch = batch;
    op->alpha = *static_cast<const float *>(alpha);
    op->beta = *static_cast<const float *>(beta);
    op->a = matrix{A, at, ar, ta == CUBLAS_OP_N ? k : m, lda};
    op->b = matrix{B, bt, br, tb == CUBLAS_OP_N ? n : k, ldb};
    op->c = matrix{C, ct, m, n, ldc};
    op->sa = sa;
    op->sb = sb;
    op->sc = sc;
    op->round_tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                     ((h->math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH && compute == CUBLAS_COMPUTE_32F &&
                      at == CUDA_R_32F);
    if ((k > 0 && (!operand_ok(call, "A", op->a, sa, batch, h->device) ||
                   !operand_ok(call, "B", op->b, sb, batch, h->device))) ||
        !operand_ok(call, "C", op->c, sc, batch, h->device))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    uint32_t si = 0;
    if (zs_stream_index(h->stream, &si) != cudaSuccess)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* bf16/fp16 operands and TF32 go to the tensor cores; plain fp32 to SGEMM's FFMA. */
    zs_log_launch(at != CUDA_R_32F || op->round_tf32 ? "cublas-tensor" : "cublas-fma", dim3(1, 1, 1),
                  0, call, __FILE__, __LINE__);
    zs_perf_library_call(zs_profile_op());
    op->what = zs_format("%s (m %lld, n %lld, k %lld, batch %lld)", call, (long long)m,
                         (long long)n, (long long)k, (long long)batch);
    zs_enqueue(si, std::move(op));
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (zs_check_current() != cudaSuccess || zs_sticky(zs_current_device()) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasContext *h = new cublasContext();
    h->device = zs_current_device();
    h->stream = NULL;
    h->math = CUBLAS_DEFAULT_MATH;
    std::lock_guard<std::mutex> l(g_lock);
    if (!g_live)
        g_live = new std::set<cublasContext *>();
    g_live->insert(h);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    if (!live(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    /* Its queued GEMMs finish first, as cuBLAS's destroy synchronises. */
    uint32_t si = 0;
    if (zs_stream_index(handle->stream, &si) == cudaSuccess)
        cudaStreamSynchronize(handle->stream);
    {
        std::lock_guard<std::mutex> l(g_lock);
        g_live->erase(handle);
    }
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!live(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    uint32_t si = 0;
    if (zs_stream_index(stream, &si) != cudaSuccess || zs_stream_device(si) != handle->device)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->stream = stream;
    /* cuBLAS: setting the stream goes back to the default workspace pool. */
    handle->workspace = NULL;
    handle->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    if (!live(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!live(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    unsigned base = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base > CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes)
{
    if (!live(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((uintptr_t)workspace % 256 != 0 || (!workspace && bytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    zs_ptr_info info;
    if (workspace && (!zs_device_range(workspace, bytes, &info) || info.device != handle->device)) {
        zs_report("cublasSetWorkspace: %s (%zu bytes) is not device %d's memory",
                  zs_describe_ptr(workspace).c_str(), bytes, handle->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char *cublasGetStatusName(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "error detected trying to check the license";
    }
    return "unknown error";
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                       cublasOperation_t transb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType Atype,
                                       int lda, const void *B, cudaDataType Btype, int ldb,
                                       const void *beta, void *C, cudaDataType Ctype, int ldc,
                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

extern "C" cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int64_t m, int64_t n,
                                          int64_t k, const void *alpha, const void *A,
                                          cudaDataType Atype, int64_t lda, const void *B,
                                          cudaDataType Btype, int64_t ldb, const void *beta,
                                          void *C, cudaDataType Ctype, int64_t ldc,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm("cublasGemmEx_64", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA,
    const void *B, cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype,
                lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
                computeType, algo);
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType Atype, int64_t lda,
    long long strideA, const void *B, cudaDataType Btype, int64_t ldb, long long strideB,
    const void *beta, void *C, cudaDataType Ctype, int64_t ldc, long long strideC,
    int64_t batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm("cublasGemmStridedBatchedEx_64", handle, transa, transb, m, n, k, alpha, A,
                Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC,
                batchCount, computeType, algo);
}
