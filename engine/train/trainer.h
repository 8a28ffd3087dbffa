/*
 * trainer: the training loop. Per optimizer step: for each of the
 * gradient_accumulation_steps micro-steps, read this rank's micro-batch,
 * run the units forward, the loss, the units backward (writing or accumulating
 * gradients as the ZeRO stage says, see zero.h); then at the boundary: the
 * overflow check and loss scaler, global-norm clipping, the optimizer step on
 * the rank's shard, the parameter all-gather (stages 1-2) or the persistent
 * re-gather (stage 3), the scheduler step, progress lines.
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
 * Offload. offload_optimizer (stages 1-3): MASTER, OPTIM and an fp32 gradient
 * partition live in host arenas; each reduced bucket is copied to the host and
 * added there, the optimizer runs on the CPU (optim.h, host kernels), and the
 * new parameters are rounded on the host and copied to the device.
 * offload_param (stage 3): the non-persistent parameter shards live in host
 * PARAMS; each gather copies the shard into its slot of the gathered block.
 *
 * Activation checkpointing (interval K > 0): units form segments [sK, sK+K).
 * Forward keeps only each segment's input (ACTS on the device, or the host
 * with cpu_checkpointing) and runs the units through K reusable slots of
 * output and saved tensors. Backward re-runs each segment's forward from its
 * kept input (same dropout keys, so the same values) before its backward; the
 * last segment's activations are still in the slots and are not recomputed.
 *
 * What each stage holds (Psi = padded parameters, N = ranks, c = bytes of the
 * compute dtype, g = bytes of the gradient dtype, k = optimizer floats per
 * parameter, 2 for Adam): stage 0 PARAMS c Psi, GRADS g Psi, OPTIM 4k Psi;
 * stage 1 PARAMS c Psi, GRADS g Psi, OPTIM 4k Psi/N; stage 2 PARAMS c Psi,
 * GRADS g Psi/N, OPTIM 4k Psi/N; stage 3 PARAMS c Psi/N (+ persistent units
 * whole, + the hpZ secondary Psi/h), GRADS g Psi/N, OPTIM 4k Psi/N. Mixed
 * precision adds MASTER 4 Psi (stage 0) or 4 Psi/N. With fp16 and Adam and one
 * micro-step that is the ZeRO paper's 2 + 2 + 12 bytes per parameter. COMM
 * holds the reduce buckets, the all-gather bucket (stages 1-2), one unit's
 * fp32 gradient (fp32 stages 2-3) and the gather window (stage 3).
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
 * train_micro_batch_size_per_gpu).
 * Checkpoints (ckpt.h) read and write the optimizer's side of each unit
 * through zt_trainer_unit_span and rebuild the parameters from it with
 * zt_trainer_refresh_params; the counters (global_steps, skipped_steps,
 * global_samples), optim.steps, sched and scaler are plain fields.
 * Collective: zt_trainer_init, zt_trainer_train, zt_trainer_eval,
 * zt_trainer_generate, zt_trainer_dump_params, zt_trainer_param_norm,
 * zt_trainer_refresh_params.
 */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/arena.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "data/dataset.h"
#include "models/model.h"
#include "engine/monitor/monitor.h"
#include "engine/train/optim.h"
#include "data/sampler.h"
#include "engine/train/scaler.h"
#include "engine/train/sched.h"
#include "engine/world/world.h"
#include "engine/zero/zero.h"

typedef struct zt_trainer zt_trainer;

struct zt_trainer {
    const zt_config *cfg;
    const zt_model *model;
    const zt_world *world;
    const zt_backend *be;
    zt_comm *comm;
    zt_dataset *data;
    uint64_t seed;

