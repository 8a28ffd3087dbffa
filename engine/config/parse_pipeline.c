/*
 * config parse_pipeline: DeepSpeed's `pipeline` section (DS runtime/config.py)
 * and the command line's PipelineModule arguments, resolved into
 * zt_pipeline_config (config.h):
 *
 *   stages        "auto" (default) or P >= 1; --pipeline-stages fills "auto"
 *                 and must agree with a number. DeepSpeed parses it and never
 *                 reads it (PipelineModule's num_stages decides); here it is
 *                 how a config asks for P. The world must be P x D ranks:
 *                 "num_stages (P) must divide distributed world size (N)".
 *   partition     "best" (default, never read by DeepSpeed: no effect), or a
 *                 partition_method (parameters, uniform, type:REGEX) taken
 *                 when --partition-method is not given.
 *   activation_checkpoint_interval   units per checkpoint segment in each
 *                 stage (DeepSpeed's engine hands it to the PipelineModule);
 *                 with pipelining only, and the command line's interval wins.
 *   seed_layers, pipe_partitioned, grad_partitioned, use_reentrant
 *                 checked, no effect: every unit's initial values are keyed
 *                 by its global parameter index whatever the stage, there is
 *                 no tensor parallelism to partition activations over, and
 *                 recomputation does not use autograd.
 *
 * With P > 1 ZeRO stages 2 and 3 are refused with DeepSpeed's message.
 */
#include "engine/config/config_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ZP(f) ((ptrdiff_t)offsetof(zt_pipeline_config, f))
const zt_key zt_config_pipeline_keys[ZT_CONFIG_N_PIPELINE_KEYS] = {
    {.name = "stages", .kind = ZT_CUSTOM, .off = ZT_NONE},
    {.name = "partition", .kind = ZT_CUSTOM, .off = ZT_NONE},
    {.name = "seed_layers", .kind = ZT_BOOL, .off = ZT_NONE, .flags = ZT_NO_EFFECT,
     .why = "initial values are keyed by the global parameter index on every stage"},
    {.name = "activation_checkpoint_interval", .kind = ZT_I64,
     .off = ZP(activation_checkpoint_interval), .lo = 0, .hi = INFINITY},
    {.name = "pipe_partitioned", .kind = ZT_BOOL, .off = ZT_NONE, .flags = ZT_NO_EFFECT,
     .why = "there is no tensor parallelism to partition activations over"},
    {.name = "grad_partitioned", .kind = ZT_BOOL, .off = ZT_NONE, .flags = ZT_NO_EFFECT,
     .why = "there is no tensor parallelism to partition gradients over"},
    {.name = "use_reentrant", .kind = ZT_BOOL, .off = ZT_NONE, .flags = ZT_NO_EFFECT,
     .why = "recomputation re-runs units, not autograd"},
};

/* P from --pipeline-stages and pipeline.stages. */
static zt_status pipeline_stages(const zt_ctx *c, json_t *obj, int64_t *stages)
{
    const int64_t cli = c->ov.pipeline_stages;
    json_t *v = obj ? json_object_get(obj, "stages") : NULL;
    int64_t given = -1;
    if (v && !json_is_null(v) && !zt_config_is_auto(v))
        ZT_TRY(zt_config_read_int(c, "pipeline.stages", v, 1, 1 << 20, &given));
    if (cli != -1 && cli < 1)
        return zt_config_err(c, ZT_ERR_CONFIG, NULL, "give --pipeline-stages 1 or more",
                             "--pipeline-stages %lld: expected a positive number of stages",
                             (long long)cli);
    if (cli >= 1 && given >= 1 && cli != given)
        return zt_config_err(c, ZT_ERR_CONFIG, "pipeline.stages",
                             "drop one of them, or write \"auto\" in the config to take the "
                             "command-line value",
                             "%lld in the config contradicts %lld from the command line",
                             (long long)given, (long long)cli);
    *stages = cli >= 1 ? cli : given >= 1 ? given : 1;
    return ZT_OK;
}

