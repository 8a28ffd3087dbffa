/*
 * op-check: every op of the backend contract (engine/backend.h) on the CPU
 * backend, the reference, and on the CUDA backend, with the same fresh random
 * inputs, compared output by output. scripts/gpu-check.sh runs it on a GPU
 * machine:
 *
 *     build/tests/op-check [--device N] [--quick] [--only OP,...] [--skip OP,...] [--seed S]
 *     build/tests/op-check --list        the op names --only and --skip take
 *     build/tests/op-check --gemm-peak   cuBLAS GEMM peak: "gemm_peak_tflops X" (bf16),
 *                                        "gemm_peak_fp32_tflops Y" (fp32, no TF32)
 *
 * The device is --device N, else $ZT_DEVICE, else 0. The CUDA backend runs in
 * four GEMM settings, each a freshly made backend whose workspace is set from
 * be->workspace_bytes (so the 16-bit operand casts and the cuBLAS workspace are
 * the ones the trainer uses): fp32 (TF32 off) runs every op, then tf32, bf16 and
 * fp16 run gemm and gemm_batched again. Each (op, case) prints one line: op,
 * case, metric, error, threshold, PASS or FAIL, then [the worst output] and
 * notes. After every case the backend's `check` must return ZT_OK: a device
 * error is a FAIL with its message and ends that op (the backend keeps
 * reporting its first error); the backend is then made afresh and the next op
 * runs, unless the CUDA context itself is lost (a sticky error such as an
 * illegal address), which ends the run (--skip the op to check the others).
 * --quick leaves out the largest shapes.
 *
 * Metrics, per output tensor; a case reports its worst output:
 *   norm   max |got - ref| / max |ref|; NaN and inf must sit at the same places
 *          (with threshold 0: every float equal, -0 == +0)
 *   mag    max over elements of |got - ref| / (|alpha| |op(A)| |op(B)| + |beta| |C|):
 *          the quantity GEMM rounding errors are bounded by (elementwise, so a
 *          result that cancels to near 0 cannot make a false alarm); with
 *          beta == 0, C starts as NaN (it must not be read)
 *   rel    |got - ref| / |ref| of a value returned to the host (the cross-entropy
 *          loss, next to its dlogits' norm; sum_squares)
 *   ndiff  elements (or answers) that differ, bit for bit (a NaN matches any NaN
 *          of the same sign: payloads are not part of the contract)
 *
 * Thresholds and why:
 *   exact  0      one correctly rounded operation per element, or the contract
 *                 fixes the bits: copies, memset_zero, relu, bias_add, scale,
 *                 embedding_forward, convert (every dtype pair; `dst + alpha * src`
 *                 with two roundings, as dtype.h defines it), dropout (keyed
 *                 masks), mean_pool_backward (one division), has_inf_nan
 *   ulp    1e-6   one rounding the contract leaves open: axpy (FMA contraction),
 *                 sinusoid_add (float64 sin/cos of another libm, rounded, added)
 *   fp32   1e-5   float32 with another summation order or another libm: gemm and
 *                 gemm_batched with TF32 off, sums over rows (bias_grad, layernorm,
 *                 embedding_backward, mean_pool_forward, softmax), gelu,
 *                 cross-entropy, adam, sgd
 *   fp64   1e-12  float64 accumulation: sum_squares (fp32 squares are exact in
 *                 float64, only the order of the additions may differ)
 *   tf32   5e-3   operands cut to TF32's 10-bit mantissa: each product is off by at
 *                 most 2u |a b| (u = 2^-10 if cuBLAS truncates, 2^-11 if it rounds),
 *                 so mag <= 2e-3 plus the fp32 accumulation
 *   bf16   1e-2   operands rounded to bf16 (u = 2^-8): mag <= 2u + u^2 = 7.8e-3, plus
 *                 fp32 accumulation (<= k 2^-24 = 2.4e-4 at k = 4096)
 *   fp16   2e-3   operands rounded to fp16 (u = 2^-11): mag <= 9.8e-4 + 2.4e-4
 * The 16-bit GEMM lines also note the error against a CPU GEMM of the operands
 * rounded to that type (round to nearest even, as dtype.h): about 1e-7 when the
 * backend rounds its operands as the contract says, near the bound above when it
 * does not round them, or rounds them differently.
 *
 * Exit status: 0 every case passed, 1 a case failed, 2 could not run (usage,
 * no GPU).
 * Memory: every buffer comes from be->alloc and goes back through be->free
 * within its case (a device error leaves the op's behind); the workspace
 * lives as long as its backend.
 * Collective: none (no MPI).
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/dtype.h"
#include "engine/rng.h"
#include "engine/status.h"

#define THR_EXACT 0.0
#define THR_ULP 1e-6
#define THR_F32 1e-5
#define THR_F64 1e-12
#define THR_TF32 5e-3
#define THR_BF16 1e-2
#define THR_FP16 2e-3

/* The CUDA backend's GEMM settings, each a backend of its own. */
typedef struct {
    const char *name;
    bool tf32;
    zt_dtype gemm_dt;
    double thr; /* for gemm and gemm_batched */
} gemm_setting;

static const gemm_setting settings[] = {
    {"fp32", false, ZT_F32, THR_F32},
    {"tf32", true, ZT_F32, THR_TF32},
    {"bf16", false, ZT_BF16, THR_BF16},
    {"fp16", false, ZT_F16, THR_FP16},
};

static struct {
    zt_backend cpu, gpu;
    void *workspace; /* the CUDA backend's, from its own alloc */
    const gemm_setting *set;
    int device;
    bool quick;
    uint64_t seed;
    uint64_t draws; /* random tensors drawn so far: each gets its own stream */
    int cases, failures;
    bool device_error;
    jmp_buf abort_op; /* where a device error ends the running op */
} g;

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "op-check: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (!p)
        die("out of host memory (%zu bytes)", bytes);
    return p;
}

static void *dup_bytes(const void *src, size_t bytes)
{
    void *p = xmalloc(bytes);
    memcpy(p, src, bytes);
    return p;
}

/* ---- random inputs: zt_rng_uniform keyed by (seed, tensor number, index) ---- */

static float *rand_f32(int64_t n, float lo, float hi)
{
    float *x = xmalloc((size_t)n * sizeof *x);
    uint64_t stream = ++g.draws;
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * zt_rng_uniform(g.seed, stream, (uint64_t)i);
    return x;
}

/* Uniform integers in [lo, hi). */
static int32_t *rand_i32(int64_t n, int32_t lo, int32_t hi)
{
    int32_t *x = xmalloc((size_t)n * sizeof *x);
    uint64_t stream = ++g.draws;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = lo + (int32_t)((double)zt_rng_uniform(g.seed, stream, (uint64_t)i) *
                                   (double)(hi - lo));
        x[i] = v < hi ? v : hi - 1;
    }
    return x;
}

static uint8_t *rand_bytes(int64_t n)
{
    uint8_t *x = xmalloc((size_t)n);
    uint64_t stream = ++g.draws;
    for (int64_t i = 0; i < n; i++)
        x[i] = (uint8_t)zt_rng_u64(g.seed, stream, (uint64_t)i);
    return x;
}

static float *filled(int64_t n, float v)
{
    float *x = xmalloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
    return x;
}

/* x(n) fp32 in dt's storage (rounded to nearest even), a new buffer. */
static void *to_dtype(const float *x, int64_t n, zt_dtype dt)
{
    void *p = xmalloc((size_t)n * zt_dtype_size(dt));
    zt_convert_host(p, dt, x, ZT_F32, n, 1.0f, false);
    return p;
}

/* ---- one tensor on both backends ---- */

typedef struct {
    void *c, *g; /* the CPU backend's copy (host memory), the CUDA backend's */
    size_t bytes;
} pair;

/* A failure of the CUDA backend outside a case's comparison: a FAIL line, then
 * the running op ends (its buffers are left behind with the backend). */
static void device_failure(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void device_failure(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%-24s ", "(cuda backend)");
    vprintf(fmt, ap);
    printf("  FAIL\n");
    va_end(ap);
    fflush(stdout);
    g.failures++;
    g.device_error = true;
    longjmp(g.abort_op, 1);
}

static pair pair_new(const void *host, size_t bytes)
{
    pair p = {NULL, NULL, bytes};
    size_t want = bytes < 64 ? 64 : bytes; /* empty tensors still get a valid pointer */
    if (g.cpu.alloc(&g.cpu, want, &p.c) != ZT_OK)
        die("cpu backend: alloc of %zu bytes: %s", want, zt_status_message());
    if (g.gpu.alloc(&g.gpu, want, &p.g) != ZT_OK)
        device_failure("alloc of %zu bytes: %s", want, zt_status_message());
    if (bytes) {
        g.cpu.copy_h2d(&g.cpu, p.c, host, bytes);
        g.gpu.copy_h2d(&g.gpu, p.g, host, bytes);
    }
    return p;
}

static pair pair_f32(const float *host, int64_t n)
{
    return pair_new(host, (size_t)n * sizeof(float));
}

static void pair_free(pair *p)
{
    g.cpu.free(&g.cpu, p->c);
    g.gpu.free(&g.gpu, p->g);
    p->c = p->g = NULL;
}

/* The CUDA backend's copy, on the host (the caller frees it). */
static void *fetch(const pair *p)
{
    void *h = xmalloc(p->bytes);
    g.gpu.sync(&g.gpu);
    if (p->bytes)
        g.gpu.copy_d2h(&g.gpu, h, p->g, p->bytes);
    return h;
}

/* ---- errors ---- */

static double norm_err(const float *ref, const float *got, int64_t n)
{
    double max_ref = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float r = ref[i], x = got[i];
        if (isnan(r) || isnan(x)) {
            if (!(isnan(r) && isnan(x)))
                return INFINITY;
        } else if (isinf(r) || isinf(x)) {
            if (r != x)
                return INFINITY;
        } else {
            max_ref = fmax(max_ref, fabs(r));
            max_diff = fmax(max_diff, fabs((double)x - (double)r));
        }
    }
    /* Any difference from an all-zero reference is a failure. */
    return max_diff == 0.0 ? 0.0 : max_diff / (max_ref > 0.0 ? max_ref : 1e-300);
}

static double mag_err(const float *ref, const float *got, const float *mag, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i]) && isnan(got[i]))
            continue; /* padding the op must leave alone */
        if (!isfinite(got[i]) || !isfinite(ref[i]))
            return INFINITY;
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > 0.0)
            worst = fmax(worst, mag[i] > 0.0f ? d / mag[i] : INFINITY);
    }
    return worst;
}

static double rel_err(double ref, double got)
{
    if (ref == got || (isnan(ref) && isnan(got)))
        return 0.0;
    if (isnan(ref) || isnan(got))
        return INFINITY;
    return fabs(got - ref) / (ref != 0.0 ? fabs(ref) : 1e-300);
}

static uint32_t bits_at(const void *p, zt_dtype dt, int64_t i)
{
    if (dt == ZT_F32) {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return u;
    }
    return ((const uint16_t *)p)[i];
}

