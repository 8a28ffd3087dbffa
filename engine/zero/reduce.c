/*
 * reduce: the stage-0 all-reduce and the stages 1-3 bucketed reduce-scatter
 * (engine/zero/reduce.h).
 */
#include "engine/zero/reduce.h"

#include <stdlib.h>
#include <string.h>

void zt_zero_scales(const zt_config *cfg, int world_size, float *pre_scale, float *post_scale)
{
    float ws = (float)world_size;
    float f = (float)cfg->gradient_predivide_factor;
    if (cfg->prescale_gradients) {
        *pre_scale = 1.0f / ws;
        *post_scale = 1.0f;
    } else {
        *pre_scale = 1.0f / f;
        *post_scale = f / ws;
    }
}

zt_status zt_zero_reducer_init(zt_zero_reducer *r, const zt_config *cfg, const zt_backend *be,
                               zt_comm *comm, const zt_layout *layout, void *grads, zt_dtype dt)
{
    memset(r, 0, sizeof *r);
    r->be = be;
    r->comm = comm;
    r->layout = layout;
    r->grads = grads;
    r->dt = dt;
    /* A zero bucket size would never make progress: one element is the floor. */
    r->bucket_numel = cfg->zero.reduce_bucket_size > 0 ? cfg->zero.reduce_bucket_size : 1;
    r->overlap = cfg->zero.overlap_comm;
    zt_zero_scales(cfg, comm->size, &r->pre_scale, &r->post_scale);
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
    void *b = zt_zero_at(r->grads, lo, r->dt);
    if (r->pre_scale != 1.0f)
        r->be->convert(r->be, b, r->dt, b, r->dt, hi - lo, r->pre_scale, false);
    zt_comm_req *req = r->overlap ? &r->reqs[r->n_reqs++] : NULL;
    ZT_TRY(r->comm->ops->all_reduce(r->comm, b, hi - lo, r->dt, ZT_RED_SUM, req));
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
        r->be->convert(r->be, r->grads, r->dt, r->grads, r->dt, r->layout->padded_numel,
                       r->post_scale, false);
    return ZT_OK;
}

/* ---- Stages 1-3: bucketed reduce-scatter into the partition ---- */

int64_t zt_zero_rs_width(const zt_config *cfg, const zt_layout *layout)
{
    return zt_layout_bucket_width(layout, cfg->zero.reduce_bucket_size);
}

void zt_zero_rs_buffers(const zt_config *cfg, const zt_layout *layout, int *count,
                        int64_t *send_numel, int64_t *recv_numel)
{
    int64_t w = zt_layout_bucket_width(layout, cfg->zero.reduce_bucket_size);
    *count = cfg->zero.overlap_comm ? 2 : 1;
    *send_numel = w * layout->world_size;
    *recv_numel = cfg->zero.reduce_scatter ? w : 0;
}

