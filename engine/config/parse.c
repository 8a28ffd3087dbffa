/*
 * config parse: DeepSpeed's defaults and the section parsers: zero_optimization
 * (offload, deprecated names), fp16 / bf16 (with --fp16 / --bf16),
 * activation_checkpointing, data_types, timers and the top-level strings. The
 * optimizer and scheduler sections are in parse_optim.c, the monitors and
 * profilers in parse_monitor.c.
 */
#include "engine/config/config_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ defaults */

static void zt_offload_defaults(zt_offload_config *o, int64_t buffer_count)
{
    memset(o, 0, sizeof *o);
    o->device = ZT_OFFLOAD_NONE;
    o->buffer_count = buffer_count;
    o->pin_memory = true; /* DeepSpeed >= 0.19.5 */
    o->ratio = 1.0;
}

void zt_config_defaults(zt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->steps_per_print = 0;
    cfg->gradient_clipping = 1.0;
    cfg->gradient_predivide_factor = 1.0;
    cfg->throughput_timer = true;
    snprintf(cfg->log_level, sizeof cfg->log_level, "warning");

    zt_optim_config *o = &cfg->optimizer;
    o->type = ZT_OPTIM_ADAMW;
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->adam_w_mode = true;
    o->bias_correction = true;

    zt_sched_config *s = &cfg->scheduler;
    s->type = ZT_SCHED_NONE;
    s->warmup_max_lr = -1.0;
    s->warmup_num_steps = 1000;
    s->warmup_type = ZT_WARMUP_LOG;
    s->cos_min_ratio = 1e-4;
    s->cycle_first_step_size = 2000;
    s->cycle_second_step_size = 2000;
    s->cycle_momentum = true;
    s->cycle_min_mom = 0.8;
    s->cycle_max_mom = 0.9;
    s->lr_range_test_min_lr = 1e-3;
    s->lr_range_test_step_size = 2000;
    s->lr_range_test_step_rate = 1.0;

    zt_zero_config *z = &cfg->zero;
    z->contiguous_gradients = z->reduce_scatter = z->allgather_partitions = true;
    z->load_from_fp32_weights = z->ignore_unused_parameters = true;
    z->use_multi_rank_bucket_allreduce = true;
    z->reduce_bucket_size = z->allgather_bucket_size = 500000000;
    z->sub_group_size = 1000000000;
    z->stage3_prefetch_bucket_size = 50000000;
    z->stage3_param_persistence_threshold = 100000;
    z->stage3_model_persistence_threshold = INT64_MAX; /* sys.maxsize */
    z->stage3_max_live_parameters = z->stage3_max_reuse_distance = 1000000000;
    z->zero_hpz_partition_size = 1;
    z->mics_shard_size = -1;
    zt_offload_defaults(&z->offload_optimizer, 4);
    zt_offload_defaults(&z->offload_param, 5);
    z->offload_param.buffer_size = 100000000;
    z->offload_param.max_in_cpu = 1000000000;
    cfg->aio = (zt_aio_config){.block_size = 1048576, .queue_depth = 8, .thread_count = 1,
                               .overlap_events = true};

    zt_fp16_config *f = &cfg->fp16;
    f->initial_scale_power = 16;
    f->loss_scale_window = 1000;
    f->hysteresis = 2;
    f->min_loss_scale = 1.0;
    cfg->bf16.check_grad_overflow = true; /* DeepSpeed >= 0.19.3 */

    cfg->activation_checkpointing.number_checkpoints = -1;
    cfg->activation_checkpoint_interval = -1;
    cfg->pipeline.stages = cfg->pipeline.data_parallel = 1;
    snprintf(cfg->pipeline.partition, sizeof cfg->pipeline.partition, "parameters");
    snprintf(cfg->pipeline.schedule, sizeof cfg->pipeline.schedule, "1f1b");
    snprintf(cfg->csv_monitor.job_name, sizeof cfg->csv_monitor.job_name, "DeepSpeedJobName");
    snprintf(cfg->tensorboard.job_name, sizeof cfg->tensorboard.job_name, "DeepSpeedJobName");

    zt_flops_profiler_config *fp = &cfg->flops_profiler;
    fp->profile_step = 1;
    fp->module_depth = -1;
    fp->top_modules = 1;
    fp->detailed = true;
    cfg->comms_logger.prof_all = true;
}

