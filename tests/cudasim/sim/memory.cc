/*
 * memory: the simulated devices' memory and the copies between it and the
 * host.
 *
 * Device memory lives in one reserved window of address space (mapped
 * PROT_NONE, NORESERVE), a slice per device twice the device's memory, so
 * that a pointer is classified by its value alone: inside the window and a
 * live allocation it is device memory, anything else is not. An allocation
 * is made readable and writable page by page and followed by an unmapped
 * guard page; the next allocation starts past the last one (next fit), so a
 * freed block is not handed out again at once and a stale pointer into it
 * faults or is reported instead of silently reading new data. cudaFree waits
 * for the device, as CUDA's does, and gives the pages back. Pinned host
 * memory (cudaMallocHost) is plain mapped memory that the simulator knows.
 *
 * Copies and memsets are stream operations. As in CUDA, a copy from pageable
 * host memory to the device is staged at the call (the caller may reuse its
 * buffer at once) and a copy to pageable host memory returns when done; with
 * pinned memory both are asynchronous. Pointers are checked at the call:
 * stricter than CUDA, an explicit kind must match what the pointers are, and
 * overlapping ranges are an error.
 *
 * Memory: the window, the allocation tables and pinned blocks are the
 * process's; a block belongs to whoever allocated it until freed.
 * Thread safety: any host thread; the device thread reads the tables through
 * zs_find_alloc.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>

uintptr_t zs_dev_lo;
size_t zs_dev_span;

namespace {

struct alloc_rec {
    size_t size;  /* as asked */
    size_t pages; /* mapped bytes (a whole number of pages) */
};

struct device_mem {
    std::mutex lock;
    uintptr_t lo = 0;
    size_t span = 0;
    size_t used = 0;
    uintptr_t cursor = 0;                  /* next fit starts here */
    std::map<uintptr_t, alloc_rec> live;   /* by base */
    std::map<uintptr_t, size_t> free_va;   /* free address ranges by start */
};

device_mem *g_dev;       /* [devices] */
size_t g_slice;          /* address space per device */
size_t g_page;
std::mutex g_pinned_lock;
std::map<uintptr_t, size_t> *g_pinned; /* cudaMallocHost blocks: base -> size */

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void init_once()
{
    const zs_config &c = zs_cfg();
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    g_pinned = new std::map<uintptr_t, size_t>();
    g_dev = new device_mem[ZS_MAX_DEVICES];
    if (c.devices == 0)
        return;
    g_slice = round_up(2 * c.device_bytes, (size_t)1 << 30);
    size_t window = g_slice * (size_t)c.devices;
    void *w = mmap(NULL, window, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *s = w == MAP_FAILED ? MAP_FAILED
                              : mmap(NULL, zs_shadow_bytes(window), PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (w == MAP_FAILED || s == MAP_FAILED) {
        zs_report("cannot reserve %zu GiB of address space for %d simulated GPUs of %zu MiB "
                  "(and their shadow): %s; set ZT_SIM_DEVICE_MEMORY_MB lower",
                  window >> 30, c.devices, c.device_bytes >> 20, strerror(errno));
        exit(2);
    }
    zs_dev_lo = (uintptr_t)w;
    zs_dev_span = window;
    zs_shadow_init((uintptr_t)s);
    for (int d = 0; d < c.devices; d++) {
        device_mem &m = g_dev[d];
        m.lo = zs_dev_lo + (size_t)d * g_slice;
        m.span = g_slice;
        m.cursor = m.lo;
        m.free_va[m.lo] = g_slice;
    }
}

/* Takes `need` bytes of address space at or after the cursor (wrapping
 * once); 0 when no free range is large enough. Lock held. */
uintptr_t take_va(device_mem &m, size_t need)
{
    for (int pass = 0; pass < 2; pass++) {
        auto it = m.free_va.upper_bound(m.cursor);
        if (pass == 1 || it == m.free_va.begin())
            it = m.free_va.begin();
        else
            --it;
        for (; it != m.free_va.end(); ++it) {
            uintptr_t start = it->first, end = it->first + it->second;
            uintptr_t at = pass == 0 && start < m.cursor ? m.cursor : start;
            if (at >= end || end - at < need)
                continue;
            m.free_va.erase(it);
            if (at > start)
                m.free_va[start] = at - start;
            if (end > at + need)
                m.free_va[at + need] = end - at - need;
            m.cursor = at + need;
            return at;
        }
    }
    return 0;
}

void give_va(device_mem &m, uintptr_t at, size_t len)
{
    auto next = m.free_va.lower_bound(at);
    if (next != m.free_va.end() && at + len == next->first) {
        len += next->second;
        next = m.free_va.erase(next);
    }
    if (next != m.free_va.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == at) {
            prev->second += len;
            return;
        }
    }
    m.free_va[at] = len;
}

int device_of(uintptr_t a)
{
    if (a - zs_dev_lo >= zs_dev_span)
        return -1;
    return (int)((a - zs_dev_lo) / g_slice);
}

bool mapped(const void *p)
{
    unsigned char vec;
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)(g_page - 1);
#if defined(__SANITIZE_ADDRESS__) && defined(__x86_64__)
    /* ASan's shadow and its gap (x86-64's default layout) are mapped, but
     * hold nothing a kernel could be handed: a float pair of a functor
     * argument can look like an address there. */
    if (page >= 0x7fff8000ull && page < 0x10007fff8000ull)
        return false;
#endif
    return mincore((void *)page, 1, &vec) == 0 || errno != ENOMEM;
}

