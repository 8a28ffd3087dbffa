/*
 * config resolve: the batch triple. Command-line values fill missing or "auto"
 * fields, then DeepSpeed's derivation with the data-parallel size makes
 * train_batch_size = micro batch per rank * accumulation steps * data-parallel
 * size: the world size, or the world size / pipeline stages when pipelining
 * (DeepSpeed's pipeline engine takes it from its grid).
 * And the "auto" values that need the model or the run length, filled once
 * the caller knows them (zt_config_resolve_run), as HF's finalize does.
 */
#include "engine/config/config_impl.h"

#include <math.h>
#include <stdio.h>

typedef struct {
    const char *key;
    bool given, is_auto;
    int64_t v;
} zt_batch_field;

static zt_status zt_read_batch_field(const zt_ctx *c, json_t *root, zt_batch_field *f,
                                     int64_t cli)
{
    json_t *v = json_object_get(root, f->key);
    f->is_auto = zt_config_is_auto(v);
    if (v && !f->is_auto && !json_is_null(v)) {
        ZT_TRY(zt_config_read_int(c, f->key, v, -INFINITY, INFINITY, &f->v));
        f->given = true;
    }
    if (cli < 0)
        return ZT_OK;
    if (f->given && f->v != cli)
        return zt_config_err(c, ZT_ERR_CONFIG, f->key,
                             "drop one of them, or write \"auto\" in the config to take the "
                             "command-line value",
                             "%lld in the config contradicts %lld from the command line",
                             (long long)f->v, (long long)cli);
    if (!f->given) {
        zt_config_note(c->cfg, "%s %s -> %lld (command line)", f->key,
                       f->is_auto ? "\"auto\"" : "not in config", (long long)cli);
        f->is_auto = false; /* resolved: no "derived" note later */
    }
    f->v = cli;
    f->given = true;
    return ZT_OK;
}

static zt_status zt_batch_fail(const zt_ctx *c, const char *hint, const char *fmt, long long a)
{
    return zt_config_err(c, ZT_ERR_CONFIG, NULL, hint, fmt, a);
}

/* DeepSpeed's "<what>: N has to be greater than 0", from above. `how` says
 * how a derived value came about ("" for a given one). */
static zt_status zt_batch_check_max(const zt_ctx *c, const zt_batch_field *f, const char *what,
                                    int64_t max, int log2_max, const char *why,
                                    const char *how)
{
    if (f->v <= max)
        return ZT_OK;
    char hint[512];
    snprintf(hint, sizeof hint, "%s%s%s", why, how[0] ? "; " : "", how);
    return zt_config_err(c, ZT_ERR_CONFIG, f->key, hint,
                         "%s: %lld has to be at most %lld (2^%d)", what, (long long)f->v,
                         (long long)max, log2_max);
}

/* Each of the triple within its bound (config.h). */
static zt_status zt_batch_check_bounds(const zt_ctx *c, const zt_batch_field *tb,
                                       const zt_batch_field *mb, const zt_batch_field *gas,
                                       const char *how)
{
    ZT_TRY(zt_batch_check_max(c, mb, "Micro batch size per gpu", ZT_CONFIG_MAX_MICRO_BATCH, 24,
                              "each rank's micro-batch sizes its activation buffers: use "
                              "gradient_accumulation_steps for a larger batch",
                              how));
    ZT_TRY(zt_batch_check_max(c, gas, "Gradient accumulation steps", ZT_CONFIG_MAX_GAS, 24,
                              "every accumulation step is a forward and a backward in the "
                              "step's schedule: use a larger train_micro_batch_size_per_gpu",
                              how));
    return zt_batch_check_max(c, tb, "Train batch size", ZT_CONFIG_MAX_TRAIN_BATCH, 40,
                              "train_batch_size is the samples of one optimizer step", how);
}

/* ov.rescale_batch: a triple that does not work out for the data-parallel size keeps
 * the micro batch (the given one, else train_batch_size spread over the
 * ranks and accumulation steps, at least 1) and the accumulation steps (the
 * given ones, else 1), and makes train_batch_size their product with the
 * world size. */
static zt_status zt_config_rescale_batch(const zt_ctx *c, int64_t *tb, int64_t *mb,
                                         int64_t *gas, bool mb_given, bool gas_given)
{
    int64_t was = *tb, ws = c->cfg->pipeline.data_parallel;
    if (!gas_given || *gas <= 0)
        *gas = 1;
    if (!mb_given || *mb <= 0)
        *mb = *tb / *gas / ws > 0 ? *tb / *gas / ws : 1;
    if (__builtin_mul_overflow(*mb, *gas, tb) || __builtin_mul_overflow(*tb, ws, tb))
        return zt_config_err(c, ZT_ERR_CONFIG, NULL, "use smaller batch values",
                             "train_batch_size = %lld * %lld * %lld overflows", (long long)*mb,
                             (long long)*gas, (long long)ws);
    zt_config_note(c->cfg,
                   "train_batch_size %lld does not work out over %lld ranks: estimated with "
                   "%lld = micro %lld x gas %lld x %lld ranks (the plan depends on the micro "
                   "batch only)",
                   (long long)was, (long long)ws, (long long)*tb, (long long)*mb,
                   (long long)*gas, (long long)ws);
    return ZT_OK;
}

