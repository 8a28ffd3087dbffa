/*
 * trainer: the training loop. Per optimizer step: for each of the
 * gradient_accumulation_steps micro-steps, read this rank's micro-batch, run
 * the units forward, the loss, the units backward; the ZeRO stage policy
 * (engine/zero/stage.h) says where each unit's parameters come from and where
 * its gradients go. Then at the boundary: the overflow check and loss scaler,
 * global-norm clipping, the optimizer step on the rank's span, the stage's
 * after-step (parameter all-gather or persistent re-gather), the scheduler
 * step, and the observer's progress line.
 *
 * The trainer is split by job (engine/train/trainer_impl.h has the struct):
 *   trainer.c    init, the loop, the boundary step, histories, stats
 *   buffers.c    the plan of every buffer, per stage and placement
 *   micro.c      one micro-step: batch, forward, loss, backward, reduction
 *   placement.c  precision and offload: fp32 views, master weights, where the
 *                optimizer works, writing stepped values back, dumps
 *   recompute.c  activation checkpointing: slots, kept inputs, re-running a
 *                segment during backward
 *   infer.c      evaluation and sampling (forward only)
 *
 * Precision. fp32: every tensor is fp32 and the parameters are what the
 * optimizer steps. fp16/bf16 (mixed): parameters, activations (unit outputs
 * and saved tensors) and the per-micro-step gradients are stored in 16 bits;
 * units compute in fp32 on converted copies of one unit's parameters, inputs,
 * outputs and saved tensors (WORK), and each result is rounded once when it is
 * stored. GRADS holds the gradient in zt_config_grad_dtype (fp32 when
 * micro-steps accumulate, unless data_types.grad_accum_dtype says otherwise):
 * every accumulation adds in fp32. Reductions communicate in
 * zt_config_comm_dtype and add in fp32 (comm.h). The optimizer steps an fp32
 * master copy of the rank's span (MASTER) with fp32 moments, then writes the
 * rounded 16-bit parameters back. Under fp16 the loss is multiplied by the
 * loss scale (scaler.h); an inf or nan in any rank's reduced gradients skips
 * the step on every rank (fp16 always, bf16 with check_grad_overflow).
 *
 * Offload. offload_optimizer (a stage with the optimizer sharded): MASTER,
 * OPTIM and an fp32 gradient partition live in host arenas; each reduced
 * bucket is copied to the host and added there, the optimizer runs on the CPU
 * (optim.h, host kernels), and the new parameters are rounded on the host and
 * copied to the device. offload_param (a stage with parameters sharded): the
 * non-persistent parameter shards live in host PARAMS; each gather copies the
 * shard into its slot of the gathered block. Device "nvme" (nvme.c on
 * engine/nvme, docs/nvme.md): MASTER and OPTIM live in swap files and step
 * sub-group by sub-group through the SWAP buffers; the parameter shards past
 * max_in_cpu live in swap files and are read into a SWAP buffer for their
 * gather; the fp32 gradient partition lives in a swap file too, each
 * sub-group's slice added into in a SWAP buffer as reduced buckets arrive
 * (the offload's host staging of a bucket cut to a sub-group).
 *
 * Activation checkpointing (interval K > 0): units form segments [sK, sK+K).
 * Forward keeps only each segment's input (ACTS on the device, or the host
 * with cpu_checkpointing) and runs the units through K reusable slots of
 * output and saved tensors. Backward re-runs each segment's forward from its
 * kept input (same dropout keys, so the same values) before its backward; the
 * last segment's activations are still in the slots and are not recomputed.
 *
 * What each stage holds is the stage policy's statement (zt_stage_memory): with
 * Psi padded parameters, N ranks, c bytes of the compute dtype, g of the
 * gradient dtype, k optimizer floats per parameter (Adam 2): stage 0 PARAMS
 * c Psi, GRADS g Psi, OPTIM 4k Psi; stage 1 OPTIM 4k Psi/N; stage 2 + GRADS
 * g Psi/N; stage 3 + PARAMS c Psi/N (+ persistent units whole, + the hpZ
 * secondary Psi/h). Mixed precision adds MASTER 4 Psi (stage 0) or 4 Psi/N.
 * With fp16 and Adam and one micro-step that is the ZeRO paper's 2 + 2 + 12
 * bytes per parameter. COMM holds the reduce buckets, the all-gather bucket
 * (stages 1-2), one unit's fp32 gradient (fp32 stages 2-3) and the gather
 * window (stage 3).
 *
 * Memory: every buffer is planned into and allocated from the trainer's arenas
 * (zt_memory): PARAMS, GRADS, MASTER, OPTIM; ACTS (inputs, tokens, lengths,
 * labels, dropout keys, unit outputs, saved tensors, checkpoints); COMM; WORK
 * (activation-gradient ping-pong, the units' scratch, the fp32 copies of one
 * unit under mixed precision, host staging of the micro-batch, of reduced
 * buckets and new parameters when offloaded, and of the logits evaluation and
 * sampling read). Nothing is allocated inside the step loop except stage-3
 * gather blocks, which come from the COMM arena's reservation. Evaluation and
 * sampling reuse the training buffers (micro-batches of at most
 * train_micro_batch_size_per_gpu). zt_trainer_init allocates the trainer
 * itself; zt_trainer_free releases everything. The options' pointers are
 * borrowed and must outlive the trainer.
 *
 * Pipeline parallelism (engine/pipe/pipe.h): the trainer holds one stage's
 * units (its `model` is the stage's view; unit indices below are the
 * stage's, the whole model's being zt_pipe_first_unit + u), its ZeRO runs over
 * the stage's data-parallel group, and a step is the stage's schedule run by
 * zt_pipe_run_step with the hooks of micro.c, which keep up to zt_pipe_slots
 * micro-batches' batches and activations (slots) between their forward and
 * backward. With activation checkpointing the slots keep only their segment
 * inputs (and a sending stage's output); a backward recomputes its last
 * segment too when another micro-batch's forward ran since its own. The
 * overflow test, the gradient norm, the loss and the dumps cover every
 * stage. Without pipelining the same path runs with one stage and one slot.
 *
 * Checkpoints (engine/ckpt) read and write the optimizer's side of each unit
 * through zt_trainer_unit_span, rebuild the parameters with
 * zt_trainer_refresh_params, and carry the counters (zt_trainer_counters) and
 * the scheduler's and scaler's own state.
 * Collective: zt_trainer_init, zt_trainer_train, zt_trainer_eval,
 * zt_trainer_generate(_from), zt_trainer_dump_params, zt_trainer_param_norm,
 * zt_trainer_refresh_params.
 */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/sampler.h"
