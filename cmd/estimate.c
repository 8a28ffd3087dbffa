/*
 * estimate: --estimate-memory. Plans every stage for G x N ranks through
 * engine/train/estimate.h, rank 0 prints (and writes --report), nothing
 * trains. Every rank computes the same plan so a config error is agreed on
 * like a training run's.
 */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/exit.h"
#include "engine/config/config.h"
#include "engine/train/estimate.h"
#include "models/registry.h"

int cmd_estimate(zt_world *w, const cmd_train_flags *f)
{
    int num_gpus = f->num_gpus > 0 ? (int)f->num_gpus : w->local_size;
    int num_nodes = f->num_nodes > 0 ? (int)f->num_nodes : 1;
    int rc;
    /* The flags were capped; this run's own ranks per node may still exceed. */
    if ((int64_t)num_gpus * num_nodes > ZT_ESTIMATE_MAX_WORLD)
        return cmd_agreed_failure(
            w, zt_fail(ZT_ERR_USAGE, "give --num-gpus and --num-nodes",
                       "%d GPU(s) per node x %d node(s) is more than %d ranks", num_gpus,
                       num_nodes, ZT_ESTIMATE_MAX_WORLD));
    /* Without a config: DeepSpeed's defaults with an Adam optimizer; the
     * batch and lr flags fill the "auto" values as for any config. A config
     * written for another world size is rescaled to this one (noted). */
    zt_config cfg;
    zt_config_overrides ov = f->ov;
    ov.rescale_batch = true;
    zt_status st = f->config_path
                       ? zt_config_parse_file(f->config_path, &ov, num_gpus * num_nodes, &cfg)
                       : zt_config_parse_default(&ov, num_gpus * num_nodes, &cfg);
    /* Its table is one rank holding every unit; a pipeline stage holds some
     * units and other buffers, which only a run measures. */
    if (st == ZT_OK && cfg.pipeline.stages > 1)
        st = zt_fail(ZT_ERR_UNSUPPORTED,
                     "drop --pipeline-stages for the estimate, or run a few steps with --report "
                     "(its pipeline.per_stage lists each stage's memory peak)",
                     "--estimate-memory does not model pipeline stages (%d given)",
                     cfg.pipeline.stages);
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;

    /* The vocabulary comes from --data when given; without it the model's
     * registry entry says what users run it with (tiny shakespeare's 65
     * characters for gptlite, GPT-2's 50257 BPE tokens for the classifier). */
    cmd_train_flags data_flags = *f;
    zt_data data;
    zt_data_budget budget;
    cmd_data_budget(w, &budget);
    st = f->data_path ? cmd_data_load(&data, &data_flags, &budget) : ZT_OK;
    /* What the data holds is a line of the estimate: a run holds it too. */
    zt_data_memory data_mem = {0};
    if (st == ZT_OK && f->data_path && data.train && data.train->memory)
        data_mem = *data.train->memory;
    if (f->data_path)
        zt_data_free(&data);
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;
    zt_model_args args = data_flags.model;
    const zt_model_entry *entry = zt_model_find(args.name);
    if (args.vocab_size <= 0 && entry)
        args.vocab_size = entry->estimate_vocab;
    zt_model model;
    zt_estimate est;
    st = zt_model_build(&args, &model);
    /* The hidden size fills HF's "auto" bucket and persistence sizes; nothing
     * trains, so step counts stay "auto" (they change no memory). */
    if (st == ZT_OK) {
        zt_config_run run = {.hidden_size = model.hidden_size, .total_steps = -1,
                             .warmup_steps = -1};
        st = zt_config_resolve_run(&cfg, &run, f->config_path);
        if (st != ZT_OK)
            zt_model_free(&model);
    }
    if (st == ZT_OK) {
        st = zt_estimate_run(&est, &cfg, &model, num_gpus, num_nodes);
        if (st != ZT_OK)
            zt_model_free(&model);
        est.data = data_mem;
    }
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;
    st = ZT_OK;
    if (w->rank == 0) {
        zt_estimate_print(&est, stdout);
        cmd_print_notes(&cfg);
        fflush(stdout);
        if (f->report_path)
            st = zt_estimate_write_json(&est, f->report_path);
    }
    zt_model_free(&model);
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;
    return cmd_finish(w);
}