zt_status zt_zero_rs_init(zt_zero_rs *r, const zt_config *cfg, const zt_backend *be,
                          zt_comm *comm, zt_comm *replica, const zt_layout *layout,
                          const zt_zero_rs_target *target, void *const *send,
                          void *const *recv)
{
    memset(r, 0, sizeof *r);
    r->be = be;
    r->comm = comm;
    r->replica = replica;
    r->layout = layout;
    r->dest = target->dest;
    r->dest_dt = target->dest_dt;
    r->dest_host = target->dest_host;
    r->host_stage = target->host_stage;
    r->source = target->source;
    r->comm_dt = target->comm_dt;
    if (target->qgz && target->qgz->active) {
        r->qgz = target->qgz;
        r->qgz_work[0] = target->qgz_work[0];
        r->qgz_work[1] = target->qgz_work[1];
    }
    r->width = zt_layout_bucket_width(layout, cfg->zero.reduce_bucket_size);
    r->stage_numel = target->stage_numel > 0 && target->stage_numel < r->width
                         ? target->stage_numel
                         : r->width;
    r->overlap = cfg->zero.overlap_comm;
    r->use_reduce_scatter = cfg->zero.reduce_scatter;
    r->n_buckets = r->overlap ? 2 : 1;
    r->open = -1;
    zt_zero_scales(cfg, comm->size * (replica ? replica->size : 1), &r->pre_scale,
                   &r->post_scale);
    /* Packing is a copy only when nothing is converted or pre-scaled on the
     * way; a gradient that may be reused when rs_unit returns must not be
     * read by a collective still in flight. */
    bool plain = !r->qgz && r->use_reduce_scatter && r->pre_scale == 1.0f &&
                 target->unit_grad_dt == r->comm_dt;
    r->direct = plain && (target->unit_grads_persist || !r->overlap);
    /* Overlapped fresh gradients would be overwritten while in flight: the
     * unit's backward writes them into the bucket instead (rs_unit_buffer). */
    r->in_bucket = plain && !target->unit_grads_persist && r->overlap;
    r->prepared = -1;
    for (int i = 0; i < r->n_buckets; i++) {
        r->buckets[i].send = send[i];
        r->buckets[i].recv = r->use_reduce_scatter ? recv[i] : NULL;
        r->buckets[i].segs = calloc((size_t)layout->n_units, sizeof *r->buckets[i].segs);
        if (!r->buckets[i].segs)
            return zt_fail(ZT_ERR_OOM, "", "cannot allocate bucket tables");
    }
    return ZT_OK;
}

void zt_zero_rs_free(zt_zero_rs *r)
{
    for (int i = 0; i < 2; i++) {
        free(r->buckets[i].segs);
        r->buckets[i].segs = NULL;
    }
}

void zt_zero_rs_begin(zt_zero_rs *r, bool accumulate)
{
    r->accumulate = accumulate;
    r->open = -1;
    r->prepared = -1;
}

/* The comm a bucket's request is pending on. */
static zt_comm *rs_comm(const zt_zero_rs *r)
{
    return r->qgz ? zt_qgz_pending_comm(r->qgz) : r->comm;
}

/* A host destination: the bucket's reduced columns (src, on the device)
 * come to the host in pieces of stage_numel, each converted into the slices
 * it covers: the same element-wise arithmetic as one piece, in a staging
 * buffer that does not grow with the bucket. */
static zt_status rs_deliver_host(zt_zero_rs *r, zt_zero_bucket *b, const void *src)
{
    const zt_backend *be = r->be;
    zt_dtype kdt = r->comm_dt;
    int64_t width = b->b1 - b->b0;
    for (int64_t c0 = 0; c0 < width; c0 += r->stage_numel) {
        int64_t c1 = c0 + r->stage_numel < width ? c0 + r->stage_numel : width;
        be->copy_d2h(be, r->host_stage, zt_zero_at(src, c0, kdt),
                     (size_t)(c1 - c0) * zt_dtype_size(kdt));
        for (int i = 0; i < b->n_segs; i++) {
            const zt_zero_seg *s = &b->segs[i];
            const zt_unit_layout *ul = &r->layout->units[s->unit];
            /* The segment's columns in bucket coordinates, cut to the piece. */
            int64_t a = ul->part_offset + s->lo - b->b0, e = a + (s->hi - s->lo);
            a = a > c0 ? a : c0;
            e = e < c1 ? e : c1;
            if (a >= e)
                continue;
            void *slice = r->dest ? r->dest[s->unit] : NULL;
            if (r->source.get)
                ZT_TRY(r->source.get(r->source.ctx, s->unit, e - a, r->accumulate, &slice));
            int64_t col = a + b->b0 - ul->part_offset; /* in the unit's shard */
            zt_convert_host(zt_zero_at(slice, col, r->dest_dt), r->dest_dt,
                            zt_zero_at(r->host_stage, a - c0, kdt), kdt, e - a, r->post_scale,
                            r->accumulate);
        }
    }
    b->pending = false;
    return ZT_OK;
}

