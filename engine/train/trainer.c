/*
 * trainer: init and free, the loop, the accumulation boundary (overflow
 * check, loss scaler, clipping, the optimizer step, the scheduler) and what
 * the trainer tells its callers (engine/train/trainer.h).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/train/trainer_impl.h"
#include "engine/env.h"

double zt_train_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zt_status zt_train_sum_f64(const zt_comm *c, MPI_Comm comm, double *v, int n, const char *what)
{
    return zt_comm_side_all_reduce(c, comm, v, n, MPI_DOUBLE, MPI_SUM, what);
}

/* Whether mixed precision can run the units on 16-bit tensors: every unit
 * typed, a backend whose typed ops take cdt and that has the fused
 * epilogues the typed layers need (a plan without a backend assumes the CPU
 * backend's defaults), and no pipeline, whose stages exchange fp32
 * activation gradients. */
static bool trainer_typed_ok(const zt_trainer *t)
{
    const zt_model *m = t->model;
    for (int u = 0; u < m->n_units; u++)
        if (!m->units[u].typed)
            return false;
    const zt_backend *be = t->be;
    if (be && (!(be->typed_dtypes & (1u << t->cdt)) ||
               !(be->linear_act_forward && be->act_bias_grad && be->residual_layernorm_forward)))
        return false;
    return t->cfg->pipeline.stages <= 1;
}

void zt_train_resolve(zt_trainer *t)
{
    const zt_config *cfg = t->cfg;
    const zt_stage_policy *pol = zt_stage_policy_get(cfg->zero.stage);
    t->policy = pol;
    t->cdt = zt_config_compute_dtype(cfg);
    t->gdt = zt_config_grad_dtype(cfg);
    t->kdt = zt_config_comm_dtype(cfg);
    t->mixed = t->cdt != ZT_F32;
    t->typed = t->mixed && trainer_typed_ok(t);
    t->offload_opt = cfg->zero.offload_optimizer.device != ZT_OFFLOAD_NONE && pol->optimizer_sharded;
    t->offload_param = cfg->zero.offload_param.device != ZT_OFFLOAD_NONE && pol->params_sharded;
    t->nvme_opt = t->offload_opt && cfg->zero.offload_optimizer.device == ZT_OFFLOAD_NVME;
    t->nvme_param = t->offload_param && cfg->zero.offload_param.device == ZT_OFFLOAD_NVME;
    t->has_master = t->mixed || t->offload_opt || t->offload_param;
    t->ogdt = t->offload_opt ? ZT_F32 : t->gdt;
    t->check_overflow = cfg->fp16.enabled || (cfg->bf16.enabled && cfg->bf16.check_grad_overflow);
    t->ckpt_interval = zt_config_checkpoint_interval(cfg, t->model->n_units);
    t->ckpt_host = t->ckpt_interval > 0 && cfg->activation_checkpointing.cpu_checkpointing;
}

/* A communicator of the main comm's backend over the ranks sharing `color`,
 * owned by the trainer. The allocation is this rank's, the split collective:
 * a failed allocation is agreed on first, so no rank is left in the split
 * alone. */
static zt_status trainer_split(zt_trainer *t, int color, zt_comm **out)
{
    *out = calloc(1, sizeof **out);
    ZT_TRY(zt_world_agree(t->world,
                          *out ? ZT_OK
                               : zt_fail(ZT_ERR_OOM, "", "cannot allocate a group communicator"),
                          NULL));
    return t->comm->ops->split(t->comm, color, t->world->rank, *out);
}

/* hpZ: groups of h consecutive ranks, each inside one node. MiCS: shard groups
 * of m consecutive ranks, replica groups of the ranks with the same index in
 * their shard group. */
