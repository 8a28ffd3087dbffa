/*
 * config: the DeepSpeed JSON config (version 0.19.6 semantics, see
 * ../shared/reference/deepspeed-semantics.md), read with jansson.
 *
 * The file may carry hjson-isms seen in the wild: `#` and `//` line comments,
 * `/ * * /` block comments and trailing commas. They are blanked out (newlines kept)
 * before jansson parses, so every error keeps the user's line numbers. Duplicate
 * keys, unknown keys (with a "did you mean"), wrong types, negative sizes and
 * out-of-range values are errors that name the JSON path, the value and what was
 * expected; every error of a file is reported in one run (one alone as it is,
 * several in one message, one line each, in line order). `"auto"` values
 * resolve as HuggingFace's integration resolves them: from command-line values
 * (batch sizes, lr, --fp16/--bf16), from the model and the run length
 * (zt_config_resolve_run), else from defaults; each choice is recorded in
 * `notes`. Features that are parsed but not built yet (16-bit master
 * weights, ...) are a ZT_ERR_UNSUPPORTED "not implemented yet" error
 * when enabled; settings DeepSpeed would silently ignore (offload at a stage
 * without the partitioning it needs) are ZT_ERR_CONFIG. Sections zerotrain
 * reads but does not act on (wandb, comet, trackio, checkpoint) are a warning
 * in `notes`, an error under --strict. docs/config.md is the user's table.
 *
 * Implementation: one file per job in engine/config/ (the map is at the top of
 * config_impl.h).
 *
 * Memory: zt_config is a plain value; nothing inside needs freeing.
 * Collective: none (each rank parses the file itself).
 */
#ifndef ZT_CONFIG_H
#define ZT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/dtype.h"
#include "engine/fingerprint.h"
#include "engine/status.h"

#define ZT_CONFIG_MAX_NOTES 64
#define ZT_CONFIG_NOTE_LEN 256

typedef enum { ZT_OPTIM_ADAM = 0, ZT_OPTIM_ADAMW, ZT_OPTIM_SGD } zt_optim_type;

typedef enum {
    ZT_SCHED_NONE = 0,
    ZT_SCHED_WARMUP_LR,
    ZT_SCHED_WARMUP_DECAY_LR,
    ZT_SCHED_WARMUP_COSINE_LR,
    ZT_SCHED_ONE_CYCLE,
    ZT_SCHED_LR_RANGE_TEST
} zt_sched_type;

typedef enum { ZT_WARMUP_LOG = 0, ZT_WARMUP_LINEAR } zt_warmup_type;

typedef enum { ZT_OFFLOAD_NONE = 0, ZT_OFFLOAD_CPU, ZT_OFFLOAD_NVME } zt_offload_device;

typedef struct {
    zt_optim_type type;
    bool from_default; /* no "optimizer" section: AdamW with the --lr value */
    double lr, beta1, beta2, eps, weight_decay;
    bool adam_w_mode;      /* effective decoupled decay (type AdamW, or Adam with adam_w_mode) */
    bool bias_correction;
    double momentum, dampening; /* SGD */
    bool nesterov;
} zt_optim_config;

typedef struct {
    zt_sched_type type;
    /* WarmupLR / WarmupDecayLR */
    double warmup_min_lr, warmup_max_lr; /* warmup_max_lr < 0: the optimizer lr */
    int64_t warmup_num_steps;
    zt_warmup_type warmup_type;
    int64_t total_num_steps; /* WarmupDecayLR, WarmupCosineLR */
    /* WarmupCosineLR */
    double warmup_min_ratio, cos_min_ratio;
    /* OneCycle */
    double cycle_min_lr, cycle_max_lr;
    int64_t cycle_first_step_size, cycle_second_step_size;
    int64_t cycle_first_stair_count, cycle_second_stair_count;
    int64_t decay_step_size;
    double decay_lr_rate;
    bool cycle_momentum;
    double cycle_min_mom, cycle_max_mom, decay_mom_rate;
    /* LRRangeTest */
    double lr_range_test_min_lr, lr_range_test_step_rate;
    int64_t lr_range_test_step_size;
    bool lr_range_test_staircase;
} zt_sched_config;

