/*
 * p2p: the pipeline's transfer buffers and the transfers themselves: which
 * buffer, size, dtype and peer each of the schedule's transfers uses
 * (engine/pipe/pipe.h), and the blocking ones of forward-only passes.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/checked.h"
#include "engine/pipe/pipe.h"
#include "engine/pipe/runner.h"

/* One block: planned on the first pass, carved out on the second. */
static zt_status p2p_block(zt_memory *mem, bool reserved, zt_mem_class cls, int64_t n,
                           int64_t m, size_t elem, void *out)
{
    size_t bytes;
    if (!zt_checked_bytes(n, m, elem, &bytes))
        return zt_fail(ZT_ERR_USAGE, "use a smaller micro batch",
                       "a pipeline transfer buffer of %lld x %lld elements is too large",
                       (long long)n, (long long)m);
    if (!reserved) {
        zt_memory_plan(mem, ZT_MEM_DEVICE, cls, bytes);
        return ZT_OK;
    }
    return zt_arena_alloc(zt_memory_arena(mem, ZT_MEM_DEVICE, cls), bytes, (void **)out);
}

zt_status zt_pipe_buffers(zt_pipe *p, zt_memory *mem, bool reserved, int64_t micro,
                          zt_dtype act_dt)
{
    const zt_model *sm = &p->stage_model;
    p->micro = micro;
    p->act_dt = act_dt;
    p->in_numel = sm->units[0].in_numel;
    p->out_numel = sm->units[sm->n_units - 1].out_numel;
    int slots = zt_pipe_slots(p);
    if (p->stage > 0) {
        if (!p->act_in && !(p->act_in = calloc((size_t)slots, sizeof *p->act_in)))
            return zt_fail(ZT_ERR_OOM, "", "cannot allocate the pipeline's slot table");
        for (int k = 0; k < slots; k++)
            ZT_TRY(p2p_block(mem, reserved, ZT_MEM_ACTS, micro, p->in_numel,
                             zt_dtype_size(act_dt), &p->act_in[k]));
        for (int k = 0; k < 2; k++)
            ZT_TRY(p2p_block(mem, reserved, ZT_MEM_COMM, micro, p->in_numel, sizeof(float),
                             &p->grad_out[k]));
    }
    if (p->stage < p->stages - 1)
        ZT_TRY(p2p_block(mem, reserved, ZT_MEM_COMM, micro, p->out_numel, sizeof(float),
                         &p->grad_in));
    return ZT_OK;
}

zt_comm_xfer zt_pipe_xfer_of(const zt_pipe *p, const zt_pipe_hooks *h, zt_pipe_xfer t)
{
    int slot = (int)(t.micro % zt_pipe_slots(p));
    int64_t in = p->micro * p->in_numel, out = p->micro * p->out_numel;
    switch (t.kind) {
    case ZT_PIPE_SEND_ACT:
        return (zt_comm_xfer){h->output(h->ctx, slot), out, p->act_dt, p->stage + 1, false};
    case ZT_PIPE_RECV_ACT:
        return (zt_comm_xfer){p->act_in[slot], in, p->act_dt, p->stage - 1, true};
    case ZT_PIPE_SEND_GRAD:
        return (zt_comm_xfer){p->grad_out[t.micro % 2], in, ZT_F32, p->stage - 1, false};
    case ZT_PIPE_RECV_GRAD:
    case ZT_PIPE_NXFER:
        break;
    }
    return (zt_comm_xfer){p->grad_in, out, ZT_F32, p->stage + 1, true};
}

zt_status zt_pipe_recv_act(zt_pipe *p, int64_t n)
{
    if (p->stage == 0)
        return ZT_OK;
    zt_comm_xfer x = {p->act_in[0], n * p->in_numel, p->act_dt, p->stage - 1, true};
    return p->line.ops->send_recv(&p->line, &x, 1, NULL);
}

zt_status zt_pipe_send_act(zt_pipe *p, const void *out, int64_t n)
{
    if (p->stage == p->stages - 1)
        return ZT_OK;
    zt_comm_xfer x = {(void *)out, n * p->out_numel, p->act_dt, p->stage + 1, false};
    return p->line.ops->send_recv(&p->line, &x, 1, NULL);
}
