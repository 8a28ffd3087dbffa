/*
 * test_optim: the CPU Adam/AdamW/SGD kernels against scalar float64
 * references written straight from the equations (DeepSpeed FusedAdam,
 * torch.optim.SGD), a few updates worked out by hand, the OpenMP split on a
 * large odd-sized array, every ISA path (zt_cpu_isa) bit for bit against the
 * baseline path and the refusal of ISAs the CPU lacks (in the API and in
 * ZT_CPU_ISA), and zt_optim's step counting and backend dispatch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cpu/cpu.h"
#include "engine/train/optim.h"

#define REL_TOL 1e-6

static void assert_rel_close(double got, double want, double rel, const char *what, int64_t i)
{
    if (fabs(got - want) <= rel * fabs(want))
        return;
    fail_msg("%s[%lld]: got %.9g, want %.9g (rel err %.3g)", what, (long long)i, got, want,
             fabs(got - want) / fabs(want));
}

/* Deterministic values in [lo, hi), well spread, no library RNG. */
static float test_value(uint64_t key, float lo, float hi)
{
    uint64_t x = key * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return lo + (hi - lo) * (float)((double)(x >> 11) / 9007199254740992.0);
}

/* Parameters in ±[0.5, 1.5) and gradients whose sign depends only on the
 * element, magnitude in [0.1, 1): nothing crosses zero or cancels, so a
 * relative tolerance stays meaningful on every element. */
static void fill_params(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = (i % 3 == 0 ? -1.0f : 1.0f) * test_value((uint64_t)i, 0.5f, 1.5f);
}

static void fill_grads(float *g, int64_t n, int step)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = (i % 2 == 0 ? -1.0f : 1.0f) *
               test_value(((uint64_t)step << 32) ^ (uint64_t)(i + 1000003), 0.1f, 1.0f);
}

/* ---- float64 references ---- */

typedef struct {
    double lr, beta1, beta2, eps, wd;
    bool adam_w_mode, bias_correction;
} ref_adam_hp;

static void ref_adam_step(double *p, const float *g, double *m, double *v, int64_t n,
                          const ref_adam_hp *h, int64_t t)
{
    double bc1 = h->bias_correction ? 1.0 - pow(h->beta1, (double)t) : 1.0;
    double bc2 = h->bias_correction ? 1.0 - pow(h->beta2, (double)t) : 1.0;
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i];
        if (!h->adam_w_mode)
            gi += h->wd * p[i];
        m[i] = h->beta1 * m[i] + (1.0 - h->beta1) * gi;
        v[i] = h->beta2 * v[i] + (1.0 - h->beta2) * gi * gi;
        double update = (m[i] / bc1) / (sqrt(v[i] / bc2) + h->eps);
        if (h->adam_w_mode)
            update += h->wd * p[i];
        p[i] -= h->lr * update;
    }
}

typedef struct {
    double lr, momentum, dampening, wd;
    bool nesterov;
} ref_sgd_hp;

static void ref_sgd_step(double *p, const float *g, double *buf, int64_t n, const ref_sgd_hp *h,
                         bool first)
{
    for (int64_t i = 0; i < n; i++) {
        double d = g[i] + h->wd * p[i];
        if (h->momentum != 0.0) {
            buf[i] = first ? d : h->momentum * buf[i] + (1.0 - h->dampening) * d;
            d = h->nesterov ? d + h->momentum * buf[i] : buf[i];
        }
        p[i] -= h->lr * d;
    }
}

/* ---- Adam against the reference ---- */

/* Runs `steps` kernel steps on n elements next to the reference and checks
 * p, m and v after every step. The learning rate changes per step, as a
 * schedule would change it. Hyper-parameters are fp32 values so both sides
 * see the same numbers. */