typedef struct {
    zt_offload_device device;
    char nvme_path[256];
    int64_t buffer_count, buffer_size, max_in_cpu;
    bool pin_memory;
    bool pipeline_read, pipeline_write, fast_init;
    double ratio;
} zt_offload_config;

/* The top-level `aio` section (DeepSpeed runtime/swap_tensor/constants.py):
 * how the nvme offload reads and writes its swap files (engine/nvme/aio.h). */
#define ZT_AIO_MAX_THREADS 32
typedef struct {
    int64_t block_size;   /* bytes per I/O request, a multiple of 4096 */
    int64_t queue_depth;  /* requests in flight per I/O thread */
    int64_t thread_count; /* intra_op_parallelism: I/O threads an operation is spread over */
    bool single_submit;   /* submit requests one at a time rather than in batches */
    bool overlap_events;  /* refill the queue as requests complete, not batch by batch */
    bool use_gds;         /* GPUDirect Storage (refused: not built) */
} zt_aio_config;

typedef struct {
    int stage;
    bool contiguous_gradients, reduce_scatter, allgather_partitions;
    bool overlap_comm; /* resolved: default is stage == 3 */
    bool overlap_comm_given; /* the config set it (else it follows the stage) */
    bool round_robin_gradients, load_from_fp32_weights, ignore_unused_parameters;
    bool use_multi_rank_bucket_allreduce, elastic_checkpoint;
    int64_t reduce_bucket_size, allgather_bucket_size; /* elements */
    int64_t sub_group_size;
    int64_t stage3_prefetch_bucket_size, stage3_param_persistence_threshold;
    int64_t stage3_model_persistence_threshold, stage3_max_live_parameters;
    int64_t stage3_max_reuse_distance;
    bool stage3_gather_16bit_weights_on_model_save, stage3_allgather_sequential;
    int64_t zero_hpz_partition_size, mics_shard_size;
    bool zero_quantized_weights, zero_quantized_gradients;
    bool zero_quantized_nontrainable_weights;
    zt_offload_config offload_optimizer, offload_param;
} zt_zero_config;

typedef struct {
    bool enabled;
    double loss_scale; /* 0 = dynamic */
    int initial_scale_power;
    int64_t loss_scale_window;
    int hysteresis;
    bool consecutive_hysteresis;
    double min_loss_scale;
    bool fp16_master_weights_and_grads;
} zt_fp16_config;

typedef struct {
    bool enabled, check_grad_overflow;
    bool bf16_master_weights_and_grads, bf16_optimizer_states;
} zt_bf16_config;

typedef struct {
    bool partition_activations, contiguous_memory_optimization, cpu_checkpointing;
    int64_t number_checkpoints; /* -1 = None; else >= 1 */
    /* contiguous_memory_optimization without number_checkpoints: one checkpoint
     * per unit, as Megatron-style callers pass their layer count. */
    bool number_checkpoints_from_model;
} zt_act_ckpt_config;

typedef struct {
    char grad_accum_dtype[8]; /* "fp32" | "fp16" | "bf16"; "" = not given */
} zt_data_types_config;

/* A DeepSpeed monitor that writes files: csv_monitor and tensorboard. */
typedef struct {
    bool enabled;
    char output_path[512];
    char job_name[128];
} zt_csv_monitor_config;

/* flops_profiler (DeepSpeed's profiling/constants.py defaults). */
typedef struct {
    bool enabled;
    int64_t profile_step;        /* 0-based: profiles the step that starts at this count */
    int64_t module_depth;        /* -1: every depth */
    int64_t top_modules;
    bool detailed;
    double recompute_fwd_factor; /* backward counts (2 + factor) x forward FLOPs */
    char output_file[512];       /* "" = stdout */
} zt_flops_profiler_config;

/* comms_logger.prof_ops: the collectives zerotrain runs, in zt_comm_kind's
 * order (engine/comm/comm.h). */
enum {
    ZT_COMMS_OP_ALL_REDUCE = 1u << 0,
    ZT_COMMS_OP_REDUCE_SCATTER = 1u << 1,
    ZT_COMMS_OP_ALL_GATHER = 1u << 2,
    ZT_COMMS_OP_BROADCAST = 1u << 3,
    ZT_COMMS_OP_ALL_TO_ALL = 1u << 4, /* ZeRO++ qgZ */
    ZT_COMMS_OP_SEND = 1u << 5,       /* pipeline point to point */
    ZT_COMMS_OP_RECV = 1u << 6,
};

