/*
 * sim_test_mma: engine/cuda/mma.cuh's primitives on the simulator against
 * scalar references. The fragment layouts are stated here a second time,
 * from the PTX ISA's tables ("Matrix Fragments for mma.m16n8k16 with floating
 * point type", "Warp-level matrix load instruction: ldmatrix"), each element
 * placed by its own formula, so that a layout the simulator got wrong shows
 * as a wrong product; tests/tools/mma_check.cu runs the same cases on a GPU.
 * Cases: mma (bf16 and fp16, random tiles), ldmatrix (x1, x2, x4, plain and
 * .trans, every lane's registers), ldmatrix feeding mma (A by x4, B by x2
 * from a transposed tile: the flash attention's pattern), cp.async (4, 8 and
 * 16 bytes, two groups, wait_group 1 then 0), and the misuses the simulator
 * must report: a read before the wait, a block ending with copies in flight.
 * Dynamic shared memory (zt_dynamic_shared): 64 KiB opted in and filled by
 * cp.async, undefined (0xff bytes) at the launch, and a write one byte past
 * the launch's size reported as an illegal address.
 */
#include "tests/cudasim/sim_test.h"

#include "engine/cuda/kernel_launch.cuh"
#include "engine/cuda/mma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

/* The PTX ISA's fragment maps, g = lane / 4, t = lane % 4. */
__host__ __device__ int a_row(int lane, int i) { return lane / 4 + 8 * ((i / 2) % 2); }
__host__ __device__ int a_col(int lane, int i) { return 2 * (lane % 4) + i % 2 + 8 * (i / 4); }
__host__ __device__ int b_row(int lane, int i) { return 2 * (lane % 4) + i % 2 + 8 * (i / 2); }
__host__ __device__ int b_col(int lane, int /*i*/) { return lane / 4; }
__host__ __device__ int c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
__host__ __device__ int c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

uint16_t to16(float v, bool bf16)
{
    return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                : __half_as_ushort(__float2half_rn(v));
}

float from16(uint16_t v, bool bf16)
{
    return bf16 ? __bfloat162float(__ushort_as_bfloat16(v)) : __half2float(__ushort_as_half(v));
}

/* One warp: fragments in (32 lanes x 4 A registers, 2 B, 4 C), D out. */
__global__ void k_mma(const uint32_t *a, const uint32_t *b, const float *c, float *d, int bf16)
{
    const int l = threadIdx.x;
    float out[4];
    if (bf16)
        zt_mma_16816<true>(out, a + 4 * l, b + 2 * l, c + 4 * l);
    else
        zt_mma_16816<false>(out, a + 4 * l, b + 2 * l, c + 4 * l);
    for (int i = 0; i < 4; i++)
        d[4 * l + i] = out[i];
}

int check_mma(bool bf16)
{
    float A[16][16], B[16][8], C[16][8];
    uint16_t A16[16][16], B16[16][8];
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) {
            A16[m][k] = to16((float)(rand() % 2001 - 1000) / 250.f, bf16);
            A[m][k] = from16(A16[m][k], bf16);
        }
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) {
            B16[k][n] = to16((float)(rand() % 2001 - 1000) / 250.f, bf16);
            B[k][n] = from16(B16[k][n], bf16);
        }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++)
            C[m][n] = (float)(rand() % 101 - 50);
    uint32_t fa[32][4] = {}, fb[32][2] = {};
    float fc[32][4];
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 8; i++)
            fa[l][i / 2] |= (uint32_t)A16[a_row(l, i)][a_col(l, i)] << (16 * (i % 2));
        for (int i = 0; i < 4; i++)
            fb[l][i / 2] |= (uint32_t)B16[b_row(l, i)][b_col(l, i)] << (16 * (i % 2));
        for (int i = 0; i < 4; i++)
            fc[l][i] = C[c_row(l, i)][c_col(l, i)];
    }
    uint32_t *da, *db;
    float *dc, *dd;
    ST_CUDA(cudaMalloc(&da, sizeof fa));
    ST_CUDA(cudaMalloc(&db, sizeof fb));
    ST_CUDA(cudaMalloc(&dc, sizeof fc));
    ST_CUDA(cudaMalloc(&dd, sizeof fc));
    ST_CUDA(cudaMemcpy(da, fa, sizeof fa, cudaMemcpyHostToDevice));
    ST_CUDA(cudaMemcpy(db, fb, sizeof fb, cudaMemcpyHostToDevice));
    ST_CUDA(cudaMemcpy(dc, fc, sizeof fc, cudaMemcpyHostToDevice));
    ZT_LAUNCH(1, 32, 0, 0, k_mma)(da, db, dc, dd, (int)bf16);
    float fd[32][4];
    ST_CUDA(cudaMemcpy(fd, dd, sizeof fd, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const int m = c_row(l, i), n = c_col(l, i);
            double ref = C[m][n], mag = fabs(C[m][n]);
            for (int k = 0; k < 16; k++) {
                ref += (double)A[m][k] * B[k][n];
                mag += fabs((double)A[m][k] * B[k][n]);
            }
            worst = fmax(worst, fabs(fd[l][i] - ref) / mag);
        }
    /* fp32 sums of 17 exact terms: a few ulps of the magnitude */
    ST_CHECK(worst < 1e-6, "mma %s: worst error %.3g of the magnitude, want < 1e-6",
             bf16 ? "bf16" : "fp16", worst);
    printf("mma %s: worst %.3g\n", bf16 ? "bf16" : "fp16", worst);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    cudaFree(dd);
    return st_failed;
}

