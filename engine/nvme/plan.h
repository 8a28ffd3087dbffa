/*
 * plan: what one rank of a run swaps to nvme and what that costs, from the
 * config and the layout. The trainer's buffer plan (engine/train/buffers.c),
 * its swap set-up (engine/train/nvme.c) and --estimate-memory all read this
 * one plan, so the estimate is what a run reserves and writes.
 *
 * Optimizer (offload_optimizer device "nvme", a stage that shards the
 * optimizer): the rank's span (its partition, units in order) is cut into
 * sub-groups as DeepSpeed's stage 3 cuts its parameters: units are appended
 * until the sub-group's elements reach sub_group_size (so a sub-group is at
 * least one unit, and may pass the size by one unit's shard). A sub-group
 * swaps `opt_tensors` tensors, the fp32 master weights and each optimizer
 * state, each in its own file (fp32_master, exp_avg, exp_avg_sq, or
 * momentum_buffer) at the sub-group's offset, padded to ZT_AIO_ALIGN. As in
 * DeepSpeed, each of buffer_count buffers holds one tensor of the largest
 * sub-group, so buffer_count / opt_tensors sub-groups fit in memory at once
 * (`opt_slots`, capped at the number of sub-groups).
 *
 * Parameters (offload_param device "nvme", stage 3): the shards of the
 * non-persistent units. Units, in order, stay in host memory while their
 * shards total at most max_in_cpu elements; the rest are swapped, one file
 * per unit. buffer_count buffers (capped at the swapped units) of
 * min(buffer_size, largest swapped shard) elements, padded to ZT_AIO_ALIGN; a
 * swapped shard larger than buffer_size is DeepSpeed's error ("More elements
 * N than buffer size M").
 *
 * Gradients (with the optimizer): the rank's fp32 gradient partition is
 * swapped too, as DeepSpeed's optimizer swapper swaps gradients: one more
 * file ("gradient") laid out as the optimizer files (each sub-group at its
 * file_offset), in front of which grad_slots buffers of group_bytes stand
 * (two, or one with one sub-group: one is filled while the other is written
 * or read ahead). Reduced gradients are added into the sub-group's buffer as
 * they arrive and written back when the reduction moves on; the step reads
 * them with the sub-group's state.
 *
 * Host memory: the SWAP arena holds every buffer (swap_bytes, one block per
 * swapper with room to align it); host PARAMS keeps the max_in_cpu shards;
 * nothing else of what is swapped stays in memory, so host memory does not
 * grow with the model: GRADS is 0 on the host, and the offload's host
 * staging of a reduced bucket is cut to stage_numel (the largest sub-group).
 *
 * Memory: the plan's tables are malloc'd; zt_nvme_plan_free frees them (a
 * zeroed plan is fine to free). Collective: none.
 */
#ifndef ZT_NVME_PLAN_H
#define ZT_NVME_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/config/config.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/zero/layout.h"

#define ZT_NVME_MAX_TENSORS 3

typedef struct {
    int u0, u1;          /* units [u0, u1) */
    int64_t lo, numel;   /* span elements [lo, lo + numel) */
    int64_t file_offset; /* bytes, in each optimizer file */
    int64_t bytes;       /* one tensor, padded to ZT_AIO_ALIGN */
} zt_nvme_group;

typedef struct {
    bool opt, param;
    /* Optimizer. */
    int opt_tensors;             /* master + states */
    const char *opt_names[ZT_NVME_MAX_TENSORS]; /* their file stems */
    int n_groups;
    zt_nvme_group *groups;
    int *group_of;               /* per unit: its sub-group */
    int64_t group_bytes;         /* one tensor of the largest sub-group, padded */
    int opt_slots;               /* sub-groups in memory at once */
    int64_t opt_file_bytes;      /* each of the opt_tensors files */
    int64_t group_numel;         /* elements of the largest sub-group */
    /* Gradients (with the optimizer). */
    int grad_slots;              /* buffers of group_bytes in front of the gradient file */
    int64_t grad_file_bytes;     /* the gradient file: opt_file_bytes */
    int64_t stage_numel;         /* the host staging of a reduced bucket, at most */
    /* Parameters. */
    bool *param_swapped;         /* per unit: its shard lives in a file */
    int n_param_swapped;
    int64_t param_in_cpu_numel;  /* non-persistent shard elements kept in host PARAMS */
    int64_t param_swapped_numel; /* shard elements on disk */
    int64_t param_buffer_bytes;  /* one buffer, padded */
    int param_buffers;
    int64_t param_file_bytes;    /* all the unit files together */
    /* One rank's totals. */
    size_t opt_swap_bytes, grad_swap_bytes, param_swap_bytes; /* SWAP arena blocks,
                                                               * alignment room included */
    int64_t disk_bytes;          /* its swap files */
} zt_nvme_plan;

/* The plan of one rank: opt / param say which offloads go to nvme (the
 * caller has resolved them against the stage). Errors are ZT_ERR_CONFIG
 * naming the setting (a shard over buffer_size). */
zt_status zt_nvme_plan_init(zt_nvme_plan *p, const zt_config *cfg, const zt_layout *lay,
                            bool opt, bool param, zt_dtype param_dt);
void zt_nvme_plan_free(zt_nvme_plan *p);

/* Every SWAP byte of the plan. */
size_t zt_nvme_plan_swap_bytes(const zt_nvme_plan *p);

/* Bytes n rounded up to ZT_AIO_ALIGN. */
int64_t zt_nvme_pad(int64_t n);

#endif
