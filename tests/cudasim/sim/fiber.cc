/*
 * fiber: kernels run as a GPU would run them, block by block, each CUDA
 * thread a fiber on its own stack, switched by a few instructions of
 * assembly (x86-64 and aarch64; glibc's ucontext elsewhere).
 *
 * A block's threads start in order. A thread runs until it ends or reaches
 * a synchronisation: __syncthreads parks it until every live thread of the
 * block has arrived (exited threads count as arrived, as on a GPU); a warp
 * operation (shuffle, vote, __syncwarp) parks it until every lane of its mask
 * has arrived at one, then the lanes exchange through per-warp slots (two
 * generations, so a fast lane's next shuffle cannot overwrite what a slow
 * lane has still to read). The scheduler works warp by warp: a warp's lanes
 * run to their next warp operation, it completes, and they go on, so warp
 * code runs in warp order without passes over the whole block. A thread that
 * reaches no synchronisation costs two switches and reuses the previous
 * thread's stack, so barrier-free kernels run at close to plain loops' speed.
 *
 * What a GPU would hang on, or leave undefined, is an error that fails the
 * kernel (cudaErrorLaunchFailure, sticky) with a message: a warp operation
 * whose mask holds an exited or missing lane, lanes of one warp in different
 * warp operations or with different masks, a calling lane outside its mask,
 * and threads left waiting at a barrier the others can never reach.
 *
 * Memory: stacks come from a pool kept for the process (one thread's stack
 * per thread that is parked at once); the block's bookkeeping is reused from
 * launch to launch. Thread safety: the device thread alone runs kernels.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

uint3 threadIdx, blockIdx, blockDim, gridDim;

#if defined(__x86_64__) || defined(__aarch64__)
#define ZS_FIBER_ASM 1
/* Saves the callee-saved registers on the current stack, stores the stack
 * pointer in *save, switches to the stack `to` and restores its registers. A
 * new fiber's stack is laid out so that the return lands in the trampoline,
 * which calls zs_fiber_main(arg) with arg from a callee-saved register. */
extern "C" void zs_fiber_switch(void **save, void *to);
extern "C" void zs_fiber_trampoline(void);
#if defined(__x86_64__)
asm(R"(
    .text
    .globl zs_fiber_switch
    .type zs_fiber_switch, @function
zs_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size zs_fiber_switch, .-zs_fiber_switch
    .globl zs_fiber_trampoline
    .type zs_fiber_trampoline, @function
zs_fiber_trampoline:
    movq %r12, %rdi
    call zs_fiber_main
    ud2
    .size zs_fiber_trampoline, .-zs_fiber_trampoline
)");
#else
asm(R"(
    .text
    .globl zs_fiber_switch
    .type zs_fiber_switch, %function
zs_fiber_switch:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
    .size zs_fiber_switch, .-zs_fiber_switch
    .globl zs_fiber_trampoline
    .type zs_fiber_trampoline, %function
zs_fiber_trampoline:
    mov x0, x19
    bl zs_fiber_main
    brk #0
    .size zs_fiber_trampoline, .-zs_fiber_trampoline
)");
#endif
#else
#include <ucontext.h>
#endif

/* Under AddressSanitizer (make sim-sanitize) every switch is announced, so
 * that ASan knows which stack is current, and a stack's shadow is cleared
 * when it is recycled (an aborted thread leaves its frames' redzones
 * poisoned). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define ZS_ASAN_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ZS_ASAN_SWITCHED(fake, bottom, size) __sanitizer_finish_switch_fiber(fake, bottom, size)
#define ZS_ASAN_CLEAR(p, n) __asan_unpoison_memory_region(p, n)
#else
#define ZS_ASAN_SWITCH(save, bottom, size) ((void)0)
#define ZS_ASAN_SWITCHED(fake, bottom, size) ((void)0)
#define ZS_ASAN_CLEAR(p, n) ((void)0)
#endif

namespace {

const size_t kStackBytes = 128 * 1024;

enum thread_state : uint8_t { T_NEW, T_READY, T_WAIT_WARP, T_WAIT_BLOCK, T_DONE };

struct fiber_thread {
#ifdef ZS_FIBER_ASM
    void *sp;
#else
    ucontext_t uc;
#endif
    char *stack;
    void *asan_fake; /* ASan's fake stack while switched away */
    uint3 idx;
    thread_state state;
    unsigned wait_mask;
    const char *wait_what;
};

