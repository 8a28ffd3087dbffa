/*
 * config keys: every section's table of keys (type, destination, bounds,
 * flags) that the generic reader in read.c walks, the names DeepSpeed gives
 * to optimizers and schedulers, and the names of zerotrain's optimizer and
 * scheduler types.
 */
#include "engine/config/config_impl.h"

#include <math.h>
#include <stddef.h>

/* ------------------------------------------------------------------ key tables */

#define ZT_K(n, k, o) .name = (n), .kind = (k), .off = (o)
#define ZT_NONNEG .lo = 0, .hi = INFINITY
#define ZT_ANYNUM .lo = -INFINITY, .hi = INFINITY
#define ZT_UNIT .lo = 0, .hi = 1
#define ZT_OFF(type, f) ((ptrdiff_t)offsetof(type, f))
#define ZT_CAP(type, f) sizeof(((type *)0)->f)

#define ZC(f) ZT_OFF(zt_config, f)
const zt_key zt_config_top_keys[] = {
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
    {ZT_K("flops_profiler", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("autotuning", ZT_FEATURE, ZT_NONE)},
    {ZT_K("elasticity", ZT_FEATURE, ZT_NONE)},
    {ZT_K("pipeline", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("compression_training", ZT_FEATURE, ZT_NONE)},
    {ZT_K("data_efficiency", ZT_FEATURE, ZT_NONE)},
    {ZT_K("curriculum_learning", ZT_FEATURE, ZT_NONE)},
    {ZT_K("progressive_layer_drop", ZT_FEATURE, ZT_NONE)},
    {ZT_K("eigenvalue", ZT_FEATURE, ZT_NONE)},
    {ZT_K("quantize_training", ZT_FEATURE, ZT_NONE)},
    {ZT_K("checkpoint", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("data_types", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("aio", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("nebula", ZT_FEATURE, ZT_NONE)},
    {ZT_K("hybrid_engine", ZT_FEATURE, ZT_NONE)},
    {ZT_K("comms_logger", ZT_CUSTOM, ZT_NONE)},
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
const size_t zt_config_n_top_keys = ZT_LEN(zt_config_top_keys);

#define ZZ(f) ZT_OFF(zt_zero_config, f)
const zt_key zt_config_zero_keys[] = {
    {ZT_K("stage", ZT_INT, ZZ(stage)), .lo = 0, .hi = 3},
    {ZT_K("contiguous_gradients", ZT_BOOL, ZZ(contiguous_gradients))},
    {ZT_K("reduce_scatter", ZT_BOOL, ZZ(reduce_scatter))},
    {ZT_K("reduce_bucket_size", ZT_I64, ZZ(reduce_bucket_size)), ZT_NONNEG,
     .auto_bit = ZT_AUTO_REDUCE_BUCKET},
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
     .alias = "prefetch_bucket_size", .auto_bit = ZT_AUTO_PREFETCH},
    {ZT_K("prefetch_bucket_size", ZT_I64, ZZ(stage3_prefetch_bucket_size)), ZT_NONNEG,
     .alias = "stage3_prefetch_bucket_size", .auto_bit = ZT_AUTO_PREFETCH},
    {ZT_K("stage3_param_persistence_threshold", ZT_I64, ZZ(stage3_param_persistence_threshold)),
     ZT_NONNEG, .alias = "param_persistence_threshold", .auto_bit = ZT_AUTO_PERSISTENCE},
    {ZT_K("param_persistence_threshold", ZT_I64, ZZ(stage3_param_persistence_threshold)),
     ZT_NONNEG, .alias = "stage3_param_persistence_threshold", .auto_bit = ZT_AUTO_PERSISTENCE},
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
    /* Group sizes: a group of more ranks than any world (2^20,
     * ZT_ESTIMATE_MAX_WORLD) cannot divide one, and plans take them as int. */
    {ZT_K("zero_hpz_partition_size", ZT_I64, ZZ(zero_hpz_partition_size)), .lo = 0,
     .hi = 1 << 20},
    {ZT_K("zero_quantized_weights", ZT_BOOL, ZZ(zero_quantized_weights))},
    {ZT_K("zero_quantized_nontrainable_weights", ZT_BOOL,
          ZZ(zero_quantized_nontrainable_weights))},
    {ZT_K("zero_quantized_gradients", ZT_BOOL, ZZ(zero_quantized_gradients))},
    {ZT_K("zeropp_loco_param", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("mics_shard_size", ZT_I64, ZZ(mics_shard_size)), .lo = -1, .hi = 1 << 20},
    {ZT_K("mics_hierarchical_params_gather", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("memory_efficient_linear", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("pipeline_loading_checkpoint", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("override_module_apply", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("log_trace_cache_warnings", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
    {ZT_K("enable_sanity_checks", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
};
const size_t zt_config_n_zero_keys = ZT_LEN(zt_config_zero_keys);

#define ZO(f) ZT_OFF(zt_offload_config, f)
const zt_key zt_config_offload_optimizer_keys[] = {
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
const size_t zt_config_n_offload_optimizer_keys = ZT_LEN(zt_config_offload_optimizer_keys);

const zt_key zt_config_offload_param_keys[] = {
    {ZT_K("device", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("nvme_path", ZT_STR, ZO(nvme_path)), .size = ZT_CAP(zt_offload_config, nvme_path),
     .flags = ZT_NULLABLE},
    {ZT_K("buffer_count", ZT_I64, ZO(buffer_count)), ZT_NONNEG},
    {ZT_K("buffer_size", ZT_I64, ZO(buffer_size)), ZT_NONNEG},
    {ZT_K("max_in_cpu", ZT_I64, ZO(max_in_cpu)), ZT_NONNEG},
    {ZT_K("pin_memory", ZT_BOOL, ZO(pin_memory))},
};
const size_t zt_config_n_offload_param_keys = ZT_LEN(zt_config_offload_param_keys);

/* DeepSpeed reads intra_op_parallelism (since 0.16.4) and silently ignores
 * thread_count, its old name, which its config docs still list: here both
 * spell the same setting. */
#define ZIO(f) ZT_OFF(zt_aio_config, f)
const zt_key zt_config_aio_keys[] = {
    {ZT_K("block_size", ZT_I64, ZIO(block_size)), .lo = 4096, .hi = 1073741824},
    {ZT_K("queue_depth", ZT_I64, ZIO(queue_depth)), .lo = 1, .hi = 65536},
    {ZT_K("intra_op_parallelism", ZT_I64, ZIO(thread_count)), .lo = 1, .hi = ZT_AIO_MAX_THREADS,
     .alias = "thread_count"},
    {ZT_K("thread_count", ZT_I64, ZIO(thread_count)), .lo = 1, .hi = ZT_AIO_MAX_THREADS,
     .alias = "intra_op_parallelism"},
    {ZT_K("single_submit", ZT_BOOL, ZIO(single_submit))},
    {ZT_K("overlap_events", ZT_BOOL, ZIO(overlap_events))},
    {ZT_K("use_gds", ZT_BOOL, ZIO(use_gds))},
};
const size_t zt_config_n_aio_keys = ZT_LEN(zt_config_aio_keys);

#define ZF(f) ZT_OFF(zt_fp16_config, f)
const zt_key zt_config_fp16_keys[] = {
    {ZT_K("enabled", ZT_CUSTOM, ZT_NONE)}, /* "auto" takes --fp16 (parse.c) */
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
const size_t zt_config_n_fp16_keys = ZT_LEN(zt_config_fp16_keys);

#define ZB(f) ZT_OFF(zt_bf16_config, f)
const zt_key zt_config_bf16_keys[] = {
    {ZT_K("enabled", ZT_CUSTOM, ZT_NONE)}, /* "auto" takes --bf16 (parse.c) */
    {ZT_K("immediate_grad_update", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "it only chooses when DeepSpeed's bf16 optimizer moves each gradient into its "
            "accumulator, not what is accumulated"},
    {ZT_K("check_grad_overflow", ZT_BOOL, ZB(check_grad_overflow))},
    {ZT_K("bf16_master_weights_and_grads", ZT_BOOL, ZB(bf16_master_weights_and_grads))},
    {ZT_K("bf16_optimizer_states", ZT_BOOL, ZB(bf16_optimizer_states))},
};
const size_t zt_config_n_bf16_keys = ZT_LEN(zt_config_bf16_keys);

#define ZA(f) ZT_OFF(zt_act_ckpt_config, f)
const zt_key zt_config_act_ckpt_keys[] = {
    /* Read for DeepSpeed's checks between them; what they do needs tensor parallelism. */
    {ZT_K("partition_activations", ZT_BOOL, ZA(partition_activations)), .flags = ZT_NO_EFFECT,
     .why = "it splits checkpoints across tensor-parallel ranks; without tensor parallelism "
            "each rank's activations are its own"},
    /* Without number_checkpoints it checkpoints every unit (parse.c). */
    {ZT_K("contiguous_memory_optimization", ZT_BOOL, ZA(contiguous_memory_optimization))},
    {ZT_K("cpu_checkpointing", ZT_BOOL, ZA(cpu_checkpointing))},
    {ZT_K("number_checkpoints", ZT_I64, ZA(number_checkpoints)), .lo = 1, .hi = INFINITY,
     .flags = ZT_NULLABLE},
    {ZT_K("synchronize_checkpoint_boundary", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "it only synchronizes the device before and after each checkpointed call"},
    {ZT_K("profile", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT,
     .why = "it only logs forward and backward times of each checkpointed call"},
};
const size_t zt_config_n_act_ckpt_keys = ZT_LEN(zt_config_act_ckpt_keys);

const zt_key zt_config_data_types_keys[] = {
    {ZT_K("grad_accum_dtype", ZT_CUSTOM, ZT_NONE)},
};
const size_t zt_config_n_data_types_keys = ZT_LEN(zt_config_data_types_keys);

/* csv_monitor and tensorboard share zt_csv_monitor_config; wandb, comet and
 * trackio are read into scratch only to learn whether they are enabled. */
#define ZM(f) ZT_OFF(zt_csv_monitor_config, f)
const zt_key zt_config_csv_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("output_path", ZT_STR, ZM(output_path)),
     .size = ZT_CAP(zt_csv_monitor_config, output_path)},
    {ZT_K("job_name", ZT_STR, ZM(job_name)), .size = ZT_CAP(zt_csv_monitor_config, job_name)},
};
const size_t zt_config_n_csv_keys = ZT_LEN(zt_config_csv_keys);

#define ZFP(f) ZT_OFF(zt_flops_profiler_config, f)
const zt_key zt_config_flops_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZFP(enabled))},
    {ZT_K("recompute_fwd_factor", ZT_REAL, ZFP(recompute_fwd_factor)), ZT_NONNEG},
    {ZT_K("profile_step", ZT_I64, ZFP(profile_step)), ZT_NONNEG},
    {ZT_K("module_depth", ZT_I64, ZFP(module_depth)), .lo = -1, .hi = INFINITY},
    {ZT_K("top_modules", ZT_I64, ZFP(top_modules)), .lo = 1, .hi = INFINITY},
    {ZT_K("detailed", ZT_BOOL, ZFP(detailed))},
    {ZT_K("output_file", ZT_STR, ZFP(output_file)),
     .size = ZT_CAP(zt_flops_profiler_config, output_file), .flags = ZT_NULLABLE},
};
const size_t zt_config_n_flops_keys = ZT_LEN(zt_config_flops_keys);

#define ZCL(f) ZT_OFF(zt_comms_logger_config, f)
const zt_key zt_config_comms_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZCL(enabled))},
    {ZT_K("verbose", ZT_BOOL, ZCL(verbose))},
    {ZT_K("prof_all", ZT_BOOL, ZCL(prof_all))},
    {ZT_K("debug", ZT_BOOL, ZCL(debug)), .flags = ZT_NO_EFFECT,
     .why = "it names each operation's Python caller, and zerotrain's callers are C functions "
            "of the stage that runs"},
    {ZT_K("prof_ops", ZT_CUSTOM, ZT_NONE)},
};
const size_t zt_config_n_comms_keys = ZT_LEN(zt_config_comms_keys);

/* DeepSpeed's checkpoint section: how its own save and load behave. Read to
 * be checked, then ignored with a warning (parse_monitor.c). */
const zt_key zt_config_checkpoint_keys[] = {
    {ZT_K("tag_validation", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("load_universal", ZT_BOOL, ZT_NONE)},
    {ZT_K("use_node_local_storage", ZT_BOOL, ZT_NONE)},
    {ZT_K("parallel_write", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("writer", ZT_CUSTOM, ZT_NONE)},
};
const size_t zt_config_n_checkpoint_keys = ZT_LEN(zt_config_checkpoint_keys);

const zt_key zt_config_wandb_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("group", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("team", ZT_STR, ZT_NONE), .flags = ZT_NULLABLE},
    {ZT_K("project", ZT_STR, ZT_NONE)},
};
const size_t zt_config_n_wandb_keys = ZT_LEN(zt_config_wandb_keys);

const zt_key zt_config_comet_keys[] = {
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
const size_t zt_config_n_comet_keys = ZT_LEN(zt_config_comet_keys);

const zt_key zt_config_trackio_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZM(enabled))},
    {ZT_K("project", ZT_STR, ZT_NONE)},
};
const size_t zt_config_n_trackio_keys = ZT_LEN(zt_config_trackio_keys);

const zt_key zt_config_timers_keys[] = {
    {ZT_K("throughput", ZT_CUSTOM, ZT_NONE)},
};
const size_t zt_config_n_timers_keys = ZT_LEN(zt_config_timers_keys);

const zt_key zt_config_throughput_keys[] = {
    {ZT_K("enabled", ZT_BOOL, ZC(throughput_timer))},
    {ZT_K("synchronized", ZT_BOOL, ZT_NONE)},
};
const size_t zt_config_n_throughput_keys = ZT_LEN(zt_config_throughput_keys);

#define ZP(f) ZT_OFF(zt_optim_config, f)
const zt_key zt_config_optimizer_keys[] = {
    {ZT_K("type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("params", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("legacy_fusion", ZT_BOOL, ZT_NONE), .flags = ZT_NO_EFFECT},
};
const size_t zt_config_n_optimizer_keys = ZT_LEN(zt_config_optimizer_keys);

const zt_key zt_config_adam_keys[] = {
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
const size_t zt_config_n_adam_keys = ZT_LEN(zt_config_adam_keys);

const zt_key zt_config_sgd_keys[] = {
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
const size_t zt_config_n_sgd_keys = ZT_LEN(zt_config_sgd_keys);

const zt_key zt_config_scheduler_keys[] = {
    {ZT_K("type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("params", ZT_CUSTOM, ZT_NONE)},
};
const size_t zt_config_n_scheduler_keys = ZT_LEN(zt_config_scheduler_keys);

#define ZS(f) ZT_OFF(zt_sched_config, f)
static const zt_key zt_warmup_lr_keys[] = {
    {ZT_K("warmup_min_lr", ZT_REAL, ZS(warmup_min_lr)), ZT_NONNEG},
    {ZT_K("warmup_max_lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_num_steps", ZT_I64, ZS(warmup_num_steps)), ZT_NONNEG,
     .auto_bit = ZT_AUTO_WARMUP_STEPS},
    {ZT_K("warmup_type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_warmup_decay_keys[] = {
    {ZT_K("total_num_steps", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_min_lr", ZT_REAL, ZS(warmup_min_lr)), ZT_NONNEG},
    {ZT_K("warmup_max_lr", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_num_steps", ZT_I64, ZS(warmup_num_steps)), ZT_NONNEG,
     .auto_bit = ZT_AUTO_WARMUP_STEPS},
    {ZT_K("warmup_type", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("last_batch_iteration", ZT_CUSTOM, ZT_NONE)},
};

static const zt_key zt_warmup_cosine_keys[] = {
    {ZT_K("total_num_steps", ZT_CUSTOM, ZT_NONE)},
    {ZT_K("warmup_min_ratio", ZT_REAL, ZS(warmup_min_ratio)), ZT_NONNEG},
    {ZT_K("warmup_num_steps", ZT_I64, ZS(warmup_num_steps)), ZT_NONNEG,
     .auto_bit = ZT_AUTO_WARMUP_STEPS},
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

const zt_sched_entry zt_config_schedulers[] = {
    {"WarmupLR", ZT_SCHED_WARMUP_LR, zt_warmup_lr_keys, ZT_LEN(zt_warmup_lr_keys)},
    {"WarmupDecayLR", ZT_SCHED_WARMUP_DECAY_LR, zt_warmup_decay_keys,
     ZT_LEN(zt_warmup_decay_keys)},
    {"WarmupCosineLR", ZT_SCHED_WARMUP_COSINE_LR, zt_warmup_cosine_keys,
     ZT_LEN(zt_warmup_cosine_keys)},
    {"OneCycle", ZT_SCHED_ONE_CYCLE, zt_one_cycle_keys, ZT_LEN(zt_one_cycle_keys)},
    {"LRRangeTest", ZT_SCHED_LR_RANGE_TEST, zt_lr_range_keys, ZT_LEN(zt_lr_range_keys)},
};
_Static_assert(ZT_LEN(zt_config_schedulers) == ZT_CONFIG_N_SCHEDULERS,
               "ZT_CONFIG_N_SCHEDULERS counts zt_config_schedulers");

/* zt_offload_device by value. */
const char *const zt_config_offload_devices[] = {"none", "cpu", "nvme"};
const size_t zt_config_n_offload_devices = ZT_LEN(zt_config_offload_devices);

/* Names DeepSpeed hands to torch.optim.lr_scheduler (getattr, case-sensitive). */
const char *const zt_config_torch_schedulers[] = {
    "LambdaLR",          "MultiplicativeLR",  "StepLR",     "MultiStepLR",
    "ConstantLR",        "LinearLR",          "ExponentialLR", "SequentialLR",
    "CosineAnnealingLR", "ChainedScheduler",  "ReduceLROnPlateau", "CyclicLR",
    "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR",
};
const size_t zt_config_n_torch_schedulers = ZT_LEN(zt_config_torch_schedulers);

/* DeepSpeed's own optimizers, matched on type.lower(). */
const char *const zt_config_ds_optimizers[] = {
    "adagrad", "adam",   "adamw", "lamb",  "onebitadam", "onebitlamb",
    "zerooneadam", "muadam", "muadamw", "musgd", "lion", "muon",
};
const size_t zt_config_n_ds_optimizers = ZT_LEN(zt_config_ds_optimizers);

/* torch.optim classes DeepSpeed would getattr (case-sensitive). */
const char *const zt_config_torch_optimizers[] = {
    "Adadelta", "Adafactor", "Adagrad", "Adam",  "AdamW",      "Adamax", "ASGD",
    "LBFGS",    "NAdam",     "RAdam",   "RMSprop", "Rprop",    "SGD",    "SparseAdam",
};
const size_t zt_config_n_torch_optimizers = ZT_LEN(zt_config_torch_optimizers);

/* Every table by the path it is read at: unknown keys are looked up here to say
 * where a key belongs when it was put in the wrong section. */
const zt_section_ref zt_config_sections[] = {
    {"", zt_config_top_keys, ZT_LEN(zt_config_top_keys)},
    {"zero_optimization", zt_config_zero_keys, ZT_LEN(zt_config_zero_keys)},
    {"zero_optimization.offload_optimizer", zt_config_offload_optimizer_keys,
     ZT_LEN(zt_config_offload_optimizer_keys)},
    {"zero_optimization.offload_param", zt_config_offload_param_keys,
     ZT_LEN(zt_config_offload_param_keys)},
    {"aio", zt_config_aio_keys, ZT_LEN(zt_config_aio_keys)},
    {"fp16", zt_config_fp16_keys, ZT_LEN(zt_config_fp16_keys)},
    {"bf16", zt_config_bf16_keys, ZT_LEN(zt_config_bf16_keys)},
    {"optimizer", zt_config_optimizer_keys, ZT_LEN(zt_config_optimizer_keys)},
    {"optimizer.params", zt_config_adam_keys, ZT_LEN(zt_config_adam_keys)},
    {"optimizer.params", zt_config_sgd_keys, ZT_LEN(zt_config_sgd_keys)},
    {"scheduler", zt_config_scheduler_keys, ZT_LEN(zt_config_scheduler_keys)},
    {"scheduler.params", zt_warmup_decay_keys, ZT_LEN(zt_warmup_decay_keys)},
    {"scheduler.params", zt_warmup_cosine_keys, ZT_LEN(zt_warmup_cosine_keys)},
    {"scheduler.params", zt_one_cycle_keys, ZT_LEN(zt_one_cycle_keys)},
    {"scheduler.params", zt_lr_range_keys, ZT_LEN(zt_lr_range_keys)},
    {"activation_checkpointing", zt_config_act_ckpt_keys, ZT_LEN(zt_config_act_ckpt_keys)},
    {"data_types", zt_config_data_types_keys, ZT_LEN(zt_config_data_types_keys)},
    {"csv_monitor", zt_config_csv_keys, ZT_LEN(zt_config_csv_keys)},
    {"tensorboard", zt_config_csv_keys, ZT_LEN(zt_config_csv_keys)},
    {"wandb", zt_config_wandb_keys, ZT_LEN(zt_config_wandb_keys)},
    {"comet", zt_config_comet_keys, ZT_LEN(zt_config_comet_keys)},
    {"trackio", zt_config_trackio_keys, ZT_LEN(zt_config_trackio_keys)},
    {"flops_profiler", zt_config_flops_keys, ZT_LEN(zt_config_flops_keys)},
    {"comms_logger", zt_config_comms_keys, ZT_LEN(zt_config_comms_keys)},
    {"checkpoint", zt_config_checkpoint_keys, ZT_LEN(zt_config_checkpoint_keys)},
    {"timers", zt_config_timers_keys, ZT_LEN(zt_config_timers_keys)},
    {"timers.throughput", zt_config_throughput_keys, ZT_LEN(zt_config_throughput_keys)},
    {"pipeline", zt_config_pipeline_keys, ZT_CONFIG_N_PIPELINE_KEYS},
};
const size_t zt_config_n_sections = ZT_LEN(zt_config_sections);

/* ------------------------------------------------------------------ type names */

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

