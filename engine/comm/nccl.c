/*
 * nccl: the NCCL communicator (device buffers of the CUDA backend).
 * Compiled when the Makefile finds NCCL; engine/comm/nccl_absent.c otherwise.
 *
 * Ordering: collectives run on the device's comm stream, which the CUDA
 * backend owns and every communicator on the device shares (the world's and
 * hpZ/MiCS sub-communicators'): collectives of two communicators never run at
 * once, which NCCL documents as able to deadlock, and they run in the order
 * the host issued them, which every rank does the same way. Point-to-point
 * transfers (send_recv) run there too, each call one NCCL group; a rank's
 * sends and receives run in its issue order, which the pipeline schedule
 * matches between neighbours. Peers connect at the first transfer (NCCL's
 * lazy connection; the warm-up below makes no point-to-point connections, so
 * communicators that never carry one hold no buffers for them). Each collective
 * first makes the comm stream wait (on the device) for an event recorded on
 * the compute stream, so it sees every op queued before it; it records a
 * start event there, then a completion event after the collective. A blocking call makes the compute stream wait for
 * that event at once; a non-blocking call hands it back in the request and
 * `wait` makes the compute stream wait for it. The host never blocks on a
 * collective (except when NCCL_EVENTS collectives are in flight, below).
 *
 * Completion events come from a pool of NCCL_EVENTS made at init and are
 * recycled, so a collective allocates nothing. The pool is also the watchdog's
 * ring of in-flight collectives (slot i uses event i): a slot is reused only
 * after its collective completed, and when all are in flight the issuing
 * thread waits for the oldest (a host far ahead of its device). A request
 * keeps its event after the slot is reused: the event then marks a later
 * collective on the same in-order stream, so waiting on it is later, never
 * wrong.
 *
 * Watchdog: with ZT_COMM_TIMEOUT > 0 a thread wakes every NCCL_WATCH_MS,
 * retires completed collectives from the ring and looks at the oldest one
 * left. Its clock starts when its start event completes, that is when the
 * device reaches the collective: compute queued before it, or another
 * communicator's collective ahead of it on the comm stream, does not count.
 * When it has run longer than the limit, or NCCL reports an asynchronous
 * error while something is in flight, the thread prints the error, aborts the
 * NCCL communicator and ends the job. It cannot hand a status to the main
 * thread, because that thread may be blocked in a device synchronisation (a
 * backend check, a copy) that waits on the stuck collective and never
 * returns. It ends the job with MPI_Abort when MPI gave MPI_THREAD_MULTIPLE
 * (zt_world_init asks for it); otherwise no MPI call is allowed from this
 * thread, and it exits the process with status 1, which mpirun turns into the
 * end of the job.
 *
 * Warm-up: NCCL 2.22 and later connect peers lazily, at the first
 * collective of each kind. Init runs one tiny collective of each kind the
 * comm offers and agrees on the outcome, so a broken connection fails at
 * init with every rank told, not at some step with the others waiting; the
 * device memory NCCL takes for its buffers is then taken too, before the
 * trainer checks its headroom. The warm-up is not counted in the comm's
 * statistics.
 *
 * Memory: the comm owns its NCCL communicator, events, watchdog thread and
 * duplicated MPI communicator; zt_comm_free releases them. The compute and
 * comm streams belong to the backend.
 * Collective: zt_comm_nccl_init, the collectives, barrier, split.
 */
#include "engine/comm/comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/cuda/cuda_impl.h"
#include "engine/env.h"

#define NCCL_EVENTS 64
#define NCCL_WATCH_MS 100

/* A collective in flight, for the watchdog. t_started: nccl_now() when its
 * start event was first seen complete, 0 before. */
typedef struct {
    zt_comm_kind kind;
    uint64_t seq;
    int64_t numel;
    zt_dtype dt;
    double t_started;
} nccl_flight;

