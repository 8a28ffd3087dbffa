/*
 * comm: the MPI communicator (host buffers) and what every backend shares:
 * the bootstrap of device communicators, the watchdog's message,
 * zt_comm_free. The watchdog's limit is ZT_COMM_TIMEOUT, parsed once with
 * the other variables (engine/env.h): a communicator's init has no local
 * check left that one rank could fail before the collective MPI_Comm_dup
 * its peers are in.
 *
 * Every collective, blocking or not, is a blocking MPI call on the comm thread
 * (engine/comm/worker.h) that the caller waits for with a deadline, so a
 * collective that a dead or stuck peer never joins fails after
 * ZT_COMM_TIMEOUT seconds instead of hanging.
 *
 * Memory: the comm owns its duplicated MPI communicator (freed by
 * zt_comm_free); buffers and requests belong to the caller.
 * Collective: zt_comm_mpi_init, the collectives, split, zt_comm_bootstrap.
 */
#include "engine/comm/comm.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/comm/peers.h"
#include "engine/env.h"

/* MPI counts are int: larger buffers are split into parts that each fit. */
#define ZT_COMM_MAX_COUNT ((int64_t)1 << 30)

static zt_status comm_check(int rc, const char *what, int64_t numel)
{
    if (rc == MPI_SUCCESS)
        return ZT_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return zt_fail(ZT_ERR_COMM, "a peer rank may have died; check the other ranks' output",
                   "%s of %lld elements failed: %s", what, (long long)numel, msg);
}

/* 16-bit reductions. MPI has no fp16/bf16 arithmetic, so the elements travel
 * as MPI_UINT16_T and these ops do the arithmetic: SUM widens both operands,
 * adds in fp32 and rounds once (zt_convert_host's accumulate, which is exactly
 * that); MAX compares the widened values and keeps the larger operand's bits,
 * and a NaN on either side wins, so an overflow is never reduced away. */
static void comm_f16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    zt_convert_host(inout, ZT_F16, in, ZT_F16, *len, 1.0f, true);
}

static void comm_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    zt_convert_host(inout, ZT_BF16, in, ZT_BF16, *len, 1.0f, true);
}

static void comm_half_max(const uint16_t *in, uint16_t *inout, int len,
                          float (*widen)(uint16_t))
{
    for (int i = 0; i < len; i++) {
        float a = widen(in[i]), b = widen(inout[i]);
        if (!isnan(b) && (isnan(a) || a > b))
            inout[i] = in[i];
    }
}

static void comm_f16_max(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    comm_half_max(in, inout, *len, zt_f16_to_f32);
}

static void comm_bf16_max(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    comm_half_max(in, inout, *len, zt_bf16_to_f32);
}

/* [fp16, bf16][SUM, MAX]. Created on first use and kept for the process; only
 * the thread that makes MPI calls (MPI_THREAD_FUNNELED) touches them. */
static MPI_User_function *const comm_half_fns[2][2] = {{comm_f16_sum, comm_f16_max},
                                                       {comm_bf16_sum, comm_bf16_max}};
static MPI_Op comm_half_ops[2][2];
static bool comm_half_ops_ready;

static void comm_half_ops_free(void)
{
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 2; o++)
            if (comm_half_ops[d][o] != MPI_OP_NULL)
                MPI_Op_free(&comm_half_ops[d][o]);
    comm_half_ops_ready = false;
}

/* MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else (MPI
 * 3.1, 8.7.1), which is the hook that frees the ops while MPI still works. */
static int comm_half_ops_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    (void)comm, (void)keyval, (void)attr, (void)extra;
    comm_half_ops_free();
    return MPI_SUCCESS;
}

