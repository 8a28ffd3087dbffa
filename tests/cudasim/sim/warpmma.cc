/*
 * warpmma: the warp-level matrix instructions and asynchronous copies of
 * engine/cuda/mma.cuh (declared in zs_device.h) as the simulator runs them.
 *
 * mma.sync and ldmatrix are warp collectives (fiber.cc's zs_warp_collective):
 * every lane hands in its registers, the whole matrix is put together with
 * the PTX ISA's fragment layouts, computed, and each lane's part handed back.
 * The layouts, with groupID g = lane / 4 and t = lane % 4, are the PTX ISA's
 * (8.x, sections "Matrix Fragments for mma.m16n8k16 with floating point
 * type" and "Warp-level matrix load instruction: ldmatrix"), read against
 * two independent statements of them: CUTLASS's cute::MMA_Traits of
 * SM80_16x8x16_F32BF16BF16F32_TN (its A, B and C (thread, value) ->
 * element layouts) and Copy_Traits of SM75_U32x{1,2,4}_LDSM_N and
 * SM75_U16x{2,4,8}_LDSM_T, which give the same maps:
 *   A (16 x 16, row): a_i, i = 0..7 (register i / 2, half i % 2, low first):
 *       row g + 8 ((i / 2) % 2), column 2 t + i % 2 + 8 (i / 4)
 *   B (16 x 8, col):  b_i, i = 0..3: row (k) 2 t + i % 2 + 8 (i / 2), column g
 *   C, D (16 x 8):    c_i, i = 0..3: row g + 8 (i / 2), column 2 t + i % 2
 *   ldmatrix m8n8 b16, matrix j from the rows lanes 8 j .. 8 j + 7 point at:
 *       register j = row g, elements 2 t and 2 t + 1 (low, high);
 *       .trans: elements [2 t][g] and [2 t + 1][g] of the rows as stored.
 * D = A B + C is computed in fp32: the products of 16-bit values are exact,
 * the sums run in k order (a GPU's order and internal precision are not
 * specified; callers compare with stated tolerances).
 *
 * cp.async: the copy is recorded at the call and made at the wait that
 * completes its group, the latest a GPU may make it; until then its bytes are
 * pending, and any thread's access to them (a read before the wait, or a
 * write that would race the copy) is reported and fails the kernel, as the
 * race checker does for streams. A block that ends with copies not waited
 * for fails too.
 *
 * Memory: the pending copies of the running block, reused. Thread safety:
 * the device thread alone.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string.h>

#include <unordered_map>

extern uint3 blockIdx;

std::atomic<int> zs_async_pending;

namespace {

[[noreturn]] void fail(const std::string &why)
{
    zs_exec *x = zs_exec_current();
    zs_fault(x->device, cudaErrorLaunchFailure);
    zs_report("%s at %s: %s", x->op->what.c_str(), zs_kernel_where().c_str(), why.c_str());
    zs_kernel_abort();
}

/* ---- mma.sync.m16n8k16 ---- */

struct mma_lane {
    uint32_t a[4], b[2];
    float c[4], d[4];
};

float half_value(uint32_t reg, int half, bool bf16)
{
    uint16_t bits = (uint16_t)(reg >> (16 * half));
    if (bf16) {
        __nv_bfloat16 v;
        v.__x = bits;
        return __bfloat162float(v);
    }
    __half v;
    v.__x = bits;
    return __half2float(v);
}

void mma_run(void *const lanes[32], void *ctx)
{
    zs_perf_tensor_instruction();
    const bool bf16 = *static_cast<const bool *>(ctx);
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const mma_lane &m = *static_cast<const mma_lane *>(lanes[l]);
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 8; i++)
            A[g + 8 * ((i / 2) % 2)][2 * t + i % 2 + 8 * (i / 4)] =
                half_value(m.a[i / 2], i % 2, bf16);
        for (int i = 0; i < 4; i++)
            B[2 * t + i % 2 + 8 * (i / 2)][g] = half_value(m.b[i / 2], i % 2, bf16);
        for (int i = 0; i < 4; i++)
            C[g + 8 * (i / 2)][2 * t + i % 2] = m.c[i];
    }
    for (int l = 0; l < 32; l++) {
        mma_lane &m = *static_cast<mma_lane *>(lanes[l]);
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
            float acc = C[row][col];
            for (int k = 0; k < 16; k++)
                acc += A[row][k] * B[k][col];
            m.d[i] = acc;
        }
    }
}

