/*
 * recompute: activation checkpointing (interval K > 0). Units form segments
 * [sK, sK + K); forward keeps only each segment's input and runs the units
 * through K reusable slots of output and saved tensors; backward re-runs a
 * segment's forward from its kept input (the same dropout keys, so the same
 * values) before the segment's backward (engine/train/trainer.h).
 */
#include "engine/train/trainer_impl.h"

bool zt_train_kept_input(const zt_trainer *t, int u)
{
    return t->ckpt_interval > 0 && u > 0 && u % t->ckpt_interval == 0;
}

/* Unit outputs and saved tensors. Without checkpointing every slot has a
 * buffer per unit. With checkpointing (interval K < units) the K working
 * buffers (buffer j sized for the largest unit at position j of a segment)
 * serve every slot, and each slot keeps its segment inputs and, on a stage
 * that sends its output to the next, its last unit's output (the transfer
 * reads it while other micro-batches run). */
zt_status zt_train_activation_buffers(zt_trainer *t, zt_memory *mem, bool reserved)
{
    const zt_model *m = t->model;
    int64_t mb = t->cfg->micro_batch_size;
    size_t c = zt_dtype_size(t->cdt);
    int n = m->n_units, last = n - 1;
    int64_t K = t->ckpt_interval;
    bool ckpt = K > 0 && K < n;
    int work = ckpt ? (int)K : n;
    bool own_out = ckpt && zt_pipe_active(&t->pipe) && !zt_pipe_has_loss(&t->pipe);
    for (int k = 0; k < (ckpt ? 1 : t->n_slots); k++) {
        zt_train_slot *s = &t->slots[k];
        for (int j = 0; j < work; j++) {
            int64_t out = 0, sv = 0;
            for (int u = j; u < n; u += work) {
                out = m->units[u].out_numel > out ? m->units[u].out_numel : out;
                sv = m->units[u].saved_numel > sv ? m->units[u].saved_numel : sv;
            }
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                                zt_train_plan_bytes(t, mb, out, c), &s->acts[j]));
            if (sv > 0)
                ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                                    zt_train_plan_bytes(t, mb, sv, c), &s->saved[j]));
        }
    }
    int64_t max_kept = 0;
    zt_mem_loc loc = t->ckpt_host ? ZT_MEM_HOST : ZT_MEM_DEVICE;
    for (int k = 0; k < t->n_slots; k++) {
        zt_train_slot *s = &t->slots[k];
        if (own_out)
            ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                                zt_train_plan_bytes(t, mb, m->units[last].out_numel, c),
                                &s->out));
        for (int u = 1; u < n; u++) {
            if (!zt_train_kept_input(t, u))
                continue;
            int64_t kept = m->units[u - 1].out_numel;
            max_kept = kept > max_kept ? kept : max_kept;
            ZT_TRY(zt_train_buf(mem, reserved, loc, ZT_MEM_ACTS, zt_train_plan_bytes(t, mb, kept, c),
                                &s->ckpt[u]));
        }
    }
    if (t->ckpt_host && max_kept > 0)
        ZT_TRY(zt_train_buf(mem, reserved, ZT_MEM_DEVICE, ZT_MEM_ACTS,
                            zt_train_plan_bytes(t, mb, max_kept, c), &t->ckpt_in));
    for (int k = 0; reserved && k < t->n_slots; k++) {
        zt_train_slot *s = &t->slots[k];
        for (int u = ckpt && k > 0 ? 0 : work; u < n; u++) {
            s->acts[u] = t->slots[0].acts[u % work];
            s->saved[u] = t->slots[0].saved[u % work];
        }
        if (own_out)
            s->acts[last] = s->out;
    }
    return ZT_OK;
}

const void *zt_train_unit_input(const zt_trainer *t, int u)
{
    if (u == 0)
        return t->in_act ? t->in_act : t->x;
    if (zt_train_kept_input(t, u))
        return t->ckpt_host ? t->ckpt_in : t->ckpt[u];
    return t->acts[u - 1];
}

void zt_train_keep(zt_trainer *t, int u, int64_t n)
{
    const zt_backend *be = t->be;
    size_t bytes = zt_train_bytes(n * t->model->units[u].out_numel, t->cdt);
    if (t->ckpt_host) {
        be->copy_d2h(be, t->ckpt[u + 1], t->acts[u], bytes);
        be->copy_d2d(be, t->ckpt_in, t->acts[u], bytes);
    } else {
        be->copy_d2d(be, t->ckpt[u + 1], t->acts[u], bytes);
    }
}

zt_status zt_train_recompute(zt_trainer *t, int a, int e, const zt_batch *b)
{
    const zt_stage_policy *pol = t->policy;
    if (t->ckpt_host && a > 0)
        t->be->copy_h2d(t->be, t->ckpt_in, t->ckpt[a],
                        zt_train_bytes(b->n * t->model->units[a - 1].out_numel, t->cdt));
    t->recomputing = true;
    for (int u = a; u < e; u++) {
        void *p;
        zt_status st = pol->fetch(&t->stage, u, ZT_GATHER_RECOMPUTE, &p);
        if (st == ZT_OK) {
            zt_train_run_forward(t, u, p, b);
            st = pol->release(&t->stage, u, ZT_GATHER_RECOMPUTE, false);
        }
        if (st != ZT_OK) {
            t->recomputing = false;
            return st;
        }
    }
    t->recomputing = false;
    return ZT_OK;
}
