/*
 * zerotrain: flags -> config -> world -> model -> trainer. The only place that
 * exits. Exit codes: 0 success; 2 bad flags, config or data (the user's input);
 * 1 anything that went wrong while running. An error every rank agrees on is
 * printed once (by the lowest failing rank) and all ranks exit; an error on one
 * rank alone is printed by that rank and ends the job with MPI_Abort, so no
 * rank is left waiting in a collective.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/ckpt/ckpt.h"
#include "engine/comm/comm.h"
#include "engine/config/config.h"
#include "engine/train/estimate.h"
#include "data/labelled.h"
#include "models/model.h"
#include "engine/monitor/monitor.h"
#include "engine/monitor/report.h"
#include "data/synthetic.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "engine/train/trainer.h"
#include "engine/world/world.h"

typedef struct {
    const char *config_path;
    zt_model_args model;
    int64_t steps, epochs, num_samples;
    uint64_t seed;
    const char *device, *comm;
    bool tf32;
    const char *report_path, *dump_path, *grad_dump_path;
    const char *data_path, *tokenizer_dir;
    int64_t eval_interval, eval_iters, sample;
    int64_t inject_steps[64];
    int n_inject_steps, inject_unit; /* inject_unit < 0: the middle unit */
    zt_config_overrides ov;
    bool estimate_memory;
    int64_t num_gpus, num_nodes; /* --estimate-memory's hardware; < 0: not given */
    bool seed_given;
    /* Checkpoints: --resume reads load_dir (default save_dir); resume_tag NULL: latest. */
    const char *save_dir, *load_dir, *resume_tag;
    int64_t save_interval, keep_last;
    bool resume;
} zt_flags;

static const char *usage_text =
    "usage: zerotrain --config FILE --model mlp|gptlite|classifier [--data PATH] [options]\n"
    "       zerotrain --estimate-memory --model NAME [--config FILE] [--num-gpus G]\n"
    "                 [--num-nodes N] [--report FILE]\n"
    "       zerotrain consolidate DIR [--tag T] --out FILE\n"
    "       zerotrain generate --checkpoint DIR [--tag T] [--prompt TEXT] [--length N]\n"
    "                 [--temperature T] [--seed S] [--device D]\n"
    "       zerotrain eval --checkpoint DIR [--tag T] --data PATH [--eval-iters K]\n"
    "                 [--micro-batch-size N] [--tokenizer DIR] [--device D]\n"
    "\n"
    "Trains a built-in model with DeepSpeed-style ZeRO data parallelism. Start it with\n"
    "mpirun (one rank per device); without mpirun it is a world of one rank.\n"
    "\n"
    "  --config FILE, --deepspeed_config FILE   DeepSpeed JSON config (comments and\n"
    "                                  trailing commas allowed)\n"
    "  --model NAME                    mlp, gptlite or classifier\n"
    "  --width W --layers L            mlp shape (default 1024, 4)\n"
    "  --in-size N --out-size N        mlp input features / classes (default: W)\n"
    "  --num-samples N                 mlp: synthetic data set length (default 65536)\n"
    "  --data PATH                     gptlite: a text file (e.g. tiny shakespeare's\n"
    "                                  input.txt); classifier: a CSV (review,sentiment) or\n"
    "                                  an aclImdb directory\n"
    "  --tokenizer DIR                 GPT-2 BPE (DIR/encoder.json, DIR/vocab.bpe); default:\n"
    "                                  characters of the file (gptlite), bytes (classifier)\n"
    "  --n-layer N --n-head N          transformer layers, heads (gptlite 12, 12;\n"
    "                                  classifier 6, 8)\n"
    "  --n-embd C                      gptlite width (default 768)\n"
    "  --block-size T                  gptlite context length (default 2048)\n"
    "  --embed-dim E --hidden-dim H    classifier widths (default 256, 1024)\n"
    "  --max-len N                     classifier tokens per review (default 1024)\n"
    "  --dropout P                     transformer dropout (gptlite 0.1, classifier 0.2)\n"
    "  --activation relu|gelu          transformer feed-forward activation (default relu;\n"
    "                                  gelu is GPT-2's tanh form)\n"
    "  --vocab-size N                  embedding rows (default: the tokenizer's; at least that)\n"
    "  --eval-interval N               validation every N steps and at the end (transformers)\n"
    "  --eval-iters K                  micro-batches per rank per validation (default: the\n"
    "                                  whole validation split)\n"
    "  --sample N                      gptlite: rank 0 prints N generated tokens at the end\n"
    "  --steps N                       optimizer steps of the run, counted from step 0\n"
    "  --epochs N                      or: N passes over the data set (default 1)\n"
    "  --seed S                        seed of data, init and dropout (default 1234)\n"
    "  --device auto|cpu|cuda          compute device (default auto: CUDA when built with it\n"
    "                                  and a GPU answers, else the CPU, with a notice)\n"
    "  --comm auto|mpi|nccl            collectives (default auto: NCCL on CUDA when every rank\n"
    "                                  has its own GPU, else MPI, staged through host memory\n"
    "                                  for GPU buffers)\n"
    "  --tf32                          CUDA: let fp32 GEMMs use TF32 tensor cores (default off)\n"
    "  --lr X                          learning rate for \"auto\" or a missing optimizer\n"
    "  --train-batch-size N            fills \"auto\"/missing train_batch_size\n"
    "  --micro-batch-size N            fills train_micro_batch_size_per_gpu\n"
    "  --gradient-accumulation-steps N fills gradient_accumulation_steps\n"
    "  --report FILE                   write the run's JSON report (rank 0)\n"
    "  --dump-params FILE              write all fp32 parameters after training\n"
    "                                  (raw little-endian float32, model order)\n"
    "  --dump-grads FILE               write the first step's reduced gradient (same format;\n"
    "                                  unscaled); a FILE with %d: every step's, %d = step\n"
    "  --activation-checkpoint-interval K  keep the input of every K-th unit and recompute\n"
    "                                  the units in between during backward (0: off)\n"
    "  --inject-overflow STEPS[:UNIT]  testing aid: at these steps (1-based, comma list) the\n"
    "                                  last rank puts an inf into unit UNIT's gradient\n"
    "                                  (default: the middle unit) before it is reduced\n"
    "  --save-dir DIR                  save checkpoints into DIR (DIR/global_step<N>,\n"
    "                                  DIR/latest) at the end of training and every\n"
    "                                  --save-interval steps\n"
    "  --save-interval N               also save every N optimizer steps\n"
    "  --keep-last K                   after a save keep only the K newest checkpoints\n"
    "  --resume [TAG]                  continue from the checkpoint DIR/latest names (or TAG)\n"
    "                                  in --load-dir, else --save-dir; any world size, stage\n"
    "                                  or offload setting (the model flags must match)\n"
    "  --load-dir DIR                  where --resume reads (default: --save-dir)\n"
    "  --estimate-memory               no training: print the memory one rank holds at every\n"
    "                                  ZeRO stage and offload variant (--report: as JSON);\n"
    "                                  --config is optional (default: Adam), its stage ignored\n"
    "  --num-gpus G --num-nodes N      hardware to estimate for: ranks per node (default: this\n"
    "                                  run's, 1 without mpirun) and nodes (default 1)\n"
    "  --help, --version\n";

