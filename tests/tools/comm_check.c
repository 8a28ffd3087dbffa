/*
 * comm-check: the communicators' collectives for fp32, fp16 and bf16,
 * blocking and non-blocking, against references this program computes itself,
 * and the bootstrap and watchdog that every communicator shares. Run by
 * tests/mpi/test_comm_dtypes.sh and test_comm_watchdog.sh at several world
 * sizes:
 *
 *     mpirun -np N build/tests/comm-check [MODE]
 *
 * Modes:
 * - mpi (the default): the MPI comm (zt_comm_mpi_init);
 * - staged: the same checks, expected numbers and counters through the staged
 *   comm (zt_comm_staged_init) on the CPU backend, which stages through
 *   malloc'ed host buffers exactly as it does through pinned ones on a GPU;
 * - bootstrap: zt_comm_bootstrap with fake make_id/join, over the world and
 *   over a split with the ranks reversed: every rank gets rank 0's id bytes
 *   and its (nranks, rank); a make_id failure on rank 0 and a join failure on
 *   the last rank come back as that error on every rank, without a hang;
 * - stall [staged] [nonblocking]: run with ZT_COMM_TIMEOUT=2: after two
 *   all_reduces that complete, the last rank sleeps STALL_SLEEP_S seconds
 *   before entering the third while the others enter it at once. The
 *   watchdog must fail it on the others, after the peers' probe (which the
 *   sleeper does not answer; engine/comm/peers.h); they print the error the
 *   way zerotrain's cmd does and MPI_Abort, so the job ends well before the
 *   sleep.
 *
 * Checks of the collective modes, for every dtype, blocking and not:
 * - all_reduce SUM of positive values against the float64 sum, within
 *   (size - 1) * eps * sum (eps = 2^-23, 2^-10, 2^-7: one rounding per
 *   addition, in whatever order MPI adds); of values that add exactly (eighths)
 *   bit for bit; every rank holds the same bits;
 * - all_reduce SUM where the one rounding decides (two non-zero ranks, the
 *   rest add +0, so the order does not matter): ties to even, above-tie
 *   rounding up, subnormal carries, fp16 overflow to inf;
 * - all_reduce MAX of mixed-sign values bit for bit (a comparison of the raw
 *   16-bit patterns would pick the negatives), and a NaN on one rank wins;
 * - reduce_scatter SUM (tolerance and exact) and MAX;
 * - all_gather (also in place), broadcast from the last rank and all_to_all
 *   carry any bit pattern, NaNs included, unchanged;
 * - the byte counters: elements times the dtype's size, one call each (zero
 *   in a world of one rank); each call takes the next sequence number, and a
 *   request carries it.
 * Prints each failure as "[rank R] FAIL: ..." and exits 1 on every rank when
 * any rank failed, 0 otherwise.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/comm/peers.h"
#include "engine/cpu/cpu.h"
#include "engine/dtype.h"
#include "engine/env.h"

static int g_rank;
static int g_failures;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "[rank %d] FAIL: ", g_rank);   \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
            g_failures++;                                  \
        }                                                  \
    } while (0)

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n > 0 ? n : 1, size);
    if (!p) {
        fprintf(stderr, "[rank %d] out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* ---- Elements of any dtype, read and written as float ---- */

