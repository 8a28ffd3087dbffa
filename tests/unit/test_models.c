/*
 * test_models: the models' backward passes (the transformers' and the
 * MLP's) against directional finite differences of their forward passes,
 * run with the CPU backend exactly as the trainer drives them (units in
 * order, cross-entropy on the last output, units in reverse). What the PyTorch reference tests cannot cover is
 * checked here: dropout on (the backward must apply the forward's masks),
 * padded batches shorter than the model's sequence length, and
 * accumulation into existing gradients.
 *
 * Check: for a random direction v over all parameters, (L(p + e v) -
 * L(p - e v)) / 2e (float32 forwards, e = 1e-3) must match <grad, v>: to 1e-3
 * relative for the smooth GELU models (measured 1e-5), to 1e-2 with ReLU,
 * whose kinks inside the +-e interval bias the difference quotient (measured
 * 2e-3 to 3e-3). A wrong mask, index or missing term gives errors of O(1).
 * And the parameter layout: the names and sizes model.h promises.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/cpu.h"
#include "data/dataset.h"
#include "models/model.h"
#include "tests/unit/test_rng.h"

typedef struct {
    zt_backend be;
    zt_model m;
    float **p, **dp, **acts, **saved;
    float *work, *dact[2], *tmp;
    float *x; /* (n, in_numel): the MLP's input, else NULL */
    int32_t *tokens, *lengths, *labels;
    uint64_t *keys;
    int64_t n, t, rows;
    bool training;
} harness;

