/*
 * checkpoint: the subcommands that read a checkpoint. consolidate writes its
 * fp32 weights as one file (one process, no MPI); generate and eval build a
 * trainer from the checkpoint's model (fp32, stage 0) at any world size, load
 * its weights and sample text or evaluate the validation split of --data.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/exit.h"
#include "data/loader.h"
#include "engine/ckpt/ckpt.h"
#include "engine/ckpt/safetensors.h"
#include "engine/config/config.h"
#include "engine/path.h"
#include "engine/train/trainer.h"
#include "engine/world/devices.h"
#include "models/registry.h"

/* zerotrain consolidate DIR [--tag T] --out FILE: one process, no MPI. */
int cmd_consolidate(int argc, char **argv)
{
    cmd_sub_flags f;
    int rc = cmd_flags_sub(argc, argv, &f);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    /* Before the shards are read and verified: the outputs must be writable,
     * and so must their directory, which takes the temporaries renamed over
     * them. */
    const char *hint = "give --out a path in an existing directory you can write to";
    char index_path[4200], dir[4096];
    bool safetensors = !strcmp(f.format, "safetensors");
    snprintf(index_path, sizeof index_path, "%s.json", f.out);
    zt_path_dirname(f.out, dir, sizeof dir);
    zt_status st = zt_path_check_output(f.out, "consolidated weights", hint);
    if (st == ZT_OK && !safetensors)
        st = zt_path_check_output(index_path, "tensor index", hint);
    if (st == ZT_OK)
        st = zt_path_check_output_dir(dir, f.out, "consolidated weights", hint);
    if (st != ZT_OK)
        return cmd_local_failure(st);
    zt_ckpt c;
    st = zt_ckpt_open(&c, NULL, f.dir, f.tag);
    if (st != ZT_OK)
        return cmd_local_failure(st);
    zt_model model;
    memset(&model, 0, sizeof model);
    zt_model_args a;
    st = safetensors ? zt_ckpt_model_args(&c, &a) : ZT_OK;
    if (st == ZT_OK && safetensors)
        st = zt_model_build(&a, &model);
    if (st == ZT_OK)
        st = safetensors ? zt_ckpt_consolidate_safetensors(&c, &model, f.out)
                         : zt_ckpt_consolidate(&c, f.out);
    if (st == ZT_OK) {
        int64_t n = 0;
        for (int u = 0; u < c.n_units; u++)
            n += c.units[u].numel;
        char side[4300] = "";
        if (!safetensors)
            snprintf(side, sizeof side, " (tensor index %s.json)", f.out);
        printf("zerotrain: consolidated %s/%s (step %lld, %s): %lld fp32 parameters -> %s%s%s\n",
               c.dir, c.tag, (long long)c.global_steps,
               zt_ckpt_model_args(&c, &a) == ZT_OK ? a.name : "?", (long long)n, f.out,
               safetensors ? " (safetensors, PyTorch names)" : "", side);
    }
    zt_model_free(&model);
    zt_ckpt_close(&c);
    return st == ZT_OK ? 0 : cmd_local_failure(st);
}

static void cmd_shape_get(const zt_dataset *ds, int64_t index, zt_sample *out)
{
    (void)ds;
    (void)index;
    (void)out;
}

/* What generate and eval hold: the model, its data, the trainer around it. */
typedef struct {
    zt_ckpt ck;
    zt_model_args args;
    zt_tokenizer tok; /* generate */
    zt_data data;     /* eval */
    const zt_tokenizer *tokp;
    const zt_dataset *val;
} cmd_task;

/* The checkpoint's tokenizer (generate) or the --data validation split read
 * with it (eval). */
static zt_status cmd_task_data(cmd_task *k, const cmd_sub_flags *f, bool generate,
                               const zt_data_budget *budget)
{
    const char *dir = NULL, *kind = zt_ckpt_tokenizer_kind(&k->ck, &dir);
    const zt_model_entry *e = zt_model_find(k->args.name);
    zt_data_kind data = e ? e->data : ZT_DATA_SYNTHETIC;
    if (generate && data != ZT_DATA_TEXT)
        return zt_fail(ZT_ERR_USAGE, "generate samples text from a gptlite checkpoint",
                       "checkpoint %s holds a %s model", k->ck.path, k->args.name);
    if (!generate && data == ZT_DATA_SYNTHETIC)
        return zt_fail(ZT_ERR_USAGE, "eval reads text: use a classifier or gptlite checkpoint",
                       "checkpoint %s holds a %s model", k->ck.path, k->args.name);
    if (generate) {
        ZT_TRY(zt_ckpt_tokenizer(&k->ck, f->tokenizer, &k->tok));
        k->tokp = &k->tok;
        return ZT_OK;
    }
    const char *bpe = f->tokenizer ? f->tokenizer : (!strcmp(kind, "bpe") ? dir : NULL);
    ZT_TRY(zt_data_load(&k->data, data, f->data, bpe, zt_model_args_seq_len(&k->args),
                        zt_ckpt_seed(&k->ck), budget));
    k->tokp = k->data.tok;
    k->val = k->data.val;
    return zt_ckpt_check_tokenizer(&k->ck, k->tokp);
}

