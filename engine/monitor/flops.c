/*
 * flops: DeepSpeed's flops profiler from the models' analytic costs and the
 * trainer's per-unit timings (engine/monitor/flops.h).
 */
#include "engine/monitor/flops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/path.h"

void zt_flops_number(double v, const char *unit, bool params, char *buf, size_t n)
{
    static const struct {
        double scale;
        const char *prefix;
    } steps[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}, {1, ""}, {1e-3, "m"},
                 {1e-6, "u"}};
    double a = v < 0 ? -v : v;
    size_t i = 0;
    while (i + 1 < sizeof steps / sizeof steps[0] && a < steps[i].scale)
        i++;
    if (a == 0)
        i = 4;
    const char *prefix = params && steps[i].scale == 1e9 ? "B" : steps[i].prefix;
    snprintf(buf, n, "%.2f %s%s", v / steps[i].scale, prefix, unit);
}

void zt_flops_duration(double ms, char *buf, size_t n)
{
    if (ms >= 1000)
        snprintf(buf, n, "%.2f s", ms / 1000);
    else if (ms >= 1)
        snprintf(buf, n, "%.2f ms", ms);
    else
        snprintf(buf, n, "%.2f us", ms * 1000);
}

zt_status zt_flops_init(zt_flops_prof *fp, const zt_config *cfg, zt_trainer *t, int rank)
{
    memset(fp, 0, sizeof *fp);
    const zt_flops_profiler_config *c = &cfg->flops_profiler;
    if (rank != 0 || !c->enabled)
        return ZT_OK;
    if (c->output_file[0])
        ZT_TRY(zt_path_check_output(c->output_file, "flops profile",
                                    "give flops_profiler.output_file a path in an existing "
                                    "directory you can write to"));
    zt_trainer_stats s;
    zt_trainer_stats_get(t, &s);
    fp->cfg = cfg;
    /* With pipelining rank 0 runs stage 0's units only: its profile is that
     * stage's, as DeepSpeed's is of the stage's PipelineModule part. */
    fp->model = s.pipe->stages > 1 ? &s.pipe->stage_model : s.model;
    fp->world_size = s.world->size;
    fp->dp_size = s.pipe->dp_size;
    fp->prof = calloc((size_t)s.model->n_units, sizeof *fp->prof);
    if (!fp->prof)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the flops profile");
    fp->on = true;
    zt_trainer_profile_step(t, c->profile_step, fp->prof);
    return ZT_OK;
}

void zt_flops_free(zt_flops_prof *fp, zt_trainer *t)
{
    if (fp->on && t)
        zt_trainer_profile_step(t, -1, NULL);
    free(fp->prof);
    memset(fp, 0, sizeof *fp);
}

/* A unit's kind: its name up to the first '.' ("h.3" -> "h"). */
static void flops_kind(const char *name, char *buf, size_t n)
{
    size_t len = strcspn(name, ".");
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), name);
}

typedef struct {
    char name[32];
    double params, macs, ms;
} flops_group;

static int by_params(const void *a, const void *b)
{
    double d = ((const flops_group *)b)->params - ((const flops_group *)a)->params;
    return (d > 0) - (d < 0);
}
static int by_macs(const void *a, const void *b)
{
    double d = ((const flops_group *)b)->macs - ((const flops_group *)a)->macs;
    return (d > 0) - (d < 0);
}
static int by_ms(const void *a, const void *b)
{
    double d = ((const flops_group *)b)->ms - ((const flops_group *)a)->ms;
    return (d > 0) - (d < 0);
}

/* "{'a': '1.2 M', 'b': '3.4 K'}" of the top k groups by one measure. */
static void flops_top(FILE *out, const char *label, flops_group *g, int n, int64_t k,
                      int (*cmp)(const void *, const void *), int what)
{
    qsort(g, (size_t)n, sizeof *g, cmp);
    fprintf(out, "    %-11s - {", label);
    for (int i = 0; i < n && i < k; i++) {
        char v[48];
        if (what == 0)
            zt_flops_number(g[i].params, "", true, v, sizeof v);
        else if (what == 1)
            zt_flops_number(g[i].macs, "MACs", false, v, sizeof v);
        else
            zt_flops_duration(g[i].ms, v, sizeof v);
        fprintf(out, "%s'%s': '%s'", i ? ", " : "", g[i].name, v);
    }
    fprintf(out, "}\n");
}