static void check_adam(int64_t n, int steps, float beta1, float beta2, float eps, float wd,
                       bool adam_w_mode, bool bias_correction)
{
    float *p = malloc((size_t)n * sizeof *p), *g = malloc((size_t)n * sizeof *g);
    float *m = calloc((size_t)n, sizeof *m), *v = calloc((size_t)n, sizeof *v);
    double *rp = malloc((size_t)n * sizeof *rp);
    double *rm = calloc((size_t)n, sizeof *rm), *rv = calloc((size_t)n, sizeof *rv);
    assert_non_null(p);
    assert_non_null(g);
    assert_non_null(m);
    assert_non_null(v);
    assert_non_null(rp);
    assert_non_null(rm);
    assert_non_null(rv);
    fill_params(p, n);
    for (int64_t i = 0; i < n; i++)
        rp[i] = p[i];

    for (int t = 1; t <= steps; t++) {
        float lr = 1e-2f / (float)t;
        zt_adam_hparams hp = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                              .weight_decay = wd, .adam_w_mode = adam_w_mode,
                              .bias_correction = bias_correction, .step = t};
        ref_adam_hp rh = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .wd = wd,
                          .adam_w_mode = adam_w_mode, .bias_correction = bias_correction};
        fill_grads(g, n, t);
        zt_adam_cpu(p, g, m, v, n, &hp);
        ref_adam_step(rp, g, rm, rv, n, &rh, t);
        for (int64_t i = 0; i < n; i++) {
            assert_rel_close(p[i], rp[i], REL_TOL, "p", i);
            assert_rel_close(m[i], rm[i], REL_TOL, "m", i);
            assert_rel_close(v[i], rv[i], REL_TOL, "v", i);
        }
    }
    free(p);
    free(g);
    free(m);
    free(v);
    free(rp);
    free(rm);
    free(rv);
}

static void test_adam_l2(void **state)
{
    (void)state;
    check_adam(37, 6, 0.9f, 0.999f, 1e-8f, 0.0f, false, true);
    check_adam(37, 6, 0.9f, 0.999f, 1e-8f, 0.01f, false, true);
    check_adam(37, 6, 0.8f, 0.99f, 1e-6f, 0.01f, false, false);
}

static void test_adamw(void **state)
{
    (void)state;
    check_adam(37, 6, 0.9f, 0.999f, 1e-8f, 0.0f, true, true);
    check_adam(37, 6, 0.9f, 0.999f, 1e-8f, 0.01f, true, true);
    check_adam(37, 6, 0.8f, 0.99f, 1e-6f, 0.1f, true, false);
}

/* One step from p = 1, g = 0.5, m = v = 0, lr 0.01, betas (0.9, 0.999),
 * eps 1e-8, by hand:
 *   m = 0.1*0.5 = 0.05, v = 0.001*0.25 = 2.5e-4
 *   bias correction on: m/bc1 = 0.5, sqrt(v/bc2) = 0.5,
 *     update = 0.5/(0.5 + 1e-8) = 0.99999998       -> p = 0.9900000002
 *   AdamW, wd 0.1: update += 0.1*1                 -> p = 0.9890000002
 *   L2, wd 0.1: g = 0.6, m/bc1 = 0.6 = sqrt(v/bc2)  -> p = 0.9900000001666667
 *   bias correction off: update = 0.05/(sqrt(2.5e-4) + 1e-8)
 *     = 0.05/0.01581139883 = 3.162277566            -> p = 0.9683772433983036 */
static float adam_one_step(float wd, bool adam_w_mode, bool bias_correction)
{
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    zt_adam_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .weight_decay = wd, .adam_w_mode = adam_w_mode,
                          .bias_correction = bias_correction, .step = 1};
    zt_adam_cpu(&p, &g, &m, &v, 1, &hp);
    return p;
}

static void test_adam_by_hand(void **state)
{
    (void)state;
    assert_rel_close(adam_one_step(0.0f, true, true), 0.9900000002, REL_TOL, "adamw", 0);
    assert_rel_close(adam_one_step(0.1f, true, true), 0.9890000002, REL_TOL, "adamw wd", 0);
    assert_rel_close(adam_one_step(0.1f, false, true), 0.9900000001666667, REL_TOL, "l2 wd", 0);
    assert_rel_close(adam_one_step(0.0f, true, false), 0.9683772433983036, REL_TOL, "no bc", 0);
}

/* ---- SGD against the reference ---- */

static void check_sgd(int64_t n, int steps, float momentum, float dampening, float wd,
                      bool nesterov)
{
    float *p = malloc((size_t)n * sizeof *p), *g = malloc((size_t)n * sizeof *g);
    float *buf = calloc((size_t)n, sizeof *buf);
    double *rp = malloc((size_t)n * sizeof *rp), *rbuf = calloc((size_t)n, sizeof *rbuf);
    assert_non_null(p);
    assert_non_null(g);
    assert_non_null(buf);
    assert_non_null(rp);
    assert_non_null(rbuf);
    fill_params(p, n);
    for (int64_t i = 0; i < n; i++)
        rp[i] = p[i];

    for (int t = 1; t <= steps; t++) {
        float lr = 0.05f / (float)t;
        zt_sgd_hparams hp = {.lr = lr, .momentum = momentum, .dampening = dampening,
                             .weight_decay = wd, .nesterov = nesterov, .first_step = t == 1};
        ref_sgd_hp rh = {.lr = lr, .momentum = momentum, .dampening = dampening, .wd = wd,
                         .nesterov = nesterov};
        fill_grads(g, n, t);
        /* Without momentum the kernel must not touch the buffer at all. */
        zt_sgd_cpu(p, g, momentum != 0.0f ? buf : NULL, n, &hp);
        ref_sgd_step(rp, g, rbuf, n, &rh, t == 1);
        for (int64_t i = 0; i < n; i++) {
            assert_rel_close(p[i], rp[i], REL_TOL, "p", i);
            if (momentum != 0.0f)
                assert_rel_close(buf[i], rbuf[i], REL_TOL, "buf", i);
        }
    }
    free(p);
    free(g);
    free(buf);
    free(rp);
    free(rbuf);
}

