#include "comm.h"

#include <math.h>
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

static zt_status comm_parts_check(int64_t numel, int64_t max_parts, const char *what)
{
    if ((numel + ZT_COMM_MAX_COUNT - 1) / ZT_COMM_MAX_COUNT > max_parts)
        return zt_fail(ZT_ERR_UNSUPPORTED, "use smaller buckets",
                       "%s of %lld elements exceeds what one request can carry", what,
                       (long long)numel);
    return ZT_OK;
}

static zt_status mpi_all_reduce(zt_comm *c, void *buf, int64_t numel, zt_dtype dt,
                                zt_red_op op, zt_comm_req *req)
{
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op mop = MPI_OP_NULL;
    ZT_TRY(comm_type(dt, &type));
    ZT_TRY(comm_op(dt, op, &mop));
    ZT_TRY(comm_parts_check(numel, ZT_COMM_REQ_PARTS, "all_reduce"));
    comm_count(c, ZT_COMM_ALL_REDUCE, numel, dt);
    if (req)
        req->n_parts = 0;
    size_t size = zt_dtype_size(dt);
    for (int64_t off = 0; off < numel; off += ZT_COMM_MAX_COUNT) {
        int n = (int)(numel - off < ZT_COMM_MAX_COUNT ? numel - off : ZT_COMM_MAX_COUNT);
        char *part = (char *)buf + off * (int64_t)size;
        int rc = req ? MPI_Iallreduce(MPI_IN_PLACE, part, n, type, mop, c->mpi,
                                      &req->parts[req->n_parts++])
                     : MPI_Allreduce(MPI_IN_PLACE, part, n, type, mop, c->mpi);
        ZT_TRY(comm_check(rc, "all_reduce", numel));
    }
    return ZT_OK;
}

static zt_status mpi_reduce_scatter(zt_comm *c, const void *send, void *recv, int64_t recv_numel,
                                    zt_dtype dt, zt_red_op op, zt_comm_req *req)
{
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op mop = MPI_OP_NULL;
    ZT_TRY(comm_type(dt, &type));
    ZT_TRY(comm_op(dt, op, &mop));
    ZT_TRY(comm_parts_check(recv_numel, 1, "reduce_scatter"));
    comm_count(c, ZT_COMM_REDUCE_SCATTER, recv_numel * c->size, dt);
    int n = (int)recv_numel;
    int rc;
    if (req) {
        req->n_parts = 1;
        rc = MPI_Ireduce_scatter_block(send, recv, n, type, mop, c->mpi, &req->parts[0]);
    } else {
        rc = MPI_Reduce_scatter_block(send, recv, n, type, mop, c->mpi);
    }
    return comm_check(rc, "reduce_scatter", recv_numel * c->size);
}

static zt_status mpi_all_gather(zt_comm *c, const void *send, void *recv, int64_t send_numel,
                                zt_dtype dt, zt_comm_req *req)
{
    MPI_Datatype type = MPI_DATATYPE_NULL;
    ZT_TRY(comm_type(dt, &type));
    ZT_TRY(comm_parts_check(send_numel, 1, "all_gather"));
    comm_count(c, ZT_COMM_ALL_GATHER, send_numel * c->size, dt);
    const char *slot =
        (const char *)recv + (int64_t)c->rank * send_numel * (int64_t)zt_dtype_size(dt);
    const void *src = send == slot ? MPI_IN_PLACE : send;
    int n = (int)send_numel;
    int rc;
    if (req) {
        req->n_parts = 1;
        rc = MPI_Iallgather(src, n, type, recv, n, type, c->mpi, &req->parts[0]);
    } else {
        rc = MPI_Allgather(src, n, type, recv, n, type, c->mpi);
    }
    return comm_check(rc, "all_gather", send_numel * c->size);
}

static zt_status mpi_broadcast(zt_comm *c, void *buf, int64_t numel, zt_dtype dt, int root,
                               zt_comm_req *req)
{
    MPI_Datatype type = MPI_DATATYPE_NULL;
    ZT_TRY(comm_type(dt, &type));
    ZT_TRY(comm_parts_check(numel, ZT_COMM_REQ_PARTS, "broadcast"));
    comm_count(c, ZT_COMM_BROADCAST, numel, dt);
    if (req)
        req->n_parts = 0;
    size_t size = zt_dtype_size(dt);
    for (int64_t off = 0; off < numel; off += ZT_COMM_MAX_COUNT) {
        int n = (int)(numel - off < ZT_COMM_MAX_COUNT ? numel - off : ZT_COMM_MAX_COUNT);
        char *part = (char *)buf + off * (int64_t)size;
        int rc = req ? MPI_Ibcast(part, n, type, root, c->mpi, &req->parts[req->n_parts++])
                     : MPI_Bcast(part, n, type, root, c->mpi);
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
