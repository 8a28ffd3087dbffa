/*
 * sim_test: the runtime and kernel cases of the CUDA simulator's tests
 * (sim_test.h says how they run): launch limits, pointer arguments, shared
 * memory with barriers, warp operations, stream ordering with events, the
 * race checker, illegal accesses and barrier misuse, copies and memory.
 *
 *     build/sim/sim-test CASE        (build/sim/sim-test list: the cases)
 *
 * Memory: each case frees its buffers unless it has failed the device.
 * Collective: only the nccl cases (sim_test_lib.cu).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_test.h"

int st_failed;

namespace {

__global__ void k_noop(int *p)
{
    if (p && threadIdx.x == 0)
        p[blockIdx.x] = 1;
}

__global__ void k_fill(float *x, int64_t n, float v)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = v;
}

__global__ void k_scale_copy(float *out, const float *in, int64_t n, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a * in[i];
}

/* One sum per block: strided partial sums, a shared-memory tree down to a
 * warp, then shuffles. */
__global__ void k_block_sum(float *out, const float *in, int64_t n)
{
    __shared__ float sh[256];
    float v = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        v += in[i];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s >= 32; s /= 2) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        v = sh[threadIdx.x];
        for (int o = 16; o > 0; o /= 2)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0)
            out[blockIdx.x] = v;
    }
}

