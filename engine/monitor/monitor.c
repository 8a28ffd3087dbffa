#include "engine/monitor/monitor.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

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

static zt_status monitor_mkdirs(const char *dir)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return zt_fail(ZT_ERR_IO, "check csv_monitor.output_path", "cannot create %s: %s",
                           buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return zt_fail(ZT_ERR_IO, "check csv_monitor.output_path", "cannot create %s: %s", buf,
                       strerror(errno));
    return ZT_OK;
}

zt_status zt_monitor_init(zt_monitor *mon, const zt_config *cfg, int rank)
{
    memset(mon, 0, sizeof *mon);
    mon->cfg = cfg;
    mon->rank = rank;
    if (rank != 0 || !cfg->csv_monitor.enabled)
        return ZT_OK;
    /* DeepSpeed: files go to output_path/job_name, one per event, '/' -> '_'. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s%s%s", cfg->csv_monitor.output_path,
             cfg->csv_monitor.output_path[0] ? "/" : "", cfg->csv_monitor.job_name);
    ZT_TRY(monitor_mkdirs(dir));
    ZT_TRY(monitor_open_csv(dir, "Train/Samples/lr", &mon->csv_lr));
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

void zt_monitor_free(zt_monitor *mon)
{
    if (mon->csv_lr)
        fclose(mon->csv_lr);
    if (mon->csv_loss_scale)
        fclose(mon->csv_loss_scale);
    for (int k = 0; k < ZT_TIMER_N; k++)
        if (mon->csv_timers[k])
            fclose(mon->csv_timers[k]);
    memset(mon, 0, sizeof *mon);
}

static double monitor_gib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

void zt_monitor_step(zt_monitor *mon, const zt_step_info *s)
{
    if (mon->rank != 0)
        return;
    const zt_config *cfg = mon->cfg;
    if (mon->csv_lr) {
        fprintf(mon->csv_lr, "%lld,%.10g\n", (long long)s->global_samples, s->lr);
        if (mon->csv_loss_scale)
            fprintf(mon->csv_loss_scale, "%lld,%.10g\n", (long long)s->global_samples,
                    s->loss_scale);
        for (int k = 0; k < ZT_TIMER_N; k++)
            if (mon->csv_timers[k])
                fprintf(mon->csv_timers[k], "%lld,%.4f\n", (long long)s->global_samples,
                        s->timers_ms[k]);
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

void zt_monitor_eval(const zt_monitor *mon, const zt_eval_point *e)
{
    if (mon->rank != 0)
        return;
    if (isfinite(e->accuracy))
        printf("[Rank 0] eval: step=%lld, val_loss=%.6f, val_accuracy=%.4f (%.2f s)\n",
               (long long)e->step, e->loss, e->accuracy, e->seconds);
    else
        printf("[Rank 0] eval: step=%lld, val_loss=%.6f (%.2f s)\n", (long long)e->step, e->loss,
               e->seconds);
    fflush(stdout);
}

/* JSON has no NaN or infinity: a diverged run reports null there. */
static json_t *monitor_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* What each rank contributes to the report, gathered to rank 0. */
typedef struct {
    char host[64];
    uint64_t mem[ZT_MEM_NLOC][ZT_MEM_NCLASS][4]; /* current, peak, avg, reserved */
    uint64_t comm_bytes[ZT_GROUP_N][ZT_COMM_NKINDS];
    uint64_t comm_calls[ZT_GROUP_N][ZT_COMM_NKINDS];
    int has_group[ZT_GROUP_N];
    uint64_t total[ZT_MEM_NLOC][2]; /* all classes at once: current, peak */
    int64_t gather_peak_live;
} monitor_rank_stats;

static json_t *monitor_kinds(const uint64_t *v)
{
    json_t *o = json_object();
    for (int k = 0; k < ZT_COMM_NKINDS; k++)
        json_object_set_new(o, zt_comm_kind_name((zt_comm_kind)k), json_integer((json_int_t)v[k]));
    return o;
}

static json_t *monitor_rank_json(int rank, const monitor_rank_stats *r)
{
    json_t *mem = json_object();
    for (int l = 0; l < ZT_MEM_NLOC; l++) {
        json_t *loc = json_object();
        for (int c = 0; c < ZT_MEM_NCLASS; c++)
            json_object_set_new(loc, zt_mem_class_name((zt_mem_class)c),
                                json_pack("{s:I, s:I, s:I, s:I}", "current",
                                      (json_int_t)r->mem[l][c][0], "peak",
                                      (json_int_t)r->mem[l][c][1], "avg",
                                      (json_int_t)r->mem[l][c][2], "reserved",
                                      (json_int_t)r->mem[l][c][3]));
        json_object_set_new(mem, zt_mem_loc_name((zt_mem_loc)l), loc);
    }
    json_t *mem_total = json_object();
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        json_object_set_new(mem_total, zt_mem_loc_name((zt_mem_loc)l),
                            json_pack("{s:I, s:I}", "current", (json_int_t)r->total[l][0], "peak",
                                      (json_int_t)r->total[l][1]));
    uint64_t total[ZT_COMM_NKINDS];
    memset(total, 0, sizeof total);
    for (int gi = 0; gi < ZT_GROUP_N; gi++)
        for (int k = 0; k < ZT_COMM_NKINDS; k++)
            total[k] += r->comm_bytes[gi][k];
    json_t *groups = json_object();
    static const char *const group_names[ZT_GROUP_N] = {"world", "hpz", "mics_shard",
                                                        "mics_replica"};
    for (int gi = 0; gi < ZT_GROUP_N; gi++)
        if (r->has_group[gi])
            json_object_set_new(groups, group_names[gi],
                            json_pack("{s:o, s:o}", "bytes", monitor_kinds(r->comm_bytes[gi]),
                                      "calls", monitor_kinds(r->comm_calls[gi])));
    return json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:I}", "rank", rank, "host", r->host,
                     "memory_bytes", mem, "memory_total_bytes", mem_total, "comm_bytes",
                     monitor_kinds(total), "comm", groups,
                     "gather_peak_live_params", (json_int_t)r->gather_peak_live);
}

