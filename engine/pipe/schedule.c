/*
 * schedule: the 1F1B and GPipe programs of a pipeline stage
 * (engine/pipe/schedule.h).
 */
#include "engine/pipe/schedule.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *zt_pipe_schedule_name(zt_pipe_schedule_kind k)
{
    return k == ZT_PIPE_GPIPE ? "gpipe" : "1f1b";
}

typedef struct {
    zt_pipe_program *p;
    int cap;
} builder;

static void emit(builder *b, zt_pipe_op op)
{
    op.waits[0] = op.waits[1] = -1;
    b->p->ops[b->p->n_ops++] = op;
    if (op.kind == ZT_PIPE_OP_POST)
        b->p->n_posts++;
}

static void compute(builder *b, zt_pipe_op_kind kind, int64_t m)
{
    emit(b, (zt_pipe_op){.kind = kind, .micro = m});
}

static void post1(builder *b, zt_pipe_xfer_kind k, int64_t m)
{
    emit(b, (zt_pipe_op){.kind = ZT_PIPE_OP_POST, .n_xfers = 1, .xfers = {{k, m}}});
}

static void post2(builder *b, zt_pipe_xfer_kind k0, int64_t m0, zt_pipe_xfer_kind k1, int64_t m1)
{
    emit(b, (zt_pipe_op){.kind = ZT_PIPE_OP_POST, .n_xfers = 2, .xfers = {{k0, m0}, {k1, m1}}});
}

/* Megatron-LM's forward_backward_pipelining_without_interleaving, with its
 * blocking calls as posts; the next forward's input is received right after
 * the previous forward's output is sent. */
static void build_1f1b(builder *b, int stages, int stage, int64_t M)
{
    bool first = stage == 0, last = stage == stages - 1;
    int64_t w = stages - stage - 1 < M ? stages - stage - 1 : M, r = M - w;
    if (!first)
        post1(b, ZT_PIPE_RECV_ACT, 0);
    for (int64_t i = 0; i < w; i++) {
        compute(b, ZT_PIPE_OP_FORWARD, i);
        post1(b, ZT_PIPE_SEND_ACT, i);
        if (!first && i + 1 < M)
            post1(b, ZT_PIPE_RECV_ACT, i + 1);
    }
    for (int64_t j = 0; j < r; j++) {
        int64_t m = w + j;
        compute(b, ZT_PIPE_OP_FORWARD, m);
        if (!last)
            post2(b, ZT_PIPE_SEND_ACT, m, ZT_PIPE_RECV_GRAD, j);
        compute(b, ZT_PIPE_OP_BACKWARD, j);
        if (!first && m + 1 < M)
            post2(b, ZT_PIPE_SEND_GRAD, j, ZT_PIPE_RECV_ACT, m + 1);
        else if (!first)
            post1(b, ZT_PIPE_SEND_GRAD, j);
    }
    for (int64_t k = r; k < M; k++) {
        if (!last)
            post1(b, ZT_PIPE_RECV_GRAD, k);
        compute(b, ZT_PIPE_OP_BACKWARD, k);
        if (!first)
            post1(b, ZT_PIPE_SEND_GRAD, k);
    }
}

static void build_gpipe(builder *b, int stages, int stage, int64_t M)
{
    bool first = stage == 0, last = stage == stages - 1;
    for (int64_t m = 0; m < M; m++) {
        if (!first)
            post1(b, ZT_PIPE_RECV_ACT, m);
        compute(b, ZT_PIPE_OP_FORWARD, m);
        if (!last)
            post1(b, ZT_PIPE_SEND_ACT, m);
    }
    for (int64_t m = 0; m < M; m++) {
        if (!last)
            post1(b, ZT_PIPE_RECV_GRAD, m);
        compute(b, ZT_PIPE_OP_BACKWARD, m);
        if (!first)
            post1(b, ZT_PIPE_SEND_GRAD, m);
    }
}

