/*
 * racecheck: the cross-stream race checker and the kernels' memory checks.
 *
 * Every 16 bytes of device memory have a shadow cell: the last operation
 * that wrote them and up to two that read them since (as stamps: stream and
 * sequence number). An access by operation O is a race when an earlier
 * access by another operation P conflicts with it (either writes) and P does
 * not happen before O in the vector clocks stream.cc gives each operation
 * from stream order, event waits and host synchronisations. Because the
 * clocks come from the API calls and not from the order the device thread
 * happened to run things in, a missing wait is found on every run whatever
 * the schedule: a read-after-write, write-after-read or write-after-write
 * between two streams with nothing ordering them. The report names both
 * operations and the memory; the device then fails with
 * cudaErrorLaunchFailure, so the program's next check stops it.
 *
 * Kernels' accesses are exact: the simulator compiles the .cu files with
 * GCC's -fsanitize=thread instrumentation, whose calls (__tsan_read4 and
 * friends, defined here instead of linking the ThreadSanitizer runtime) see
 * every load and store. Accesses outside the device window cost one compare.
 * Inside it, a kernel's access must also lie in a live allocation of its own
 * device; otherwise it is reported as the illegal address it would be on a GPU
 * and the kernel stops (cudaErrorIllegalAddress, sticky). Host code of the .cu
 * files that touches device memory directly (a segmentation fault on a GPU
 * machine) is reported and aborts. Copies, memsets, cuBLAS and NCCL report
 * their ranges through zs_race_range.
 *
 * Memory: the shadow is reserved with the device window (memory.cc) and
 * filled on demand; freeing an allocation gives its shadow back.
 * Thread safety: the shadow is read and written by the device thread only.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

namespace {

struct shadow_cell {
    uint64_t w, r0, r1;
};

const unsigned kGranuleShift = 4;
const int kMaxReports = 20;

uintptr_t g_shadow;
std::atomic<int> g_reports;
thread_local zs_exec *t_exec;

inline shadow_cell *cell_of(uintptr_t a)
{
    return reinterpret_cast<shadow_cell *>(g_shadow) + ((a - zs_dev_lo) >> kGranuleShift);
}

inline bool happens_before(uint64_t stamp, const zs_vc &vc)
{
    uint32_t s = zs_stamp_stream(stamp);
    return s < vc.size() && vc[s] >= zs_stamp_seq(stamp);
}

void report_race(zs_exec *x, uint64_t other, uintptr_t a, bool write, bool other_write)
{
    if (x->reported)
        return;
    x->reported = true;
    zs_fault(x->device, cudaErrorLaunchFailure);
    if (g_reports++ >= kMaxReports)
        return;
    const zs_op *op = x->op;
    uint32_t os = zs_stamp_stream(other);
    uint64_t oq = zs_stamp_seq(other);
    std::string where = x->kernel ? zs_kernel_where() : "";
    zs_report("race on device memory %s: %s (%s, operation #%llu)%s%s %s it, but %s (%s, "
              "operation #%llu) %s it and nothing orders the two (no event wait between the "
              "streams, no host synchronisation in between); hint: record an event after the "
              "first and cudaStreamWaitEvent on the second's stream before queuing the second",
              zs_describe_ptr((const void *)a).c_str(), op->what.c_str(),
              zs_stream_name(op->stream).c_str(), (unsigned long long)op->seq,
              where.empty() ? "" : " at ", where.c_str(), write ? "writes" : "reads",
              zs_op_history(os, oq).c_str(), zs_stream_name(os).c_str(),
              (unsigned long long)oq, other_write ? "wrote" : "read");
}

/* The slow half of a cell check: this op has not touched the cell yet. */
void check_cell(zs_exec *x, shadow_cell *c, uintptr_t a, bool write)
{
    const uint64_t me = x->stamp;
    const zs_vc &vc = x->op->vc;
    if (c->w && c->w != me && !happens_before(c->w, vc))
        report_race(x, c->w, a, write, true);
    if (write) {
        if (c->r0 && c->r0 != me && !happens_before(c->r0, vc))
            report_race(x, c->r0, a, true, false);
        if (c->r1 && c->r1 != me && !happens_before(c->r1, vc))
            report_race(x, c->r1, a, true, false);
        c->w = me;
        c->r0 = c->r1 = 0;
        return;
    }
    /* Keep the readers a later write must be checked against: one that
     * happens before this read is covered by it. */
    if (!c->r0 || happens_before(c->r0, vc))
        c->r0 = me;
    else if (!c->r1 || happens_before(c->r1, vc))
        c->r1 = me;
    else
        c->r1 = me; /* a third unordered reader: the oldest is forgotten */
}

