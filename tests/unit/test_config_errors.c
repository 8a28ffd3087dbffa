/* Every error of a config in one report (engine/config/json.c's collector):
 * each key's error with its line, sorted by line, alone as it always was;
 * duplicate keys among them; refusals of whole sections beside parse errors;
 * checks between values only on values that read cleanly. */
#include "tests/unit/config_test_helpers.h"

#include <stdio.h>

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
        cmocka_unit_test(test_syntax_error_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
