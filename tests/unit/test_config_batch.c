/* Unit tests for engine/config: the batch triple, command-line overrides and "auto". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

/* ------------------------------------------------------------ batch triple */

/* Each of the triple has an upper bound (config.h), given or derived: the
 * message names the key, its value and the bound; the largest value passes. */
static void test_batch_bounds(void **state)
{
    (void)state;
    /* 2^24 accumulation steps at the limit, one more refused, with its line. */
    assert_int_equal(parse("{\"train_micro_batch_size_per_gpu\": 1,\n"
                           " \"gradient_accumulation_steps\": 16777216}"),
                     ZT_OK);
    assert_int_equal(cfg.gradient_accumulation_steps, ZT_CONFIG_MAX_GAS);
    assert_fails("{\"train_micro_batch_size_per_gpu\": 1,\n"
                 " \"gradient_accumulation_steps\": 16777217}",
                 ZT_ERR_CONFIG,
                 "t.json:2: gradient_accumulation_steps: Gradient accumulation steps: 16777217 "
                 "has to be at most 16777216 (2^24)");
    assert_contains(zt_status_hint(), "a larger train_micro_batch_size_per_gpu");
    /* Derived (train_batch_size // micro // world): the derivation in the hint,
     * not the pipeline schedule's internal error. */
    assert_fails_ws("{\"train_batch_size\": 67108864, \"train_micro_batch_size_per_gpu\": 1}", 2,
                    ZT_ERR_CONFIG,
                    "gradient_accumulation_steps: Gradient accumulation steps: 33554432 has to be "
                    "at most 16777216 (2^24)");
    assert_contains(zt_status_hint(),
                    "gradient_accumulation_steps = 67108864 // 1 // 2 = 33554432");
    /* The micro batch, given or derived from train_batch_size alone. */
    assert_int_equal(parse("{\"train_micro_batch_size_per_gpu\": 16777216}"), ZT_OK);
    assert_fails("{\"train_micro_batch_size_per_gpu\": 16777217}", ZT_ERR_CONFIG,
                 "train_micro_batch_size_per_gpu: Micro batch size per gpu: 16777217 has to be at "
                 "most 16777216 (2^24)");
    assert_fails_ws("{\"train_batch_size\": 100000000}", 4, ZT_ERR_CONFIG,
                    "Micro batch size per gpu: 25000000 has to be at most 16777216 (2^24)");
    /* The global batch: given, or the product of two values within theirs. */
    assert_fails("{\"train_batch_size\": 1099511627777, \"train_micro_batch_size_per_gpu\": 1}",
                 ZT_ERR_CONFIG,
                 "train_batch_size: Train batch size: 1099511627777 has to be at most "
                 "1099511627776 (2^40)");
    assert_fails("{\"train_micro_batch_size_per_gpu\": 16777216,"
                 " \"gradient_accumulation_steps\": 16777216}",
                 ZT_ERR_CONFIG, "Train batch size: 281474976710656 has to be at most");
    assert_contains(zt_status_hint(),
                    "train_batch_size = 16777216 * 16777216 * 1 = 281474976710656");
    /* A command-line value is held to the same bound (the flags' own range
     * says so first; the config check is the one a caller cannot skip). */
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.gradient_accumulation_steps = ZT_CONFIG_MAX_GAS + 1;
    assert_int_equal(parse_full("{\"train_micro_batch_size_per_gpu\": 1}", 1, &ov),
                     ZT_ERR_CONFIG);
    assert_msg("Gradient accumulation steps: 16777217 has to be at most 16777216");
}

/* Group sizes above any world size (2^20 ranks) are refused as values: they
 * could never divide a world, and the memory plan takes them as int. */
static void test_group_size_bounds(void **state)
{
    (void)state;
    assert_fails("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3,"
                 " \"mics_shard_size\": 4294967297}}",
                 ZT_ERR_CONFIG,
                 "zero_optimization.mics_shard_size: got 4294967297, expected an integer in "
                 "-1..1048576");
    assert_fails("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3,"
                 " \"zero_hpz_partition_size\": 1048577}}",
                 ZT_ERR_CONFIG,
                 "zero_optimization.zero_hpz_partition_size: got 1048577, expected an integer in "
                 "0..1048576");
    assert_int_equal(parse("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3,"
                           " \"mics_shard_size\": 1048576, \"zero_hpz_partition_size\": 1}}"),
                     ZT_OK);
}

static void test_batch_all_three(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 4,"
                              " \"gradient_accumulation_steps\": 2}",
                              2),
                     ZT_OK);
    assert_int_equal(cfg.train_batch_size, 16);
    assert_int_equal(cfg.micro_batch_size, 4);
    assert_int_equal(cfg.gradient_accumulation_steps, 2);
}

static void test_batch_tb_mb(void **state)
{
    (void)state;
    assert_int_equal(
        parse_ws("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2), ZT_OK);
    assert_int_equal(cfg.gradient_accumulation_steps, 4);
    assert_int_equal(cfg.train_batch_size, 32);
    assert_int_equal(cfg.micro_batch_size, 4);
}

static void test_batch_tb_gas(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}", 2),
                     ZT_OK);
    assert_int_equal(cfg.micro_batch_size, 8);
    assert_int_equal(cfg.gradient_accumulation_steps, 2);
}

