/* Every error of a config in one report (engine/config/json.c's collector):
 * each key's error with its line, sorted by line, alone as it always was;
 * duplicate keys among them; refusals of whole sections beside parse errors;
 * checks between values only on values that read cleanly; the same report
 * for 50,000 unknown keys; "did you mean" against its definition. */
#include "tests/unit/config_test_helpers.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/spell.h"

/* How many lines of the combined message start with "  t.json:" (one per
 * error that has a line). */
static int error_lines(void)
{
    int n = 0;
    for (const char *p = zt_status_message(); (p = strstr(p, "\n  t.json:")); p++)
        n++;
    return n;
}

static void test_one_error_as_before(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 7}}", ZT_ERR_CONFIG,
                 "zero_optimization.stage: got 7, expected an integer in 0..3");
    assert_null(strstr(zt_status_message(), "errors:"));
}

static void test_every_error_in_one_report(void **state)
{
    (void)state;
    const char *json = "{\n"                                               /* 1 */
                       "  \"train_batch_size\": 8,\n"                      /* 2 */
                       "  \"steps_per_print\": \"ten\",\n"                 /* 3 */
                       "  \"zero_optimization\": {\n"                      /* 4 */
                       "    \"reduce_bucket_sise\": 5,\n"                  /* 5 */
                       "    \"stage\": 9\n"                                /* 6 */
                       "  },\n"                                            /* 7 */
                       "  \"fp16\": {\"enabled\": \"yes\"},\n"             /* 8 */
                       "  \"optimizer\": {\"type\": \"Adamm\"},\n"         /* 9 */
                       "  \"tensorboard\": {\"job_nam\": \"x\"},\n"        /* 10 */
                       "  \"gradient_clipping\": -1\n"                     /* 11 */
                       "}\n";
    assert_fails(json, ZT_ERR_CONFIG, "t.json: 7 errors:");
    assert_int_equal(error_lines(), 7);
    /* in line order, whatever order the sections were read in */
    const char *want[] = {
        "t.json:3: steps_per_print: got \"ten\"",
        "t.json:5: zero_optimization.reduce_bucket_sise: unknown key; did you mean "
        "`reduce_bucket_size`?",
        "t.json:6: zero_optimization.stage: got 9",
        "t.json:8: fp16.enabled: got \"yes\", expected true or false",
        "t.json:9: optimizer.type: Adamm is not a supported DeepSpeed Optimizer; did you mean "
        "`Adam`?",
        "t.json:10: tensorboard.job_nam: unknown key; did you mean `job_name`?",
        "t.json:11: gradient_clipping: got -1, expected a non-negative number",
    };
    const char *at = zt_status_message();
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *p = strstr(at, want[i]);
        if (!p) {
            print_error("missing or out of order: %s\nin: %s\n", want[i], zt_status_message());
            fail();
        }
        at = p + 1;
    }
    /* each error's hint under it */
    assert_msg("hint: unknown keys are refused so that a typo cannot leave a default in force");
    assert_contains(zt_status_hint(), "lists all errors");
}

static void test_duplicates_among_others(void **state)
{
    (void)state;
    const char *json = "{\n"
                       "  \"train_batch_size\": 8,\n"
                       "  \"zero_optimization\": {\"stage\": 1},\n"
                       "  \"zero_optimization\": {\"stage\": 2},\n"
                       "  \"fp16\": {\"enabled\": 1}\n"
                       "}\n";
    assert_fails(json, ZT_ERR_CONFIG, "t.json: 2 errors:");
    /* the repeated section is one error, not one per key inside it */
    assert_msg("t.json:4: Duplicate keys in DeepSpeed config: ['zero_optimization'] "
               "(zero_optimization is given twice, first at line 3)");
    assert_null(strstr(zt_status_message(), "['stage']"));
    assert_msg("t.json:5: fp16.enabled: got 1");
    /* keys inside arrays may repeat across elements */
    assert_int_equal(parse("{" MB1 ", \"comms_logger\": {\"enabled\": false, \"prof_ops\": "
                           "[\"all_reduce\", \"all_reduce\"]}}"),
                     ZT_OK);
}

static void test_refusals_beside_errors(void **state)
{
    (void)state;
    zt_status_clear();
    /* a section that is not built is refused whatever else failed... */
    zt_status st = zt_config_load_string("{\n" MB1 ",\n\"amp\": {\"enabled\": true},\n"
                                         "\"sparse_attention\": {\"mode\": \"fixed\"},\n"
                                         "\"fp16\": {\"hysteresis\": 0}\n}",
                                         "t.json", NULL, 1, &cfg);
    assert_int_equal(st, ZT_ERR_CONFIG);
    assert_msg("t.json: 3 errors:");
    assert_msg("t.json:5: fp16.hysteresis: got 0");
    assert_msg("t.json: amp: this DeepSpeed feature is not implemented yet");
    assert_msg("t.json: sparse_attention: this DeepSpeed feature is not implemented yet");
    /* ...but a refusal that judges values waits for values that read cleanly:
     * stage 9 failed, so hpZ's "only stage 3" is not claimed about stage 0 */
    zt_status_clear();
    st = zt_config_load_string("{" MB1 ", \"zero_optimization\": {\"stage\": 9, "
                               "\"zero_hpz_partition_size\": 2}}",
                               "t.json", NULL, 1, &cfg);
    assert_int_equal(st, ZT_ERR_CONFIG);
    assert_null(strstr(zt_status_message(), "hpZ"));
    assert_null(strstr(zt_status_message(), "errors:"));
    /* several refusals of a clean config are all listed */
    zt_status_clear();
    st = zt_config_load_string("{" MB1 ", \"zero_optimization\": {\"stage\": 2}, "
                               "\"aio\": {\"use_gds\": true}, "
                               "\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": "
                               "true}}",
                               "t.json", NULL, 1, &cfg);
    assert_int_equal(st, ZT_ERR_UNSUPPORTED);
    assert_msg("t.json: 2 errors:");
    assert_msg("t.json: aio.use_gds: GPUDirect Storage is not implemented yet");
    assert_msg("t.json: bf16.bf16_master_weights_and_grads");
    zt_status_clear();
    assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
    assert_msg("2 errors:");
}

