/* Unit tests for engine/config: DeepSpeed 0.19.6 config semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/config/config.h"

/* zt_config is large: keep it out of cmocka's test stacks. */
static zt_config cfg;

static zt_status parse_full(const char *json, int ws, const zt_config_overrides *ov)
{
    zt_status_clear();
    return zt_config_parse_string(json, "t.json", ov, ws, &cfg);
}

static zt_status parse_ws(const char *json, int ws)
{
    return parse_full(json, ws, NULL);
}
static zt_status parse(const char *json)
{
    return parse_full(json, 1, NULL);
}

static void check_contains(const char *hay, const char *needle, const char *file, int line)
{
    if (!strstr(hay, needle)) {
        print_error("%s:%d: expected \"%s\" in \"%s\"\n", file, line, needle, hay);
        fail();
    }
}
#define assert_contains(hay, needle) check_contains((hay), (needle), __FILE__, __LINE__)
#define assert_msg(needle) assert_contains(zt_status_message(), (needle))

static bool has_note(const char *needle)
{
    for (int i = 0; i < cfg.n_notes; i++)
        if (strstr(cfg.notes[i], needle))
            return true;
    return false;
}

static void check_note(const char *needle, const char *file, int line)
{
    if (!has_note(needle)) {
        print_error("%s:%d: no note contains \"%s\"; notes:\n", file, line, needle);
        for (int i = 0; i < cfg.n_notes; i++)
            print_error("  %s\n", cfg.notes[i]);
        fail();
    }
}
#define assert_note(needle) check_note((needle), __FILE__, __LINE__)

static void check_fails(const char *json, int ws, zt_status st, const char *needle,
                        const char *file, int line)
{
    zt_status got = parse_ws(json, ws);
    if (got != st) {
        print_error("%s:%d: status %s, expected %s (message: %s)\n", file, line,
                    zt_status_name(got), zt_status_name(st), zt_status_message());
        fail();
    }
    check_contains(zt_status_message(), needle, file, line);
}
#define assert_fails(json, st, needle) check_fails((json), 1, (st), (needle), __FILE__, __LINE__)
#define assert_fails_ws(json, ws, st, needle)                                                      \
    check_fails((json), (ws), (st), (needle), __FILE__, __LINE__)

#define MB1 "\"train_micro_batch_size_per_gpu\": 1"

/* ------------------------------------------------------------ batch triple */

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
    assert_int_equal(cfg.zero.reduce_bucket_size, 500000000);
    assert_note("zero_optimization.reduce_bucket_size \"auto\" -> 500000000 (default)");
    assert_false(cfg.fp16.enabled);
    assert_note("fp16.enabled \"auto\" -> false (default)");
    assert_true(cfg.gradient_clipping == 1.0);
    assert_true(cfg.optimizer.lr == 1e-3);
    assert_true(cfg.optimizer.beta1 == 0.9 && cfg.optimizer.beta2 == 0.999);
    assert_true(cfg.optimizer.eps == 1e-8);
    assert_note("optimizer.params.lr \"auto\" -> 0.001 (default)");
    assert_note("optimizer.params.eps \"auto\" -> 1e-08 (default)");
}

/* ------------------------------------------------------------ hjson-isms and parse errors */

static void test_comments_and_trailing_commas(void **state)
{
    (void)state;
    const char *json =
        "{\n"
        "  # hash comment with \"quotes\", commas, and } braces\n"
        "  \"train_batch_size\": 8, // line comment\n"
        "  /* block\n"
        "     comment */ \"gradient_accumulation_steps\": 1,\n"
        "  \"csv_monitor\": {\"enabled\": true, \"output_path\": \"a//b#c/*d*/\",\n"
        "                  \"job_name\": \"x\\\"y,}\",},\n"
        "  \"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [0.8, 0.9,],},},\n"
        "}\n";
    assert_int_equal(parse(json), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 8);
    assert_true(cfg.csv_monitor.enabled);
    assert_string_equal(cfg.csv_monitor.output_path, "a//b#c/*d*/");
    assert_string_equal(cfg.csv_monitor.job_name, "x\"y,}");
    assert_true(cfg.optimizer.beta1 == 0.8 && cfg.optimizer.beta2 == 0.9);
}

static void test_parse_error_line_after_comments(void **state)
{
    (void)state;
    const char *json = "{\n"
                       "  // one\n"
                       "  /* two\n"
                       "     three */\n"
                       "  \"train_batch_size\": 8,\n"
                       "  \"steps_per_print\": ,\n"
                       "  \"wall_clock_breakdown\": true\n"
                       "}\n";
    assert_fails(json, ZT_ERR_CONFIG, "t.json:6:");
    assert_contains(zt_status_hint(), "comments");
    assert_fails("{\n\"train_batch_size\": 8 /* never closed\n}", ZT_ERR_CONFIG,
                 "t.json:2: unterminated /* comment");
    assert_fails("[1, 2]", ZT_ERR_CONFIG, "must be a JSON object");
    assert_fails("", ZT_ERR_CONFIG, "t.json:");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    const char *json = "{\n"
                       "  \"train_batch_size\": 8,\n"
                       "  \"zero_optimization\": {\n"
                       "    \"stage\": 0,\n"
                       "    \"stage\": 1\n"
                       "  }\n"
                       "}\n";
    assert_fails(json, ZT_ERR_CONFIG, "Duplicate keys in DeepSpeed config: ['stage']");
    assert_msg("t.json:5:");
    assert_msg("zero_optimization.stage is given twice");
    assert_fails("{\"train_batch_size\": 8, \"train_batch_size\": 8}", ZT_ERR_CONFIG,
                 "['train_batch_size']");
}

/* ------------------------------------------------------------ unknown keys */

static void test_unknown_top_level(void **state)
{
    (void)state;
    assert_fails("{\"trian_batch_size\": 8}", ZT_ERR_CONFIG,
                 "trian_batch_size: unknown key; did you mean `train_batch_size`?");
    assert_fails("{" MB1 ", \"seed\": 1}", ZT_ERR_CONFIG, "seed: unknown key");
    assert_null(strstr(zt_status_message(), "did you mean"));
    assert_contains(zt_status_hint(), "train_batch_size");
    /* a key in the wrong section points to where it belongs */
    assert_fails("{" MB1 ", \"stage\": 1}", ZT_ERR_CONFIG,
                 "did you mean `zero_optimization.stage`?");
    assert_fails("{" MB1 ", \"gradient_allreduce_opp\": \"mean\"}", ZT_ERR_CONFIG,
                 "did you mean `gradient_allreduce_op`?");
}

static void test_unknown_nested(void **state)
{
    (void)state;
    const char *json = "{\n"
                       "  \"train_batch_size\": 8,\n"
                       "  \"zero_optimization\": {\n"
                       "    \"reduce_bucket_sise\": 5e8\n"
                       "  }\n"
                       "}\n";
    assert_fails(json, ZT_ERR_CONFIG,
                 "t.json:4: zero_optimization.reduce_bucket_sise: unknown key; did you mean "
                 "`reduce_bucket_size`?");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lrr\": 0.1}}}",
                 ZT_ERR_CONFIG, "optimizer.params.lrr: unknown key; did you mean `lr`?");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                 "{\"warmup_num_step\": 10}}}",
                 ZT_ERR_CONFIG,
                 "scheduler.params.warmup_num_step: unknown key; did you mean `warmup_num_steps`?");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                 "{\"devise\": \"cpu\"}}}",
                 ZT_ERR_CONFIG,
                 "zero_optimization.offload_param.devise: unknown key; did you mean `device`?");
    assert_fails("{" MB1 ", \"fp16\": {\"enabled\": false, \"fused_mode\": true}}", ZT_ERR_CONFIG,
                 "fp16.fused_mode: unknown key");
    assert_fails("{" MB1 ", \"activation_checkpointing\": {\"partition_activation\": true}}",
                 ZT_ERR_CONFIG, "did you mean `partition_activations`?");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"lr\": 0.1}}", ZT_ERR_CONFIG,
                 "did you mean `optimizer.params.lr`?");
}

/* ------------------------------------------------------------ types and ranges */

static void test_wrong_types(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": \"two\"}}", ZT_ERR_CONFIG,
                 "zero_optimization.stage: got \"two\", expected an integer in 0..3");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"contiguous_gradients\": 1}}", ZT_ERR_CONFIG,
                 "got 1, expected true or false");
    assert_fails("{" MB1 ", \"gradient_clipping\": \"big\"}", ZT_ERR_CONFIG,
                 "gradient_clipping: got \"big\", expected a non-negative number");
    assert_fails("{" MB1 ", \"gradient_predivide_factor\": 0}", ZT_ERR_CONFIG,
                 "expected a positive number");
    assert_fails("{" MB1 ", \"fp16\": 1}", ZT_ERR_CONFIG, "fp16: got 1, expected an object");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
                 "{\"device\": \"gpu\"}}}",
                 ZT_ERR_CONFIG, "got \"gpu\", expected one of \"none\", \"cpu\", \"nvme\"");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
                 "{\"ratio\": 1.5}}}",
                 ZT_ERR_CONFIG, "expected a number in [0, 1]");
    assert_fails("{" MB1 ", \"fp16\": {\"loss_scale\": -1}}", ZT_ERR_CONFIG,
                 "fp16.loss_scale: got -1, expected a non-negative number");
    assert_fails("{" MB1 ", \"steps_per_print\": true}", ZT_ERR_CONFIG,
                 "expected a non-negative integer");
    char json[1024];
    snprintf(json, sizeof json, "{" MB1 ", \"csv_monitor\": {\"output_path\": \"%0600d\"}}", 0);
    assert_fails(json, ZT_ERR_CONFIG, "csv_monitor.output_path: longer than");
}

