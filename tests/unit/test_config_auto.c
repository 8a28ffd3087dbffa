/* "auto" as HuggingFace's integration resolves it (reference:
 * ../shared/reference/deepspeed-more.md section 4): fp16/bf16 from
 * --fp16/--bf16; reduce_bucket_size = H*H, and at stage 3
 * stage3_prefetch_bucket_size = int(0.9*H*H) and
 * stage3_param_persistence_threshold = 10*H from the hidden size H;
 * total_num_steps from the run; warmup_num_steps from --warmup-steps (v5: a
 * count when >= 1, else ceil(total * fraction)). */
#include "tests/unit/config_test_helpers.h"

#include <stdio.h>

static zt_status resolve(int64_t hidden, int64_t total, double warmup)
{
    zt_config_run run = {.hidden_size = hidden, .total_steps = total, .warmup_steps = warmup};
    zt_status_clear();
    return zt_config_resolve_run(&cfg, &run, "t.json");
}

#define ZERO_AUTO(stage)                                                                       \
    "{" MB1 ", \"zero_optimization\": {\"stage\": " #stage ", \"reduce_bucket_size\": \"auto\", " \
    "\"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": "     \
    "\"auto\"}}"

static void test_hidden_size_stage3(void **state)
{
    (void)state;
    assert_int_equal(parse(ZERO_AUTO(3)), ZT_OK);
    assert_int_equal(cfg.auto_pending,
                     ZT_AUTO_REDUCE_BUCKET | ZT_AUTO_PREFETCH | ZT_AUTO_PERSISTENCE);
    assert_string_equal(zt_config_pending_auto(&cfg), "zero_optimization.reduce_bucket_size");
    assert_int_equal(resolve(128, -1, -1), ZT_OK);
    assert_int_equal(cfg.zero.reduce_bucket_size, 128 * 128);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 14745); /* int(0.9 * 16384 = 14745.6) */
    assert_int_equal(cfg.zero.stage3_param_persistence_threshold, 1280);
    assert_int_equal(cfg.auto_pending, 0);
    assert_null(zt_config_pending_auto(&cfg));
    assert_note("zero_optimization.reduce_bucket_size \"auto\" -> 16384 (hidden size 128 squared, "
                "as HF)");
    assert_note("stage3_prefetch_bucket_size \"auto\" -> 14745 (int(0.9 x 128^2), as HF)");
    assert_note("stage3_param_persistence_threshold \"auto\" -> 1280 (10 x hidden size 128, as "
                "HF)");
    /* the other spellings of the same keys */
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"prefetch_bucket_size\": \"auto\", \"param_persistence_threshold\": "
                           "\"auto\"}}"),
                     ZT_OK);
    assert_int_equal(resolve(768, -1, -1), ZT_OK);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 530841); /* int(0.9 * 589824) */
    assert_int_equal(cfg.zero.stage3_param_persistence_threshold, 7680);
    assert_int_equal(cfg.zero.reduce_bucket_size, 500000000); /* not "auto": untouched */
}

static void test_hidden_size_below_stage3(void **state)
{
    (void)state;
    /* HF fills reduce_bucket_size at any stage, the stage3_* keys only at stage 3 */
    assert_int_equal(parse(ZERO_AUTO(2)), ZT_OK);
    assert_int_equal(resolve(64, -1, -1), ZT_OK);
    assert_int_equal(cfg.zero.reduce_bucket_size, 4096);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 50000000);
    assert_int_equal(cfg.zero.stage3_param_persistence_threshold, 100000);
    assert_note("stage3_prefetch_bucket_size \"auto\" -> 50000000 (default: not stage 3)");
}

static void test_hidden_size_unknown(void **state)
{
    (void)state;
    assert_int_equal(parse(ZERO_AUTO(3)), ZT_OK);
    assert_int_equal(resolve(0, 10, -1), ZT_ERR_CONFIG);
    assert_msg("t.json: 3 errors:");
    assert_msg("zero_optimization.stage3_param_persistence_threshold \"auto\" needs the model's "
               "hidden size");
    assert_msg("neither `hidden_size` nor `hidden_sizes`");
    /* nothing "auto": nothing needed */
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    assert_int_equal(resolve(0, -1, -1), ZT_OK);
}

