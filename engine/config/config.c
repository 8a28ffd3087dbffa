/*
 * config: DeepSpeed 0.19.6 JSON config -> zt_config (contract in config.h).
 *
 * Every section is a table of keys (type, destination, bounds, flags) read by
 * one generic loop; the few keys whose meaning depends on others (batch triple,
 * optimizer lr, deprecated names, offload devices, required scheduler params)
 * are marked ZT_CUSTOM in the table and read by the section's own code.
 * Defaults live in zt_config_defaults().
 *
 * Choices where DeepSpeed is lenient or silent (documented here, as DESIGN asks):
 * - Unknown keys are errors in every section, also at the top level and in
 *   activation_checkpointing where DeepSpeed ignores them: a typo must never
 *   leave a default silently in force.
 * - DeepSpeed top-level features this build lacks (flops_profiler, pipeline,
 *   amp, ...) parse when off; when on, zt_config_check_supported refuses them.
 * - offload_optimizer at stage 0 and offload_param below stage 3, which
 *   DeepSpeed silently ignores, are errors.
 * - activation_checkpointing takes effect here (DeepSpeed's engine never calls
 *   checkpointing.configure): number_checkpoints sets the checkpoint interval.
 * - Under fp16/bf16 with gradient accumulation, gradients accumulate in fp32
 *   unless data_types.grad_accum_dtype says otherwise (DeepSpeed: the model
 *   dtype); noted.
 * - "auto" means "the default" for every key (the HF Transformers convention);
 *   the batch fields and optimizer lr first take the command-line value, and
 *   scheduler warmup_max_lr "auto" means the optimizer lr. Each is a note.
 * - Two spellings of one setting given together (stage3_x and x, bf16 and
 *   bfloat16) are an error rather than one silently winning.
 * - Keys DeepSpeed accepts but that change nothing here (memory_efficient_linear,
 *   dump_state, ...) are type-checked and noted as having no effect.
 * - SGD lr defaults to 1e-3 as in torch >= 2.2 (noted).
 */
#include "engine/config/config.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ZT_PATH_MAX 256
#define ZT_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define ZT_SYNTAX_HINT                                                                     \
    "zerotrain reads JSON plus # // /* */ comments and trailing commas; other hjson "      \
    "syntax (unquoted or single-quoted strings) is not supported"

/* ------------------------------------------------------------------ key tables */

typedef enum {
    ZT_BOOL,
    ZT_INT,     /* int, integral JSON number (5e8 is fine) within [lo, hi] */
    ZT_I64,     /* int64_t, same */
    ZT_REAL,    /* double, finite within [lo, hi] */
    ZT_STR,     /* char[size] */
    ZT_CUSTOM,  /* known key read by the section's own code */
    ZT_FEATURE, /* DeepSpeed feature this build lacks: fine when off, recorded when on */
} zt_kind;

enum {
    ZT_NULLABLE = 1u << 0,  /* null keeps the default (an Optional field in DeepSpeed) */
    ZT_NO_EFFECT = 1u << 1, /* checked, but nothing in zerotrain depends on it: noted */
    ZT_POSITIVE = 1u << 2,  /* reals: strictly above lo */
};

#define ZT_NONE ((ptrdiff_t)-1)

typedef struct {
    const char *name;
    zt_kind kind;
    ptrdiff_t off; /* into the section's struct; ZT_NONE: checked only */
    double lo, hi;
    unsigned flags;
    size_t size;       /* ZT_STR: capacity of the destination array */
    const char *alias; /* the other spelling of the same setting */
    const char *why;   /* ZT_NO_EFFECT: why, for the note (optional) */
} zt_key;

#define ZT_K(n, k, o) .name = (n), .kind = (k), .off = (o)
#define ZT_NONNEG .lo = 0, .hi = INFINITY
#define ZT_ANYNUM .lo = -INFINITY, .hi = INFINITY
#define ZT_UNIT .lo = 0, .hi = 1
#define ZT_OFF(type, f) ((ptrdiff_t)offsetof(type, f))
#define ZT_CAP(type, f) sizeof(((type *)0)->f)