static zt_status comm_half_ops_init(void)
{
    if (comm_half_ops_ready)
        return ZT_OK;
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 2; o++)
            comm_half_ops[d][o] = MPI_OP_NULL;
    int rc = MPI_SUCCESS;
    for (int d = 0; d < 2 && rc == MPI_SUCCESS; d++)
        for (int o = 0; o < 2 && rc == MPI_SUCCESS; o++)
            rc = MPI_Op_create(comm_half_fns[d][o], 1, &comm_half_ops[d][o]);
    int keyval = MPI_KEYVAL_INVALID;
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_half_ops_delete, &keyval, NULL);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_attr(MPI_COMM_SELF, keyval, NULL);
    if (rc != MPI_SUCCESS) {
        comm_half_ops_free();
        if (keyval != MPI_KEYVAL_INVALID)
            MPI_Comm_free_keyval(&keyval);
        return comm_check(rc, "creating the 16-bit reduction ops", 0);
    }
    /* A freed keyval stays alive while an attribute uses it (MPI 3.1, 6.7.2):
     * the delete callback still runs at MPI_Finalize. */
    MPI_Comm_free_keyval(&keyval);
    comm_half_ops_ready = true;
    return ZT_OK;
}

static zt_status comm_type(zt_dtype dt, MPI_Datatype *type)
{
    switch (dt) {
    case ZT_F32:
        *type = MPI_FLOAT;
        return ZT_OK;
    case ZT_F16:
    case ZT_BF16:
        *type = MPI_UINT16_T;
        return ZT_OK;
    default:
        return zt_fail(ZT_ERR_INTERNAL, "", "collective on unknown dtype %d", (int)dt);
    }
}

static zt_status comm_op(zt_dtype dt, zt_red_op op, MPI_Op *out)
{
    if (dt == ZT_F32) {
        *out = op == ZT_RED_MAX ? MPI_MAX : MPI_SUM;
        return ZT_OK;
    }
    ZT_TRY(comm_half_ops_init());
    *out = comm_half_ops[dt == ZT_BF16][op == ZT_RED_MAX];
    return ZT_OK;
}

/* A world of one rank moves nothing, so it counts nothing. */
static void comm_count(zt_comm *c, zt_comm_kind k, int64_t numel, zt_dtype dt)
{
    if (c->size == 1)
        return;
    c->bytes[k] += (uint64_t)numel * zt_dtype_size(dt);
    c->calls[k] += 1;
}

/* Takes the collective's sequence number, counts it and describes it in req
 * for the watchdog; the caller then issues the collective into req. numel is
 * the counted (whole logical buffer) size, which the watchdog's message names. */
void zt_comm_req_describe(zt_comm_req *req, zt_comm_kind kind, uint64_t seq, int64_t numel,
                          zt_dtype dt)
{
    memset(req, 0, sizeof *req);
    req->kind = kind;
    req->seq = seq;
    req->numel = numel;
    req->dt = dt;
    req->t_issued = MPI_Wtime();
}

static void comm_start(zt_comm *c, zt_comm_req *req, zt_comm_kind k, int64_t numel, zt_dtype dt)
{
    comm_count(c, k, numel, dt);
    zt_comm_req_describe(req, k, ++c->seq, numel, dt);
    req->pending = true;
}

/* Waits for the comm thread to finish req's task (sleeping, no polling) until
 * the collective has been in flight c->timeout_s seconds. After a timeout the
 * task is still queued or running inside MPI (which cannot cancel a
 * collective) and the comm is unusable: the caller aborts. */
static zt_status comm_wait_task(zt_comm *c, zt_comm_req *req)
{
    if (!req->pending)
        return ZT_OK;
    double left = 0;
    if (c->timeout_s > 0) {
        left = c->timeout_s - (MPI_Wtime() - req->t_issued);
        if (left <= 0)
            left = 1e-6;
    }
    if (!zt_comm_worker_wait(&req->task, left))
        return zt_comm_timeout_fail(c, req->kind, req->seq, req->numel, req->dt,
                                    MPI_Wtime() - req->t_issued);
    req->pending = false;
    return comm_check(req->task.rc, zt_comm_kind_name(req->kind), req->numel);
}

static zt_status comm_parts_check(int64_t numel, int64_t max_parts, const char *what)
{
    if ((numel + ZT_COMM_MAX_COUNT - 1) / ZT_COMM_MAX_COUNT > max_parts)
        return zt_fail(ZT_ERR_UNSUPPORTED, "use smaller buckets",
                       "%s of %lld elements exceeds what one request can carry", what,
                       (long long)numel);
    return ZT_OK;
}

/* ---- What the comm thread runs: the blocking MPI calls. ---- */