static float get(const void *p, zt_dtype dt, int64_t i)
{
    if (dt == ZT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == ZT_F16 ? zt_f16_to_f32(h) : zt_bf16_to_f32(h);
}

static void set(void *p, zt_dtype dt, int64_t i, float x)
{
    if (dt == ZT_F32)
        ((float *)p)[i] = x;
    else
        ((uint16_t *)p)[i] = dt == ZT_F16 ? zt_f32_to_f16(x) : zt_f32_to_bf16(x);
}

/* x rounded to dt and read back. */
static float rounded(zt_dtype dt, float x)
{
    return dt == ZT_F32  ? x
           : dt == ZT_F16 ? zt_f16_to_f32(zt_f32_to_f16(x))
                          : zt_bf16_to_f32(zt_f32_to_bf16(x));
}

/* The raw pattern of element i, for moves that must not touch the bits. */
static uint32_t bits_at(const void *p, zt_dtype dt, int64_t i)
{
    if (dt != ZT_F32)
        return ((const uint16_t *)p)[i];
    uint32_t u;
    memcpy(&u, (const float *)p + i, sizeof u);
    return u;
}

static void set_bits(void *p, zt_dtype dt, int64_t i, uint32_t bits)
{
    if (dt == ZT_F32)
        memcpy((float *)p + i, &bits, sizeof bits);
    else
        ((uint16_t *)p)[i] = (uint16_t)bits;
}

/* Element i of a and b: the same bits, or both NaN. */
static bool same(const void *a, const void *b, zt_dtype dt, int64_t i)
{
    if (isnan(get(a, dt, i)) && isnan(get(b, dt, i)))
        return true;
    return bits_at(a, dt, i) == bits_at(b, dt, i);
}

/* One rounding per addition: the format's relative precision. */
static double eps_of(zt_dtype dt)
{
    return dt == ZT_F32 ? 0x1p-23 : dt == ZT_F16 ? 0x1p-10 : 0x1p-7;
}

/* Deterministic per (rank, index) values. */
static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* In [0.5, 2): sums stay far from overflow and never cancel. */
static float positive(int rank, int64_t i)
{
    return (float)(0.5 + 1.5 * (double)(mix((uint64_t)rank << 40 | (uint64_t)i) >> 11) * 0x1p-53);
}

/* Eighths in [-3.75, 3.75]: sums over 4 ranks are exact in all three types. */
static float eighth(int rank, int64_t i)
{
    return (float)((int)(mix((uint64_t)rank << 40 | (uint64_t)i | 1ull << 63) % 61) - 30) / 8.0f;
}

/* Any bit pattern at all, NaNs included: what moves must carry unchanged. */
static uint32_t pattern(int rank, int64_t i, zt_dtype dt)
{
    uint32_t u = (uint32_t)mix((uint64_t)rank << 40 | (uint64_t)i | 1ull << 62);
    return dt == ZT_F32 ? u : u & 0xffffu;
}

/* ---- Running a collective, blocking or not, and checking its counters ---- */

typedef struct {
    zt_comm *c;
    bool nonblocking;
    zt_comm_req req;
    uint64_t bytes0, calls0, seq0;
    zt_comm_kind kind;
} call_ctx;

static void begin(call_ctx *x, zt_comm *c, zt_comm_kind kind, bool nonblocking)
{
    x->c = c;
    x->nonblocking = nonblocking;
    x->kind = kind;
    x->bytes0 = c->bytes[kind];
    x->calls0 = c->calls[kind];
    x->seq0 = c->seq;
}

static zt_comm_req *req_of(call_ctx *x) { return x->nonblocking ? &x->req : NULL; }

/* Completes a non-blocking call (driving it with test first) and checks that
 * the call counted `bytes`. */
static void finish(call_ctx *x, zt_status st, uint64_t bytes, const char *what)
{
    CHECK(st == ZT_OK, "%s returned %s: %s", what, zt_status_name(st), zt_status_message());
    CHECK(x->c->seq == x->seq0 + 1, "%s took sequence number %llu after %llu", what,
          (unsigned long long)x->c->seq, (unsigned long long)x->seq0);
    if (x->nonblocking)
        CHECK(x->req.seq == x->c->seq && x->req.kind == x->kind,
              "%s: the request names #%llu, kind %d; want #%llu, kind %d", what,
              (unsigned long long)x->req.seq, (int)x->req.kind, (unsigned long long)x->c->seq,
              (int)x->kind);
    if (x->nonblocking && st == ZT_OK) {
        for (int spins = 0; spins < 3 && !x->c->ops->test(x->c, &x->req); spins++)
            ;
        st = x->c->ops->wait(x->c, &x->req);
        CHECK(st == ZT_OK, "%s wait returned %s", what, zt_status_name(st));
    }
    uint64_t want = x->c->size == 1 ? 0 : bytes;
    uint64_t want_calls = x->c->size == 1 ? 0 : 1;
    CHECK(x->c->bytes[x->kind] - x->bytes0 == want, "%s counted %llu bytes, want %llu", what,
          (unsigned long long)(x->c->bytes[x->kind] - x->bytes0), (unsigned long long)want);
    CHECK(x->c->calls[x->kind] - x->calls0 == want_calls, "%s counted %llu calls, want %llu",
          what, (unsigned long long)(x->c->calls[x->kind] - x->calls0),
          (unsigned long long)want_calls);
}

/* Every rank holds rank 0's bits. */
static void check_agree(zt_comm *c, const void *buf, zt_dtype dt, int64_t n, const char *what)
{
    size_t bytes = (size_t)n * zt_dtype_size(dt);
    void *root = xcalloc(bytes, 1);
    memcpy(root, buf, bytes);
    MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, c->mpi);
    int bad = 0;
    for (int64_t i = 0; i < n && !bad; i++)
        bad = !same(buf, root, dt, i);
    CHECK(!bad, "%s: ranks disagree on the result", what);
    free(root);
}