/* DeepSpeed's _set_batch_related_parameters + _batch_assertion, with the real
 * world size, after command-line values filled missing or "auto" fields. */
zt_status zt_config_resolve_batch(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    const zt_config_overrides *ov = &c->ov;
    zt_batch_field tb = {.key = "train_batch_size"};
    zt_batch_field mb = {.key = "train_micro_batch_size_per_gpu"};
    zt_batch_field gas = {.key = "gradient_accumulation_steps"};
    ZT_TRY(zt_read_batch_field(c, root, &tb, ov->train_batch_size));
    ZT_TRY(zt_read_batch_field(c, root, &mb, ov->micro_batch_size));
    ZT_TRY(zt_read_batch_field(c, root, &gas, ov->gradient_accumulation_steps));
    const int64_t ws = cfg->pipeline.data_parallel;
    char how[256] = "";

    /* Non-positive given values fail DeepSpeed's assertions; check them before
     * the derivation divides by them. */
    const char *tb_msg = "Train batch size: %lld has to be greater than 0";
    const char *mb_msg = "Micro batch size per gpu: %lld has to be greater than 0";
    const char *gas_msg = "Gradient accumulation steps: %lld has to be greater than 0";
    if (tb.given && tb.v <= 0)
        return zt_batch_fail(c, "train_batch_size must be positive", tb_msg, (long long)tb.v);
    if (mb.given && mb.v <= 0)
        return zt_batch_fail(c, "train_micro_batch_size_per_gpu must be positive", mb_msg,
                             (long long)mb.v);
    if (gas.given && gas.v <= 0)
        return zt_batch_fail(c, "gradient_accumulation_steps must be positive", gas_msg,
                             (long long)gas.v);
    /* Given values first: a derivation from them would only hide which one. */
    zt_batch_field none = {.key = ""};
    ZT_TRY(zt_batch_check_bounds(c, tb.given ? &tb : &none, mb.given ? &mb : &none,
                                 gas.given ? &gas : &none, ""));

    if (!tb.given && !mb.given) {
        if (!tb.is_auto && !mb.is_auto && !gas.is_auto)
            return zt_config_err(
                c, ZT_ERR_CONFIG, NULL,
                "set train_micro_batch_size_per_gpu or train_batch_size in the "
                "config or on the command line",
                "Either train_batch_size or train_micro_batch_size_per_gpu needs to "
                "be provided");
        mb.v = 32;
        mb.given = true;
        zt_config_note(cfg, "train_micro_batch_size_per_gpu %s -> 32 (default)",
                       mb.is_auto ? "\"auto\"" : "not in config");
        mb.is_auto = false;
        if (!gas.given) {
            gas.v = 1;
            gas.given = true;
            zt_config_note(cfg, "gradient_accumulation_steps %s -> 1 (default)",
                           gas.is_auto ? "\"auto\"" : "not in config");
            gas.is_auto = false;
        }
    }

    bool overflow = false;
    if (tb.given && mb.given && gas.given) {
        /* nothing to derive */
    } else if (tb.given && mb.given) {
        gas.v = tb.v / mb.v / ws;
        snprintf(how, sizeof how, "gradient_accumulation_steps = %lld // %lld // %lld = %lld",
                 (long long)tb.v, (long long)mb.v, (long long)ws, (long long)gas.v);
    } else if (tb.given && gas.given) {
        mb.v = tb.v / ws / gas.v;
        snprintf(how, sizeof how, "train_micro_batch_size_per_gpu = %lld // %lld // %lld = %lld",
                 (long long)tb.v, (long long)ws, (long long)gas.v, (long long)mb.v);
    } else if (mb.given && gas.given) {
        overflow = __builtin_mul_overflow(mb.v, gas.v, &tb.v) ||
                   __builtin_mul_overflow(tb.v, ws, &tb.v);
        snprintf(how, sizeof how, "train_batch_size = %lld * %lld * %lld = %lld",
                 (long long)mb.v, (long long)gas.v, (long long)ws, (long long)tb.v);
    } else if (tb.given) {
        gas.v = 1;
        mb.v = tb.v / ws;
        snprintf(how, sizeof how, "train_micro_batch_size_per_gpu = %lld // %lld = %lld",
                 (long long)tb.v, (long long)ws, (long long)mb.v);
    } else {
        overflow = __builtin_mul_overflow(mb.v, ws, &tb.v);
        gas.v = 1;
        snprintf(how, sizeof how, "train_batch_size = %lld * %lld = %lld", (long long)mb.v,
                 (long long)ws, (long long)tb.v);
    }
    if (overflow)
        return zt_config_err(c, ZT_ERR_CONFIG, NULL, "use smaller batch values",
                             "train_batch_size = %lld * %lld * %lld overflows", (long long)mb.v,
                             (long long)gas.v, (long long)ws);

    int64_t product;
    bool fits = mb.v > 0 && gas.v > 0 && !__builtin_mul_overflow(mb.v, gas.v, &product) &&
                !__builtin_mul_overflow(product, ws, &product) && product == tb.v;
    if (!fits && ov->rescale_batch)
        ZT_TRY(zt_config_rescale_batch(c, &tb.v, &mb.v, &gas.v, mb.given, gas.given));

    char hint[512];
    snprintf(hint, sizeof hint, "%s%strain_batch_size must equal train_micro_batch_size_per_gpu "
             "* gradient_accumulation_steps * %s (%lld ranks)",
             how, how[0] ? "; " : "",
             cfg->pipeline.stages > 1 ? "data-parallel size" : "world size", (long long)ws);
    if (mb.v <= 0)
        return zt_batch_fail(c, hint, mb_msg, (long long)mb.v);
    if (gas.v <= 0)
        return zt_batch_fail(c, hint, gas_msg, (long long)gas.v);
    ZT_TRY(zt_batch_check_bounds(c, &tb, &mb, &gas, how));
    if (__builtin_mul_overflow(mb.v, gas.v, &product) ||
        __builtin_mul_overflow(product, ws, &product) || product != tb.v)
        return zt_config_err(c, ZT_ERR_CONFIG, NULL, hint,
                             "Check batch related parameters. train_batch_size is not equal to "
                             "micro_batch_per_gpu * gradient_acc_step * world_size %lld != %lld * "
                             "%lld * %lld",
                             (long long)tb.v, (long long)mb.v, (long long)gas.v, (long long)ws);

    const zt_batch_field *fields[] = {&tb, &mb, &gas};
    for (size_t i = 0; i < ZT_LEN(fields); i++)
        if (fields[i]->is_auto)
            zt_config_note(cfg, "%s \"auto\" -> %lld (derived)", fields[i]->key,
                           (long long)fields[i]->v);
    cfg->train_batch_size = tb.v;
    cfg->micro_batch_size = mb.v;
    cfg->gradient_accumulation_steps = gas.v;
    return ZT_OK;
}

