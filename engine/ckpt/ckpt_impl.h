/*
 * ckpt_impl: what the files of engine/ckpt share. Private to engine/ckpt/.
 *
 *   format.c       CRC-32, the shard header, resharding arithmetic (pure)
 *   files.c        file I/O: checksummed output files, whole-file writes,
 *                  pread, directory fsync, mkdir -p, rm -rf, paths (files are
 *                  opened for reading through engine/path, never blocking)
 *   manifest.c     the JSON manifest, built and read (jansson here, in
 *                  manifest_check.c, and in safetensors.c for the safetensors
 *                  header and the consolidated index)
 *   manifest_check.c  the manifest's checksum (its canonical form) and the
 *                  checks of every value when a checkpoint is opened
 *   save.c         the collective save: shards, manifest, publish, latest,
 *                  keep_last
 *   lock.c         one job per save directory: flock on DIR/.zerotrain.lock
 *   shards.c       reading saved shards: verification against the manifest,
 *                  element ranges of the saved layout
 *   restore.c      open, tokenizer, the resume checks, loading spans, the
 *                  carried-over state
 *   consolidate.c  the full fp32 weights in one file
 *   safetensors.c  the safetensors format: header, parsing, consolidate's
 *                  safetensors output (engine/ckpt/safetensors.h)
 *   init_from.c    --init-from: a run started from given weights
 *
 * Memory: as each function says; nothing here outlives the call that made it
 * except what a zt_ckpt owns and the save directory's lock (ckpt.h). Collective: zt_ckpt_agree with a
 * world; everything else runs on the calling rank alone.
 */
#ifndef ZT_CKPT_IMPL_H
#define ZT_CKPT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/sampler.h"
#include "engine/ckpt/ckpt.h"
#include "engine/train/scaler.h"
#include "engine/train/sched.h"
#include "models/registry.h"

/* Shard data is written straight from memory as little-endian binary32. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint shards are little-endian: this host is not"
#endif

#define ZT_CKPT_PATH_MAX 4352

/* The hints of a damaged checkpoint and of a failed write. */
extern const char *const zt_ckpt_hint_resave;
extern const char *const zt_ckpt_hint_write;

/* ---- format.c ---- */

/* The optimizer's state sections in shard order (Adam/AdamW: exp_avg,
 * exp_avg_sq; SGD with momentum: momentum_buffer); names needs 2 entries.
 * Returns how many. */
int zt_ckpt_state_names(const zt_optim_config *o, const char **names);
/* The schema rows of `model` (models/registry.h), in order: the next after
 * row *i (start at 0), or NULL. The manifest's "model" object holds one value
 * per row, under its key. */
const zt_model_arg *zt_ckpt_arg_next(const char *model, int *i);

/* ---- files.c ---- */

/* A file written through write(2), checksummed as it goes. */
typedef struct {
    int fd;
    const char *path;
    const char *hint; /* of its errors: a save's (--save-dir) or consolidate's (--out) */
    uint32_t crc;
    uint64_t bytes;
} zt_ckpt_out;

/* Reads ZT_CKPT_FAIL_AFTER_BYTES (ckpt.h) the first time a save starts. */
void zt_ckpt_fail_after_init(void);
/* ZT_CKPT_STALL_RANK (ckpt.h): sleeps 30 s when it names `rank`. */
void zt_ckpt_stall_if_asked(int rank);
/* hint NULL: a save's file (the hints name --save-dir and DIR/latest). */
zt_status zt_ckpt_out_open(zt_ckpt_out *o, const char *path, const char *hint);
zt_status zt_ckpt_out_write(zt_ckpt_out *o, const void *buf, size_t n);
/* fsync + close; a file that failed (st != ZT_OK) is closed without the
 * fsync. Returns st, or the first error of the two. */
zt_status zt_ckpt_out_close(zt_ckpt_out *o, zt_status st);
/* A whole small file written and synced; *crc (when not NULL) its CRC-32;
 * hint as zt_ckpt_out_open's. */
