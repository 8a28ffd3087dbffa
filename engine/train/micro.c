/*
 * micro: one micro-step, as the pipeline stage runner's hooks
 * (engine/pipe/pipe.h): the forward reads this rank's micro-batch into its
 * slot and runs the stage's units (each unit's parameters fetched from the
 * stage policy and released after); the backward computes the loss (last
 * stage) or takes the gradient the next stage sent, and runs the units
 * backward, handing each unit's fresh gradient to where the ZeRO stage keeps
 * gradients: the full gradients (stages that do not shard them, reduced at
 * the boundary) or the policy's reduction every micro-step; the gradient of
 * the stage's input goes to the previous stage. Activation checkpointing
 * re-runs segments on the way back (recompute.c); precision conversions go
 * through placement.c.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/train/trainer_impl.h"

void zt_train_load(zt_trainer *t, const zt_dataset *ds, int64_t n, zt_batch *b)
{
    const zt_model *m = t->model;
    const zt_backend *be = t->be;
    int64_t T = m->seq_len, L = m->labels_numel, tb = 0;
    for (int64_t k = 0; k < n; k++) {
        zt_sample s = {.x = t->x ? t->x_host + k * m->in_numel : NULL,
                       .tokens = T > 0 ? t->tokens_host + k * T : NULL,
                       .labels = t->labels_host + k * L};
        int64_t idx = t->index_host[k];
        ds->get(ds, idx >= 0 ? idx : 0, &s);
        for (int64_t j = 0; idx < 0 && j < L; j++)
            s.labels[j] = ZT_IGNORE_INDEX;
        if (T > 0) {
            t->lengths_host[k] = (int32_t)(ds->variable_length ? s.length : T);
            if (t->lengths_host[k] > tb)
                tb = t->lengths_host[k];
        }
    }
    /* Variable-length samples are packed densely at the batch's longest
     * length: row k moves from k * T down to k * tb <= k * T, so ascending k
     * never overwrites a row not yet moved. */
    for (int64_t k = 0; T > 0 && ds->variable_length && k < n; k++) {
        int32_t *dst = t->tokens_host + k * tb;
        memmove(dst, t->tokens_host + k * T, (size_t)t->lengths_host[k] * sizeof(int32_t));
        for (int64_t i = t->lengths_host[k]; i < tb; i++)
            dst[i] = ds->pad_id;
    }
    if (t->x) {
        /* Typed units read their input in cdt: rounded here, on the host,
         * so the device gets half the bytes and every backend the same bits. */
        zt_dtype xdt = zt_train_unit_dtype(t);
        const void *x = t->x_host;
        if (xdt != ZT_F32) {
            zt_convert_host(t->x_stage, xdt, t->x_host, ZT_F32, n * m->in_numel, 1.0f, false);
            x = t->x_stage;
        }
        be->copy_h2d(be, t->x, x, (size_t)(n * m->in_numel) * zt_dtype_size(xdt));
    }
    if (T > 0) {
        be->copy_h2d(be, t->tokens, t->tokens_host, (size_t)(n * tb) * sizeof(int32_t));
        be->copy_h2d(be, t->lengths, t->lengths_host, (size_t)n * sizeof(int32_t));
    }
    be->copy_h2d(be, t->labels, t->labels_host, (size_t)(n * L) * sizeof(int32_t));
    be->copy_h2d(be, t->row_keys, t->row_keys_host, (size_t)n * sizeof(uint64_t));
    *b = (zt_batch){.n = n,
                    .t = tb,
                    .tokens = T > 0 ? t->tokens : NULL,
                    .lengths = ds->variable_length ? t->lengths : NULL,
                    .row_keys = t->row_keys,
                    .seed = t->seed,
                    .step = t->global_steps,
                    .training = false,
                    .dt = zt_train_unit_dtype(t)};
}

int64_t zt_train_rows_per_sample(const zt_trainer *t, const zt_batch *b)
{
    return t->model->labels_per_token ? b->t : t->model->labels_numel;
}

void zt_train_use_slot(zt_trainer *t, int k)
{
    const zt_train_slot *s = &t->slots[k];
    t->x = s->x;
    t->tokens = s->tokens;
    t->lengths = s->lengths;
    t->row_keys = s->row_keys;
    t->labels = s->labels;
    t->acts = s->acts;
    t->saved = s->saved;
    t->ckpt = s->ckpt;
    t->in_act = zt_pipe_active(&t->pipe) ? zt_pipe_act_in(&t->pipe, k) : NULL;
}