struct warp_state {
    uint64_t slot[2][32];
    uint32_t gen;
    uint32_t ran; /* 1 + the generation whose warp collective has run */
};

struct block_run {
    zs_kernel_job *job;
    const char *kernel;
    std::vector<fiber_thread> threads;
    std::vector<warp_state> warps;
    int nthreads;
    fiber_thread *cur;
    bool aborted;
    /* The device thread's stack, for ASan's switch announcements. */
    const void *sched_bottom;
    size_t sched_size;
    void *sched_fake;
#ifdef ZS_FIBER_ASM
    void *sched_sp;
#else
    ucontext_t sched_uc;
#endif
};

block_run *g_run;        /* the running block, or NULL */
std::vector<char *> *g_pool;
char *g_spare;           /* the stack the next new thread takes */
size_t g_page;

char *new_stack()
{
    if (!g_pool->empty()) {
        char *s = g_pool->back();
        g_pool->pop_back();
        return s;
    }
    /* A guard page below the stack turns an overflow into a fault. */
    char *m = (char *)mmap(NULL, kStackBytes + g_page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        zs_report("cannot map a %zu KiB stack for a CUDA thread", kStackBytes >> 10);
        abort();
    }
    mprotect(m, g_page, PROT_NONE);
    return m + g_page;
}

char *take_stack()
{
    char *s = g_spare ? g_spare : new_stack();
    g_spare = NULL;
    return s;
}

void give_stack(char *s)
{
    ZS_ASAN_CLEAR(s, kStackBytes);
    if (!g_spare)
        g_spare = s;
    else
        g_pool->push_back(s);
}

} // namespace

extern "C" [[noreturn]] void zs_fiber_main(void *arg)
{
    block_run *r = static_cast<block_run *>(arg);
    ZS_ASAN_SWITCHED(NULL, &r->sched_bottom, &r->sched_size);
    r->job->run_thread();
    fiber_thread *t = r->cur;
    t->state = T_DONE;
    ZS_ASAN_SWITCH(NULL, r->sched_bottom, r->sched_size); /* this fiber ends */
#ifdef ZS_FIBER_ASM
    zs_fiber_switch(&t->sp, r->sched_sp);
#else
    swapcontext(&t->uc, &r->sched_uc);
#endif
    __builtin_unreachable();
}

namespace {

#ifndef ZS_FIBER_ASM
void uc_entry(unsigned lo, unsigned hi)
{
    zs_fiber_main((void *)(((uintptr_t)hi << 32) | lo));
}
#endif

void start_frame(block_run &r, fiber_thread &t)
{
    t.stack = take_stack();
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)t.stack + kStackBytes) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72); /* trampoline entered with rsp % 16 == 0 */
    memset(sp, 0, 72);
    sp[3] = (uint64_t)&r; /* r12 */
    sp[6] = (uint64_t)&zs_fiber_trampoline;
    t.sp = sp;
#elif defined(__aarch64__)
    uintptr_t top = ((uintptr_t)t.stack + kStackBytes) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 176);
    memset(sp, 0, 176);
    sp[0] = (uint64_t)&r; /* x19 */
    sp[11] = (uint64_t)&zs_fiber_trampoline; /* x30 */
    t.sp = sp;
#else
    getcontext(&t.uc);
    t.uc.uc_stack.ss_sp = t.stack;
    t.uc.uc_stack.ss_size = kStackBytes;
    t.uc.uc_link = NULL;
    uintptr_t a = (uintptr_t)&r;
    makecontext(&t.uc, (void (*)())uc_entry, 2, (unsigned)a, (unsigned)(a >> 32));
#endif
}

/* Runs thread t until it ends or parks. */
void resume(block_run &r, fiber_thread &t)
{
    if (t.state == T_NEW)
        start_frame(r, t);
    t.state = T_READY;
    threadIdx = t.idx;
    r.cur = &t;
    ZS_ASAN_SWITCH(&r.sched_fake, t.stack, kStackBytes);
#ifdef ZS_FIBER_ASM
    zs_fiber_switch(&r.sched_sp, t.sp);
#else
    swapcontext(&r.sched_uc, &t.uc);
#endif
    ZS_ASAN_SWITCHED(r.sched_fake, NULL, NULL);
    if (t.state == T_DONE && t.stack) {
        give_stack(t.stack);
        t.stack = NULL;
    }
}

