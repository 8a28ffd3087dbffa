/*
 * test_optim: the CPU Adam/AdamW/SGD kernels against scalar float64
 * references written straight from the equations (DeepSpeed FusedAdam,
 * torch.optim.SGD), a few updates worked out by hand, the OpenMP split on a
 * large odd-sized array, and zt_optim's step counting and backend dispatch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
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
        cmocka_unit_test(test_state_numel),
        cmocka_unit_test_setup(test_optim_adam_dispatch, reset_fake),
        cmocka_unit_test_setup(test_optim_adam_l2_flags, reset_fake),
        cmocka_unit_test_setup(test_optim_sgd_dispatch, reset_fake),
        cmocka_unit_test_setup(test_optim_sgd_no_momentum, reset_fake),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