typedef struct {
    bool enabled, verbose, prof_all, debug;
    unsigned prof_ops; /* ZT_COMMS_OP_* bits; used when prof_all is false */
} zt_comms_logger_config;

/* "auto" values that need the model or the run length (zt_config_resolve_run). */
enum {
    ZT_AUTO_REDUCE_BUCKET = 1u << 0,  /* zero_optimization.reduce_bucket_size */
    ZT_AUTO_PREFETCH = 1u << 1,       /* zero_optimization.stage3_prefetch_bucket_size */
    ZT_AUTO_PERSISTENCE = 1u << 2,    /* zero_optimization.stage3_param_persistence_threshold */
    ZT_AUTO_TOTAL_STEPS = 1u << 3,    /* scheduler.params.total_num_steps */
    ZT_AUTO_WARMUP_STEPS = 1u << 4,   /* scheduler.params.warmup_num_steps */
};

#define ZT_CONFIG_MAX_UNBUILT 8

/* Pipeline parallelism (engine/pipe): the DeepSpeed `pipeline` section and
 * the PipelineModule arguments the command line gives. */
typedef struct {
    int stages;            /* P >= 1: --pipeline-stages, else pipeline.stages, else 1 */
    int data_parallel;     /* D = world size / P: what the batch rule and ZeRO use */
    char partition[128];   /* --partition-method, else pipeline.partition unless its
                            * default "best" (which DeepSpeed never reads), else
                            * "parameters" (PipelineModule's default) */
    char schedule[8];      /* "1f1b" (default) or "gpipe" (--pipeline-schedule) */
    /* pipeline.activation_checkpoint_interval: units per checkpoint segment
     * within each stage, 0 = off; the command-line interval takes precedence. */
    int64_t activation_checkpoint_interval;
} zt_pipeline_config;

/* The batch triple's bounds, checked where the config (or a command-line
 * value) gives or derives them. A micro-batch's sample count sizes every
 * activation buffer; each accumulation step is a forward and a backward in
 * the step's schedule (engine/pipe/schedule.h builds at most 2^24); the
 * global batch is counted in every step's sample counters. */
#define ZT_CONFIG_MAX_MICRO_BATCH ((int64_t)1 << 24)
#define ZT_CONFIG_MAX_GAS ((int64_t)1 << 24)
#define ZT_CONFIG_MAX_TRAIN_BATCH ((int64_t)1 << 40)

typedef struct {
    /* resolved batch triple (after DeepSpeed's derivation with the data-parallel
     * size: the world size, divided by the pipeline stages when pipelining) */
    int64_t train_batch_size, micro_batch_size, gradient_accumulation_steps;
    int64_t steps_per_print; /* 0 = off (DeepSpeed 0.19.6 default None) */
    double gradient_clipping; /* 0 = off; default 1.0 */
    bool prescale_gradients;
    double gradient_predivide_factor;
    bool wall_clock_breakdown, memory_breakdown;
    bool zero_allow_untested_optimizer;
    bool throughput_timer; /* timers.throughput.enabled, default true */
    zt_optim_config optimizer;
    zt_sched_config scheduler;
    zt_zero_config zero;
    zt_aio_config aio;
    bool aio_present; /* the config has an aio section */
    zt_fp16_config fp16;
    zt_bf16_config bf16;
    bool activation_checkpointing_present;
    zt_act_ckpt_config activation_checkpointing;
    /* Units between activation checkpoints from the command line (0 = off);
     * -1 = not given. zt_config_checkpoint_interval resolves the effective one. */
    int64_t activation_checkpoint_interval;
    zt_data_types_config data_types;
    zt_csv_monitor_config csv_monitor;
    zt_csv_monitor_config tensorboard;
    zt_flops_profiler_config flops_profiler;
    zt_comms_logger_config comms_logger;
    zt_pipeline_config pipeline;
    char communication_data_type[8]; /* "fp16" | "bf16" | "fp32"; "" = not given */
    char log_level[16];              /* lower case; DeepSpeed's default "warning" */

    /* JSON paths of the DeepSpeed features switched on in the file that this
     * build has no field for (a section such as "amp"), in file order.
     * zt_config_check_supported refuses each. */
    int n_unbuilt;
    char unbuilt[ZT_CONFIG_MAX_UNBUILT][96];

    /* ZT_AUTO_* bits: "auto" values zt_config_resolve_run has yet to fill. */
    unsigned auto_pending;

    /* What rank 0 should print: resolved "auto" values, defaults taken,
     * deprecation warnings. */
    int n_notes;
    char notes[ZT_CONFIG_MAX_NOTES][ZT_CONFIG_NOTE_LEN];
} zt_config;

