/*
 * config check: what must hold between sections once all are read (DeepSpeed's
 * cross checks, grad_accum_dtype), zt_config_check_supported's "not
 * implemented yet" refusals (every one collected), and the dtype and
 * checkpoint-interval queries.
 */
#include "engine/config/config_impl.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ cross checks */

/* A dtype name the parser accepted ("fp32", "fp16", "bf16") as zt_dtype. */
static zt_dtype zt_dtype_of(const char *name)
{
    if (strcmp(name, "fp16") == 0)
        return ZT_F16;
    if (strcmp(name, "bf16") == 0)
        return ZT_BF16;
    return ZT_F32;
}

static zt_status zt_check_grad_accum_dtype(const zt_ctx *c)
{
    const zt_config *cfg = c->cfg;
    const zt_dtype compute = zt_config_compute_dtype(cfg);
    const char *given = cfg->data_types.grad_accum_dtype;
    if (!given[0]) {
        if (compute != ZT_F32 && cfg->gradient_accumulation_steps > 1)
            zt_config_note(c->cfg,
                           "data_types.grad_accum_dtype not given -> fp32: %lld micro-steps "
                           "accumulate in fp32 (DeepSpeed's default is the model dtype, %s)",
                           (long long)cfg->gradient_accumulation_steps, zt_dtype_name(compute));
        return ZT_OK;
    }
    const zt_dtype want = zt_dtype_of(given);
    if (want == ZT_F32 || want == compute)
        return ZT_OK;
    char expected[32];
    if (compute == ZT_F32)
        snprintf(expected, sizeof expected, "\"fp32\"");
    else
        snprintf(expected, sizeof expected, "\"fp32\" or \"%s\"", zt_dtype_name(compute));
    return zt_config_err(c, ZT_ERR_CONFIG, "data_types.grad_accum_dtype",
                         "gradients accumulate in fp32 or in the training dtype",
                         "\"%s\" with %s training: expected %s", given, zt_dtype_name(compute),
                         expected);
}

/* ZeRO++ below stage 3: DeepSpeed ignores its keys there without a word (a
 * config written for stage 3 runs at stage 2); here a warning says so, and
 * --strict refuses them, as every setting zerotrain ignores. */
static zt_status zt_check_zeropp_stage(const zt_ctx *c)
{
    const zt_zero_config *z = &c->cfg->zero;
    const struct {
        bool on;
        const char *key;
    } keys[] = {
        {z->zero_hpz_partition_size > 1, "zero_hpz_partition_size"},
        {z->zero_quantized_weights, "zero_quantized_weights"},
        {z->zero_quantized_gradients, "zero_quantized_gradients"},
        {z->zero_quantized_nontrainable_weights, "zero_quantized_nontrainable_weights"},
    };
    for (size_t i = 0; i < ZT_LEN(keys); i++) {
        if (!keys[i].on)
            continue;
        char path[ZT_PATH_MAX];
        zt_config_join(path, "zero_optimization", keys[i].key);
        if (c->ov.strict)
            return zt_config_err(c, ZT_ERR_UNSUPPORTED, path,
                                 "use \"stage\": 3, remove the key, or run without --strict to "
                                 "ignore it with a warning",
                                 "ZeRO++ acts on stage 3's parameter gathers and gradient "
                                 "reduce-scatter, so stage %d ignores it, as DeepSpeed does "
                                 "(--strict refuses settings zerotrain ignores)",
                                 z->stage);
        zt_config_warn(c->cfg,
                       "%s: ignored at stage %d, as DeepSpeed does: ZeRO++ acts on stage 3's "
                       "parameter gathers and gradient reduce-scatter",
                       path, z->stage);
    }
    return ZT_OK;
}

/* ZeRO++ quantization: DeepSpeed's own refusal (runtime/zero/stage3.py), and
 * what its nontrainable-weights switch does here. */
static zt_status zt_check_zeropp(const zt_ctx *c)
{
    const zt_zero_config *z = &c->cfg->zero;
    if (z->stage != 3)
        return zt_check_zeropp_stage(c);
    if (z->zero_quantized_gradients && !z->reduce_scatter)
        return zt_config_err(c, ZT_ERR_CONFIG, "zero_optimization.zero_quantized_gradients",
                             "set \"reduce_scatter\": true, or remove zero_quantized_gradients",
                             "when enable all_to_all_reduce, reduce_scatter should also be "
                             "enabled for data type checks.");
    if (z->zero_quantized_nontrainable_weights)
        zt_config_note(c->cfg, "zero_optimization.zero_quantized_nontrainable_weights has no "
                               "effect in zerotrain: every parameter of its models is trainable "
                               "(zero_quantized_weights quantizes the gathers)");
    return ZT_OK;
}

