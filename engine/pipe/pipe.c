/*
 * pipe: the topology, the groups, this stage's view of the model, the
 * partition printout and the pipeline group's host helpers
 * (engine/pipe/pipe.h).
 */
#include "engine/pipe/pipe.h"

#include <stdlib.h>
#include <string.h>

#include "engine/env.h"
#include "engine/pipe/partition.h"

/* A model of units [lo, hi) of m: copies (their index stays their place in
 * m) and the index of the first parameter. */
static zt_status pipe_stage_model(const zt_model *m, int lo, int hi, zt_model *out)
{
    *out = *m;
    out->units = NULL;
    ZT_TRY(zt_model_alloc_units(out, hi - lo));
    memcpy(out->units, m->units + lo, (size_t)(hi - lo) * sizeof *out->units);
    out->n_params = 0;
    out->param_offset = m->param_offset;
    for (int u = 0; u < lo; u++)
        out->param_offset += m->units[u].param_numel;
    for (int u = lo; u < hi; u++)
        out->n_params += m->units[u].param_numel;
    return ZT_OK;
}

/* The local part of the init: partition, this stage's units, the schedule
 * and its requests. Every rank computes the same partition from the same
 * model, so a bad method fails alike everywhere. */
static zt_status pipe_plan(zt_pipe *p, const zt_model *m, const char *partition)
{
    p->bounds = calloc((size_t)p->stages + 1, sizeof *p->bounds);
    if (!p->bounds)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the pipeline partition");
    ZT_TRY(zt_pipe_partition(m, p->stages, partition, p->bounds));
    ZT_TRY(pipe_stage_model(m, p->bounds[p->stage], p->bounds[p->stage + 1], &p->stage_model));
    ZT_TRY(zt_pipe_program_build(p->schedule, p->stages, p->stage, p->micro_batches,
                                 &p->program));
    p->reqs = calloc((size_t)(p->program.n_posts > 0 ? p->program.n_posts : 1), sizeof *p->reqs);
    if (!p->reqs)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the pipeline's requests");
    for (int i = 0; i < p->program.n_posts; i++)
        zt_comm_req_none(&p->reqs[i]);
    return ZT_OK;
}

zt_status zt_pipe_init(zt_pipe *p, const zt_model *m, const zt_config *cfg, zt_comm *world,
                       const zt_backend *be)
{
    memset(p, 0, sizeof *p);
    const zt_pipeline_config *pc = &cfg->pipeline;
    p->model = m;
    p->be = be;
    p->stages = pc->stages;
    p->micro_batches = cfg->gradient_accumulation_steps;
    p->schedule = !strcmp(pc->schedule, "gpipe") ? ZT_PIPE_GPIPE : ZT_PIPE_1F1B;
    snprintf(p->partition, sizeof p->partition, "%s", pc->partition);
    if (p->stages < 1 || world->size % p->stages != 0)
        return zt_fail(ZT_ERR_INTERNAL, "", "%d pipeline stages over %d ranks", p->stages,
                       world->size);
    p->dp_size = world->size / p->stages;
    p->stage = world->rank / p->dp_size;
    p->dp_rank = world->rank % p->dp_size;
    p->dp = world;
    zt_status st = pipe_plan(p, m, pc->partition);
    if (st == ZT_OK)
        st = zt_env_fail_at("pipeline");
    if (p->stages == 1)
        return st;
    /* The plan is this rank's (its allocations may fail here alone); the
     * splits below are collective: every rank learns of a failure first. */
    ZT_TRY(zt_comm_agree(world->side, st, "planning the pipeline"));
    /* Keys order each group as the topology does: dp rank, stage. */
    ZT_TRY(world->ops->split(world, p->stage, p->dp_rank, &p->dp_own));
    p->dp = &p->dp_own;
    return world->ops->split(world, p->dp_rank, p->stage, &p->line);
}

void zt_pipe_free(zt_pipe *p)
{
    zt_comm_free(&p->line);
    zt_comm_free(&p->dp_own);
    zt_model_free(&p->stage_model);
    zt_pipe_program_free(&p->program);
    free(p->bounds);
    free(p->reqs);
    free(p->act_in);
    memset(p, 0, sizeof *p);
}

int zt_pipe_unit_stage(const zt_pipe *p, int u)
{
    int s = 0;
    while (s + 1 < p->stages && p->bounds[s + 1] <= u)
        s++;
    return s;
}

void zt_pipe_print(const zt_pipe *p, FILE *f)
{
    const zt_model *m = p->model;
    fprintf(f, "zerotrain: pipeline: %d stage(s) x %d data-parallel rank(s), partition_method "
               "%s, schedule %s, %lld micro-batches per step\n",
            p->stages, p->dp_size, p->partition, zt_pipe_schedule_name(p->schedule),
            (long long)p->micro_batches);
    for (int s = 0; s < p->stages; s++) {
        int64_t params = 0;
        for (int u = p->bounds[s]; u < p->bounds[s + 1]; u++)
            params += m->units[u].param_numel;
        fprintf(f, "stage=%d layers=%d params=%lld\n", s, p->bounds[s + 1] - p->bounds[s],
                (long long)params);
        for (int u = p->bounds[s]; u < p->bounds[s + 1]; u++)
            fprintf(f, "    %2d: %s (%s)\n", u, m->units[u].name, m->units[u].ops->type);
    }
    fprintf(f, "  loss: cross_entropy\n");
    fflush(f);
}

zt_status zt_pipe_sum_f64(const zt_pipe *p, double *v, int n)
{
    if (p->stages == 1)
        return ZT_OK;
    /* Under the pipeline group's watchdog, like the trainer's own sums. */
    return zt_comm_side_all_reduce(&p->line, p->line.side, v, n, MPI_DOUBLE, MPI_SUM,
                                   "the sums over the pipeline stages");
}

zt_status zt_pipe_bcast_last(zt_pipe *p, void *buf, int bytes)
{
    if (p->stages == 1)
        return ZT_OK;
    MPI_Request r;
    return zt_comm_mpi_wait(p->line.side,
                            MPI_Ibcast(buf, bytes, MPI_BYTE, p->stages - 1, p->line.side, &r), &r,
                            "broadcast from the last pipeline stage", bytes);
}

void zt_pipe_traffic(const zt_pipe *p, uint64_t *sent, uint64_t *received)
{
    *sent = *received = 0;
    uint64_t act_in = (uint64_t)(p->micro * p->in_numel) * zt_dtype_size(p->act_dt);
    uint64_t act_out = (uint64_t)(p->micro * p->out_numel) * zt_dtype_size(p->act_dt);
    uint64_t grad_in = (uint64_t)(p->micro * p->out_numel) * sizeof(float);
    uint64_t grad_out = (uint64_t)(p->micro * p->in_numel) * sizeof(float);
    for (int i = 0; i < p->program.n_ops; i++) {
        const zt_pipe_op *op = &p->program.ops[i];
        for (int x = 0; op->kind == ZT_PIPE_OP_POST && x < op->n_xfers; x++)
            switch (op->xfers[x].kind) {
            case ZT_PIPE_SEND_ACT: *sent += act_out; break;
            case ZT_PIPE_RECV_ACT: *received += act_in; break;
            case ZT_PIPE_SEND_GRAD: *sent += grad_out; break;
            case ZT_PIPE_RECV_GRAD: *received += grad_in; break;
            case ZT_PIPE_NXFER: break;
            }
    }
}