zt_status zt_ckpt_write_file(const char *path, const void *buf, size_t n, uint32_t *crc,
                             const char *hint);
zt_status zt_ckpt_sync_dir(const char *dir);
/* mkdir -p, naming the component that failed. */
zt_status zt_ckpt_mkdirs(const char *dir);
/* rm -rf without following links; a missing path is fine. 0 or -1 (errno). */
int zt_ckpt_remove_tree(const char *path);
/* n bytes at offset of checkpoint shard `path`, all of them. */
zt_status zt_ckpt_pread(int fd, void *buf, size_t n, int64_t offset, const char *path);
/* buf (ZT_CKPT_PATH_MAX) = a/b or a/b/c (c NULL: a/b). */
zt_status zt_ckpt_path(char *buf, const char *a, const char *b, const char *c);
void zt_ckpt_shard_name(char *buf, size_t cap, int rank);
double zt_ckpt_now(void);
/* Every rank ends with the failing rank's status and text; w NULL (one
 * process, no MPI): st. Collective with a world. */
zt_status zt_ckpt_agree(const zt_world *w, zt_status st);

/* ---- What a checkpoint reads of a trainer. ---- */

typedef struct {
    zt_trainer_stats s;
    zt_trainer_counters c;
    zt_sched_state sched;
    zt_scaler_state scaler;
    zt_sampler_state sampler;
    uint64_t seed;
} zt_ckpt_src;

static inline void zt_ckpt_src_get(zt_trainer *t, zt_ckpt_src *v)
{
    zt_trainer_stats_get(t, &v->s);
    zt_trainer_counters_get(t, &v->c);
    zt_sched_state_get(zt_trainer_sched(t), &v->sched);
    zt_scaler_state_get(zt_trainer_scaler(t), &v->scaler);
    zt_sampler_state_get(zt_trainer_sampler(t), v->c.global_steps, &v->sampler);
    v->seed = zt_trainer_seed(t);
}

/* What a resumed run takes over, read in full before anything is changed. */
typedef struct {
    int64_t global_steps, skipped_steps, global_samples, optim_steps;
    zt_sched_state sched;   /* last_batch_iteration read */
    zt_scaler_state scaler; /* what zt_scaler_state_set takes over read */
    double *loss, *loss_scale; /* global_steps each, malloc'd */
} zt_ckpt_state;

void zt_ckpt_state_free(zt_ckpt_state *s);

/* ---- manifest.c and manifest_check.c ---- */

/* The manifest's own checksum: 8 lower-case hex digits of the CRC-32 of the
 * canonical form of every other top-level member (ckpt.h). */
#define ZT_CKPT_MANIFEST_CRC_KEY "manifest_crc32"

struct json_t;

/* The parsed manifest and what zt_ckpt_open checked of it: once a
 * checkpoint is open, every value below is in range and consistent. */
struct zt_ckpt_manifest {
    struct json_t *root;
    zt_model_args args;          /* resolved; they build the layout's units */
    int64_t n_params;
    uint64_t seed;
    int64_t train_batch, micro_batch, n_samples;
    const char *optimizer;       /* optimizer.type */
    const char *tok_kind;        /* "char", "byte", "bpe"; "" without a tokenizer */
    const char *tok_dir;         /* tokenizer.dir, or NULL */
    const char *vocab;           /* tokenizer.vocabulary (char), or NULL */
    size_t vocab_len;
    int64_t tok_vocab_size;      /* -1 without a tokenizer */
    zt_ckpt_state state;         /* loss and loss_scale NULL: read by zt_ckpt_manifest_state */
};

/* The CRC-32 of root's canonical form, ZT_CKPT_MANIFEST_CRC_KEY left out. */
zt_status zt_ckpt_manifest_crc(struct json_t *root, uint32_t *crc);
/* The value at a dotted path ("loss_scaler.cur_scale") below base, or NULL. */
struct json_t *zt_ckpt_json_at(struct json_t *base, const char *path);
/* Checks c->manifest->root (checksum, every value; see ckpt.h) and fills c's
 * layout fields and the rest of c->manifest. */
