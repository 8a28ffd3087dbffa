/*
 * launch: what zs_launch (tests/cudasim/include/zs_launch.h) does with a
 * kernel launch: the checks a launch gets on a GPU, the pointer checks a GPU
 * would only show as a crash, and the kernel as a stream operation.
 *
 * Configuration errors are the launch's own error, as CUDA's (not sticky,
 * cudaGetLastError returns them): more than 1024 threads per block or beyond
 * (1024, 1024, 64), a grid beyond (2^31 - 1, 65535, 65535) or with a zero
 * extent (cudaErrorInvalidConfiguration), dynamic shared memory over 48 KiB,
 * or over the kernel's cudaFuncSetAttribute opt-in (at most 227 KiB)
 * (cudaErrorInvalidValue), a stream that is not a live stream of the current
 * device (cudaErrorInvalidResourceHandle). A bad pointer argument is
 * reported with the kernel, the launch site and the argument, and fails the
 * device with cudaErrorIllegalAddress; the kernel is not queued.
 *
 * Memory: the launch takes the copied arguments (the job) and frees them
 * when the kernel has run; interned names live for the process.
 * Thread safety: any host thread.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <cuda_runtime.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <set>

#include <time.h>

/* The op --profile is counting on this thread, and its count of
 * host-blocking calls (engine/monitor/profile.c): weak, since the
 * simulator's own tests link no engine. */
extern "C" const char *zt_profile_current_op(void) __attribute__((weak));
extern "C" void zt_profile_host_block(void) __attribute__((weak));

const char *zs_profile_op() { return zt_profile_current_op ? zt_profile_current_op() : NULL; }

namespace {

class kernel_op final : public zs_op {
public:
    std::unique_ptr<zs_kernel_job> job;
    dim3 grid, block;
    size_t shared_bytes;
    const char *name;
    const char *prof_op; /* the op --profile counted at the launch, or NULL */