void zt_config_overrides_init(zt_config_overrides *ov)
{
    ov->train_batch_size = ov->micro_batch_size = ov->gradient_accumulation_steps = -1;
    ov->lr = -1.0;
    ov->activation_checkpoint_interval = -1;
    ov->fp16 = ov->bf16 = ov->strict = false;
    ov->rescale_batch = false;
    ov->pipeline_stages = -1;
    ov->partition_method = ov->pipeline_schedule = NULL;
}

/* ------------------------------------------------------------------ zero_optimization */

/* `present` (optional): the section was given, even with every default. */
static zt_status zt_parse_offload(const zt_ctx *c, json_t *zobj, const char *key,
                                  const zt_key *keys, size_t n, zt_offload_config *o,
                                  bool *present)
{
    char path[ZT_PATH_MAX];
    zt_config_join(path, "zero_optimization", key);
    json_t *obj = zt_config_value(c, zobj, "zero_optimization", key);
    if (present)
        *present = obj != NULL;
    if (!obj)
        return ZT_OK;
    if (!json_is_object(obj))
        return zt_config_bad_value(c, path, obj, "an object { ... } or null");
    ZT_TRY(zt_config_parse_keys(c, obj, path, keys, n, o));
    json_t *dev = zt_config_value(c, obj, path, "device");
    if (dev) {
        char dp[ZT_PATH_MAX];
        size_t idx;
        zt_config_join(dp, path, "device");
        ZT_TRY(zt_config_read_choice(c, dp, dev, zt_config_offload_devices,
                                     zt_config_n_offload_devices, false, &idx));
        o->device = (zt_offload_device)idx;
    }
    return ZT_OK;
}

/* A deprecated boolean: noted; an error together with its replacement. */
static zt_status zt_deprecated_bool(const zt_ctx *c, json_t *zobj, const char *old,
                                    const char *repl, const char *const *repl_keys,
                                    size_t n_repl, bool *given, bool *value)
{
    char path[ZT_PATH_MAX];
    zt_config_join(path, "zero_optimization", old);
    json_t *v = zt_config_value(c, zobj, "zero_optimization", old);
    *given = v != NULL;
    if (!v)
        return ZT_OK;
    ZT_TRY(zt_config_read_bool(c, path, v, value));
    zt_config_note(c->cfg, "Config parameter %s is deprecated use %s instead", old, repl);
    for (size_t i = 0; i < n_repl; i++)
        if (zt_config_given(zobj, repl_keys[i]))
            return zt_config_err(c, ZT_ERR_CONFIG, path, "keep only the new name",
                                 "Cannot provide deprecated parameter '%s' and replacing parameter "
                                 "'%s' together",
                                 old, repl);
    return ZT_OK;
}

