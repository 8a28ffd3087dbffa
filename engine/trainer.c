#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>

#include "monitor.h"

static double trainer_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host scalars (loss sums, norms) travel over MPI directly: they are not the
 * tensor traffic the comm counters account for. */
static zt_status trainer_sum_f64(const zt_trainer *t, double *v, int n)
{
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, t->world->comm);
    if (rc != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "a peer rank may have died; check the other ranks' output",
                       "all-reduce of %d scalars failed (MPI error %d)", n, rc);
    return ZT_OK;
}

static int64_t trainer_max_act_numel(const zt_model *m)
{
    int64_t w = m->in_numel;
    for (int u = 0; u < m->n_units; u++) {
        if (m->units[u].in_numel > w)
            w = m->units[u].in_numel;
        if (m->units[u].out_numel > w)
            w = m->units[u].out_numel;
    }
    return w;
}

/* One buffer of the trainer: planned into its arena on the first pass, carved
 * out of the reservation on the second, so plan and use cannot disagree. */
static zt_status trainer_buf(zt_trainer *t, bool reserved, zt_mem_loc loc, zt_mem_class cls,
                             size_t bytes, void *out)
{
    if (!reserved) {
        zt_memory_plan(&t->mem, loc, cls, bytes);
        return ZT_OK;
    }
    return zt_arena_alloc(zt_memory_arena(&t->mem, loc, cls), bytes, (void **)out);
}

/* Every buffer the trainer holds, in one list. */
static zt_status trainer_buffers(zt_trainer *t, bool reserved)
{
    const zt_model *m = t->model;
    int64_t mb = t->cfg->micro_batch_size;
    size_t flat = (size_t)t->layout.padded_numel * sizeof(float);
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_PARAMS, flat, &t->params));
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_GRADS, flat, &t->grads));
    int64_t state = zt_optim_state_numel(&t->cfg->optimizer, t->layout.padded_numel);
    if (state > 0)
        ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_OPTIM,
                           (size_t)state * sizeof(float), &t->optim_state));
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                       (size_t)(mb * m->in_numel) * sizeof(float), &t->x));
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS, (size_t)mb * sizeof(int32_t),
                       &t->labels));
    for (int u = 0; u < m->n_units; u++) {
        ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                           (size_t)(mb * m->units[u].out_numel) * sizeof(float), &t->acts[u]));
        if (m->units[u].saved_numel > 0)
            ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                               (size_t)(mb * m->units[u].saved_numel) * sizeof(float),
                               &t->saved[u]));
    }
    size_t dact = (size_t)(mb * trainer_max_act_numel(m)) * sizeof(float);
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[0]));
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_DEVICE, ZT_MEM_WORK, dact, &t->dact[1]));
    ZT_TRY(trainer_buf(t, reserved, ZT_MEM_HOST, ZT_MEM_WORK,
                       (size_t)(mb * m->in_numel) * sizeof(float), &t->x_host));
    return trainer_buf(t, reserved, ZT_MEM_HOST, ZT_MEM_WORK, (size_t)mb * sizeof(int32_t),
                       &t->labels_host);
}

/* Every rank builds the same initial weights from the counter PRNG. */
static zt_status trainer_init_params(zt_trainer *t)
{
    const zt_backend *be = t->be;
    be->memset_zero(be, t->params, (size_t)t->layout.padded_numel * sizeof(float));
    int64_t max_numel = 0;
    for (int u = 0; u < t->layout.n_units; u++)
        if (t->layout.units[u].numel > max_numel)
            max_numel = t->layout.units[u].numel;
    float *host = malloc((size_t)max_numel * sizeof(float));
    if (!host)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to initialise parameters",
                       (long long)max_numel);
    for (int u = 0; u < t->layout.n_units; u++) {
        const zt_unit_layout *ul = &t->layout.units[u];
        zt_unit_init_range(&t->model->units[u], t->seed, ul->global_index, 0, ul->numel, host);
        be->copy_h2d(be, t->params + ul->offset, host, (size_t)ul->numel * sizeof(float));
    }
    free(host);
    return ZT_OK;
}

zt_status zt_trainer_init(zt_trainer *t, const zt_config *cfg, const zt_model *m,
                          zt_dataset *data, const zt_world *w, const zt_backend *be,
                          zt_comm *comm, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->model = m;
    t->world = w;
    t->be = be;
    t->comm = comm;
    t->data = data;
    t->seed = seed;
    if (data->x_numel != m->in_numel || data->n_classes != m->n_classes)
        return zt_fail(ZT_ERR_INTERNAL, "", "data (%lld inputs, %lld classes) does not fit model",
                       (long long)data->x_numel, (long long)data->n_classes);
    ZT_TRY(zt_layout_init(&t->layout, m, w->size, w->rank));
    ZT_TRY(zt_sampler_init(&t->sampler, data->n_samples, cfg->train_batch_size,
                           cfg->micro_batch_size, w->size, w->rank, data->shuffle, seed));

    t->acts = calloc((size_t)m->n_units, sizeof *t->acts);
    t->saved = calloc((size_t)m->n_units, sizeof *t->saved);
    if (!t->acts || !t->saved)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate activation tables");
    zt_memory_init(&t->mem, be);
    ZT_TRY(trainer_buffers(t, false));
    ZT_TRY(zt_memory_reserve(&t->mem));
    ZT_TRY(trainer_buffers(t, true));

    ZT_TRY(trainer_init_params(t));
    be->memset_zero(be, t->grads, (size_t)t->layout.padded_numel * sizeof(float));
    zt_optim_init(&t->optim, &cfg->optimizer, be, t->layout.padded_numel, t->optim_state);
    zt_sched_init(&t->sched, &cfg->scheduler, &cfg->optimizer);
    ZT_TRY(zt_zero_reducer_init(&t->reducer, cfg, be, comm, &t->layout, t->grads));
    return ZT_OK;
}

