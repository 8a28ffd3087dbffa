/* The observability sections: tensorboard and csv_monitor, flops_profiler and
 * comms_logger read with DeepSpeed's defaults; wandb, comet, trackio and
 * checkpoint a warning that says what is ignored, a refusal under --strict. */
#include "tests/unit/config_test_helpers.h"

static void test_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 "}"), ZT_OK);
    assert_false(cfg.tensorboard.enabled);
    assert_string_equal(cfg.tensorboard.output_path, "");
    assert_string_equal(cfg.tensorboard.job_name, "DeepSpeedJobName");
    const zt_flops_profiler_config *f = &cfg.flops_profiler;
    assert_false(f->enabled);
    assert_int_equal(f->profile_step, 1);
    assert_int_equal(f->module_depth, -1);
    assert_int_equal(f->top_modules, 1);
    assert_true(f->detailed);
    assert_true(f->recompute_fwd_factor == 0.0);
    assert_string_equal(f->output_file, "");
    const zt_comms_logger_config *c = &cfg.comms_logger;
    assert_false(c->enabled || c->verbose || c->debug);
    assert_true(c->prof_all);
    assert_int_equal(c->prof_ops, 0);
}

static void test_sections_read(void **state)
{
    (void)state;
    assert_int_equal(parse("{" MB1 ", \"tensorboard\": {\"enabled\": true, \"output_path\": "
                           "\"logs/\", \"job_name\": \"gpt\"}, \"flops_profiler\": {\"enabled\": "
                           "true, \"profile_step\": 3, \"module_depth\": 1, \"top_modules\": 2, "
                           "\"detailed\": false, \"output_file\": \"prof.txt\", "
                           "\"recompute_fwd_factor\": 0.5}, \"comms_logger\": {\"enabled\": true, "
                           "\"verbose\": true, \"prof_all\": false, \"prof_ops\": "
                           "[\"all_reduce\", \"all_gather_into_tensor\", \"send\", "
                           "\"gather\"]}}"),
                     ZT_OK);
    assert_true(cfg.tensorboard.enabled);
    assert_string_equal(cfg.tensorboard.output_path, "logs/");
    assert_string_equal(cfg.tensorboard.job_name, "gpt");
    assert_int_equal(cfg.flops_profiler.profile_step, 3);
    assert_int_equal(cfg.flops_profiler.module_depth, 1);
    assert_int_equal(cfg.flops_profiler.top_modules, 2);
    assert_false(cfg.flops_profiler.detailed);
    assert_string_equal(cfg.flops_profiler.output_file, "prof.txt");
    assert_true(cfg.flops_profiler.recompute_fwd_factor == 0.5);
    assert_true(cfg.comms_logger.enabled && cfg.comms_logger.verbose);
    /* send runs between pipeline stages */
    assert_int_equal(cfg.comms_logger.prof_ops,
                     ZT_COMMS_OP_ALL_REDUCE | ZT_COMMS_OP_ALL_GATHER | ZT_COMMS_OP_SEND);
    assert_note("comms_logger.prof_ops: \"gather\" never runs in zerotrain");
    assert_int_equal(cfg.n_unbuilt, 0);
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);

    /* DeepSpeed's names of one collective all select it */
    assert_int_equal(parse("{" MB1 ", \"comms_logger\": {\"enabled\": true, \"prof_all\": false, "
                           "\"prof_ops\": [\"reduce_scatter_fn\", \"allgather_fn\", "
                           "\"broadcast\", \"all_to_all_single\"]}}"),
                     ZT_OK);
    assert_int_equal(cfg.comms_logger.prof_ops,
                     ZT_COMMS_OP_REDUCE_SCATTER | ZT_COMMS_OP_ALL_GATHER | ZT_COMMS_OP_BROADCAST |
                         ZT_COMMS_OP_ALL_TO_ALL);
    /* DeepSpeed logs whenever the section is present; enabled: false is honoured */
    assert_int_equal(parse("{" MB1 ", \"comms_logger\": {\"enabled\": false}}"), ZT_OK);
    assert_false(cfg.comms_logger.enabled);
    assert_note("comms_logger.enabled is false: no summary");
}

