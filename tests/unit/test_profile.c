/*
 * test_profile: --profile's counting backend (engine/monitor/profile.h).
 * Every op pointer of struct zt_backend is replaced by the wrapper (a table
 * of the ops, tied to sizeof(zt_backend) by a static assert, so a new op
 * fails to compile here until it is listed and counted); counts of a GEMM
 * and a layernorm on the CPU backend against the formulas, with and without
 * the modelled 16-bit operand casts; results equal the wrapped backend's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/monitor/profile.h"

typedef void (*any_fn)(void);

/* Every function pointer of struct zt_backend. Adding an op to the struct
 * breaks the static assert below until the op is listed here, and the test
 * then fails until engine/monitor/profile.c wraps (and counts) it. */
#define OP(f) {#f, offsetof(zt_backend, f)}
static const struct {
    const char *name;
    size_t offset;
} ops[] = {
    OP(destroy), OP(alloc), OP(free), OP(host_alloc), OP(host_free), OP(mem_info),
    OP(set_workspace), OP(check), OP(copy_h2d), OP(copy_d2h), OP(copy_d2d), OP(memset_zero),
    OP(sync), OP(gemm), OP(bias_add), OP(bias_grad), OP(relu_forward), OP(relu_backward),
    OP(xent_forward_backward), OP(scale), OP(axpy), OP(sum_squares), OP(has_inf_nan),
    OP(convert), OP(embedding_forward), OP(embedding_backward), OP(sinusoid_add),
    OP(layernorm_forward), OP(layernorm_backward), OP(gelu_forward), OP(gelu_backward),
    OP(residual_layernorm_forward), OP(linear_act_forward), OP(act_bias_grad),
    OP(linear_backward), OP(gemm_batched), OP(attn_softmax_forward), OP(attn_softmax_backward),
    OP(attn_flash_forward), OP(attn_flash_backward), OP(dropout),
    OP(mean_pool_forward), OP(mean_pool_backward), OP(quantize), OP(dequantize), OP(adam),
    OP(sgd),
};
#define N_OPS (sizeof ops / sizeof ops[0])

/* The struct is: name, kind, impl, then the ops with workspace_bytes,
 * workspace_cast_bytes and typed_dtypes among them. */
_Static_assert(sizeof(zt_backend) == offsetof(zt_backend, destroy) + N_OPS * sizeof(any_fn) +
                                         2 * sizeof(size_t) + sizeof(uint64_t),
               "struct zt_backend changed: list every op in tests/unit/test_profile.c and wrap "
               "it in engine/monitor/profile.c");

static void sentinel(void) {}

static any_fn slot(const zt_backend *be, size_t off)
{
    any_fn f;
    memcpy(&f, (const char *)be + off, sizeof f);
    return f;
}

static void test_every_op_wrapped(void **state)
{
    (void)state;
    /* the ops' offsets are distinct and none is workspace_bytes */
    for (size_t i = 0; i < N_OPS; i++) {
        assert_true(ops[i].offset != offsetof(zt_backend, workspace_bytes));
        assert_true(ops[i].offset != offsetof(zt_backend, workspace_cast_bytes));
        assert_true(ops[i].offset != offsetof(zt_backend, typed_dtypes));
        for (size_t j = 0; j < i; j++)
            assert_true(ops[i].offset != ops[j].offset);
    }
    zt_backend inner, w;
    memset(&inner, 0, sizeof inner);
    any_fn s = sentinel;
    for (size_t i = 0; i < N_OPS; i++)
        memcpy((char *)&inner + ops[i].offset, &s, sizeof s);
    inner.name = "sentinel";
    inner.workspace_bytes = 12345;
    inner.workspace_cast_bytes = 2345;
    inner.typed_dtypes = 1u << ZT_F32 | 1u << ZT_BF16;
    zt_profile_options opt = {.gemm_dtype = ZT_F32};
    assert_int_equal(zt_profile_wrap(&w, &inner, &opt), ZT_OK);
    for (size_t i = 0; i < N_OPS; i++) {
        any_fn f = slot(&w, ops[i].offset);
        if (!f || f == sentinel)
            print_error("op %s is not wrapped by engine/monitor/profile.c\n", ops[i].name);
        assert_non_null(f);
        assert_true(f != sentinel);
    }
    assert_string_equal(w.name, "sentinel");
    assert_int_equal(w.workspace_bytes, 12345);
    assert_int_equal(w.workspace_cast_bytes, 2345);
    assert_int_equal(w.typed_dtypes, 1u << ZT_F32 | 1u << ZT_BF16);
    assert_true(zt_profile_is(&w));
    assert_false(zt_profile_is(&inner));
    zt_backend_free(&w);
    assert_null(w.impl);
}