void zt_trainer_free(zt_trainer *t)
{
    zt_zero_reducer_free(&t->reducer);
    zt_memory_free(&t->mem);
    zt_layout_free(&t->layout);
    free(t->acts);
    free(t->saved);
    free(t->loss_history);
    t->acts = t->saved = NULL;
    t->loss_history = NULL;
}

int64_t zt_trainer_steps_per_epoch(const zt_trainer *t) { return t->sampler.steps_per_epoch; }

static void trainer_load_batch(zt_trainer *t, int64_t micro_step)
{
    int64_t mb = t->cfg->micro_batch_size, in = t->model->in_numel;
    for (int64_t k = 0; k < mb; k++) {
        int64_t idx = zt_sampler_index(&t->sampler, t->global_steps, micro_step, k);
        t->data->get(t->data, idx, t->x_host + k * in, &t->labels_host[k]);
    }
    t->be->copy_h2d(t->be, t->x, t->x_host, (size_t)(mb * in) * sizeof(float));
    t->be->copy_h2d(t->be, t->labels, t->labels_host, (size_t)mb * sizeof(int32_t));
}

/* One micro-step: forward, loss, backward. Returns this rank's loss sum. */
static zt_status trainer_micro_step(zt_trainer *t, int64_t m, double *loss_sum, double *timers)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    const zt_layout *lay = &t->layout;
    int64_t mb = t->cfg->micro_batch_size, gas = t->cfg->gradient_accumulation_steps;
    bool boundary = m == gas - 1;
    int last = model->n_units - 1;
    zt_batch b = {.n = mb, .labels = t->labels_host, .seed = t->seed, .step = t->global_steps,
                  .training = true};

    trainer_load_batch(t, m);
    double t0 = trainer_now();
    const float *in = t->x;
    for (int u = 0; u <= last; u++) {
        model->units[u].ops->forward(&model->units[u], be, t->params + lay->units[u].offset, in,
                                     t->acts[u], t->saved[u], &b);
        in = t->acts[u];
    }
    /* The mean over this micro-batch, divided by GAS as DeepSpeed scales the loss. */
    float dscale = 1.0f / (float)(mb * gas);
    *loss_sum += be->xent_forward_backward(be, t->acts[last], t->labels, mb, model->n_classes,
                                           model->ignore_index, dscale, t->dact[0]);
    double t1 = trainer_now();
    timers[ZT_TIMER_FWD] += 1e3 * (t1 - t0);

    if (boundary)
        zt_zero_reducer_begin(&t->reducer);
    int cur = 0;
    for (int u = last; u >= 0; u--) {
        const float *x = u > 0 ? t->acts[u - 1] : t->x;
        float *dx = u > 0 ? t->dact[1 - cur] : NULL;
        model->units[u].ops->backward(&model->units[u], be, t->params + lay->units[u].offset, x,
                                      t->acts[u], t->saved[u], t->dact[cur], dx,
                                      t->grads + lay->units[u].offset, m > 0, &b);
        if (boundary)
            ZT_TRY(zt_zero_reducer_unit_done(&t->reducer, u));
        cur = 1 - cur;
    }
    double t2 = trainer_now();
    timers[ZT_TIMER_BWD_INNER] += 1e3 * (t2 - t1);
    if (boundary)
        ZT_TRY(zt_zero_reducer_finish(&t->reducer));
    double t3 = trainer_now();
    timers[ZT_TIMER_BWD_ALLREDUCE] += 1e3 * (t3 - t2);
    timers[ZT_TIMER_BWD] += 1e3 * (t3 - t1);
    return ZT_OK;
}

/* Sum of squares (float64) of this rank's partition of a flat buffer, summed
 * over ranks: DeepSpeed's global norm, the same value on every rank. */
static zt_status trainer_partition_sumsq(zt_trainer *t, const float *flat, double *sq)
{
    const zt_layout *lay = &t->layout;
    *sq = 0.0;
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        *sq += t->be->sum_squares(t->be, flat + ul->offset + lay->rank * ul->shard_numel,
                                  ul->shard_numel);
    }
    return trainer_sum_f64(t, sq, 1);
}