static void test_sgd_plain(void **state)
{
    (void)state;
    check_sgd(37, 5, 0.0f, 0.0f, 0.0f, false);
    check_sgd(37, 5, 0.0f, 0.0f, 0.01f, false);
}

static void test_sgd_momentum(void **state)
{
    (void)state;
    check_sgd(37, 5, 0.9f, 0.0f, 0.0f, false);
    check_sgd(37, 5, 0.9f, 0.0f, 0.01f, false);
    check_sgd(37, 5, 0.9f, 0.1f, 0.01f, false);
}

static void test_sgd_nesterov(void **state)
{
    (void)state;
    check_sgd(37, 5, 0.9f, 0.0f, 0.0f, true);
    check_sgd(37, 5, 0.9f, 0.0f, 0.01f, true);
}

/* p = 1, g = 0.5 both steps, lr 0.1, momentum 0.9, wd 0.1, by hand:
 * nesterov:
 *   1: g' = 0.5 + 0.1 = 0.6, buf = 0.6, d = 0.6 + 0.9*0.6 = 1.14, p = 0.886
 *   2: g' = 0.5 + 0.0886 = 0.5886, buf = 0.54 + 0.5886 = 1.1286,
 *      d = 0.5886 + 1.01574 = 1.60434, p = 0.886 - 0.160434 = 0.725566
 * dampening 0.5, no nesterov:
 *   1: buf = 0.6 (undamped first step), p = 1 - 0.06 = 0.94
 *   2: g' = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.297 = 0.837, p = 0.94 - 0.0837 = 0.8563 */
static void test_sgd_by_hand(void **state)
{
    (void)state;
    float p = 1.0f, g = 0.5f, buf = 0.0f;
    zt_sgd_hparams hp = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = true,
                         .first_step = true};
    zt_sgd_cpu(&p, &g, &buf, 1, &hp);
    assert_rel_close(p, 0.886, REL_TOL, "nesterov step 1", 0);
    hp.first_step = false;
    zt_sgd_cpu(&p, &g, &buf, 1, &hp);
    assert_rel_close(buf, 1.1286, REL_TOL, "nesterov buf 2", 0);
    assert_rel_close(p, 0.725566, REL_TOL, "nesterov step 2", 0);

    p = 1.0f;
    buf = 0.0f;
    hp = (zt_sgd_hparams){.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f,
                          .weight_decay = 0.1f, .first_step = true};
    zt_sgd_cpu(&p, &g, &buf, 1, &hp);
    assert_rel_close(p, 0.94, REL_TOL, "dampened step 1", 0);
    hp.first_step = false;
    zt_sgd_cpu(&p, &g, &buf, 1, &hp);
    assert_rel_close(buf, 0.837, REL_TOL, "dampened buf 2", 0);
    assert_rel_close(p, 0.8563, REL_TOL, "dampened step 2", 0);
}

/* ---- the OpenMP split ---- */

#define LARGE_N 100003 /* odd and prime: no thread gets an even share */

static void test_large_array(void **state)
{
    (void)state;
    check_adam(LARGE_N, 3, 0.9f, 0.999f, 1e-8f, 0.01f, true, true);
    check_adam(LARGE_N, 3, 0.9f, 0.999f, 1e-8f, 0.01f, false, true);
    check_sgd(LARGE_N, 3, 0.9f, 0.0f, 0.01f, true);
}