typedef struct {
    const zt_backend *be;
    int device;
    ncclComm_t nccl;
    bool abandon;                 /* init failed: abort the communicator, never destroy */
    cudaStream_t compute, stream; /* the backend's compute and comm streams */
    cudaEvent_t ready;            /* the compute stream's position when a collective is issued */
    /* Slot i's start and completion events. */
    cudaEvent_t starts[NCCL_EVENTS];
    cudaEvent_t events[NCCL_EVENTS];
    int n_events;
    /* In flight, oldest first: slots head .. head + count - 1 (mod NCCL_EVENTS).
     * Retiring moves head and lowers count, so the next free slot, head +
     * count, only changes when the issuing thread fills it. */
    nccl_flight ring[NCCL_EVENTS];
    int head, count;
    pthread_mutex_t lock; /* the ring and `stop` */
    pthread_cond_t wake;
    bool sync_ready, watching, stop;
    bool mpi_multiple; /* MPI may be called from the watchdog thread */
    pthread_t watchdog;
    zt_comm ident; /* name, ranks and limit for the watchdog's message */
    char host[64];
} nccl_impl;

static nccl_impl *nccl_of(zt_comm *c) { return (nccl_impl *)c->impl; }

static double nccl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static zt_status nccl_cuda(cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return ZT_OK;
    return zt_fail(ZT_ERR_DEVICE, "check the GPU with nvidia-smi", "%s failed: %s", what,
                   cudaGetErrorString(rc));
}

static zt_status nccl_check(const nccl_impl *n, ncclResult_t rc, const char *what)
{
    if (rc == ncclSuccess)
        return ZT_OK;
    const char *last = n && n->nccl ? ncclGetLastError(n->nccl) : "";
    return zt_fail(ZT_ERR_COMM,
                   "a peer rank may have died; check the other ranks' output (NCCL_DEBUG=WARN "
                   "tells more)",
                   "%s failed: %s%s%s", what, ncclGetErrorString(rc), last && *last ? ": " : "",
                   last ? last : "");
}

/* The communicator's asynchronous error (a failed collective, a dead peer). */
static ncclResult_t nccl_async(const nccl_impl *n)
{
    ncclResult_t async = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(n->nccl, &async);
    if (rc != ncclSuccess)
        return rc;
    return async == ncclInProgress ? ncclSuccess : async;
}

static zt_status nccl_type(zt_dtype dt, ncclDataType_t *type)
{
    switch (dt) {
    case ZT_F32:
        *type = ncclFloat32;
        return ZT_OK;
    case ZT_F16:
        *type = ncclFloat16;
        return ZT_OK;
    case ZT_BF16:
        *type = ncclBfloat16;
        return ZT_OK;
    default:
        return zt_fail(ZT_ERR_INTERNAL, "", "collective on unknown dtype %d", (int)dt);
    }
}

/* ---- The ring of in-flight collectives ---- */

/* Retires completed collectives from the head; lock held. A collective whose
 * event reports a device error is retired too: that error reaches the main
 * thread through the backend's check, with the failing op's name. */
static bool nccl_event_done(cudaEvent_t ev)
{
    cudaError_t rc = cudaEventQuery(ev);
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* "not ready" is not an error to keep */
        return false;
    }
    return true;
}

static void nccl_ring_retire(nccl_impl *n)
{
    while (n->count > 0 && nccl_event_done(n->events[n->head])) {
        n->head = (n->head + 1) % NCCL_EVENTS;
        n->count--;
    }
}

/* Waits until a slot is free: all NCCL_EVENTS in flight means the host is
 * that far ahead of its device, and waiting for the oldest costs nothing the
 * device was not going to take anyway. If it never completes, the watchdog
 * ends the job. */
static zt_status nccl_ring_room(nccl_impl *n)
{
    for (;;) {
        pthread_mutex_lock(&n->lock);
        nccl_ring_retire(n);
        cudaEvent_t oldest = n->count == NCCL_EVENTS ? n->events[n->head] : NULL;
        pthread_mutex_unlock(&n->lock);
        if (!oldest)
            return ZT_OK;
        ZT_TRY(nccl_cuda(cudaEventSynchronize(oldest), "waiting for the oldest collective"));
    }
}

/* ---- Issuing ---- */

/* Counts the collective, takes its sequence number, makes room in the ring,
 * orders the comm stream after the compute stream's work so far and records
 * the start event of the slot the collective will take. */