/* Tests the requests in a loop that sleeps longer the longer it waits (1 us
 * doubling to 1 ms after the first 50 us), so a waiting rank costs no core.
 * With timeout_s > 0 it gives up once that long has passed, returning -1
 * with *waited set: the watchdog of the waits outside the comm thread. */
static int comm_wait_backoff(int n, MPI_Request *r, double timeout_s, double *waited)
{
    double t0 = MPI_Wtime();
    long sleep_ns = 1000;
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || done)
            return rc;
        double w = MPI_Wtime() - t0;
        if (timeout_s > 0 && w > timeout_s) {
            *waited = w;
            return -1;
        }
        if (w < 50e-6)
            continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
}

/* Waits until every rank of comm has reached this collective, with a
 * non-blocking barrier waited on with comm_wait_backoff. A blocking MPI
 * collective spins inside MPI for as long as a peer is missing, a full core
 * per waiting rank for up to the watchdog's limit; behind this barrier it
 * starts only once the peers are there and then runs at full speed. */
static int comm_arrive(MPI_Comm comm)
{
    MPI_Request r;
    int rc = MPI_Ibarrier(comm, &r);
    if (rc != MPI_SUCCESS)
        return rc;
    return comm_wait_backoff(1, &r, 0, NULL);
}

/* In place, in parts of at most ZT_COMM_MAX_COUNT elements (MPI counts are int). */
static int task_all_reduce(zt_comm_task *t)
{
    int arrived = comm_arrive(t->comm);
    if (arrived != MPI_SUCCESS)
        return arrived;
    for (int64_t off = 0; off < t->count; off += ZT_COMM_MAX_COUNT) {
        int n = (int)(t->count - off < ZT_COMM_MAX_COUNT ? t->count - off : ZT_COMM_MAX_COUNT);
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)t->buf + off * (int64_t)t->elem, n, t->type,
                               t->op, t->comm);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

static int task_reduce_scatter(zt_comm_task *t)
{
    int arrived = comm_arrive(t->comm);
    if (arrived != MPI_SUCCESS)
        return arrived;
    return MPI_Reduce_scatter_block(t->send, t->recv, (int)t->count, t->type, t->op, t->comm);
}

static int task_all_gather(zt_comm_task *t)
{
    int arrived = comm_arrive(t->comm);
    if (arrived != MPI_SUCCESS)
        return arrived;
    return MPI_Allgather(t->send, (int)t->count, t->type, t->recv, (int)t->count, t->type,
                         t->comm);
}