static void test_sizes_and_stage(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"zero_optimization\": {\"reduce_bucket_size\": -1}}", ZT_ERR_CONFIG,
                 "zero_optimization.reduce_bucket_size: got -1, expected a non-negative integer");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 4}}", ZT_ERR_CONFIG,
                 "got 4, expected an integer in 0..3");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": -1}}", ZT_ERR_CONFIG,
                 "expected an integer in 0..3");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"allgather_bucket_size\": 5.5}}",
                 ZT_ERR_CONFIG, "got 5.5, expected a non-negative integer");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 2.0, "
                           "\"reduce_bucket_size\": 5e4, \"allgather_bucket_size\": 2e8}}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.stage, 2);
    assert_int_equal(cfg.zero.reduce_bucket_size, 50000);
    assert_int_equal(cfg.zero.allgather_bucket_size, 200000000);
}

/* ------------------------------------------------------------ fp16 / bf16 */

static void test_fp16_bf16(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
                 ZT_ERR_CONFIG, "bfloat16 and fp16 modes cannot be simultaneously enabled");
    assert_int_equal(parse("{" MB1 ", \"bfloat16\": {\"enabled\": true}}"), ZT_OK);
    assert_true(cfg.bf16.enabled);
    assert_true(cfg.bf16.check_grad_overflow);
    assert_fails("{" MB1 ", \"bf16\": {}, \"bfloat16\": {}}", ZT_ERR_CONFIG,
                 "name the same setting");
    assert_int_equal(parse("{" MB1 ", \"fp16\": {\"enabled\": true, \"loss_scale\": 0, "
                           "\"initial_scale_power\": 12, \"hysteresis\": 1}}"),
                     ZT_OK);
    assert_true(cfg.fp16.enabled);
    assert_int_equal(cfg.fp16.initial_scale_power, 12);
    assert_int_equal(cfg.fp16.loss_scale_window, 1000);
    assert_int_equal(cfg.fp16.hysteresis, 1);
    assert_true(cfg.fp16.min_loss_scale == 1.0);
    assert_fails("{" MB1 ", \"fp16\": {\"loss_scale_window\": 0}}", ZT_ERR_CONFIG,
                 "fp16.loss_scale_window: must be > 0 with dynamic loss scaling");
    assert_fails("{" MB1 ", \"fp16\": {\"min_loss_scale\": 0}}", ZT_ERR_CONFIG,
                 "fp16.min_loss_scale: must be > 0 with dynamic loss scaling");
    /* static scaling does not need a window */
    assert_int_equal(parse("{" MB1 ", \"fp16\": {\"loss_scale\": 128, \"loss_scale_window\": 0}}"),
                     ZT_OK);
    assert_fails("{" MB1 ", \"fp16\": {\"hysteresis\": 0}}", ZT_ERR_CONFIG, "fp16.hysteresis");
    assert_fails("{" MB1 ", \"bf16\": {\"bf16_master_weights_and_grads\": true}}", ZT_ERR_CONFIG,
                 "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 1}, \"bf16\": "
                 "{\"bf16_optimizer_states\": true}}",
                 ZT_ERR_CONFIG,
                 "bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled.");
}

/* ------------------------------------------------------------ zero_optimization */

static void test_zero_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    const zt_zero_config *z = &cfg.zero;
    assert_int_equal(z->stage, 0);
    assert_false(z->overlap_comm);
    assert_true(z->contiguous_gradients && z->reduce_scatter && z->allgather_partitions);
    assert_true(z->use_multi_rank_bucket_allreduce && z->load_from_fp32_weights);
    assert_true(z->ignore_unused_parameters);
    assert_false(z->round_robin_gradients || z->elastic_checkpoint);
    assert_int_equal(z->reduce_bucket_size, 500000000);
    assert_int_equal(z->allgather_bucket_size, 500000000);
    assert_int_equal(z->sub_group_size, 1000000000);
    assert_int_equal(z->stage3_prefetch_bucket_size, 50000000);
    assert_int_equal(z->stage3_param_persistence_threshold, 100000);
    assert_true(z->stage3_model_persistence_threshold == INT64_MAX);
    assert_int_equal(z->stage3_max_live_parameters, 1000000000);
    assert_int_equal(z->stage3_max_reuse_distance, 1000000000);
    assert_int_equal(z->zero_hpz_partition_size, 1);
    assert_int_equal(z->mics_shard_size, -1);
    assert_int_equal(z->offload_optimizer.device, ZT_OFFLOAD_NONE);
    assert_int_equal(z->offload_optimizer.buffer_count, 4);
    assert_true(z->offload_optimizer.pin_memory);
    assert_true(z->offload_optimizer.ratio == 1.0);
    assert_int_equal(z->offload_param.buffer_count, 5);
    assert_int_equal(z->offload_param.buffer_size, 100000000);
    assert_int_equal(z->offload_param.max_in_cpu, 1000000000);
    assert_true(cfg.gradient_clipping == 1.0);
    assert_int_equal(cfg.steps_per_print, 0);
    assert_true(cfg.throughput_timer);
    assert_string_equal(cfg.csv_monitor.job_name, "DeepSpeedJobName");
    assert_int_equal(cfg.activation_checkpointing.number_checkpoints, -1);
    assert_false(cfg.activation_checkpointing_present);
    assert_string_equal(cfg.log_level, "warning");
}

static void test_zero_overlap_comm(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3}}"), ZT_OK);
    assert_true(cfg.zero.overlap_comm);
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 2}}"), ZT_OK);
    assert_false(cfg.zero.overlap_comm);
    assert_int_equal(
        parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": false}}"), ZT_OK);
    assert_false(cfg.zero.overlap_comm);
    assert_int_equal(
        parse("{" MB1 ", \"zero_optimization\": {\"stage\": 1, \"overlap_comm\": true}}"), ZT_OK);
    assert_true(cfg.zero.overlap_comm);
}

static void test_zero_boolean_form(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": true}"), ZT_OK);
    assert_int_equal(cfg.zero.stage, 1);
    assert_int_equal(cfg.zero.allgather_bucket_size, 500000000);
    assert_note("deprecated format: read as stage 1");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": true, \"allgather_size\": 1000}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.allgather_bucket_size, 1000);
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": false}"), ZT_OK);
    assert_int_equal(cfg.zero.stage, 0);
    assert_fails("{" MB1 ", \"zero_optimization\": 2}", ZT_ERR_CONFIG,
                 "zero_optimization: got 2, expected an object");
}

static void test_zero_deprecated(void **state)
{
    (void)state;
    assert_int_equal(
        parse("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true}}"), ZT_OK);
    assert_int_equal(cfg.zero.offload_optimizer.device, ZT_OFFLOAD_CPU);
    assert_note("Config parameter cpu_offload is deprecated use offload_optimizer instead");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true, "
                 "\"offload_optimizer\": {\"device\": \"cpu\"}}}",
                 ZT_ERR_CONFIG,
                 "Cannot provide deprecated parameter 'cpu_offload' and replacing parameter "
                 "'offload_optimizer' together");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"cpu_offload_param\": true, \"cpu_offload_use_pin_memory\": true}}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.offload_param.device, ZT_OFFLOAD_CPU);
    assert_note("Config parameter cpu_offload_param is deprecated use offload_param instead");
    assert_note("Config parameter cpu_offload_use_pin_memory is deprecated use offload_param or "
                "offload_optimizer instead");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"stage3_gather_fp16_weights_on_model_save\": true}}"),
                     ZT_OK);
    assert_true(cfg.zero.stage3_gather_16bit_weights_on_model_save);
    assert_note("Config parameter stage3_gather_fp16_weights_on_model_save is deprecated use "
                "gather_16bit_weights_on_model_save instead");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                 "\"stage3_gather_fp16_weights_on_model_save\": true, "
                 "\"stage3_gather_16bit_weights_on_model_save\": false}}",
                 ZT_ERR_CONFIG,
                 "Cannot provide deprecated parameter 'stage3_gather_fp16_weights_on_model_save' "
                 "and replacing parameter 'gather_16bit_weights_on_model_save' together");
    /* false still maps: no offload */
    assert_int_equal(
        parse("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"cpu_offload\": false}}"), ZT_OK);
    assert_int_equal(cfg.zero.offload_optimizer.device, ZT_OFFLOAD_NONE);
}

static void test_zero_rejections(void **state)
{
    (void)state;
    assert_fails("{" MB1
                 ", \"zero_optimization\": {\"stage\": 2}, \"gradient_predivide_factor\": 2}",
                 ZT_ERR_CONFIG,
                 "gradient_predivide_factor != 1.0 is not yet supported with ZeRO-2 with reduce "
                 "scatter enabled");
    assert_fails(
        "{" MB1 ", \"zero_optimization\": {\"stage\": 2}, \"prescale_gradients\": true}",
        ZT_ERR_CONFIG,
        "pre-scale gradients is not yet supported with ZeRO-2 with reduce scatter enabled");
    assert_int_equal(parse("{" MB1
                           ", \"zero_optimization\": {\"stage\": 2, \"reduce_scatter\": false},"
                           " \"gradient_predivide_factor\": 2, \"prescale_gradients\": true}"),
                     ZT_OK);
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3},"
                           " \"gradient_predivide_factor\": 2}"),
                     ZT_OK);
    assert_fails("{" MB1
                 ", \"zero_optimization\": {\"stage\": 1, \"allgather_bucket_size\": 1001}}",
                 ZT_ERR_CONFIG,
                 "allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"allgather_bucket_size\": 1001}}"),
                     ZT_OK);
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
                 "{\"device\": \"cpu\", \"ratio\": 0.5}}}",
                 ZT_ERR_CONFIG, "Partial offloading only supported for ZeRO Stage 3.");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
                           "{\"device\": \"cpu\", \"ratio\": 0.5}}}"),
                     ZT_OK);
    assert_true(cfg.zero.offload_optimizer.ratio == 0.5);
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 1, \"legacy_stage1\": true}}",
                 ZT_ERR_CONFIG, "The deprecated version of ZeRO Stage 1 is not supported");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"gradient_allreduce_op\": 1}}",
                 ZT_ERR_CONFIG, "unknown key");
    assert_fails("{" MB1
                 ", \"zero_optimization\": {\"stage\": 3}, \"gradient_allreduce_op\": \"sum\"}",
                 ZT_ERR_CONFIG, "gradient_allreduce_op='sum' is not supported with ZeRO stage 3");
}