static zt_status zt_parse_zero_object(const zt_ctx *c, json_t *zobj, bool *overlap_given,
                                      bool *opt_offload_given)
{
    zt_zero_config *z = &c->cfg->zero;
    const char *zp = "zero_optimization";
    ZT_TRY(zt_config_parse_keys(c, zobj, zp, zt_config_zero_keys, zt_config_n_zero_keys, z));

    json_t *v = zt_config_value(c, zobj, zp, "overlap_comm");
    *overlap_given = v != NULL;
    if (v)
        ZT_TRY(zt_config_read_bool(c, "zero_optimization.overlap_comm", v, &z->overlap_comm));

    bool legacy = false;
    if ((v = zt_config_value(c, zobj, zp, "legacy_stage1")))
        ZT_TRY(zt_config_read_bool(c, "zero_optimization.legacy_stage1", v, &legacy));
    if (legacy)
        return zt_config_err(
            c, ZT_ERR_CONFIG, "zero_optimization.legacy_stage1",
            "remove legacy_stage1: stage 1 is the current implementation",
            "The deprecated version of ZeRO Stage 1 is not supported in deepspeed "
            ">= 0.5.9. Please downgrade to a version less than 0.5.9 if you need to "
            "use this deprecated version of ZeRO.");

    if ((v = zt_config_value(c, zobj, zp, "zeropp_loco_param"))) {
        if (!json_is_object(v))
            return zt_config_bad_value(c, "zero_optimization.zeropp_loco_param", v,
                                       "an object { ... } or null");
        zt_config_note(c->cfg, "zero_optimization.zeropp_loco_param has no effect in zerotrain");
    }
    if ((v = zt_config_value(c, zobj, zp, "zenflow"))) {
        if (!json_is_object(v))
            return zt_config_bad_value(c, "zero_optimization.zenflow", v,
                                       "an object { ... } or null");
        if (zt_config_feature_on(v))
            zt_config_record_unbuilt(c->cfg, "zero_optimization.zenflow");
    }

    ZT_TRY(zt_parse_offload(c, zobj, "offload_optimizer", zt_config_offload_optimizer_keys,
                            zt_config_n_offload_optimizer_keys, &z->offload_optimizer,
                            opt_offload_given));
    ZT_TRY(zt_parse_offload(c, zobj, "offload_param", zt_config_offload_param_keys,
                            zt_config_n_offload_param_keys, &z->offload_param, NULL));

    /* DeepSpeed's deprecated names, in its field order. */
    static const char *const offload_param_key[] = {"offload_param"};
    static const char *const offload_opt_key[] = {"offload_optimizer"};
    static const char *const gather_keys[] = {"stage3_gather_16bit_weights_on_model_save",
                                              "gather_16bit_weights_on_model_save"};
    bool given, b = false;
    ZT_TRY(zt_deprecated_bool(c, zobj, "cpu_offload_param", "offload_param", offload_param_key,
                              1, &given, &b));
    if (given && b)
        z->offload_param.device = ZT_OFFLOAD_CPU;
    ZT_TRY(zt_deprecated_bool(c, zobj, "cpu_offload_use_pin_memory",
                              "offload_param or offload_optimizer", NULL, 0, &given, &b));
    ZT_TRY(zt_deprecated_bool(c, zobj, "cpu_offload", "offload_optimizer", offload_opt_key, 1,
                              &given, &b));
    if (given && b) {
        z->offload_optimizer.device = ZT_OFFLOAD_CPU;
        *opt_offload_given = true;
    }
    ZT_TRY(zt_deprecated_bool(c, zobj, "stage3_gather_fp16_weights_on_model_save",
                              "gather_16bit_weights_on_model_save", gather_keys, 2, &given, &b));
    if (given)
        z->stage3_gather_16bit_weights_on_model_save = b;
    return ZT_OK;
}