/* Before MPI is up every rank would print the same usage error: only the first
 * one does (Open MPI tells each process its rank in the environment). */
static bool cmd_is_first_process(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return !r || strcmp(r, "0") == 0;
}

static int cmd_usage_error(const char *fmt, const char *a, const char *b)
{
    if (cmd_is_first_process()) {
        fprintf(stderr, "zerotrain: error: ");
        fprintf(stderr, fmt, a, b);
        fprintf(stderr, "\nhint: run `zerotrain --help` for the list of flags\n");
    }
    return 2;
}

static bool cmd_parse_i64(const char *s, int64_t min, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min)
        return false;
    *out = v;
    return true;
}

/* "3,5,6" or "3,5,6:2". */
static bool cmd_parse_inject(const char *s, int64_t *steps, int *n, int *unit)
{
    char buf[512];
    if (strlen(s) >= sizeof buf)
        return false;
    snprintf(buf, sizeof buf, "%s", s);
    char *colon = strchr(buf, ':');
    int64_t u = -1;
    if (colon) {
        *colon = '\0';
        if (!cmd_parse_i64(colon + 1, 0, &u) || u > INT32_MAX)
            return false;
    }
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n == 64 || !cmd_parse_i64(tok, 1, &steps[*n]))
            return false;
        (*n)++;
    }
    *unit = (int)u;
    return *n > 0;
}

static bool cmd_parse_f64(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0)
        return false;
    *out = v;
    return true;
}

/* Flags that shape one model only: given with another model they would be
 * silently ignored, so they are errors. */
static int cmd_check_model_flags(int argc, char **argv, const char *model)
{
    static const struct {
        const char *flag, *models;
    } only[] = {
        {"--width", "mlp"},          {"--layers", "mlp"},
        {"--in-size", "mlp"},        {"--out-size", "mlp"},
        {"--num-samples", "mlp"},    {"--n-embd", "gptlite"},
        {"--block-size", "gptlite"}, {"--sample", "gptlite"},
        {"--embed-dim", "classifier"}, {"--hidden-dim", "classifier"},
        {"--max-len", "classifier"}, {"--data", "gptlite classifier"},
        {"--tokenizer", "gptlite classifier"}, {"--n-layer", "gptlite classifier"},
        {"--n-head", "gptlite classifier"}, {"--dropout", "gptlite classifier"},
        {"--activation", "gptlite classifier"}, {"--vocab-size", "gptlite classifier"},
        {"--eval-interval", "gptlite classifier"}, {"--eval-iters", "gptlite classifier"},
    };
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof only / sizeof *only; k++) {
            size_t len = strlen(only[k].flag);
            if (strncmp(argv[i], only[k].flag, len) != 0 ||
                (argv[i][len] != '\0' && argv[i][len] != '='))
                continue;
            const char *hit = strstr(only[k].models, model);
            size_t ml = strlen(model);
            bool listed = hit && (hit == only[k].models || hit[-1] == ' ') &&
                          (hit[ml] == '\0' || hit[ml] == ' ');
            if (!listed)
                return cmd_usage_error("%s is a flag of --model %s", only[k].flag,
                                       only[k].models);
        }
    return 0;
}

