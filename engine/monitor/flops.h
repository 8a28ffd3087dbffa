/*
 * flops: the `flops_profiler` section. At profile_step (0-based: the step
 * that starts when that many steps are done, as DeepSpeed counts) the
 * trainer times every unit's forward and backward call and sums each unit's
 * analytic forward cost (models/unit.h zt_unit_forward_cost); after that step
 * rank 0 prints DeepSpeed's profile: the summary (world and batch sizes,
 * parameters, forward MACs and FLOPs, latencies, FLOPS), the top modules per
 * depth (depth 0 the model, depth 1 the units by kind: "h", "layers", ...)
 * and, with `detailed`, one line per unit.
 *
 * What differs from DeepSpeed: the numbers are per micro-batch (the step's
 * sums divided by gradient_accumulation_steps); latencies are the units' own
 * calls (gathers, conversions and the loss are outside them); backward
 * latency and FLOPS are always shown (DeepSpeed: with wall_clock_breakdown);
 * module_depth -1 shows both depths (DeepSpeed leaves the deepest out, which
 * here would be every unit); the parameters are the whole model's, whatever
 * the stage keeps on a rank.
 *
 * Memory: owns its per-unit table (handed to the trainer). Collective: none.
 */
#ifndef ZT_FLOPS_H
#define ZT_FLOPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/config/config.h"
#include "engine/train/trainer.h"

typedef struct {
    bool on, done;
    const zt_config *cfg;
    const zt_model *model;
    int world_size;
    int dp_size; /* the data-parallel group (world / pipeline stages) */
    zt_unit_profile *prof; /* (n_units) */
} zt_flops_prof;

/* Rank 0 with flops_profiler.enabled: checks output_file can be written and
 * arms the trainer for profile_step; otherwise off. */
zt_status zt_flops_init(zt_flops_prof *fp, const zt_config *cfg, zt_trainer *t, int rank);

/* After each step: prints the profile once the profiled step is done. */
void zt_flops_step(zt_flops_prof *fp, const zt_step_info *s);

/* The profile of one step (for tests: any FILE). */
void zt_flops_print(const zt_flops_prof *fp, const zt_step_info *s, FILE *out);

/* Disarms the trainer (when it still lives) and frees the table. */
void zt_flops_free(zt_flops_prof *fp, zt_trainer *t);

/* DeepSpeed's number formats: "1.23 G" (params: "B" for G), with a unit. */
void zt_flops_number(double v, const char *unit, bool params, char *buf, size_t n);
void zt_flops_duration(double ms, char *buf, size_t n);

#endif