/* Element-wise kernels: one thread and the full team give identical bits. */
static void test_thread_count_invariance(void **state)
{
    (void)state;
    size_t bytes = LARGE_N * sizeof(float);
    float *g = malloc(bytes), *p[2], *m[2], *v[2];
    assert_non_null(g);
    for (int k = 0; k < 2; k++) {
        p[k] = malloc(bytes);
        m[k] = calloc(LARGE_N, sizeof(float));
        v[k] = calloc(LARGE_N, sizeof(float));
        assert_non_null(p[k]);
        assert_non_null(m[k]);
        assert_non_null(v[k]);
        fill_params(p[k], LARGE_N);
    }
    int team = omp_get_max_threads();
    for (int t = 1; t <= 3; t++) {
        zt_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.01f, .adam_w_mode = true,
                              .bias_correction = true, .step = t};
        fill_grads(g, LARGE_N, t);
        omp_set_num_threads(1);
        zt_adam_cpu(p[0], g, m[0], v[0], LARGE_N, &hp);
        omp_set_num_threads(team > 1 ? team : 4);
        zt_adam_cpu(p[1], g, m[1], v[1], LARGE_N, &hp);
    }
    omp_set_num_threads(team);
    assert_memory_equal(p[0], p[1], bytes);
    assert_memory_equal(m[0], m[1], bytes);
    assert_memory_equal(v[0], v[1], bytes);
    free(g);
    for (int k = 0; k < 2; k++) {
        free(p[k]);
        free(m[k]);
        free(v[k]);
    }
}

/* ---- the ISA paths ---- */

/* Every ISA path against the baseline path on one thread, bit for bit: the
 * paths run the same operations in the same order at different vector
 * widths, so any difference is a bug (an FMA, a reassociation, a wrong
 * tail). The lengths straddle the vector widths (4, 8, 16 floats) and their
 * unrolled multiples, so every epilogue runs; the buffers start one float
 * past malloc's alignment, so no vector access is aligned; LARGE_N goes
 * through the two-thread split. Starting moments are non-zero. */
static const int64_t isa_lengths[] = {1,  2,  3,  5,  7,   8,   9,   15,   16,     17,
                                      31, 32, 33, 47, 63,  64,  65,  127,  129,    1001,
                                      LARGE_N};
static const int isa_threads[] = {1, 2};
#define ISA_STEPS 3

typedef struct {
    const char *name;
    bool adam_w_mode, bias_correction;
} isa_adam_case;

static const isa_adam_case isa_adam_cases[] = {
    {"Adam (L2)", false, true},
    {"Adam (L2) without bias correction", false, false},
    {"AdamW", true, true},
    {"AdamW without bias correction", true, false},
};

typedef struct {
    const char *name;
    float momentum, dampening;
    bool nesterov;
} isa_sgd_case;

/* ISA_STEPS steps each: the first and the later momentum loops both run. */
static const isa_sgd_case isa_sgd_cases[] = {
    {"SGD", 0.0f, 0.0f, false},
    {"SGD with momentum and dampening", 0.9f, 0.1f, false},
    {"SGD nesterov", 0.9f, 0.0f, true},
};

/* ISA_STEPS Adam steps of `ac` on n elements with `isa` and `threads`
 * threads, from the same start every call; out gets p, m, v (3n floats). */
static void adam_on_isa(zt_cpu_isa isa, int threads, int64_t n, const isa_adam_case *ac,
                        float *out)
{
    assert_int_equal(zt_cpu_isa_set(isa), ZT_OK);
    omp_set_num_threads(threads);
    float *mem = malloc((size_t)(4 * n + 1) * sizeof *mem);
    assert_non_null(mem);
    float *p = mem + 1, *g = p + n, *m = g + n, *v = m + n;
    fill_params(p, n);
    for (int64_t i = 0; i < n; i++) {
        m[i] = test_value((uint64_t)i + 77, -0.1f, 0.1f);
        v[i] = test_value((uint64_t)i + 78, 0.0f, 0.01f);
    }
    for (int t = 1; t <= ISA_STEPS; t++) {
        zt_adam_hparams hp = {.lr = 1e-2f / (float)t, .beta1 = 0.9f, .beta2 = 0.999f,
                              .eps = 1e-8f, .weight_decay = 0.01f,
                              .adam_w_mode = ac->adam_w_mode,
                              .bias_correction = ac->bias_correction, .step = t};
        fill_grads(g, n, t);
        zt_adam_cpu(p, g, m, v, n, &hp);
    }
    memcpy(out, p, (size_t)n * sizeof *out);
    memcpy(out + n, m, (size_t)n * sizeof *out);
    memcpy(out + 2 * n, v, (size_t)n * sizeof *out);
    free(mem);
}

/* The same for SGD; out gets p and the momentum buffer (2n floats, the
 * buffer left zero when there is none: the kernel gets NULL then). */
