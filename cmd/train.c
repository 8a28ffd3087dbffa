/*
 * train: the training command. flags -> config -> world -> data and model ->
 * devices -> trainer (resumed from a checkpoint when asked) -> training with
 * the monitor listening and checkpoints saved after steps -> sample, dumps,
 * the report and the final line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/exit.h"
#include "cmd/preempt.h"
#include "data/datamem.h"
#include "engine/checked.h"
#include "engine/ckpt/ckpt.h"
#include "engine/ckpt/safetensors.h"
#include "engine/config/config.h"
#include "engine/env.h"
#include "engine/hostmem.h"
#include "engine/monitor/monitor.h"
#include "engine/monitor/progress.h"
#include "engine/monitor/profile.h"
#include "engine/monitor/report.h"
#include "engine/path.h"
#include "engine/train/trainer.h"
#include "engine/world/devices.h"
#include "engine/zero/quant.h"
#include "models/registry.h"

void cmd_data_budget(const zt_world *w, zt_data_budget *b)
{
    zt_hostmem h;
    zt_hostmem_read(&h);
    /* The node's ranks in this rank's cgroup: those of the same colour. */
    MPI_Comm same;
    int in_cgroup = w->local_size;
    if (MPI_Comm_split(w->node_comm, (int)(zt_hostmem_cgroup_id(&h) & 0x7FFFFFFF), w->local_rank,
                       &same) == MPI_SUCCESS) {
        MPI_Comm_size(same, &in_cgroup);
        MPI_Comm_free(&same);
    }
    uint64_t share = zt_hostmem_share(&h, w->local_size, in_cgroup, b->why, sizeof b->why);
    b->bytes = share == ZT_HOSTMEM_NONE ? ZT_DATA_NO_LIMIT : share;
}

zt_status cmd_data_load(zt_data *d, cmd_train_flags *f, const zt_data_budget *budget)
{
    memset(d, 0, sizeof *d);
    zt_model_args *a = &f->model;
    const zt_model_entry *e = zt_model_find(a->name);
    if (!e || e->data == ZT_DATA_SYNTHETIC)
        return ZT_OK; /* the mlp's data follows its model; unknown models fail to build */
    if (!f->data_path)
        return zt_fail(ZT_ERR_USAGE, e->data_hint, "--model %s needs --data PATH", a->name);
    ZT_TRY(zt_data_load(d, e->data, f->data_path, f->tokenizer_dir, zt_model_args_seq_len(a),
                        f->seed, budget));
    if (a->vocab_size > 0 && a->vocab_size < d->tok->vocab_size)
        return zt_fail(ZT_ERR_USAGE, "leave --vocab-size out to use the tokenizer's",
                       "--vocab-size %lld is smaller than the tokenizer's %lld tokens",
                       (long long)a->vocab_size, (long long)d->tok->vocab_size);
    if (a->vocab_size <= 0)
        a->vocab_size = d->tok->vocab_size;
    return ZT_OK;
}

/* The config's notes; those that are warnings say so instead of "note". */
void cmd_print_notes(const zt_config *cfg)
{
    for (int i = 0; i < cfg->n_notes; i++)
        printf("  %s%s\n", strncmp(cfg->notes[i], "warning: ", 9) ? "note: " : "",
               cfg->notes[i]);
}

/* ZeRO++'s quantized communication (engine/zero/quant.h), when asked for. */
static void cmd_print_zeropp(const zt_config *cfg, const zt_trainer_stats *s)
{
    const zt_zero_config *z = &cfg->zero;
    if (!s->policy->params_sharded || !(z->zero_quantized_weights || z->zero_quantized_gradients))
        return;
    const zt_comm *intra = s->groups[ZT_STAGE_GROUP_QGZ_INTRA];
    const zt_comm *inter = s->groups[ZT_STAGE_GROUP_QGZ_INTER];
    printf("  ZeRO++: qwZ %s", z->zero_quantized_weights
                                  ? "int8 parameter gathers (DeepSpeed's group size, <= 8000)"
                                  : "off");
    if (!z->zero_quantized_gradients)
        printf(", qgZ off\n");
    else if (inter)
        printf(", qgZ int4 hierarchical all-to-all (blocks of %d) over %d node(s) of %d rank(s)\n",
               ZT_QGZ_BLOCK, inter->size, intra ? intra->size : 1);
    else
        printf("; qgZ: one node: gradients take the plain reduce-scatter (DeepSpeed's fallback "
               "too)\n");
}

