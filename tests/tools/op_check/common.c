/*
 * common: op-check's shared machinery (op_check.h): host buffers, random
 * inputs, tensors on both backends, the error metrics and the case protocol.
 *
 * Memory: as op_check.h says. Collective: none.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "engine/status.h"

#include "tests/tools/op_check/op_check.h"

void oc_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "op-check: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void *oc_xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (!p)
        oc_die("out of host memory (%zu bytes)", bytes);
    return p;
}

void *oc_dup_bytes(const void *src, size_t bytes)
{
    void *p = oc_xmalloc(bytes);
    memcpy(p, src, bytes);
    return p;
}

/* ---- random inputs: zt_rng_uniform keyed by (seed, tensor number, index) ---- */

float *oc_rand_f32(int64_t n, float lo, float hi)
{
    float *x = oc_xmalloc((size_t)n * sizeof *x);
    uint64_t stream = ++oc.draws;
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * zt_rng_uniform(oc.seed, stream, (uint64_t)i);
    return x;
}

int32_t *oc_rand_i32(int64_t n, int32_t lo, int32_t hi)
{
    int32_t *x = oc_xmalloc((size_t)n * sizeof *x);
    uint64_t stream = ++oc.draws;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = lo + (int32_t)((double)zt_rng_uniform(oc.seed, stream, (uint64_t)i) *
                                   (double)(hi - lo));
        x[i] = v < hi ? v : hi - 1;
    }
    return x;
}

uint8_t *oc_rand_bytes(int64_t n)
{
    uint8_t *x = oc_xmalloc((size_t)n);
    uint64_t stream = ++oc.draws;
    for (int64_t i = 0; i < n; i++)
        x[i] = (uint8_t)zt_rng_u64(oc.seed, stream, (uint64_t)i);
    return x;
}

float *oc_filled(int64_t n, float v)
{
    float *x = oc_xmalloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
    return x;
}

float *oc_rand_specials(int64_t n, float lo, float hi)
{
    float *x = oc_rand_f32(n, lo, hi);
    const float sp[] = {NAN, -INFINITY, INFINITY, 0.0f, -0.0f};
    for (int64_t i = 0; i < 5 && i < n; i++)
        x[(i * 7919) % n] = sp[i];
    return x;
}

void *oc_to_dtype(const float *x, int64_t n, zt_dtype dt)
{
    void *p = oc_xmalloc((size_t)n * zt_dtype_size(dt));
    zt_convert_host(p, dt, x, ZT_F32, n, 1.0f, false);
    return p;
}

/* ---- one tensor on both backends ---- */

void oc_device_failure(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%-24s ", "(cuda backend)");
    vprintf(fmt, ap);
    printf("  FAIL\n");
    va_end(ap);
    fflush(stdout);
    oc.failures++;
    oc.device_error = true;
    longjmp(oc.abort_op, 1);
}

pair oc_pair_new(const void *host, size_t bytes)
{
    pair p = {NULL, NULL, bytes};
    size_t want = bytes < 64 ? 64 : bytes; /* empty tensors still get a valid pointer */
    if (oc.cpu.alloc(&oc.cpu, want, &p.c) != ZT_OK)
        oc_die("cpu backend: alloc of %zu bytes: %s", want, zt_status_message());
    if (oc.gpu.alloc(&oc.gpu, want, &p.g) != ZT_OK)
        oc_device_failure("alloc of %zu bytes: %s", want, zt_status_message());
    if (bytes) {
        oc.cpu.copy_h2d(&oc.cpu, p.c, host, bytes);
        oc.gpu.copy_h2d(&oc.gpu, p.g, host, bytes);
    }
    return p;
}

pair oc_pair_f32(const float *host, int64_t n)
{
    return oc_pair_new(host, (size_t)n * sizeof(float));
}

pair oc_pair_dt(const float *host, int64_t n, zt_dtype dt)
{
    void *h = oc_to_dtype(host, n, dt);
    pair p = oc_pair_new(h, (size_t)n * zt_dtype_size(dt));
    free(h);
    return p;
}

void oc_pair_free(pair *p)
{
    oc.cpu.free(&oc.cpu, p->c);
    oc.gpu.free(&oc.gpu, p->g);
    p->c = p->g = NULL;
}

