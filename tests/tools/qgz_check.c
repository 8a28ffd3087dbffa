/*
 * qgz-check: ZeRO++'s hierarchical quantized all-to-all (engine/zero/quant.h
 * zt_qgz_start/zt_qgz_finish) on the CPU backend and the MPI comm, against a
 * float64 sum computed here from the inputs every rank can regenerate.
 *
 *   mpirun -np N build/tests/qgz-check L      (L ranks per node, N % L == 0)
 *
 * Every rank r fills a bucket (N, width) of the comm dtype, block q for rank
 * q, from a formula of (r, q, i); rank q must receive sum_r x_r[q][i].
 *
 * 1. exact (fp32): in each 256-element block only one rank per node is
 *    nonzero, its values k 2^e (k in -8..7, the block's first -8, e depending
 *    on rank, destination and block). Both int4 quantizations are then exact,
 *    so the result must equal the float64 sum bit for bit: a chunk sent to or
 *    read from the wrong place shows as a wrong value.
 * 2. bound (fp32 and bf16): values uniform in (-1, 1) times 10^-1..10^1 by
 *    rank, destination and block. |result - sum| must stay within
 *      sum_r s_r + [L > 1] sum_m (a_m + sum_{r in m} s_r) / 8
 *    plus 1e-6 sum_r |x_r| for the fp32 arithmetic and, in bf16, 2^-8 of
 *    the result's size for its rounding, where s_r = absmax_r / 8 is rank r's
 *    int4 scale for the block (the error of the clamped +absmax, the largest
 *    one) and a_m the block's absmax of node m's exact partial sum (the
 *    re-quantized partial sums' scale is at most (a_m + their error) / 8).
 *    Prints the largest error as a fraction of the bound.
 * Widths 1000 (a short last block), 257 and 7, blocking and not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/dtype.h"
#include "engine/zero/quant.h"

static int g_rank, g_failures;

static void fatal(void)
{
    fprintf(stderr, "[rank %d] %s\n", g_rank, zt_status_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n > 0 ? n : 1, size);
    if (!p) {
        fprintf(stderr, "[rank %d] out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Rank r's value for destination q, element i, as rank r sends it (rounded
 * to dt). */
static double value(bool exact, int r, int q, int64_t i, int L, zt_dtype dt)
{
    int64_t b = i / ZT_QGZ_BLOCK;
    float x;
    if (exact) {
        if (r % L != (int)((q + b) % L))
            return 0;
        int k = i % ZT_QGZ_BLOCK == 0 ? -8 : (int)(mix((uint64_t)(r * 131 + q) << 32 | (uint64_t)i) % 16) - 8;
        x = ldexpf((float)k, (int)((r + 2 * q + b) % 5) - 2);
    } else {
        uint64_t h = mix((uint64_t)(r * 977 + q * 31 + 7) << 32 | (uint64_t)i);
        double u = (double)(h >> 11) / 9007199254740992.0 * 2 - 1;
        x = (float)(u * pow(10.0, (double)((r + q + b) % 3) - 1));
    }
    if (dt == ZT_BF16)
        x = zt_bf16_to_f32(zt_f32_to_bf16(x));
    return x;
}

static double absmax_of(bool exact, int r, int q, int64_t b0, int64_t b1, int L, zt_dtype dt)
{
    double a = 0;
    for (int64_t i = b0; i < b1; i++)
        a = fmax(a, fabs(value(exact, r, q, i, L, dt)));
    return a;
}