zt_status zt_ckpt_manifest_check(zt_ckpt *c);

/* The manifest of a save: rank 0's text of everything but the tensors, for
 * shards of bytes[r] bytes with CRC-32 crc[r]. *out is malloc'd. */
zt_status zt_ckpt_manifest_text(const zt_ckpt_src *t, const zt_ckpt_meta *meta,
                                const char *tag, const uint64_t *bytes, const uint32_t *crc,
                                char **out);
/* Parses text into c->manifest and checks it (zt_ckpt_manifest_check). */
zt_status zt_ckpt_manifest_parse(zt_ckpt *c, const char *text, size_t len);
void zt_ckpt_manifest_free(zt_ckpt *c);

/* The error for a manifest value `v` (NULL: missing) at "<where><key>" that
 * is not `what`: "checkpoint manifest P is damaged: \"KEY\" is V; expected
 * WHAT". */
zt_status zt_ckpt_bad_value(const zt_ckpt *c, const char *where, const char *key,
                            struct json_t *v, const char *what);
/* The same for a value that is missing. */
zt_status zt_ckpt_missing(const zt_ckpt *c, const char *where, const char *key,
                          const char *what);

/* Values the resume checks read (checked when the checkpoint was opened). */
const char *zt_ckpt_manifest_optimizer(const zt_ckpt *c);
/* Whether the saved state sections are exactly names[0, n). */
bool zt_ckpt_manifest_sections_are(const zt_ckpt *c, const char *const *names, int n);
/* The tokenizer's vocab_size; -1 without a tokenizer. */
int64_t zt_ckpt_manifest_vocab_size(const zt_ckpt *c);
/* The char tokenizer's vocabulary text (c's memory); an error when absent. */
zt_status zt_ckpt_manifest_vocabulary(const zt_ckpt *c, const char **text, size_t *len);
/* Everything a resumed run takes over (free with zt_ckpt_state_free). */
zt_status zt_ckpt_manifest_state(const zt_ckpt *c, zt_ckpt_state *s);
/* The tensor index of a consolidated file (ckpt.h): malloc'd JSON text. */
zt_status zt_ckpt_manifest_tensor_index(const zt_ckpt *c, char **out);

/* ---- consolidate.c ---- */

/* Verifies every shard, then writes out_path: prefix (may be NULL), then the
 * full fp32 weights in model order; and when index is not NULL, out_path.json
 * holding it. Temporaries renamed into place; errors hint at --out. */
zt_status zt_ckpt_write_weights(const zt_ckpt *c, const char *out_path, const void *prefix,
                                size_t prefix_bytes, const char *index);

/* ---- shards.c ---- */

/* Shards r with r % size == rank against the manifest: size, header, CRC-32
 * (a world checks each file once). */
zt_status zt_ckpt_verify(const zt_ckpt *c, int rank, int size);
/* Every shard file exists, is a regular file and has the manifest's size:
 * what the shards hold bounds what the manifest's model may allocate. */
zt_status zt_ckpt_check_sizes(const zt_ckpt *c);

/* Reads ranges of sections out of the shard files, opening each once. */
typedef struct {
    const zt_ckpt *c;
    int *fds;
    zt_ckpt_piece *pieces; /* partition_count + 2 */
} zt_ckpt_reader;

zt_status zt_ckpt_reader_init(zt_ckpt_reader *r, const zt_ckpt *c);
/* Closes and frees what init opened and allocated; a reader holding only .c
 * has nothing to free. */
void zt_ckpt_reader_free(zt_ckpt_reader *r);
/* Elements [lo, hi) of unit u's section k into dst (zero past the unit). */
zt_status zt_ckpt_read_range(zt_ckpt_reader *r, int u, int k, int64_t lo, int64_t hi,
                             float *dst);

#endif