static zt_status trainer_groups_init(zt_trainer *t)
{
    const zt_world *w = t->world;
    const zt_zero_config *z = &t->cfg->zero;
    t->zcomm = t->comm;
    int64_t m = z->mics_shard_size;
    if (t->policy->params_sharded && m > 0) {
        if (w->size % m != 0)
            return zt_fail(ZT_ERR_CONFIG, "use a shard size that divides the number of ranks",
                           "zero_optimization.mics_shard_size %lld does not divide the world "
                           "size %d",
                           (long long)m, w->size);
        ZT_TRY(trainer_split(t, (int)(w->rank / m), &t->shard_comm));
        ZT_TRY(trainer_split(t, (int)(w->rank % m), &t->replica_comm));
        t->zcomm = t->shard_comm;
    }
    if (t->policy->params_sharded)
        ZT_TRY(zt_qgz_init(&t->qgz, t->cfg, t->zcomm, w->node, w->n_nodes, w->local_rank,
                           w->local_size));
    int64_t h = z->zero_hpz_partition_size;
    if (!t->policy->params_sharded || h <= 1)
        return ZT_OK;
    if (w->size % h != 0)
        return zt_fail(ZT_ERR_CONFIG,
                       "set zero_hpz_partition_size to the ranks per node (or a divisor of it)",
                       "zero_optimization.zero_hpz_partition_size %lld does not divide the "
                       "world size %d (DeepSpeed: \"%d is not divisible by %lld\")",
                       (long long)h, w->size, w->size, (long long)h);
    ZT_TRY(trainer_split(t, (int)(w->rank / h), &t->hpz_comm));
    int node_lo = w->node, node_hi = w->node;
    MPI_Allreduce(MPI_IN_PLACE, &node_lo, 1, MPI_INT, MPI_MIN, t->hpz_comm->side);
    MPI_Allreduce(MPI_IN_PLACE, &node_hi, 1, MPI_INT, MPI_MAX, t->hpz_comm->side);
    /* Only the groups that span nodes see it: the whole world agrees. */
    return zt_world_agree(
        w,
        node_lo == node_hi
            ? ZT_OK
            : zt_fail(ZT_ERR_CONFIG,
                      "hpZ keeps the backward gather inside a node: use a size that divides "
                      "the ranks per node (ZT_RANKS_PER_NODE simulates nodes)",
                      "zero_optimization.zero_hpz_partition_size %lld: ranks %lld-%lld span "
                      "nodes %d-%d",
                      (long long)h, (long long)(w->rank / h * h),
                      (long long)(w->rank / h * h + h - 1), node_lo, node_hi),
        NULL);
}

static void trainer_comm_free(zt_comm **c)
{
    if (*c) {
        zt_comm_free(*c);
        free(*c);
        *c = NULL;
    }
}

/* What the stage policy's hooks work on. */
static zt_status trainer_stage_init(zt_trainer *t)
{
    zt_stage_ctx *c = &t->stage;
    *c = (zt_stage_ctx){
        .policy = t->policy,
        .cfg = t->cfg,
        .be = t->be,
        .layout = &t->layout,
        .world = t->comm,
        .part = t->zcomm,
        .replica = t->replica_comm,
        .hpz = t->hpz_comm,
        .param_dt = t->cdt,
        .grad_dt = t->gdt,
        .params = t->params,
        .grads = t->grads,
        .ag_buf = t->ag_buf,
        .rs_target = {.dest = t->own_g,
                      .dest_dt = t->ogdt,
                      .dest_host = t->offload_opt,
                      .host_stage = t->rs_stage,
                      .stage_numel = zt_train_stage_numel(t),
                      .source = zt_train_nvme_grad_source(t),
                      .comm_dt = t->kdt,
                      .qgz = &t->qgz,
                      .qgz_work = {t->qgz_work[0], t->qgz_work[1]}},
        .rs_send = {t->rs_send[0], t->rs_send[1]},
        .rs_recv = {t->rs_recv[0], t->rs_recv[1]},
        .pool = zt_memory_arena(&t->mem, ZT_MEM_DEVICE, ZT_MEM_COMM),
        .unit_store = t->unit_store,
        .shard_host = t->offload_param,
        .shard_source = zt_train_nvme_shard_source(t),
        .secondary = t->secondary,
    };
    return t->policy->init(c);
}

/* --inject-overflow names a unit of the whole model (< 0: the middle one):
 * this stage's index of it, or -1 when another stage holds it. */