/* Back to the block scheduler from a thread; returns when it is resumed. */
void park(fiber_thread *t)
{
    ZS_ASAN_SWITCH(&t->asan_fake, g_run->sched_bottom, g_run->sched_size);
#ifdef ZS_FIBER_ASM
    zs_fiber_switch(&t->sp, g_run->sched_sp);
#else
    swapcontext(&t->uc, &g_run->sched_uc);
#endif
    ZS_ASAN_SWITCHED(t->asan_fake, &g_run->sched_bottom, &g_run->sched_size);
}

/* A misuse found by the scheduler: the kernel fails. */
void fail_block(block_run &r, const std::string &why)
{
    zs_exec *x = zs_exec_current();
    zs_fault(x->device, cudaErrorLaunchFailure);
    zs_report("%s, block (%u, %u, %u): %s (a GPU would hang or compute garbage; the simulator "
              "fails the launch with cudaErrorLaunchFailure)",
              x->op->what.c_str(), blockIdx.x, blockIdx.y, blockIdx.z, why.c_str());
    r.aborted = true;
}

std::string lanes(unsigned bits)
{
    std::string s;
    for (int l = 0; l < 32; l++)
        if (bits >> l & 1)
            s += zs_format("%s%d", s.empty() ? "" : ",", l);
    return s;
}

/* Completes warp w's warp operation when all lanes of its mask are in it. */
bool release_warp(block_run &r, int w)
{
    unsigned waiting = 0, done = 0, mask = 0;
    const char *what = NULL;
    int base = w * 32;
    for (int l = 0; l < 32; l++) {
        const fiber_thread &t = r.threads[(size_t)(base + l)];
        if (t.state == T_DONE)
            done |= 1u << l;
        if (t.state != T_WAIT_WARP)
            continue;
        if (waiting && (t.wait_mask != mask || t.wait_what != what)) {
            fail_block(r, zs_format("warp %d: lanes %s are in %s(mask %#x) while lane %d is in "
                                    "%s(mask %#x)",
                                    w, lanes(waiting).c_str(), what, mask, l, t.wait_what,
                                    t.wait_mask));
            return false;
        }
        waiting |= 1u << l;
        mask = t.wait_mask;
        what = t.wait_what;
    }
    if (!waiting)
        return false;
    if (mask & done) {
        fail_block(r, zs_format("warp %d: %s(mask %#x) by lanes %s, but lanes %s of the mask "
                                "have exited or do not exist",
                                w, what, mask, lanes(waiting).c_str(), lanes(mask & done).c_str()));
        return false;
    }
    if (mask & ~waiting)
        return false;
    for (int l = 0; l < 32; l++)
        if (waiting >> l & 1)
            r.threads[(size_t)(base + l)].state = T_READY;
    r.warps[(size_t)w].gen++;
    return true;
}

bool run_block(block_run &r)
{
    const int n = r.nthreads, nw = (n + 31) / 32;
    for (int i = 0; i < nw * 32; i++) {
        fiber_thread &t = r.threads[(size_t)i];
        t.state = i < n ? T_NEW : T_DONE; /* lanes past the block are exited lanes */
        t.stack = NULL;
    }
    for (int w = 0; w < nw; w++)
        r.warps[(size_t)w].gen = r.warps[(size_t)w].ran = 0;
    for (;;) {
        for (int w = 0; w < nw && !r.aborted; w++) {
            do {
                for (int i = w * 32; i < w * 32 + 32 && !r.aborted; i++) {
                    fiber_thread &t = r.threads[(size_t)i];
                    if (t.state == T_NEW || t.state == T_READY)
                        resume(r, t);
                }
            } while (!r.aborted && release_warp(r, w));
        }
        if (r.aborted)
            return false;
        int done = 0, at_barrier = 0;
        unsigned warp_waiters = 0;
        for (int i = 0; i < n; i++) {
            thread_state s = r.threads[(size_t)i].state;
            done += s == T_DONE;
            at_barrier += s == T_WAIT_BLOCK;
            warp_waiters += s == T_WAIT_WARP;
        }
        if (done == n)
            return zs_async_block_end(true);
        if (done + at_barrier == n) {
            for (int i = 0; i < n; i++)
                if (r.threads[(size_t)i].state == T_WAIT_BLOCK)
                    r.threads[(size_t)i].state = T_READY;
            continue;
        }
        fail_block(r, zs_format("%d threads wait at __syncthreads, %u in a warp operation whose "
                                "other lanes are at __syncthreads, %d have exited: the barrier "
                                "can never complete",
                                at_barrier, warp_waiters, done));
        return false;
    }
}

