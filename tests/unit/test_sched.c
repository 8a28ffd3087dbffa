/*
 * test_sched: every schedule against values worked out from DeepSpeed's
 * formulas (shared/reference/deepspeed-semantics.md §6) at the edges of its
 * phases, OneCycle's momentum, and the rule that skipped steps do not advance
 * the schedule (the k-th applied step uses f(k-2)). The expected numbers are
 * what Python's float arithmetic gives for the formula shown next to them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdbool.h>

#include "engine/train/sched.h"

static void assert_near_at(double got, double want, const char *what, int64_t it)
{
    /* The tiny absolute floor covers expected zeros. */
    if (fabs(got - want) <= 1e-12 * fabs(want) + 1e-18)
        return;
    fail_msg("%s at it=%lld: got %.17g, want %.17g", what, (long long)it, got, want);
}

static void check_lr(const zt_sched_config *c, double base_lr, int64_t it, double want)
{
    assert_near_at(zt_sched_lr_at(c, base_lr, it), want, "lr", it);
}

static zt_optim_config adamw_config(double lr)
{
    return (zt_optim_config){.type = ZT_OPTIM_ADAMW, .lr = lr, .beta1 = 0.9, .beta2 = 0.999,
                             .eps = 1e-8, .adam_w_mode = true, .bias_correction = true};
}

static void test_none(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_NONE};
    for (int64_t it = -1; it < 5; it++)
        check_lr(&c, 3e-4, it, 3e-4);
    zt_optim_config o = adamw_config(3e-4);
    zt_sched s;
    zt_sched_init(&s, &c, &o);
    assert_int_equal(s.last_batch_iteration, -1);
    assert_true(s.base_lr == 3e-4);
    double b1 = 5.0, b2 = 6.0;
    assert_false(zt_sched_momentum(&s, &b1, &b2));
    assert_true(b1 == 5.0 && b2 == 6.0);
}

/* WarmupLR, min 1e-4, max 1e-2, n = W = 10:
 *   log:    lr = 1e-4 + 0.0099 * ln(it+1)/ln(10)
 *   linear: lr = 1e-4 + 0.0099 * it/10
 * f(-1) = min; f(it >= W) = max. */
static void test_warmup_lr_log(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_LR, .warmup_min_lr = 1e-4,
                         .warmup_max_lr = 1e-2, .warmup_num_steps = 10,
                         .warmup_type = ZT_WARMUP_LOG};
    check_lr(&c, 0.5, -1, 1e-4);
    check_lr(&c, 0.5, 0, 1e-4);                  /* ln(1) = 0 */
    check_lr(&c, 0.5, 1, 0.0030801969570734135); /* 1e-4 + 0.0099*ln2/ln10 */
    check_lr(&c, 0.5, 5, 0.007803697378798072);  /* 1e-4 + 0.0099*ln6/ln10 */
    check_lr(&c, 0.5, 9, 0.009999999999999998);  /* ln10 * (1/ln10) rounds below 1 */
    check_lr(&c, 0.5, 10, 1e-2);
    check_lr(&c, 0.5, 1000, 1e-2);
}

static void test_warmup_lr_linear(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_LR, .warmup_min_lr = 1e-4,
                         .warmup_max_lr = 1e-2, .warmup_num_steps = 10,
                         .warmup_type = ZT_WARMUP_LINEAR};
    check_lr(&c, 0.5, -1, 1e-4);
    check_lr(&c, 0.5, 0, 1e-4);
    check_lr(&c, 0.5, 1, 0.0010900000000000003); /* 1e-4 + 0.0099*0.1 */
    check_lr(&c, 0.5, 5, 0.005050000000000001);  /* 1e-4 + 0.0099*0.5 */
    check_lr(&c, 0.5, 9, 0.00901);               /* 1e-4 + 0.0099*0.9 */
    check_lr(&c, 0.5, 10, 1e-2);
    check_lr(&c, 0.5, 12345, 1e-2);
}