/* ---- The checks ---- */

static void check_all_reduce_sum(zt_comm *c, zt_dtype dt, bool nb, int64_t n)
{
    char what[96];
    snprintf(what, sizeof what, "all_reduce SUM %s n=%lld%s", zt_dtype_name(dt), (long long)n,
             nb ? " (non-blocking)" : "");
    void *buf = xcalloc((size_t)n, 4);
    void *exact = xcalloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++) {
        set(buf, dt, i, positive(c->rank, i));
        set(exact, dt, i, eighth(c->rank, i));
    }
    call_ctx x;
    begin(&x, c, ZT_COMM_ALL_REDUCE, nb);
    finish(&x, c->ops->all_reduce(c, buf, n, dt, ZT_RED_SUM, req_of(&x)),
           (uint64_t)n * zt_dtype_size(dt), what);
    begin(&x, c, ZT_COMM_ALL_REDUCE, nb);
    finish(&x, c->ops->all_reduce(c, exact, n, dt, ZT_RED_SUM, req_of(&x)),
           (uint64_t)n * zt_dtype_size(dt), what);

    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        double ref = 0, ref_exact = 0;
        for (int r = 0; r < c->size; r++) {
            ref += rounded(dt, positive(r, i));
            ref_exact += rounded(dt, eighth(r, i));
        }
        double got = get(buf, dt, i);
        double tol = (c->size - 1) * eps_of(dt) * ref;
        if (!(fabs(got - ref) <= tol)) {
            CHECK(false, "%s [%lld]: got %.9g, float64 sum %.9g, tolerance %.3g", what,
                  (long long)i, got, ref, tol);
            bad++;
        }
        if (get(exact, dt, i) != ref_exact) {
            CHECK(false, "%s [%lld] of eighths: got %.9g, want exactly %.9g", what, (long long)i,
                  (double)get(exact, dt, i), ref_exact);
            bad++;
        }
    }
    check_agree(c, buf, dt, n, what);
    free(buf);
    free(exact);
}

/* Rank 0 holds a, rank 1 holds b, every other rank +0: the sum is one
 * rounding of a + b, whatever order MPI adds in. */
typedef struct {
    uint16_t a, b, want;
    const char *why;
} half_case;

static const half_case f16_cases[] = {
    {0x3c00, 0x1000, 0x3c00, "1 + 2^-11, the tie, to even 1"},
    {0x3c01, 0x1000, 0x3c02, "(1 + 2^-10) + 2^-11, the tie, to even 1 + 2^-9"},
    {0x3c00, 0x1001, 0x3c01, "1 + (2^-11 + 2^-21), above the tie, up"},
    {0x0001, 0x0001, 0x0002, "2^-24 + 2^-24, subnormals"},
    {0x03ff, 0x0001, 0x0400, "largest subnormal + 2^-24, the smallest normal"},
    {0x7bff, 0x4c00, 0x7c00, "65504 + 16 = 65520, overflows to inf"},
    {0x7bff, 0x4800, 0x7bff, "65504 + 8 = 65512, rounds back to 65504"},
    {0xbc00, 0x3c00, 0x0000, "-1 + 1 = +0"},
};

static const half_case bf16_cases[] = {
    {0x3f80, 0x3b80, 0x3f80, "1 + 2^-8, the tie, to even 1"},
    {0x3f81, 0x3b80, 0x3f82, "(1 + 2^-7) + 2^-8, the tie, to even 1 + 2^-6"},
    {0x3f80, 0x3b81, 0x3f81, "1 + (2^-8 + 2^-15), above the tie, up"},
    {0x7f7f, 0x7b00, 0x7f80, "largest + half its ulp, the tie, to even inf"},
};

