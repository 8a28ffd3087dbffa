/*
 * zs_impl: what the simulator's files share (tests/cudasim/sim, C++17):
 * settings, messages and errors (runtime.cc), the device address range and
 * allocations (memory.cc), streams, operations and the device thread
 * (stream.cc), the race checker's execution context (racecheck.cc) and the
 * kernel executor (fiber.cc). A map of the files:
 *
 *   runtime.cc    settings (ZT_SIM_*), errors (last and sticky), devices, properties
 *   memory.cc     device and pinned memory, pointer classes, copies and memsets
 *   stream.cc     streams as queues, events, the device thread and its seeded picks
 *   racecheck.cc  vector clocks, the shadow of device memory, access hooks, reports
 *   fiber.cc      CUDA threads as fibers: context switch, blocks, barriers, shuffles
 *   launch.cc     launch checks (limits, pointer arguments) and the kernel operation
 *   perf.cc       performance counters: requests, sectors, wavefronts, bank conflicts
 *   cublas.cc     cuBLAS: argument checks and GEMMs on OpenBLAS
 *   nccl.cc       NCCL communicators over MPI; nccl_coll.cc their collectives
 *
 * Memory: the simulator's state is made on first use and lives for the
 * process (never freed, so that no exit-time destructor runs under the device
 * thread); stream and event records stay after destroy so that a stale handle
 * is recognised. Thread safety: one mutex (zs_sched_lock) guards streams,
 * events and queues; allocations have their own (memory.cc); the device
 * thread alone runs operations.
 */
#ifndef ZS_IMPL_H
#define ZS_IMPL_H

#include <cuda_runtime.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#ifndef ZS_CUDASIM_HEADERS
#error "the simulator must be compiled against tests/cudasim/include"
#endif

#define ZS_MAX_DEVICES 16

/* ---- settings and messages (runtime.cc) ---- */

typedef struct {
    int devices;           /* visible GPUs: ZT_SIM_DEVICES (default 1), cut by ZT_SIM_VISIBLE_DEVICES */
    int physical[ZS_MAX_DEVICES]; /* visible ordinal -> the node's GPU (its UUID and bus id) */
    size_t device_bytes;   /* ZT_SIM_DEVICE_MEMORY_MB, default 80 GiB */
    uint64_t seed;         /* ZT_SIM_SEED: the device thread's picks, default 1 */
    bool racecheck;        /* ZT_SIM_RACECHECK, default 1 */
    double nccl_timeout_s; /* ZT_SIM_NCCL_TIMEOUT, default 120 s */
    bool abort_on_error;   /* ZT_SIM_ABORT: abort() at the first reported error */
    /* ZT_SIM_NCCL_STALL=R:N: on world rank R the N-th collective (1-based,
     * counted over all communicators) starts and never progresses, as a
     * stuck peer; stall_rank -1 when unset. */
    int stall_rank;
    uint64_t stall_n;
    /* ZT_SIM_KERNEL_DELAY_US: every kernel first sleeps this long, a device
     * far slower than its host (default 0). */
    uint64_t kernel_delay_us;
    /* ZT_SIM_STATS=1: at exit, a "zt-sim: stats:" line on stderr (the
     * longest a collective was queued behind its stream's earlier work). */
    bool stats;
    /* ZT_SIM_LAUNCH_LOG=PATH: every distinct launch configuration (kernel,
     * block, dynamic shared memory) is appended to PATH once per process,
     * for the SASS audit's occupancy (scripts/gpu_audit.py); NULL when
     * unset. */
    const char *launch_log;
    /* ZT_SIM_PERF=1: the performance counters of perf.cc, per kernel
     * launch, into --profile's report. */
    bool perf;
    /* ZT_SIM_SHARED_OPTIN_KB: the most dynamic shared memory a kernel can
     * be opted in to (cudaFuncSetAttribute), 48 to 227 KiB (the H100's,
     * the default): a smaller GPU's limit, for the callers' fall backs. */
    size_t shared_optin;
} zs_config;

const zs_config &zs_cfg();
/* With ZT_SIM_LAUNCH_LOG, appends "OP ENTRY BX BY BZ SHARED TEXT FILE:LINE
 * EXE" (tab-separated) the first time this process sees the line's first six
 * fields: OP is the op --profile is counting ("-" outside one), ENTRY a
 * kernel's offset in the executable EXE or the library call
 * ("cublas-tensor": 16-bit or TF32 operands, "cublas-fma": plain fp32). */
/* A call that blocks the host on the device (synchronisation, a copy that
 * returns when done, cudaFree): counted by --profile (engine/monitor/profile.h,
 * zt_profile_host_block, weak) to the op the host is in. */
void zs_note_host_block();
/* zt_profile_current_op (weak): the op --profile is counting on this thread,
 * or NULL. */
const char *zs_profile_op();
void zs_log_launch(const char *entry, dim3 block, size_t shared_bytes, const char *text,
                   const char *file, int line);
/* "zt-sim: error: ..." (with the MPI rank when there is one) on stderr. */
void zs_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void zs_vreport(const char *fmt, va_list ap);
std::string zs_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double zs_now();

