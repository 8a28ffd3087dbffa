/*
 * config_impl: what the files of engine/config share. Private to the folder:
 * the rest of the tree includes engine/config/config.h only.
 *
 * DeepSpeed 0.19.6 JSON config -> zt_config (contract in config.h), one file
 * per job:
 *   keys.c         every section's table of keys; optimizer and scheduler names
 *   json.c         the text as written -> jansson: hjson stripping, the key line
 *                  index, messages that cite it, notes, duplicate keys, and the
 *                  error collector (every error of a file in one report)
 *   read.c         typed readers, "auto", unknown keys with a "did you mean", and
 *                  the generic reader that walks a key table
 *   parse.c        defaults; zero_optimization, fp16 / bf16, activation
 *                  checkpointing, data_types, timers, top-level strings
 *   parse_monitor.c  monitors and profilers: csv_monitor, tensorboard,
 *                  flops_profiler, comms_logger, and the sections read only to
 *                  be ignored with a warning (wandb, comet, trackio, checkpoint)
 *   parse_optim.c  the optimizer and scheduler sections
 *   parse_nvme.c   the aio section and the nvme offload rules
 *   parse_pipeline.c  the pipeline section and flags: stages, data-parallel size,
 *                  partition method, schedule; ZeRO-2/3 refused with pipelining
 *   resolve.c      the batch triple: command line, "auto", DeepSpeed's derivation;
 *                  the "auto" values that need the model or the run length
 *   check.c        cross checks, "not implemented yet" checks, dtype queries
 *   load.c         entry points: text or file -> parse, resolve, check
 *
 * Errors: every message goes through zt_config_err, which records it in the
 * parse's collector (zt_config_errors) and returns its status. A section stops
 * at its first error in custom code, but the generic reader reads every key of
 * its table and every section is read, so one run reports each wrong key. The
 * checks between values (cross checks, most "not implemented" refusals) run
 * only when every value read cleanly: a value that failed would leave a default
 * for them to judge. Refusals of whole sections depend on no value and always run.
 *
 * Every section is a table of keys (type, destination, bounds, flags) read by
 * one generic loop; the few keys whose meaning depends on others (batch triple,
 * optimizer lr, deprecated names, offload devices, required scheduler params)
 * are marked ZT_CUSTOM in the table and read by the section's own code.
 * Defaults live in zt_config_defaults() (parse.c).
 *
 * Choices where DeepSpeed is lenient or silent (documented here, as DESIGN asks):
 * - Unknown keys are errors in every section, also at the top level and in
 *   activation_checkpointing where DeepSpeed ignores them: a typo must never
 *   leave a default silently in force.
 * - DeepSpeed top-level features this build lacks (amp, ...) parse
 *   when off; when on, zt_config_check_supported refuses them. Sections read
 *   but not acted on (wandb, comet, trackio, checkpoint) are a warning, an
 *   error under --strict.
 * - comms_logger honours "enabled": false (DeepSpeed logs whenever the
 *   section is present).
 * - offload_optimizer at stage 0 and offload_param below stage 3, which
 *   DeepSpeed silently ignores, are errors.
 * - activation_checkpointing takes effect here (DeepSpeed's engine never calls
 *   checkpointing.configure): number_checkpoints sets the checkpoint interval.
 * - Under fp16/bf16 with gradient accumulation, gradients accumulate in fp32
 *   unless data_types.grad_accum_dtype says otherwise (DeepSpeed: the model
 *   dtype); noted.
 * - "auto" resolves as HF's integration resolves it (HfTrainerDeepSpeedConfig):
 *   the batch fields, optimizer lr, fp16/bf16 enabled from the command line;
 *   scheduler warmup_max_lr from the optimizer lr; keys marked with an auto_bit
 *   from the model's hidden size or the run length (zt_config_resolve_run);
 *   anything else "auto" is the default (HF's TrainingArguments defaults equal
 *   DeepSpeed's for those). Each is a note.
 * - Two spellings of one setting given together (stage3_x and x, bf16 and
 *   bfloat16) are an error rather than one silently winning.
 * - Keys DeepSpeed accepts but that change nothing here (memory_efficient_linear,
 *   dump_state, ...) are type-checked and noted as having no effect.
 * - SGD lr defaults to 1e-3 as in torch >= 2.2 (noted).
 *
 * Memory: a zt_ctx owns its key line index (zt_config_ctx_free frees it); the
 * key tables are constant. Collective: none.
 */