static void check_all_reduce_rounding(zt_comm *c, zt_dtype dt, bool nb)
{
    const half_case *cases = dt == ZT_F16 ? f16_cases : bf16_cases;
    int ncases = dt == ZT_F16 ? (int)(sizeof f16_cases / sizeof f16_cases[0])
                              : (int)(sizeof bf16_cases / sizeof bf16_cases[0]);
    uint16_t buf[16] = {0};
    for (int k = 0; k < ncases; k++)
        buf[k] = c->rank == 0 ? cases[k].a : c->rank == 1 ? cases[k].b : 0;
    call_ctx x;
    begin(&x, c, ZT_COMM_ALL_REDUCE, nb);
    finish(&x, c->ops->all_reduce(c, buf, ncases, dt, ZT_RED_SUM, req_of(&x)),
           (uint64_t)ncases * 2, "all_reduce SUM rounding");
    for (int k = 0; k < ncases; k++) {
        /* Alone, rank 0's value is the sum. */
        uint16_t want = c->size == 1 ? cases[k].a : cases[k].want;
        CHECK(buf[k] == want, "all_reduce SUM %s%s: %s: got 0x%04x, want 0x%04x",
              zt_dtype_name(dt), nb ? " (non-blocking)" : "", cases[k].why, buf[k], want);
    }
}

static void check_all_reduce_max(zt_comm *c, zt_dtype dt, bool nb, int64_t n)
{
    char what[96];
    snprintf(what, sizeof what, "all_reduce MAX %s n=%lld%s", zt_dtype_name(dt), (long long)n,
             nb ? " (non-blocking)" : "");
    void *buf = xcalloc((size_t)n, 4);
    void *want = xcalloc((size_t)n, 4);
    /* Negatives: every rank's value is below -0.5 except on odd elements,
     * where the last rank's is positive. */
    for (int64_t i = 0; i < n; i++) {
        set(buf, dt, i, -positive(c->rank, i));
        if (i % 2 && c->rank == c->size - 1)
            set(buf, dt, i, positive(c->rank, i));
        float best = -INFINITY;
        for (int r = 0; r < c->size; r++)
            best = fmaxf(best, rounded(dt, (i % 2 && r == c->size - 1) ? positive(r, i)
                                                                       : -positive(r, i)));
        set(want, dt, i, best);
    }
    /* A NaN on one rank wins, whichever side of the op it arrives on: on
     * the last rank at element 2, on rank 0 at element 3 (16-bit only; MPI's
     * own fp32 MAX leaves NaN open). */
    bool nan_case = dt != ZT_F32 && n > 3;
    uint32_t qnan = dt == ZT_F16 ? 0x7e00u : 0x7fc0u;
    if (nan_case && c->rank == c->size - 1)
        set_bits(buf, dt, 2, qnan);
    if (nan_case && c->rank == 0)
        set_bits(buf, dt, 3, qnan | 0x8000u);
    call_ctx x;
    begin(&x, c, ZT_COMM_ALL_REDUCE, nb);
    finish(&x, c->ops->all_reduce(c, buf, n, dt, ZT_RED_MAX, req_of(&x)),
           (uint64_t)n * zt_dtype_size(dt), what);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        if (nan_case && (i == 2 || i == 3)) {
            CHECK(isnan(get(buf, dt, i)), "%s: NaN on rank %d did not win, got %.9g", what,
                  i == 2 ? c->size - 1 : 0, (double)get(buf, dt, i));
            continue;
        }
        if (!same(buf, want, dt, i)) {
            CHECK(false, "%s [%lld]: got %.9g, want %.9g", what, (long long)i,
                  (double)get(buf, dt, i), (double)get(want, dt, i));
            bad++;
        }
    }
    check_agree(c, buf, dt, n, what);
    free(buf);
    free(want);
}