/* Returns 0 to go on, 2 for a usage error, -1 for --help/--version done. */
static int cmd_parse_flags(int argc, char **argv, zt_flags *f)
{
    int rc;
    memset(f, 0, sizeof *f);
    zt_model_args_init(&f->model);
    f->model.name[0] = '\0';
    f->steps = f->epochs = -1;
    f->num_samples = ZT_SYNTHETIC_DEFAULT_SAMPLES;
    f->seed = 1234;
    f->device = "auto";
    f->comm = "auto";
    f->num_gpus = f->num_nodes = -1;
    zt_config_overrides_init(&f->ov);
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (cmd_is_first_process())
                fputs(usage_text, stdout);
            return -1;
        }
        if (strcmp(arg, "--version") == 0) {
            if (cmd_is_first_process())
                printf("zerotrain %s (backends: cpu%s; comm: mpi%s)\n", ZT_VERSION,
                       zt_backend_cuda_built() ? ", cuda" : "",
                       zt_comm_nccl_built() ? ", nccl" : "");
            return -1;
        }
        if (strncmp(arg, "--", 2) != 0)
            return cmd_usage_error("unexpected argument '%s'%s", arg, "");
        if (strncmp(arg, "--estimate-memory", 17) == 0 && (arg[17] == '\0' || arg[17] == '=')) {
            if (arg[17] == '=')
                return cmd_usage_error("--estimate-memory takes no value (got '%s')%s", arg + 18,
                                       "");
            f->estimate_memory = true;
            continue;
        }
        if (!strcmp(arg, "--tf32")) {
            f->tf32 = true;
            continue;
        }
        /* --resume takes a tag only when one follows: --resume, --resume TAG,
         * --resume=TAG. */
        if (!strncmp(arg, "--resume", 8) && (arg[8] == '\0' || arg[8] == '=')) {
            f->resume = true;
            if (arg[8] == '=')
                f->resume_tag = arg + 9;
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                f->resume_tag = argv[++i];
            continue;
        }
        /* --flag=value or --flag value */
        char name[64];
        const char *val = NULL;
        const char *eq = strchr(arg, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
            if (i + 1 < argc)
                val = argv[i + 1];
        }
        static const char *known[] = {"--config", "--deepspeed_config", "--model", "--width",
                                      "--layers", "--in-size", "--out-size", "--num-samples",
                                      "--steps", "--epochs", "--seed", "--device", "--comm", "--lr",
                                      "--train-batch-size", "--micro-batch-size",
                                      "--gradient-accumulation-steps", "--report",
                                      "--dump-params", "--num-gpus", "--num-nodes",
                                      "--data", "--tokenizer", "--n-layer", "--n-head",
                                      "--n-embd", "--block-size", "--embed-dim",
                                      "--hidden-dim", "--max-len", "--dropout",
                                      "--activation", "--vocab-size", "--eval-interval",
                                      "--eval-iters", "--sample", "--dump-grads",
                                      "--activation-checkpoint-interval", "--inject-overflow",
                                      "--save-dir", "--load-dir", "--save-interval",
                                      "--keep-last"};
        bool found = false;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++)
            found |= strcmp(name, known[k]) == 0;
        if (!found)
            return cmd_usage_error("unknown flag '%s'%s", name, "");
        if (!val)
            return cmd_usage_error("flag '%s' needs a value%s", name, "");
        if (!eq)
            i++;

        int64_t iv = 0;
        bool ok = true;
        if (!strcmp(name, "--config") || !strcmp(name, "--deepspeed_config"))
            f->config_path = val;
        else if (!strcmp(name, "--model"))
            snprintf(f->model.name, sizeof f->model.name, "%s", val);
        else if (!strcmp(name, "--width"))
            ok = cmd_parse_i64(val, 1, &f->model.width);
        else if (!strcmp(name, "--layers"))
            ok = cmd_parse_i64(val, 2, &f->model.layers);
        else if (!strcmp(name, "--in-size"))
            ok = cmd_parse_i64(val, 1, &f->model.in_size);
        else if (!strcmp(name, "--out-size"))
            ok = cmd_parse_i64(val, 2, &f->model.out_size);
        else if (!strcmp(name, "--num-samples"))
            ok = cmd_parse_i64(val, 1, &f->num_samples);
        else if (!strcmp(name, "--steps"))
            ok = cmd_parse_i64(val, 0, &f->steps);
        else if (!strcmp(name, "--epochs"))
            ok = cmd_parse_i64(val, 1, &f->epochs);
        else if (!strcmp(name, "--seed")) {
            ok = cmd_parse_i64(val, 0, &iv);
            f->seed = (uint64_t)iv;
            f->seed_given = true;
        } else if (!strcmp(name, "--device")) {
            if (strcmp(val, "auto") && strcmp(val, "cpu") && strcmp(val, "cuda"))
                return cmd_usage_error("--device must be auto, cpu or cuda, not '%s'%s", val, "");
            f->device = val;
        } else if (!strcmp(name, "--comm")) {
            if (strcmp(val, "auto") && strcmp(val, "mpi") && strcmp(val, "nccl"))
                return cmd_usage_error("--comm must be auto, mpi or nccl, not '%s'%s", val, "");
            f->comm = val;
        } else if (!strcmp(name, "--lr"))
            ok = cmd_parse_f64(val, &f->ov.lr) && f->ov.lr > 0;
        else if (!strcmp(name, "--train-batch-size"))
            ok = cmd_parse_i64(val, 1, &f->ov.train_batch_size);
        else if (!strcmp(name, "--micro-batch-size"))
            ok = cmd_parse_i64(val, 1, &f->ov.micro_batch_size);
        else if (!strcmp(name, "--gradient-accumulation-steps"))
            ok = cmd_parse_i64(val, 1, &f->ov.gradient_accumulation_steps);
        else if (!strcmp(name, "--report"))
            f->report_path = val;
        else if (!strcmp(name, "--dump-params"))
            f->dump_path = val;
        else if (!strcmp(name, "--dump-grads"))
            f->grad_dump_path = val;
        else if (!strcmp(name, "--save-dir"))
            f->save_dir = val;
        else if (!strcmp(name, "--load-dir"))
            f->load_dir = val;
        else if (!strcmp(name, "--save-interval"))
            ok = cmd_parse_i64(val, 1, &f->save_interval);
        else if (!strcmp(name, "--keep-last"))
            ok = cmd_parse_i64(val, 1, &f->keep_last);
        else if (!strcmp(name, "--data"))
            f->data_path = val;
        else if (!strcmp(name, "--tokenizer"))
            f->tokenizer_dir = val;
        else if (!strcmp(name, "--n-layer"))
            ok = cmd_parse_i64(val, 1, &f->model.n_layer);
        else if (!strcmp(name, "--n-head"))
            ok = cmd_parse_i64(val, 1, &f->model.n_head);
        else if (!strcmp(name, "--n-embd") || !strcmp(name, "--embed-dim"))
            ok = cmd_parse_i64(val, 1, &f->model.n_embd);
        else if (!strcmp(name, "--block-size"))
            ok = cmd_parse_i64(val, 1, &f->model.block_size);
        else if (!strcmp(name, "--hidden-dim"))
            ok = cmd_parse_i64(val, 1, &f->model.hidden_dim);
        else if (!strcmp(name, "--max-len"))
            ok = cmd_parse_i64(val, 1, &f->model.max_len);
        else if (!strcmp(name, "--dropout"))
            ok = cmd_parse_f64(val, &f->model.dropout) && f->model.dropout < 1.0;
        else if (!strcmp(name, "--activation")) {
            if (strcmp(val, "relu") && strcmp(val, "gelu"))
                return cmd_usage_error("--activation must be relu or gelu, not '%s'%s", val, "");
            f->model.gelu = !strcmp(val, "gelu");
        } else if (!strcmp(name, "--vocab-size"))
            ok = cmd_parse_i64(val, 1, &f->model.vocab_size);
        else if (!strcmp(name, "--eval-interval"))
            ok = cmd_parse_i64(val, 1, &f->eval_interval);
        else if (!strcmp(name, "--eval-iters"))
            ok = cmd_parse_i64(val, 1, &f->eval_iters);
        else if (!strcmp(name, "--sample"))
            ok = cmd_parse_i64(val, 1, &f->sample);
        else if (!strcmp(name, "--activation-checkpoint-interval"))
            ok = cmd_parse_i64(val, 0, &f->ov.activation_checkpoint_interval);
        else if (!strcmp(name, "--inject-overflow") &&
                 !cmd_parse_inject(val, f->inject_steps, &f->n_inject_steps, &f->inject_unit))
            return cmd_usage_error("--inject-overflow wants STEP[,STEP...][:UNIT] with steps >= 1 "
                                   "(at most 64) and a unit index >= 0, not '%s'%s",
                                   val, "");
        else if (!strcmp(name, "--num-gpus") || !strcmp(name, "--num-nodes")) {
            int64_t *dst = !strcmp(name, "--num-gpus") ? &f->num_gpus : &f->num_nodes;
            if (!cmd_parse_i64(val, 1, dst) || *dst > ZT_ESTIMATE_MAX_WORLD)
                return cmd_usage_error("%s needs a positive integer (at most 1048576), not '%s'",
                                       name, val);
        }
        if (!ok)
            return cmd_usage_error("bad value '%s' for %s", val, name);
    }
    if ((f->num_gpus > 0 ? f->num_gpus : 1) * (f->num_nodes > 0 ? f->num_nodes : 1) >
        ZT_ESTIMATE_MAX_WORLD)
        return cmd_usage_error("--num-gpus x --num-nodes is more than 1048576 ranks%s%s", "", "");
    if (!f->estimate_memory && (f->num_gpus > 0 || f->num_nodes > 0))
        return cmd_usage_error("%s is only valid together with --estimate-memory%s",
                               f->num_gpus > 0 ? "--num-gpus" : "--num-nodes", "");
    if (f->estimate_memory && f->dump_path)
        return cmd_usage_error("--dump-params needs a training run; --estimate-memory trains "
                               "nothing%s%s", "", "");
    if (!f->config_path && !f->estimate_memory)
        return cmd_usage_error("--config FILE is required%s%s", "", "");
    if (!f->model.name[0])
        return cmd_usage_error("--model NAME is required (mlp, gptlite or classifier)%s%s", "",
                               "");
    if ((rc = cmd_check_model_flags(argc, argv, f->model.name)) != 0)
        return rc;
    zt_model_args_resolve(&f->model);
    if (f->estimate_memory && (f->grad_dump_path || f->sample > 0 || f->eval_interval > 0))
        return cmd_usage_error("--dump-grads, --sample and --eval-interval need a training run; "
                               "--estimate-memory trains nothing%s%s", "", "");
    if (f->steps >= 0 && f->epochs >= 0)
        return cmd_usage_error("give --steps or --epochs, not both%s%s", "", "");
    if (f->estimate_memory && (f->save_dir || f->resume))
        return cmd_usage_error("--save-dir and --resume need a training run; --estimate-memory "
                               "trains nothing%s%s", "", "");
    if (!f->save_dir && (f->save_interval > 0 || f->keep_last > 0))
        return cmd_usage_error("%s needs --save-dir DIR%s",
                               f->save_interval > 0 ? "--save-interval" : "--keep-last", "");
    if (f->resume && !f->save_dir && !f->load_dir)
        return cmd_usage_error("--resume reads --load-dir DIR or --save-dir DIR: give one%s%s",
                               "", "");
    if (f->load_dir && !f->resume)
        return cmd_usage_error("--load-dir is where --resume reads: add --resume%s%s", "", "");
    if (f->tf32 && !strcmp(f->device, "cpu"))
        return cmd_usage_error("--tf32 sets how CUDA GEMMs round; it has no meaning with "
                               "--device cpu%s%s", "", "");
    return 0;
}