/* Four 8 x 8 matrices of distinct values (matrix j, row r, column c:
 * 1024 j + 32 r + c) in shared memory; lane l points at row l % 8 of
 * matrix l / 8. Out: each lane's registers for x1, x2, x4, plain and .trans. */
__global__ void k_ldmatrix(uint32_t *out)
{
    __shared__ uint16_t tile[4][8][8];
    const int l = threadIdx.x;
    for (int r = 0; r < 8; r++)
        tile[l / 8][l % 8][r] = (uint16_t)(1024 * (l / 8) + 32 * (l % 8) + r);
    __syncwarp();
    const void *row = &tile[l / 8][l % 8][0];
    uint32_t r1[1], r2[2], r4[4], t1[1], t2[2], t4[4];
    zt_ldmatrix<1, false>(r1, row);
    zt_ldmatrix<2, false>(r2, row);
    zt_ldmatrix<4, false>(r4, row);
    zt_ldmatrix<1, true>(t1, row);
    zt_ldmatrix<2, true>(t2, row);
    zt_ldmatrix<4, true>(t4, row);
    uint32_t *o = out + 14 * l;
    o[0] = r1[0];
    o[1] = r2[0], o[2] = r2[1];
    o[3] = r4[0], o[4] = r4[1], o[5] = r4[2], o[6] = r4[3];
    o[7] = t1[0];
    o[8] = t2[0], o[9] = t2[1];
    o[10] = t4[0], o[11] = t4[1], o[12] = t4[2], o[13] = t4[3];
}

uint32_t want_pair(int j, int lane, bool trans)
{
    const int g = lane / 4, t = lane % 4;
    auto v = [&](int r, int c) { return (uint32_t)(1024 * j + 32 * r + c); };
    return trans ? v(2 * t, g) | v(2 * t + 1, g) << 16 : v(g, 2 * t) | v(g, 2 * t + 1) << 16;
}

