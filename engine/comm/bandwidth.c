/*
 * bandwidth: nccl-tests' algbw and busbw of one communicator
 * (engine/comm/bandwidth.h).
 */
#include "engine/comm/bandwidth.h"

#include <stdlib.h>
#include <string.h>

/* Untimed calls after the checked one (nccl-tests warms up with 5). */
#define BW_WARM_UP 4

const zt_comm_kind zt_bw_ops[ZT_BW_OPS] = {ZT_COMM_ALL_REDUCE, ZT_COMM_ALL_GATHER,
                                           ZT_COMM_REDUCE_SCATTER};

double zt_bw_bus_factor(zt_comm_kind k, int n)
{
    if (n < 1)
        return 0;
    if (k == ZT_COMM_ALL_REDUCE)
        return 2.0 * (n - 1) / n;
    return (double)(n - 1) / n;
}

int zt_bw_iters(int64_t bytes)
{
    int64_t it = bytes > 0 ? ((int64_t)64 << 20) / bytes : 20;
    return it < 2 ? 2 : it > 20 ? 20 : (int)it;
}

int zt_bw_n_rows(int64_t min_bytes, int64_t max_bytes)
{
    int n = 0;
    for (int64_t s = min_bytes; s > 0 && s <= max_bytes; s *= 2)
        n++;
    return n;
}

/* Elements of a row of nominal size s over n ranks: a multiple of n. */
static int64_t bw_elems(int64_t s, int n)
{
    int64_t per = s / 4 / n;
    return (per > 0 ? per : 1) * n;
}

/* Sets n floats of device memory p to v, through a host chunk. */
static void bw_fill(const zt_backend *be, float *p, int64_t n, float v)
{
    enum { CHUNK = 1 << 14 };
    static float chunk[CHUNK];
    for (int i = 0; i < CHUNK; i++)
        chunk[i] = v;
    for (int64_t off = 0; off < n; off += CHUNK) {
        int64_t k = n - off < CHUNK ? n - off : CHUNK;
        be->copy_h2d(be, p + off, chunk, (size_t)k * sizeof *chunk);
    }
}

static float bw_at(const zt_backend *be, const float *p, int64_t i)
{
    float v = 0;
    be->copy_d2h(be, &v, p + i, sizeof v);
    return v;
}

/* One call of collective k over `elems` elements: a and b are the two
 * buffers (all_reduce in place on a; all_gather a -> b; reduce_scatter
 * b -> a). */
static zt_status bw_call(zt_comm *c, zt_comm_kind k, float *a, float *b, int64_t elems)
{
    int64_t per = elems / c->size;
    switch (k) {
    case ZT_COMM_ALL_REDUCE:
        return c->ops->all_reduce(c, a, elems, ZT_F32, ZT_RED_SUM, NULL);
    case ZT_COMM_ALL_GATHER:
        return c->ops->all_gather(c, a, b, per, ZT_F32, NULL);
    default:
        return c->ops->reduce_scatter(c, b, a, per, ZT_F32, ZT_RED_SUM, NULL);
    }
}

/* The warm-up call, from inputs of rank + 1, and its result. */
static zt_status bw_warm_up(zt_comm *c, const zt_backend *be, zt_comm_kind k, float *a, float *b,
                            int64_t elems)
{
    int n = c->size;
    int64_t per = elems / n;
    float mine = (float)(c->rank + 1), sum = (float)n * (float)(n + 1) / 2;
    bw_fill(be, k == ZT_COMM_REDUCE_SCATTER ? b : a, k == ZT_COMM_ALL_GATHER ? per : elems, mine);
    ZT_TRY(bw_call(c, k, a, b, elems));
    be->sync(be);
    float got[2], want[2];
    if (k == ZT_COMM_ALL_GATHER) {
        got[0] = bw_at(be, b, 0), got[1] = bw_at(be, b, elems - 1);
        want[0] = 1, want[1] = (float)n;
    } else {
        int64_t last = (k == ZT_COMM_ALL_REDUCE ? elems : per) - 1;
        got[0] = bw_at(be, a, 0), got[1] = bw_at(be, a, last);
        want[0] = want[1] = sum;
    }
    if (got[0] != want[0] || got[1] != want[1])
        return zt_fail(ZT_ERR_COMM, "the communicator returns wrong results: check the MPI/NCCL "
                                    "installation and the network",
                       "%s of %lld bytes over %d ranks gave %g and %g at its ends, expected %g "
                       "and %g (rank %d)",
                       zt_comm_kind_name(k), (long long)(elems * 4), n, got[0], got[1], want[0],
                       want[1], c->rank);
    return ZT_OK;
}

static zt_status bw_row(zt_comm *c, const zt_backend *be, float *a, float *b, zt_bw_row *row)
{
    int64_t elems = bw_elems(row->bytes, c->size);
    row->bytes = elems * 4;
    row->iters = zt_bw_iters(row->bytes);
    for (int o = 0; o < ZT_BW_OPS; o++) {
        zt_comm_kind k = zt_bw_ops[o];
        /* A wrong result on one rank stops them all before the timed calls. */
        ZT_TRY(zt_comm_agree(c->side, bw_warm_up(c, be, k, a, b, elems),
                             "the bandwidth warm-up"));
        for (int i = 0; i < BW_WARM_UP; i++)
            ZT_TRY(bw_call(c, k, a, b, elems));
        ZT_TRY(c->ops->barrier(c));
        double t0 = MPI_Wtime();
        for (int i = 0; i < row->iters; i++)
            ZT_TRY(bw_call(c, k, a, b, elems));
        be->sync(be);
        double t = (MPI_Wtime() - t0) / row->iters;
        if (MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, c->side) != MPI_SUCCESS)
            return zt_fail(ZT_ERR_COMM, "", "cannot agree on the time of %s",
                           zt_comm_kind_name(k));
        row->seconds[o] = t;
        row->algbw[o] = t > 0 ? (double)row->bytes / t / 1e9 : 0;
        row->busbw[o] = row->algbw[o] * zt_bw_bus_factor(k, c->size);
    }
    return ZT_OK;
}

zt_status zt_bw_measure(zt_comm *c, const zt_backend *be, int64_t min_bytes, int64_t max_bytes,
                        zt_bw_row *rows)
{
    int n = zt_bw_n_rows(min_bytes, max_bytes);
    if (n == 0)
        return ZT_OK;
    size_t bytes = (size_t)bw_elems((int64_t)min_bytes << (n - 1), c->size) * 4;
    void *a = NULL, *b = NULL;
    zt_status st = be->alloc(be, bytes, &a);
    if (st == ZT_OK)
        st = be->alloc(be, bytes, &b);
    /* Every rank learns whether every rank has its buffers before the first
     * collective. */
    st = zt_comm_agree(c->side, st, "allocating the bandwidth buffers");
    for (int i = 0; i < n && st == ZT_OK; i++) {
        memset(&rows[i], 0, sizeof rows[i]);
        rows[i].bytes = min_bytes << i;
        st = bw_row(c, be, a, b, &rows[i]);
    }
    if (a)
        be->free(be, a);
    if (b)
        be->free(be, b);
    return st;
}