/* The user's input (flags, config, data, files) is exit 2; the rest 1. */
static int cmd_exit_code(zt_status st)
{
    return st == ZT_ERR_USAGE || st == ZT_ERR_CONFIG || st == ZT_ERR_DATA ||
                   st == ZT_ERR_UNSUPPORTED || st == ZT_ERR_IO
               ? 2
               : 1;
}

static void cmd_print_error(const zt_world *w)
{
    fprintf(stderr, "[rank %d %s] error: %s\n", w->rank, w->host, zt_status_message());
    if (zt_status_hint()[0])
        fprintf(stderr, "hint: %s\n", zt_status_hint());
    fflush(stderr);
}

/* An error all ranks know about: the first failing rank prints, all exit. */
static int cmd_agreed_failure(zt_world *w, zt_status local)
{
    int first = -1;
    zt_status st = zt_world_agree(w, local, &first);
    if (st == ZT_OK)
        return 0;
    if (w->rank == first)
        cmd_print_error(w);
    zt_world_free(w);
    MPI_Finalize();
    return cmd_exit_code(st);
}

/* An error on this rank alone mid-run: print and take the whole job down. */
static void cmd_fatal(zt_world *w, zt_comm *comm, zt_status st)
{
    cmd_print_error(w);
    comm->ops->abort(comm, cmd_exit_code(st));
}

/* The run's data: the train and validation sets and, for the transformers,
 * the tokenizer they were made with. */
typedef struct {
    zt_dataset synthetic;
    zt_text text;
    zt_labelled labelled;
    zt_dataset *train, *val;
    const zt_tokenizer *tok;
} cmd_data;

/* Loads the files a transformer reads and sets the model's vocabulary from
 * them (the flags' model args must be resolved). */
static zt_status cmd_data_load(cmd_data *d, zt_flags *f)
{
    memset(d, 0, sizeof *d);
    zt_model_args *a = &f->model;
    bool gpt = !strcmp(a->name, "gptlite");
    if (strcmp(a->name, "classifier") && !gpt)
        return ZT_OK; /* the mlp's data follows its model; unknown models fail to build */
    if (!f->data_path)
        return zt_fail(ZT_ERR_USAGE,
                       gpt ? "tiny shakespeare is ../shared/data/tinyshakespeare/input.txt in "
                             "the project's checkout"
                           : "the IMDB sample is ../shared/data/imdb/imdb-2500.csv in the "
                             "project's checkout",
                       "--model %s needs --data PATH", a->name);
    if (gpt) {
        ZT_TRY(zt_text_load(&d->text, f->data_path, f->tokenizer_dir, a->block_size, f->seed));
        d->train = &d->text.train;
        d->val = &d->text.val;
        d->tok = &d->text.tok;
    } else {
        ZT_TRY(zt_labelled_load(&d->labelled, f->data_path, f->tokenizer_dir, a->max_len));
        d->train = &d->labelled.train;
        d->val = &d->labelled.val;
        d->tok = &d->labelled.tok;
    }
    if (a->vocab_size > 0 && a->vocab_size < d->tok->vocab_size)
        return zt_fail(ZT_ERR_USAGE, "leave --vocab-size out to use the tokenizer's",
                       "--vocab-size %lld is smaller than the tokenizer's %lld tokens",
                       (long long)a->vocab_size, (long long)d->tok->vocab_size);
    if (a->vocab_size <= 0)
        a->vocab_size = d->tok->vocab_size;
    return ZT_OK;
}

static void cmd_data_free(cmd_data *d)
{
    if (d->train == &d->synthetic)
        d->synthetic.free(&d->synthetic);
    else if (d->train == &d->text.train)
        zt_text_free(&d->text);
    else if (d->train == &d->labelled.train)
        zt_labelled_free(&d->labelled);
    d->train = d->val = NULL;
}

