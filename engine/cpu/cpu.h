/*
 * cpu: what is specific to the CPU backend (OpenBLAS + OpenMP), the reference
 * every other backend is tested against. The rest of the tree reaches it
 * through the backend table (zt_backend_cpu_entry, engine/backend.h); this
 * header is for code that wants the CPU backend by name (tests and tools that
 * compare against it) and for the offloaded optimizer, which runs the CPU
 * optimizer kernels on host memory whatever the device.
 *
 * Threads: OMP_NUM_THREADS (or, without it, engine/world/threads.h's default),
 * for OpenBLAS and the OpenMP loops alike.
 * Memory: the backend's impl holds one fp32 scratch buffer, which the typed
 * ops on 16-bit tensors widen them into (backend_cpu_typed.c): grown on
 * demand to the largest such op's need, freed with the backend
 * (zt_backend_free). Every other kernel works in place on the caller's
 * buffers and allocates nothing.
 * Collective: none.
 */
#ifndef ZT_CPU_H
#define ZT_CPU_H

#include "engine/backend.h"

/* Fills *be with the CPU backend. Fails (ZT_ERR_OOM, *be cleared) only when
 * its impl, a few bytes, cannot be allocated. */
zt_status zt_backend_cpu_init(zt_backend *be);

/* The optimizer kernels behind the CPU backend's adam/sgd ops (optim_cpu.c),
 * also called directly on host memory by an offloaded optimizer
 * (engine/train/optim.c): one Adam/AdamW or SGD step on a flat shard, in
 * place, as the ops' contracts in engine/backend.h say. OpenMP over
 * contiguous shares, compiler-vectorised loops compiled for the ISA that
 * zt_cpu_isa_get() names. */
void zt_adam_cpu(float *p, const float *g, float *m, float *v, int64_t n,
                 const zt_adam_hparams *hp);
void zt_sgd_cpu(float *p, const float *g, float *buf, int64_t n, const zt_sgd_hparams *hp);

/* The instruction sets the optimizer kernels and the fused attention's
 * element-wise loops (backend_cpu_flash.c) are compiled for, narrowest
 * first. Every one gives bitwise the same results (no FMA, no reassociation);
 * they differ only in speed. On a non-x86 build only the baseline exists. */
typedef enum {
    ZT_CPU_ISA_BASELINE, /* the build's -march (x86-64-v2: SSE4.2, 4 floats a vector) */
    ZT_CPU_ISA_AVX2,     /* AVX2, 8 floats a vector */
    ZT_CPU_ISA_AVX512,   /* AVX-512F, 16 floats a vector */
    ZT_CPU_ISA_COUNT
} zt_cpu_isa;

/* GCC target attributes of the wider paths. prefer-vector-width=512: without
 * it GCC keeps to 256-bit vectors when tuning for most AVX-512 CPUs, which
 * would make that path a second AVX2; clang has no such option and uses
 * 512-bit vectors for an avx512f target anyway. */
#define ZT_TARGET_AVX2 "avx2"
#if defined(__clang__)
#define ZT_TARGET_AVX512 "avx512f"
#else
#define ZT_TARGET_AVX512 "avx512f,prefer-vector-width=512"
#endif

/* "baseline", "avx2", "avx512" (ZT_CPU_ISA's spellings); "unknown" out of range. */
const char *zt_cpu_isa_name(zt_cpu_isa isa);

/* Whether this build has the ISA's kernels and this CPU (and OS) runs them. */
bool zt_cpu_isa_supported(zt_cpu_isa isa);

/* The widest supported ISA: what the kernels use unless told otherwise. */
zt_cpu_isa zt_cpu_isa_best(void);

/* A name as zt_cpu_isa_name spells it; ZT_ERR_USAGE for any other. Says
 * nothing about support: zt_cpu_isa_set checks that. */
zt_status zt_cpu_isa_parse(const char *name, zt_cpu_isa *isa);

/* The ISA the kernels use. The first call (or the first kernel call) picks
 * it once for the process: the environment variable ZT_CPU_ISA (baseline,
 * avx2, avx512) when set, else zt_cpu_isa_best(). A ZT_CPU_ISA this CPU
 * cannot run, or an unknown name, is refused with one line on stderr and
 * the best supported ISA is used: never an illegal instruction. */
zt_cpu_isa zt_cpu_isa_get(void);

/* Makes the kernels use `isa` from the next call on, over ZT_CPU_ISA (for
 * tests and benchmarks that run every path). ZT_ERR_UNSUPPORTED, with the
 * reason, when zt_cpu_isa_supported(isa) is false; nothing changes then.
 * Not meant to race a kernel call on another thread (which would run on one
 * ISA or the other, giving the same bits either way). */
zt_status zt_cpu_isa_set(zt_cpu_isa isa);

#endif
