#include "engine/monitor/monitor.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "engine/path.h"

static const char *timer_names[ZT_TIMER_N] = {"fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"};
static const char *timer_csv_names[ZT_TIMER_N] = {"forward", "backward", "backward_inner",
                                                  "backward_allreduce", "step"};

/* DeepSpeed's CSV monitor: event "Train/Samples/x" goes to Train_Samples_x.csv
 * under the header "step,x". */
static zt_status monitor_open_csv(const char *dir, const char *event, FILE **out)
{
    char path[1024];
    int n = snprintf(path, sizeof path, "%s/", dir);
    for (const char *c = event; *c && n < (int)sizeof path - 5; c++)
        path[n++] = *c == '/' ? '_' : *c;
    snprintf(path + n, sizeof path - (size_t)n, ".csv");
    *out = fopen(path, "w");
    if (!*out)
        return zt_fail(ZT_ERR_IO, "check csv_monitor.output_path",
                       "cannot create csv_monitor file %s: %s", path, strerror(errno));
    fprintf(*out, "step,%s\n", strrchr(event, '/') + 1);
    return ZT_OK;
}

/* DeepSpeed's monitors write into output_path/job_name. */
static void monitor_dir(const zt_csv_monitor_config *m, char *dir, size_t n)
{
    snprintf(dir, n, "%s%s%s", m->output_path, m->output_path[0] ? "/" : "", m->job_name);
}

zt_status zt_monitor_init(zt_monitor *mon, const zt_config *cfg, int rank)
{
    memset(mon, 0, sizeof *mon);
    mon->cfg = cfg;
    mon->rank = rank;
    if (rank != 0)
        return ZT_OK;
    char dir[1024];
    if (cfg->tensorboard.enabled) {
        monitor_dir(&cfg->tensorboard, dir, sizeof dir);
        ZT_TRY(zt_tb_open(&mon->tb, dir));
    }
    if (!cfg->csv_monitor.enabled)
        return ZT_OK;
    /* One file per event, '/' -> '_'. */
    monitor_dir(&cfg->csv_monitor, dir, sizeof dir);
    ZT_TRY(zt_path_mkdirs(dir, "csv_monitor", "check csv_monitor.output_path"));
    ZT_TRY(monitor_open_csv(dir, "Train/Samples/lr", &mon->csv_lr));
    ZT_TRY(monitor_open_csv(dir, "Train/Samples/train_loss", &mon->csv_train_loss));
    ZT_TRY(monitor_open_csv(dir, "Train/Samples/eval_loss", &mon->csv_eval_loss));
    snprintf(mon->csv_dir, sizeof mon->csv_dir, "%s", dir);
    if (cfg->fp16.enabled)
        ZT_TRY(monitor_open_csv(dir, "Train/Samples/loss_scale", &mon->csv_loss_scale));
    if (cfg->wall_clock_breakdown)
        for (int k = 0; k < ZT_TIMER_N; k++) {
            char ev[128];
            snprintf(ev, sizeof ev, "Train/Samples/elapsed_time_ms_%s", timer_csv_names[k]);
            ZT_TRY(monitor_open_csv(dir, ev, &mon->csv_timers[k]));
        }
    return ZT_OK;
}

zt_status zt_monitor_attach(zt_monitor *mon, zt_trainer *t)
{
    mon->trainer = t;
    if (mon->rank != 0)
        return ZT_OK;
    zt_trainer_stats s;
    zt_trainer_stats_get(t, &s);
    zt_comms_log_init(&mon->comms, mon->cfg, &s);
    return zt_flops_init(&mon->flops, mon->cfg, t, mon->rank);
}

void zt_monitor_end(zt_monitor *mon)
{
    if (mon->rank == 0)
        zt_comms_log_summary(&mon->comms, stdout);
}

void zt_monitor_free(zt_monitor *mon)
{
    zt_tb_close(&mon->tb);
    zt_flops_free(&mon->flops, mon->trainer);
    if (mon->csv_lr)
        fclose(mon->csv_lr);
    if (mon->csv_loss_scale)
        fclose(mon->csv_loss_scale);
    FILE *own[] = {mon->csv_train_loss, mon->csv_eval_loss, mon->csv_eval_accuracy};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (own[i])
            fclose(own[i]);
    for (int k = 0; k < ZT_TIMER_N; k++)
        if (mon->csv_timers[k])
            fclose(mon->csv_timers[k]);
    memset(mon, 0, sizeof *mon);
}

static double monitor_gib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

static void monitor_tensorboard_step(zt_monitor *mon, const zt_step_info *s)
{
    if (!mon->tb.f)
        return;
    const int64_t x = s->global_samples;
    zt_tb_scalar(&mon->tb, "Train/Samples/train_loss", s->loss, x);
    zt_tb_scalar(&mon->tb, "Train/Samples/lr", s->lr, x);
    if (s->loss_scale >= 0.0)
        zt_tb_scalar(&mon->tb, "Train/Samples/loss_scale", s->loss_scale, x);
    for (int k = 0; k < ZT_TIMER_N && mon->cfg->wall_clock_breakdown; k++) {
        char tag[96];
        snprintf(tag, sizeof tag, "Train/Samples/elapsed_time_ms_%s", timer_csv_names[k]);
        zt_tb_scalar(&mon->tb, tag, s->timers_ms[k], x);
    }
    zt_tb_flush(&mon->tb);
}