static void cmd_print_summary(const zt_world *w, const zt_config *cfg, const zt_model *m,
                              const zt_trainer *t, const cmd_data *d, int64_t steps)
{
    static const char *tok_names[] = {"characters", "bytes", "GPT-2 BPE"};
    zt_trainer_stats s;
    zt_trainer_stats_get(t, &s);
    const zt_layout *lay = s.layout;
    printf("zerotrain %s: %d rank(s) on %d node(s), device %s, comm %s\n", ZT_VERSION,
           w->size, w->n_nodes, s.device, s.comm);
    printf("  model %s: %lld parameters in %d units (flat %lld, padded for %d ranks)\n",
           m->name, (long long)m->n_params, m->n_units, (long long)lay->padded_numel,
           lay->world_size);
    if (d->tok)
        printf("  data: %lld training samples, %lld validation samples of up to %lld tokens; "
               "vocabulary %lld (%s)\n",
               (long long)d->train->n_samples, (long long)d->val->n_samples,
               (long long)m->seq_len, (long long)d->tok->vocab_size, tok_names[d->tok->kind]);
    printf("  batch: train_batch_size %lld = micro %lld x gas %lld x world %d; %lld steps "
           "(%lld per epoch)\n",
           (long long)cfg->train_batch_size, (long long)cfg->micro_batch_size,
           (long long)cfg->gradient_accumulation_steps, w->size, (long long)steps,
           (long long)s.steps_per_epoch);
    printf("  zero stage %d, precision %s, optimizer %s lr %g, scheduler %s, "
           "gradient_clipping %g, reduce_bucket_size %lld, overlap_comm %s\n",
           cfg->zero.stage, zt_dtype_name(s.compute_dtype),
           zt_optim_type_name(cfg->optimizer.type), cfg->optimizer.lr,
           zt_sched_type_name(cfg->scheduler.type), cfg->gradient_clipping,
           (long long)cfg->zero.reduce_bucket_size, cfg->zero.overlap_comm ? "on" : "off");
    if (s.policy->params_sharded)
        printf("  stage 3: %lld of %lld parameters in persistent units, prefetch %lld, "
               "max live %lld, max reuse distance %lld, hpZ %lld, MiCS shard %lld\n",
               (long long)lay->persistent_numel, (long long)lay->padded_numel,
               (long long)cfg->zero.stage3_prefetch_bucket_size,
               (long long)cfg->zero.stage3_max_live_parameters,
               (long long)cfg->zero.stage3_max_reuse_distance,
               (long long)cfg->zero.zero_hpz_partition_size,
               (long long)(cfg->zero.mics_shard_size > 0 ? cfg->zero.mics_shard_size : w->size));
    if (s.mixed)
        printf("  mixed precision: %s parameters and activations, fp32 master weights, "
               "gradients %s, communication %s, loss scale %s\n",
               zt_dtype_name(s.compute_dtype), zt_dtype_name(s.grad_dtype),
               zt_dtype_name(s.comm_dtype),
               cfg->fp16.enabled ? (s.dynamic_loss_scale ? "dynamic" : "static") : "none");
    if (s.offload_optimizer || s.offload_param)
        printf("  offload: optimizer %s (master, moments and gradient partition on the host, "
               "CPU Adam), parameters %s\n",
               s.offload_optimizer ? "cpu" : "none", s.offload_param ? "cpu" : "none");
    if (s.checkpoint_interval > 0)
        printf("  activation checkpointing: every %lld unit(s) of %d, checkpoints on the %s\n",
               (long long)s.checkpoint_interval, m->n_units,
               s.cpu_checkpointing ? "host" : "device");
    for (int i = 0; i < cfg->n_notes; i++)
        printf("  note: %s\n", cfg->notes[i]);
    fflush(stdout);
}

/* --sample: every rank generates (stage 3 gathers are collective), rank 0
 * prints. */
static zt_status cmd_sample(const zt_world *w, zt_trainer *t, const cmd_data *d, int64_t n,
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

/* --estimate-memory: plans every stage for G x N ranks, rank 0 prints (and
 * writes --report), nothing trains. Every rank computes the same plan so a
 * config error is agreed on like a training run's. */
static int cmd_estimate(zt_world *w, const zt_flags *f)
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
     * batch and lr flags fill the "auto" values as for any config. */
    static const char *default_text =
        "{\"train_micro_batch_size_per_gpu\": \"auto\",\n"
        " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"auto\"}}}\n";
    zt_config cfg;
    zt_status st = f->config_path ? zt_config_parse_file(f->config_path, &f->ov,
                                                         num_gpus * num_nodes, &cfg)
                                  : zt_config_parse_string(default_text, "default config (Adam)",
                                                           &f->ov, num_gpus * num_nodes, &cfg);
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;

    /* The vocabulary comes from --data when given; without it the
     * transformers take the one users run them with: tiny shakespeare's 65
     * characters, GPT-2's 50257 BPE tokens. */
    zt_flags data_flags = *f;
    cmd_data data;
    st = f->data_path ? cmd_data_load(&data, &data_flags) : ZT_OK;
    if (f->data_path)
        cmd_data_free(&data);
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;
    zt_model_args args = data_flags.model;
    if (args.vocab_size <= 0)
        args.vocab_size = !strcmp(args.name, "gptlite") ? 65 : 50257;
    zt_model model;
    zt_estimate est;
    st = zt_model_build(&args, &model);
    if (st == ZT_OK) {
        st = zt_estimate_run(&est, &cfg, &model, num_gpus, num_nodes);
        if (st != ZT_OK)
            zt_model_free(&model);
    }
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;
    st = ZT_OK;
    if (w->rank == 0) {
        zt_estimate_print(&est, stdout);
        for (int i = 0; i < cfg.n_notes; i++)
            printf("  note: %s\n", cfg.notes[i]);
        fflush(stdout);
        if (f->report_path)
            st = zt_estimate_write_json(&est, f->report_path);
    }
    zt_model_free(&model);
    if ((rc = cmd_agreed_failure(w, st)) != 0)
        return rc;
    zt_world_free(w);
    MPI_Finalize();
    return 0;
}

/* --device/--comm: every rank takes the same decision from the smallest GPU
 * count of any node, builds its backend on local_rank % count and the comm. */
