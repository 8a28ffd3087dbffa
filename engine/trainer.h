/*
 * trainer: the training loop. Per optimizer step: for each of the
 * gradient_accumulation_steps micro-steps, read this rank's micro-batch,
 * run the units forward, the loss, the units backward (writing or accumulating
 * gradients as the ZeRO stage says, see zero.h); then at the boundary:
 * global-norm clipping, the optimizer step on the rank's shard, the parameter
 * all-gather (stages 1-2) or the persistent re-gather (stage 3), the scheduler
 * step, progress lines.
 *
 * What each stage holds (fp32; Psi = padded parameters, N = ranks, k = 2 for
 * Adam): stage 0 PARAMS Psi, GRADS Psi, OPTIM k Psi; stage 1 PARAMS Psi, GRADS
 * Psi, OPTIM k Psi/N; stage 2 PARAMS Psi, GRADS Psi/N, OPTIM k Psi/N; stage 3
 * PARAMS Psi/N (+ persistent units whole, + the hpZ secondary Psi/h), GRADS
 * Psi/N, OPTIM k Psi/N. COMM holds the reduce buckets, the all-gather bucket
 * (stages 1-2), one unit's gradient (stages 2-3) and the gather window
 * (stage 3).
 *
 * Memory: every buffer is planned into and allocated from the trainer's arenas
 * (zt_memory): PARAMS, GRADS, OPTIM on the device; ACTS (inputs, tokens,
 * lengths, labels, dropout keys, unit outputs, saved tensors); COMM; WORK
 * (activation-gradient ping-pong, the units' scratch, host staging of the
 * micro-batch and of the logits evaluation and sampling read). Nothing is
 * allocated inside the step loop except stage-3 gather blocks, which come from
 * the COMM arena's reservation. Evaluation and sampling reuse the training
 * buffers (micro-batches of at most train_micro_batch_size_per_gpu).
 * Collective: zt_trainer_init, zt_trainer_train, zt_trainer_eval,
 * zt_trainer_generate, zt_trainer_dump_params, zt_trainer_param_norm.
 */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "dataset.h"
#include "model.h"
#include "monitor.h"
#include "optim.h"
#include "sampler.h"
#include "sched.h"
#include "world.h"
#include "zero.h"

typedef struct {
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
    zt_zero_reducer reducer; /* stage 0 */
    zt_zero_rs rs;           /* stages 1-3 */
    zt_zero_gather gather;   /* stage 3 */
    zt_comm *hpz_comm;       /* hpZ group communicator or NULL (owned) */
    zt_comm *shard_comm;     /* MiCS shard group or NULL (owned) */
    zt_comm *replica_comm;   /* MiCS replica group or NULL (owned) */
    zt_comm *zcomm;          /* what the layout partitions over: shard_comm or comm */

    /* Stages 0-2: params full flat (padded_numel). Stage 3: NULL; unit_store. */
    float *params;
    /* Stages 0-1: full flat; stages 2-3: the partition (partition_numel). */
    float *grads;
    float *optim_state;   /* zt_optim_state_numel of the optimizer's span */
    float **unit_store;   /* stage 3, per unit: own shard or persistent full copy */
    float **own_p;        /* per unit: this rank's parameter slice (shard_numel) */
    float **own_g;        /* per unit: this rank's gradient slice (shard_numel) */
    float **secondary;    /* hpZ, per unit: padded_numel / h, else NULL */
    float *unit_grad;     /* stages 2-3: one unit's full gradient (COMM) */
    float *rs_send[2], *rs_recv[2]; /* reduce buckets (COMM) */
    float *ag_buf;        /* stages 1-2: all-gather bucket (COMM) */
    zt_optim_seg *segs;   /* stages 1-3, per unit: the optimizer's view of own slices */
    /* The micro-batch on the device (NULL where the model has no such input). */
    float *x;             /* (micro, in_numel) */
    int32_t *tokens;      /* (micro, t), t <= seq_len */
    int32_t *lengths;     /* (micro) valid tokens per sample */
    uint64_t *row_keys;   /* (micro) global sample positions (dropout keys) */
    int32_t *labels;      /* (micro, labels_numel) */
    float **acts;         /* per unit: output (micro, out_numel) */
    float **saved;        /* per unit: (micro, saved_numel) or NULL */
    float *work;          /* (micro, max work_numel) unit scratch, or NULL */
    float *dact[2];       /* activation-gradient ping-pong */
    /* Host staging of the same (HOST WORK). */
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
    /* --dump-grads: the reduced gradient of the first step goes here. */
    const char *grad_dump_path;

    int64_t global_steps, skipped_steps, global_samples;
    double *loss_history;
    int64_t loss_cap;
    double last_lr, last_grad_norm;
    double train_seconds, timed_seconds;
    int64_t timed_steps;
} zt_trainer;

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
 * float32 to `path`. */
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

/* Steps per epoch of the sampler (for --epochs). */
int64_t zt_trainer_steps_per_epoch(const zt_trainer *t);

#endif
