/* The units' forward costs (models/unit.h zt_unit_forward_cost) against a
 * count made here another way: the MACs of every Linear from the unit's own
 * weight shapes (rows x out x in), attention's two products from (n, t, C),
 * and the element-wise FLOPs listed op by op from the models' definitions
 * (models/model.h) with DeepSpeed's flops profiler rules: ReLU, GELU,
 * softmax, scaling and adds 1 per element, LayerNorm 5, mean pooling 1,
 * embedding and dropout 0. Also the hidden size HF's "auto" reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/spell.h"
#include "models/model.h"
#include "models/registry.h"

/* Sum over the unit's 2-D weights other than embeddings: rows x out x in. */
static int64_t linear_macs(const zt_unit *u, int64_t rows, const char *only_prefix)
{
    int64_t macs = 0;
    for (int i = 0; i < u->n_params; i++) {
        const zt_param_spec *p = &u->params[i];
        if (p->ndim != 2 || strstr(p->name, "wte") || strstr(p->name, "wpe") ||
            strstr(p->name, "embedding"))
            continue;
        if (only_prefix && strncmp(p->name, only_prefix, strlen(only_prefix)) != 0)
            continue;
        macs += rows * p->shape[0] * p->shape[1];
    }
    return macs;
}

static void build(zt_model_args *a, zt_model *m)
{
    assert_int_equal(zt_model_build(a, m), ZT_OK);
}

static void test_mlp_cost(void **state)
{
    (void)state;
    zt_model_args a;
    zt_model_args_init(&a);
    a.width = 24;
    a.layers = 3;
    a.in_size = 10;
    a.out_size = 5;
    zt_model m;
    build(&a, &m);
    assert_int_equal(m.hidden_size, 24);
    const int64_t n = 7;
    for (int u = 0; u < m.n_units; u++) {
        zt_unit_cost c = zt_unit_forward_cost(&m.units[u], n, 0);
        int64_t out = m.units[u].out_numel;
        assert_int_equal(c.macs, linear_macs(&m.units[u], n, NULL));
        assert_int_equal(c.flops, 2 * c.macs + n * out); /* + ReLU */
    }
    assert_int_equal(zt_unit_forward_cost(&m.units[0], n, 0).macs, n * 10 * 24);
    zt_model_free(&m);
}

static void test_gptlite_cost(void **state)
{
    (void)state;
    zt_model_args a;
    zt_model_args_init(&a);
    snprintf(a.name, sizeof a.name, "gptlite");
    a.n_layer = 2;
    a.n_embd = 16;
    a.n_head = 4;
    a.block_size = 8;
    a.vocab_size = 11;
    zt_model m;
    build(&a, &m);
    assert_int_equal(m.hidden_size, 16);
    const int64_t n = 3, t = 6, c = 16, heads = 4, f = 64, rows = n * t, v = 11;
    /* embed: lookup (0) + wpe add */
    zt_unit_cost e = zt_unit_forward_cost(&m.units[0], n, t);
    assert_int_equal(e.macs, 0);
    assert_int_equal(e.flops, rows * c);
    /* block: the four Linears, Q K^T and att V */
    zt_unit_cost b = zt_unit_forward_cost(&m.units[1], n, t);
    assert_int_equal(b.macs, linear_macs(&m.units[1], rows, NULL) + 2 * n * heads * t * t * (c / heads));
    int64_t elementwise = rows * c * 5      /* ln_1 */
                          + n * heads * t * t /* scale */
                          + n * heads * t * t /* softmax */
                          + rows * c          /* residual */
                          + rows * c * 5      /* ln_2 */
                          + rows * f          /* activation */
                          + rows * c;         /* residual */
    assert_int_equal(b.flops, 2 * b.macs + elementwise);
    /* head: ln_f, lm_head */
    zt_unit_cost h = zt_unit_forward_cost(&m.units[3], n, t);
    assert_int_equal(h.macs, rows * v * c);
    assert_int_equal(h.flops, 2 * h.macs + 5 * rows * c);
    /* the usual 2 x params x tokens rule for the Linear part of the whole model */
    int64_t model_macs = 0;
    for (int u = 0; u < m.n_units; u++)
        model_macs += zt_unit_forward_cost(&m.units[u], n, t).macs;
    int64_t linear_params = 2 * (4 * c * c + 2 * c * f) + v * c;
    assert_int_equal(model_macs, rows * linear_params + 2 * 2 * n * t * t * c);
    zt_model_free(&m);
}

static void test_classifier_cost(void **state)
{
    (void)state;
    zt_model_args a;
    zt_model_args_init(&a);
    snprintf(a.name, sizeof a.name, "classifier");
    a.n_layer = 1;
    a.n_embd = 16;
    a.n_head = 2;
    a.hidden_dim = 24;
    a.max_len = 8;
    a.vocab_size = 13;
    zt_model m;
    build(&a, &m);
    assert_int_equal(m.hidden_size, 16);
    const int64_t n = 2, t = 5, e = 16, heads = 2, hd = 24, rows = n * t;
    zt_unit_cost emb = zt_unit_forward_cost(&m.units[0], n, t);
    assert_int_equal(emb.macs, 0);
    assert_int_equal(emb.flops, rows * e); /* + sinusoids; dropout 0 */
    zt_unit_cost l = zt_unit_forward_cost(&m.units[1], n, t);
    /* in_proj_weight (3E, E), out_proj (E, E), linear1 (H, E), linear2 (E, H) */
    assert_int_equal(l.macs, linear_macs(&m.units[1], rows, NULL) + 2 * n * t * t * e);
    assert_int_equal(l.flops, 2 * l.macs + 2 * n * heads * t * t + rows * (e + 5 * e + hd + e +
                                                                           5 * e));
    /* head: fc1 and fc2 on the pooled rows */
    zt_unit_cost h = zt_unit_forward_cost(&m.units[2], n, t);
    assert_int_equal(h.macs, linear_macs(&m.units[2], n, NULL));
    assert_int_equal(h.flops, 2 * h.macs + n * t * e /* mean pool */ + n * hd /* ReLU */);
    zt_model_free(&m);
}

static void test_spell(void **state)
{
    (void)state;
    assert_int_equal(zt_spell_distance("stage", "stage"), 0);
    assert_int_equal(zt_spell_distance("stgae", "stage"), 2);
    assert_int_equal(zt_spell_distance("STAGE", "stage"), 0);
    assert_int_equal(zt_spell_distance("", "abc"), 3);
    const char *cands[] = {"--width", NULL, "--layers", "--steps"};
    assert_string_equal(zt_spell_closest("--widht", cands, 4), "--width");
    assert_string_equal(zt_spell_closest("--step", cands, 4), "--steps");
    assert_null(zt_spell_closest("--tensor-parallel", cands, 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_cost),
        cmocka_unit_test(test_gptlite_cost),
        cmocka_unit_test(test_classifier_cost),
        cmocka_unit_test(test_spell),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