static zt_status nccl_pre(zt_comm *c, zt_comm_kind kind, int64_t numel, zt_dtype dt,
                          ncclDataType_t *type)
{
    nccl_impl *n = nccl_of(c);
    ZT_TRY(nccl_type(dt, type));
    ZT_TRY(nccl_ring_room(n));
    if (c->size > 1) {
        c->bytes[kind] += (uint64_t)numel * zt_dtype_size(dt);
        c->calls[kind] += 1;
    }
    c->seq++;
    ZT_TRY(nccl_cuda(cudaEventRecord(n->ready, n->compute), "recording the compute stream"));
    ZT_TRY(nccl_cuda(cudaStreamWaitEvent(n->stream, n->ready, 0),
                     "ordering the comm stream after the compute stream"));
    pthread_mutex_lock(&n->lock);
    int slot = (n->head + n->count) % NCCL_EVENTS;
    pthread_mutex_unlock(&n->lock);
    return nccl_cuda(cudaEventRecord(n->starts[slot], n->stream),
                     "recording a collective's start");
}

/* Records the completion event into the next ring slot and either orders the
 * compute stream after it (blocking) or hands it to the request. */
static zt_status nccl_post(zt_comm *c, ncclResult_t issued, const char *what,
                           zt_comm_kind kind, int64_t numel, zt_dtype dt, zt_comm_req *req)
{
    nccl_impl *n = nccl_of(c);
    ZT_TRY(nccl_check(n, issued, what));
    pthread_mutex_lock(&n->lock);
    int slot = (n->head + n->count) % NCCL_EVENTS;
    cudaEvent_t ev = n->events[slot];
    cudaError_t rc = cudaEventRecord(ev, n->stream);
    if (rc == cudaSuccess) {
        n->ring[slot] = (nccl_flight){.kind = kind, .seq = c->seq, .numel = numel, .dt = dt};
        n->count++;
    }
    pthread_mutex_unlock(&n->lock);
    ZT_TRY(nccl_cuda(rc, "recording a collective's completion"));
    if (!req)
        return nccl_cuda(cudaStreamWaitEvent(n->compute, ev, 0),
                         "ordering the compute stream after a collective");
    zt_comm_req_describe(req, kind, c->seq, numel, dt);
    req->event = ev;
    req->pending = true;
    return ZT_OK;
}

static ncclRedOp_t nccl_op(zt_red_op op) { return op == ZT_RED_MAX ? ncclMax : ncclSum; }

static zt_status nccl_all_reduce(zt_comm *c, void *buf, int64_t numel, zt_dtype dt,
                                 zt_red_op op, zt_comm_req *req)
{
    nccl_impl *n = nccl_of(c);
    ncclDataType_t type;
    ZT_TRY(nccl_pre(c, ZT_COMM_ALL_REDUCE, numel, dt, &type));
    ncclResult_t rc =
        ncclAllReduce(buf, buf, (size_t)numel, type, nccl_op(op), n->nccl, n->stream);
    return nccl_post(c, rc, "ncclAllReduce", ZT_COMM_ALL_REDUCE, numel, dt, req);
}

static zt_status nccl_reduce_scatter(zt_comm *c, const void *send, void *recv,
                                     int64_t recv_numel, zt_dtype dt, zt_red_op op,
                                     zt_comm_req *req)
{
    nccl_impl *n = nccl_of(c);
    ncclDataType_t type;
    int64_t total = recv_numel * c->size;
    ZT_TRY(nccl_pre(c, ZT_COMM_REDUCE_SCATTER, total, dt, &type));
    ncclResult_t rc = ncclReduceScatter(send, recv, (size_t)recv_numel, type, nccl_op(op),
                                        n->nccl, n->stream);
    return nccl_post(c, rc, "ncclReduceScatter", ZT_COMM_REDUCE_SCATTER, total, dt, req);
}

/* NCCL runs in place when send is this rank's slot of recv, as comm.h allows. */
static zt_status nccl_all_gather(zt_comm *c, const void *send, void *recv, int64_t send_numel,
                                 zt_dtype dt, zt_comm_req *req)
{
    nccl_impl *n = nccl_of(c);
    ncclDataType_t type;
    int64_t total = send_numel * c->size;
    ZT_TRY(nccl_pre(c, ZT_COMM_ALL_GATHER, total, dt, &type));
    ncclResult_t rc = ncclAllGather(send, recv, (size_t)send_numel, type, n->nccl, n->stream);
    return nccl_post(c, rc, "ncclAllGather", ZT_COMM_ALL_GATHER, total, dt, req);
}