static void test_zero_resolution(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"stage3_allgather_sequential\": true}}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 1);
    assert_true(cfg.zero.stage3_allgather_sequential);
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"prefetch_bucket_size\": 123, \"max_live_parameters\": 7}}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 123);
    assert_int_equal(cfg.zero.stage3_max_live_parameters, 7);
    assert_fails("{" MB1 ", \"zero_optimization\": {\"prefetch_bucket_size\": 1, "
                 "\"stage3_prefetch_bucket_size\": 2}}",
                 ZT_ERR_CONFIG,
                 "`zero_optimization.prefetch_bucket_size` and "
                 "`zero_optimization.stage3_prefetch_bucket_size` name the same setting");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 2, "
                           "\"contiguous_gradients\": false, \"offload_optimizer\": "
                           "{\"device\": \"nvme\", \"nvme_path\": \"/local\"}}}"),
                     ZT_OK);
    assert_true(cfg.zero.contiguous_gradients);
    assert_int_equal(cfg.zero.offload_optimizer.device, ZT_OFFLOAD_NVME);
    assert_string_equal(cfg.zero.offload_optimizer.nvme_path, "/local");
    assert_note("contiguous_gradients forced to true");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"memory_efficient_linear\": false, \"offload_param\": null}}"),
                     ZT_OK);
    assert_note("zero_optimization.memory_efficient_linear has no effect in zerotrain");
}

/* ------------------------------------------------------------ optimizer */

static void test_optimizer_default(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    const zt_optim_config *o = &cfg.optimizer;
    assert_int_equal(o->type, ZT_OPTIM_ADAMW);
    assert_true(o->from_default);
    assert_true(o->lr == 1e-3);
    assert_true(o->adam_w_mode);
    assert_note("no optimizer in config: using AdamW lr=0.001");
}

static void test_optimizer_adam_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"Adam\"}}"), ZT_OK);
    const zt_optim_config *o = &cfg.optimizer;
    assert_int_equal(o->type, ZT_OPTIM_ADAM);
    assert_false(o->from_default);
    assert_true(o->lr == 1e-3 && o->beta1 == 0.9 && o->beta2 == 0.999);
    assert_true(o->eps == 1e-8 && o->weight_decay == 0.0);
    assert_true(o->bias_correction);
    assert_true(o->adam_w_mode);
}

static void test_optimizer_adam_w_mode(void **state)
{
    (void)state;
    /* DeepSpeed: "Adam" with weight decay is decoupled (AdamW) unless adam_w_mode false */
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": "
                           "{\"lr\": 0.01, \"weight_decay\": 0.1}}}"),
                     ZT_OK);
    assert_int_equal(cfg.optimizer.type, ZT_OPTIM_ADAM);
    assert_true(cfg.optimizer.adam_w_mode);
    assert_true(cfg.optimizer.weight_decay == 0.1 && cfg.optimizer.lr == 0.01);
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": "
                           "{\"weight_decay\": 0.1, \"adam_w_mode\": false}}}"),
                     ZT_OK);
    assert_false(cfg.optimizer.adam_w_mode);
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                           "{\"adam_w_mode\": false, \"bias_correction\": false}}}"),
                     ZT_OK);
    assert_true(cfg.optimizer.adam_w_mode);
    assert_false(cfg.optimizer.bias_correction);
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"adamw\"}}"), ZT_OK);
    assert_int_equal(cfg.optimizer.type, ZT_OPTIM_ADAMW);
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"ADAM\", \"params\": "
                           "{\"torch_adam\": true, \"amsgrad\": false}}}"),
                     ZT_OK);
    assert_int_equal(cfg.optimizer.type, ZT_OPTIM_ADAM);
    assert_note("zerotrain always runs its own fused Adam");
}

static void test_optimizer_adam_errors(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": {\"amsgrad\": true}}}",
                 ZT_ERR_CONFIG, "FusedAdam does not support the AMSGrad variant.");
    assert_fails("{" MB1
                 ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"max_grad_norm\": 1.0}}}",
                 ZT_ERR_CONFIG, "optimizer.params.max_grad_norm");
    assert_msg("gradient_clipping");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [0.9]}}}",
                 ZT_ERR_CONFIG, "optimizer.params.betas: got [0.9]");
    assert_fails("{" MB1
                 ", \"optimizer\": {\"type\": \"Adam\", \"params\": {\"betas\": [1.0, 0.9]}}}",
                 ZT_ERR_CONFIG, "each in [0, 1)");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": -0.1}}}",
                 ZT_ERR_CONFIG, "optimizer.params.lr: got -0.1, expected a non-negative number");
    assert_fails("{" MB1 ", \"optimizer\": {\"params\": {\"lr\": 0.1}}}", ZT_ERR_CONFIG,
                 "optimizer: \"type\" is missing");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Adam\", \"params\": {\"momentum\": 0.9}}}",
                 ZT_ERR_CONFIG, "optimizer.params.momentum: unknown key");
}

static void test_optimizer_sgd(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1, "
                           "\"momentum\": 0.9, \"nesterov\": true, \"weight_decay\": 1e-4}}}"),
                     ZT_OK);
    const zt_optim_config *o = &cfg.optimizer;
    assert_int_equal(o->type, ZT_OPTIM_SGD);
    assert_true(o->lr == 0.1 && o->momentum == 0.9 && o->weight_decay == 1e-4);
    assert_true(o->nesterov);
    assert_true(o->dampening == 0.0);
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"SGD\"}}"), ZT_OK);
    assert_true(cfg.optimizer.lr == 1e-3 && cfg.optimizer.momentum == 0.0);
    assert_false(cfg.optimizer.nesterov);
    assert_note("optimizer.params.lr not in config -> 0.001 (default)");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"SGD\", \"params\": {\"nesterov\": true}}}",
                 ZT_ERR_CONFIG, "Nesterov momentum requires a momentum and zero dampening");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"SGD\", \"params\": {\"nesterov\": true, "
                 "\"momentum\": 0.9, \"dampening\": 0.1}}}",
                 ZT_ERR_CONFIG, "Nesterov momentum");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": 0.1}}}",
                 ZT_ERR_CONFIG, "sgd is not a supported DeepSpeed Optimizer; did you mean `SGD`?");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"SGD\", \"params\": {\"maximize\": true}}}",
                 ZT_ERR_UNSUPPORTED, "not implemented yet");
}

static void test_optimizer_sgd_with_zero(void **state)
{
    (void)state;
    const char *json = "{" MB1 ", \"zero_optimization\": {\"stage\": 1}, "
                       "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}";
    assert_fails(json, ZT_ERR_CONFIG,
                 "You are using an untested ZeRO Optimizer. Please add "
                 "<\"zero_allow_untested_optimizer\": true> in the configuration file to use it.");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 1}, "
                           "\"zero_allow_untested_optimizer\": true, "
                           "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}"),
                     ZT_OK);
    assert_note("untested optimizer");
    assert_int_equal(parse("{" MB1 ", \"optimizer\": {\"type\": \"SGD\"}}"), ZT_OK);
}

static void test_optimizer_others(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 1}, \"optimizer\": "
                 "{\"type\": \"OneBitAdam\"}}",
                 ZT_ERR_CONFIG, "1-bit Adam is not compatible with ZeRO");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2}, \"optimizer\": "
                 "{\"type\": \"ZeroOneAdam\"}}",
                 ZT_ERR_CONFIG, "0/1 Adam is not compatible with ZeRO");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3}, \"optimizer\": "
                 "{\"type\": \"OneBitLamb\"}}",
                 ZT_ERR_CONFIG, "1bit-Lamb is not compatible with ZeRO");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"OneBitAdam\"}}", ZT_ERR_UNSUPPORTED,
                 "optimizer OneBitAdam is not implemented yet");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Lamb\"}}", ZT_ERR_UNSUPPORTED,
                 "optimizer Lamb is not implemented yet");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"lion\"}}", ZT_ERR_UNSUPPORTED,
                 "optimizer lion is not implemented yet");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"RMSprop\"}}", ZT_ERR_UNSUPPORTED,
                 "torch optimizer RMSprop is not implemented yet");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": \"Frobnicate\"}}", ZT_ERR_CONFIG,
                 "Frobnicate is not a supported DeepSpeed Optimizer");
    assert_fails("{" MB1 ", \"optimizer\": {\"type\": 3}}", ZT_ERR_CONFIG, "optimizer.type: got 3");
}

/* ------------------------------------------------------------ scheduler */