zt_dtype zt_train_unit_dtype(const zt_trainer *t)
{
    return t->typed ? t->cdt : ZT_F32;
}

/* Unit u's input as the unit reads it: fp32, or cdt when typed; the model
 * input (unit 0 of the first stage) was loaded in that dtype already. */
static const void *micro_input(const zt_trainer *t, int u, int64_t n)
{
    if (u == 0 && !t->in_act)
        return t->x;
    if (t->typed)
        return zt_train_unit_input(t, u);
    return zt_train_fp32(t, zt_train_unit_input(t, u), n * t->model->units[u].in_numel, t->xin);
}

/* The flops profiler's clock around one unit call: the device is
 * synchronised so the call's own time is what is measured. */
static double micro_prof_start(const zt_trainer *t)
{
    if (!t->profiling)
        return 0.0;
    t->be->sync(t->be);
    return zt_train_now();
}

static void micro_prof_stop(zt_trainer *t, int u, double t0, bool forward, const zt_batch *b)
{
    if (!t->profiling)
        return;
    t->be->sync(t->be);
    double ms = 1e3 * (zt_train_now() - t0);
    zt_unit_profile *p = &t->profiling[u];
    if (forward && !t->recomputing) {
        zt_unit_cost c = zt_unit_forward_cost(&t->model->units[u], b->n, b->t);
        p->fwd_ms += ms;
        p->fwd_macs += c.macs;
        p->fwd_flops += c.flops;
        p->samples += b->n;
    } else {
        p->bwd_ms += ms;
    }
}

void zt_train_run_forward(zt_trainer *t, int u, const void *p, const zt_batch *b)
{
    const zt_unit *unit = &t->model->units[u];
    const zt_backend *be = t->be;
    int64_t n = b->n;
    bool copies = t->mixed && !t->typed; /* the unit computes on fp32 copies */
    const void *x = micro_input(t, u, n);
    const void *pf = copies ? zt_train_fp32(t, p, unit->param_numel, t->pw) : p;
    void *y = copies ? t->yout : t->acts[u];
    void *sv = unit->saved_numel > 0 ? (copies ? t->sw : t->saved[u]) : NULL;
    double t0 = micro_prof_start(t);
    unit->ops->forward(unit, be, pf, x, y, sv, t->work, b);
    micro_prof_stop(t, u, t0, true, b);
    if (!copies)
        return;
    zt_train_store(t, t->acts[u], y, n * unit->out_numel);
    if (sv)
        zt_train_store(t, t->saved[u], sv, n * unit->saved_numel);
}

zt_status zt_train_forward(zt_trainer *t, const zt_batch *b, bool last_use)
{
    const zt_model *model = t->model;
    const zt_stage_policy *pol = t->policy;
    for (int u = 0; u < model->n_units; u++) {
        void *p;
        ZT_TRY(pol->fetch(&t->stage, u, ZT_GATHER_FWD, &p));
        zt_train_run_forward(t, u, p, b);
        ZT_TRY(pol->release(&t->stage, u, ZT_GATHER_FWD, last_use));
        if (u + 1 < model->n_units && zt_train_kept_input(t, u + 1))
            zt_train_keep(t, u, b->n);
    }
    return ZT_OK;
}

const void *zt_train_logits(zt_trainer *t, int64_t n, zt_dtype *dt)
{
    int last = t->model->n_units - 1;
    *dt = zt_train_unit_dtype(t);
    if (t->typed)
        return t->acts[last];
    return zt_train_fp32(t, t->acts[last], n * t->model->units[last].out_numel, t->yout);
}

void zt_train_logits_d2h(zt_trainer *t, float *dst, int64_t dst_ld, const void *src, zt_dtype dt,
                         int64_t rows, int64_t cols, int64_t ld)
{
    const zt_backend *be = t->be;
    if (dt == ZT_F32 && cols == ld && dst_ld == ld) {
        be->copy_d2h(be, dst, src, zt_train_floats(rows * cols));
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const void *row = zt_dtype_at(src, dt, r * ld);
        if (dt == ZT_F32) {
            be->copy_d2h(be, dst + r * dst_ld, row, zt_train_floats(cols));
            continue;
        }
        be->copy_d2h(be, t->logits_stage, row, (size_t)cols * zt_dtype_size(dt));
        zt_convert_host(dst + r * dst_ld, ZT_F32, t->logits_stage, dt, cols, 1.0f, false);
    }
}

/* Unit u's backward from dy into dx (NULL for unit 0), both fp32 or (typed)
 * cdt, and the unit's fp32 parameter gradient: written to (or, in fp32
 * training, added to when accumulate) `dp`; under mixed precision always
 * written. */