static zt_status nccl_broadcast(zt_comm *c, void *buf, int64_t numel, zt_dtype dt, int root,
                                zt_comm_req *req)
{
    nccl_impl *n = nccl_of(c);
    ncclDataType_t type;
    ZT_TRY(nccl_pre(c, ZT_COMM_BROADCAST, numel, dt, &type));
    ncclResult_t rc = ncclBroadcast(buf, buf, (size_t)numel, type, root, n->nccl, n->stream);
    return nccl_post(c, rc, "ncclBroadcast", ZT_COMM_BROADCAST, numel, dt, req);
}

/* Grouped point-to-point: one send and one receive per peer (itself
 * included), which NCCL runs as one all-to-all. */
static zt_status nccl_all_to_all(zt_comm *c, const void *send, void *recv, int64_t numel,
                                 zt_dtype dt, zt_comm_req *req)
{
    nccl_impl *n = nccl_of(c);
    ncclDataType_t type;
    int64_t total = numel * c->size;
    ZT_TRY(nccl_pre(c, ZT_COMM_ALL_TO_ALL, total, dt, &type));
    size_t block = (size_t)numel * zt_dtype_size(dt);
    ncclResult_t rc = ncclGroupStart();
    for (int q = 0; q < c->size && rc == ncclSuccess; q++) {
        rc = ncclSend((const char *)send + q * block, (size_t)numel, type, q, n->nccl,
                      n->stream);
        if (rc == ncclSuccess)
            rc = ncclRecv((char *)recv + q * block, (size_t)numel, type, q, n->nccl, n->stream);
    }
    ncclResult_t ended = ncclGroupEnd();
    if (rc == ncclSuccess)
        rc = ended;
    return nccl_post(c, rc, "ncclSend/ncclRecv (all_to_all)", ZT_COMM_ALL_TO_ALL, total, dt,
                     req);
}

/* One NCCL group, so its sends and receives progress together. nccl_pre
 * counts the first transfer under its kind; the others are counted here. */
static zt_status nccl_send_recv(zt_comm *c, const zt_comm_xfer *x, int n, zt_comm_req *req)
{
    ZT_TRY(zt_comm_xfers_check(c, x, n));
    nccl_impl *nn = nccl_of(c);
    ncclDataType_t types[ZT_COMM_MAX_XFERS];
    int64_t total = 0;
    bool recv = false;
    for (int i = 0; i < n; i++) {
        ZT_TRY(nccl_type(x[i].dt, &types[i]));
        total += x[i].numel;
        recv = recv || x[i].recv;
    }
    ZT_TRY(nccl_pre(c, x[0].recv ? ZT_COMM_RECV : ZT_COMM_SEND, x[0].numel, x[0].dt, &types[0]));
    for (int i = 1; i < n; i++) {
        zt_comm_kind k = x[i].recv ? ZT_COMM_RECV : ZT_COMM_SEND;
        c->bytes[k] += (uint64_t)x[i].numel * zt_dtype_size(x[i].dt);
        c->calls[k] += 1;
    }
    ncclResult_t rc = ncclGroupStart();
    for (int i = 0; i < n && rc == ncclSuccess; i++)
        rc = x[i].recv ? ncclRecv(x[i].buf, (size_t)x[i].numel, types[i], x[i].peer, nn->nccl,
                                  nn->stream)
                       : ncclSend(x[i].buf, (size_t)x[i].numel, types[i], x[i].peer, nn->nccl,
                                  nn->stream);
    ncclResult_t end = ncclGroupEnd();
    if (rc == ncclSuccess)
        rc = end;
    return nccl_post(c, rc, "ncclSend/ncclRecv", recv ? ZT_COMM_RECV : ZT_COMM_SEND, total,
                     x[0].dt, req);
}

static zt_status nccl_barrier(zt_comm *c)
{
    nccl_impl *n = nccl_of(c);
    ZT_TRY(nccl_cuda(cudaStreamSynchronize(n->stream), "synchronising the comm stream"));
    ZT_TRY(nccl_check(n, nccl_async(n), "the NCCL communicator"));
    if (MPI_Barrier(c->mpi) != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "a peer rank may have died; check the other ranks' output",
                       "MPI_Barrier of the NCCL comm failed");
    return ZT_OK;
}

