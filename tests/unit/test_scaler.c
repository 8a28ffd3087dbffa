/*
 * test_scaler: the loss scaler against sequences worked out by hand from
 * DeepSpeed's DynamicLossScaler.update_scale (shared/reference/
 * deepspeed-semantics.md §3), DeepSpeed's overflow log lines character for
 * character, and a second, separately structured transcription of the
 * reference's rules run side by side with zt_scaler on random overflow
 * patterns and configs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "engine/train/scaler.h"
#include "tests/unit/test_rng.h"

static zt_fp16_config dynamic_config(int power, int64_t window, int hysteresis, bool consecutive,
                                     double min_scale)
{
    return (zt_fp16_config){.enabled = true, .loss_scale = 0, .initial_scale_power = power,
                            .loss_scale_window = window, .hysteresis = hysteresis,
                            .consecutive_hysteresis = consecutive, .min_loss_scale = min_scale};
}

/* DeepSpeed's fp16 defaults. */
static zt_fp16_config default_config(void) { return dynamic_config(16, 1000, 2, false, 1.0); }

/* The state after one update, and what the update reported. */
typedef struct {
    bool overflow;
    double scale;
    int hysteresis;
    bool hysteresis_used, at_min;
} step_row;

/* Feeds rows[i].overflow at iteration i and checks the state and event after. */
static void check_rows(zt_scaler *s, const step_row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        double prev_scale = s->scale;
        int prev_h = s->cur_hysteresis;
        zt_scaler_event ev = zt_scaler_update(s, rows[i].overflow);
        if (ev.overflow != rows[i].overflow || s->scale != rows[i].scale ||
            s->cur_hysteresis != rows[i].hysteresis ||
            ev.hysteresis_used != rows[i].hysteresis_used || ev.at_min != rows[i].at_min)
            fail_msg("iter %d: got overflow %d scale %g h %d hyst_used %d at_min %d; "
                     "want %d %g %d %d %d", i, ev.overflow, s->scale, s->cur_hysteresis,
                     ev.hysteresis_used, ev.at_min, rows[i].overflow, rows[i].scale,
                     rows[i].hysteresis, rows[i].hysteresis_used, rows[i].at_min);
        assert_true(ev.prev_scale == prev_scale && ev.new_scale == s->scale);
        assert_int_equal(ev.prev_hysteresis, prev_h);
        assert_int_equal(ev.new_hysteresis, s->cur_hysteresis);
        assert_int_equal(s->iter, i + 1);
        if (rows[i].overflow)
            assert_int_equal(s->last_overflow_iter, i);
    }
}

static void test_init(void **state)
{
    (void)state;
    zt_fp16_config c = default_config();
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    assert_true(s.dynamic && s.use_hysteresis);
    assert_true(s.scale == 65536.0 && s.min_scale == 1.0);
    assert_int_equal(s.window, 1000);
    assert_int_equal(s.hysteresis, 2);
    assert_int_equal(s.cur_hysteresis, 2);
    assert_false(s.consecutive_hysteresis);
    assert_int_equal(s.iter, 0);
    assert_int_equal(s.last_overflow_iter, -1);

    zt_scaler_init(&s, &c, false);
    assert_true(s.dynamic);
    assert_false(s.use_hysteresis);

    c.loss_scale = 128;
    zt_scaler_init(&s, &c, true);
    assert_false(s.dynamic);
    assert_true(s.scale == 128.0);

    c = default_config();
    c.enabled = false;
    zt_scaler_init(&s, &c, true);
    assert_false(s.dynamic);
    assert_true(s.scale == 1.0);
}

/* Defaults, overflows at iterations 0, 1, 2, then 2500 clean ones:
 *   it 0: remaining hysteresis 2 > 1 -> 1, scale stays 65536.
 *   it 1: remaining 1 -> halve to 32768 (nothing restores hysteresis on an overflow).
 *   it 2: remaining 1 -> halve to 16384; last overflow = 2.
 *   it >= 3: stable = it - 2 - 1, so it 3 has stable 0 (no doubling) and the
 *   first multiple of 1000 is it 1003: 32768, remaining restored to 2
 *   (consecutive_hysteresis is off, so only a doubling restores it); it 2003:
 *   65536; the next would be it 3003, past the end (it 2502). */