static void sgd_on_isa(zt_cpu_isa isa, int threads, int64_t n, const isa_sgd_case *sc,
                       float *out)
{
    assert_int_equal(zt_cpu_isa_set(isa), ZT_OK);
    omp_set_num_threads(threads);
    float *mem = calloc((size_t)(3 * n + 1), sizeof *mem);
    assert_non_null(mem);
    float *p = mem + 1, *g = p + n, *buf = g + n;
    fill_params(p, n);
    for (int t = 1; t <= ISA_STEPS; t++) {
        zt_sgd_hparams hp = {.lr = 0.05f / (float)t, .momentum = sc->momentum,
                             .dampening = sc->dampening, .weight_decay = 0.01f,
                             .nesterov = sc->nesterov, .first_step = t == 1};
        fill_grads(g, n, t);
        zt_sgd_cpu(p, g, sc->momentum != 0.0f ? buf : NULL, n, &hp);
    }
    memcpy(out, p, (size_t)n * sizeof *out);
    memcpy(out + n, buf, (size_t)n * sizeof *out);
    free(mem);
}

/* out's k-th block of n floats is named names[k] in a failure. */
static void assert_bits_equal(const float *got, const float *want, int64_t n,
                              const char *const *names, int blocks, const char *what,
                              zt_cpu_isa isa, int threads)
{
    if (memcmp(got, want, (size_t)(blocks * n) * sizeof *got) == 0)
        return;
    for (int64_t i = 0; i < blocks * n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], sizeof a);
        memcpy(&b, &want[i], sizeof b);
        if (a != b)
            fail_msg("%s, n %lld, %s path, %d threads: %s[%lld] = %a (0x%08x), baseline path"
                     " on 1 thread %a (0x%08x)",
                     what, (long long)n, zt_cpu_isa_name(isa), threads, names[i / n],
                     (long long)(i % n), (double)got[i], (unsigned)a, (double)want[i],
                     (unsigned)b);
    }
}

/* An ISA this CPU cannot run is reported (the test log says which paths
 * went unchecked here, and why) and the test is skipped. */
static void check_isa_path(zt_cpu_isa isa)
{
    if (!zt_cpu_isa_supported(isa)) {
        assert_int_equal(zt_cpu_isa_set(isa), ZT_ERR_UNSUPPORTED);
        print_message("skipped: the %s path was not run: %s\n", zt_cpu_isa_name(isa),
                      zt_status_message());
        skip();
    }
    const zt_cpu_isa before = zt_cpu_isa_get();
    const int team = omp_get_max_threads();
    static const char *const adam_names[] = {"p", "m", "v"}, *const sgd_names[] = {"p", "buf"};
    for (size_t l = 0; l < sizeof isa_lengths / sizeof *isa_lengths; l++) {
        const int64_t n = isa_lengths[l];
        float *want = malloc((size_t)(3 * n) * sizeof *want);
        float *got = malloc((size_t)(3 * n) * sizeof *got);
        assert_non_null(want);
        assert_non_null(got);
        for (size_t c = 0; c < sizeof isa_adam_cases / sizeof *isa_adam_cases; c++) {
            const isa_adam_case *ac = &isa_adam_cases[c];
            adam_on_isa(ZT_CPU_ISA_BASELINE, 1, n, ac, want);
            for (size_t k = 0; k < sizeof isa_threads / sizeof *isa_threads; k++) {
                adam_on_isa(isa, isa_threads[k], n, ac, got);
                assert_bits_equal(got, want, n, adam_names, 3, ac->name, isa, isa_threads[k]);
            }
        }
        for (size_t c = 0; c < sizeof isa_sgd_cases / sizeof *isa_sgd_cases; c++) {
            const isa_sgd_case *sc = &isa_sgd_cases[c];
            sgd_on_isa(ZT_CPU_ISA_BASELINE, 1, n, sc, want);
            for (size_t k = 0; k < sizeof isa_threads / sizeof *isa_threads; k++) {
                sgd_on_isa(isa, isa_threads[k], n, sc, got);
                assert_bits_equal(got, want, n, sgd_names, 2, sc->name, isa, isa_threads[k]);
            }
        }
        free(want);
        free(got);
    }
    omp_set_num_threads(team);
    assert_int_equal(zt_cpu_isa_set(before), ZT_OK);
    print_message("the %s path gives the baseline path's bits\n", zt_cpu_isa_name(isa));
}

static void test_isa_baseline(void **state)
{
    (void)state;
    check_isa_path(ZT_CPU_ISA_BASELINE);
}

static void test_isa_avx2(void **state)
{
    (void)state;
    check_isa_path(ZT_CPU_ISA_AVX2);
}

static void test_isa_avx512(void **state)
{
    (void)state;
    check_isa_path(ZT_CPU_ISA_AVX512);
}