static int trainer_inject_unit(const zt_trainer *t, int unit)
{
    int u = (unit >= 0 ? unit : t->whole->n_units / 2) - zt_pipe_first_unit(&t->pipe);
    return u >= 0 && u < t->model->n_units ? u : -1;
}

/* The stage's units and data-parallel group (without pipelining all units
 * and the world's comm; with it, agreed inside zt_pipe_init before its
 * splits), the checks of the data and config against the model, and the
 * sampler: what comes before the first collective of the trainer's own. */
static zt_status trainer_init_local(zt_trainer *t, const zt_trainer_options *o)
{
    const zt_config *cfg = o->cfg;
    const zt_dataset *data = o->data;
    ZT_TRY(zt_pipe_init(&t->pipe, o->model, cfg, o->comm, o->be));
    t->model = &t->pipe.stage_model;
    t->comm = t->pipe.dp;
    const zt_model *m = t->model;
    if (data->x_numel != m->in_numel || data->tokens_numel != m->seq_len ||
        data->labels_numel != m->labels_numel || data->n_classes > m->n_classes ||
        data->vocab_size > m->vocab_size || (data->variable_length && m->labels_per_token))
        return zt_fail(ZT_ERR_INTERNAL, "",
                       "data (%lld inputs, %lld tokens, %lld labels, %lld classes, vocab %lld) "
                       "does not fit model %s",
                       (long long)data->x_numel, (long long)data->tokens_numel,
                       (long long)data->labels_numel, (long long)data->n_classes,
                       (long long)data->vocab_size, m->name);
    const char *pending = zt_config_pending_auto(cfg);
    if (pending)
        return zt_fail(ZT_ERR_INTERNAL, "the caller resolves it with zt_config_resolve_run",
                       "%s is still \"auto\": it needs the model or the run length", pending);
    zt_train_resolve(t);
    t->inject_unit = trainer_inject_unit(t, o->inject_unit);
    if (cfg->activation_checkpointing.cpu_checkpointing && t->ckpt_interval == 0)
        return zt_fail(ZT_ERR_CONFIG,
                       "set activation_checkpointing.number_checkpoints or "
                       "--activation-checkpoint-interval",
                       "activation_checkpointing.cpu_checkpointing moves kept activations to the "
                       "host, but activation checkpointing is off");
    /* Every stage of a data-parallel rank reads that rank's samples. */
    ZT_TRY(zt_sampler_init(&t->sampler, data->n_samples, cfg->train_batch_size,
                           cfg->micro_batch_size, t->comm->size, t->comm->rank, data->shuffle,
                           o->seed));
    return zt_env_fail_at("sampler");
}