void zt_flops_print(const zt_flops_prof *fp, const zt_step_info *s, FILE *out)
{
    const zt_config *cfg = fp->cfg;
    const zt_model *m = fp->model;
    const double gas = (double)cfg->gradient_accumulation_steps;
    double macs = 0, flops = 0, fwd = 0, bwd = 0;
    for (int u = 0; u < m->n_units; u++) {
        macs += (double)fp->prof[u].fwd_macs / gas;
        flops += (double)fp->prof[u].fwd_flops / gas;
        fwd += fp->prof[u].fwd_ms / gas;
        bwd += fp->prof[u].bwd_ms / gas;
    }
    const double bwd_factor = 2.0 + cfg->flops_profiler.recompute_fwd_factor;
    const double step_ms = s->timers_ms[ZT_TIMER_STEP];
    const double iter = fwd + bwd + step_ms;
    char a[48], b[96];
    fprintf(out, "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n");
    fprintf(out, "Profile Summary at step %lld:\n", (long long)cfg->flops_profiler.profile_step);
    fprintf(out, "Notations:\n"
                 "data parallel size (dp_size), model parallel size(mp_size),\n"
                 "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
                 "number of floating-point operations (flops), floating-point operations per "
                 "second (FLOPS),\n"
                 "fwd latency (forward propagation latency), bwd latency (backward propagation "
                 "latency),\n"
                 "step (weights update latency), iter latency (sum of fwd, bwd and step "
                 "latency)\n\n");
#define ROW(label, ...)                                 \
    do {                                                \
        char v_[64];                                    \
        snprintf(v_, sizeof v_, __VA_ARGS__);           \
        fprintf(out, "%-70s  %-8s\n", label ":", v_);   \
    } while (0)
    ROW("world size", "%d", fp->world_size);
    ROW("data parallel size", "%d", fp->dp_size);
    ROW("model parallel size", "%d", 1);
    ROW("batch size per GPU", "%lld", (long long)cfg->micro_batch_size);
    zt_flops_number((double)m->n_params, "", true, a, sizeof a);
    ROW("params per GPU", "%s", a);
    ROW("params of model = params per GPU * mp_size", "%s", a);
    zt_flops_number(macs, "MACs", false, a, sizeof a);
    ROW("fwd MACs per GPU", "%s", a);
    zt_flops_number(flops, "", false, a, sizeof a);
    ROW("fwd flops per GPU", "%s", a);
    ROW("fwd flops of model = fwd flops per GPU * mp_size", "%s", a);
    zt_flops_duration(fwd, a, sizeof a);
    ROW("fwd latency", "%s", a);
    zt_flops_number(fwd > 0 ? flops / (fwd / 1e3) : 0, "FLOPS", false, a, sizeof a);
    ROW("fwd FLOPS per GPU = fwd flops per GPU / fwd latency", "%s", a);
    zt_flops_duration(bwd, a, sizeof a);
    ROW("bwd latency", "%s", a);
    zt_flops_number(bwd > 0 ? bwd_factor * flops / (bwd / 1e3) : 0, "FLOPS", false, a, sizeof a);
    snprintf(b, sizeof b, "bwd FLOPS per GPU = %g * fwd flops per GPU / bwd latency", bwd_factor);
    fprintf(out, "%-70s  %-8s\n", strcat(b, ":"), a);
    zt_flops_number(fwd + bwd > 0 ? (1 + bwd_factor) * flops / ((fwd + bwd) / 1e3) : 0, "FLOPS",
                    false, a, sizeof a);
    snprintf(b, sizeof b, "fwd+bwd FLOPS per GPU = %g * fwd flops per GPU / (fwd+bwd latency)",
             1 + bwd_factor);
    fprintf(out, "%-70s  %-8s\n", strcat(b, ":"), a);
    zt_flops_duration(step_ms, a, sizeof a);
    ROW("step latency", "%s", a);
    zt_flops_duration(iter, a, sizeof a);
    ROW("iter latency", "%s", a);
    ROW("samples/second", "%.2f", iter > 0 ? (double)cfg->micro_batch_size / (iter / 1e3) : 0);
#undef ROW

    /* Depth 0: the model; depth 1: the units by kind. */
    int64_t depth = cfg->flops_profiler.module_depth;
    int64_t k = cfg->flops_profiler.top_modules;
    flops_group *groups = calloc((size_t)m->n_units + 1, sizeof *groups);
    if (!groups)
        return;
    fprintf(out, "\n----------------------------- Aggregated Profile per GPU "
                 "-----------------------------\n");
    fprintf(out, "Top %lld modules in terms of params, MACs or fwd latency at different model "
                 "depths:\n",
            (long long)k);
    for (int d = 0; d < 2 && (depth < 0 || d < depth); d++) {
        int n = 0;
        if (d == 0) {
            groups[0] = (flops_group){.params = (double)m->n_params, .macs = macs, .ms = fwd};
            snprintf(groups[0].name, sizeof groups[0].name, "%s", m->name);
            n = 1;
        } else {
            for (int u = 0; u < m->n_units; u++) {
                char kind[32];
                flops_kind(m->units[u].name, kind, sizeof kind);
                int g = 0;
                while (g < n && strcmp(groups[g].name, kind) != 0)
                    g++;
                if (g == n) {
                    memset(&groups[n], 0, sizeof groups[n]);
                    snprintf(groups[n++].name, sizeof groups[0].name, "%s", kind);
                }
                groups[g].params += (double)m->units[u].param_numel;
                groups[g].macs += (double)fp->prof[u].fwd_macs / gas;
                groups[g].ms += fp->prof[u].fwd_ms / gas;
            }
        }
        fprintf(out, "depth %d:\n", d);
        flops_top(out, "params", groups, n, k, by_params, 0);
        flops_top(out, "MACs", groups, n, k, by_macs, 1);
        flops_top(out, "fwd latency", groups, n, k, by_ms, 2);
    }
    free(groups);

    if (cfg->flops_profiler.detailed) {
        fprintf(out, "\n------------------------------ Detailed Profile per GPU "
                     "------------------------------\n");
        fprintf(out, "Each module profile is listed after its name in the following order:\n"
                     "params, percentage of total params, MACs, percentage of total MACs, fwd "
                     "latency, percentage of total fwd latency, fwd FLOPS, bwd latency\n\n");
        char p[48], mc[48], ms[48], fl[48], bl[48];
        zt_flops_number((double)m->n_params, "", true, p, sizeof p);
        zt_flops_number(macs, "MACs", false, mc, sizeof mc);
        zt_flops_duration(fwd, ms, sizeof ms);
        zt_flops_number(fwd > 0 ? flops / (fwd / 1e3) : 0, "FLOPS", false, fl, sizeof fl);
        zt_flops_duration(bwd, bl, sizeof bl);
        fprintf(out, "%s(\n  %s, 100.00%% Params, %s, 100.00%% MACs, %s, 100.00%% latency, %s, "
                     "%s,\n",
                m->name, p, mc, ms, fl, bl);
        for (int u = 0; u < m->n_units; u++) {
            const zt_unit_profile *up = &fp->prof[u];
            double umacs = (double)up->fwd_macs / gas, uflops = (double)up->fwd_flops / gas;
            double ufwd = up->fwd_ms / gas, ubwd = up->bwd_ms / gas;
            char kind[32];
            flops_kind(m->units[u].name, kind, sizeof kind);
            zt_flops_number((double)m->units[u].param_numel, "", true, p, sizeof p);
            zt_flops_number(umacs, "MACs", false, mc, sizeof mc);
            zt_flops_duration(ufwd, ms, sizeof ms);
            zt_flops_number(ufwd > 0 ? uflops / (ufwd / 1e3) : 0, "FLOPS", false, fl, sizeof fl);
            zt_flops_duration(ubwd, bl, sizeof bl);
            fprintf(out, "  (%s): %s(%s, %.2f%% Params, %s, %.2f%% MACs, %s, %.2f%% latency, %s, "
                         "%s)\n",
                    m->units[u].name, kind, p,
                    m->n_params > 0 ? 100.0 * (double)m->units[u].param_numel /
                                          (double)m->n_params
                                    : 0.0,
                    mc, macs > 0 ? 100.0 * umacs / macs : 0.0, ms,
                    fwd > 0 ? 100.0 * ufwd / fwd : 0.0, fl, bl);
        }
        fprintf(out, ")\n");
    }
    fprintf(out, "------------------------------------------------------------------------------\n");
    fflush(out);
}

void zt_flops_step(zt_flops_prof *fp, const zt_step_info *s)
{
    /* global_steps >= 1, and profile_step may be 2^63 - 1. */
    if (!fp->on || fp->done || s->global_steps - 1 != fp->cfg->flops_profiler.profile_step)
        return;
    fp->done = true;
    const char *path = fp->cfg->flops_profiler.output_file;
    FILE *out = path[0] ? fopen(path, "w") : stdout;
    if (!out) {
        fprintf(stderr, "zerotrain: warning: cannot write the flops profile to %s: %s\n", path,
                strerror(errno));
        return;
    }
    zt_flops_print(fp, s, out);
    if (out != stdout) {
        fclose(out);
        printf("zerotrain: flops profile of step %lld written to %s\n",
               (long long)fp->cfg->flops_profiler.profile_step, path);
        fflush(stdout);
    }
}
