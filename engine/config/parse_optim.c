/*
 * config parse_optim: the optimizer section (Adam / AdamW, SGD, the lr from the
 * command line, the other optimizers DeepSpeed and torch name) and the
 * scheduler section (DeepSpeed's five schedulers and their required params).
 */
#include "engine/config/config_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "engine/spell.h"

/* ------------------------------------------------------------------ optimizer */

static bool zt_in_list(const char *s, const char *const *list, size_t n, bool nocase)
{
    for (size_t i = 0; i < n; i++)
        if (nocase ? strcasecmp(s, list[i]) == 0 : strcmp(s, list[i]) == 0)
            return true;
    return false;
}

/* lr: the config value, else the command line, else the default. */
static zt_status zt_parse_lr(const zt_ctx *c, json_t *params, double def, bool note_default,
                             double *lr)
{
    const char *path = "optimizer.params.lr";
    const zt_config_overrides *ov = &c->ov;
    json_t *v = params ? json_object_get(params, "lr") : NULL;
    bool is_auto = zt_config_is_auto(v);
    if (v && !is_auto) {
        ZT_TRY(zt_config_read_real(c, path, v, 0, INFINITY, false, lr));
        if (ov->lr >= 0 && ov->lr != *lr)
            return zt_config_err(c, ZT_ERR_CONFIG, path,
                                 "drop one of them, or write \"lr\": \"auto\" to take the "
                                 "command-line value",
                                 "%.10g in the config contradicts %.10g from the command line", *lr,
                                 ov->lr);
        return ZT_OK;
    }
    const char *how = is_auto ? "\"auto\"" : "not in config";
    if (ov->lr >= 0) {
        *lr = ov->lr;
        zt_config_note(c->cfg, "%s %s -> %g (command line)", path, how, *lr);
    } else {
        *lr = def;
        if (is_auto || note_default)
            zt_config_note(c->cfg, "%s %s -> %g (default)", path, how, *lr);
    }
    return ZT_OK;
}

static zt_status zt_refuse_max_grad_norm(const zt_ctx *c, json_t *params)
{
    if (!params || !json_object_get(params, "max_grad_norm"))
        return ZT_OK;
    return zt_config_err(
        c, ZT_ERR_CONFIG, "optimizer.params.max_grad_norm",
        "use the top-level \"gradient_clipping\": <max norm>",
        "max_grad_norm is not supported as an optimizer parameter; DeepSpeed clips "
        "with the top-level gradient_clipping");
}

static zt_status zt_parse_adam(const zt_ctx *c, json_t *params, bool is_adamw)
{
    zt_optim_config *o = &c->cfg->optimizer;
    const char *pp = "optimizer.params";
    if (params)
        ZT_TRY(zt_config_parse_keys(c, params, pp, zt_config_adam_keys, zt_config_n_adam_keys, o));
    ZT_TRY(zt_refuse_max_grad_norm(c, params));
    ZT_TRY(zt_parse_lr(c, params, 1e-3, false, &o->lr));

    json_t *v = params ? json_object_get(params, "betas") : NULL;
    if (zt_config_is_auto(v)) {
        zt_config_note(c->cfg, "optimizer.params.betas \"auto\" -> [%g, %g] (default)", o->beta1,
                       o->beta2);
    } else if (v && !json_is_null(v)) {
        const char *bp = "optimizer.params.betas";
        const char *expected = "[beta1, beta2], each in [0, 1)";
        if (!json_is_array(v) || json_array_size(v) != 2)
            return zt_config_bad_value(c, bp, v, expected);
        double b[2];
        for (size_t i = 0; i < 2; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_number(e) || !(json_number_value(e) >= 0 && json_number_value(e) < 1))
                return zt_config_bad_value(c, bp, v, expected);
            b[i] = json_number_value(e);
        }
        o->beta1 = b[0];
        o->beta2 = b[1];
    }
    bool flag = false;
    if ((v = zt_config_value(c, params, pp, "amsgrad")))
        ZT_TRY(zt_config_read_bool(c, "optimizer.params.amsgrad", v, &flag));
    if (flag)
        return zt_config_err(c, ZT_ERR_CONFIG, "optimizer.params.amsgrad", "remove amsgrad",
                             "FusedAdam does not support the AMSGrad variant.");
    flag = false;
    if ((v = zt_config_value(c, params, pp, "torch_adam")))
        ZT_TRY(zt_config_read_bool(c, "optimizer.params.torch_adam", v, &flag));
    if (flag)
        zt_config_note(c->cfg,
                       "optimizer.params.torch_adam: zerotrain always runs its own fused Adam "
                       "(same equations as torch's)");

    /* DeepSpeed: AdamW when the type says so, else adam_w_mode (default true). */
    if (is_adamw)
        o->adam_w_mode = true;
    o->type = is_adamw ? ZT_OPTIM_ADAMW : ZT_OPTIM_ADAM;
    return ZT_OK;
}