static zt_status trainer_init(zt_trainer *t, const zt_trainer_options *o)
{
    const zt_config *cfg = o->cfg;
    const zt_backend *be = o->be;
    t->opt = *o;
    t->cfg = cfg;
    t->whole = o->model;
    t->world = o->world;
    t->be = be;
    t->data = o->data;
    t->seed = o->seed;
    t->slots_hold = -1;
    /* A rank that fails a step of its own here must still take part in every
     * agreement the others reach (zt_world_agree), in the same order: a
     * failure travels on to the next agreement, never past it, so no rank
     * returns while the others wait in a collective. */
    zt_status st = trainer_init_local(t, o);
    ZT_TRY(zt_world_agree(t->world, st, NULL));
    ZT_TRY(trainer_groups_init(t));
    const zt_model *m = t->model;
    st = zt_layout_init(&t->layout, m, &cfg->zero, t->zcomm->size, t->zcomm->rank);
    t->n_slots = zt_pipe_slots(&t->pipe);
    if (st == ZT_OK)
        st = zt_train_nvme_plan(t);
    if (st == ZT_OK)
        st = zt_train_tables(t);
    zt_memory_init(&t->mem, be);
    if (st == ZT_OK)
        st = zt_train_buffers(t, &t->mem, false);
    if (st == ZT_OK)
        st = zt_env_fail_at("plan");
    ZT_TRY(zt_world_agree(t->world, st, NULL));
    ZT_TRY(zt_train_check_memory(t));
    /* A rank's reservation may fail alone (the plan fit, the allocator did
     * not): the others learn of it before the next collective. */
    zt_status reserved = zt_memory_reserve(&t->mem);
    if (reserved != ZT_OK)
        reserved = zt_train_reserve_failed(t, reserved);
    else
        reserved = zt_train_buffers(t, &t->mem, true);
    if (reserved == ZT_OK)
        reserved = zt_env_fail_at("reserve");
    ZT_TRY(zt_world_agree(t->world, reserved, NULL));
    if (t->be_workspace)
        be->set_workspace(be, t->be_workspace, zt_train_workspace_bytes(t));
    zt_train_views(t);
    /* A rank's swap folder may fail alone (a full or unwritable disk): every
     * rank learns of it before anything collective follows. */
    zt_status nst = zt_world_agree(t->world, zt_train_nvme_init(t), NULL);
    if (nst != ZT_OK) { /* what was created is removed again */
        zt_train_nvme_free(t);
        return nst;
    }

    ZT_TRY(zt_train_init_params(t));
    const zt_stage_policy *pol = t->policy;
    if (t->grads)
        be->memset_zero(be, t->grads,
                        zt_train_bytes(pol->grads_sharded ? t->layout.partition_numel
                                                          : t->layout.padded_numel,
                                       t->gdt));
    if (t->host_grads)
        memset(t->host_grads, 0, zt_train_floats(t->layout.partition_numel));
    zt_optim_init(&t->optim, &cfg->optimizer, be, t->offload_opt,
                  zt_stage_optim_numel(pol, &t->layout), t->optim_state);
    zt_sched_init(&t->sched, &cfg->scheduler, &cfg->optimizer);
    zt_scaler_init(&t->scaler, &cfg->fp16, pol->scaler_hysteresis);
    return trainer_stage_init(t);
}

zt_status zt_trainer_init(zt_trainer **out, const zt_trainer_options *opt)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the trainer");
    return trainer_init(*out, opt);
}

void zt_trainer_free(zt_trainer *t)
{
    if (!t)
        return;
    if (t->be_workspace)
        t->be->set_workspace(t->be, NULL, 0);
    if (t->policy)
        t->policy->free(&t->stage);
    zt_train_nvme_free(t);
    trainer_comm_free(&t->hpz_comm);
    zt_qgz_free(&t->qgz);
    trainer_comm_free(&t->shard_comm);
    trainer_comm_free(&t->replica_comm);
    zt_memory_free(&t->mem);
    zt_layout_free(&t->layout);
    zt_train_tables_free(t);
    zt_pipe_free(&t->pipe);
    free(t->loss_history);
    free(t->scale_history);
    free(t->evals);
    free(t);
}

int64_t zt_trainer_steps_per_epoch(const zt_trainer *t) { return t->sampler.steps_per_epoch; }

void zt_trainer_profile_step(zt_trainer *t, int64_t step, zt_unit_profile *prof)
{
    t->prof_step = step;
    t->prof = prof;
    t->profiling = NULL;
}

/* Room for the histories of steps [1, n]; a resumed run starts past 1. */
static zt_status trainer_history_reserve(zt_trainer *t, int64_t n)
{
    if (n <= t->loss_cap)
        return ZT_OK;
    int64_t cap = t->loss_cap ? t->loss_cap : 256;
    while (cap < n)
        cap *= 2;
    double *h = realloc(t->loss_history, (size_t)cap * sizeof *h);
    if (h)
        t->loss_history = h;
    double *s = realloc(t->scale_history, (size_t)cap * sizeof *s);
    if (s)
        t->scale_history = s;
    if (!h || !s)
        return zt_fail(ZT_ERR_OOM, "", "cannot grow the loss history to %lld steps",
                       (long long)n);
    t->loss_cap = cap;
    return ZT_OK;
}

static zt_status trainer_record(zt_trainer *t, double loss, double scale)
{
    ZT_TRY(trainer_history_reserve(t, t->global_steps));
    t->loss_history[t->global_steps - 1] = loss;
    t->scale_history[t->global_steps - 1] = scale;
    return ZT_OK;
}

