#include "zero.h"

#include <stdlib.h>
#include <string.h>

zt_status zt_layout_init(zt_layout *l, const zt_model *m, int world_size, int rank)
{
    memset(l, 0, sizeof *l);
    l->world_size = world_size;
    l->rank = rank;
    l->n_units = m->n_units;
    l->units = calloc((size_t)m->n_units, sizeof *l->units);
    if (!l->units)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the layout of %d units", m->n_units);
    int64_t align = (int64_t)world_size * ZT_ZERO_ALIGN;
    int64_t offset = 0, global = 0;
    for (int u = 0; u < m->n_units; u++) {
        zt_unit_layout *ul = &l->units[u];
        ul->offset = offset;
        ul->numel = m->units[u].param_numel;
        ul->padded_numel = (ul->numel + align - 1) / align * align;
        ul->shard_numel = ul->padded_numel / world_size;
        ul->global_index = global;
        offset += ul->padded_numel;
        global += ul->numel;
    }
    l->numel = global;
    l->padded_numel = offset;
    l->partition_numel = offset / world_size;
    return ZT_OK;
}

void zt_layout_free(zt_layout *l)
{
    free(l->units);
    l->units = NULL;
}

zt_status zt_zero_reducer_init(zt_zero_reducer *r, const zt_config *cfg, const zt_backend *be,
                               zt_comm *comm, const zt_layout *layout, float *grads)
{
    memset(r, 0, sizeof *r);
    r->be = be;
    r->comm = comm;
    r->layout = layout;
    r->grads = grads;
    /* A zero bucket size would never make progress: one element is the floor. */
    r->bucket_numel = cfg->zero.reduce_bucket_size > 0 ? cfg->zero.reduce_bucket_size : 1;
    r->overlap = cfg->zero.overlap_comm;
    float ws = (float)comm->size;
    float f = (float)cfg->gradient_predivide_factor;
    if (cfg->prescale_gradients) {
        r->pre_scale = 1.0f / ws;
        r->post_scale = 1.0f;
    } else {
        r->pre_scale = 1.0f / f;
        r->post_scale = f / ws;
    }
    r->cap_reqs = (int)((layout->padded_numel + r->bucket_numel - 1) / r->bucket_numel);
    r->reqs = calloc((size_t)r->cap_reqs, sizeof *r->reqs);
    if (!r->reqs)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %d bucket requests", r->cap_reqs);
    return ZT_OK;
}

void zt_zero_reducer_free(zt_zero_reducer *r)
{
    free(r->reqs);
    r->reqs = NULL;
}

void zt_zero_reducer_begin(zt_zero_reducer *r)
{
    r->issued_lo = r->done_lo = r->layout->padded_numel;
    r->n_reqs = 0;
}

/* Issues [lo, hi) as one bucket. */
static zt_status reducer_issue(zt_zero_reducer *r, int64_t lo, int64_t hi)
{
    float *b = r->grads + lo;
    if (r->pre_scale != 1.0f)
        r->be->scale(r->be, b, r->pre_scale, hi - lo);
    zt_comm_req *req = r->overlap ? &r->reqs[r->n_reqs++] : NULL;
    ZT_TRY(r->comm->ops->all_reduce(r->comm, b, hi - lo, ZT_RED_SUM, req));
    r->issued_lo = lo;
    return ZT_OK;
}

zt_status zt_zero_reducer_unit_done(zt_zero_reducer *r, int u)
{
    r->done_lo = r->layout->units[u].offset;
    if (!r->overlap)
        return ZT_OK;
    while (r->issued_lo - r->done_lo >= r->bucket_numel)
        ZT_TRY(reducer_issue(r, r->issued_lo - r->bucket_numel, r->issued_lo));
    /* MPI moves non-blocking collectives forward only inside MPI calls. */
    for (int i = 0; i < r->n_reqs; i++)
        r->comm->ops->test(r->comm, &r->reqs[i]);
    return ZT_OK;
}

zt_status zt_zero_reducer_finish(zt_zero_reducer *r)
{
    while (r->issued_lo > 0) {
        int64_t lo = r->issued_lo > r->bucket_numel ? r->issued_lo - r->bucket_numel : 0;
        ZT_TRY(reducer_issue(r, lo, r->issued_lo));
    }
    for (int i = 0; i < r->n_reqs; i++)
        ZT_TRY(r->comm->ops->wait(r->comm, &r->reqs[i]));
    r->n_reqs = 0;
    if (r->post_scale != 1.0f)
        r->be->scale(r->be, r->grads, r->post_scale, r->layout->padded_numel);
    return ZT_OK;
}