/* ---- copies and memsets as stream operations ---- */

class copy_op final : public zs_op {
public:
    void *dst;
    const void *src;
    size_t count;
    bool dst_dev, src_dev;
    std::vector<unsigned char> staged; /* pageable source, copied at the call */

    bool start() override
    {
        const void *from = staged.empty() ? src : staged.data();
        if (src_dev)
            zs_race_range(src, count, false);
        if (dst_dev)
            zs_race_range(dst, count, true);
        memcpy(dst, from, count);
        return true;
    }
};

class memset_op final : public zs_op {
public:
    void *dst;
    int value;
    size_t count;

    bool start() override
    {
        zs_race_range(dst, count, true);
        memset(dst, value, count);
        return true;
    }
};

const char *kind_name(cudaMemcpyKind k)
{
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost",
                                  "DeviceToDevice", "Default"};
    return (unsigned)k <= 4 ? names[k] : "an unknown kind";
}

/* Checks one side of a copy: device memory must be a live range, host memory
 * must be mapped. */
cudaError_t check_side(const char *call, const char *side, const void *p, size_t n,
                       zs_ptr_info *info)
{
    *info = zs_classify(p);
    if (info->kind == ZS_PTR_DEVICE && zs_device_range(p, n, info))
        return cudaSuccess;
    if (info->kind == ZS_PTR_PINNED || info->kind == ZS_PTR_HOST)
        return cudaSuccess;
    zs_report("%s: %s %s (%zu bytes) is %s", call, side, zs_describe_ptr(p).c_str(), n,
              info->kind == ZS_PTR_DEVICE ? "past the end of its device allocation"
                                          : zs_ptr_kind_name(info->kind));
    return cudaErrorInvalidValue;
}

cudaError_t memcpy_impl(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                        cudaStream_t stream, bool sync, const char *call)
{
    uint32_t si = 0;
    cudaError_t rc = zs_stream_index(stream, &si);
    if (rc != cudaSuccess)
        return zs_fail(rc);
    int device = zs_stream_device(si);
    if ((rc = zs_sticky(device)) != cudaSuccess)
        return zs_fail(rc);
    if ((unsigned)kind > cudaMemcpyDefault)
        return zs_fail(cudaErrorInvalidMemcpyDirection);
    if (count == 0)
        return cudaSuccess;
    zs_ptr_info di, sinfo;
    if ((rc = check_side(call, "destination", dst, count, &di)) != cudaSuccess ||
        (rc = check_side(call, "source", src, count, &sinfo)) != cudaSuccess)
        return zs_fail(rc);
    bool dd = di.kind == ZS_PTR_DEVICE, sd = sinfo.kind == ZS_PTR_DEVICE;
    cudaMemcpyKind actual = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                               : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (kind != cudaMemcpyDefault && kind != actual) {
        zs_report("%s: kind %s, but the destination is %s and the source %s", call,
                  kind_name(kind), zs_ptr_kind_name(di.kind), zs_ptr_kind_name(sinfo.kind));
        return zs_fail(cudaErrorInvalidValue);
    }
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d < s + count && s < d + count) {
        zs_report("%s: the ranges overlap (destination %s, source %s, %zu bytes)", call,
                  zs_describe_ptr(dst).c_str(), zs_describe_ptr(src).c_str(), count);
        return zs_fail(cudaErrorInvalidValue);
    }
    std::unique_ptr<copy_op> op(new copy_op());
    op->dst = dst;
    op->src = src;
    op->count = count;
    op->dst_dev = dd;
    op->src_dev = sd;
    op->what = zs_format("%s %s of %zu bytes", call, kind_name(actual), count);
    /* CUDA stages a pageable source before it returns and returns from a
     * copy into pageable memory when it is done. */
    if (!sd && sinfo.kind == ZS_PTR_HOST) {
        op->staged.assign((const unsigned char *)src, (const unsigned char *)src + count);
    }
    sync = sync || (!dd && di.kind == ZS_PTR_HOST);
    uint64_t seq = zs_enqueue(si, std::move(op));
    if (sync) {
        zs_note_host_block();
        zs_host_wait(si, seq);
    }
    return zs_fail(sync ? zs_sticky(device) : cudaSuccess);
}

} // namespace