#ifndef ZT_CONFIG_IMPL_H
#define ZT_CONFIG_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/config/config.h"
#include "engine/status.h"

#define ZT_PATH_MAX 256
#define ZT_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ key tables */

typedef enum {
    ZT_BOOL,
    ZT_INT,     /* int, integral JSON number (5e8 is fine) within [lo, hi] */
    ZT_I64,     /* int64_t, same */
    ZT_REAL,    /* double, finite within [lo, hi] */
    ZT_STR,     /* char[size] */
    ZT_CUSTOM,  /* known key read by the section's own code */
    ZT_FEATURE, /* DeepSpeed feature this build lacks: fine when off, recorded when on */
} zt_kind;

enum {
    ZT_NULLABLE = 1u << 0,  /* null keeps the default (an Optional field in DeepSpeed) */
    ZT_NO_EFFECT = 1u << 1, /* checked, but nothing in zerotrain depends on it: noted */
    ZT_POSITIVE = 1u << 2,  /* reals: strictly above lo */
};

#define ZT_NONE ((ptrdiff_t)-1)

typedef struct {
    const char *name;
    zt_kind kind;
    ptrdiff_t off; /* into the section's struct; ZT_NONE: checked only */
    double lo, hi;
    unsigned flags;
    size_t size;       /* ZT_STR: capacity of the destination array */
    const char *alias; /* the other spelling of the same setting */
    const char *why;   /* ZT_NO_EFFECT: why, for the note (optional) */
    unsigned auto_bit; /* ZT_AUTO_*: "auto" resolves from the run, not the default */
} zt_key;

/* A scheduler zerotrain implements, with its params table. */
typedef struct {
    const char *name;
    zt_sched_type type;
    const zt_key *keys;
    size_t n_keys;
} zt_sched_entry;

/* A key table by the JSON path it is read at. */
typedef struct {
    const char *path;
    const zt_key *keys;
    size_t n;
} zt_section_ref;

/* ------------------------------------------------------------------ context */

typedef struct {
    char *path;
    int line;
} zt_key_line;

/* Every error of one parse: recorded as found, reported together. */
#define ZT_CONFIG_MAX_ERRORS 32
typedef struct {
    int line; /* of the key in the file; 0: none (sorted last) */
    zt_status st;
    char msg[600], hint[300];
} zt_config_error;

typedef struct {
    int n;       /* errors found (more than ZT_CONFIG_MAX_ERRORS are counted only) */
    zt_config_error e[ZT_CONFIG_MAX_ERRORS];
} zt_config_errors;

/* One parse: where messages and notes go, the command-line values, the
 * line of every key in the text, and the errors found. */
typedef struct {
    zt_config_errors *errs; /* NULL: none collected (zt_config_err only fails) */
    const char *name; /* file name for messages */
    zt_config *cfg;
    zt_config_overrides ov;
    int world_size;
    zt_key_line *lines; /* JSON path -> line of its key, from the text as written */
    size_t n_lines, cap_lines;
    /* The lines' paths hashed (open addressing, n_slots a power of two): a
     * slot holds 1 + the index of a path's first line, or 0; counts[i] is
     * how often the path of first line i occurs. Lookups by path are O(1),
     * so a config of N keys, however many are wrong, is checked in O(N). */
    size_t *slots, n_slots;
    int *counts;
} zt_ctx;

/* ------------------------------------------------------------------ keys.c */