static void cmd_print_summary(const zt_world *w, const zt_config *cfg, const zt_model *m,
                              const zt_trainer *t, const zt_data *d, int64_t steps)
{
    static const char *tok_names[] = {"characters", "bytes", "GPT-2 BPE"};
    zt_trainer_stats s;
    zt_trainer_stats_get(t, &s);
    const zt_layout *lay = s.layout;
    printf("zerotrain %s: %d rank(s) on %d node(s), device %s, comm %s\n", ZT_VERSION,
           w->size, w->n_nodes, s.device, s.comm);
    const zt_pipe *pipe = s.pipe;
    printf("  model %s: %lld parameters in %d units (%sflat %lld, padded for %d ranks)\n",
           m->name, (long long)m->n_params, m->n_units, pipe->stages > 1 ? "stage 0: " : "",
           (long long)lay->padded_numel, lay->world_size);
    const zt_data_memory *dm = d->train ? d->train->memory : NULL;
    char held[32];
    if (d->tok && dm)
        printf("  data: %lld training samples, %lld validation samples of up to %lld tokens; "
               "vocabulary %lld (%s); %s on the host (%lld tokens x %d byte(s))\n",
               (long long)d->train->n_samples, (long long)d->val->n_samples,
               (long long)m->seq_len, (long long)d->tok->vocab_size, tok_names[d->tok->kind],
               zt_datamem_size(dm->held_bytes, held, sizeof held), (long long)dm->tokens,
               dm->token_bytes);
    printf("  batch: train_batch_size %lld = micro %lld x gas %lld x %s %d; %lld steps "
           "(%lld per epoch)\n",
           (long long)cfg->train_batch_size, (long long)cfg->micro_batch_size,
           (long long)cfg->gradient_accumulation_steps,
           pipe->stages > 1 ? "data-parallel" : "world", pipe->dp_size, (long long)steps,
           (long long)s.steps_per_epoch);
    printf("  zero stage %d, precision %s, optimizer %s lr %g, scheduler %s, "
           "gradient_clipping %g, reduce_bucket_size %lld, overlap_comm %s\n",
           cfg->zero.stage, zt_dtype_name(s.compute_dtype),
           zt_optim_type_name(cfg->optimizer.type), cfg->optimizer.lr,
           zt_sched_type_name(cfg->scheduler.type), cfg->gradient_clipping,
           (long long)cfg->zero.reduce_bucket_size, cfg->zero.overlap_comm ? "on" : "off");
    char warning[512];
    zt_layout_persistence_warning(lay, &cfg->zero, warning, sizeof warning);
    if (warning[0])
        printf("  warning: %s\n", warning);
    if (s.policy->params_sharded) {
        printf("  stage 3: %lld of %lld parameters in persistent units, prefetch %lld, "
               "max live %lld, max reuse distance %lld",
               (long long)lay->persistent_numel, (long long)lay->padded_numel,
               (long long)cfg->zero.stage3_prefetch_bucket_size,
               (long long)cfg->zero.stage3_max_live_parameters,
               (long long)cfg->zero.stage3_max_reuse_distance);
        /* hpZ and MiCS are named only when on. */
        if (cfg->zero.zero_hpz_partition_size > 1)
            printf(", hpZ %lld", (long long)cfg->zero.zero_hpz_partition_size);
        if (cfg->zero.mics_shard_size > 0)
            printf(", MiCS shard %lld", (long long)cfg->zero.mics_shard_size);
        printf("\n");
    }
    cmd_print_zeropp(cfg, &s);
    if (s.mixed)
        printf("  mixed precision: %s parameters and activations (%s), fp32 master weights, "
               "gradients %s, communication %s, loss scale %s\n",
               zt_dtype_name(s.compute_dtype),
               s.typed_units ? "computed on as they are" : "computed on fp32 copies",
               zt_dtype_name(s.grad_dtype), zt_dtype_name(s.comm_dtype),
               cfg->fp16.enabled ? (s.dynamic_loss_scale ? "dynamic" : "static") : "none");
    if (s.offload_optimizer || s.offload_param)
        printf("  offload: optimizer %s (master, moments, gradient partition %s, CPU Adam), "
               "parameters %s\n",
               s.nvme_optimizer ? "nvme" : s.offload_optimizer ? "cpu" : "none",
               s.nvme_optimizer ? "in swap files" : "on the host",
               s.nvme_param ? "nvme" : s.offload_param ? "cpu" : "none");
    zt_trainer_nvme_stats nv;
    zt_trainer_nvme_stats_get(t, &nv);
    if (nv.engine) {
        const double mib = 1024.0 * 1024.0;
        printf("  nvme: %s%s; rank 0's swap files: master weights %.2f MiB, optimizer states "
               "%.2f MiB, gradients %.2f MiB, parameter shards %.2f MiB, in %s%s%s; swap "
               "buffers %.2f MiB of host memory\n",
               nv.engine, nv.direct ? " (O_DIRECT)" : " (buffered: no O_DIRECT here)",
               (double)nv.master_file_bytes / mib, (double)nv.optim_file_bytes / mib,
               (double)nv.grad_file_bytes / mib,
               (double)nv.param_file_bytes / mib, nv.opt_dir ? nv.opt_dir : nv.param_dir,
               nv.opt_dir && nv.param_dir ? " and " : "",
               nv.opt_dir && nv.param_dir ? nv.param_dir : "", (double)nv.swap_bytes / mib);
    }
    if (s.checkpoint_interval > 0)
        printf("  activation checkpointing: every %lld unit(s) of %d, checkpoints on the %s\n",
               (long long)s.checkpoint_interval, m->n_units,
               s.cpu_checkpointing ? "host" : "device");
    cmd_print_notes(cfg);
    if (pipe->stages > 1)
        zt_pipe_print(pipe, stdout);
    fflush(stdout);
}