/* warmup_max_lr < 0 is the optimizer lr; n < 2 becomes W = 2. */
static void test_warmup_lr_defaults(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_LR, .warmup_min_lr = 0.0,
                         .warmup_max_lr = -1.0, .warmup_num_steps = 1,
                         .warmup_type = ZT_WARMUP_LINEAR};
    zt_optim_config o = adamw_config(0.2);
    zt_sched s;
    zt_sched_init(&s, &c, &o);
    assert_near_at(zt_sched_lr(&s), 0.0, "f(-1)", -1);
    zt_sched_step(&s);
    assert_near_at(zt_sched_lr(&s), 0.0, "f(0)", 0);
    zt_sched_step(&s);
    assert_near_at(zt_sched_lr(&s), 0.1, "f(1) = 0.2*1/2", 1);
    zt_sched_step(&s);
    assert_near_at(zt_sched_lr(&s), 0.2, "f(2)", 2);

    c.warmup_num_steps = 0;
    c.warmup_type = ZT_WARMUP_LOG;
    check_lr(&c, 0.2, 0, 0.0);
    check_lr(&c, 0.2, 1, 0.2); /* ln2/ln2 */
    check_lr(&c, 0.2, 2, 0.2);
}

/* WarmupDecayLR, min 0, max 0.01, W 10, total 30, linear:
 * after warmup lr = 0.01 * max(0, (30-it)/20). */
static void test_warmup_decay_lr(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_DECAY_LR, .warmup_min_lr = 0.0,
                         .warmup_max_lr = 0.01, .warmup_num_steps = 10,
                         .warmup_type = ZT_WARMUP_LINEAR, .total_num_steps = 30};
    check_lr(&c, 1.0, -1, 0.0);
    check_lr(&c, 1.0, 0, 0.0);
    check_lr(&c, 1.0, 5, 0.005);
    check_lr(&c, 1.0, 9, 0.009000000000000001);
    check_lr(&c, 1.0, 10, 0.01);   /* 20/20 */
    check_lr(&c, 1.0, 20, 0.005);  /* 10/20 */
    check_lr(&c, 1.0, 29, 0.0005); /* 1/20 */
    check_lr(&c, 1.0, 30, 0.0);
    check_lr(&c, 1.0, 40, 0.0); /* -10/20 clamps at 0 */

    c.warmup_type = ZT_WARMUP_LOG;
    check_lr(&c, 1.0, 3, 0.006020599913279623); /* 0.01*ln4/ln10 */

    /* total < W: the denominator is max(1, total - W) = 1 */
    c.total_num_steps = 5;
    check_lr(&c, 1.0, 10, 0.0);
}

/* WarmupCosineLR, base 0.1, W 4, total 20, warmup_min_ratio 0.1,
 * cos_min_ratio 0.01, linear warmup:
 *   it < 4: lr = 0.1 * (0.1 + it/4 * 0.9)
 *   after:  p = min(1, (it-3)/16), lr = 0.1 * max(0, 0.01 + 0.99*(1 + cos(pi p))/2) */
static void test_warmup_cosine_lr(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_COSINE_LR, .warmup_num_steps = 4,
                         .total_num_steps = 20, .warmup_min_ratio = 0.1,
                         .cos_min_ratio = 0.01, .warmup_type = ZT_WARMUP_LINEAR};
    check_lr(&c, 0.1, -1, 0.0);
    check_lr(&c, 0.1, 0, 0.010000000000000002);
    check_lr(&c, 0.1, 1, 0.0325);
    check_lr(&c, 0.1, 3, 0.07750000000000001);
    check_lr(&c, 0.1, 4, 0.09904887137995991); /* p = 1/16 */
    check_lr(&c, 0.1, 11, 0.0505);             /* p = 1/2 */
    check_lr(&c, 0.1, 19, 0.001);              /* p = 1: cos_min_ratio */
    check_lr(&c, 0.1, 20, 0.001);              /* p clamps at 1 */
    check_lr(&c, 0.1, 100, 0.001);

    c.warmup_type = ZT_WARMUP_LOG;
    check_lr(&c, 0.1, 1, 0.05500000000000001); /* 0.1*(0.1 + ln2/ln4*0.9) */

    /* A negative cos_min_ratio would go below zero at the end: clamped. */
    c.cos_min_ratio = -0.5;
    check_lr(&c, 0.1, 11, 0.025); /* 0.1*(-0.5 + 1.5*0.5) */
    check_lr(&c, 0.1, 19, 0.0);

    /* base_lr is the optimizer lr at init */
    zt_optim_config o = adamw_config(0.1);
    zt_sched s;
    zt_sched_init(&s, &c, &o);
    assert_near_at(zt_sched_lr(&s), 0.0, "f(-1)", -1);
    zt_sched_step(&s);
    zt_sched_step(&s);
    assert_near_at(zt_sched_lr(&s), 0.05500000000000001, "f(1)", 1);
}

