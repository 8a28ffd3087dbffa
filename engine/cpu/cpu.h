/*
 * cpu: what is specific to the CPU backend (OpenBLAS + OpenMP), the reference
 * every other backend is tested against. The rest of the tree reaches it
 * through the backend table (zt_backend_cpu_entry, engine/backend.h); this
 * header is for code that wants the CPU backend by name (tests and tools that
 * compare against it) and for the offloaded optimizer, which runs the CPU
 * optimizer kernels on host memory whatever the device.
 *
 * Threads: OMP_NUM_THREADS, for OpenBLAS and the OpenMP loops alike.
 * Memory: the backend holds no state of its own; free it with zt_backend_free.
 * The kernels work in place on the caller's buffers and allocate nothing.
 * Collective: none.
 */
#ifndef ZT_CPU_H
#define ZT_CPU_H

#include "engine/backend.h"

/* Fills *be with the CPU backend. Never fails. */
zt_status zt_backend_cpu_init(zt_backend *be);

/* The optimizer kernels behind the CPU backend's adam/sgd ops (optim_cpu.c),
 * also called directly on host memory by an offloaded optimizer
 * (engine/train/optim.c): one Adam/AdamW or SGD step on a flat shard, in
 * place, as the ops' contracts in engine/backend.h say. OpenMP over chunks,
 * compiler-vectorised inner loops. */
void zt_adam_cpu(float *p, const float *g, float *m, float *v, int64_t n,
                 const zt_adam_hparams *hp);
void zt_sgd_cpu(float *p, const float *g, float *buf, int64_t n, const zt_sgd_hparams *hp);

#endif
