/*
 * memcheck: the trainer's plan against the host before anything is reserved
 * (engine/hostmem.h has why). Host memory is the plan's host arenas, plus its
 * device arenas when the backend's device memory is host memory (the CPU),
 * plus a margin for what lives outside the arenas (OpenBLAS's buffers, MPI's
 * shared-memory segments, stacks). It must fit:
 *   - the address-space limit, on top of what the process has mapped already;
 *   - the memory cgroup, summed over the node's ranks in the same cgroup;
 *   - MemAvailable, summed over the node's ranks.
 * On a device with its own memory (CUDA), the plan's device arenas plus
 * ZT_DEVICE_MARGIN must fit the device's free memory, summed over the host's
 * ranks that share the device. The check runs after the communicators'
 * warm-up (engine/comm/nccl.c), so what the CUDA context, cuBLAS and NCCL
 * hold already is not free any more; the margin is for what is taken later,
 * outside the arenas: kernels loaded on first use (CUDA's lazy loading),
 * cuBLAS's own allocations, NCCL connections made on first use of another
 * algorithm, and fragmentation.
 * A plan that does not fit fails on every rank with the planner's per-class
 * breakdown and the remedies that shrink the largest class at this run's
 * stage and settings (memcheck_remedy); an arena the backend then fails to
 * reserve anyway gets the same for its own class (zt_train_reserve_failed).
 * The data set was loaded before (its own check: data/datamem.h), so its
 * bytes are in what the process has mapped, the cgroup's usage and what
 * MemAvailable no longer counts: the message names them beside the classes,
 * and a data set larger than every class gets the data's remedy.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/datamem.h"
#include "engine/hostmem.h"
#include "engine/train/trainer_impl.h"

#define ZT_DEVICE_MARGIN (UINT64_C(512) << 20)

static double memcheck_gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* What shrinks class c's share of one rank's memory at `loc`, for this run's
 * stage and settings: only what helps that class. A higher stage shards
 * model states, never activations or buffers; offloading moves a class to
 * the host, so it is no remedy where the host is what is short. `device_is_host`:
 * the backend's device memory is host memory (the CPU). */
