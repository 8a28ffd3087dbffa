#include "engine/zero/zero.h"

#include <stdlib.h>
#include <string.h>

/* Element i of a typed buffer. */
static void *zero_at(const void *p, int64_t i, zt_dtype dt)
{
    return (char *)p + (size_t)i * zt_dtype_size(dt);
}

zt_status zt_layout_init(zt_layout *l, const zt_model *m, const zt_zero_config *z,
                         int world_size, int rank)
{
    memset(l, 0, sizeof *l);
    l->world_size = world_size;
    l->rank = rank;
    l->stage = z->stage;
    l->n_units = m->n_units;
    l->units = calloc((size_t)m->n_units, sizeof *l->units);
    if (!l->units)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the layout of %d units", m->n_units);
    int64_t align = (int64_t)world_size * ZT_ZERO_ALIGN;
    int64_t offset = 0, global = 0, persistent_unpadded = 0;
    for (int u = 0; u < m->n_units; u++) {
        zt_unit_layout *ul = &l->units[u];
        ul->offset = offset;
        ul->numel = m->units[u].param_numel;
        ul->padded_numel = (ul->numel + align - 1) / align * align;
        ul->shard_numel = ul->padded_numel / world_size;
        ul->part_offset = offset / world_size;
        ul->global_index = global;
        /* DeepSpeed's rule per parameter, applied per unit (our gather grain),
         * with the model-wide cap counted in unpadded elements as DeepSpeed does. */
        if (z->stage == 3 && ul->numel <= z->stage3_param_persistence_threshold &&
            persistent_unpadded + ul->numel <= z->stage3_model_persistence_threshold) {
            ul->persistent = true;
            persistent_unpadded += ul->numel;
            l->persistent_numel += ul->padded_numel;
        }
        if (ul->padded_numel > l->max_unit_numel)
            l->max_unit_numel = ul->padded_numel;
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
    void *b = zero_at(r->grads, lo, r->dt);
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

static int64_t zero_clamp_width(int64_t bucket_numel, const zt_layout *l)
{
    int64_t w = bucket_numel / l->world_size;
    if (w < 1)
        w = 1;
    return w < l->partition_numel ? w : l->partition_numel;
}

int64_t zt_zero_rs_width(const zt_config *cfg, const zt_layout *layout)
{
    return zero_clamp_width(cfg->zero.reduce_bucket_size, layout);
}

void zt_zero_rs_buffers(const zt_config *cfg, const zt_layout *layout, int *count,
                        int64_t *send_numel, int64_t *recv_numel)
{
    int64_t w = zero_clamp_width(cfg->zero.reduce_bucket_size, layout);
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
    r->comm_dt = target->comm_dt;
    r->width = zero_clamp_width(cfg->zero.reduce_bucket_size, layout);
    r->overlap = cfg->zero.overlap_comm;
    r->use_reduce_scatter = cfg->zero.reduce_scatter;
    r->n_buckets = r->overlap ? 2 : 1;
    r->open = -1;
    zt_zero_scales(cfg, comm->size * (replica ? replica->size : 1), &r->pre_scale,
                   &r->post_scale);
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
}

/* Waits for a bucket and moves this rank's reduced columns to their slices. */
static zt_status rs_deliver(zt_zero_rs *r, zt_zero_bucket *b)
{
    const zt_backend *be = r->be;
    zt_dtype kdt = r->comm_dt;
    ZT_TRY(r->comm->ops->wait(r->comm, &b->req));
    int64_t width = b->b1 - b->b0;
    void *src = b->recv ? b->recv : zero_at(b->send, (int64_t)r->layout->rank * width, kdt);
    if (r->replica)
        ZT_TRY(r->replica->ops->all_reduce(r->replica, src, width, kdt, ZT_RED_SUM, NULL));
    if (r->dest_host) {
        be->copy_d2h(be, r->host_stage, src, (size_t)width * zt_dtype_size(kdt));
        src = r->host_stage;
    }
    for (int i = 0; i < b->n_segs; i++) {
        const zt_zero_seg *s = &b->segs[i];
        const zt_unit_layout *ul = &r->layout->units[s->unit];
        const void *from = zero_at(src, ul->part_offset + s->lo - b->b0, kdt);
        void *to = zero_at(r->dest[s->unit], s->lo, r->dest_dt);
        int64_t n = s->hi - s->lo;
        if (r->dest_host)
            zt_convert_host(to, r->dest_dt, from, kdt, n, r->post_scale, r->accumulate);
        else
            be->convert(be, to, r->dest_dt, from, kdt, n, r->post_scale, r->accumulate);
    }
    b->pending = false;
    return ZT_OK;
}

/* Opens the next bucket with its top at partition coordinate `top`; it reaches
 * down one width or to the partition's start, so its extent is known before
 * any unit is packed into it. */
static zt_status rs_open(zt_zero_rs *r, int64_t top)
{
    zt_zero_bucket *b = &r->buckets[r->next];
    if (b->pending)
        ZT_TRY(rs_deliver(r, b));
    b->b1 = top;
    b->b0 = top > r->width ? top - r->width : 0;
    b->n_segs = 0;
    r->open = r->next;
    r->next = (r->next + 1) % r->n_buckets;
    return ZT_OK;
}

static zt_status rs_issue(zt_zero_rs *r)
{
    zt_zero_bucket *b = &r->buckets[r->open];
    int64_t width = b->b1 - b->b0, total = width * r->layout->world_size;
    zt_comm_req *req = r->overlap ? &b->req : NULL;
    b->req.n_parts = 0;
    if (r->use_reduce_scatter)
        ZT_TRY(r->comm->ops->reduce_scatter(r->comm, b->send, b->recv, width, r->comm_dt,
                                            ZT_RED_SUM, req));
    else
        ZT_TRY(r->comm->ops->all_reduce(r->comm, b->send, total, r->comm_dt, ZT_RED_SUM, req));
    b->pending = true;
    r->open = -1;
    return r->overlap ? ZT_OK : rs_deliver(r, b);
}

zt_status zt_zero_rs_unit(zt_zero_rs *r, int u, const void *g, zt_dtype g_dt)
{
    const zt_backend *be = r->be;
    const zt_unit_layout *ul = &r->layout->units[u];
    int world = r->layout->world_size;
    int64_t hi = ul->shard_numel;
    while (hi > 0) {
        if (r->open < 0)
            ZT_TRY(rs_open(r, ul->part_offset + hi));
        zt_zero_bucket *b = &r->buckets[r->open];
        int64_t lo = b->b0 > ul->part_offset ? b->b0 - ul->part_offset : 0;
        int64_t width = b->b1 - b->b0, at = ul->part_offset + lo - b->b0;
        /* Block q of the bucket: rank q's columns, pre-scaled as they are packed. */
        for (int q = 0; q < world; q++)
            be->convert(be, zero_at(b->send, q * width + at, r->comm_dt), r->comm_dt,
                        zero_at(g, q * ul->shard_numel + lo, g_dt), g_dt, hi - lo,
                        r->pre_scale, false);
        b->segs[b->n_segs++] = (zt_zero_seg){u, lo, hi};
        hi = lo;
        if (ul->part_offset + lo == b->b0)
            ZT_TRY(rs_issue(r));
    }
    /* MPI moves non-blocking collectives forward only inside MPI calls. */
    for (int i = 0; i < r->n_buckets; i++)
        if (r->buckets[i].pending)
            r->comm->ops->test(r->comm, &r->buckets[i].req);
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
    return ZT_OK;
}

/* ---- Stages 1-2: all-gather of the updated slices ---- */

int64_t zt_zero_allgather_buffer_numel(const zt_config *cfg, const zt_layout *layout)
{
    return zero_clamp_width(cfg->zero.allgather_bucket_size, layout) * layout->world_size;
}

/* Copies between rank q's slices of the flat params and block q of a bucket
 * covering partition coordinates [b0, b0 + width). */
static void allgather_move(const zt_backend *be, const zt_layout *l, void *params, void *buf,
                           zt_dtype dt, int64_t b0, int64_t width, int q, bool to_buf)
{
    for (int u = 0; u < l->n_units; u++) {
        const zt_unit_layout *ul = &l->units[u];
        int64_t lo = b0 > ul->part_offset ? b0 - ul->part_offset : 0;
        int64_t end = b0 + width - ul->part_offset;
        int64_t hi = end < ul->shard_numel ? end : ul->shard_numel;
        if (hi <= lo)
            continue;
        void *slice = zero_at(params, ul->offset + q * ul->shard_numel + lo, dt);
        void *block = zero_at(buf, q * width + ul->part_offset + lo - b0, dt);
        size_t bytes = (size_t)(hi - lo) * zt_dtype_size(dt);
        if (to_buf)
            be->copy_d2d(be, block, slice, bytes);
        else
            be->copy_d2d(be, slice, block, bytes);
    }
}

zt_status zt_zero_allgather_params(const zt_config *cfg, const zt_backend *be, zt_comm *comm,
                                   const zt_layout *layout, void *params, void *buf,
                                   zt_dtype dt)
{
    int world = layout->world_size, me = layout->rank;
    int64_t step = zero_clamp_width(cfg->zero.allgather_bucket_size, layout);
    for (int64_t b0 = 0; b0 < layout->partition_numel; b0 += step) {
        int64_t width = layout->partition_numel - b0 < step ? layout->partition_numel - b0 : step;
        allgather_move(be, layout, params, buf, dt, b0, width, me, true);
        if (cfg->zero.allgather_partitions) {
            ZT_TRY(comm->ops->all_gather(comm, zero_at(buf, me * width, dt), buf, width, dt,
                                         NULL));
        } else {
            for (int q = 0; q < world; q++)
                ZT_TRY(comm->ops->broadcast(comm, zero_at(buf, q * width, dt), width, dt, q,
                                            NULL));
        }
        for (int q = 0; q < world; q++)
            if (q != me)
                allgather_move(be, layout, params, buf, dt, b0, width, q, false);
    }
    return ZT_OK;
}

/* ---- Stage 3: the gather window ---- */

static int64_t gather_max_unit(const zt_layout *l)
{
    int64_t m = 0;
    for (int u = 0; u < l->n_units; u++)
        if (!l->units[u].persistent && l->units[u].padded_numel > m)
            m = l->units[u].padded_numel;
    return m;
}

int64_t zt_zero_gather_pool_numel(const zt_config *cfg, const zt_layout *layout)
{
    int64_t gathered = layout->padded_numel - layout->persistent_numel;
    int64_t max_unit = gather_max_unit(layout);
    if (layout->stage != 3 || gathered == 0)
        return 0;
    /* Live elements stay within max_live, except that a demanded unit is
     * gathered even when prefetches fill the limit: at most one unit over. One
     * more unit of room absorbs first-fit fragmentation. */
    int64_t live = cfg->zero.stage3_max_live_parameters + max_unit;
    if (live > gathered)
        live = gathered;
    return live + max_unit;
}

int64_t zt_zero_secondary_numel(const zt_config *cfg, const zt_layout *layout)
{
    int64_t h = cfg->zero.zero_hpz_partition_size;
    if (layout->stage != 3 || h <= 1)
        return 0;
    return (layout->padded_numel - layout->persistent_numel) / h;
}

zt_status zt_zero_gather_init(zt_zero_gather *g, const zt_config *cfg, const zt_backend *be,
                              zt_comm *comm, zt_comm *group, const zt_layout *layout,
                              zt_arena *pool, zt_dtype dt, void *const *shard, bool shard_host,
                              void *const *secondary)
{
    memset(g, 0, sizeof *g);
    g->be = be;
    g->comm = comm;
    g->group = group;
    g->layout = layout;
    g->pool = pool;
    g->dt = dt;
    g->shard = shard;
    g->shard_host = shard_host;
    g->secondary = secondary;
    g->hpz = group ? group->size : 1;
    g->max_live = cfg->zero.stage3_max_live_parameters;
    g->prefetch = cfg->zero.stage3_prefetch_bucket_size;
    g->reuse_distance = cfg->zero.stage3_max_reuse_distance;
    g->units = calloc((size_t)layout->n_units, sizeof *g->units);
    g->gathered_before = calloc((size_t)layout->n_units + 1, sizeof *g->gathered_before);
    if (!g->units || !g->gathered_before)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the gather table");
    for (int u = 0; u < layout->n_units; u++) {
        const zt_unit_layout *ul = &layout->units[u];
        g->gathered_before[u + 1] = g->gathered_before[u] + (ul->persistent ? 0 : ul->padded_numel);
    }
    for (int u = 0; u < layout->n_units; u++)
        if (layout->units[u].persistent) {
            g->units[u].state = ZT_UNIT_READY;
            g->units[u].buf = shard[u];
        }
    return ZT_OK;
}

void zt_zero_gather_free(zt_zero_gather *g)
{
    free(g->units);
    free(g->gathered_before);
    g->units = NULL;
    g->gathered_before = NULL;
}

static void gather_drop(zt_zero_gather *g, int u)
{
    zt_gather_unit *gu = &g->units[u];
    zt_arena_free(g->pool, gu->buf);
    gu->buf = NULL;
    gu->state = ZT_UNIT_RELEASED;
    gu->retained = false;
    g->live_numel -= g->layout->units[u].padded_numel;
}

/* Drops one retained unit, the one whose next use is farthest from unit u in
 * direction dir. Returns false when none is retained. */
static bool gather_drop_retained(zt_zero_gather *g, int u, zt_gather_dir dir)
{
    int n = g->layout->n_units;
    /* Forward: units behind u are next used in backward (farthest first from
     * unit 0), then units ahead from the far end. Backward mirrors that. */
    for (int pass = 0; pass < 2; pass++) {
        bool behind = (pass == 0) == (dir != ZT_GATHER_BWD);
        if (behind) {
            for (int v = 0; v < u; v++)
                if (g->units[v].retained) {
                    gather_drop(g, v);
                    return true;
                }
        } else {
            for (int v = n - 1; v > u; v--)
                if (g->units[v].retained) {
                    gather_drop(g, v);
                    return true;
                }
        }
    }
    return false;
}

/* Starts the all-gather of unit u into a new COMM block. A prefetch that finds
 * no room returns ZT_ERR_OOM and leaves nothing behind; the caller skips it. */
static zt_status gather_start(zt_zero_gather *g, int u, zt_gather_dir dir)
{
    const zt_unit_layout *ul = &g->layout->units[u];
    zt_gather_unit *gu = &g->units[u];
    ZT_TRY(zt_arena_alloc(g->pool, (size_t)ul->padded_numel * zt_dtype_size(g->dt), &gu->buf));
    gu->req.n_parts = 0;
    zt_status st;
    bool from_group = dir != ZT_GATHER_FWD && g->group;
    /* hpZ: backward gathers the node group's secondary copy; forward gathers
     * the primary shards over the world and refreshes the secondary. */
    if (from_group) {
        st = g->group->ops->all_gather(g->group, g->secondary[u], gu->buf,
                                       ul->padded_numel / g->hpz, g->dt, &gu->req);
    } else {
        const void *send = g->shard[u];
        if (g->shard_host) { /* staged into its own slot, then gathered in place */
            void *slot = zero_at(gu->buf, (int64_t)g->comm->rank * ul->shard_numel, g->dt);
            g->be->copy_h2d(g->be, slot, send, (size_t)ul->shard_numel * zt_dtype_size(g->dt));
            send = slot;
        }
        st = g->comm->ops->all_gather(g->comm, send, gu->buf, ul->shard_numel, g->dt, &gu->req);
    }
    if (st != ZT_OK) {
        zt_arena_free(g->pool, gu->buf);
        gu->buf = NULL;
        return st;
    }
    gu->state = ZT_UNIT_INFLIGHT;
    gu->from_world = !from_group;
    g->live_numel += ul->padded_numel;
    if (g->live_numel > g->peak_live_numel)
        g->peak_live_numel = g->live_numel;
    return ZT_OK;
}

/* The communicator a unit's gather is in flight on. */
static zt_comm *gather_comm(const zt_zero_gather *g, const zt_gather_unit *gu)
{
    return gu->from_world ? g->comm : g->group;
}

static zt_status gather_complete(zt_zero_gather *g, int u)
{
    zt_gather_unit *gu = &g->units[u];
    zt_comm *c = gather_comm(g, gu);
    ZT_TRY(c->ops->wait(c, &gu->req));
    gu->state = ZT_UNIT_READY;
    if (gu->from_world && g->group) {
        const zt_unit_layout *ul = &g->layout->units[u];
        int64_t part = ul->padded_numel / g->hpz;
        const void *mine = zero_at(gu->buf, (int64_t)g->group->rank * part, g->dt);
        g->be->copy_d2d(g->be, g->secondary[u], mine, (size_t)part * zt_dtype_size(g->dt));
    }
    return ZT_OK;
}

static void gather_progress(zt_zero_gather *g)
{
    for (int v = 0; v < g->layout->n_units; v++) {
        zt_gather_unit *gv = &g->units[v];
        if (gv->state == ZT_UNIT_INFLIGHT)
            gather_comm(g, gv)->ops->test(gather_comm(g, gv), &gv->req);
    }
}

/* Drops every gathered unit not in use, finishing gathers still in flight. */
static zt_status gather_drop_idle(zt_zero_gather *g)
{
    for (int v = 0; v < g->layout->n_units; v++) {
        zt_gather_unit *gv = &g->units[v];
        if (g->layout->units[v].persistent || gv->in_use || gv->state == ZT_UNIT_RELEASED)
            continue;
        if (gv->state == ZT_UNIT_INFLIGHT)
            ZT_TRY(gather_complete(g, v));
        gather_drop(g, v);
    }
    return ZT_OK;
}

/* Issues gathers for the units after u in direction dir while they fit the
 * prefetch budget and the live limit. */
static void gather_prefetch(zt_zero_gather *g, int u, zt_gather_dir dir)
{
    int n = g->layout->n_units, step = dir == ZT_GATHER_FWD ? 1 : -1;
    int64_t ahead = 0;
    for (int v = u + step; v >= 0 && v < n; v += step) {
        const zt_unit_layout *vl = &g->layout->units[v];
        zt_gather_unit *gv = &g->units[v];
        if (vl->persistent)
            continue;
        if (gv->state != ZT_UNIT_RELEASED) {
            ahead += vl->padded_numel;
            continue;
        }
        if (ahead + vl->padded_numel > g->prefetch ||
            g->live_numel + vl->padded_numel > g->max_live)
            break;
        if (gather_start(g, v, dir) != ZT_OK)
            break;
        ahead += vl->padded_numel;
    }
}

zt_status zt_zero_gather_fetch(zt_zero_gather *g, int u, zt_gather_dir dir, void **params)
{
    const zt_unit_layout *ul = &g->layout->units[u];
    zt_gather_unit *gu = &g->units[u];
    if (gu->state == ZT_UNIT_RELEASED) {
        while (g->live_numel + ul->padded_numel > g->max_live && gather_drop_retained(g, u, dir))
            ;
        zt_status st = gather_start(g, u, dir);
        if (st == ZT_ERR_OOM) { /* fragmented: make room, then retry */
            ZT_TRY(gather_drop_idle(g));
            st = gather_start(g, u, dir);
        }
        ZT_TRY(st);
    }
    if (gu->state == ZT_UNIT_INFLIGHT)
        ZT_TRY(gather_complete(g, u));
    gu->in_use = true;
    gu->retained = false;
    if (dir != ZT_GATHER_RECOMPUTE)
        gather_prefetch(g, u, dir);
    gather_progress(g);
    *params = gu->buf;
    return ZT_OK;
}

/* Elements gathered between this use of unit u and its next one: the units
 * after it twice (forward then backward), or before it twice (backward, then
 * the next micro-step's forward). */
static int64_t gather_reuse_numel(const zt_zero_gather *g, int u, zt_gather_dir dir)
{
    const int64_t *before = g->gathered_before;
    return 2 * (dir != ZT_GATHER_BWD ? before[g->layout->n_units] - before[u + 1] : before[u]);
}

zt_status zt_zero_gather_release(zt_zero_gather *g, int u, zt_gather_dir dir, bool last_use)
{
    zt_gather_unit *gu = &g->units[u];
    gu->in_use = false;
    if (g->layout->units[u].persistent)
        return ZT_OK;
    if (!last_use && gather_reuse_numel(g, u, dir) < g->reuse_distance)
        gu->retained = true;
    else
        gather_drop(g, u);
    gather_progress(g);
    return ZT_OK;
}

zt_status zt_zero_gather_flush(zt_zero_gather *g) { return gather_drop_idle(g); }

zt_status zt_zero_gather_end_step(zt_zero_gather *g)
{
    const zt_layout *l = g->layout;
    ZT_TRY(gather_drop_idle(g));
    for (int v = 0; v < l->n_units; v++) {
        const zt_unit_layout *vl = &l->units[v];
        void *own = zero_at(g->shard[v], (int64_t)l->rank * vl->shard_numel, g->dt);
        if (vl->persistent)
            ZT_TRY(g->comm->ops->all_gather(g->comm, own, g->shard[v], vl->shard_numel, g->dt,
                                            NULL));
    }
    return ZT_OK;
}