/* Not complete while NCCL reports an error: `wait` returns it. */
static bool nccl_test(zt_comm *c, zt_comm_req *req)
{
    if (!req->pending)
        return true;
    if (nccl_async(nccl_of(c)) != ncclSuccess)
        return false;
    cudaError_t rc = cudaEventQuery((cudaEvent_t)req->event);
    if (rc == cudaErrorNotReady)
        (void)cudaGetLastError(); /* "not ready" is not an error to keep */
    if (rc != cudaSuccess)
        return false;
    req->pending = false;
    return true;
}

static zt_status nccl_wait(zt_comm *c, zt_comm_req *req)
{
    if (!req->pending)
        return ZT_OK;
    nccl_impl *n = nccl_of(c);
    req->pending = false;
    ZT_TRY(nccl_check(n, nccl_async(n), zt_comm_kind_name(req->kind)));
    return nccl_cuda(cudaStreamWaitEvent(n->compute, (cudaEvent_t)req->event, 0),
                     "ordering the compute stream after a collective");
}

static void nccl_abort(zt_comm *c, int code)
{
    nccl_impl *n = nccl_of(c);
    if (n && n->nccl)
        ncclCommAbort(n->nccl);
    MPI_Abort(c->mpi, code);
}

/* ---- The watchdog thread ---- */

/* Prints the failure the way cmd/ prints errors and ends the job; does not
 * return. */
static void nccl_watch_fail(nccl_impl *n)
{
    int rank = zt_status_rank() >= 0 ? zt_status_rank() : n->ident.rank;
    fprintf(stderr, "[rank %d %s] error: %s\n", rank, n->host, zt_status_message());
    if (zt_status_hint()[0])
        fprintf(stderr, "hint: %s\n", zt_status_hint());
    fflush(stderr);
    ncclCommAbort(n->nccl);
    if (n->mpi_multiple)
        MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void *nccl_watch(void *arg)
{
    nccl_impl *n = arg;
    /* Events are queried on their device, which is per thread. */
    cudaSetDevice(n->device);
    bool failed = false;
    pthread_mutex_lock(&n->lock);
    while (!n->stop && !failed) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += NCCL_WATCH_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&n->wake, &n->lock, &until);
        if (n->stop)
            break;
        nccl_ring_retire(n);
        /* Only with something in flight: n->nccl is set before the first
         * collective enters the ring, under this lock. */
        if (n->count == 0)
            continue;
        nccl_flight *head = &n->ring[n->head];
        if (head->t_started == 0 && nccl_event_done(n->starts[n->head]))
            head->t_started = nccl_now();
        nccl_flight f = *head;
        double waited = f.t_started > 0 ? nccl_now() - f.t_started : 0;
        ncclResult_t async = nccl_async(n);
        if (async != ncclSuccess) {
            zt_fail(ZT_ERR_COMM, "a peer rank may have died; check the other ranks' output",
                    "NCCL reported \"%s\" while %s #%llu (%lld elements, %s) was in flight on "
                    "rank %d of %d",
                    ncclGetErrorString(async), zt_comm_kind_name(f.kind),
                    (unsigned long long)f.seq, (long long)f.numel, zt_dtype_name(f.dt),
                    n->ident.rank, n->ident.size);
            failed = true;
        } else if (waited > n->ident.timeout_s) {
            zt_comm_timeout_fail(&n->ident, f.kind, f.seq, f.numel, f.dt, waited);
            failed = true;
        }
    }
    pthread_mutex_unlock(&n->lock);
    if (failed)
        nccl_watch_fail(n);
    return NULL;
}

/* ---- Setup and teardown ---- */

/* Everything but the NCCL communicator: the comm stream, the events, the
 * ring's lock and the watchdog. Runs on each rank after ncclCommInitRank
 * succeeded there; zt_comm_bootstrap then agrees on the outcome. */