static zt_status zt_parse_sgd(const zt_ctx *c, json_t *params)
{
    zt_config *cfg = c->cfg;
    zt_optim_config *o = &cfg->optimizer;
    const char *pp = "optimizer.params";
    o->type = ZT_OPTIM_SGD;
    if (params)
        ZT_TRY(zt_config_parse_keys(c, params, pp, zt_config_sgd_keys, zt_config_n_sgd_keys, o));
    ZT_TRY(zt_refuse_max_grad_norm(c, params));
    /* torch >= 2.2 gives SGD a default lr of 1e-3; it used to be required. */
    ZT_TRY(zt_parse_lr(c, params, 1e-3, true, &o->lr));

    bool maximize = false;
    json_t *v = zt_config_value(c, params, pp, "maximize");
    if (v)
        ZT_TRY(zt_config_read_bool(c, "optimizer.params.maximize", v, &maximize));
    if (maximize)
        return zt_config_err(c, ZT_ERR_UNSUPPORTED, "optimizer.params.maximize", "remove maximize",
                             "SGD with maximize is not implemented yet");
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
        return zt_config_err(c, ZT_ERR_CONFIG, "optimizer.params.nesterov",
                             "set momentum > 0 and dampening 0, or nesterov false",
                             "Nesterov momentum requires a momentum and zero dampening");

    if (cfg->zero.stage > 0) {
        if (!cfg->zero_allow_untested_optimizer)
            return zt_config_err(
                c, ZT_ERR_CONFIG, "optimizer.type",
                "add \"zero_allow_untested_optimizer\": true, or use Adam/AdamW",
                "You are using an untested ZeRO Optimizer. Please add "
                "<\"zero_allow_untested_optimizer\": true> in the configuration file "
                "to use it.");
        zt_config_note(cfg,
                       "You are using ZeRO with an untested optimizer (SGD), proceed with caution");
    }
    return ZT_OK;
}

zt_status zt_config_parse_optimizer(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    zt_optim_config *o = &cfg->optimizer;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "optimizer", &obj));
    if (!obj) {
        o->type = ZT_OPTIM_ADAMW;
        o->from_default = true;
        o->lr = c->ov.lr >= 0 ? c->ov.lr : 1e-3;
        zt_config_note(cfg, "no optimizer in config: using AdamW lr=%g%s", o->lr,
                       c->ov.lr >= 0 ? " (command line)" : "");
        return ZT_OK;
    }
    ZT_TRY(zt_config_parse_keys(c, obj, "optimizer", zt_config_optimizer_keys,
                                zt_config_n_optimizer_keys, NULL));
    json_t *t = json_object_get(obj, "type");
    if (!t)
        return zt_config_err(c, ZT_ERR_CONFIG, "optimizer", "e.g. \"type\": \"AdamW\"",
                             "\"type\" is missing");
    if (!json_is_string(t))
        return zt_config_bad_value(c, "optimizer.type", t, "an optimizer name such as \"AdamW\"");
    const char *name = json_string_value(t);
    json_t *params;
    ZT_TRY(zt_config_section(c, obj, "optimizer", "params", &params));

    if (strcasecmp(name, "adam") == 0 || strcasecmp(name, "adamw") == 0)
        return zt_parse_adam(c, params, strcasecmp(name, "adamw") == 0);
    const char *hint = "zerotrain implements Adam, AdamW and SGD";
    if (zt_in_list(name, zt_config_ds_optimizers, zt_config_n_ds_optimizers, true)) {
        static const struct {
            const char *name, *msg;
        } no_zero[] = {
            {"onebitadam", "1-bit Adam is not compatible with ZeRO"},
            {"zerooneadam", "0/1 Adam is not compatible with ZeRO"},
            {"onebitlamb", "1bit-Lamb is not compatible with ZeRO"},
        };
        for (size_t i = 0; i < ZT_LEN(no_zero); i++)
            if (cfg->zero.stage > 0 && strcasecmp(name, no_zero[i].name) == 0)
                return zt_config_err(c, ZT_ERR_CONFIG, "optimizer.type",
                                     "use ZeRO stage 0 with this optimizer, or Adam/AdamW",
                                     "%s", no_zero[i].msg);
        return zt_config_err(c, ZT_ERR_UNSUPPORTED, "optimizer.type", hint,
                             "optimizer %s is not implemented yet", name);
    }
    if (strcmp(name, "SGD") == 0)
        return zt_parse_sgd(c, params);
    if (zt_in_list(name, zt_config_torch_optimizers, zt_config_n_torch_optimizers, false))
        return zt_config_err(c, ZT_ERR_UNSUPPORTED, "optimizer.type", hint,
                             "torch optimizer %s is not implemented yet", name);

    const char *cands[] = {"Adam", "AdamW", "SGD", "Lamb", "OneBitAdam", "ZeroOneAdam",
                           "OneBitLamb", "Adagrad", "Lion", "Muon"};
    const char *close = zt_spell_closest(name, cands, ZT_LEN(cands));
    char suggestion[64] = "";
    if (close)
        snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", close);
    return zt_config_err(c, ZT_ERR_CONFIG, "optimizer.type",
                         "torch.optim names are case-sensitive (\"SGD\"); DeepSpeed's own are not",
                         "%s is not a supported DeepSpeed Optimizer%s", name, suggestion);
}