#include "engine/arena.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/nvme/swapper.h"
#include "engine/pipe/pipe.h"
#include "engine/train/sched.h"
#include "engine/train/scaler.h"
#include "engine/world/world.h"
#include "engine/zero/layout.h"
#include "engine/zero/stage.h"
#include "models/model.h"

typedef struct zt_trainer zt_trainer;

/* wall_clock_breakdown's timers, per optimizer step (summed over micro-steps). */
typedef enum {
    ZT_TIMER_FWD = 0,
    ZT_TIMER_BWD,
    ZT_TIMER_BWD_INNER,
    ZT_TIMER_BWD_ALLREDUCE,
    ZT_TIMER_STEP,
    ZT_TIMER_N
} zt_timer_kind;

/* One optimizer step (applied or skipped), as the progress lines tell it. */
typedef struct {
    int64_t global_steps, skipped_steps, micro_steps, epoch, global_samples;
    double loss, lr, grad_norm;
    double loss_scale;        /* fp16: the scale after this step's update; < 0 otherwise */
    double beta1, beta2;      /* Adam betas, or SGD momentum in beta1 */
    bool is_sgd;
    double curr_samples_per_sec, running_samples_per_sec; /* <= 0: not timed yet */
    double seconds;                                       /* this step's wall time */
    size_t mem_allocated, max_mem_allocated;              /* device bytes */
    double timers_ms[ZT_TIMER_N];                         /* summed over micro-steps */
} zt_step_info;

/* One evaluation: validation loss, and accuracy (NAN for language models). */
typedef struct {
    int64_t step;
    double loss, accuracy, seconds;
} zt_eval_point;

/* Who hears about training as it runs (the monitor), on every rank. Any
 * member may be NULL. */
typedef struct {
    void (*step)(void *ctx, const zt_step_info *s);
    void (*overflow)(void *ctx, const zt_scaler_event *ev, bool fp16);
    void (*eval)(void *ctx, const zt_eval_point *e);
    void *ctx;
} zt_trainer_observer;