/* Each thread records what seven warp operations gave it. */
__global__ void k_warp_ops(unsigned *out)
{
    const unsigned lane = threadIdx.x & 31;
    unsigned *o = out + 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    unsigned sum = lane;
    for (int m = 16; m > 0; m /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
    o[0] = sum;
    o[1] = __ballot_sync(0xffffffffu, lane % 3 == 0);
    o[2] = (unsigned)__any_sync(0xffffffffu, lane == 5);
    o[3] = (unsigned)__all_sync(0xffffffffu, lane < 31);
    o[4] = __shfl_down_sync(0xffffffffu, lane, 1);
    o[5] = __shfl_sync(0xffffffffu, lane * 10, 7);
    o[6] = __shfl_up_sync(0xffffffffu, lane, 2, 16);
    __syncwarp();
    o[7] = (unsigned)__shfl_xor_sync(0xffffffffu, (double)lane * 0.5, 1);
}

/* Lanes 16-31 leave before a full-mask shuffle. */
__global__ void k_exited_lane(float *out)
{
    if (threadIdx.x >= 16)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* Half a warp in a shuffle, the other half at __syncthreads: never completes. */
__global__ void k_divergent(float *out)
{
    if (threadIdx.x < 16)
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    else
        __syncthreads();
}

__global__ void k_write_at(float *p, int64_t i)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        p[i] = 1.0f;
}

struct copy_functor {
    int64_t n;
    float *dst;
    const float *src;
};

__global__ void k_functor(copy_functor f)
{
    for (int64_t i = threadIdx.x; i < f.n; i += blockDim.x)
        f.dst[i] = f.src[i];
}

float *dev_floats(int64_t n)
{
    void *p = NULL;
    ST_CUDA(cudaMalloc(&p, (size_t)n * sizeof(float)));
    return static_cast<float *>(p);
}

/* ---- cases ---- */

int t_limits(void)
{
    int count = 0;
    ST_CUDA(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    ST_CUDA(cudaGetDeviceProperties(&prop, 0));
    ST_CHECK(prop.major == 9 && prop.minor == 0 && prop.multiProcessorCount == 132 &&
                 prop.sharedMemPerBlock == 48 * 1024 && prop.maxThreadsPerBlock == 1024,
             "an H100's description: %d.%d, %d SMs", prop.major, prop.minor,
             prop.multiProcessorCount);
    cudaStream_t s;
    ST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct {
        dim3 grid, block;
        size_t shared;
        cudaError_t want;
    } cases[] = {
        {dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration},
        {dim3(1), dim3(1024, 2), 0, cudaErrorInvalidConfiguration},
        {dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration},
        {dim3(1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
        {dim3(1, 1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
        {dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration},
        {dim3(1), dim3(32), 48 * 1024 + 1, cudaErrorInvalidValue},
        {dim3(1), dim3(1024), 48 * 1024, cudaSuccess},
        {dim3(2, 65535), dim3(4), 0, cudaSuccess},
    };
    for (const auto &c : cases) {
        ZT_LAUNCH(c.grid, c.block, c.shared, s, k_noop)(nullptr);
        cudaError_t rc = cudaGetLastError();
        ST_CHECK(rc == c.want, "grid (%u, %u, %u) block (%u, %u, %u) shared %zu: %s, want %s",
                 c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.shared,
                 cudaGetErrorName(rc), cudaGetErrorName(c.want));
        ST_CHECK(cudaGetLastError() == cudaSuccess, "a launch error is not sticky");
    }
    ST_CHECK(cudaFuncSetAttribute(k_noop, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  227 * 1024 + 1) == cudaErrorInvalidValue,
             "opt-in beyond 227 KiB refused");
    cudaGetLastError();
    ST_CUDA(cudaFuncSetAttribute(k_noop, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 100 * 1024));
    ZT_LAUNCH(1, 32, 100 * 1024, s, k_noop)(nullptr);
    ST_CHECK(cudaGetLastError() == cudaSuccess, "100 KiB after the opt-in");
    ZT_LAUNCH(1, 32, 100 * 1024 + 1, s, k_noop)(nullptr);
    ST_CHECK(cudaGetLastError() == cudaErrorInvalidValue, "past the opt-in");
    ZT_LAUNCH(1, 32, 0, (cudaStream_t)0x1234, k_noop)(nullptr);
    ST_CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle, "a made-up stream");
    ST_CUDA(cudaStreamSynchronize(s));
    ST_CUDA(cudaStreamDestroy(s));
    ST_CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle, "a destroyed stream");
    cudaGetLastError();
    ST_CUDA(cudaDeviceSynchronize());
    return st_failed;
}

/* A host pointer handed to a kernel, as `how` says; the script checks the
 * report names the kernel and the argument. */
int t_pointer(const char *how)
{
    float *dev = dev_floats(64), *host = static_cast<float *>(calloc(64, sizeof(float)));
    void *pinned = NULL;
    ST_CUDA(cudaMallocHost(&pinned, 64 * sizeof(float)));
    if (!strcmp(how, "plain")) {
        ZT_LAUNCH(1, 32, 0, 0, k_fill)(host, 64, 1.0f);
    } else if (!strcmp(how, "pinned")) {
        ZT_LAUNCH(1, 32, 0, 0, k_fill)(static_cast<float *>(pinned), 64, 1.0f);
    } else if (!strcmp(how, "functor")) {
        ZT_LAUNCH(1, 32, 0, 0, k_functor)(copy_functor{64, dev, host});
    } else if (!strcmp(how, "freed")) {
        float *gone = dev_floats(64);
        ST_CUDA(cudaFree(gone));
        ZT_LAUNCH(1, 32, 0, 0, k_fill)(gone, 64, 1.0f);
    } else {
        ZT_LAUNCH(1, 32, 0, 0, k_functor)(copy_functor{32, dev, dev + 32});
        ST_CUDA(cudaGetLastError());
        ST_CUDA(cudaDeviceSynchronize());
        return st_failed;
    }
    ST_CHECK(cudaGetLastError() == cudaErrorIllegalAddress, "the launch fails the device");
    ST_CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "the error is sticky");
    return st_failed;
}

int t_shared(void)
{
    const int64_t n = 10000;
    float *h = static_cast<float *>(malloc(n * sizeof(float)));
    for (int64_t i = 0; i < n; i++)
        h[i] = (float)(i % 97);
    float *in = dev_floats(n), *out = dev_floats(3);
    ST_CUDA(cudaMemcpy(in, h, n * sizeof(float), cudaMemcpyHostToDevice));
    ZT_LAUNCH(3, 256, 0, 0, k_block_sum)(out, in, n);
    ST_CUDA(cudaGetLastError());
    float got[3];
    ST_CUDA(cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 3; b++) {
        float want = 0.0f;
        for (int64_t i = b * 256; i < n; i += 3 * 256)
            for (int64_t j = i; j < i + 256 && j < n; j++)
                want += h[j];
        ST_CHECK(got[b] == want, "block %d sums to %g, want %g", b, got[b], want);
    }
    unsigned *ops = NULL;
    ST_CUDA(cudaMalloc(&ops, 2 * 64 * 8 * sizeof(unsigned)));
    ZT_LAUNCH(2, 64, 0, 0, k_warp_ops)(ops);
    unsigned r[2 * 64 * 8];
    ST_CUDA(cudaMemcpy(r, ops, sizeof r, cudaMemcpyDeviceToHost));
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; l += 3)
        ballot |= 1u << l;
    for (unsigned t = 0; t < 128; t++) {
        unsigned lane = t % 32, *o = r + 8 * t;
        unsigned up = lane % 16 >= 2 ? lane - 2 : lane;
        ST_CHECK(o[0] == 496 && o[1] == ballot && o[2] == 1 && o[3] == 0 &&
                     o[4] == (lane < 31 ? lane + 1 : lane) && o[5] == 70 && o[6] == up &&
                     o[7] == (unsigned)((lane ^ 1) * 0.5),
                 "thread %u: %u %#x %u %u %u %u %u %u", t, o[0], o[1], o[2], o[3], o[4], o[5],
                 o[6], o[7]);
    }
    ST_CUDA(cudaFree(ops));
    ST_CUDA(cudaFree(in));
    ST_CUDA(cudaFree(out));
    free(h);
    return st_failed;
}

/* Producer on a, consumer on b, ordered by events (and, for the reuse of x,
 * the other way round), over several rounds. */
int t_events(void)
{
    const int64_t n = 1 << 14;
    cudaStream_t a, b;
    cudaEvent_t made, used, t0, t1;
    ST_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    ST_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    ST_CUDA(cudaEventCreateWithFlags(&made, cudaEventDisableTiming));
    ST_CUDA(cudaEventCreateWithFlags(&used, cudaEventDisableTiming));
    ST_CUDA(cudaEventCreate(&t0));
    ST_CUDA(cudaEventCreate(&t1));
    ST_CHECK(cudaEventQuery(made) == cudaSuccess, "an event never recorded is complete");
    float *x = dev_floats(n), *y = dev_floats(n), *host = NULL;
    ST_CUDA(cudaMallocHost(&host, n * sizeof(float)));
    ST_CUDA(cudaEventRecord(t0, a));
    for (int round = 0; round < 8; round++) {
        ST_CUDA(cudaStreamWaitEvent(a, used, 0)); /* b is done with x */
        ZT_LAUNCH(16, 256, 0, a, k_fill)(x, n, (float)round);
        ST_CUDA(cudaEventRecord(made, a));
        ST_CUDA(cudaStreamWaitEvent(b, made, 0));
        ZT_LAUNCH(16, 256, 0, b, k_scale_copy)(y, x, n, 2.0f);
        ST_CUDA(cudaEventRecord(used, b));
        ST_CUDA(cudaMemcpyAsync(host, y, n * sizeof(float), cudaMemcpyDeviceToHost, b));
        ST_CUDA(cudaStreamSynchronize(b));
        for (int64_t i = 0; i < n; i += 1021)
            ST_CHECK(host[i] == 2.0f * round, "round %d: y[%lld] = %g", round, (long long)i,
                     host[i]);
    }
    ST_CUDA(cudaEventRecord(t1, a));
    ST_CUDA(cudaEventSynchronize(t1));
    float ms = -1;
    ST_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    ST_CHECK(ms >= 0, "elapsed %g ms", ms);
    ST_CHECK(cudaEventElapsedTime(&ms, made, used) == cudaErrorInvalidResourceHandle,
             "no time from events without timing");
    cudaGetLastError();
    /* A host synchronisation orders too: a's fill, then b reads x. */
    ZT_LAUNCH(16, 256, 0, a, k_fill)(x, n, 5.0f);
    ST_CUDA(cudaStreamSynchronize(a));
    ZT_LAUNCH(16, 256, 0, b, k_scale_copy)(y, x, n, 1.0f);
    ST_CUDA(cudaMemcpyAsync(host, y, n * sizeof(float), cudaMemcpyDeviceToHost, b));
    ST_CUDA(cudaStreamSynchronize(b));
    ST_CHECK(host[n - 1] == 5.0f, "after the host's sync: %g", host[n - 1]);
    ST_CUDA(cudaFree(x));
    ST_CUDA(cudaFree(y));
    ST_CUDA(cudaFreeHost(host));
    return st_failed;
}

/* Two streams and no wait between them: the race checker must fail the
 * device whichever ran first. */
int t_race(const char *how)
{
    const int64_t n = 4096;
    cudaStream_t a, b;
    ST_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    ST_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    float *x = dev_floats(n), *y = dev_floats(n);
    if (!strcmp(how, "raw")) {
        ZT_LAUNCH(4, 256, 0, a, k_fill)(x, n, 1.0f);
        ZT_LAUNCH(4, 256, 0, b, k_scale_copy)(y, x, n, 2.0f);
    } else if (!strcmp(how, "war")) {
        ZT_LAUNCH(4, 256, 0, a, k_scale_copy)(y, x, n, 2.0f);
        ZT_LAUNCH(4, 256, 0, b, k_fill)(x, n, 1.0f);
    } else if (!strcmp(how, "waw")) {
        ZT_LAUNCH(4, 256, 0, a, k_fill)(x + n / 2, n / 2, 1.0f);
        ST_CUDA(cudaMemsetAsync(x, 0, n * sizeof(float), b));
    } else {
        ZT_LAUNCH(4, 256, 0, a, k_fill)(x, n, 1.0f);
        ST_CUDA(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, b));
    }
    cudaError_t rc = cudaDeviceSynchronize();
    ST_CHECK(rc == cudaErrorLaunchFailure, "the race fails the device: %s", cudaGetErrorName(rc));
    return st_failed;
}

int t_illegal(void)
{
    float *p = dev_floats(100);
    ZT_LAUNCH(1, 32, 0, 0, k_write_at)(p, 100);
    ST_CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "one past the end");
    return st_failed;
}