/* ---- errors (runtime.cc) ---- */

/* Records rc as the calling thread's last error (unless cudaSuccess) and
 * returns it. */
cudaError_t zs_fail(cudaError_t rc);
/* The device's sticky error, or cudaSuccess. */
cudaError_t zs_sticky(int device);
/* A device operation failed: the first such error sticks to the device. */
void zs_fault(int device, cudaError_t rc);
int zs_current_device();
/* cudaSuccess when the calling thread's current device exists. */
cudaError_t zs_check_current();

/* ---- memory (memory.cc) ---- */

/* The window holding every device's memory: a pointer is device memory only
 * if it is in here, inside a live allocation. */
extern uintptr_t zs_dev_lo;
extern size_t zs_dev_span;

enum zs_ptr_kind {
    ZS_PTR_NULL,
    ZS_PTR_DEVICE,      /* inside a live device allocation */
    ZS_PTR_DEVICE_FREE, /* in the device window, in no live allocation */
    ZS_PTR_PINNED,      /* cudaMallocHost memory */
    ZS_PTR_HOST,        /* other mapped host memory */
    ZS_PTR_UNMAPPED     /* nothing there */
};

typedef struct {
    zs_ptr_kind kind;
    int device;       /* ZS_PTR_DEVICE / _FREE */
    uintptr_t base;   /* the allocation (device or pinned) */
    size_t size;      /* its size as asked */
} zs_ptr_info;

void zs_memory_init();
zs_ptr_info zs_classify(const void *p);
/* True when [p, p + n) lies inside one live allocation of a device. */
bool zs_device_range(const void *p, size_t n, zs_ptr_info *info);
/* "0x... (device 0 allocation 0x... + 64 of 4096 bytes)" and the like. */
std::string zs_describe_ptr(const void *p);
const char *zs_ptr_kind_name(zs_ptr_kind k);
size_t zs_device_used(int device);
/* The allocation containing device address a, for the kernel access checks:
 * false when there is none. */
bool zs_find_alloc(uintptr_t a, uintptr_t *base, size_t *size, int *device);

/* ---- vector clocks ---- */

/* Component i: the latest operation (sequence number) of stream i known to
 * have completed, or to precede, in happens-before order. */
typedef std::vector<uint64_t> zs_vc;
void zs_vc_join(zs_vc &into, const zs_vc &from);

/* ---- operations and streams (stream.cc) ---- */

struct zs_stream;

/* An operation waits until stream `stream` has completed `seq`. */
typedef struct {
    uint32_t stream;
    uint64_t seq;
} zs_dep;

/* A stream operation. The host makes it, zs_enqueue gives it its place and
 * clock; the device thread starts it when it is at its stream's head, its
 * dependencies have completed and can_start agrees. */
class zs_op {
public:
    virtual ~zs_op() = default;
    /* Device thread. True: complete; false: in flight, poll until done. */
    virtual bool start() = 0;
    virtual bool poll() { return true; }
    /* Under the scheduler lock: an ordering beyond the stream's (NCCL's
     * per-communicator issue order). */
    virtual bool can_start() const { return true; }
    /* Device thread: the device has a sticky error, the op is dropped. */
    virtual void skip() {}
    /* Lets the scheduler and the hang report tell ops apart. */
    virtual bool is_collective() const { return false; }

    std::string what; /* "kernel map_kernel<4, axpy_op> (file:line)" */
    int device = 0;
    uint32_t stream = 0; /* stream index */
    uint64_t seq = 0;    /* 1, 2, ... within the stream */
    uint64_t stamp = 0;  /* zs_stamp(stream, seq) */
    zs_vc vc;            /* its clock: everything that happens before it */
    std::vector<zs_dep> deps;
};

/* (stream index + 1) << 40 | seq: never 0. */
inline uint64_t zs_stamp(uint32_t stream, uint64_t seq)
{
    return ((uint64_t)(stream + 1) << 40) | seq;
}
inline uint32_t zs_stamp_stream(uint64_t stamp) { return (uint32_t)(stamp >> 40) - 1; }
inline uint64_t zs_stamp_seq(uint64_t stamp) { return stamp & (((uint64_t)1 << 40) - 1); }

/* The scheduler's lock (streams, events, queues, clocks). */
std::unique_lock<std::mutex> zs_sched_lock();
/* Validates a stream handle (0: the current device's legacy stream) and
 * gives its index; an error otherwise (not recorded). */
cudaError_t zs_stream_index(cudaStream_t s, uint32_t *index);
int zs_stream_device(uint32_t index);
/* A stream's name for messages: "stream 3 (device 0)". */
std::string zs_stream_name(uint32_t index);
/* Queues op on stream `index` (lock not held): gives it its sequence number,
 * stamp and clock (including what the calling host thread has observed; a
 * copy goes to *vc_out when given). Returns its sequence number. */
uint64_t zs_enqueue(uint32_t index, std::unique_ptr<zs_op> op, zs_vc *vc_out = nullptr);
/* Blocks the calling host thread until stream `index` has completed `seq`,
 * then makes everything before that point visible to it. */