static zt_status cmd_devices(const zt_world *w, const zt_flags *f, const zt_config *cfg,
                             zt_backend *be, zt_comm *comm, FILE *notice_to)
{
    const char *why = "";
    /* --device cpu never touches the CUDA driver (its start-up costs time). */
    int gpus = strcmp(f->device, "cpu") ? zt_backend_cuda_device_count(&why) : 0;
    int fewest = gpus;
    if (MPI_Allreduce(&gpus, &fewest, 1, MPI_INT, MPI_MIN, w->comm) != MPI_SUCCESS)
        return zt_fail(ZT_ERR_COMM, "", "cannot agree on the GPU count");
    if (fewest == 0 && gpus > 0)
        why = "another node has none";
    zt_device_request req = {.device = f->device,
                             .comm = f->comm,
                             .cuda_built = zt_backend_cuda_built(),
                             .nccl_built = zt_comm_nccl_built(),
                             .gpu_count = fewest,
                             .no_gpu_why = why,
                             .local_rank = w->local_rank,
                             .local_size = w->local_size};
    zt_device_choice ch;
    ZT_TRY(zt_device_choose(&req, &ch));
    if (f->tf32 && ch.device != ZT_DEVICE_CUDA)
        return zt_fail(ZT_ERR_USAGE, "leave --tf32 out on the CPU",
                       "--tf32: the device is the CPU (%s)", ch.notice);
    if (w->rank == 0 && ch.notice[0]) {
        fprintf(notice_to, "%s\n", ch.notice);
        fflush(notice_to);
    }
    if (ch.device == ZT_DEVICE_CUDA) {
        zt_cuda_options opt = {.device = ch.ordinal,
                               .tf32 = f->tf32,
                               .gemm_dtype = zt_config_compute_dtype(cfg)};
        ZT_TRY(zt_backend_cuda_init(be, &opt));
    } else {
        ZT_TRY(zt_backend_cpu_init(be));
    }
    if (ch.comm == ZT_COMM_USE_NCCL)
        return zt_comm_nccl_init(comm, w->comm, be);
    if (ch.comm == ZT_COMM_USE_STAGED)
        return zt_comm_staged_init(comm, w->comm, be);
    return zt_comm_mpi_init(comm, w->comm);
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
    zt_status st = zt_ckpt_save(t, &s->meta, s->dir, s->keep_last, &info);
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

/* An error of a subcommand that runs without a world. */
static int cmd_local_failure(zt_status st)
{
    fprintf(stderr, "zerotrain: error: %s\n", zt_status_message());
    if (zt_status_hint()[0])
        fprintf(stderr, "hint: %s\n", zt_status_hint());
    return cmd_exit_code(st);
}

/* The subcommands' flags. */
typedef struct {
    const char *dir; /* consolidate's DIR, or --checkpoint */
    const char *tag, *out, *prompt, *data, *tokenizer, *device, *comm;
    int64_t length, eval_iters, micro_batch;
    double temperature;
    uint64_t seed;
} cmd_sub_flags;

static const char *sub_usage =
    "usage: zerotrain consolidate DIR [--tag T] --out FILE\n"
    "       zerotrain generate --checkpoint DIR [--tag T] [--prompt TEXT] [--length N]\n"
    "                 [--temperature T] [--seed S] [--tokenizer DIR] [--device auto|cpu|cuda]\n"
    "       zerotrain eval --checkpoint DIR [--tag T] --data PATH [--eval-iters K]\n"
    "                 [--micro-batch-size N] [--tokenizer DIR] [--device auto|cpu|cuda]\n"
    "\n"
    "  consolidate  write the checkpoint's fp32 weights as one file in the --dump-params\n"
    "               format (FILE) and a JSON index of its tensors (FILE.json)\n"
    "  generate     gptlite: print the prompt and N sampled tokens (temperature 0: greedy;\n"
    "               default 1; --length default 200; the prompt defaults to a newline)\n"
    "  eval         classifier or gptlite: validation loss (and accuracy) on the validation\n"
    "               split of --data (CSV or aclImdb, or a text file)\n"
    "  --tag T      a checkpoint in DIR other than the one DIR/latest names\n"
    "  --tokenizer DIR  BPE files in place of the directory the checkpoint recorded\n";

/* Returns 0 to go on, 2 for a usage error, -1 after --help. */
static int cmd_parse_sub(int argc, char **argv, const char *cmd, cmd_sub_flags *f)
{
    memset(f, 0, sizeof *f);
    f->length = 200;
    f->temperature = 1.0;
    f->seed = 1234;
    f->device = "auto";
    f->comm = "auto";
    bool consolidate = !strcmp(cmd, "consolidate"), generate = !strcmp(cmd, "generate");
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            if (cmd_is_first_process())
                fputs(sub_usage, stdout);
            return -1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            if (!consolidate || f->dir)
                return cmd_usage_error("unexpected argument '%s' for zerotrain %s", arg, cmd);
            f->dir = arg;
            continue;
        }
        char name[64];
        const char *eq = strchr(arg, '='), *val;
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return cmd_usage_error("flag '%s' needs a value%s", name, "");
        bool ok = true;
        int64_t iv = 0;
        if (!strcmp(name, "--tag"))
            f->tag = val;
        else if (consolidate && !strcmp(name, "--out"))
            f->out = val;
        else if (!consolidate && !strcmp(name, "--checkpoint"))
            f->dir = val;
        else if (!consolidate && !strcmp(name, "--device"))
            f->device = val;
        else if (!consolidate && !strcmp(name, "--comm"))
            f->comm = val;
        else if (generate && !strcmp(name, "--prompt"))
            f->prompt = val;
        else if (generate && !strcmp(name, "--length"))
            ok = cmd_parse_i64(val, 1, &f->length);
        else if (generate && !strcmp(name, "--temperature"))
            ok = cmd_parse_f64(val, &f->temperature);
        else if (generate && !strcmp(name, "--seed")) {
            ok = cmd_parse_i64(val, 0, &iv);
            f->seed = (uint64_t)iv;
        } else if (!consolidate && !generate && !strcmp(name, "--data"))
            f->data = val;
        else if (!consolidate && !strcmp(name, "--tokenizer"))
            f->tokenizer = val;
        else if (!consolidate && !generate && !strcmp(name, "--eval-iters"))
            ok = cmd_parse_i64(val, 1, &f->eval_iters);
        else if (!consolidate && !generate && !strcmp(name, "--micro-batch-size"))
            ok = cmd_parse_i64(val, 1, &f->micro_batch);
        else
            return cmd_usage_error("unknown flag '%s' for zerotrain %s", name, cmd);
        if (!ok)
            return cmd_usage_error("bad value '%s' for %s", val, name);
    }
    if (!f->dir)
        return cmd_usage_error(consolidate ? "zerotrain %s needs the checkpoint directory DIR%s"
                                           : "zerotrain %s needs --checkpoint DIR%s",
                               cmd, "");
    if (consolidate && !f->out)
        return cmd_usage_error("zerotrain %s needs --out FILE%s", cmd, "");
    if (!strcmp(cmd, "eval") && !f->data)
        return cmd_usage_error("zerotrain %s needs --data PATH (the validation split is "
                               "evaluated)%s",
                               cmd, "");
    return 0;
}

/* zerotrain consolidate DIR [--tag T] --out FILE: one process, no MPI. */
static int cmd_consolidate(int argc, char **argv)
{
    cmd_sub_flags f;
    int rc = cmd_parse_sub(argc, argv, "consolidate", &f);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    zt_ckpt c;
    zt_status st = zt_ckpt_open(&c, NULL, f.dir, f.tag);
    if (st != ZT_OK)
        return cmd_local_failure(st);
    st = zt_ckpt_consolidate(&c, f.out);
    if (st == ZT_OK) {
        zt_model_args a;
        int64_t n = 0;
        for (int u = 0; u < c.n_units; u++)
            n += c.units[u].numel;
        printf("zerotrain: consolidated %s/%s (step %lld, %s): %lld fp32 parameters -> %s "
               "(tensor index %s.json)\n",
               c.dir, c.tag, (long long)c.global_steps,
               zt_ckpt_model_args(&c, &a) == ZT_OK ? a.name : "?", (long long)n, f.out, f.out);
    }
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
    zt_text text;     /* eval, gptlite */
    zt_labelled labelled; /* eval, classifier */
    const zt_tokenizer *tokp;
    const zt_dataset *val;
} cmd_task;

