/*
 * monitor: what rank 0 tells the user while and after training. DeepSpeed-
 * shaped progress lines every steps_per_print steps, wall_clock_breakdown
 * timers, the csv_monitor files, the final summary, and the --report JSON
 * (settings, loss history, throughput, per-rank memory by class and
 * communication bytes by kind).
 *
 * Memory: the monitor owns its open CSV files. Collective:
 * zt_monitor_write_report (gathers every rank's memory and comm counters).
 */
#ifndef ZT_MONITOR_H
#define ZT_MONITOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "comm.h"
#include "config.h"
#include "world.h"

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
    FILE *csv_timers[ZT_TIMER_N];
} zt_monitor;

zt_status zt_monitor_init(zt_monitor *mon, const zt_config *cfg, int rank);
void zt_monitor_free(zt_monitor *mon);

/* Called after every optimizer step (applied or skipped) on every rank. */
void zt_monitor_step(zt_monitor *mon, const zt_step_info *s);

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
    int64_t n_loss;
    double samples_per_sec;
    double param_norm;
    double train_seconds;
} zt_report;

zt_status zt_monitor_write_report(const char *path, const zt_report *r, const zt_world *w,
                                  zt_memory *mem, const zt_comm *comm);

#endif
