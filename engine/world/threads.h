/*
 * threads: how many OpenMP threads each rank computes with. Without
 * OMP_NUM_THREADS, OpenMP gives every process one thread per core, so N ranks
 * on one host would run N x cores threads that spin against each other (about
 * 7x slower at 2 ranks on 2 cores). zt_world_threads_init instead gives each
 * rank the cores it may run on (its CPU affinity, capped by a cgroup CPU
 * quota) divided by the ranks of its host whose affinity overlaps it, at
 * least 1, and sets it with omp_set_num_threads (OpenBLAS's OpenMP build
 * follows; engine/cpu sets it again). A rank that mpirun binds to its own
 * cores shares them with no one and uses them all. With OMP_NUM_THREADS set
 * nothing changes, but a count that oversubscribes the host is named.
 *
 * Memory: none kept. Collective: zt_world_threads_init (over the host's
 * ranks), called by zt_world_init.
 */
#ifndef ZT_THREADS_H
#define ZT_THREADS_H

#include <mpi.h>
#include <stdbool.h>

#include "engine/status.h"

typedef struct {
    int threads;        /* what this rank runs with */
    int cores;          /* the cores this rank may run on */
    int sharing;        /* ranks of this host whose cores overlap this rank's (itself included) */
    bool from_env;      /* OMP_NUM_THREADS decided */
    char note[200];     /* one line for the user, "" when there is nothing to say */
} zt_threads;

/* The default above: threads = max(1, cores / sharing). Pure, for tests. */
int zt_threads_default(int cores, int sharing);

/* The cores of a cgroup CPU quota ("max 100000", "150000 100000": 2), or 0
 * when there is none; cgroup v2's cpu.max format. */
int zt_threads_quota_cores(const char *cpu_max);

/* Decides and sets this rank's count; host_comm holds the ranks of this
 * host. */
zt_status zt_world_threads_init(MPI_Comm host_comm, zt_threads *out);

#endif
