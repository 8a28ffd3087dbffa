/*
 * gather: the stage-3 gather window (engine/zero/gather.h).
 */
#include "engine/zero/gather.h"

#include <stdlib.h>
#include <string.h>

#include "engine/zero/quant.h"

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
    if (!layout->params_sharded || gathered == 0)
        return 0;
    /* Live elements stay within max_live, except that a demanded unit is
     * gathered even when prefetches fill the limit: at most one unit over. One
     * more unit of room absorbs first-fit fragmentation. */
    /* max_live may be anything up to 2^63 - 1 (DeepSpeed's sys.maxsize). */
    int64_t live = cfg->zero.stage3_max_live_parameters < gathered - max_unit
                       ? cfg->zero.stage3_max_live_parameters + max_unit
                       : gathered;
    return live + max_unit;
}

/* A gather's chunks are in flight until it completes, and only gathered
 * units are in flight: at most the live bound's worth of elements at the
 * largest ratio of chunk bytes to elements, plus the arena's alignment. */
size_t zt_zero_gather_qwz_bytes(const zt_config *cfg, const zt_layout *layout, int world,
                                int hpz)
{
    int64_t pool = zt_zero_gather_pool_numel(cfg, layout);
    if (!cfg->zero.zero_quantized_weights || pool == 0 || world <= 1)
        return 0;
    double ratio = 0;
    int units = 0;
    for (int u = 0; u < layout->n_units; u++) {
        const zt_unit_layout *ul = &layout->units[u];
        if (ul->persistent)
            continue;
        units++;
        size_t b = zt_qwz_buffer_bytes(ul->shard_numel, world);
        if (hpz > 1) {
            size_t bg = zt_qwz_buffer_bytes(ul->padded_numel / hpz, hpz);
            b = bg > b ? bg : b;
        }
        double r = (double)b / (double)ul->padded_numel;
        ratio = r > ratio ? r : ratio;
    }
    return (size_t)(ratio * (double)pool) + 1 + (size_t)units * 64;
}

int64_t zt_zero_secondary_numel(const zt_config *cfg, const zt_layout *layout)
{
    int64_t h = cfg->zero.zero_hpz_partition_size;
    if (!layout->params_sharded || h <= 1)
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
    g->cfg = cfg;
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

/* What unit u's gather sends per rank, and over which comm. */
static int64_t gather_send_numel(const zt_zero_gather *g, int u, bool from_world)
{
    const zt_unit_layout *ul = &g->layout->units[u];
    return from_world ? ul->shard_numel : ul->padded_numel / g->hpz;
}

static void gather_free_blocks(zt_zero_gather *g, zt_gather_unit *gu)
{
    if (gu->qbuf)
        zt_arena_free(g->pool, gu->qbuf);
    zt_arena_free(g->pool, gu->buf);
    gu->buf = gu->qbuf = NULL;
}

/* Starts the all-gather of unit u into a new COMM block. A prefetch that finds
 * no room returns ZT_ERR_OOM and leaves nothing behind; the caller skips it. */
static zt_status gather_start(zt_zero_gather *g, int u, zt_gather_dir dir)
{
    const zt_unit_layout *ul = &g->layout->units[u];
    zt_gather_unit *gu = &g->units[u];
    ZT_TRY(zt_arena_alloc(g->pool, (size_t)ul->padded_numel * zt_dtype_size(g->dt), &gu->buf));
    zt_comm_req_none(&gu->req);
    /* hpZ: backward gathers the node group's secondary copy; forward gathers
     * the primary shards over the world and refreshes the secondary. */
    bool from_group = dir != ZT_GATHER_FWD && g->group;
    zt_comm *c = from_group ? g->group : g->comm;
    int64_t n = gather_send_numel(g, u, !from_group);
    const void *send = from_group ? g->secondary[u] : g->shard[u];
    zt_status st = ZT_OK;
    if (!from_group && g->shard_host) { /* staged into its own slot, then gathered in place */
        void *slot = zt_zero_at(gu->buf, (int64_t)g->comm->rank * n, g->dt);
        const void *host = send;
        if (!host) /* no resident shard: its source (the NVMe swapper) reads it in */
            st = g->source.get(g->source.ctx, u, dir, &host);
        if (st == ZT_OK)
            g->be->copy_h2d(g->be, slot, host, (size_t)n * zt_dtype_size(g->dt));
        if (st == ZT_OK && !send)
            g->source.put(g->source.ctx, u);
        send = slot;
    }
    if (st == ZT_OK && zt_qwz_on(g->cfg, c)) {
        st = zt_arena_alloc(g->pool, zt_qwz_buffer_bytes(n, c->size), &gu->qbuf);
        if (st == ZT_OK)
            st = zt_qwz_gather_start(g->be, c, send, g->dt, n, gu->qbuf, &gu->req);
    } else if (st == ZT_OK) {
        st = c->ops->all_gather(c, send, gu->buf, n, g->dt, &gu->req);
    }
    if (st != ZT_OK) {
        gather_free_blocks(g, gu);
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
    if (gu->qbuf) {
        zt_qwz_gather_finish(g->be, c, gu->qbuf, gu->buf, g->dt,
                             gather_send_numel(g, u, gu->from_world));
        zt_arena_free(g->pool, gu->qbuf);
        gu->qbuf = NULL;
    }
    gu->state = ZT_UNIT_READY;
    if (gu->from_world && g->group) {
        const zt_unit_layout *ul = &g->layout->units[u];
        int64_t part = ul->padded_numel / g->hpz;
        const void *mine = zt_zero_at(gu->buf, (int64_t)g->group->rank * part, g->dt);
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
        if (!vl->persistent)
            continue;
        void *own = zt_zero_at(g->shard[v], (int64_t)l->rank * vl->shard_numel, g->dt);
        ZT_TRY(g->comm->ops->all_gather(g->comm, own, g->shard[v], vl->shard_numel, g->dt,
                                        NULL));
    }
    return ZT_OK;
}