static int task_broadcast(zt_comm_task *t)
{
    int arrived = comm_arrive(t->comm);
    if (arrived != MPI_SUCCESS)
        return arrived;
    for (int64_t off = 0; off < t->count; off += ZT_COMM_MAX_COUNT) {
        int n = (int)(t->count - off < ZT_COMM_MAX_COUNT ? t->count - off : ZT_COMM_MAX_COUNT);
        int rc = MPI_Bcast((char *)t->buf + off * (int64_t)t->elem, n, t->type, t->root, t->comm);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

static int task_all_to_all(zt_comm_task *t)
{
    int arrived = comm_arrive(t->comm);
    if (arrived != MPI_SUCCESS)
        return arrived;
    return MPI_Alltoall(t->send, (int)t->count, t->type, t->recv, (int)t->count, t->type,
                        t->comm);
}

static int task_barrier(zt_comm_task *t) { return comm_arrive(t->comm); }

_Static_assert(ZT_COMM_MAX_XFERS <= sizeof ((zt_comm_task *)0)->xfers /
                                        sizeof ((zt_comm_task *)0)->xfers[0],
               "the comm task holds every transfer of a send_recv");

/* Every transfer posted at once, then waited on with comm_wait_backoff: a
 * peer that is still computing costs this thread no CPU. */
static int task_send_recv(zt_comm_task *t)
{
    MPI_Request r[ZT_COMM_MAX_XFERS];
    int n = 0, rc = MPI_SUCCESS;
    for (; n < t->n_xfers && rc == MPI_SUCCESS; n++)
        rc = t->xfers[n].recv ? MPI_Irecv(t->xfers[n].buf, t->xfers[n].count, t->type,
                                          t->xfers[n].peer, 0, t->comm, &r[n])
                              : MPI_Isend(t->xfers[n].buf, t->xfers[n].count, t->type,
                                          t->xfers[n].peer, 0, t->comm, &r[n]);
    if (rc != MPI_SUCCESS) {
        /* The ones posted still complete before the buffers may be reused. */
        MPI_Waitall(n - 1, r, MPI_STATUSES_IGNORE);
        return rc;
    }
    return comm_wait_backoff(n, r, 0, NULL);
}

/* Issues task t of kind k on c into the caller's request, or into the comm's
 * own one, waited on before returning, when the call blocks (req NULL). */
static zt_status comm_issue(zt_comm *c, zt_comm_req *req, zt_comm_kind k, int64_t numel,
                            zt_dtype dt, const zt_comm_task *t)
{
    zt_comm_req *r = req ? req : &c->sync_req;
    comm_start(c, r, k, numel, dt);
    r->task = *t;
    r->task.comm = c->mpi;
    zt_comm_worker_submit(&r->task);
    return req ? ZT_OK : comm_wait_task(c, r);
}

static zt_status mpi_all_reduce(zt_comm *c, void *buf, int64_t numel, zt_dtype dt,
                                zt_red_op op, zt_comm_req *req)
{
    zt_comm_task t = {.run = task_all_reduce, .buf = buf, .count = numel,
                      .elem = zt_dtype_size(dt)};
    ZT_TRY(comm_type(dt, &t.type));
    ZT_TRY(comm_op(dt, op, &t.op));
    return comm_issue(c, req, ZT_COMM_ALL_REDUCE, numel, dt, &t);
}

static zt_status mpi_reduce_scatter(zt_comm *c, const void *send, void *recv, int64_t recv_numel,
                                    zt_dtype dt, zt_red_op op, zt_comm_req *req)
{
    zt_comm_task t = {.run = task_reduce_scatter, .send = send, .recv = recv,
                      .count = recv_numel, .elem = zt_dtype_size(dt)};
    ZT_TRY(comm_type(dt, &t.type));
    ZT_TRY(comm_op(dt, op, &t.op));
    ZT_TRY(comm_parts_check(recv_numel, 1, "reduce_scatter"));
    return comm_issue(c, req, ZT_COMM_REDUCE_SCATTER, recv_numel * c->size, dt, &t);
}

static zt_status mpi_all_gather(zt_comm *c, const void *send, void *recv, int64_t send_numel,
                                zt_dtype dt, zt_comm_req *req)
{
    const char *slot =
        (const char *)recv + (int64_t)c->rank * send_numel * (int64_t)zt_dtype_size(dt);
    zt_comm_task t = {.run = task_all_gather, .send = send == slot ? MPI_IN_PLACE : send,
                      .recv = recv, .count = send_numel, .elem = zt_dtype_size(dt)};
    ZT_TRY(comm_type(dt, &t.type));
    ZT_TRY(comm_parts_check(send_numel, 1, "all_gather"));
    return comm_issue(c, req, ZT_COMM_ALL_GATHER, send_numel * c->size, dt, &t);
}

static zt_status mpi_broadcast(zt_comm *c, void *buf, int64_t numel, zt_dtype dt, int root,
                               zt_comm_req *req)
{
    zt_comm_task t = {.run = task_broadcast, .buf = buf, .count = numel, .root = root,
                      .elem = zt_dtype_size(dt)};
    ZT_TRY(comm_type(dt, &t.type));
    return comm_issue(c, req, ZT_COMM_BROADCAST, numel, dt, &t);
}

static zt_status mpi_all_to_all(zt_comm *c, const void *send, void *recv, int64_t numel,
                                zt_dtype dt, zt_comm_req *req)
{
    zt_comm_task t = {.run = task_all_to_all, .send = send, .recv = recv, .count = numel,
                      .elem = zt_dtype_size(dt)};
    ZT_TRY(comm_type(dt, &t.type));
    ZT_TRY(comm_parts_check(numel, 1, "all_to_all"));
    return comm_issue(c, req, ZT_COMM_ALL_TO_ALL, numel * c->size, dt, &t);
}

zt_status zt_comm_xfers_check(const zt_comm *c, const zt_comm_xfer *x, int n)
{
    if (n < 1 || n > ZT_COMM_MAX_XFERS)
        return zt_fail(ZT_ERR_INTERNAL, "", "send_recv of %d transfers (1 to %d)", n,
                       ZT_COMM_MAX_XFERS);
    for (int i = 0; i < n; i++)
        if (x[i].peer < 0 || x[i].peer >= c->size || x[i].peer == c->rank || x[i].numel < 0)
            return zt_fail(ZT_ERR_INTERNAL, "",
                           "send_recv: transfer %d of %lld elements with peer %d (rank %d of %d)",
                           i, (long long)x[i].numel, x[i].peer, c->rank, c->size);
    return ZT_OK;
}

/* Bytes go to SEND or RECV per transfer; the request is described once. A
 * transfer's elements travel as bytes, so two dtypes can share a call. */
static zt_status mpi_send_recv(zt_comm *c, const zt_comm_xfer *x, int n, zt_comm_req *req)
{
    ZT_TRY(zt_comm_xfers_check(c, x, n));
    zt_comm_task t = {.run = task_send_recv, .type = MPI_BYTE, .n_xfers = n};
    int64_t total = 0;
    bool recv = false;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)x[i].numel * zt_dtype_size(x[i].dt);
        if (bytes > (size_t)INT32_MAX)
            return zt_fail(ZT_ERR_UNSUPPORTED, "use a smaller micro batch",
                           "a point-to-point transfer of %zu bytes exceeds what one MPI message "
                           "carries (2^31 - 1)",
                           bytes);
        t.xfers[i].buf = x[i].buf;
        t.xfers[i].count = (int)bytes;
        t.xfers[i].peer = x[i].peer;
        t.xfers[i].recv = x[i].recv;
        comm_count(c, x[i].recv ? ZT_COMM_RECV : ZT_COMM_SEND, x[i].numel, x[i].dt);
        total += x[i].numel;
        recv = recv || x[i].recv;
    }
    zt_comm_req *r = req ? req : &c->sync_req;
    zt_comm_req_describe(r, recv ? ZT_COMM_RECV : ZT_COMM_SEND, ++c->seq, total, x[0].dt);
    r->pending = true;
    r->task = t;
    r->task.comm = c->mpi;
    zt_comm_worker_submit(&r->task);
    return req ? ZT_OK : comm_wait_task(c, r);
}

