/*
 * trainer_impl: the trainer's state and what its files (engine/train/trainer.h
 * lists them) share. Private to engine/train/.
 *
 * Memory: every device and host buffer below is a block of `mem`'s arenas
 * (buffers.c plans and carves them); the per-unit pointer tables and the
 * histories are malloc'd and freed with the trainer. Collective: as the
 * functions say.
 */
#ifndef ZT_TRAINER_IMPL_H
#define ZT_TRAINER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/nvme/plan.h"
#include "engine/train/optim.h"
#include "engine/train/trainer.h"

typedef struct zt_train_nvme zt_train_nvme;
/* One micro-batch in flight: pipelining keeps up to zt_pipe_slots of them
 * between their forward and backward (one without pipelining). */
typedef struct {
    void *x;              /* (micro, in_numel), the units' dtype */
    int32_t *tokens;      /* (micro, t), t <= seq_len */
    int32_t *lengths;     /* (micro) valid tokens per sample */
    uint64_t *row_keys;   /* (micro) global sample positions (dropout keys) */
    int32_t *labels;      /* (micro, labels_numel) */
    void **acts, **saved, **ckpt; /* per unit, as the trainer's fields below */
    void *out;            /* checkpointing on a stage that sends its output: the last
                           * unit's output (the others share the working buffers) */
    zt_batch b;           /* as loaded for the micro-batch in the slot */
} zt_train_slot;

struct zt_trainer {
    zt_trainer_options opt;      /* as given to init */
    const zt_config *cfg;
    const zt_model *whole;       /* the model as built (opt.model) */
    const zt_model *model;       /* this pipeline stage's units (the whole model when P = 1) */
    const zt_world *world;
    const zt_backend *be;
    zt_pipe pipe;                /* stages, groups, schedule, transfers (engine/pipe/pipe.h) */
    zt_comm *comm;               /* the data-parallel group: the world's comm when P = 1 */
    zt_dataset *data;
    uint64_t seed;
    const zt_stage_policy *policy;

    zt_layout layout;
    zt_memory mem;
    zt_sampler sampler;
    zt_optim optim;
    zt_sched sched;
    zt_scaler scaler;
    zt_stage_ctx stage;      /* the policy's hooks run on it */
    zt_comm *hpz_comm;       /* hpZ group communicator or NULL (owned) */
    zt_qgz qgz;              /* ZeRO++ qgZ's groups (owned), active or not */
    zt_comm *shard_comm;     /* MiCS shard group or NULL (owned) */
    zt_comm *replica_comm;   /* MiCS replica group or NULL (owned) */
    zt_comm *zcomm;          /* what the layout partitions over: shard_comm or comm */

    /* Precision and placement, resolved from the config (trainer.h). */
    zt_dtype cdt;            /* parameters, activations, per-micro-step gradients */
    zt_dtype gdt;            /* GRADS on the device */
    zt_dtype kdt;            /* gradient communication */
    zt_dtype ogdt;           /* the gradient the optimizer reads (own_g) */
    bool mixed;              /* cdt is 16-bit */
    bool typed;              /* mixed, and the units run on cdt tensors themselves (models/unit.h
                              * "Typed units"); else mixed units compute on fp32 copies */
    bool has_master;         /* the optimizer steps an fp32 copy, not the parameters */
    bool offload_opt;        /* MASTER, OPTIM, the optimizer's gradients on the host */
    bool offload_param;      /* parameter shards on the host */
    bool nvme_opt;           /* offload_opt to nvme: MASTER and OPTIM live in swap files */
    bool nvme_param;         /* offload_param to nvme: shards past max_in_cpu in swap files */
    zt_nvme_plan nvme_plan;  /* what is swapped (engine/nvme/plan.h) */
    zt_train_nvme *nvme;     /* the swap files and swappers, or NULL (nvme.c) */
    bool check_overflow;     /* skip steps whose gradients hold inf or nan */
    int64_t ckpt_interval;   /* activation checkpointing: units per segment, 0 off */
    bool ckpt_host;          /* cpu_checkpointing */
    int inject_unit;         /* --inject-overflow's unit, resolved */
    bool plan_overflow;      /* a planned size did not fit (zt_train_plan_bytes) */
    int n_slots;             /* activation slots (zt_train_slot) */
    zt_train_slot *slots;
    int64_t slots_hold;      /* checkpointing: the micro-batch whose last segment the
                              * working buffers hold, -1: none */
    double step_timers[ZT_TIMER_N]; /* the step's, summed over its micro-steps */
    double step_loss;        /* the step's loss sum on this rank (last stage) */

