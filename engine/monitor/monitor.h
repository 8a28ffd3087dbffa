/*
 * monitor: what rank 0 tells the user while training. DeepSpeed-shaped
 * progress lines every steps_per_print steps, wall_clock_breakdown timers,
 * the csv_monitor files, DeepSpeed's OVERFLOW lines and the evaluation lines.
 * It hears the trainer through an observer (zt_monitor_observer); the report
 * written after training is engine/monitor/report.h.
 *
 * Memory: the monitor owns its open CSV files. Collective: none.
 */
#ifndef ZT_MONITOR_H
#define ZT_MONITOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/config/config.h"
#include "engine/train/scaler.h"
#include "engine/train/trainer.h"

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

/* Rank 0 prints the evaluation line. */
void zt_monitor_eval(const zt_monitor *mon, const zt_eval_point *e);

/* The trainer observer that calls the three above on `mon`. */
zt_trainer_observer zt_monitor_observer(zt_monitor *mon);

#endif