static zt_status nccl_setup(nccl_impl *n)
{
    n->compute = zt_backend_cuda_stream(n->be);
    n->stream = zt_backend_cuda_comm_stream(n->be);
    ZT_TRY(nccl_cuda(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming),
                     "creating the comm events"));
    for (; n->n_events < NCCL_EVENTS; n->n_events++) {
        int i = n->n_events;
        cudaError_t rc = cudaEventCreateWithFlags(&n->starts[i], cudaEventDisableTiming);
        if (rc == cudaSuccess &&
            (rc = cudaEventCreateWithFlags(&n->events[i], cudaEventDisableTiming)) != cudaSuccess)
            cudaEventDestroy(n->starts[i]);
        ZT_TRY(nccl_cuda(rc, "creating the comm events"));
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&n->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return zt_fail(ZT_ERR_INTERNAL, "", "pthread_cond_init failed: %s", strerror(rc));
    if ((rc = pthread_mutex_init(&n->lock, NULL)) != 0) {
        pthread_cond_destroy(&n->wake);
        return zt_fail(ZT_ERR_INTERNAL, "", "pthread_mutex_init failed: %s", strerror(rc));
    }
    n->sync_ready = true;
    if (n->ident.timeout_s > 0) {
        if ((rc = pthread_create(&n->watchdog, NULL, nccl_watch, n)) != 0)
            return zt_fail(ZT_ERR_INTERNAL, "", "cannot start the NCCL watchdog: %s",
                           strerror(rc));
        n->watching = true;
    }
    return ZT_OK;
}

/* One tiny collective of each kind, synchronised, then the statistics reset
 * (the header's "Warm-up"). The watchdog covers it like any collective. */
static zt_status nccl_warm_up(zt_comm *c)
{
    nccl_impl *n = nccl_of(c);
    float *buf = NULL;
    size_t numel = 2 * (size_t)c->size + 1;
    ZT_TRY(nccl_cuda(cudaMalloc((void **)&buf, numel * sizeof *buf),
                     "allocating the NCCL warm-up buffer"));
    zt_status st = nccl_cuda(cudaMemsetAsync(buf, 0, numel * sizeof *buf, n->compute),
                             "clearing the NCCL warm-up buffer");
    if (st == ZT_OK)
        st = nccl_all_reduce(c, buf, 1, ZT_F32, ZT_RED_SUM, NULL);
    if (st == ZT_OK)
        st = nccl_all_gather(c, buf + c->rank, buf, 1, ZT_F32, NULL);
    if (st == ZT_OK)
        st = nccl_reduce_scatter(c, buf, buf + c->size, 1, ZT_F32, ZT_RED_SUM, NULL);
    if (st == ZT_OK)
        st = nccl_broadcast(c, buf, 1, ZT_F32, 0, NULL);
    /* Connects every peer pair point to point (its buffers too). */
    if (st == ZT_OK)
        st = nccl_all_to_all(c, buf, buf + c->size, 1, ZT_F32, NULL);
    if (st == ZT_OK)
        st = nccl_cuda(cudaStreamSynchronize(n->compute), "the NCCL warm-up");
    if (st == ZT_OK)
        st = nccl_check(n, nccl_async(n), "the NCCL warm-up");
    cudaFree(buf);
    c->seq = 0;
    memset(c->bytes, 0, sizeof c->bytes);
    memset(c->calls, 0, sizeof c->calls);
    return st;
}

static zt_status nccl_make_id(void *id, void *ctx)
{
    return nccl_check(ctx, ncclGetUniqueId((ncclUniqueId *)id), "ncclGetUniqueId");
}

/* ncclCommInitRank is a rendezvous: a rank that failed before it would leave
 * its peers waiting inside it, where no agreement reaches them. So nothing
 * that can fail comes first except cudaSetDevice on the backend's device, which
 * the backend has already made current and used; the rest of the setup comes
 * after, where the bootstrap's agreement covers it. */
static zt_status nccl_join(const void *id, int nranks, int rank, void *ctx)
{
    nccl_impl *n = ctx;
    ZT_TRY(nccl_cuda(cudaSetDevice(n->device), "selecting the GPU for NCCL"));
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclResult_t rc = ncclCommInitRank(&n->nccl, nranks, uid, rank);
    if (rc != ncclSuccess) {
        n->nccl = NULL;
        return nccl_check(n, rc, "ncclCommInitRank");
    }
    return nccl_setup(n);
}

static void nccl_free(zt_comm *c)
{
    nccl_impl *n = nccl_of(c);
    if (n) {
        /* Collectives in flight finish first, still under the watchdog. */
        if (n->stream && !n->abandon)
            cudaStreamSynchronize(n->stream);
        if (n->watching) {
            pthread_mutex_lock(&n->lock);
            n->stop = true;
            pthread_cond_signal(&n->wake);
            pthread_mutex_unlock(&n->lock);
            pthread_join(n->watchdog, NULL);
        }
        /* A failed init may have peers without a communicator: abort is the
         * local teardown, destroy may wait for them. */
        if (n->nccl && n->abandon)
            ncclCommAbort(n->nccl);
        else if (n->nccl)
            ncclCommDestroy(n->nccl);
        for (int i = 0; i < n->n_events; i++) {
            cudaEventDestroy(n->starts[i]);
            cudaEventDestroy(n->events[i]);
        }
        if (n->ready)
            cudaEventDestroy(n->ready);
        if (n->sync_ready) {
            pthread_cond_destroy(&n->wake);
            pthread_mutex_destroy(&n->lock);
        }
        free(n);
        c->impl = NULL;
    }
    if (c->mpi && c->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&c->mpi);
}

