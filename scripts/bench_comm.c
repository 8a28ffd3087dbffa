/*
 * bench-comm: zerotrain's MPI communicator against plain MPI on the same
 * buffers, so a slowdown in engine/comm shows up as a ratio.
 *
 *     mpirun -np N build/bench-comm [--min-bytes B] [--max-bytes B] [--iters K]
 *
 * For each collective the trainer uses (all_reduce, reduce_scatter,
 * all_gather; fp32) and each size from min to max bytes (x4 steps), it times:
 *   mpi        the blocking MPI call (MPI_Allreduce, MPI_Reduce_scatter_block,
 *              MPI_Allgather): what Open MPI's tuned algorithms give;
 *   mpi-nb     the non-blocking MPI call and MPI_Wait;
 *   zt         zt_comm blocking (request NULL);
 *   zt-nb      zt_comm with a request, then wait.
 * Each cell is the median over K timed iterations (after 3 warm-up ones) of
 * the slowest rank's time, with a barrier before each. Prints a Markdown
 * table: time in microseconds and, for zt, the ratio to plain blocking MPI,
 * plus nccl-tests' bus bandwidth (GB/s) of the blocking MPI call: all_reduce
 * 2(n-1)/n x bytes / time, reduce_scatter and all_gather (n-1)/n x bytes /
 * time, bytes being the whole logical buffer.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/dtype.h"
#include "engine/status.h"

enum { KIND_AR, KIND_RS, KIND_AG, N_KINDS };
enum { WAY_MPI, WAY_MPI_NB, WAY_ZT, WAY_ZT_NB, N_WAYS };
static const char *kind_names[N_KINDS] = {"all_reduce", "reduce_scatter", "all_gather"};

typedef struct {
    zt_comm *zc;
    int rank, size;
    float *a, *b; /* send and receive, `bytes` each */
} bench;

static void die(const char *what)
{
    fprintf(stderr, "bench-comm: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* One collective of `n` floats (the whole logical buffer) one way. */
static void run_once(bench *B, int kind, int way, int64_t n)
{
    int per = (int)(n / B->size);
    MPI_Request rq;
    zt_comm_req zr;
    zt_comm_req *req = way == WAY_ZT_NB ? &zr : NULL;
    zt_status st = ZT_OK;
    switch (way * N_KINDS + kind) {
    case WAY_MPI * N_KINDS + KIND_AR:
        MPI_Allreduce(MPI_IN_PLACE, B->a, (int)n, MPI_FLOAT, MPI_SUM, B->zc->mpi);
        break;
    case WAY_MPI * N_KINDS + KIND_RS:
        MPI_Reduce_scatter_block(B->a, B->b, per, MPI_FLOAT, MPI_SUM, B->zc->mpi);
        break;
    case WAY_MPI * N_KINDS + KIND_AG:
        MPI_Allgather(B->a, per, MPI_FLOAT, B->b, per, MPI_FLOAT, B->zc->mpi);
        break;
    case WAY_MPI_NB * N_KINDS + KIND_AR:
        MPI_Iallreduce(MPI_IN_PLACE, B->a, (int)n, MPI_FLOAT, MPI_SUM, B->zc->mpi, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        break;
    case WAY_MPI_NB * N_KINDS + KIND_RS:
        MPI_Ireduce_scatter_block(B->a, B->b, per, MPI_FLOAT, MPI_SUM, B->zc->mpi, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        break;
    case WAY_MPI_NB * N_KINDS + KIND_AG:
        MPI_Iallgather(B->a, per, MPI_FLOAT, B->b, per, MPI_FLOAT, B->zc->mpi, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        break;
    default:
        if (kind == KIND_AR)
            st = B->zc->ops->all_reduce(B->zc, B->a, n, ZT_F32, ZT_RED_SUM, req);
        else if (kind == KIND_RS)
            st = B->zc->ops->reduce_scatter(B->zc, B->a, B->b, per, ZT_F32, ZT_RED_SUM, req);
        else
            st = B->zc->ops->all_gather(B->zc, B->a, B->b, per, ZT_F32, req);
        if (st == ZT_OK && req)
            st = B->zc->ops->wait(B->zc, req);
        if (st != ZT_OK)
            die(zt_status_message());
    }
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median over iters of the slowest rank's seconds. */
static double time_way(bench *B, int kind, int way, int64_t n, int iters, double *t)
{
    for (int i = 0; i < 3 + iters; i++) {
        MPI_Barrier(B->zc->mpi);
        double t0 = MPI_Wtime();
        run_once(B, kind, way, n);
        double dt = MPI_Wtime() - t0, worst = dt;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, B->zc->mpi);
        if (i >= 3)
            t[i - 3] = worst;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    return t[iters / 2];
}

static int64_t arg_i64(int argc, char **argv, const char *name, int64_t dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return strtoll(argv[i + 1], NULL, 10);
    return dflt;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    bench B = {0};
    zt_comm comm;
    if (zt_comm_mpi_init(&comm, MPI_COMM_WORLD) != ZT_OK)
        die(zt_status_message());
    B.zc = &comm;
    B.rank = comm.rank;
    B.size = comm.size;
    int64_t lo = arg_i64(argc, argv, "--min-bytes", 1024);
    int64_t hi = arg_i64(argc, argv, "--max-bytes", 64 << 20);
    int iters = (int)arg_i64(argc, argv, "--iters", 10);
    if (iters < 1 || lo < 4 * B.size || hi < lo)
        die("usage: bench-comm [--min-bytes B] [--max-bytes B] [--iters K]");
    B.a = malloc((size_t)hi);
    B.b = malloc((size_t)hi);
    double *t = malloc((size_t)iters * sizeof *t);
    if (!B.a || !B.b || !t)
        die("out of memory");
    memset(B.a, 0, (size_t)hi);
    memset(B.b, 0, (size_t)hi);
    if (B.rank == 0) {
        printf("bench-comm: %d ranks, fp32, median of %d (slowest rank), microseconds\n\n",
               B.size, iters);
        printf("| collective | bytes | mpi | mpi-nb | zt | zt-nb | zt / mpi | zt-nb / mpi "
               "| mpi busbw GB/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int kind = 0; kind < N_KINDS; kind++)
        for (int64_t bytes = lo; bytes <= hi; bytes *= 4) {
            int64_t n = bytes / 4 / B.size * B.size;
            double us[N_WAYS];
            for (int way = 0; way < N_WAYS; way++)
                us[way] = 1e6 * time_way(&B, kind, way, n, iters, t);
            double factor = kind == KIND_AR ? 2.0 * (B.size - 1) / B.size
                                            : (double)(B.size - 1) / B.size;
            if (B.rank == 0)
                printf("| %s | %lld | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n",
                       kind_names[kind], (long long)(n * 4), us[WAY_MPI], us[WAY_MPI_NB],
                       us[WAY_ZT], us[WAY_ZT_NB], us[WAY_ZT] / us[WAY_MPI],
                       us[WAY_ZT_NB] / us[WAY_MPI], factor * (double)(n * 4) / us[WAY_MPI] / 1e3);
        }
    fflush(stdout);
    free(t);
    free(B.a);
    free(B.b);
    zt_comm_free(&comm);
    MPI_Finalize();
    return 0;
}