static void test_default_three_overflows(void **state)
{
    (void)state;
    zt_fp16_config c = default_config();
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    static const step_row head[] = {
        {true, 65536, 1, true, false},
        {true, 32768, 1, false, false},
        {true, 16384, 1, false, false},
    };
    check_rows(&s, head, 3);
    for (int64_t it = 3; it < 3 + 2500; it++) {
        double want_scale = it < 1003 ? 16384 : it < 2003 ? 32768 : 65536;
        int want_h = it < 1003 ? 1 : 2;
        zt_scaler_event ev = zt_scaler_update(&s, false);
        if (ev.overflow || ev.at_min || ev.hysteresis_used || s.scale != want_scale ||
            s.cur_hysteresis != want_h)
            fail_msg("iter %lld: scale %g h %d, want %g %d", (long long)it, s.scale,
                     s.cur_hysteresis, want_scale, want_h);
    }
    assert_int_equal(s.iter, 2503);
    assert_int_equal(s.last_overflow_iter, 2);
}

/* Window 3, hysteresis 2, 16 = 2^4, min 1; pattern O . O . . . . O O . . . .
 * consecutive_hysteresis off: the clean iteration 1 does not restore the
 * remaining hysteresis, so the overflow at 2 halves. Doubling when
 * stable = it - last - 1 is 3: it 6 (last 2) and it 12 (last 8); each
 * doubling restores hysteresis to 2. */
static void test_window3_not_consecutive(void **state)
{
    (void)state;
    zt_fp16_config c = dynamic_config(4, 3, 2, false, 1.0);
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    static const step_row rows[] = {
        {true, 16, 1, true, false},   /* 0: 2 -> 1 */
        {false, 16, 1, false, false}, /* 1: stable 0 */
        {true, 8, 1, false, false},   /* 2: remaining 1: halve */
        {false, 8, 1, false, false},  /* 3: stable 0 */
        {false, 8, 1, false, false},  /* 4: stable 1 */
        {false, 8, 1, false, false},  /* 5: stable 2 */
        {false, 16, 2, false, false}, /* 6: stable 3: double, restore */
        {true, 16, 1, true, false},   /* 7: 2 -> 1 */
        {true, 8, 1, false, false},   /* 8: halve */
        {false, 8, 1, false, false},  /* 9: stable 0 */
        {false, 8, 1, false, false},  /* 10: stable 1 */
        {false, 8, 1, false, false},  /* 11: stable 2 */
        {false, 16, 2, false, false}, /* 12: stable 3: double, restore */
    };
    check_rows(&s, rows, (int)(sizeof rows / sizeof rows[0]));
}

/* The same pattern with consecutive_hysteresis: every clean iteration restores
 * the remaining hysteresis to 2, so the overflow at 2 is absorbed too and the
 * scale ends twice as high; doublings fall on the same iterations. */
static void test_window3_consecutive(void **state)
{
    (void)state;
    zt_fp16_config c = dynamic_config(4, 3, 2, true, 1.0);
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    static const step_row rows[] = {
        {true, 16, 1, true, false},   /* 0: 2 -> 1 */
        {false, 16, 2, false, false}, /* 1: restore; stable 0 */
        {true, 16, 1, true, false},   /* 2: 2 -> 1 again */
        {false, 16, 2, false, false}, /* 3: restore; stable 0 */
        {false, 16, 2, false, false}, /* 4: stable 1 */
        {false, 16, 2, false, false}, /* 5: stable 2 */
        {false, 32, 2, false, false}, /* 6: stable 3: double */
        {true, 32, 1, true, false},   /* 7: 2 -> 1 */
        {true, 16, 1, false, false},  /* 8: consecutive overflow: halve */
        {false, 16, 2, false, false}, /* 9: restore; stable 0 */
        {false, 16, 2, false, false}, /* 10: stable 1 */
        {false, 16, 2, false, false}, /* 11: stable 2 */
        {false, 32, 2, false, false}, /* 12: stable 3: double */
    };
    check_rows(&s, rows, (int)(sizeof rows / sizeof rows[0]));
}

/* Hysteresis 1: every overflow halves. 8 = 2^3, window 2, min 1. Doubling at
 * stable 2, 4, ...: after the overflow at 4, it 7 (stable 2) and it 9 (stable 4). */
