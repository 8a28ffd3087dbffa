/*
 * flags: the flag tables of every command and the parser (cmd/flags.h); the
 * --help printer and the "did you mean" are in cmd/flags_help.c.
 */
#include "cmd/flags.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/exit.h"
#include "cmd/flags_impl.h"
#include "data/synthetic.h"
#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/train/estimate.h"
#include "models/registry.h"

/* ---- Values. ---- */

static bool flags_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* A finite real >= 0. */
static bool flags_f64(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0)
        return false;
    *out = v;
    return true;
}

static int flags_bad_value(const char *name, const char *val)
{
    return cmd_usage_error("bad value '%s' for %s", val, name);
}

/* "a|b|c" as "a, b or c". */
static void flags_choice_list(const char *choices, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (const char *c = choices; *c && len + 8 < n; c++) {
        if (*c != '|') {
            buf[len++] = *c;
            continue;
        }
        const char *sep = strchr(c + 1, '|') ? ", " : " or ";
        memcpy(buf + len, sep, strlen(sep));
        len += strlen(sep);
    }
    buf[len] = '\0';
}

static bool flags_in_choices(const char *val, const char *choices)
{
    size_t n = strlen(val);
    for (const char *c = choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL)
        if (!strncmp(c, val, n) && (c[n] == '|' || c[n] == '\0') && n > 0)
            return true;
    return false;
}

static int flags_choice_error(const char *name, const char *choices, const char *val)
{
    char list[128];
    flags_choice_list(choices, list, sizeof list);
    return cmd_usage_error("%s must be %s, not '%s'", name, list, val);
}

/* ---- Custom values. ---- */

static int parse_model(const char *name, const char *val, void *dst)
{
    (void)name;
    cmd_train_flags *f = dst;
    snprintf(f->model.name, sizeof f->model.name, "%s", val);
    return 0;
}

static int parse_train_seed(const char *name, const char *val, void *dst)
{
    cmd_train_flags *f = dst;
    int64_t v;
    if (!flags_i64(val, 0, INT64_MAX, &v))
        return flags_bad_value(name, val);
    f->seed = (uint64_t)v;
    f->seed_given = true;
    return 0;
}

static int parse_sub_seed(const char *name, const char *val, void *dst)
{
    cmd_sub_flags *f = dst;
    int64_t v;
    if (!flags_i64(val, 0, INT64_MAX, &v))
        return flags_bad_value(name, val);
    f->seed = (uint64_t)v;
    return 0;
}

static int parse_lr(const char *name, const char *val, void *dst)
{
    cmd_train_flags *f = dst;
    if (!flags_f64(val, &f->ov.lr) || !(f->ov.lr > 0))
        return flags_bad_value(name, val);
    return 0;
}

static int parse_temperature(const char *name, const char *val, void *dst)
{
    cmd_sub_flags *f = dst;
    return flags_f64(val, &f->temperature) ? 0 : flags_bad_value(name, val);
}

/* "3,5,6" or "3,5,6:2". */
static int parse_inject(const char *name, const char *val, void *dst)
{
    (void)name;
    cmd_train_flags *f = dst;
    char buf[512];
    int64_t u = -1;
    bool ok = strlen(val) < sizeof buf;
    if (ok) {
        snprintf(buf, sizeof buf, "%s", val);
        char *colon = strchr(buf, ':');
        if (colon) {
            *colon = '\0';
            ok = flags_i64(colon + 1, 0, INT32_MAX, &u);
        }
    }
    f->n_inject_steps = 0;
    char *save = NULL;
    for (char *tok = ok ? strtok_r(buf, ",", &save) : NULL; ok && tok;
         tok = strtok_r(NULL, ",", &save)) {
        ok = f->n_inject_steps < 64 &&
             flags_i64(tok, 1, INT64_MAX, &f->inject_steps[f->n_inject_steps]);
        f->n_inject_steps += ok;
    }
    if (!ok || f->n_inject_steps == 0)
        return cmd_usage_error("--inject-overflow wants STEP[,STEP...][:UNIT] with steps >= 1 "
                               "(at most 64) and a unit index >= 0, not '%s'",
                               val);
    f->inject_unit = (int)u;
    return 0;
}

/* HF's warmup_steps: a step count (>= 1) or a fraction of the run (< 1). */
static int parse_warmup(const char *name, const char *val, void *dst)
{
    cmd_train_flags *f = dst;
    if (!flags_f64(val, &f->warmup_steps) || (f->warmup_steps >= 1 &&
                                              f->warmup_steps != floor(f->warmup_steps)))
        return cmd_usage_error("%s wants a step count (an integer >= 1) or a fraction of the "
                               "run in [0, 1), not '%s'",
                               name, val);
    return 0;
}

/* DeepSpeed's launcher passes --local_rank to every process; mpirun already
 * told each rank where it runs. */