static bool nan_bits(uint32_t b, zt_dtype dt)
{
    switch (dt) {
    case ZT_F32:
        return (b & 0x7fffffffu) > 0x7f800000u;
    case ZT_F16:
        return (b & 0x7fffu) > 0x7c00u;
    default:
        return (b & 0x7fffu) > 0x7f80u;
    }
}

static uint32_t sign_bit(zt_dtype dt) { return dt == ZT_F32 ? 0x80000000u : 0x8000u; }

/* ---- cases ---- */

typedef struct {
    char op[32];
    char what[120];
    char worst[32]; /* the output with the largest error */
    char note[160];
    const char *metric;
    double thr, err;
} tcase;

static void begin(tcase *k, const char *op, const char *metric, double thr, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));

static void begin(tcase *k, const char *op, const char *metric, double thr, const char *fmt,
                  ...)
{
    memset(k, 0, sizeof *k);
    snprintf(k->op, sizeof k->op, "%s", op);
    k->metric = metric;
    k->thr = thr;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->what, sizeof k->what, fmt, ap);
    va_end(ap);
}

static void add_err(tcase *k, const char *output, double err)
{
    if (isnan(err))
        err = INFINITY;
    if (!k->worst[0] || err > k->err) {
        k->err = err;
        snprintf(k->worst, sizeof k->worst, "%s", output);
    }
}

/* An exact-class mismatch: counted; the first one is described in the note. */
static void miss(tcase *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void miss(tcase *k, const char *fmt, ...)
{
    if (k->err == 0.0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->note, sizeof k->note, fmt, ap);
        va_end(ap);
    }
    k->err += 1.0;
}

static void cmp_f32(tcase *k, const char *output, const pair *p, int64_t n)
{
    float *got = fetch(p);
    add_err(k, output, norm_err(p->c, got, n));
    free(got);
}

/* Bit for bit, in dt's storage. */
static void cmp_bits(tcase *k, const char *output, const pair *p, zt_dtype dt, int64_t n)
{
    void *got = fetch(p);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = bits_at(p->c, dt, i), x = bits_at(got, dt, i);
        bool same = r == x || (nan_bits(r, dt) && nan_bits(x, dt) &&
                               (r & sign_bit(dt)) == (x & sign_bit(dt)));
        if (!same)
            miss(k, "%s[%lld] = 0x%x, cpu 0x%x", output, (long long)i, (unsigned)x,
                 (unsigned)r);
    }
    free(got);
}

static void end(tcase *k)
{
    zt_status st = g.gpu.check(&g.gpu);
    bool pass = st == ZT_OK && k->err <= k->thr;
    g.cases++;
    g.failures += !pass;
    if (!strcmp(k->metric, "ndiff"))
        printf("%-24s %-56s %-6s %9.0f %8.0f  %s", k->op, k->what, k->metric, k->err, k->thr,
               pass ? "PASS" : "FAIL");
    else
        printf("%-24s %-56s %-6s %9.2e %8.1e  %s", k->op, k->what, k->metric, k->err, k->thr,
               pass ? "PASS" : "FAIL");
    if (k->worst[0])
        printf("  [%s]", k->worst);
    if (k->note[0])
        printf("  %s", k->note);
    if (st != ZT_OK)
        printf("  device error: %s", zt_status_message());
    putchar('\n');
    fflush(stdout);
    if (st != ZT_OK) {
        g.device_error = true;
        longjmp(g.abort_op, 1);
    }
}

/* ---- memory ---- */

static void op_alloc(void)
{
    tcase k;
    begin(&k, "alloc", "ndiff", THR_EXACT, "1 B .. 256 MiB, 64-byte aligned");
    const size_t sizes[] = {1, 63, 4096, 1000003, (size_t)256 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        zt_status st = g.gpu.alloc(&g.gpu, sizes[i], &p);
        if (st != ZT_OK)
            miss(&k, "alloc(%zu): %s", sizes[i], zt_status_message());
        else if ((uintptr_t)p % 64)
            miss(&k, "alloc(%zu) = %p is not 64-byte aligned", sizes[i], p);
        if (st == ZT_OK)
            g.gpu.free(&g.gpu, p);
    }
    end(&k);
}

/* A synchronous failure is returned, not left for `check` to report later
 * (end() requires check to stay ZT_OK). Last in the registry: a backend that
 * gets this wrong stops its run, and nothing is left to skip. */
static void op_alloc_failure(void)
{
    tcase k;
    begin(&k, "alloc_failure", "ndiff", THR_EXACT,
          "alloc(SIZE_MAX/2) is ZT_ERR_OOM, check stays ZT_OK");
    void *p = NULL;
    zt_status st = g.gpu.alloc(&g.gpu, SIZE_MAX / 2, &p);
    if (st != ZT_ERR_OOM)
        miss(&k, "alloc(SIZE_MAX/2) returned %s, not ZT_ERR_OOM", zt_status_name(st));
    zt_status_clear();
    end(&k);
}

static void op_host_alloc(void)
{
    tcase k;
    const size_t n = ((size_t)1 << 20) + 3;
    begin(&k, "host_alloc", "ndiff", THR_EXACT, "pinned %zu B, 64-byte aligned, h2d and d2h", n);
    if (!g.gpu.host_alloc || !g.gpu.host_free) {
        miss(&k, "no host_alloc/host_free: backend.h leaves them NULL only where device "
                 "memory is host memory");
        end(&k);
        return;
    }
    void *a = NULL, *b = NULL, *d = NULL;
    if (g.gpu.host_alloc(&g.gpu, n, &a) != ZT_OK || g.gpu.host_alloc(&g.gpu, n, &b) != ZT_OK ||
        g.gpu.alloc(&g.gpu, n, &d) != ZT_OK) {
        miss(&k, "allocation failed: %s", zt_status_message());
    } else {
        if ((uintptr_t)a % 64 || (uintptr_t)b % 64)
            miss(&k, "host_alloc gave %p, %p: not 64-byte aligned", a, b);
        uint8_t *src = rand_bytes((int64_t)n);
        memcpy(a, src, n);
        memset(b, 0, n);
        g.gpu.copy_h2d(&g.gpu, d, a, n);
        g.gpu.copy_d2h(&g.gpu, b, d, n);
        for (size_t i = 0; i < n; i++)
            if (((uint8_t *)b)[i] != src[i])
                miss(&k, "byte %zu = %u, sent %u", i, ((uint8_t *)b)[i], src[i]);
        free(src);
    }
    if (a)
        g.gpu.host_free(&g.gpu, a);
    if (b)
        g.gpu.host_free(&g.gpu, b);
    if (d)
        g.gpu.free(&g.gpu, d);
    end(&k);
}

static void cmp_bytes(tcase *k, const pair *p)
{
    uint8_t *got = fetch(p);
    for (size_t i = 0; i < p->bytes; i++)
        if (got[i] != ((uint8_t *)p->c)[i])
            miss(k, "byte %zu = %u, cpu %u", i, got[i], ((uint8_t *)p->c)[i]);
    free(got);
}

static void op_copy(void)
{
    const int64_t n = (1 << 20) + 3;
    tcase k;
    begin(&k, "copy", "ndiff", THR_EXACT,
          "h2d/d2d/d2h of %lld B at odd offsets and lengths, and 0 B", (long long)n);
    uint8_t *h1 = rand_bytes(n), *h2 = rand_bytes(n);
    pair a = pair_new(h1, (size_t)n), b = pair_new(h2, (size_t)n);
    const zt_backend *be[2] = {&g.cpu, &g.gpu};
    for (int i = 0; i < 2; i++) {
        char *pa = i ? a.g : a.c, *pb = i ? b.g : b.c;
        be[i]->copy_d2d(be[i], pb + 7, pa + 1, (size_t)n - 9);
        be[i]->copy_h2d(be[i], pa + 5, h2 + 3, 1001);
        be[i]->copy_d2d(be[i], pb, pa, 0);
        be[i]->copy_h2d(be[i], pa, h2, 0);
    }
    cmp_bytes(&k, &a);
    cmp_bytes(&k, &b);
    /* d2h into an odd host address */
    uint8_t *got = xmalloc((size_t)n + 1);
    g.gpu.sync(&g.gpu);
    g.gpu.copy_d2h(&g.gpu, got + 1, (char *)b.g + 2, (size_t)n - 2);
    for (int64_t i = 0; i < n - 2; i++)
        if (got[i + 1] != ((uint8_t *)b.c)[i + 2])
            miss(&k, "d2h byte %lld = %u, cpu %u", (long long)i, got[i + 1],
                 ((uint8_t *)b.c)[i + 2]);
    free(got);
    pair_free(&a);
    pair_free(&b);
    free(h1);
    free(h2);
    end(&k);
}

static void op_memset_zero(void)
{
    const int64_t n = (1 << 21) + 5;
    tcase k;
    begin(&k, "memset_zero", "ndiff", THR_EXACT, "ranges (0,1) (5,4093) (64,1 MiB) (3,0)");
    uint8_t *h = rand_bytes(n);
    pair a = pair_new(h, (size_t)n);
    const size_t ranges[][2] = {{0, 1}, {5, 4093}, {64, (size_t)1 << 20}, {3, 0}};
    for (size_t r = 0; r < 4; r++) {
        g.cpu.memset_zero(&g.cpu, (char *)a.c + ranges[r][0], ranges[r][1]);
        g.gpu.memset_zero(&g.gpu, (char *)a.g + ranges[r][0], ranges[r][1]);
    }
    cmp_bytes(&k, &a);
    pair_free(&a);
    free(h);
    end(&k);
}

/* ---- GEMM ---- */

/* One gemm or gemm_batched call: buffer sizes in floats and offsets of the
 * operands inside them (attention reads q, k and v out of one qkv row). */
typedef struct {
    bool batched, ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, ldb, ldc, sa, sb, sc, batch;
    int64_t na, nb, nc, oa, ob, oc;
} gemm_prob;

static void run_gemm(const zt_backend *be, const gemm_prob *q, const float *a, const float *b,
                     float *c)
{
    a += q->oa, b += q->ob, c += q->oc;
    if (q->batched)
        be->gemm_batched(be, q->ta, q->tb, q->m, q->n, q->k, q->alpha, a, q->lda, q->sa, b,
                         q->ldb, q->sb, q->beta, c, q->ldc, q->sc, q->batch);
    else
        be->gemm(be, q->ta, q->tb, q->m, q->n, q->k, q->alpha, a, q->lda, b, q->ldb, q->beta, c,
                 q->ldc);
}

static float *abs_copy(const float *x, int64_t n)
{
    float *y = xmalloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        y[i] = fabsf(x[i]);
    return y;
}

static void round_to(float *x, int64_t n, zt_dtype dt)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = dt == ZT_BF16 ? zt_bf16_to_f32(zt_f32_to_bf16(x[i]))
                             : zt_f16_to_f32(zt_f32_to_f16(x[i]));
}

