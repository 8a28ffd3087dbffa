/*
 * flags: the command line. Each command has one flag table (name, value,
 * help, where the value goes, what it accepts, which models it shapes) that
 * both parses argv and prints --help, so the two cannot drift apart. The
 * training command's table includes the model-argument schema of
 * models/registry.h: a model flag given with another --model is an error,
 * never silently ignored.
 *
 * Memory: parsed strings point into argv. Collective: none (flags are parsed
 * before MPI starts; only the first process prints usage errors).
 */
#ifndef ZT_CMD_FLAGS_H
#define ZT_CMD_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/config/config.h"
#include "engine/world/devices.h"
#include "models/model.h"

/* zerotrain [--estimate-memory] --config FILE --model NAME ... */
typedef struct {
    const char *config_path;
    zt_model_args model;
    int64_t steps, epochs, num_samples;
    uint64_t seed;
    bool seed_given;
    zt_device_flags dev;
    const char *report_path, *dump_path, *grad_dump_path;
    const char *log_file;  /* NULL: REPORT.jsonl beside --report, or none */
    bool profile;          /* --profile: count the backend's ops into the report */
    bool profile_time;     /* --profile-time: --profile, timing each op as well */
    int64_t log_interval;  /* progress line every N steps; 0 none; < 0 the default cadence */
    const char *data_path, *tokenizer_dir;
    int64_t eval_interval, eval_iters, sample;
    int64_t inject_steps[64];
    int n_inject_steps, inject_unit; /* inject_unit < 0: the middle unit */
    const char *nonfinite;           /* "stop" or "continue" */
    const char *attention;           /* "flash" or "unfused" (model.unfused_attention) */
    zt_config_overrides ov;
    bool estimate_memory;
    int64_t num_gpus, num_nodes; /* --estimate-memory's hardware; < 0: not given */
    /* Checkpoints: --resume reads load_dir (default save_dir); resume_tag NULL: latest. */
    const char *save_dir, *load_dir, *resume_tag;
    int64_t save_interval, keep_last;
    bool resume;
    const char *init_from; /* --init-from FILE: start from these weights, or NULL */
    /* DeepSpeed/HF launchers: --deepspeed [FILE] (HF: the config; DeepSpeed:
     * a switch) and --local_rank N (ranks come from mpirun: ignored). */
    bool deepspeed;
    const char *deepspeed_path;
    int64_t local_rank; /* < 0: not given */
    double warmup_steps; /* --warmup-steps (zt_config_run); < 0: not given */
} cmd_train_flags;

/* zerotrain consolidate | generate | eval ... */
typedef struct {
    const char *dir; /* consolidate's DIR, or --checkpoint */
    const char *tag, *out, *prompt, *data, *tokenizer;
    const char *format;      /* consolidate --format: "zerotrain" or "safetensors" */
    const char *dump_logits; /* eval --dump-logits FILE, or NULL */
    zt_device_flags dev;
    int64_t length, eval_iters, micro_batch;
    double temperature;
    uint64_t seed;
} cmd_sub_flags;

/* The training command's flags from argv[1..]: 0 to go on, 2 after a usage
 * error (printed), -1 after --help or --version (printed). Model arguments
 * are resolved to their defaults. */
int cmd_flags_train(int argc, char **argv, cmd_train_flags *f);

/* The flags of subcommand argv[1] ("consolidate", "generate", "eval") from
 * argv[2..]; returns as cmd_flags_train. */
int cmd_flags_sub(int argc, char **argv, cmd_sub_flags *f);

/* --help of the training command, and of the subcommands. */
void cmd_flags_help_train(FILE *out);
void cmd_flags_help_sub(FILE *out);

#endif