    bool start() override
    {
        if (zs_cfg().kernel_delay_us) {
            const uint64_t us = zs_cfg().kernel_delay_us;
            struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        zs_exec *x = zs_exec_current();
        x->kernel = true;
        zs_perf_launch_begin();
        zs_run_grid(*job, grid, block, shared_bytes, name);
        zs_perf_launch_end(prof_op);
        x->kernel = false;
        return true;
    }
};

/* Why pointer p may not be handed to a kernel of `device`, or NULL. Words
 * scanned out of a class argument (not declared pointers) that point at
 * nothing are taken for data. */
const char *bad_pointer(const void *p, int device, bool declared)
{
    if (!p)
        return NULL;
    zs_ptr_info i = zs_classify(p);
    switch (i.kind) {
    case ZS_PTR_NULL:
        return NULL;
    case ZS_PTR_DEVICE:
        return i.device == device ? NULL : "another device's memory";
    case ZS_PTR_DEVICE_FREE:
        return "in the device range but in no live allocation (freed, or out of range)";
    case ZS_PTR_PINNED:
        return "a host pointer (page-locked, cudaMallocHost), not device memory";
    case ZS_PTR_HOST:
        return "a host pointer, not device memory";
    case ZS_PTR_UNMAPPED:
        return declared ? "an address with nothing mapped" : NULL;
    }
    return NULL;
}

/* Checks every pointer argument; false (reported) on the first bad one. */
bool check_args(const zs_launch_config &cfg, const zs_kernel_job &job, int device)
{
    for (int i = 0; i < job.arg_count(); i++) {
        zs_arg_desc a = job.arg(i);
        if (a.kind == ZS_ARG_SCALAR)
            continue;
        size_t words = a.kind == ZS_ARG_POINTER ? 1 : a.size / sizeof(void *);
        for (size_t w = 0; w < words; w++) {
            const void *p;
            memcpy(&p, (const char *)a.bytes + w * sizeof(void *), sizeof p);
            const char *why = bad_pointer(p, device, a.kind == ZS_ARG_POINTER);
            if (!why)
                continue;
            std::string where = a.kind == ZS_ARG_POINTER
                                    ? ""
                                    : zs_format(", bytes %zu..%zu", w * sizeof(void *),
                                                w * sizeof(void *) + sizeof(void *) - 1);
            zs_report("kernel %s launched at %s:%d on device %d: argument %d (%s%s) is %s: %s",
                      cfg.kernel, cfg.file, cfg.line, device, i, a.type, where.c_str(),
                      zs_describe_ptr(p).c_str(), why);
            return false;
        }
    }
    return true;
}

cudaError_t check_config(const zs_launch_config &cfg, int device)
{
    const dim3 &b = cfg.block, &g = cfg.grid;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
        (uint64_t)b.x * b.y * b.z > 1024 || g.x == 0 || g.y == 0 || g.z == 0 ||
        g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        zs_report("kernel %s launched at %s:%d: grid (%u, %u, %u) of blocks (%u, %u, %u) is "
                  "beyond the device's limits (blocks of at most 1024 threads and (1024, 1024, "
                  "64); grids up to (2^31 - 1, 65535, 65535)): cudaErrorInvalidConfiguration",
                  cfg.kernel, cfg.file, cfg.line, g.x, g.y, g.z, b.x, b.y, b.z);
        return cudaErrorInvalidConfiguration;
    }
    size_t limit = zs_max_dynamic_shared(cfg.entry);
    if (cfg.shared_bytes > limit) {
        zs_report("kernel %s launched at %s:%d on device %d: %zu bytes of dynamic shared memory, "
                  "more than its limit of %zu (48 KiB, or its cudaFuncSetAttribute opt-in of up "
                  "to 227 KiB): cudaErrorInvalidValue",
                  cfg.kernel, cfg.file, cfg.line, device, cfg.shared_bytes, limit);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

} // namespace

void zs_note_host_block()
{
    if (zt_profile_host_block)
        zt_profile_host_block();
}

void zs_log_launch(const char *entry, dim3 block, size_t shared_bytes, const char *text,
                   const char *file, int line)
{
    const char *path = zs_cfg().launch_log;
    if (!path)
        return;
    const char *op = zs_profile_op();
    std::string key = zs_format("%s\t%s\t%u\t%u\t%u\t%zu", op ? op : "-", entry, block.x,
                                block.y, block.z, shared_bytes);
    static std::mutex lock;
    static std::set<std::string> seen;
    {
        std::lock_guard<std::mutex> l(lock);
        if (!seen.insert(key + (strcmp(entry, "-") ? "" : text)).second)
            return;
    }
    static const std::string exe = [] {
        char buf[4096];
        ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
        return n > 0 ? std::string(buf, (size_t)n) : std::string("-");
    }();
    std::string out = zs_format("%s\t%s\t%s:%d\t%s\n", key.c_str(), text, file, line, exe.c_str());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, out.data(), out.size()) != (ssize_t)out.size())
        zs_report("ZT_SIM_LAUNCH_LOG=%s: cannot append to it: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
}

const char *zs_intern_name(const char *pretty)
{
    static std::mutex lock;
    static std::set<std::string> *names = new std::set<std::string>();
    std::string s = pretty;
    size_t at = s.find(" = ", s.find("[with "));
    if (at != std::string::npos && s.back() == ']')
        s = s.substr(at + 3, s.size() - at - 4);
    for (size_t p; (p = s.find("{anonymous}::")) != std::string::npos;)
        s.erase(p, strlen("{anonymous}::"));
    std::lock_guard<std::mutex> l(lock);
    return names->insert(s).first->c_str();
}

void zs_launch_submit(const zs_launch_config &cfg, zs_kernel_job *raw)
{
    std::unique_ptr<zs_kernel_job> job(raw);
    zs_memory_init();
    uint32_t si = 0;
    cudaError_t rc = zs_check_current();
    if (rc == cudaSuccess)
        rc = zs_stream_index(cfg.stream, &si);
    if (rc != cudaSuccess) {
        zs_fail(rc);
        return;
    }
    int device = zs_stream_device(si);
    if (device != zs_current_device()) {
        zs_report("kernel %s launched at %s:%d on a stream of device %d while device %d is "
                  "current",
                  cfg.kernel, cfg.file, cfg.line, device, zs_current_device());
        zs_fail(cudaErrorInvalidResourceHandle);
        return;
    }
    if ((rc = zs_sticky(device)) != cudaSuccess || (rc = check_config(cfg, device)) != cudaSuccess) {
        zs_fail(rc);
        return;
    }
    if (!check_args(cfg, *job, device)) {
        zs_fault(device, cudaErrorIllegalAddress);
        zs_fail(cudaErrorIllegalAddress);
        return;
    }
    if (zs_cfg().launch_log) {
        /* The kernel by its offset in the executable, nm's address in a
         * position-independent one: the audit names the instantiation by
         * it, where the launch's text (flash_dq_kernel<DT, false>) would
         * not say which one ran. */
        Dl_info info;
        std::string entry = "-";
        if (cfg.entry && dladdr(cfg.entry, &info) && info.dli_fbase)
            entry = zs_format("0x%zx", (size_t)((uintptr_t)cfg.entry - (uintptr_t)info.dli_fbase));
        zs_log_launch(entry.c_str(), cfg.block, cfg.shared_bytes, cfg.kernel, cfg.file, cfg.line);
    }
    std::unique_ptr<kernel_op> op(new kernel_op());
    op->grid = cfg.grid;
    op->block = cfg.block;
    op->shared_bytes = cfg.shared_bytes;
    op->name = cfg.kernel;
    op->prof_op = zs_profile_op();
    op->job = std::move(job);
    op->what = zs_format("kernel %s<<<(%u, %u, %u), (%u, %u, %u)>>> (%s:%d)", cfg.kernel,
                         cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y,
                         cfg.block.z, cfg.file, cfg.line);
    zs_enqueue(si, std::move(op));
}