void check_shadow(zs_exec *x, uintptr_t a, size_t n, bool write)
{
    shadow_cell *c = cell_of(a), *last = cell_of(a + n - 1);
    const uint64_t me = x->stamp;
    for (; c <= last; c++) {
        if (write ? c->w == me : (c->r0 == me || c->r1 == me || c->w == me))
            continue;
        check_cell(x, c, a, write);
    }
}

[[noreturn]] void host_touch(uintptr_t a, size_t n, bool write)
{
    zs_report("host code %s %zu bytes of device memory at %s: a GPU build would crash here "
              "(device memory is reached only through copies and kernels)",
              write ? "writes" : "reads", n, zs_describe_ptr((const void *)a).c_str());
    abort();
}

/* Fails the running kernel with an illegal address: what it reached (`what`,
 * "4 bytes at ..."), reported as a GPU would, and the kernel ends. */
[[noreturn]] void kernel_illegal(zs_exec *x, bool write, const std::string &what)
{
    zs_fault(x->device, cudaErrorIllegalAddress);
    x->faulted = true;
    if (g_reports++ < kMaxReports)
        zs_report("illegal address: %s at %s %s %s (a GPU reports cudaErrorIllegalAddress)",
                  x->op->what.c_str(), zs_kernel_where().c_str(), write ? "writes" : "reads",
                  what.c_str());
    zs_kernel_abort();
}

/* A kernel's access to dynamic shared memory past its launch's bytes. */
[[noreturn]] void shared_overrun(uintptr_t a, size_t n, bool write)
{
    zs_exec *x = t_exec;
    if (!x || !x->kernel) {
        zs_report("%s %zu bytes of the simulator's dynamic shared memory outside a kernel",
                  write ? "writes" : "reads", n);
        abort();
    }
    kernel_illegal(x, write,
                   zs_format("%zu bytes of dynamic shared memory at offset %zu, past the "
                             "launch's %zu bytes",
                             n, (size_t)(a - zs_dyn_lo), zs_dyn_bytes));
}

/* A kernel's access outside its allocations: reported, and the kernel ends. */
[[noreturn]] void illegal_access(zs_exec *x, uintptr_t a, size_t n, bool write)
{
    uintptr_t base = 0;
    size_t size = 0;
    int dev = -1;
    bool found = zs_find_alloc(a, &base, &size, &dev);
    const char *why = !found             ? "no live allocation holds it"
                      : dev != x->device ? "it is another device's memory"
                                         : "it runs past the end of its allocation";
    kernel_illegal(x, write,
                   zs_format("%zu bytes at %s: %s", n, zs_describe_ptr((const void *)a).c_str(),
                             why));
}

/* The bounds check past the most recent allocation: the other cached ones,
 * then the table; a hit moves to the front. */
void bounds_slow(zs_exec *x, uintptr_t a, size_t n, bool write)
{
    uintptr_t base;
    size_t size;
    int i = 1;
    while (i < 4 && !(a - x->cache_lo[i] < x->cache_len[i] && n <= x->cache_len[i] - (a - x->cache_lo[i])))
        i++;
    if (i < 4) {
        base = x->cache_lo[i];
        size = x->cache_len[i];
    } else {
        int dev;
        if (!zs_find_alloc(a, &base, &size, &dev) || dev != x->device || a + n > base + size)
            illegal_access(x, a, n, write);
        i = 3;
    }
    for (; i > 0; i--) {
        x->cache_lo[i] = x->cache_lo[i - 1];
        x->cache_len[i] = x->cache_len[i - 1];
    }
    x->cache_lo[0] = base;
    x->cache_len[0] = size;
}

/* Every instrumented access. Outside the device window: one compare. In a
 * kernel: bounds, then the shadow, whose common case (this op already
 * touched the cell the same way) is decided here. */
inline void access(const void *p, size_t n, bool write, const void *site)
{
    uintptr_t a = (uintptr_t)p;
    if (zs_perf_active.load(std::memory_order_relaxed))
        zs_perf_access(a, n, a - zs_dev_lo < zs_dev_span, site);
    if (zs_async_pending.load(std::memory_order_relaxed))
        zs_async_access(a, n, write);
    if (a - zs_dev_lo >= zs_dev_span) {
        if (a - zs_dyn_lo < zs_dyn_cap && a + n - zs_dyn_lo > zs_dyn_bytes)
            shared_overrun(a, n, write);
        return;
    }
    zs_exec *x = t_exec;
    if (!x)
        host_touch(a, n, write);
    if (!x->kernel)
        return;
    if (!(a - x->cache_lo[0] < x->cache_len[0] && n <= x->cache_len[0] - (a - x->cache_lo[0])))
        bounds_slow(x, a, n, write);
    if (!x->race || n == 0)
        return;
    if (((a ^ (a + n - 1)) >> kGranuleShift) == 0) {
        const shadow_cell *c = cell_of(a);
        if (write ? c->w == x->stamp : (c->w == x->stamp || c->r0 == x->stamp || c->r1 == x->stamp))
            return;
    }
    check_shadow(x, a, n, write);
}

} // namespace

