/*
 * config resolve: the batch triple. Command-line values fill missing or "auto"
 * fields, then DeepSpeed's derivation with the real world size makes
 * train_batch_size = micro batch per rank * accumulation steps * world size.
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
    const int64_t ws = c->world_size;
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
    } else if (tb.given) {
        gas.v = 1;
        mb.v = tb.v / ws;
        snprintf(how, sizeof how, "train_micro_batch_size_per_gpu = %lld // %lld = %lld",
                 (long long)tb.v, (long long)ws, (long long)mb.v);
    } else {
        overflow = __builtin_mul_overflow(mb.v, ws, &tb.v);
        gas.v = 1;
    }
    if (overflow)
        return zt_config_err(c, ZT_ERR_CONFIG, NULL, "use smaller batch values",
                             "train_batch_size = %lld * %lld * %lld overflows", (long long)mb.v,
                             (long long)gas.v, (long long)ws);

    char hint[512];
    snprintf(hint, sizeof hint, "%s%strain_batch_size must equal train_micro_batch_size_per_gpu "
             "* gradient_accumulation_steps * world size (%lld ranks)",
             how, how[0] ? "; " : "", (long long)ws);
    if (mb.v <= 0)
        return zt_batch_fail(c, hint, mb_msg, (long long)mb.v);
    if (gas.v <= 0)
        return zt_batch_fail(c, hint, gas_msg, (long long)gas.v);
    int64_t product;
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