static void gemm_check(const gemm_prob *q, const char *what)
{
    char op[32];
    snprintf(op, sizeof op, "%s[%s]", q->batched ? "gemm_batched" : "gemm", g.set->name);
    tcase k;
    begin(&k, op, "mag", g.set->thr, "%s", what);
    float *ha = rand_f32(q->na, -1, 1), *hb = rand_f32(q->nb, -1, 1);
    /* With beta == 0, C must not be read (BLAS; backend.h: "beta == 0 writes
     * zeros"): it starts as NaN. */
    float *hc = q->beta == 0.0f ? filled(q->nc, NAN) : rand_f32(q->nc, -1, 1);
    pair A = pair_f32(ha, q->na), B = pair_f32(hb, q->nb), C = pair_f32(hc, q->nc);
    run_gemm(&g.cpu, q, A.c, B.c, C.c);
    run_gemm(&g.gpu, q, A.g, B.g, C.g);
    float *got = fetch(&C);

    /* The error scale: the same product of absolute values. */
    float *aa = abs_copy(ha, q->na), *ab = abs_copy(hb, q->nb), *mag = abs_copy(hc, q->nc);
    gemm_prob qa = *q;
    qa.alpha = fabsf(q->alpha);
    qa.beta = fabsf(q->beta);
    run_gemm(&g.cpu, &qa, aa, ab, mag);
    add_err(&k, "C", mag_err(C.c, got, mag, q->nc));

    if (g.set->gemm_dt != ZT_F32) {
        round_to(ha, q->na, g.set->gemm_dt);
        round_to(hb, q->nb, g.set->gemm_dt);
        run_gemm(&g.cpu, q, ha, hb, hc);
        snprintf(k.note, sizeof k.note, "vs %s-rounded operands %.1e", g.set->name,
                 mag_err(hc, got, mag, q->nc));
    }
    pair_free(&A);
    pair_free(&B);
    pair_free(&C);
    free(ha);
    free(hb);
    free(hc);
    free(aa);
    free(ab);
    free(mag);
    free(got);
    end(&k);
}

/* A plain (or batched, with `gap` floats between matrices) problem whose rows
 * are `pad` floats wider than the matrices. */
static gemm_prob dense_prob(bool batched, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            float alpha, float beta, int64_t pad, int64_t batch, int64_t gap)
{
    int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    gemm_prob q = {.batched = batched, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                   .alpha = alpha, .beta = beta, .batch = batched ? batch : 1};
    q.lda = (a_cols > 0 ? a_cols : 1) + pad;
    q.ldb = (b_cols > 0 ? b_cols : 1) + pad;
    q.ldc = (n > 0 ? n : 1) + pad;
    q.sa = a_rows * q.lda + gap;
    q.sb = b_rows * q.ldb + gap;
    q.sc = m * q.ldc + gap;
    q.na = q.sa * q.batch;
    q.nb = q.sb * q.batch;
    q.nc = q.sc * q.batch;
    return q;
}

static const char *tt(bool ta, bool tb)
{
    static const char *names[4] = {"nn", "nt", "tn", "tt"};
    return names[2 * ta + tb];
}

static void op_gemm(void)
{
    static const struct {
        int64_t m, n, k, pad;
        float alpha, beta;
        bool big;
    } shapes[] = {
        {5, 7, 3, 3, 0.7f, -0.3f, false},
        {13, 4, 9, 0, 1.0f, 0.0f, false},
        {1, 1, 17, 1, -2.0f, 1.0f, false},
        {1, 4097, 33, 0, 1.0f, 0.0f, false},   /* a row of 1, odd width */
        {1023, 1, 511, 2, 1.0f, 1.0f, false},  /* a column of 1 */
        {131, 97, 263, 5, 0.25f, 0.5f, false}, /* strides wider than the rows */
        {257, 769, 65, 0, 1.0f, 0.0f, false},  /* no multiple of a tensor-core tile */
        {512, 2304, 768, 0, 1.0f, 0.0f, false}, /* GPT-2 small's qkv Linear */
        {768, 768, 4096, 0, 1.0f, 1.0f, false}, /* a weight gradient, accumulated */
        {4096, 4096, 4096, 0, 1.0f, 0.0f, true},
    };
    char what[120];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (shapes[s].big && g.quick)
            continue;
        for (int t = 0; t < 4; t++) {
            bool ta = t / 2, tb = t % 2;
            gemm_prob q = dense_prob(false, ta, tb, shapes[s].m, shapes[s].n, shapes[s].k,
                                     shapes[s].alpha, shapes[s].beta, shapes[s].pad, 1, 0);
            snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld pad=%lld a=%g b=%g", tt(ta, tb),
                     (long long)q.m, (long long)q.n, (long long)q.k, (long long)shapes[s].pad,
                     (double)q.alpha, (double)q.beta);
            gemm_check(&q, what);
        }
    }
    /* k == 0 is C = beta C without reading A or B; m == 0 touches nothing. */
    gemm_prob q = dense_prob(false, false, false, 3, 5, 0, 1.0f, 2.0f, 1, 1, 0);
    gemm_check(&q, "nn m=3 n=5 k=0 b=2: C = beta C");
    q = dense_prob(false, true, false, 0, 5, 4, 1.0f, 0.0f, 0, 1, 0);
    q.nc = 8; /* a C the op must leave alone */
    gemm_check(&q, "tn m=0 n=5 k=4: nothing");
}

/* Attention's batched GEMMs as models/layers.c calls them for one sample:
 * heads side by side in the rows of qkv (t, 3C) and y (t, C), scores (H, t, t). */
static void attn_gemm_cases(int64_t t, int64_t c, int64_t heads)
{
    int64_t hs = c / heads, tt2 = t * t;
    char what[120];
    const struct {
        const char *name;
        bool ta, tb;
        int64_t m, n, k;
        int64_t na, lda, sa, oa, nb, ldb, sb, ob, nc, ldc, sc, oc;
    } pats[] = {
        /* scores = Q K^T */
        {"S=QK^T", false, true, t, t, hs, t * 3 * c, 3 * c, hs, 0, t * 3 * c, 3 * c, hs, c,
         heads * tt2, t, tt2, 0},
        /* y = P V */
        {"y=PV", false, false, t, hs, t, heads * tt2, t, tt2, 0, t * 3 * c, 3 * c, hs, 2 * c,
         t * c, c, hs, 0},
        /* dV = P^T dy, into dqkv's v columns */
        {"dV=P^Tdy", true, false, t, hs, t, heads * tt2, t, tt2, 0, t * c, c, hs, 0,
         t * 3 * c, 3 * c, hs, 2 * c},
        /* dP = dy V^T */
        {"dP=dyV^T", false, true, t, t, hs, t * c, c, hs, 0, t * 3 * c, 3 * c, hs, 2 * c,
         heads * tt2, t, tt2, 0},
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        gemm_prob q = {.batched = true, .ta = pats[i].ta, .tb = pats[i].tb, .m = pats[i].m,
                       .n = pats[i].n, .k = pats[i].k, .alpha = 1.0f, .beta = 0.0f,
                       .lda = pats[i].lda, .ldb = pats[i].ldb, .ldc = pats[i].ldc,
                       .sa = pats[i].sa, .sb = pats[i].sb, .sc = pats[i].sc, .batch = heads,
                       .na = pats[i].na, .nb = pats[i].nb, .nc = pats[i].nc, .oa = pats[i].oa,
                       .ob = pats[i].ob, .oc = pats[i].oc};
        snprintf(what, sizeof what, "attention %s t=%lld C=%lld heads=%lld", pats[i].name,
                 (long long)t, (long long)c, (long long)heads);
        gemm_check(&q, what);
    }
}

static void op_gemm_batched(void)
{
    static const struct {
        int64_t m, n, k, pad, batch, gap;
        float alpha, beta;
    } shapes[] = {
        {5, 7, 3, 1, 3, 5, 0.7f, -0.3f},
        {33, 17, 65, 0, 7, 0, 1.0f, 0.0f},
        {1, 1, 1, 0, 1, 0, 1.0f, 1.0f},
    };
    char what[120];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t / 2, tb = t % 2;
            gemm_prob q = dense_prob(true, ta, tb, shapes[s].m, shapes[s].n, shapes[s].k,
                                     shapes[s].alpha, shapes[s].beta, shapes[s].pad,
                                     shapes[s].batch, shapes[s].gap);
            snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld batch=%lld pad=%lld gap=%lld",
                     tt(ta, tb), (long long)q.m, (long long)q.n, (long long)q.k,
                     (long long)q.batch, (long long)shapes[s].pad, (long long)shapes[s].gap);
            gemm_check(&q, what);
        }
    attn_gemm_cases(16, 32, 4);
    attn_gemm_cases(17, 30, 3);
    attn_gemm_cases(128, 768, 12);
    if (!g.quick)
        attn_gemm_cases(1024, 768, 12);
    gemm_prob q = dense_prob(true, false, false, 3, 4, 0, 1.0f, 2.0f, 0, 2, 3);
    gemm_check(&q, "nn m=3 n=4 k=0 batch=2 b=2: C = beta C");
    q = dense_prob(true, true, true, 3, 4, 0, 1.0f, 0.0f, 0, 2, 3);
    gemm_check(&q, "tt m=3 n=4 k=0 batch=2 b=0: C = 0");
    q = dense_prob(true, false, false, 3, 4, 2, 1.0f, 0.0f, 0, 0, 0);
    q.nc = 12; /* batch 0: the op must leave C alone */
    gemm_check(&q, "nn batch=0: nothing");
}

/* ---- element-wise and row ops ---- */

static void op_bias_add(void)
{
    const int64_t shapes[][2] = {{3, 5}, {1, 1}, {1, 4097}, {300, 211}, {4096, 768}, {16384, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        tcase k;
        begin(&k, "bias_add", "norm", THR_EXACT, "rows=%lld cols=%lld", (long long)rows,
              (long long)cols);
        float *hy = rand_f32(rows * cols, -1, 1), *hb = rand_f32(cols, -1, 1);
        pair y = pair_f32(hy, rows * cols), b = pair_f32(hb, cols);
        g.cpu.bias_add(&g.cpu, y.c, b.c, rows, cols);
        g.gpu.bias_add(&g.gpu, y.g, b.g, rows, cols);
        cmp_f32(&k, "y", &y, rows * cols);
        pair_free(&y);
        pair_free(&b);
        free(hy);
        free(hb);
        end(&k);
    }
}

static void op_bias_grad(void)
{
    const int64_t shapes[][2] = {{4, 3},    {7, 64},    {5, 130},  {700, 97},
                                 {1000, 1}, {1, 4097},  {16384, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        if (g.quick && rows * cols > (1 << 22))
            continue;
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            begin(&k, "bias_grad", "norm", THR_F32, "rows=%lld cols=%lld accumulate=%d",
                  (long long)rows, (long long)cols, acc);
            float *hdy = rand_f32(rows * cols, -1, 1);
            /* Without accumulate the old value must not be read. */
            float *hdb = acc ? rand_f32(cols, -1, 1) : filled(cols, NAN);
            pair dy = pair_f32(hdy, rows * cols), db = pair_f32(hdb, cols);
            g.cpu.bias_grad(&g.cpu, db.c, dy.c, rows, cols, acc);
            g.gpu.bias_grad(&g.gpu, db.g, dy.g, rows, cols, acc);
            cmp_f32(&k, "dbias", &db, cols);
            pair_free(&dy);
            pair_free(&db);
            free(hdy);
            free(hdb);
            end(&k);
        }
    }
}

/* Uniform values with NaN, infinities and signed zeros at fixed places. */
static float *rand_specials(int64_t n, float lo, float hi)
{
    float *x = rand_f32(n, lo, hi);
    const float sp[] = {NAN, -INFINITY, INFINITY, 0.0f, -0.0f};
    for (int64_t i = 0; i < 5 && i < n; i++)
        x[(i * 7919) % n] = sp[i];
    return x;
}

static const int64_t elementwise_sizes[] = {1, 17, 100003, (1 << 22) + 1};
#define N_ELEMENTWISE (int)(sizeof elementwise_sizes / sizeof elementwise_sizes[0])

static void op_relu_forward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (g.quick && n > 200000)
            continue;
        tcase k;
        begin(&k, "relu_forward", "norm", THR_EXACT,
              "n=%lld with NaN/inf/-0; in place too (NaN stays NaN)", (long long)n);
        float *hx = rand_specials(n, -1, 1), *hy = filled(n, 7.0f);
        pair x = pair_f32(hx, n), y = pair_f32(hy, n), xi = pair_f32(hx, n);
        g.cpu.relu_forward(&g.cpu, y.c, x.c, n);
        g.gpu.relu_forward(&g.gpu, y.g, x.g, n);
        g.cpu.relu_forward(&g.cpu, xi.c, xi.c, n);
        g.gpu.relu_forward(&g.gpu, xi.g, xi.g, n);
        cmp_f32(&k, "y", &y, n);
        cmp_f32(&k, "in place", &xi, n);
        pair_free(&x);
        pair_free(&y);
        pair_free(&xi);
        free(hx);
        free(hy);
        end(&k);
    }
}