static int parse_local_rank(const char *name, const char *val, void *dst)
{
    cmd_train_flags *f = dst;
    if (!flags_i64(val, 0, INT32_MAX, &f->local_rank))
        return flags_bad_value(name, val);
    return 0;
}

static int parse_hardware(const char *name, const char *val, void *dst)
{
    cmd_train_flags *f = dst;
    int64_t *to = !strcmp(name, "--num-gpus") ? &f->num_gpus : &f->num_nodes;
    if (!flags_i64(val, 1, ZT_ESTIMATE_MAX_WORLD, to))
        return cmd_usage_error("%s needs a positive integer (at most 1048576), not '%s'", name,
                               val);
    return 0;
}

/* ---- The tables. ---- */

/* Sampling runs a forward pass per token: more than this is a typo, not a
 * request (and it keeps the token buffers' sizes far from overflowing). */
#define MAX_SAMPLE_TOKENS (INT64_C(1) << 24)

#define T(field) offsetof(cmd_train_flags, field)
#define S(field) offsetof(cmd_sub_flags, field)
#define STR(n, mv, field, help) {n, NULL, mv, help, FLAG_STRING, field, 0, 0, 0, NULL, NULL, FOR_ALL, NULL}
#define INT(n, mv, field, lo, help) \
    {n, NULL, mv, help, FLAG_INT, field, 0, lo, INT64_MAX, NULL, NULL, FOR_ALL, NULL}
#define CUSTOM(n, mv, fn, help) {n, NULL, mv, help, FLAG_CUSTOM, 0, 0, 0, 0, NULL, fn, FOR_ALL, NULL}