/* The checkpoint's tokenizer (generate) or the --data validation split read
 * with it (eval). */
static zt_status cmd_task_data(cmd_task *k, const cmd_sub_flags *f, bool generate)
{
    const char *dir = NULL, *kind = zt_ckpt_tokenizer_kind(&k->ck, &dir);
    bool gpt = !strcmp(k->args.name, "gptlite");
    if (generate && !gpt)
        return zt_fail(ZT_ERR_USAGE, "generate samples text from a gptlite checkpoint",
                       "checkpoint %s holds a %s model", k->ck.path, k->args.name);
    if (!generate && !gpt && strcmp(k->args.name, "classifier") != 0)
        return zt_fail(ZT_ERR_USAGE, "eval reads text: use a classifier or gptlite checkpoint",
                       "checkpoint %s holds a %s model", k->ck.path, k->args.name);
    if (generate) {
        ZT_TRY(zt_ckpt_tokenizer(&k->ck, f->tokenizer, &k->tok));
        k->tokp = &k->tok;
        return ZT_OK;
    }
    const char *bpe = f->tokenizer ? f->tokenizer : (!strcmp(kind, "bpe") ? dir : NULL);
    if (gpt) {
        ZT_TRY(zt_text_load(&k->text, f->data, bpe, k->args.block_size, zt_ckpt_seed(&k->ck)));
        k->tokp = &k->text.tok;
        k->val = &k->text.val;
    } else {
        ZT_TRY(zt_labelled_load(&k->labelled, f->data, bpe, k->args.max_len));
        k->tokp = &k->labelled.tok;
        k->val = &k->labelled.val;
    }
    return zt_ckpt_check_tokenizer(&k->ck, k->tokp);
}