static void op_relu_backward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (g.quick && n > 200000)
            continue;
        tcase k;
        begin(&k, "relu_backward", "norm", THR_EXACT,
              "n=%lld, inf dy at inactive units stays 0; in place too", (long long)n);
        float *hy = rand_f32(n, -1, 1), *hdy = rand_f32(n, -1, 1), *hdx = filled(n, 7.0f);
        for (int64_t i = 0; i < n; i++)
            hy[i] = hy[i] > 0.0f ? hy[i] : 0.0f; /* a ReLU output */
        for (int64_t i = 0; i < n; i += 97)
            if (hy[i] == 0.0f)
                hdy[i] = i % 2 ? INFINITY : -INFINITY;
        pair y = pair_f32(hy, n), dy = pair_f32(hdy, n), dx = pair_f32(hdx, n);
        pair di = pair_f32(hdy, n);
        g.cpu.relu_backward(&g.cpu, dx.c, dy.c, y.c, n);
        g.gpu.relu_backward(&g.gpu, dx.g, dy.g, y.g, n);
        g.cpu.relu_backward(&g.cpu, di.c, di.c, y.c, n);
        g.gpu.relu_backward(&g.gpu, di.g, di.g, y.g, n);
        cmp_f32(&k, "dx", &dx, n);
        cmp_f32(&k, "in place", &di, n);
        pair_free(&y);
        pair_free(&dy);
        pair_free(&dx);
        pair_free(&di);
        free(hy);
        free(hdy);
        free(hdx);
        end(&k);
    }
}

static void xent_case(int64_t rows, int64_t classes, float spread, float dscale, int32_t ignore,
                      int64_t ignore_every, bool grad)
{
    tcase k;
    begin(&k, "xent_forward_backward", "norm", THR_F32,
          "rows=%lld classes=%lld spread=%g dscale=%g ignore every %lld%s", (long long)rows,
          (long long)classes, (double)spread, (double)dscale, (long long)ignore_every,
          grad ? "" : ", no dlogits");
    float *hl = rand_f32(rows * classes, -spread, spread);
    int32_t *hlab = rand_i32(rows, 0, (int32_t)classes);
    for (int64_t r = 0; ignore_every && r < rows; r++)
        if (r % ignore_every == ignore_every - 1)
            hlab[r] = ignore;
    float *hd = filled(rows * classes, 7.0f); /* ignored rows must become zeros */
    pair l = pair_f32(hl, rows * classes), lab = pair_new(hlab, (size_t)rows * sizeof *hlab);
    pair d = pair_f32(hd, rows * classes);
    double lc = g.cpu.xent_forward_backward(&g.cpu, l.c, lab.c, rows, classes, ignore, dscale,
                                            grad ? d.c : NULL);
    double lg = g.gpu.xent_forward_backward(&g.gpu, l.g, lab.g, rows, classes, ignore, dscale,
                                            grad ? d.g : NULL);
    add_err(&k, "loss", rel_err(lc, lg));
    cmp_f32(&k, "dlogits", &d, rows * classes);
    snprintf(k.note, sizeof k.note, "loss %.10g vs cpu %.10g", lg, lc);
    pair_free(&l);
    pair_free(&lab);
    pair_free(&d);
    free(hl);
    free(hlab);
    free(hd);
    end(&k);
}

static void op_xent(void)
{
    xent_case(37, 11, 3.0f, 1.0f, -100, 5, true);
    xent_case(5, 1, 3.0f, 0.5f, -100, 0, true);       /* one class: loss 0, gradient 0 */
    xent_case(1300, 53, 4.0f, 0.01f, -100, 5, true);
    xent_case(9, 7, 1000.0f, -2.0f, -1, 4, true);     /* needs the max subtraction */
    xent_case(16384, 65, 5.0f, 1.0f / 16384, -100, 0, true); /* GPT-lite char logits */
    xent_case(4, 50257, 10.0f, 0.25f, -100, 3, true);  /* GPT-2 BPE vocabulary */
    xent_case(6, 13, 2.0f, 1.0f, -100, 1, true);       /* every row ignored: loss 0 */
    xent_case(1300, 53, 4.0f, 1.0f, -100, 5, false);   /* evaluation: no gradient */
}

static void op_scale(void)
{
    const int64_t sizes[] = {0, 5, 100003, 1 << 22};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        if (g.quick && n > 200000)
            continue;
        tcase k;
        begin(&k, "scale", "norm", THR_EXACT, "n=%lld a=-0.375, and a=0 over inf/NaN",
              (long long)n);
        float *hx = rand_specials(n, -2, 2);
        pair x = pair_f32(hx, n), z = pair_f32(hx, n);
        g.cpu.scale(&g.cpu, x.c, -0.375f, n);
        g.gpu.scale(&g.gpu, x.g, -0.375f, n);
        g.cpu.scale(&g.cpu, z.c, 0.0f, n);
        g.gpu.scale(&g.gpu, z.g, 0.0f, n);
        cmp_f32(&k, "a=-0.375", &x, n);
        cmp_f32(&k, "a=0", &z, n);
        pair_free(&x);
        pair_free(&z);
        free(hx);
        end(&k);
    }
}

static void op_axpy(void)
{
    const int64_t sizes[] = {0, 5, 100003, 1 << 22};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        if (g.quick && n > 200000)
            continue;
        tcase k;
        begin(&k, "axpy", "norm", THR_ULP, "n=%lld a=1.5 and a=-0.3", (long long)n);
        float *hx = rand_f32(n, -2, 2), *hy = rand_f32(n, -2, 2);
        pair x = pair_f32(hx, n), y = pair_f32(hy, n), y2 = pair_f32(hy, n);
        g.cpu.axpy(&g.cpu, y.c, 1.5f, x.c, n);
        g.gpu.axpy(&g.gpu, y.g, 1.5f, x.g, n);
        g.cpu.axpy(&g.cpu, y2.c, -0.3f, x.c, n);
        g.gpu.axpy(&g.gpu, y2.g, -0.3f, x.g, n);
        cmp_f32(&k, "a=1.5", &y, n);
        cmp_f32(&k, "a=-0.3", &y2, n);
        pair_free(&x);
        pair_free(&y);
        pair_free(&y2);
        free(hx);
        free(hy);
        end(&k);
    }
}

static void op_sum_squares(void)
{
    /* Around the 4096-element chunk, several passes of chunks, and (full run)
     * 64 Mi elements. */
    const int64_t sizes[] = {0, 1, 4095, 4096, 4097, 1000003, 3 * 4096 * 256 + 17, 1 << 26};
    for (int dt = 0; dt < ZT_NDTYPES; dt++) {
        tcase k;
        begin(&k, "sum_squares", "rel", THR_F64, "%s n=0..%s%s", zt_dtype_name(dt),
              g.quick ? "3145745" : "67108864", dt == ZT_F32 ? ", 2^100 and 2^101" : "");
        char label[32];
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            if (g.quick && n > (1 << 22))
                continue;
            float *x = rand_f32(n, -3, 3);
            void *h = to_dtype(x, n, dt);
            pair p = pair_new(h, (size_t)n * zt_dtype_size(dt));
            double rc = g.cpu.sum_squares(&g.cpu, p.c, dt, n);
            double rg = g.gpu.sum_squares(&g.gpu, p.g, dt, n);
            snprintf(label, sizeof label, "n=%lld", (long long)n);
            add_err(&k, label, rel_err(rc, rg));
            pair_free(&p);
            free(x);
            free(h);
        }
        if (dt == ZT_F32) {
            /* Squares that overflow fp32 still add up in float64: 5 * 2^200. */
            const float big[2] = {0x1p100f, -0x1p101f};
            pair p = pair_f32(big, 2);
            add_err(&k, "2^100,2^101", rel_err(ldexp(5.0, 200), g.gpu.sum_squares(&g.gpu, p.g,
                                                                                  ZT_F32, 2)));
            pair_free(&p);
        }
        end(&k);
    }
}

static void op_has_inf_nan(void)
{
    const int64_t sizes[] = {1, 9, 100003, (1 << 24) + 5};
    /* inf, -inf, NaN, -NaN and the largest finite value, per dtype */
    const uint32_t bad[ZT_NDTYPES][4] = {{0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u},
                                         {0x7c00u, 0xfc00u, 0x7e00u, 0xfe00u},
                                         {0x7f80u, 0xff80u, 0x7fc0u, 0xffc0u}};
    const uint32_t max_finite[ZT_NDTYPES] = {0x7f7fffffu, 0x7bffu, 0x7f7fu};
    const float range[ZT_NDTYPES] = {1e30f, 6e4f, 1e30f};
    for (int dt = 0; dt < ZT_NDTYPES; dt++) {
        size_t es = zt_dtype_size(dt);
        tcase k;
        begin(&k, "has_inf_nan", "ndiff", THR_EXACT,
              "%s n=0..%lld: max finite; +-inf, +-NaN at first/middle/last", zt_dtype_name(dt),
              (long long)sizes[g.quick ? 2 : 3]);
        if (g.gpu.has_inf_nan(&g.gpu, NULL, dt, 0))
            miss(&k, "n=0 said true");
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            if (g.quick && n > 200000)
                continue;
            float *x = rand_f32(n, -range[dt], range[dt]);
            void *h = to_dtype(x, n, dt);
            memcpy((char *)h + (size_t)(n / 3) * es, &max_finite[dt], es);
            pair p = pair_new(h, (size_t)n * es);
            bool rc = g.cpu.has_inf_nan(&g.cpu, p.c, dt, n);
            bool rg = g.gpu.has_inf_nan(&g.gpu, p.g, dt, n);
            if (rc || rg)
                miss(&k, "n=%lld finite: cuda %d, cpu %d", (long long)n, rg, rc);
            const int64_t where[3] = {0, n / 2, n - 1};
            for (int b = 0; b < 4; b++)
                for (int w = 0; w < 3; w++) {
                    size_t off = (size_t)where[w] * es;
                    /* bit patterns from the (little-endian) low bytes of a uint32 */
                    g.cpu.copy_h2d(&g.cpu, (char *)p.c + off, &bad[dt][b], es);
                    g.gpu.copy_h2d(&g.gpu, (char *)p.g + off, &bad[dt][b], es);
                    rc = g.cpu.has_inf_nan(&g.cpu, p.c, dt, n);
                    rg = g.gpu.has_inf_nan(&g.gpu, p.g, dt, n);
                    if (!rc || !rg)
                        miss(&k, "n=%lld 0x%x at %lld: cuda %d, cpu %d", (long long)n,
                             (unsigned)bad[dt][b], (long long)where[w], rg, rc);
                    g.cpu.copy_h2d(&g.cpu, (char *)p.c + off, (char *)h + off, es);
                    g.gpu.copy_h2d(&g.gpu, (char *)p.g + off, (char *)h + off, es);
                }
            pair_free(&p);
            free(x);
            free(h);
        }
        end(&k);
    }
}

