/*
 * cpu: what is specific to the CPU backend (OpenBLAS + OpenMP), the reference
 * every other backend is tested against. The rest of the tree reaches it
 * through the backend table (zt_backend_cpu_entry, engine/backend.h); this
 * header is for code that wants the CPU backend by name: tests and tools that
 * compare against it.
 *
 * Threads: OMP_NUM_THREADS, for OpenBLAS and the OpenMP loops alike.
 * Memory: the backend holds no state of its own; free it with zt_backend_free.
 * Collective: none.
 */
#ifndef ZT_CPU_H
#define ZT_CPU_H

#include "engine/backend.h"

/* Fills *be with the CPU backend. Never fails. */
zt_status zt_backend_cpu_init(zt_backend *be);

#endif