/* OneCycle, lr 0.01..0.1, first 4, second 6 (T = 10, r = 0.4), momentum
 * 0.85..0.95, decay every 2 iterations at lr rate 0.5, mom rate 0.1.
 * b = it+1, x = 1 + b/10 - floor(1 + b/10), s = x/r or (x-1)/(r-1):
 *   lr = 0.01 + 0.09 s, beta1 = 0.95 - 0.1 s
 * after the cycle d = (it-9)/2: lr = 0.01/(1 + 0.5 d), beta1 = 0.95 (1 + 0.1 d) */
static zt_sched_config one_cycle_config(void)
{
    return (zt_sched_config){.type = ZT_SCHED_ONE_CYCLE, .cycle_min_lr = 0.01,
                             .cycle_max_lr = 0.1, .cycle_first_step_size = 4,
                             .cycle_second_step_size = 6, .decay_step_size = 2,
                             .decay_lr_rate = 0.5, .cycle_momentum = true,
                             .cycle_min_mom = 0.85, .cycle_max_mom = 0.95,
                             .decay_mom_rate = 0.1};
}

static void check_one_cycle(const zt_sched_config *c, int64_t it, double want_lr,
                            double want_beta1)
{
    zt_optim_config o = adamw_config(1.0);
    zt_sched s;
    zt_sched_init(&s, c, &o);
    s.last_batch_iteration = it;
    assert_near_at(zt_sched_lr(&s), want_lr, "lr", it);
    double b1 = -1.0, b2 = -1.0;
    assert_true(zt_sched_momentum(&s, &b1, &b2));
    assert_near_at(b1, want_beta1, "beta1", it);
    assert_true(b2 == 0.99);
}

static void test_one_cycle(void **state)
{
    (void)state;
    zt_sched_config c = one_cycle_config();
    /* construction: lr = min, betas = (min_mom, 0.99) */
    check_one_cycle(&c, -1, 0.01, 0.85);
    check_one_cycle(&c, 0, 0.03250000000000002, 0.9249999999999999);  /* s = 0.25 */
    check_one_cycle(&c, 1, 0.055, 0.9);                                /* s = 0.5 */
    check_one_cycle(&c, 3, 0.09999999999999999, 0.85);                 /* peak */
    check_one_cycle(&c, 4, 0.085, 0.8666666666666667);                 /* s = 5/6 */
    check_one_cycle(&c, 6, 0.055000000000000014, 0.8999999999999999);  /* s = 1/2 */
    check_one_cycle(&c, 8, 0.025000000000000015, 0.9333333333333332);  /* s = 1/6 */
    check_one_cycle(&c, 9, 0.01, 0.95);                                /* b = T: s = 0 */
    check_one_cycle(&c, 10, 0.008, 0.9974999999999999);                /* d = 0.5 */
    check_one_cycle(&c, 11, 0.006666666666666667, 1.045);              /* d = 1 */
    check_one_cycle(&c, 13, 0.005, 1.14);                              /* d = 2 */
}

/* Halves as long as the config takes (each up to 2^63 - 1): the cycle's
 * length no longer fits in 64 bits, and the run stays on its first rise
 * (DeepSpeed's Python integers: x = b / 2^63, s = 2x), never in the decay. */