static void test_hysteresis_one(void **state)
{
    (void)state;
    zt_fp16_config c = dynamic_config(3, 2, 1, false, 1.0);
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    static const step_row rows[] = {
        {true, 4, 1, false, false},  /* 0 */
        {true, 2, 1, false, false},  /* 1 */
        {false, 2, 1, false, false}, /* 2: stable 0 */
        {false, 2, 1, false, false}, /* 3: stable 1 */
        {true, 1, 1, false, false},  /* 4: halve to the minimum */
        {false, 1, 1, false, false}, /* 5: stable 0 */
        {false, 1, 1, false, false}, /* 6: stable 1 */
        {false, 2, 1, false, false}, /* 7: stable 2 */
        {false, 2, 1, false, false}, /* 8: stable 3 */
        {false, 4, 1, false, false}, /* 9: stable 4 */
    };
    check_rows(&s, rows, (int)(sizeof rows / sizeof rows[0]));
}

/* Stage 0 (FP16_Optimizer) has no hysteresis: with hysteresis 2 configured,
 * the first overflow already halves and the remaining count is never touched.
 * 16 = 2^4, window 2; doubling at it 4 (stable 2 after the overflow at 1). */
static void test_stage0_ignores_hysteresis(void **state)
{
    (void)state;
    zt_fp16_config c = dynamic_config(4, 2, 2, false, 1.0);
    zt_scaler s;
    zt_scaler_init(&s, &c, false);
    static const step_row rows[] = {
        {true, 8, 2, false, false},  /* 0: halve, not 2 -> 1 */
        {true, 4, 2, false, false},  /* 1 */
        {false, 4, 2, false, false}, /* 2: stable 0 */
        {false, 4, 2, false, false}, /* 3: stable 1 */
        {false, 8, 2, false, false}, /* 4: stable 2 */
    };
    check_rows(&s, rows, (int)(sizeof rows / sizeof rows[0]));

    /* The same two overflows at ZeRO 1-3: the first is absorbed. */
    zt_scaler_init(&s, &c, true);
    static const step_row zero_rows[] = {
        {true, 16, 1, true, false},
        {true, 8, 1, false, false},
    };
    check_rows(&s, zero_rows, 2);
}

/* Reaching the minimum: 4 = 2^2, min 1, hysteresis 2. The scale halves down
 * to 1; the next overflow on the halving path finds scale == min and sets
 * at_min with the scale unchanged (DeepSpeed raises there). */
static void test_min_scale(void **state)
{
    (void)state;
    zt_fp16_config c = dynamic_config(2, 1000, 2, false, 1.0);
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    static const step_row rows[] = {
        {true, 4, 1, true, false},  /* 0: hysteresis 2 -> 1 */
        {true, 2, 1, false, false}, /* 1 */
        {true, 1, 1, false, false}, /* 2: reaches the minimum */
        {true, 1, 1, false, true},  /* 3: already at the minimum */
    };
    check_rows(&s, rows, (int)(sizeof rows / sizeof rows[0]));

    /* A fractional minimum clamps: 2 -> 1 -> max(0.5, 0.75) = 0.75 -> at_min. */
    c = dynamic_config(1, 1000, 1, false, 0.75);
    zt_scaler_init(&s, &c, true);
    static const step_row frac_rows[] = {
        {true, 1, 1, false, false},
        {true, 0.75, 1, false, false},
        {true, 0.75, 1, false, true},
    };
    check_rows(&s, frac_rows, 3);

    /* Stage 0 stops at the minimum as well (DeepSpeed would skip forever). */
    c = dynamic_config(1, 1000, 2, false, 1.0);
    zt_scaler_init(&s, &c, false);
    static const step_row stage0_rows[] = {
        {true, 1, 2, false, false},
        {true, 1, 2, false, true},
    };
    check_rows(&s, stage0_rows, 2);

    /* DeepSpeed's max(scale/2, min) with a start below the minimum: 4 with
     * min 16 is not equal to the minimum, so the first halving lifts it to 16. */
    c = dynamic_config(2, 1000, 1, false, 16.0);
    zt_scaler_init(&s, &c, true);
    static const step_row below_rows[] = {
        {true, 16, 1, false, false},
        {true, 16, 1, false, true},
    };
    check_rows(&s, below_rows, 2);
}