static void test_batch_mb_gas(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_micro_batch_size_per_gpu\": 4,"
                              " \"gradient_accumulation_steps\": 3}",
                              2),
                     ZT_OK);
    assert_int_equal(cfg.train_batch_size, 24);
}

static void test_batch_tb_only(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_batch_size\": 32}", 4), ZT_OK);
    assert_int_equal(cfg.gradient_accumulation_steps, 1);
    assert_int_equal(cfg.micro_batch_size, 8);
}

static void test_batch_mb_only(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_micro_batch_size_per_gpu\": 5}", 3), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 15);
    assert_int_equal(cfg.gradient_accumulation_steps, 1);
}

static void test_batch_neither(void **state)
{
    (void)state;
    const char *msg =
        "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided";
    assert_fails("{\"gradient_accumulation_steps\": 2}", ZT_ERR_CONFIG, msg);
    assert_fails("{}", ZT_ERR_CONFIG, msg);
    assert_fails("{\"train_batch_size\": null}", ZT_ERR_CONFIG, msg);
}

static void test_batch_messages(void **state)
{
    (void)state;
    assert_fails("{\"train_batch_size\": 0}", ZT_ERR_CONFIG,
                 "Train batch size: 0 has to be greater than 0");
    assert_fails("{\"train_batch_size\": -4, " MB1 "}", ZT_ERR_CONFIG,
                 "Train batch size: -4 has to be greater than 0");
    assert_fails("{\"train_micro_batch_size_per_gpu\": 0}", ZT_ERR_CONFIG,
                 "Micro batch size per gpu: 0 has to be greater than 0");
    /* derived: 8 // 16 = 0 */
    assert_fails_ws("{\"train_batch_size\": 8}", 16, ZT_ERR_CONFIG,
                    "Micro batch size per gpu: 0 has to be greater than 0");
    assert_contains(zt_status_hint(), "8 // 16 = 0");
    assert_fails("{" MB1 ", \"gradient_accumulation_steps\": 0}", ZT_ERR_CONFIG,
                 "Gradient accumulation steps: 0 has to be greater than 0");
    /* derived: 8 // 4 // 4 = 0 */
    assert_fails_ws("{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 4}", 4,
                    ZT_ERR_CONFIG, "Gradient accumulation steps: 0 has to be greater than 0");
    assert_fails_ws("{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 2,"
                    " \"gradient_accumulation_steps\": 2}",
                    2, ZT_ERR_CONFIG,
                    "Check batch related parameters. train_batch_size is not equal to "
                    "micro_batch_per_gpu * gradient_acc_step * world_size 10 != 2 * 2 * 2");
}

static void test_batch_deepspeed_example(void **state)
{
    (void)state;
    /* gas = 32 // 3 // 2 = 5, then 32 != 3 * 5 * 2 */
    assert_fails_ws("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 3}", 2,
                    ZT_ERR_CONFIG, "32 != 3 * 5 * 2");
    assert_msg("Check batch related parameters.");
    assert_contains(zt_status_hint(), "32 // 3 // 2 = 5");
}

static void test_batch_types(void **state)
{
    (void)state;
    assert_int_equal(parse("{\"train_batch_size\": 16.0}"), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 16);
    assert_fails("{\"train_batch_size\": \"16\"}", ZT_ERR_CONFIG, "train_batch_size: got \"16\"");
    assert_fails("{\"train_batch_size\": 16.5}", ZT_ERR_CONFIG, "expected an integer");
}

/* ------------------------------------------------------------ overrides and "auto" */

static void test_overrides_fill_auto(void **state)
{
    (void)state;
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.micro_batch_size = 8;
    assert_int_equal(
        parse_full("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\":"
                   " \"auto\", \"gradient_accumulation_steps\": \"auto\"}",
                   2, &ov),
        ZT_OK);
    assert_int_equal(cfg.micro_batch_size, 8);
    assert_int_equal(cfg.gradient_accumulation_steps, 1);
    assert_int_equal(cfg.train_batch_size, 16);
    assert_note("train_micro_batch_size_per_gpu \"auto\" -> 8 (command line)");
    assert_note("train_batch_size \"auto\" -> 16 (derived)");
    assert_note("gradient_accumulation_steps \"auto\" -> 1 (derived)");
}

static void test_overrides_fill_missing(void **state)
{
    (void)state;
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.train_batch_size = 64;
    ov.gradient_accumulation_steps = 4;
    assert_int_equal(parse_full("{}", 2, &ov), ZT_OK);
    assert_int_equal(cfg.micro_batch_size, 8);
    assert_note("train_batch_size not in config -> 64 (command line)");
    /* an override equal to the config value is fine */
    assert_int_equal(parse_full("{\"train_batch_size\": 64}", 2, &ov), ZT_OK);
}

