/*
 * monitor: what rank 0 tells the user while and after training. DeepSpeed-
 * shaped progress lines every steps_per_print steps, wall_clock_breakdown
 * timers, the csv_monitor files, the final summary, and the --report JSON
 * (settings, loss history, throughput, per-rank memory by class and
 * communication bytes by kind and communicator).
 *
 * Report JSON (what scripts and tests read):
 *   zerotrain_version, model {name, params}, world_size, device, stage,
 *   precision, train_batch_size, micro_batch_size, gradient_accumulation_steps,
 *   steps, skipped_steps, loss_history [..], loss_scale_history [..] (fp16;
 *   null otherwise), final_loss, samples_per_sec, param_norm, train_seconds,
 *   eval [ {step, loss, accuracy} ] (accuracy null for language models),
 *   mixed_precision {grad_dtype, comm_dtype}, offload {optimizer, param},
 *   activation_checkpointing {interval, cpu_checkpointing},
 *   zero {stage, padded_params, partition_params, persistent_params,
 *         hpz_partition_size, mics_shard_size (0: off), overlap_comm, reduce_bucket_size,
 *         allgather_bucket_size, reduce_scatter, allgather_partitions},
 *   ranks [ {rank, host,
 *            memory_bytes {device|host {CLASS {current, peak, avg, reserved}}},
 *            memory_total_bytes {device|host {current, peak}},  (all classes at once)
 *            comm_bytes {KIND: bytes summed over communicators},
 *            comm {GROUP {bytes {KIND}, calls {KIND}}},
 *            gather_peak_live_params} ]   (stage 3's largest gathered window)
 * GROUP: world, and with hpZ hpz, with MiCS mics_shard and mics_replica.
 * CLASS: PARAMS GRADS MASTER OPTIM ACTS COMM WORK; KIND: all_reduce
 * reduce_scatter all_gather broadcast. Bytes are whole logical buffers (see
 * comm.h). Non-finite numbers are written as null.
 *
 * Memory: the monitor owns its open CSV files. Collective:
 * zt_monitor_write_report (gathers every rank's memory and comm counters).
 */
#ifndef ZT_MONITOR_H
#define ZT_MONITOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/arena.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/train/scaler.h"
#include "engine/world/world.h"

typedef enum {
    ZT_TIMER_FWD = 0,
    ZT_TIMER_BWD,
    ZT_TIMER_BWD_INNER,
    ZT_TIMER_BWD_ALLREDUCE,
    ZT_TIMER_STEP,
    ZT_TIMER_N
} zt_timer_kind;

typedef struct {
    int64_t global_steps, skipped_steps, micro_steps, epoch, global_samples;
    double loss, lr, grad_norm;
    double loss_scale;        /* fp16: the scale after this step's update; < 0 otherwise */
    double beta1, beta2;      /* Adam betas, or SGD momentum in beta1 */
    bool is_sgd;
    double curr_samples_per_sec, running_samples_per_sec; /* <= 0: not timed yet */
    size_t mem_allocated, max_mem_allocated;              /* device bytes */
    double timers_ms[ZT_TIMER_N];                         /* summed over micro-steps */
} zt_step_info;

typedef struct {
    const zt_config *cfg;
    int rank;
    FILE *csv_lr;
    FILE *csv_loss_scale;     /* fp16 only, as DeepSpeed */
    FILE *csv_timers[ZT_TIMER_N];
} zt_monitor;

zt_status zt_monitor_init(zt_monitor *mon, const zt_config *cfg, int rank);
void zt_monitor_free(zt_monitor *mon);

/* Called after every optimizer step (applied or skipped) on every rank. */
void zt_monitor_step(zt_monitor *mon, const zt_step_info *s);

/* A skipped step: rank 0 prints DeepSpeed's OVERFLOW line (scaler.h). */
void zt_monitor_overflow(const zt_monitor *mon, const zt_scaler_event *ev, bool fp16);

/* One evaluation: validation loss, and accuracy (NAN for language models). */
typedef struct {
    int64_t step;
    double loss, accuracy, seconds;
} zt_eval_point;

/* Rank 0 prints the evaluation line. */
void zt_monitor_eval(const zt_monitor *mon, const zt_eval_point *e);

/* Everything the report says besides per-rank counters. */
typedef struct {
    const char *model_name;
    int64_t model_params;
    const char *device;
    const char *precision;
    int stage;
    int64_t train_batch_size, micro_batch_size, gradient_accumulation_steps;
    int64_t steps, skipped_steps;
    const double *loss_history;
    const double *scale_history; /* fp16: the loss scale each step ran with; else NULL */
    int64_t n_loss;
    const char *grad_dtype, *comm_dtype;
    const char *offload_optimizer, *offload_param; /* "none" | "cpu" */
    int64_t checkpoint_interval;                    /* 0: activation checkpointing off */
    bool cpu_checkpointing;
    double samples_per_sec;
    double param_norm;
    double train_seconds;
    const zt_eval_point *evals;
    int64_t n_evals;
    /* zero section */
    const zt_zero_config *zero;
    int64_t padded_params, partition_params, persistent_params;
    /* this rank's */
    int64_t gather_peak_live_params;
} zt_report;

typedef enum {
    ZT_GROUP_WORLD = 0,
    ZT_GROUP_HPZ,
    ZT_GROUP_MICS_SHARD,
    ZT_GROUP_MICS_REPLICA,
    ZT_GROUP_N
} zt_group_kind;

/* groups: the communicators by kind, NULL where absent (the world never is). */
zt_status zt_monitor_write_report(const char *path, const zt_report *r, const zt_world *w,
                                  zt_memory *mem, const zt_comm *const groups[ZT_GROUP_N]);

#endif