/* ---- ldmatrix ---- */

struct ld_lane {
    const uint8_t *row;
    uint32_t r[4];
};

struct ld_shape {
    int num;
    bool trans;
};

uint32_t element(const uint8_t *row, int col)
{
    uint16_t v;
    memcpy(&v, row + 2 * col, 2);
    return v;
}

void ld_run(void *const lanes[32], void *ctx)
{
    const ld_shape &sh = *static_cast<const ld_shape *>(ctx);
    for (int j = 0; j < sh.num; j++) {
        const uint8_t *rows[8];
        for (int i = 0; i < 8; i++)
            rows[i] = static_cast<const ld_lane *>(lanes[8 * j + i])->row;
        for (int l = 0; l < 32; l++) {
            const int g = l / 4, t = l % 4;
            uint32_t lo = sh.trans ? element(rows[2 * t], g) : element(rows[g], 2 * t);
            uint32_t hi = sh.trans ? element(rows[2 * t + 1], g) : element(rows[g], 2 * t + 1);
            static_cast<ld_lane *>(lanes[l])->r[j] = lo | hi << 16;
        }
    }
}

/* ---- cp.async ---- */

struct copy {
    uint64_t group; /* the thread's commit count when it was issued */
    uint8_t *dst;
    const uint8_t *src;
    int bytes;
};

struct async_state {
    std::unordered_map<unsigned, std::vector<copy>> copies; /* thread -> its pending copies */
    std::unordered_map<unsigned, uint64_t> committed;       /* thread -> groups committed */
    std::unordered_map<uintptr_t, unsigned> words;          /* pending 4-byte word -> thread */
};

async_state *g_async;

async_state &async() { return *(g_async ? g_async : (g_async = new async_state())); }

void land(async_state &s, const copy &c)
{
    memcpy(c.dst, c.src, (size_t)c.bytes);
    for (int o = 0; o < c.bytes; o += 4)
        s.words.erase((uintptr_t)(c.dst + o));
    zs_async_pending.fetch_sub(1, std::memory_order_relaxed);
}

} // namespace

void zs_mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                     bool bf16)
{
    static bool kinds[2] = {false, true};
    mma_lane me;
    memcpy(me.a, a, sizeof me.a);
    memcpy(me.b, b, sizeof me.b);
    memcpy(me.c, c, sizeof me.c);
    zs_warp_collective(0xffffffffu, &me, mma_run, &kinds[bf16],
                       bf16 ? "mma.sync.m16n8k16.bf16" : "mma.sync.m16n8k16.f16");
    memcpy(d, me.d, sizeof me.d);
}

void zs_ldmatrix(uint32_t *r, int num, bool trans, const void *row)
{
    static ld_shape shapes[2][5] = {{{1, false}, {1, false}, {2, false}, {2, false}, {4, false}},
                                    {{1, true}, {1, true}, {2, true}, {2, true}, {4, true}}};
    if (num != 1 && num != 2 && num != 4)
        fail(zs_format("ldmatrix.x%d: x1, x2 or x4 only", num));
    const unsigned lane = zs_thread_in_block() % 32;
    if (lane < 8u * (unsigned)num) {
        if ((uintptr_t)row % 16 || !zs_in_shared((uintptr_t)row, 16))
            fail(zs_format("ldmatrix: lane %u's row address %p is not 16 bytes of shared memory "
                           "at a 16-byte boundary",
                           lane, row));
        if (zs_async_pending.load(std::memory_order_relaxed))
            zs_async_access((uintptr_t)row, 16, false);
        /* One request of the warp: each lane's 16-byte row (perf.cc). */
        if (zs_perf_active.load(std::memory_order_relaxed))
            zs_perf_access((uintptr_t)row, 16, false, __builtin_return_address(0));
    }
    ld_lane me{static_cast<const uint8_t *>(row), {0, 0, 0, 0}};
    zs_warp_collective(0xffffffffu, &me, ld_run, &shapes[trans][num],
                       trans ? "ldmatrix.trans" : "ldmatrix");
    memcpy(r, me.r, sizeof(uint32_t) * (size_t)num);
}