static void micro_run_backward(zt_trainer *t, int u, const void *p, void *dy, void *dx,
                               float *dp, bool accumulate, const zt_batch *b)
{
    const zt_unit *unit = &t->model->units[u];
    int64_t n = b->n;
    bool copies = t->mixed && !t->typed;
    const void *x = micro_input(t, u, n);
    const void *pf = copies ? zt_train_fp32(t, p, unit->param_numel, t->pw) : p;
    /* An in-place loss gradient is over the last unit's output (in yout
     * when the units compute on fp32 copies): that unit's backward never
     * reads y, and gets none. */
    const void *y = dy == t->yout || dy == t->acts[u] ? NULL
                    : copies ? zt_train_fp32(t, t->acts[u], n * unit->out_numel, t->yout)
                             : t->acts[u];
    const void *sv = unit->saved_numel <= 0 ? NULL
                     : copies ? zt_train_fp32(t, t->saved[u], n * unit->saved_numel, t->sw)
                              : t->saved[u];
    double t0 = micro_prof_start(t);
    unit->ops->backward(unit, t->be, pf, x, y, sv, dy, dx, dp, t->work, accumulate && !t->mixed,
                        b);
    micro_prof_stop(t, u, t0, false, b);
}

/* Unit u's fresh fp32 gradient g (padded_numel, zero padding) goes where the
 * stage keeps gradients: added into the full GRADS (m > 0 accumulates) when
 * the stage does not shard them, and to the policy's reduction when this
 * micro-step reduces. */
static zt_status micro_route_grad(zt_trainer *t, int u, const float *g, int64_t m, bool reduce)
{
    const zt_unit_layout *ul = &t->layout.units[u];
    if (!t->policy->grads_sharded && t->mixed)
        t->be->convert(t->be, zt_zero_at(t->grads, ul->offset, t->gdt), t->gdt, g, ZT_F32,
                       ul->padded_numel, 1.0f, m > 0);
    if (!reduce)
        return ZT_OK;
    return t->policy->reduce_unit(&t->stage, u, g);
}

/* --inject-overflow: an inf in this rank's fresh gradient of a unit (the
 * last rank of the stage's data-parallel group). */
static void micro_inject(zt_trainer *t, float *g)
{
    if (t->comm->rank != t->comm->size - 1)
        return;
    for (int i = 0; i < t->opt.n_inject_steps; i++)
        if (t->opt.inject_steps[i] == t->global_steps + 1) {
            const float inf = INFINITY;
            t->be->copy_h2d(t->be, g, &inf, sizeof inf);
        }
}

/* Micro-batch m of the current step into the current slot. Dropout keys:
 * positions in the training stream, the same at any world size and stage. */
static void micro_load(zt_trainer *t, int64_t m, zt_batch *b)
{
    int64_t mb = t->cfg->micro_batch_size;
    for (int64_t k = 0; k < mb; k++) {
        t->index_host[k] = zt_sampler_index(&t->sampler, t->global_steps, m, k);
        t->row_keys_host[k] = (uint64_t)(t->global_steps * t->cfg->train_batch_size +
                                         zt_sampler_offset(&t->sampler, m, k));
    }
    zt_train_load(t, t->data, mb, b);
    b->training = true;
}

static zt_status micro_forward(void *ctx, int64_t m, int slot)
{
    zt_trainer *t = ctx;
    zt_train_use_slot(t, slot);
    zt_batch *b = &t->slots[slot].b;
    micro_load(t, m, b);
    double t0 = zt_train_now();
    ZT_TRY(zt_train_forward(t, b, false));
    t->slots_hold = m;
    t->step_timers[ZT_TIMER_FWD] += 1e3 * (zt_train_now() - t0);
    return ZT_OK;
}

/* The last stage's loss on the slot's logits: the mean over this
 * micro-batch, divided by GAS as DeepSpeed scales the loss, times the loss
 * scale (1 unless fp16). Its gradient, returned, is written over the logits
 * when the model allows (loss_in_place), else into dact[0]. */
static void *micro_loss(zt_trainer *t, const zt_batch *b)
{
    const zt_model *model = t->model;
    int64_t mb = t->cfg->micro_batch_size, gas = t->cfg->gradient_accumulation_steps;
    int64_t per_sample = zt_train_rows_per_sample(t, b), rows = mb * per_sample;
    float dscale = (float)(t->scaler.scale / (double)(rows * gas));
    zt_dtype dt;
    void *logits = (void *)zt_train_logits(t, mb, &dt);
    void *dlogits = model->loss_in_place ? logits : t->dact[0];
    t->step_loss += t->be->xent_forward_backward(t->be, dt, logits, t->labels, rows,
                                                 model->n_classes, model->logits_ld,
                                                 model->ignore_index, dscale, dlogits) /
                    (double)per_sample;
    return dlogits;
}