/* Values from the command line. A field < 0 (or lr < 0) means "not given".
 * A flag fills a missing or "auto" config value; a flag that contradicts an
 * explicit config value is a ZT_ERR_CONFIG error naming both. */
typedef struct {
    int64_t train_batch_size, micro_batch_size, gradient_accumulation_steps;
    double lr;
    /* Units between activation checkpoints (0 = off); -1 = not given. It takes
     * precedence over activation_checkpointing.number_checkpoints (noted). */
    int64_t activation_checkpoint_interval;
    /* --fp16 / --bf16 (HF's): fill fp16.enabled / bf16.enabled when "auto" or
     * missing; an explicit false is a contradiction. "auto" without the flag
     * is false, as in HF. */
    bool fp16, bf16;
    /* --strict: sections zerotrain ignores with a warning (wandb, comet,
     * trackio, checkpoint) are refused instead. */
    bool strict;
    /* --estimate-memory plans for a world the config was not written for: a
     * batch triple that does not work out there keeps the micro batch (what
     * the plan depends on) and rescales train_batch_size, with a note,
     * instead of failing. */
    bool rescale_batch;
    /* Pipeline parallelism: --pipeline-stages (-1 = not given), --partition-method
     * and --pipeline-schedule (NULL = not given; the strings must outlive the parse). */
    int64_t pipeline_stages;
    const char *partition_method, *pipeline_schedule;
} zt_config_overrides;

void zt_config_overrides_init(zt_config_overrides *ov); /* all "not given" */

/* What "auto" needs from the run, as HF's trainer_config_finalize has it. */
typedef struct {
    /* The model's hidden size (HF: model.config.hidden_size); <= 0: unknown. */
    int64_t hidden_size;
    /* Optimizer steps of the whole run, counted from step 0; < 0: unknown. */
    int64_t total_steps;
    /* --warmup-steps (HF's warmup_steps): >= 1 a step count, in [0, 1) a
     * fraction of total_steps; < 0: not given (0, HF's default). */
    double warmup_steps;
} zt_config_run;

/* Parse, validate and resolve a config for `world_size` ranks (P pipeline
 * stages x D data-parallel ranks; P = 1 without pipelining).
 * `path` is used in messages. Errors: ZT_ERR_IO (unreadable file),
 * ZT_ERR_CONFIG (anything wrong with the content), ZT_ERR_UNSUPPORTED (a valid
 * feature this build cannot run yet). */
zt_status zt_config_load_file(const char *path, const zt_config_overrides *ov, int world_size,
                              zt_config *out);
zt_status zt_config_load_string(const char *text, const char *name,
                                const zt_config_overrides *ov, int world_size,
                                zt_config *out);

/* The same without the support check: parse, validate and resolve only (the
 * estimator reads configs whose features this build cannot train yet). */
zt_status zt_config_parse_file(const char *path, const zt_config_overrides *ov, int world_size,
                               zt_config *out);
zt_status zt_config_parse_string(const char *text, const char *name,
                                 const zt_config_overrides *ov, int world_size,
                                 zt_config *out);

/* Adds the resolved config to a run's fingerprint: the batch triple and the
 * ZeRO stage with their values, then every section whole, named by its JSON
 * path (the struct bytes: zt_config_defaults zeroes the padding). Notes and
 * the csv_monitor's output path are left out: they may differ per node. */
void zt_config_fingerprint(const zt_config *cfg, zt_fingerprint *fp);