static void cmd_task_free(cmd_task *k, bool generate)
{
    if (generate && k->tokp)
        zt_tokenizer_free(&k->tok);
    else
        zt_data_free(&k->data);
    zt_ckpt_close(&k->ck);
}

static zt_status cmd_generate(const zt_world *w, zt_trainer *t, const cmd_task *k,
                              const cmd_sub_flags *f)
{
    int32_t *prompt = NULL, *ids = NULL;
    int64_t n_prompt = 0;
    zt_status st = ZT_OK;
    if (f->prompt && f->prompt[0])
        st = zt_tokenizer_encode(k->tokp, f->prompt, strlen(f->prompt), "--prompt", &prompt,
                                 &n_prompt);
    if (st == ZT_OK && n_prompt == 0) {
        free(prompt);
        prompt = malloc(sizeof *prompt);
        if (prompt)
            prompt[0] = k->tokp->start_id;
        n_prompt = 1;
    }
    if (st == ZT_OK && (!prompt || !(ids = malloc((size_t)(n_prompt + f->length) * sizeof *ids))))
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld tokens",
                     (long long)(n_prompt + f->length));
    if (st == ZT_OK && w->rank == 0) {
        fprintf(stderr, "zerotrain: generating %lld tokens from %s/%s (step %lld), temperature "
                        "%g, seed %llu\n",
                (long long)f->length, k->ck.dir, k->ck.tag, (long long)k->ck.global_steps,
                f->temperature, (unsigned long long)f->seed);
        fflush(stderr);
    }
    if (st == ZT_OK)
        st = zt_trainer_generate_from(t, prompt, n_prompt, f->length, f->temperature, f->seed,
                                      ids);
    char *text = NULL;
    size_t len = 0;
    /* An empty prompt started from start_id, which is not the user's text. */
    int64_t skip = f->prompt && f->prompt[0] ? 0 : 1;
    if (st == ZT_OK && w->rank == 0) {
        st = zt_tokenizer_decode(k->tokp, ids + skip, n_prompt + f->length - skip, &text, &len);
        /* A sampled id past the tokenizer's (a model whose vocab_size is
         * larger): name the checkpoint the ids came from. */
        if (st == ZT_ERR_DATA) {
            char msg[1536];
            snprintf(msg, sizeof msg, "%s", zt_status_message());
            st = zt_fail(st, "the model's vocab_size is larger than its tokenizer's: it sampled "
                             "an id the tokenizer cannot decode",
                         "generating from checkpoint %s: %s", k->ck.path, msg);
        }
    }
    if (st == ZT_OK && w->rank == 0) {
        fwrite(text, 1, len, stdout);
        printf("\n");
        fflush(stdout);
    }
    free(text);
    free(prompt);
    free(ids);
    return st;
}

/* How many validation samples zt_trainer_eval reads for --eval-iters iters:
 * iters micro-batches per rank (<= 0, or more than the split holds: all). */
static int64_t cmd_eval_samples(int64_t n_samples, int64_t micro, int world, int64_t iters)
{
    int64_t per_iter = micro * world, all = (n_samples + per_iter - 1) / per_iter;
    if (iters <= 0 || iters > all)
        iters = all;
    return iters * per_iter < n_samples ? iters * per_iter : n_samples;
}

/* eval --dump-logits: the logits of the samples the evaluation reads (the
 * first --eval-iters micro-batches, or all), one rank. */
static zt_status cmd_dump_logits(const zt_world *w, zt_trainer *t, const cmd_task *k,
                                 const cmd_sub_flags *f, int64_t micro)
{
    if (w->size != 1)
        return zt_fail(ZT_ERR_USAGE, "run eval --dump-logits without mpirun, or with -np 1",
                       "--dump-logits is written by a world of one rank (this one has %d)",
                       w->size);
    zt_trainer_stats s;
    zt_trainer_stats_get(t, &s);
    const zt_model *m = s.model;
    int64_t n = cmd_eval_samples(k->val->n_samples, micro, w->size, f->eval_iters);
    size_t count = (size_t)(n * (m->labels_per_token ? m->seq_len : 1) * m->n_classes);
    ZT_TRY(zt_path_check_output(f->dump_logits, "logits dump",
                                "give --dump-logits a path in an existing directory you can "
                                "write to"));
    float *out = malloc(count * sizeof *out);
    if (!out)
        return zt_fail(ZT_ERR_OOM, "give fewer --eval-iters", "cannot allocate %zu logits",
                       count);
    zt_status st = zt_trainer_eval_logits(t, k->val, n, out);
    FILE *fp = st == ZT_OK ? fopen(f->dump_logits, "wb") : NULL;
    bool ok = fp && fwrite(out, sizeof *out, count, fp) == count;
    if (fp && fclose(fp) != 0)
        ok = false;
    if (st == ZT_OK && !ok)
        st = zt_fail(ZT_ERR_IO, "check free space and permissions", "cannot write %s",
                     f->dump_logits);
    if (st == ZT_OK)
        fprintf(stderr, "zerotrain: logits of %lld samples (%zu floats) -> %s\n", (long long)n,
                count, f->dump_logits);
    free(out);
    return st;
}