zt_status zt_trainer_set_history(zt_trainer *t, const double *loss, const double *scale,
                                 int64_t n)
{
    ZT_TRY(trainer_history_reserve(t, n));
    if (n > 0) {
        memcpy(t->loss_history, loss, (size_t)n * sizeof *loss);
        memcpy(t->scale_history, scale, (size_t)n * sizeof *scale);
    }
    return ZT_OK;
}

/* A step whose loss, gradient norm or overflow check (first_bad < n_units)
 * is not finite. fp16's dynamic scaler rules on those steps itself (it stops
 * at its minimum scale). Everywhere else: fp32 and bf16 stop at once unless
 * --nonfinite continue, which steps on (or skips, where bf16 checks for
 * overflow) as DeepSpeed does; that, and a static fp16 scale, which skips as
 * DeepSpeed does, stop at the ZT_TRAIN_MAX_NONFINITE_STEPS-th such step in a
 * row, where the default dynamic scaler would have stopped. The loss, the
 * norm and the overflow test are global: every rank decides alike. */
static zt_status trainer_check_finite(zt_trainer *t, double loss, double norm, int first_bad)
{
    const zt_model *m = t->whole;
    bool overflow = first_bad < m->n_units;
    bool bad = overflow || !isfinite(loss) || !isfinite(norm);
    if (t->scaler.dynamic)
        return ZT_OK;
    t->nonfinite_steps = bad ? t->nonfinite_steps + 1 : 0;
    if (!bad)
        return ZT_OK;
    char what[256];
    if (overflow)
        snprintf(what, sizeof what, "the loss is %g and the gradients of %s (unit %d) hold inf "
                 "or nan", loss, m->units[first_bad].name, first_bad);
    else
        snprintf(what, sizeof what, "the loss is %g and the gradient norm %g", loss, norm);
    const char *dtype = zt_dtype_name(t->cdt);
    long long step = (long long)(t->global_steps + 1);
    if (!t->cfg->fp16.enabled && !t->opt.nonfinite_continue)
        return zt_fail(ZT_ERR_NUMERIC,
                       "training diverged: lower the learning rate or look for extreme "
                       "values in the data; the weights before this step are kept "
                       "(--nonfinite continue steps on, as DeepSpeed does)",
                       "step %lld: %s in %s training", step, what, dtype);
    if (t->nonfinite_steps < ZT_TRAIN_MAX_NONFINITE_STEPS)
        return ZT_OK;
    return zt_fail(ZT_ERR_NUMERIC,
                   "training diverged: lower the learning rate or look for extreme values in "
                   "the data, and resume from the last checkpoint saved before it",
                   "step %lld: %lld steps in a row with a non-finite loss or gradients (%s; "
                   "%s training with %s): the run stops at %d, where fp16's default loss "
                   "scaler gives up",
                   step, (long long)t->nonfinite_steps, what, dtype,
                   t->cfg->fp16.enabled ? "a static loss scale" : "--nonfinite continue",
                   ZT_TRAIN_MAX_NONFINITE_STEPS);
}

