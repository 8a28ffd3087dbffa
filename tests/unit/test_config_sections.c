/*
 * Unit tests for engine/config: the smaller sections (top-level keys,
 * activation_checkpointing, monitors) and zt_config_check_supported.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

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
    assert_int_equal(cfg.n_unbuilt, 0);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
}

/* ------------------------------------------------------------ check_supported */


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
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"zero_hpz_partition_size\": 8}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 2, "
                   "\"zero_quantized_weights\": true}}",
                   "zero_quantized_weights with mics_shard_size 2: ZeRO++ quantization of "
                   "MiCS's shard-group collectives is not implemented");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"mics_shard_size\": 4}}",
                   "mics_shard_size 4: MiCS partitions parameters, which only ZeRO stage 3 does");
    assert_refused("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 2, "
                   "\"zero_hpz_partition_size\": 2}}",
                   "MiCS and hpZ both decide");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 2}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_refused("{" MB1 ", \"amp\": {\"enabled\": true}}",
                   "amp: this DeepSpeed feature is not implemented yet");
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
    /* Without number_checkpoints DeepSpeed asserts; Megatron-style callers pass
     * their layer count, here one checkpoint per unit. */
    for (int null_given = 0; null_given < 2; null_given++) {
        assert_int_equal(parse(null_given ? "{" MB1 ", \"activation_checkpointing\": "
                                            "{\"contiguous_memory_optimization\": true, "
                                            "\"partition_activations\": true, "
                                            "\"number_checkpoints\": null}}"
                                          : "{" MB1 ", \"activation_checkpointing\": "
                                            "{\"contiguous_memory_optimization\": true, "
                                            "\"partition_activations\": true}}"),
                         ZT_OK);
        assert_true(cfg.activation_checkpointing.number_checkpoints_from_model);
        assert_int_equal(cfg.activation_checkpointing.number_checkpoints, -1);
        assert_note("number_checkpoints not given with contiguous_memory_optimization -> the "
                    "model's unit count");
        assert_int_equal(zt_config_checkpoint_interval(&cfg, 8), 1);
        assert_int_equal(zt_config_checkpoint_interval(&cfg, 1), 1);
    }
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.activation_checkpoint_interval = 3;
    assert_int_equal(parse_full("{" MB1 ", \"activation_checkpointing\": "
                                "{\"contiguous_memory_optimization\": true, "
                                "\"partition_activations\": true}}",
                                1, &ov),
                     ZT_OK);
    assert_int_equal(zt_config_checkpoint_interval(&cfg, 8), 3);
    assert_note("the command-line checkpoint interval 3 takes precedence over one checkpoint per "
                "unit");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_misc_top_level),
        cmocka_unit_test(test_activation_checkpointing_and_monitors),
        cmocka_unit_test(test_check_supported_refusals),
        cmocka_unit_test(test_check_supported_accepts),
        cmocka_unit_test(test_activation_checkpointing_rules),
        cmocka_unit_test(test_checkpoint_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