/* The post (numbered from 0) carrying transfer (k, m), or -1. */
static int find_post(const zt_pipe_program *p, zt_pipe_xfer_kind k, int64_t m)
{
    int post = 0;
    for (int i = 0; i < p->n_ops; i++) {
        const zt_pipe_op *op = &p->ops[i];
        if (op->kind != ZT_PIPE_OP_POST)
            continue;
        for (int x = 0; x < op->n_xfers; x++)
            if (op->xfers[x].kind == k && op->xfers[x].micro == m)
                return post;
        post++;
    }
    return -1;
}

int zt_pipe_program_post_op(const zt_pipe_program *p, int post)
{
    for (int i = 0, n = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == ZT_PIPE_OP_POST && n++ == post)
            return i;
    return -1;
}

/* The slots (most micro-batches in flight) and every compute's waits; each
 * wait must name a post issued before the compute. */
static zt_status finish(zt_pipe_program *p, int stages, int stage)
{
    bool first = stage == 0, last = stage == stages - 1;
    int live = 0;
    p->slots = 0;
    for (int i = 0; i < p->n_ops; i++) {
        zt_pipe_op *op = &p->ops[i];
        if (op->kind == ZT_PIPE_OP_FORWARD && ++live > p->slots)
            p->slots = live;
        if (op->kind == ZT_PIPE_OP_BACKWARD)
            live--;
    }
    for (int i = 0, posts = 0; i < p->n_ops; i++) {
        zt_pipe_op *op = &p->ops[i];
        int64_t m = op->micro;
        if (op->kind == ZT_PIPE_OP_POST) {
            posts++;
            continue;
        }
        if (op->kind == ZT_PIPE_OP_FORWARD) {
            op->waits[0] = first ? -1 : find_post(p, ZT_PIPE_RECV_ACT, m);
            op->waits[1] = last || m < p->slots ? -1 : find_post(p, ZT_PIPE_SEND_ACT, m - p->slots);
        } else {
            op->waits[0] = last ? -1 : find_post(p, ZT_PIPE_RECV_GRAD, m);
            op->waits[1] = first || m < 2 ? -1 : find_post(p, ZT_PIPE_SEND_GRAD, m - 2);
        }
        bool needed[2] = {op->kind == ZT_PIPE_OP_FORWARD ? !first : !last, false};
        for (int k = 0; k < 2; k++)
            if ((needed[k] && op->waits[k] < 0) || op->waits[k] >= posts)
                return zt_fail(ZT_ERR_INTERNAL, "",
                               "pipeline schedule: stage %d's %s of micro-batch %lld waits for "
                               "a transfer not posted before it",
                               stage, op->kind == ZT_PIPE_OP_FORWARD ? "forward" : "backward",
                               (long long)m);
    }
    return ZT_OK;
}

zt_status zt_pipe_program_build(zt_pipe_schedule_kind kind, int stages, int stage,
                                int64_t micro_batches, zt_pipe_program *out)
{
    memset(out, 0, sizeof *out);
    if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1 ||
        micro_batches > (int64_t)1 << 24)
        return zt_fail(ZT_ERR_INTERNAL, "", "pipeline schedule for stage %d of %d, %lld micro-batches",
                       stage, stages, (long long)micro_batches);
    /* Per micro-batch: a forward, a backward and at most four posts. */
    builder b = {.p = out, .cap = (int)(6 * micro_batches + 2)};
    out->ops = calloc((size_t)b.cap, sizeof *out->ops);
    if (!out->ops)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the pipeline schedule");
    if (kind == ZT_PIPE_GPIPE)
        build_gpipe(&b, stages, stage, micro_batches);
    else
        build_1f1b(&b, stages, stage, micro_batches);
    zt_status st = finish(out, stages, stage);
    if (st != ZT_OK)
        zt_pipe_program_free(out);
    return st;
}

void zt_pipe_program_free(zt_pipe_program *p)
{
    free(p->ops);
    memset(p, 0, sizeof *p);
}