static zt_status trainer_step(zt_trainer *t)
{
    const zt_config *cfg = t->cfg;
    double *timers = t->step_timers;
    memset(t->step_timers, 0, sizeof t->step_timers);
    t->step_loss = 0.0;
    double t0 = zt_train_now();
    /* The loss sum, and the stop requests riding on its all-reduce: one
     * count per reason. */
    double sums[3] = {0.0, 0.0, 0.0};
    if (t->prof && t->global_steps == t->prof_step) {
        memset(t->prof, 0, (size_t)t->model->n_units * sizeof *t->prof);
        t->profiling = t->prof;
    }
    /* The stage's schedule over the step's micro-batches (the plain loop
     * without pipelining); the last stage holds the loss. */
    zt_pipe_hooks hooks = zt_train_hooks(t);
    zt_status run = zt_pipe_run_step(&t->pipe, &hooks);
    t->profiling = NULL;
    ZT_TRY(run);
    sums[0] = t->step_loss;
    sig_atomic_t req = t->opt.stop_request ? *t->opt.stop_request : 0;
    sums[1] = (req & 1) ? 1.0 : 0.0;
    sums[2] = (req & 2) ? 1.0 : 0.0;
    ZT_TRY(zt_train_sum_f64(t->comm, t->world->comm, sums, 3, "the loss"));
    double loss = sums[0] / (double)cfg->train_batch_size;
    if (sums[1] > 0.0 || sums[2] > 0.0) {
        t->stop_agreed = true;
        t->stop_ranks[0] = (int64_t)sums[1];
        t->stop_ranks[1] = (int64_t)sums[2];
    }

    double ts = zt_train_now();
    double scale = t->scaler.scale;
    const char *dump = t->opt.grad_dump_path;
    if (dump && (t->global_steps == 0 || strstr(dump, "%d"))) {
        char path[1024];
        const char *at = strstr(dump, "%d");
        if (at)
            snprintf(path, sizeof path, "%.*s%lld%s", (int)(at - dump), dump,
                     (long long)(t->global_steps + 1), at + 2);
        else
            snprintf(path, sizeof path, "%s", dump);
        ZT_TRY(zt_train_dump_slices(t, t->own_g, t->ogdt, (float)(1.0 / scale), path));
    }
    int first_bad = t->whole->n_units;
    if (t->check_overflow)
        ZT_TRY(zt_train_first_overflow(t, &first_bad));
    bool overflow = first_bad < t->whole->n_units;
    /* An overflowing step is skipped unread: its norm would be inf anyway. */
    double norm = NAN;
    if (!overflow) {
        norm = 0.0;
        ZT_TRY(zt_train_slices_sumsq(t, t->own_g, t->ogdt, &norm));
        norm = sqrt(norm);
    }
    ZT_TRY(trainer_check_finite(t, loss, norm, first_bad));
    zt_scaler_event ev = zt_scaler_update(&t->scaler, overflow);
    if (ev.at_min)
        return zt_fail(ZT_ERR_NUMERIC,
                       "lower the learning rate, look for extreme values in the data, or train "
                       "in bf16 (fp32's range)",
                       "step %lld: gradients overflow with the fp16 loss scale already at its "
                       "minimum (%g, fp16.min_loss_scale); the first unit whose gradients hold "
                       "inf or nan is %s (unit %d)",
                       (long long)(t->global_steps + 1), ev.prev_scale,
                       t->whole->units[first_bad].name, first_bad);
    double lr = zt_sched_lr(&t->sched);
    double b1 = -1.0, b2 = -1.0;
    zt_sched_momentum(&t->sched, &b1, &b2);
    if (overflow) {
        /* DeepSpeed: no optimizer or scheduler step; the gradients are
         * overwritten by the next step's first micro-step. */
        t->skipped_steps++;
        t->last_grad_norm = -1.0;
        ZT_TRY(t->policy->flush(&t->stage));
        if (t->opt.observer.overflow)
            t->opt.observer.overflow(t->opt.observer.ctx, &ev, cfg->fp16.enabled);
    } else {
        /* DeepSpeed unscales and clips in one multiply on the scaled norm. */
        double clip = 1.0;
        if (cfg->gradient_clipping > 0.0 && isfinite(norm)) {
            double c = (norm / scale + 1e-6) / cfg->gradient_clipping;
            clip = c > 1.0 ? c : 1.0;
        }
        t->last_grad_norm = isfinite(norm) ? norm / scale : -1.0;
        ZT_TRY(zt_train_apply(t, (float)(1.0 / (clip * scale)), lr, b1, b2));
        zt_sched_step(&t->sched);
    }
    /* check synchronises, and a device failure surfaces within this step. */
    ZT_TRY(t->be->check(t->be));
    double t1 = zt_train_now();
    timers[ZT_TIMER_STEP] += 1e3 * (t1 - ts);

    t->last_lr = lr;
    t->global_steps++;
    t->global_samples += cfg->train_batch_size;
    ZT_TRY(trainer_record(t, loss, scale));

    /* DeepSpeed's throughput timer leaves the first two steps out (warm-up). */
    double dt = t1 - t0;
    t->train_seconds += dt;
    if (t->global_steps > 2) {
        t->timed_seconds += dt;
        t->timed_steps++;
    }
    zt_step_info info = {
        .global_steps = t->global_steps,
        .skipped_steps = t->skipped_steps,
        .micro_steps = t->global_steps * cfg->gradient_accumulation_steps,
        .epoch = (t->global_steps - 1) / t->sampler.steps_per_epoch,
        .global_samples = t->global_samples,
        .loss = loss,
        .lr = lr,
        .grad_norm = t->last_grad_norm,
        .loss_scale = cfg->fp16.enabled ? t->scaler.scale : -1.0,
        .beta1 = b1 >= 0 ? b1 : (cfg->optimizer.type == ZT_OPTIM_SGD ? cfg->optimizer.momentum
                                                                     : cfg->optimizer.beta1),
        .beta2 = b2 >= 0 ? b2 : cfg->optimizer.beta2,
        .is_sgd = cfg->optimizer.type == ZT_OPTIM_SGD,
        .curr_samples_per_sec = t->global_steps > 2 ? (double)cfg->train_batch_size / dt : 0.0,
        .running_samples_per_sec =
            t->timed_steps > 0
                ? (double)cfg->train_batch_size * (double)t->timed_steps / t->timed_seconds
                : 0.0,
        .seconds = dt,
        .mem_allocated = t->mem.total_current[ZT_MEM_DEVICE],
        .max_mem_allocated = t->mem.total_peak[ZT_MEM_DEVICE],
    };
    memcpy(info.timers_ms, timers, sizeof info.timers_ms);
    if (t->opt.observer.step)
        t->opt.observer.step(t->opt.observer.ctx, &info);
    return ZT_OK;
}