zt_status zt_config_parse_zero(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    zt_zero_config *z = &cfg->zero;
    json_t *zv = json_object_get(root, "zero_optimization");
    json_t *ag = zt_config_value(c, root, "", "allgather_size");
    int64_t allgather_size = 500000000;
    if (ag)
        ZT_TRY(zt_config_read_int(c, "allgather_size", ag, 0, INFINITY, &allgather_size));

    bool overlap_given = false, opt_offload_given = false;
    json_t *zobj = NULL;
    if (json_is_boolean(zv)) {
        /* DeepSpeed's oldest format: a boolean, bucket size from allgather_size. */
        z->stage = json_is_true(zv) ? 1 : 0;
        if (z->stage == 1)
            z->allgather_bucket_size = allgather_size;
        zt_config_note(
            cfg, "\"zero_optimization\": %s is DeepSpeed's deprecated format: read as stage %d",
            z->stage ? "true" : "false", z->stage);
    } else {
        if (ag)
            zt_config_note(cfg,
                           "allgather_size has no effect unless \"zero_optimization\" is true");
        ZT_TRY(zt_config_section(c, root, "", "zero_optimization", &zobj));
        if (zobj)
            ZT_TRY(zt_parse_zero_object(c, zobj, &overlap_given, &opt_offload_given));
    }

    z->overlap_comm_given = overlap_given;
    if (!overlap_given)
        z->overlap_comm = z->stage == 3;
    if (opt_offload_given && z->offload_optimizer.ratio < 1.0 && z->stage != 3)
        return zt_config_err(c, ZT_ERR_CONFIG, "zero_optimization.offload_optimizer.ratio",
                             "use ratio 1.0, or ZeRO stage 3",
                             "Partial offloading only supported for ZeRO Stage 3.");
    /* DeepSpeed silently ignores offload at stages that lack what it offloads;
     * a setting that does nothing is refused. */
    if (z->offload_optimizer.device != ZT_OFFLOAD_NONE && z->stage == 0)
        return zt_config_err(
            c, ZT_ERR_CONFIG,
            zt_config_given(zobj, "cpu_offload") ? "zero_optimization.cpu_offload"
                                                 : "zero_optimization.offload_optimizer.device",
            "use ZeRO stage 1, 2 or 3, or remove the optimizer offload",
            "offloading the optimizer to \"%s\" at ZeRO stage 0: stage 0 has no ZeRO "
            "optimizer to offload (DeepSpeed silently ignores the setting)",
            zt_config_offload_devices[z->offload_optimizer.device]);
    if (z->offload_param.device != ZT_OFFLOAD_NONE && z->stage < 3)
        return zt_config_err(
            c, ZT_ERR_CONFIG,
            zt_config_given(zobj, "cpu_offload_param") ? "zero_optimization.cpu_offload_param"
                                                       : "zero_optimization.offload_param.device",
            "use ZeRO stage 3, or remove the parameter offload",
            "offloading parameters to \"%s\" at ZeRO stage %d: only stage 3 partitions "
            "parameters (DeepSpeed silently ignores offload_param below stage 3)",
            zt_config_offload_devices[z->offload_param.device], z->stage);
    if (opt_offload_given && z->offload_optimizer.ratio < 1.0 &&
        z->offload_optimizer.device == ZT_OFFLOAD_NONE)
        zt_config_note(cfg, "zero_optimization.offload_optimizer.ratio has no effect without an "
                            "offload device");
    if (z->offload_optimizer.device != ZT_OFFLOAD_NONE && !z->contiguous_gradients) {
        zt_config_note(cfg, "zero_optimization.contiguous_gradients forced to true: the optimizer "
                            "is offloaded");
        z->contiguous_gradients = true;
    }
    if ((z->stage == 1 || z->stage == 2) && z->allgather_bucket_size % 2 != 0)
        return zt_config_err(
            c, ZT_ERR_CONFIG, "zero_optimization.allgather_bucket_size",
            "use an even number of elements",
            "allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2");
    if (z->stage3_allgather_sequential && z->stage3_prefetch_bucket_size != 1) {
        zt_config_note(cfg, "zero_optimization.stage3_allgather_sequential forces "
                            "stage3_prefetch_bucket_size to 1");
        z->stage3_prefetch_bucket_size = 1;
    }
    return ZT_OK;
}

/* ------------------------------------------------------------------ fp16 / bf16 */

/* `section`.enabled: the config's value, else the command-line flag (HF: "auto"
 * is the flag's value, false without it). An explicit false contradicts the flag. */
static zt_status zt_parse_enabled(const zt_ctx *c, json_t *obj, const char *section, bool flag,
                                  const char *flag_name, bool *enabled)
{
    char kp[ZT_PATH_MAX];
    zt_config_join(kp, section, "enabled");
    json_t *v = obj ? json_object_get(obj, "enabled") : NULL;
    if (v && !zt_config_is_auto(v)) {
        ZT_TRY(zt_config_read_bool(c, kp, v, enabled));
        if (flag && !*enabled) {
            char hint[96];
            snprintf(hint, sizeof hint, "drop %s, or write \"enabled\": \"auto\" to take it",
                     flag_name);
            return zt_config_err(c, ZT_ERR_CONFIG, kp, hint,
                                 "false in the config contradicts %s on the command line",
                                 flag_name);
        }
        return ZT_OK;
    }
    *enabled = flag;
    if (v)
        zt_config_note(c->cfg, "%s \"auto\" -> %s (%s%s)", kp, flag ? "true" : "false",
                       flag ? "" : "no ", flag_name);
    else if (flag)
        zt_config_note(c->cfg, "%s not in config -> true (%s)", kp, flag_name);
    return ZT_OK;
}