typedef struct {
    const zt_config *cfg;
    const zt_model *model;
    zt_dataset *data;        /* training samples (their shape must fit the model) */
    const zt_world *world;
    const zt_backend *be;
    zt_comm *comm;           /* the world's communicator */
    uint64_t seed;           /* data order, initial weights, dropout */
    /* Evaluation during training: every eval_interval steps and after the
     * last, eval_iters micro-batches per rank (<= 0: the whole split).
     * eval_data NULL: none. */
    zt_dataset *eval_data;
    int64_t eval_interval, eval_iters;
    /* --dump-grads: the reduced, unscaled gradient of the first step goes
     * here; a path with "%d" gets every step's, %d the step number. */
    const char *grad_dump_path;
    /* Testing aid (--inject-overflow): at these steps (1-based) the last rank
     * writes inf into unit inject_unit's gradient before it is reduced
     * (inject_unit < 0: the middle unit). */
    const int64_t *inject_steps;
    int n_inject_steps, inject_unit;
    /* Without a loss scaler (fp32, bf16) a step whose loss, gradient norm or
     * overflow check (bf16's check_grad_overflow) is not finite fails with
     * ZT_ERR_NUMERIC on every rank before anything is stepped; true does what
     * DeepSpeed does (steps on, or skips where bf16 checks for overflow)
     * until ZT_TRAIN_MAX_NONFINITE_STEPS such steps in a row. */
    bool nonfinite_continue;
    zt_trainer_observer observer;
    /* Called after every optimizer step (and the evaluation due at it) on
     * every rank; a failure ends training and is returned. NULL: none. (cmd
     * saves checkpoints here.) */
    zt_status (*after_step)(zt_trainer *t, void *ctx);
    void *after_step_ctx;
    /* A request to stop (cmd sets it from SIGTERM/SIGUSR1; NULL: none): bit
     * 0 and bit 1 are two reasons. The ranks agree on it once per step inside
     * the step's loss all-reduce, so a request that reached any rank stops
     * every rank after that same step (its evaluation is left out; after_step
     * still runs). */
    const volatile sig_atomic_t *stop_request;
} zt_trainer_options;

/* Plans (allocates nothing) every buffer one rank of a `world_size`-rank run
 * would hold into `mem` (zt_memory_init(mem, NULL) first): the same list
 * zt_trainer_init reserves, so --estimate-memory and the trainer agree. Offload
 * settings in cfg place the optimizer's buffers on the host. */
zt_status zt_trainer_plan(const zt_config *cfg, const zt_model *m, int world_size,
                          zt_memory *mem);

/* The nvme offload's share of the same plan: the swap files of one rank
 * (disk_bytes) and its swap buffers (host SWAP), both 0 without nvme. */
zt_status zt_trainer_nvme_plan(const zt_config *cfg, const zt_model *m, int world_size,
                               int64_t *disk_bytes, size_t *swap_bytes);

/* The stage formulas' view of a run: the model as laid out for `world_size`
 * ranks with cfg's settings. */
zt_status zt_trainer_stage_shape(const zt_config *cfg, const zt_model *m, int world_size,
                                 zt_stage_shape *out);

zt_status zt_trainer_init(zt_trainer **out, const zt_trainer_options *opt);
void zt_trainer_free(zt_trainer *t);

/* Trains until the step counter reaches until_step, or until the ranks agree
 * to stop (zt_trainer_stopped). */
zt_status zt_trainer_train(zt_trainer *t, int64_t until_step);

/* The run ends (ZT_ERR_NUMERIC) at this many steps in a row whose loss or
 * gradients are not finite, wherever no dynamic fp16 loss scaler rules on
 * them (fp32 and bf16 under --nonfinite continue, fp16 with a static
 * scale): the number at which fp16's dynamic scaler with DeepSpeed's
 * defaults gives up (one overflow absorbed by hysteresis 2, sixteen halvings
 * from 2^16 to min_loss_scale 1, then the one at the minimum). */
#define ZT_TRAIN_MAX_NONFINITE_STEPS 18

/* How many steps in a row, up to the last one, had a non-finite loss or
 * gradients (skipped, or stepped on under --nonfinite continue); 0 after a
 * finite step, and always 0 under fp16's dynamic loss scaler, which decides
 * on its overflows itself. The same on every rank. */
int64_t zt_trainer_nonfinite_steps(const zt_trainer *t);

/* Whether the last zt_trainer_train stopped on a stop request, and on how
 * many ranks each of its two reasons arrived (the same on every rank). */
bool zt_trainer_stopped(const zt_trainer *t, int64_t ranks_per_reason[2]);

/* Rank 0 writes all parameters, unpadded, in model order as little-endian
 * float32 to `path`: the fp32 master weights under mixed precision. */
zt_status zt_trainer_dump_params(zt_trainer *t, const char *path);