/* Through the comm thread too: a barrier on `mpi` must not run beside a
 * collective on it. Not counted, no sequence number. */
static zt_status mpi_barrier(zt_comm *c)
{
    zt_comm_req *r = &c->sync_req;
    zt_comm_req_describe(r, ZT_COMM_ALL_REDUCE, c->seq, 0, ZT_F32);
    r->task = (zt_comm_task){.run = task_barrier, .comm = c->mpi};
    r->pending = true;
    zt_comm_worker_submit(&r->task);
    return comm_wait_task(c, r);
}

static bool mpi_test(zt_comm *c, zt_comm_req *req)
{
    (void)c;
    return !req->pending || zt_comm_worker_done(&req->task);
}

static zt_status mpi_wait(zt_comm *c, zt_comm_req *req) { return comm_wait_task(c, req); }

static void mpi_abort(zt_comm *c, int code) { MPI_Abort(c->mpi, code); }

zt_status zt_comm_split_as(zt_comm *c, int color, int key, zt_comm *out, zt_comm_init_fn init,
                           const zt_backend *be)
{
    memset(out, 0, sizeof *out);
    MPI_Comm part = MPI_COMM_NULL;
    ZT_TRY(comm_check(MPI_Comm_split(c->side, color, key, &part), "MPI_Comm_split", 0));
    zt_status st = init(out, part, be);
    MPI_Comm_free(&part);
    /* The parent's limit, which a caller may have set after init. */
    if (st == ZT_OK)
        out->timeout_s = c->timeout_s;
    return st;
}

static zt_status mpi_init_on(zt_comm *c, MPI_Comm parent, const zt_backend *be)
{
    (void)be;
    return zt_comm_mpi_init(c, parent);
}

static zt_status mpi_split(zt_comm *c, int color, int key, zt_comm *out)
{
    return zt_comm_split_as(c, color, key, out, mpi_init_on, NULL);
}