/* zt_cpu_isa_set refuses what this CPU cannot run, and anything out of the
 * enum, with the reason, and leaves the kernels where they were;
 * zt_cpu_isa_parse knows exactly ZT_CPU_ISA's spellings. */
static void test_isa_refused(void **state)
{
    (void)state;
    const zt_cpu_isa before = zt_cpu_isa_get();
    assert_true(zt_cpu_isa_supported(ZT_CPU_ISA_BASELINE));
    assert_true(zt_cpu_isa_supported(zt_cpu_isa_best()));
    for (int isa = zt_cpu_isa_best() + 1; isa < ZT_CPU_ISA_COUNT; isa++) {
        assert_false(zt_cpu_isa_supported((zt_cpu_isa)isa));
        assert_int_equal(zt_cpu_isa_set((zt_cpu_isa)isa), ZT_ERR_UNSUPPORTED);
        assert_non_null(strstr(zt_status_message(), zt_cpu_isa_name((zt_cpu_isa)isa)));
        assert_int_equal(zt_cpu_isa_get(), before);
    }
    assert_int_equal(zt_cpu_isa_set(ZT_CPU_ISA_COUNT), ZT_ERR_UNSUPPORTED);
    assert_int_equal(zt_cpu_isa_set((zt_cpu_isa)-1), ZT_ERR_UNSUPPORTED);
    assert_int_equal(zt_cpu_isa_get(), before);

    for (int isa = 0; isa < ZT_CPU_ISA_COUNT; isa++) {
        zt_cpu_isa parsed = ZT_CPU_ISA_COUNT;
        assert_int_equal(zt_cpu_isa_parse(zt_cpu_isa_name((zt_cpu_isa)isa), &parsed), ZT_OK);
        assert_int_equal(parsed, isa);
    }
    static const char *const bad[] = {"", "AVX2", "avx-512", "avx512f", "sse4.2", "native"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        zt_cpu_isa parsed = ZT_CPU_ISA_COUNT;
        assert_int_equal(zt_cpu_isa_parse(bad[i], &parsed), ZT_ERR_USAGE);
        assert_int_equal(parsed, ZT_CPU_ISA_COUNT);
    }
    assert_int_equal(zt_cpu_isa_parse(NULL, &(zt_cpu_isa){0}), ZT_ERR_USAGE);
}

/* ---- ZT_CPU_ISA, read once per process ---- */

#define ISA_PROBE_ARG "--isa-probe"

/* The child side: pick the ISA from the environment, run a step on it, say
 * which it was. */
static int isa_probe(void)
{
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    zt_adam_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                          .adam_w_mode = true, .bias_correction = true, .step = 1};
    zt_adam_cpu(&p, &g, &m, &v, 1, &hp);
    printf("isa=%s p=%a\n", zt_cpu_isa_name(zt_cpu_isa_get()), (double)p);
    return 0;
}

/* This binary run again with ZT_CPU_ISA set: the kernels take a supported
 * ISA, and for one this CPU lacks they say so on stderr and take the best,
 * exiting 0 with the same result: never SIGILL. (A name that is no ISA's is
 * refused at start-up: tests/unit/test_env.c, test_startup_failures.sh.) */
static void test_isa_env(void **state)
{
    (void)state;
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        skip();
    self[len] = '\0';
    static const char *const wants[] = {"baseline", "avx2", "avx512"};
    char baseline_p[64] = "";
    for (size_t w = 0; w < sizeof wants / sizeof *wants; w++) {
        zt_cpu_isa isa = ZT_CPU_ISA_COUNT;
        bool runs = zt_cpu_isa_parse(wants[w], &isa) == ZT_OK && zt_cpu_isa_supported(isa);
        const char *expect = runs ? wants[w] : zt_cpu_isa_name(zt_cpu_isa_best());
        char cmd[4300], out[1024] = "";
        snprintf(cmd, sizeof cmd, "ZT_CPU_ISA=%s '%s' " ISA_PROBE_ARG " 2>&1", wants[w], self);
        FILE *f = popen(cmd, "r");
        assert_non_null(f);
        size_t got = fread(out, 1, sizeof out - 1, f);
        out[got] = '\0';
        int rc = pclose(f);
        print_message("ZT_CPU_ISA=%s: %s", wants[w], out);
        assert_int_equal(rc, 0);
        char line[64];
        snprintf(line, sizeof line, "isa=%s p=", expect);
        assert_non_null(strstr(out, line));
        assert_true((strstr(out, "refused") != NULL) == !runs);
        /* The same step on every path: the first (baseline) run's p. */
        const char *p = strstr(out, " p=");
        assert_non_null(p);
        if (w == 0)
            snprintf(baseline_p, sizeof baseline_p, "%s", p);
        assert_string_equal(p, baseline_p);
    }
}