/* ------------------------------------------------------------------ scheduler */

void zt_config_warn_warmup(zt_config *cfg)
{
    const zt_sched_config *s = &cfg->scheduler;
    bool has_total = s->type == ZT_SCHED_WARMUP_DECAY_LR || s->type == ZT_SCHED_WARMUP_COSINE_LR;
    /* DeepSpeed compares with the warmup it runs, max(2, warmup_num_steps),
     * and prints the one it was given. */
    int64_t warmup = s->warmup_num_steps > 2 ? s->warmup_num_steps : 2;
    if (has_total && s->total_num_steps < warmup)
        zt_config_warn(cfg, "total_num_steps %lld is less than warmup_num_steps %lld",
                       (long long)s->total_num_steps, (long long)s->warmup_num_steps);
}

static zt_status zt_required_param(const zt_ctx *c, json_t *params, const char *key,
                                   const char *sched, json_t **out)
{
    json_t *v = params ? json_object_get(params, key) : NULL;
    *out = v;
    if (v && !json_is_null(v) && !zt_config_is_auto(v))
        return ZT_OK;
    char hint[128];
    snprintf(hint, sizeof hint, "add \"%s\" to scheduler.params%s", key,
             strcmp(key, "total_num_steps") == 0 ? " (\"auto\" takes the run's length)" : "");
    return zt_config_err(c, ZT_ERR_CONFIG, params ? "scheduler.params" : "scheduler", hint,
                         "%s is required by %s%s", key, sched,
                         zt_config_is_auto(v) ? " (\"auto\" cannot be resolved: it has no default)"
                                              : "");
}