static void test_scheduler_warmup_lr(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\"}}"), ZT_OK);
    const zt_sched_config *s = &cfg.scheduler;
    assert_int_equal(s->type, ZT_SCHED_WARMUP_LR);
    assert_true(s->warmup_min_lr == 0.0 && s->warmup_max_lr < 0);
    assert_int_equal(s->warmup_num_steps, 1000);
    assert_int_equal(s->warmup_type, ZT_WARMUP_LOG);
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                           "{\"warmup_min_lr\": 1e-5, \"warmup_max_lr\": 0.01, "
                           "\"warmup_num_steps\": 50, \"warmup_type\": \"linear\", "
                           "\"last_batch_iteration\": -1}}}"),
                     ZT_OK);
    assert_true(s->warmup_min_lr == 1e-5 && s->warmup_max_lr == 0.01);
    assert_int_equal(s->warmup_num_steps, 50);
    assert_int_equal(s->warmup_type, ZT_WARMUP_LINEAR);
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                           "{\"warmup_type\": \"cosine\", \"warmup_max_lr\": \"auto\"}}}"),
                     ZT_OK);
    assert_int_equal(s->warmup_type, ZT_WARMUP_LOG);
    assert_true(s->warmup_max_lr < 0);
    assert_note(
        "Using unknown warmup_type: cosine. The increasing function is set to default (log)");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                 "{\"last_batch_iteration\": 5}}}",
                 ZT_ERR_UNSUPPORTED, "not implemented yet");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                 "{\"total_num_steps\": 5}}}",
                 ZT_ERR_CONFIG, "scheduler.params.total_num_steps: unknown key");
}

static void test_scheduler_decay_and_cosine(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                 "{\"warmup_num_steps\": 10}}}",
                 ZT_ERR_CONFIG, "total_num_steps is required by WarmupDecayLR");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\"}}", ZT_ERR_CONFIG,
                 "total_num_steps is required by WarmupDecayLR");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                 "{\"total_num_steps\": \"auto\"}}}",
                 ZT_ERR_CONFIG, "\"auto\" cannot be resolved");
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                           "{\"total_num_steps\": 100, \"warmup_num_steps\": 10}}}"),
                     ZT_OK);
    const zt_sched_config *s = &cfg.scheduler;
    assert_int_equal(s->type, ZT_SCHED_WARMUP_DECAY_LR);
    assert_int_equal(s->total_num_steps, 100);
    assert_true(s->warmup_max_lr == 0.001);
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                           "{\"total_num_steps\": 5}}}"),
                     ZT_OK);
    assert_note("total_num_steps 5 is less than warmup_num_steps 1000");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupCosineLR\"}}", ZT_ERR_CONFIG,
                 "total_num_steps is required by WarmupCosineLR");
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                           "{\"total_num_steps\": 2000, \"warmup_min_ratio\": 0.1}}}"),
                     ZT_OK);
    assert_int_equal(s->type, ZT_SCHED_WARMUP_COSINE_LR);
    assert_true(s->cos_min_ratio == 1e-4 && s->warmup_min_ratio == 0.1);
    assert_int_equal(s->warmup_num_steps, 1000);
}

static void test_scheduler_one_cycle(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                 "{\"cycle_min_lr\": 0.001}}}",
                 ZT_ERR_CONFIG, "cycle_max_lr is required by OneCycle");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                 "{\"cycle_max_lr\": 0.01}}}",
                 ZT_ERR_CONFIG, "cycle_min_lr is required by OneCycle");
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                           "{\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.01, "
                           "\"cycle_first_step_size\": 100, \"cycle_first_stair_count\": 4}}}"),
                     ZT_OK);
    const zt_sched_config *s = &cfg.scheduler;
    assert_int_equal(s->type, ZT_SCHED_ONE_CYCLE);
    assert_true(s->cycle_min_lr == 0.001 && s->cycle_max_lr == 0.01);
    assert_int_equal(s->cycle_second_step_size, 100);
    assert_int_equal(s->cycle_second_stair_count, 4);
    assert_true(s->cycle_momentum);
    assert_true(s->cycle_min_mom == 0.8 && s->cycle_max_mom == 0.9);
    assert_int_equal(s->decay_step_size, 0);
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                           "{\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.01, "
                           "\"cycle_second_step_size\": 30}}}"),
                     ZT_OK);
    assert_int_equal(s->cycle_first_step_size, 2000);
    assert_int_equal(s->cycle_second_step_size, 30);
    assert_int_equal(parse("{" MB1
                           ", \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}, "
                           "\"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                           "{\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.01}}}"),
                     ZT_OK);
    assert_false(s->cycle_momentum);
    assert_note("cycle_momentum is disabled");
    assert_fails(
        "{" MB1 ", \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
        "{\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.01, \"cycle_first_step_size\": 0}}}",
        ZT_ERR_CONFIG, "expected a positive integer");
}

static void test_scheduler_lr_range_and_names(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"LRRangeTest\"}}"), ZT_OK);
    const zt_sched_config *s = &cfg.scheduler;
    assert_int_equal(s->type, ZT_SCHED_LR_RANGE_TEST);
    assert_true(s->lr_range_test_min_lr == 1e-3 && s->lr_range_test_step_rate == 1.0);
    assert_int_equal(s->lr_range_test_step_size, 2000);
    assert_false(s->lr_range_test_staircase);
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"StepLR\", \"params\": {\"step_size\": 1}}}",
                 ZT_ERR_UNSUPPORTED, "torch scheduler StepLR is not implemented yet");
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"warmuplr\"}}", ZT_ERR_CONFIG,
                 "DeepSpeed does not recognize LR scheduler warmuplr; did you mean `WarmupLR`?");
    assert_fails("{" MB1 ", \"scheduler\": {\"params\": {}}}", ZT_ERR_CONFIG,
                 "\"type\" is missing");
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    assert_int_equal(cfg.scheduler.type, ZT_SCHED_NONE);
}

/* ------------------------------------------------------------ other sections */

static void test_misc_top_level(void **state)
{
    (void)state;
    assert_int_equal(
        parse("{" MB1 ", \"steps_per_print\": null, \"gradient_clipping\": 0, "
              "\"wall_clock_breakdown\": true, \"log_level\": \"INFO\", "
              "\"communication_data_type\": \"FP32\", \"gradient_allreduce_op\": \"mean\", "
              "\"timers\": {\"throughput\": {\"enabled\": false, \"synchronized\": true}}, "
              "\"dump_state\": false}"),
        ZT_OK);
    assert_int_equal(cfg.steps_per_print, 0);
    assert_true(cfg.gradient_clipping == 0.0);
    assert_true(cfg.wall_clock_breakdown);
    assert_string_equal(cfg.log_level, "info");
    assert_string_equal(cfg.communication_data_type, "fp32");
    assert_false(cfg.throughput_timer);
    assert_note("dump_state has no effect in zerotrain");
    assert_fails("{" MB1 ", \"log_level\": \"verbose\"}", ZT_ERR_CONFIG,
                 "log_level: got \"verbose\", expected one of");
    assert_fails("{" MB1 ", \"communication_data_type\": \"fp8\"}", ZT_ERR_CONFIG,
                 "communication_data_type: got \"fp8\"");
    assert_int_equal(parse("{" MB1 ", \"steps_per_print\": 10}"), ZT_OK);
    assert_int_equal(cfg.steps_per_print, 10);
}

static void test_activation_checkpointing_and_monitors(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1
                           ", \"activation_checkpointing\": {\"partition_activations\": true, "
                           "\"contiguous_memory_optimization\": false, \"number_checkpoints\": 4, "
                           "\"profile\": true}}"),
                     ZT_OK);
    assert_true(cfg.activation_checkpointing_present);
    assert_true(cfg.activation_checkpointing.partition_activations);
    assert_false(cfg.activation_checkpointing.contiguous_memory_optimization);
    assert_note("activation_checkpointing.profile has no effect in zerotrain");
    assert_int_equal(cfg.activation_checkpointing.number_checkpoints, 4);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_int_equal(parse("{" MB1
                           ", \"csv_monitor\": {\"enabled\": true, \"output_path\": \"out/\", "
                           "\"job_name\": \"run1\"}, \"tensorboard\": {\"enabled\": false}, "
                           "\"wandb\": {\"enabled\": false, \"project\": \"p\", \"team\": null}, "
                           "\"comet\": {\"enabled\": false, \"api_key\": null}}"),
                     ZT_OK);
    assert_true(cfg.csv_monitor.enabled);
    assert_string_equal(cfg.csv_monitor.output_path, "out/");
    assert_string_equal(cfg.csv_monitor.job_name, "run1");
    assert_string_equal(cfg.unbuilt_feature, "");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
}

/* ------------------------------------------------------------ check_supported */

static void assert_refused(const char *json, const char *needle)
{
    assert_int_equal(parse(json), ZT_OK);
    zt_status_clear();
    assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
    assert_msg(needle);
}