void *oc_fetch(const pair *p)
{
    void *h = oc_xmalloc(p->bytes);
    oc.gpu.sync(&oc.gpu);
    if (p->bytes)
        oc.gpu.copy_d2h(&oc.gpu, h, p->g, p->bytes);
    return h;
}

/* ---- errors ---- */

double oc_norm_err(const float *ref, const float *got, int64_t n)
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

double oc_mag_err(const float *ref, const float *got, const float *mag, int64_t n)
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

double oc_rel_err(double ref, double got)
{
    if (ref == got || (isnan(ref) && isnan(got)))
        return 0.0;
    if (isnan(ref) || isnan(got))
        return INFINITY;
    return fabs(got - ref) / (ref != 0.0 ? fabs(ref) : 1e-300);
}

uint32_t oc_bits_at(const void *p, zt_dtype dt, int64_t i)
{
    if (dt == ZT_F32) {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return u;
    }
    return ((const uint16_t *)p)[i];
}

bool oc_nan_bits(uint32_t b, zt_dtype dt)
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

uint32_t oc_sign_bit(zt_dtype dt) { return dt == ZT_F32 ? 0x80000000u : 0x8000u; }

/* ---- cases ---- */

void oc_begin(tcase *k, const char *op, const char *metric, double thr, const char *fmt, ...)
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

void oc_add_err(tcase *k, const char *output, double err)
{
    if (isnan(err))
        err = INFINITY;
    if (!k->worst[0] || err > k->err) {
        k->err = err;
        snprintf(k->worst, sizeof k->worst, "%s", output);
    }
}

void oc_miss(tcase *k, const char *fmt, ...)
{
    if (k->err == 0.0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->note, sizeof k->note, fmt, ap);
        va_end(ap);
    }
    k->err += 1.0;
}

void oc_cmp_f32(tcase *k, const char *output, const pair *p, int64_t n)
{
    float *got = oc_fetch(p);
    oc_add_err(k, output, oc_norm_err(p->c, got, n));
    free(got);
}

float *oc_widen(const void *x, zt_dtype dt, int64_t n)
{
    float *w = oc_xmalloc((size_t)n * sizeof *w);
    zt_convert_host(w, ZT_F32, x, dt, n, 1.0f, false);
    return w;
}

void oc_cmp_dt(tcase *k, const char *output, const pair *p, zt_dtype dt, int64_t n)
{
    void *got = oc_fetch(p);
    float *r = oc_widen(p->c, dt, n), *g = oc_widen(got, dt, n);
    oc_add_err(k, output, oc_norm_err(r, g, n));
    free(got);
    free(r);
    free(g);
}

double oc_thr_dt(zt_dtype dt, double thr)
{
    if (dt == ZT_F32 || thr == THR_EXACT)
        return thr;
    return dt == ZT_BF16 ? THR_ULP_BF16 : THR_ULP_FP16;
}

void oc_cmp_bits(tcase *k, const char *output, const pair *p, zt_dtype dt, int64_t n)
{
    void *got = oc_fetch(p);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = oc_bits_at(p->c, dt, i), x = oc_bits_at(got, dt, i);
        bool same = r == x || (oc_nan_bits(r, dt) && oc_nan_bits(x, dt) &&
                               (r & oc_sign_bit(dt)) == (x & oc_sign_bit(dt)));
        if (!same)
            oc_miss(k, "%s[%lld] = 0x%x, cpu 0x%x", output, (long long)i, (unsigned)x, (unsigned)r);
    }
    free(got);
}

void oc_end(tcase *k)
{
    zt_status st = oc.gpu.check(&oc.gpu);
    bool pass = st == ZT_OK && k->err <= k->thr;
    oc.cases++;
    oc.failures += !pass;
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
        oc.device_error = true;
        longjmp(oc.abort_op, 1);
    }
}

void oc_begin2(tcase2 *k, const char *op, const char *metric, double thr, zt_dtype dt,
               const char *f_metric, double f_thr, const char *fmt, ...)
{
    char what[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    oc_begin(&k->t, op, metric, oc_thr_dt(dt, thr), "%s %s", zt_dtype_name(dt), what);
    oc_begin(&k->f, op, f_metric, f_thr, "%s %s: fp32 outputs", zt_dtype_name(dt), what);
}

void oc_end2(tcase2 *k)
{
    oc_end(&k->t);
    if (k->f.worst[0])
        oc_end(&k->f);
}