/* ---- shared with the other files ---- */

void zs_memory_init()
{
    static std::once_flag once;
    std::call_once(once, init_once);
}

const char *zs_ptr_kind_name(zs_ptr_kind k)
{
    switch (k) {
    case ZS_PTR_NULL:
        return "a null pointer";
    case ZS_PTR_DEVICE:
        return "device memory";
    case ZS_PTR_DEVICE_FREE:
        return "in the device range but in no live allocation (freed, or never allocated)";
    case ZS_PTR_PINNED:
        return "page-locked host memory (cudaMallocHost)";
    case ZS_PTR_HOST:
        return "host memory";
    case ZS_PTR_UNMAPPED:
        return "an address with nothing mapped";
    }
    return "?";
}

zs_ptr_info zs_classify(const void *p)
{
    zs_memory_init();
    zs_ptr_info info = {ZS_PTR_NULL, -1, 0, 0};
    uintptr_t a = (uintptr_t)p;
    if (!p)
        return info;
    int d = device_of(a);
    if (d >= 0) {
        info.device = d;
        info.kind = zs_find_alloc(a, &info.base, &info.size, &d) ? ZS_PTR_DEVICE
                                                                 : ZS_PTR_DEVICE_FREE;
        return info;
    }
    {
        std::lock_guard<std::mutex> l(g_pinned_lock);
        auto it = g_pinned->upper_bound(a);
        if (it != g_pinned->begin() && a - (--it)->first < it->second) {
            info.kind = ZS_PTR_PINNED;
            info.base = it->first;
            info.size = it->second;
            return info;
        }
    }
    info.kind = mapped(p) ? ZS_PTR_HOST : ZS_PTR_UNMAPPED;
    return info;
}

bool zs_find_alloc(uintptr_t a, uintptr_t *base, size_t *size, int *device)
{
    int d = device_of(a);
    if (d < 0)
        return false;
    device_mem &m = g_dev[d];
    std::lock_guard<std::mutex> l(m.lock);
    auto it = m.live.upper_bound(a);
    if (it == m.live.begin())
        return false;
    --it;
    if (a - it->first >= it->second.size)
        return false;
    *base = it->first;
    *size = it->second.size;
    *device = d;
    return true;
}

bool zs_device_range(const void *p, size_t n, zs_ptr_info *info)
{
    zs_ptr_info i = zs_classify(p);
    if (info)
        *info = i;
    return i.kind == ZS_PTR_DEVICE && n <= i.size - ((uintptr_t)p - i.base);
}

std::string zs_describe_ptr(const void *p)
{
    zs_ptr_info i = zs_classify(p);
    uintptr_t a = (uintptr_t)p;
    if (i.kind == ZS_PTR_DEVICE)
        return zs_format("%p (device %d allocation %#lx + %zu of %zu bytes)", p, i.device,
                         (unsigned long)i.base, (size_t)(a - i.base), i.size);
    if (i.kind == ZS_PTR_PINNED)
        return zs_format("%p (pinned host block %#lx + %zu of %zu bytes)", p,
                         (unsigned long)i.base, (size_t)(a - i.base), i.size);
    if (i.kind == ZS_PTR_DEVICE_FREE) {
        /* The allocation below, if any: an overrun reads better as one. */
        device_mem &m = g_dev[i.device];
        std::lock_guard<std::mutex> l(m.lock);
        auto it = m.live.upper_bound(a);
        if (it != m.live.begin() && a - (--it)->first < it->second.pages + g_page)
            return zs_format("%p (device %d: %zu bytes past the end of allocation %#lx of %zu "
                             "bytes)",
                             p, i.device, (size_t)(a - it->first - it->second.size),
                             (unsigned long)it->first, it->second.size);
        return zs_format("%p (device %d, no live allocation)", p, i.device);
    }
    return zs_format("%p", p);
}

size_t zs_device_used(int device)
{
    zs_memory_init();
    device_mem &m = g_dev[device];
    std::lock_guard<std::mutex> l(m.lock);
    return m.used;
}

/* ---- the API ---- */