/* Fills the "auto" values that need the model or the run length, as HF's
 * integration does (../shared/reference/deepspeed-more.md section 4), each
 * noted: with H = hidden_size, zero_optimization.reduce_bucket_size = H*H and,
 * at stage 3, stage3_prefetch_bucket_size = int(0.9*H*H) and
 * stage3_param_persistence_threshold = 10*H (below stage 3 DeepSpeed's
 * defaults); scheduler total_num_steps = total_steps and warmup_num_steps =
 * warmup_steps (a count) or ceil(total_steps * warmup_steps) (a fraction).
 * Values whose fact is unknown stay pending (zt_config_pending_auto names the
 * first; zt_trainer_init refuses a config with one), except a hidden-size
 * "auto" without a hidden size, which is a ZT_ERR_CONFIG error. `name` is the
 * config's name for messages. */
zt_status zt_config_resolve_run(zt_config *cfg, const zt_config_run *run, const char *name);

/* The JSON path of the first "auto" still pending, or NULL. */
const char *zt_config_pending_auto(const zt_config *cfg);

/* What --estimate-memory plans with when no config is given: DeepSpeed's
 * defaults and an Adam optimizer, the batch and lr from the overrides (their
 * "auto"), parsed like a file named "default config (Adam)". */
zt_status zt_config_parse_default(const zt_config_overrides *ov, int world_size, zt_config *out);

/* The settings of a forward-only use of a trained model (generate, eval): one
 * micro-batch of `micro_batch` samples per rank, no accumulation, and an SGD
 * optimizer that never steps. */
zt_status zt_config_load_inference(int64_t micro_batch, int world_size, zt_config *out);

/* ZT_ERR_UNSUPPORTED "... is not implemented yet" for valid settings this build
 * cannot run (the one place later features remove their refusal from): aio
 * use_gds, partial optimizer offload, offload_param with hpZ, fp16/bf16 master
 * weights and bf16 optimizer states, ZeRO++ quantization, MiCS/hpZ below
 * stage 3, communication_data_type other than fp32 or the training dtype (at
 * stage 0: other than zt_config_grad_dtype), the DeepSpeed sections in
 * `unbuilt`. Every refusal is reported: one alone as it is, several in one
 * message, one line each. */
zt_status zt_config_check_supported(const zt_config *cfg);

/* Precision. The training ("compute") dtype is what parameters and
 * activations are stored in (ops convert to fp32 inside, see dtype.h); master
 * weights and optimizer states are fp32 whatever it is.
 *
 * compute: fp16 or bf16 when that section is enabled, else fp32.
 *
 * grad (how GRADS are stored and accumulated over micro-steps):
 *   fp32 training: fp32.
 *   fp16/bf16 training: data_types.grad_accum_dtype when given (fp32 or the
 *   training dtype); else fp32 when gradient_accumulation_steps > 1 (summing
 *   micro-steps in 16 bits loses precision: zerotrain's default, where
 *   DeepSpeed's is the model dtype); else the compute dtype (one micro-step
 *   has nothing to accumulate).
 *
 * comm (the dtype gradients are reduced in):
 *   stage 0: the grad dtype (stage 0 reduces the gradient buffer in place;
 *   zt_config_check_supported refuses a communication_data_type that differs).
 *   stages 1-3: communication_data_type when given, else the compute dtype. */
zt_dtype zt_config_compute_dtype(const zt_config *cfg);
zt_dtype zt_config_grad_dtype(const zt_config *cfg);
zt_dtype zt_config_comm_dtype(const zt_config *cfg);

/* Units between activation checkpoints for a model of `n_units` checkpointable
 * units; 0 = no checkpointing. The command-line interval when given; else
 * ceil(n_units / number_checkpoints) when number_checkpoints is set; else 1
 * when number_checkpoints_from_model (one per unit); else 0.
 * The caller refuses cpu_checkpointing with a result of 0 (only it knows
 * n_units). */
int64_t zt_config_checkpoint_interval(const zt_config *cfg, int n_units);

/* Optimizer state floats per parameter: Adam/AdamW 2 (exp_avg, exp_avg_sq),
 * SGD 1 with momentum (momentum_buffer), else 0. */
int zt_config_optim_state_floats(const zt_optim_config *o);

const char *zt_optim_type_name(zt_optim_type t);
const char *zt_sched_type_name(zt_sched_type t);

#endif