zt_status zt_config_parse_precision(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "fp16", &obj));
    ZT_TRY(zt_parse_enabled(c, obj, "fp16", c->ov.fp16, "--fp16", &cfg->fp16.enabled));
    if (obj)
        ZT_TRY(zt_config_parse_keys(c, obj, "fp16", zt_config_fp16_keys, zt_config_n_fp16_keys,
                                    &cfg->fp16));
    if (cfg->fp16.loss_scale == 0 && cfg->fp16.loss_scale_window <= 0)
        return zt_config_err(c, ZT_ERR_CONFIG, "fp16.loss_scale_window",
                             "give a positive window, or a static loss_scale > 0",
                             "must be > 0 with dynamic loss scaling (loss_scale 0)");
    if (cfg->fp16.loss_scale == 0 && cfg->fp16.min_loss_scale <= 0)
        return zt_config_err(c, ZT_ERR_CONFIG, "fp16.min_loss_scale",
                             "give a positive minimum, or a static loss_scale > 0",
                             "must be > 0 with dynamic loss scaling (loss_scale 0)");

    /* "bfloat16" is DeepSpeed's older name; both together were refused above. */
    const char *bname = json_object_get(root, "bfloat16") ? "bfloat16" : "bf16";
    ZT_TRY(zt_config_section(c, root, "", bname, &obj));
    ZT_TRY(zt_parse_enabled(c, obj, bname, c->ov.bf16, "--bf16", &cfg->bf16.enabled));
    if (obj)
        ZT_TRY(zt_config_parse_keys(c, obj, bname, zt_config_bf16_keys, zt_config_n_bf16_keys,
                                    &cfg->bf16));

    if (cfg->fp16.enabled && cfg->bf16.enabled)
        return zt_config_err(c, ZT_ERR_CONFIG, "fp16.enabled", "enable one of fp16 and bf16",
                             "bfloat16 and fp16 modes cannot be simultaneously enabled");
    return ZT_OK;
}

/* ------------------------------------------------------------------ smaller sections */

/* DeepSpeed's checkpointing.configure asserts, and the command-line interval. */
static zt_status zt_check_act_ckpt(const zt_ctx *c)
{
    zt_config *cfg = c->cfg;
    const zt_act_ckpt_config *a = &cfg->activation_checkpointing;
    const char *cmo = "activation_checkpointing.contiguous_memory_optimization";
    if (a->contiguous_memory_optimization && !a->partition_activations)
        return zt_config_err(
            c, ZT_ERR_CONFIG, cmo,
            "set \"partition_activations\": true, or remove "
            "contiguous_memory_optimization",
            "Contiguous Checkpointing is only available with partitioned activations. "
            "Set partitioned activations to true in deepspeed config");
    /* DeepSpeed asserts "Must specify the number of layers with contiguous
     * memory checkpointing"; Megatron-style callers pass their layer count,
     * which here is one checkpoint per unit. */
    if (a->contiguous_memory_optimization && a->number_checkpoints < 1) {
        cfg->activation_checkpointing.number_checkpoints_from_model = true;
        zt_config_note(cfg, "activation_checkpointing.number_checkpoints not given with "
                            "contiguous_memory_optimization -> the model's unit count (as "
                            "Megatron passes its layer count): every unit is checkpointed");
    } else if (a->contiguous_memory_optimization) {
        zt_config_note(cfg, "%s has no effect in zerotrain: checkpoints are already one "
                            "contiguous buffer per boundary", cmo);
    }
    const int64_t interval = c->ov.activation_checkpoint_interval;
    if (interval < -1)
        return zt_config_err(
            c, ZT_ERR_CONFIG, NULL, "give 0 (off) or the number of units between checkpoints",
            "activation checkpoint interval %lld from the command line: expected a "
            "non-negative integer",
            (long long)interval);
    cfg->activation_checkpoint_interval = interval;
    if (interval >= 0 && a->number_checkpoints >= 1)
        zt_config_note(cfg, "activation_checkpointing.number_checkpoints %lld: the command-line "
                            "checkpoint interval %lld takes precedence",
                       (long long)a->number_checkpoints, (long long)interval);
    else if (interval >= 0 && a->number_checkpoints_from_model)
        zt_config_note(cfg, "activation_checkpointing: the command-line checkpoint interval %lld "
                            "takes precedence over one checkpoint per unit",
                       (long long)interval);
    return ZT_OK;
}

