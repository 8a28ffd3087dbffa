#include "comm.h"

#include <string.h>

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

static MPI_Op comm_op(zt_red_op op) { return op == ZT_RED_MAX ? MPI_MAX : MPI_SUM; }

/* A world of one rank moves nothing, so it counts nothing. */
static void comm_count(zt_comm *c, zt_comm_kind k, int64_t numel)
{
    if (c->size == 1)
        return;
    c->bytes[k] += (uint64_t)numel * sizeof(float);
    c->calls[k] += 1;
}

static zt_status comm_parts_check(int64_t numel, int64_t max_parts, const char *what)
{
    if ((numel + ZT_COMM_MAX_COUNT - 1) / ZT_COMM_MAX_COUNT > max_parts)
        return zt_fail(ZT_ERR_UNSUPPORTED, "use smaller buckets",
                       "%s of %lld elements exceeds what one request can carry", what,
                       (long long)numel);
    return ZT_OK;
}

static zt_status mpi_all_reduce(zt_comm *c, float *buf, int64_t numel, zt_red_op op,
                                zt_comm_req *req)
{
    ZT_TRY(comm_parts_check(numel, ZT_COMM_REQ_PARTS, "all_reduce"));
    comm_count(c, ZT_COMM_ALL_REDUCE, numel);
    if (req)
        req->n_parts = 0;
    for (int64_t off = 0; off < numel; off += ZT_COMM_MAX_COUNT) {
        int n = (int)(numel - off < ZT_COMM_MAX_COUNT ? numel - off : ZT_COMM_MAX_COUNT);
        int rc = req ? MPI_Iallreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, comm_op(op), c->mpi,
                                      &req->parts[req->n_parts++])
                     : MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, comm_op(op), c->mpi);
        ZT_TRY(comm_check(rc, "all_reduce", numel));
    }
    return ZT_OK;
}

static zt_status mpi_reduce_scatter(zt_comm *c, const float *send, float *recv,
                                    int64_t recv_numel, zt_red_op op, zt_comm_req *req)
{
    ZT_TRY(comm_parts_check(recv_numel, 1, "reduce_scatter"));
    comm_count(c, ZT_COMM_REDUCE_SCATTER, recv_numel * c->size);
    int n = (int)recv_numel;
    int rc;
    if (req) {
        req->n_parts = 1;
        rc = MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, comm_op(op), c->mpi,
                                       &req->parts[0]);
    } else {
        rc = MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, comm_op(op), c->mpi);
    }
    return comm_check(rc, "reduce_scatter", recv_numel * c->size);
}

static zt_status mpi_all_gather(zt_comm *c, const float *send, float *recv, int64_t send_numel,
                                zt_comm_req *req)
{
    ZT_TRY(comm_parts_check(send_numel, 1, "all_gather"));
    comm_count(c, ZT_COMM_ALL_GATHER, send_numel * c->size);
    const void *src = send == recv + (int64_t)c->rank * send_numel ? MPI_IN_PLACE : send;
    int n = (int)send_numel;
    int rc;
    if (req) {
        req->n_parts = 1;
        rc = MPI_Iallgather(src, n, MPI_FLOAT, recv, n, MPI_FLOAT, c->mpi, &req->parts[0]);
    } else {
        rc = MPI_Allgather(src, n, MPI_FLOAT, recv, n, MPI_FLOAT, c->mpi);
    }
    return comm_check(rc, "all_gather", send_numel * c->size);
}

static zt_status mpi_broadcast(zt_comm *c, float *buf, int64_t numel, int root, zt_comm_req *req)
{
    ZT_TRY(comm_parts_check(numel, ZT_COMM_REQ_PARTS, "broadcast"));
    comm_count(c, ZT_COMM_BROADCAST, numel);
    if (req)
        req->n_parts = 0;
    for (int64_t off = 0; off < numel; off += ZT_COMM_MAX_COUNT) {
        int n = (int)(numel - off < ZT_COMM_MAX_COUNT ? numel - off : ZT_COMM_MAX_COUNT);
        int rc = req ? MPI_Ibcast(buf + off, n, MPI_FLOAT, root, c->mpi,
                                  &req->parts[req->n_parts++])
                     : MPI_Bcast(buf + off, n, MPI_FLOAT, root, c->mpi);
        ZT_TRY(comm_check(rc, "broadcast", numel));
    }
    return ZT_OK;
}

static zt_status mpi_barrier(zt_comm *c) { return comm_check(MPI_Barrier(c->mpi), "barrier", 0); }

static bool mpi_test(zt_comm *c, zt_comm_req *req)
{
    (void)c;
    int done = 1;
    if (req->n_parts > 0)
        MPI_Testall(req->n_parts, req->parts, &done, MPI_STATUSES_IGNORE);
    if (done)
        req->n_parts = 0;
    return done != 0;
}

static zt_status mpi_wait(zt_comm *c, zt_comm_req *req)
{
    (void)c;
    int rc = req->n_parts > 0 ? MPI_Waitall(req->n_parts, req->parts, MPI_STATUSES_IGNORE)
                              : MPI_SUCCESS;
    req->n_parts = 0;
    return comm_check(rc, "wait", 0);
}

static void mpi_abort(zt_comm *c, int code) { MPI_Abort(c->mpi, code); }

static const zt_comm_ops zt_comm_mpi_ops = {
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .wait = mpi_wait,
    .abort = mpi_abort,
};

zt_status zt_comm_mpi_init(zt_comm *c, MPI_Comm parent)
{
    memset(c, 0, sizeof *c);
    c->name = "mpi";
    c->ops = &zt_comm_mpi_ops;
    ZT_TRY(comm_check(MPI_Comm_dup(parent, &c->mpi), "MPI_Comm_dup", 0));
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    return ZT_OK;
}

void zt_comm_free(zt_comm *c)
{
    if (c->mpi && c->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&c->mpi);
    c->mpi = MPI_COMM_NULL;
}

const char *zt_comm_kind_name(zt_comm_kind k)
{
    static const char *names[ZT_COMM_NKINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast"};
    return k < ZT_COMM_NKINDS ? names[k] : "unknown";
}