int check_ldmatrix()
{
    uint32_t *d;
    ST_CUDA(cudaMalloc(&d, 32 * 14 * sizeof(uint32_t)));
    ZT_LAUNCH(1, 32, 0, 0, k_ldmatrix)(d);
    uint32_t got[32][14];
    ST_CUDA(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
    static const int slot[2][3] = {{0, 1, 3}, {7, 8, 10}};
    static const int nums[3] = {1, 2, 4};
    int bad = 0;
    for (int tr = 0; tr < 2; tr++)
        for (int s = 0; s < 3; s++)
            for (int j = 0; j < nums[s]; j++)
                for (int l = 0; l < 32; l++) {
                    uint32_t w = want_pair(j, l, tr), g = got[l][slot[tr][s] + j];
                    if (g != w && bad++ < 8)
                        printf("ldmatrix x%d%s matrix %d lane %d: %#x, want %#x\n", nums[s],
                               tr ? ".trans" : "", j, l, g, w);
                }
    ST_CHECK(bad == 0, "ldmatrix: %d registers wrong", bad);
    cudaFree(d);
    return st_failed;
}

/* The flash attention's pattern: S = Q K^T for a 16 x 16 Q tile and an
 * 8 x 16 K tile, both row-major bf16 in shared memory: A = Q by ldmatrix.x4
 * (lane l: row l % 16, columns 8 (l / 16)), B = K^T by ldmatrix.x2 of K's
 * rows (lane l: row l % 8, columns 8 ((l / 8) % 2)). */
__global__ void k_qk(const uint16_t *q, const uint16_t *k, float *s)
{
    __shared__ uint16_t sq[16][16], sk[8][16];
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32)
        sq[i / 16][i % 16] = q[i];
    for (int i = l; i < 128; i += 32)
        sk[i / 16][i % 16] = k[i];
    __syncwarp();
    uint32_t a[4], b[2];
    zt_ldmatrix<4, false>(a, &sq[l % 16][8 * (l / 16)]);
    zt_ldmatrix<2, false>(b, &sk[l % 8][8 * ((l / 8) % 2)]);
    const float zero[4] = {0, 0, 0, 0};
    float d[4];
    zt_mma_16816<true>(d, a, b, zero);
    for (int i = 0; i < 4; i++)
        s[8 * c_row(l, i) + c_col(l, i)] = d[i];
}

