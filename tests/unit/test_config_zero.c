/* Unit tests for engine/config: zero_optimization and its offload rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

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

/* ZeRO++ quantization: accepted at stage 3 (with hpZ too), DeepSpeed's
 * refusal of qgZ without reduce_scatter kept with its message, and the
 * nontrainable-weights switch noted as doing nothing here. */
static void test_zero_quantized(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"zero_quantized_weights\": true, \"zero_quantized_gradients\": true, "
                           "\"zero_hpz_partition_size\": 2}}"),
                     ZT_OK);
    assert_true(cfg.zero.zero_quantized_weights && cfg.zero.zero_quantized_gradients);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"reduce_scatter\": false, "
                 "\"zero_quantized_gradients\": true}}",
                 ZT_ERR_CONFIG,
                 "when enable all_to_all_reduce, reduce_scatter should also be enabled for data "
                 "type checks.");
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"reduce_scatter\": "
                           "false, \"zero_quantized_weights\": true}}"),
                     ZT_OK);
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, "
                           "\"zero_quantized_nontrainable_weights\": true}}"),
                     ZT_OK);
    assert_note("zero_quantized_nontrainable_weights has no effect in zerotrain: every "
                "parameter of its models is trainable");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);

    /* Below stage 3 DeepSpeed ignores the ZeRO++ keys: a warning here, and
     * --strict refuses them. */
    const char *stage2 = "{" MB1 ", \"zero_optimization\": {\"stage\": 2, "
                         "\"zero_hpz_partition_size\": 8, \"zero_quantized_weights\": true, "
                         "\"zero_quantized_gradients\": true}}";
    assert_int_equal(parse(stage2), ZT_OK);
    assert_note("warning: zero_optimization.zero_hpz_partition_size: ignored at stage 2, as "
                "DeepSpeed does: ZeRO++ acts on stage 3's parameter gathers and gradient "
                "reduce-scatter");
    assert_note("warning: zero_optimization.zero_quantized_weights: ignored at stage 2");
    assert_note("warning: zero_optimization.zero_quantized_gradients: ignored at stage 2");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.strict = true;
    zt_status_clear();
    assert_int_equal(parse_full(stage2, 1, &ov), ZT_ERR_UNSUPPORTED);
    assert_msg("zero_optimization.zero_hpz_partition_size: ZeRO++ acts on stage 3's parameter "
               "gathers and gradient reduce-scatter, so stage 2 ignores it, as DeepSpeed does "
               "(--strict refuses settings zerotrain ignores)");
    assert_contains(zt_status_hint(), "run without --strict");
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
        assert_int_equal(parse(json), ZT_OK); /* swapped at every stage: test_config_nvme.c */
        assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
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
    assert_int_equal(parse("{" MB1 ", \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                           "{\"device\": \"nvme\", \"nvme_path\": \"/nvme\"}}}"),
                     ZT_OK);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_defaults),
        cmocka_unit_test(test_zero_overlap_comm),
        cmocka_unit_test(test_zero_boolean_form),
        cmocka_unit_test(test_zero_deprecated),
        cmocka_unit_test(test_zero_rejections),
        cmocka_unit_test(test_zero_quantized),
        cmocka_unit_test(test_zero_resolution),
        cmocka_unit_test(test_offload_optimizer_rules),
        cmocka_unit_test(test_offload_param_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