/* Values where conversion rules show: zeros, infinities, NaNs (one signalling),
 * fp16's overflow threshold and subnormals with their ties, bf16's ties and
 * largest values, an fp32 subnormal; then uniform values, and small ones. */
static float *convert_values(int64_t n, int64_t rotate)
{
    static const uint32_t sp[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00000u, 0x7fa00000u, /* sNaN */
        0x477fe000u, /* 65504, fp16 max */
        0x477fefffu, /* just below 65520: rounds to 65504 */
        0x477ff000u, /* 65520: rounds to inf */
        0xc788b800u, /* -70000 */
        0x38800000u, /* 2^-14, fp16's smallest normal */
        0x33800000u, /* 2^-24, fp16's smallest subnormal */
        0x33000000u, /* 2^-25, a tie: rounds to 0 */
        0x33400000u, /* 1.5 * 2^-25: rounds to 2^-24 */
        0x00000005u, /* fp32 subnormal */
        0x3f801000u, /* 1 + 2^-11: fp16 tie to 1 */
        0x3f803000u, /* 1 + 3 * 2^-11: fp16 tie up */
        0x3f808000u, /* 1 + 2^-8: bf16 tie to 1 */
        0x3f818000u, /* 1 + 3 * 2^-8: bf16 tie up */
        0x7f7f7fffu, /* rounds to bf16's largest finite */
        0x7f7f8000u, /* ties to bf16 inf */
        0x7f7fffffu, /* fp32 max */
    };
    const int64_t nsp = (int64_t)(sizeof sp / sizeof sp[0]);
    float *x = rand_f32(n, -100, 100);
    for (int64_t i = n / 2; i < n; i += 3)
        x[i] *= 1e-6f; /* fp16 subnormal range */
    for (int64_t i = 0; i < nsp && i < n; i++)
        memcpy(&x[i], &sp[(i + rotate) % nsp], sizeof(float));
    return x;
}

static void convert_run(tcase *k, zt_dtype sdt, zt_dtype ddt, int64_t n, float alpha, bool acc,
                        bool in_place)
{
    float *s32 = convert_values(n, 0), *d32 = convert_values(n, 7);
    void *hs = to_dtype(s32, n, sdt), *hd = to_dtype(d32, n, ddt);
    pair d = pair_new(hd, (size_t)n * zt_dtype_size(ddt));
    pair s = in_place ? d : pair_new(hs, (size_t)n * zt_dtype_size(sdt));
    g.cpu.convert(&g.cpu, d.c, ddt, s.c, sdt, n, alpha, acc);
    g.gpu.convert(&g.gpu, d.g, ddt, s.g, sdt, n, alpha, acc);
    char label[48];
    snprintf(label, sizeof label, "n=%lld alpha=%g", (long long)n, (double)alpha);
    cmp_bits(k, label, &d, ddt, n);
    if (!in_place)
        pair_free(&s);
    pair_free(&d);
    free(s32);
    free(d32);
    free(hs);
    free(hd);
}

static void op_convert(void)
{
    const int64_t sizes[] = {1, 7, 50001, (1 << 22) + 3};
    /* 1/3 is not a power of two: only there does `dst + alpha * src` with two
     * roundings differ from one fused multiply-add */
    const float alphas[] = {1.0f, -0.5f, 1024.0f, 1.0f / 3.0f};
    const int na = (int)(sizeof alphas / sizeof alphas[0]);
    int ns = g.quick ? 3 : 4;
    for (int sdt = 0; sdt < ZT_NDTYPES; sdt++)
        for (int ddt = 0; ddt < ZT_NDTYPES; ddt++)
            for (int acc = 0; acc < 2; acc++) {
                tcase k;
                begin(&k, "convert", "ndiff", THR_EXACT,
                      "%s -> %s accumulate=%d alpha 1,-0.5,1024,1/3 n=1..%lld",
                      zt_dtype_name(sdt), zt_dtype_name(ddt), acc, (long long)sizes[ns - 1]);
                for (int s = 0; s < ns; s++)
                    for (int a = 0; a < na; a++)
                        convert_run(&k, sdt, ddt, sizes[s], alphas[a], acc, false);
                end(&k);
            }
    for (int dt = 0; dt < ZT_NDTYPES; dt++)
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            begin(&k, "convert", "ndiff", THR_EXACT, "%s in place accumulate=%d alpha 1..1/3",
                  zt_dtype_name(dt), acc);
            for (int a = 0; a < na; a++)
                convert_run(&k, dt, dt, sizes[2], alphas[a], acc, true);
            end(&k);
        }
}

/* ---- transformer layers ---- */

static void op_embedding_forward(void)
{
    const int64_t shapes[][3] = {{9, 5, 4}, {3000, 48, 37}, {1, 1, 1}, {1000, 33, 50257},
                                 {16384, 768, 65}}; /* rows, cols, vocab */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], vocab = shapes[s][2];
        if (g.quick && rows * cols > (1 << 22))
            continue;
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            begin(&k, "embedding_forward", "norm", THR_EXACT,
                  "rows=%lld cols=%lld vocab=%lld accumulate=%d", (long long)rows,
                  (long long)cols, (long long)vocab, acc);
            int32_t *hids = rand_i32(rows, 0, (int32_t)vocab);
            float *ht = rand_f32(vocab * cols, -1, 1);
            float *hy = acc ? rand_f32(rows * cols, -1, 1) : filled(rows * cols, NAN);
            pair ids = pair_new(hids, (size_t)rows * sizeof *hids), t = pair_f32(ht, vocab * cols);
            pair y = pair_f32(hy, rows * cols);
            g.cpu.embedding_forward(&g.cpu, y.c, ids.c, t.c, rows, cols, acc);
            g.gpu.embedding_forward(&g.gpu, y.g, ids.g, t.g, rows, cols, acc);
            cmp_f32(&k, "y", &y, rows * cols);
            pair_free(&ids);
            pair_free(&t);
            pair_free(&y);
            free(hids);
            free(ht);
            free(hy);
            end(&k);
        }
    }
}

static void op_embedding_backward(void)
{
    const int64_t shapes[][3] = {{40, 21, 6},       {3, 1, 2}, {4000, 70, 50},
                                 {2048, 64, 50257}, {16384, 768, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], vocab = shapes[s][2];
        if (g.quick && rows * cols > (1 << 22))
            continue;
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            begin(&k, "embedding_backward", "norm", THR_F32,
                  "rows=%lld cols=%lld vocab=%lld accumulate=%d, last row unused",
                  (long long)rows, (long long)cols, (long long)vocab, acc);
            /* ids below vocab - 1: the unused last row must become 0 or stay */
            int32_t *hids = rand_i32(rows, 0, (int32_t)(vocab > 1 ? vocab - 1 : 1));
            float *hdy = rand_f32(rows * cols, -1, 1);
            float *ht = acc ? rand_f32(vocab * cols, -1, 1) : filled(vocab * cols, NAN);
            pair ids = pair_new(hids, (size_t)rows * sizeof *hids), dy = pair_f32(hdy, rows * cols);
            pair t = pair_f32(ht, vocab * cols);
            g.cpu.embedding_backward(&g.cpu, t.c, ids.c, dy.c, rows, cols, vocab, acc);
            g.gpu.embedding_backward(&g.gpu, t.g, ids.g, dy.g, rows, cols, vocab, acc);
            cmp_f32(&k, "dtable", &t, vocab * cols);
            pair_free(&ids);
            pair_free(&dy);
            pair_free(&t);
            free(hids);
            free(hdy);
            free(ht);
            end(&k);
        }
    }
}

static void op_sinusoid_add(void)
{
    const int64_t shapes[][3] = {{3, 50, 33}, {1, 1, 1}, {4, 128, 96}, {1, 7, 5},
                                 {2, 2048, 768}}; /* n, t, cols */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], t = shapes[s][1], cols = shapes[s][2], total = n * t * cols;
        tcase k;
        begin(&k, "sinusoid_add", "norm", THR_ULP, "n=%lld t=%lld cols=%lld", (long long)n,
              (long long)t, (long long)cols);
        float *hy = rand_f32(total, -1, 1);
        pair y = pair_f32(hy, total);
        g.cpu.sinusoid_add(&g.cpu, y.c, n, t, cols);
        g.gpu.sinusoid_add(&g.gpu, y.g, n, t, cols);
        cmp_f32(&k, "y", &y, total);
        pair_free(&y);
        free(hy);
        end(&k);
    }
}

static const struct {
    int64_t rows, cols;
    float offset; /* far from 0 needs a two-pass variance */
} ln_shapes[] = {{4, 7, 0.0f},  {3, 33, 3.0f},    {2, 16, -100.0f}, {300, 130, 0.5f},
                 {1, 768, 0.0f}, {5, 1, 0.0f},    {2, 4099, 1.0f},  {4096, 768, 0.0f},
                 {16384, 768, 0.0f}};
#define N_LN_SHAPES (sizeof ln_shapes / sizeof ln_shapes[0])
#define LN_EPS 1e-5f

