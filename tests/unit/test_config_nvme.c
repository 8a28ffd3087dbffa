/* Unit tests for engine/config: the aio section and the nvme offload rules
 * (engine/config/parse_nvme.c, docs/nvme.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

#define ZERO3 "\"zero_optimization\": {\"stage\": 3, "
#define OO_NVME "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme\""
#define OP_NVME "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme\""

static void test_aio_defaults_and_keys(void **state)
{
    (void)state;
    /* DeepSpeed's defaults (runtime/swap_tensor/constants.py). */
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    assert_int_equal(cfg.aio.block_size, 1048576);
    assert_int_equal(cfg.aio.queue_depth, 8);
    assert_int_equal(cfg.aio.thread_count, 1);
    assert_false(cfg.aio.single_submit);
    assert_true(cfg.aio.overlap_events);
    assert_false(cfg.aio.use_gds);
    assert_false(cfg.aio_present);

    assert_int_equal(parse("{" MB1 ", " ZERO3 OO_NVME "}}, \"aio\": {\"block_size\": 262144, "
                           "\"queue_depth\": 32, \"intra_op_parallelism\": 4, \"single_submit\": "
                           "true, \"overlap_events\": false}}"),
                     ZT_OK);
    assert_int_equal(cfg.aio.block_size, 262144);
    assert_int_equal(cfg.aio.queue_depth, 32);
    assert_int_equal(cfg.aio.thread_count, 4);
    assert_true(cfg.aio.single_submit && !cfg.aio.overlap_events);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);

    /* thread_count: DeepSpeed's old name, read here and noted. */
    assert_int_equal(parse("{" MB1 ", " ZERO3 OO_NVME "}}, \"aio\": {\"thread_count\": 2}}"),
                     ZT_OK);
    assert_int_equal(cfg.aio.thread_count, 2);
    assert_note("aio.thread_count is DeepSpeed's old name of intra_op_parallelism");
    assert_fails("{" MB1 ", \"aio\": {\"thread_count\": 2, \"intra_op_parallelism\": 2}}",
                 ZT_ERR_CONFIG, "name the same setting");

    assert_fails("{" MB1 ", \"aio\": {\"block_size\": 1000000}}", ZT_ERR_CONFIG,
                 "aio.block_size: 1000000 bytes: swap files are read and written with O_DIRECT "
                 "in multiples of 4096 bytes");
    assert_fails("{" MB1 ", \"aio\": {\"queue_depth\": 0}}", ZT_ERR_CONFIG, "aio.queue_depth");
    assert_fails("{" MB1 ", \"aio\": {\"intra_op_parallelism\": 33}}", ZT_ERR_CONFIG,
                 "aio.intra_op_parallelism");
    assert_fails("{" MB1 ", \"aio\": {\"queue_dept\": 4}}", ZT_ERR_CONFIG,
                 "did you mean `queue_depth`");
    assert_fails("{" MB1 ", \"aio\": 4}", ZT_ERR_CONFIG, "aio");

    /* aio without an nvme device does nothing: said so */
    assert_int_equal(parse("{" MB1 ", \"aio\": {\"queue_depth\": 4}}"), ZT_OK);
    assert_note("aio has no effect without an \"nvme\" offload device");

    assert_refused("{" MB1 ", " ZERO3 OO_NVME "}}, \"aio\": {\"use_gds\": true}}",
                   "aio.use_gds: GPUDirect Storage is not implemented");
}

static void test_nvme_needs_a_path(void **state)
{
    (void)state;
    static const char *const needle =
        "\"nvme_path\" in DeepSpeed Config cannot be None if remote device is nvme";
    assert_fails("{" MB1 ", " ZERO3 "\"offload_param\": {\"device\": \"nvme\"}}}", ZT_ERR_CONFIG,
                 needle);
    assert_msg("zero_optimization.offload_param.nvme_path");
    assert_fails("{" MB1 ", " ZERO3 "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
                 "null}}}",
                 ZT_ERR_CONFIG, needle);
    assert_fails("{" MB1 ", \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
                 "{\"device\": \"nvme\", \"nvme_path\": \"\"}}}",
                 ZT_ERR_CONFIG, needle);
    assert_msg("zero_optimization.offload_optimizer.nvme_path");
    assert_contains(zt_status_hint(), "nvme_path");
    /* a path with cpu offload means nothing and is fine */
    assert_int_equal(parse("{" MB1 ", " ZERO3 "\"offload_param\": {\"device\": \"cpu\", "
                           "\"nvme_path\": \"/x\"}}}"),
                     ZT_OK);
}

