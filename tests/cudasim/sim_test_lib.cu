/*
 * sim_test_lib: the cuBLAS and NCCL cases of the CUDA simulator's tests
 * (sim_test.h): cuBLAS's status codes and column-major GEMMs in every
 * supported type, TF32 rounding and a host operand; NCCL's collectives in
 * every type, in place and not, split communicators, and the report of
 * collectives issued in different orders on two communicators.
 *
 * Memory: each case frees what it allocates. Collective: the nccl cases,
 * over MPI_COMM_WORLD (mpirun -np 2).
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "tests/cudasim/sim_test.h"

namespace {

void *dev_copy(const void *host, size_t bytes)
{
    void *p = NULL;
    ST_CUDA(cudaMalloc(&p, bytes));
    ST_CUDA(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
}

uint16_t to16(float x, cudaDataType t)
{
    return t == CUDA_R_16F ? __half_as_ushort(__float2half_rn(x))
                           : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

float from16(uint16_t h, cudaDataType t)
{
    return t == CUDA_R_16F ? __half2float(__half{h}) : __bfloat162float(__nv_bfloat16{h});
}

/* C (m x n, ldc) = A^T (k x m stored, lda) B (k x n, ldb) + 0.5 C in type t,
 * small integers so every result is exact; checked against a host loop. */
void gemm_case(cublasHandle_t h, cudaDataType ab, cudaDataType ct, int batch)
{
    const int m = 5, n = 7, k = 3, lda = 4, ldb = 5, ldc = 6;
    const long long sa = lda * m, sb = ldb * n, sc = ldc * n;
    std::vector<float> a(sa * batch), b(sb * batch), c(sc * batch);
    for (size_t i = 0; i < a.size(); i++)
        a[i] = (float)((int)(i % 7) - 3);
    for (size_t i = 0; i < b.size(); i++)
        b[i] = (float)((int)(i % 5) - 2);
    for (size_t i = 0; i < c.size(); i++)
        c[i] = (float)(i % 4);
    const size_t es_ab = ab == CUDA_R_32F ? 4 : 2, es_c = ct == CUDA_R_32F ? 4 : 2;
    std::vector<unsigned char> ha(a.size() * es_ab), hb(b.size() * es_ab), hc(c.size() * es_c);
    for (size_t i = 0; i < a.size(); i++) {
        uint16_t v = es_ab == 2 ? to16(a[i], ab) : 0;
        memcpy(&ha[i * es_ab], es_ab == 2 ? (void *)&v : (void *)&a[i], es_ab);
    }
    for (size_t i = 0; i < b.size(); i++) {
        uint16_t v = es_ab == 2 ? to16(b[i], ab) : 0;
        memcpy(&hb[i * es_ab], es_ab == 2 ? (void *)&v : (void *)&b[i], es_ab);
    }
    for (size_t i = 0; i < c.size(); i++) {
        uint16_t v = es_c == 2 ? to16(c[i], ct) : 0;
        memcpy(&hc[i * es_c], es_c == 2 ? (void *)&v : (void *)&c[i], es_c);
    }
    void *da = dev_copy(ha.data(), ha.size()), *db = dev_copy(hb.data(), hb.size());
    void *dc = dev_copy(hc.data(), hc.size());
    const float alpha = 1.0f, beta = 0.5f;
    cublasStatus_t st =
        batch == 1 ? cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, ab, lda, db, ab,
                                  ldb, &beta, dc, ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                   : cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da,
                                                ab, lda, sa, db, ab, ldb, sb, &beta, dc, ct, ldc,
                                                sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    ST_CHECK(st == CUBLAS_STATUS_SUCCESS, "GEMM types %d/%d: %s", (int)ab, (int)ct,
             cublasGetStatusName(st));
    /* cudaMemcpy's legacy stream does not wait for a non-blocking stream. */
    cudaStream_t s;
    cublasGetStream(h, &s);
    ST_CUDA(cudaStreamSynchronize(s));
    ST_CUDA(cudaMemcpy(hc.data(), dc, hc.size(), cudaMemcpyDeviceToHost));
    for (int q = 0; q < batch; q++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < ldc; i++) {
                size_t at = (size_t)(q * sc + j * ldc + i);
                float want = c[at];
                if (i < m) {
                    float s = 0;
                    for (int p = 0; p < k; p++)
                        s += a[q * sa + i * lda + p] * b[q * sb + j * ldb + p];
                    want = s + 0.5f * c[at];
                }
                float got;
                if (es_c == 2)
                    got = from16((uint16_t)(hc[at * 2] | hc[at * 2 + 1] << 8), ct);
                else
                    memcpy(&got, &hc[at * 4], 4);
                ST_CHECK(got == want, "types %d/%d batch %d: C(%d, %d) = %g, want %g", (int)ab,
                         (int)ct, q, i, j, got, want);
            }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
}

