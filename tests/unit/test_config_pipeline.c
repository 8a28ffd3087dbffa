/*
 * Unit tests for engine/config's pipeline section and flags
 * (engine/config/parse_pipeline.c): where P comes from, the batch rule over
 * the data-parallel size, DeepSpeed's messages, the notes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

static zt_status parse_ov(const char *json, int ws, int64_t stages, const char *method)
{
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.pipeline_stages = stages;
    ov.partition_method = method;
    return parse_full(json, ws, &ov);
}

static void test_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_batch_size\": 8}", 4), ZT_OK);
    assert_int_equal(cfg.pipeline.stages, 1);
    assert_int_equal(cfg.pipeline.data_parallel, 4);
    assert_string_equal(cfg.pipeline.partition, "parameters");
    assert_string_equal(cfg.pipeline.schedule, "1f1b");
    assert_int_equal(cfg.micro_batch_size, 2);
}

/* DeepSpeed's rule with D = world / P: 16 = micro x GAS x 2 at world 4, P 2. */
static void test_batch_rule_uses_data_parallel(void **state)
{
    (void)state;
    assert_int_equal(parse_ov("{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 4}",
                              4, 2, NULL),
                     ZT_OK);
    assert_int_equal(cfg.pipeline.stages, 2);
    assert_int_equal(cfg.pipeline.data_parallel, 2);
    assert_int_equal(cfg.micro_batch_size, 2);
    /* the same numbers without pipelining would need micro 1 */
    assert_int_equal(parse_ws("{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 4}",
                              4),
                     ZT_OK);
    assert_int_equal(cfg.micro_batch_size, 1);
    zt_status got = parse_ov("{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 4, "
                             "\"gradient_accumulation_steps\": 4}",
                             4, 2, NULL);
    assert_int_equal(got, ZT_ERR_CONFIG);
    assert_msg("16 != 4 * 4 * 2");
}

static void test_section(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 4, "
                              "\"partition\": \"type:block\", \"seed_layers\": true, "
                              "\"activation_checkpoint_interval\": 2}}",
                              8),
                     ZT_OK);
    assert_int_equal(cfg.pipeline.stages, 4);
    assert_int_equal(cfg.pipeline.data_parallel, 2);
    assert_string_equal(cfg.pipeline.partition, "type:block");
    assert_int_equal(cfg.activation_checkpoint_interval, 2);
    assert_note("pipeline.seed_layers has no effect");
    assert_note("a checkpoint every 2 unit(s) within each stage");
    /* "best" is DeepSpeed's default and never read */
    assert_int_equal(parse_ws("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": \"auto\", "
                              "\"partition\": \"best\"}}",
                              2),
                     ZT_OK);
    assert_int_equal(cfg.pipeline.stages, 1);
    assert_string_equal(cfg.pipeline.partition, "parameters");
    assert_note("pipeline.partition \"best\" has no effect");
    /* the flags fill "auto" and agree with an equal number */
    assert_int_equal(parse_ov("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 2}}", 2, 2,
                              "uniform"),
                     ZT_OK);
    assert_string_equal(cfg.pipeline.partition, "uniform");
}

static void test_errors(void **state)
{
    (void)state;
    assert_int_equal(parse_ov("{\"train_batch_size\": 8}", 3, 2, NULL), ZT_ERR_CONFIG);
    assert_msg("num_stages (2) must divide distributed world size (3)");
    assert_fails_ws("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 2}, "
                    "\"zero_optimization\": {\"stage\": 2}}",
                    2, ZT_ERR_CONFIG,
                    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism");
    assert_fails_ws("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 2}, "
                    "\"zero_optimization\": {\"stage\": 3}}",
                    2, ZT_ERR_CONFIG,
                    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism");
    assert_int_equal(parse_ov("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, "
                              "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
                              "\"/tmp\"}}}",
                              2, 2, NULL),
                     ZT_ERR_UNSUPPORTED);
    assert_msg("nvme offload with pipeline parallelism is not implemented yet");
    /* stage 2 without pipelining is fine */
    assert_int_equal(parse_ws("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2}}",
                              2),
                     ZT_OK);
    assert_int_equal(parse_ov("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 4}}", 4, 2,
                              NULL),
                     ZT_ERR_CONFIG);
    assert_msg("4 in the config contradicts 2 from the command line");
    assert_int_equal(parse_ov("{\"train_batch_size\": 8, \"pipeline\": {\"partition\": "
                              "\"uniform\"}}",
                              2, 2, "parameters"),
                     ZT_ERR_CONFIG);
    assert_msg("\"uniform\" in the config contradicts --partition-method parameters");
    assert_fails_ws("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 0}}", 2, ZT_ERR_CONFIG,
                    "pipeline.stages");
    assert_fails_ws("{\"train_batch_size\": 8, \"pipeline\": {\"stage\": 2}}", 2, ZT_ERR_CONFIG,
                    "pipeline.stage: unknown key");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_batch_rule_uses_data_parallel),
        cmocka_unit_test(test_section),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