static void check_reduce_scatter(zt_comm *c, zt_dtype dt, bool nb, int64_t m)
{
    char what[96];
    snprintf(what, sizeof what, "reduce_scatter %s m=%lld%s", zt_dtype_name(dt), (long long)m,
             nb ? " (non-blocking)" : "");
    int64_t total = m * c->size;
    void *send = xcalloc((size_t)total, 4), *send_exact = xcalloc((size_t)total, 4);
    void *recv = xcalloc((size_t)m, 4), *recv_exact = xcalloc((size_t)m, 4);
    void *recv_max = xcalloc((size_t)m, 4);
    for (int64_t i = 0; i < total; i++) {
        set(send, dt, i, positive(c->rank, i));
        set(send_exact, dt, i, eighth(c->rank, i));
    }
    uint64_t bytes = (uint64_t)total * zt_dtype_size(dt);
    call_ctx x;
    begin(&x, c, ZT_COMM_REDUCE_SCATTER, nb);
    finish(&x, c->ops->reduce_scatter(c, send, recv, m, dt, ZT_RED_SUM, req_of(&x)), bytes, what);
    begin(&x, c, ZT_COMM_REDUCE_SCATTER, nb);
    finish(&x, c->ops->reduce_scatter(c, send_exact, recv_exact, m, dt, ZT_RED_SUM, req_of(&x)),
           bytes, what);
    begin(&x, c, ZT_COMM_REDUCE_SCATTER, nb);
    finish(&x, c->ops->reduce_scatter(c, send_exact, recv_max, m, dt, ZT_RED_MAX, req_of(&x)),
           bytes, what);
    int bad = 0;
    for (int64_t j = 0; j < m && bad < 5; j++) {
        int64_t i = c->rank * m + j;
        double ref = 0, ref_exact = 0, ref_max = -INFINITY;
        for (int r = 0; r < c->size; r++) {
            ref += rounded(dt, positive(r, i));
            ref_exact += rounded(dt, eighth(r, i));
            ref_max = fmax(ref_max, rounded(dt, eighth(r, i)));
        }
        double tol = (c->size - 1) * eps_of(dt) * ref;
        double got = get(recv, dt, j);
        if (!(fabs(got - ref) <= tol)) {
            CHECK(false, "%s SUM [%lld]: got %.9g, float64 sum %.9g, tolerance %.3g", what,
                  (long long)j, got, ref, tol);
            bad++;
        }
        if (get(recv_exact, dt, j) != ref_exact || get(recv_max, dt, j) != ref_max) {
            CHECK(false, "%s [%lld] of eighths: SUM %.9g want %.9g, MAX %.9g want %.9g", what,
                  (long long)j, (double)get(recv_exact, dt, j), ref_exact,
                  (double)get(recv_max, dt, j), ref_max);
            bad++;
        }
    }
    free(send);
    free(send_exact);
    free(recv);
    free(recv_exact);
    free(recv_max);
}

static void check_all_gather(zt_comm *c, zt_dtype dt, bool nb, int64_t m, bool in_place)
{
    char what[96];
    snprintf(what, sizeof what, "all_gather %s m=%lld%s%s", zt_dtype_name(dt), (long long)m,
             in_place ? " in place" : "", nb ? " (non-blocking)" : "");
    size_t sz = zt_dtype_size(dt);
    void *recv = xcalloc((size_t)(m * c->size), 4);
    void *send = in_place ? (char *)recv + c->rank * m * (int64_t)sz : xcalloc((size_t)m, 4);
    for (int64_t j = 0; j < m; j++)
        set_bits(send, dt, j, pattern(c->rank, j, dt));
    call_ctx x;
    begin(&x, c, ZT_COMM_ALL_GATHER, nb);
    finish(&x, c->ops->all_gather(c, send, recv, m, dt, req_of(&x)),
           (uint64_t)(m * c->size) * sz, what);
    int bad = 0;
    for (int r = 0; r < c->size; r++)
        for (int64_t j = 0; j < m && bad < 5; j++) {
            uint32_t got = bits_at(recv, dt, r * m + j), want = pattern(r, j, dt);
            if (got != want) {
                CHECK(false, "%s: rank %d's element %lld: got 0x%x, want 0x%x", what, r,
                      (long long)j, got, want);
                bad++;
            }
        }
    if (!in_place)
        free(send);
    free(recv);
}

/* Block q of rank r's send holds pattern(r, q * m + j): rank q's recv block r
 * must hold exactly those bits. */
static void check_all_to_all(zt_comm *c, zt_dtype dt, bool nb, int64_t m)
{
    char what[96];
    snprintf(what, sizeof what, "all_to_all %s m=%lld%s", zt_dtype_name(dt), (long long)m,
             nb ? " (non-blocking)" : "");
    void *send = xcalloc((size_t)(m * c->size), 4), *recv = xcalloc((size_t)(m * c->size), 4);
    for (int64_t i = 0; i < m * c->size; i++)
        set_bits(send, dt, i, pattern(c->rank, i, dt));
    call_ctx x;
    begin(&x, c, ZT_COMM_ALL_TO_ALL, nb);
    finish(&x, c->ops->all_to_all(c, send, recv, m, dt, req_of(&x)),
           (uint64_t)(m * c->size) * zt_dtype_size(dt), what);
    int bad = 0;
    for (int r = 0; r < c->size; r++)
        for (int64_t j = 0; j < m && bad < 5; j++) {
            uint32_t got = bits_at(recv, dt, r * m + j), want = pattern(r, c->rank * m + j, dt);
            if (got != want) {
                CHECK(false, "%s: from rank %d, element %lld: got 0x%x, want 0x%x", what, r,
                      (long long)j, got, want);
                bad++;
            }
        }
    free(send);
    free(recv);
}