extern "C" cudaError_t cudaMalloc(void **dev_ptr, size_t size)
{
    zs_memory_init();
    cudaError_t rc = zs_check_current();
    if (rc != cudaSuccess)
        return zs_fail(rc);
    if (!dev_ptr)
        return zs_fail(cudaErrorInvalidValue);
    int d = zs_current_device();
    if ((rc = zs_sticky(d)) != cudaSuccess)
        return zs_fail(rc);
    *dev_ptr = NULL;
    if (size == 0)
        return cudaSuccess;
    device_mem &m = g_dev[d];
    if (size > zs_cfg().device_bytes)
        return zs_fail(cudaErrorMemoryAllocation);
    size_t pages = round_up(size, g_page);
    std::lock_guard<std::mutex> l(m.lock);
    if (m.used + pages > zs_cfg().device_bytes)
        return zs_fail(cudaErrorMemoryAllocation);
    uintptr_t at = take_va(m, pages + g_page);
    if (!at)
        return zs_fail(cudaErrorMemoryAllocation);
    if (mprotect((void *)at, pages, PROT_READ | PROT_WRITE) != 0) {
        give_va(m, at, pages + g_page);
        return zs_fail(cudaErrorMemoryAllocation);
    }
    m.live[at] = alloc_rec{size, pages};
    m.used += pages;
    *dev_ptr = (void *)at;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *dev_ptr)
{
    zs_memory_init();
    if (!dev_ptr)
        return cudaSuccess;
    uintptr_t a = (uintptr_t)dev_ptr;
    int d = device_of(a);
    if (d < 0 || d >= zs_cfg().devices) {
        zs_report("cudaFree(%s): not device memory", zs_describe_ptr(dev_ptr).c_str());
        return zs_fail(cudaErrorInvalidValue);
    }
    /* CUDA's cudaFree synchronises the device: nothing queued still uses it. */
    zs_note_host_block();
    zs_device_wait(d);
    device_mem &m = g_dev[d];
    alloc_rec rec;
    {
        std::lock_guard<std::mutex> l(m.lock);
        auto it = m.live.find(a);
        if (it == m.live.end()) {
            zs_report("cudaFree(%p): not the start of a live device allocation (freed twice?)",
                      dev_ptr);
            return zs_fail(cudaErrorInvalidValue);
        }
        rec = it->second;
        m.live.erase(it);
        m.used -= rec.pages;
    }
    madvise(dev_ptr, rec.pages, MADV_DONTNEED);
    mprotect(dev_ptr, rec.pages, PROT_NONE);
    zs_shadow_release(a, rec.pages);
    {
        std::lock_guard<std::mutex> l(m.lock);
        give_va(m, a, rec.pages + g_page);
    }
    return zs_fail(zs_sticky(d));
}

extern "C" cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    zs_memory_init();
    if (!ptr)
        return zs_fail(cudaErrorInvalidValue);
    *ptr = NULL;
    if (size == 0)
        return cudaSuccess;
    void *p = mmap(NULL, round_up(size, g_page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return zs_fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> l(g_pinned_lock);
    (*g_pinned)[(uintptr_t)p] = size;
    *ptr = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFreeHost(void *ptr)
{
    zs_memory_init();
    if (!ptr)
        return cudaSuccess;
    size_t size;
    {
        std::lock_guard<std::mutex> l(g_pinned_lock);
        auto it = g_pinned->find((uintptr_t)ptr);
        if (it == g_pinned->end()) {
            zs_report("cudaFreeHost(%p): not a block from cudaMallocHost", ptr);
            return zs_fail(cudaErrorInvalidValue);
        }
        size = it->second;
        g_pinned->erase(it);
    }
    munmap(ptr, round_up(size, g_page));
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                       enum cudaMemcpyKind kind, cudaStream_t stream)
{
    zs_memory_init();
    return memcpy_impl(dst, src, count, kind, stream, false, "cudaMemcpyAsync");
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind)
{
    zs_memory_init();
    cudaError_t rc = zs_check_current();
    if (rc != cudaSuccess)
        return zs_fail(rc);
    return memcpy_impl(dst, src, count, kind, NULL, true, "cudaMemcpy");
}

extern "C" cudaError_t cudaMemsetAsync(void *dev_ptr, int value, size_t count,
                                       cudaStream_t stream)
{
    zs_memory_init();
    uint32_t si = 0;
    cudaError_t rc = zs_stream_index(stream, &si);
    if (rc != cudaSuccess)
        return zs_fail(rc);
    if ((rc = zs_sticky(zs_stream_device(si))) != cudaSuccess)
        return zs_fail(rc);
    if (count == 0)
        return cudaSuccess;
    if (!zs_device_range(dev_ptr, count, NULL)) {
        zs_report("cudaMemsetAsync: %s (%zu bytes) is not a range of device memory",
                  zs_describe_ptr(dev_ptr).c_str(), count);
        return zs_fail(cudaErrorInvalidValue);
    }
    std::unique_ptr<memset_op> op(new memset_op());
    op->dst = dev_ptr;
    op->value = value;
    op->count = count;
    op->what = zs_format("cudaMemsetAsync of %zu bytes at %p", count, dev_ptr);
    zs_enqueue(si, std::move(op));
    return cudaSuccess;
}