static void test_section_errors(void **state)
{
    (void)state;
    assert_fails("{" MB1 ", \"comms_logger\": {\"prof_ops\": [\"all_reduse\"]}}", ZT_ERR_CONFIG,
                 "comms_logger.prof_ops: \"all_reduse\" is not a communication operation; did "
                 "you mean \"all_reduce\"?");
    assert_fails("{" MB1 ", \"comms_logger\": {\"prof_ops\": \"all_reduce\"}}", ZT_ERR_CONFIG,
                 "expected a list of operation names");
    assert_fails("{" MB1 ", \"flops_profiler\": {\"module_depth\": -2}}", ZT_ERR_CONFIG,
                 "flops_profiler.module_depth: got -2, expected an integer >= -1");
    assert_fails("{" MB1 ", \"flops_profiler\": {\"top_modules\": 0}}", ZT_ERR_CONFIG,
                 "flops_profiler.top_modules: got 0, expected a positive integer");
    assert_fails("{" MB1 ", \"flops_profiler\": {\"profile_stp\": 2}}", ZT_ERR_CONFIG,
                 "did you mean `profile_step`?");
    assert_fails("{" MB1 ", \"tensorboard\": {\"enabled\": \"true\"}}", ZT_ERR_CONFIG,
                 "tensorboard.enabled: got \"true\", expected true or false");
    assert_fails("{" MB1 ", \"checkpoint\": {\"tag_validation\": \"Sometimes\"}}", ZT_ERR_CONFIG,
                 "checkpoint.tag_validation: got \"Sometimes\", expected one of \"Ignore\", "
                 "\"Warn\", \"Fail\"");
    assert_fails("{" MB1 ", \"checkpoint\": {\"load_universl\": true}}", ZT_ERR_CONFIG,
                 "did you mean `load_universal`?");
}

#define IGNORED                                                                                \
    "{" MB1 ", \"wandb\": {\"enabled\": true, \"project\": \"p\"}, \"comet\": {\"enabled\": "   \
    "true}, \"trackio\": {\"enabled\": true}, \"checkpoint\": {\"tag_validation\": \"warn\", "  \
    "\"use_node_local_storage\": true, \"parallel_write\": {\"pipeline_stage\": true}}}"

static void test_ignored_sections(void **state)
{
    (void)state;
    assert_int_equal(parse(IGNORED), ZT_OK);
    assert_note("warning: wandb.enabled: zerotrain has no Weights & Biases client: nothing is "
                "sent and the section is ignored");
    assert_note("warning: comet.enabled: zerotrain has no Comet client");
    assert_note("warning: trackio.enabled: zerotrain has no trackio client");
    assert_note("warning: checkpoint: zerotrain saves and loads its own checkpoint format "
                "(--save-dir, --resume; docs/checkpoints.md), so DeepSpeed's tag_validation, "
                "use_node_local_storage, parallel_write are ignored");
    assert_int_equal(zt_config_check_supported(&cfg), ZT_OK);
    /* off, or empty: nothing to say */
    assert_int_equal(parse("{" MB1 ", \"wandb\": {\"enabled\": false}, \"checkpoint\": {}}"),
                     ZT_OK);
    assert_false(has_note("warning:"));

    /* --strict refuses each of them, all in one report */
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.strict = true;
    zt_status_clear();
    assert_int_equal(parse_full(IGNORED, 1, &ov), ZT_ERR_UNSUPPORTED);
    assert_msg("t.json: 4 errors:");
    assert_msg("wandb.enabled: zerotrain has no Weights & Biases client: nothing is sent and the "
               "section is ignored (tensorboard and csv_monitor write the same scalars locally) "
               "(--strict refuses settings zerotrain ignores)");
    assert_msg("t.json:1: checkpoint: zerotrain saves");
    assert_contains(zt_status_hint(), "lists all errors");
    zt_status_clear();
    assert_int_equal(parse_full("{" MB1 ", \"wandb\": {\"enabled\": true}}", 1, &ov),
                     ZT_ERR_UNSUPPORTED);
    assert_contains(zt_status_hint(), "run without --strict");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_sections_read),
        cmocka_unit_test(test_section_errors),
        cmocka_unit_test(test_ignored_sections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