/* float64 L2 norm of all parameters (same value on every rank). */
double zt_trainer_param_norm(zt_trainer *t);

/* Forward passes over `iters` micro-batches per rank of ds (<= 0: all of it,
 * the last batch padded with ignored rows), dropout off. loss: mean
 * cross-entropy over counted rows; accuracy: fraction of argmax hits for
 * classification models, NAN for language models. Collective. */
zt_status zt_trainer_eval(zt_trainer *t, const zt_dataset *ds, int64_t iters, double *loss,
                          double *accuracy);

/* The logits of samples [0, n) of ds, forward-only with dropout off, into
 * out: (n, seq_len, n_classes) for a language model, (n, n_classes)
 * otherwise. A world of one rank only (ZT_ERR_USAGE otherwise). */
zt_status zt_trainer_eval_logits(zt_trainer *t, const zt_dataset *ds, int64_t n, float *out);

/* Language models: appends n_new tokens to out[0] = start (out has n_new + 1
 * entries), sampling token i from the softmax of the last position's logits
 * (over the training data's vocabulary: a model vocabulary padded past it
 * never yields the padding ids)
 * with u = zt_rng_uniform(seed, ZT_RNG_STREAM_SAMPLE, i) (inverse CDF in
 * float64), the context cropped to the last seq_len tokens. Every rank
 * computes the same tokens. Collective. */
zt_status zt_trainer_generate(zt_trainer *t, int32_t start, int64_t n_new, uint64_t seed,
                              int32_t *out);

/* The same after a prompt: out[0, n_prompt) = prompt (n_prompt >= 1), then
 * n_new tokens (out has n_prompt + n_new entries), token i drawn from
 * softmax(logits / temperature) with the same u as above; temperature 0 takes
 * the most likely token (the first on ties). temperature 1 with a one-token
 * prompt is zt_trainer_generate. Collective. */
zt_status zt_trainer_generate_from(zt_trainer *t, const int32_t *prompt, int64_t n_prompt,
                                   int64_t n_new, double temperature, uint64_t seed,
                                   int32_t *out);

/* ---- What the trainer tells its callers (cmd's summary, the report). ---- */
typedef struct {
    const zt_config *cfg;
    const zt_model *model;       /* the whole model */
    const zt_world *world;
    const zt_backend *be;
    const zt_pipe *pipe;         /* stages, this rank's stage and data-parallel group,
                                  * partition, measured pipeline times */
    const char *device, *comm;   /* backend and communicator names */
    const zt_stage_policy *policy;
    zt_dtype compute_dtype, grad_dtype, comm_dtype;
    bool mixed, offload_optimizer, offload_param, dynamic_loss_scale;
    bool typed_units;            /* mixed, and the units compute on compute_dtype tensors
                                  * themselves, with no fp32 copies (models/unit.h) */
    bool nvme_optimizer, nvme_param; /* those offloads go to nvme swap files */
    int64_t checkpoint_interval; /* activation checkpointing: units per segment, 0 off */
    bool cpu_checkpointing;
    const zt_layout *layout;     /* this stage's units over the data-parallel group: padded,
                                  * partition and persistent sizes */
    int64_t steps_per_epoch;
    int64_t global_steps, skipped_steps, global_samples;
    double train_seconds;
    /* Throughput over the timed steps (DeepSpeed leaves the first two out),
     * or over all steps of a run too short for that. */
    double samples_per_sec;
    const double *loss_history;  /* (global_steps) */
    const double *scale_history; /* (global_steps) the loss scale each step ran with */
    const zt_eval_point *evals;
    int64_t n_evals;
    int64_t gather_peak_live_params; /* stage 3's largest gathered window */
    zt_memory *mem;              /* the arenas' counters */
    const zt_comm *groups[ZT_STAGE_GROUP_N]; /* NULL where a group is absent */
    const zt_comm *pipe_group;   /* the pipeline group (P > 1), else NULL */
    zt_stage_memory expected_memory;   /* the policy's statement for this run */
    zt_stage_traffic expected_traffic;
} zt_trainer_stats;

void zt_trainer_stats_get(const zt_trainer *t, zt_trainer_stats *s);

/* What the training data holds on this rank's host (both splits and the
 * tokenizer), or NULL for generated data. (engine/train/memcheck.c: the host
 * check counts it.) */
const zt_data_memory *zt_trainer_data_memory(const zt_trainer *t);

/* The nvme offload of a run (docs/nvme.md): what is swapped, the plan's
 * sizes and each swapper's I/O so far. Pointers are the trainer's. */