/* zerotrain generate|eval --checkpoint DIR ...: a trainer built from the
 * checkpoint's model (fp32, stage 0) loads its weights; any world size. */
int cmd_from_checkpoint(int argc, char **argv)
{
    const char *cmd = argv[1];
    bool generate = !strcmp(cmd, "generate");
    cmd_sub_flags f;
    int rc = cmd_flags_sub(argc, argv, &f);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    zt_devices_select_early(f.dev.device);
    zt_world world;
    if ((rc = cmd_world_start(&world, &argc, &argv)) != 0)
        return rc;
    /* Released on every way out (at `end`). */
    cmd_task k;
    zt_model model;
    zt_backend be;
    zt_comm comm;
    zt_trainer *trainer = NULL;
    memset(&k, 0, sizeof k);
    memset(&model, 0, sizeof model);
    memset(&be, 0, sizeof be);
    memset(&comm, 0, sizeof comm);
    zt_status st = zt_ckpt_open(&k.ck, &world, f.dir, f.tag);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    zt_data_budget budget;
    cmd_data_budget(&world, &budget);
    st = zt_ckpt_model_args(&k.ck, &k.args);
    if (st == ZT_OK)
        st = cmd_task_data(&k, &f, generate, &budget);
    if (st == ZT_OK)
        st = zt_model_build(&k.args, &model);
    int64_t micro = f.micro_batch, saved_micro = zt_ckpt_micro_batch_size(&k.ck);
    if (micro <= 0)
        micro = generate || saved_micro <= 0 ? 1 : saved_micro;
    zt_config cfg;
    if (st == ZT_OK)
        st = zt_config_load_inference(micro, world.size, &cfg);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;

    st = zt_world_devices(&world, &f.dev, zt_config_compute_dtype(&cfg), &be, &comm, stderr);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    /* The trainer only needs the data's shape: nothing is trained. */
    zt_dataset shape = {.name = "checkpoint",
                        .n_samples = cfg.train_batch_size,
                        .x_numel = model.in_numel,
                        .tokens_numel = model.seq_len,
                        .labels_numel = model.labels_numel,
                        .n_classes = model.n_classes,
                        .vocab_size = k.tokp ? k.tokp->vocab_size : model.vocab_size,
                        .get = cmd_shape_get};
    zt_ckpt_meta meta = {.model = k.args, .tok = k.tokp};
    zt_trainer_options topt = {.cfg = &cfg,
                               .model = &model,
                               .data = &shape,
                               .world = &world,
                               .be = &be,
                               .comm = &comm,
                               .seed = zt_ckpt_seed(&k.ck),
                               .inject_unit = -1};
    st = zt_trainer_init(&trainer, &topt);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    st = zt_ckpt_restore(&k.ck, trainer, &meta, true);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    if (generate) {
        st = cmd_generate(&world, trainer, &k, &f);
    } else {
        double loss = NAN, acc = NAN;
        if (f.dump_logits)
            st = cmd_dump_logits(&world, trainer, &k, &f, cfg.micro_batch_size);
        if (st == ZT_OK)
            st = zt_trainer_eval(trainer, k.val, f.eval_iters, &loss, &acc);
        if (st == ZT_OK && world.rank == 0) {
            printf("zerotrain: eval %s/%s (step %lld, %s): validation loss %.6f", k.ck.dir,
                   k.ck.tag, (long long)k.ck.global_steps, k.args.name, loss);
            if (!isnan(acc))
                printf(", accuracy %.4f", acc);
            int64_t done = cmd_eval_samples(k.val->n_samples, cfg.micro_batch_size, world.size,
                                            f.eval_iters);
            if (done == k.val->n_samples)
                printf(" (%lld validation samples of %s)\n", (long long)done, f.data);
            else
                printf(" (%lld of the %lld validation samples of %s: --eval-iters %lld)\n",
                       (long long)done, (long long)k.val->n_samples, f.data,
                       (long long)f.eval_iters);
            fflush(stdout);
        }
    }
    rc = cmd_agree(&world, st);
end:
    zt_trainer_free(trainer);
    zt_comm_free(&comm);
    zt_backend_free(&be);
    zt_model_free(&model);
    cmd_task_free(&k, generate);
    return cmd_end(&world, rc);
}