zt_status zt_monitor_write_report(const char *path, const zt_report *r, const zt_world *w,
                                  zt_memory *mem, const zt_comm *const groups[ZT_GROUP_N])
{
    monitor_rank_stats mine;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.host, sizeof mine.host, "%s", w->host);
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        for (int c = 0; c < ZT_MEM_NCLASS; c++) {
            zt_mem_stats s = zt_arena_stats(zt_memory_arena(mem, (zt_mem_loc)l, (zt_mem_class)c));
            mine.mem[l][c][0] = s.current;
            mine.mem[l][c][1] = s.peak;
            mine.mem[l][c][2] = s.avg;
            mine.mem[l][c][3] = s.reserved;
        }
    for (int l = 0; l < ZT_MEM_NLOC; l++) {
        mine.total[l][0] = mem->total_current[l];
        mine.total[l][1] = mem->total_peak[l];
    }
    for (int gi = 0; gi < ZT_GROUP_N; gi++)
        if (groups[gi]) {
            mine.has_group[gi] = 1;
            memcpy(mine.comm_bytes[gi], groups[gi]->bytes, sizeof groups[gi]->bytes);
            memcpy(mine.comm_calls[gi], groups[gi]->calls, sizeof groups[gi]->calls);
        }
    mine.gather_peak_live = r->gather_peak_live_params;
    monitor_rank_stats *all = NULL;
    if (w->rank == 0) {
        all = calloc((size_t)w->size, sizeof *all);
        if (!all)
            return zt_world_agree(w, zt_fail(ZT_ERR_OOM, "", "cannot gather report"), NULL);
    }
    MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, w->comm);

    zt_status st = ZT_OK;
    if (w->rank == 0) {
        json_t *loss = json_array();
        for (int64_t i = 0; i < r->n_loss; i++)
            json_array_append_new(loss, monitor_real(r->loss_history[i]));
        json_t *ranks = json_array();
        for (int i = 0; i < w->size; i++)
            json_array_append_new(ranks, monitor_rank_json(i, &all[i]));
        json_t *doc = json_pack(
            "{s:s, s:{s:s, s:I}, s:i, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, "
            "s:o, s:o, s:o}",
            "zerotrain_version", ZT_VERSION, "model", "name", r->model_name, "params",
            (json_int_t)r->model_params, "world_size", w->size, "device", r->device, "stage",
            r->stage, "precision", r->precision, "train_batch_size",
            (json_int_t)r->train_batch_size, "micro_batch_size", (json_int_t)r->micro_batch_size,
            "gradient_accumulation_steps", (json_int_t)r->gradient_accumulation_steps, "steps",
            (json_int_t)r->steps, "skipped_steps", (json_int_t)r->skipped_steps, "loss_history",
            loss, "final_loss", monitor_real(r->n_loss > 0 ? r->loss_history[r->n_loss - 1] : NAN),
            "samples_per_sec", monitor_real(r->samples_per_sec), "param_norm",
            monitor_real(r->param_norm), "train_seconds", monitor_real(r->train_seconds), "ranks",
            ranks);
        const zt_zero_config *z = r->zero;
        json_t *zero = json_pack(
            "{s:i, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:b, s:b}", "stage", z->stage,
            "padded_params", (json_int_t)r->padded_params, "partition_params",
            (json_int_t)r->partition_params, "persistent_params",
            (json_int_t)r->persistent_params, "hpz_partition_size",
            (json_int_t)z->zero_hpz_partition_size, "mics_shard_size",
            (json_int_t)(z->mics_shard_size > 0 ? z->mics_shard_size : 0), "overlap_comm",
            z->overlap_comm,
            "reduce_bucket_size", (json_int_t)z->reduce_bucket_size, "allgather_bucket_size",
            (json_int_t)z->allgather_bucket_size, "reduce_scatter", z->reduce_scatter,
            "allgather_partitions", z->allgather_partitions);
        json_t *scales = json_null();
        if (r->scale_history) {
            scales = json_array();
            for (int64_t i = 0; i < r->n_loss; i++)
                json_array_append_new(scales, monitor_real(r->scale_history[i]));
        }
        json_t *extra = json_pack(
            "{s:o, s:{s:s, s:s}, s:{s:s, s:s}, s:{s:I, s:b}}", "loss_scale_history", scales,
            "mixed_precision", "grad_dtype", r->grad_dtype, "comm_dtype", r->comm_dtype,
            "offload", "optimizer", r->offload_optimizer, "param", r->offload_param,
            "activation_checkpointing", "interval", (json_int_t)r->checkpoint_interval,
            "cpu_checkpointing", r->cpu_checkpointing);
        json_t *evals = json_array();
        for (int64_t i = 0; i < r->n_evals; i++)
            json_array_append_new(evals, json_pack("{s:I, s:o, s:o}", "step",
                                                   (json_int_t)r->evals[i].step, "loss",
                                                   monitor_real(r->evals[i].loss), "accuracy",
                                                   monitor_real(r->evals[i].accuracy)));
        if (doc && extra) {
            json_object_set_new(doc, "zero", zero);
            json_object_set_new(doc, "eval", evals);
            json_object_update(doc, extra);
        } else {
            json_decref(zero);
            json_decref(evals);
        }
        json_decref(extra);
        if (!doc || json_dump_file(doc, path, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) != 0)
            st = zt_fail(ZT_ERR_IO, "check that the report's directory exists and is writable",
                         "cannot write report %s: %s", path, strerror(errno));
        json_decref(doc);
        free(all);
    }
    return zt_world_agree(w, st, NULL);
}
