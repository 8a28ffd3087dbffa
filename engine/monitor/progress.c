/*
 * progress: the progress line and the JSON-lines history
 * (engine/monitor/progress.h).
 */
#include "engine/monitor/progress.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double progress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* JSON has no NaN or infinity: a diverged value is null. */
static json_t *progress_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void zt_progress_duration(double seconds, char *buf, size_t n)
{
    if (!isfinite(seconds) || seconds < 0 || seconds > 1e9) {
        snprintf(buf, n, "?");
        return;
    }
    long long s = (long long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, n, "%lld:%02lld", s / 60, s % 60);
}

void zt_progress_number(double v, char *buf, size_t n)
{
    if (!isfinite(v) || v < 0 || v >= 1e18) {
        snprintf(buf, n, "?");
        return;
    }
    if (v < 100) {
        snprintf(buf, n, "%.1f", v);
        return;
    }
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%.0f", v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

void zt_progress_log_path(const char *report, char *buf, size_t n)
{
    size_t len = strlen(report);
    if (len >= 5 && !strcmp(report + len - 5, ".json"))
        snprintf(buf, n, "%sl", report);
    else
        snprintf(buf, n, "%s.jsonl", report);
}

/* One record, one line; the log is given up on a failed write (the run goes
 * on: its history is a convenience, not its result). */
static void progress_write(zt_progress *p, json_t *rec, bool flush)
{
    if (!rec)
        return;
    if (p->log) {
        char *line = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        bool ok = line && fprintf(p->log, "%s\n", line) >= 0;
        if (ok && flush) {
            ok = fflush(p->log) == 0;
            p->t_flush = progress_now();
        }
        free(line);
        if (!ok) {
            fprintf(stderr, "zerotrain: warning: cannot write the log %s (%s): it ends here; "
                            "training goes on\n",
                    p->opt.log_path, strerror(errno));
            fclose(p->log);
            p->log = NULL;
        }
    }
    json_decref(rec);
}

zt_status zt_progress_init(zt_progress *p, const zt_progress_options *o)
{
    memset(p, 0, sizeof *p);
    p->opt = *o;
    p->t_start = p->t_line = p->t_flush = progress_now();
    p->step = o->first_step;
    p->skipped = o->first_skipped;
    p->last_loss = NAN;
    if (o->log_path) {
        p->log = fopen(o->log_path, o->append ? "a" : "w");
        if (!p->log)
            return zt_fail(ZT_ERR_IO, "give --log-file a path in a directory you can write to",
                           "cannot open the log %s: %s", o->log_path, strerror(errno));
    }
    progress_write(p,
                   json_pack("{s:s, s:s, s:I, s:s, s:i, s:I, s:I, s:I, s:I}", "event", "start",
                             "zerotrain_version", ZT_VERSION, "time",
                             (json_int_t)time(NULL), "model", o->model, "world_size",
                             o->world_size, "first_step", (json_int_t)o->first_step, "steps",
                             (json_int_t)o->last_step, "train_batch_size",
                             (json_int_t)o->samples_per_step, "tokens_per_sample",
                             (json_int_t)o->tokens_per_sample),
                   true);
    return ZT_OK;
}

/* The line (and its progress record) for the steps since the previous one. */
static void progress_line(zt_progress *p)
{
    double now = progress_now();
    const zt_progress_options *o = &p->opt;
    double loss = p->since_loss / (double)p->since_steps;
    double ms = 1e3 * p->since_seconds / (double)p->since_steps;
    double samples = (double)o->samples_per_step * (double)p->since_steps;
    double rate = p->since_seconds > 0 ? samples / p->since_seconds : NAN;
    if (o->tokens_per_sample > 0)
        rate *= (double)o->tokens_per_sample;
    double elapsed = now - p->t_start;
    int64_t done = p->step - o->first_step;
    double eta = done > 0 ? elapsed / (double)done * (double)(o->last_step - p->step) : NAN;
    char ms_s[32], rate_s[32], el_s[32], eta_s[32];
    zt_progress_number(ms, ms_s, sizeof ms_s);
    zt_progress_number(rate, rate_s, sizeof rate_s);
    zt_progress_duration(elapsed, el_s, sizeof el_s);
    zt_progress_duration(eta, eta_s, sizeof eta_s);
    const char *unit = o->tokens_per_sample > 0 ? "tokens/s" : "samples/s";
    if (o->interval != 0) {
        printf("step %lld/%lld | loss %.4f | %s ms/step | %s %s | elapsed %s | eta %s\n",
               (long long)p->step, (long long)o->last_step, loss, ms_s, rate_s, unit, el_s,
               eta_s);
        fflush(stdout);
    }
    progress_write(p,
                   json_pack("{s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "event", "progress",
                             "step", (json_int_t)p->step, "steps", (json_int_t)o->last_step,
                             "loss", progress_real(loss), "ms_per_step", progress_real(ms),
                             o->tokens_per_sample > 0 ? "tokens_per_s" : "samples_per_s",
                             progress_real(rate), "elapsed_s", progress_real(elapsed), "eta_s",
                             progress_real(eta)),
                   true);
    p->t_line = now;
    p->since_steps = 0;
    p->since_loss = p->since_seconds = 0.0;
}

void zt_progress_step(zt_progress *p, const zt_step_info *s)
{
    const zt_progress_options *o = &p->opt;
    p->step = s->global_steps;
    p->last_loss = s->loss;
    p->since_steps++;
    p->since_loss += s->loss;
    p->since_seconds += s->seconds;
    int64_t skipped_before = p->skipped;
    p->skipped = s->skipped_steps;
    double now = progress_now();
    bool period = now - p->t_line >= o->period_seconds;
    progress_write(p,
                   json_pack("{s:s, s:I, s:o, s:o, s:o, s:o, s:b, s:o}", "event", "step", "step",
                             (json_int_t)s->global_steps, "loss", progress_real(s->loss), "lr",
                             progress_real(s->lr), "loss_scale",
                             s->loss_scale >= 0 ? progress_real(s->loss_scale) : json_null(),
                             "grad_norm",
                             s->grad_norm >= 0 ? progress_real(s->grad_norm) : json_null(),
                             "skipped", s->skipped_steps > skipped_before, "seconds",
                             progress_real(s->seconds)),
                   now - p->t_flush >= o->period_seconds);
    bool line = s->global_steps == o->first_step + 1 || s->global_steps == o->last_step;
    if (o->interval > 0)
        line = line || s->global_steps % o->interval == 0;
    else if (o->interval < 0 && o->steps_per_print > 0)
        line = line || s->global_steps % o->steps_per_print == 0;
    else if (o->interval < 0)
        line = line || period;
    if (line)
        progress_line(p);
}

void zt_progress_eval(zt_progress *p, const zt_eval_point *e)
{
    progress_write(p,
                   json_pack("{s:s, s:I, s:o, s:o, s:o}", "event", "eval", "step",
                             (json_int_t)e->step, "val_loss", progress_real(e->loss),
                             "val_accuracy", progress_real(e->accuracy), "seconds",
                             progress_real(e->seconds)),
                   true);
}

void zt_progress_flush(zt_progress *p)
{
    if (p->since_steps > 0)
        progress_line(p);
}

void zt_progress_end(zt_progress *p, const char *reason)
{
    zt_progress_flush(p);
    progress_write(p,
                   json_pack("{s:s, s:s, s:I, s:I, s:o, s:o}", "event", "end", "reason", reason,
                             "steps_run", (json_int_t)(p->step - p->opt.first_step),
                             "global_step", (json_int_t)p->step, "final_loss",
                             progress_real(p->last_loss), "elapsed_s",
                             progress_real(progress_now() - p->t_start)),
                   true);
    zt_progress_free(p);
}

void zt_progress_free(zt_progress *p)
{
    if (p->log)
        fclose(p->log);
    p->log = NULL;
}