/* --sample: every rank generates (stage 3 gathers are collective), rank 0
 * prints. */
static zt_status cmd_sample(const zt_world *w, zt_trainer *t, const zt_data *d, int64_t n,
                            uint64_t seed)
{
    int32_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    if (!ids)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld sampled tokens", (long long)n);
    zt_status st = zt_trainer_generate(t, d->tok->start_id, n, seed, ids);
    char *text = NULL;
    size_t len = 0;
    if (st == ZT_OK && w->rank == 0)
        st = zt_tokenizer_decode(d->tok, ids + 1, n, &text, &len);
    if (st == ZT_OK && w->rank == 0) {
        printf("zerotrain: sample of %lld tokens (seed %llu):\n", (long long)n,
               (unsigned long long)seed);
        fwrite(text, 1, len, stdout);
        printf("\n");
        fflush(stdout);
    }
    free(text);
    free(ids);
    return st;
}

/* --profile's wrapper of be: the counts are modelled on the CUDA backend
 * with this config's GEMM dtype, whatever device runs (profile.h). */
static zt_status cmd_profile_wrap(zt_backend *prof, const zt_backend *be,
                                  const cmd_train_flags *f, const zt_config *cfg,
                                  const zt_model *model, const zt_world *w)
{
    zt_model_args a = f->model;
    zt_model_args_resolve(&a);
    zt_profile_options o = {.gemm_dtype = zt_config_compute_dtype(cfg),
                            .tf32 = f->dev.tf32,
                            .model = model->name,
                            .n_layer = a.n_layer,
                            .n_embd = model->hidden_size,
                            .n_head = a.n_head,
                            .block_size = model->seq_len,
                            .vocab_size = model->vocab_size,
                            .params = model->n_params,
                            .micro_batch_size = cfg->micro_batch_size,
                            .gradient_accumulation_steps = cfg->gradient_accumulation_steps,
                            .stage = cfg->zero.stage,
                            .world_size = w->size,
                            .timing = f->profile_time};
    return zt_profile_wrap(prof, be, &o);
}

/* The trainer's step counter. */
static int64_t cmd_steps_done(const zt_trainer *t)
{
    zt_trainer_counters c;
    zt_trainer_counters_get(t, &c);
    return c.global_steps;
}

/* Checkpoint saving from the training loop (the trainer's after_step). */
typedef struct {
    const zt_world *world;
    const char *dir;
    int64_t interval, keep_last;
    int64_t last_saved; /* step of the newest checkpoint in dir, -1: none yet */
    zt_ckpt_meta meta;
    bool failed; /* a save failed: every rank knows (ckpt.h) */
} cmd_saver;

static zt_status cmd_save(zt_trainer *t, cmd_saver *s)
{
    zt_ckpt_saved info;
    /* A checkpoint of nan or inf weights would become `latest` and poison
     * every resume; the norm is global, so every rank refuses alike. */
    double norm = zt_trainer_param_norm(t);
    zt_status st = ZT_OK;
    if (!isfinite(norm))
        st = zt_fail(ZT_ERR_NUMERIC,
                     "training diverged; the last checkpoint saved before it is kept",
                     "step %lld: the weights hold nan or inf (norm %g): not saved to %s",
                     (long long)cmd_steps_done(t), norm, s->dir);
    if (st == ZT_OK)
        st = zt_ckpt_save(t, &s->meta, s->dir, s->keep_last, &info);
    if (st != ZT_OK) {
        s->failed = true;
        return st;
    }
    s->last_saved = cmd_steps_done(t);
    if (s->world->rank == 0) {
        printf("zerotrain: saved checkpoint %s/%s (%.2f MB in %.2f s)\n", s->dir, info.tag,
               (double)info.bytes / 1e6, info.seconds);
        fflush(stdout);
    }
    return ZT_OK;
}

