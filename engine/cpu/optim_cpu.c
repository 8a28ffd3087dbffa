/*
 * optim_cpu: the CPU kernels of Adam/AdamW and SGD (engine/cpu/cpu.h), behind
 * the CPU backend's adam/sgd ops and the offloaded optimizer
 * (engine/train/optim.c), so an offloaded step rounds exactly like one on the
 * CPU device.
 *
 * The kernels follow the reference equations operation for operation in fp32
 * (FusedAdam's multi_tensor_adam for Adam, torch.optim.SGD for SGD), with no
 * reassociation, so a CPU step rounds like the GPU kernel it stands in for.
 * The mode branches are taken once, outside the loops, so every loop body is
 * straight-line code the compiler turns into vector instructions.
 *
 * One body per kernel, compiled several times: for the build's baseline
 * (-march=x86-64-v2: 4 floats a vector), and on x86-64 also for AVX2 (8) and
 * AVX-512F (16) through GCC target attributes, picked at run time from what
 * the CPU has (zt_cpu_isa_get). Adam's divides and square roots bound one
 * core at 4 lanes; wider vectors run the same operations on more elements at
 * once. Every path gives the same bits: the Makefile compiles this file with
 * -ffp-contract=off, so no multiply and add fuse into an FMA (which rounds
 * once where the reference rounds twice; the AVX2 clone does not even have
 * FMA instructions to use); division and square root are correctly rounded
 * at every width, and each element sees the same operations in the same
 * order whichever vector or scalar tail handles it.
 *
 * Threads: one OpenMP region per call, each thread running the chosen body
 * on the contiguous share `omp for schedule(static)` would give it (so a
 * shard first touched by such a loop is streamed by the thread that placed
 * its pages). Element-wise: results do not depend on the thread count.
 *
 * Memory: in place on the caller's buffers; nothing is allocated.
 * Collective: none.
 */
#include "engine/cpu/cpu.h"
#include "engine/env.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread: waking the team
 * costs more than the loop. */
#define ZT_OPTIM_PAR_MIN 32768

/* What one Adam step passes to its per-element body, computed once per call
 * on the host as FusedAdam computes its kernel arguments. */
typedef struct {
    float lr, b1, b2, eps, wd, omb1, omb2, bc1, bc2;
    bool adam_w_mode;
} zt_adam_consts;

/* SGD's five loops, in zt_sgd_cpu's order of choice. */
typedef enum {
    ZT_SGD_PLAIN,          /* no momentum */
    ZT_SGD_FIRST_NESTEROV, /* momentum, first step, nesterov */
    ZT_SGD_FIRST,          /* momentum, first step */
    ZT_SGD_NESTEROV,       /* momentum, later steps, nesterov */
    ZT_SGD_MOMENTUM        /* momentum, later steps */
} zt_sgd_mode;

typedef struct {
    float lr, mom, wd, omd;
    zt_sgd_mode mode;
} zt_sgd_consts;

/* ---- the bodies, one per kernel --------------------------------------------
 * always_inline: each ISA's wrapper below gets its own copy, vectorised for
 * that wrapper's target. restrict: the parameter shard, its gradient and the
 * optimizer state are disjoint buffers; saying so lets the loops vectorise
 * without alias checks. */

static inline __attribute__((always_inline)) void
zt_adam_body(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
             int64_t n, const zt_adam_consts *c)
{
    const float lr = c->lr, b1 = c->b1, b2 = c->b2, eps = c->eps, wd = c->wd;
    const float omb1 = c->omb1, omb2 = c->omb2, bc1 = c->bc1, bc2 = c->bc2;
    if (c->adam_w_mode) {
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i], pi = p[i];
            float mi = b1 * m[i] + omb1 * gi;
            float vi = b2 * v[i] + omb2 * gi * gi;
            float update = (mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * pi;
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - lr * update;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            float mi = b1 * m[i] + omb1 * gi;
            float vi = b2 * v[i] + omb2 * gi * gi;
            float update = (mi / bc1) / (sqrtf(vi / bc2) + eps);
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - lr * update;
        }
    }
}