static float *alloc_floats(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* n samples of t tokens (lengths: short samples for the classifier). */
static void harness_init(harness *h, const zt_model_args *a, int64_t n, int64_t t, bool padded)
{
    memset(h, 0, sizeof *h);
    rng_seed(0x1234567ull);
    assert_int_equal(zt_backend_cpu_init(&h->be), ZT_OK);
    assert_int_equal(zt_model_build(a, &h->m), ZT_OK);
    zt_model *m = &h->m;
    int nu = m->n_units;
    h->n = n;
    h->t = t;
    h->p = calloc((size_t)nu, sizeof(float *));
    h->dp = calloc((size_t)nu, sizeof(float *));
    h->acts = calloc((size_t)nu, sizeof(float *));
    h->saved = calloc((size_t)nu, sizeof(float *));
    int64_t maxw = 0, maxa = 0;
    for (int u = 0; u < nu; u++) {
        zt_unit *un = &m->units[u];
        h->p[u] = alloc_floats(un->param_numel);
        h->dp[u] = alloc_floats(un->param_numel);
        zt_unit_init_range(un, 99, 0, 0, un->param_numel, h->p[u]);
        h->acts[u] = alloc_floats(n * un->out_numel);
        h->saved[u] = alloc_floats(n * un->saved_numel);
        maxw = un->work_numel > maxw ? un->work_numel : maxw;
        maxa = un->out_numel > maxa ? un->out_numel : maxa;
        maxa = un->in_numel > maxa ? un->in_numel : maxa;
    }
    h->work = alloc_floats(n * maxw);
    h->dact[0] = alloc_floats(n * maxa);
    h->dact[1] = alloc_floats(n * maxa);
    h->tokens = calloc((size_t)(n * t), sizeof(int32_t));
    h->lengths = calloc((size_t)n, sizeof(int32_t));
    h->keys = calloc((size_t)n, sizeof(uint64_t));
    h->rows = m->labels_per_token ? n * t : n;
    h->labels = calloc((size_t)h->rows, sizeof(int32_t));
    for (int64_t i = 0; i < n * t; i++)
        h->tokens[i] = (int32_t)(rng_uniform(0, (double)m->vocab_size));
    for (int64_t s = 0; s < n; s++) {
        h->lengths[s] = (int32_t)(padded ? 1 + (s * 5) % t : t);
        h->keys[s] = 1000 + (uint64_t)s * 7;
    }
    for (int64_t r = 0; r < h->rows; r++)
        h->labels[r] = (int32_t)(rng_uniform(0, (double)m->n_classes));
    if (m->in_numel > 0) {
        h->x = alloc_floats(n * m->in_numel);
        for (int64_t i = 0; i < n * m->in_numel; i++)
            h->x[i] = (float)rng_uniform(-1.0, 1.0);
    }
}

static void harness_free(harness *h)
{
    for (int u = 0; u < h->m.n_units; u++) {
        free(h->p[u]);
        free(h->dp[u]);
        free(h->acts[u]);
        free(h->saved[u]);
    }
    free(h->p);
    free(h->dp);
    free(h->acts);
    free(h->saved);
    free(h->work);
    free(h->dact[0]);
    free(h->dact[1]);
    free(h->tokens);
    free(h->lengths);
    free(h->keys);
    free(h->labels);
    free(h->x);
    zt_model_free(&h->m);
    zt_backend_free(&h->be);
}

static zt_batch harness_batch(const harness *h, bool padded)
{
    return (zt_batch){.n = h->n, .t = h->t, .tokens = h->tokens,
                      .lengths = padded ? h->lengths : NULL, .row_keys = h->keys, .seed = 5,
                      .step = 3, .training = h->training};
}

/* Mean loss; with grads, also the backward (accumulate into dp when asked). */
static double harness_run(harness *h, bool padded, bool grads, bool accumulate)
{
    zt_model *m = &h->m;
    zt_batch b = harness_batch(h, padded);
    const float *in = h->x;
    int last = m->n_units - 1;
    for (int u = 0; u <= last; u++) {
        m->units[u].ops->forward(&m->units[u], &h->be, h->p[u], in, h->acts[u], h->saved[u],
                                 h->work, &b);
        in = h->acts[u];
    }
    double loss = h->be.xent_forward_backward(&h->be, ZT_F32, h->acts[last], h->labels, h->rows,
                                              m->n_classes, m->logits_ld, ZT_IGNORE_INDEX,
                                              1.0f / (float)h->rows, grads ? h->dact[0] : NULL);
    if (!grads)
        return loss / (double)h->rows;
    int cur = 0;
    for (int u = last; u >= 0; u--) {
        float *dx = u > 0 ? h->dact[1 - cur] : NULL;
        const float *x = u > 0 ? h->acts[u - 1] : h->x;
        m->units[u].ops->backward(&m->units[u], &h->be, h->p[u], x, h->acts[u], h->saved[u],
                                  h->dact[cur], dx, h->dp[u], h->work, accumulate, &b);
        cur = 1 - cur;
    }
    return loss / (double)h->rows;
}

/* Directional derivative check over all parameters. */
static void check_gradient(harness *h, bool padded, double tol)
{
    zt_model *m = &h->m;
    harness_run(h, padded, true, false);
    float **v = calloc((size_t)m->n_units, sizeof(float *));
    double dot = 0.0;
    for (int u = 0; u < m->n_units; u++) {
        int64_t k = m->units[u].param_numel;
        v[u] = alloc_floats(k);
        for (int64_t i = 0; i < k; i++) {
            v[u][i] = (float)rng_uniform(-1.0, 1.0);
            dot += (double)v[u][i] * (double)h->dp[u][i];
        }
    }
    const double eps = 1e-3;
    double side[2];
    for (int sgn = 0; sgn < 2; sgn++) {
        double e = sgn == 0 ? eps : -eps;
        for (int u = 0; u < m->n_units; u++)
            for (int64_t i = 0; i < m->units[u].param_numel; i++)
                h->p[u][i] += (float)e * v[u][i];
        side[sgn] = harness_run(h, padded, false, false);
        for (int u = 0; u < m->n_units; u++)
            for (int64_t i = 0; i < m->units[u].param_numel; i++)
                h->p[u][i] -= (float)e * v[u][i];
    }
    double fd = (side[0] - side[1]) / (2.0 * eps);
    print_message("    directional derivative: analytic %.8g, finite difference %.8g\n", dot, fd);
    assert_true(fabs(fd - dot) <= tol * fabs(dot) + 1e-6);
    for (int u = 0; u < m->n_units; u++)
        free(v[u]);
    free(v);
}

static void gpt_args(zt_model_args *a, double dropout)
{
    zt_model_args_init(a);
    snprintf(a->name, sizeof a->name, "gptlite");
    a->n_layer = 2;
    a->n_embd = 16;
    a->n_head = 4;
    a->block_size = 8;
    a->vocab_size = 11;
    a->dropout = dropout;
}

static void cls_args(zt_model_args *a, double dropout)
{
    zt_model_args_init(a);
    snprintf(a->name, sizeof a->name, "classifier");
    a->n_layer = 2;
    a->n_embd = 16;
    a->n_head = 4;
    a->hidden_dim = 24;
    a->max_len = 8;
    a->vocab_size = 13;
    a->dropout = dropout;
}

static void test_gptlite_gradient(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    gpt_args(&a, 0.0);
    harness_init(&h, &a, 3, 8, false);
    check_gradient(&h, false, 1e-2);
    harness_free(&h);
}

static void test_gptlite_gradient_dropout_gelu(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    gpt_args(&a, 0.3);
    a.gelu = true;
    harness_init(&h, &a, 3, 8, false);
    h.training = true;
    check_gradient(&h, false, 1e-3);
    harness_free(&h);
}

/* A batch shorter than the block (generation does this). */
static void test_gptlite_gradient_short(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    gpt_args(&a, 0.2);
    a.gelu = true;
    harness_init(&h, &a, 2, 5, false);
    h.training = true;
    check_gradient(&h, false, 1e-3);
    harness_free(&h);
}

static void test_classifier_gradient_padded(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    cls_args(&a, 0.0);
    harness_init(&h, &a, 4, 6, true);
    check_gradient(&h, true, 1e-2);
    harness_free(&h);
}

static void test_classifier_gradient_dropout(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    cls_args(&a, 0.25);
    a.gelu = true;
    harness_init(&h, &a, 4, 8, true);
    h.training = true;
    check_gradient(&h, true, 1e-3);
    harness_free(&h);
}

/* Padding is invisible: a sample's logits do not change when its batch is
 * padded further, and padded tokens get no gradient. */
static void test_classifier_padding_invisible(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    cls_args(&a, 0.0);
    harness_init(&h, &a, 4, 6, true);
    harness_run(&h, true, true, false);
    int last = h.m.n_units - 1;
    float logits[8];
    memcpy(logits, h.acts[last], sizeof logits);
    float *demb = malloc((size_t)h.m.units[0].param_numel * sizeof(float));
    memcpy(demb, h.dp[0], (size_t)h.m.units[0].param_numel * sizeof(float));
    /* Repack the same samples at t = 8 with different pad tokens. */
    int32_t *wide = calloc((size_t)(4 * 8), sizeof(int32_t));
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 8; i++)
            wide[s * 8 + i] = i < h.lengths[s] ? h.tokens[s * 6 + i] : 12 - i;
    free(h.tokens);
    h.tokens = wide;
    h.t = 8;
    harness_run(&h, true, true, false);
    for (int i = 0; i < 8; i++)
        assert_float_equal(h.acts[last][i], logits[i], 1e-5 * (1.0 + fabs(logits[i])));
    for (int64_t i = 0; i < h.m.units[0].param_numel; i++)
        assert_float_equal(h.dp[0][i], demb[i], 1e-6);
    free(demb);
    harness_free(&h);
}