#define ZC(f) ZT_OFF(zt_config, f)
static const zt_key zt_top_keys[] = {
    {ZT_K("train_batch_size", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("train_micro_batch_size_per_gpu", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("gradient_accumulation_steps", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("steps_per_print", ZT_I64, ZC(steps_per_print)), ZT_NONNEG, .flags = ZT_NULLABLE},
    {ZT_K("gradient_clipping", ZT_REAL, ZC(gradient_clipping)), ZT_NONNEG},
    {ZT_K("prescale_gradients", ZT_BOOL, ZC(prescale_gradients))},
    {ZT_K("gradient_predivide_factor", ZT_REAL, ZC(gradient_predivide_factor)), ZT_NONNEG,
     .flags = ZT_POSITIVE},
    {ZT_K("wall_clock_breakdown", ZT_BOOL, ZC(wall_clock_breakdown))},
    {ZT_K("memory_breakdown", ZT_BOOL, ZC(memory_breakdown))},
    {ZT_K("zero_allow_untested_optimizer", ZT_BOOL, ZC(zero_allow_untested_optimizer))},
    /* Only about client optimizers, which a config-driven run never has. */
    {ZT_K("zero_force_ds_cpu_optimizer", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("dump_state", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("vocabulary_size", ZT_I64, ZT_NONE), ZT_NONNEG, .flags = ZT_NULLABLE | ZT_NO_EFFECT},
    {ZT_K("allgather_size", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("log_level", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("communication_data_type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("gradient_allreduce_op", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("optimizer", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("scheduler", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("fp16", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("bf16", ZT_CUSTOM, ZT_NONE), .alias = "bfloat16"},
    {ZT_K("bfloat16", ZT_CUSTOM, ZT_NONE), .alias = "bf16"},
    {ZT_K("zero_optimization", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("activation_checkpointing", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("csv_monitor", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("tensorboard", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("wandb", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("comet", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("trackio", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("timers", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("amp", ZT_FEATURE, ZT_NONE)},
    {ZT_K("torch_autocast", ZT_FEATURE, ZT_NONE)},
    {ZT_K("sparse_attention", ZT_FEATURE, ZT_NONE)},
    {ZT_K("sparse_gradients", ZT_FEATURE, ZT_NONE)},
    {ZT_K("flops_profiler", ZT_FEATURE, ZT_NONE)},
    {ZT_K("autotuning", ZT_FEATURE, ZT_NONE)},
    {ZT_K("elasticity", ZT_FEATURE, ZT_NONE)},
    {ZT_K("pipeline", ZT_FEATURE, ZT_NONE)},
    {ZT_K("compression_training", ZT_FEATURE, ZT_NONE)},
    {ZT_K("data_efficiency", ZT_FEATURE, ZT_NONE)},
    {ZT_K("curriculum_learning", ZT_FEATURE, ZT_NONE)},
    {ZT_K("progressive_layer_drop", ZT_FEATURE, ZT_NONE)},
    {ZT_K("eigenvalue", ZT_FEATURE, ZT_NONE)},
    {ZT_K("quantize_training", ZT_FEATURE, ZT_NONE)},
    {ZT_K("checkpoint", ZT_FEATURE, ZT_NONE)},
    {ZT_K("data_types", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("aio", ZT_FEATURE, ZT_NONE)},
    {ZT_K("nebula", ZT_FEATURE, ZT_NONE)},
    {ZT_K("hybrid_engine", ZT_FEATURE, ZT_NONE)},
    {ZT_K("comms_logger", ZT_FEATURE, ZT_NONE)},
    {ZT_K("weight_quantization", ZT_FEATURE, ZT_NONE)},
    {ZT_K("compile", ZT_FEATURE, ZT_NONE)},
    {ZT_K("tensor_parallel", ZT_FEATURE, ZT_NONE)},
    {ZT_K("disable_allgather", ZT_FEATURE, ZT_NONE)},
    {ZT_K("graph_harvesting", ZT_FEATURE, ZT_NONE)},
    {ZT_K("dataloader_drop_last", ZT_FEATURE, ZT_NONE)},
    {ZT_K("use_data_before_expert_parallelism", ZT_FEATURE, ZT_NONE)},
    {ZT_K("seq_parallel_comm_data_type", ZT_FEATURE, ZT_NONE)},
    {ZT_K("sequence_parallel_size", ZT_FEATURE, ZT_NONE)},
};

#define ZZ(f) ZT_OFF(zt_zero_config, f)
static const zt_key zt_zero_keys[] = {
    {ZT_K("stage", ZT_INT, ZZ(stage)), .lo = 0, .hi = 3},
    {ZT_K("contiguous_gradients", ZT_BOOL, ZZ(contiguous_gradients))},
    {ZT_K("reduce_scatter", ZT_BOOL, ZZ(reduce_scatter))},
    {ZT_K("reduce_bucket_size", ZT_I64, ZZ(reduce_bucket_size)), ZT_NONNEG},
    {ZT_K("use_multi_rank_bucket_allreduce", ZT_BOOL, ZZ(use_multi_rank_bucket_allreduce))},
    {ZT_K("allgather_partitions", ZT_BOOL, ZZ(allgather_partitions))},
    {ZT_K("allgather_bucket_size", ZT_I64, ZZ(allgather_bucket_size)), ZT_NONNEG},
    {ZT_K("overlap_comm", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("load_from_fp32_weights", ZT_BOOL, ZZ(load_from_fp32_weights))},
    {ZT_K("elastic_checkpoint", ZT_BOOL, ZZ(elastic_checkpoint))},
    {ZT_K("offload_param", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("offload_optimizer", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("zenflow", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("sub_group_size", ZT_I64, ZZ(sub_group_size)), ZT_NONNEG},
    {ZT_K("cpu_offload_param", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("cpu_offload_use_pin_memory", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("cpu_offload", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("stage3_prefetch_bucket_size", ZT_I64, ZZ(stage3_prefetch_bucket_size)), ZT_NONNEG,
     .alias = "prefetch_bucket_size"},
    {ZT_K("prefetch_bucket_size", ZT_I64, ZZ(stage3_prefetch_bucket_size)), ZT_NONNEG,
     .alias = "stage3_prefetch_bucket_size"},
    {ZT_K("stage3_param_persistence_threshold", ZT_I64, ZZ(stage3_param_persistence_threshold)),
     ZT_NONNEG, .alias = "param_persistence_threshold"},
    {ZT_K("param_persistence_threshold", ZT_I64, ZZ(stage3_param_persistence_threshold)),
     ZT_NONNEG, .alias = "stage3_param_persistence_threshold"},
    {ZT_K("stage3_model_persistence_threshold", ZT_I64, ZZ(stage3_model_persistence_threshold)),
     ZT_NONNEG, .alias = "model_persistence_threshold"},
    {ZT_K("model_persistence_threshold", ZT_I64, ZZ(stage3_model_persistence_threshold)),
     ZT_NONNEG, .alias = "stage3_model_persistence_threshold"},
    {ZT_K("stage3_max_live_parameters", ZT_I64, ZZ(stage3_max_live_parameters)), ZT_NONNEG,
     .alias = "max_live_parameters"},
    {ZT_K("max_live_parameters", ZT_I64, ZZ(stage3_max_live_parameters)), ZT_NONNEG,
     .alias = "stage3_max_live_parameters"},
    {ZT_K("stage3_max_reuse_distance", ZT_I64, ZZ(stage3_max_reuse_distance)), ZT_NONNEG,
     .alias = "max_reuse_distance"},
    {ZT_K("max_reuse_distance", ZT_I64, ZZ(stage3_max_reuse_distance)), ZT_NONNEG,
     .alias = "stage3_max_reuse_distance"},
    {ZT_K("stage3_gather_16bit_weights_on_model_save", ZT_BOOL,
          ZZ(stage3_gather_16bit_weights_on_model_save)),
     .alias = "gather_16bit_weights_on_model_save"},
    {ZT_K("gather_16bit_weights_on_model_save", ZT_BOOL,
          ZZ(stage3_gather_16bit_weights_on_model_save)),
     .alias = "stage3_gather_16bit_weights_on_model_save"},
    {ZT_K("stage3_gather_fp16_weights_on_model_save", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("stage3_module_granularity_threshold", ZT_I64, ZT_NONE), ZT_ANYNUM,
     .flags = ZT_NO_EFFECT, .alias = "module_granularity_threshold"},
    {ZT_K("module_granularity_threshold", ZT_I64, ZT_NONE), ZT_ANYNUM, .flags = ZT_NO_EFFECT,
     .alias = "stage3_module_granularity_threshold"},
    {ZT_K("stage3_use_all_reduce_for_fetch_params", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .alias = "use_all_reduce_for_fetch_params"},
    {ZT_K("use_all_reduce_for_fetch_params", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .alias = "stage3_use_all_reduce_for_fetch_params"},
    {ZT_K("stage3_allgather_sequential", ZT_BOOL, ZZ(stage3_allgather_sequential)),
     .alias = "allgather_sequential"},
    {ZT_K("allgather_sequential", ZT_BOOL, ZZ(stage3_allgather_sequential)),
     .alias = "stage3_allgather_sequential"},
    {ZT_K("ignore_unused_parameters", ZT_BOOL, ZZ(ignore_unused_parameters))},
    {ZT_K("legacy_stage1", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("round_robin_gradients", ZT_BOOL, ZZ(round_robin_gradients))},
    {ZT_K("zero_hpz_partition_size", ZT_I64, ZZ(zero_hpz_partition_size)), ZT_NONNEG},
    {ZT_K("zero_quantized_weights", ZT_BOOL, ZZ(zero_quantized_weights))},
    {ZT_K("zero_quantized_nontrainable_weights", ZT_BOOL,
          ZZ(zero_quantized_nontrainable_weights))},
    {ZT_K("zero_quantized_gradients", ZT_BOOL, ZZ(zero_quantized_gradients))},
    {ZT_K("zeropp_loco_param", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("mics_shard_size", ZT_I64, ZZ(mics_shard_size)), ZT_ANYNUM},
    {ZT_K("mics_hierarchical_params_gather", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("memory_efficient_linear", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("pipeline_loading_checkpoint", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("override_module_apply", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("log_trace_cache_warnings", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("enable_sanity_checks", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
};

#define ZO(f) ZT_OFF(zt_offload_config, f)
static const zt_key zt_offload_optimizer_keys[] = {
    {ZT_K("device", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("nvme_path", ZT_STR, ZO(nvme_path)), .size = ZT_CAP(zt_offload_config, nvme_path),
     .flags = ZT_NULLABLE},
    {ZT_K("buffer_count", ZT_I64, ZO(buffer_count)), ZT_NONNEG},
    {ZT_K("pin_memory", ZT_BOOL, ZO(pin_memory))},
    {ZT_K("pipeline_read", ZT_BOOL, ZO(pipeline_read))},
    {ZT_K("pipeline_write", ZT_BOOL, ZO(pipeline_write))},
    {ZT_K("fast_init", ZT_BOOL, ZO(fast_init))},
    {ZT_K("ratio", ZT_REAL, ZO(ratio)), ZT_UNIT},
    {ZT_K("super_offload", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("convert_grad_on_cpu", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("cpuadam_cores_perc", ZT_REAL, ZT_NONE), ZT_UNIT, .flags = ZT_NO_EFFECT},
};

static const zt_key zt_offload_param_keys[] = {
    {ZT_K("device", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("nvme_path", ZT_STR, ZO(nvme_path)), .size = ZT_CAP(zt_offload_config, nvme_path),
     .flags = ZT_NULLABLE},
    {ZT_K("buffer_count", ZT_I64, ZO(buffer_count)), ZT_NONNEG},
    {ZT_K("buffer_size", ZT_I64, ZO(buffer_size)), ZT_NONNEG},
    {ZT_K("max_in_cpu", ZT_I64, ZO(max_in_cpu)), ZT_NONNEG},
    {ZT_K("pin_memory", ZT_BOOL, ZO(pin_memory))},
};

#define ZF(f) ZT_OFF(zt_fp16_config, f)
static const zt_key zt_fp16_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZF(enabled))},
    {ZT_K("auto_cast", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "the models' inputs are token ids or fp32 data that the first unit reads in "
            "fp32: there is nothing to cast"},
    {ZT_K("loss_scale", ZT_REAL, ZF(loss_scale)), ZT_NONNEG},
    /* 2^power must be a finite float32 scale. */
    {ZT_K("initial_scale_power", ZT_INT, ZF(initial_scale_power)), .lo = -126, .hi = 127},
    {ZT_K("loss_scale_window", ZT_I64, ZF(loss_scale_window)), ZT_NONNEG},
    /* 0 would never let an overflow halve the scale. */
    {ZT_K("hysteresis", ZT_INT, ZF(hysteresis)), .lo = 1, .hi = 1e9},
    {ZT_K("consecutive_hysteresis", ZT_BOOL, ZF(consecutive_hysteresis))},
    {ZT_K("min_loss_scale", ZT_REAL, ZF(min_loss_scale)), ZT_NONNEG},
    {ZT_K("fp16_master_weights_and_grads", ZT_BOOL, ZF(fp16_master_weights_and_grads))},
};

#define ZB(f) ZT_OFF(zt_bf16_config, f)
static const zt_key zt_bf16_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZB(enabled))},
    {ZT_K("immediate_grad_update", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "it only chooses when DeepSpeed's bf16 optimizer moves each gradient into its "
            "accumulator, not what is accumulated"},
    {ZT_K("check_grad_overflow", ZT_BOOL, ZB(check_grad_overflow))},
    {ZT_K("bf16_master_weights_and_grads", ZT_BOOL, ZB(bf16_master_weights_and_grads))},
    {ZT_K("bf16_optimizer_states", ZT_BOOL, ZB(bf16_optimizer_states))},
};

#define ZA(f) ZT_OFF(zt_act_ckpt_config, f)
static const zt_key zt_act_ckpt_keys[] = {
    /* Read for DeepSpeed's checks between them; what they do needs tensor parallelism. */
    {ZT_K("partition_activations", ZT_BOOL, ZA(partition_activations)), .flags = ZT_NO_EFFECT,
     .why = "it splits checkpoints across tensor-parallel ranks; without tensor parallelism "
            "each rank's activations are its own"},
    {ZT_K("contiguous_memory_optimization", ZT_BOOL, ZA(contiguous_memory_optimization)),
     .flags = ZT_NO_EFFECT,
     .why = "checkpoints are already one contiguous buffer per boundary"},
    {ZT_K("cpu_checkpointing", ZT_BOOL, ZA(cpu_checkpointing))},
    {ZT_K("number_checkpoints", ZT_I64, ZA(number_checkpoints)), .lo = 1, .hi = INFINITY,
     .flags = ZT_NULLABLE},
    {ZT_K("synchronize_checkpoint_boundary", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "it only synchronizes the device before and after each checkpointed call"},
    {ZT_K("profile", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "it only logs forward and backward times of each checkpointed call"},
};

static const zt_key zt_data_types_keys[] = {
    {ZT_K("grad_accum_dtype", ZT_CUSTOM, ZT_NONE)},
};

/* Monitors share zt_csv_monitor_config: the csv one is kept, the others are
 * read into scratch only to learn whether they are enabled. */
#define ZM(f) ZT_OFF(zt_csv_monitor_config, f)
static const zt_key zt_csv_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("output_path", ZT_STR, ZM(output_path)),
     .size = ZT_CAP(zt_csv_monitor_config, output_path)},
    {ZT_K("job_name", ZT_STR, ZM(job_name)), .size = ZT_CAP(zt_csv_monitor_config, job_name)},
};

static const zt_key zt_wandb_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("group", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("team", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("project", ZT_STR, ZT_NONE)},
};

static const zt_key zt_comet_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("samples_log_interval", ZT_I64, ZT_NONE), ZT_NONNEG},
    {ZT_K("project", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("workspace", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("api_key", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("experiment_name", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("experiment_key", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("online", ZT_BOOL, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("mode", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
};

static const zt_key zt_trackio_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("project", ZT_STR, ZT_NONE)},
};

static const zt_key zt_timers_keys[] = {
    {ZT_K("throughput", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_throughput_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZC(throughput_timer))},
    {ZT_K("synchronized", ZT_BOOL, ZT_NONE)},
};

#define ZP(f) ZT_OFF(zt_optim_config, f)
static const zt_key zt_optimizer_keys[] = {
    {ZT_K("type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("params", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("legacy_fusion", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
};

static const zt_key zt_adam_keys[] = {
    {ZT_K("lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("betas", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("eps", ZT_REAL, ZP(eps)), ZT_NONNEG},
    {ZT_K("weight_decay", ZT_REAL, ZP(weight_decay)), ZT_NONNEG},
    {ZT_K("bias_correction", ZT_BOOL, ZP(bias_correction))},
    {ZT_K("adam_w_mode", ZT_BOOL, ZP(adam_w_mode))},
    {ZT_K("torch_adam", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("amsgrad", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("set_grad_none", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("max_grad_norm", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_sgd_keys[] = {
    {ZT_K("lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("momentum", ZT_REAL, ZP(momentum)), ZT_NONNEG},
    {ZT_K("dampening", ZT_REAL, ZP(dampening)), ZT_ANYNUM},
    {ZT_K("weight_decay", ZT_REAL, ZP(weight_decay)), ZT_NONNEG},
    {ZT_K("nesterov", ZT_BOOL, ZP(nesterov))},
    {ZT_K("maximize", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("foreach", ZT_BOOL, ZT_NONE), .flags = ZT_NULLABLE | ZT_NO_EFFECT},
    {ZT_K("differentiable", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("fused", ZT_BOOL, ZT_NONE), .flags = ZT_NULLABLE | ZT_NO_EFFECT},
    {ZT_K("max_grad_norm", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_scheduler_keys[] = {
    {ZT_K("type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("params", ZT_CUSTOM, ZT_NONE)},
};

#define ZS(f) ZT_OFF(zt_sched_config, f)
static const zt_key zt_warmup_lr_keys[] = {
    {ZT_K("warmup_min_lr", ZT_REAL, ZS(warmup_min_lr)), ZT_NONNEG},
    {ZT_K("warmup_max_lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_num_steps", ZT_I64, ZS(warmup_num_steps)), ZT_NONNEG},
    {ZT_K("warmup_type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_warmup_decay_keys[] = {
    {ZT_K("total_num_steps", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_min_lr", ZT_REAL, ZS(warmup_min_lr)), ZT_NONNEG},
    {ZT_K("warmup_max_lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_num_steps", ZT_I64, ZS(warmup_num_steps)), ZT_NONNEG},
    {ZT_K("warmup_type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_warmup_cosine_keys[] = {
    {ZT_K("total_num_steps", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_min_ratio", ZT_REAL, ZS(warmup_min_ratio)), ZT_NONNEG},
    {ZT_K("warmup_num_steps", ZT_I64, ZS(warmup_num_steps)), ZT_NONNEG},
    {ZT_K("cos_min_ratio", ZT_REAL, ZS(cos_min_ratio)), ZT_NONNEG},
    {ZT_K("warmup_type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_one_cycle_keys[] = {
    {ZT_K("cycle_min_lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("cycle_max_lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("decay_lr_rate", ZT_REAL, ZS(decay_lr_rate)), ZT_ANYNUM},
    /* The cycle length divides: the first half must be at least one step. */
    {ZT_K("cycle_first_step_size", ZT_I64, ZS(cycle_first_step_size)), .lo = 1,
     .hi = INFINITY},
    {ZT_K("cycle_second_step_size", ZT_I64, ZS(cycle_second_step_size)), ZT_NONNEG,
     .flags = ZT_NULLABLE},
    {ZT_K("cycle_first_stair_count", ZT_I64, ZS(cycle_first_stair_count)), ZT_NONNEG},
    {ZT_K("cycle_second_stair_count", ZT_I64, ZS(cycle_second_stair_count)), ZT_NONNEG,
     .flags = ZT_NULLABLE},
    {ZT_K("decay_step_size", ZT_I64, ZS(decay_step_size)), ZT_NONNEG},
    {ZT_K("cycle_momentum", ZT_BOOL, ZS(cycle_momentum))},
    {ZT_K("cycle_min_mom", ZT_REAL, ZS(cycle_min_mom)), ZT_NONNEG},
    {ZT_K("cycle_max_mom", ZT_REAL, ZS(cycle_max_mom)), ZT_NONNEG},
    {ZT_K("decay_mom_rate", ZT_REAL, ZS(decay_mom_rate)), ZT_ANYNUM},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_lr_range_keys[] = {
    {ZT_K("lr_range_test_min_lr", ZT_REAL, ZS(lr_range_test_min_lr)), ZT_NONNEG},
    {ZT_K("lr_range_test_step_size", ZT_I64, ZS(lr_range_test_step_size)), .lo = 1,
     .hi = INFINITY},
    {ZT_K("lr_range_test_step_rate", ZT_REAL, ZS(lr_range_test_step_rate)), ZT_ANYNUM},
    {ZT_K("lr_range_test_staircase", ZT_BOOL, ZS(lr_range_test_staircase))},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

typedef struct {
    const char *name;
    zt_sched_type type;
    const zt_key *keys;
    size_t n_keys;
} zt_sched_entry;

static const zt_sched_entry zt_schedulers[] = {
    {"WarmupLR", ZT_SCHED_WARMUP_LR, zt_warmup_lr_keys, ZT_LEN(zt_warmup_lr_keys)},
    {"WarmupDecayLR", ZT_SCHED_WARMUP_DECAY_LR, zt_warmup_decay_keys,
     ZT_LEN(zt_warmup_decay_keys)},
    {"WarmupCosineLR", ZT_SCHED_WARMUP_COSINE_LR, zt_warmup_cosine_keys,
     ZT_LEN(zt_warmup_cosine_keys)},
    {"OneCycle", ZT_SCHED_ONE_CYCLE, zt_one_cycle_keys, ZT_LEN(zt_one_cycle_keys)},
    {"LRRangeTest", ZT_SCHED_LR_RANGE_TEST, zt_lr_range_keys, ZT_LEN(zt_lr_range_keys)},
};

/* zt_offload_device by value. */
static const char *const zt_offload_devices[] = {"none", "cpu", "nvme"};

/* Names DeepSpeed hands to torch.optim.lr_scheduler (getattr, case-sensitive). */
static const char *const zt_torch_schedulers[] = {
    "LambdaLR",          "MultiplicativeLR",  "StepLR",     "MultiStepLR",
    "ConstantLR",        "LinearLR",          "ExponentialLR", "SequentialLR",
    "CosineAnnealingLR", "ChainedScheduler",  "ReduceLROnPlateau", "CyclicLR",
    "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR",
};

/* DeepSpeed's own optimizers, matched on type.lower(). */
static const char *const zt_ds_optimizers[] = {
    "adagrad", "adam",   "adamw", "lamb",  "onebitadam", "onebitlamb",
    "zerooneadam", "muadam", "muadamw", "musgd", "lion", "muon",
};

/* torch.optim classes DeepSpeed would getattr (case-sensitive). */
static const char *const zt_torch_optimizers[] = {
    "Adadelta", "Adafactor", "Adagrad", "Adam",  "AdamW",      "Adamax", "ASGD",
    "LBFGS",    "NAdam",     "RAdam",   "RMSprop", "Rprop",    "SGD",    "SparseAdam",
};

/* Every table by the path it is read at: unknown keys are looked up here to say
 * where a key belongs when it was put in the wrong section. */
typedef struct {
    const char *path;
    const zt_key *keys;
    size_t n;
} zt_section_ref;

static const zt_section_ref zt_sections[] = {
    {"", zt_top_keys, ZT_LEN(zt_top_keys)},
    {"zero_optimization", zt_zero_keys, ZT_LEN(zt_zero_keys)},
    {"zero_optimization.offload_optimizer", zt_offload_optimizer_keys,
     ZT_LEN(zt_offload_optimizer_keys)},
    {"zero_optimization.offload_param", zt_offload_param_keys, ZT_LEN(zt_offload_param_keys)},
    {"fp16", zt_fp16_keys, ZT_LEN(zt_fp16_keys)},
    {"bf16", zt_bf16_keys, ZT_LEN(zt_bf16_keys)},
    {"optimizer", zt_optimizer_keys, ZT_LEN(zt_optimizer_keys)},
    {"optimizer.params", zt_adam_keys, ZT_LEN(zt_adam_keys)},
    {"optimizer.params", zt_sgd_keys, ZT_LEN(zt_sgd_keys)},
    {"scheduler", zt_scheduler_keys, ZT_LEN(zt_scheduler_keys)},
    {"scheduler.params", zt_warmup_decay_keys, ZT_LEN(zt_warmup_decay_keys)},
    {"scheduler.params", zt_warmup_cosine_keys, ZT_LEN(zt_warmup_cosine_keys)},
    {"scheduler.params", zt_one_cycle_keys, ZT_LEN(zt_one_cycle_keys)},
    {"scheduler.params", zt_lr_range_keys, ZT_LEN(zt_lr_range_keys)},
    {"activation_checkpointing", zt_act_ckpt_keys, ZT_LEN(zt_act_ckpt_keys)},
    {"data_types", zt_data_types_keys, ZT_LEN(zt_data_types_keys)},
    {"csv_monitor", zt_csv_keys, ZT_LEN(zt_csv_keys)},
    {"timers", zt_timers_keys, ZT_LEN(zt_timers_keys)},
    {"timers.throughput", zt_throughput_keys, ZT_LEN(zt_throughput_keys)},
};

/* ------------------------------------------------------------------ context */

typedef struct {
    char *path;
    int line;
} zt_key_line;

typedef struct {
    const char *name; /* file name for messages */
    zt_config *cfg;
    zt_config_overrides ov;
    int world_size;
    zt_key_line *lines; /* JSON path -> line of its key, from the text as written */
    size_t n_lines, cap_lines;
} zt_ctx;

static void zt_ctx_free(zt_ctx *c)
{
    for (size_t i = 0; i < c->n_lines; i++)
        free(c->lines[i].path);
    free(c->lines);
}

static int zt_line_of(const zt_ctx *c, const char *path)
{
    for (size_t i = 0; i < c->n_lines; i++)
        if (strcmp(c->lines[i].path, path) == 0)
            return c->lines[i].line;
    return 0;
}

/* strlcpy: a truncated path is still a usable label. */
static void zt_copy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* out (ZT_PATH_MAX) = parent.key, or key at the top level. */
static void zt_join(char *out, const char *parent, const char *key)
{
    zt_copy(out, ZT_PATH_MAX, parent);
    size_t n = strlen(out);
    if (parent[0] && n + 1 < ZT_PATH_MAX)
        out[n++] = '.';
    zt_copy(out + n, ZT_PATH_MAX - n, key);
}

__attribute__((format(printf, 5, 6))) static zt_status
zt_err(const zt_ctx *c, zt_status st, const char *path, const char *hint, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!path)
        return zt_fail(st, hint, "%s: %s", c->name, what);
    int line = zt_line_of(c, path);
    if (line > 0)
        return zt_fail(st, hint, "%s:%d: %s: %s", c->name, line, path, what);
    return zt_fail(st, hint, "%s: %s: %s", c->name, path, what);
}

__attribute__((format(printf, 2, 3))) static void zt_note(zt_config *cfg, const char *fmt, ...)
{
    if (cfg->n_notes >= ZT_CONFIG_MAX_NOTES)
        return;
    char *slot = cfg->notes[cfg->n_notes++];
    if (cfg->n_notes == ZT_CONFIG_MAX_NOTES) {
        snprintf(slot, ZT_CONFIG_NOTE_LEN, "(further config notes omitted)");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(slot, ZT_CONFIG_NOTE_LEN, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ text preparation */

/* Blanks comments and trailing commas with spaces, keeping every newline, so
 * jansson's line:column stay those of the file as written. */
static zt_status zt_strip_hjson(const zt_ctx *c, char *s)
{
    if ((unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
        s[0] = s[1] = s[2] = ' ';
    bool in_str = false;
    int line = 1;
    for (char *p = s; *p; p++) {
        if (*p == '\n')
            line++;
        if (in_str) {
            if (*p == '\\' && p[1] && p[1] != '\n')
                p++;
            else if (*p == '"')
                in_str = false;
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                *p++ = ' ';
            if (!*p)
                break;
            line++;
        } else if (p[0] == '/' && p[1] == '*') {
            int start = line;
            p[0] = p[1] = ' ';
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++) {
                if (*p == '\n')
                    line++;
                else
                    *p = ' ';
            }
            if (!*p)
                return zt_fail(ZT_ERR_CONFIG, ZT_SYNTAX_HINT, "%s:%d: unterminated /* comment",
                               c->name, start);
            p[0] = p[1] = ' ';
            p++;
        }
    }
    in_str = false;
    for (char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                in_str = false;
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == ',') {
            const char *q = p + 1;
            while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
                q++;
            if (*q == '}' || *q == ']')
                *p = ' ';
        }
    }
    return ZT_OK;
}

static void zt_index_add(zt_ctx *c, const char *path, int line)
{
    if (c->n_lines == c->cap_lines) {
        size_t cap = c->cap_lines ? 2 * c->cap_lines : 64;
        zt_key_line *v = realloc(c->lines, cap * sizeof *v);
        if (!v)
            return; /* line numbers are a courtesy: messages then go without them */
        c->lines = v;
        c->cap_lines = cap;
    }
    char *p = strdup(path);
    if (!p)
        return;
    c->lines[c->n_lines].path = p;
    c->lines[c->n_lines].line = line;
    c->n_lines++;
}

/* Records "json.path -> line" for every key by following the nesting of the
 * comment-free text. Malformed text only ends the scan early: jansson reports it. */
static void zt_index_keys(zt_ctx *c, const char *s)
{
    enum { MAX_DEPTH = 64 };
    struct {
        bool object;
        size_t path_len;
    } stack[MAX_DEPTH];
    char path[ZT_PATH_MAX] = "";
    char key_path[ZT_PATH_MAX] = ""; /* path of the last key read, until its value opens */
    int depth = 0, line = 1;
    bool expect_key = false, have_key = false;

    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '\n':
            line++;
            break;
        case '"': {
            char key[ZT_PATH_MAX];
            size_t n = 0;
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                if (*p == '\n')
                    line++;
                if (n + 1 < sizeof key)
                    key[n++] = *p;
            }
            if (!*p)
                return;
            key[n] = '\0';
            if (depth > 0 && stack[depth - 1].object && expect_key) {
                zt_join(key_path, path, key);
                zt_index_add(c, key_path, line);
                expect_key = false;
                have_key = true;
            }
            break;
        }
        case '{':
        case '[':
            if (depth == MAX_DEPTH)
                return;
            stack[depth].object = *p == '{';
            stack[depth].path_len = strlen(path);
            if (depth > 0 && stack[depth - 1].object && have_key)
                snprintf(path, sizeof path, "%s", key_path);
            else if (depth > 0 && !stack[depth - 1].object)
                strncat(path, "[]", sizeof path - strlen(path) - 1);
            depth++;
            expect_key = *p == '{';
            have_key = false;
            break;
        case '}':
        case ']':
            if (depth == 0)
                return;
            depth--;
            path[stack[depth].path_len] = '\0';
            expect_key = have_key = false;
            break;
        case ',':
            expect_key = depth > 0 && stack[depth - 1].object;
            have_key = false;
            break;
        default:
            break;
        }
    }
}

static zt_status zt_duplicate_key_error(const zt_ctx *c, const json_error_t *err)
{
    /* jansson: "duplicate object key near '"stage"'" */
    char key[128] = "";
    const char *t = strstr(err->text, "near '\"");
    if (t) {
        t += strlen("near '\"");
        size_t n = 0;
        while (t[n] && t[n] != '"' && n + 1 < sizeof key) {
            key[n] = t[n];
            n++;
        }
        key[n] = '\0';
    }
    const char *where = NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < c->n_lines && !where; i++) {
        const char *p = c->lines[i].path;
        size_t plen = strlen(p);
        bool tail = plen >= klen && strcmp(p + plen - klen, key) == 0 &&
                    (plen == klen || p[plen - klen - 1] == '.');
        if (c->lines[i].line == err->line && tail)
            where = p;
    }
    return zt_fail(ZT_ERR_CONFIG, "remove one of the two",
                   "%s:%d:%d: Duplicate keys in DeepSpeed config: ['%s']%s%s%s", c->name,
                   err->line, err->column, key, where ? " (" : "", where ? where : "",
                   where ? " is given twice)" : "");
}

static zt_status zt_load_json(const zt_ctx *c, const char *text, json_t **root)
{
    json_error_t err;
    *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!*root) {
        if (json_error_code(&err) == json_error_duplicate_key)
            return zt_duplicate_key_error(c, &err);
        return zt_fail(ZT_ERR_CONFIG, ZT_SYNTAX_HINT, "%s:%d:%d: %s", c->name, err.line,
                       err.column, err.text);
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return zt_fail(ZT_ERR_CONFIG, "a DeepSpeed config is one JSON object: { ... }",
                       "%s: the config must be a JSON object", c->name);
    }
    return ZT_OK;
}

/* ------------------------------------------------------------------ values */

static bool zt_is_auto(const json_t *v)
{
    return v && json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

/* A key counts as given unless absent or "auto" (DeepSpeed drops "auto" values
 * before anything looks at them). */
static bool zt_given(const json_t *obj, const char *key)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !zt_is_auto(v);
}

/* Absent, null or "auto": the default applies. */
static bool zt_unset(const json_t *obj, const char *key)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return !v || json_is_null(v) || zt_is_auto(v);
}

/* The value of a ZT_CUSTOM key, or NULL for absent, null and "auto" (noted). */
static json_t *zt_value(const zt_ctx *c, json_t *obj, const char *path, const char *key)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (zt_is_auto(v)) {
        char kp[ZT_PATH_MAX];
        zt_join(kp, path, key);
        zt_note(c->cfg, "%s \"auto\" -> default", kp);
    }
    return v && !json_is_null(v) && !zt_is_auto(v) ? v : NULL;
}

static void zt_value_text(const json_t *v, char *buf, size_t n)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (s && strlen(s) > 80)
        snprintf(buf, n, "%.77s...", s);
    else
        snprintf(buf, n, "%s", s ? s : "?");
    free(s);
}

static zt_status zt_bad_value(const zt_ctx *c, const char *path, const json_t *v,
                              const char *expected)
{
    char got[96];
    zt_value_text(v, got, sizeof got);
    return zt_err(c, ZT_ERR_CONFIG, path, NULL, "got %s, expected %s", got, expected);
}

static void zt_expect_int(double lo, double hi, char *buf, size_t n)
{
    if (isinf(lo) && isinf(hi))
        snprintf(buf, n, "an integer");
    else if (isinf(hi) && lo == 0)
        snprintf(buf, n, "a non-negative integer");
    else if (isinf(hi) && lo == 1)
        snprintf(buf, n, "a positive integer");
    else if (isinf(hi))
        snprintf(buf, n, "an integer >= %.0f", lo);
    else
        snprintf(buf, n, "an integer in %.0f..%.0f", lo, hi);
}

static void zt_expect_real(double lo, double hi, bool positive, char *buf, size_t n)
{
    if (isinf(lo) && isinf(hi))
        snprintf(buf, n, "a finite number");
    else if (isinf(hi) && lo == 0)
        snprintf(buf, n, positive ? "a positive number" : "a non-negative number");
    else if (isinf(hi))
        snprintf(buf, n, positive ? "a number > %g" : "a number >= %g", lo);
    else
        snprintf(buf, n, "a number in [%g, %g]", lo, hi);
}

static zt_status zt_read_bool(const zt_ctx *c, const char *path, const json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return zt_bad_value(c, path, v, "true or false");
    *out = json_is_true(v);
    return ZT_OK;
}

/* Integers may be written as integral reals: configs write 5e8. */
static zt_status zt_read_int(const zt_ctx *c, const char *path, const json_t *v, double lo,
                             double hi, int64_t *out)
{
    char expected[64];
    zt_expect_int(lo, hi, expected, sizeof expected);
    int64_t i;
    if (json_is_integer(v)) {
        i = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d == floor(d) && d >= -0x1p63 && d < 0x1p63))
            return zt_bad_value(c, path, v, expected);
        i = (int64_t)d;
    } else {
        return zt_bad_value(c, path, v, expected);
    }
    if ((double)i < lo || (double)i > hi)
        return zt_bad_value(c, path, v, expected);
    *out = i;
    return ZT_OK;
}

static zt_status zt_read_real(const zt_ctx *c, const char *path, const json_t *v, double lo,
                              double hi, bool positive, double *out)
{
    char expected[64];
    zt_expect_real(lo, hi, positive, expected, sizeof expected);
    if (!json_is_number(v))
        return zt_bad_value(c, path, v, expected);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (positive && d <= lo))
        return zt_bad_value(c, path, v, expected);
    *out = d;
    return ZT_OK;
}

/* dst may be NULL: check the type only. */
static zt_status zt_read_str(const zt_ctx *c, const char *path, const json_t *v, char *dst,
                             size_t size)
{
    if (!json_is_string(v))
        return zt_bad_value(c, path, v, "a string");
    if (!dst)
        return ZT_OK;
    const char *s = json_string_value(v);
    if (strlen(s) >= size)
        return zt_err(c, ZT_ERR_CONFIG, path, NULL,
                      "longer than the %zu characters zerotrain keeps", size - 1);
    memcpy(dst, s, strlen(s) + 1);
    return ZT_OK;
}

/* One of `names` (case-insensitive when nocase), as its index. */
static zt_status zt_read_choice(const zt_ctx *c, const char *path, const json_t *v,
                                const char *const *names, size_t n, bool nocase, size_t *idx)
{
    if (json_is_string(v)) {
        for (size_t i = 0; i < n; i++) {
            const char *s = json_string_value(v);
            if (nocase ? strcasecmp(s, names[i]) == 0 : strcmp(s, names[i]) == 0) {
                *idx = i;
                return ZT_OK;
            }
        }
    }
    char expected[160] = "one of";
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(expected);
        snprintf(expected + len, sizeof expected - len, "%s \"%s\"", i ? "," : "", names[i]);
    }
    return zt_bad_value(c, path, v, expected);
}

static zt_status zt_read_key(const zt_ctx *c, const char *path, const zt_key *k,
                             const json_t *v, void *dst)
{
    switch (k->kind) {
    case ZT_BOOL: {
        bool b = false;
        ZT_TRY(zt_read_bool(c, path, v, &b));
        if (dst)
            *(bool *)dst = b;
        return ZT_OK;
    }
    case ZT_INT:
    case ZT_I64: {
        int64_t i;
        ZT_TRY(zt_read_int(c, path, v, k->lo, k->hi, &i));
        if (dst && k->kind == ZT_INT)
            *(int *)dst = (int)i;
        else if (dst)
            *(int64_t *)dst = i;
        return ZT_OK;
    }
    case ZT_REAL: {
        double d;
        ZT_TRY(zt_read_real(c, path, v, k->lo, k->hi, (k->flags & ZT_POSITIVE) != 0, &d));
        if (dst)
            *(double *)dst = d;
        return ZT_OK;
    }
    case ZT_STR:
        return zt_read_str(c, path, v, dst, k->size);
    case ZT_CUSTOM:
    case ZT_FEATURE:
        break;
    }
    return zt_fail(ZT_ERR_INTERNAL, NULL, "config key %s has no generic reader", path);
}

static void zt_format_stored(const zt_key *k, const void *dst, char *buf, size_t n)
{
    switch (k->kind) {
    case ZT_BOOL: snprintf(buf, n, "%s", *(const bool *)dst ? "true" : "false"); return;
    case ZT_INT: snprintf(buf, n, "%d", *(const int *)dst); return;
    case ZT_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)dst); return;
    case ZT_REAL: snprintf(buf, n, "%g", *(const double *)dst); return;
    case ZT_STR: snprintf(buf, n, "\"%.60s\"", (const char *)dst); return;
    case ZT_CUSTOM:
    case ZT_FEATURE: break;
    }
    snprintf(buf, n, "default");
}

/* ------------------------------------------------------------------ unknown keys */

static size_t zt_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[64];
    if (la >= ZT_LEN(row) || lb >= ZT_LEN(row))
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The candidate within max(2, len/3) edits of `word`, closest first. */
static const char *zt_closest(const char *word, const char *const *cands, size_t n)
{
    size_t limit = strlen(word) / 3 > 2 ? strlen(word) / 3 : 2;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = zt_edit_distance(word, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best;
}

static const zt_key *zt_find_key(const zt_key *keys, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

static zt_status zt_unknown_key(const zt_ctx *c, const char *kp, const char *name,
                                const char *section, const zt_key *keys, size_t n)
{
    const char *names[128];
    size_t m = n < ZT_LEN(names) ? n : ZT_LEN(names);
    for (size_t i = 0; i < m; i++)
        names[i] = keys[i].name;
    char suggestion[ZT_PATH_MAX + 32] = "";
    const char *close = zt_closest(name, names, m);
    if (close) {
        snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", close);
    } else {
        for (size_t s = 0; s < ZT_LEN(zt_sections) && !suggestion[0]; s++) {
            if (strcmp(zt_sections[s].path, section) == 0 ||
                !zt_find_key(zt_sections[s].keys, zt_sections[s].n, name))
                continue;
            char where[ZT_PATH_MAX];
            zt_join(where, zt_sections[s].path, name);
            snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", where);
        }
    }
    if (suggestion[0])
        return zt_err(c, ZT_ERR_CONFIG, kp,
                      "unknown keys are refused so that a typo cannot leave a default in force",
                      "unknown key%s", suggestion);
    char hint[900];
    int len = snprintf(hint, sizeof hint, "keys DeepSpeed 0.19.6 accepts %s%s:",
                       section[0] ? "in " : "at the top level", section);
    for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof hint; i++) {
        if (keys[i].kind == ZT_FEATURE)
            continue; /* accepted only to be refused: not worth suggesting */
        size_t room = sizeof hint - (size_t)len;
        if (strlen(keys[i].name) + 8 > room) {
            snprintf(hint + len, room, " ...");
            break;
        }
        len += snprintf(hint + len, room, " %s", keys[i].name);
    }
    return zt_err(c, ZT_ERR_CONFIG, kp, hint, "unknown key");
}

/* ------------------------------------------------------------------ generic section reader */

static bool zt_feature_on(const json_t *v)
{
    if (json_is_null(v) || json_is_false(v))
        return false;
    if (json_is_object(v)) {
        const json_t *e = json_object_get(v, "enabled");
        return json_object_size(v) > 0 && !(e && (json_is_false(e) || zt_is_auto(e)));
    }
    return true;
}

static void zt_record_unbuilt(zt_config *cfg, const char *path)
{
    if (!cfg->unbuilt_feature[0])
        zt_copy(cfg->unbuilt_feature, sizeof cfg->unbuilt_feature, path);
}

/* Reads every key of `obj` through `keys` into `base`; unknown keys, wrong
 * types and two spellings of one setting are errors. */
static zt_status zt_parse_keys(const zt_ctx *c, json_t *obj, const char *path,
                               const zt_key *keys, size_t n, void *base)
{
    const char *name;
    json_t *v;
    json_object_foreach(obj, name, v) {
        char kp[ZT_PATH_MAX];
        zt_join(kp, path, name);
        const zt_key *k = zt_find_key(keys, n, name);
        if (!k)
            return zt_unknown_key(c, kp, name, path, keys, n);
        if (k->alias && !zt_is_auto(v) && zt_given(obj, k->alias)) {
            char other[ZT_PATH_MAX];
            zt_join(other, path, k->alias);
            return zt_err(c, ZT_ERR_CONFIG, kp, "keep one of them",
                          "`%s` and `%s` name the same setting; give only one", kp, other);
        }
        if (k->kind == ZT_CUSTOM)
            continue;
        void *dst = k->off == ZT_NONE ? NULL : (char *)base + k->off;
        if (zt_is_auto(v)) {
            char val[80] = "";
            if (dst)
                zt_format_stored(k, dst, val, sizeof val);
            zt_note(c->cfg, "%s \"auto\" -> %s%s", kp, dst ? val : "default",
                    dst ? " (default)" : "");
            continue;
        }
        if (json_is_null(v) && (k->flags & ZT_NULLABLE))
            continue;
        if (k->kind == ZT_FEATURE) {
            if (zt_feature_on(v))
                zt_record_unbuilt(c->cfg, kp);
            continue;
        }
        ZT_TRY(zt_read_key(c, kp, k, v, dst));
        if (k->flags & ZT_NO_EFFECT)
            zt_note(c->cfg, "%s has no effect in zerotrain%s%s", kp, k->why ? ": " : "",
                    k->why ? k->why : "");
    }
    return ZT_OK;
}

/* obj[key] as an object, or NULL when absent or null. */
static zt_status zt_section(const zt_ctx *c, json_t *obj, const char *path, const char *key,
                            json_t **out)
{
    char kp[ZT_PATH_MAX];
    zt_join(kp, path, key);
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    *out = NULL;
    if (!v || json_is_null(v))
        return ZT_OK;
    if (!json_is_object(v))
        return zt_bad_value(c, kp, v, "an object { ... }");
    *out = v;
    return ZT_OK;
}

/* ------------------------------------------------------------------ defaults */

static void zt_offload_defaults(zt_offload_config *o, int64_t buffer_count)
{
    memset(o, 0, sizeof *o);
    o->device = ZT_OFFLOAD_NONE;
    o->buffer_count = buffer_count;
    o->pin_memory = true; /* DeepSpeed >= 0.19.5 */
    o->ratio = 1.0;
}

static void zt_config_defaults(zt_config *cfg)
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

    zt_fp16_config *f = &cfg->fp16;
    f->initial_scale_power = 16;
    f->loss_scale_window = 1000;
    f->hysteresis = 2;
    f->min_loss_scale = 1.0;
    cfg->bf16.check_grad_overflow = true; /* DeepSpeed >= 0.19.3 */

    cfg->activation_checkpointing.number_checkpoints = -1;
    cfg->activation_checkpoint_interval = -1;
    snprintf(cfg->csv_monitor.job_name, sizeof cfg->csv_monitor.job_name, "DeepSpeedJobName");
}

void zt_config_overrides_init(zt_config_overrides *ov)
{
    ov->train_batch_size = ov->micro_batch_size = ov->gradient_accumulation_steps = -1;
    ov->lr = -1.0;
    ov->activation_checkpoint_interval = -1;
}

/* ------------------------------------------------------------------ zero_optimization */

/* `present` (optional): the section was given, even with every default. */
static zt_status zt_parse_offload(const zt_ctx *c, json_t *zobj, const char *key,
                                  const zt_key *keys, size_t n, zt_offload_config *o,
                                  bool *present)
{
    char path[ZT_PATH_MAX];
    zt_join(path, "zero_optimization", key);
    json_t *obj = zt_value(c, zobj, "zero_optimization", key);
    if (present)
        *present = obj != NULL;
    if (!obj)
        return ZT_OK;
    if (!json_is_object(obj))
        return zt_bad_value(c, path, obj, "an object { ... } or null");
    ZT_TRY(zt_parse_keys(c, obj, path, keys, n, o));
    json_t *dev = zt_value(c, obj, path, "device");
    if (dev) {
        char dp[ZT_PATH_MAX];
        size_t idx;
        zt_join(dp, path, "device");
        ZT_TRY(zt_read_choice(c, dp, dev, zt_offload_devices, ZT_LEN(zt_offload_devices), false,
                              &idx));
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
    zt_join(path, "zero_optimization", old);
    json_t *v = zt_value(c, zobj, "zero_optimization", old);
    *given = v != NULL;
    if (!v)
        return ZT_OK;
    ZT_TRY(zt_read_bool(c, path, v, value));
    zt_note(c->cfg, "Config parameter %s is deprecated use %s instead", old, repl);
    for (size_t i = 0; i < n_repl; i++)
        if (zt_given(zobj, repl_keys[i]))
            return zt_err(c, ZT_ERR_CONFIG, path, "keep only the new name",
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
    ZT_TRY(zt_parse_keys(c, zobj, zp, zt_zero_keys, ZT_LEN(zt_zero_keys), z));

    json_t *v = zt_value(c, zobj, zp, "overlap_comm");
    *overlap_given = v != NULL;
    if (v)
        ZT_TRY(zt_read_bool(c, "zero_optimization.overlap_comm", v, &z->overlap_comm));

    bool legacy = false;
    if ((v = zt_value(c, zobj, zp, "legacy_stage1")))
        ZT_TRY(zt_read_bool(c, "zero_optimization.legacy_stage1", v, &legacy));
    if (legacy)
        return zt_err(c, ZT_ERR_CONFIG, "zero_optimization.legacy_stage1",
                      "remove legacy_stage1: stage 1 is the current implementation",
                      "The deprecated version of ZeRO Stage 1 is not supported in deepspeed "
                      ">= 0.5.9. Please downgrade to a version less than 0.5.9 if you need to "
                      "use this deprecated version of ZeRO.");

    if ((v = zt_value(c, zobj, zp, "zeropp_loco_param"))) {
        if (!json_is_object(v))
            return zt_bad_value(c, "zero_optimization.zeropp_loco_param", v,
                                "an object { ... } or null");
        zt_note(c->cfg, "zero_optimization.zeropp_loco_param has no effect in zerotrain");
    }
    if ((v = zt_value(c, zobj, zp, "zenflow"))) {
        if (!json_is_object(v))
            return zt_bad_value(c, "zero_optimization.zenflow", v, "an object { ... } or null");
        if (zt_feature_on(v))
            zt_record_unbuilt(c->cfg, "zero_optimization.zenflow");
    }

    ZT_TRY(zt_parse_offload(c, zobj, "offload_optimizer", zt_offload_optimizer_keys,
                            ZT_LEN(zt_offload_optimizer_keys), &z->offload_optimizer,
                            opt_offload_given));
    ZT_TRY(zt_parse_offload(c, zobj, "offload_param", zt_offload_param_keys,
                            ZT_LEN(zt_offload_param_keys), &z->offload_param, NULL));

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

static zt_status zt_parse_zero(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    zt_zero_config *z = &cfg->zero;
    json_t *zv = json_object_get(root, "zero_optimization");
    json_t *ag = zt_value(c, root, "", "allgather_size");
    int64_t allgather_size = 500000000;
    if (ag)
        ZT_TRY(zt_read_int(c, "allgather_size", ag, 0, INFINITY, &allgather_size));

    bool overlap_given = false, opt_offload_given = false;
    json_t *zobj = NULL;
    if (json_is_boolean(zv)) {
        /* DeepSpeed's oldest format: a boolean, bucket size from allgather_size. */
        z->stage = json_is_true(zv) ? 1 : 0;
        if (z->stage == 1)
            z->allgather_bucket_size = allgather_size;
        zt_note(cfg, "\"zero_optimization\": %s is DeepSpeed's deprecated format: read as stage %d",
                z->stage ? "true" : "false", z->stage);
    } else {
        if (ag)
            zt_note(cfg, "allgather_size has no effect unless \"zero_optimization\" is true");
        ZT_TRY(zt_section(c, root, "", "zero_optimization", &zobj));
        if (zobj)
            ZT_TRY(zt_parse_zero_object(c, zobj, &overlap_given, &opt_offload_given));
    }

    z->overlap_comm_given = overlap_given;
    if (!overlap_given)
        z->overlap_comm = z->stage == 3;
    if (opt_offload_given && z->offload_optimizer.ratio < 1.0 && z->stage != 3)
        return zt_err(c, ZT_ERR_CONFIG, "zero_optimization.offload_optimizer.ratio",
                      "use ratio 1.0, or ZeRO stage 3",
                      "Partial offloading only supported for ZeRO Stage 3.");
    /* DeepSpeed silently ignores offload at stages that lack what it offloads;
     * a setting that does nothing is refused. */
    if (z->offload_optimizer.device != ZT_OFFLOAD_NONE && z->stage == 0)
        return zt_err(c, ZT_ERR_CONFIG,
                      zt_given(zobj, "cpu_offload") ? "zero_optimization.cpu_offload"
                                                    : "zero_optimization.offload_optimizer.device",
                      "use ZeRO stage 1, 2 or 3, or remove the optimizer offload",
                      "offloading the optimizer to \"%s\" at ZeRO stage 0: stage 0 has no ZeRO "
                      "optimizer to offload (DeepSpeed silently ignores the setting)",
                      zt_offload_devices[z->offload_optimizer.device]);
    if (z->offload_param.device != ZT_OFFLOAD_NONE && z->stage < 3)
        return zt_err(c, ZT_ERR_CONFIG,
                      zt_given(zobj, "cpu_offload_param") ? "zero_optimization.cpu_offload_param"
                                                          : "zero_optimization.offload_param.device",
                      "use ZeRO stage 3, or remove the parameter offload",
                      "offloading parameters to \"%s\" at ZeRO stage %d: only stage 3 partitions "
                      "parameters (DeepSpeed silently ignores offload_param below stage 3)",
                      zt_offload_devices[z->offload_param.device], z->stage);
    if (opt_offload_given && z->offload_optimizer.ratio < 1.0 &&
        z->offload_optimizer.device == ZT_OFFLOAD_NONE)
        zt_note(cfg, "zero_optimization.offload_optimizer.ratio has no effect without an "
                     "offload device");
    if (z->offload_optimizer.device != ZT_OFFLOAD_NONE && !z->contiguous_gradients) {
        zt_note(cfg, "zero_optimization.contiguous_gradients forced to true: the optimizer "
                     "is offloaded");
        z->contiguous_gradients = true;
    }
    if ((z->stage == 1 || z->stage == 2) && z->allgather_bucket_size % 2 != 0)
        return zt_err(c, ZT_ERR_CONFIG, "zero_optimization.allgather_bucket_size",
                      "use an even number of elements",
                      "allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2");
    if (z->stage3_allgather_sequential && z->stage3_prefetch_bucket_size != 1) {
        zt_note(cfg, "zero_optimization.stage3_allgather_sequential forces "
                     "stage3_prefetch_bucket_size to 1");
        z->stage3_prefetch_bucket_size = 1;
    }
    return ZT_OK;
}

/* ------------------------------------------------------------------ fp16 / bf16 */

static zt_status zt_parse_precision(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    json_t *obj;
    ZT_TRY(zt_section(c, root, "", "fp16", &obj));
    if (obj)
        ZT_TRY(zt_parse_keys(c, obj, "fp16", zt_fp16_keys, ZT_LEN(zt_fp16_keys), &cfg->fp16));
    if (cfg->fp16.loss_scale == 0 && cfg->fp16.loss_scale_window <= 0)
        return zt_err(c, ZT_ERR_CONFIG, "fp16.loss_scale_window",
                      "give a positive window, or a static loss_scale > 0",
                      "must be > 0 with dynamic loss scaling (loss_scale 0)");
    if (cfg->fp16.loss_scale == 0 && cfg->fp16.min_loss_scale <= 0)
        return zt_err(c, ZT_ERR_CONFIG, "fp16.min_loss_scale",
                      "give a positive minimum, or a static loss_scale > 0",
                      "must be > 0 with dynamic loss scaling (loss_scale 0)");

    /* "bfloat16" is DeepSpeed's older name; both together were refused above. */
    const char *bname = json_object_get(root, "bfloat16") ? "bfloat16" : "bf16";
    ZT_TRY(zt_section(c, root, "", bname, &obj));
    if (obj)
        ZT_TRY(zt_parse_keys(c, obj, bname, zt_bf16_keys, ZT_LEN(zt_bf16_keys), &cfg->bf16));

    if (cfg->fp16.enabled && cfg->bf16.enabled)
        return zt_err(c, ZT_ERR_CONFIG, "fp16.enabled", "enable one of fp16 and bf16",
                      "bfloat16 and fp16 modes cannot be simultaneously enabled");
    return ZT_OK;
}

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
    bool is_auto = zt_is_auto(v);
    if (v && !is_auto) {
        ZT_TRY(zt_read_real(c, path, v, 0, INFINITY, false, lr));
        if (ov->lr >= 0 && ov->lr != *lr)
            return zt_err(c, ZT_ERR_CONFIG, path,
                          "drop one of them, or write \"lr\": \"auto\" to take the "
                          "command-line value",
                          "%.10g in the config contradicts %.10g from the command line", *lr,
                          ov->lr);
        return ZT_OK;
    }
    const char *how = is_auto ? "\"auto\"" : "not in config";
    if (ov->lr >= 0) {
        *lr = ov->lr;
        zt_note(c->cfg, "%s %s -> %g (command line)", path, how, *lr);
    } else {
        *lr = def;
        if (is_auto || note_default)
            zt_note(c->cfg, "%s %s -> %g (default)", path, how, *lr);
    }
    return ZT_OK;
}

static zt_status zt_refuse_max_grad_norm(const zt_ctx *c, json_t *params)
{
    if (!params || !json_object_get(params, "max_grad_norm"))
        return ZT_OK;
    return zt_err(c, ZT_ERR_CONFIG, "optimizer.params.max_grad_norm",
                  "use the top-level \"gradient_clipping\": <max norm>",
                  "max_grad_norm is not supported as an optimizer parameter; DeepSpeed clips "
                  "with the top-level gradient_clipping");
}

static zt_status zt_parse_adam(const zt_ctx *c, json_t *params, bool is_adamw)
{
    zt_optim_config *o = &c->cfg->optimizer;
    const char *pp = "optimizer.params";
    if (params)
        ZT_TRY(zt_parse_keys(c, params, pp, zt_adam_keys, ZT_LEN(zt_adam_keys), o));
    ZT_TRY(zt_refuse_max_grad_norm(c, params));
    ZT_TRY(zt_parse_lr(c, params, 1e-3, false, &o->lr));

    json_t *v = params ? json_object_get(params, "betas") : NULL;
    if (zt_is_auto(v)) {
        zt_note(c->cfg, "optimizer.params.betas \"auto\" -> [%g, %g] (default)", o->beta1,
                o->beta2);
    } else if (v && !json_is_null(v)) {
        const char *bp = "optimizer.params.betas";
        const char *expected = "[beta1, beta2], each in [0, 1)";
        if (!json_is_array(v) || json_array_size(v) != 2)
            return zt_bad_value(c, bp, v, expected);
        double b[2];
        for (size_t i = 0; i < 2; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_number(e) || !(json_number_value(e) >= 0 && json_number_value(e) < 1))
                return zt_bad_value(c, bp, v, expected);
            b[i] = json_number_value(e);
        }
        o->beta1 = b[0];
        o->beta2 = b[1];
    }
    bool flag = false;
    if ((v = zt_value(c, params, pp, "amsgrad")))
        ZT_TRY(zt_read_bool(c, "optimizer.params.amsgrad", v, &flag));
    if (flag)
        return zt_err(c, ZT_ERR_CONFIG, "optimizer.params.amsgrad", "remove amsgrad",
                      "FusedAdam does not support the AMSGrad variant.");
    flag = false;
    if ((v = zt_value(c, params, pp, "torch_adam")))
        ZT_TRY(zt_read_bool(c, "optimizer.params.torch_adam", v, &flag));
    if (flag)
        zt_note(c->cfg, "optimizer.params.torch_adam: zerotrain always runs its own fused Adam "
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
        ZT_TRY(zt_parse_keys(c, params, pp, zt_sgd_keys, ZT_LEN(zt_sgd_keys), o));
    ZT_TRY(zt_refuse_max_grad_norm(c, params));
    /* torch >= 2.2 gives SGD a default lr of 1e-3; it used to be required. */
    ZT_TRY(zt_parse_lr(c, params, 1e-3, true, &o->lr));

    bool maximize = false;
    json_t *v = zt_value(c, params, pp, "maximize");
    if (v)
        ZT_TRY(zt_read_bool(c, "optimizer.params.maximize", v, &maximize));
    if (maximize)
        return zt_err(c, ZT_ERR_UNSUPPORTED, "optimizer.params.maximize", "remove maximize",
                      "SGD with maximize is not implemented yet");
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
        return zt_err(c, ZT_ERR_CONFIG, "optimizer.params.nesterov",
                      "set momentum > 0 and dampening 0, or nesterov false",
                      "Nesterov momentum requires a momentum and zero dampening");

    if (cfg->zero.stage > 0) {
        if (!cfg->zero_allow_untested_optimizer)
            return zt_err(c, ZT_ERR_CONFIG, "optimizer.type",
                          "add \"zero_allow_untested_optimizer\": true, or use Adam/AdamW",
                          "You are using an untested ZeRO Optimizer. Please add "
                          "<\"zero_allow_untested_optimizer\": true> in the configuration file "
                          "to use it.");
        zt_note(cfg, "You are using ZeRO with an untested optimizer (SGD), proceed with caution");
    }
    return ZT_OK;
}

static zt_status zt_parse_optimizer(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    zt_optim_config *o = &cfg->optimizer;
    json_t *obj;
    ZT_TRY(zt_section(c, root, "", "optimizer", &obj));
    if (!obj) {
        o->type = ZT_OPTIM_ADAMW;
        o->from_default = true;
        o->lr = c->ov.lr >= 0 ? c->ov.lr : 1e-3;
        zt_note(cfg, "no optimizer in config: using AdamW lr=%g%s", o->lr,
                c->ov.lr >= 0 ? " (command line)" : "");
        return ZT_OK;
    }
    ZT_TRY(zt_parse_keys(c, obj, "optimizer", zt_optimizer_keys, ZT_LEN(zt_optimizer_keys),
                         NULL));
    json_t *t = json_object_get(obj, "type");
    if (!t)
        return zt_err(c, ZT_ERR_CONFIG, "optimizer", "e.g. \"type\": \"AdamW\"",
                      "\"type\" is missing");
    if (!json_is_string(t))
        return zt_bad_value(c, "optimizer.type", t, "an optimizer name such as \"AdamW\"");
    const char *name = json_string_value(t);
    json_t *params;
    ZT_TRY(zt_section(c, obj, "optimizer", "params", &params));

    if (strcasecmp(name, "adam") == 0 || strcasecmp(name, "adamw") == 0)
        return zt_parse_adam(c, params, strcasecmp(name, "adamw") == 0);
    const char *hint = "zerotrain implements Adam, AdamW and SGD";
    if (zt_in_list(name, zt_ds_optimizers, ZT_LEN(zt_ds_optimizers), true)) {
        static const struct {
            const char *name, *msg;
        } no_zero[] = {
            {"onebitadam", "1-bit Adam is not compatible with ZeRO"},
            {"zerooneadam", "0/1 Adam is not compatible with ZeRO"},
            {"onebitlamb", "1bit-Lamb is not compatible with ZeRO"},
        };
        for (size_t i = 0; i < ZT_LEN(no_zero); i++)
            if (cfg->zero.stage > 0 && strcasecmp(name, no_zero[i].name) == 0)
                return zt_err(c, ZT_ERR_CONFIG, "optimizer.type",
                              "use ZeRO stage 0 with this optimizer, or Adam/AdamW",
                              "%s", no_zero[i].msg);
        return zt_err(c, ZT_ERR_UNSUPPORTED, "optimizer.type", hint,
                      "optimizer %s is not implemented yet", name);
    }
    if (strcmp(name, "SGD") == 0)
        return zt_parse_sgd(c, params);
    if (zt_in_list(name, zt_torch_optimizers, ZT_LEN(zt_torch_optimizers), false))
        return zt_err(c, ZT_ERR_UNSUPPORTED, "optimizer.type", hint,
                      "torch optimizer %s is not implemented yet", name);

    const char *cands[] = {"Adam", "AdamW", "SGD", "Lamb", "OneBitAdam", "ZeroOneAdam",
                           "OneBitLamb", "Adagrad", "Lion", "Muon"};
    const char *close = zt_closest(name, cands, ZT_LEN(cands));
    char suggestion[64] = "";
    if (close)
        snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", close);
    return zt_err(c, ZT_ERR_CONFIG, "optimizer.type",
                  "torch.optim names are case-sensitive (\"SGD\"); DeepSpeed's own are not",
                  "%s is not a supported DeepSpeed Optimizer%s", name, suggestion);
}

/* ------------------------------------------------------------------ scheduler */

static zt_status zt_required_param(const zt_ctx *c, json_t *params, const char *key,
                                   const char *sched, json_t **out)
{
    json_t *v = params ? json_object_get(params, key) : NULL;
    *out = v;
    if (v && !json_is_null(v) && !zt_is_auto(v))
        return ZT_OK;
    char hint[128];
    snprintf(hint, sizeof hint, "add \"%s\" to scheduler.params", key);
    return zt_err(c, ZT_ERR_CONFIG, params ? "scheduler.params" : "scheduler", hint,
                  "%s is required by %s%s", key, sched,
                  zt_is_auto(v) ? " (\"auto\" cannot be resolved: it has no default)" : "");
}

static zt_status zt_parse_sched_params(const zt_ctx *c, json_t *params, const zt_sched_entry *e)
{
    zt_config *cfg = c->cfg;
    zt_sched_config *s = &cfg->scheduler;
    const char *pp = "scheduler.params";
    json_t *v;

    if ((v = zt_value(c, params, pp, "last_batch_iteration"))) {
        int64_t it;
        ZT_TRY(zt_read_int(c, "scheduler.params.last_batch_iteration", v, -INFINITY, INFINITY,
                           &it));
        if (it != -1)
            return zt_err(c, ZT_ERR_UNSUPPORTED, "scheduler.params.last_batch_iteration",
                          "resume the schedule from a checkpoint instead",
                          "starting a schedule at iteration %lld is not implemented yet",
                          (long long)it);
    }
    if ((v = zt_value(c, params, pp, "warmup_type"))) {
        if (!json_is_string(v))
            return zt_bad_value(c, "scheduler.params.warmup_type", v, "\"log\" or \"linear\"");
        const char *wt = json_string_value(v);
        if (strcmp(wt, "linear") == 0) {
            s->warmup_type = ZT_WARMUP_LINEAR;
        } else if (strcmp(wt, "log") != 0) {
            zt_note(cfg, "Using unknown warmup_type: %.64s. The increasing function is set to "
                         "default (log)", wt);
        }
    }
    v = params ? json_object_get(params, "warmup_max_lr") : NULL;
    if (zt_is_auto(v)) {
        /* HF Transformers resolves it to the learning rate. */
        s->warmup_max_lr = -1.0;
        zt_note(cfg, "scheduler.params.warmup_max_lr \"auto\" -> the optimizer lr");
    } else if (v && !json_is_null(v)) {
        ZT_TRY(zt_read_real(c, "scheduler.params.warmup_max_lr", v, 0, INFINITY, false,
                            &s->warmup_max_lr));
    }
    if (zt_find_key(e->keys, e->n_keys, "total_num_steps")) {
        ZT_TRY(zt_required_param(c, params, "total_num_steps", e->name, &v));
        ZT_TRY(zt_read_int(c, "scheduler.params.total_num_steps", v, 0, INFINITY,
                           &s->total_num_steps));
        if (s->total_num_steps < s->warmup_num_steps)
            zt_note(cfg, "total_num_steps %lld is less than warmup_num_steps %lld",
                    (long long)s->total_num_steps, (long long)s->warmup_num_steps);
    }
    if (e->type == ZT_SCHED_ONE_CYCLE) {
        ZT_TRY(zt_required_param(c, params, "cycle_min_lr", e->name, &v));
        ZT_TRY(zt_read_real(c, "scheduler.params.cycle_min_lr", v, 0, INFINITY, false,
                            &s->cycle_min_lr));
        ZT_TRY(zt_required_param(c, params, "cycle_max_lr", e->name, &v));
        ZT_TRY(zt_read_real(c, "scheduler.params.cycle_max_lr", v, 0, INFINITY, false,
                            &s->cycle_max_lr));
        /* DeepSpeed's None: the second half mirrors the first. */
        if (zt_unset(params, "cycle_second_step_size"))
            s->cycle_second_step_size = s->cycle_first_step_size;
        if (zt_unset(params, "cycle_second_stair_count"))
            s->cycle_second_stair_count = s->cycle_first_stair_count;
        if (s->cycle_momentum && cfg->optimizer.type == ZT_OPTIM_SGD) {
            zt_note(cfg, "cycle_momentum is disabled because optimizer SGD does not support "
                         "momentum, no betas attribute in defaults");
            s->cycle_momentum = false;
        }
    }
    return ZT_OK;
}

static zt_status zt_parse_scheduler(const zt_ctx *c, json_t *root)
{
    zt_sched_config *s = &c->cfg->scheduler;
    json_t *obj;
    ZT_TRY(zt_section(c, root, "", "scheduler", &obj));
    if (!obj)
        return ZT_OK;
    ZT_TRY(zt_parse_keys(c, obj, "scheduler", zt_scheduler_keys, ZT_LEN(zt_scheduler_keys),
                         NULL));
    json_t *t = json_object_get(obj, "type");
    if (!t)
        return zt_err(c, ZT_ERR_CONFIG, "scheduler", "e.g. \"type\": \"WarmupLR\"",
                      "\"type\" is missing");
    if (!json_is_string(t))
        return zt_bad_value(c, "scheduler.type", t, "a scheduler name such as \"WarmupLR\"");
    const char *name = json_string_value(t);

    const zt_sched_entry *e = NULL;
    const char *names[ZT_LEN(zt_schedulers)];
    for (size_t i = 0; i < ZT_LEN(zt_schedulers); i++) {
        names[i] = zt_schedulers[i].name;
        if (strcmp(name, zt_schedulers[i].name) == 0)
            e = &zt_schedulers[i];
    }
    const char *hint = "zerotrain implements WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle "
                       "and LRRangeTest";
    if (!e && zt_in_list(name, zt_torch_schedulers, ZT_LEN(zt_torch_schedulers), false))
        return zt_err(c, ZT_ERR_UNSUPPORTED, "scheduler.type", hint,
                      "torch scheduler %s is not implemented yet", name);
    if (!e) {
        const char *close = zt_closest(name, names, ZT_LEN(names));
        char suggestion[64] = "";
        if (close)
            snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", close);
        return zt_err(c, ZT_ERR_CONFIG, "scheduler.type", hint,
                      "DeepSpeed does not recognize LR scheduler %s%s", name, suggestion);
    }
    s->type = e->type;
    if (e->type == ZT_SCHED_WARMUP_DECAY_LR)
        s->warmup_max_lr = 0.001;

    json_t *params;
    ZT_TRY(zt_section(c, obj, "scheduler", "params", &params));
    if (params)
        ZT_TRY(zt_parse_keys(c, params, "scheduler.params", e->keys, e->n_keys, s));
    return zt_parse_sched_params(c, params, e);
}

/* ------------------------------------------------------------------ smaller sections */

static zt_status zt_parse_monitors(const zt_ctx *c, json_t *root)
{
    static const struct {
        const char *name;
        const zt_key *keys;
        size_t n;
    } others[] = {
        {"tensorboard", zt_csv_keys, ZT_LEN(zt_csv_keys)},
        {"wandb", zt_wandb_keys, ZT_LEN(zt_wandb_keys)},
        {"comet", zt_comet_keys, ZT_LEN(zt_comet_keys)},
        {"trackio", zt_trackio_keys, ZT_LEN(zt_trackio_keys)},
    };
    json_t *obj;
    ZT_TRY(zt_section(c, root, "", "csv_monitor", &obj));
    if (obj)
        ZT_TRY(zt_parse_keys(c, obj, "csv_monitor", zt_csv_keys, ZT_LEN(zt_csv_keys),
                             &c->cfg->csv_monitor));
    for (size_t i = 0; i < ZT_LEN(others); i++) {
        zt_csv_monitor_config scratch = {0};
        ZT_TRY(zt_section(c, root, "", others[i].name, &obj));
        if (!obj)
            continue;
        ZT_TRY(zt_parse_keys(c, obj, others[i].name, others[i].keys, others[i].n, &scratch));
        if (scratch.enabled) {
            char path[ZT_PATH_MAX];
            zt_join(path, others[i].name, "enabled");
            zt_record_unbuilt(c->cfg, path);
        }
    }
    return ZT_OK;
}

/* DeepSpeed's checkpointing.configure asserts, and the command-line interval. */
static zt_status zt_check_act_ckpt(const zt_ctx *c)
{
    zt_config *cfg = c->cfg;
    const zt_act_ckpt_config *a = &cfg->activation_checkpointing;
    const char *cmo = "activation_checkpointing.contiguous_memory_optimization";
    if (a->contiguous_memory_optimization && !a->partition_activations)
        return zt_err(c, ZT_ERR_CONFIG, cmo,
                      "set \"partition_activations\": true, or remove "
                      "contiguous_memory_optimization",
                      "Contiguous Checkpointing is only available with partitioned activations. "
                      "Set partitioned activations to true in deepspeed config");
    if (a->contiguous_memory_optimization && a->number_checkpoints < 1)
        return zt_err(c, ZT_ERR_CONFIG, cmo,
                      "set activation_checkpointing.number_checkpoints, or remove "
                      "contiguous_memory_optimization",
                      "Must specify the number of layers with contiguous memory checkpointing");
    const int64_t interval = c->ov.activation_checkpoint_interval;
    if (interval < -1)
        return zt_err(c, ZT_ERR_CONFIG, NULL,
                      "give 0 (off) or the number of units between checkpoints",
                      "activation checkpoint interval %lld from the command line: expected a "
                      "non-negative integer",
                      (long long)interval);
    cfg->activation_checkpoint_interval = interval;
    if (interval >= 0 && a->number_checkpoints >= 1)
        zt_note(cfg, "activation_checkpointing.number_checkpoints %lld: the command-line "
                     "checkpoint interval %lld takes precedence",
                (long long)a->number_checkpoints, (long long)interval);
    return ZT_OK;
}

static zt_status zt_parse_misc_sections(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    json_t *obj;
    ZT_TRY(zt_section(c, root, "", "activation_checkpointing", &obj));
    if (obj) {
        cfg->activation_checkpointing_present = true;
        ZT_TRY(zt_parse_keys(c, obj, "activation_checkpointing", zt_act_ckpt_keys,
                             ZT_LEN(zt_act_ckpt_keys), &cfg->activation_checkpointing));
    }
    ZT_TRY(zt_check_act_ckpt(c));
    ZT_TRY(zt_section(c, root, "", "data_types", &obj));
    if (obj) {
        static const char *const dtypes[] = {"fp32", "fp16", "bf16"};
        ZT_TRY(zt_parse_keys(c, obj, "data_types", zt_data_types_keys,
                             ZT_LEN(zt_data_types_keys), NULL));
        json_t *v = zt_value(c, obj, "data_types", "grad_accum_dtype");
        size_t idx;
        if (v) {
            ZT_TRY(zt_read_choice(c, "data_types.grad_accum_dtype", v, dtypes, ZT_LEN(dtypes),
                                  false, &idx));
            zt_copy(cfg->data_types.grad_accum_dtype, sizeof cfg->data_types.grad_accum_dtype,
                    dtypes[idx]);
        }
    }
    ZT_TRY(zt_section(c, root, "", "timers", &obj));
    if (obj) {
        ZT_TRY(zt_parse_keys(c, obj, "timers", zt_timers_keys, ZT_LEN(zt_timers_keys), NULL));
        json_t *tp;
        ZT_TRY(zt_section(c, obj, "timers", "throughput", &tp));
        if (tp)
            ZT_TRY(zt_parse_keys(c, tp, "timers.throughput", zt_throughput_keys,
                                 ZT_LEN(zt_throughput_keys), cfg));
    }
    return zt_parse_monitors(c, root);
}

static void zt_lower_copy(char *dst, size_t size, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < size; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = '\0';
}

static zt_status zt_parse_top_strings(const zt_ctx *c, json_t *root)
{
    static const char *const levels[] = {"debug", "info", "warning", "error", "critical"};
    static const char *const dtypes[] = {"fp16", "bf16", "fp32"};
    static const char *const ops[] = {"mean", "sum"};
    zt_config *cfg = c->cfg;
    size_t idx;
    json_t *v;
    if ((v = zt_value(c, root, "", "log_level"))) {
        ZT_TRY(zt_read_choice(c, "log_level", v, levels, ZT_LEN(levels), true, &idx));
        snprintf(cfg->log_level, sizeof cfg->log_level, "%s", levels[idx]);
    }
    if ((v = zt_value(c, root, "", "communication_data_type"))) {
        ZT_TRY(zt_read_choice(c, "communication_data_type", v, dtypes, ZT_LEN(dtypes), true,
                              &idx));
        zt_lower_copy(cfg->communication_data_type, sizeof cfg->communication_data_type,
                      dtypes[idx]);
    }
    if ((v = zt_value(c, root, "", "gradient_allreduce_op"))) {
        ZT_TRY(zt_read_choice(c, "gradient_allreduce_op", v, ops, ZT_LEN(ops), true, &idx));
        if (idx == 1 && cfg->zero.stage == 3)
            return zt_err(c, ZT_ERR_CONFIG, "gradient_allreduce_op", "use \"mean\" with stage 3",
                          "gradient_allreduce_op='sum' is not supported with ZeRO stage 3");
        if (idx == 1)
            zt_record_unbuilt(cfg, "gradient_allreduce_op");
    }
    return ZT_OK;
}

/* ------------------------------------------------------------------ batch triple */

typedef struct {
    const char *key;
    bool given, is_auto;
    int64_t v;
} zt_batch_field;

static zt_status zt_read_batch_field(const zt_ctx *c, json_t *root, zt_batch_field *f,
                                     int64_t cli)
{
    json_t *v = json_object_get(root, f->key);
    f->is_auto = zt_is_auto(v);
    if (v && !f->is_auto && !json_is_null(v)) {
        ZT_TRY(zt_read_int(c, f->key, v, -INFINITY, INFINITY, &f->v));
        f->given = true;
    }
    if (cli < 0)
        return ZT_OK;
    if (f->given && f->v != cli)
        return zt_err(c, ZT_ERR_CONFIG, f->key,
                      "drop one of them, or write \"auto\" in the config to take the "
                      "command-line value",
                      "%lld in the config contradicts %lld from the command line",
                      (long long)f->v, (long long)cli);
    if (!f->given) {
        zt_note(c->cfg, "%s %s -> %lld (command line)", f->key,
                f->is_auto ? "\"auto\"" : "not in config", (long long)cli);
        f->is_auto = false; /* resolved: no "derived" note later */
    }
    f->v = cli;
    f->given = true;
    return ZT_OK;
}

static zt_status zt_batch_fail(const zt_ctx *c, const char *hint, const char *fmt, long long a)
{
    return zt_err(c, ZT_ERR_CONFIG, NULL, hint, fmt, a);
}

/* DeepSpeed's _set_batch_related_parameters + _batch_assertion, with the real
 * world size, after command-line values filled missing or "auto" fields. */
static zt_status zt_resolve_batch(const zt_ctx *c, json_t *root)
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
            return zt_err(c, ZT_ERR_CONFIG, NULL,
                          "set train_micro_batch_size_per_gpu or train_batch_size in the "
                          "config or on the command line",
                          "Either train_batch_size or train_micro_batch_size_per_gpu needs to "
                          "be provided");
        mb.v = 32;
        mb.given = true;
        zt_note(cfg, "train_micro_batch_size_per_gpu %s -> 32 (default)",
                mb.is_auto ? "\"auto\"" : "not in config");
        mb.is_auto = false;
        if (!gas.given) {
            gas.v = 1;
            gas.given = true;
            zt_note(cfg, "gradient_accumulation_steps %s -> 1 (default)",
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
        return zt_err(c, ZT_ERR_CONFIG, NULL, "use smaller batch values",
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
        return zt_err(c, ZT_ERR_CONFIG, NULL, hint,
                      "Check batch related parameters. train_batch_size is not equal to "
                      "micro_batch_per_gpu * gradient_acc_step * world_size %lld != %lld * "
                      "%lld * %lld",
                      (long long)tb.v, (long long)mb.v, (long long)gas.v, (long long)ws);

    const zt_batch_field *fields[] = {&tb, &mb, &gas};
    for (size_t i = 0; i < ZT_LEN(fields); i++)
        if (fields[i]->is_auto)
            zt_note(cfg, "%s \"auto\" -> %lld (derived)", fields[i]->key,
                    (long long)fields[i]->v);
    cfg->train_batch_size = tb.v;
    cfg->micro_batch_size = mb.v;
    cfg->gradient_accumulation_steps = gas.v;
    return ZT_OK;
}

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
            zt_note(c->cfg, "data_types.grad_accum_dtype not given -> fp32: %lld micro-steps "
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
    return zt_err(c, ZT_ERR_CONFIG, "data_types.grad_accum_dtype",
                  "gradients accumulate in fp32 or in the training dtype",
                  "\"%s\" with %s training: expected %s", given, zt_dtype_name(compute),
                  expected);
}

static zt_status zt_cross_checks(const zt_ctx *c)
{
    const zt_config *cfg = c->cfg;
    const int stage = cfg->zero.stage;
    if (stage == 2 && cfg->zero.reduce_scatter) {
        const char *hint = "set \"reduce_scatter\": false in zero_optimization, or drop the option";
        if (cfg->gradient_predivide_factor != 1.0)
            return zt_err(c, ZT_ERR_CONFIG, "gradient_predivide_factor", hint,
                          "gradient_predivide_factor != 1.0 is not yet supported with ZeRO-2 "
                          "with reduce scatter enabled");
        if (cfg->prescale_gradients)
            return zt_err(c, ZT_ERR_CONFIG, "prescale_gradients", hint,
                          "pre-scale gradients is not yet supported with ZeRO-2 with reduce "
                          "scatter enabled");
    }
    const char *stage_hint = "use ZeRO stage 1, 2 or 3";
    if (cfg->fp16.fp16_master_weights_and_grads && stage == 0)
        return zt_err(c, ZT_ERR_CONFIG, "fp16.fp16_master_weights_and_grads", stage_hint,
                      "Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, "
                      "or 3.");
    if (cfg->bf16.bf16_master_weights_and_grads && stage == 0)
        return zt_err(c, ZT_ERR_CONFIG, "bf16.bf16_master_weights_and_grads", stage_hint,
                      "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, "
                      "or 3.");
    if (cfg->bf16.bf16_optimizer_states && stage == 0)
        return zt_err(c, ZT_ERR_CONFIG, "bf16.bf16_optimizer_states", stage_hint,
                      "bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3.");
    if (cfg->bf16.bf16_optimizer_states && !cfg->bf16.bf16_master_weights_and_grads)
        return zt_err(c, ZT_ERR_CONFIG, "bf16.bf16_optimizer_states",
                      "also set \"bf16_master_weights_and_grads\": true",
                      "bf16_optimizer_states requires bf16_master_weights_and_grads to be "
                      "enabled.");
    return zt_check_grad_accum_dtype(c);
}

/* ------------------------------------------------------------------ entry points */

static zt_status zt_parse_root(zt_ctx *c, json_t *root)
{
    ZT_TRY(zt_parse_keys(c, root, "", zt_top_keys, ZT_LEN(zt_top_keys), c->cfg));
    ZT_TRY(zt_parse_zero(c, root));
    ZT_TRY(zt_parse_top_strings(c, root));
    ZT_TRY(zt_parse_precision(c, root));
    ZT_TRY(zt_parse_optimizer(c, root));
    ZT_TRY(zt_parse_scheduler(c, root));
    ZT_TRY(zt_parse_misc_sections(c, root));
    ZT_TRY(zt_resolve_batch(c, root));
    return zt_cross_checks(c);
}

zt_status zt_config_parse_string(const char *text, const char *name,
                                 const zt_config_overrides *ov, int world_size,
                                 zt_config *out)
{
    zt_ctx c = {.name = name ? name : "config", .cfg = out, .world_size = world_size};
    zt_config_defaults(out);
    if (ov)
        c.ov = *ov;
    else
        zt_config_overrides_init(&c.ov);
    if (!text)
        return zt_fail(ZT_ERR_INTERNAL, NULL, "%s: no config text", c.name);
    if (world_size < 1)
        return zt_fail(ZT_ERR_INTERNAL, NULL, "%s: world size %d", c.name, world_size);

    char *clean = strdup(text);
    if (!clean)
        return zt_fail(ZT_ERR_OOM, NULL, "%s: no memory for the config text", c.name);
    json_t *root = NULL;
    zt_status st = zt_strip_hjson(&c, clean);
    if (st == ZT_OK) {
        zt_index_keys(&c, clean);
        st = zt_load_json(&c, clean, &root);
    }
    if (st == ZT_OK)
        st = zt_parse_root(&c, root);
    json_decref(root);
    free(clean);
    zt_ctx_free(&c);
    return st;
}

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
    const char *cpu_hint = "use \"device\": \"cpu\"";
    if (z->offload_optimizer.device == ZT_OFFLOAD_NVME)
        return zt_fail(ZT_ERR_UNSUPPORTED, cpu_hint,
                       "zero_optimization.offload_optimizer.device \"nvme\": offloading to nvme "
                       "is not supported yet");
    if (z->offload_param.device == ZT_OFFLOAD_NVME)
        return zt_fail(ZT_ERR_UNSUPPORTED, cpu_hint,
                       "zero_optimization.offload_param.device \"nvme\": offloading to nvme is "
                       "not supported yet");
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

zt_status zt_config_check_supported(const zt_config *cfg)
{
    const zt_zero_config *z = &cfg->zero;
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
    ZT_TRY(zt_check_offload_supported(z));
    const char *zpp_hint = "remove the ZeRO++ / MiCS settings";
    /* DeepSpeed ignores hpZ below stage 3; a setting that does nothing is
     * refused rather than silently dropped. */
    if (z->zero_hpz_partition_size > 1 && z->stage != 3)
        return zt_fail(ZT_ERR_UNSUPPORTED, "use \"stage\": 3, or remove zero_hpz_partition_size",
                       "zero_optimization.zero_hpz_partition_size %lld: hpZ partitions "
                       "parameters, which only ZeRO stage 3 does (stage is %d)",
                       (long long)z->zero_hpz_partition_size, z->stage);
    const struct {
        bool on;
        const char *key;
    } quant[] = {
        {z->zero_quantized_weights, "zero_quantized_weights"},
        {z->zero_quantized_gradients, "zero_quantized_gradients"},
        {z->zero_quantized_nontrainable_weights, "zero_quantized_nontrainable_weights"},
    };
    for (size_t i = 0; i < ZT_LEN(quant); i++)
        if (quant[i].on)
            return zt_fail(ZT_ERR_UNSUPPORTED, zpp_hint,
                           "zero_optimization.%s: ZeRO++ quantization is not implemented yet",
                           quant[i].key);
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
    ZT_TRY(zt_check_comm_dtype(cfg));
    if (cfg->unbuilt_feature[0]) {
        static const char *const monitors[] = {"tensorboard", "wandb", "comet", "trackio"};
        for (size_t i = 0; i < ZT_LEN(monitors); i++) {
            size_t len = strlen(monitors[i]);
            if (strncmp(cfg->unbuilt_feature, monitors[i], len) == 0 &&
                cfg->unbuilt_feature[len] == '.')
                return zt_fail(ZT_ERR_UNSUPPORTED,
                               "use \"csv_monitor\", which zerotrain writes itself",
                               "%s: the %s monitor is not supported (zerotrain has no %s "
                               "dependency)",
                               cfg->unbuilt_feature, monitors[i], monitors[i]);
        }
        return zt_fail(ZT_ERR_UNSUPPORTED, "remove it from the config or switch it off",
                       "%s: this DeepSpeed feature is not implemented yet",
                       cfg->unbuilt_feature);
    }
    return ZT_OK;
}

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

int64_t zt_config_checkpoint_interval(const zt_config *cfg, int n_units)
{
    if (cfg->activation_checkpoint_interval >= 0)
        return cfg->activation_checkpoint_interval;
    const int64_t k = cfg->activation_checkpointing.number_checkpoints;
    if (k < 1 || n_units < 1)
        return 0;
    /* k may be near INT64_MAX: no n_units + k - 1. */
    return k >= n_units ? 1 : ((int64_t)n_units + k - 1) / k;
}

zt_status zt_config_load_string(const char *text, const char *name,
                                const zt_config_overrides *ov, int world_size,
                                zt_config *out)
{
    ZT_TRY(zt_config_parse_string(text, name, ov, world_size, out));
    zt_status st = zt_config_check_supported(out);
    if (st == ZT_OK)
        return ZT_OK;
    /* The check sees only the parsed config: put the file name in front. */
    char msg[1536], hint[1024];
    snprintf(msg, sizeof msg, "%s", zt_status_message());
    snprintf(hint, sizeof hint, "%s", zt_status_hint());
    return zt_fail(st, hint, "%s: %s", name ? name : "config", msg);
}

/* The whole file as a NUL-terminated string (caller frees). */
static zt_status config_read_file(const char *path, char **out)
{
    const char *hint = "check the --config path";
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_fail(ZT_ERR_IO, hint, "%s: cannot open the config file: %s", path,
                       strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? 2 * cap : 16384;
            char *t = realloc(text, ncap);
            if (!t) {
                free(text);
                fclose(f);
                return zt_fail(ZT_ERR_OOM, NULL, "%s: no memory to read the config", path);
            }
            text = t;
            cap = ncap;
        }
        size_t n = fread(text + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    int read_error = ferror(f);
    int saved = errno;
    fclose(f);
    if (read_error) {
        free(text);
        return zt_fail(ZT_ERR_IO, hint, "%s: cannot read the config file: %s", path,
                       strerror(saved));
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return zt_fail(ZT_ERR_CONFIG, "is this a JSON file?",
                       "%s: contains a NUL byte (not a text file)", path);
    }
    *out = text;
    return ZT_OK;
}

static zt_status config_file(const char *path, const zt_config_overrides *ov, int world_size,
                             zt_config *out, bool check_supported)
{
    char *text = NULL;
    ZT_TRY(config_read_file(path, &text));
    zt_status st = check_supported ? zt_config_load_string(text, path, ov, world_size, out)
                                   : zt_config_parse_string(text, path, ov, world_size, out);
    free(text);
    return st;
}

zt_status zt_config_load_file(const char *path, const zt_config_overrides *ov, int world_size,
                              zt_config *out)
{
    return config_file(path, ov, world_size, out, true);
}

zt_status zt_config_parse_file(const char *path, const zt_config_overrides *ov, int world_size,
                               zt_config *out)
{
    return config_file(path, ov, world_size, out, false);
}

const char *zt_optim_type_name(zt_optim_type t)
{
    switch (t) {
    case ZT_OPTIM_ADAM: return "Adam";
    case ZT_OPTIM_ADAMW: return "AdamW";
    case ZT_OPTIM_SGD: return "SGD";
    }
    return "unknown";
}

const char *zt_sched_type_name(zt_sched_type t)
{
    switch (t) {
    case ZT_SCHED_NONE: return "none";
    case ZT_SCHED_WARMUP_LR: return "WarmupLR";
    case ZT_SCHED_WARMUP_DECAY_LR: return "WarmupDecayLR";
    case ZT_SCHED_WARMUP_COSINE_LR: return "WarmupCosineLR";
    case ZT_SCHED_ONE_CYCLE: return "OneCycle";
    case ZT_SCHED_LR_RANGE_TEST: return "LRRangeTest";
    }
    return "unknown";
}