/* Each section's keys, with their count. */
extern const zt_key zt_config_top_keys[];
extern const size_t zt_config_n_top_keys;
extern const zt_key zt_config_zero_keys[];
extern const size_t zt_config_n_zero_keys;
extern const zt_key zt_config_offload_optimizer_keys[];
extern const size_t zt_config_n_offload_optimizer_keys;
extern const zt_key zt_config_offload_param_keys[];
extern const size_t zt_config_n_offload_param_keys;
extern const zt_key zt_config_aio_keys[];
extern const size_t zt_config_n_aio_keys;
extern const zt_key zt_config_fp16_keys[];
extern const size_t zt_config_n_fp16_keys;
extern const zt_key zt_config_bf16_keys[];
extern const size_t zt_config_n_bf16_keys;
extern const zt_key zt_config_act_ckpt_keys[];
extern const size_t zt_config_n_act_ckpt_keys;
extern const zt_key zt_config_data_types_keys[];
extern const size_t zt_config_n_data_types_keys;
extern const zt_key zt_config_csv_keys[];
extern const size_t zt_config_n_csv_keys;
extern const zt_key zt_config_flops_keys[];
extern const size_t zt_config_n_flops_keys;
extern const zt_key zt_config_comms_keys[];
extern const size_t zt_config_n_comms_keys;
extern const zt_key zt_config_checkpoint_keys[];
extern const size_t zt_config_n_checkpoint_keys;
extern const zt_key zt_config_wandb_keys[];
extern const size_t zt_config_n_wandb_keys;
extern const zt_key zt_config_comet_keys[];
extern const size_t zt_config_n_comet_keys;
extern const zt_key zt_config_trackio_keys[];
extern const size_t zt_config_n_trackio_keys;
extern const zt_key zt_config_timers_keys[];
extern const size_t zt_config_n_timers_keys;
extern const zt_key zt_config_throughput_keys[];
extern const size_t zt_config_n_throughput_keys;
extern const zt_key zt_config_optimizer_keys[];
extern const size_t zt_config_n_optimizer_keys;
extern const zt_key zt_config_adam_keys[];
extern const size_t zt_config_n_adam_keys;
extern const zt_key zt_config_sgd_keys[];
extern const size_t zt_config_n_sgd_keys;
extern const zt_key zt_config_scheduler_keys[];
extern const size_t zt_config_n_scheduler_keys;
/* parse_pipeline.c's table; its size is a constant for keys.c's section list. */
#define ZT_CONFIG_N_PIPELINE_KEYS 7
extern const zt_key zt_config_pipeline_keys[ZT_CONFIG_N_PIPELINE_KEYS];

/* DeepSpeed's schedulers with their params tables. The count is a constant
 * (keys.c checks it) because parse_optim.c sizes an array with it. */
#define ZT_CONFIG_N_SCHEDULERS 5
extern const zt_sched_entry zt_config_schedulers[];

/* zt_offload_device by value. */
extern const char *const zt_config_offload_devices[];
extern const size_t zt_config_n_offload_devices;
/* Optimizer and scheduler names DeepSpeed knows (keys.c says how each is matched). */
extern const char *const zt_config_torch_schedulers[];
extern const size_t zt_config_n_torch_schedulers;
extern const char *const zt_config_ds_optimizers[];
extern const size_t zt_config_n_ds_optimizers;
extern const char *const zt_config_torch_optimizers[];
extern const size_t zt_config_n_torch_optimizers;

/* Every table by the path it is read at (unknown keys look up where a key
 * belongs). */
extern const zt_section_ref zt_config_sections[];
extern const size_t zt_config_n_sections;

/* ------------------------------------------------------------------ json.c */

void zt_config_ctx_free(zt_ctx *c);
/* strlcpy: a truncated path is still a usable label. */
void zt_config_copy(char *dst, size_t size, const char *src);
/* out (ZT_PATH_MAX) = parent.key, or key at the top level. */
void zt_config_join(char *out, const char *parent, const char *key);
/* Fails with `st`: "file:line: path: what", the line being that of path's key
 * when the index has it; path NULL: "file: what". The error is also recorded
 * in c->errs. */
__attribute__((format(printf, 5, 6))) zt_status
zt_config_err(const zt_ctx *c, zt_status st, const char *path, const char *hint,
              const char *fmt, ...);
/* Adds a note to cfg->notes (the last slot says that further notes were omitted). */
__attribute__((format(printf, 2, 3))) void zt_config_note(zt_config *cfg, const char *fmt, ...);
/* A note that says "warning: ..." (printed as a warning). */
__attribute__((format(printf, 2, 3))) void zt_config_warn(zt_config *cfg, const char *fmt, ...);

/* The error collector. add: one error at `line` (0: none); take: the failure
 * zt_fail just recorded, when st != ZT_OK and nothing was added since the
 * collector held `n_before` errors (a failure that did not go through
 * zt_config_err); report: ZT_OK when empty, one error as it was recorded,
 * several as one message headed "`name`: N errors:" with a line each (and its
 * hint), sorted by line. */
void zt_config_errors_add(zt_config_errors *e, int line, zt_status st, const char *msg,
                          const char *hint);