static void test_one_cycle_huge_halves(void **state)
{
    (void)state;
    zt_sched_config c = one_cycle_config();
    c.cycle_first_step_size = c.cycle_second_step_size = (int64_t)1 << 62;
    check_one_cycle(&c, 0, 0.01 + 0.09 * 0x1p-62, 0.95 - 0.1 * 0x1p-62);
    check_one_cycle(&c, 1000000, 0.01 + 0.09 * 1000001 * 0x1p-62,
                    0.95 - 0.1 * 1000001 * 0x1p-62);
    c.cycle_first_step_size = c.cycle_second_step_size = INT64_MAX;
    check_one_cycle(&c, 7, 0.01 + 0.09 * 8.0 / 0x1p63, 0.95 - 0.1 * 8.0 / 0x1p63);
}

/* decay_step_size 0 stops both decays; a zero rate stops only its own. */
static void test_one_cycle_no_decay(void **state)
{
    (void)state;
    zt_sched_config c = one_cycle_config();
    c.decay_step_size = 0;
    check_one_cycle(&c, 12, 0.01, 0.95);
    check_one_cycle(&c, 1000, 0.01, 0.95);
    c = one_cycle_config();
    c.decay_lr_rate = 0.0;
    check_one_cycle(&c, 12, 0.01, 1.0924999999999998); /* 0.95*(1 + 0.1*1.5) */
    c = one_cycle_config();
    c.decay_mom_rate = 0.0;
    check_one_cycle(&c, 13, 0.005, 0.95);
}

/* Stairs: 2 on the way up, 3 on the way down; c = b mod 10:
 *   rising  s = floor(c*2/4)/2, falling s = floor((10-c)*3/6)/3. */
static void test_one_cycle_stairs(void **state)
{
    (void)state;
    zt_sched_config c = one_cycle_config();
    c.cycle_first_stair_count = 2;
    c.cycle_second_stair_count = 3;
    check_one_cycle(&c, -1, 0.01, 0.85);
    check_one_cycle(&c, 0, 0.01, 0.95);                               /* floor(0.5)/2 = 0 */
    check_one_cycle(&c, 1, 0.05500000000000001, 0.8999999999999999); /* 1/2 */
    check_one_cycle(&c, 2, 0.05500000000000001, 0.8999999999999999); /* floor(1.5)/2 */
    check_one_cycle(&c, 3, 0.1, 0.85);                                /* 3/3 */
    check_one_cycle(&c, 4, 0.07, 0.8833333333333333);                 /* floor(2.5)/3 */
    check_one_cycle(&c, 5, 0.07, 0.8833333333333333);                 /* 2/3 */
    check_one_cycle(&c, 6, 0.04, 0.9166666666666666);                 /* floor(1.5)/3 */
    check_one_cycle(&c, 7, 0.04, 0.9166666666666666);                 /* 1/3 */
    check_one_cycle(&c, 8, 0.01, 0.95);                               /* floor(0.5)/3 */
    check_one_cycle(&c, 9, 0.01, 0.95);
    check_one_cycle(&c, 10, 0.008, 0.9974999999999999); /* decay ignores stairs */
}

/* Without cycle_momentum, or with SGD (no betas in torch.optim.SGD's
 * defaults, so DeepSpeed switches cycling off), no momentum is reported. */
static void test_one_cycle_momentum_off(void **state)
{
    (void)state;
    zt_sched_config c = one_cycle_config();
    c.cycle_momentum = false;
    zt_optim_config o = adamw_config(1.0);
    zt_sched s;
    zt_sched_init(&s, &c, &o);
    double b1 = 5.0, b2 = 6.0;
    assert_false(zt_sched_momentum(&s, &b1, &b2));
    assert_true(b1 == 5.0 && b2 == 6.0);
    assert_near_at(zt_sched_lr(&s), 0.01, "lr", -1);

    c = one_cycle_config();
    o = (zt_optim_config){.type = ZT_OPTIM_SGD, .lr = 0.1, .momentum = 0.9};
    zt_sched_init(&s, &c, &o);
    assert_false(zt_sched_momentum(&s, &b1, &b2));
    zt_sched_step(&s);
    assert_near_at(zt_sched_lr(&s), 0.03250000000000002, "lr", 0);
}

/* LRRangeTest, min 1e-3, step size 4, rate 2: lr = 1e-3 (1 + 2 (it+1)/4),
 * the interval floored with staircase. */