static zt_status trainer_eval_point(zt_trainer *t)
{
    zt_eval_point e = {.step = t->global_steps};
    double t0 = zt_train_now();
    ZT_TRY(zt_trainer_eval(t, t->opt.eval_data, t->opt.eval_iters, &e.loss, &e.accuracy));
    e.seconds = zt_train_now() - t0;
    if (t->n_evals == t->eval_cap) {
        t->eval_cap = t->eval_cap ? 2 * t->eval_cap : 16;
        zt_eval_point *h = realloc(t->evals, (size_t)t->eval_cap * sizeof *h);
        if (!h)
            return zt_fail(ZT_ERR_OOM, "", "cannot grow the evaluation history");
        t->evals = h;
    }
    t->evals[t->n_evals++] = e;
    if (t->opt.observer.eval)
        t->opt.observer.eval(t->opt.observer.ctx, &e);
    /* The weights that give it are what a checkpoint would keep next. The
     * loss is summed over the ranks: every rank decides alike. */
    bool stops = !t->cfg->fp16.enabled && !t->opt.nonfinite_continue;
    if (stops && !isfinite(e.loss) && t->opt.eval_data->n_samples > 0)
        return zt_fail(ZT_ERR_NUMERIC,
                       "training diverged: lower the learning rate or look for extreme values "
                       "in the data (--nonfinite continue trains on, as DeepSpeed does)",
                       "step %lld: the validation loss is %g in %s training", (long long)e.step,
                       e.loss, zt_dtype_name(t->cdt));
    return ZT_OK;
}

zt_status zt_trainer_train(zt_trainer *t, int64_t until_step)
{
    const zt_trainer_options *o = &t->opt;
    zt_status st = ZT_OK;
    t->stop_agreed = false;
    while (st == ZT_OK && t->global_steps < until_step && !t->stop_agreed) {
        st = trainer_step(t);
        bool due = o->eval_data && o->eval_interval > 0 && !t->stop_agreed &&
                   (t->global_steps % o->eval_interval == 0 || t->global_steps == until_step);
        if (st == ZT_OK && due)
            st = trainer_eval_point(t);
        if (st == ZT_OK && o->after_step)
            st = o->after_step(t, o->after_step_ctx);
    }
    return st;
}

int64_t zt_trainer_nonfinite_steps(const zt_trainer *t) { return t->nonfinite_steps; }

bool zt_trainer_stopped(const zt_trainer *t, int64_t ranks_per_reason[2])
{
    ranks_per_reason[0] = t->stop_agreed ? t->stop_ranks[0] : 0;
    ranks_per_reason[1] = t->stop_agreed ? t->stop_ranks[1] : 0;
    return t->stop_agreed;
}