static int op_index(const char *name)
{
    for (int i = 0; i < zt_profile_n_ops(); i++)
        if (!strcmp(zt_profile_op_name(i), name))
            return i;
    fail_msg("no op %s", name);
    return -1;
}

static void fill(float *x, int n, float s)
{
    for (int i = 0; i < n; i++)
        x[i] = s * (float)((i * 7) % 11 - 5);
}

/* GEMM (3,4,5) and layernorm (2,8) through the wrapper: counts by formula,
 * results bit-equal to the CPU backend's own. */
static void run_counts(zt_dtype gemm_dtype)
{
    zt_backend cpu, w;
    assert_int_equal(zt_backend_cpu_init(&cpu), ZT_OK);
    zt_profile_options opt = {.gemm_dtype = gemm_dtype};
    assert_int_equal(zt_profile_wrap(&w, &cpu, &opt), ZT_OK);
    float a[15], b[20], c[12], c_ref[12], x[16], y[16], y_ref[16], mean[2], rstd[2], lw[8],
        lb[8];
    fill(a, 15, 0.25f);
    fill(b, 20, 0.5f);
    fill(x, 16, 0.3f);
    fill(lw, 8, 0.1f);
    fill(lb, 8, 0.2f);
    /* before begin: passed through, not counted */
    w.gemm(&w, ZT_F32, ZT_F32, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4);
    zt_profile_begin(&w, NULL);
    w.gemm(&w, ZT_F32, ZT_F32, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4);
    w.gemm(&w, ZT_F32, ZT_F32, true, false, 3, 4, 5, 1.0f, a, 3, b, 4, 1.0f, c, 4); /* beta 1 reads C */
    w.layernorm_forward(&w, ZT_F32, y, mean, rstd, x, lw, lb, 2, 8, 1e-5f);
    zt_profile_end(&w, NULL);
    w.gemm(&w, ZT_F32, ZT_F32, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4); /* after end: not counted */

    cpu.gemm(&cpu, ZT_F32, ZT_F32, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c_ref, 4);
    cpu.gemm(&cpu, ZT_F32, ZT_F32, true, false, 3, 4, 5, 1.0f, a, 3, b, 4, 1.0f, c_ref, 4);
    cpu.gemm(&cpu, ZT_F32, ZT_F32, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c_ref, 4);
    float m2[2], r2[2];
    cpu.layernorm_forward(&cpu, ZT_F32, y_ref, m2, r2, x, lw, lb, 2, 8, 1e-5f);
    assert_memory_equal(c, c_ref, sizeof c);
    assert_memory_equal(y, y_ref, sizeof y);

    zt_profile_counts g, ln, cast;
    zt_profile_get(&w, op_index("gemm"), &g);
    zt_profile_get(&w, op_index("layernorm_forward"), &ln);
    zt_profile_get(&w, op_index("gemm_operand_cast"), &cast);
    assert_int_equal(g.calls, 2);
    assert_int_equal(g.flops, 2 * (2 * 3 * 4 * 5));
    const uint64_t operands = 2 * (3 * 5 + 5 * 4); /* two products' A and B */
    /* C: read once (beta 1), written twice, always fp32 */
    if (gemm_dtype == ZT_F32) {
        assert_int_equal(g.read[ZT_PROF_FP32], 4 * (operands + 12));
        assert_int_equal(g.read[ZT_PROF_BF16], 0);
        assert_int_equal(cast.calls, 0);
    } else {
        assert_int_equal(g.read[ZT_PROF_FP32], 4 * 12);
        assert_int_equal(g.read[ZT_PROF_BF16], 2 * operands);
        assert_int_equal(cast.calls, 4); /* two cast kernels per product */
        assert_int_equal(cast.read[ZT_PROF_FP32], 4 * operands);
        assert_int_equal(cast.written[ZT_PROF_BF16], 2 * operands);
    }
    assert_int_equal(g.written[ZT_PROF_FP32], 4 * 2 * 12);
    assert_int_equal(ln.calls, 1);
    assert_int_equal(ln.read[ZT_PROF_FP32], 4 * (16 + 2 * 8));
    assert_int_equal(ln.written[ZT_PROF_FP32], 4 * (16 + 2 * 2));

    json_t *j = zt_profile_json(&w);
    json_t *jg = json_object_get(json_object_get(j, "ops"), "gemm");
    assert_non_null(jg);
    assert_int_equal(json_integer_value(json_object_get(jg, "flops")), 240);
    assert_string_equal(json_string_value(json_object_get(jg, "class")), "matmul");
    assert_null(json_object_get(json_object_get(j, "ops"), "adam")); /* never called */
    json_decref(j);
    zt_backend_free(&w);
    zt_backend_free(&cpu);
}

static void test_counts_fp32(void **state)
{
    (void)state;
    run_counts(ZT_F32);
}