    zt_layout layout;
    zt_memory mem;
    zt_sampler sampler;
    zt_optim optim;
    zt_sched sched;
    zt_scaler scaler;
    zt_zero_reducer reducer; /* stage 0 */
    zt_zero_rs rs;           /* stages 1-3 */
    zt_zero_gather gather;   /* stage 3 */
    zt_comm *hpz_comm;       /* hpZ group communicator or NULL (owned) */
    zt_comm *shard_comm;     /* MiCS shard group or NULL (owned) */
    zt_comm *replica_comm;   /* MiCS replica group or NULL (owned) */
    zt_comm *zcomm;          /* what the layout partitions over: shard_comm or comm */

    /* Precision and placement, resolved from the config (see above). */
    zt_dtype cdt;            /* parameters, activations, per-micro-step gradients */
    zt_dtype gdt;            /* GRADS on the device */
    zt_dtype kdt;            /* gradient communication */
    zt_dtype ogdt;           /* the gradient the optimizer reads (own_g) */
    bool mixed;              /* cdt is 16-bit: units compute on fp32 copies */
    bool has_master;         /* the optimizer steps an fp32 copy, not the parameters */
    bool offload_opt;        /* MASTER, OPTIM, the optimizer's gradients on the host */
    bool offload_param;      /* stage 3 shards on the host */
    bool check_overflow;     /* skip steps whose gradients hold inf or nan */
    int64_t ckpt_interval;   /* activation checkpointing: units per segment, 0 off */
    bool ckpt_host;          /* cpu_checkpointing */

    /* Stages 0-2: params full flat (padded_numel). Stage 3: NULL; unit_store. */
    void *params;
    /* Device GRADS. Stages 0-1: full flat; stages 2-3: the partition; NULL at
     * stages 2-3 when the optimizer is offloaded. */
    void *grads;
    float *host_grads;    /* offload_optimizer: the fp32 partition (host) */
    float *master;        /* fp32 copy of the stepped span (stage 0: full), or NULL */
    float *optim_state;   /* zt_optim_state_numel of the optimizer's span */
    void **unit_store;    /* stage 3, per unit: own shard or persistent full copy */
    void **own_p;         /* per unit: this rank's parameter slice (shard_numel) */
    void **own_g;         /* per unit: this rank's reduced gradient slice (ogdt) */
    float **own_m;        /* per unit: the fp32 values own_p rounds (master or params) */
    void **secondary;     /* hpZ, per unit: padded_numel / h, else NULL */
    float *unit_grad;     /* fp32 stages 2-3: one unit's full gradient (COMM) */
    void *rs_send[2], *rs_recv[2]; /* reduce buckets (COMM) */
    void *rs_stage;       /* offload_optimizer: host staging of one reduced bucket */
    void *ag_buf;         /* stages 1-2: all-gather bucket (COMM) */
    /* The micro-batch on the device (NULL where the model has no such input). */
    float *x;             /* (micro, in_numel), fp32 */
    int32_t *tokens;      /* (micro, t), t <= seq_len */
    int32_t *lengths;     /* (micro) valid tokens per sample */
    uint64_t *row_keys;   /* (micro) global sample positions (dropout keys) */
    int32_t *labels;      /* (micro, labels_numel) */
    void **acts;          /* per unit: output (micro, out_numel), cdt (a slot when checkpointing) */
    void **saved;         /* per unit: (micro, saved_numel) or NULL */
    void **ckpt;          /* checkpointing, per unit u = sK > 0: its kept input, else NULL */
    void *ckpt_in;        /* cpu_checkpointing: a segment's input on the device */
    float *work;          /* (micro, max work_numel) unit scratch, or NULL */
    float *dact[2];       /* activation-gradient ping-pong (fp32) */
    void *be_workspace;   /* the backend's scratch (backend.h workspace_bytes) */
    /* Mixed precision: fp32 copies of one unit (WORK). */
    float *pw, *gw;       /* (max_unit_numel): parameters; gradient (also the step's) */
    float *xin, *yout, *sw; /* (micro, max in / out / saved numel) */
    void *param_stage;    /* offload: host staging of one unit's new parameters */
    /* Host staging of the micro-batch (HOST WORK). */
    float *x_host;
    int32_t *tokens_host; /* (micro, seq_len) */
    int32_t *lengths_host;
    uint64_t *row_keys_host;
    int32_t *labels_host;
    int64_t *index_host;  /* (micro) dataset indices of the batch */
    float *logits_host;   /* classification: (micro, n_classes); LM: (n_classes) */