#define DECAY_AUTO                                                                             \
    "{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": " \
    "\"auto\", \"warmup_num_steps\": \"auto\", \"warmup_min_lr\": \"auto\", \"warmup_max_lr\": " \
    "\"auto\"}}}"

static void test_run_length(void **state)
{
    (void)state;
    assert_int_equal(parse(DECAY_AUTO), ZT_OK);
    assert_int_equal(cfg.auto_pending, ZT_AUTO_TOTAL_STEPS | ZT_AUTO_WARMUP_STEPS);
    assert_string_equal(zt_config_pending_auto(&cfg), "scheduler.params.total_num_steps");
    /* no run length (--estimate-memory): left pending */
    assert_int_equal(resolve(32, -1, -1), ZT_OK);
    assert_int_equal(cfg.auto_pending, ZT_AUTO_TOTAL_STEPS | ZT_AUTO_WARMUP_STEPS);
    /* HF's default warmup_steps is 0 */
    assert_int_equal(resolve(32, 600, -1), ZT_OK);
    assert_int_equal(cfg.scheduler.total_num_steps, 600);
    assert_int_equal(cfg.scheduler.warmup_num_steps, 0);
    assert_int_equal(cfg.auto_pending, 0);
    assert_note("scheduler.params.total_num_steps \"auto\" -> 600 (the run's steps)");
    assert_note("warmup_num_steps \"auto\" -> 0 (HF's default warmup_steps; --warmup-steps sets "
                "it)");
    assert_true(cfg.scheduler.warmup_max_lr < 0); /* "auto": the optimizer lr */
    /* a count */
    assert_int_equal(parse(DECAY_AUTO), ZT_OK);
    assert_int_equal(resolve(32, 600, 50), ZT_OK);
    assert_int_equal(cfg.scheduler.warmup_num_steps, 50);
    /* a fraction: ceil(total * f) */
    assert_int_equal(parse(DECAY_AUTO), ZT_OK);
    assert_int_equal(resolve(32, 601, 0.1), ZT_OK);
    assert_int_equal(cfg.scheduler.warmup_num_steps, 61);
    assert_note("(ceil(601 steps x --warmup-steps 0.1))");
    /* more warmup than steps: DeepSpeed's note */
    assert_int_equal(parse(DECAY_AUTO), ZT_OK);
    assert_int_equal(resolve(32, 5, 10), ZT_OK);
    assert_note("total_num_steps 5 is less than warmup_num_steps 10");
    /* WarmupLR has no total_num_steps; its warmup_num_steps follows the same rule */
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                           "{\"warmup_num_steps\": \"auto\"}}}"),
                     ZT_OK);
    assert_int_equal(cfg.auto_pending, ZT_AUTO_WARMUP_STEPS);
    assert_int_equal(resolve(32, 100, 0.25), ZT_OK);
    assert_int_equal(cfg.scheduler.warmup_num_steps, 25);
    /* a missing total_num_steps is still DeepSpeed's error, with the way out */
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"WarmupCosineLR\"}}", ZT_ERR_CONFIG,
                 "total_num_steps is required by WarmupCosineLR");
    assert_contains(zt_status_hint(), "\"auto\" takes the run's length");
}