void zs_cp_async(void *smem, const void *gmem, int bytes)
{
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fail(zs_format("cp.async of %d bytes: 4, 8 or 16 only", bytes));
    if ((uintptr_t)smem % (unsigned)bytes || (uintptr_t)gmem % (unsigned)bytes)
        fail(zs_format("cp.async of %d bytes from %p to %p: both must be %d-byte aligned", bytes,
                       gmem, smem, bytes));
    if (!zs_in_shared((uintptr_t)smem, (size_t)bytes))
        fail(zs_format("cp.async to %p: not shared memory", smem));
    if ((uintptr_t)gmem - zs_dev_lo >= zs_dev_span)
        fail(zs_format("cp.async from %p: not device memory", gmem));
    zs_kernel_access(gmem, (size_t)bytes, false);
    zs_async_access((uintptr_t)smem, (size_t)bytes, true);
    /* The copy's write of shared memory, a request of the warp at this call
     * site (perf.cc; zs_kernel_access counted the read). */
    if (zs_perf_active.load(std::memory_order_relaxed))
        zs_perf_access((uintptr_t)smem, (size_t)bytes, false, __builtin_return_address(0));
    async_state &s = async();
    const unsigned tid = zs_thread_in_block();
    s.copies[tid].push_back(copy{s.committed[tid], static_cast<uint8_t *>(smem),
                                 static_cast<const uint8_t *>(gmem), bytes});
    for (int o = 0; o < bytes; o += 4)
        s.words[(uintptr_t)smem + (uintptr_t)o] = tid;
    zs_async_pending.fetch_add(1, std::memory_order_relaxed);
}

void zs_cp_async_commit() { async().committed[zs_thread_in_block()]++; }

void zs_cp_async_wait(int n)
{
    async_state &s = async();
    const unsigned tid = zs_thread_in_block();
    const uint64_t done = s.committed[tid];
    auto it = s.copies.find(tid);
    if (it == s.copies.end())
        return;
    std::vector<copy> &mine = it->second, keep;
    for (const copy &c : mine) {
        if (c.group + (uint64_t)n < done)
            land(s, c);
        else
            keep.push_back(c);
    }
    mine.swap(keep);
}

void zs_async_access(uintptr_t a, size_t n, bool write)
{
    zs_exec *x = zs_exec_current();
    if (!x || !x->kernel || !g_async || n == 0)
        return;
    for (uintptr_t w = a & ~(uintptr_t)3; w < a + n; w += 4) {
        auto it = g_async->words.find(w);
        if (it == g_async->words.end())
            continue;
        fail(zs_format("%s shared memory at %p that a cp.async of thread %u has not landed in: "
                       "the copy completes at that thread's cp.async.wait_group, and the block "
                       "needs a __syncthreads after it before others use the bytes",
                       write ? "writes" : "reads", (void *)a, it->second));
    }
}

bool zs_async_block_end(bool report)
{
    if (!g_async)
        return true;
    async_state &s = *g_async;
    size_t left = 0;
    unsigned who = 0;
    for (auto &kv : s.copies) {
        left += kv.second.size();
        if (!kv.second.empty())
            who = kv.first;
    }
    zs_async_pending.fetch_sub((int)left, std::memory_order_relaxed);
    s.copies.clear();
    s.committed.clear();
    s.words.clear();
    if (!left || !report)
        return true;
    zs_exec *x = zs_exec_current();
    zs_fault(x->device, cudaErrorLaunchFailure);
    zs_report("%s, block (%u, %u, %u): %zu cp.async copies never waited for (thread %u's among "
              "them): a kernel must cp.async.wait_group before it ends",
              x->op->what.c_str(), blockIdx.x, blockIdx.y, blockIdx.z, left, who);
    return false;
}