static void op_layernorm_forward(void)
{
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        int64_t rows = ln_shapes[s].rows, cols = ln_shapes[s].cols, nx = rows * cols;
        if (g.quick && nx > (1 << 22))
            continue;
        tcase k;
        begin(&k, "layernorm_forward", "norm", THR_F32, "rows=%lld cols=%lld offset=%g",
              (long long)rows, (long long)cols, (double)ln_shapes[s].offset);
        float *hx = rand_f32(nx, ln_shapes[s].offset - 1, ln_shapes[s].offset + 1);
        float *hw = rand_f32(cols, 0.5f, 1.5f), *hb = rand_f32(cols, -0.5f, 0.5f);
        float *hy = filled(nx, NAN), *hs = filled(rows, NAN);
        pair x = pair_f32(hx, nx), w = pair_f32(hw, cols), b = pair_f32(hb, cols);
        pair y = pair_f32(hy, nx), mean = pair_f32(hs, rows), rstd = pair_f32(hs, rows);
        g.cpu.layernorm_forward(&g.cpu, y.c, mean.c, rstd.c, x.c, w.c, b.c, rows, cols, LN_EPS);
        g.gpu.layernorm_forward(&g.gpu, y.g, mean.g, rstd.g, x.g, w.g, b.g, rows, cols, LN_EPS);
        cmp_f32(&k, "y", &y, nx);
        cmp_f32(&k, "mean", &mean, rows);
        cmp_f32(&k, "rstd", &rstd, rows);
        pair_free(&x);
        pair_free(&w);
        pair_free(&b);
        pair_free(&y);
        pair_free(&mean);
        pair_free(&rstd);
        free(hx);
        free(hw);
        free(hb);
        free(hy);
        free(hs);
        end(&k);
    }
}

static void op_layernorm_backward(void)
{
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        int64_t rows = ln_shapes[s].rows, cols = ln_shapes[s].cols, nx = rows * cols;
        if (g.quick && nx > (1 << 22))
            continue;
        float *hx = rand_f32(nx, ln_shapes[s].offset - 1, ln_shapes[s].offset + 1);
        float *hw = rand_f32(cols, 0.5f, 1.5f), *hb = rand_f32(cols, -0.5f, 0.5f);
        float *hdy = rand_f32(nx, -1, 1);
        float *hdx0 = rand_f32(nx, -1, 1), *hdw0 = rand_f32(cols, -1, 1);
        float *hdb0 = rand_f32(cols, -1, 1);
        /* mean and rstd as the CPU forward wrote them, the same on both sides */
        float *y = xmalloc((size_t)nx * sizeof *y), *hmean = xmalloc((size_t)rows * 4);
        float *hrstd = xmalloc((size_t)rows * 4);
        g.cpu.layernorm_forward(&g.cpu, y, hmean, hrstd, hx, hw, hb, rows, cols, LN_EPS);
        pair x = pair_f32(hx, nx), w = pair_f32(hw, cols), dy = pair_f32(hdy, nx);
        pair mean = pair_f32(hmean, rows), rstd = pair_f32(hrstd, rows);
        /* acc_dx, acc_params; the last is dx == dy in place */
        const int variants[5][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}};
        for (int v = 0; v < 5; v++) {
            bool acc_dx = variants[v][0], acc_p = variants[v][1], in_place = variants[v][2];
            tcase k;
            begin(&k, "layernorm_backward", "norm", THR_F32,
                  "rows=%lld cols=%lld acc_dx=%d acc_params=%d%s", (long long)rows,
                  (long long)cols, acc_dx, acc_p, in_place ? " dx==dy" : "");
            float *nan_x = filled(nx, NAN), *nan_c = filled(cols, NAN);
            pair dx = pair_f32(in_place ? hdy : acc_dx ? hdx0 : nan_x, nx);
            pair dw = pair_f32(acc_p ? hdw0 : nan_c, cols);
            pair db = pair_f32(acc_p ? hdb0 : nan_c, cols);
            const float *dy_c = in_place ? dx.c : dy.c, *dy_g = in_place ? dx.g : dy.g;
            g.cpu.layernorm_backward(&g.cpu, dx.c, dw.c, db.c, dy_c, x.c, mean.c, rstd.c, w.c, rows,
                                     cols, acc_dx, acc_p);
            g.gpu.layernorm_backward(&g.gpu, dx.g, dw.g, db.g, dy_g, x.g, mean.g, rstd.g, w.g, rows,
                                     cols, acc_dx, acc_p);
            cmp_f32(&k, "dx", &dx, nx);
            cmp_f32(&k, "dw", &dw, cols);
            cmp_f32(&k, "db", &db, cols);
            pair_free(&dx);
            pair_free(&dw);
            pair_free(&db);
            free(nan_x);
            free(nan_c);
            end(&k);
        }
        pair_free(&x);
        pair_free(&w);
        pair_free(&dy);
        pair_free(&mean);
        pair_free(&rstd);
        free(hx);
        free(hw);
        free(hb);
        free(hdy);
        free(hdx0);
        free(hdw0);
        free(hdb0);
        free(y);
        free(hmean);
        free(hrstd);
    }
}

/* GELU inputs: the curved middle, the saturated tails and a few large values. */
static float *gelu_inputs(int64_t n)
{
    float *x = rand_f32(n, -6, 6);
    const float sp[] = {-20.0f, 20.0f, -100.0f, 100.0f, 0.0f, -0.0f};
    for (int64_t i = 0; i < 6 && i < n; i++)
        x[(i * 7919) % n] = sp[i];
    return x;
}

static void op_gelu_forward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (g.quick && n > 200000)
            continue;
        tcase k;
        begin(&k, "gelu_forward", "norm", THR_F32, "n=%lld x in [-6,6] and +-20, +-100; in place",
              (long long)n);
        float *hx = gelu_inputs(n), *hy = filled(n, 7.0f);
        pair x = pair_f32(hx, n), y = pair_f32(hy, n), xi = pair_f32(hx, n);
        g.cpu.gelu_forward(&g.cpu, y.c, x.c, n);
        g.gpu.gelu_forward(&g.gpu, y.g, x.g, n);
        g.cpu.gelu_forward(&g.cpu, xi.c, xi.c, n);
        g.gpu.gelu_forward(&g.gpu, xi.g, xi.g, n);
        cmp_f32(&k, "y", &y, n);
        cmp_f32(&k, "in place", &xi, n);
        pair_free(&x);
        pair_free(&y);
        pair_free(&xi);
        free(hx);
        free(hy);
        end(&k);
    }
}

static void op_gelu_backward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (g.quick && n > 200000)
            continue;
        tcase k;
        begin(&k, "gelu_backward", "norm", THR_F32, "n=%lld; dx == dy in place", (long long)n);
        float *hx = gelu_inputs(n), *hdy = rand_f32(n, -1, 1), *hdx = filled(n, 7.0f);
        pair x = pair_f32(hx, n), dy = pair_f32(hdy, n), dx = pair_f32(hdx, n);
        pair di = pair_f32(hdy, n);
        g.cpu.gelu_backward(&g.cpu, dx.c, dy.c, x.c, n);
        g.gpu.gelu_backward(&g.gpu, dx.g, dy.g, x.g, n);
        g.cpu.gelu_backward(&g.cpu, di.c, di.c, x.c, n);
        g.gpu.gelu_backward(&g.gpu, di.g, di.g, x.g, n);
        cmp_f32(&k, "dx", &dx, n);
        cmp_f32(&k, "in place", &di, n);
        pair_free(&x);
        pair_free(&dy);
        pair_free(&dx);
        pair_free(&di);
        free(hx);
        free(hdy);
        free(hdx);
        end(&k);
    }
}

/* Attention score shapes: lengths (when not NULL) include 0 (an all-masked
 * row), 1 and t. */
typedef struct {
    int64_t n, h, t;
    bool causal, lengths, big;
    float scale, spread;
} attn_shape;

static const attn_shape attn_shapes[] = {
    {3, 2, 5, false, true, false, 0.6f, 2.0f},    {3, 2, 5, true, true, false, 0.6f, 2.0f},
    {6, 4, 50, true, true, false, 0.3f, 4.0f},     {6, 4, 50, false, true, false, 0.3f, 4.0f},
    {2, 3, 1, true, false, false, 1.0f, 2.0f},     {4, 2, 129, true, false, false, 0.125f, 4.0f},
    {2, 2, 33, false, false, false, 1.0f, 1000.0f}, {2, 4, 300, false, true, false, 0.125f, 4.0f},
    {2, 12, 1024, true, false, true, 0.125f, 8.0f},
};

static int32_t *attn_lengths(const attn_shape *a)
{
    int32_t *len = rand_i32(a->n, 1, (int32_t)a->t + 1);
    if (a->n > 1)
        len[0] = (int32_t)a->t;
    if (a->n > 2)
        len[2] = 0;
    if (a->n > 3)
        len[3] = 1;
    return len;
}

static void op_attn_softmax_forward(void)
{
    for (size_t s = 0; s < sizeof attn_shapes / sizeof attn_shapes[0]; s++) {
        const attn_shape *a = &attn_shapes[s];
        if (g.quick && a->big)
            continue;
        int64_t total = a->n * a->h * a->t * a->t;
        tcase k;
        begin(&k, "attn_softmax_forward", "norm", THR_F32,
              "n=%lld h=%lld t=%lld causal=%d lengths=%s scale=%g spread=%g", (long long)a->n,
              (long long)a->h, (long long)a->t, a->causal, a->lengths ? "yes" : "no",
              (double)a->scale, (double)a->spread);
        float *hatt = rand_f32(total, -a->spread, a->spread);
        int32_t *hlen = a->lengths ? attn_lengths(a) : NULL;
        pair att = pair_f32(hatt, total);
        pair len = pair_new(hlen, a->lengths ? (size_t)a->n * sizeof *hlen : 0);
        g.cpu.attn_softmax_forward(&g.cpu, att.c, a->n, a->h, a->t, a->scale, a->causal,
                                   a->lengths ? len.c : NULL);
        g.gpu.attn_softmax_forward(&g.gpu, att.g, a->n, a->h, a->t, a->scale, a->causal,
                                   a->lengths ? len.g : NULL);
        cmp_f32(&k, "p", &att, total);
        pair_free(&att);
        pair_free(&len);
        free(hatt);
        free(hlen);
        end(&k);
    }
}

static void op_attn_softmax_backward(void)
{
    for (size_t s = 0; s < sizeof attn_shapes / sizeof attn_shapes[0]; s++) {
        const attn_shape *a = &attn_shapes[s];
        if (g.quick && a->big)
            continue;
        int64_t total = a->n * a->h * a->t * a->t, rows = a->n * a->h * a->t;
        tcase k;
        begin(&k, "attn_softmax_backward", "norm", THR_F32,
              "rows=%lld t=%lld from causal=%d lengths=%s scale=%g", (long long)rows,
              (long long)a->t, a->causal, a->lengths ? "yes" : "no", (double)a->scale);
        /* p from the CPU forward (masked zeros included), the same on both sides */
        float *hp = rand_f32(total, -a->spread, a->spread), *hd = rand_f32(total, -1, 1);
        int32_t *hlen = a->lengths ? attn_lengths(a) : NULL;
        g.cpu.attn_softmax_forward(&g.cpu, hp, a->n, a->h, a->t, a->scale, a->causal, hlen);
        pair p = pair_f32(hp, total), d = pair_f32(hd, total);
        g.cpu.attn_softmax_backward(&g.cpu, d.c, p.c, rows, a->t, a->scale);
        g.gpu.attn_softmax_backward(&g.gpu, d.g, p.g, rows, a->t, a->scale);
        cmp_f32(&k, "dscores", &d, total);
        pair_free(&p);
        pair_free(&d);
        free(hp);
        free(hd);
        free(hlen);
        end(&k);
    }
}