static void cmd_task_free(cmd_task *k, bool generate)
{
    if (generate && k->tokp)
        zt_tokenizer_free(&k->tok);
    else if (k->val == &k->text.val)
        zt_text_free(&k->text);
    else if (k->val == &k->labelled.val)
        zt_labelled_free(&k->labelled);
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
    if (st == ZT_OK && w->rank == 0)
        st = zt_tokenizer_decode(k->tokp, ids + skip, n_prompt + f->length - skip, &text, &len);
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

/* zerotrain generate|eval --checkpoint DIR ...: a trainer built from the
 * checkpoint's model (fp32, stage 0) loads its weights; any world size. */
static int cmd_from_checkpoint(int argc, char **argv)
{
    const char *cmd = argv[1];
    bool generate = !strcmp(cmd, "generate");
    cmd_sub_flags f;
    int rc = cmd_parse_sub(argc, argv, cmd, &f);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    zt_world world;
    zt_status st = zt_world_init(&world, &argc, &argv);
    if (st != ZT_OK)
        return cmd_local_failure(st);
    cmd_task k;
    memset(&k, 0, sizeof k);
    st = zt_ckpt_open(&k.ck, &world, f.dir, f.tag);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    st = zt_ckpt_model_args(&k.ck, &k.args);
    if (st == ZT_OK)
        st = cmd_task_data(&k, &f, generate);
    zt_model model;
    memset(&model, 0, sizeof model);
    if (st == ZT_OK)
        st = zt_model_build(&k.args, &model);
    int64_t micro = f.micro_batch;
    json_t *jm = json_object_get(json_object_get(k.ck.root, "training"),
                                 "train_micro_batch_size_per_gpu");
    if (micro <= 0)
        micro = generate || !json_is_integer(jm) ? 1 : json_integer_value(jm);
    char text[256];
    snprintf(text, sizeof text,
             "{\"train_micro_batch_size_per_gpu\": %lld, \"gradient_accumulation_steps\": 1, "
             "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.001}}}",
             (long long)micro);
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    zt_config cfg;
    if (st == ZT_OK)
        st = zt_config_load_string(text, "checkpoint inference settings", &ov, world.size, &cfg);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;

    zt_flags dev;
    memset(&dev, 0, sizeof dev);
    dev.device = f.device;
    dev.comm = f.comm;
    zt_backend be;
    zt_comm comm;
    memset(&be, 0, sizeof be);
    memset(&comm, 0, sizeof comm);
    st = cmd_devices(&world, &dev, &cfg, &be, &comm, stderr);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    /* The trainer only needs the data's shape: nothing is trained. */
    zt_dataset shape = {.name = "checkpoint",
                        .n_samples = cfg.train_batch_size,
                        .x_numel = model.in_numel,
                        .tokens_numel = model.seq_len,
                        .labels_numel = model.labels_numel,
                        .n_classes = model.n_classes,
                        .vocab_size = model.vocab_size,
                        .get = cmd_shape_get};
    zt_ckpt_meta meta = {.model = k.args, .tok = k.tokp};
    zt_trainer *trainer = NULL;
    zt_trainer_options topt = {.cfg = &cfg,
                               .model = &model,
                               .data = &shape,
                               .world = &world,
                               .be = &be,
                               .comm = &comm,
                               .seed = zt_ckpt_seed(&k.ck),
                               .inject_unit = -1};
    st = zt_trainer_init(&trainer, &topt);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    st = zt_ckpt_restore(&k.ck, trainer, &meta, true);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    if (generate) {
        st = cmd_generate(&world, trainer, &k, &f);
    } else {
        double loss = NAN, acc = NAN;
        st = zt_trainer_eval(trainer, k.val, f.eval_iters, &loss, &acc);
        if (st == ZT_OK && world.rank == 0) {
            printf("zerotrain: eval %s/%s (step %lld, %s): validation loss %.6f", k.ck.dir,
                   k.ck.tag, (long long)k.ck.global_steps, k.args.name, loss);
            if (!isnan(acc))
                printf(", accuracy %.4f", acc);
            printf(" (%lld validation samples of %s)\n", (long long)k.val->n_samples, f.data);
            fflush(stdout);
        }
    }
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    zt_trainer_free(trainer);
    zt_comm_free(&comm);
    zt_backend_free(&be);
    zt_model_free(&model);
    cmd_task_free(&k, generate);
    zt_world_free(&world);
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "consolidate"))
        return cmd_consolidate(argc, argv);
    if (argc > 1 && (!strcmp(argv[1], "generate") || !strcmp(argv[1], "eval")))
        return cmd_from_checkpoint(argc, argv);
    zt_flags flags;
    int rc = cmd_parse_flags(argc, argv, &flags);
    if (rc != 0)
        return rc < 0 ? 0 : rc;

    zt_world world;
    zt_status st = zt_world_init(&world, &argc, &argv);
    if (st != ZT_OK) {
        fprintf(stderr, "zerotrain: error: %s\nhint: %s\n", zt_status_message(),
                zt_status_hint());
        return 1;
    }
    if (flags.estimate_memory)
        return cmd_estimate(&world, &flags);

    zt_config cfg;
    st = zt_config_load_file(flags.config_path, &flags.ov, world.size, &cfg);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    /* The checkpoint is read first: the data and dropout follow its seed. */
    zt_ckpt resume;
    memset(&resume, 0, sizeof resume);
    if (flags.resume) {
        st = zt_ckpt_open(&resume, &world, flags.load_dir ? flags.load_dir : flags.save_dir,
                          flags.resume_tag);
        if ((rc = cmd_agreed_failure(&world, st)) != 0)
            return rc;
        if (!flags.seed_given)
            flags.seed = zt_ckpt_seed(&resume);
    }
    if (flags.save_dir &&
        (rc = cmd_agreed_failure(&world, zt_ckpt_check_dir(&world, flags.save_dir))) != 0)
        return rc;

    cmd_data data;
    zt_model model;
    zt_backend be;
    zt_comm comm;
    zt_trainer *trainer = NULL;
    st = cmd_data_load(&data, &flags);
    if (st == ZT_OK)
        st = zt_model_build(&flags.model, &model);
    if (st == ZT_OK && !data.train) {
        zt_synthetic_init(&data.synthetic, flags.num_samples, model.in_numel, model.n_classes,
                          flags.seed);
        data.train = &data.synthetic;
    }
    memset(&be, 0, sizeof be);
    memset(&comm, 0, sizeof comm);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    st = cmd_devices(&world, &flags, &cfg, &be, &comm, stdout);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    if (flags.inject_unit >= model.n_units)
        cmd_fatal(&world, &comm,
                  zt_fail(ZT_ERR_USAGE, "units are numbered from 0 in model order",
                          "--inject-overflow: unit %d does not exist (model %s has %d units)",
                          flags.inject_unit, model.name, model.n_units));
    cmd_saver saver = {.world = &world,
                       .dir = flags.save_dir,
                       .interval = flags.save_interval,
                       .keep_last = flags.keep_last,
                       .last_saved = -1,
                       .meta = {.model = flags.model,
                                .tok = data.tok,
                                .tokenizer_dir = flags.tokenizer_dir,
                                .data_path = flags.data_path}};
    zt_monitor mon;
    memset(&mon, 0, sizeof mon);
    zt_trainer_options topt = {.cfg = &cfg,
                               .model = &model,
                               .data = data.train,
                               .world = &world,
                               .be = &be,
                               .comm = &comm,
                               .seed = flags.seed,
                               .eval_data = flags.eval_interval > 0 ? data.val : NULL,
                               .eval_interval = flags.eval_interval,
                               .eval_iters = flags.eval_iters,
                               .grad_dump_path = flags.grad_dump_path,
                               .inject_steps = flags.inject_steps,
                               .n_inject_steps = flags.n_inject_steps,
                               .inject_unit = flags.inject_unit,
                               .observer = zt_monitor_observer(&mon),
                               .after_step = flags.save_dir ? cmd_after_step : NULL,
                               .after_step_ctx = &saver};
    st = zt_trainer_init(&trainer, &topt);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;
    if (flags.resume) {
        st = zt_ckpt_restore(&resume, trainer, &saver.meta, false);
        if ((rc = cmd_agreed_failure(&world, st)) != 0)
            return rc;
        if (flags.save_dir && cmd_same_dir(flags.save_dir, resume.dir))
            saver.last_saved = cmd_steps_done(trainer);
    }

    int64_t steps = flags.steps >= 0 ? flags.steps
                                     : (flags.epochs > 0 ? flags.epochs : 1) *
                                           zt_trainer_steps_per_epoch(trainer);
    if (world.rank == 0)
        cmd_print_summary(&world, &cfg, &model, trainer, &data, steps);
    if (world.rank == 0 && flags.resume) {
        printf("zerotrain: resumed from %s/%s at step %lld (saved by %d rank(s) at ZeRO stage "
               "%d)\n",
               resume.dir, resume.tag, (long long)cmd_steps_done(trainer), resume.world_size,
               resume.stage);
        fflush(stdout);
    }
    zt_ckpt_close(&resume);

    /* The CSV monitor files are rank 0's alone: a failure is one rank's. */
    st = zt_monitor_init(&mon, &cfg, world.rank);
    if (st != ZT_OK)
        cmd_fatal(&world, &comm, st);
    st = zt_trainer_train(trainer, steps);
    zt_monitor_free(&mon);
    /* A failed save is known to every rank; anything else may be one rank's. */
    if (st != ZT_OK && saver.failed)
        return cmd_agreed_failure(&world, st);
    if (st != ZT_OK)
        cmd_fatal(&world, &comm, st);
    if (flags.save_dir && saver.last_saved != cmd_steps_done(trainer) &&
        (rc = cmd_agreed_failure(&world, cmd_save(trainer, &saver))) != 0)
        return rc;

    if (flags.sample > 0 && (st = cmd_sample(&world, trainer, &data, flags.sample,
                                               flags.seed)) != ZT_OK)
        cmd_fatal(&world, &comm, st);
    if (flags.dump_path && (rc = cmd_agreed_failure(
                                &world, zt_trainer_dump_params(trainer, flags.dump_path))) != 0)
        return rc;
    double param_norm = zt_trainer_param_norm(trainer);
    if (flags.report_path &&
        (rc = cmd_agreed_failure(&world, zt_report_write(flags.report_path, trainer,
                                                         param_norm))) != 0)
        return rc;
    if (world.rank == 0) {
        zt_trainer_stats ts;
        zt_trainer_stats_get(trainer, &ts);
        printf("zerotrain: done: %lld steps in %.2f s, final loss %.6f, %.2f samples/s, "
               "param norm %.6f, peak device memory %.3f GiB\n",
               (long long)ts.global_steps, ts.train_seconds,
               ts.global_steps > 0 ? ts.loss_history[ts.global_steps - 1] : NAN,
               ts.samples_per_sec, param_norm,
               (double)ts.mem->total_peak[ZT_MEM_DEVICE] / (1024.0 * 1024.0 * 1024.0));
        fflush(stdout);
    }
    zt_trainer_free(trainer);
    zt_comm_free(&comm);
    zt_backend_free(&be);
    cmd_data_free(&data);
    zt_model_free(&model);
    zt_world_free(&world);
    MPI_Finalize();
    return 0;
}