/* ---- zt_optim over a fake backend ---- */

static struct {
    int adam_calls, sgd_calls, memset_calls;
    zt_adam_hparams adam_hp;
    zt_sgd_hparams sgd_hp;
    const float *m, *v, *buf;
} fake;

static void fake_memset_zero(const zt_backend *be, void *dst, size_t bytes)
{
    (void)be;
    fake.memset_calls++;
    memset(dst, 0, bytes);
}

static void fake_adam(const zt_backend *be, float *p, const float *g, float *m, float *v,
                      int64_t n, const zt_adam_hparams *hp)
{
    (void)be;
    fake.adam_calls++;
    fake.adam_hp = *hp;
    fake.m = m;
    fake.v = v;
    zt_adam_cpu(p, g, m, v, n, hp);
}

static void fake_sgd(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
                     const zt_sgd_hparams *hp)
{
    (void)be;
    fake.sgd_calls++;
    fake.sgd_hp = *hp;
    fake.buf = buf;
    zt_sgd_cpu(p, g, buf, n, hp);
}

static const zt_backend fake_backend = {
    .name = "fake",
    .kind = ZT_DEVICE_CPU,
    .memset_zero = fake_memset_zero,
    .adam = fake_adam,
    .sgd = fake_sgd,
};

static int reset_fake(void **state)
{
    (void)state;
    memset(&fake, 0, sizeof fake);
    return 0;
}

static zt_optim_config adam_config(void)
{
    return (zt_optim_config){.type = ZT_OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999,
                             .eps = 1e-8, .weight_decay = 0.01, .adam_w_mode = true,
                             .bias_correction = true};
}

static void test_state_numel(void **state)
{
    (void)state;
    zt_optim_config c = adam_config();
    assert_int_equal(zt_optim_state_numel(&c, 1000), 2000);
    c.type = ZT_OPTIM_ADAM;
    c.adam_w_mode = false;
    assert_int_equal(zt_optim_state_numel(&c, 1000), 2000);
    c = (zt_optim_config){.type = ZT_OPTIM_SGD, .lr = 0.1, .momentum = 0.9};
    assert_int_equal(zt_optim_state_numel(&c, 1000), 1000);
    c.momentum = 0.0;
    assert_int_equal(zt_optim_state_numel(&c, 1000), 0);
}

#define SMALL_N 17

/* zt_optim_step goes through be->adam with t = applied steps, config betas
 * unless overridden, m then v in the state; the result equals calling the
 * kernel directly with those hyper-parameters. */
static void test_optim_adam_dispatch(void **state)
{
    (void)state;
    zt_optim_config c = adam_config();
    float st[2 * SMALL_N], p[SMALL_N], g[SMALL_N];
    float dp[SMALL_N], dm[SMALL_N] = {0}, dv[SMALL_N] = {0};
    for (int i = 0; i < 2 * SMALL_N; i++)
        st[i] = 7.0f; /* arena memory comes uninitialised */
    zt_optim opt;
    zt_optim_init(&opt, &c, &fake_backend, false, SMALL_N, st);
    assert_int_equal(fake.memset_calls, 1);
    assert_int_equal(opt.steps, 0);
    for (int i = 0; i < 2 * SMALL_N; i++)
        assert_true(st[i] == 0.0f);

    fill_params(p, SMALL_N);
    memcpy(dp, p, sizeof p);
    for (int t = 1; t <= 4; t++) {
        fill_grads(g, SMALL_N, t);
        /* steps 3 and 4 take OneCycle-style betas */
        double b1 = t >= 3 ? 0.85 : -1.0, b2 = t >= 3 ? 0.99 : -1.0;
        zt_optim_step(&opt, p, g, 2e-3, b1, b2);
        assert_int_equal(opt.steps, t);
        assert_int_equal(fake.adam_calls, t);
        assert_int_equal(fake.adam_hp.step, t);
        assert_ptr_equal(fake.m, st);
        assert_ptr_equal(fake.v, st + SMALL_N);
        assert_true(fake.adam_hp.lr == 2e-3f);
        assert_true(fake.adam_hp.beta1 == (t >= 3 ? 0.85f : 0.9f));
        assert_true(fake.adam_hp.beta2 == (t >= 3 ? 0.99f : 0.999f));
        assert_true(fake.adam_hp.eps == 1e-8f);
        assert_true(fake.adam_hp.weight_decay == 0.01f);
        assert_true(fake.adam_hp.adam_w_mode);
        assert_true(fake.adam_hp.bias_correction);

        zt_adam_hparams hp = {.lr = 2e-3f, .beta1 = t >= 3 ? 0.85f : 0.9f,
                              .beta2 = t >= 3 ? 0.99f : 0.999f, .eps = 1e-8f,
                              .weight_decay = 0.01f, .adam_w_mode = true,
                              .bias_correction = true, .step = t};
        zt_adam_cpu(dp, g, dm, dv, SMALL_N, &hp);
        assert_memory_equal(p, dp, sizeof p);
        assert_memory_equal(st, dm, sizeof dm);
        assert_memory_equal(st + SMALL_N, dv, sizeof dv);
    }
    assert_int_equal(fake.sgd_calls, 0);
}