    /* Full flat parameters (padded_numel) unless the stage shards them; then
     * NULL and unit_store holds them. */
    void *params;
    /* Device GRADS: the full flat gradient, or the partition when the stage
     * shards gradients; NULL then if the optimizer is offloaded. */
    void *grads;
    float *host_grads;    /* offload_optimizer: the fp32 partition (host); NULL on nvme, where
                           * it is swapped (own_g NULL: zt_train_grad_slice) */
    float *master;        /* fp32 copy of the stepped span (unsharded: full), or NULL */
    float *optim_state;   /* zt_optim_state_numel of the optimizer's span */
    void **unit_store;    /* sharded parameters, per unit: own shard or persistent full copy */
    void **own_p;         /* per unit: this rank's parameter slice (shard_numel) */
    void **own_g;         /* per unit: this rank's reduced gradient slice (ogdt) */
    float **own_m;        /* per unit: the fp32 values own_p rounds (master or params) */
    void **secondary;     /* hpZ, per unit: padded_numel / h, else NULL */
    float *unit_grad;     /* fp32, gradients sharded: one unit's full gradient (COMM) */
    void *rs_send[2], *rs_recv[2]; /* reduce buckets (COMM) */
    void *qgz_work[2];    /* qgZ: each bucket's work area (COMM) */
    void *rs_stage;       /* offload_optimizer: host staging of one reduced bucket */
    void *ag_buf;         /* all-gather bucket (COMM) */
    /* The current slot's micro-batch on the device (NULL where the model has
     * no such input) and activations (zt_train_use_slot). */
    void *x;              /* (micro, in_numel), the units' dtype (cdt when typed) */
    int32_t *tokens;      /* (micro, t), t <= seq_len */
    int32_t *lengths;     /* (micro) valid tokens per sample */
    uint64_t *row_keys;   /* (micro) global sample positions (dropout keys) */
    int32_t *labels;      /* (micro, labels_numel) */
    void *in_act;         /* (micro, first unit's in_numel) cdt: the input received from the
                           * previous stage, or NULL (the first stage reads x or tokens) */
    void **acts;          /* per unit: output (micro, out_numel), cdt (a working buffer when
                           * checkpointing) */
    void **saved;         /* per unit: (micro, saved_numel) or NULL */
    void **ckpt;          /* checkpointing, per unit u = sK > 0: its kept input, else NULL */
    void *ckpt_in;        /* cpu_checkpointing: a segment's input on the device */
    float *work;          /* (micro, max work_numel) unit scratch, or NULL */
    void *dact[2];        /* activation-gradient ping-pong (cdt when typed, else fp32) */
    void *be_workspace;   /* the backend's scratch (backend.h workspace_bytes) */
    /* Mixed precision: fp32 copies of one unit (WORK); only gw when typed. */
    float *pw, *gw;       /* (max_unit_numel): parameters; gradient (also the step's) */
    float *xin, *yout, *sw; /* (micro, max in / out / saved numel) */
    void *logits_stage;   /* typed: one cdt row of logits on the host (zt_train_logits_d2h) */
    void *param_stage;    /* offload: host staging of one unit's new parameters */
    void *swap_opt_mem, *swap_grad_mem, *swap_param_mem; /* nvme: the swappers' buffers (SWAP) */
    /* Host staging of the micro-batch (HOST WORK). */
    float *x_host;        /* (micro, in_numel) as the dataset writes it */
    void *x_stage;        /* typed: (micro, in_numel) cdt, x_host rounded for the device */
    int32_t *tokens_host; /* (micro, seq_len) */
    int32_t *lengths_host;
    uint64_t *row_keys_host;
    int32_t *labels_host;
    int64_t *index_host;  /* (micro) dataset indices of the batch */
    float *logits_host;   /* classification: (micro, logits_ld); LM: (logits_ld) */

    zt_eval_point *evals;
    int64_t n_evals, eval_cap;
    int64_t global_steps, skipped_steps, global_samples;
    double *loss_history;
    double *scale_history; /* the loss scale each step ran with */
    int64_t loss_cap;
    double last_lr, last_grad_norm;
    double train_seconds, timed_seconds;
    int64_t timed_steps;

    /* The flops profiler (zt_trainer_profile_step): its step and per-unit
     * table; `profiling` is that table while the step runs, else NULL. */
    int64_t prof_step;
    zt_unit_profile *prof, *profiling;
    bool recomputing; /* recompute.c is re-running forwards (backward time) */
    bool stop_agreed;             /* a stop request reached some rank */
    int64_t stop_ranks[2];        /* ranks per reason (zt_trainer_stopped) */
    int64_t nonfinite_steps;      /* zt_trainer_nonfinite_steps */
};

/* ---- trainer.c ---- */
double zt_train_now(void);
/* Host scalars (loss sums, norms) over MPI directly on `comm` (beside c's
 * collectives), under c's watchdog: they are not the tensor traffic the comm
 * counters account for. `what` names them in a timeout's message. */