ncclComm_t make_comm(int rank, int size)
{
    ncclUniqueId id;
    if (rank == 0)
        ST_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c = NULL;
    ncclResult_t rc = ncclCommInitRank(&c, size, id, rank);
    ST_CHECK(rc == ncclSuccess, "ncclCommInitRank: %s: %s", ncclGetErrorString(rc),
             ncclGetLastError(c));
    return c;
}

void start_mpi(int *rank, int *size)
{
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    int count = 0;
    ST_CUDA(cudaGetDeviceCount(&count));
    ST_CUDA(cudaSetDevice(*rank % count));
}

} // namespace

int st_cublas(void)
{
    cublasHandle_t h;
    ST_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    cudaStream_t s;
    ST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ST_CHECK(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS, "cublasSetStream");
    float *d = NULL;
    ST_CUDA(cudaMalloc(&d, 1024 * sizeof(float)));
    const float one = 1.0f, zero = 0.0f;
    struct {
        const char *what;
        cublasHandle_t h;
        cublasOperation_t ta;
        int m, lda;
        cudaDataType bt;
        cublasComputeType_t ct;
        cublasStatus_t want;
    } cases[] = {
        {"no handle", NULL, CUBLAS_OP_N, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F,
         CUBLAS_STATUS_NOT_INITIALIZED},
        {"lda < m", h, CUBLAS_OP_N, 4, 3, CUDA_R_32F, CUBLAS_COMPUTE_32F,
         CUBLAS_STATUS_INVALID_VALUE},
        {"m < 0", h, CUBLAS_OP_N, -1, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F,
         CUBLAS_STATUS_INVALID_VALUE},
        {"op 7", h, (cublasOperation_t)7, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F,
         CUBLAS_STATUS_INVALID_VALUE},
        {"fp32 A, fp16 B", h, CUBLAS_OP_N, 4, 4, CUDA_R_16F, CUBLAS_COMPUTE_32F,
         CUBLAS_STATUS_NOT_SUPPORTED},
        {"16F compute", h, CUBLAS_OP_N, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_16F,
         CUBLAS_STATUS_NOT_SUPPORTED},
        {"m 0", h, CUBLAS_OP_N, 0, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_STATUS_SUCCESS},
    };
    for (const auto &c : cases) {
        cublasStatus_t st = cublasGemmEx(c.h, c.ta, CUBLAS_OP_N, c.m, 4, 4, &one, d, CUDA_R_32F,
                                         c.lda, d + 64, c.bt, 4, &zero, d + 128, CUDA_R_32F, 4,
                                         c.ct, CUBLAS_GEMM_DEFAULT);
        ST_CHECK(st == c.want, "%s: %s, want %s", c.what, cublasGetStatusName(st),
                 cublasGetStatusName(c.want));
    }
    gemm_case(h, CUDA_R_32F, CUDA_R_32F, 1);
    gemm_case(h, CUDA_R_16F, CUDA_R_32F, 1);
    gemm_case(h, CUDA_R_16F, CUDA_R_16F, 1);
    gemm_case(h, CUDA_R_16BF, CUDA_R_16BF, 1);
    gemm_case(h, CUDA_R_32F, CUDA_R_32F, 3);
    gemm_case(h, CUDA_R_16BF, CUDA_R_32F, 3);
    /* TF32 keeps 10 mantissa bits: (1 + 2^-12) * 1 comes out as 1. */
    float in[2] = {1.0f + 0x1p-12f, 1.0f}, out[2];
    ST_CUDA(cudaMemcpy(d, in, sizeof in, cudaMemcpyHostToDevice));
    for (int tf = 0; tf < 2; tf++) {
        ST_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, d, CUDA_R_32F, 1, d + 1,
                              CUDA_R_32F, 1, &zero, d + 2 + tf, CUDA_R_32F, 1,
                              tf ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
                 "1 x 1 GEMM");
    }
    ST_CUDA(cudaStreamSynchronize(s));
    ST_CUDA(cudaMemcpy(out, d + 2, sizeof out, cudaMemcpyDeviceToHost));
    ST_CHECK(out[0] == in[0] && out[1] == 1.0f, "fp32 %a, tf32 %a", out[0], out[1]);
    /* A host operand fails the device, as the GEMM's kernel would. */
    static float host[64];
    ST_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, host, CUDA_R_32F, 4, d,
                          CUDA_R_32F, 4, &zero, d + 64, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_EXECUTION_FAILED,
             "a host operand");
    ST_CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "the device has failed");
    cublasDestroy(h);
    return st_failed;
}