/* ------------------------------------------------------------------ "auto" from the run */

static const struct {
    unsigned bit;
    const char *path;
} zt_auto_paths[] = {
    {ZT_AUTO_REDUCE_BUCKET, "zero_optimization.reduce_bucket_size"},
    {ZT_AUTO_PREFETCH, "zero_optimization.stage3_prefetch_bucket_size"},
    {ZT_AUTO_PERSISTENCE, "zero_optimization.stage3_param_persistence_threshold"},
    {ZT_AUTO_TOTAL_STEPS, "scheduler.params.total_num_steps"},
    {ZT_AUTO_WARMUP_STEPS, "scheduler.params.warmup_num_steps"},
};

const char *zt_config_pending_auto(const zt_config *cfg)
{
    for (size_t i = 0; i < ZT_LEN(zt_auto_paths); i++)
        if (cfg->auto_pending & zt_auto_paths[i].bit)
            return zt_auto_paths[i].path;
    return NULL;
}

/* HF's finalize from the hidden size H (integrations/deepspeed.py). */
static void zt_resolve_hidden(zt_config *cfg, int64_t h)
{
    zt_zero_config *z = &cfg->zero;
    const bool stage3 = z->stage == 3;
    int64_t hh = h <= INT64_C(3037000499) ? h * h : INT64_MAX; /* sqrt(2^63) */
    if (cfg->auto_pending & ZT_AUTO_REDUCE_BUCKET) {
        z->reduce_bucket_size = hh;
        zt_config_note(cfg, "zero_optimization.reduce_bucket_size \"auto\" -> %lld (hidden size "
                            "%lld squared, as HF)",
                       (long long)hh, (long long)h);
    }
    if ((cfg->auto_pending & ZT_AUTO_PREFETCH) && z->stage3_allgather_sequential) {
        zt_config_note(cfg, "zero_optimization.stage3_prefetch_bucket_size \"auto\" -> 1 "
                            "(stage3_allgather_sequential)");
    } else if ((cfg->auto_pending & ZT_AUTO_PREFETCH) && stage3) {
        z->stage3_prefetch_bucket_size = (int64_t)(0.9 * (double)h * (double)h);
        zt_config_note(cfg, "zero_optimization.stage3_prefetch_bucket_size \"auto\" -> %lld "
                            "(int(0.9 x %lld^2), as HF)",
                       (long long)z->stage3_prefetch_bucket_size, (long long)h);
    } else if (cfg->auto_pending & ZT_AUTO_PREFETCH) {
        zt_config_note(cfg, "zero_optimization.stage3_prefetch_bucket_size \"auto\" -> %lld "
                            "(default: not stage 3)",
                       (long long)z->stage3_prefetch_bucket_size);
    }
    if ((cfg->auto_pending & ZT_AUTO_PERSISTENCE) && stage3) {
        z->stage3_param_persistence_threshold = 10 * h;
        zt_config_note(cfg, "zero_optimization.stage3_param_persistence_threshold \"auto\" -> "
                            "%lld (10 x hidden size %lld, as HF)",
                       (long long)z->stage3_param_persistence_threshold, (long long)h);
    } else if (cfg->auto_pending & ZT_AUTO_PERSISTENCE) {
        zt_config_note(cfg, "zero_optimization.stage3_param_persistence_threshold \"auto\" -> "
                            "%lld (default: not stage 3)",
                       (long long)z->stage3_param_persistence_threshold);
    }
    cfg->auto_pending &= ~(unsigned)(ZT_AUTO_REDUCE_BUCKET | ZT_AUTO_PREFETCH | ZT_AUTO_PERSISTENCE);
}