int check_qk()
{
    uint16_t q[256], k[128];
    float fq[256], fk[128];
    for (int i = 0; i < 256; i++)
        fq[i] = from16(q[i] = to16((float)(rand() % 201 - 100) / 64.f, true), true);
    for (int i = 0; i < 128; i++)
        fk[i] = from16(k[i] = to16((float)(rand() % 201 - 100) / 64.f, true), true);
    uint16_t *dq, *dk;
    float *ds;
    ST_CUDA(cudaMalloc(&dq, sizeof q));
    ST_CUDA(cudaMalloc(&dk, sizeof k));
    ST_CUDA(cudaMalloc(&ds, 128 * sizeof(float)));
    ST_CUDA(cudaMemcpy(dq, q, sizeof q, cudaMemcpyHostToDevice));
    ST_CUDA(cudaMemcpy(dk, k, sizeof k, cudaMemcpyHostToDevice));
    ZT_LAUNCH(1, 32, 0, 0, k_qk)(dq, dk, ds);
    float s[128];
    ST_CUDA(cudaMemcpy(s, ds, sizeof s, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double ref = 0, mag = 1e-30;
            for (int j = 0; j < 16; j++) {
                ref += (double)fq[16 * m + j] * fk[16 * n + j];
                mag += fabs((double)fq[16 * m + j] * fk[16 * n + j]);
            }
            worst = fmax(worst, fabs(s[8 * m + n] - ref) / mag);
        }
    ST_CHECK(worst < 1e-6, "ldmatrix + mma (Q K^T): worst %.3g, want < 1e-6", worst);
    printf("ldmatrix + mma (Q K^T): worst %.3g\n", worst);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(ds);
    return st_failed;
}

/* 64 threads copy 1,792 bytes in two groups (16-, 8- and 4-byte copies);
 * wait_group 1 lands the first, wait_group 0 the second. mode 1 reads a
 * second-group byte before its wait, mode 2 never waits for the second. */
__global__ void k_cp_async(const uint8_t *src, uint8_t *dst, int mode)
{
    __shared__ uint4 s16[112]; /* 1,792 bytes, 16-byte aligned */
    uint8_t *s = reinterpret_cast<uint8_t *>(s16);
    const int t = threadIdx.x;
    zt_cp_async<16>(s + 16 * t, src + 16 * t);                   /* bytes 0..1023 */
    zt_cp_async<4>(s + 1024 + 4 * t, src + 1024 + 4 * t);        /* 1024..1279 */
    zt_cp_async_commit();
    zt_cp_async<8>(s + 1280 + 8 * t, src + 1280 + 8 * t);        /* 1280..1791 */
    zt_cp_async_commit();
    zt_cp_async_wait<1>();
    if (mode == 1 && t == 0)
        dst[1791] = s[1280]; /* its own copy of the second group, still in flight */
    if (mode == 2)
        return;
    zt_cp_async_wait<0>();
    __syncthreads();
    for (int i = t; i < 1792; i += 64)
        dst[i] = s[i];
}

int check_cp_async(const char *arg)
{
    const int mode = !strcmp(arg, "early") ? 1 : !strcmp(arg, "nowait") ? 2 : 0;
    uint8_t host[1792], back[1792];
    for (int i = 0; i < 1792; i++)
        host[i] = (uint8_t)(i * 7 + 3);
    uint8_t *src, *dst;
    ST_CUDA(cudaMalloc(&src, sizeof host));
    ST_CUDA(cudaMalloc(&dst, sizeof host));
    ST_CUDA(cudaMemcpy(src, host, sizeof host, cudaMemcpyHostToDevice));
    ZT_LAUNCH(1, 64, 0, 0, k_cp_async)(src, dst, mode);
    cudaError_t rc = cudaDeviceSynchronize();
    if (mode) {
        ST_CHECK(rc == cudaErrorLaunchFailure, "cp.async %s: %s, want cudaErrorLaunchFailure", arg,
                 cudaGetErrorString(rc));
        return st_failed;
    }
    ST_CUDA(rc);
    ST_CUDA(cudaMemcpy(back, dst, sizeof back, cudaMemcpyDeviceToHost));
    ST_CHECK(memcmp(host, back, sizeof host) == 0, "cp.async: the copied bytes differ");
    cudaFree(src);
    cudaFree(dst);
    return st_failed;
}

/* bytes of src through the launch's dynamic shared memory (as many) into
 * dst, after dst[bytes] = its last byte as the launch found it; mode 1 also
 * writes one byte past its end. */
__global__ void k_dynamic(const uint8_t *src, uint8_t *dst, int bytes, int mode)
{
    uint8_t *s = reinterpret_cast<uint8_t *>(zt_dynamic_shared());
    const int t = threadIdx.x;
    if (t == 0)
        dst[bytes] = s[bytes - 1];
    __syncthreads();
    for (int i = 16 * t; i < bytes; i += 16 * (int)blockDim.x)
        zt_cp_async<16>(s + i, src + i);
    zt_cp_async_commit();
    zt_cp_async_wait<0>();
    __syncthreads();
    if (mode == 1 && t == 0)
        s[bytes] = 1;
    for (int i = t; i < bytes; i += (int)blockDim.x)
        dst[i] = s[bytes - 1 - i];
}

int check_dynamic(const char *arg)
{
    const int bytes = 64 * 1024, mode = !strcmp(arg, "dynamic-overrun");
    uint8_t *host = static_cast<uint8_t *>(malloc(bytes)), *back = static_cast<uint8_t *>(malloc(bytes + 1));
    for (int i = 0; i < bytes; i++)
        host[i] = (uint8_t)(i * 13 + 5);
    uint8_t *src, *dst;
    ST_CUDA(cudaMalloc(&src, bytes));
    ST_CUDA(cudaMalloc(&dst, bytes + 1));
    ST_CUDA(cudaMemcpy(src, host, bytes, cudaMemcpyHostToDevice));
    ST_CUDA(zt_shared_optin(k_dynamic, bytes));
    ZT_LAUNCH(1, 64, bytes, 0, k_dynamic)(src, dst, bytes, mode);
    cudaError_t rc = cudaDeviceSynchronize();
    if (mode) {
        ST_CHECK(rc == cudaErrorIllegalAddress, "a write past the dynamic shared memory: %s",
                 cudaGetErrorString(rc));
        return st_failed;
    }
    ST_CUDA(rc);
    ST_CUDA(cudaMemcpy(back, dst, bytes + 1, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < bytes; i++)
        wrong += back[i] != host[bytes - 1 - i];
    ST_CHECK(wrong == 0, "dynamic shared memory: %d of %d bytes came back wrong", wrong, bytes);
    ST_CHECK(back[bytes] == 0xff, "dynamic shared memory at the launch: %#x, want 0xff",
             back[bytes]);
    cudaFree(src);
    cudaFree(dst);
    free(host);
    free(back);
    return st_failed;
}

} // namespace

int st_mma(const char *arg)
{
    srand(7);
    if (!strcmp(arg, "mma"))
        return check_mma(true) | check_mma(false);
    if (!strcmp(arg, "ldmatrix"))
        return check_ldmatrix() | check_qk();
    if (!strncmp(arg, "dynamic", 7))
        return check_dynamic(arg);
    return check_cp_async(arg);
}