typedef struct {
    bool optimizer, param;        /* offloaded to nvme */
    const char *engine;           /* "io_uring", ...; NULL when no file is swapped */
    bool direct;                  /* every swap file is O_DIRECT */
    const char *opt_dir, *param_dir; /* this rank's swap folders, or NULL */
    int n_groups, opt_slots;      /* optimizer sub-groups; how many fit the buffers */
    int n_param_swapped, param_buffers;
    int64_t param_in_cpu_numel;   /* shard elements kept in host PARAMS (max_in_cpu) */
    int64_t disk_bytes;           /* this rank's swap files: the four below */
    int64_t master_file_bytes;    /* fp32 master weights (host MASTER under cpu offload) */
    int64_t grad_file_bytes;      /* fp32 gradient partition (host GRADS under cpu offload) */
    int64_t optim_file_bytes;     /* optimizer states (host OPTIM under cpu offload) */
    int64_t param_file_bytes;     /* parameter shards (host PARAMS under cpu offload) */
    size_t swap_bytes;            /* the buffers (host SWAP) */
    zt_swap_stats opt_io, grad_io, param_io;
} zt_trainer_nvme_stats;

void zt_trainer_nvme_stats_get(const zt_trainer *t, zt_trainer_nvme_stats *s);

/* ---- For checkpoints. ---- */

/* The counters a checkpoint carries. */
typedef struct {
    int64_t global_steps, skipped_steps, global_samples;
    int64_t optim_steps; /* applied optimizer steps (Adam's t) */
} zt_trainer_counters;

void zt_trainer_counters_get(const zt_trainer *t, zt_trainer_counters *c);
void zt_trainer_counters_set(zt_trainer *t, const zt_trainer_counters *c);
zt_sched *zt_trainer_sched(zt_trainer *t);
zt_scaler *zt_trainer_scaler(zt_trainer *t);
const zt_sampler *zt_trainer_sampler(const zt_trainer *t);
uint64_t zt_trainer_seed(const zt_trainer *t);

/* What a checkpoint holds of unit u on this rank: the fp32 values the
 * optimizer steps (the master copy, or the parameters themselves in fp32
 * training) and its state sections (Adam m, v; SGD momentum), elements
 * [lo, lo + numel) of the padded unit: the whole unit when the stage does not
 * shard the optimizer, the rank's slice (lo = rank * shard_numel) when it
 * does. All pointers are at `loc`: the host when the optimizer is offloaded,
 * else the device. */
#define ZT_TRAINER_MAX_STATES 2
typedef struct {
    float *values;
    float *state[ZT_TRAINER_MAX_STATES];
    int n_states;
    int64_t lo, numel;
    zt_mem_loc loc;
} zt_trainer_span;

/* Offloaded to nvme, the span is swapped in: its pointers are valid until
 * the next call, and a caller that writes into them says so with
 * zt_trainer_span_written before the next call (ZT_ERR_IO when the swap
 * fails). */
zt_status zt_trainer_unit_span(zt_trainer *t, int u, zt_trainer_span *s);
void zt_trainer_span_written(zt_trainer *t);

/* After spans were written: rounds every unit's values into the parameters
 * (compute dtype, wherever they live) and makes every rank's parameters
 * current (the stage's after-step). Collective. */
zt_status zt_trainer_refresh_params(zt_trainer *t);

/* Replaces the loss and loss-scale histories of steps [1, n] (a resumed run
 * continues them). */
zt_status zt_trainer_set_history(zt_trainer *t, const double *loss, const double *scale,
                                 int64_t n);

/* Steps per epoch of the sampler (for --epochs). */
int64_t zt_trainer_steps_per_epoch(const zt_trainer *t);

/* ---- For the flops profiler (engine/monitor/flops.h). ---- */

/* One unit in one optimizer step, summed over its micro-steps. */
typedef struct {
    double fwd_ms, bwd_ms;       /* the unit's own forward and backward calls, the device
                                  * synchronised around each; a recomputation under
                                  * activation checkpointing is backward time */
    int64_t fwd_macs, fwd_flops; /* zt_unit_forward_cost at each micro-batch's shape */
    int64_t samples;             /* samples its forward saw */
} zt_unit_profile;

/* Profiles the optimizer step that starts when global_steps == step (DeepSpeed's
 * 0-based profile_step) into prof (one entry per unit, zeroed then); NULL
 * stops. This rank only: the synchronisations it adds are local. */
void zt_trainer_profile_step(zt_trainer *t, int64_t step, zt_unit_profile *prof);

#endif