int t_warp_misuse(const char *how)
{
    float *p = dev_floats(64);
    if (!strcmp(how, "exited"))
        ZT_LAUNCH(1, 32, 0, 0, k_exited_lane)(p);
    else
        ZT_LAUNCH(1, 64, 0, 0, k_divergent)(p);
    ST_CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "the kernel fails");
    return st_failed;
}

int t_memory(void)
{
    size_t free_b = 0, total = 0;
    ST_CUDA(cudaMemGetInfo(&free_b, &total));
    ST_CHECK(total == ((size_t)256 << 20), "ZT_SIM_DEVICE_MEMORY_MB=256: total %zu", total);
    void *big = NULL;
    ST_CHECK(cudaMalloc(&big, total + 1) == cudaErrorMemoryAllocation, "too big");
    ST_CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "the last error");
    ST_CHECK(cudaGetLastError() == cudaSuccess, "an allocation failure is not sticky");
    float *d = dev_floats(256);
    float src[256], back[256];
    for (int i = 0; i < 256; i++)
        src[i] = (float)i;
    cudaStream_t s;
    ST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* A pageable source is staged by the call: changing it afterwards does
     * not change what lands on the device. */
    ST_CUDA(cudaMemcpyAsync(d, src, sizeof src, cudaMemcpyDefault, s));
    src[0] = -1;
    /* A pageable destination is written when the call returns. */
    ST_CUDA(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s));
    ST_CHECK(back[0] == 0.0f && back[255] == 255.0f, "copied back: %g %g", back[0], back[255]);
    ST_CHECK(cudaMemcpyAsync(d, src, sizeof src, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidValue,
             "a kind that does not match the pointers");
    ST_CHECK(cudaMemcpyAsync(d + 1, d, 64, cudaMemcpyDefault, s) == cudaErrorInvalidValue,
             "overlapping ranges");
    ST_CHECK(cudaMemsetAsync(d, 0, 257 * sizeof(float), s) == cudaErrorInvalidValue,
             "a memset past the end");
    cudaGetLastError();
    ST_CUDA(cudaFree(d));
    ST_CHECK(cudaFree(d) == cudaErrorInvalidValue, "a double free");
    cudaGetLastError();
    ST_CUDA(cudaDeviceSynchronize());
    return st_failed;
}

