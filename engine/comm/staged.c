/*
 * staged: the MPI communicator for device buffers of a backend whose
 * memory MPI cannot read (CUDA without a CUDA-aware MPI). Each collective
 * copies its device input into a host staging buffer (be->copy_d2h), runs the
 * MPI collective there through an inner MPI comm (engine/comm/comm.c, so sequence
 * numbers, the watchdog and the arithmetic are the MPI comm's), and copies the
 * result back (be->copy_h2d). Several ranks can share one GPU this way, which
 * NCCL does not allow. Every pointer a collective gets is taken as device
 * memory of `be`; on the CPU backend (host_alloc NULL) that is host memory and
 * the same path runs, which is how the tests exercise it without a GPU.
 *
 * Every call completes before it returns: a request comes back already
 * complete (test true, wait a no-op), so overlap_comm overlaps nothing here
 * and a pipeline's transfers do not overlap its compute.
 * A communicator of one rank copies nothing: its result is its input.
 *
 * Memory: the comm owns its inner MPI comm and one staging buffer, page-locked
 * (be->host_alloc) where the backend has it, else malloc. The buffer grows to
 * the largest call seen: it is reallocated only when a larger call arrives, so
 * in training only during the first step (bucket and unit sizes repeat).
 * Collective: zt_comm_staged_init, the collectives, split.
 */
#include "engine/comm/comm.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    zt_comm inner;          /* the MPI comm that moves the staged bytes */
    const zt_backend *be;
    void *stage;            /* host staging buffer */
    size_t stage_bytes;
} staged_impl;

static staged_impl *staged_of(zt_comm *c) { return (staged_impl *)c->impl; }

static void staged_stage_free(staged_impl *s)
{
    if (!s->stage)
        return;
    if (s->be->host_free)
        s->be->host_free(s->be, s->stage);
    else
        free(s->stage);
    s->stage = NULL;
    s->stage_bytes = 0;
}

/* A staging buffer of at least `bytes`; its old contents are not kept. */
static zt_status staged_reserve(staged_impl *s, size_t bytes, void **out)
{
    if (bytes > s->stage_bytes) {
        staged_stage_free(s);
        void *p = NULL;
        if (s->be->host_alloc)
            ZT_TRY(s->be->host_alloc(s->be, bytes, &p));
        else if (!(p = aligned_alloc(64, (bytes + 63) / 64 * 64)))
            return zt_fail(ZT_ERR_OOM, "use smaller buckets",
                           "cannot allocate %zu bytes of comm staging memory", bytes);
        s->stage = p;
        s->stage_bytes = bytes;
    }
    *out = s->stage;
    return ZT_OK;
}

/* Runs before each call: the inner comm takes the outer's watchdog limit
 * (which a caller may change after init) and its counters are remembered, so
 * staged_after can add what the call counted to the outer comm. */
typedef struct {
    uint64_t bytes[ZT_COMM_NKINDS], calls[ZT_COMM_NKINDS];
} staged_mark;

static staged_mark staged_before(zt_comm *c)
{
    staged_impl *s = staged_of(c);
    s->inner.timeout_s = c->timeout_s;
    staged_mark m;
    memcpy(m.bytes, s->inner.bytes, sizeof m.bytes);
    memcpy(m.calls, s->inner.calls, sizeof m.calls);
    return m;
}

/* Mirrors the inner comm's counters and sequence number onto the outer one
 * and, for a non-blocking call, hands back a request that is already complete
 * but describes the collective like the MPI comm's would. */
static zt_status staged_after(zt_comm *c, const staged_mark *m, zt_status st, zt_comm_kind kind,
                              int64_t numel, zt_dtype dt, zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    for (int k = 0; k < ZT_COMM_NKINDS; k++) {
        c->bytes[k] += s->inner.bytes[k] - m->bytes[k];
        c->calls[k] += s->inner.calls[k] - m->calls[k];
    }
    c->seq = s->inner.seq;
    if (req)
        zt_comm_req_describe(req, kind, c->seq, numel, dt);
    return st;
}

/* A one-rank comm: the collective is the identity (or a copy), no bytes move
 * and nothing is counted, but it still takes its sequence number. */
static bool staged_alone(zt_comm *c)
{
    if (c->size != 1)
        return false;
    staged_of(c)->inner.seq++;
    return true;
}