static inline __attribute__((always_inline)) void
zt_sgd_body(float *restrict p, const float *restrict g, float *restrict buf, int64_t n,
            const zt_sgd_consts *c)
{
    const float lr = c->lr, mom = c->mom, wd = c->wd, omd = c->omd;
    switch (c->mode) {
    case ZT_SGD_PLAIN:
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            p[i] = pi - lr * (g[i] + wd * pi);
        }
        break;
    case ZT_SGD_FIRST_NESTEROV:
        /* torch starts the buffer as a copy of the gradient, undamped. */
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            buf[i] = gi;
            p[i] = pi - lr * (gi + mom * gi);
        }
        break;
    case ZT_SGD_FIRST:
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            buf[i] = gi;
            p[i] = pi - lr * gi;
        }
        break;
    case ZT_SGD_NESTEROV:
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            float bi = mom * buf[i] + omd * gi;
            buf[i] = bi;
            p[i] = pi - lr * (gi + mom * bi);
        }
        break;
    case ZT_SGD_MOMENTUM:
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float bi = mom * buf[i] + omd * (g[i] + wd * pi);
            buf[i] = bi;
            p[i] = pi - lr * bi;
        }
        break;
    }
}

/* ---- one compiled copy per ISA ------------------------------------------- */

typedef void (*zt_adam_range_fn)(float *p, const float *g, float *m, float *v, int64_t n,
                                 const zt_adam_consts *c);
typedef void (*zt_sgd_range_fn)(float *p, const float *g, float *buf, int64_t n,
                                const zt_sgd_consts *c);

typedef struct {
    zt_adam_range_fn adam;
    zt_sgd_range_fn sgd;
} zt_optim_kernels;

static void zt_adam_baseline(float *p, const float *g, float *m, float *v, int64_t n,
                             const zt_adam_consts *c)
{
    zt_adam_body(p, g, m, v, n, c);
}

static void zt_sgd_baseline(float *p, const float *g, float *buf, int64_t n,
                            const zt_sgd_consts *c)
{
    zt_sgd_body(p, g, buf, n, c);
}

static const char *const zt_isa_names[ZT_CPU_ISA_COUNT] = {"baseline", "avx2", "avx512"};

#if defined(__x86_64__)
/* "avx2" alone, not x86-64-v3: that level brings FMA, which the kernels must
 * not use. AVX-512F has fused multiply-adds of its own that the compiler
 * would contract into (176 of them in this file at -std=gnu11): only
 * -ffp-contract=off keeps them out, hence the Makefile's per-file flag.
 * ZT_TARGET_AVX512 (cpu.h) asks for 512-bit vectors. */
__attribute__((target(ZT_TARGET_AVX2))) static void
zt_adam_avx2(float *p, const float *g, float *m, float *v, int64_t n, const zt_adam_consts *c)
{
    zt_adam_body(p, g, m, v, n, c);
}

__attribute__((target(ZT_TARGET_AVX2))) static void
zt_sgd_avx2(float *p, const float *g, float *buf, int64_t n, const zt_sgd_consts *c)
{
    zt_sgd_body(p, g, buf, n, c);
}

__attribute__((target(ZT_TARGET_AVX512))) static void
zt_adam_avx512(float *p, const float *g, float *m, float *v, int64_t n, const zt_adam_consts *c)
{
    zt_adam_body(p, g, m, v, n, c);
}

__attribute__((target(ZT_TARGET_AVX512))) static void
zt_sgd_avx512(float *p, const float *g, float *buf, int64_t n, const zt_sgd_consts *c)
{
    zt_sgd_body(p, g, buf, n, c);
}

static const zt_optim_kernels zt_kernels[ZT_CPU_ISA_COUNT] = {
    [ZT_CPU_ISA_BASELINE] = {zt_adam_baseline, zt_sgd_baseline},
    [ZT_CPU_ISA_AVX2] = {zt_adam_avx2, zt_sgd_avx2},
    [ZT_CPU_ISA_AVX512] = {zt_adam_avx512, zt_sgd_avx512},
};