static void mpi_free(zt_comm *c)
{
    if (c->mpi && c->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&c->mpi);
    if (c->side && c->side != MPI_COMM_NULL)
        MPI_Comm_free(&c->side);
    if (c->uses_worker)
        zt_comm_worker_release();
    c->uses_worker = false;
}

static const zt_comm_ops zt_comm_mpi_ops = {
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .all_to_all = mpi_all_to_all,
    .barrier = mpi_barrier,
    .send_recv = mpi_send_recv,
    .test = mpi_test,
    .wait = mpi_wait,
    .abort = mpi_abort,
    .split = mpi_split,
    .free = mpi_free,
};

zt_status zt_comm_mpi_init(zt_comm *c, MPI_Comm parent)
{
    memset(c, 0, sizeof *c);
    ZT_TRY(comm_check(MPI_Comm_dup(parent, &c->mpi), "MPI_Comm_dup", 0));
    zt_status st = comm_check(MPI_Comm_dup(parent, &c->side), "MPI_Comm_dup", 0);
    if (st != ZT_OK) {
        MPI_Comm_free(&c->mpi);
        return st;
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->side, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    c->name = "mpi";
    c->ops = &zt_comm_mpi_ops;
    c->timeout_s = zt_env_get()->comm_timeout_s;
    c->uses_worker = zt_comm_worker_acquire();
    if (!c->uses_worker) {
        zt_comm_free(c); /* ops cleared too: a caller's later zt_comm_free is a no-op */
        return zt_fail(ZT_ERR_INTERNAL, "", "cannot start the comm thread");
    }
    return ZT_OK;
}

void zt_comm_free(zt_comm *c)
{
    if (c->ops && c->ops->free)
        c->ops->free(c);
    /* Freed twice is harmless; the counters stay readable for the report. */
    c->ops = NULL;
    c->impl = NULL;
    c->mpi = c->side = MPI_COMM_NULL;
}

/* ---- Bootstrap of device communicators ---- */

/* What a failing rank tells the others: its status, message and hint (the
 * sizes of the status module's slots). */
typedef struct {
    int status;
    char msg[2048];
    char hint[1024];
} comm_failure;

zt_status zt_comm_agree(MPI_Comm mpi, zt_status local, const char *stage)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(mpi, &rank);
    MPI_Comm_size(mpi, &size);
    int mine = local == ZT_OK ? size : rank, first = size;
    char what[160];
    snprintf(what, sizeof what, "all_reduce of the ranks' status (%s)", stage);
    MPI_Request r;
    ZT_TRY(zt_comm_mpi_wait(mpi, MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, mpi, &r), &r,
                            what, 1));
    if (first == size)
        return ZT_OK;
    comm_failure f;
    memset(&f, 0, sizeof f);
    if (rank == first) {
        f.status = (int)local;
        snprintf(f.msg, sizeof f.msg, "%s", zt_status_message());
        snprintf(f.hint, sizeof f.hint, "%s", zt_status_hint());
    }
    snprintf(what, sizeof what, "broadcast of rank %d's failure (%s)", first, stage);
    ZT_TRY(zt_comm_mpi_wait(mpi, MPI_Ibcast(&f, (int)sizeof f, MPI_BYTE, first, mpi, &r), &r,
                            what, (int64_t)sizeof f));
    if (rank == first)
        return local;
    return zt_fail((zt_status)f.status, f.hint, "%s failed on rank %d: %s", stage, first, f.msg);
}

zt_status zt_comm_bootstrap(MPI_Comm mpi, const zt_comm_bootstrap_fns *fns, void *id)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(mpi, &rank);
    MPI_Comm_size(mpi, &size);
    /* The others learn that make_id failed before they wait for the id. */
    zt_status st = rank == 0 ? fns->make_id(id, fns->ctx) : ZT_OK;
    ZT_TRY(zt_comm_agree(mpi, st, "making the communicator id"));
    ZT_TRY(comm_check(MPI_Bcast(id, (int)fns->id_bytes, MPI_BYTE, 0, mpi),
                      "broadcasting the communicator id", (int64_t)fns->id_bytes));
    /* join is local until the device library's own rendezvous, so every rank
     * gets this far; then all learn whether any join failed. */
    st = fns->join(id, size, rank, fns->ctx);
    return zt_comm_agree(mpi, st, "joining the communicator");
}

/* ---- The watchdog's message ---- */