static zt_status zt_parse_sched_params(const zt_ctx *c, json_t *params, const zt_sched_entry *e)
{
    zt_config *cfg = c->cfg;
    zt_sched_config *s = &cfg->scheduler;
    const char *pp = "scheduler.params";
    json_t *v;

    if ((v = zt_config_value(c, params, pp, "last_batch_iteration"))) {
        int64_t it;
        ZT_TRY(zt_config_read_int(c, "scheduler.params.last_batch_iteration", v, -INFINITY,
                                  INFINITY, &it));
        if (it != -1)
            return zt_config_err(c, ZT_ERR_UNSUPPORTED, "scheduler.params.last_batch_iteration",
                                 "resume the schedule from a checkpoint instead",
                                 "starting a schedule at iteration %lld is not implemented yet",
                                 (long long)it);
    }
    if ((v = zt_config_value(c, params, pp, "warmup_type"))) {
        if (!json_is_string(v))
            return zt_config_bad_value(c, "scheduler.params.warmup_type", v,
                                       "\"log\" or \"linear\"");
        const char *wt = json_string_value(v);
        if (strcmp(wt, "linear") == 0) {
            s->warmup_type = ZT_WARMUP_LINEAR;
        } else if (strcmp(wt, "log") != 0) {
            zt_config_note(cfg,
                           "Using unknown warmup_type: %.64s. The increasing function is set to "
                           "default (log)", wt);
        }
    }
    v = params ? json_object_get(params, "warmup_max_lr") : NULL;
    if (zt_config_is_auto(v)) {
        /* HF Transformers resolves it to the learning rate. */
        s->warmup_max_lr = -1.0;
        zt_config_note(cfg, "scheduler.params.warmup_max_lr \"auto\" -> the optimizer lr");
    } else if (v && !json_is_null(v)) {
        ZT_TRY(zt_config_read_real(c, "scheduler.params.warmup_max_lr", v, 0, INFINITY, false,
                                   &s->warmup_max_lr));
    }
    if (zt_config_find_key(e->keys, e->n_keys, "total_num_steps")) {
        v = params ? json_object_get(params, "total_num_steps") : NULL;
        if (zt_config_is_auto(v)) {
            /* HF: the run's number of training steps (zt_config_resolve_run). */
            cfg->auto_pending |= ZT_AUTO_TOTAL_STEPS;
        } else {
            ZT_TRY(zt_required_param(c, params, "total_num_steps", e->name, &v));
            ZT_TRY(zt_config_read_int(c, "scheduler.params.total_num_steps", v, 0, INFINITY,
                                      &s->total_num_steps));
            if (!(cfg->auto_pending & ZT_AUTO_WARMUP_STEPS))
                zt_config_warn_warmup(cfg);
        }
    }
    if (e->type == ZT_SCHED_ONE_CYCLE) {
        ZT_TRY(zt_required_param(c, params, "cycle_min_lr", e->name, &v));
        ZT_TRY(zt_config_read_real(c, "scheduler.params.cycle_min_lr", v, 0, INFINITY, false,
                                   &s->cycle_min_lr));
        ZT_TRY(zt_required_param(c, params, "cycle_max_lr", e->name, &v));
        ZT_TRY(zt_config_read_real(c, "scheduler.params.cycle_max_lr", v, 0, INFINITY, false,
                                   &s->cycle_max_lr));
        /* DeepSpeed's None: the second half mirrors the first. */
        if (zt_config_unset(params, "cycle_second_step_size"))
            s->cycle_second_step_size = s->cycle_first_step_size;
        if (zt_config_unset(params, "cycle_second_stair_count"))
            s->cycle_second_stair_count = s->cycle_first_stair_count;
        if (s->cycle_momentum && cfg->optimizer.type == ZT_OPTIM_SGD) {
            zt_config_note(cfg, "cycle_momentum is disabled because optimizer SGD does not support "
                                "momentum, no betas attribute in defaults");
            s->cycle_momentum = false;
        }
    }
    return ZT_OK;
}

zt_status zt_config_parse_scheduler(const zt_ctx *c, json_t *root)
{
    zt_sched_config *s = &c->cfg->scheduler;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "scheduler", &obj));
    if (!obj)
        return ZT_OK;
    ZT_TRY(zt_config_parse_keys(c, obj, "scheduler", zt_config_scheduler_keys,
                                zt_config_n_scheduler_keys, NULL));
    json_t *t = json_object_get(obj, "type");
    if (!t)
        return zt_config_err(c, ZT_ERR_CONFIG, "scheduler", "e.g. \"type\": \"WarmupLR\"",
                             "\"type\" is missing");
    if (!json_is_string(t))
        return zt_config_bad_value(c, "scheduler.type", t, "a scheduler name such as \"WarmupLR\"");
    const char *name = json_string_value(t);

    const zt_sched_entry *e = NULL;
    const char *names[ZT_CONFIG_N_SCHEDULERS];
    for (size_t i = 0; i < ZT_CONFIG_N_SCHEDULERS; i++) {
        names[i] = zt_config_schedulers[i].name;
        if (strcmp(name, zt_config_schedulers[i].name) == 0)
            e = &zt_config_schedulers[i];
    }
    const char *hint = "zerotrain implements WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle "
                       "and LRRangeTest";
    if (!e && zt_in_list(name, zt_config_torch_schedulers, zt_config_n_torch_schedulers, false))
        return zt_config_err(c, ZT_ERR_UNSUPPORTED, "scheduler.type", hint,
                             "torch scheduler %s is not implemented yet", name);
    if (!e) {
        const char *close = zt_spell_closest(name, names, ZT_LEN(names));
        char suggestion[64] = "";
        if (close)
            snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", close);
        return zt_config_err(c, ZT_ERR_CONFIG, "scheduler.type", hint,
                             "DeepSpeed does not recognize LR scheduler %s%s", name, suggestion);
    }
    s->type = e->type;
    if (e->type == ZT_SCHED_WARMUP_DECAY_LR)
        s->warmup_max_lr = 0.001;

    json_t *params;
    ZT_TRY(zt_config_section(c, obj, "scheduler", "params", &params));
    if (params)
        ZT_TRY(zt_config_parse_keys(c, params, "scheduler.params", e->keys, e->n_keys, s));
    return zt_parse_sched_params(c, params, e);
}