/* Why this CPU cannot run `isa`, or NULL when it can. libgcc's CPU model
 * also checks that the OS saves the wider registers (XGETBV), so a VM that
 * hides AVX-512 state reports it missing. */
static const char *zt_isa_missing(zt_cpu_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case ZT_CPU_ISA_BASELINE:
        return NULL;
    case ZT_CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") ? NULL : "this CPU lacks AVX2";
    case ZT_CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") ? NULL : "this CPU lacks AVX-512F";
    default:
        return "no such ISA";
    }
}
#else
/* Elsewhere (aarch64) the plain loop, vectorised for the build's target. */
static const zt_optim_kernels zt_kernels[ZT_CPU_ISA_COUNT] = {
    [ZT_CPU_ISA_BASELINE] = {zt_adam_baseline, zt_sgd_baseline},
};

static const char *zt_isa_missing(zt_cpu_isa isa)
{
    if (isa == ZT_CPU_ISA_BASELINE)
        return NULL;
    return (unsigned)isa < ZT_CPU_ISA_COUNT ? "this build is not for x86-64" : "no such ISA";
}
#endif

/* ---- choosing the ISA ------------------------------------------------------ */

const char *zt_cpu_isa_name(zt_cpu_isa isa)
{
    return (unsigned)isa < ZT_CPU_ISA_COUNT ? zt_isa_names[isa] : "unknown";
}

bool zt_cpu_isa_supported(zt_cpu_isa isa)
{
    return zt_isa_missing(isa) == NULL;
}

zt_cpu_isa zt_cpu_isa_best(void)
{
    for (int isa = ZT_CPU_ISA_COUNT - 1; isa > ZT_CPU_ISA_BASELINE; isa--)
        if (zt_cpu_isa_supported((zt_cpu_isa)isa))
            return (zt_cpu_isa)isa;
    return ZT_CPU_ISA_BASELINE;
}

/* -1 for a name that is none of zt_isa_names. */
static int zt_isa_lookup(const char *name)
{
    for (int isa = 0; isa < ZT_CPU_ISA_COUNT; isa++)
        if (strcmp(name, zt_isa_names[isa]) == 0)
            return isa;
    return -1;
}

zt_status zt_cpu_isa_parse(const char *name, zt_cpu_isa *isa)
{
    int found = name ? zt_isa_lookup(name) : -1;
    if (found < 0)
        return zt_fail(ZT_ERR_USAGE, "one of: baseline, avx2, avx512",
                       "'%s' is not an ISA the CPU optimizer kernels are built for",
                       name ? name : "(null)");
    *isa = (zt_cpu_isa)found;
    return ZT_OK;
}

/* The ISA in use, -1 until the first zt_cpu_isa_get or zt_cpu_isa_set.
 * Atomic: the offloaded optimizer and tests may reach it from several
 * threads, and exactly one of them must read the environment and speak. */
static _Atomic int zt_isa_in_use = -1;

/* ZT_CPU_ISA's choice, or the best this CPU runs. A name that is no ISA's
 * failed the start-up already (engine/env.h); an ISA this CPU cannot run
 * is refused on stderr and the best is used instead: ranks of one job may
 * run on CPUs of different kinds, a kernel has no status to return, and
 * every path gives the same bits, so the fallback costs only speed, never
 * results. *refusal is the line to print, empty when there is none. */
static zt_cpu_isa zt_isa_from_env(char *refusal, size_t size)
{
    zt_cpu_isa best = zt_cpu_isa_best();
    const char *want = zt_env_get()->cpu_isa;
    refusal[0] = '\0';
    if (!want)
        return best;
    int isa = zt_isa_lookup(want);
    const char *why = isa < 0 ? "not one of baseline, avx2, avx512" : zt_isa_missing(isa);
    if (!why)
        return (zt_cpu_isa)isa;
    snprintf(refusal, size,
             "zerotrain: ZT_CPU_ISA=%s refused: %s; the CPU optimizer kernels use %s"
             " (every path gives the same bits)\n",
             want, why, zt_isa_names[best]);
    return best;
}