int t_uuid(void)
{
    int count = 0;
    ST_CUDA(cudaGetDeviceCount(&count));
    for (int d = 0; d < count; d++) {
        cudaDeviceProp prop;
        ST_CUDA(cudaGetDeviceProperties(&prop, d));
        printf("uuid %d ", d);
        for (int i = 0; i < 16; i++)
            printf("%02x", (unsigned char)prop.uuid.bytes[i]);
        printf("\n");
    }
    return st_failed;
}

} // namespace

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    const char *arg = argc > 2 ? argv[2] : "";
    int rc;
    if (!strcmp(c, "limits"))
        rc = t_limits();
    else if (!strcmp(c, "pointer"))
        rc = t_pointer(arg);
    else if (!strcmp(c, "shared"))
        rc = t_shared();
    else if (!strcmp(c, "events"))
        rc = t_events();
    else if (!strcmp(c, "race"))
        rc = t_race(arg);
    else if (!strcmp(c, "illegal"))
        rc = t_illegal();
    else if (!strcmp(c, "warp"))
        rc = t_warp_misuse(arg);
    else if (!strcmp(c, "memory"))
        rc = t_memory();
    else if (!strcmp(c, "uuid"))
        rc = t_uuid();
    else if (!strcmp(c, "cublas"))
        rc = st_cublas();
    else if (!strcmp(c, "nccl"))
        rc = st_nccl();
    else if (!strcmp(c, "nccl-hang"))
        rc = st_nccl_hang();
    else if (!strcmp(c, "nccl-dup"))
        rc = st_nccl_dup();
    else if (!strcmp(c, "perf"))
        rc = st_perf();
    else if (!strcmp(c, "mma"))
        rc = st_mma(arg);
    else {
        fprintf(stderr, "usage: sim-test limits | pointer plain|pinned|functor|freed|ok | shared "
                        "| events | race raw|war|waw|copy | illegal | warp exited|divergent | "
                        "memory | uuid | cublas | nccl | nccl-hang | nccl-dup | perf "
                        "| mma mma|ldmatrix|cp-async|early|nowait|dynamic|dynamic-overrun\n");
        return 2;
    }
    printf("%s %s: %s\n", c, arg, rc ? "FAIL" : "ok");
    return rc;
}
