/*
 * progress: zerotrain's own progress line, printed by rank 0 beside
 * DeepSpeed's lines (engine/monitor/monitor.h), and the run's history as JSON
 * lines on disk.
 *
 *   step 120/600 | loss 2.3451 | 85 ms/step | 1,234 tokens/s | elapsed 0:10 | eta 0:42
 *
 * loss is the mean over the steps since the previous line; ms/step and the
 * rate are over those steps' own time (tokens/s for language models, else
 * samples/s); elapsed and eta are wall clock since training started, the eta
 * from the wall time per step so far (evaluations and saves included). A line
 * is printed at the run's first step, at its last, and in between every
 * `interval` steps (--log-interval N), or by default at every steps_per_print
 * step, or every ~10 s when steps_per_print is off.
 *
 * The log (--log-file, or REPORT.jsonl beside --report) gets one JSON object
 * per line: "start" (the run), "step" (every optimizer step: loss, lr, loss
 * scale, gradient norm, skipped, seconds), "eval", "progress" (each printed
 * line) and "end" (how the run ended; a killed run has none). It is flushed
 * at every printed line, every evaluation and at least every ~10 s, so a
 * killed run keeps its history up to then. A resumed run appends to its log;
 * a new run starts it afresh. A write that fails mid-run is a warning and
 * ends the log, never the training run.
 *
 * Memory: the progress state owns its open log. Collective: none (only rank 0
 * calls these; the others hold an unused state).
 */
#ifndef ZT_PROGRESS_H
#define ZT_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/status.h"
#include "engine/train/trainer.h"

typedef struct {
    const char *model;         /* the model's name, for the start record */
    int world_size;
    int64_t first_step;        /* the global step training starts from (a resumed run's) */
    int64_t first_skipped;     /* skipped steps by then */
    int64_t last_step;         /* the global step training runs to */
    int64_t samples_per_step;  /* train_batch_size */
    int64_t tokens_per_sample; /* > 0: rates in tokens/s; 0: samples/s */
    int64_t interval;          /* a line every N steps; 0: none; < 0: the default cadence */
    int64_t steps_per_print;   /* the config's, for the default cadence (0: off) */
    double period_seconds;     /* the default cadence without steps_per_print */
    const char *log_path;      /* NULL: no log */
    bool append;               /* continue an existing log (a resumed run) */
} zt_progress_options;

typedef struct {
    zt_progress_options opt;
    FILE *log;
    double t_start, t_line, t_flush;
    int64_t step;               /* the last step heard of */
    int64_t skipped;            /* skipped steps by then */
    int64_t since_steps;        /* steps since the previous line */
    double since_loss, since_seconds;
    double last_loss;
} zt_progress;

/* Opens the log (ZT_ERR_IO naming the path when it cannot) and writes the
 * start record; the clock starts here. */
zt_status zt_progress_init(zt_progress *p, const zt_progress_options *o);

/* After every optimizer step. */
void zt_progress_step(zt_progress *p, const zt_step_info *s);

/* After every evaluation. */
void zt_progress_eval(zt_progress *p, const zt_eval_point *e);

/* Training ended: the line of the steps not shown yet. */
void zt_progress_flush(zt_progress *p);

/* The run ended (`reason`: "done", or "stopped" by a signal): the end record
 * (after zt_progress_flush's line), the log closed. */
void zt_progress_end(zt_progress *p, const char *reason);

/* Closes the log without an end record (a failed run). */
void zt_progress_free(zt_progress *p);

/* "1:05" or "2:03:05" for a duration in seconds ("?" when not finite). */
void zt_progress_duration(double seconds, char *buf, size_t n);

/* 1234567.8 as "1,234,568"; below 100 with one decimal ("85.3"). */
void zt_progress_number(double v, char *buf, size_t n);

/* The default log path of a report path: "r.json" -> "r.jsonl", else
 * "r" -> "r.jsonl". */
void zt_progress_log_path(const char *report, char *buf, size_t n);

#endif