zt_cpu_isa zt_cpu_isa_get(void)
{
    int isa = atomic_load(&zt_isa_in_use);
    if (isa >= 0)
        return (zt_cpu_isa)isa;
    char refusal[256];
    int picked = (int)zt_isa_from_env(refusal, sizeof refusal);
    if (!atomic_compare_exchange_strong(&zt_isa_in_use, &isa, picked))
        return (zt_cpu_isa)isa; /* another thread chose first; it spoke */
    if (refusal[0])
        fputs(refusal, stderr);
    return (zt_cpu_isa)picked;
}

zt_status zt_cpu_isa_set(zt_cpu_isa isa)
{
    const char *why = zt_isa_missing(isa);
    if (why)
        return zt_fail(ZT_ERR_UNSUPPORTED, "zt_cpu_isa_supported() says which ISAs run here",
                       "the CPU optimizer kernels cannot use %s: %s", zt_cpu_isa_name(isa),
                       why);
    atomic_store(&zt_isa_in_use, (int)isa);
    return ZT_OK;
}

/* ---- the entry points -------------------------------------------------------- */

/* [*lo, *hi): this thread's share of n, the split libgomp's
 * `omp for schedule(static)` makes (the first n % threads get one more), so
 * each thread streams the pages such a loop first touched. */
static void zt_static_share(int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t q = n / threads, r = n % threads;
    if (id < r) {
        q++;
        r = 0;
    }
    *lo = q * id + r;
    *hi = *lo + q;
}

void zt_adam_cpu(float *p, const float *g, float *m, float *v, int64_t n,
                 const zt_adam_hparams *hp)
{
    /* As FusedAdam: beta^t in double on the host, then fp32 per element. */
    float bc1 = 1.0f, bc2 = 1.0f;
    if (hp->bias_correction) {
        bc1 = (float)(1.0 - pow((double)hp->beta1, (double)hp->step));
        bc2 = (float)(1.0 - pow((double)hp->beta2, (double)hp->step));
    }
    const zt_adam_consts c = {
        .lr = hp->lr,
        .b1 = hp->beta1,
        .b2 = hp->beta2,
        .eps = hp->eps,
        .wd = hp->weight_decay,
        .omb1 = 1.0f - hp->beta1,
        .omb2 = 1.0f - hp->beta2,
        .bc1 = bc1,
        .bc2 = bc2,
        .adam_w_mode = hp->adam_w_mode,
    };
    const zt_adam_range_fn range = zt_kernels[zt_cpu_isa_get()].adam;
#pragma omp parallel if (n > ZT_OPTIM_PAR_MIN)
    {
        int64_t lo, hi;
        zt_static_share(n, &lo, &hi);
        range(p + lo, g + lo, m + lo, v + lo, hi - lo, &c);
    }
}

void zt_sgd_cpu(float *p, const float *g, float *buf, int64_t n, const zt_sgd_hparams *hp)
{
    zt_sgd_consts c = {
        .lr = hp->lr,
        .mom = hp->momentum,
        .wd = hp->weight_decay,
        .omd = 1.0f - hp->dampening,
    };
    if (c.mom == 0.0f)
        c.mode = ZT_SGD_PLAIN;
    else if (hp->first_step)
        c.mode = hp->nesterov ? ZT_SGD_FIRST_NESTEROV : ZT_SGD_FIRST;
    else
        c.mode = hp->nesterov ? ZT_SGD_NESTEROV : ZT_SGD_MOMENTUM;
    const zt_sgd_range_fn range = zt_kernels[zt_cpu_isa_get()].sgd;
#pragma omp parallel if (n > ZT_OPTIM_PAR_MIN)
    {
        int64_t lo, hi;
        zt_static_share(n, &lo, &hi);
        /* Plain SGD has no buffer (NULL), and its loop never touches one. */
        range(p + lo, g + lo, buf ? buf + lo : NULL, hi - lo, &c);
    }
}