static void test_counts_bf16_casts(void **state)
{
    (void)state;
    run_counts(ZT_BF16);
}

/* Typed ops count their tensors at their own dtype: a bf16 GEMM reads its
 * operands as bf16 with no cast even where fp32 operands would be cast, and
 * writes an fp32 (weight-gradient) C as fp32; a bf16 layernorm reads and
 * writes bf16 with fp32 statistics; bf16 positions and mean pooling read
 * and write bf16 only. */
static void test_counts_typed(void **state)
{
    (void)state;
    zt_backend cpu, w;
    assert_int_equal(zt_backend_cpu_init(&cpu), ZT_OK);
    zt_profile_options opt = {.gemm_dtype = ZT_BF16};
    assert_int_equal(zt_profile_wrap(&w, &cpu, &opt), ZT_OK);
    float af[15], bf[20], c[12], xf[16], lwf[8], lbf[8], mean[2], rstd[2];
    uint16_t a[15], b[20], x[16], lw[8], lb[8], y[16], c16[12];
    fill(af, 15, 0.25f);
    fill(bf, 20, 0.5f);
    fill(xf, 16, 0.3f);
    fill(lwf, 8, 0.1f);
    fill(lbf, 8, 0.2f);
    zt_convert_host(a, ZT_BF16, af, ZT_F32, 15, 1.0f, false);
    zt_convert_host(b, ZT_BF16, bf, ZT_F32, 20, 1.0f, false);
    zt_convert_host(x, ZT_BF16, xf, ZT_F32, 16, 1.0f, false);
    zt_convert_host(lw, ZT_BF16, lwf, ZT_F32, 8, 1.0f, false);
    zt_convert_host(lb, ZT_BF16, lbf, ZT_F32, 8, 1.0f, false);
    zt_profile_begin(&w, NULL);
    w.gemm(&w, ZT_BF16, ZT_F32, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4);
    w.gemm(&w, ZT_BF16, ZT_BF16, false, false, 3, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c16, 4);
    w.layernorm_forward(&w, ZT_BF16, y, mean, rstd, x, lw, lb, 2, 8, 1e-5f);
    /* (n, t, cols) = (1, 2, 8): positions, then pooled (8) and back (16) */
    uint16_t pooled[8], dx[16];
    w.sinusoid_add(&w, ZT_BF16, x, 1, 2, 8);
    w.mean_pool_forward(&w, ZT_BF16, pooled, x, NULL, 1, 2, 8);
    w.mean_pool_backward(&w, ZT_BF16, dx, pooled, NULL, 1, 2, 8);
    zt_profile_end(&w, NULL);
    zt_profile_counts g, ln, cast;
    zt_profile_get(&w, op_index("gemm"), &g);
    zt_profile_get(&w, op_index("layernorm_forward"), &ln);
    zt_profile_get(&w, op_index("gemm_operand_cast"), &cast);
    assert_int_equal(cast.calls, 0);
    assert_int_equal(g.read[ZT_PROF_BF16], 2 * 2 * (3 * 5 + 5 * 4));
    assert_int_equal(g.read[ZT_PROF_FP32], 0);
    assert_int_equal(g.written[ZT_PROF_FP32], 4 * 12);
    assert_int_equal(g.written[ZT_PROF_BF16], 2 * 12);
    assert_int_equal(ln.read[ZT_PROF_BF16], 2 * (16 + 2 * 8));
    assert_int_equal(ln.read[ZT_PROF_FP32], 0);
    assert_int_equal(ln.written[ZT_PROF_BF16], 2 * 16);
    assert_int_equal(ln.written[ZT_PROF_FP32], 4 * 2 * 2);
    const struct {
        const char *op;
        uint64_t read, written; /* bf16 elements */
    } pe_pool[] = {{"sinusoid_add", 16, 16},
                   {"mean_pool_forward", 16, 8},
                   {"mean_pool_backward", 8, 16}};
    for (size_t i = 0; i < sizeof pe_pool / sizeof pe_pool[0]; i++) {
        zt_profile_counts k;
        zt_profile_get(&w, op_index(pe_pool[i].op), &k);
        assert_int_equal(k.calls, 1);
        assert_int_equal(k.read[ZT_PROF_BF16], 2 * pe_pool[i].read);
        assert_int_equal(k.written[ZT_PROF_BF16], 2 * pe_pool[i].written);
        assert_int_equal(k.read[ZT_PROF_FP32], 0);
        assert_int_equal(k.written[ZT_PROF_FP32], 0);
    }
    zt_backend_free(&w);
    zt_backend_free(&cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_wrapped),
        cmocka_unit_test(test_counts_fp32),
        cmocka_unit_test(test_counts_bf16_casts),
        cmocka_unit_test(test_counts_typed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