static void dropout_case(int64_t n, int64_t a, int64_t b, int64_t c, int64_t key_b,
                         int64_t key_c, float p, bool in_place)
{
    int64_t total = n * a * b * c;
    tcase k;
    begin(&k, "dropout", "norm", THR_EXACT,
          "(%lld,%lld,%lld,%lld) keys (%lld,%lld) p=%g%s; inf/NaN/-0 in x", (long long)n,
          (long long)a, (long long)b, (long long)c, (long long)key_b, (long long)key_c,
          (double)p, in_place ? " in place" : "");
    uint64_t *hkeys = xmalloc((size_t)n * sizeof *hkeys);
    for (int64_t s = 0; s < n; s++)
        hkeys[s] = s == 1 ? (1ull << 40) + 3 : 1000 + 7 * (uint64_t)s;
    float *hx = rand_specials(total, -1, 1), *hy = filled(total, 7.0f);
    pair keys = pair_new(hkeys, (size_t)n * sizeof *hkeys), x = pair_f32(hx, total);
    pair y = pair_f32(hy, total);
    zt_dropout_desc dc = {.seed = 0x9e3779b97f4a7c15ull, .site = 17, .step = 123456789,
                          .row_keys = keys.c, .n = n, .a = a, .b = b, .c = c, .key_b = key_b,
                          .key_c = key_c, .p = p};
    zt_dropout_desc dg = dc;
    dg.row_keys = keys.g;
    const pair *out = in_place ? &x : &y;
    g.cpu.dropout(&g.cpu, out->c, x.c, &dc);
    g.gpu.dropout(&g.gpu, out->g, x.g, &dg);
    cmp_f32(&k, "y", out, total);
    pair_free(&keys);
    pair_free(&x);
    pair_free(&y);
    free(hkeys);
    free(hx);
    free(hy);
    end(&k);
}

static void op_dropout(void)
{
    dropout_case(2, 3, 100, 70, 100, 70, 0.0f, false); /* p = 0: an exact copy */
    dropout_case(4, 10, 50, 50, 64, 60, 0.3f, false);  /* key extents beyond the tensor */
    dropout_case(4, 10, 50, 50, 64, 60, 0.3f, true);
    dropout_case(2, 3, 12, 9, 12, 9, 0.5f, false);
    dropout_case(1, 1, 1, 1, 1, 1, 0.9f, false);
    dropout_case(3, 12, 33, 33, 64, 64, 0.1f, true);   /* attention weights, padded keys */
    if (!g.quick)
        dropout_case(16, 1, 1024, 768, 1024, 768, 0.1f, true); /* GPT-2 small residual */
}

static void mean_pool_case(int64_t n, int64_t t, int64_t cols, bool with_lengths)
{
    int32_t *hlen = NULL;
    if (with_lengths) {
        hlen = rand_i32(n, 1, (int32_t)t + 1);
        hlen[0] = 1;
        if (n > 1)
            hlen[1] = (int32_t)t;
    }
    float *hx = rand_f32(n * t * cols, -1, 3), *hdy = rand_f32(n * cols, -1, 1);
    float *hy = filled(n * cols, NAN), *hdx = filled(n * t * cols, NAN);
    pair len = pair_new(hlen, with_lengths ? (size_t)n * sizeof *hlen : 0);
    pair x = pair_f32(hx, n * t * cols), y = pair_f32(hy, n * cols);
    pair dy = pair_f32(hdy, n * cols), dx = pair_f32(hdx, n * t * cols);
    const int32_t *lc = with_lengths ? len.c : NULL, *lg = with_lengths ? len.g : NULL;
    tcase k;
    begin(&k, "mean_pool_forward", "norm", THR_F32, "n=%lld t=%lld cols=%lld lengths=%s",
          (long long)n, (long long)t, (long long)cols, with_lengths ? "yes" : "no");
    g.cpu.mean_pool_forward(&g.cpu, y.c, x.c, lc, n, t, cols);
    g.gpu.mean_pool_forward(&g.gpu, y.g, x.g, lg, n, t, cols);
    cmp_f32(&k, "y", &y, n * cols);
    end(&k);
    begin(&k, "mean_pool_backward", "norm", THR_EXACT, "n=%lld t=%lld cols=%lld lengths=%s",
          (long long)n, (long long)t, (long long)cols, with_lengths ? "yes" : "no");
    g.cpu.mean_pool_backward(&g.cpu, dx.c, dy.c, lc, n, t, cols);
    g.gpu.mean_pool_backward(&g.gpu, dx.g, dy.g, lg, n, t, cols);
    cmp_f32(&k, "dx", &dx, n * t * cols);
    end(&k);
    pair_free(&len);
    pair_free(&x);
    pair_free(&y);
    pair_free(&dy);
    pair_free(&dx);
    free(hlen);
    free(hx);
    free(hdy);
    free(hy);
    free(hdx);
}

/* Forward and backward are one registry entry each but share their cases. */
static void op_mean_pool(void)
{
    mean_pool_case(3, 6, 10, true);
    mean_pool_case(3, 6, 10, false);
    mean_pool_case(8, 64, 80, true);
    mean_pool_case(1, 1, 1, false);
    if (!g.quick)
        mean_pool_case(16, 512, 768, true);
}

/* ---- optimizers ---- */

static const int64_t optim_sizes[] = {1, 17, 1000003};

static void op_adam(void)
{
    const struct {
        const char *what;
        zt_adam_hparams hp;
    } vars[] = {
        {"AdamW bias-corrected step 1",
         {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, true, 1}},
        {"AdamW bias-corrected step 1000 wd 0.1",
         {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, true, true, 1000}},
        {"Adam (L2 decay) step 7", {1e-3f, 0.8f, 0.999f, 1e-8f, 0.01f, false, true, 7}},
        {"AdamW no bias correction eps 1e-5", {1e-3f, 0.9f, 0.999f, 1e-5f, 0.0f, true, false, 5}},
    };
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
        for (size_t s = 0; s < 3; s++) {
            int64_t n = optim_sizes[s];
            tcase k;
            begin(&k, "adam", "norm", THR_F32, "%s n=%lld", vars[v].what, (long long)n);
            float *hp = rand_f32(n, -1, 1), *hg = rand_f32(n, -1e-2f, 1e-2f);
            float *hm = rand_f32(n, -1e-2f, 1e-2f), *hv = rand_f32(n, 0.0f, 1e-4f);
            pair p = pair_f32(hp, n), gr = pair_f32(hg, n), m = pair_f32(hm, n);
            pair vv = pair_f32(hv, n);
            g.cpu.adam(&g.cpu, p.c, gr.c, m.c, vv.c, n, &vars[v].hp);
            g.gpu.adam(&g.gpu, p.g, gr.g, m.g, vv.g, n, &vars[v].hp);
            cmp_f32(&k, "p", &p, n);
            cmp_f32(&k, "m", &m, n);
            cmp_f32(&k, "v", &vv, n);
            pair_free(&p);
            pair_free(&gr);
            pair_free(&m);
            pair_free(&vv);
            free(hp);
            free(hg);
            free(hm);
            free(hv);
            end(&k);
        }
}

static void op_sgd(void)
{
    const struct {
        const char *what;
        zt_sgd_hparams hp;
    } vars[] = {
        {"no momentum", {0.1f, 0.0f, 0.0f, 0.0f, false, false}},
        {"momentum 0.9 first step", {0.1f, 0.9f, 0.0f, 0.0f, false, true}},
        {"momentum 0.9 dampening 0.1 wd 1e-2", {0.05f, 0.9f, 0.1f, 1e-2f, false, false}},
        {"nesterov momentum 0.9 wd 1e-4", {0.01f, 0.9f, 0.0f, 1e-4f, true, false}},
    };
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
        for (size_t s = 0; s < 3; s++) {
            int64_t n = optim_sizes[s];
            tcase k;
            begin(&k, "sgd", "norm", THR_F32, "%s n=%lld", vars[v].what, (long long)n);
            float *hp = rand_f32(n, -1, 1), *hg = rand_f32(n, -1, 1), *hb = rand_f32(n, -1, 1);
            pair p = pair_f32(hp, n), gr = pair_f32(hg, n), b = pair_f32(hb, n);
            g.cpu.sgd(&g.cpu, p.c, gr.c, b.c, n, &vars[v].hp);
            g.gpu.sgd(&g.gpu, p.g, gr.g, b.g, n, &vars[v].hp);
            cmp_f32(&k, "p", &p, n);
            cmp_f32(&k, "buf", &b, n);
            pair_free(&p);
            pair_free(&gr);
            pair_free(&b);
            free(hp);
            free(hg);
            free(hb);
            end(&k);
        }
}

/* ---- the registry: struct zt_backend's ops in its order, then the failure probe ---- */

typedef struct {
    const char *name;
    void (*run)(void);
    bool gemm;          /* runs again in every GEMM setting */
    const char *covers; /* the struct members it checks, where not just `name` */
} op_entry;

static const op_entry ops[] = {
    {"alloc", op_alloc, false, "alloc, free"},
    {"host_alloc", op_host_alloc, false, "host_alloc, host_free"},
    {"copy", op_copy, false, "copy_h2d, copy_d2h, copy_d2d"},
    {"memset_zero", op_memset_zero, false, NULL},
    {"gemm", op_gemm, true, NULL},
    {"bias_add", op_bias_add, false, NULL},
    {"bias_grad", op_bias_grad, false, NULL},
    {"relu_forward", op_relu_forward, false, NULL},
    {"relu_backward", op_relu_backward, false, NULL},
    {"xent_forward_backward", op_xent, false, NULL},
    {"scale", op_scale, false, NULL},
    {"axpy", op_axpy, false, NULL},
    {"sum_squares", op_sum_squares, false, NULL},
    {"has_inf_nan", op_has_inf_nan, false, NULL},
    {"convert", op_convert, false, NULL},
    {"embedding_forward", op_embedding_forward, false, NULL},
    {"embedding_backward", op_embedding_backward, false, NULL},
    {"sinusoid_add", op_sinusoid_add, false, NULL},
    {"layernorm_forward", op_layernorm_forward, false, NULL},
    {"layernorm_backward", op_layernorm_backward, false, NULL},
    {"gelu_forward", op_gelu_forward, false, NULL},
    {"gelu_backward", op_gelu_backward, false, NULL},
    {"gemm_batched", op_gemm_batched, true, NULL},
    {"attn_softmax_forward", op_attn_softmax_forward, false, NULL},
    {"attn_softmax_backward", op_attn_softmax_backward, false, NULL},
    {"dropout", op_dropout, false, NULL},
    {"mean_pool", op_mean_pool, false, "mean_pool_forward, mean_pool_backward"},
    {"adam", op_adam, false, NULL},
    {"sgd", op_sgd, false, NULL},
    {"alloc_failure", op_alloc_failure, false, "alloc of an impossible size"},
};
#define N_OPS (int)(sizeof ops / sizeof ops[0])

/* ---- --gemm-peak: cuBLAS alone, no backend ---- */

static void cuda_ok(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess)
        die("%s: %s", what, cudaGetErrorString(rc));
}