/* ---- shared with the other files ---- */

size_t zs_shadow_bytes(size_t device_bytes)
{
    return (device_bytes >> kGranuleShift) * sizeof(shadow_cell);
}

void zs_shadow_init(uintptr_t shadow_base) { g_shadow = shadow_base; }

void zs_shadow_release(uintptr_t lo, size_t len)
{
    uintptr_t first = (uintptr_t)cell_of(lo), end = (uintptr_t)cell_of(lo + len);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t p0 = (first + page - 1) / page * page, p1 = end / page * page;
    if (p1 > p0) {
        memset((void *)first, 0, p0 - first);
        madvise((void *)p0, p1 - p0, MADV_DONTNEED);
        memset((void *)p1, 0, end - p1);
    } else {
        memset((void *)first, 0, end - first);
    }
}

void zs_exec_begin(zs_exec *x, const zs_op *op, bool kernel)
{
    memset(x, 0, sizeof *x);
    x->op = op;
    x->stamp = op->stamp;
    x->device = op->device;
    x->kernel = kernel;
    x->race = zs_cfg().racecheck;
    t_exec = x;
}

void zs_exec_end() { t_exec = NULL; }

zs_exec *zs_exec_current() { return t_exec; }

void zs_kernel_access(const void *p, size_t n, bool write) { access(p, n, write, NULL); }

/* An atomic's one read-modify-write (zs_device.h): checked as a write, and
 * one request of its caller's site, the kernel's instruction. */
void zs_atomic_access(void *p, size_t n) { access(p, n, true, __builtin_return_address(0)); }

void zs_race_range(const void *p, size_t n, bool write)
{
    zs_exec *x = t_exec;
    if (!x || !x->race || n == 0)
        return;
    check_shadow(x, (uintptr_t)p, n, write);
}

/* ---- GCC's -fsanitize=thread instrumentation calls (see the top) ---- */

/* The access site: the instrumented instruction, for perf.cc's requests. */
#define ZS_SITE __builtin_return_address(0)
#define ZS_TSAN_SIZED(n)                                                                          \
    extern "C" void __tsan_read##n(void *p) { access(p, n, false, ZS_SITE); }                     \
    extern "C" void __tsan_write##n(void *p) { access(p, n, true, ZS_SITE); }                     \
    extern "C" void __tsan_unaligned_read##n(void *p) { access(p, n, false, ZS_SITE); }           \
    extern "C" void __tsan_unaligned_write##n(void *p) { access(p, n, true, ZS_SITE); }           \
    extern "C" void __tsan_volatile_read##n(void *p) { access(p, n, false, ZS_SITE); }            \
    extern "C" void __tsan_volatile_write##n(void *p) { access(p, n, true, ZS_SITE); }

ZS_TSAN_SIZED(1)
ZS_TSAN_SIZED(2)
ZS_TSAN_SIZED(4)
ZS_TSAN_SIZED(8)
ZS_TSAN_SIZED(16)

/* Atomics in instrumented code (static-local guards) are host memory: done
 * as what they are, sequentially consistent whatever order is asked for. */
#define ZS_TSAN_ATOMIC(n, T)                                                                      \
    extern "C" T __tsan_atomic##n##_load(const volatile T *a, int)                                \
    {                                                                                             \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                              \
    }                                                                                             \
    extern "C" void __tsan_atomic##n##_store(volatile T *a, T v, int)                             \
    {                                                                                             \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                 \
    }                                                                                             \
    extern "C" T __tsan_atomic##n##_exchange(volatile T *a, T v, int)                             \
    {                                                                                             \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                       \
    }                                                                                             \
    extern "C" T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int)                            \
    {                                                                                             \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                             \
    extern "C" int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) \
    {                                                                                             \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);   \
    }                                                                                             \
    extern "C" T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int)       \
    {                                                                                             \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);         \
        return c;                                                                                 \
    }

ZS_TSAN_ATOMIC(8, uint8_t)
ZS_TSAN_ATOMIC(16, uint16_t)
ZS_TSAN_ATOMIC(32, uint32_t)
ZS_TSAN_ATOMIC(64, uint64_t)

extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_read_range(void *p, unsigned long n) { access(p, n, false, ZS_SITE); }
extern "C" void __tsan_write_range(void *p, unsigned long n) { access(p, n, true, ZS_SITE); }
extern "C" void __tsan_init(void) {}
extern "C" void __tsan_func_entry(void *) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void **, void *) {}
extern "C" void __tsan_vptr_read(void **) {}