static zt_status cmd_after_step(zt_trainer *t, void *ctx)
{
    cmd_saver *s = ctx;
    if (s->interval <= 0 || cmd_steps_done(t) % s->interval != 0)
        return ZT_OK;
    /* Steps that --nonfinite continue (or a static fp16 scale) rides out are
     * no point to resume from: should they go on to end the run, `latest`
     * must still be a checkpoint from before them. */
    int64_t bad = zt_trainer_nonfinite_steps(t);
    if (bad > 0) {
        if (s->world->rank == 0) {
            printf("zerotrain: step %lld: no checkpoint: the last %lld step(s) had a non-finite "
                   "loss or gradients; `latest` is left as it was\n",
                   (long long)cmd_steps_done(t), (long long)bad);
            fflush(stdout);
        }
        return ZT_OK;
    }
    return cmd_save(t, s);
}

/* Whether two paths name the same directory. */
static bool cmd_same_dir(const char *a, const char *b)
{
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    bool same = ra && rb ? !strcmp(ra, rb) : !strcmp(a, b);
    free(ra);
    free(rb);
    return same;
}

static const char *cmd_given(const void *p) { return p ? "given" : NULL; }

zt_status cmd_fingerprint_inputs(zt_fingerprint *fp, const cmd_train_flags *f)
{
    zt_status st = zt_fingerprint_file(fp, "the --data file", f->data_path);
    if (st == ZT_OK && f->tokenizer_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/encoder.json", f->tokenizer_dir);
        st = zt_fingerprint_file(fp, "the tokenizer's encoder.json", path);
        snprintf(path, sizeof path, "%s/vocab.bpe", f->tokenizer_dir);
        if (st == ZT_OK)
            st = zt_fingerprint_file(fp, "the tokenizer's vocab.bpe", path);
    }
    return st;
}

zt_status cmd_same_run(const zt_world *w, const cmd_train_flags *f, const zt_config *cfg)
{
    zt_fingerprint fp;
    zt_fingerprint_init(&fp);
    zt_status st = zt_fingerprint_file(&fp, "the zerotrain build", "/proc/self/exe");
    if (st == ZT_OK) {
        snprintf(fp.fields[fp.n - 1].value, sizeof fp.fields[0].value, "zerotrain %s",
                 ZT_VERSION);
        zt_config_fingerprint(cfg, &fp);
        zt_fingerprint_str(&fp, "--model", f->model.name);
        int n;
        const zt_model_arg *rows = zt_model_args_schema(&n);
        for (int i = 0; i < n; i++) {
            if (strcmp(rows[i].model, f->model.name) != 0)
                continue;
            double v = zt_model_arg_value(&rows[i], &f->model);
            if (rows[i].kind == ZT_MODEL_ARG_CHOICE)
                zt_fingerprint_str(&fp, rows[i].flag, zt_model_arg_choice(&rows[i], &f->model));
            else
                zt_fingerprint_f64(&fp, rows[i].flag, v);
        }
        zt_fingerprint_i64(&fp, "--steps", f->steps);
        zt_fingerprint_i64(&fp, "--epochs", f->epochs);
        zt_fingerprint_i64(&fp, "--seed", (int64_t)f->seed);
        zt_fingerprint_i64(&fp, "--num-samples", f->num_samples);
        zt_fingerprint_str(&fp, "--report", cmd_given(f->report_path));
        zt_fingerprint_str(&fp, "--dump-params", cmd_given(f->dump_path));
        zt_fingerprint_str(&fp, "--dump-grads", f->grad_dump_path
                                                    ? (strstr(f->grad_dump_path, "%d")
                                                           ? "every step"
                                                           : "the first step")
                                                    : NULL);
        zt_fingerprint_i64(&fp, "--sample", f->sample);
        zt_fingerprint_i64(&fp, "--eval-interval", f->eval_interval);
        zt_fingerprint_i64(&fp, "--eval-iters", f->eval_iters);
        zt_fingerprint_str(&fp, "--save-dir", cmd_given(f->save_dir));
        zt_fingerprint_i64(&fp, "--save-interval", f->save_interval);
        zt_fingerprint_i64(&fp, "--keep-last", f->keep_last);
        zt_fingerprint_str(&fp, "--init-from", f->init_from);
        zt_fingerprint_str(&fp, "--resume", f->resume ? (f->resume_tag ? f->resume_tag : "latest")
                                                      : NULL);
        zt_fingerprint_bytes(&fp, "--inject-overflow", NULL, f->inject_steps,
                             (size_t)f->n_inject_steps * sizeof *f->inject_steps);
        zt_fingerprint_i64(&fp, "--inject-overflow unit", f->inject_unit);
        zt_fingerprint_str(&fp, "--nonfinite", f->nonfinite);
        zt_fingerprint_str(&fp, "--device", f->dev.device);
        zt_fingerprint_str(&fp, "--comm", f->dev.comm);
        zt_fingerprint_i64(&fp, "--tf32", f->dev.tf32);
        zt_fingerprint_str(&fp, "--attention", f->attention);
        zt_env_fingerprint(&fp);
        st = cmd_fingerprint_inputs(&fp, f);
    }
    if (st != ZT_OK && fp.error == ZT_OK)
        fp.error = st;
    st = zt_world_agree_fingerprint(w, &fp);
    zt_fingerprint_free(&fp);
    return st;
}