static zt_status zt_parse_act_ckpt(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "activation_checkpointing", &obj));
    if (obj) {
        cfg->activation_checkpointing_present = true;
        ZT_TRY(zt_config_parse_keys(c, obj, "activation_checkpointing", zt_config_act_ckpt_keys,
                                    zt_config_n_act_ckpt_keys, &cfg->activation_checkpointing));
    }
    return zt_check_act_ckpt(c);
}

static zt_status zt_parse_data_types_timers(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "data_types", &obj));
    if (obj) {
        static const char *const dtypes[] = {"fp32", "fp16", "bf16"};
        ZT_TRY(zt_config_parse_keys(c, obj, "data_types", zt_config_data_types_keys,
                                    zt_config_n_data_types_keys, NULL));
        json_t *v = zt_config_value(c, obj, "data_types", "grad_accum_dtype");
        size_t idx;
        if (v) {
            ZT_TRY(zt_config_read_choice(c, "data_types.grad_accum_dtype", v, dtypes,
                                         ZT_LEN(dtypes), false, &idx));
            zt_config_copy(cfg->data_types.grad_accum_dtype,
                           sizeof cfg->data_types.grad_accum_dtype, dtypes[idx]);
        }
    }
    ZT_TRY(zt_config_section(c, root, "", "timers", &obj));
    if (obj) {
        ZT_TRY(zt_config_parse_keys(c, obj, "timers", zt_config_timers_keys,
                                    zt_config_n_timers_keys, NULL));
        json_t *tp;
        ZT_TRY(zt_config_section(c, obj, "timers", "throughput", &tp));
        if (tp)
            ZT_TRY(zt_config_parse_keys(c, tp, "timers.throughput", zt_config_throughput_keys,
                                        zt_config_n_throughput_keys, cfg));
    }
    return ZT_OK;
}

/* Each section is read even when another failed (every error is recorded). */
zt_status zt_config_parse_misc_sections(const zt_ctx *c, json_t *root)
{
    zt_status a = zt_parse_act_ckpt(c, root);
    zt_status b = zt_parse_data_types_timers(c, root);
    zt_status d = zt_config_parse_aio(c, root);
    return a != ZT_OK ? a : b != ZT_OK ? b : d;
}

static void zt_lower_copy(char *dst, size_t size, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < size; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = '\0';
}

zt_status zt_config_parse_top_strings(const zt_ctx *c, json_t *root)
{
    static const char *const levels[] = {"debug", "info", "warning", "error", "critical"};
    static const char *const dtypes[] = {"fp16", "bf16", "fp32"};
    static const char *const ops[] = {"mean", "sum"};
    zt_config *cfg = c->cfg;
    size_t idx;
    json_t *v;
    if ((v = zt_config_value(c, root, "", "log_level"))) {
        ZT_TRY(zt_config_read_choice(c, "log_level", v, levels, ZT_LEN(levels), true, &idx));
        snprintf(cfg->log_level, sizeof cfg->log_level, "%s", levels[idx]);
    }
    if ((v = zt_config_value(c, root, "", "communication_data_type"))) {
        ZT_TRY(zt_config_read_choice(c, "communication_data_type", v, dtypes, ZT_LEN(dtypes), true,
                                     &idx));
        zt_lower_copy(cfg->communication_data_type, sizeof cfg->communication_data_type,
                      dtypes[idx]);
    }
    if ((v = zt_config_value(c, root, "", "gradient_allreduce_op"))) {
        ZT_TRY(zt_config_read_choice(c, "gradient_allreduce_op", v, ops, ZT_LEN(ops), true, &idx));
        if (idx == 1 && cfg->zero.stage == 3)
            return zt_config_err(c, ZT_ERR_CONFIG, "gradient_allreduce_op",
                                 "use \"mean\" with stage 3",
                                 "gradient_allreduce_op='sum' is not supported with ZeRO stage 3");
        if (idx == 1)
            zt_config_record_unbuilt(cfg, "gradient_allreduce_op");
    }
    return ZT_OK;
}
