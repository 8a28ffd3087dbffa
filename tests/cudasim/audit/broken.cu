/*
 * broken.cu: kernels that break the SASS audit's rules on purpose, for
 * tests/cudasim/test_gpu_audit.sh, which compiles this file with nvcc and
 * checks that scripts/gpu_audit.py fails each one (and passes the control).
 * Never linked into zerotrain. extern "C" keeps the names unmangled, so the
 * test's launch logs can name them.
 *
 * Memory: none allocated. Collective: none.
 */
#include <cuda_bf16.h>

/* A dynamically indexed array too big for registers: local memory (a stack
 * frame, LDL/STL). */
extern "C" __global__ void audit_local_array(float *out, const int *idx, int n)
{
    float big[1024];
    for (int i = 0; i < 1024; i++)
        big[i] = out[(i * 7 + threadIdx.x) % n];
    out[threadIdx.x] = big[idx[threadIdx.x] & 1023];
}

/* 48 accumulators live at once under a 32-register cap (1024 threads, 2
 * blocks per SM): ptxas spills. */
extern "C" __global__ void __launch_bounds__(1024, 2) audit_register_spill(float *out, const float *in, int n)
{
    float acc[48];
#pragma unroll
    for (int a = 0; a < 48; a++)
        acc[a] = in[a];
    for (int i = 0; i < n; i++)
#pragma unroll
        for (int a = 0; a < 48; a++)
            acc[a] = fmaf(acc[a], in[i + a], acc[(a + 1) % 48]);
    float s = 0.0f;
#pragma unroll
    for (int a = 0; a < 48; a++)
        s += acc[a];
    out[threadIdx.x] = s;
}

/* A matrix product on the FMA pipe: what the tensor rule exists to catch
 * under an op the profile counts as tensor-core work. (m, k) x (k, n). */
extern "C" __global__ void audit_fma_gemm(float *c, const float *a, const float *b, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n)
        return;
    float s = 0.0f;
    for (int i = 0; i < k; i++)
        s = fmaf(a[row * k + i], b[i * n + col], s);
    c[row * n + col] = s;
}

/* The control: one warp's 16x8x16 bf16 tile product on the tensor cores
 * (mma.sync, HMMA in the SASS), which the tensor rule accepts. Fragments as
 * the PTX ISA lays them out for m16n8k16 (row-major A, column-major B). */
extern "C" __global__ void audit_mma_gemm(float *d, const unsigned *a, const unsigned *b)
{
    const int lane = threadIdx.x & 31;
    unsigned a0 = a[lane * 4], a1 = a[lane * 4 + 1], a2 = a[lane * 4 + 2], a3 = a[lane * 4 + 3];
    unsigned b0 = b[lane * 2], b1 = b[lane * 2 + 1];
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    d[lane * 4] = c0;
    d[lane * 4 + 1] = c1;
    d[lane * 4 + 2] = c2;
    d[lane * 4 + 3] = c3;
}

/* A tensor-core loop with a loop of runtime trips inside: the static count
 * of one iteration cannot say how often the inner one runs, so the loop
 * rule wants its trip count stated (INNER_TRIPS). */
extern "C" __global__ void audit_nested_mma(float *d, const unsigned *a, int n, int m)
{
    const int lane = threadIdx.x & 31;
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    for (int i = 0; i < n; i++) {
        unsigned a0 = a[i * 128 + lane * 4], a1 = a[i * 128 + lane * 4 + 1];
        for (int j = 0; j < m; j++) {
            unsigned b0 = a[j * 64 + lane * 2], b1 = a[j * 64 + lane * 2 + 1];
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %4, %5}, {%6, %7}, {%0, %1, %2, %3};"
                         : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                         : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
        }
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %4, %5}, {%5, %4}, {%0, %1, %2, %3};"
                     : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                     : "r"(a0), "r"(a1));
    }
    d[lane * 4] = c0 + c1 + c2 + c3;
}

/* Dynamic shared memory sized by the launch: with 200 KiB, one block of one
 * warp per SM (1.6% occupancy), below the floor. */
extern "C" __global__ void audit_low_occupancy(float *out, int n)
{
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        buf[i] = (float)i;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x * 33) % n];
}