static zt_status trainer_step(zt_trainer *t, zt_monitor *mon)
{
    const zt_config *cfg = t->cfg;
    double timers[ZT_TIMER_N] = {0};
    double t0 = trainer_now();
    double loss_sum = 0.0;
    for (int64_t m = 0; m < cfg->gradient_accumulation_steps; m++)
        ZT_TRY(trainer_micro_step(t, m, &loss_sum, timers));
    ZT_TRY(trainer_sum_f64(t, &loss_sum, 1));
    double loss = loss_sum / (double)cfg->train_batch_size;

    double ts = trainer_now();
    double norm = 0.0;
    ZT_TRY(trainer_partition_sumsq(t, t->grads, &norm));
    norm = sqrt(norm);
    t->last_grad_norm = isfinite(norm) ? norm : -1.0;
    if (cfg->gradient_clipping > 0.0 && isfinite(norm)) {
        double coef = cfg->gradient_clipping / (norm + 1e-6);
        if (coef < 1.0)
            t->be->scale(t->be, t->grads, (float)coef, t->layout.padded_numel);
    }
    double lr = zt_sched_lr(&t->sched);
    double b1 = -1.0, b2 = -1.0;
    zt_sched_momentum(&t->sched, &b1, &b2);
    zt_optim_step(&t->optim, t->params, t->grads, lr, b1, b2);
    zt_sched_step(&t->sched);
    t->be->sync(t->be);
    double t1 = trainer_now();
    timers[ZT_TIMER_STEP] += 1e3 * (t1 - ts);

    t->last_lr = lr;
    t->global_steps++;
    t->global_samples += cfg->train_batch_size;
    if (t->global_steps > t->loss_cap) {
        t->loss_cap = t->loss_cap ? 2 * t->loss_cap : 256;
        double *h = realloc(t->loss_history, (size_t)t->loss_cap * sizeof *h);
        if (!h)
            return zt_fail(ZT_ERR_OOM, "", "cannot grow the loss history");
        t->loss_history = h;
    }
    t->loss_history[t->global_steps - 1] = loss;

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
        .beta1 = b1 >= 0 ? b1 : (cfg->optimizer.type == ZT_OPTIM_SGD ? cfg->optimizer.momentum
                                                                     : cfg->optimizer.beta1),
        .beta2 = b2 >= 0 ? b2 : cfg->optimizer.beta2,
        .is_sgd = cfg->optimizer.type == ZT_OPTIM_SGD,
        .curr_samples_per_sec = t->global_steps > 2 ? (double)cfg->train_batch_size / dt : 0.0,
        .running_samples_per_sec =
            t->timed_steps > 0
                ? (double)cfg->train_batch_size * (double)t->timed_steps / t->timed_seconds
                : 0.0,
        .mem_allocated = t->mem.total_current[ZT_MEM_DEVICE],
        .max_mem_allocated = t->mem.total_peak[ZT_MEM_DEVICE],
    };
    memcpy(info.timers_ms, timers, sizeof timers);
    zt_monitor_step(mon, &info);
    return ZT_OK;
}

zt_status zt_trainer_train(zt_trainer *t, int64_t until_step)
{
    zt_monitor mon;
    ZT_TRY(zt_monitor_init(&mon, t->cfg, t->world->rank));
    zt_status st = ZT_OK;
    while (st == ZT_OK && t->global_steps < until_step)
        st = trainer_step(t, &mon);
    zt_monitor_free(&mon);
    return st;
}

double zt_trainer_param_norm(zt_trainer *t)
{
    double sq = 0.0;
    return trainer_partition_sumsq(t, t->params, &sq) == ZT_OK ? sqrt(sq) : NAN;
}

zt_status zt_trainer_dump_params(zt_trainer *t, const char *path)
{
    zt_status st = ZT_OK;
    if (t->world->rank == 0) {
        FILE *f = fopen(path, "wb");
        if (!f) {
            st = zt_fail(ZT_ERR_IO, "check that the directory exists and is writable",
                         "cannot write parameter dump %s: %s", path, strerror(errno));
        } else {
            float *host = malloc((size_t)t->layout.padded_numel * sizeof(float));
            if (!host) {
                st = zt_fail(ZT_ERR_OOM, "", "cannot stage %lld floats for the dump",
                             (long long)t->layout.padded_numel);
            } else {
                t->be->copy_d2h(t->be, host, t->params,
                                (size_t)t->layout.padded_numel * sizeof(float));
                for (int u = 0; u < t->layout.n_units && st == ZT_OK; u++) {
                    const zt_unit_layout *ul = &t->layout.units[u];
                    if (fwrite(host + ul->offset, sizeof(float), (size_t)ul->numel, f) !=
                        (size_t)ul->numel)
                        st = zt_fail(ZT_ERR_IO, "check free disk space",
                                     "writing parameter dump %s failed", path);
                }
                free(host);
            }
            if (fclose(f) != 0 && st == ZT_OK)
                st = zt_fail(ZT_ERR_IO, "check free disk space", "closing %s failed: %s", path,
                             strerror(errno));
        }
    }
    return zt_world_agree(t->world, st, NULL);
}