static void test_cross_checks_wait_for_clean_values(void **state)
{
    (void)state;
    /* stage 2 + reduce_scatter + prescale is DeepSpeed's cross check... */
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2}, \"prescale_gradients\": true}",
                 ZT_ERR_CONFIG, "pre-scale gradients is not yet supported");
    /* ...not run when another value failed to read */
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2}, \"prescale_gradients\": "
                 "true, \"steps_per_print\": -1}",
                 ZT_ERR_CONFIG, "steps_per_print: got -1");
    assert_null(strstr(zt_status_message(), "pre-scale"));
}

static void test_many_errors_capped(void **state)
{
    (void)state;
    char json[8192];
    int n = snprintf(json, sizeof json, "{" MB1);
    for (int i = 0; i < 40; i++)
        n += snprintf(json + n, sizeof json - (size_t)n, ",\n\"unknown_key_%02d\": 1", i);
    snprintf(json + n, sizeof json - (size_t)n, "}");
    assert_fails(json, ZT_ERR_CONFIG, "t.json: 40 errors:");
    assert_msg("unknown_key_00: unknown key");
    assert_msg("... and ");
    assert_true(strlen(zt_status_message()) < 8000);
}

/* 50,000 unknown keys, a typo and a duplicate: the report is the same as for
 * a handful (the key index is hashed, so each key's line, duplicate check and
 * suggestion cost the same however many keys there are). Lines 1..:
 *   {  "train_batch_sise"  "k0"  "k0" (again)  "k1" ... "k49999"  "train_batch_size" } */
static void test_many_unknown_keys(void **state)
{
    (void)state;
    enum { N = 50000 };
    size_t cap = (size_t)N * 24 + 256, n = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    n += (size_t)snprintf(json + n, cap - n, "{\n\"train_batch_sise\": 8,\n\"k0\": 0,\n\"k0\": 1,\n");
    for (int i = 1; i < N; i++)
        n += (size_t)snprintf(json + n, cap - n, "\"k%d\": %d,\n", i, i);
    snprintf(json + n, cap - n, "\"train_batch_size\": 8}\n");
    /* The typo, k0..k49999 (jansson keeps one k0) and the duplicate. */
    assert_fails(json, ZT_ERR_CONFIG, "t.json: 50002 errors:");
    const char *want[] = {
        "\n  t.json:2: train_batch_sise: unknown key; did you mean `train_batch_size`?",
        "\n  t.json:3: k0: unknown key",
        "\n  t.json:4: Duplicate keys in DeepSpeed config: ['k0'] (k0 is given twice, first at "
        "line 3)",
        "\n  t.json:5: k1: unknown key",
    };
    const char *at = zt_status_message();
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *p = strstr(at, want[i]);
        if (!p) {
            print_error("missing or out of order: %s\nin: %.2000s\n", want[i],
                        zt_status_message());
            fail();
        }
        at = p + 1;
    }
    assert_msg("more");
    free(json);
}

/* The did-you-mean search against its definition, computed here the plain
 * way (the full edit-distance table, case-insensitive): the first candidate
 * at the smallest distance, if that is within max(2, length / 3). */
static size_t naive_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    static size_t d[80][80];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = d[i - 1][j - 1] +
                         (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static void test_spell_closest_is_the_closest(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    const char alphabet[] = "abcAB_";
    static char words[64][24];
    const char *cands[64];
    for (int round = 0; round < 400; round++) {
        for (int k = 0; k < 64; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t len = 1 + x % 20;
            for (size_t i = 0; i < len; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                words[k][i] = alphabet[x % (sizeof alphabet - 1)];
            }
            words[k][len] = '\0';
            cands[k] = words[k];
        }
        const char *word = words[round % 64];
        const char *const *cs = cands + 1; /* the word may or may not be among them */
        size_t limit = strlen(word) / 3 > 2 ? strlen(word) / 3 : 2, best_d = limit + 1;
        const char *want = NULL;
        for (int k = 0; k < 63; k++) {
            size_t d = naive_distance(word, cs[k]);
            assert_int_equal(zt_spell_distance(word, cs[k]), d);
            if (d < best_d) {
                best_d = d;
                want = cs[k];
            }
        }
        assert_ptr_equal(zt_spell_closest(word, cs, 63), want);
    }
}

static void test_syntax_error_alone(void **state)
{
    (void)state;
    /* unreadable JSON ends the parse at once: there is nothing to go on with */
    assert_fails("{\"train_batch_size\": 8,, \"fp16\": {\"enabled\": 3}}", ZT_ERR_CONFIG,
                 "t.json:1:");
    assert_null(strstr(zt_status_message(), "fp16"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_error_as_before),
        cmocka_unit_test(test_every_error_in_one_report),
        cmocka_unit_test(test_duplicates_among_others),
        cmocka_unit_test(test_refusals_beside_errors),
        cmocka_unit_test(test_cross_checks_wait_for_clean_values),
        cmocka_unit_test(test_many_errors_capped),
        cmocka_unit_test(test_many_unknown_keys),
        cmocka_unit_test(test_spell_closest_is_the_closest),
        cmocka_unit_test(test_syntax_error_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