/* Waits for a bucket and moves this rank's reduced columns to their slices. */
static zt_status rs_deliver(zt_zero_rs *r, zt_zero_bucket *b)
{
    const zt_backend *be = r->be;
    zt_dtype kdt = r->comm_dt;
    int64_t width = b->b1 - b->b0;
    if (r->qgz)
        ZT_TRY(zt_qgz_finish(r->qgz, be, r->qgz_work[b - r->buckets], b->recv, width, kdt,
                             &b->req));
    else
        ZT_TRY(r->comm->ops->wait(r->comm, &b->req));
    void *src = b->recv ? b->recv : zt_zero_at(b->send, (int64_t)r->layout->rank * width, kdt);
    if (r->replica)
        ZT_TRY(r->replica->ops->all_reduce(r->replica, src, width, kdt, ZT_RED_SUM, NULL));
    if (r->dest_host)
        return rs_deliver_host(r, b, src);
    for (int i = 0; i < b->n_segs; i++) {
        const zt_zero_seg *s = &b->segs[i];
        const zt_unit_layout *ul = &r->layout->units[s->unit];
        const void *from = zt_zero_at(src, ul->part_offset + s->lo - b->b0, kdt);
        void *to = zt_zero_at(r->dest[s->unit], s->lo, r->dest_dt);
        be->convert(be, to, r->dest_dt, from, kdt, s->hi - s->lo, r->post_scale, r->accumulate);
    }
    b->pending = false;
    return ZT_OK;
}

/* A unit whose shard is at least this many elements (and fits one bucket) is
 * reduce-scattered alone, with no pack: from its own gradient when r->direct,
 * from the bucket its backward wrote into when r->in_bucket. The pack would
 * copy the whole gradient once more (about 5% of a stage-1 step for the
 * benchmark MLP at np 2), while smaller units share buckets, where one call's
 * latency would outweigh the copy. */
#define RS_DIRECT_MIN_NUMEL ((int64_t)1 << 15)

static bool rs_unit_direct(const zt_zero_rs *r, const zt_unit_layout *ul)
{
    return (r->direct || r->in_bucket) && ul->shard_numel >= RS_DIRECT_MIN_NUMEL &&
           ul->shard_numel <= r->width;
}

/* Opens the next bucket with its top at partition coordinate `top`; it reaches
 * down one width, to the partition's start or to the top of the next unit
 * below that goes direct, so its extent is known before any unit is packed
 * into it. */
static zt_status rs_open(zt_zero_rs *r, int64_t top)
{
    zt_zero_bucket *b = &r->buckets[r->next];
    if (b->pending)
        ZT_TRY(rs_deliver(r, b));
    b->b1 = top;
    b->b0 = top > r->width ? top - r->width : 0;
    for (int u = r->layout->n_units - 1; u >= 0; u--) {
        const zt_unit_layout *ul = &r->layout->units[u];
        int64_t end = ul->part_offset + ul->shard_numel;
        if (end <= top && rs_unit_direct(r, ul)) {
            if (end > b->b0)
                b->b0 = end;
            break;
        }
    }
    b->n_segs = 0;
    r->open = r->next;
    r->next = (r->next + 1) % r->n_buckets;
    return ZT_OK;
}

/* send: the bucket's packed buffer, or a direct unit's own gradient. */
static zt_status rs_issue(zt_zero_rs *r, const void *send)
{
    zt_zero_bucket *b = &r->buckets[r->open];
    int64_t width = b->b1 - b->b0, total = width * r->layout->world_size;
    zt_comm_req *req = r->overlap ? &b->req : NULL;
    zt_comm_req_none(&b->req);
    if (r->qgz)
        ZT_TRY(zt_qgz_start(r->qgz, r->be, r->qgz_work[b - r->buckets], b->send, width,
                            r->comm_dt, req));
    else if (r->use_reduce_scatter)
        ZT_TRY(r->comm->ops->reduce_scatter(r->comm, send, b->recv, width, r->comm_dt,
                                            ZT_RED_SUM, req));
    else
        ZT_TRY(r->comm->ops->all_reduce(r->comm, b->send, total, r->comm_dt, ZT_RED_SUM, req));
    b->pending = true;
    r->open = -1;
    return r->overlap ? ZT_OK : rs_deliver(r, b);
}