static void test_check_supported_refusals(void **state)
{
    (void)state;
    for (int stage = 1; stage <= 3; stage++) {
        char json[128];
        snprintf(json, sizeof json, "{" MB1 ", \"zero_optimization\": {\"stage\": %d}}", stage);
        assert_int_equal(parse(json), ZT_OK);
        assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    }
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 1}, \"fp16\": {\"enabled\": "
                   "true, \"fp16_master_weights_and_grads\": true}}",
                   "fp16.fp16_master_weights_and_grads: fp16 master weights and gradients are "
                   "not implemented yet");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"zero_hpz_partition_size\": 8}}",
                   "zero_hpz_partition_size 8: hpZ partitions parameters, which only ZeRO stage 3 "
                   "does (stage is 2)");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"zero_hpz_partition_size\": 8}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_refused("{" MB1 ", \"zero_optimization\": {\"zero_quantized_weights\": true}}",
                   "zero_quantized_weights: ZeRO++ quantization is not implemented yet");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"zero_quantized_gradients\": true}}",
                   "zero_quantized_gradients");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"mics_shard_size\": 4}}",
                   "mics_shard_size 4: MiCS partitions parameters, which only ZeRO stage 3 does");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 2, "
                   "\"zero_hpz_partition_size\": 2}}",
                   "MiCS and hpZ both decide");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 2}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_refused("{" MB1 ", \"tensorboard\": {\"enabled\": true, \"output_path\": \"tb\"}}",
                   "tensorboard.enabled: the tensorboard monitor is not supported");
    assert_refused("{" MB1 ", \"wandb\": {\"enabled\": true}}", "wandb monitor is not supported");
    assert_refused("{" MB1 ", \"comet\": {\"enabled\": true}}", "comet monitor is not supported");
    assert_refused("{" MB1 ", \"flops_profiler\": {\"enabled\": true, \"profile_step\": 1}}",
                   "flops_profiler: this DeepSpeed feature is not implemented yet");
    assert_refused("{" MB1 ", \"communication_data_type\": \"fp16\"}",
                   "communication_data_type \"fp16\" with fp32 training is not implemented yet");
    assert_refused("{" MB1 ", \"gradient_allreduce_op\": \"sum\"}",
                   "gradient_allreduce_op: this DeepSpeed feature is not implemented yet");
}

static void test_check_supported_accepts(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 0}, \"fp16\": "
                           "{\"enabled\": false}, \"flops_profiler\": {\"enabled\": false}, "
                           "\"amp\": false, \"activation_checkpointing\": {}, "
                           "\"csv_monitor\": {\"enabled\": true}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    zt_status_clear();
    assert_int_equal(zt_config_load_string("{" MB1 ", \"bf16\": {\"enabled\": true, "
                                           "\"bf16_master_weights_and_grads\": true}, "
                                           "\"zero_optimization\": {\"stage\": 2}}",
                                           "ds.json", NULL, 1, &cfg),
                     ZT_ERR_UNSUPPORTED);
    assert_contains(zt_status_message(), "ds.json: bf16.bf16_master_weights_and_grads:");
    assert_contains(zt_status_message(), "not implemented yet");
    assert_int_equal(zt_config_load_string("{" MB1 "}", "ds.json", NULL, 1, &cfg), ZT_OK);
    assert_int_equal(zt_config_load_string("{" MB1 ", \"bf16\": {\"enabled\": true}}",
                                           "ds.json", NULL, 1, &cfg),
                     ZT_OK);
}

/* ------------------------------------------------------------ mixed precision */

static void test_precision_supported(void **state)
{
    (void)state;
    for (int stage = 0; stage <= 3; stage++) {
        char json[160];
        snprintf(json, sizeof json,
                 "{" MB1 ", \"zero_optimization\": {\"stage\": %d}, \"fp16\": {\"enabled\": "
                 "true}}",
                 stage);
        assert_int_equal(parse(json), ZT_OK);
        assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
        snprintf(json, sizeof json,
                 "{" MB1 ", \"zero_optimization\": {\"stage\": %d}, \"bf16\": {\"enabled\": "
                 "true}}",
                 stage);
        assert_int_equal(parse(json), ZT_OK);
        assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    }
    const char *hint_needle = "fp32 master weights";
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3}, \"bf16\": {\"enabled\": "
                   "true, \"bf16_master_weights_and_grads\": true}}",
                   "bf16.bf16_master_weights_and_grads: bf16 master weights and gradients are "
                   "not implemented yet");
    assert_contains(zt_status_hint(), hint_needle);
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 2}, \"bf16\": {\"enabled\": "
                   "true, \"bf16_master_weights_and_grads\": true, \"bf16_optimizer_states\": "
                   "true}}",
                   "bf16.bf16_master_weights_and_grads");
    /* the optimizer-states flag is refused on its own too */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 2}, \"bf16\": "
                           "{\"enabled\": true}}"),
                     ZT_OK);
    cfg.bf16.bf16_optimizer_states = true;
    zt_status_clear();
    assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
    assert_msg("bf16.bf16_optimizer_states: bf16 optimizer states are not implemented yet");
    assert_contains(zt_status_hint(), hint_needle);
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 1}, \"fp16\": {\"enabled\": "
                   "true, \"fp16_master_weights_and_grads\": true}}",
                   "fp16.fp16_master_weights_and_grads: fp16 master weights and gradients are "
                   "not implemented yet");
    /* stage 0: DeepSpeed's own error comes first */
    assert_fails("{" MB1 ", \"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": "
                 "true}}",
                 ZT_ERR_CONFIG,
                 "Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.");
    /* false is fine */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 1}, \"bf16\": "
                           "{\"enabled\": true, \"bf16_master_weights_and_grads\": false, "
                           "\"bf16_optimizer_states\": false}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);

    assert_int_equal(parse("{" MB1 ", \"fp16\": {\"enabled\": true, \"auto_cast\": true}}"),
                     ZT_OK);
    assert_note("fp16.auto_cast has no effect in zerotrain: the models' inputs are token ids or "
                "fp32 data that the first unit reads in fp32: there is nothing to cast");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_int_equal(parse("{" MB1 ", \"bf16\": {\"enabled\": true, \"immediate_grad_update\": "
                           "true}}"),
                     ZT_OK);
    assert_note("bf16.immediate_grad_update has no effect in zerotrain");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_fails("{" MB1 ", \"fp16\": {\"auto_cast\": 1}}", ZT_ERR_CONFIG,
                 "fp16.auto_cast: got 1, expected true or false");
}

/* ------------------------------------------------------------ offload */

static void test_offload_optimizer_rules(void **state)
{
    (void)state;
    for (int stage = 1; stage <= 3; stage++) {
        char json[192];
        snprintf(json, sizeof json,
                 "{" MB1 ", \"zero_optimization\": {\"stage\": %d, \"offload_optimizer\": "
                 "{\"device\": \"cpu\"}}}",
                 stage);
        assert_int_equal(parse(json), ZT_OK);
        assert_int_equal(cfg.zero.offload_optimizer.device, ZT_OFFLOAD_CPU);
        assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    }
    assert_fails("{" MB1 ", \"zero_optimization\": {\"offload_optimizer\": {\"device\": "
                 "\"cpu\"}}}",
                 ZT_ERR_CONFIG,
                 "zero_optimization.offload_optimizer.device: offloading the optimizer to "
                 "\"cpu\" at ZeRO stage 0: stage 0 has no ZeRO optimizer to offload (DeepSpeed "
                 "silently ignores the setting)");
    assert_contains(zt_status_hint(), "use ZeRO stage 1, 2 or 3");
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 0, \"cpu_offload\": true}}",
                 ZT_ERR_CONFIG, "zero_optimization.cpu_offload: offloading the optimizer");
    /* "none" at stage 0 does nothing and asks for nothing */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"offload_optimizer\": "
                           "{\"device\": \"none\"}}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);

    for (int stage = 1; stage <= 3; stage++) {
        char json[192];
        snprintf(json, sizeof json,
                 "{" MB1 ", \"zero_optimization\": {\"stage\": %d, \"offload_optimizer\": "
                 "{\"device\": \"nvme\", \"nvme_path\": \"/nvme\"}}}",
                 stage);
        assert_refused(json, "zero_optimization.offload_optimizer.device \"nvme\": offloading "
                             "to nvme is not supported yet");
        assert_contains(zt_status_hint(), "\"cpu\"");
    }

    for (int stage = 1; stage <= 2; stage++) {
        char json[192];
        snprintf(json, sizeof json,
                 "{" MB1 ", \"zero_optimization\": {\"stage\": %d, \"offload_optimizer\": "
                 "{\"device\": \"cpu\", \"ratio\": 0.3}}}",
                 stage);
        assert_fails(json, ZT_ERR_CONFIG, "Partial offloading only supported for ZeRO Stage 3.");
    }
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
                   "{\"device\": \"cpu\", \"ratio\": 0.5}}}",
                   "zero_optimization.offload_optimizer.ratio 0.5: partial optimizer offload "
                   "is not implemented yet");
    /* ratio 1 is the whole optimizer */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 1}}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    /* a ratio without a device offloads nothing: said so */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"offload_optimizer\": {\"ratio\": 0.5}}}"),
                     ZT_OK);
    assert_note("zero_optimization.offload_optimizer.ratio has no effect without an offload "
                "device");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
}

static void test_offload_param_rules(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                           "{\"device\": \"cpu\"}}}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.offload_param.device, ZT_OFFLOAD_CPU);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    for (int stage = 0; stage <= 2; stage++) {
        char json[192], needle[256];
        snprintf(json, sizeof json,
                 "{" MB1 ", \"zero_optimization\": {\"stage\": %d, \"offload_param\": "
                 "{\"device\": \"cpu\"}}}",
                 stage);
        snprintf(needle, sizeof needle,
                 "zero_optimization.offload_param.device: offloading parameters to \"cpu\" at "
                 "ZeRO stage %d: only stage 3 partitions parameters (DeepSpeed silently ignores "
                 "offload_param below stage 3)",
                 stage);
        assert_fails(json, ZT_ERR_CONFIG, needle);
        assert_contains(zt_status_hint(), "use ZeRO stage 3");
    }
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"cpu_offload_param\": true}}",
                 ZT_ERR_CONFIG, "zero_optimization.cpu_offload_param: offloading parameters");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                   "{\"device\": \"nvme\", \"nvme_path\": \"/nvme\"}}}",
                   "zero_optimization.offload_param.device \"nvme\": offloading to nvme is not "
                   "supported yet");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": "
                   "2, \"offload_param\": {\"device\": \"cpu\"}}}",
                   "zero_optimization.offload_param with zero_hpz_partition_size 2: hpZ's "
                   "secondary parameter copy with the parameter shards on the host is not "
                   "implemented yet");
    /* hpZ of 1 is no hpZ; optimizer offload with hpZ is fine */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"zero_hpz_partition_size\": 1, \"offload_param\": {\"device\": "
                           "\"cpu\"}, \"offload_optimizer\": {\"device\": \"cpu\"}}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"zero_hpz_partition_size\": 4, \"offload_optimizer\": {\"device\": "
                           "\"cpu\"}}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
}