static void test_nvme_buffers(void **state)
{
    (void)state;
    /* Adam swaps master, exp_avg, exp_avg_sq: 3 buffers hold one sub-group. */
    assert_fails("{" MB1 ", " ZERO3 OO_NVME ", \"buffer_count\": 2}}}", ZT_ERR_CONFIG,
                 "zero_optimization.offload_optimizer.buffer_count: 2 buffers cannot hold one "
                 "sub-group: AdamW swaps 3 tensors per sub-group (fp32 master weights, exp_avg, "
                 "exp_avg_sq)");
    assert_contains(zt_status_hint(), "buffer_count >= 3");
    assert_int_equal(parse("{" MB1 ", " ZERO3 OO_NVME ", \"buffer_count\": 3}}}"), ZT_OK);
    /* SGD with momentum swaps 2, without 1. */
    static const char *const sgd = "\"zero_allow_untested_optimizer\": true, \"optimizer\": "
                                   "{\"type\": \"SGD\", \"params\": {\"lr\": 0.1, "
                                   "\"momentum\": 0.9}}";
    char json[512];
    snprintf(json, sizeof json, "{" MB1 ", %s, " ZERO3 OO_NVME ", \"buffer_count\": 1}}}", sgd);
    assert_fails(json, ZT_ERR_CONFIG, "SGD swaps 2 tensors per sub-group (fp32 master weights, "
                                      "momentum_buffer)");
    snprintf(json, sizeof json, "{" MB1 ", %s, " ZERO3 OO_NVME ", \"buffer_count\": 2}}}", sgd);
    assert_int_equal(parse(json), ZT_OK);
    /* DeepSpeed's default 4 holds one Adam sub-group: pipelining cannot
     * overlap, which is said. */
    assert_int_equal(parse("{" MB1 ", " ZERO3 OO_NVME ", \"pipeline_read\": true, "
                           "\"pipeline_write\": true}}}"),
                     ZT_OK);
    assert_int_equal(cfg.zero.offload_optimizer.buffer_count, 4);
    assert_note("buffer_count 4 holds 1 sub-group(s) of 3 tensors, so pipeline_read/"
                "pipeline_write cannot overlap fully (9 buffers would)");
    assert_int_equal(parse("{" MB1 ", " ZERO3 OO_NVME ", \"pipeline_read\": true, "
                           "\"buffer_count\": 6}}}"),
                     ZT_OK);
    assert_false(has_note("cannot overlap"));

    assert_fails("{" MB1 ", " ZERO3 OP_NVME ", \"buffer_count\": 0}}}", ZT_ERR_CONFIG,
                 "zero_optimization.offload_param.buffer_count: 0 buffers cannot swap a "
                 "parameter shard in");
    assert_fails("{" MB1 ", " ZERO3 OP_NVME ", \"buffer_size\": 0}}}", ZT_ERR_CONFIG,
                 "zero_optimization.offload_param.buffer_size");
    /* DeepSpeed's parameter defaults */
    assert_int_equal(parse("{" MB1 ", " ZERO3 OP_NVME "}}}"), ZT_OK);
    assert_int_equal(cfg.zero.offload_param.buffer_count, 5);
    assert_int_equal(cfg.zero.offload_param.buffer_size, 100000000);
    assert_int_equal(cfg.zero.offload_param.max_in_cpu, 1000000000);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aio_defaults_and_keys),
        cmocka_unit_test(test_nvme_needs_a_path),
        cmocka_unit_test(test_nvme_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
