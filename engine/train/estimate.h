/*
 * estimate: `zerotrain --estimate-memory`. For a model, a config and a
 * hardware shape (G ranks per node, N nodes) it plans what one rank would hold
 * at every ZeRO stage and offload variant, through the trainer's own planning
 * (zt_trainer_plan), so the estimate is the reservation a real run makes, not
 * a formula that can drift from the code. Prints DeepSpeed's estimator table
 * (estimate_zero2/3_model_states_mem_needs_all_live, per CPU / per GPU in GiB)
 * plus an exact per-class byte table, and writes the same numbers as JSON.
 *
 * Each variant also carries the stage policy's statement of its model states
 * (engine/zero/stage.h, zt_stage_memory): the DeepSpeed-shaped table prints
 * those, and the plan must equal them class by class (a difference is a
 * planning bug, reported as an internal error rather than printed).
 *
 * Variants, in order: stage 0; stage 1; stage 1 + offload_optimizer cpu,
 * then nvme; stage 2; stage 2 + offload_optimizer cpu, then nvme; stage 3;
 * stage 3 + offload_optimizer cpu, then nvme; stage 3 + offload_param cpu +
 * offload_optimizer cpu; the same with both on nvme (ZeRO-Infinity:
 * docs/nvme.md). An nvme variant holds swap buffers (host SWAP) and writes
 * swap files (nvme_bytes), both from the nvme plan a run would make
 * (engine/nvme/plan.h) with the config's buffer settings.
 * The config's own stage and offload settings are replaced by each variant's;
 * everything else in it (bucket sizes, stage-3 thresholds, hpZ, optimizer,
 * micro batch) is kept.
 *
 * Memory: zt_estimate is a plain value (fixed arrays, a borrowed model name
 * that must outlive it); nothing inside needs freeing.
 * Collective: none.
 */
#ifndef ZT_ESTIMATE_H
#define ZT_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/dataset.h"
#include "engine/arena.h"
#include "engine/config/config.h"
#include "models/model.h"
#include "engine/status.h"
#include "engine/zero/stage.h"

#define ZT_ESTIMATE_NVARIANTS 12

/* Largest world (G x N) estimated: padding grows with it, and beyond this a
 * typo in --num-gpus/--num-nodes is far likelier than a real cluster. */
#define ZT_ESTIMATE_MAX_WORLD (1 << 20)

typedef struct {
    int stage;
    zt_offload_device offload_optimizer, offload_param;
    size_t bytes[ZT_MEM_NLOC][ZT_MEM_NCLASS]; /* one rank's planned bytes */
    int64_t nvme_bytes;                       /* one rank's swap files */
    zt_stage_memory policy;                   /* the stage's formulas, model states */
} zt_estimate_variant;

typedef struct {
    const char *model_name;  /* borrowed from the model */
    int64_t params;          /* unpadded parameter count */
    int64_t padded_params;   /* flat vector length for world_size ranks */
    int64_t largest_unit_params; /* unpadded, DeepSpeed's "largest layer" */
    int num_gpus, num_nodes, world_size;
    int64_t micro_batch_size;
    zt_dtype precision;             /* the config's compute dtype */
    int64_t nvme_buffer_size;       /* > 0: offload_param.buffer_size raised to it for nvme */
    int n_variants;
    zt_estimate_variant variants[ZT_ESTIMATE_NVARIANTS];
    /* What --data holds on each rank's host (zeros without it): the caller
     * fills it after zt_estimate_run; a "data" row of the host table, in its
     * total, and the JSON's "data". */
    zt_data_memory data;
} zt_estimate;

/* Plans every variant for num_gpus * num_nodes ranks. cfg must have been
 * parsed for that world size (its micro batch sizes the activations).
 * Unless the config set overlap_comm, each stage takes DeepSpeed's default
 * (on at stage 3 only), as a run at that stage would.
 * ZT_ERR_USAGE when the world is too large to plan. */
zt_status zt_estimate_run(zt_estimate *e, const zt_config *cfg, const zt_model *m,
                          int num_gpus, int num_nodes);

/* PARAMS + GRADS + MASTER + OPTIM of one rank at `loc` (planned). */
size_t zt_estimate_model_state_bytes(const zt_estimate_variant *v, zt_mem_loc loc);

/* The DeepSpeed-shaped table, its footnotes and the per-class byte table
 * (lines shorter than 120 characters). */
void zt_estimate_print(const zt_estimate *e, FILE *out);

/* JSON: {params, padded_params, largest_layer_params, model, world_size,
 * num_gpus, num_nodes, micro_batch_size, variants: [{stage, offload_optimizer,
 * offload_param, device_bytes {CLASS}, host_bytes {CLASS},
 * model_state_device_bytes, model_state_host_bytes, nvme_bytes}], data (null
 * without --data; zt_datamem_json)}. ZT_ERR_IO when the file cannot be
 * written. */
zt_status zt_estimate_write_json(const zt_estimate *e, const char *path);

#endif