static void memcheck_remedy(const zt_trainer *t, zt_mem_class c, zt_mem_loc loc,
                            bool device_is_host, char *buf, size_t n)
{
    const zt_stage_policy *pol = t->policy;
    const zt_config *cfg = t->cfg;
    /* Offloading helps only a device that is not host memory. */
    bool on_device = loc == ZT_MEM_DEVICE && !device_is_host;
    bool offloaded = loc == ZT_MEM_HOST && !device_is_host;
    const char *more_ranks = "more ranks (each holds 1/N of it)";
    switch (c) {
    case ZT_MEM_PARAMS:
        if (!pol->params_sharded)
            snprintf(buf, n, "parameters are the largest part: ZeRO stage 3 shards them over "
                             "the ranks%s",
                     on_device ? " (and offload_param cpu moves the shards to the host)" : "");
        else if (t->layout.persistent_numel > t->layout.padded_numel / 4)
            snprintf(buf, n, "parameters are the largest part and %lld of %lld are in units kept "
                             "whole on every rank: lower stage3_param_persistence_threshold",
                     (long long)t->layout.persistent_numel, (long long)t->layout.padded_numel);
        else
            snprintf(buf, n, "parameters are the largest part: %s%s%s", more_ranks,
                     on_device && !t->offload_param ? ", or offload_param cpu" : "",
                     cfg->zero.zero_hpz_partition_size > 1
                         ? ", or a smaller zero_hpz_partition_size (its secondary copy)"
                         : "");
        return;
    case ZT_MEM_GRADS:
        if (!pol->grads_sharded)
            snprintf(buf, n, "gradients are the largest part: ZeRO stage 2 or 3 keeps only each "
                             "rank's partition");
        else
            snprintf(buf, n, "gradients are the largest part: %s%s", more_ranks,
                     on_device && !t->offload_opt ? ", or offload_optimizer cpu" : "");
        return;
    case ZT_MEM_MASTER:
    case ZT_MEM_OPTIM: {
        const char *what = c == ZT_MEM_MASTER ? "fp32 master weights" : "optimizer states";
        if (!pol->optimizer_sharded)
            snprintf(buf, n, "%s are the largest part: ZeRO stage 1 or higher shards them over "
                             "the ranks%s",
                     what, on_device ? " (and offload_optimizer cpu moves them to the host)" : "");
        else if (offloaded)
            snprintf(buf, n, "%s, offloaded to the host, are the largest part: %s or nodes, or "
                             "offload_optimizer none where the device has room",
                     what, more_ranks);
        else
            snprintf(buf, n, "%s are the largest part: %s%s", what, more_ranks,
                     on_device ? ", or offload_optimizer cpu" : "");
        return;
    }
    case ZT_MEM_ACTS:
        snprintf(buf, n, "activations are the largest part, which no ZeRO stage shards: a "
                         "smaller train_micro_batch_size_per_gpu (more "
                         "gradient_accumulation_steps keep the batch), shorter sequences%s%s",
                 t->ckpt_interval == 0 ? ", or --activation-checkpoint-interval K" : "",
                 t->ckpt_interval > 0 && on_device && !t->ckpt_host
                     ? ", or activation_checkpointing.cpu_checkpointing"
                     : "");
        return;
    case ZT_MEM_COMM:
        snprintf(buf, n, "communication buffers are the largest part: smaller "
                         "reduce_bucket_size%s",
                 pol->params_sharded ? ", stage3_max_live_parameters and "
                                       "stage3_prefetch_bucket_size"
                                     : " and allgather_bucket_size");
        return;
    case ZT_MEM_WORK:
        snprintf(buf, n, "scratch is the largest part: a smaller "
                         "train_micro_batch_size_per_gpu (one unit's scratch grows with it)");
        return;
    case ZT_MEM_SWAP:
        snprintf(buf, n, "nvme swap buffers are the largest part: a smaller sub_group_size or "
                         "offload_optimizer.buffer_count, or offload_param buffer_count / "
                         "buffer_size");
        return;
    default:
        snprintf(buf, n, "%s", "");
    }
}

zt_status zt_train_reserve_failed(const zt_trainer *t, zt_status st)
{
    const zt_arena *a = t->mem.failed;
    if (st != ZT_ERR_OOM || !a)
        return st;
    char cause[512], remedy[512];
    snprintf(cause, sizeof cause, "%s", zt_status_message());
    memcheck_remedy(t, a->cls, a->loc, t->be->host_alloc == NULL, remedy, sizeof remedy);
    return zt_fail(ZT_ERR_OOM, remedy, "the %s %s arena (%.2f GiB) did not fit: %s",
                   zt_mem_loc_name(a->loc), zt_mem_class_name(a->cls),
                   (double)t->mem.planned_bytes[a->loc][a->cls] / (1024.0 * 1024.0 * 1024.0),
                   cause);
}