/* The run's length (--steps, or --epochs of the sampler's steps_per_epoch =
 * samples / train_batch_size) and the "auto" values that need it or the
 * model, resolved as HF's integration does (zt_config_resolve_run). */
static zt_status cmd_resolve_run(const cmd_train_flags *f, zt_config *cfg, const zt_model *m,
                                 const zt_data *d, int64_t *steps)
{
    int64_t per_epoch = d->train->n_samples / cfg->train_batch_size;
    *steps = f->steps;
    if (*steps < 0 && !zt_checked_mul(f->epochs > 0 ? f->epochs : 1, per_epoch, steps))
        return zt_fail(ZT_ERR_USAGE, "give fewer --epochs, or --steps",
                       "--epochs %lld x %lld steps per epoch is more than 2^63 steps",
                       (long long)f->epochs, (long long)per_epoch);
    zt_config_run run = {.hidden_size = m->hidden_size,
                         .total_steps = *steps,
                         .warmup_steps = f->warmup_steps};
    return zt_config_resolve_run(cfg, &run, f->config_path);
}

/* --report, --dump-params and --dump-grads are written by rank 0 after
 * training: checked before step 1, so a long run cannot end in "cannot write"
 * with its results lost. A --dump-grads name with %d is one file per step:
 * its directory is checked (with %d in a directory's name, the deepest one
 * without it). */
static zt_status cmd_check_outputs(const cmd_train_flags *f, const char *log_path)
{
    /* The report first: a log path derived from it fails for the same reason,
     * and the user named the report. */
    if (f->report_path)
        ZT_TRY(zt_path_check_output(f->report_path, "report",
                                    "give --report a path in an existing directory you can "
                                    "write to"));
    if (log_path)
        ZT_TRY(zt_path_check_output(log_path, "log",
                                    "give --log-file a path in an existing directory you can "
                                    "write to"));
    if (f->dump_path)
        ZT_TRY(zt_path_check_output(f->dump_path, "dump",
                                    "give --dump-params a path in an existing directory you can "
                                    "write to"));
    const char *grads = f->grad_dump_path,
               *hint = "give --dump-grads a path in an existing directory you can write to";
    if (grads && !strstr(grads, "%d"))
        ZT_TRY(zt_path_check_output(grads, "gradient dump", hint));
    if (grads && strstr(grads, "%d")) {
        char dir[4096], up[4096];
        zt_path_dirname(grads, dir, sizeof dir);
        while (strstr(dir, "%d")) {
            zt_path_dirname(dir, up, sizeof up);
            memcpy(dir, up, sizeof dir);
        }
        ZT_TRY(zt_path_check_output_dir(dir, grads, "gradient dump", hint));
    }
    return ZT_OK;
}

/* Rank 0: why training stopped early, and what happens next. */
static void cmd_print_stop(const zt_world *w, const zt_trainer *t, int64_t steps,
                           const int64_t stop_ranks[2], const char *save_dir)
{
    int64_t n = stop_ranks[0] + stop_ranks[1];
    printf("zerotrain: %s reached %lld of %d rank(s): stopping after step %lld of %lld; %s\n",
           cmd_preempt_name(stop_ranks), (long long)(n < w->size ? n : w->size), w->size,
           (long long)cmd_steps_done(t), (long long)steps,
           save_dir ? "saving a checkpoint to resume from (--resume)"
                    : "nothing is saved (no --save-dir): the run's work so far is lost");
    fflush(stdout);
}

/* Rank 0's last line: the steps of this run (a resumed run also names the
 * global step it reached), and a final loss only when a step ran. */