/* Gives parked threads' stacks back after a failed block. */
void reclaim(block_run &r)
{
    for (fiber_thread &t : r.threads)
        if (t.stack) {
            give_stack(t.stack);
            t.stack = NULL;
        }
}

/* The warp exchange: deposit, park until the warp operation completes. */
uint32_t exchange(unsigned mask, uint64_t bits, const char *what, fiber_thread **self)
{
    block_run *r = g_run;
    if (!r) {
        zs_report("%s called outside a kernel", what);
        abort();
    }
    fiber_thread *t = r->cur;
    int tid = (int)(t - r->threads.data()), lane = tid & 31;
    warp_state &w = r->warps[(size_t)(tid >> 5)];
    if (!(mask >> lane & 1)) {
        zs_exec *x = zs_exec_current();
        zs_fault(x->device, cudaErrorLaunchFailure);
        zs_report("%s at %s: %s(mask %#x) called by lane %d, which is not in its mask",
                  x->op->what.c_str(), zs_kernel_where().c_str(), what, mask, lane);
        zs_kernel_abort();
    }
    uint32_t gen = w.gen;
    w.slot[gen & 1][lane] = bits;
    t->state = T_WAIT_WARP;
    t->wait_mask = mask;
    t->wait_what = what;
    park(t);
    *self = t;
    return gen;
}

} // namespace

/* ---- kernel-side synchronisation (zs_device.h) ---- */

void __syncthreads(void)
{
    if (!g_run) {
        zs_report("__syncthreads called outside a kernel");
        abort();
    }
    fiber_thread *t = g_run->cur;
    t->state = T_WAIT_BLOCK;
    t->wait_what = "__syncthreads";
    park(t);
}

void __syncwarp(unsigned int mask)
{
    fiber_thread *t;
    exchange(mask, 0, "__syncwarp", &t);
}

uint64_t zs_shfl(unsigned int mask, uint64_t bits, zs_shfl_mode mode, int arg, int width,
                 const char *what)
{
    if (width < 1 || width > 32 || (width & (width - 1))) {
        zs_exec *x = zs_exec_current();
        zs_fault(x ? x->device : 0, cudaErrorLaunchFailure);
        zs_report("%s: width %d is not a power of two up to 32", what, width);
        zs_kernel_abort();
    }
    fiber_thread *t;
    uint32_t gen = exchange(mask, bits, what, &t);
    int tid = (int)(t - g_run->threads.data()), lane = tid & 31, seg = lane & ~(width - 1);
    int src = lane;
    switch (mode) {
    case ZS_SHFL_IDX:
        src = seg + (arg & (width - 1));
        break;
    case ZS_SHFL_UP:
        src = lane - arg >= seg ? lane - arg : lane;
        break;
    case ZS_SHFL_DOWN:
        src = lane + arg < seg + width ? lane + arg : lane;
        break;
    case ZS_SHFL_XOR:
        src = (lane ^ arg) < seg + width ? lane ^ arg : lane;
        break;
    }
    if (src < 0 || src > 31 || !(mask >> src & 1)) {
        zs_exec *x = zs_exec_current();
        zs_fault(x->device, cudaErrorLaunchFailure);
        zs_report("%s at %s: %s: lane %d reads lane %d, which is not in the mask %#x",
                  x->op->what.c_str(), zs_kernel_where().c_str(), what, lane, src, mask);
        zs_kernel_abort();
    }
    return g_run->warps[(size_t)(tid >> 5)].slot[gen & 1][src];
}

/* The lanes wait in exchange() until the last of the mask arrives; the
 * scheduler then resumes them in lane order, so the first one back runs fn
 * while every other lane's data is still on its parked stack. */
