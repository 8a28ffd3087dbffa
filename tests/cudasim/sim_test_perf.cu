/*
 * sim_test_perf: the performance counters (ZT_SIM_PERF=1, sim/perf.cc)
 * against counts worked out by hand for access patterns whose cost on a GPU
 * is textbook: a coalesced warp, a strided one, a loop, and shared memory
 * without conflicts, with a 2-way and a 32-way conflict, a broadcast and
 * 16-byte accesses; ldmatrix x4 on padded and on unpadded rows, a warp's
 * 16-byte cp.async copies; atomics (one request each, as the one
 * instruction they are, float2's included), dynamic shared memory, and a
 * warp's mma.sync instructions. This file stands in for --profile: it names the op each
 * launch belongs to and collects what the simulator reports for it.
 */
#include "tests/cudasim/sim_test.h"

#include "engine/cuda/kernel_launch.cuh"
#include "engine/cuda/mma.cuh"

#include <stdint.h>
#include <string.h>

#include <map>
#include <string>

namespace {

const char *g_op;
std::map<std::string, std::map<std::string, unsigned long long>> g_counts;

__global__ void k_copy(const float *in, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i];
}

__global__ void k_strided(const float *in, float *out)
{
    out[threadIdx.x] = in[threadIdx.x * 32]; /* 128 bytes apart: a line per lane */
}

__global__ void k_loop(const float *in, float *out)
{
    float acc = 0.f;
    for (int i = 0; i < 4; i++)
        acc += in[i * 32 + threadIdx.x];
    out[threadIdx.x] = acc;
}

__global__ void k_shared(float *out)
{
    __shared__ float s[1024];
    __shared__ float4 q[32];
    const unsigned t = threadIdx.x;
    s[t] = (float)t;                       /* 1 wavefront */
    q[t] = make_float4(1.f, 2.f, 3.f, 4.f); /* 4 wavefronts, no conflict */
    __syncthreads();
    float a = s[(t * 2) % 1024];  /* 2 words a bank: 2 wavefronts, 1 conflict */
    float b = s[0];               /* a broadcast: 1 */
    float c = s[t * 32];          /* one bank, 32 words: 32 wavefronts, 31 conflicts */
    float4 d = q[t];              /* 4 */
    out[t] = a + b + c + d.x + d.y + d.z + d.w;
}

/* ldmatrix x4 of a warp over 32 rows of 16 bytes: at a stride of 144 bytes
 * (rows padded by 16) the 8 rows of each matrix fall in distinct banks, 4
 * wavefronts; at 128 bytes every row starts in bank 0, and banks 0-3 hold
 * 32 words each: 32 wavefronts, 28 conflicts. Then cp.async: each lane 16
 * bytes of one 512-byte run, a global request of 16 sectors in 4 lines and a
 * shared one of 4 wavefronts. */
__global__ void k_mma_mem(const uint4 *in, uint32_t *out)
{
    __shared__ uint4 pad[32 * 9], flat[32 * 8], dst[32];
    const unsigned t = threadIdx.x;
    for (unsigned i = t; i < 32 * 9; i += 32) /* 9 requests of 4 */
        pad[i] = make_uint4(i, i, i, i);
    for (unsigned i = t; i < 32 * 8; i += 32) /* 8 of 4 */
        flat[i] = make_uint4(i, i, i, i);
    __syncthreads();
    uint32_t a[4], b[4];
    zt_ldmatrix<4, false>(a, &pad[t * 9]);
    zt_ldmatrix<4, false>(b, &flat[t * 8]);
    zt_cp_async<16>(&dst[t], &in[t]);
    zt_cp_async_commit();
    zt_cp_async_wait<0>();
    out[t] = a[0] + b[0] + dst[t].x; /* a word every 16 bytes: 4 wavefronts, 3 conflicts */
}

/* A warp's atomicAdd of a float each (4 sectors in a line), of a float2
 * each at acc + 64 (8 sectors in 2 lines), then a word each of dynamic
 * shared memory written and read back (a wavefront each) and stored. */
__global__ void k_atomics(float *acc, float *out)
{
    const unsigned t = threadIdx.x;
    atomicAdd(&acc[t], 1.0f);
    atomicAdd(reinterpret_cast<float2 *>(acc + 64) + t, make_float2(1.0f, 2.0f));
    uint32_t *d = reinterpret_cast<uint32_t *>(zt_dynamic_shared());
    d[t] = t;
    __syncthreads();
    out[t] = (float)d[31 - t];
}

/* Two mma.sync of a warp (operands from registers): two tensor instructions. */
__global__ void k_two_mma(float *out)
{
    const uint32_t a[4] = {threadIdx.x, 1u, 2u, 3u}, b[2] = {4u, 5u};
    float c[4] = {};
    zt_mma_16816<true>(c, a, b, c);
    zt_mma_16816<true>(c, a, b, c);
    out[threadIdx.x] = c[0];
}

/* What must hold for op: every counter named, and the others zero. */
void expect(const char *op, const std::map<std::string, unsigned long long> &want)
{
    const auto &got = g_counts[op];
    for (const auto &kv : want) {
        auto it = got.find(kv.first);
        unsigned long long v = it == got.end() ? 0 : it->second;
        ST_CHECK(v == kv.second, "%s: %s %llu, want %llu", op, kv.first.c_str(), v, kv.second);
    }
    for (const auto &kv : got)
        printf("%s %s %llu\n", op, kv.first.c_str(), kv.second);
}