/* accumulate = true adds to the gradients already there. */
static void test_gptlite_accumulate(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    gpt_args(&a, 0.1);
    harness_init(&h, &a, 2, 8, false);
    h.training = true;
    harness_run(&h, false, true, false);
    zt_model *m = &h.m;
    float **once = calloc((size_t)m->n_units, sizeof(float *));
    for (int u = 0; u < m->n_units; u++) {
        once[u] = alloc_floats(m->units[u].param_numel);
        memcpy(once[u], h.dp[u], (size_t)m->units[u].param_numel * sizeof(float));
    }
    harness_run(&h, false, true, true);
    for (int u = 0; u < m->n_units; u++) {
        for (int64_t i = 0; i < m->units[u].param_numel; i++)
            assert_float_equal(h.dp[u][i], 2.0f * once[u][i], 1e-6 + 1e-5 * fabs(once[u][i]));
        free(once[u]);
    }
    free(once);
    harness_free(&h);
}

/* A model's units on 16-bit tensors themselves (models/unit.h "Typed
 * units"): parameters, activations and activation gradients of dt, fp32
 * parameter gradients. Against the fp32 run of the same weights (rounded to
 * dt first, so only the computation's rounding differs): the loss within
 * loss_tol relative, the gradient within grad_tol relative L2. */