void zt_monitor_step(zt_monitor *mon, const zt_step_info *s)
{
    if (mon->rank != 0)
        return;
    const zt_config *cfg = mon->cfg;
    monitor_tensorboard_step(mon, s);
    zt_flops_step(&mon->flops, s);
    zt_comms_log_step(&mon->comms, s->global_steps, stdout);
    if (mon->csv_lr) {
        fprintf(mon->csv_lr, "%lld,%.10g\n", (long long)s->global_samples, s->lr);
        if (mon->csv_loss_scale)
            fprintf(mon->csv_loss_scale, "%lld,%.10g\n", (long long)s->global_samples,
                    s->loss_scale);
        for (int k = 0; k < ZT_TIMER_N; k++)
            if (mon->csv_timers[k])
                fprintf(mon->csv_timers[k], "%lld,%.4f\n", (long long)s->global_samples,
                        s->timers_ms[k]);
        /* Flushed each step, so that a killed run keeps its curve. */
        fprintf(mon->csv_train_loss, "%lld,%.10g\n", (long long)s->global_samples, s->loss);
        fflush(mon->csv_train_loss);
    }
    bool print = cfg->steps_per_print > 0 && s->global_steps % cfg->steps_per_print == 0;
    if (print) {
        printf("[Rank 0] step=%lld, skipped=%lld, loss=%.6f, lr=[%.6g], ",
               (long long)s->global_steps, (long long)s->skipped_steps, s->loss, s->lr);
        if (s->is_sgd)
            printf("mom=[%.6g]", s->beta1);
        else
            printf("mom=[(%.6g, %.6g)]", s->beta1, s->beta2);
        if (s->loss_scale >= 0.0)
            printf(", loss_scale=%.10g", s->loss_scale);
        printf("\n");
        if (cfg->throughput_timer)
            printf("epoch=%lld/micro_step=%lld/global_step=%lld, RunningAvgSamplesPerSec=%.4f, "
                   "CurrSamplesPerSec=%.4f, MemAllocated=%.2fGB, MaxMemAllocated=%.2fGB\n",
                   (long long)s->epoch, (long long)s->micro_steps, (long long)s->global_steps,
                   s->running_samples_per_sec, s->curr_samples_per_sec,
                   monitor_gib(s->mem_allocated), monitor_gib(s->max_mem_allocated));
    }
    if (cfg->wall_clock_breakdown && (print || cfg->steps_per_print == 0)) {
        printf("[Rank 0] time (ms)");
        for (int k = 0; k < ZT_TIMER_N; k++)
            printf(" | %s: %.2f", timer_names[k], s->timers_ms[k]);
        printf("\n");
    }
    fflush(stdout);
    if (mon->progress)
        zt_progress_step(mon->progress, s);
}

void zt_monitor_overflow(const zt_monitor *mon, const zt_scaler_event *ev, bool fp16)
{
    if (mon->rank != 0)
        return;
    char line[256];
    zt_scaler_overflow_line(ev, fp16, line, sizeof line);
    printf("%s\n", line);
    fflush(stdout);
}

static void monitor_csv_eval(zt_monitor *mon, const zt_eval_point *e)
{
    if (!mon->csv_eval_loss)
        return;
    int64_t x = e->step * mon->cfg->train_batch_size;
    fprintf(mon->csv_eval_loss, "%lld,%.10g\n", (long long)x, e->loss);
    fflush(mon->csv_eval_loss);
    if (isfinite(e->accuracy) && !mon->csv_eval_accuracy &&
        monitor_open_csv(mon->csv_dir, "Train/Samples/eval_accuracy", &mon->csv_eval_accuracy) !=
            ZT_OK) {
        fprintf(stderr, "zerotrain: warning: %s (no accuracy CSV)\n", zt_status_message());
        return;
    }
    if (isfinite(e->accuracy)) {
        fprintf(mon->csv_eval_accuracy, "%lld,%.10g\n", (long long)x, e->accuracy);
        fflush(mon->csv_eval_accuracy);
    }
}

void zt_monitor_eval(zt_monitor *mon, const zt_eval_point *e)
{
    if (mon->rank != 0)
        return;
    if (mon->tb.f) {
        int64_t x = e->step * mon->cfg->train_batch_size;
        zt_tb_scalar(&mon->tb, "Train/Samples/eval_loss", e->loss, x);
        if (isfinite(e->accuracy))
            zt_tb_scalar(&mon->tb, "Train/Samples/eval_accuracy", e->accuracy, x);
        zt_tb_flush(&mon->tb);
    }
    monitor_csv_eval(mon, e);
    if (isfinite(e->accuracy))
        printf("[Rank 0] eval: step=%lld, val_loss=%.6f, val_accuracy=%.4f (%.2f s)\n",
               (long long)e->step, e->loss, e->accuracy, e->seconds);
    else
        printf("[Rank 0] eval: step=%lld, val_loss=%.6f (%.2f s)\n", (long long)e->step, e->loss,
               e->seconds);
    fflush(stdout);
    if (mon->progress)
        zt_progress_eval(mon->progress, e);
}

static void monitor_on_step(void *ctx, const zt_step_info *s) { zt_monitor_step(ctx, s); }

static void monitor_on_overflow(void *ctx, const zt_scaler_event *ev, bool fp16)
{
    zt_monitor_overflow(ctx, ev, fp16);
}

static void monitor_on_eval(void *ctx, const zt_eval_point *e) { zt_monitor_eval(ctx, e); }

zt_trainer_observer zt_monitor_observer(zt_monitor *mon)
{
    return (zt_trainer_observer){.step = monitor_on_step,
                                 .overflow = monitor_on_overflow,
                                 .eval = monitor_on_eval,
                                 .ctx = mon};
}