static void blas_ok(cublasStatus_t rc, const char *what)
{
    if (rc != CUBLAS_STATUS_SUCCESS)
        die("%s: cuBLAS status %d", what, (int)rc);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define PEAK_WARMUP 5
#define PEAK_ITERS 20

/* Median milliseconds of C = A^T B ("TN", column-major: A is k x m, B k x n),
 * each call timed alone with a pair of events after PEAK_WARMUP untimed ones. */
static float time_gemm(cublasHandle_t h, cudaStream_t st, cudaDataType in, cudaDataType out,
                       int m, int n, int k, const void *a, const void *b, void *c)
{
    const float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t ev[2 * PEAK_ITERS];
    for (int i = 0; i < 2 * PEAK_ITERS; i++)
        cuda_ok(cudaEventCreate(&ev[i]), "cudaEventCreate");
    for (int i = 0; i < PEAK_WARMUP + PEAK_ITERS; i++) {
        int t = i - PEAK_WARMUP;
        if (t >= 0)
            cuda_ok(cudaEventRecord(ev[2 * t], st), "cudaEventRecord");
        blas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, in, k, b, in, k,
                             &beta, c, out, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
        if (t >= 0)
            cuda_ok(cudaEventRecord(ev[2 * t + 1], st), "cudaEventRecord");
    }
    cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    float ms[PEAK_ITERS];
    for (int t = 0; t < PEAK_ITERS; t++)
        cuda_ok(cudaEventElapsedTime(&ms[t], ev[2 * t], ev[2 * t + 1]), "cudaEventElapsedTime");
    for (int i = 0; i < 2 * PEAK_ITERS; i++)
        cudaEventDestroy(ev[i]);
    qsort(ms, PEAK_ITERS, sizeof ms[0], cmp_float);
    return 0.5f * (ms[PEAK_ITERS / 2 - 1] + ms[PEAK_ITERS / 2]);
}

/* Random operands (uniform in [-1, 1): zeros would draw less power and clock
 * higher than real data). */
static void *device_random(size_t n, zt_dtype dt)
{
    float *x = rand_f32((int64_t)n, -1, 1);
    void *h = to_dtype(x, (int64_t)n, dt), *d = NULL;
    cuda_ok(cudaMalloc(&d, n * zt_dtype_size(dt)), "cudaMalloc");
    cuda_ok(cudaMemcpy(d, h, n * zt_dtype_size(dt), cudaMemcpyHostToDevice), "cudaMemcpy");
    free(x);
    free(h);
    return d;
}

/* The shapes: square ones and one wide, large enough to fill an H100's 132 SMs
 * with 128 x 256 tiles many times over. Prints each shape's median and, last,
 * the best as the peak; then fp32 (no TF32) at 8192^3 for the fp32 runs. */
static int gemm_peak(int device)
{
    static const int shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 16384, 4096}};
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    cublasHandle_t h;
    cudaStream_t st;
    blas_ok(cublasCreate(&h), "cublasCreate");
    cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    blas_ok(cublasSetStream(h, st), "cublasSetStream");
    blas_ok(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    size_t max_ab = 0, max_c = 0;
    for (int s = 0; s < 3; s++) {
        size_t m = (size_t)shapes[s][0], n = (size_t)shapes[s][1], k = (size_t)shapes[s][2];
        max_ab = m * k > max_ab ? m * k : max_ab;
        max_ab = k * n > max_ab ? k * n : max_ab;
        max_c = m * n > max_c ? m * n : max_c;
    }
    void *a = device_random(max_ab, ZT_BF16), *b = device_random(max_ab, ZT_BF16), *c = NULL;
    cuda_ok(cudaMalloc(&c, max_c * 2), "cudaMalloc");
    double peak = 0.0;
    for (int s = 0; s < 3; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float ms = time_gemm(h, st, CUDA_R_16BF, CUDA_R_16BF, m, n, k, a, b, c);
        double tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12;
        printf("gemm_bf16 m=%d n=%d k=%d median_ms %.3f tflops %.1f\n", m, n, k, (double)ms,
               tflops);
        peak = tflops > peak ? tflops : peak;
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    const int f = 8192;
    a = device_random((size_t)f * f, ZT_F32);
    b = device_random((size_t)f * f, ZT_F32);
    cuda_ok(cudaMalloc(&c, (size_t)f * f * 4), "cudaMalloc");
    float ms = time_gemm(h, st, CUDA_R_32F, CUDA_R_32F, f, f, f, a, b, c);
    double fp32 = 2.0 * f * f * (double)f / (ms * 1e-3) / 1e12;
    printf("gemm_fp32 m=%d n=%d k=%d median_ms %.3f tflops %.1f\n", f, f, f, (double)ms, fp32);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
    cudaStreamDestroy(st);
    printf("gemm_peak_tflops %.1f\n", peak);
    printf("gemm_peak_fp32_tflops %.1f\n", fp32);
    return 0;
}

/* ---- main ---- */

static int usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "op-check: %s\n", msg);
    fprintf(stderr,
            "usage: op-check [--device N] [--quick] [--only OP,...] [--skip OP,...] [--seed S]\n"
            "       op-check --list | --gemm-peak [--device N]\n");
    return 2;
}

/* Marks the ops named in a comma list; false on an unknown name. */
static bool mark_ops(const char *list, bool *mark)
{
    char *copy = dup_bytes(list, strlen(list) + 1), *save = NULL;
    bool ok = true;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < N_OPS && strcmp(ops[i].name, t))
            i++;
        if (i == N_OPS) {
            fprintf(stderr, "op-check: unknown op '%s' (--list shows them)\n", t);
            ok = false;
        } else {
            mark[i] = true;
        }
    }
    free(copy);
    return ok;
}

/* The CUDA backend in the current GEMM setting, with its workspace, after a
 * probe (alloc, memset_zero, d2h, check) that a lost CUDA context fails.
 * Prints a FAIL line and returns false when any of it fails. */
static bool gpu_up(void)
{
    zt_backend_options opt = {.device = g.device, .tf32 = g.set->tf32,
                              .gemm_dtype = g.set->gemm_dt};
    const char *what = "init";
    void *probe = NULL;
    uint8_t back[256];
    g.workspace = NULL;
    if (zt_backend_cuda_init(&g.gpu, &opt) != ZT_OK)
        goto fail;
    what = "workspace";
    if (g.gpu.workspace_bytes) {
        if (g.gpu.alloc(&g.gpu, g.gpu.workspace_bytes, &g.workspace) != ZT_OK)
            goto fail_made;
        g.gpu.set_workspace(&g.gpu, g.workspace, g.gpu.workspace_bytes);
    }
    what = "probe";
    if (g.gpu.alloc(&g.gpu, sizeof back, &probe) != ZT_OK)
        goto fail_made;
    memset(back, 1, sizeof back);
    g.gpu.memset_zero(&g.gpu, probe, sizeof back);
    g.gpu.copy_d2h(&g.gpu, back, probe, sizeof back);
    g.gpu.free(&g.gpu, probe);
    if (g.gpu.check(&g.gpu) != ZT_OK)
        goto fail_made;
    for (size_t i = 0; i < sizeof back; i++)
        if (back[i]) {
            zt_fail(ZT_ERR_DEVICE, "", "memset_zero then copy_d2h gave byte %zu = %u", i,
                    back[i]);
            goto fail_made;
        }
    g.device_error = false;
    return true;
fail_made:
    if (g.workspace)
        g.gpu.free(&g.gpu, g.workspace);
    zt_backend_free(&g.gpu);
fail:
    printf("%-24s %-56s FAIL  %s\n", what, g.set->name, zt_status_message());
    zt_status_clear();
    g.failures++;
    return false;
}

static void gpu_down(void)
{
    if (g.workspace)
        g.gpu.free(&g.gpu, g.workspace);
    zt_backend_free(&g.gpu);
}

/* One op; false when a device error ended it (longjmp from end() or
 * device_failure()). Apart from main so that no local of main lives across
 * the setjmp. */
static bool run_op(const op_entry *op)
{
    if (setjmp(g.abort_op))
        return false;
    op->run();
    return true;
}

int main(int argc, char **argv)
{
    const char *env_dev = getenv("ZT_DEVICE");
    int device = env_dev && *env_dev ? atoi(env_dev) : 0;
    bool list = false, peak = false, only[N_OPS] = {false}, skip[N_OPS] = {false};
    bool any_only = false;
    g.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--list"))
            list = true;
        else if (!strcmp(a, "--gemm-peak"))
            peak = true;
        else if (!strcmp(a, "--quick"))
            g.quick = true;
        else if (!strcmp(a, "--device") && has_val)
            device = atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && has_val)
            g.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--only") && has_val) {
            if (!mark_ops(argv[++i], only))
                return 2;
            any_only = true;
        } else if (!strcmp(a, "--skip") && has_val) {
            if (!mark_ops(argv[++i], skip))
                return 2;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(NULL);
            return 0;
        } else {
            return usage("unknown or incomplete flag");
        }
    }
    if (list) {
        for (int i = 0; i < N_OPS; i++)
            printf("%-24s %s%s%s\n", ops[i].name, ops[i].covers ? ops[i].covers : "",
                   ops[i].covers && ops[i].gemm ? "; " : "",
                   ops[i].gemm ? "in every GEMM setting (fp32, tf32, bf16, fp16)" : "");
        printf("(every case also runs sync and check; set_workspace starts each backend)\n");
        return 0;
    }
    const char *why = NULL;
    int count = zt_backend_cuda_device_count(&why);
    if (count <= 0) {
        fprintf(stderr, "op-check: no CUDA device: %s\n", why ? why : "(no reason given)");
        return 2;
    }
    if (device < 0 || device >= count) {
        fprintf(stderr, "op-check: --device %d: this process sees %d GPU(s)\n", device, count);
        return 2;
    }
    if (peak)
        return gemm_peak(device);

    struct cudaDeviceProp prop = {0};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        snprintf(prop.name, sizeof prop.name, "(no properties)");
    printf("op-check: CUDA device %d: %s (sm_%d%d, %.1f GiB); CPU reference on %d OpenMP "
           "threads; seed %llu%s\n",
           device, prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30),
           omp_get_max_threads(), (unsigned long long)g.seed, g.quick ? "; quick" : "");
    printf("%-24s %-56s %-6s %9s %8s  %s\n", "op", "case", "metric", "error", "thresh",
           "verdict");
    if (zt_backend_cpu_init(&g.cpu) != ZT_OK)
        die("cpu backend: %s", zt_status_message());
    g.device = device;
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        g.set = &settings[s];
        if (!gpu_up())
            continue;
        bool up = true;
        for (int i = 0; i < N_OPS && up; i++) {
            if (!(s == 0 || ops[i].gemm) || (any_only && !only[i]) || skip[i] || run_op(&ops[i]))
                continue;
            /* The backend keeps reporting its first error: make a new one. */
            gpu_down();
            up = gpu_up();
            printf("op-check: %s: %s ended by a device error; %s\n", g.set->name, ops[i].name,
                   up ? "backend made afresh" : "the CUDA context is lost: stopping (--skip "
                                                "the op to check the others)");
        }
        if (!up)
            break;
        gpu_down();
    }
    zt_backend_free(&g.cpu);
    printf("op-check: %d cases, %d failed\n", g.cases, g.failures);
    return g.failures ? 1 : 0;
}
