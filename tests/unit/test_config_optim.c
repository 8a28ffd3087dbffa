/* Unit tests for engine/config: the optimizer and scheduler sections. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/config/config.h"
#include "tests/unit/config_test_helpers.h"

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
    /* "auto" waits for the run length (test_config_auto.c) */
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                           "{\"total_num_steps\": \"auto\"}}}"),
                     ZT_OK);
    assert_int_equal(cfg.auto_pending, ZT_AUTO_TOTAL_STEPS);
    assert_fails("{" MB1 ", \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
                 "{\"cycle_min_lr\": \"auto\", \"cycle_max_lr\": 0.1}}}",
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

/* How many notes are exactly `text`. */
static int notes_equal(const char *text)
{
    int n = 0;
    for (int i = 0; i < cfg.n_notes; i++)
        n += strcmp(cfg.notes[i], text) == 0;
    return n;
}

/* DeepSpeed's WarmupDecayLR and WarmupCosineLR warn (logger.warning, at
 * construction) when total_num_steps < max(2, warmup_num_steps), printing
 * the warmup as given; WarmupLR has no total and never does. One warning
 * (rank 0 prints the config's notes once), whether the lengths are written
 * or resolved from the run ("auto": HF sets total_num_steps to the run's
 * steps, so a warmup longer than the run is said). */
static void test_scheduler_warmup_longer_than_total(void **state)
{
    (void)state;
    const char *w1000 = "warning: total_num_steps 5 is less than warmup_num_steps 1000";
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                           "{\"total_num_steps\": 5}}}"),
                     ZT_OK);
    assert_int_equal(notes_equal(w1000), 1);
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                           "{\"total_num_steps\": 5}}}"),
                     ZT_OK);
    assert_int_equal(notes_equal(w1000), 1);
    /* max(2, warmup): 1 < 2 although warmup is 0; 2 is not; equal is not. */
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                           "{\"total_num_steps\": 1, \"warmup_num_steps\": 0}}}"),
                     ZT_OK);
    assert_int_equal(notes_equal("warning: total_num_steps 1 is less than warmup_num_steps 0"),
                     1);
    const char *none[] = {
        "{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
        "{\"total_num_steps\": 2, \"warmup_num_steps\": 0}}}",
        "{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
        "{\"total_num_steps\": 10, \"warmup_num_steps\": 10}}}",
        "{" MB1 ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
        "{\"warmup_num_steps\": 1000}}}",
    };
    for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
        assert_int_equal(parse(none[i]), ZT_OK);
        assert_false(has_note("is less than warmup_num_steps"));
    }
    /* Resolved from the run: 5 steps against the default warmup of 1000. */
    assert_int_equal(parse("{" MB1 ", \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
                           "{\"total_num_steps\": \"auto\"}}}"),
                     ZT_OK);
    assert_false(has_note("is less than warmup_num_steps"));
    zt_config_run run = {.total_steps = 5, .warmup_steps = -1};
    assert_int_equal(zt_config_resolve_run(&cfg, &run, "t.json"), ZT_OK);
    assert_int_equal(notes_equal(w1000), 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimizer_default),
        cmocka_unit_test(test_optimizer_adam_defaults),
        cmocka_unit_test(test_optimizer_adam_w_mode),
        cmocka_unit_test(test_optimizer_adam_errors),
        cmocka_unit_test(test_optimizer_sgd),
        cmocka_unit_test(test_optimizer_sgd_with_zero),
        cmocka_unit_test(test_optimizer_others),
        cmocka_unit_test(test_scheduler_warmup_lr),
        cmocka_unit_test(test_scheduler_decay_and_cosine),
        cmocka_unit_test(test_scheduler_warmup_longer_than_total),
        cmocka_unit_test(test_scheduler_one_cycle),
        cmocka_unit_test(test_scheduler_lr_range_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