static uint64_t memcheck_add(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

/* The planned bytes of one place by class into by_class, their sum, the
 * largest class and "params 1.00, grads 0.50" (GiB) into text. */
static uint64_t memcheck_classes(const uint64_t *by_class, zt_mem_class *largest, char *text,
                                 size_t n)
{
    uint64_t plan = 0;
    size_t len = 0;
    *largest = ZT_MEM_PARAMS;
    text[0] = '\0';
    for (int c = 0; c < ZT_MEM_NCLASS; c++) {
        plan = memcheck_add(plan, by_class[c]);
        if (by_class[c] > by_class[*largest])
            *largest = (zt_mem_class)c;
        if (by_class[c] > 0 && len < n)
            len += (size_t)snprintf(text + len, n - len, "%s%s %.2f", len ? ", " : "",
                                    zt_mem_class_name((zt_mem_class)c),
                                    memcheck_gib(by_class[c]));
    }
    return plan;
}

/* What one rank tells the others of its node. */
typedef struct {
    uint64_t host_need, cgroup_id, device_need;
    char device_id[48];
} memcheck_rank;

/* The host: the address-space limit, the cgroup, MemAvailable. Writes what
 * does not fit into where ("" when it fits). */
static void memcheck_host(const zt_hostmem *hm, const memcheck_rank *all, int local,
                          const memcheck_rank *mine, char *where, size_t n)
{
    const zt_hostmem h = *hm;
    uint64_t node = 0, cgroup = 0;
    for (int r = 0; r < local; r++) {
        node = memcheck_add(node, all[r].host_need);
        if (all[r].cgroup_id == mine->cgroup_id)
            cgroup = memcheck_add(cgroup, all[r].host_need);
    }
    uint64_t need = mine->host_need;
    where[0] = '\0';
    if (h.as_limit != ZT_HOSTMEM_NONE && need > h.as_limit - h.as_used)
        snprintf(where, n,
                 "the address-space limit (ulimit -v) leaves %.2f GiB (limit %.2f GiB, %.2f GiB "
                 "mapped already)",
                 memcheck_gib(h.as_limit > h.as_used ? h.as_limit - h.as_used : 0),
                 memcheck_gib(h.as_limit), memcheck_gib(h.as_used));
    else if (h.cgroup_limit != ZT_HOSTMEM_NONE &&
             cgroup > h.cgroup_limit - (h.cgroup_used < h.cgroup_limit ? h.cgroup_used : 0))
        snprintf(where, n,
                 "this node's ranks in the memory cgroup need %.2f GiB and its limit leaves "
                 "%.2f GiB (%s: %.2f GiB, %.2f GiB in use)",
                 memcheck_gib(cgroup),
                 memcheck_gib(h.cgroup_used < h.cgroup_limit ? h.cgroup_limit - h.cgroup_used
                                                             : 0),
                 h.cgroup_file, memcheck_gib(h.cgroup_limit), memcheck_gib(h.cgroup_used));
    else if (h.available != ZT_HOSTMEM_NONE && node > h.available)
        snprintf(where, n,
                 "this node's %d rank(s) need %.2f GiB and the machine has %.2f GiB available "
                 "(MemAvailable)",
                 local, memcheck_gib(node), memcheck_gib(h.available));
}

/* The device: the host's ranks on the same device together against its free
 * memory. */
static void memcheck_device(const memcheck_rank *all, int local, const memcheck_rank *mine,
                            const zt_device_mem *dm, char *where, size_t n)
{
    uint64_t shared = 0;
    int sharing = 0;
    for (int r = 0; r < local; r++)
        if (strcmp(all[r].device_id, mine->device_id) == 0) {
            shared = memcheck_add(shared, all[r].device_need);
            sharing++;
        }
    where[0] = '\0';
    if (shared <= dm->free_bytes)
        return;
    if (sharing > 1)
        snprintf(where, n,
                 "the %d ranks of this host on device %s need %.2f GiB and it has %.2f GiB free "
                 "of %.2f GiB",
                 sharing, dm->id, memcheck_gib(shared), memcheck_gib(dm->free_bytes),
                 memcheck_gib(dm->total_bytes));
    else
        snprintf(where, n, "device %s has %.2f GiB free of %.2f GiB", dm->id,
                 memcheck_gib(dm->free_bytes), memcheck_gib(dm->total_bytes));
}

const zt_data_memory *zt_trainer_data_memory(const zt_trainer *t)
{
    return t->data ? t->data->memory : NULL;
}

zt_status zt_train_check_memory(zt_trainer *t)
{
    const zt_memory *mem = &t->mem;
    bool device_is_host = t->be->host_alloc == NULL;
    uint64_t host_class[ZT_MEM_NCLASS] = {0}, dev_class[ZT_MEM_NCLASS] = {0};
    for (int c = 0; c < ZT_MEM_NCLASS; c++) {
        host_class[c] = memcheck_add(mem->planned_bytes[ZT_MEM_HOST][c],
                                     device_is_host ? mem->planned_bytes[ZT_MEM_DEVICE][c] : 0);
        dev_class[c] = device_is_host ? 0 : mem->planned_bytes[ZT_MEM_DEVICE][c];
    }
    char host_text[256], dev_text[256];
    zt_mem_class host_largest, dev_largest;
    uint64_t host_plan = memcheck_classes(host_class, &host_largest, host_text, sizeof host_text);
    uint64_t dev_plan = memcheck_classes(dev_class, &dev_largest, dev_text, sizeof dev_text);
    uint64_t host_margin =
        (UINT64_C(256) << 20) + (UINT64_C(32) << 20) * (uint64_t)omp_get_max_threads();

    zt_status st = ZT_OK;
    zt_device_mem dm = {0};
    if (t->be->mem_info)
        st = t->be->mem_info(t->be, &dm);
    zt_hostmem h;
    zt_hostmem_read(&h);
    memcheck_rank mine = {.host_need = memcheck_add(host_plan, host_margin),
                          .cgroup_id = zt_hostmem_cgroup_id(&h),
                          .device_need = memcheck_add(dev_plan, ZT_DEVICE_MARGIN)};
    snprintf(mine.device_id, sizeof mine.device_id, "%s", dm.id);
    int local = t->world->local_size;
    memcheck_rank *all = malloc((size_t)local * sizeof mine);
    if (st == ZT_OK && !all)
        st = zt_fail(ZT_ERR_OOM, "", "cannot compare the plan with the machine");
    st = zt_world_agree(t->world, st, NULL);
    if (st != ZT_OK) {
        free(all);
        return st;
    }
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                  t->world->node_comm);
    char where[1024] = "";
    memcheck_host(&h, all, local, &mine, where, sizeof where);
    char remedy[512];
    if (where[0]) {
        const zt_data_memory *dm = zt_trainer_data_memory(t);
        uint64_t data = dm ? dm->held_bytes : 0;
        char data_text[128] = "", size[32];
        if (data > 0)
            snprintf(data_text, sizeof data_text,
                     ", and holds %s of data loaded already (counted as in use below)",
                     zt_datamem_size(data, size, sizeof size));
        if (data > host_class[host_largest])
            snprintf(remedy, sizeof remedy,
                     "the data set is the largest part (every rank holds its own copy): a "
                     "smaller --data file, or fewer ranks per node");
        else
            memcheck_remedy(t, host_largest, ZT_MEM_HOST, device_is_host, remedy,
                            sizeof remedy);
        st = zt_fail(ZT_ERR_OOM, remedy,
                     "not enough host memory: this rank plans %.2f GiB (%s GiB) + %.2f GiB "
                     "outside the arenas%s, but %s",
                     memcheck_gib(host_plan), host_text, memcheck_gib(host_margin), data_text,
                     where);
    }
    if (st == ZT_OK && t->be->mem_info) {
        memcheck_device(all, local, &mine, &dm, where, sizeof where);
        if (where[0])
            memcheck_remedy(t, dev_largest, ZT_MEM_DEVICE, device_is_host, remedy,
                            sizeof remedy);
        if (where[0])
            st = zt_fail(ZT_ERR_OOM, remedy,
                         "not enough device memory: this rank plans %.2f GiB (%s GiB) + %.2f "
                         "GiB outside the arenas (kernels loaded on first use, cuBLAS, NCCL), "
                         "but %s",
                         memcheck_gib(dev_plan), dev_text, memcheck_gib(ZT_DEVICE_MARGIN), where);
    }
    free(all);
    return zt_world_agree(t->world, st, NULL);
}
