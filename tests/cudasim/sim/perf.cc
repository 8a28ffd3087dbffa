/*
 * perf: the simulator's performance counters (ZT_SIM_PERF=1), counted from
 * the kernels' access hooks (racecheck.cc) the way Nsight Compute counts
 * them on a GPU, for the roofline (scripts/roofline.py, docs/roofline.md).
 *
 * A warp-level request is one dynamic instance of a memory instruction for a
 * warp: the k-th time each lane of the warp reaches access site S (the
 * instruction's address in the instrumented code). The fiber scheduler runs
 * a warp's lanes to their next barrier before it moves to another warp, so
 * a warp's requests are complete when the accesses move on to another warp
 * or the kernel ends; they are then counted and forgotten. Per launch:
 *
 *   global_requests      requests to device memory (loads and stores)
 *   global_sectors       the distinct 32-byte sectors each touches, summed
 *                        (4 per request when coalesced 4-byte accesses of a
 *                        warp fill one 128-byte line; 32 when each lane is
 *                        in a line of its own)
 *   global_wavefronts    the distinct 128-byte lines each touches, summed:
 *                        L1's passes, one a clock per SM
 *   dram_sectors         the distinct sectors the whole launch touches: its
 *                        traffic to DRAM if L2 kept every sector it held once
 *   shared_requests      requests to __shared__ arrays
 *   shared_wavefronts    per request, the most distinct 4-byte words any of
 *                        the 32 banks holds (same word: a broadcast), summed
 *   shared_bank_conflicts  wavefronts beyond the ideal ceil(words / 32)
 *   tensor_instructions  mma.sync instructions a warp executed (each 16 x 8
 *                        x 16 multiply-adds): what the profile's tensor_flops
 *                        model must add up to
 *   launches             kernels run (cuBLAS calls count one each)
 *
 * Shared memory is told apart by where it lives: __shared__ is `static` in
 * the simulator (zs_device.h), so its arrays are the executable's .bss; the
 * built-in index variables there (threadIdx and friends) are registers on a
 * GPU and are not counted, nor is the fiber's own stack (locals) or other
 * host memory (the launch's argument copies).
 *
 * Counts go to the op --profile was counting when the kernel was launched
 * (engine/monitor/profile.c, zt_profile_device_counts, weak). Memory: the
 * open warp's requests and the launch's sector set, reused. Thread safety:
 * the device thread alone counts.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

extern uint3 threadIdx, blockIdx, blockDim, gridDim;

extern "C" void zt_profile_device_counts(const char *op, const char *const *names,
                                         const uint64_t *values, int n) __attribute__((weak));

std::atomic<bool> zs_perf_active;

namespace {

enum { C_LAUNCHES, C_GREQ, C_GSECT, C_GWAVE, C_DRAM, C_SREQ, C_SWAVE, C_SCONF, C_TENSOR, C_N };
const char *const kNames[C_N] = {"launches",          "global_requests",      "global_sectors",
                                 "global_wavefronts", "dram_sectors",         "shared_requests",
                                 "shared_wavefronts", "shared_bank_conflicts", "tensor_instructions"};

struct req {
    bool shared;
    std::vector<uint64_t> acc; /* address << 5 | bytes (1..16) */
};

/* A warp's request: its site and which pass of the lanes over it. */
struct req_key {
    uint64_t site;
    uint32_t k;
    bool operator==(const req_key &o) const { return site == o.site && k == o.k; }
};
struct req_hash {
    size_t operator()(const req_key &r) const { return r.site * 0x9e3779b97f4a7c15ull ^ r.k; }
};

struct state {
    uint64_t warp = UINT64_MAX; /* block << 6 | warp of the open requests */
    std::unordered_map<uint64_t, uint32_t> seen;  /* site << 5 | lane -> times reached */
    std::unordered_map<req_key, req, req_hash> open; /* the open requests' accesses */
    std::unordered_set<uint64_t> dram;            /* the launch's sectors */
    std::vector<uint64_t> scratch;
    uint64_t c[C_N] = {};
    /* The last access, which the next may extend (see zs_perf_access). */
    req *last = nullptr;
    unsigned last_tid = 0;
    uintptr_t last_lo = 0, last_hi = 0;
};

state *g;

bool is_builtin(uintptr_t a)
{
    const uintptr_t v[4] = {(uintptr_t)&threadIdx, (uintptr_t)&blockIdx, (uintptr_t)&blockDim,
                            (uintptr_t)&gridDim};
    for (uintptr_t b : v)
        if (a - b < sizeof(uint3))
            return true;
    return false;
}

/* The distinct (1 << shift)-byte units r's accesses touch, sorted, in
 * s.scratch; their count. */
