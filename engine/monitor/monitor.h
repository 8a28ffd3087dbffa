/*
 * monitor: what rank 0 tells the user while training. DeepSpeed-shaped
 * progress lines every steps_per_print steps, wall_clock_breakdown timers,
 * the csv_monitor files, DeepSpeed's OVERFLOW lines and the evaluation lines,
 * and the observability sections, each in its own module: tensorboard event
 * files (tensorboard.h), the comms_logger (comms_log.h) and the
 * flops_profiler (flops.h). It hears the trainer through an observer
 * (zt_monitor_observer) and passes steps and evaluations on to zerotrain's
 * own progress line and history (engine/monitor/progress.h) when one is
 * attached; the report written after training is engine/monitor/report.h.
 *
 * TensorBoard scalars, DeepSpeed's tags at x = global samples:
 * Train/Samples/train_loss (DeepSpeed wrote it before 0.18.3, and its pipeline
 * engine still does), Train/Samples/lr, Train/Samples/loss_scale (fp16),
 * Train/Samples/elapsed_time_ms_{forward,backward,backward_inner,
 * backward_allreduce,step} (wall_clock_breakdown), and at each evaluation
 * Train/Samples/eval_loss (and eval_accuracy for classifiers, our own).
 * The csv_monitor writes the same loss tags as CSV files (our extension:
 * DeepSpeed's CSV monitor writes lr, loss_scale and the timers):
 * Train_Samples_train_loss.csv, Train_Samples_eval_loss.csv and
 * Train_Samples_eval_accuracy.csv, "step,<name>" rows at x = global samples
 * (docs/plots.md).
 *
 * Memory: the monitor owns its open CSV and event files and the profiler's
 * table. Collective: none.
 */
#ifndef ZT_MONITOR_H
#define ZT_MONITOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/config/config.h"
#include "engine/monitor/comms_log.h"
#include "engine/monitor/flops.h"
#include "engine/monitor/progress.h"
#include "engine/monitor/tensorboard.h"
#include "engine/train/scaler.h"
#include "engine/train/trainer.h"

typedef struct {
    const zt_config *cfg;
    int rank;
    FILE *csv_lr;
    FILE *csv_loss_scale;     /* fp16 only, as DeepSpeed */
    FILE *csv_timers[ZT_TIMER_N];
    /* Our extension of DeepSpeed's CSV monitor: the TensorBoard loss tags as
     * CSV files too (train_loss each step, eval_loss and eval_accuracy at each
     * evaluation; accuracy opened at the first evaluation that has one). */
    FILE *csv_train_loss, *csv_eval_loss, *csv_eval_accuracy;
    char csv_dir[1024];
    zt_tb_writer tb;          /* tb.f NULL: no tensorboard */
    zt_comms_log comms;
    zt_flops_prof flops;
    zt_trainer *trainer;      /* attached (zt_monitor_attach), or NULL */
    zt_progress *progress;    /* rank 0's, borrowed; NULL: none */
} zt_monitor;

zt_status zt_monitor_init(zt_monitor *mon, const zt_config *cfg, int rank);
/* The profilers read the trainer: the comm counters, the units' timings. */
zt_status zt_monitor_attach(zt_monitor *mon, zt_trainer *t);
/* After training: the comms_logger summary. */
void zt_monitor_end(zt_monitor *mon);
void zt_monitor_free(zt_monitor *mon);

/* Called after every optimizer step (applied or skipped) on every rank. */
void zt_monitor_step(zt_monitor *mon, const zt_step_info *s);

/* A skipped step: rank 0 prints DeepSpeed's OVERFLOW line (scaler.h). */
void zt_monitor_overflow(const zt_monitor *mon, const zt_scaler_event *ev, bool fp16);

/* Rank 0 prints the evaluation line. */
void zt_monitor_eval(zt_monitor *mon, const zt_eval_point *e);

/* The trainer observer that calls the three above on `mon`. */
zt_trainer_observer zt_monitor_observer(zt_monitor *mon);

#endif