void zs_warp_collective(unsigned mask, void *mine, void (*fn)(void *const lanes[32], void *ctx),
                        void *ctx, const char *what)
{
    fiber_thread *t;
    uint32_t gen = exchange(mask, (uint64_t)(uintptr_t)mine, what, &t);
    warp_state &w = g_run->warps[(size_t)((t - g_run->threads.data()) >> 5)];
    if (w.ran == gen + 1)
        return;
    void *lanes[32];
    for (int l = 0; l < 32; l++)
        lanes[l] = mask >> l & 1 ? (void *)(uintptr_t)w.slot[gen & 1][l] : NULL;
    fn(lanes, ctx);
    w.ran = gen + 1;
}

unsigned int zs_vote(unsigned int mask, int pred, zs_vote_mode mode, const char *what)
{
    fiber_thread *t;
    uint32_t gen = exchange(mask, pred != 0, what, &t);
    int tid = (int)(t - g_run->threads.data());
    const uint64_t *slot = g_run->warps[(size_t)(tid >> 5)].slot[gen & 1];
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1) && slot[l])
            ballot |= 1u << l;
    switch (mode) {
    case ZS_VOTE_ALL:
        return ballot == mask;
    case ZS_VOTE_ANY:
        return ballot != 0;
    case ZS_VOTE_BALLOT:
        return ballot;
    }
    return 0;
}

/* ---- the executor (zs_impl.h) ---- */

void zs_kernel_abort()
{
    block_run *r = g_run;
    r->aborted = true;
    r->cur->state = T_DONE;
    park(r->cur);
    __builtin_unreachable();
}

unsigned zs_thread_in_block()
{
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

extern "C" char __bss_start[], _end[];

bool zs_in_shared(uintptr_t a, size_t n)
{
    if (a - zs_dyn_lo < zs_dyn_cap) /* dynamic: only the running launch's bytes */
        return a + n - zs_dyn_lo <= zs_dyn_bytes;
    return a >= (uintptr_t)__bss_start && a + n <= (uintptr_t)_end;
}

std::string zs_kernel_where()
{
    if (!g_run || !g_run->cur)
        return "";
    const uint3 &t = g_run->cur->idx;
    return zs_format("block (%u, %u, %u) thread (%u, %u, %u)", blockIdx.x, blockIdx.y,
                     blockIdx.z, t.x, t.y, t.z);
}

namespace {
alignas(128) unsigned char g_dyn[zs_dyn_cap];
}

uintptr_t zs_dyn_lo = (uintptr_t)g_dyn;
size_t zs_dyn_bytes;

void *zs_dynamic_shared() { return g_dyn; }

bool zs_run_grid(zs_kernel_job &job, dim3 grid, dim3 block, size_t shared_bytes,
                 const char *name)
{
    static block_run *r;
    if (!r) {
        r = new block_run();
        g_pool = new std::vector<char *>();
        g_page = (size_t)sysconf(_SC_PAGESIZE);
    }
    r->job = &job;
    r->kernel = name;
    r->nthreads = (int)(block.x * block.y * block.z);
    r->threads.resize((size_t)(r->nthreads + 31) / 32 * 32);
    r->warps.resize((size_t)(r->nthreads + 31) / 32);
    r->aborted = false;
    r->cur = NULL;
    for (size_t i = 0; i < r->threads.size(); i++)
        r->threads[i].idx = uint3{(unsigned)i % block.x, (unsigned)i / block.x % block.y,
                                  (unsigned)i / (block.x * block.y)};
    blockDim = uint3{block.x, block.y, block.z};
    gridDim = uint3{grid.x, grid.y, grid.z};
    /* Undefined at a kernel's start on a GPU: NaN-patterned here, so that
     * a read before the kernel's own write shows. */
    zs_dyn_bytes = shared_bytes;
    memset(g_dyn, 0xff, shared_bytes);
    g_run = r;
    bool ok = true;
    for (unsigned z = 0; z < grid.z && ok; z++)
        for (unsigned y = 0; y < grid.y && ok; y++)
            for (unsigned x = 0; x < grid.x && ok; x++) {
                blockIdx = uint3{x, y, z};
                ok = run_block(*r);
            }
    if (!ok) {
        zs_async_block_end(false);
        reclaim(*r);
    }
    r->cur = NULL;
    g_run = NULL;
    zs_dyn_bytes = 0;
    return ok;
}