size_t units(state &s, const req &r, unsigned shift)
{
    std::vector<uint64_t> &v = s.scratch;
    v.clear();
    for (uint64_t e : r.acc) {
        uint64_t a = e >> 5, n = e & 31;
        for (uint64_t x = a >> shift; x <= (a + n - 1) >> shift; x++)
            v.push_back(x);
    }
    std::sort(v.begin(), v.end());
    v.resize((size_t)(std::unique(v.begin(), v.end()) - v.begin()));
    return v.size();
}

void count_global(state &s, const req &r)
{
    size_t sectors = units(s, r, 5);
    s.c[C_GREQ]++;
    s.c[C_GSECT] += sectors;
    uint64_t lines = 0, last = UINT64_MAX;
    for (uint64_t x : s.scratch) {
        s.dram.insert(x);
        if (x >> 2 != last)
            lines++;
        last = x >> 2;
    }
    s.c[C_GWAVE] += lines;
}

void count_shared(state &s, const req &r)
{
    size_t words = units(s, r, 2);
    unsigned per_bank[32] = {};
    unsigned most = 0;
    for (uint64_t w : s.scratch)
        most = std::max(most, ++per_bank[w & 31]);
    uint64_t ideal = (words + 31) / 32;
    s.c[C_SREQ]++;
    s.c[C_SWAVE] += most;
    s.c[C_SCONF] += most - ideal;
}

void flush_warp(state &s)
{
    for (auto &kv : s.open) {
        if (kv.second.shared)
            count_shared(s, kv.second);
        else
            count_global(s, kv.second);
    }
    s.open.clear();
    s.seen.clear();
    s.last = nullptr;
}

} // namespace

void zs_perf_access(uintptr_t a, size_t n, bool device, const void *site)
{
    zs_exec *x = zs_exec_current();
    if (!x || !x->kernel || n == 0)
        return;
    bool shared = false;
    if (!device) {
        if (!zs_in_shared(a, n) || is_builtin(a))
            return;
        shared = true;
    }
    state &s = *g;
    const unsigned tid = zs_thread_in_block();
    const uint64_t block =
        blockIdx.x + (uint64_t)gridDim.x * (blockIdx.y + (uint64_t)gridDim.y * blockIdx.z);
    const uint64_t warp = block << 6 | tid / 32;
    if (warp != s.warp) {
        flush_warp(s);
        s.warp = warp;
    }
    /* GCC's instrumentation splits a vector access (a float4) into one
     * call per member; a GPU makes it one 64- or 128-bit instruction. So a
     * lane's access that continues its previous one within the same
     * aligned 16 bytes is taken as part of it. */
    if (s.last && tid == s.last_tid && s.last->shared == shared && a == s.last_hi &&
        n <= 16 && (a + n - 1) >> 4 == s.last_lo >> 4) {
        s.last_hi = a + n;
        s.last->acc.back() = (uint64_t)s.last_lo << 5 | (s.last_hi - s.last_lo);
        return;
    }
    const uint64_t pc = (uint64_t)(uintptr_t)site;
    uint32_t k = s.seen[pc << 5 | (tid & 31)]++;
    req &r = s.open[req_key{pc, k}];
    r.shared = shared;
    for (size_t off = 0; off < n; off += 16) /* a range access: 16-byte pieces */
        r.acc.push_back((uint64_t)(a + off) << 5 | std::min<size_t>(16, n - off));
    s.last = &r;
    s.last_tid = tid;
    s.last_lo = a + (n - 1) / 16 * 16;
    s.last_hi = a + n;
}

void zs_perf_tensor_instruction()
{
    if (zs_perf_active.load(std::memory_order_relaxed))
        g->c[C_TENSOR]++;
}

void zs_perf_launch_begin()
{
    if (!zs_cfg().perf)
        return;
    if (!g)
        g = new state();
    zs_perf_active.store(true, std::memory_order_relaxed);
}

static void report(const char *op, const uint64_t *c)
{
    if (op && zt_profile_device_counts)
        zt_profile_device_counts(op, kNames, c, C_N);
}

void zs_perf_launch_end(const char *op)
{
    if (!zs_cfg().perf)
        return;
    zs_perf_active.store(false, std::memory_order_relaxed);
    state &s = *g;
    flush_warp(s);
    s.warp = UINT64_MAX;
    s.c[C_LAUNCHES] = 1;
    s.c[C_DRAM] = s.dram.size();
    report(op, s.c);
    s.dram.clear();
    std::fill(s.c, s.c + C_N, 0);
}

void zs_perf_library_call(const char *op)
{
    if (!zs_cfg().perf)
        return;
    uint64_t c[C_N] = {};
    c[C_LAUNCHES] = 1;
    report(op, c);
}