    /* Evaluation (set by the caller after init; eval_data NULL: none). */
    zt_dataset *eval_data;
    int64_t eval_interval, eval_iters; /* iters <= 0: the whole split */
    zt_eval_point *evals;
    int64_t n_evals, eval_cap;
    /* --dump-grads: the reduced, unscaled gradient of the first step goes
     * here; a path with "%d" gets every step's, %d the step number. */
    const char *grad_dump_path;
    /* Testing aid (--inject-overflow): at these steps (1-based) the last rank
     * writes inf into unit inject_unit's gradient before it is reduced. */
    const int64_t *inject_steps;
    int n_inject_steps, inject_unit;

    int64_t global_steps, skipped_steps, global_samples;
    double *loss_history;
    double *scale_history; /* the loss scale each step ran with */
    int64_t loss_cap;
    double last_lr, last_grad_norm;
    double train_seconds, timed_seconds;
    int64_t timed_steps;
    /* Called by zt_trainer_train after every optimizer step (and the
     * evaluation due at it), on every rank; a failure ends training and is
     * returned. NULL: none. (cmd saves checkpoints here.) */
    zt_status (*after_step)(zt_trainer *t, void *ctx);
    void *after_step_ctx;
};

/* Plans (allocates nothing) every buffer one rank of a `world_size`-rank run
 * would hold into `mem` (zt_memory_init(mem, NULL) first): the same list
 * zt_trainer_init reserves, so --estimate-memory and the trainer agree. Offload
 * settings in cfg place the optimizer's buffers on the host. */
zt_status zt_trainer_plan(const zt_config *cfg, const zt_model *m, int world_size,
                          zt_memory *mem);

zt_status zt_trainer_init(zt_trainer *t, const zt_config *cfg, const zt_model *m,
                          zt_dataset *data, const zt_world *w, const zt_backend *be,
                          zt_comm *comm, uint64_t seed);
void zt_trainer_free(zt_trainer *t);

/* Trains until global_steps == until_step. */
zt_status zt_trainer_train(zt_trainer *t, int64_t until_step);

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

/* Language models: appends n_new tokens to out[0] = start (out has n_new + 1
 * entries), sampling token i from the softmax of the last position's logits
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

/* What a checkpoint holds of unit u on this rank: the fp32 values the
 * optimizer steps (the master copy, or the parameters themselves in fp32
 * training) and its state sections (Adam m, v; SGD momentum), elements
 * [lo, lo + numel) of the padded unit: the whole unit at stage 0, the rank's
 * slice (lo = rank * shard_numel) at stages 1-3. All pointers are at `loc`:
 * the host when the optimizer is offloaded, else the device. */
#define ZT_TRAINER_MAX_STATES 2
typedef struct {
    float *values;
    float *state[ZT_TRAINER_MAX_STATES];
    int n_states;
    int64_t lo, numel;
    zt_mem_loc loc;
} zt_trainer_span;

void zt_trainer_unit_span(const zt_trainer *t, int u, zt_trainer_span *s);

/* After spans were written: rounds every unit's values into the parameters
 * (compute dtype, wherever they live) and makes every rank's parameters
 * current (stages 1-2 all-gather, stage 3 re-gathers the persistent units).
 * Collective. */
zt_status zt_trainer_refresh_params(zt_trainer *t);

/* Replaces the loss and loss-scale histories of steps [1, n] (a resumed run
 * continues them). */
zt_status zt_trainer_set_history(zt_trainer *t, const double *loss, const double *scale,
                                 int64_t n);

/* Steps per epoch of the sampler (for --epochs). */
int64_t zt_trainer_steps_per_epoch(const zt_trainer *t);

#endif
