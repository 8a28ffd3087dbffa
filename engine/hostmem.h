/*
 * hostmem: how much host memory this process may still take, from the three
 * places a limit comes from: the address-space limit (RLIMIT_AS, `ulimit -v`),
 * the memory cgroup (cgroup v2 memory.max, v1 memory.limit_in_bytes: the
 * tightest of this process's cgroup and its ancestors), and the kernel's
 * MemAvailable. Arenas reserve their plan at once but the kernel hands pages
 * out as they are touched, so a plan the machine cannot hold would otherwise
 * end mid-run: OOM-killed with no message in a small cgroup, or with OpenBLAS
 * retrying a failed buffer allocation forever under a tight `ulimit -v`.
 *
 * ZT_CGROUP_ROOT (testing aid) replaces /sys/fs/cgroup as the cgroup mount.
 *
 * Memory: none kept. Collective: none.
 */
#ifndef ZT_HOSTMEM_H
#define ZT_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

#define ZT_HOSTMEM_NONE UINT64_MAX

typedef struct {
    uint64_t as_limit;     /* RLIMIT_AS in bytes, or ZT_HOSTMEM_NONE */
    uint64_t as_used;      /* this process's address space now (VmSize) */
    uint64_t cgroup_limit; /* the tightest memory cgroup limit, or ZT_HOSTMEM_NONE */
    uint64_t cgroup_used;  /* that cgroup's usage now (0 when unknown) */
    char cgroup_file[600]; /* the limit's file, for messages */
    uint64_t available;    /* MemAvailable in bytes, or ZT_HOSTMEM_NONE */
} zt_hostmem;

/* Reads the limits; what cannot be read is ZT_HOSTMEM_NONE (never an error:
 * a missing /proc or cgroup mount means no limit we can see). */
void zt_hostmem_read(zt_hostmem *h);

/* The cgroup (its limit file) as a hash, so ranks can tell whether they share
 * one limit. 0 when there is none. */
uint64_t zt_hostmem_cgroup_id(const zt_hostmem *h);

/* What this process may still take when the node's ranks each take as much
 * at once (every rank loads its own copy of the data): the address space
 * left below RLIMIT_AS, the cgroup's room shared by the cgroup_ranks of this
 * node in it, MemAvailable shared by the node's node_ranks; the tightest, or
 * ZT_HOSTMEM_NONE when there is no limit. Which one, with its numbers, goes
 * into why (n bytes), e.g. "the memory cgroup leaves 1.00 GiB for this
 * node's 2 rank(s) in it (FILE: limit 2.00 GiB, 1.00 GiB in use)". */
uint64_t zt_hostmem_share(const zt_hostmem *h, int node_ranks, int cgroup_ranks, char *why,
                          size_t n);

#endif