static const cmd_flag train_flags[] = {
    {"--config", "--deepspeed_config", "FILE",
     "DeepSpeed JSON config (comments and trailing commas\nallowed; docs/config.md)", FLAG_STRING,
     T(config_path), 0, 0, 0, NULL, NULL, FOR_ALL, "Run"},
    CUSTOM("--model", "NAME", parse_model, "mlp, gptlite or classifier"),
    {"--data", NULL, "PATH",
     "gptlite: a text file (e.g. tiny shakespeare's\n"
     "input.txt); classifier: a CSV (review,sentiment) or an\n"
     "aclImdb directory",
     FLAG_STRING, T(data_path), 0, 0, 0, NULL, NULL, FOR_FILES, NULL},
    {"--tokenizer", NULL, "DIR",
     "GPT-2 BPE (DIR/encoder.json, DIR/vocab.bpe); default:\n"
     "characters of the file (gptlite), bytes (classifier)",
     FLAG_STRING, T(tokenizer_dir), 0, 0, 0, NULL, NULL, FOR_FILES, NULL},
    {"--num-samples", NULL, "N", "mlp: synthetic data set length (default 65536)", FLAG_INT,
     T(num_samples), 0, 1, INT64_MAX, NULL, NULL, FOR_SYNTHETIC, NULL},
    {"--deepspeed", NULL, "[FILE]",
     "HF's --deepspeed FILE: the same as --config FILE;\n"
     "without FILE (DeepSpeed's switch) it does nothing",
     FLAG_OPTIONAL, T(deepspeed), T(deepspeed_path), 0, 0, NULL, NULL, FOR_ALL, NULL},
    {"--strict", NULL, NULL,
     "refuse config sections zerotrain only warns about\n"
     "(wandb, comet, trackio, checkpoint)",
     FLAG_SWITCH, T(ov.strict), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    CUSTOM("--local_rank", "N", parse_local_rank,
           "accepted for DeepSpeed's launcher and ignored: mpirun\nplaces the ranks"),
    {NULL, NULL, NULL, NULL, FLAG_MODEL, 0, 0, 0, 0, NULL, NULL, FOR_ALL, "Model shape"},
    {"--steps", NULL, "N", "optimizer steps of the run, counted from step 0", FLAG_INT, T(steps),
     0, 0, INT64_MAX, NULL, NULL, FOR_ALL, "Training"},
    INT("--epochs", "N", T(epochs), 1, "or: N passes over the data set (default 1)"),
    CUSTOM("--seed", "S", parse_train_seed, "seed of data, init and dropout (default 1234)"),
    CUSTOM("--lr", "X", parse_lr, "learning rate for \"auto\" or a missing optimizer lr"),
    {"--train-batch-size", NULL, "N", "fills \"auto\"/missing train_batch_size", FLAG_INT,
     T(ov.train_batch_size), 0, 1, ZT_CONFIG_MAX_TRAIN_BATCH, NULL, NULL, FOR_ALL, NULL},
    {"--micro-batch-size", NULL, "N", "fills train_micro_batch_size_per_gpu", FLAG_INT,
     T(ov.micro_batch_size), 0, 1, ZT_CONFIG_MAX_MICRO_BATCH, NULL, NULL, FOR_ALL, NULL},
    {"--gradient-accumulation-steps", NULL, "N", "fills gradient_accumulation_steps", FLAG_INT,
     T(ov.gradient_accumulation_steps), 0, 1, ZT_CONFIG_MAX_GAS, NULL, NULL, FOR_ALL, NULL},
    {"--fp16", NULL, NULL, "HF's --fp16: fp16.enabled \"auto\" (or missing) is true",
     FLAG_SWITCH, T(ov.fp16), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    {"--bf16", NULL, NULL, "HF's --bf16: bf16.enabled \"auto\" (or missing) is true",
     FLAG_SWITCH, T(ov.bf16), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    CUSTOM("--warmup-steps", "X", parse_warmup,
           "HF's warmup_steps for warmup_num_steps \"auto\": steps\n"
           "(>= 1) or a fraction of the run (< 1; default 0)"),
    INT("--activation-checkpoint-interval", "K", T(ov.activation_checkpoint_interval), 0,
        "keep the input of every K-th unit and recompute the\n"
        "units in between during backward (0: off)"),
    {"--eval-interval", NULL, "N", "validation every N steps and at the end", FLAG_INT,
     T(eval_interval), 0, 1, INT64_MAX, NULL, NULL, FOR_FILES, NULL},
    {"--eval-iters", NULL, "K",
     "micro-batches per rank per validation (default: the\nwhole validation split)",
     FLAG_INT, T(eval_iters), 0, 1, INT64_MAX, NULL, NULL, FOR_FILES, NULL},
    {"--sample", NULL, "N", "gptlite: rank 0 prints N generated tokens at the end", FLAG_INT,
     T(sample), 0, 1, MAX_SAMPLE_TOKENS, NULL, NULL, FOR_TEXT, NULL},
    {"--pipeline-stages", NULL, "P",
     "split the model's units into P pipeline stages; the\n"
     "world is P x D ranks, D data-parallel (default 1)",
     FLAG_INT, T(ov.pipeline_stages), 0, 1, 1 << 20, NULL, NULL, FOR_ALL, "Pipeline"},
    {"--partition-method", NULL, "M",
     "parameters (default), uniform or type:REGEX\n(DeepSpeed's partition_method)",
     FLAG_STRING, T(ov.partition_method), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    {"--pipeline-schedule", NULL, "1f1b|gpipe",
     "1f1b (default: at most P micro-batches in flight)\nor gpipe (all forwards, then all backwards)",
     FLAG_CHOICE, T(ov.pipeline_schedule), 0, 0, 0, "1f1b|gpipe", NULL, FOR_ALL, NULL},
    {"--device", NULL, "auto|cpu|cuda",
     "compute device (default auto: CUDA when built with it\n"
     "and a GPU answers, else the CPU, with a notice)",
     FLAG_CHOICE, T(dev.device), 0, 0, 0, "auto|cpu|cuda", NULL, FOR_ALL, "Devices"},
    {"--comm", NULL, "auto|mpi|nccl",
     "collectives (default auto: NCCL on CUDA when every\n"
     "rank has its own GPU, else MPI, staged through host\n"
     "memory for GPU buffers)",
     FLAG_CHOICE, T(dev.comm), 0, 0, 0, "auto|mpi|nccl", NULL, FOR_ALL, NULL},
    {"--tf32", NULL, NULL, "CUDA: let fp32 GEMMs use TF32 tensor cores (default off)",
     FLAG_SWITCH, T(dev.tf32), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    {"--attention", NULL, "flash|unfused",
     "transformer attention: fused flash ops, no (T, T) tensor\n"
     "(default), or the three-op path (scores GEMM, softmax,\n"
     "GEMM), kept for comparison",
     FLAG_CHOICE, T(attention), 0, 0, 0, "flash|unfused", NULL, FOR_ALL, NULL},
    {"--fused-ops", NULL, "on|off",
     "fused epilogues: residual + layernorm, bias + activation,\n"
     "activation + bias gradient (default on; off runs the\n"
     "op-by-op sequence they replace, the same fp32 results)",
     FLAG_CHOICE, T(dev.fused_ops), 0, 0, 0, "on|off", NULL, FOR_ALL, NULL},
    {"--typed-tensors", NULL, "on|off",
     "fp16/bf16: the units compute on the 16-bit tensors\n"
     "themselves where the backend can (default on), or\n"
     "(off) on fp32 copies of them, to compare against",
     FLAG_CHOICE, T(dev.typed_tensors), 0, 0, 0, "on|off", NULL, FOR_ALL, NULL},
    {"--report", NULL, "FILE", "write the run's JSON report (rank 0)", FLAG_STRING,
     T(report_path), 0, 0, 0, NULL, NULL, FOR_ALL, "Output"},
    {"--profile", NULL, NULL,
     "count every backend op of the training steps (calls,\n"
     "FLOPs, bytes per dtype) into the report's \"profile\"\n"
     "(scripts/roofline.py; needs --report)",
     FLAG_SWITCH, T(profile), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    {"--profile-time", NULL, NULL,
     "--profile, and each op's time too: the device is drained\n"
     "before and after every op, so the run is slower (see\n"
     "docs/roofline.md)",
     FLAG_SWITCH, T(profile_time), 0, 0, 0, NULL, NULL, FOR_ALL, NULL},
    INT("--log-interval", "N", T(log_interval), 0,
        "a progress line every N steps (0: none; default: every\n"
        "steps_per_print steps, or every ~10 s without it)"),
    STR("--log-file", "FILE", T(log_file),
        "the run's history as JSON lines, flushed at every\n"
        "progress line (default: REPORT.jsonl beside --report)"),
    STR("--dump-params", "FILE", T(dump_path),
        "write all fp32 parameters after training (raw\nlittle-endian float32, model order)"),
    STR("--dump-grads", "FILE", T(grad_dump_path),
        "write the first step's reduced gradient (same format;\n"
        "unscaled); a FILE with %d: every step's, %d = step"),
    {"--nonfinite", NULL, "stop|continue",
     "fp32/bf16: a step whose loss or gradients hold nan or inf\n"
     "stops the run (exit 1, default), or does what DeepSpeed\n"
     "does (steps on; bf16 skips an overflow) until 18 in a row",
     FLAG_CHOICE, T(nonfinite), 0, 0, 0, "stop|continue", NULL, FOR_ALL, NULL},
    CUSTOM("--inject-overflow", "STEPS[:UNIT]", parse_inject,
           "testing aid: at these steps (1-based, comma list)\n"
           "the last rank puts an inf into unit UNIT's gradient\n"
           "(default: the middle unit) before it is reduced"),
    {"--save-dir", NULL, "DIR",
     "save checkpoints into DIR (DIR/global_step<N>,\n"
     "DIR/latest) at the end of training and every\n"
     "--save-interval steps",
     FLAG_STRING, T(save_dir), 0, 0, 0, NULL, NULL, FOR_ALL, "Checkpoints"},
    INT("--save-interval", "N", T(save_interval), 1, "also save every N optimizer steps"),
    INT("--keep-last", "K", T(keep_last), 1, "after a save keep only the K newest checkpoints"),
    {"--resume", NULL, "[TAG]",
     "continue from the checkpoint DIR/latest names (or TAG)\n"
     "in --load-dir, else --save-dir; any world size, stage\n"
     "or offload setting (the model flags must match)",
     FLAG_OPTIONAL, T(resume), T(resume_tag), 0, 0, NULL, NULL, FOR_ALL, NULL},
    STR("--load-dir", "DIR", T(load_dir), "where --resume reads (default: --save-dir)"),
    STR("--init-from", "FILE", T(init_from),
        "start from these weights: a safetensors file or a\n"
        "zerotrain consolidate output (docs/interop.md); the\n"
        "optimizer starts fresh"),
    {"--estimate-memory", NULL, NULL,
     "no training: print the memory one rank holds at every\n"
     "ZeRO stage and offload variant (--report: as JSON);\n"
     "--config is optional (default: Adam), its stage ignored",
     FLAG_SWITCH, T(estimate_memory), 0, 0, 0, NULL, NULL, FOR_ALL, "Memory estimate"},
    CUSTOM("--num-gpus", "G", parse_hardware,
           "ranks per node to estimate for (default: this run's, 1\nwithout mpirun)"),
    CUSTOM("--num-nodes", "N", parse_hardware, "nodes to estimate for (default 1)"),
};

#define SUB_TAG STR("--tag", "T", S(tag), "a checkpoint in DIR other than the one DIR/latest names")
#define SUB_CHECKPOINT STR("--checkpoint", "DIR", S(dir), "the checkpoint directory")
#define SUB_TOKENIZER \
    STR("--tokenizer", "DIR", S(tokenizer), "BPE files in place of the directory the checkpoint recorded")
#define SUB_DEVICE                                                                          \
    {"--device", NULL, "auto|cpu|cuda", "compute device (default auto)", FLAG_CHOICE,       \
     S(dev.device), 0, 0, 0, "auto|cpu|cuda", NULL, FOR_ALL, NULL},                          \
    {                                                                                       \
        "--comm", NULL, "auto|mpi|nccl", "collectives (default auto)", FLAG_CHOICE,         \
            S(dev.comm), 0, 0, 0, "auto|mpi|nccl", NULL, FOR_ALL, NULL                        \
    }

static const cmd_flag consolidate_flags[] = {
    SUB_TAG,
    STR("--out", "FILE", S(out), "the fp32 weights (the --dump-params format); FILE.json\n"
                                 "indexes its tensors"),
    {"--format", NULL, "zerotrain|safetensors",
     "zerotrain (default): raw fp32 and FILE.json; safetensors:\n"
     "one file under the PyTorch module names (docs/interop.md)",
     FLAG_CHOICE, S(format), 0, 0, 0, "zerotrain|safetensors", NULL, FOR_ALL, NULL},
};

static const cmd_flag generate_flags[] = {
    SUB_CHECKPOINT,
    SUB_TAG,
    STR("--prompt", "TEXT", S(prompt), "the text to continue (default: a newline)"),
    {"--length", NULL, "N", "tokens to sample (default 200)", FLAG_INT, S(length), 0, 1,
     MAX_SAMPLE_TOKENS, NULL, NULL, FOR_ALL, NULL},
    CUSTOM("--temperature", "T", parse_temperature, "softmax temperature (0: greedy; default 1)"),
    CUSTOM("--seed", "S", parse_sub_seed, "sampling seed (default 1234)"),
    SUB_TOKENIZER,
    SUB_DEVICE,
};

static const cmd_flag eval_flags[] = {
    SUB_CHECKPOINT,
    SUB_TAG,
    STR("--data", "PATH", S(data), "text file, CSV or aclImdb directory: its validation split"),
    INT("--eval-iters", "K", S(eval_iters), 1, "micro-batches per rank (default: all)"),
    {"--micro-batch-size", NULL, "N", "samples per micro-batch (default: the checkpoint's)",
     FLAG_INT, S(micro_batch), 0, 1, ZT_CONFIG_MAX_MICRO_BATCH, NULL, NULL, FOR_ALL, NULL},
    STR("--dump-logits", "FILE", S(dump_logits),
        "also write the logits of the first --eval-iters\n"
        "micro-batches as raw float32 (n, [T,] classes); one rank"),
    SUB_TOKENIZER,
    SUB_DEVICE,
};

#define N_OF(a) ((int)(sizeof a / sizeof *a))

static const cmd_flag_table train_table = {
    "",
    "usage: zerotrain --config FILE --model mlp|gptlite|classifier [--data PATH] [options]\n"
    "       zerotrain --estimate-memory --model NAME [--config FILE] [--num-gpus G]\n"
    "                 [--num-nodes N] [--report FILE]\n"
    "       zerotrain consolidate|generate|eval ... (zerotrain generate --help)\n"
    "       zerotrain check [--max-bytes N] <a job's flags>  (preflight: zerotrain check --help)\n"
    "\n"
    "Trains a built-in model with DeepSpeed-style ZeRO data parallelism. Start it with\n"
    "mpirun (one rank per device); without mpirun it is a world of one rank.\n",
    train_flags, N_OF(train_flags), false};

static const cmd_flag_table sub_tables[] = {
    {"consolidate",
     "usage: zerotrain consolidate DIR [--tag T] --out FILE [--format zerotrain|safetensors]\n"
     "  write the checkpoint's fp32 weights as one file in the --dump-params format (FILE)\n"
     "  and a JSON index of its tensors (FILE.json), or as one safetensors file\n",
     consolidate_flags, N_OF(consolidate_flags), true},
    {"generate",
     "usage: zerotrain generate --checkpoint DIR [--tag T] [--prompt TEXT] [--length N]\n"
     "                 [--temperature T] [--seed S] [--tokenizer DIR] [--device auto|cpu|cuda]\n"
     "  gptlite: print the prompt and N sampled tokens\n",
     generate_flags, N_OF(generate_flags), false},
    {"eval",
     "usage: zerotrain eval --checkpoint DIR [--tag T] --data PATH [--eval-iters K]\n"
     "                 [--micro-batch-size N] [--tokenizer DIR] [--device auto|cpu|cuda]\n"
     "                 [--dump-logits FILE]\n"
     "  classifier or gptlite: validation loss (and accuracy) on the validation split of\n"
     "  --data (CSV or aclImdb, or a text file)\n",
     eval_flags, N_OF(eval_flags), false},
};

void cmd_flags_help_train(FILE *out) { flags_help(&train_table, out); }

void cmd_flags_help_sub(FILE *out)
{
    for (int i = 0; i < N_OF(sub_tables); i++) {
        if (i > 0)
            fputc('\n', out);
        flags_help(&sub_tables[i], out);
    }
}

/* ---- Parsing. ---- */

static bool flags_has_model_args(const cmd_flag_table *t)
{
    for (int i = 0; i < t->n_flags; i++)
        if (t->flags[i].kind == FLAG_MODEL)
            return true;
    return false;
}

/* The first schema row of `flag`: the rows of one flag accept the same values. */
static const zt_model_arg *flags_model_row(const char *flag)
{
    int n;
    const zt_model_arg *rows = zt_model_args_schema(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].flag, flag))
            return &rows[i];
    return NULL;
}

static int flags_store(const cmd_flag *fl, const char *name, const char *val, void *dst)
{
    char *base = dst;
    switch (fl->kind) {
    case FLAG_STRING:
        *(const char **)(base + fl->offset) = val;
        return 0;
    case FLAG_INT:
        if (flags_i64(val, fl->min, fl->max, (int64_t *)(base + fl->offset)))
            return 0;
        if (fl->max == INT64_MAX)
            return cmd_usage_error("bad value '%s' for %s (an integer >= %lld)", val, name,
                                   (long long)fl->min);
        return cmd_usage_error("bad value '%s' for %s (an integer from %lld to %lld)", val,
                               name, (long long)fl->min, (long long)fl->max);
    case FLAG_CHOICE:
        if (!flags_in_choices(val, fl->choices))
            return flags_choice_error(name, fl->choices, val);
        *(const char **)(base + fl->offset) = val;
        return 0;
    case FLAG_CUSTOM:
        return fl->parse(name, val, dst);
    default:
        return 0;
    }
}

static int flags_store_model(const zt_model_arg *row, const char *name, const char *val,
                             zt_model_args *a)
{
    if (zt_model_arg_parse(row, val, a))
        return 0;
    if (row->kind == ZT_MODEL_ARG_CHOICE) {
        char choices[64];
        snprintf(choices, sizeof choices, "%s|%s", row->choices[0], row->choices[1]);
        return flags_choice_error(name, choices, val);
    }
    if (row->kind == ZT_MODEL_ARG_INT)
        return cmd_usage_error("bad value '%s' for %s (an integer from %.0f to %.0f)", val, name,
                               row->min, row->max);
    return cmd_usage_error("bad value '%s' for %s (a number >= %g and < %g)", val, name,
                           row->min, row->max);
}

/* A flag's occurrence: `canon` is its table name (an alias counts as the
 * flag), `given` how the user spelled it, `val` its value. */
typedef struct {
    const char *canon, *given, *val;
} flags_given;

/* A value flag holds one value, and a second one would silently win over
 * the first (--config A --config B trains on B): given twice, it is an
 * error. Switches say the same thing twice and may repeat. */
static int flags_check_repeat(flags_given *done, int *n_done, const char *canon,
                              const char *given, const char *val)
{
    for (int i = 0; i < *n_done; i++) {
        if (strcmp(done[i].canon, canon) != 0)
            continue;
        char first[600], then[600];
        if (done[i].val)
            snprintf(first, sizeof first, "'%.500s'", done[i].val);
        else
            snprintf(first, sizeof first, "without a value");
        if (strcmp(done[i].given, given) != 0) {
            size_t n = strlen(first);
            snprintf(first + n, sizeof first - n, " as %s", done[i].given);
        }
        if (val)
            snprintf(then, sizeof then, "'%.500s'", val);
        else
            snprintf(then, sizeof then, "without a value");
        return cmd_usage_error("%s is given twice (%s, then %s): give it once", given, first,
                               then);
    }
    done[(*n_done)++] = (flags_given){canon, given, val};
    return 0;
}

/* Parses argv[first..] with table t into dst (model arguments into *model);
 * `seen` collects the flags given, in order, for the model check. */
static int flags_parse(const cmd_flag_table *t, int argc, char **argv, int first, void *dst,
                       zt_model_args *model, const char **positional, const char **seen,
                       int *n_seen)
{
    flags_given *done = calloc((size_t)argc, sizeof *done);
    if (!done)
        return cmd_usage_error("out of memory parsing %d arguments", argc);
    int n_done = 0;
    int rc = 0;
    bool model_args = flags_has_model_args(t);
    const char *suffix_fmt = t->command[0] ? " for zerotrain %s" : "%s";
    char suffix[64];
    snprintf(suffix, sizeof suffix, suffix_fmt, t->command);
    for (int i = first; i < argc && rc == 0; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            if (cmd_is_first_process())
                flags_help(t, stdout);
            rc = -1;
            break;
        }
        if (strncmp(arg, "--", 2) != 0) {
            if (!t->positional || *positional)
                rc = cmd_usage_error("unexpected argument '%s'%s", arg, suffix);
            else
                *positional = arg;
            continue;
        }
        char name[64];
        const char *eq = strchr(arg, '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        const cmd_flag *fl = flags_find(t, name);
        const zt_model_arg *row = model_args && !fl ? flags_model_row(name) : NULL;
        if (!fl && !row) {
            char suggestion[96];
            flags_suggest(t, model_args, name, suggestion, sizeof suggestion);
            rc = cmd_usage_error("unknown flag '%s'%s%s", name, suffix, suggestion);
            break;
        }
        const char *canon = fl ? fl->name : row->flag;
        const char *spelled = fl && fl->alias && !strcmp(name, fl->alias) ? fl->alias : canon;
        if (n_seen)
            seen[(*n_seen)++] = canon;
        if (fl && fl->kind == FLAG_SWITCH) {
            if (eq)
                rc = cmd_usage_error("%s takes no value (got '%s')", name, eq + 1);
            else
                *(bool *)((char *)dst + fl->offset) = true;
            continue;
        }
        if (fl && fl->kind == FLAG_OPTIONAL) {
            const char *val = NULL;
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                val = argv[++i];
            if ((rc = flags_check_repeat(done, &n_done, canon, spelled, val)))
                break;
            *(bool *)((char *)dst + fl->offset) = true;
            if (val)
                *(const char **)((char *)dst + fl->offset2) = val;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) {
            rc = cmd_usage_error("flag '%s' needs a value", name);
            break;
        }
        if ((rc = flags_check_repeat(done, &n_done, canon, spelled, val)))
            break;
        rc = fl ? flags_store(fl, name, val, dst) : flags_store_model(row, name, val, model);
    }
    free(done);
    return rc;
}

/* Whether a flag restricted to `models` shapes model `name`. */
static bool flags_for_model(flag_models models, const char *name)
{
    const zt_model_entry *e = zt_model_find(name);
    switch (models) {
    case FOR_ALL: return true;
    case FOR_SYNTHETIC: return e && e->data == ZT_DATA_SYNTHETIC;
    case FOR_FILES: return e && e->data != ZT_DATA_SYNTHETIC;
    case FOR_TEXT: return e && e->data == ZT_DATA_TEXT;
    }
    return false;
}

/* The models a restricted flag shapes, space separated. */
static void flags_models_of(flag_models models, char *buf, size_t n)
{
    int count;
    const zt_model_entry *reg = zt_model_registry(&count);
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && len < n; i++)
        if (flags_for_model(models, reg[i].name))
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " " : "", reg[i].name);
}

/* Flags that shape one model only: given with another model they would be
 * silently ignored, so they are errors. */
static int flags_check_models(const cmd_flag_table *t, const char *const *seen, int n_seen,
                              const char *model)
{
    for (int i = 0; i < n_seen; i++) {
        const cmd_flag *fl = flags_find(t, seen[i]);
        char models[128];
        if (fl && !flags_for_model(fl->models, model)) {
            flags_models_of(fl->models, models, sizeof models);
            return cmd_usage_error("%s is a flag of --model %s", fl->name, models);
        }
        if (!fl && !zt_model_arg_for(seen[i], model)) {
            zt_model_arg_models(seen[i], models, sizeof models);
            return cmd_usage_error("%s is a flag of --model %s", seen[i], models);
        }
    }
    return 0;
}

static void flags_train_defaults(cmd_train_flags *f)
{
    memset(f, 0, sizeof *f);
    zt_model_args_init(&f->model);
    f->model.name[0] = '\0';
    f->steps = f->epochs = -1;
    f->log_interval = -1;
    f->num_samples = ZT_SYNTHETIC_DEFAULT_SAMPLES;
    f->seed = 1234;
    f->dev.device = "auto";
    f->dev.comm = "auto";
    f->dev.fused_ops = "on";
    f->dev.typed_tensors = "on";
    f->num_gpus = f->num_nodes = -1;
    f->inject_unit = -1;
    f->nonfinite = "stop";
    f->attention = "flash";
    f->local_rank = -1;
    f->warmup_steps = -1;
    zt_config_overrides_init(&f->ov);
}

/* --deepspeed FILE is --config FILE (HF); bare --deepspeed is DeepSpeed's
 * "use DeepSpeed" switch, which says nothing here. */
static int flags_train_deepspeed(cmd_train_flags *f)
{
    if (!f->deepspeed_path)
        return 0;
    if (f->config_path && strcmp(f->config_path, f->deepspeed_path) != 0)
        return cmd_usage_error("--deepspeed %s and --config %s name two configs: give one",
                               f->deepspeed_path, f->config_path);
    f->config_path = f->deepspeed_path;
    return 0;
}

/* The combinations no single flag can judge. */
static int flags_train_check(const cmd_train_flags *f)
{
    if ((f->num_gpus > 0 ? f->num_gpus : 1) * (f->num_nodes > 0 ? f->num_nodes : 1) >
        ZT_ESTIMATE_MAX_WORLD)
        return cmd_usage_error("--num-gpus x --num-nodes is more than 1048576 ranks");
    if (!f->estimate_memory && (f->num_gpus > 0 || f->num_nodes > 0))
        return cmd_usage_error("%s is only valid together with --estimate-memory",
                               f->num_gpus > 0 ? "--num-gpus" : "--num-nodes");
    if (f->estimate_memory && f->dump_path)
        return cmd_usage_error("--dump-params needs a training run; --estimate-memory trains "
                               "nothing");
    if (!f->config_path && !f->estimate_memory)
        return cmd_usage_error("--config FILE is required");
    if (!f->model.name[0])
        return cmd_usage_error("--model NAME is required (mlp, gptlite or classifier)");
    return 0;
}

static int flags_train_check_run(const cmd_train_flags *f)
{
    if (f->estimate_memory && (f->grad_dump_path || f->sample > 0 || f->eval_interval > 0))
        return cmd_usage_error("--dump-grads, --sample and --eval-interval need a training run; "
                               "--estimate-memory trains nothing");
    if (f->estimate_memory && (f->log_file || f->log_interval >= 0))
        return cmd_usage_error("--log-file and --log-interval need a training run; "
                               "--estimate-memory trains nothing");
    if (f->steps >= 0 && f->epochs >= 0)
        return cmd_usage_error("give --steps or --epochs, not both");
    if (f->estimate_memory && (f->save_dir || f->resume))
        return cmd_usage_error("--save-dir and --resume need a training run; --estimate-memory "
                               "trains nothing");
    if (!f->save_dir && (f->save_interval > 0 || f->keep_last > 0))
        return cmd_usage_error("%s needs --save-dir DIR",
                               f->save_interval > 0 ? "--save-interval" : "--keep-last");
    if (f->resume && !f->save_dir && !f->load_dir)
        return cmd_usage_error("--resume reads --load-dir DIR or --save-dir DIR: give one");
    if (f->load_dir && !f->resume)
        return cmd_usage_error("--load-dir is where --resume reads: add --resume");
    if (f->init_from && (f->resume || f->estimate_memory))
        return cmd_usage_error("--init-from starts a new run from given weights; %s",
                               f->resume ? "--resume continues a saved one: give one of them"
                                         : "--estimate-memory trains nothing");
    if (f->dev.tf32 && !strcmp(f->dev.device, "cpu"))
        return cmd_usage_error("--tf32 sets how CUDA GEMMs round; it has no meaning with "
                               "--device cpu");
    if (f->ov.fp16 && f->ov.bf16)
        return cmd_usage_error("--fp16 and --bf16 ask for two training dtypes: give one");
    if (f->profile && (!f->report_path || f->estimate_memory))
        return cmd_usage_error("--profile writes its counts into the report: %s",
                               f->estimate_memory ? "--estimate-memory trains nothing"
                                                  : "add --report FILE");
    return 0;
}

int cmd_flags_train(int argc, char **argv, cmd_train_flags *f)
{
    flags_train_defaults(f);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            if (cmd_is_first_process())
                printf("zerotrain %s (backends: cpu%s; comm: mpi%s)\n", ZT_VERSION,
                       zt_backend_find(ZT_DEVICE_CUDA)->built() ? ", cuda" : "",
                       zt_comm_nccl_built() ? ", nccl" : "");
            return -1;
        }
    const char **seen = calloc((size_t)argc, sizeof *seen);
    if (!seen)
        return cmd_usage_error("out of memory parsing %d arguments", argc);
    int n_seen = 0, rc;
    const char *positional = NULL;
    rc = flags_parse(&train_table, argc, argv, 1, f, &f->model, &positional, seen, &n_seen);
    if (rc == 0)
        rc = flags_train_deepspeed(f);
    if (rc == 0)
        rc = flags_train_check(f);
    if (rc == 0)
        rc = flags_check_models(&train_table, seen, n_seen, f->model.name);
    free(seen);
    if (rc != 0)
        return rc;
    zt_model_args_resolve(&f->model);
    f->model.unfused_attention = !strcmp(f->attention, "unfused");
    f->profile = f->profile || f->profile_time;
    if (f->local_rank >= 0 && cmd_is_first_process())
        printf("zerotrain: note: --local_rank %lld ignored: mpirun places each rank "
               "(DeepSpeed's launcher passes it)\n",
               (long long)f->local_rank);
    return flags_train_check_run(f);
}

int cmd_flags_sub(int argc, char **argv, cmd_sub_flags *f)
{
    const char *cmd = argv[1];
    const cmd_flag_table *t = NULL;
    for (int i = 0; i < N_OF(sub_tables); i++)
        if (!strcmp(sub_tables[i].command, cmd))
            t = &sub_tables[i];
    memset(f, 0, sizeof *f);
    f->length = 200;
    f->temperature = 1.0;
    f->seed = 1234;
    f->dev.device = "auto";
    f->dev.comm = "auto";
    f->dev.fused_ops = "on";
    f->dev.typed_tensors = "on";
    f->format = "zerotrain";
    if (!t)
        return cmd_usage_error("unknown command '%s'", cmd);
    int rc = flags_parse(t, argc, argv, 2, f, NULL, &f->dir, NULL, NULL);
    if (rc != 0)
        return rc;
    bool consolidate = !strcmp(cmd, "consolidate");
    if (!f->dir)
        return consolidate ? cmd_usage_error("zerotrain %s needs the checkpoint directory DIR", cmd)
                           : cmd_usage_error("zerotrain %s needs --checkpoint DIR", cmd);
    if (consolidate && !f->out)
        return cmd_usage_error("zerotrain %s needs --out FILE", cmd);
    if (!strcmp(cmd, "eval") && !f->data)
        return cmd_usage_error("zerotrain %s needs --data PATH (the validation split is "
                               "evaluated)",
                               cmd);
    return 0;
}