/* ------------------------------------------------------------ activation checkpointing */

static void test_activation_checkpointing_rules(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"activation_checkpointing\": {\"partition_activations\": "
                           "true, \"contiguous_memory_optimization\": true, "
                           "\"cpu_checkpointing\": true, \"number_checkpoints\": 3, "
                           "\"synchronize_checkpoint_boundary\": true, \"profile\": true}}"),
                     ZT_OK);
    const zt_act_ckpt_config *a = &cfg.activation_checkpointing;
    assert_true(a->partition_activations && a->contiguous_memory_optimization);
    assert_true(a->cpu_checkpointing);
    assert_int_equal(a->number_checkpoints, 3);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_note("activation_checkpointing.partition_activations has no effect in zerotrain: it "
                "splits checkpoints across tensor-parallel ranks; without tensor parallelism "
                "each rank's activations are its own");
    assert_note("activation_checkpointing.contiguous_memory_optimization has no effect in "
                "zerotrain: checkpoints are already one contiguous buffer per boundary");
    assert_note("activation_checkpointing.synchronize_checkpoint_boundary has no effect in "
                "zerotrain: it only synchronizes the device");
    assert_note("activation_checkpointing.profile has no effect in zerotrain: it only logs "
                "forward and backward times");

    assert_fails("{" MB1 ", \"activation_checkpointing\": {\"contiguous_memory_optimization\": "
                 "true, \"number_checkpoints\": 2}}",
                 ZT_ERR_CONFIG,
                 "activation_checkpointing.contiguous_memory_optimization: Contiguous "
                 "Checkpointing is only available with partitioned activations. Set partitioned "
                 "activations to true in deepspeed config");
    assert_fails("{" MB1 ", \"activation_checkpointing\": {\"contiguous_memory_optimization\": "
                 "true, \"partition_activations\": true}}",
                 ZT_ERR_CONFIG,
                 "activation_checkpointing.contiguous_memory_optimization: Must specify the "
                 "number of layers with contiguous memory checkpointing");
    assert_fails("{" MB1 ", \"activation_checkpointing\": {\"contiguous_memory_optimization\": "
                 "true, \"partition_activations\": true, \"number_checkpoints\": null}}",
                 ZT_ERR_CONFIG, "Must specify the number of layers");
    assert_fails("{" MB1 ", \"activation_checkpointing\": {\"number_checkpoints\": 0}}",
                 ZT_ERR_CONFIG,
                 "activation_checkpointing.number_checkpoints: got 0, expected a positive "
                 "integer");
    assert_fails("{" MB1 ", \"activation_checkpointing\": {\"number_checkpoints\": -2}}",
                 ZT_ERR_CONFIG, "expected a positive integer");
    assert_int_equal(parse("{" MB1 ", \"activation_checkpointing\": {\"number_checkpoints\": "
                           "null, \"cpu_checkpointing\": true}}"),
                     ZT_OK);
    assert_int_equal(cfg.activation_checkpointing.number_checkpoints, -1);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    /* cpu_checkpointing with nothing checkpointed needs the model: left to the trainer */
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 8), 0);
}

static void test_checkpoint_interval(void **state)
{
    (void)state;
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    assert_int_equal(ov.activation_checkpoint_interval, -1);

    /* nothing given: off */
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    assert_int_equal(cfg.activation_checkpoint_interval, -1);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 12), 0);

    /* number_checkpoints: ceil(n_units / number_checkpoints) */
    assert_int_equal(parse("{" MB1 ", \"activation_checkpointing\": {\"number_checkpoints\": "
                           "4}}"),
                     ZT_OK);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 12), 3);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 10), 3);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 13), 4);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 4), 1);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 2), 1);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 1), 1);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 0), 0);
    assert_int_equal(parse("{" MB1 ", \"activation_checkpointing\": {\"number_checkpoints\": "
                           "9e18}}"),
                     ZT_OK);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 1000), 1);

    /* the command line wins, and says so when both are given */
    ov.activation_checkpoint_interval = 2;
    assert_int_equal(parse_full("{" MB1 "}", 1, &ov), ZT_OK);
    assert_int_equal(cfg.activation_checkpoint_interval, 2);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 12), 2);
    assert_int_equal(parse_full("{" MB1 ", \"activation_checkpointing\": "
                                "{\"number_checkpoints\": 4}}",
                                1, &ov),
                     ZT_OK);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 12), 2);
    assert_note("activation_checkpointing.number_checkpoints 4: the command-line checkpoint "
                "interval 2 takes precedence");
    ov.activation_checkpoint_interval = 0;
    assert_int_equal(parse_full("{" MB1 ", \"activation_checkpointing\": "
                                "{\"number_checkpoints\": 4}}",
                                1, &ov),
                     ZT_OK);
    assert_int_equal(cfg.activation_checkpoint_interval, 0);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 12), 0);

    ov.activation_checkpoint_interval = -5;
    zt_status_clear();
    assert_int_equal(parse_full("{" MB1 "}", 1, &ov), ZT_ERR_CONFIG);
    assert_msg("activation checkpoint interval -5 from the command line: expected a "
               "non-negative integer");
}

/* ------------------------------------------------------------ data types */

static void test_data_types(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    assert_string_equal(cfg.data_types.grad_accum_dtype, "");
    assert_int_equal(parse("{" MB1 ", \"data_types\": null}"), ZT_OK);
    assert_string_equal(cfg.data_types.grad_accum_dtype, "");
    assert_int_equal(parse("{" MB1 ", \"data_types\": {}}"), ZT_OK);
    assert_int_equal(parse("{" MB1 ", \"data_types\": {\"grad_accum_dtype\": null}}"), ZT_OK);
    assert_string_equal(cfg.data_types.grad_accum_dtype, "");
    assert_int_equal(parse("{" MB1 ", \"data_types\": {\"grad_accum_dtype\": \"auto\"}}"), ZT_OK);
    assert_string_equal(cfg.data_types.grad_accum_dtype, "");
    assert_note("data_types.grad_accum_dtype \"auto\" -> default");
    assert_int_equal(parse("{" MB1 ", \"data_types\": {\"grad_accum_dtype\": \"fp32\"}}"), ZT_OK);
    assert_string_equal(cfg.data_types.grad_accum_dtype, "fp32");
    assert_string_equal(cfg.unbuilt_feature, "");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);

    assert_fails("{" MB1 ", \"data_types\": {\"grad_acum_dtype\": \"fp32\"}}", ZT_ERR_CONFIG,
                 "data_types.grad_acum_dtype: unknown key; did you mean `grad_accum_dtype`?");
    assert_fails("{" MB1 ", \"grad_accum_dtype\": \"fp32\"}", ZT_ERR_CONFIG,
                 "did you mean `data_types.grad_accum_dtype`?");
    assert_fails("{" MB1 ", \"data_types\": {\"grad_accum_dtype\": \"fp8\"}}", ZT_ERR_CONFIG,
                 "data_types.grad_accum_dtype: got \"fp8\", expected one of \"fp32\", \"fp16\", "
                 "\"bf16\"");
    assert_fails("{" MB1 ", \"data_types\": {\"grad_accum_dtype\": 32}}", ZT_ERR_CONFIG,
                 "data_types.grad_accum_dtype: got 32");
    assert_fails("{" MB1 ", \"data_types\": \"fp32\"}", ZT_ERR_CONFIG,
                 "data_types: got \"fp32\", expected an object");

    /* valid: fp32, or the training dtype */
    static const struct {
        const char *precision, *dtype;
        bool ok;
        const char *needle;
    } cases[] = {
        {"", "fp32", true, NULL},
        {"", "fp16", false, "\"fp16\" with fp32 training: expected \"fp32\""},
        {"", "bf16", false, "\"bf16\" with fp32 training: expected \"fp32\""},
        {"\"fp16\": {\"enabled\": true}, ", "fp32", true, NULL},
        {"\"fp16\": {\"enabled\": true}, ", "fp16", true, NULL},
        {"\"fp16\": {\"enabled\": true}, ", "bf16", false,
         "\"bf16\" with fp16 training: expected \"fp32\" or \"fp16\""},
        {"\"bf16\": {\"enabled\": true}, ", "fp32", true, NULL},
        {"\"bf16\": {\"enabled\": true}, ", "bf16", true, NULL},
        {"\"bf16\": {\"enabled\": true}, ", "fp16", false,
         "\"fp16\" with bf16 training: expected \"fp32\" or \"bf16\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[256];
        snprintf(json, sizeof json, "{" MB1 ", %s\"data_types\": {\"grad_accum_dtype\": \"%s\"}}",
                 cases[i].precision, cases[i].dtype);
        if (cases[i].ok) {
            assert_int_equal(parse(json), ZT_OK);
            assert_string_equal(cfg.data_types.grad_accum_dtype, cases[i].dtype);
            continue;
        }
        assert_fails(json, ZT_ERR_CONFIG, cases[i].needle);
        assert_msg("data_types.grad_accum_dtype: ");
    }
}