/* The partition method from --partition-method and pipeline.partition. */
static zt_status pipeline_partition(const zt_ctx *c, json_t *obj)
{
    zt_pipeline_config *p = &c->cfg->pipeline;
    json_t *v = obj ? json_object_get(obj, "partition") : NULL;
    const char *given = NULL;
    if (v && !json_is_null(v) && !zt_config_is_auto(v)) {
        if (!json_is_string(v))
            return zt_config_bad_value(c, "pipeline.partition", v,
                                       "\"best\", \"parameters\", \"uniform\" or \"type:REGEX\"");
        given = json_string_value(v);
        if (!strcmp(given, "best")) {
            zt_config_note(c->cfg, "pipeline.partition \"best\" has no effect (DeepSpeed never "
                                   "reads it): --partition-method decides");
            given = NULL;
        }
    }
    const char *cli = c->ov.partition_method;
    if (cli && given && strcmp(cli, given) != 0)
        return zt_config_err(c, ZT_ERR_CONFIG, "pipeline.partition", "drop one of them",
                             "\"%s\" in the config contradicts --partition-method %s", given,
                             cli);
    const char *method = cli ? cli : given;
    if (!method)
        return ZT_OK;
    if (strlen(method) >= sizeof p->partition)
        return zt_config_err(c, ZT_ERR_CONFIG, cli ? NULL : "pipeline.partition",
                             "use a shorter partition method",
                             "partition method of %zu characters", strlen(method));
    snprintf(p->partition, sizeof p->partition, "%s", method);
    return ZT_OK;
}

zt_status zt_config_parse_pipeline(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    zt_pipeline_config *p = &cfg->pipeline;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "pipeline", &obj));
    if (obj)
        ZT_TRY(zt_config_parse_keys(c, obj, "pipeline", zt_config_pipeline_keys,
                                    ZT_CONFIG_N_PIPELINE_KEYS, p));
    int64_t stages = 1;
    ZT_TRY(pipeline_stages(c, obj, &stages));
    if (c->world_size % stages != 0)
        return zt_config_err(c, ZT_ERR_CONFIG, NULL,
                             "run P x D ranks for P pipeline stages (mpirun -np), or change the "
                             "stages",
                             "num_stages (%lld) must divide distributed world size (%d)",
                             (long long)stages, c->world_size);
    p->stages = (int)stages;
    p->data_parallel = c->world_size / p->stages;
    ZT_TRY(pipeline_partition(c, obj));
    const char *sched = c->ov.pipeline_schedule;
    if (sched && strcmp(sched, "1f1b") != 0 && strcmp(sched, "gpipe") != 0)
        return zt_config_err(c, ZT_ERR_CONFIG, NULL, "--pipeline-schedule takes 1f1b or gpipe",
                             "--pipeline-schedule %s: unknown schedule", sched);
    if (sched)
        snprintf(p->schedule, sizeof p->schedule, "%s", sched);
    if (p->stages > 1 && (cfg->zero.offload_optimizer.device == ZT_OFFLOAD_NVME ||
                          cfg->zero.offload_param.device == ZT_OFFLOAD_NVME))
        return zt_config_err(c, ZT_ERR_UNSUPPORTED, "zero_optimization.offload_optimizer",
                             "use \"device\": \"cpu\" with pipeline stages",
                             "nvme offload with pipeline parallelism is not implemented yet");
    if (p->stages > 1 && cfg->zero.stage >= 2)
        return zt_config_err(c, ZT_ERR_CONFIG, "zero_optimization.stage",
                             "use ZeRO stage 0 or 1 with pipeline parallelism",
                             "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism");
    int64_t k = p->activation_checkpoint_interval;
    if (k > 0 && p->stages == 1)
        zt_config_note(cfg, "pipeline.activation_checkpoint_interval %lld has no effect without "
                            "pipeline stages",
                       (long long)k);
    else if (k > 0 && cfg->activation_checkpoint_interval >= 0)
        zt_config_note(cfg, "pipeline.activation_checkpoint_interval %lld: the command-line "
                            "checkpoint interval %lld takes precedence",
                       (long long)k, (long long)cfg->activation_checkpoint_interval);
    else if (k > 0) {
        cfg->activation_checkpoint_interval = k;
        zt_config_note(cfg, "pipeline.activation_checkpoint_interval %lld: a checkpoint every "
                            "%lld unit(s) within each stage",
                       (long long)k, (long long)k);
    }
    return ZT_OK;
}