static void cmd_print_done(const zt_trainer *t, const zt_trainer_counters *start, bool stopped,
                           double param_norm)
{
    zt_trainer_stats ts;
    zt_trainer_stats_get(t, &ts);
    int64_t run = ts.global_steps - start->global_steps;
    printf("zerotrain: %s: %lld steps in %.2f s", stopped ? "stopped" : "done", (long long)run,
           ts.train_seconds);
    if (start->global_steps > 0)
        printf(" (resumed at step %lld, now at step %lld)", (long long)start->global_steps,
               (long long)ts.global_steps);
    if (run > 0)
        printf(", final loss %.6f, %.2f samples/s", ts.loss_history[ts.global_steps - 1],
               ts.samples_per_sec);
    printf(", param norm %.6f, peak device memory %.3f GiB\n", param_norm,
           (double)ts.mem->total_peak[ZT_MEM_DEVICE] / (1024.0 * 1024.0 * 1024.0));
    fflush(stdout);
}

/* A run that ends on steps with a non-finite loss or gradients (fp32 and
 * bf16 under --nonfinite continue, a static fp16 scale) or on non-finite
 * weights did not train: it fails (exit 1) before its last checkpoint or
 * "done". A save directory checks the weights itself (cmd_save). Every value
 * here is the same on every rank. */
static zt_status cmd_check_trained(zt_trainer *t, bool saving)
{
    zt_trainer_counters now;
    zt_trainer_counters_get(t, &now);
    int64_t bad = zt_trainer_nonfinite_steps(t);
    const char *hint = "training diverged: lower the learning rate or look for extreme values "
                       "in the data, and resume from the last checkpoint saved before it";
    if (bad > 0)
        return zt_fail(ZT_ERR_NUMERIC, hint,
                       "step %lld: the run ends on %lld step(s) in a row whose loss or "
                       "gradients are not finite: it is not saved and `latest` is left as it "
                       "was",
                       (long long)now.global_steps, (long long)bad);
    double norm = saving ? 0.0 : zt_trainer_param_norm(t);
    if (!isfinite(norm))
        return zt_fail(ZT_ERR_NUMERIC, hint, "step %lld: the weights hold nan or inf (norm %g)",
                       (long long)now.global_steps, norm);
    return ZT_OK;
}

/* Rank 0: fp16's dynamic scaler skips overflows while it searches for its
 * scale (DeepSpeed's behaviour, bounded: it stops at its minimum), so a short
 * run may end with none of its steps applied; "done" alone would hide that. */
static void cmd_warn_untrained(zt_trainer *t, const zt_trainer_counters *start)
{
    zt_trainer_counters now;
    zt_trainer_counters_get(t, &now);
    int64_t run = now.global_steps - start->global_steps;
    if (run == 0 || now.skipped_steps - start->skipped_steps < run)
        return;
    printf("zerotrain: warning: none of the %lld steps of this run was applied: every one "
           "overflowed and was skipped (the fp16 loss scale is now %g); the weights are "
           "those the run started from\n",
           (long long)run, zt_trainer_scaler(t)->scale);
    fflush(stdout);
}