static void test_optim_adam_l2_flags(void **state)
{
    (void)state;
    zt_optim_config c = adam_config();
    c.type = ZT_OPTIM_ADAM;
    c.adam_w_mode = false;
    c.bias_correction = false;
    float st[2 * SMALL_N], p[SMALL_N], g[SMALL_N];
    zt_optim opt;
    zt_optim_init(&opt, &c, &fake_backend, false, SMALL_N, st);
    fill_params(p, SMALL_N);
    fill_grads(g, SMALL_N, 1);
    zt_optim_step(&opt, p, g, 1e-3, -1.0, -1.0);
    assert_int_equal(fake.adam_calls, 1);
    assert_false(fake.adam_hp.adam_w_mode);
    assert_false(fake.adam_hp.bias_correction);
}

static void test_optim_sgd_dispatch(void **state)
{
    (void)state;
    zt_optim_config c = {.type = ZT_OPTIM_SGD, .lr = 0.1, .momentum = 0.9, .dampening = 0.1,
                         .weight_decay = 0.01, .nesterov = false};
    float st[SMALL_N], p[SMALL_N], g[SMALL_N];
    zt_optim opt;
    zt_optim_init(&opt, &c, &fake_backend, false, SMALL_N, st);
    fill_params(p, SMALL_N);
    for (int t = 1; t <= 3; t++) {
        fill_grads(g, SMALL_N, t);
        zt_optim_step(&opt, p, g, 0.05, t == 3 ? 0.5 : -1.0, -1.0);
        assert_int_equal(opt.steps, t);
        assert_int_equal(fake.sgd_calls, t);
        assert_ptr_equal(fake.buf, st);
        assert_true(fake.sgd_hp.first_step == (t == 1));
        assert_true(fake.sgd_hp.lr == 0.05f);
        assert_true(fake.sgd_hp.momentum == (t == 3 ? 0.5f : 0.9f));
        assert_true(fake.sgd_hp.dampening == 0.1f);
        assert_true(fake.sgd_hp.weight_decay == 0.01f);
        assert_false(fake.sgd_hp.nesterov);
    }
    assert_int_equal(fake.adam_calls, 0);
}

/* Plain SGD has no state: nothing to zero, and a momentum override has no
 * buffer to act on, so it is ignored. */
static void test_optim_sgd_no_momentum(void **state)
{
    (void)state;
    zt_optim_config c = {.type = ZT_OPTIM_SGD, .lr = 0.1};
    float p[SMALL_N], g[SMALL_N];
    zt_optim opt;
    zt_optim_init(&opt, &c, &fake_backend, false, SMALL_N, NULL);
    assert_int_equal(fake.memset_calls, 0);
    fill_params(p, SMALL_N);
    fill_grads(g, SMALL_N, 1);
    zt_optim_step(&opt, p, g, 0.1, 0.9, -1.0);
    assert_int_equal(fake.sgd_calls, 1);
    assert_true(fake.sgd_hp.momentum == 0.0f);
    assert_null(fake.buf);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], ISA_PROBE_ARG) == 0)
        return isa_probe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adam_l2),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adam_by_hand),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_by_hand),
        cmocka_unit_test(test_large_array),
        cmocka_unit_test(test_thread_count_invariance),
        cmocka_unit_test(test_isa_baseline),
        cmocka_unit_test(test_isa_avx2),
        cmocka_unit_test(test_isa_avx512),
        cmocka_unit_test(test_isa_refused),
        cmocka_unit_test(test_isa_env),
        cmocka_unit_test(test_state_numel),
        cmocka_unit_test_setup(test_optim_adam_dispatch, reset_fake),
        cmocka_unit_test_setup(test_optim_adam_l2_flags, reset_fake),
        cmocka_unit_test_setup(test_optim_sgd_dispatch, reset_fake),
        cmocka_unit_test_setup(test_optim_sgd_no_momentum, reset_fake),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