void zs_host_wait(uint32_t index, uint64_t seq);
/* What the calling host thread has observed complete. */
zs_vc &zs_host_vc();
/* Waits for every stream of the device (cudaFree, cudaDeviceSynchronize). */
void zs_device_wait(int device);
/* The description of op (stream, seq), if still in its stream's history. */
std::string zs_op_history(uint32_t stream, uint64_t seq);

/* ---- execution context and race checking (racecheck.cc) ---- */

/* What the device thread is running, read by the access hooks. */
typedef struct {
    const zs_op *op;
    uint64_t stamp;    /* op->stamp, read on every access */
    int device;
    bool kernel;       /* accesses come from instrumented kernel code */
    bool race;         /* ZT_SIM_RACECHECK */
    bool reported;     /* a race of this op was reported already */
    bool faulted;      /* an access failed: the kernel stops */
    /* Allocations this op touched lately (base, size), most recent first,
     * for the bounds check. */
    uintptr_t cache_lo[4];
    size_t cache_len[4];
} zs_exec;

void zs_exec_begin(zs_exec *x, const zs_op *op, bool kernel);
void zs_exec_end();
zs_exec *zs_exec_current();
/* An access by a non-kernel operation (copy, memset, cuBLAS, NCCL) to the
 * device range [p, p + n): checked against other streams' accesses. */
void zs_race_range(const void *p, size_t n, bool write);
/* Forgets the shadow of a freed range (memory.cc). */
void zs_shadow_release(uintptr_t lo, size_t len);
void zs_shadow_init(uintptr_t shadow_base);
/* Bytes of shadow per byte of device window. */
size_t zs_shadow_bytes(size_t device_bytes);

/* ---- performance counters (perf.cc, ZT_SIM_PERF) ---- */

/* True while a kernel runs with ZT_SIM_PERF: the access hooks then call
 * zs_perf_access for every access (device: in the device window). */
extern std::atomic<bool> zs_perf_active;
void zs_perf_access(uintptr_t a, size_t n, bool device, const void *site);
/* One warp's mma.sync (warpmma.cc, once per warp-instruction). */
void zs_perf_tensor_instruction();
/* Around a kernel on the device thread; op: what --profile was counting
 * when it was launched (NULL: nothing). */
void zs_perf_launch_begin();
void zs_perf_launch_end(const char *op);
/* A cuBLAS call of op: one launch, no accesses counted. */
void zs_perf_library_call(const char *op);

/* ---- kernels (fiber.cc, launch.cc) ---- */

/* The dynamic shared memory a kernel may ask for (48 KiB, or its
 * cudaFuncSetAttribute opt-in; runtime.cc). */
size_t zs_max_dynamic_shared(const void *func);

class zs_kernel_job;
/* A warp collective (warpmma.cc): the lanes of mask arrive with a pointer to
 * their own data; once all are in, fn runs once with every lane's pointer
 * (NULL outside the mask) while they wait, then they go on. */
void zs_warp_collective(unsigned mask, void *mine, void (*fn)(void *const lanes[32], void *ctx),
                        void *ctx, const char *what);
/* cp.async copies not yet waited for: the access hooks then call
 * zs_async_access, which reports an access to their bytes (warpmma.cc). */
extern std::atomic<int> zs_async_pending;
void zs_async_access(uintptr_t a, size_t n, bool write);
/* At the end of a block: copies never waited for are forgotten, and with
 * report, reported (the kernel fails: false). */
bool zs_async_block_end(bool report);
/* A kernel's access to device memory [p, p + n) made by the simulator on its
 * behalf (a cp.async's source): the bounds and race checks of the access
 * hooks (racecheck.cc). */
void zs_kernel_access(const void *p, size_t n, bool write);

/* Runs the grid block by block; false when a thread faulted or the block's
 * threads could not all finish (a barrier misused): the device then has a
 * sticky error and the message was printed. */
bool zs_run_grid(zs_kernel_job &job, dim3 grid, dim3 block, size_t shared_bytes,
                 const char *name);
/* The blocks' dynamic shared memory (zs_dynamic_shared, fiber.cc): a
 * buffer of the H100's opt-in (the most ZT_SIM_SHARED_OPTIN_KB allows) in
 * .bss, so that it is shared memory to the counters; [zs_dyn_lo, +
 * zs_dyn_bytes) is the running launch's. An access to the buffer past that
 * is the kernel's illegal address (racecheck.cc). */
const size_t zs_dyn_cap = 227 * 1024;
extern uintptr_t zs_dyn_lo;
extern size_t zs_dyn_bytes;
/* Ends the running kernel from inside one of its threads (an illegal
 * access): never returns. */
[[noreturn]] void zs_kernel_abort();
/* "block (1, 0, 0) thread (33, 0, 0)" of the running thread, or "". */
std::string zs_kernel_where();
/* The running thread's index in its block (x fastest), for the kernels'
 * helpers (perf.cc, warpmma.cc). */
unsigned zs_thread_in_block();
/* Whether [a, a + n) is __shared__ memory: `static` in the simulator
 * (zs_device.h), so the executable's .bss. */
bool zs_in_shared(uintptr_t a, size_t n);

#endif