/* A fresh bootstrap over the MPI split rather than ncclCommSplit: every NCCL
 * communicator then comes from the one bootstrap, whose sequencing and failure
 * agreement are tested without a GPU, while ncclCommSplit is a blocking
 * rendezvous over the parent where a rank that failed before calling it (its
 * MPI split, its stream) would leave the others waiting. The price, one unique
 * id broadcast and a topology detection per group, is paid a few times per
 * run at init. */
static zt_status nccl_split(zt_comm *c, int color, int key, zt_comm *out)
{
    return zt_comm_split_as(c, color, key, out, zt_comm_nccl_init, nccl_of(c)->be);
}

static const zt_comm_ops zt_comm_nccl_ops = {
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .all_to_all = nccl_all_to_all,
    .barrier = nccl_barrier,
    .send_recv = nccl_send_recv,
    .test = nccl_test,
    .wait = nccl_wait,
    .abort = nccl_abort,
    .split = nccl_split,
    .free = nccl_free,
};

bool zt_comm_nccl_built(void) { return true; }

zt_status zt_comm_nccl_init(zt_comm *c, MPI_Comm parent, const zt_backend *be)
{
    memset(c, 0, sizeof *c);
    if (!be || be->kind != ZT_DEVICE_CUDA)
        return zt_fail(ZT_ERR_USAGE, "use --comm mpi, or --device cuda on a machine with GPUs",
                       "--comm nccl needs --device cuda (the device is %s)",
                       be && be->name ? be->name : "none");
    double timeout = zt_env_get()->comm_timeout_s;
    /* Nothing this rank alone can fail comes before the collective dup: an
     * allocation that failed is agreed on over the dup, which every rank of
     * parent is in. */
    nccl_impl *n = calloc(1, sizeof *n);
    if (MPI_Comm_dup(parent, &c->mpi) != MPI_SUCCESS) {
        free(n);
        c->mpi = MPI_COMM_NULL;
        return zt_fail(ZT_ERR_COMM, "check the MPI installation", "MPI_Comm_dup failed");
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    zt_status st = zt_comm_agree(
        c->mpi, n ? ZT_OK : zt_fail(ZT_ERR_OOM, "", "cannot allocate the NCCL comm"),
        "allocating the NCCL comm");
    if (st != ZT_OK) {
        free(n);
        MPI_Comm_free(&c->mpi);
        memset(c, 0, sizeof *c);
        return st;
    }
    n->be = be;
    n->device = ((const zt_cuda_impl *)be->impl)->device;
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    n->mpi_multiple = level == MPI_THREAD_MULTIPLE;
    c->name = "nccl";
    c->ops = &zt_comm_nccl_ops;
    c->impl = n;
    /* Only the main thread calls MPI here (the collectives are NCCL's):
     * the caller's own MPI calls can share the communicator. */
    c->side = c->mpi;
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    c->timeout_s = timeout;
    n->ident = (zt_comm){
        .name = c->name, .rank = c->rank, .size = c->size, .timeout_s = timeout};
    if (gethostname(n->host, sizeof n->host - 1) != 0)
        snprintf(n->host, sizeof n->host, "unknown");
    ncclUniqueId id;
    zt_comm_bootstrap_fns fns = {.id_bytes = sizeof id,
                                 .make_id = nccl_make_id,
                                 .join = nccl_join,
                                 .ctx = n};
    st = zt_comm_bootstrap(c->mpi, &fns, &id);
    if (st == ZT_OK)
        st = zt_comm_agree(c->mpi, nccl_warm_up(c), "the NCCL warm-up");
    if (st != ZT_OK) {
        n->abandon = true;
        nccl_free(c);
        memset(c, 0, sizeof *c);
    }
    return st;
}