/* A static scale never changes; overflows are still reported so the step is
 * skipped, and the iteration counter still advances. */
static void test_static_scale(void **state)
{
    (void)state;
    zt_fp16_config c = default_config();
    c.loss_scale = 128;
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    for (int it = 0; it < 3000; it++) {
        bool overflow = it % 7 == 0 || (it >= 10 && it < 14);
        zt_scaler_event ev = zt_scaler_update(&s, overflow);
        assert_int_equal(ev.overflow, overflow);
        assert_false(ev.at_min || ev.hysteresis_used);
        assert_true(ev.prev_scale == 128.0 && ev.new_scale == 128.0 && s.scale == 128.0);
        assert_int_equal(s.iter, it + 1);
    }
}

/* fp16 off (bf16 or fp32): scale 1 whatever happens, overflows still reported. */
static void test_disabled(void **state)
{
    (void)state;
    zt_fp16_config c = default_config();
    c.enabled = false;
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    for (int it = 0; it < 2100; it++) {
        bool overflow = it < 5 || it % 3 == 0;
        zt_scaler_event ev = zt_scaler_update(&s, overflow);
        assert_int_equal(ev.overflow, overflow);
        assert_false(ev.at_min || ev.hysteresis_used);
        assert_true(s.scale == 1.0 && ev.new_scale == 1.0);
    }
}

static void check_line(const zt_scaler_event *ev, bool fp16, const char *want)
{
    char buf[256];
    int n = zt_scaler_overflow_line(ev, fp16, buf, sizeof buf);
    assert_string_equal(buf, want);
    assert_int_equal(n, (int)strlen(want));
}

static void test_overflow_lines(void **state)
{
    (void)state;
    zt_fp16_config c = default_config();
    zt_scaler s;
    zt_scaler_init(&s, &c, true);
    zt_scaler_event ev = zt_scaler_update(&s, true);
    check_line(&ev, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but "
               "hysteresis is 2. Reducing hysteresis to 1");
    ev = zt_scaler_update(&s, true);
    check_line(&ev, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing "
               "to 32768");
    check_line(&ev, false, "[deepspeed] OVERFLOW! Rank 0 Skipping step.");

    /* Hysteresis 3: the second absorbed overflow reports 2 -> 1. */
    c = dynamic_config(16, 1000, 3, false, 1.0);
    zt_scaler_init(&s, &c, true);
    zt_scaler_update(&s, true);
    ev = zt_scaler_update(&s, true);
    check_line(&ev, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but "
               "hysteresis is 2. Reducing hysteresis to 1");

    /* Static: the halving form with the same number twice. */
    c = default_config();
    c.loss_scale = 128;
    zt_scaler_init(&s, &c, true);
    ev = zt_scaler_update(&s, true);
    check_line(&ev, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 128, reducing "
               "to 128");

    /* int() truncates: int(0.5) == 0, int(0.75) == 0, int(3.99) == 3. */
    zt_scaler_event e = {.overflow = true, .prev_scale = 0.5, .new_scale = 0.25};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 0, reducing to 0");
    e = (zt_scaler_event){.overflow = true, .prev_scale = 1.0, .new_scale = 0.75};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 0");
    e = (zt_scaler_event){.overflow = true, .prev_scale = 7.98, .new_scale = 3.99};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 7, reducing to 3");
    e = (zt_scaler_event){.overflow = true, .hysteresis_used = true, .prev_scale = 0.5,
                          .new_scale = 0.5, .prev_hysteresis = 3, .new_hysteresis = 2};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 0, but "
               "hysteresis is 3. Reducing hysteresis to 2");

    /* Beyond int64: int(2.0**64) == 18446744073709551616, int(2.0**63) == 9223372036854775808. */
    e = (zt_scaler_event){.overflow = true, .prev_scale = 0x1p64, .new_scale = 0x1p63};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
               "18446744073709551616, reducing to 9223372036854775808");
    e = (zt_scaler_event){.overflow = true, .hysteresis_used = true, .prev_scale = 0x1p64,
                          .new_scale = 0x1p64, .prev_hysteresis = 2, .new_hysteresis = 1};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
               "18446744073709551616, but hysteresis is 2. Reducing hysteresis to 1");
    /* int(2.0**32) from initial_scale_power 32. */
    e = (zt_scaler_event){.overflow = true, .prev_scale = 0x1p32, .new_scale = 0x1p31};
    check_line(&e, true,
               "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4294967296, "
               "reducing to 2147483648");

    /* A short buffer truncates but reports the full length, as snprintf does. */
    char small[16];
    int n = zt_scaler_overflow_line(&e, false, small, sizeof small);
    assert_int_equal(n, (int)strlen("[deepspeed] OVERFLOW! Rank 0 Skipping step."));
    assert_string_equal(small, "[deepspeed] OVE");
}