/* ------------------------------------------------------------ dtype resolution */

/* Parses a config with the given precision ("fp32", "fp16", "bf16"),
 * gradient_accumulation_steps, grad_accum_dtype (NULL: not given), stage and
 * communication_data_type (NULL: not given). */
static void parse_precision(const char *precision, int gas, const char *grad_accum, int stage,
                            const char *comm)
{
    char json[512];
    char prec[64] = "", gad[96] = "", cdt[64] = "";
    if (strcmp(precision, "fp32") != 0)
        snprintf(prec, sizeof prec, ", \"%s\": {\"enabled\": true}", precision);
    if (grad_accum)
        snprintf(gad, sizeof gad, ", \"data_types\": {\"grad_accum_dtype\": \"%s\"}", grad_accum);
    if (comm)
        snprintf(cdt, sizeof cdt, ", \"communication_data_type\": \"%s\"", comm);
    snprintf(json, sizeof json,
             "{" MB1 ", \"gradient_accumulation_steps\": %d, \"zero_optimization\": "
             "{\"stage\": %d}%s%s%s}",
             gas, stage, prec, gad, cdt);
    assert_int_equal(parse(json), ZT_OK);
}

static void test_dtype_resolution(void **state)
{
    (void)state;
    static const struct {
        const char *precision;
        int gas;
        const char *grad_accum;
        zt_dtype compute, grad;
    } cases[] = {
        {"fp32", 1, NULL, ZT_F32, ZT_F32},
        {"fp32", 2, NULL, ZT_F32, ZT_F32},
        {"fp32", 1, "fp32", ZT_F32, ZT_F32},
        {"fp32", 2, "fp32", ZT_F32, ZT_F32},
        {"fp16", 1, NULL, ZT_F16, ZT_F16},
        {"fp16", 2, NULL, ZT_F16, ZT_F32},
        {"fp16", 1, "fp32", ZT_F16, ZT_F32},
        {"fp16", 2, "fp32", ZT_F16, ZT_F32},
        {"fp16", 1, "fp16", ZT_F16, ZT_F16},
        {"fp16", 2, "fp16", ZT_F16, ZT_F16},
        {"bf16", 1, NULL, ZT_BF16, ZT_BF16},
        {"bf16", 2, NULL, ZT_BF16, ZT_F32},
        {"bf16", 1, "fp32", ZT_BF16, ZT_F32},
        {"bf16", 2, "fp32", ZT_BF16, ZT_F32},
        {"bf16", 1, "bf16", ZT_BF16, ZT_BF16},
        {"bf16", 2, "bf16", ZT_BF16, ZT_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int stage = 0; stage <= 3; stage++) {
            parse_precision(cases[i].precision, cases[i].gas, cases[i].grad_accum, stage, NULL);
            assert_int_equal(zt_config_compute_dtype(&cfg), cases[i].compute);
            assert_int_equal(zt_config_grad_dtype(&cfg), cases[i].grad);
            /* stage 0 communicates the gradient buffer; 1-3 the compute dtype */
            assert_int_equal(zt_config_comm_dtype(&cfg),
                             stage == 0 ? cases[i].grad : cases[i].compute);
            assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
        }
    }
    /* the fp32 accumulation default is noted where it departs from DeepSpeed */
    parse_precision("bf16", 2, NULL, 1, NULL);
    assert_note("data_types.grad_accum_dtype not given -> fp32: 2 micro-steps accumulate in "
                "fp32 (DeepSpeed's default is the model dtype, bf16)");
    parse_precision("bf16", 1, NULL, 1, NULL);
    assert_false(has_note("grad_accum_dtype"));
    parse_precision("fp32", 2, NULL, 1, NULL);
    assert_false(has_note("grad_accum_dtype"));

    /* stages 1-3: communication_data_type when given */
    for (int stage = 1; stage <= 3; stage++) {
        parse_precision("fp16", 1, NULL, stage, "fp32");
        assert_int_equal(zt_config_comm_dtype(&cfg), ZT_F32);
        parse_precision("fp16", 2, NULL, stage, "fp16");
        assert_int_equal(zt_config_comm_dtype(&cfg), ZT_F16);
        parse_precision("bf16", 1, "fp32", stage, "bf16");
        assert_int_equal(zt_config_comm_dtype(&cfg), ZT_BF16);
        parse_precision("fp32", 1, NULL, stage, "fp32");
        assert_int_equal(zt_config_comm_dtype(&cfg), ZT_F32);
    }
    /* stage 0: always the gradient dtype */
    parse_precision("bf16", 2, NULL, 0, "fp32");
    assert_int_equal(zt_config_comm_dtype(&cfg), ZT_F32);
    parse_precision("bf16", 1, NULL, 0, "bf16");
    assert_int_equal(zt_config_comm_dtype(&cfg), ZT_BF16);
}

static void test_comm_dtype_supported(void **state)
{
    (void)state;
    /* fp32 and the training dtype are supported at stages 1-3 */
    static const char *const precisions[] = {"fp32", "fp16", "bf16"};
    for (int stage = 1; stage <= 3; stage++) {
        for (size_t p = 0; p < 3; p++) {
            parse_precision(precisions[p], 1, NULL, stage, "fp32");
            assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
            parse_precision(precisions[p], 2, NULL, stage, precisions[p]);
            assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
        }
    }
    /* other combinations */
    static const struct {
        const char *precision, *comm;
    } bad[] = {{"fp32", "fp16"}, {"fp32", "bf16"}, {"fp16", "bf16"}, {"bf16", "fp16"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int stage = 0; stage <= 3; stage++) {
            char needle[128];
            parse_precision(bad[i].precision, 1, NULL, stage, bad[i].comm);
            zt_status_clear();
            assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
            snprintf(needle, sizeof needle,
                     "communication_data_type \"%s\" with %s training is not implemented yet",
                     bad[i].comm, bad[i].precision);
            assert_msg(needle);
        }
    }
    assert_refused("{" MB1 ", \"bf16\": {\"enabled\": true}, \"communication_data_type\": "
                   "\"fp16\"}",
                   "gradients are communicated in fp32 or in the training dtype");
    assert_contains(zt_status_hint(), "use \"fp32\" or \"bf16\", or remove");

    /* stage 0: only the gradients' own dtype */
    parse_precision("fp16", 1, NULL, 0, "fp32");
    zt_status_clear();
    assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
    assert_msg("communication_data_type \"fp32\" at ZeRO stage 0 with gradients stored in fp16: "
               "stage 0 reduces the gradient buffer in place, so it communicates in the "
               "gradients' dtype");
    assert_contains(zt_status_hint(), "set data_types.grad_accum_dtype to \"fp32\"");
    parse_precision("bf16", 2, NULL, 0, "bf16");
    zt_status_clear();
    assert_int_equal(zt_config_check_supported(&cfg), ZT_ERR_UNSUPPORTED);
    assert_msg("communication_data_type \"bf16\" at ZeRO stage 0 with gradients stored in fp32");
    /* following the hints makes them agree */
    parse_precision("fp16", 1, "fp32", 0, "fp32");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    parse_precision("bf16", 2, "bf16", 0, "bf16");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    parse_precision("fp16", 2, NULL, 0, "fp32");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    parse_precision("fp16", 1, NULL, 0, "fp16");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    parse_precision("fp32", 2, NULL, 0, "fp32");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
}

/* ------------------------------------------------------------ the users' typical config */

static const char *users_config =
    "{ \"train_batch_size\": 256, \"train_micro_batch_size_per_gpu\": 1, \"steps_per_print\": 10,\n"
    "  \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001, \"betas\": [0.8, 0.999],\n"
    "                \"eps\": 1e-8, \"weight_decay\": 3e-7}},\n"
    "  \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0,\n"
    "                \"warmup_max_lr\": 0.001, \"warmup_num_steps\": 1000}},\n"
    "  \"fp16\": {\"enabled\": false},\n"
    "  \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"contiguous_gradients\": "
    "true,\n"
    "    \"allgather_bucket_size\": 5e4, \"reduce_bucket_size\": 5e4,\n"
    "    \"stage3_prefetch_bucket_size\": 5e4, \"stage3_max_live_parameters\": 1e9,\n"
    "    \"stage3_max_reuse_distance\": 1e9, \"stage3_gather_16bit_weights_on_model_save\": true,\n"
    "    \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true},\n"
    "    \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}}}\n";