static zt_status micro_backward(void *ctx, int64_t m, int slot, float *grad_out)
{
    zt_trainer *t = ctx;
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    const zt_layout *lay = &t->layout;
    const zt_stage_policy *pol = t->policy;
    double *timers = t->step_timers;
    zt_train_use_slot(t, slot);
    const zt_batch *b = &t->slots[slot].b;
    bool boundary = m == t->cfg->gradient_accumulation_steps - 1;
    int n_units = model->n_units, last = n_units - 1;
    int64_t K = t->ckpt_interval > 0 ? t->ckpt_interval : n_units;
    int a_last = (int)(last / K * K);
    double t0 = zt_train_now();
    /* Checkpointing: the last segment is still in the working buffers right
     * after this micro-batch's own forward; another's forward since (a
     * pipeline keeps several in flight) means recomputing it too. */
    if (a_last > 0 && t->slots_hold != m)
        ZT_TRY(zt_train_recompute(t, a_last, n_units, b));
    void *dy = zt_pipe_has_loss(&t->pipe) ? micro_loss(t, b) : zt_pipe_grad_in(&t->pipe);
    double t1 = zt_train_now();
    timers[ZT_TIMER_FWD] += 1e3 * (t1 - t0);

    /* Unsharded gradients accumulate in GRADS and are reduced at the boundary;
     * sharded ones are reduced every micro-step from a one-unit buffer into
     * the partition. */
    bool reduce = pol->reduce_every_micro_step || boundary;
    if (reduce)
        pol->reduce_begin(&t->stage, pol->grads_sharded && m > 0);
    for (int a = a_last; a >= 0; a -= (int)K) {
        int e = a + K < n_units ? (int)(a + K) : n_units;
        if (e < n_units) /* the last segment's activations are in the working buffers */
            ZT_TRY(zt_train_recompute(t, a, e, b));
        for (int u = e - 1; u >= a; u--) {
            const zt_unit_layout *ul = &lay->units[u];
            void *p;
            ZT_TRY(pol->fetch(&t->stage, u, ZT_GATHER_BWD, &p));
            float *g = t->mixed              ? t->gw
                       : pol->grads_sharded ? t->unit_grad
                                            : (float *)t->grads + ul->offset;
            if (reduce) {
                float *into;
                ZT_TRY(pol->unit_grad_buffer(&t->stage, u, &into));
                g = into ? into : g;
            }
            void *dx = u > 0 ? (dy == t->dact[1] ? t->dact[0] : t->dact[1]) : grad_out;
            micro_run_backward(t, u, p, dy, dx, g, !pol->grads_sharded && m > 0, b);
            ZT_TRY(pol->release(&t->stage, u, ZT_GATHER_BWD, boundary));
            if (boundary && u == t->inject_unit)
                micro_inject(t, g);
            /* The buffer's tail past this unit's parameters is padding (a
             * fresh buffer; unsharded fp32 gradients keep their zero tail). */
            if (t->mixed || pol->grads_sharded)
                be->memset_zero(be, g + ul->numel,
                                zt_train_floats(ul->padded_numel - ul->numel));
            ZT_TRY(micro_route_grad(t, u, g, m, reduce));
            dy = dx;
        }
    }
    /* Recomputing the earlier segments overwrote the working buffers. */
    if (a_last > 0)
        t->slots_hold = -1;
    double t2 = zt_train_now();
    timers[ZT_TIMER_BWD_INNER] += 1e3 * (t2 - t1);
    if (reduce)
        ZT_TRY(pol->reduce_finish(&t->stage));
    double t3 = zt_train_now();
    timers[ZT_TIMER_BWD_ALLREDUCE] += 1e3 * (t3 - t2);
    timers[ZT_TIMER_BWD] += 1e3 * (t3 - t1);
    return ZT_OK;
}

static void *micro_output(void *ctx, int slot)
{
    zt_trainer *t = ctx;
    return t->slots[slot].acts[t->model->n_units - 1];
}

zt_pipe_hooks zt_train_hooks(zt_trainer *t)
{
    return (zt_pipe_hooks){micro_forward, micro_backward, micro_output, t};
}