static void check_broadcast(zt_comm *c, zt_dtype dt, bool nb, int64_t n)
{
    char what[96];
    snprintf(what, sizeof what, "broadcast %s n=%lld%s", zt_dtype_name(dt), (long long)n,
             nb ? " (non-blocking)" : "");
    int root = c->size - 1;
    void *buf = xcalloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++)
        set_bits(buf, dt, i, c->rank == root ? pattern(root, i, dt) : 0x5555u);
    call_ctx x;
    begin(&x, c, ZT_COMM_BROADCAST, nb);
    finish(&x, c->ops->broadcast(c, buf, n, dt, root, req_of(&x)),
           (uint64_t)n * zt_dtype_size(dt), what);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        uint32_t got = bits_at(buf, dt, i), want = pattern(root, i, dt);
        if (got != want) {
            CHECK(false, "%s [%lld]: got 0x%x, want 0x%x", what, (long long)i, got, want);
            bad++;
        }
    }
    free(buf);
}

/* The ring: one call sends this rank's pattern to the next rank and receives
 * the previous rank's; then pairs (2k, 2k + 1) swap fp32 one way and dt the
 * other way in one call. Counted per transfer as send and recv. */
static void check_send_recv(zt_comm *c, zt_dtype dt, bool nb, int64_t n)
{
    if (c->size < 2)
        return;
    char what[96];
    snprintf(what, sizeof what, "send_recv %s n=%lld%s", zt_dtype_name(dt), (long long)n,
             nb ? " (non-blocking)" : "");
    size_t sz = zt_dtype_size(dt);
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    void *out = xcalloc((size_t)n, 4), *in = xcalloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++) {
        set_bits(out, dt, i, pattern(c->rank, i, dt));
        set_bits(in, dt, i, 0x5555u);
    }
    zt_comm_xfer ring[2] = {{.buf = out, .numel = n, .dt = dt, .peer = next},
                            {.buf = in, .numel = n, .dt = dt, .peer = prev, .recv = true}};
    uint64_t sent0 = c->bytes[ZT_COMM_SEND];
    call_ctx x;
    begin(&x, c, ZT_COMM_RECV, nb);
    finish(&x, c->ops->send_recv(c, ring, 2, req_of(&x)), (uint64_t)n * sz, what);
    CHECK(c->bytes[ZT_COMM_SEND] - sent0 == (uint64_t)n * sz, "%s counted %llu bytes sent",
          what, (unsigned long long)(c->bytes[ZT_COMM_SEND] - sent0));
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        uint32_t got = bits_at(in, dt, i), want = pattern(prev, i, dt);
        if (got != want) {
            CHECK(false, "%s [%lld] from rank %d: got 0x%x, want 0x%x", what, (long long)i, prev,
                  got, want);
            bad++;
        }
    }
    int peer = c->rank ^ 1;
    if (peer < c->size) {
        bool even = c->rank % 2 == 0;
        zt_dtype mine = even ? ZT_F32 : dt, theirs = even ? dt : ZT_F32;
        for (int64_t i = 0; i < n; i++) {
            set_bits(out, mine, i, pattern(c->rank, i, mine));
            set_bits(in, theirs, i, 0x5555u);
        }
        zt_comm_xfer pair[2] = {{.buf = in, .numel = n, .dt = theirs, .peer = peer, .recv = true},
                                {.buf = out, .numel = n, .dt = mine, .peer = peer}};
        zt_comm_req req;
        zt_status st = c->ops->send_recv(c, pair, 2, nb ? &req : NULL);
        if (st == ZT_OK && nb)
            st = c->ops->wait(c, &req);
        CHECK(st == ZT_OK, "%s with mixed dtypes returned %s", what, zt_status_name(st));
        for (int64_t i = 0; i < n && bad < 5; i++) {
            uint32_t got = bits_at(in, theirs, i), want = pattern(peer, i, theirs);
            if (got != want) {
                CHECK(false, "%s mixed dtypes [%lld] from rank %d: got 0x%x, want 0x%x", what,
                      (long long)i, peer, got, want);
                bad++;
            }
        }
    }
    free(out);
    free(in);
}

/* ---- Modes ---- */