static zt_status staged_all_reduce(zt_comm *c, void *buf, int64_t numel, zt_dtype dt,
                                   zt_red_op op, zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    staged_mark m = staged_before(c);
    zt_status st = ZT_OK;
    if (!staged_alone(c)) {
        size_t bytes = (size_t)numel * zt_dtype_size(dt);
        void *h = NULL;
        ZT_TRY(staged_reserve(s, bytes, &h));
        s->be->copy_d2h(s->be, h, buf, bytes);
        st = s->inner.ops->all_reduce(&s->inner, h, numel, dt, op, NULL);
        if (st == ZT_OK)
            s->be->copy_h2d(s->be, buf, h, bytes);
    }
    return staged_after(c, &m, st, ZT_COMM_ALL_REDUCE, numel, dt, req);
}

/* One buffer: the full input, then the received block after it. */
static zt_status staged_reduce_scatter(zt_comm *c, const void *send, void *recv,
                                       int64_t recv_numel, zt_dtype dt, zt_red_op op,
                                       zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    staged_mark m = staged_before(c);
    size_t part = (size_t)recv_numel * zt_dtype_size(dt), total = part * (size_t)c->size;
    zt_status st = ZT_OK;
    if (staged_alone(c)) {
        if (send != recv)
            s->be->copy_d2d(s->be, recv, send, part);
    } else {
        char *h = NULL;
        ZT_TRY(staged_reserve(s, total + part, (void **)&h));
        s->be->copy_d2h(s->be, h, send, total);
        st = s->inner.ops->reduce_scatter(&s->inner, h, h + total, recv_numel, dt, op, NULL);
        if (st == ZT_OK)
            s->be->copy_h2d(s->be, recv, h + total, part);
    }
    return staged_after(c, &m, st, ZT_COMM_REDUCE_SCATTER, recv_numel * c->size, dt, req);
}

/* The send block goes straight into this rank's slot of the host output, and
 * the gather runs in place there. */
static zt_status staged_all_gather(zt_comm *c, const void *send, void *recv, int64_t send_numel,
                                   zt_dtype dt, zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    staged_mark m = staged_before(c);
    size_t part = (size_t)send_numel * zt_dtype_size(dt), total = part * (size_t)c->size;
    zt_status st = ZT_OK;
    if (staged_alone(c)) {
        if (send != recv)
            s->be->copy_d2d(s->be, recv, send, part);
    } else {
        char *h = NULL;
        ZT_TRY(staged_reserve(s, total, (void **)&h));
        char *slot = h + (size_t)c->rank * part;
        s->be->copy_d2h(s->be, slot, send, part);
        st = s->inner.ops->all_gather(&s->inner, slot, h, send_numel, dt, NULL);
        if (st == ZT_OK)
            s->be->copy_h2d(s->be, recv, h, total);
    }
    return staged_after(c, &m, st, ZT_COMM_ALL_GATHER, send_numel * c->size, dt, req);
}

static zt_status staged_broadcast(zt_comm *c, void *buf, int64_t numel, zt_dtype dt, int root,
                                  zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    staged_mark m = staged_before(c);
    zt_status st = ZT_OK;
    if (!staged_alone(c)) {
        size_t bytes = (size_t)numel * zt_dtype_size(dt);
        void *h = NULL;
        ZT_TRY(staged_reserve(s, bytes, &h));
        if (c->rank == root)
            s->be->copy_d2h(s->be, h, buf, bytes);
        st = s->inner.ops->broadcast(&s->inner, h, numel, dt, root, NULL);
        if (st == ZT_OK && c->rank != root)
            s->be->copy_h2d(s->be, buf, h, bytes);
    }
    return staged_after(c, &m, st, ZT_COMM_BROADCAST, numel, dt, req);
}

/* One buffer: the full input, then the full output after it. */
static zt_status staged_all_to_all(zt_comm *c, const void *send, void *recv, int64_t numel,
                                   zt_dtype dt, zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    staged_mark m = staged_before(c);
    size_t total = (size_t)numel * zt_dtype_size(dt) * (size_t)c->size;
    zt_status st = ZT_OK;
    if (staged_alone(c)) {
        s->be->copy_d2d(s->be, recv, send, total);
    } else {
        char *h = NULL;
        ZT_TRY(staged_reserve(s, 2 * total, (void **)&h));
        s->be->copy_d2h(s->be, h, send, total);
        st = s->inner.ops->all_to_all(&s->inner, h, h + total, numel, dt, NULL);
        if (st == ZT_OK)
            s->be->copy_h2d(s->be, recv, h + total, total);
    }
    return staged_after(c, &m, st, ZT_COMM_ALL_TO_ALL, numel * c->size, dt, req);
}