zt_status zt_config_cross_checks(const zt_ctx *c)
{
    const zt_config *cfg = c->cfg;
    const int stage = cfg->zero.stage;
    if (stage == 2 && cfg->zero.reduce_scatter) {
        const char *hint = "set \"reduce_scatter\": false in zero_optimization, or drop the option";
        if (cfg->gradient_predivide_factor != 1.0)
            return zt_config_err(
                c, ZT_ERR_CONFIG, "gradient_predivide_factor", hint,
                "gradient_predivide_factor != 1.0 is not yet supported with ZeRO-2 "
                "with reduce scatter enabled");
        if (cfg->prescale_gradients)
            return zt_config_err(c, ZT_ERR_CONFIG, "prescale_gradients", hint,
                                 "pre-scale gradients is not yet supported with ZeRO-2 with reduce "
                                 "scatter enabled");
    }
    const char *stage_hint = "use ZeRO stage 1, 2 or 3";
    if (cfg->fp16.fp16_master_weights_and_grads && stage == 0)
        return zt_config_err(
            c, ZT_ERR_CONFIG, "fp16.fp16_master_weights_and_grads", stage_hint,
            "Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, "
            "or 3.");
    if (cfg->bf16.bf16_master_weights_and_grads && stage == 0)
        return zt_config_err(
            c, ZT_ERR_CONFIG, "bf16.bf16_master_weights_and_grads", stage_hint,
            "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, "
            "or 3.");
    if (cfg->bf16.bf16_optimizer_states && stage == 0)
        return zt_config_err(c, ZT_ERR_CONFIG, "bf16.bf16_optimizer_states", stage_hint,
                             "bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3.");
    if (cfg->bf16.bf16_optimizer_states && !cfg->bf16.bf16_master_weights_and_grads)
        return zt_config_err(c, ZT_ERR_CONFIG, "bf16.bf16_optimizer_states",
                             "also set \"bf16_master_weights_and_grads\": true",
                             "bf16_optimizer_states requires bf16_master_weights_and_grads to be "
                             "enabled.");
    ZT_TRY(zt_config_check_nvme(c));
    ZT_TRY(zt_check_zeropp(c));
    return zt_check_grad_accum_dtype(c);
}

/* ------------------------------------------------------------------ support check */

/* The first unsupported communication_data_type rule broken, or ZT_OK. */
static zt_status zt_check_comm_dtype(const zt_config *cfg)
{
    const char *name = cfg->communication_data_type;
    if (!name[0])
        return ZT_OK;
    const zt_dtype want = zt_dtype_of(name);
    const zt_dtype compute = zt_config_compute_dtype(cfg);
    if (want != ZT_F32 && want != compute) {
        char hint[96];
        if (compute == ZT_F32)
            snprintf(hint, sizeof hint, "use \"fp32\", or remove communication_data_type");
        else
            snprintf(hint, sizeof hint, "use \"fp32\" or \"%s\", or remove "
                     "communication_data_type", zt_dtype_name(compute));
        return zt_fail(ZT_ERR_UNSUPPORTED, hint,
                       "communication_data_type \"%s\" with %s training is not implemented yet "
                       "(gradients are communicated in fp32 or in the training dtype)",
                       name, zt_dtype_name(compute));
    }
    const zt_dtype grad = zt_config_grad_dtype(cfg);
    if (cfg->zero.stage == 0 && want != grad) {
        char hint[160];
        snprintf(hint, sizeof hint,
                 "remove communication_data_type, or set data_types.grad_accum_dtype to \"%s\"",
                 name);
        return zt_fail(ZT_ERR_UNSUPPORTED, hint,
                       "communication_data_type \"%s\" at ZeRO stage 0 with gradients stored "
                       "in %s: stage 0 reduces the gradient buffer in place, so it communicates "
                       "in the gradients' dtype",
                       name, zt_dtype_name(grad));
    }
    return ZT_OK;
}

static zt_status zt_check_offload_supported(const zt_zero_config *z)
{
    /* Parsing refused offload at stages without the partitioning it needs. */
    if (z->offload_optimizer.device != ZT_OFFLOAD_NONE && z->offload_optimizer.ratio < 1.0)
        return zt_fail(ZT_ERR_UNSUPPORTED,
                       "use ratio 1.0 to offload the whole optimizer, or remove the offload",
                       "zero_optimization.offload_optimizer.ratio %g: partial optimizer offload "
                       "is not implemented yet",
                       z->offload_optimizer.ratio);
    if (z->offload_param.device != ZT_OFFLOAD_NONE && z->zero_hpz_partition_size > 1)
        return zt_fail(ZT_ERR_UNSUPPORTED,
                       "remove zero_hpz_partition_size, or the parameter offload",
                       "zero_optimization.offload_param with zero_hpz_partition_size %lld: hpZ's "
                       "secondary parameter copy with the parameter shards on the host is not "
                       "implemented yet",
                       (long long)z->zero_hpz_partition_size);
    return ZT_OK;
}