/* What zerotrain's cmd prints for a fatal error, then the job ends. */
static void fatal(void)
{
    char host[64] = "unknown";
    gethostname(host, sizeof host - 1);
    fprintf(stderr, "[rank %d %s] error: %s\n", g_rank, host, zt_status_message());
    if (zt_status_hint()[0])
        fprintf(stderr, "hint: %s\n", zt_status_hint());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void check_collectives(zt_comm *c)
{
    /* A small size and one above the library's OpenMP threshold, so the
     * reduction op runs its parallel loop and MPI splits the message. */
    const int64_t sizes[] = {1, 1001, 100003};
    for (int dt = 0; dt < ZT_NDTYPES; dt++)
        for (int nb = 0; nb < 2; nb++) {
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                int64_t n = sizes[s];
                check_all_reduce_sum(c, dt, nb, n);
                check_all_reduce_max(c, dt, nb, n);
                check_reduce_scatter(c, dt, nb, n);
                check_all_gather(c, dt, nb, n, false);
                check_all_gather(c, dt, nb, n, true);
                check_broadcast(c, dt, nb, n);
                check_all_to_all(c, dt, nb, n);
                check_send_recv(c, dt, nb, n);
            }
            if (dt != ZT_F32)
                check_all_reduce_rounding(c, dt, nb);
        }
}

/* The bootstrap's fakes: rank 0's id is BOOT_ID_BYTES of a pattern the other
 * ranks never hold before the broadcast (they start from 0xee). */
#define BOOT_ID_BYTES 128

typedef struct {
    bool fail_make;
    int fail_join_rank; /* -1: none */
    int make_calls, join_calls;
    int nranks, rank;
    bool id_ok;
} boot_ctx;

static unsigned char boot_byte(size_t i) { return (unsigned char)(mix(i | 1ull << 61) & 0xff); }

static zt_status fake_make_id(void *id, void *ctx)
{
    boot_ctx *b = ctx;
    b->make_calls++;
    if (b->fail_make)
        return zt_fail(ZT_ERR_DEVICE, "fake make_id hint", "fake make_id failed");
    for (size_t i = 0; i < BOOT_ID_BYTES; i++)
        ((unsigned char *)id)[i] = boot_byte(i);
    return ZT_OK;
}

static zt_status fake_join(const void *id, int nranks, int rank, void *ctx)
{
    boot_ctx *b = ctx;
    b->join_calls++;
    b->nranks = nranks;
    b->rank = rank;
    b->id_ok = true;
    for (size_t i = 0; i < BOOT_ID_BYTES; i++)
        b->id_ok = b->id_ok && ((const unsigned char *)id)[i] == boot_byte(i);
    if (rank == b->fail_join_rank)
        return zt_fail(ZT_ERR_COMM, "fake join hint", "fake join failed on rank %d", rank);
    return ZT_OK;
}

static zt_status boot_run(MPI_Comm mpi, boot_ctx *b)
{
    unsigned char id[BOOT_ID_BYTES];
    memset(id, 0xee, sizeof id);
    zt_comm_bootstrap_fns fns = {
        .id_bytes = sizeof id, .make_id = fake_make_id, .join = fake_join, .ctx = b};
    zt_status_clear();
    return zt_comm_bootstrap(mpi, &fns, id);
}

static void check_bootstrap_on(MPI_Comm mpi, const char *where)
{
    int rank, size;
    MPI_Comm_rank(mpi, &rank);
    MPI_Comm_size(mpi, &size);

    boot_ctx ok = {.fail_join_rank = -1};
    zt_status st = boot_run(mpi, &ok);
    CHECK(st == ZT_OK, "%s: bootstrap returned %s: %s", where, zt_status_name(st),
          zt_status_message());
    CHECK(ok.make_calls == (rank == 0), "%s: make_id ran %d times on rank %d", where,
          ok.make_calls, rank);
    CHECK(ok.join_calls == 1, "%s: join ran %d times", where, ok.join_calls);
    CHECK(ok.nranks == size && ok.rank == rank, "%s: join got (%d, %d), want (%d, %d)", where,
          ok.nranks, ok.rank, size, rank);
    CHECK(ok.id_ok, "%s: join did not get rank 0's id bytes", where);

    boot_ctx bad_make = {.fail_make = true, .fail_join_rank = -1};
    st = boot_run(mpi, &bad_make);
    CHECK(st == ZT_ERR_DEVICE, "%s: a make_id failure gave %s, want %s", where,
          zt_status_name(st), zt_status_name(ZT_ERR_DEVICE));
    CHECK(strstr(zt_status_message(), "fake make_id failed") != NULL,
          "%s: a make_id failure's message is \"%s\"", where, zt_status_message());
    CHECK(strstr(zt_status_hint(), "fake make_id hint") != NULL,
          "%s: a make_id failure's hint is \"%s\"", where, zt_status_hint());
    CHECK(bad_make.join_calls == 0, "%s: join ran after make_id failed", where);

    boot_ctx bad_join = {.fail_join_rank = size - 1};
    st = boot_run(mpi, &bad_join);
    char want[64];
    snprintf(want, sizeof want, "fake join failed on rank %d", size - 1);
    CHECK(st == ZT_ERR_COMM, "%s: a join failure gave %s, want %s", where, zt_status_name(st),
          zt_status_name(ZT_ERR_COMM));
    CHECK(strstr(zt_status_message(), want) != NULL, "%s: a join failure's message is \"%s\"",
          where, zt_status_message());
    CHECK(bad_join.join_calls == 1, "%s: join ran %d times", where, bad_join.join_calls);
}

