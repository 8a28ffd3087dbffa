/* Unit tests for engine/config: fp16 / bf16, data_types and the dtype queries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

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
    assert_int_equal(cfg.n_unbuilt, 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_bf16),
        cmocka_unit_test(test_precision_supported),
        cmocka_unit_test(test_data_types),
        cmocka_unit_test(test_dtype_resolution),
        cmocka_unit_test(test_comm_dtype_supported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