static void check_typed(harness *h, zt_dtype dt, double loss_tol, double grad_tol)
{
    zt_model *m = &h->m;
    int last = m->n_units - 1;
    uint16_t **p16 = calloc((size_t)m->n_units, sizeof *p16);
    float **g32 = calloc((size_t)m->n_units, sizeof *g32);
    for (int u = 0; u <= last; u++) {
        int64_t k = m->units[u].param_numel;
        assert_true(m->units[u].typed);
        p16[u] = calloc((size_t)k, sizeof(uint16_t));
        zt_convert_host(p16[u], dt, h->p[u], ZT_F32, k, 1.0f, false);
        zt_convert_host(h->p[u], ZT_F32, p16[u], dt, k, 1.0f, false);
    }
    /* the MLP's input: rounded to dt as the trainer loads it */
    int64_t xn = h->n * m->in_numel;
    uint16_t *x16 = h->x ? calloc((size_t)xn, sizeof(uint16_t)) : NULL;
    if (h->x) {
        zt_convert_host(x16, dt, h->x, ZT_F32, xn, 1.0f, false);
        zt_convert_host(h->x, ZT_F32, x16, dt, xn, 1.0f, false);
    }
    double ref = harness_run(h, false, true, false);
    for (int u = 0; u <= last; u++) {
        g32[u] = alloc_floats(m->units[u].param_numel);
        memcpy(g32[u], h->dp[u], (size_t)m->units[u].param_numel * sizeof(float));
    }
    zt_batch b = harness_batch(h, false);
    b.dt = dt;
    const void *in = x16;
    for (int u = 0; u <= last; u++) {
        m->units[u].ops->forward(&m->units[u], &h->be, p16[u], in, h->acts[u], h->saved[u],
                                 h->work, &b);
        in = h->acts[u];
    }
    /* the loss gradient over the logits, in place where the model allows,
     * as the trainer has it; a unit whose output dy overwrote gets no y */
    void *dy = m->loss_in_place ? (void *)h->acts[last] : (void *)h->dact[0];
    double loss = h->be.xent_forward_backward(&h->be, dt, h->acts[last], h->labels, h->rows,
                                              m->n_classes, m->logits_ld, ZT_IGNORE_INDEX,
                                              1.0f / (float)h->rows, dy) /
                  (double)h->rows;
    for (int u = last; u >= 0; u--) {
        void *dx = u == 0 ? NULL : dy == h->dact[1] ? h->dact[0] : h->dact[1];
        const void *x = u > 0 ? (const void *)h->acts[u - 1] : x16;
        const void *y = dy == h->acts[u] ? NULL : h->acts[u];
        m->units[u].ops->backward(&m->units[u], &h->be, p16[u], x, y, h->saved[u], dy, dx,
                                  h->dp[u], h->work, false, &b);
        dy = dx;
    }
    double num = 0.0, den = 0.0;
    for (int u = 0; u <= last; u++)
        for (int64_t i = 0; i < m->units[u].param_numel; i++) {
            double d = (double)h->dp[u][i] - (double)g32[u][i];
            num += d * d;
            den += (double)g32[u][i] * (double)g32[u][i];
        }
    double grad_err = sqrt(num / den), loss_err = fabs(loss - ref) / fabs(ref);
    print_message("    %s: loss %.6f vs fp32 %.6f (rel %.2e, tol %.0e); gradient rel L2 %.2e "
                  "(tol %.0e)\n",
                  zt_dtype_name(dt), loss, ref, loss_err, loss_tol, grad_err, grad_tol);
    assert_true(loss_err <= loss_tol);
    assert_true(grad_err <= grad_tol);
    for (int u = 0; u <= last; u++) {
        free(p16[u]);
        free(g32[u]);
    }
    free(p16);
    free(g32);
    free(x16);
}