static void test_overrides_contradict(void **state)
{
    (void)state;
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.train_batch_size = 64;
    assert_int_equal(parse_full("{\"train_batch_size\": 32}", 1, &ov), ZT_ERR_CONFIG);
    assert_msg("train_batch_size: 32 in the config contradicts 64 from the command line");
    zt_config_overrides_init(&ov);
    ov.gradient_accumulation_steps = 2;
    assert_int_equal(parse_full("{" MB1 ", \"gradient_accumulation_steps\": 4}", 1, &ov),
                     ZT_ERR_CONFIG);
    assert_msg("gradient_accumulation_steps: 4 in the config contradicts 2");
}

static void test_auto_batch_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse_ws("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\":"
                              " \"auto\"}",
                              2),
                     ZT_OK);
    assert_int_equal(cfg.micro_batch_size, 32);
    assert_int_equal(cfg.gradient_accumulation_steps, 1);
    assert_int_equal(cfg.train_batch_size, 64);
    assert_note("train_micro_batch_size_per_gpu \"auto\" -> 32 (default)");
    assert_note("train_batch_size \"auto\" -> 64 (derived)");
    /* gas given, the rest auto: keep gas */
    assert_int_equal(
        parse_ws("{\"train_batch_size\": \"auto\", \"gradient_accumulation_steps\": 3}", 2), ZT_OK);
    assert_int_equal(cfg.gradient_accumulation_steps, 3);
    assert_int_equal(cfg.train_batch_size, 192);
}

static void test_overrides_lr(void **state)
{
    (void)state;
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.lr = 0.005;
    assert_int_equal(parse_full("{" MB1 ", \"optimizer\": {\"type\": \"AdamW\", \"params\":"
                                " {\"lr\": \"auto\"}}}",
                                1, &ov),
                     ZT_OK);
    assert_true(cfg.optimizer.lr == 0.005);
    assert_note("optimizer.params.lr \"auto\" -> 0.005 (command line)");
    assert_int_equal(parse_full("{" MB1 ", \"optimizer\": {\"type\": \"AdamW\"}}", 1, &ov), ZT_OK);
    assert_true(cfg.optimizer.lr == 0.005);
    assert_int_equal(parse_full("{" MB1 ", \"optimizer\": {\"type\": \"AdamW\", \"params\":"
                                " {\"lr\": 0.001}}}",
                                1, &ov),
                     ZT_ERR_CONFIG);
    assert_msg("optimizer.params.lr: 0.001 in the config contradicts 0.005 from the command line");
    assert_int_equal(parse_full("{" MB1 "}", 1, &ov), ZT_OK);
    assert_int_equal(cfg.optimizer.type, ZT_OPTIM_ADAMW);
    assert_true(cfg.optimizer.from_default);
    assert_true(cfg.optimizer.lr == 0.005);
}

static void test_auto_in_sections(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"reduce_bucket_size\": \"auto\","
                           " \"overlap_comm\": \"auto\"}, \"fp16\": {\"enabled\": \"auto\"},"
                           " \"gradient_clipping\": \"auto\", \"optimizer\": {\"type\": \"Adam\","
                           " \"params\": {\"lr\": \"auto\", \"betas\": \"auto\", \"eps\": \"auto\","
                           " \"weight_decay\": \"auto\"}}}"),
                     ZT_OK);
    /* reduce_bucket_size waits for the model's hidden size (test_config_auto.c) */
    assert_int_equal(cfg.auto_pending, ZT_AUTO_REDUCE_BUCKET);
    assert_string_equal(zt_config_pending_auto(&cfg), "zero_optimization.reduce_bucket_size");
    assert_false(cfg.fp16.enabled);
    assert_note("fp16.enabled \"auto\" -> false (no --fp16)");
    assert_true(cfg.gradient_clipping == 1.0);
    assert_true(cfg.optimizer.lr == 1e-3);
    assert_true(cfg.optimizer.beta1 == 0.9 && cfg.optimizer.beta2 == 0.999);
    assert_true(cfg.optimizer.eps == 1e-8);
    assert_note("optimizer.params.lr \"auto\" -> 0.001 (default)");
    assert_note("optimizer.params.eps \"auto\" -> 1e-08 (default)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_bounds),
        cmocka_unit_test(test_group_size_bounds),
        cmocka_unit_test(test_batch_all_three),
        cmocka_unit_test(test_batch_tb_mb),
        cmocka_unit_test(test_batch_tb_gas),
        cmocka_unit_test(test_batch_mb_gas),
        cmocka_unit_test(test_batch_tb_only),
        cmocka_unit_test(test_batch_mb_only),
        cmocka_unit_test(test_batch_neither),
        cmocka_unit_test(test_batch_messages),
        cmocka_unit_test(test_batch_deepspeed_example),
        cmocka_unit_test(test_batch_types),
        cmocka_unit_test(test_overrides_fill_auto),
        cmocka_unit_test(test_overrides_fill_missing),
        cmocka_unit_test(test_overrides_contradict),
        cmocka_unit_test(test_auto_batch_defaults),
        cmocka_unit_test(test_overrides_lr),
        cmocka_unit_test(test_auto_in_sections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