/*
 * Second implementation, transcribed from the reference's bullets with its own
 * bookkeeping: instead of iteration numbers it counts the clean boundaries
 * since the last overflow ("count the iterations since the last overflow,
 * excluding the current one"), and it decides the overflow branch with the
 * reference's wording ("configured hysteresis is 1, or the remaining
 * hysteresis has run down to 1"; stage 0 has none).
 */
typedef struct {
    double scale, min;
    int64_t window, clean_run;
    int configured, remaining;
    bool consecutive, stage_has_hysteresis;
} ref_scaler;

/* Returns whether this overflow found the scale at its minimum. */
static bool ref_update(ref_scaler *r, bool overflow)
{
    if (overflow) {
        bool halve = !r->stage_has_hysteresis || r->configured == 1 || r->remaining == 1;
        bool at_min = false;
        if (!halve)
            r->remaining -= 1;
        else if (r->scale == r->min)
            at_min = true;
        else
            r->scale = r->scale / 2 > r->min ? r->scale / 2 : r->min;
        r->clean_run = 0;
        return at_min;
    }
    if (r->consecutive)
        r->remaining = r->configured;
    if (r->clean_run > 0 && r->clean_run % r->window == 0) {
        r->scale *= 2;
        if (!r->consecutive)
            r->remaining = r->configured;
    }
    r->clean_run += 1;
    return false;
}

static int rand_int(int lo, int hi) { return lo + (int)rng_uniform(0, hi - lo + 1); }

static void test_cross_check_random(void **state)
{
    (void)state;
    rng_seed(20240917);
    /* Each case must be reachable for the comparison to mean anything. */
    int64_t n_halve = 0, n_hyst = 0, n_double = 0, n_at_min = 0, n_restore = 0;
    for (int pattern = 0; pattern < 4000; pattern++) {
        int power = rand_int(2, 6);
        int64_t window = rand_int(1, 5);
        int hysteresis = rand_int(1, 3);
        bool consecutive = rand_int(0, 1);
        bool use_h = rand_int(0, 1);
        double min_scale = rand_int(1, 16);
        zt_fp16_config c = dynamic_config(power, window, hysteresis, consecutive, min_scale);
        zt_scaler s;
        zt_scaler_init(&s, &c, use_h);
        ref_scaler r = {.scale = 1 << power, .min = min_scale, .window = window,
                        .configured = hysteresis, .remaining = hysteresis,
                        .consecutive = consecutive, .stage_has_hysteresis = use_h};
        /* Some patterns mostly clean (the scale climbs), some overflow-heavy. */
        double p_overflow = rng_uniform(0.02, 0.6);
        int length = rand_int(1, 80);
        for (int it = 0; it < length; it++) {
            bool overflow = rng_uniform(0, 1) < p_overflow;
            bool ref_at_min = ref_update(&r, overflow);
            zt_scaler_event ev = zt_scaler_update(&s, overflow);
            if (s.scale != r.scale || s.cur_hysteresis != r.remaining || ev.at_min != ref_at_min ||
                ev.overflow != overflow)
                fail_msg("pattern %d (power %d window %lld hysteresis %d consecutive %d "
                         "use_hysteresis %d min %g) iter %d overflow %d: zt scale %g h %d at_min "
                         "%d; reference %g %d %d", pattern, power, (long long)window, hysteresis,
                         consecutive, use_h, min_scale, it, overflow, s.scale, s.cur_hysteresis,
                         ev.at_min, r.scale, r.remaining, ref_at_min);
            n_halve += overflow && ev.new_scale < ev.prev_scale;
            n_hyst += ev.hysteresis_used;
            n_double += !overflow && ev.new_scale > ev.prev_scale;
            n_at_min += ev.at_min;
            n_restore += !overflow && ev.new_hysteresis > ev.prev_hysteresis;
        }
    }
    print_message("cross-check: %lld halvings, %lld absorbed by hysteresis, %lld doublings, "
                  "%lld at_min, %lld hysteresis restores\n", (long long)n_halve,
                  (long long)n_hyst, (long long)n_double, (long long)n_at_min,
                  (long long)n_restore);
    assert_true(n_halve > 1000 && n_hyst > 1000 && n_double > 1000 && n_at_min > 1000 &&
                n_restore > 1000);
}