static void test_users_config(void **state)
{
    (void)state;
    assert_int_equal(parse_ws(users_config, 8), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 256);
    assert_int_equal(cfg.micro_batch_size, 1);
    assert_int_equal(cfg.gradient_accumulation_steps, 32);
    assert_int_equal(cfg.steps_per_print, 10);
    const zt_optim_config *o = &cfg.optimizer;
    assert_int_equal(o->type, ZT_OPTIM_ADAMW);
    assert_true(o->lr == 0.001 && o->beta1 == 0.8 && o->beta2 == 0.999);
    assert_true(o->eps == 1e-8 && o->weight_decay == 3e-7 && o->adam_w_mode);
    const zt_sched_config *s = &cfg.scheduler;
    assert_int_equal(s->type, ZT_SCHED_WARMUP_LR);
    assert_true(s->warmup_min_lr == 0 && s->warmup_max_lr == 0.001);
    assert_int_equal(s->warmup_num_steps, 1000);
    assert_false(cfg.fp16.enabled);
    const zt_zero_config *z = &cfg.zero;
    assert_int_equal(z->stage, 3);
    assert_true(z->overlap_comm && z->contiguous_gradients);
    assert_int_equal(z->allgather_bucket_size, 50000);
    assert_int_equal(z->reduce_bucket_size, 50000);
    assert_int_equal(z->stage3_prefetch_bucket_size, 50000);
    assert_int_equal(z->stage3_max_live_parameters, 1000000000);
    assert_int_equal(z->stage3_max_reuse_distance, 1000000000);
    assert_true(z->stage3_gather_16bit_weights_on_model_save);
    assert_int_equal(z->offload_optimizer.device, ZT_OFFLOAD_CPU);
    assert_true(z->offload_optimizer.pin_memory);
    assert_int_equal(z->offload_param.device, ZT_OFFLOAD_CPU);
    assert_true(z->offload_param.pin_memory);
    assert_int_equal(parse_ws(users_config, 1), ZT_OK);
    assert_int_equal(cfg.gradient_accumulation_steps, 256);

    /* CPU offload of both optimizer and parameters at stage 3 is supported. */
    assert_int_equal(zt_config_load_string(users_config, "users.json", NULL, 8, &cfg), ZT_OK);
}

/* HF Transformers' zero3 template: "auto" everywhere. */
static void test_hf_style_config(void **state)
{
    (void)state;
    const char *json =
        "{\"fp16\": {\"enabled\": \"auto\", \"loss_scale\": 0, \"loss_scale_window\": 1000,\n"
        "          \"initial_scale_power\": 16, \"hysteresis\": 2, \"min_loss_scale\": 1},\n"
        " \"bf16\": {\"enabled\": \"auto\"},\n"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": "
        "\"auto\",\n"
        "               \"eps\": \"auto\", \"weight_decay\": \"auto\"}},\n"
        " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": \"auto\",\n"
        "               \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\"}},\n"
        " \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"sub_group_size\": 1e9,\n"
        "   \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\",\n"
        "   \"stage3_param_persistence_threshold\": \"auto\", \"stage3_max_live_parameters\": "
        "1e9,\n"
        "   \"stage3_gather_16bit_weights_on_model_save\": true},\n"
        " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\",\n"
        " \"steps_per_print\": 2000, \"train_batch_size\": \"auto\",\n"
        " \"train_micro_batch_size_per_gpu\": \"auto\", \"wall_clock_breakdown\": false}\n";
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.micro_batch_size = 4;
    ov.gradient_accumulation_steps = 2;
    ov.lr = 3e-4;
    assert_int_equal(parse_full(json, 4, &ov), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 32);
    assert_int_equal(cfg.zero.stage, 3);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 50000000);
    assert_false(cfg.fp16.enabled || cfg.bf16.enabled);
    assert_true(cfg.optimizer.lr == 3e-4);
    assert_true(cfg.scheduler.warmup_max_lr < 0);
    assert_note("optimizer.params.betas \"auto\" -> [0.9, 0.999] (default)");
    assert_note("scheduler.params.warmup_max_lr \"auto\" -> the optimizer lr");
    assert_note("train_batch_size \"auto\" -> 32 (derived)");
}

/* ------------------------------------------------------------ files */

static void test_load_file(void **state)
{
    (void)state;
    zt_status_clear();
    assert_int_equal(zt_config_load_file("/nonexistent/ds.json", NULL, 1, &cfg), ZT_ERR_IO);
    assert_msg("/nonexistent/ds.json");
    assert_msg("No such file or directory");

    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("{\n  // ok\n  \"train_micro_batch_size_per_gpu\": 4,\n}\n", f);
    fclose(f);
    assert_int_equal(zt_config_load_file(path, NULL, 2, &cfg), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 8);

    f = fopen(path, "w");
    assert_non_null(f);
    fputs(
        "{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"zero_optimization\": {\"stage\": 5}\n}\n",
        f);
    fclose(f);
    zt_status_clear();
    assert_int_equal(zt_config_load_file(path, NULL, 1, &cfg), ZT_ERR_CONFIG);
    char expect[64];
    snprintf(expect, sizeof expect, "%s:3: zero_optimization.stage: got 5", path);
    assert_msg(expect);
    unlink(path);
}

/* ------------------------------------------------------------ notes and names */

static void test_notes_capped(void **state)
{
    (void)state;
    /* 33 "auto" values, one note each */
    char json[4096];
    int n = snprintf(json, sizeof json, "{" MB1 ", \"zero_optimization\": {");
    const char *keys[] = {"reduce_bucket_size",
                          "allgather_bucket_size",
                          "sub_group_size",
                          "contiguous_gradients",
                          "reduce_scatter",
                          "allgather_partitions",
                          "load_from_fp32_weights",
                          "elastic_checkpoint",
                          "round_robin_gradients",
                          "ignore_unused_parameters",
                          "zero_hpz_partition_size",
                          "zero_quantized_weights",
                          "zero_quantized_gradients",
                          "mics_shard_size",
                          "stage3_prefetch_bucket_size",
                          "stage3_param_persistence_threshold",
                          "stage3_model_persistence_threshold",
                          "stage3_max_live_parameters",
                          "stage3_max_reuse_distance",
                          "use_multi_rank_bucket_allreduce"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        n += snprintf(json + n, sizeof json - (size_t)n, "%s\"%s\": \"auto\"", i ? ", " : "",
                      keys[i]);
    n += snprintf(
        json + n, sizeof json - (size_t)n,
        "}, \"fp16\": {\"enabled\": \"auto\", "
        "\"auto_cast\": \"auto\", \"loss_scale\": \"auto\", \"initial_scale_power\": \"auto\", "
        "\"loss_scale_window\": \"auto\", \"hysteresis\": \"auto\", "
        "\"consecutive_hysteresis\": \"auto\", \"min_loss_scale\": \"auto\"}, "
        "\"bf16\": {\"enabled\": \"auto\", \"immediate_grad_update\": \"auto\", "
        "\"check_grad_overflow\": \"auto\", \"bf16_optimizer_states\": \"auto\", "
        "\"bf16_master_weights_and_grads\": \"auto\"}}");
    assert_true((size_t)n < sizeof json);
    assert_int_equal(parse(json), ZT_OK);
    assert_int_equal(cfg.n_notes, ZT_CONFIG_MAX_NOTES);
    assert_string_equal(cfg.notes[ZT_CONFIG_MAX_NOTES - 1], "(further config notes omitted)");
}

static void test_type_names(void **state)
{
    (void)state;
    assert_string_equal(zt_optim_type_name(ZT_OPTIM_ADAM), "Adam");
    assert_string_equal(zt_optim_type_name(ZT_OPTIM_ADAMW), "AdamW");
    assert_string_equal(zt_optim_type_name(ZT_OPTIM_SGD), "SGD");
    assert_string_equal(zt_sched_type_name(ZT_SCHED_NONE), "none");
    assert_string_equal(zt_sched_type_name(ZT_SCHED_WARMUP_LR), "WarmupLR");
    assert_string_equal(zt_sched_type_name(ZT_SCHED_WARMUP_DECAY_LR), "WarmupDecayLR");
    assert_string_equal(zt_sched_type_name(ZT_SCHED_WARMUP_COSINE_LR), "WarmupCosineLR");
    assert_string_equal(zt_sched_type_name(ZT_SCHED_ONE_CYCLE), "OneCycle");
    assert_string_equal(zt_sched_type_name(ZT_SCHED_LR_RANGE_TEST), "LRRangeTest");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
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
        cmocka_unit_test(test_comments_and_trailing_commas),
        cmocka_unit_test(test_parse_error_line_after_comments),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_unknown_top_level),
        cmocka_unit_test(test_unknown_nested),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_sizes_and_stage),
        cmocka_unit_test(test_fp16_bf16),
        cmocka_unit_test(test_zero_defaults),
        cmocka_unit_test(test_zero_overlap_comm),
        cmocka_unit_test(test_zero_boolean_form),
        cmocka_unit_test(test_zero_deprecated),
        cmocka_unit_test(test_zero_rejections),
        cmocka_unit_test(test_zero_resolution),
        cmocka_unit_test(test_optimizer_default),
        cmocka_unit_test(test_optimizer_adam_defaults),
        cmocka_unit_test(test_optimizer_adam_w_mode),
        cmocka_unit_test(test_optimizer_adam_errors),
        cmocka_unit_test(test_optimizer_sgd),
        cmocka_unit_test(test_optimizer_sgd_with_zero),
        cmocka_unit_test(test_optimizer_others),
        cmocka_unit_test(test_scheduler_warmup_lr),
        cmocka_unit_test(test_scheduler_decay_and_cosine),
        cmocka_unit_test(test_scheduler_one_cycle),
        cmocka_unit_test(test_scheduler_lr_range_and_names),
        cmocka_unit_test(test_misc_top_level),
        cmocka_unit_test(test_activation_checkpointing_and_monitors),
        cmocka_unit_test(test_check_supported_refusals),
        cmocka_unit_test(test_check_supported_accepts),
        cmocka_unit_test(test_precision_supported),
        cmocka_unit_test(test_offload_optimizer_rules),
        cmocka_unit_test(test_offload_param_rules),
        cmocka_unit_test(test_activation_checkpointing_rules),
        cmocka_unit_test(test_checkpoint_interval),
        cmocka_unit_test(test_data_types),
        cmocka_unit_test(test_dtype_resolution),
        cmocka_unit_test(test_comm_dtype_supported),
        cmocka_unit_test(test_users_config),
        cmocka_unit_test(test_hf_style_config),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_notes_capped),
        cmocka_unit_test(test_type_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