/* The watchdog's failure on rank `rank` of `size` (timeout_s the limit),
 * after probing which peers still answer. */
static zt_status comm_watchdog_fail_at(double timeout_s, int rank, int size, const char *what,
                                       double waited_s)
{
    char world[32] = "";
    int world_rank = zt_status_rank();
    if (world_rank >= 0 && world_rank != rank)
        snprintf(world, sizeof world, " (world rank %d)", world_rank);
    /* Which peers are missing: the ranks that answer are waiting too. Half
     * the limit lets a peer whose watchdog fires a little later answer. */
    double window = timeout_s / 2 < 1 ? 1 : timeout_s / 2 > 10 ? 10 : timeout_s / 2;
    char who[1024] = "";
    if (zt_comm_peers_probe(window, who + 2, sizeof who - 2) >= 0)
        memcpy(who, "; ", 2);
    char hint[320];
    snprintf(hint, sizeof hint,
             "a peer rank is stuck or dead (see the other ranks' output: a crash, a hang, or a "
             "rank that skipped this collective); ZT_COMM_TIMEOUT=%g s is the limit, 0 turns "
             "the watchdog off",
             timeout_s);
    return zt_fail(ZT_ERR_COMM, hint, "%s did not complete within %.1f s on rank %d of %d%s%s",
                   what, waited_s, rank, size, world, who);
}

static zt_status comm_watchdog_fail(const zt_comm *c, const char *what, double waited_s)
{
    return comm_watchdog_fail_at(c->timeout_s, c->rank, c->size, what, waited_s);
}

zt_status zt_comm_mpi_wait(MPI_Comm mpi, int rc, MPI_Request *r, const char *what,
                           int64_t numel)
{
    if (rc == MPI_SUCCESS) {
        double timeout = zt_env_get()->comm_timeout_s, waited = 0;
        rc = comm_wait_backoff(1, r, timeout, &waited);
        if (rc == -1) {
            int rank = 0, size = 1;
            MPI_Comm_rank(mpi, &rank);
            MPI_Comm_size(mpi, &size);
            char text[200];
            snprintf(text, sizeof text, "MPI %s", what);
            return comm_watchdog_fail_at(timeout, rank, size, text, waited);
        }
    }
    return comm_check(rc, what, numel);
}

/* "MPI", "NCCL": which library c's collectives are stuck in. */
static void comm_lib_name(const zt_comm *c, char *lib, size_t n)
{
    snprintf(lib, n, "comm");
    if (c->name) {
        size_t i = 0;
        for (; c->name[i] && i + 1 < n; i++)
            lib[i] = (char)toupper((unsigned char)c->name[i]);
        lib[i] = '\0';
    }
}

zt_status zt_comm_timeout_fail(const zt_comm *c, zt_comm_kind kind, uint64_t seq, int64_t numel,
                               zt_dtype dt, double waited_s)
{
    char lib[16], what[160];
    comm_lib_name(c, lib, sizeof lib);
    snprintf(what, sizeof what, "%s %s #%llu (%lld elements, %s)", lib, zt_comm_kind_name(kind),
             (unsigned long long)seq, (long long)numel, zt_dtype_name(dt));
    return comm_watchdog_fail(c, what, waited_s);
}

zt_status zt_comm_side_all_reduce(const zt_comm *c, MPI_Comm mpi, void *buf, int count,
                                  MPI_Datatype type, MPI_Op op, const char *what)
{
    MPI_Request r;
    double waited = 0;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, op, mpi, &r);
    if (rc == MPI_SUCCESS)
        rc = comm_wait_backoff(1, &r, c->timeout_s, &waited);
    char text[160];
    if (rc == -1) {
        snprintf(text, sizeof text, "MPI all_reduce of %s (%d value%s)", what, count,
                 count == 1 ? "" : "s");
        return comm_watchdog_fail(c, text, waited);
    }
    snprintf(text, sizeof text, "all-reduce of %s", what);
    return comm_check(rc, text, count);
}

const char *zt_comm_kind_name(zt_comm_kind k)
{
    static const char *names[ZT_COMM_NKINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast", "all_to_all",
                                                "send", "recv"};
    return k < ZT_COMM_NKINDS ? names[k] : "unknown";
}