/* GPUDirect Storage reads swap files straight into device memory. */
static zt_status zt_check_aio_supported(const zt_config *cfg)
{
    if (cfg->aio.use_gds)
        return zt_fail(ZT_ERR_UNSUPPORTED, "remove aio.use_gds",
                       "aio.use_gds: GPUDirect Storage is not implemented yet (nvme swaps go "
                       "through host buffers)");
    return ZT_OK;
}

/* 16-bit master weights and optimizer states. */
static zt_status zt_check_master_supported(const zt_config *cfg)
{
    const char *master_hint = "remove it: zerotrain keeps fp32 master weights and optimizer "
                              "states";
    if (cfg->fp16.fp16_master_weights_and_grads)
        return zt_fail(ZT_ERR_UNSUPPORTED, master_hint,
                       "fp16.fp16_master_weights_and_grads: fp16 master weights and gradients "
                       "are not implemented yet");
    if (cfg->bf16.bf16_master_weights_and_grads)
        return zt_fail(ZT_ERR_UNSUPPORTED, master_hint,
                       "bf16.bf16_master_weights_and_grads: bf16 master weights and gradients "
                       "are not implemented yet");
    if (cfg->bf16.bf16_optimizer_states)
        return zt_fail(ZT_ERR_UNSUPPORTED, master_hint,
                       "bf16.bf16_optimizer_states: bf16 optimizer states are not implemented "
                       "yet");
    return ZT_OK;
}

/* ZeRO++ and MiCS. */
static zt_status zt_check_zeropp_supported(const zt_zero_config *z)
{
    const char *zpp_hint = "remove the ZeRO++ / MiCS settings";
    /* Below stage 3 the ZeRO++ keys are ignored with a warning
     * (zt_check_zeropp_stage). */
    const struct {
        bool on;
        const char *key;
    } quant[] = {
        {z->zero_quantized_weights, "zero_quantized_weights"},
        {z->zero_quantized_gradients, "zero_quantized_gradients"},
        {z->zero_quantized_nontrainable_weights, "zero_quantized_nontrainable_weights"},
    };
    for (size_t i = 0; i < ZT_LEN(quant); i++)
        if (quant[i].on && z->stage == 3 && z->mics_shard_size > 0)
            return zt_fail(ZT_ERR_UNSUPPORTED, zpp_hint,
                           "zero_optimization.%s with mics_shard_size %lld: ZeRO++ quantization "
                           "of MiCS's shard-group collectives is not implemented",
                           quant[i].key, (long long)z->mics_shard_size);
    if (z->mics_shard_size > 0 && z->stage != 3)
        return zt_fail(ZT_ERR_UNSUPPORTED, "use \"stage\": 3, or remove mics_shard_size",
                       "zero_optimization.mics_shard_size %lld: MiCS partitions parameters, "
                       "which only ZeRO stage 3 does (stage is %d)",
                       (long long)z->mics_shard_size, z->stage);
    if (z->mics_shard_size > 0 && z->zero_hpz_partition_size > 1)
        return zt_fail(ZT_ERR_UNSUPPORTED, "choose one of the two",
                       "zero_optimization: mics_shard_size %lld with zero_hpz_partition_size "
                       "%lld: MiCS and hpZ both decide who holds which parameters",
                       (long long)z->mics_shard_size, (long long)z->zero_hpz_partition_size);
    return ZT_OK;
}

void zt_config_refusals(const zt_config *cfg, zt_config_errors *errs, bool values_clean)
{
    if (values_clean) {
        zt_config_errors_take(errs, zt_check_master_supported(cfg), errs->n);
        zt_config_errors_take(errs, zt_check_offload_supported(&cfg->zero), errs->n);
        zt_config_errors_take(errs, zt_check_aio_supported(cfg), errs->n);
        zt_config_errors_take(errs, zt_check_zeropp_supported(&cfg->zero), errs->n);
        zt_config_errors_take(errs, zt_check_comm_dtype(cfg), errs->n);
    }
    for (int i = 0; i < cfg->n_unbuilt; i++) {
        zt_status st = zt_fail(ZT_ERR_UNSUPPORTED, "remove it from the config or switch it off",
                               "%s: this DeepSpeed feature is not implemented yet",
                               cfg->unbuilt[i]);
        zt_config_errors_take(errs, st, errs->n);
    }
}

