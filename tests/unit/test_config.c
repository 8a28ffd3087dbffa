/*
 * Unit tests for engine/config (DeepSpeed 0.19.6 config semantics): the text
 * and its keys (hjson-isms and parse errors, unknown keys, types and ranges),
 * whole configs, files, notes and names. The sections have their own
 * tests/unit/test_config_*.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

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
    /* More "auto" values than note slots, one note each. */
    static const struct {
        const char *section;
        const char *keys[24];
    } autos[] = {
        {"zero_optimization",
         {"allgather_bucket_size", "sub_group_size", "contiguous_gradients", "reduce_scatter",
          "allgather_partitions", "load_from_fp32_weights", "elastic_checkpoint",
          "round_robin_gradients", "ignore_unused_parameters", "zero_hpz_partition_size",
          "zero_quantized_weights", "zero_quantized_gradients", "mics_shard_size",
          "stage3_model_persistence_threshold", "stage3_max_live_parameters",
          "stage3_max_reuse_distance", "use_multi_rank_bucket_allreduce"}},
        {"fp16",
         {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
          "hysteresis", "consecutive_hysteresis", "min_loss_scale"}},
        {"bf16",
         {"enabled", "immediate_grad_update", "check_grad_overflow", "bf16_optimizer_states",
          "bf16_master_weights_and_grads"}},
        {"flops_profiler",
         {"enabled", "recompute_fwd_factor", "profile_step", "module_depth", "top_modules",
          "detailed", "output_file"}},
        {"comms_logger", {"enabled", "verbose", "prof_all", "debug"}},
        {"csv_monitor", {"enabled", "output_path", "job_name"}},
        {"tensorboard", {"enabled", "output_path", "job_name"}},
        {"activation_checkpointing",
         {"partition_activations", "cpu_checkpointing", "number_checkpoints",
          "synchronize_checkpoint_boundary", "profile"}},
        {"", {"steps_per_print", "gradient_clipping", "prescale_gradients",
              "gradient_predivide_factor", "wall_clock_breakdown", "memory_breakdown"}},
    };
    char json[8192];
    int n = snprintf(json, sizeof json, "{" MB1);
    int count = 0;
    for (size_t s = 0; s < sizeof autos / sizeof autos[0]; s++) {
        if (autos[s].section[0])
            n += snprintf(json + n, sizeof json - (size_t)n, ", \"%s\": {", autos[s].section);
        for (size_t k = 0; k < 24 && autos[s].keys[k]; k++, count++)
            n += snprintf(json + n, sizeof json - (size_t)n, "%s\"%s\": \"auto\"",
                          k == 0 && autos[s].section[0] ? "" : ", ", autos[s].keys[k]);
        if (autos[s].section[0])
            n += snprintf(json + n, sizeof json - (size_t)n, "}");
    }
    n += snprintf(json + n, sizeof json - (size_t)n,
                  ", \"data_types\": {\"grad_accum_dtype\": \"auto\"}, \"optimizer\": "
                  "{\"type\": \"Adam\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\", "
                  "\"eps\": \"auto\", \"weight_decay\": \"auto\", \"bias_correction\": \"auto\", "
                  "\"adam_w_mode\": \"auto\", \"set_grad_none\": \"auto\"}}}");
    count += 8;
    assert_true((size_t)n < sizeof json);
    assert_true(count > ZT_CONFIG_MAX_NOTES);
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
        cmocka_unit_test(test_comments_and_trailing_commas),
        cmocka_unit_test(test_parse_error_line_after_comments),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_unknown_top_level),
        cmocka_unit_test(test_unknown_nested),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_sizes_and_stage),
        cmocka_unit_test(test_users_config),
        cmocka_unit_test(test_hf_style_config),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_notes_capped),
        cmocka_unit_test(test_type_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