/* Every transfer through its own part of the staging buffer: sends copied
 * out first, receives copied in after the inner comm's call. */
static zt_status staged_send_recv(zt_comm *c, const zt_comm_xfer *x, int n, zt_comm_req *req)
{
    staged_impl *s = staged_of(c);
    ZT_TRY(zt_comm_xfers_check(c, x, n));
    staged_mark m = staged_before(c);
    size_t at[ZT_COMM_MAX_XFERS + 1] = {0};
    for (int i = 0; i < n; i++)
        at[i + 1] = at[i] + ((size_t)x[i].numel * zt_dtype_size(x[i].dt) + 63) / 64 * 64;
    char *h = NULL;
    ZT_TRY(staged_reserve(s, at[n] > 0 ? at[n] : 1, (void **)&h));
    zt_comm_xfer hx[ZT_COMM_MAX_XFERS];
    int64_t total = 0;
    bool recv = false;
    for (int i = 0; i < n; i++) {
        hx[i] = x[i];
        hx[i].buf = h + at[i];
        if (!x[i].recv)
            s->be->copy_d2h(s->be, hx[i].buf, x[i].buf, (size_t)x[i].numel * zt_dtype_size(x[i].dt));
        total += x[i].numel;
        recv = recv || x[i].recv;
    }
    zt_status st = s->inner.ops->send_recv(&s->inner, hx, n, NULL);
    for (int i = 0; i < n && st == ZT_OK; i++)
        if (x[i].recv)
            s->be->copy_h2d(s->be, x[i].buf, hx[i].buf, (size_t)x[i].numel * zt_dtype_size(x[i].dt));
    return staged_after(c, &m, st, recv ? ZT_COMM_RECV : ZT_COMM_SEND, total, x[0].dt, req);
}

static zt_status staged_barrier(zt_comm *c)
{
    staged_impl *s = staged_of(c);
    return s->inner.ops->barrier(&s->inner);
}

/* Requests come back complete. */
static bool staged_test(zt_comm *c, zt_comm_req *req)
{
    (void)c;
    req->pending = false;
    return true;
}

static zt_status staged_wait(zt_comm *c, zt_comm_req *req)
{
    (void)c;
    req->pending = false;
    return ZT_OK;
}

static void staged_abort(zt_comm *c, int code) { MPI_Abort(c->mpi, code); }

static zt_status staged_split(zt_comm *c, int color, int key, zt_comm *out)
{
    return zt_comm_split_as(c, color, key, out, zt_comm_staged_init, staged_of(c)->be);
}

static void staged_free(zt_comm *c)
{
    staged_impl *s = staged_of(c);
    if (!s)
        return;
    staged_stage_free(s);
    zt_comm_free(&s->inner);
    free(s);
    c->impl = NULL;
}

static const zt_comm_ops zt_comm_staged_ops = {
    .all_reduce = staged_all_reduce,
    .reduce_scatter = staged_reduce_scatter,
    .all_gather = staged_all_gather,
    .broadcast = staged_broadcast,
    .all_to_all = staged_all_to_all,
    .barrier = staged_barrier,
    .send_recv = staged_send_recv,
    .test = staged_test,
    .wait = staged_wait,
    .abort = staged_abort,
    .split = staged_split,
    .free = staged_free,
};

zt_status zt_comm_staged_init(zt_comm *c, MPI_Comm parent, const zt_backend *be)
{
    memset(c, 0, sizeof *c);
    staged_impl *s = calloc(1, sizeof *s);
    if (!s)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the staged comm");
    s->be = be;
    zt_status st = zt_comm_mpi_init(&s->inner, parent);
    if (st != ZT_OK) {
        free(s);
        return st;
    }
    c->name = "staged";
    c->ops = &zt_comm_staged_ops;
    c->impl = s;
    /* The inner comm owns the MPI communicators; these are views of them. */
    c->mpi = s->inner.mpi;
    c->side = s->inner.side;
    c->rank = s->inner.rank;
    c->size = s->inner.size;
    c->timeout_s = s->inner.timeout_s;
    return ZT_OK;
}