/* HF's finalize from the number of training steps (v5's warmup_steps rule). */
static void zt_resolve_steps(zt_config *cfg, int64_t total, double warmup)
{
    zt_sched_config *s = &cfg->scheduler;
    if (cfg->auto_pending & ZT_AUTO_TOTAL_STEPS) {
        s->total_num_steps = total;
        zt_config_note(cfg, "scheduler.params.total_num_steps \"auto\" -> %lld (the run's steps)",
                       (long long)total);
    }
    if (cfg->auto_pending & ZT_AUTO_WARMUP_STEPS) {
        if (warmup < 0) {
            s->warmup_num_steps = 0;
            zt_config_note(cfg, "scheduler.params.warmup_num_steps \"auto\" -> 0 (HF's default "
                                "warmup_steps; --warmup-steps sets it)");
        } else if (warmup >= 1) {
            s->warmup_num_steps = (int64_t)warmup;
            zt_config_note(cfg, "scheduler.params.warmup_num_steps \"auto\" -> %lld "
                                "(--warmup-steps)",
                           (long long)s->warmup_num_steps);
        } else {
            s->warmup_num_steps = (int64_t)ceil((double)total * warmup);
            zt_config_note(cfg, "scheduler.params.warmup_num_steps \"auto\" -> %lld "
                                "(ceil(%lld steps x --warmup-steps %g))",
                           (long long)s->warmup_num_steps, (long long)total, warmup);
        }
    }
    if (cfg->auto_pending & (ZT_AUTO_TOTAL_STEPS | ZT_AUTO_WARMUP_STEPS))
        zt_config_warn_warmup(cfg);
    cfg->auto_pending &= ~(unsigned)(ZT_AUTO_TOTAL_STEPS | ZT_AUTO_WARMUP_STEPS);
}

zt_status zt_config_resolve_run(zt_config *cfg, const zt_config_run *run, const char *name)
{
    name = name ? name : "config";
    const unsigned hidden_bits = ZT_AUTO_REDUCE_BUCKET | ZT_AUTO_PREFETCH | ZT_AUTO_PERSISTENCE;
    if ((cfg->auto_pending & hidden_bits) && run->hidden_size <= 0) {
        zt_config_errors errs = {0};
        for (size_t i = 0; i < ZT_LEN(zt_auto_paths); i++)
            if (cfg->auto_pending & hidden_bits & zt_auto_paths[i].bit)
                zt_config_errors_take(
                    &errs,
                    zt_fail(ZT_ERR_CONFIG, "give the value in the config",
                            "%s: %s \"auto\" needs the model's hidden size, which is unknown "
                            "(HF: \"The model's config file has neither `hidden_size` nor "
                            "`hidden_sizes` entry\")",
                            name, zt_auto_paths[i].path),
                    errs.n);
        return zt_config_errors_report(&errs, name);
    }
    if (cfg->auto_pending & hidden_bits)
        zt_resolve_hidden(cfg, run->hidden_size);
    if (run->total_steps >= 0)
        zt_resolve_steps(cfg, run->total_steps, run->warmup_steps);
    return ZT_OK;
}