zt_status zt_config_check_supported(const zt_config *cfg)
{
    zt_config_errors errs = {0};
    zt_config_refusals(cfg, &errs, true);
    return zt_config_errors_report(&errs, "the config");
}

/* ------------------------------------------------------------------ queries of config.h */

zt_dtype zt_config_compute_dtype(const zt_config *cfg)
{
    if (cfg->fp16.enabled)
        return ZT_F16;
    if (cfg->bf16.enabled)
        return ZT_BF16;
    return ZT_F32;
}

zt_dtype zt_config_grad_dtype(const zt_config *cfg)
{
    const zt_dtype compute = zt_config_compute_dtype(cfg);
    if (compute == ZT_F32)
        return ZT_F32;
    if (cfg->data_types.grad_accum_dtype[0])
        return zt_dtype_of(cfg->data_types.grad_accum_dtype);
    return cfg->gradient_accumulation_steps > 1 ? ZT_F32 : compute;
}

zt_dtype zt_config_comm_dtype(const zt_config *cfg)
{
    if (cfg->zero.stage == 0)
        return zt_config_grad_dtype(cfg);
    if (cfg->communication_data_type[0])
        return zt_dtype_of(cfg->communication_data_type);
    return zt_config_compute_dtype(cfg);
}

int zt_config_optim_state_floats(const zt_optim_config *o)
{
    if (o->type == ZT_OPTIM_SGD)
        return o->momentum != 0.0 ? 1 : 0;
    return 2;
}

int64_t zt_config_checkpoint_interval(const zt_config *cfg, int n_units)
{
    if (cfg->activation_checkpoint_interval >= 0)
        return cfg->activation_checkpoint_interval;
    const int64_t k = cfg->activation_checkpointing.number_checkpoints;
    if (k < 1 && cfg->activation_checkpointing.number_checkpoints_from_model && n_units >= 1)
        return 1;
    if (k < 1 || n_units < 1)
        return 0;
    /* k may be near INT64_MAX: no n_units + k - 1. */
    return k >= n_units ? 1 : ((int64_t)n_units + k - 1) / k;
}

void zt_config_fingerprint(const zt_config *cfg, zt_fingerprint *fp)
{
    zt_fingerprint_i64(fp, "train_batch_size", cfg->train_batch_size);
    zt_fingerprint_i64(fp, "train_micro_batch_size_per_gpu", cfg->micro_batch_size);
    zt_fingerprint_i64(fp, "gradient_accumulation_steps", cfg->gradient_accumulation_steps);
    zt_fingerprint_i64(fp, "zero_optimization.stage", cfg->zero.stage);
    zt_fingerprint_bytes(fp, "zero_optimization", NULL, &cfg->zero, sizeof cfg->zero);
    zt_fingerprint_bytes(fp, "optimizer", zt_optim_type_name(cfg->optimizer.type),
                         &cfg->optimizer, sizeof cfg->optimizer);
    zt_fingerprint_bytes(fp, "scheduler", zt_sched_type_name(cfg->scheduler.type),
                         &cfg->scheduler, sizeof cfg->scheduler);
    zt_fingerprint_bytes(fp, "fp16", cfg->fp16.enabled ? "enabled" : "disabled", &cfg->fp16,
                         sizeof cfg->fp16);
    zt_fingerprint_bytes(fp, "bf16", cfg->bf16.enabled ? "enabled" : "disabled", &cfg->bf16,
                         sizeof cfg->bf16);
    zt_fingerprint_bytes(fp, "activation_checkpointing", NULL, &cfg->activation_checkpointing,
                         sizeof cfg->activation_checkpointing);
    zt_fingerprint_i64(fp, "activation checkpoint interval", cfg->activation_checkpoint_interval);
    zt_fingerprint_bytes(fp, "pipeline", NULL, &cfg->pipeline, sizeof cfg->pipeline);
    zt_fingerprint_str(fp, "data_types.grad_accum_dtype", cfg->data_types.grad_accum_dtype);
    zt_fingerprint_str(fp, "communication_data_type", cfg->communication_data_type);
    zt_fingerprint_f64(fp, "gradient_clipping", cfg->gradient_clipping);
    zt_fingerprint_i64(fp, "prescale_gradients", cfg->prescale_gradients);
    zt_fingerprint_f64(fp, "gradient_predivide_factor", cfg->gradient_predivide_factor);
    zt_fingerprint_i64(fp, "steps_per_print", cfg->steps_per_print);
    zt_fingerprint_i64(fp, "wall_clock_breakdown", cfg->wall_clock_breakdown);
    zt_fingerprint_i64(fp, "csv_monitor.enabled", cfg->csv_monitor.enabled);
}