static void check_bootstrap(void)
{
    check_bootstrap_on(MPI_COMM_WORLD, "world");
    /* Reversed: the sub-communicator's rank 0 is the world's last rank. */
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm reversed;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - 1 - g_rank, &reversed);
    check_bootstrap_on(reversed, "reversed split");
    MPI_Comm_free(&reversed);
}

/* Longer than the watchdog's limit plus an abort, much shorter than a test's
 * time limit. */
#define STALL_SLEEP_S 15

static void stall(zt_comm *c, bool nonblocking)
{
    float warm = 1;
    for (int i = 0; i < 2; i++)
        if (c->ops->all_reduce(c, &warm, 1, ZT_F32, ZT_RED_SUM, NULL) != ZT_OK)
            fatal();
    if (c->rank == c->size - 1) {
        struct timespec t = {.tv_sec = STALL_SLEEP_S};
        while (nanosleep(&t, &t) != 0)
            ;
    }
    uint16_t buf[4096] = {0};
    zt_comm_req req;
    zt_status st = c->ops->all_reduce(c, buf, 4096, ZT_F16, ZT_RED_SUM,
                                      nonblocking ? &req : NULL);
    if (st == ZT_OK && nonblocking)
        st = c->ops->wait(c, &req);
    if (st != ZT_OK)
        fatal();
    printf("[rank %d] the stalled all_reduce completed: no watchdog\n", g_rank);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    zt_status_set_rank(g_rank);
    const char *mode = argc > 1 ? argv[1] : "mpi";
    bool staged = !strcmp(mode, "staged"), nonblocking = false;
    for (int i = 2; i < argc; i++) {
        staged = staged || !strcmp(argv[i], "staged");
        nonblocking = nonblocking || !strcmp(argv[i], "nonblocking");
    }
    if (strcmp(mode, "mpi") && strcmp(mode, "staged") && strcmp(mode, "bootstrap") &&
        strcmp(mode, "stall")) {
        if (g_rank == 0)
            fprintf(stderr, "usage: comm-check [mpi | staged | bootstrap | stall [staged] "
                            "[nonblocking]]\n");
        MPI_Finalize();
        return 2;
    }
    if (!strcmp(mode, "bootstrap")) {
        check_bootstrap();
        int total = 0;
        MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (g_rank == 0)
            printf("comm-check bootstrap: np %d: %s (%d failed checks)\n", size,
                   total ? "FAILED" : "ok", total);
        MPI_Finalize();
        return total ? 1 : 0;
    }

    /* The watchdog's limit comes from the environment, as in zerotrain. */
    if (zt_env_load() != ZT_OK)
        fatal();
    zt_backend be;
    if (zt_backend_cpu_init(&be) != ZT_OK)
        fatal();
    zt_comm c;
    zt_status st = staged ? zt_comm_staged_init(&c, MPI_COMM_WORLD, &be)
                          : zt_comm_mpi_init(&c, MPI_COMM_WORLD);
    if (st != ZT_OK)
        fatal();
    if (!strcmp(mode, "stall") && zt_comm_peers_init(MPI_COMM_WORLD) != ZT_OK)
        fatal();
    if (!strcmp(mode, "stall"))
        stall(&c, nonblocking);
    else
        check_collectives(&c);
    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("comm-check %s: np %d: %s (%d failed checks)\n", c.name, c.size,
               total ? "FAILED" : "ok", total);
    zt_comm_free(&c);
    zt_backend_free(&be);
    MPI_Finalize();
    return total ? 1 : 0;
}