void zt_config_errors_take(zt_config_errors *e, zt_status st, int n_before);
zt_status zt_config_errors_report(const zt_config_errors *e, const char *name);
/* Duplicate keys found in the key line index, each an error. */
void zt_config_duplicate_keys(const zt_ctx *c);
zt_status zt_config_strip_hjson(const zt_ctx *c, char *s);
/* ZT_ERR_OOM when the index cannot be kept (duplicate keys rely on it). */
zt_status zt_config_index_keys(zt_ctx *c, const char *s);
/* The comment-free text as a JSON object (*root; the caller decrefs).
 * Duplicate keys are left to zt_config_duplicate_keys (jansson keeps the
 * last). */
zt_status zt_config_load_json(const zt_ctx *c, const char *text, json_t **root);

/* ------------------------------------------------------------------ read.c */

bool zt_config_is_auto(const json_t *v);
bool zt_config_given(const json_t *obj, const char *key);
bool zt_config_unset(const json_t *obj, const char *key);
json_t *zt_config_value(const zt_ctx *c, json_t *obj, const char *path, const char *key);
zt_status zt_config_bad_value(const zt_ctx *c, const char *path, const json_t *v,
                              const char *expected);
zt_status zt_config_read_bool(const zt_ctx *c, const char *path, const json_t *v, bool *out);
zt_status zt_config_read_int(const zt_ctx *c, const char *path, const json_t *v, double lo,
                             double hi, int64_t *out);
zt_status zt_config_read_real(const zt_ctx *c, const char *path, const json_t *v, double lo,
                              double hi, bool positive, double *out);
zt_status zt_config_read_choice(const zt_ctx *c, const char *path, const json_t *v,
                                const char *const *names, size_t n, bool nocase, size_t *idx);
const zt_key *zt_config_find_key(const zt_key *keys, size_t n, const char *name);
bool zt_config_feature_on(const json_t *v);
void zt_config_record_unbuilt(zt_config *cfg, const char *path);
zt_status zt_config_parse_keys(const zt_ctx *c, json_t *obj, const char *path,
                               const zt_key *keys, size_t n, void *base);
zt_status zt_config_section(const zt_ctx *c, json_t *obj, const char *path, const char *key,
                            json_t **out);

/* ------------------------------------------------------------------ parse.c and parse_optim.c */

/* DeepSpeed's defaults; each parser below fills its sections of c->cfg. */
void zt_config_defaults(zt_config *cfg);
zt_status zt_config_parse_zero(const zt_ctx *c, json_t *root);
zt_status zt_config_parse_precision(const zt_ctx *c, json_t *root);
zt_status zt_config_parse_misc_sections(const zt_ctx *c, json_t *root);
zt_status zt_config_parse_monitors(const zt_ctx *c, json_t *root); /* parse_monitor.c */
zt_status zt_config_parse_top_strings(const zt_ctx *c, json_t *root);
zt_status zt_config_parse_optimizer(const zt_ctx *c, json_t *root);
zt_status zt_config_parse_scheduler(const zt_ctx *c, json_t *root);
/* DeepSpeed's WarmupDecayLR and WarmupCosineLR warning, once the schedule's
 * lengths are known (read, or resolved from the run: HF's "auto"):
 * "total_num_steps T is less than warmup_num_steps W" when T < max(2, W). */
void zt_config_warn_warmup(zt_config *cfg);
/* parse_pipeline.c: after the other sections (it reads the ZeRO stage and the
 * checkpoint interval), before the batch is resolved (which uses the
 * data-parallel size it sets). */
zt_status zt_config_parse_pipeline(const zt_ctx *c, json_t *root);

/* ------------------------------------------------------------------ parse_nvme.c */

/* The aio section (defaults in zt_config_defaults). */
zt_status zt_config_parse_aio(const zt_ctx *c, json_t *root);
/* nvme offload against the rest of the config: nvme_path given, buffers
 * enough for what the optimizer swaps; notes for settings without effect. */
zt_status zt_config_check_nvme(const zt_ctx *c);

/* ------------------------------------------------------------------ resolve.c and check.c */

zt_status zt_config_resolve_batch(const zt_ctx *c, json_t *root); /* resolve.c */
zt_status zt_config_cross_checks(const zt_ctx *c);                /* check.c */
/* zt_config_check_supported's refusals into `errs`; with values_clean false
 * only those that depend on no value (the unbuilt sections). check.c */
void zt_config_refusals(const zt_config *cfg, zt_config_errors *errs, bool values_clean);

#endif