/* check_typed in bf16, then fp16, on a fresh harness of the model in
 * training mode, with GELU where the model has the choice (its dropout is
 * the caller's args'). */
static void check_typed_both(const zt_model_args *args, int64_t n, int64_t t, bool padded)
{
    for (int k = 0; k < 2; k++) {
        harness h;
        zt_model_args a = *args;
        a.gelu = true;
        harness_init(&h, &a, n, t, padded);
        h.training = true;
        if (k == 0)
            check_typed(&h, ZT_BF16, 1e-3, 2e-2);
        else
            check_typed(&h, ZT_F16, 1e-5, 3e-3);
        harness_free(&h);
    }
}

static void test_gptlite_typed(void **state)
{
    (void)state;
    zt_model_args a;
    gpt_args(&a, 0.2);
    check_typed_both(&a, 3, 8, false);
}

/* The classifier's units on 16-bit tensors: padded samples (key padding in
 * the attention, masked mean pooling), dropout at every site, GELU. */
static void test_classifier_typed(void **state)
{
    (void)state;
    zt_model_args a;
    cls_args(&a, 0.2);
    check_typed_both(&a, 4, 8, true);
}

static void mlp_args(zt_model_args *a)
{
    zt_model_args_init(a);
    snprintf(a->name, sizeof a->name, "mlp");
    a->width = 24;
    a->layers = 3;
    a->in_size = 12;
    a->out_size = 5;
}

/* The MLP: ReLU kinks, so the 1e-2 tolerance (see the top). */
static void test_mlp_gradient(void **state)
{
    (void)state;
    harness h;
    zt_model_args a;
    mlp_args(&a);
    harness_init(&h, &a, 6, 1, false);
    check_gradient(&h, false, 1e-2);
    harness_free(&h);
}

/* The MLP's units on 16-bit tensors, its input rounded to dt as the trainer
 * loads it. */
static void test_mlp_typed(void **state)
{
    (void)state;
    zt_model_args a;
    mlp_args(&a);
    check_typed_both(&a, 6, 1, false);
}

/* The layout model.h documents (the reference tests depend on it). */
static void test_layouts(void **state)
{
    (void)state;
    zt_model_args a;
    zt_model m;
    gpt_args(&a, 0.0);
    assert_int_equal(zt_model_build(&a, &m), ZT_OK);
    assert_int_equal(m.n_units, 4);
    assert_string_equal(m.units[0].name, "embed");
    assert_string_equal(m.units[1].name, "h.0");
    assert_string_equal(m.units[3].name, "head");
    assert_string_equal(m.units[1].params[2].name, "attn.qkv.weight");
    int64_t c = 16, v = 11, t = 8;
    assert_int_equal(m.n_params, v * c + t * c + 2 * (12 * c * c + 13 * c) + 2 * c + v * c + v);
    zt_model_free(&m);
    cls_args(&a, 0.0);
    assert_int_equal(zt_model_build(&a, &m), ZT_OK);
    assert_string_equal(m.units[1].name, "layers.0");
    assert_string_equal(m.units[1].params[0].name, "self_attn.in_proj_weight");
    assert_string_equal(m.units[1].params[11].name, "norm2.bias");
    int64_t e = 16, hd = 24, vv = 13;
    assert_int_equal(m.n_params, vv * e + 2 * (4 * e * e + 4 * e + 2 * e * hd + hd + e + 4 * e) +
                                     e * hd + hd + hd * 2 + 2);
    zt_model_free(&m);
    a.n_head = 5;
    assert_int_equal(zt_model_build(&a, &m), ZT_ERR_USAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_gptlite_gradient),
        cmocka_unit_test(test_gptlite_gradient_dropout_gelu),
        cmocka_unit_test(test_gptlite_gradient_short),
        cmocka_unit_test(test_gptlite_accumulate),
        cmocka_unit_test(test_gptlite_typed),
        cmocka_unit_test(test_classifier_gradient_padded),
        cmocka_unit_test(test_classifier_gradient_dropout),
        cmocka_unit_test(test_classifier_padding_invisible),
        cmocka_unit_test(test_classifier_typed),
        cmocka_unit_test(test_mlp_gradient),
        cmocka_unit_test(test_mlp_typed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
