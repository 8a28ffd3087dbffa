/* The distributed sampler: the global batch is the same set of samples at any
 * world size and accumulation split, ranks never overlap, epochs are
 * permutations when shuffling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data/sampler.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* All indices of one optimizer step across every rank and micro-step, sorted. */
static void global_batch(int64_t n, int64_t tb, int ws, int64_t gas, bool shuffle, int64_t step,
                         int64_t *out)
{
    int64_t mb = tb / ws / gas, k = 0;
    for (int r = 0; r < ws; r++) {
        zt_sampler s;
        assert_int_equal(zt_sampler_init(&s, n, tb, mb, ws, r, shuffle, 99), ZT_OK);
        for (int64_t m = 0; m < gas; m++)
            for (int64_t i = 0; i < mb; i++)
                out[k++] = zt_sampler_index(&s, step, m, i);
    }
    assert_int_equal(k, tb);
    qsort(out, (size_t)tb, sizeof *out, cmp_i64);
}

static void test_global_batch_independent_of_split(void **state)
{
    (void)state;
    enum { TB = 48 };
    int64_t ref[TB], got[TB];
    for (int shuffle = 0; shuffle < 2; shuffle++)
        for (int64_t step = 0; step < 5; step++) {
            global_batch(1000, TB, 1, 1, shuffle, step, ref);
            for (int i = 1; i < TB; i++)
                assert_true(ref[i] != ref[i - 1]); /* no sample twice */
            int ws_list[] = {2, 3, 4};
            int gas_list[] = {1, 2, 4};
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) {
                    global_batch(1000, TB, ws_list[a], gas_list[b], shuffle, step, got);
                    assert_memory_equal(ref, got, sizeof ref);
                }
        }
}

static void test_sequential_positions(void **state)
{
    (void)state;
    zt_sampler s;
    /* 100 samples, batch 30: 3 steps per epoch, the last 10 samples dropped. */
    assert_int_equal(zt_sampler_init(&s, 100, 30, 5, 3, 1, false, 1), ZT_OK);
    assert_int_equal(s.steps_per_epoch, 3);
    /* step 1, micro 1, rank 1: base 30 + 1*5*3 + 1*5 = 50 */
    assert_int_equal(zt_sampler_index(&s, 1, 1, 0), 50);
    assert_int_equal(zt_sampler_index(&s, 1, 1, 4), 54);
    /* step 3 wraps to the next epoch */
    assert_int_equal(zt_sampler_index(&s, 3, 0, 0), 5);
}

static void test_permutation_is_bijection(void **state)
{
    (void)state;
    int64_t sizes[] = {1, 2, 3, 7, 64, 65, 1000, 4097};
    for (size_t t = 0; t < sizeof sizes / sizeof *sizes; t++) {
        int64_t n = sizes[t];
        char *seen = calloc((size_t)n, 1);
        int64_t fixed = 0;
        for (int64_t p = 0; p < n; p++) {
            int64_t q = zt_sampler_permute(n, 5, 0, p);
            assert_true(q >= 0 && q < n);
            assert_false(seen[q]);
            seen[q] = 1;
            fixed += q == p;
        }
        if (n >= 1000)
            assert_true(fixed < n / 10); /* it really shuffles */
        free(seen);
    }
    /* Different epochs give different orders. */
    int64_t same = 0;
    for (int64_t p = 0; p < 1000; p++)
        same += zt_sampler_permute(1000, 5, 0, p) == zt_sampler_permute(1000, 5, 1, p);
    assert_true(same < 100);
}

static void test_batch_larger_than_data(void **state)
{
    (void)state;
    zt_sampler s;
    assert_int_equal(zt_sampler_init(&s, 10, 16, 16, 1, 0, false, 1), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "fewer than one global batch"));
}

/* The state a checkpoint records: 100 samples in batches of 12 make 8 steps
 * an epoch; step 19 is the 4th of epoch 2, starting at position 36, which the
 * unshuffled sampler reads first. */
static void test_state_get(void **state)
{
    (void)state;
    zt_sampler s;
    assert_int_equal(zt_sampler_init(&s, 100, 12, 3, 2, 0, false, 7), ZT_OK);
    zt_sampler_state st;
    zt_sampler_state_get(&s, 19, &st);
    assert_int_equal(st.n_samples, 100);
    assert_int_equal(st.steps_per_epoch, 8);
    assert_int_equal(st.epoch, 2);
    assert_int_equal(st.position, 36);
    assert_false(st.shuffle);
    assert_int_equal(zt_sampler_index(&s, 19, 0, 0), st.position);
    zt_sampler_state_get(&s, 0, &st);
    assert_int_equal(st.epoch, 0);
    assert_int_equal(st.position, 0);
    assert_int_equal(zt_sampler_init(&s, 100, 12, 3, 2, 1, true, 7), ZT_OK);
    zt_sampler_state_get(&s, 16, &st);
    assert_true(st.shuffle);
    assert_int_equal(st.epoch, 2);
    assert_int_equal(st.position, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_global_batch_independent_of_split),
        cmocka_unit_test(test_sequential_positions),
        cmocka_unit_test(test_permutation_is_bijection),
        cmocka_unit_test(test_batch_larger_than_data),
        cmocka_unit_test(test_state_get),
    };
    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