template <class F> void in_op(const char *op, F f)
{
    g_op = op;
    f();
    g_op = NULL;
    ST_CUDA(cudaDeviceSynchronize());
}

} // namespace

/* What --profile provides the simulator (engine/monitor/profile.h). */
extern "C" const char *zt_profile_current_op(void) { return g_op; }
extern "C" void zt_profile_device_counts(const char *op, const char *const *names,
                                         const uint64_t *values, int n)
{
    for (int i = 0; i < n; i++)
        g_counts[op][names[i]] += values[i];
}

int st_perf(void)
{
    float *in, *out;
    ST_CUDA(cudaMalloc(&in, 32 * 32 * sizeof(float)));
    ST_CUDA(cudaMalloc(&out, 64 * sizeof(float)));
    ST_CHECK((uintptr_t)in % 128 == 0 && (uintptr_t)out % 128 == 0, "allocations 128-aligned");
    ST_CUDA(cudaMemsetAsync(in, 0, 32 * 32 * sizeof(float), 0));
    in_op("copy", [&] { ZT_LAUNCH(2, 32, 0, 0, k_copy)(in, out); });
    in_op("strided", [&] { ZT_LAUNCH(1, 32, 0, 0, k_strided)(in, out); });
    in_op("loop", [&] { ZT_LAUNCH(1, 32, 0, 0, k_loop)(in, out); });
    in_op("shared", [&] { ZT_LAUNCH(1, 32, 0, 0, k_shared)(out); });
    in_op("mma_mem", [&] {
        ZT_LAUNCH(1, 32, 0, 0, k_mma_mem)(reinterpret_cast<const uint4 *>(in),
                                          reinterpret_cast<uint32_t *>(out));
    });
    in_op("atomics", [&] { ZT_LAUNCH(1, 32, 128, 0, k_atomics)(in, out); });
    in_op("mma", [&] { ZT_LAUNCH(1, 32, 0, 0, k_two_mma)(out); });
    ZT_LAUNCH(1, 32, 0, 0, k_copy)(in, out); /* outside any op: counted nowhere */
    ST_CUDA(cudaDeviceSynchronize());
    /* Two blocks of one warp: a load and a store each, 4 sectors in 1 line. */
    expect("copy", {{"launches", 1}, {"global_requests", 4}, {"global_sectors", 16},
                    {"global_wavefronts", 4}, {"dram_sectors", 16}, {"shared_requests", 0}});
    /* The load: 32 lines of one sector; the store: 1 line of 4. */
    expect("strided", {{"launches", 1}, {"global_requests", 2}, {"global_sectors", 36},
                       {"global_wavefronts", 33}, {"dram_sectors", 36}});
    /* Four coalesced loads (the k-th pass of each lane is one request) and the store. */
    expect("loop", {{"launches", 1}, {"global_requests", 5}, {"global_sectors", 20},
                    {"global_wavefronts", 5}, {"dram_sectors", 20}});
    expect("shared", {{"launches", 1}, {"shared_requests", 6}, {"shared_wavefronts", 44},
                      {"shared_bank_conflicts", 32}, {"global_requests", 1},
                      {"global_sectors", 4}, {"dram_sectors", 4}});
    /* The fills (9 + 8 requests of 4 wavefronts), the two ldmatrix (4, then
     * 32 with 28 conflicts), the copy's write (4) and the read of dst (4, 3
     * conflicts); globally the copy's read and the store of out. */
    expect("mma_mem", {{"launches", 1}, {"shared_requests", 21},
                       {"shared_wavefronts", 17 * 4 + 4 + 32 + 4 + 4},
                       {"shared_bank_conflicts", 28 + 3}, {"global_requests", 2},
                       {"global_sectors", 16 + 4}, {"global_wavefronts", 4 + 1},
                       {"dram_sectors", 20}});
    /* Three global requests (the atomics read and write in one), two shared. */
    expect("atomics", {{"launches", 1}, {"global_requests", 3}, {"global_sectors", 4 + 8 + 4},
                       {"global_wavefronts", 1 + 2 + 1}, {"dram_sectors", 16},
                       {"shared_requests", 2}, {"shared_wavefronts", 2},
                       {"shared_bank_conflicts", 0}});
    float acc[128];
    ST_CUDA(cudaMemcpy(acc, in, sizeof acc, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; i++)
        ST_CHECK(acc[i] == 1.0f && acc[64 + 2 * i] == 1.0f && acc[65 + 2 * i] == 2.0f,
                 "atomics: lane %d's sums %g, %g, %g", i, acc[i], acc[64 + 2 * i],
                 acc[65 + 2 * i]);
    expect("mma", {{"launches", 1}, {"tensor_instructions", 2}, {"global_requests", 1},
                   {"shared_requests", 0}});
    ST_CHECK(g_counts.size() == 7, "%zu ops counted, want 7 (none outside an op)",
             g_counts.size());
    ST_CUDA(cudaFree(in));
    ST_CUDA(cudaFree(out));
    return st_failed;
}
