/*
 * memcheck: the trainer's plan against the host before anything is reserved
 * (engine/hostmem.h has why). Host memory is the plan's host arenas, plus its
 * device arenas when the backend's device memory is host memory (the CPU),
 * plus a margin for what lives outside the arenas (OpenBLAS's buffers, MPI's
 * shared-memory segments, stacks). It must fit:
 *   - the address-space limit, on top of what the process has mapped already;
 *   - the memory cgroup, summed over the node's ranks in the same cgroup;
 *   - MemAvailable, summed over the node's ranks.
 * A plan that does not fit fails on every rank with the planner's per-class
 * breakdown and the remedy for the largest class.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/hostmem.h"
#include "engine/train/trainer_impl.h"

static double memcheck_gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* What shrinks a class's share of a rank's memory. */
static const char *memcheck_remedy(zt_mem_class c)
{
    switch (c) {
    case ZT_MEM_PARAMS:
    case ZT_MEM_GRADS:
    case ZT_MEM_MASTER:
    case ZT_MEM_OPTIM:
        return "model states are the largest part: a higher ZeRO stage or more ranks shard "
               "them (stage 3 shards all of them)";
    case ZT_MEM_ACTS:
        return "activations are the largest part: a smaller train_micro_batch_size_per_gpu "
               "(with more gradient_accumulation_steps) or --activation-checkpoint-interval";
    case ZT_MEM_COMM:
        return "communication buffers are the largest part: smaller reduce_bucket_size and "
               "allgather_bucket_size, or stage3_max_live_parameters at stage 3";
    case ZT_MEM_WORK:
        return "scratch is the largest part: a smaller train_micro_batch_size_per_gpu";
    default:
        return "";
    }
}

zt_status zt_train_check_memory(zt_trainer *t)
{
    const zt_memory *mem = &t->mem;
    bool device_is_host = t->be->host_alloc == NULL;
    uint64_t by_class[ZT_MEM_NCLASS] = {0}, plan = 0;
    for (int c = 0; c < ZT_MEM_NCLASS; c++) {
        by_class[c] = mem->planned_bytes[ZT_MEM_HOST][c] +
                      (device_is_host ? mem->planned_bytes[ZT_MEM_DEVICE][c] : 0);
        plan = by_class[c] > UINT64_MAX - plan ? UINT64_MAX : plan + by_class[c];
    }
    uint64_t margin = (UINT64_C(256) << 20) + (UINT64_C(32) << 20) * (uint64_t)omp_get_max_threads();
    uint64_t need = plan > UINT64_MAX - margin ? UINT64_MAX : plan + margin;

    zt_hostmem h;
    zt_hostmem_read(&h);
    /* The node's ranks: their needs, and which share this rank's cgroup. */
    uint64_t mine[2] = {need, zt_hostmem_cgroup_id(&h)};
    int local = t->world->local_size;
    uint64_t *all = malloc((size_t)local * sizeof mine);
    zt_status st = ZT_OK;
    if (!all)
        st = zt_fail(ZT_ERR_OOM, "", "cannot compare the plan with the machine");
    else
        MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, t->world->node_comm);
    uint64_t node = 0, cgroup = 0;
    for (int r = 0; all && r < local; r++) {
        node = all[2 * r] > UINT64_MAX - node ? UINT64_MAX : node + all[2 * r];
        if (all[2 * r + 1] == mine[1])
            cgroup = all[2 * r] > UINT64_MAX - cgroup ? UINT64_MAX : cgroup + all[2 * r];
    }
    free(all);

    char where[1024] = "";
    if (st == ZT_OK && h.as_limit != ZT_HOSTMEM_NONE && need > h.as_limit - h.as_used)
        snprintf(where, sizeof where,
                 "the address-space limit (ulimit -v) leaves %.2f GiB (limit %.2f GiB, %.2f GiB "
                 "mapped already)",
                 memcheck_gib(h.as_limit > h.as_used ? h.as_limit - h.as_used : 0),
                 memcheck_gib(h.as_limit), memcheck_gib(h.as_used));
    else if (st == ZT_OK && h.cgroup_limit != ZT_HOSTMEM_NONE &&
             cgroup > h.cgroup_limit - (h.cgroup_used < h.cgroup_limit ? h.cgroup_used : 0))
        snprintf(where, sizeof where,
                 "this node's ranks in the memory cgroup need %.2f GiB and its limit leaves "
                 "%.2f GiB (%s: %.2f GiB, %.2f GiB in use)",
                 memcheck_gib(cgroup),
                 memcheck_gib(h.cgroup_used < h.cgroup_limit ? h.cgroup_limit - h.cgroup_used
                                                             : 0),
                 h.cgroup_file, memcheck_gib(h.cgroup_limit), memcheck_gib(h.cgroup_used));
    else if (st == ZT_OK && h.available != ZT_HOSTMEM_NONE && node > h.available)
        snprintf(where, sizeof where,
                 "this node's %d rank(s) need %.2f GiB and the machine has %.2f GiB available "
                 "(MemAvailable)",
                 local, memcheck_gib(node), memcheck_gib(h.available));
    if (st == ZT_OK && where[0]) {
        zt_mem_class largest = ZT_MEM_PARAMS;
        char classes[256] = "";
        size_t len = 0;
        for (int c = 0; c < ZT_MEM_NCLASS; c++) {
            if (by_class[c] > by_class[largest])
                largest = (zt_mem_class)c;
            if (by_class[c] > 0 && len < sizeof classes)
                len += (size_t)snprintf(classes + len, sizeof classes - len, "%s%s %.2f",
                                        len ? ", " : "", zt_mem_class_name((zt_mem_class)c),
                                        memcheck_gib(by_class[c]));
        }
        st = zt_fail(ZT_ERR_OOM, memcheck_remedy(largest),
                     "not enough host memory: this rank plans %.2f GiB (%s GiB) + %.2f GiB "
                     "outside the arenas, but %s",
                     memcheck_gib(plan), classes, memcheck_gib(margin), where);
    }
    return zt_world_agree(t->world, st, NULL);
}