/* Opens the bucket that unit u, going direct, is reduce-scattered from: the
 * unit alone, its shards rank-major as they lie in the unit's gradient. */
static zt_status rs_open_unit(zt_zero_rs *r, int u)
{
    const zt_unit_layout *ul = &r->layout->units[u];
    if (r->open >= 0)
        return zt_fail(ZT_ERR_INTERNAL, "", "unit %d goes direct but a bucket reaches into it",
                       u);
    ZT_TRY(rs_open(r, ul->part_offset + ul->shard_numel));
    zt_zero_bucket *b = &r->buckets[r->open];
    b->b0 = ul->part_offset;
    b->segs[b->n_segs++] = (zt_zero_seg){u, 0, ul->shard_numel};
    return ZT_OK;
}

zt_status zt_zero_rs_unit_buffer(zt_zero_rs *r, int u, void **g)
{
    *g = NULL;
    if (!r->in_bucket || !rs_unit_direct(r, &r->layout->units[u]))
        return ZT_OK;
    ZT_TRY(rs_open_unit(r, u));
    r->prepared = u;
    *g = r->buckets[r->open].send;
    return ZT_OK;
}

zt_status zt_zero_rs_unit(zt_zero_rs *r, int u, const void *g, zt_dtype g_dt)
{
    const zt_backend *be = r->be;
    const zt_unit_layout *ul = &r->layout->units[u];
    int world = r->layout->world_size;
    int64_t hi = ul->shard_numel;
    if (rs_unit_direct(r, ul) && g_dt == r->comm_dt) {
        if (r->in_bucket && (r->prepared != u || g != r->buckets[r->open].send))
            return zt_fail(ZT_ERR_INTERNAL, "",
                           "unit %d's gradient was not written into its bucket", u);
        if (!r->in_bucket)
            ZT_TRY(rs_open_unit(r, u));
        r->prepared = -1;
        ZT_TRY(rs_issue(r, g));
        hi = 0;
    }
    while (hi > 0) {
        if (r->open < 0)
            ZT_TRY(rs_open(r, ul->part_offset + hi));
        zt_zero_bucket *b = &r->buckets[r->open];
        int64_t lo = b->b0 > ul->part_offset ? b->b0 - ul->part_offset : 0;
        int64_t width = b->b1 - b->b0, at = ul->part_offset + lo - b->b0;
        /* Block q of the bucket: rank q's columns, pre-scaled as they are packed. */
        for (int q = 0; q < world; q++)
            be->convert(be, zt_zero_at(b->send, q * width + at, r->comm_dt), r->comm_dt,
                        zt_zero_at(g, q * ul->shard_numel + lo, g_dt), g_dt, hi - lo,
                        r->pre_scale, false);
        b->segs[b->n_segs++] = (zt_zero_seg){u, lo, hi};
        hi = lo;
        if (ul->part_offset + lo == b->b0)
            ZT_TRY(rs_issue(r, b->send));
    }
    /* MPI moves non-blocking collectives forward only inside MPI calls. */
    for (int i = 0; i < r->n_buckets; i++)
        if (r->buckets[i].pending)
            rs_comm(r)->ops->test(rs_comm(r), &r->buckets[i].req);
    return ZT_OK;
}

zt_status zt_zero_rs_finish(zt_zero_rs *r)
{
    if (r->open >= 0)
        return zt_fail(ZT_ERR_INTERNAL, "", "a gradient bucket was left open: units skipped");
    /* Oldest first: `next` is the bucket opened longest ago. */
    for (int i = 0; i < r->n_buckets; i++) {
        zt_zero_bucket *b = &r->buckets[(r->next + i) % r->n_buckets];
        if (b->pending)
            ZT_TRY(rs_deliver(r, b));
    }
    return r->source.release ? r->source.release(r->source.ctx) : ZT_OK;
}
