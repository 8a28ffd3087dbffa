/*
 * runner: one optimizer step's program on this stage (engine/pipe/runner.h).
 */
#include "engine/pipe/runner.h"

#include <time.h>

static double runner_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits for post k (a finished or never-posted one returns at once). */
static zt_status runner_wait(zt_pipe *p, int k)
{
    if (k < 0)
        return ZT_OK;
    return p->line.ops->wait(&p->line, &p->reqs[k]);
}

static zt_status runner_post(zt_pipe *p, const zt_pipe_hooks *h, const zt_pipe_op *op, int k)
{
    zt_comm_xfer x[2];
    for (int i = 0; i < op->n_xfers; i++)
        x[i] = zt_pipe_xfer_of(p, h, op->xfers[i]);
    return p->line.ops->send_recv(&p->line, x, op->n_xfers, &p->reqs[k]);
}

static void runner_add(zt_pipe_times *t, const zt_pipe_times *step)
{
    t->fwd_s += step->fwd_s;
    t->bwd_s += step->bwd_s;
    t->idle_s += step->idle_s;
    t->step_s += step->step_s;
    t->steps++;
}

zt_status zt_pipe_run_step(zt_pipe *p, const zt_pipe_hooks *h)
{
    const zt_pipe_program *prog = &p->program;
    zt_pipe_times step = {0};
    double t0 = runner_now();
    int posts = 0, live = 0;
    for (int i = 0; i < prog->n_ops; i++) {
        const zt_pipe_op *op = &prog->ops[i];
        if (op->kind == ZT_PIPE_OP_POST) {
            ZT_TRY(runner_post(p, h, op, posts++));
            continue;
        }
        double ta = runner_now();
        ZT_TRY(runner_wait(p, op->waits[0]));
        ZT_TRY(runner_wait(p, op->waits[1]));
        double tb = runner_now();
        int slot = (int)(op->micro % prog->slots);
        if (op->kind == ZT_PIPE_OP_FORWARD) {
            if (++live > p->in_flight_max)
                p->in_flight_max = live;
            ZT_TRY(h->forward(h->ctx, op->micro, slot));
        } else {
            live--;
            ZT_TRY(h->backward(h->ctx, op->micro, slot,
                               p->stage > 0 ? p->grad_out[op->micro % 2] : NULL));
        }
        /* The device's time, not the launches': the transfers that follow
         * need the results anyway. */
        p->be->sync(p->be);
        double tc = runner_now();
        step.idle_s += tb - ta;
        *(op->kind == ZT_PIPE_OP_FORWARD ? &step.fwd_s : &step.bwd_s) += tc - tb;
    }
    double ta = runner_now();
    for (int k = 0; k < posts; k++)
        ZT_TRY(runner_wait(p, k));
    double t1 = runner_now();
    step.idle_s += t1 - ta;
    step.step_s = t1 - t0;
    runner_add(&p->all, &step);
    if (p->all.steps > 2)
        runner_add(&p->timed, &step);
    return ZT_OK;
}