int cmd_train(int argc, char **argv)
{
    cmd_train_flags flags;
    int rc = cmd_flags_train(argc, argv, &flags);
    if (rc != 0)
        return rc < 0 ? 0 : rc;

    /* --estimate-memory runs on no device. */
    if (!flags.estimate_memory)
        zt_devices_select_early(flags.dev.device);
    zt_world world;
    if ((rc = cmd_world_start(&world, &argc, &argv)) != 0)
        return rc;
    if (flags.estimate_memory)
        return cmd_estimate(&world, &flags);
    if (world.rank == 0 && world.threads.note[0]) {
        printf("%s\n", world.threads.note);
        fflush(stdout);
    }

    /* What the run holds is released on every way out (at `end`), the
     * trainer first: a failed run leaves no swap folder behind. */
    zt_ckpt resume;
    int save_lock = -1;
    zt_data data;
    zt_model model;
    zt_backend be, prof_be;
    zt_comm comm;
    zt_monitor mon;
    zt_progress progress;
    zt_trainer *trainer = NULL;
    memset(&resume, 0, sizeof resume);
    memset(&data, 0, sizeof data);
    memset(&model, 0, sizeof model);
    memset(&be, 0, sizeof be);
    memset(&prof_be, 0, sizeof prof_be);
    memset(&comm, 0, sizeof comm);
    memset(&mon, 0, sizeof mon);
    memset(&progress, 0, sizeof progress);
    zt_config cfg;
    zt_status st = zt_config_load_file(flags.config_path, &flags.ov, world.size, &cfg);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    /* The checkpoint is read first: the data and dropout follow its seed. */
    if (flags.resume) {
        st = zt_ckpt_open(&resume, &world, flags.load_dir ? flags.load_dir : flags.save_dir,
                          flags.resume_tag);
        if ((rc = cmd_agree(&world, st)) != 0)
            goto end;
        if (!flags.seed_given)
            flags.seed = zt_ckpt_seed(&resume);
    }
    if (flags.save_dir &&
        (rc = cmd_agree(&world, zt_ckpt_check_dir(&world, flags.save_dir))) != 0)
        goto end;
    /* Held until the job ends: a second job saving here is refused now. */
    if (flags.save_dir &&
        (rc = cmd_agree(&world, zt_ckpt_lock_dir(&world, flags.save_dir, &save_lock))) != 0)
        goto end;
    char log_buf[4096];
    const char *log_path = flags.log_file;
    if (!log_path && flags.report_path) {
        zt_progress_log_path(flags.report_path, log_buf, sizeof log_buf);
        log_path = log_buf;
    }
    st = world.rank == 0 ? cmd_check_outputs(&flags, log_path) : ZT_OK;
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;

    zt_data_budget budget;
    cmd_data_budget(&world, &budget);
    st = cmd_data_load(&data, &flags, &budget);
    if (st == ZT_OK)
        st = zt_model_build(&flags.model, &model);
    if (st == ZT_OK && !data.train)
        zt_data_synthetic(&data, flags.num_samples, model.in_numel, model.n_classes, flags.seed);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    int64_t steps = -1;
    if ((rc = cmd_agree(&world, cmd_resolve_run(&flags, &cfg, &model, &data, &steps))) != 0)
        goto end;
    if ((rc = cmd_agree(&world, cmd_same_run(&world, &flags, &cfg))) != 0)
        goto end;
    st = zt_world_devices(&world, &flags.dev, zt_config_compute_dtype(&cfg), &be, &comm, stdout);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    if (flags.inject_unit >= model.n_units)
        st = zt_fail(ZT_ERR_USAGE, "units are numbered from 0 in model order",
                     "--inject-overflow: unit %d does not exist (model %s has %d units)",
                     flags.inject_unit, model.name, model.n_units);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    cmd_saver saver = {.world = &world,
                       .dir = flags.save_dir,
                       .interval = flags.save_interval,
                       .keep_last = flags.keep_last,
                       .last_saved = -1,
                       .meta = {.model = flags.model,
                                .tok = data.tok,
                                .tokenizer_dir = flags.tokenizer_dir,
                                .data_path = flags.data_path}};
    /* --profile: the trainer runs on a counting wrapper of be; the
     * communicators keep be itself. */
    if (flags.profile &&
        (rc = cmd_agree(&world, cmd_profile_wrap(&prof_be, &be, &flags, &cfg, &model,
                                                 &world))) != 0)
        goto end;
    zt_trainer_options topt = {.cfg = &cfg,
                               .model = &model,
                               .data = data.train,
                               .world = &world,
                               .be = flags.profile ? &prof_be : &be,
                               .comm = &comm,
                               .seed = flags.seed,
                               .eval_data = flags.eval_interval > 0 ? data.val : NULL,
                               .eval_interval = flags.eval_interval,
                               .eval_iters = flags.eval_iters,
                               .grad_dump_path = flags.grad_dump_path,
                               .inject_steps = flags.inject_steps,
                               .n_inject_steps = flags.n_inject_steps,
                               .inject_unit = flags.inject_unit,
                               .nonfinite_continue = !strcmp(flags.nonfinite, "continue"),
                               .observer = zt_monitor_observer(&mon),
                               .after_step = flags.save_dir ? cmd_after_step : NULL,
                               .after_step_ctx = &saver,
                               .stop_request = cmd_preempt_flag()};
    st = zt_trainer_init(&trainer, &topt);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    if (flags.resume) {
        st = zt_ckpt_restore(&resume, trainer, &saver.meta, false);
        if ((rc = cmd_agree(&world, st)) != 0)
            goto end;
        if (flags.save_dir && cmd_same_dir(flags.save_dir, resume.dir))
            saver.last_saved = cmd_steps_done(trainer);
    }
    if (flags.init_from) {
        st = zt_ckpt_init_from(trainer, &model, flags.init_from);
        if ((rc = cmd_agree(&world, st)) != 0)
            goto end;
    }

    if (world.rank == 0)
        cmd_print_summary(&world, &cfg, &model, trainer, &data, steps);
    if (world.rank == 0 && flags.resume) {
        printf("zerotrain: resumed from %s/%s at step %lld (saved by %d rank(s) at ZeRO stage "
               "%d)\n",
               resume.dir, resume.tag, (long long)cmd_steps_done(trainer), resume.world_size,
               resume.stage);
        fflush(stdout);
    }
    if (world.rank == 0 && flags.init_from) {
        printf("zerotrain: initialised from %s\n", flags.init_from);
        fflush(stdout);
    }
    zt_ckpt_close(&resume);

    zt_trainer_counters start;
    zt_trainer_counters_get(trainer, &start);
    /* The CSV monitor files and the log are rank 0's alone: a failure is one
     * rank's. */
    st = zt_monitor_init(&mon, &cfg, world.rank);
    if (st == ZT_OK)
        st = zt_monitor_attach(&mon, trainer);
    if (st == ZT_OK && world.rank == 0) {
        const zt_model_entry *entry = zt_model_find(model.name);
        zt_progress_options po = {
            .model = model.name,
            .world_size = world.size,
            .first_step = start.global_steps,
            .first_skipped = start.skipped_steps,
            .last_step = steps,
            .samples_per_step = cfg.train_batch_size,
            .tokens_per_sample = entry && entry->data == ZT_DATA_TEXT ? model.seq_len : 0,
            .interval = flags.log_interval,
            .steps_per_print = cfg.steps_per_print,
            .period_seconds = 10.0,
            .log_path = log_path,
            .append = flags.resume,
        };
        st = zt_progress_init(&progress, &po);
        mon.progress = &progress;
    }
    if (st != ZT_OK)
        cmd_fatal(&world, &comm, st);
    cmd_preempt_install(zt_env_get()->stop_grace_s);
    if (flags.profile)
        zt_profile_begin(&prof_be, trainer);
    st = zt_trainer_train(trainer, steps);
    if (flags.profile)
        zt_profile_end(&prof_be, trainer);
    if (st == ZT_OK)
        zt_monitor_end(&mon);
    zt_monitor_free(&mon);
    if (world.rank == 0)
        zt_progress_flush(&progress);
    /* A failed save and a diverged step (the loss and norm are global) are
     * known to every rank; anything else may be one rank's. */
    if (st != ZT_OK && (saver.failed || st == ZT_ERR_NUMERIC)) {
        rc = cmd_agree(&world, st);
        goto end;
    }
    if (st != ZT_OK)
        cmd_fatal(&world, &comm, st);
    int64_t stop_ranks[2];
    bool stopped = zt_trainer_stopped(trainer, stop_ranks);
    if (stopped && world.rank == 0)
        cmd_print_stop(&world, trainer, steps, stop_ranks, flags.save_dir);
    if ((rc = cmd_agree(&world, cmd_check_trained(trainer, flags.save_dir != NULL))) != 0)
        goto end;
    if (flags.save_dir && saver.last_saved != cmd_steps_done(trainer) &&
        (rc = cmd_agree(&world, cmd_save(trainer, &saver))) != 0)
        goto end;

    /* A stopped run has little time left: no sample. */
    if (!stopped && flags.sample > 0 &&
        (st = cmd_sample(&world, trainer, &data, flags.sample, flags.seed)) != ZT_OK)
        cmd_fatal(&world, &comm, st);
    if (flags.dump_path &&
        (rc = cmd_agree(&world, zt_trainer_dump_params(trainer, flags.dump_path))) != 0)
        goto end;
    double param_norm = zt_trainer_param_norm(trainer);
    if (flags.report_path &&
        (rc = cmd_agree(&world, zt_report_write(flags.report_path, trainer, param_norm))) != 0)
        goto end;
    if (world.rank == 0) {
        cmd_warn_untrained(trainer, &start);
        cmd_print_done(trainer, &start, stopped, param_norm);
        zt_progress_end(&progress, stopped ? "stopped" : "done");
    }
    /* Stopped with a checkpoint saved is a clean exit: --resume continues.
     * Without one the run's work is lost, which a scheduler must see. */
    if (stopped && !flags.save_dir)
        rc = cmd_preempt_exit_code(stop_ranks);
end:
    /* The monitor reads the trainer, the trainer the backends and the comm. */
    zt_monitor_free(&mon);
    zt_progress_free(&progress);
    zt_trainer_free(trainer);
    zt_comm_free(&comm);
    zt_backend_free(&prof_be);
    zt_backend_free(&be);
    zt_data_free(&data);
    zt_model_free(&model);
    zt_ckpt_close(&resume);
    zt_ckpt_unlock_dir(&save_lock);
    return cmd_end(&world, rc);
}