zt_status zt_train_sum_f64(const zt_comm *c, MPI_Comm comm, double *v, int n, const char *what);
/* Precision, placement and checkpointing from the config. */
void zt_train_resolve(zt_trainer *t);

/* ---- buffers.c ---- */
/* Every buffer the trainer holds: planned into `mem` (reserved false), or
 * carved out of its reservation (reserved true). */
zt_status zt_train_buffers(zt_trainer *t, zt_memory *mem, bool reserved);
/* One buffer: planned on the first pass, carved out on the second. */
zt_status zt_train_buf(zt_memory *mem, bool reserved, zt_mem_loc loc, zt_mem_class cls,
                       size_t bytes, void *out);
/* The backend workspace the trainer reserves and hands over (0 without a
 * backend): all of it, less the operand-cast part when the units are typed. */
size_t zt_train_workspace_bytes(const zt_trainer *t);
/* n x m elements of elem bytes for the plan; an overflow marks the plan
 * failed (zt_train_buffers then refuses it) and gives 0. */
size_t zt_train_plan_bytes(zt_trainer *t, int64_t n, int64_t m, size_t elem);
/* Elements of the offload's host staging of one reduced bucket (rs_stage). */
int64_t zt_train_stage_numel(const zt_trainer *t);
zt_status zt_train_tables(zt_trainer *t);
void zt_train_tables_free(zt_trainer *t);
/* The largest of one per-sample size field (offsetof(zt_unit, ...)) over units. */
int64_t zt_train_max_unit_field(const zt_model *m, size_t field);

static inline size_t zt_train_floats(int64_t numel) { return (size_t)numel * sizeof(float); }

static inline size_t zt_train_bytes(int64_t numel, zt_dtype dt)
{
    return (size_t)numel * zt_dtype_size(dt);
}

/* ---- memcheck.c ---- */
/* The planned host memory against the address-space limit, the memory cgroup
 * and MemAvailable (engine/hostmem.h), and the planned device memory against
 * the device's free memory (backend mem_info); every rank fails alike.
 * Collective. */
zt_status zt_train_check_memory(zt_trainer *t);
/* st from zt_memory_reserve: an out-of-memory failure restated with the arena
 * that did not fit and the remedies for its class; anything else unchanged. */
zt_status zt_train_reserve_failed(const zt_trainer *t, zt_status st);

/* ---- micro.c ---- */
/* The pipeline stage runner's hooks (engine/pipe/pipe.h) for the current
 * step: micro-batch m's forward, and its loss (last stage) and backward with
 * the reduction; the loss sum (unscaled) goes to step_loss, times to
 * step_timers. */
zt_pipe_hooks zt_train_hooks(zt_trainer *t);
/* Points the trainer's batch and activation fields at slot k's. */
void zt_train_use_slot(zt_trainer *t, int k);
/* Reads samples index_host[0, n) of ds (< 0: a filler row) with dropout keys
 * row_keys_host into the device batch. */
void zt_train_load(zt_trainer *t, const zt_dataset *ds, int64_t n, zt_batch *b);
/* Every unit forward on batch b; last_use: no backward follows. */
zt_status zt_train_forward(zt_trainer *t, const zt_batch *b, bool last_use);
/* The dtype of the tensors the units get (zt_batch.dt): cdt when typed,
 * else fp32. */
zt_dtype zt_train_unit_dtype(const zt_trainer *t);
/* Unit u forward with parameters p on batch b (outputs stored in cdt). */
void zt_train_run_forward(zt_trainer *t, int u, const void *p, const zt_batch *b);
/* The last unit's output as logits the loss reads: of cdt where the units
 * are typed, else fp32 (a conversion in mixed precision); *dt says which. */
const void *zt_train_logits(zt_trainer *t, int64_t n, zt_dtype *dt);
/* rows x cols logits (rows of ld elements of dt, on the device) to fp32 dst
 * on the host, rows dst_ld apart. */
void zt_train_logits_d2h(zt_trainer *t, float *dst, int64_t dst_ld, const void *src, zt_dtype dt,
                         int64_t rows, int64_t cols, int64_t ld);
/* Loss rows of one sample in batch b. */
int64_t zt_train_rows_per_sample(const zt_trainer *t, const zt_batch *b);

/* ---- placement.c ---- */
/* An fp32 view of n elements of a compute-dtype tensor: the tensor itself in
 * fp32 training, else its conversion into `scratch`. */
float *zt_train_fp32(const zt_trainer *t, const void *x, int64_t n, float *scratch);
/* Rounds n fp32 values computed in `scratch` into the stored tensor y. */
void zt_train_store(const zt_trainer *t, void *y, const float *scratch, int64_t n);
/* Initial weights into the parameters and the master copy. */
zt_status zt_train_init_params(zt_trainer *t);
/* own_p, own_g and own_m for every unit. */
void zt_train_views(zt_trainer *t);
/* The first unit of the whole model whose reduced gradients hold an inf or
 * nan on any rank of any stage, or the whole model's n_units. */