/* A checkpoint's state round trip: a dynamic scaler that takes over another's
 * state continues exactly as the original does; the remaining hysteresis is
 * clamped to the new run's, and static or absent scalers take nothing. */
static void test_state_get_set(void **state)
{
    (void)state;
    zt_fp16_config c = dynamic_config(10, 3, 3, false, 1.0);
    zt_scaler a;
    zt_scaler_init(&a, &c, true);
    const bool pattern[] = {false, true, false, false, false, false, true, true, false};
    for (size_t i = 0; i < sizeof pattern / sizeof *pattern; i++)
        zt_scaler_update(&a, pattern[i]);
    zt_scaler_state st;
    zt_scaler_state_get(&a, &st);
    assert_true(st.dynamic && st.cur_scale == a.scale && st.min_loss_scale == 1.0);
    assert_int_equal(st.cur_iter, 9);
    assert_int_equal(st.last_overflow_iter, 7);
    assert_int_equal(st.cur_hysteresis, a.cur_hysteresis);
    assert_int_equal(st.hysteresis, 3);
    assert_int_equal(st.loss_scale_window, 3);
    assert_false(st.consecutive_hysteresis);

    zt_scaler b;
    zt_scaler_init(&b, &c, true);
    zt_scaler_state_set(&b, &st);
    for (int it = 0; it < 40; it++) {
        bool overflow = it % 5 == 1;
        zt_scaler_event ea = zt_scaler_update(&a, overflow), eb = zt_scaler_update(&b, overflow);
        assert_true(ea.new_scale == eb.new_scale && a.scale == b.scale);
        assert_int_equal(a.cur_hysteresis, b.cur_hysteresis);
        assert_int_equal(a.iter, b.iter);
        assert_int_equal(a.last_overflow_iter, b.last_overflow_iter);
    }

    /* Saved with hysteresis 3 and 3 left, resumed with hysteresis 2: 2 left. */
    zt_scaler_init(&a, &c, true);
    zt_scaler_state_get(&a, &st);
    assert_int_equal(st.cur_hysteresis, 3);
    zt_fp16_config c2 = dynamic_config(12, 3, 2, false, 1.0);
    zt_scaler_init(&b, &c2, true);
    zt_scaler_state_set(&b, &st);
    assert_int_equal(b.cur_hysteresis, 2);
    assert_int_equal(b.hysteresis, 2);
    assert_true(b.scale == 1024.0);
    st.cur_hysteresis = 1;
    zt_scaler_state_set(&b, &st);
    assert_int_equal(b.cur_hysteresis, 1);

    /* A static scaler keeps its scale; a static state changes nothing. */
    zt_fp16_config fixed = default_config();
    fixed.loss_scale = 128;
    zt_scaler_init(&b, &fixed, true);
    zt_scaler_state_set(&b, &st);
    assert_true(b.scale == 128.0);
    assert_int_equal(b.iter, 0);
    zt_scaler_init(&a, &fixed, true);
    zt_scaler_state_get(&a, &st);
    assert_false(st.dynamic);
    zt_scaler_init(&b, &c, true);
    zt_scaler_state_set(&b, &st);
    assert_true(b.scale == 1024.0);
    assert_int_equal(b.cur_hysteresis, 3);
    assert_int_equal(b.last_overflow_iter, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_default_three_overflows),
        cmocka_unit_test(test_window3_not_consecutive),
        cmocka_unit_test(test_window3_consecutive),
        cmocka_unit_test(test_hysteresis_one),
        cmocka_unit_test(test_stage0_ignores_hysteresis),
        cmocka_unit_test(test_min_scale),
        cmocka_unit_test(test_static_scale),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_overflow_lines),
        cmocka_unit_test(test_cross_check_random),
        cmocka_unit_test(test_state_get_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