static void test_lr_range_test(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_LR_RANGE_TEST, .lr_range_test_min_lr = 1e-3,
                         .lr_range_test_step_size = 4, .lr_range_test_step_rate = 2.0};
    check_lr(&c, 1.0, -1, 0.001);
    check_lr(&c, 1.0, 0, 0.0015);
    check_lr(&c, 1.0, 3, 0.003);
    check_lr(&c, 1.0, 5, 0.004);
    c.lr_range_test_staircase = true;
    check_lr(&c, 1.0, -1, 0.001);
    check_lr(&c, 1.0, 0, 0.001);
    check_lr(&c, 1.0, 2, 0.001);
    check_lr(&c, 1.0, 3, 0.003);
    check_lr(&c, 1.0, 6, 0.003);
    check_lr(&c, 1.0, 7, 0.005);
}

/* Steps skipped for fp16 overflow do not advance the schedule: the k-th
 * applied step runs with f(k-2) however many skips came before it. WarmupLR
 * linear 0 -> 0.01 over 10: f(k-2) = 0.001 (k-2) for k >= 2, f(-1) = 0. */
static void test_skipped_steps(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_LR, .warmup_min_lr = 0.0,
                         .warmup_max_lr = 0.01, .warmup_num_steps = 10,
                         .warmup_type = ZT_WARMUP_LINEAR};
    zt_optim_config o = adamw_config(0.01);
    zt_sched s;
    zt_sched_init(&s, &c, &o);
    /* 1 = applied, 0 = skipped (overflow) */
    static const int pattern[] = {0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1};
    int64_t applied = 0;
    for (size_t i = 0; i < sizeof pattern / sizeof pattern[0]; i++) {
        double lr = zt_sched_lr(&s);
        if (!pattern[i])
            continue; /* trainer: no optimizer step, no zt_sched_step */
        applied++;
        int64_t k = applied;
        assert_near_at(lr, zt_sched_lr_at(&c, 0.01, k - 2), "lr", k);
        assert_near_at(lr, k == 1 ? 0.0 : 0.001 * (double)(k - 2), "lr literal", k);
        zt_sched_step(&s);
    }
    assert_int_equal(applied, 10);
    assert_int_equal(s.last_batch_iteration, 9);
}

/* A checkpoint's state round trip: a schedule resumed from another's state
 * continues with the same rates, and keeps its own base learning rate. */
static void test_state_get_set(void **state)
{
    (void)state;
    zt_sched_config c = {.type = ZT_SCHED_WARMUP_LR, .warmup_min_lr = 0.0,
                         .warmup_max_lr = 0.01, .warmup_num_steps = 10,
                         .warmup_type = ZT_WARMUP_LINEAR};
    zt_optim_config o = adamw_config(0.01);
    zt_sched a, b;
    zt_sched_init(&a, &c, &o);
    for (int k = 0; k < 4; k++)
        zt_sched_step(&a);
    zt_sched_state st;
    zt_sched_state_get(&a, &st);
    assert_int_equal(st.last_batch_iteration, 3);
    assert_true(st.base_lr == 0.01);

    zt_optim_config o2 = adamw_config(0.02);
    zt_sched_init(&b, &c, &o2);
    zt_sched_state_set(&b, &st);
    assert_int_equal(b.last_batch_iteration, 3);
    assert_true(b.base_lr == 0.02);
    for (int k = 0; k < 12; k++) {
        assert_near_at(zt_sched_lr(&b), zt_sched_lr(&a), "resumed lr", k);
        zt_sched_step(&a);
        zt_sched_step(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_warmup_lr_log),
        cmocka_unit_test(test_warmup_lr_linear),
        cmocka_unit_test(test_warmup_lr_defaults),
        cmocka_unit_test(test_warmup_decay_lr),
        cmocka_unit_test(test_warmup_cosine_lr),
        cmocka_unit_test(test_one_cycle),
        cmocka_unit_test(test_one_cycle_huge_halves),
        cmocka_unit_test(test_one_cycle_no_decay),
        cmocka_unit_test(test_one_cycle_stairs),
        cmocka_unit_test(test_one_cycle_momentum_off),
        cmocka_unit_test(test_lr_range_test),
        cmocka_unit_test(test_skipped_steps),
        cmocka_unit_test(test_state_get_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