zt_status zt_train_first_overflow(zt_trainer *t, int *first);
/* Sum of squares of this rank's slices, summed over the partition group and
 * the pipeline stages: the whole model's. */
zt_status zt_train_slices_sumsq(zt_trainer *t, void *const *slices, zt_dtype dt, double *sq);
/* The optimizer step with the gradients multiplied by coef, then the stage's
 * after-step. */
zt_status zt_train_apply(zt_trainer *t, float coef, double lr, double b1, double b2);
/* Rank 0 writes every unit of the whole model, gathered from the slices of
 * the stage holding it, widened to fp32 and multiplied by alpha. */
zt_status zt_train_dump_slices(zt_trainer *t, void *const *slices, zt_dtype dt, float alpha,
                               const char *path);

/* The step of unit u's piece s of the optimizer's span with its gradient g
 * (own_g, or the full gradient), multiplied by coef, and the new values
 * written back into the parameters. */
zt_status zt_train_step_piece(zt_trainer *t, int u, zt_optim_seg *s, void *g, float coef,
                              double lr, double b1, double b2);

/* ---- nvme.c: the nvme offload on engine/nvme ---- */
/* The swap plan of this trainer's placement (before its buffers). */
zt_status zt_train_nvme_plan(zt_trainer *t);
/* After the buffers are carved: the swap folders, files and swappers. */
zt_status zt_train_nvme_init(zt_trainer *t);
void zt_train_nvme_free(zt_trainer *t);
/* Around every optimizer step: a piece still held (zt_train_nvme_piece) is
 * written back before it; its writes are finished after it (and, with
 * pipeline_read, the first sub-group of the next step is read ahead). */
zt_status zt_train_nvme_begin_step(zt_trainer *t);
zt_status zt_train_nvme_end_step(zt_trainer *t);
/* The optimizer step over the swapped sub-groups (nvme_opt). */
zt_status zt_train_nvme_apply(zt_trainer *t, float coef, double lr, double b1, double b2);
/* Unit u's piece of the swapped optimizer state (nvme_opt): its fp32 values
 * and states[0..k-1), valid until the next call or flush; overwrite: every
 * element will be written (nothing is read). mark_written: the caller
 * changed the piece it got last. flush: the changed sub-group is written. */
zt_status zt_train_nvme_piece(zt_trainer *t, int u, bool overwrite, float **values,
                              float **states);
void zt_train_nvme_mark_written(zt_trainer *t);
zt_status zt_train_nvme_flush(zt_trainer *t);
/* Whether unit u's parameter shard is swapped (nvme_param). */
bool zt_train_nvme_param_swapped(const zt_trainer *t, int u);
/* A swap buffer for unit u's new shard (shard_numel of the compute dtype),
 * then its write. */
zt_status zt_train_nvme_param_begin(zt_trainer *t, int u, void **buf);
zt_status zt_train_nvme_param_end(zt_trainer *t, int u);
/* Where the stage-3 gather reads swapped shards from. */
zt_zero_shard_source zt_train_nvme_shard_source(zt_trainer *t);
/* Gradients swapped with the optimizer (nvme_opt; own_g is NULL then): */
bool zt_train_nvme_grads_swapped(const zt_trainer *t);
/* where the reduction delivers them (a zeroed source without the swap); */
zt_zero_dest_source zt_train_nvme_grad_source(zt_trainer *t);
/* unit u's reduced gradient slice swapped in, valid until the next call or
 * zt_train_nvme_flush; */
zt_status zt_train_nvme_grad_piece(zt_trainer *t, int u, void **g);
/* unit u's sum of squares and whether it holds an inf or nan: one pass over
 * the gradient file per step computes every unit's, with the functions the
 * cpu offload uses (so the norm is the same bits). */
zt_status zt_train_nvme_grad_stats(zt_trainer *t, int u, double *sumsq, bool *bad);

/* ---- recompute.c ---- */
/* Checkpointing: unit u starts a segment after the first (its input is kept). */
bool zt_train_kept_input(const zt_trainer *t, int u);
/* Unit u's input: the model input, a segment's kept input, or the previous
 * unit's output. */
const void *zt_train_unit_input(const zt_trainer *t, int u);
/* Checkpointing: unit u + 1 starts a segment; keep u's output as its input. */
void zt_train_keep(zt_trainer *t, int u, int64_t n);
/* Checkpointing: re-runs segment [a, e) forward from its kept input. */
zt_status zt_train_recompute(zt_trainer *t, int a, int e, const zt_batch *b);
/* Unit outputs and saved tensors (slots when checkpointing) and the kept
 * segment inputs. */
zt_status zt_train_activation_buffers(zt_trainer *t, zt_memory *mem, bool reserved);

#endif
