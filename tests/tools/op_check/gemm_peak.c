/*
 * gemm_peak: op-check --gemm-peak: cuBLAS's GEMM throughput alone (no backend),
 * bf16 at a few large shapes and fp32 at 8192^3; scripts/gpu-check.sh reads
 * its last two lines.
 *
 * Memory: frees every device buffer it makes. Collective: none.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/tools/op_check/op_check.h"

static void cuda_ok(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess)
        oc_die("%s: %s", what, cudaGetErrorString(rc));
}

static void blas_ok(cublasStatus_t rc, const char *what)
{
    if (rc != CUBLAS_STATUS_SUCCESS)
        oc_die("%s: cuBLAS status %d", what, (int)rc);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define PEAK_WARMUP 5
#define PEAK_ITERS 20

/* Median milliseconds of C = A^T B ("TN", column-major: A is k x m, B k x n),
 * each call timed alone with a pair of events after PEAK_WARMUP untimed ones. */
static float time_gemm(cublasHandle_t h, cudaStream_t st, cudaDataType in, cudaDataType out,
                       int m, int n, int k, const void *a, const void *b, void *c)
{
    const float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t ev[2 * PEAK_ITERS];
    for (int i = 0; i < 2 * PEAK_ITERS; i++)
        cuda_ok(cudaEventCreate(&ev[i]), "cudaEventCreate");
    for (int i = 0; i < PEAK_WARMUP + PEAK_ITERS; i++) {
        int t = i - PEAK_WARMUP;
        if (t >= 0)
            cuda_ok(cudaEventRecord(ev[2 * t], st), "cudaEventRecord");
        blas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, in, k, b, in, k,
                             &beta, c, out, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
        if (t >= 0)
            cuda_ok(cudaEventRecord(ev[2 * t + 1], st), "cudaEventRecord");
    }
    cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    float ms[PEAK_ITERS];
    for (int t = 0; t < PEAK_ITERS; t++)
        cuda_ok(cudaEventElapsedTime(&ms[t], ev[2 * t], ev[2 * t + 1]), "cudaEventElapsedTime");
    for (int i = 0; i < 2 * PEAK_ITERS; i++)
        cudaEventDestroy(ev[i]);
    qsort(ms, PEAK_ITERS, sizeof ms[0], cmp_float);
    return 0.5f * (ms[PEAK_ITERS / 2 - 1] + ms[PEAK_ITERS / 2]);
}

/* Random operands (uniform in [-1, 1): zeros would draw less power and clock
 * higher than real data). */
static void *device_random(size_t n, zt_dtype dt)
{
    float *x = oc_rand_f32((int64_t)n, -1, 1);
    void *h = oc_to_dtype(x, (int64_t)n, dt), *d = NULL;
    cuda_ok(cudaMalloc(&d, n * zt_dtype_size(dt)), "cudaMalloc");
    cuda_ok(cudaMemcpy(d, h, n * zt_dtype_size(dt), cudaMemcpyHostToDevice), "cudaMemcpy");
    free(x);
    free(h);
    return d;
}

/* The shapes: square ones and one wide, large enough to fill an H100's 132 SMs
 * with 128 x 256 tiles many times over. Prints each shape's median and, last,
 * the best as the peak; then fp32 (no TF32) at 8192^3 for the fp32 runs. */
int oc_gemm_peak(int device)
{
    static const int shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 16384, 4096}};
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    cublasHandle_t h;
    cudaStream_t st;
    blas_ok(cublasCreate(&h), "cublasCreate");
    cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    blas_ok(cublasSetStream(h, st), "cublasSetStream");
    blas_ok(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    size_t max_ab = 0, max_c = 0;
    for (int s = 0; s < 3; s++) {
        size_t m = (size_t)shapes[s][0], n = (size_t)shapes[s][1], k = (size_t)shapes[s][2];
        max_ab = m * k > max_ab ? m * k : max_ab;
        max_ab = k * n > max_ab ? k * n : max_ab;
        max_c = m * n > max_c ? m * n : max_c;
    }
    void *a = device_random(max_ab, ZT_BF16), *b = device_random(max_ab, ZT_BF16), *c = NULL;
    cuda_ok(cudaMalloc(&c, max_c * 2), "cudaMalloc");
    double peak = 0.0;
    for (int s = 0; s < 3; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float ms = time_gemm(h, st, CUDA_R_16BF, CUDA_R_16BF, m, n, k, a, b, c);
        double tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12;
        printf("gemm_bf16 m=%d n=%d k=%d median_ms %.3f tflops %.1f\n", m, n, k, (double)ms,
               tflops);
        peak = tflops > peak ? tflops : peak;
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    const int f = 8192;
    a = device_random((size_t)f * f, ZT_F32);
    b = device_random((size_t)f * f, ZT_F32);
    cuda_ok(cudaMalloc(&c, (size_t)f * f * 4), "cudaMalloc");
    float ms = time_gemm(h, st, CUDA_R_32F, CUDA_R_32F, f, f, f, a, b, c);
    double fp32 = 2.0 * f * f * (double)f / (ms * 1e-3) / 1e12;
    printf("gemm_fp32 m=%d n=%d k=%d median_ms %.3f tflops %.1f\n", f, f, f, (double)ms, fp32);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
    cudaStreamDestroy(st);
    printf("gemm_peak_tflops %.1f\n", peak);
    printf("gemm_peak_fp32_tflops %.1f\n", fp32);
    return 0;
}