static void check_case(const zt_qgz *qz, const zt_backend *be, int n, int L, int64_t width,
                       zt_dtype dt, bool exact, bool nonblocking, double *worst)
{
    int M = n / L;
    size_t es = zt_dtype_size(dt);
    char *send = xcalloc((size_t)(n * width), es);
    char *recv = xcalloc((size_t)width, es);
    void *work = xcalloc(zt_qgz_work_bytes(width, n, M), 1);
    for (int q = 0; q < n; q++)
        for (int64_t i = 0; i < width; i++) {
            float x = (float)value(exact, g_rank, q, i, L, dt);
            if (dt == ZT_F32)
                ((float *)send)[q * width + i] = x;
            else
                ((uint16_t *)send)[q * width + i] = zt_f32_to_bf16(x);
        }
    zt_comm_req req;
    if (zt_qgz_start(qz, be, work, send, width, dt, nonblocking ? &req : NULL) != ZT_OK ||
        zt_qgz_finish(qz, be, work, recv, width, dt, nonblocking ? &req : NULL) != ZT_OK)
        fatal();
    int q = g_rank, bad = 0;
    for (int64_t b0 = 0; b0 < width; b0 += ZT_QGZ_BLOCK) {
        int64_t b1 = b0 + ZT_QGZ_BLOCK < width ? b0 + ZT_QGZ_BLOCK : width;
        double stage1 = 0, stage2 = 0;
        for (int m = 0; m < M; m++) {
            double s_node = 0, a_m = 0;
            for (int l = 0; l < L; l++)
                s_node += absmax_of(exact, m * L + l, q, b0, b1, L, dt) / 8;
            for (int64_t i = b0; i < b1; i++) {
                double p = 0;
                for (int l = 0; l < L; l++)
                    p += value(exact, m * L + l, q, i, L, dt);
                a_m = fmax(a_m, fabs(p));
            }
            stage1 += s_node;
            stage2 += L > 1 ? (a_m + s_node) / 8 : 0;
        }
        for (int64_t i = b0; i < b1; i++) {
            double want = 0, mag = 0;
            for (int r = 0; r < n; r++) {
                double x = value(exact, r, q, i, L, dt);
                want += x;
                mag += fabs(x);
            }
            double got = dt == ZT_F32 ? ((float *)recv)[i]
                                      : zt_bf16_to_f32(((uint16_t *)recv)[i]);
            double bound = stage1 + stage2 + 1e-6 * mag;
            if (dt == ZT_BF16)
                bound += (fabs(want) + bound) / 256;
            double err = fabs(got - want);
            if (exact ? got != want : !(err <= bound)) {
                if (bad++ < 3)
                    fprintf(stderr,
                            "[rank %d] FAIL: %s %s width %lld%s: element %lld = %.9g, "
                            "sum %.9g (bound %.3g)\n",
                            g_rank, exact ? "exact" : "bound", zt_dtype_name(dt),
                            (long long)width, nonblocking ? " nonblocking" : "", (long long)i,
                            got, want, exact ? 0.0 : bound);
            }
            if (!exact && bound > 0)
                *worst = fmax(*worst, err / bound);
        }
    }
    g_failures += bad;
    free(send);
    free(recv);
    free(work);
}

int main(int argc, char **argv)
{
    int provided, n;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    zt_status_set_rank(g_rank);
    int L = argc > 1 ? atoi(argv[1]) : 0;
    if (argc != 2 || L < 1 || n % L != 0 || n / L < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: mpirun -np N qgz-check L  (L ranks per node, N / L >= 2 "
                            "nodes)\n");
        MPI_Finalize();
        return 2;
    }
    zt_backend be;
    zt_comm c;
    if (zt_backend_cpu_init(&be) != ZT_OK || zt_comm_mpi_init(&c, MPI_COMM_WORLD) != ZT_OK)
        fatal();
    zt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.zero.zero_quantized_gradients = true;
    zt_qgz qz;
    if (zt_qgz_init(&qz, &cfg, &c, g_rank / L, n / L, g_rank % L, L) != ZT_OK)
        fatal();
    if (!qz.active) {
        fprintf(stderr, "[rank %d] FAIL: qgZ inactive over %d nodes\n", g_rank, n / L);
        g_failures++;
    }
    const int64_t widths[] = {1000, 257, 7};
    double worst[2] = {0, 0};
    for (size_t w = 0; qz.active && w < sizeof widths / sizeof widths[0]; w++)
        for (int nb = 0; nb < 2; nb++) {
            check_case(&qz, &be, n, L, widths[w], ZT_F32, true, nb, &worst[0]);
            check_case(&qz, &be, n, L, widths[w], ZT_F32, false, nb, &worst[0]);
            check_case(&qz, &be, n, L, widths[w], ZT_BF16, false, nb, &worst[1]);
        }
    int total = 0;
    double all[2];
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(worst, all, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("qgz-check: np %d as %d nodes of %d: %s (%d failed elements); exact cases bit "
               "for bit; largest error / bound: fp32 %.3f, bf16 %.3f\n",
               n, n / L, L, total ? "FAILED" : "ok", total, all[0], all[1]);
    zt_qgz_free(&qz);
    zt_comm_free(&c);
    zt_backend_free(&be);
    MPI_Finalize();
    return total ? 1 : 0;
}