int st_nccl(void)
{
    int rank, size;
    start_mpi(&rank, &size);
    ncclComm_t c = make_comm(rank, size);
    cudaStream_t s;
    ST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int n = 1001;
    std::vector<float> h(n * size);
    for (int i = 0; i < n; i++)
        h[i] = (float)(rank * 1000 + i);
    float *buf = (float *)dev_copy(h.data(), h.size() * sizeof(float));
    ST_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c, s) == ncclSuccess, "all-reduce");
    ST_CUDA(cudaMemcpyAsync(h.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += (float)(r * 1000 + i);
        ST_CHECK(h[i] == want, "all-reduce [%d] = %g, want %g", i, h[i], want);
    }
    /* 16-bit sums round after each addition; bf16 max lets NaN win. */
    std::vector<uint16_t> h16(n);
    for (int i = 0; i < n; i++)
        h16[i] = to16(i == 3 && rank == 1 ? NAN : 0.5f * (rank + 1) + (float)(i % 4), CUDA_R_16BF);
    uint16_t *d16 = (uint16_t *)dev_copy(h16.data(), n * 2);
    ST_CHECK(ncclAllReduce(d16, d16, n, ncclBfloat16, ncclMax, c, s) == ncclSuccess, "max");
    ST_CUDA(cudaMemcpyAsync(h16.data(), d16, n * 2, cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < n; i++) {
        float got = from16(h16[i], CUDA_R_16BF), want = 0.5f * size + (float)(i % 4);
        ST_CHECK(i == 3 && size > 1 ? isnan(got) : got == want, "bf16 max [%d] = %g", i, got);
    }
    for (int i = 0; i < n; i++)
        h16[i] = to16(0.25f * (rank + 1), CUDA_R_16F);
    ST_CUDA(cudaMemcpy(d16, h16.data(), n * 2, cudaMemcpyHostToDevice));
    ST_CHECK(ncclAllReduce(d16, d16, n, ncclFloat16, ncclSum, c, s) == ncclSuccess, "fp16 sum");
    ST_CUDA(cudaMemcpyAsync(h16.data(), d16, n * 2, cudaMemcpyDeviceToHost, s));
    ST_CHECK(from16(h16[n - 1], CUDA_R_16F) == 0.125f * size * (size + 1), "fp16 sum %g",
             from16(h16[n - 1], CUDA_R_16F));
    /* Reduce-scatter into this rank's slot, then all-gather in place. */
    for (int i = 0; i < n * size; i++)
        h[i] = (float)(i + rank);
    ST_CUDA(cudaMemcpy(buf, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    float *mine = buf + (size_t)rank * n;
    ST_CHECK(ncclReduceScatter(buf, mine, n, ncclFloat32, ncclSum, c, s) == ncclSuccess, "rs");
    ST_CHECK(ncclAllGather(mine, buf, n, ncclFloat32, c, s) == ncclSuccess, "ag");
    ST_CUDA(cudaMemcpyAsync(h.data(), buf, h.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < n * size; i += 97)
        ST_CHECK(h[i] == (float)(size * i + size * (size - 1) / 2), "rs+ag [%d] = %g", i, h[i]);
    h[0] = (float)(rank + 42);
    ST_CUDA(cudaMemcpy(buf, h.data(), sizeof(float), cudaMemcpyHostToDevice));
    ST_CHECK(ncclBroadcast(buf, buf, 1, ncclFloat32, size - 1, c, s) == ncclSuccess, "bcast");
    ST_CUDA(cudaMemcpyAsync(h.data(), buf, sizeof(float), cudaMemcpyDeviceToHost, s));
    ST_CHECK(h[0] == (float)(size - 1 + 42), "broadcast from the last rank: %g", h[0]);
    /* Split: each rank alone (an all-reduce is then a copy); rank 1 opts out. */
    ncclComm_t solo = NULL, none = NULL;
    ST_CHECK(ncclCommSplit(c, rank, 0, &solo, NULL) == ncclSuccess && solo, "split");
    ST_CHECK(ncclAllReduce(buf, buf + 1, 1, ncclFloat32, ncclSum, solo, s) == ncclSuccess,
             "solo all-reduce");
    ST_CUDA(cudaMemcpyAsync(h.data(), buf, 2 * sizeof(float), cudaMemcpyDeviceToHost, s));
    ST_CHECK(h[1] == h[0], "a one-rank all-reduce copies: %g %g", h[0], h[1]);
    ST_CHECK(ncclCommSplit(c, rank == 1 ? NCCL_SPLIT_NOCOLOR : 0, 0, &none, NULL) == ncclSuccess &&
                 (rank == 1) == (none == NULL),
             "NCCL_SPLIT_NOCOLOR");
    ncclResult_t async = ncclInternalError;
    ST_CHECK(ncclCommGetAsyncError(c, &async) == ncclSuccess && async == ncclSuccess,
             "no asynchronous error");
    ST_CHECK(ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, c, s) == ncclInvalidArgument,
             "int32 is not simulated");
    float hostbuf[4];
    ST_CHECK(ncclAllReduce(hostbuf, hostbuf, 4, ncclFloat32, ncclSum, c, s) ==
                 ncclInvalidArgument,
             "a host buffer");
    ST_CUDA(cudaStreamSynchronize(s));
    if (none)
        ncclCommDestroy(none);
    ncclCommDestroy(solo);
    ncclCommDestroy(c);
    cudaFree(buf);
    cudaFree(d16);
    MPI_Finalize();
    return st_failed;
}

/* Rank 0 issues on comm A then B, rank 1 on B then A, all on one stream:
 * real NCCL hangs; the simulator reports both and fails the collectives. */
int st_nccl_hang(void)
{
    int rank, size;
    start_mpi(&rank, &size);
    ncclComm_t a = make_comm(rank, size), b = make_comm(rank, size);
    cudaStream_t s;
    ST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *buf = NULL;
    ST_CUDA(cudaMalloc(&buf, 64 * sizeof(float)));
    ncclComm_t first = rank == 0 ? a : b, second = rank == 0 ? b : a;
    ST_CHECK(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, first, s) == ncclSuccess, "1st");
    ST_CHECK(ncclBroadcast(buf, buf, 64, ncclFloat32, 0, second, s) == ncclSuccess, "2nd");
    ST_CUDA(cudaStreamSynchronize(s));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(first, &async);
    ST_CHECK(async == ncclSystemError, "the stuck collective's communicator reports an error");
    printf("rank %d: async error: %s: %s\n", rank, ncclGetErrorString(async), ncclGetLastError(first));
    MPI_Barrier(MPI_COMM_WORLD);
    ncclCommAbort(a);
    ncclCommAbort(b);
    MPI_Finalize();
    return st_failed;
}

/* Two ranks on one GPU (ZT_SIM_DEVICES=1): NCCL refuses the communicator. */
int st_nccl_dup(void)
{
    int rank, size;
    start_mpi(&rank, &size);
    ncclUniqueId id;
    if (rank == 0)
        ST_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c = NULL;
    ncclResult_t rc = ncclCommInitRank(&c, size, id, rank);
    ST_CHECK(rc == ncclInvalidUsage && !c, "ncclCommInitRank on a shared GPU: %s",
             ncclGetErrorString(rc));
    printf("rank %d: %s\n", rank, ncclGetLastError(NULL));
    MPI_Finalize();
    return st_failed;
}