static void test_precision_flags(void **state)
{
    (void)state;
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    assert_false(ov.fp16 || ov.bf16 || ov.strict);
    /* "auto" without a flag: false, as HF */
    assert_int_equal(parse("{" MB1 ", \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": "
                           "\"auto\"}}"),
                     ZT_OK);
    assert_false(cfg.fp16.enabled || cfg.bf16.enabled);
    assert_note("fp16.enabled \"auto\" -> false (no --fp16)");
    assert_note("bf16.enabled \"auto\" -> false (no --bf16)");
    /* --fp16 fills "auto" and a missing key or section */
    ov.fp16 = true;
    assert_int_equal(parse_full("{" MB1 ", \"fp16\": {\"enabled\": \"auto\", \"loss_scale\": 0}, "
                                "\"bf16\": {\"enabled\": \"auto\"}}",
                                1, &ov),
                     ZT_OK);
    assert_true(cfg.fp16.enabled);
    assert_false(cfg.bf16.enabled);
    assert_note("fp16.enabled \"auto\" -> true (--fp16)");
    assert_int_equal(parse_full("{" MB1 "}", 1, &ov), ZT_OK);
    assert_true(cfg.fp16.enabled);
    assert_note("fp16.enabled not in config -> true (--fp16)");
    assert_int_equal(parse_full("{" MB1 ", \"fp16\": {\"enabled\": true}}", 1, &ov), ZT_OK);
    assert_true(cfg.fp16.enabled);
    /* an explicit false contradicts the flag */
    zt_status_clear();
    assert_int_equal(parse_full("{" MB1 ", \"fp16\": {\"enabled\": false}}", 1, &ov),
                     ZT_ERR_CONFIG);
    assert_msg("fp16.enabled: false in the config contradicts --fp16 on the command line");
    /* --fp16 with bf16 on in the config: DeepSpeed's refusal */
    zt_status_clear();
    assert_int_equal(parse_full("{" MB1 ", \"bf16\": {\"enabled\": true}}", 1, &ov),
                     ZT_ERR_CONFIG);
    assert_msg("bfloat16 and fp16 modes cannot be simultaneously enabled");
    /* --bf16, also under the old section name */
    ov.fp16 = false;
    ov.bf16 = true;
    assert_int_equal(parse_full("{" MB1 ", \"bfloat16\": {\"enabled\": \"auto\"}}", 1, &ov), ZT_OK);
    assert_true(cfg.bf16.enabled);
    assert_note("bfloat16.enabled \"auto\" -> true (--bf16)");
    /* without the flag an explicit value stands (HF would call it a mismatch) */
    assert_int_equal(parse("{" MB1 ", \"fp16\": {\"enabled\": true}}"), ZT_OK);
    assert_true(cfg.fp16.enabled);
}

/* HF's ZeRO-3 template, as scripts/configs/hf-zero3-auto.json has it. */
static void test_hf_template(void **state)
{
    (void)state;
    const char *json =
        "{\"fp16\": {\"enabled\": \"auto\", \"loss_scale\": 0, \"loss_scale_window\": 1000, "
        "\"initial_scale_power\": 16, \"hysteresis\": 2, \"min_loss_scale\": 1},"
        " \"bf16\": {\"enabled\": \"auto\"},"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\","
        " \"eps\": \"auto\", \"weight_decay\": \"auto\"}},"
        " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": \"auto\","
        " \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\", \"total_num_steps\": "
        "\"auto\"}},"
        " \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\","
        " \"pin_memory\": true}, \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true},"
        " \"overlap_comm\": true, \"contiguous_gradients\": true, \"sub_group_size\": 1e9,"
        " \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\","
        " \"stage3_param_persistence_threshold\": \"auto\", \"stage3_max_live_parameters\": 1e9,"
        " \"stage3_max_reuse_distance\": 1e9, \"stage3_gather_16bit_weights_on_model_save\": "
        "true},"
        " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\","
        " \"steps_per_print\": 2000, \"train_batch_size\": \"auto\","
        " \"train_micro_batch_size_per_gpu\": \"auto\", \"wall_clock_breakdown\": false}";
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.micro_batch_size = 4;
    ov.gradient_accumulation_steps = 2;
    ov.lr = 3e-4;
    ov.bf16 = true;
    zt_status_clear();
    assert_int_equal(zt_config_load_string(json, "t.json", &ov, 2, &cfg), ZT_OK);
    assert_int_equal(cfg.train_batch_size, 16); /* world x micro x GAS */
    assert_true(cfg.bf16.enabled && !cfg.fp16.enabled);
    assert_true(cfg.optimizer.lr == 3e-4);
    assert_int_equal(resolve(256, 1000, 0.05), ZT_OK);
    assert_int_equal(cfg.zero.reduce_bucket_size, 65536);
    assert_int_equal(cfg.zero.stage3_prefetch_bucket_size, 58982);
    assert_int_equal(cfg.zero.stage3_param_persistence_threshold, 2560);
    assert_int_equal(cfg.scheduler.total_num_steps, 1000);
    assert_int_equal(cfg.scheduler.warmup_num_steps, 50);
    assert_null(zt_config_pending_auto(&cfg));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_size_stage3),
        cmocka_unit_test(test_hidden_size_below_stage3),
        cmocka_unit_test(test_hidden_size_unknown),
        cmocka_unit_test(test_run_length),
        cmocka_unit_test(test_precision_flags),
        cmocka_unit_test(test_hf_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