void zt_trainer_stats_get(const zt_trainer *t, zt_trainer_stats *s)
{
    const zt_config *cfg = t->cfg;
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->model = t->whole;
    s->world = t->world;
    s->be = t->be;
    s->pipe = &t->pipe;
    s->device = t->be->name;
    s->comm = t->comm->name;
    s->policy = t->policy;
    s->compute_dtype = t->cdt;
    s->grad_dtype = t->gdt;
    s->comm_dtype = t->kdt;
    s->mixed = t->mixed;
    s->typed_units = t->typed;
    s->offload_optimizer = t->offload_opt;
    s->offload_param = t->offload_param;
    s->nvme_optimizer = t->nvme_opt;
    s->nvme_param = t->nvme_param;
    s->dynamic_loss_scale = t->scaler.dynamic;
    s->checkpoint_interval = t->ckpt_interval;
    s->cpu_checkpointing = t->ckpt_host;
    s->layout = &t->layout;
    s->steps_per_epoch = t->sampler.steps_per_epoch;
    s->global_steps = t->global_steps;
    s->skipped_steps = t->skipped_steps;
    s->global_samples = t->global_samples;
    s->train_seconds = t->train_seconds;
    double batch = (double)cfg->train_batch_size;
    if (t->timed_steps > 0)
        s->samples_per_sec = batch * (double)t->timed_steps / t->timed_seconds;
    else if (t->train_seconds > 0)
        s->samples_per_sec = batch * (double)t->global_steps / t->train_seconds;
    s->loss_history = t->loss_history;
    s->scale_history = t->scale_history;
    s->evals = t->evals;
    s->n_evals = t->n_evals;
    s->gather_peak_live_params = t->stage.gather.peak_live_numel;
    s->mem = (zt_memory *)&t->mem;
    s->groups[ZT_STAGE_GROUP_WORLD] = t->comm;
    s->groups[ZT_STAGE_GROUP_HPZ] = t->hpz_comm;
    s->groups[ZT_STAGE_GROUP_MICS_SHARD] = t->shard_comm;
    s->groups[ZT_STAGE_GROUP_MICS_REPLICA] = t->replica_comm;
    s->groups[ZT_STAGE_GROUP_QGZ_INTRA] = t->qgz.intra;
    s->groups[ZT_STAGE_GROUP_QGZ_INTER] = t->qgz.inter;
    s->pipe_group = t->pipe.stages > 1 ? &t->pipe.line : NULL;
    zt_stage_shape shape;
    if (zt_trainer_stage_shape(cfg, t->model, t->comm->size, &shape) == ZT_OK) {
        if (t->qgz.active) {
            int64_t width = zt_zero_rs_width(cfg, &t->layout);
            shape.qgz_local = t->qgz.local_size;
            shape.qgz_intra_bytes = zt_qgz_pass_bytes(&t->qgz, &t->layout, width, false);
            shape.qgz_inter_bytes = zt_qgz_pass_bytes(&t->qgz, &t->layout, width, true);
        }
        t->policy->memory(t->policy, &shape, &s->expected_memory);
        t->policy->traffic(&shape, &s->expected_traffic);
    }
}

void zt_trainer_counters_get(const zt_trainer *t, zt_trainer_counters *c)
{
    c->global_steps = t->global_steps;
    c->skipped_steps = t->skipped_steps;
    c->global_samples = t->global_samples;
    c->optim_steps = t->optim.steps;
}

void zt_trainer_counters_set(zt_trainer *t, const zt_trainer_counters *c)
{
    t->global_steps = c->global_steps;
    t->skipped_steps = c->skipped_steps;
    t->global_samples = c->global_samples;
    t->optim.steps = c->optim_steps;
}

zt_sched *zt_trainer_sched(zt_trainer *t) { return &t->sched; }

zt_scaler *zt_trainer_scaler(zt_trainer *t) { return &t->scaler; }

const zt_sampler *zt_trainer_sampler(const zt_trainer *t) { return &t->sampler; }

uint64_t zt_trainer_seed(const zt_trainer *t) { return t->seed; }
