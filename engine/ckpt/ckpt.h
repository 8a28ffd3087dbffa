/*
 * ckpt: checkpoints. Saves the training state at an optimizer step, resumes
 * from it (bit-identically at the same world size and stage; resharded at
 * another world size, stage or offload setting) and consolidates the weights
 * into one fp32 file. docs/checkpoints.md is the user's guide;
 * engine/ckpt/ckpt_impl.h lists the files that implement it by job.
 *
 * A save directory (DeepSpeed's shape, zerotrain's own file formats):
 *   DIR/latest               tag of the newest complete checkpoint (no newline)
 *   DIR/global_step<N>/      one checkpoint; tag "global_step<N>", N = global_steps
 *     zt_manifest.json       everything except the tensors (below)
 *     zero_pp_rank_<r>_mp_rank_00_optim_states.zt   one shard per partition rank r
 * The partition count P is the layout's world size (the world size, or the
 * MiCS shard group size: replicas hold the same slices, the first group
 * writes). Every stage writes the same thing: rank r's slice
 * [r * shard, (r + 1) * shard) of every unit of the padded flat layout
 * (engine/zero/layout.h), so shard files look alike at every stage.
 *
 * Shard file. Integers little-endian; floats IEEE binary32 little-endian:
 *   off  type     field
 *   0    char[8]  magic "ZTSHARD\0"
 *   8    u32      format version (ZT_CKPT_SHARD_VERSION)
 *   12   u32      header bytes H = 64 + 32 * n_units: where the data starts
 *   16   u32      partition rank r
 *   20   u32      partition count P
 *   24   u32      ZeRO stage of the run that wrote it (informational)
 *   28   u32      n_units
 *   32   u32      n_sections S: 1 (fp32 master) + the optimizer's state sections
 *                 (Adam/AdamW: exp_avg, exp_avg_sq; SGD with momentum:
 *                 momentum_buffer; SGD without: none)
 *   36   u32      0
 *   40   u64      E = partition_numel: elements per section (sum of unit shards)
 *   48   u64      data bytes = S * E * 4
 *   56   u64      0
 *   64   per unit, 32 bytes: u64 numel, u64 padded_numel, u64 shard_numel,
 *        u64 part_offset (the unit's slice within a section, in elements)
 *   H    S sections of E floats; the file is exactly H + S * E * 4 bytes.
 * The fp32 master is the master copy under mixed precision or offload, and
 * the parameters themselves in fp32 training. Padding elements are zero.
 *
 * Checksum: CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, initial value
 * and final xor 0xFFFFFFFF: zlib's crc32, `python3 -c "import zlib; ..."`)
 * of each whole shard file, kept in the manifest with the file's size.
 *
 * Manifest (format version ZT_CKPT_MANIFEST_VERSION): "manifest_crc32" holds
 * the CRC-32 of the canonical form of every other member (docs/checkpoints.md:
 * keys sorted by their UTF-8 bytes, no white space, reals as %.17g with ".0"
 * appended when that has no '.' or 'e', strings escaping only '"', '\\' and
 * the bytes below 0x20), so that an edit of any value is found. A manifest of
 * format version 1 (written before the checksum existed) carries none and is
 * read with a notice. Every value is range-checked when the manifest is
 * opened; the model its arguments build must be the one its layout
 * describes, and the shard files must have the sizes it gives, before
 * anything sized by them is allocated.
 * DIR/latest must hold exactly one tag (an optional final newline aside).
 *
 * Save (zt_ckpt_save, collective): rank 0 creates DIR (mkdir -p) and an empty
 * DIR/<tag>.partial/ (a stale one from a crash is removed first); each
 * writing rank writes its shard there (write, fsync, close) from a host
 * staging buffer of one unit slice; all ranks agree on success and rank 0
 * gathers the sizes and checksums, writes the manifest (fsync), fsyncs the
 * directory, renames it to DIR/<tag> (atomically exchanging it with an
 * existing DIR/<tag>, then removing the old one), fsyncs DIR, writes
 * DIR/latest.tmp (fsync) and renames it over DIR/latest, fsyncs DIR, then
 * applies keep_last. A failure anywhere reaches every rank: the partial
 * directory is removed (best effort), DIR/latest and every earlier checkpoint
 * are untouched, and every rank returns the failing rank's error (its message
 * names the file). keep_last K > 0 removes, after a complete save of step N,
 * the global_step<M> directories with M <= N beyond the K highest; tags past
 * N (from a run this one branched off) are left alone.
 *
 * Resume (zt_ckpt_open + zt_ckpt_restore, collective): rank 0 resolves the
 * tag (DIR/latest unless given) and reads the manifest, every rank gets its
 * bytes. Before any trainer state changes: the model (name, every dimension,
 * parameter count, unit sizes) must match; unless weights_only also the
 * optimizer's state sections, train_batch_size, the data set's size, the seed
 * and the character vocabulary; and every shard file is checked (size,
 * CRC-32, header against the manifest), the files spread over the ranks.
 * Then each rank assembles its span of every unit (zt_trainer_unit_span) from
 * the old ranks' slices that overlap it, reading only those bytes (pread at
 * the offsets of the old layout; elements past a unit's numel are zero), one
 * unit at a time through a host staging buffer, and the parameters are
 * rebuilt from the fp32 values (zt_trainer_refresh_params). Unless
 * weights_only, the optimizer step count, the scheduler's
 * last_batch_iteration, the dynamic loss scaler (when both runs use one), the
 * step/sample counters and the loss history follow. The data position needs
 * no state of its own: the sampler is a pure function of (seed, step,
 * train_batch_size, data set size), which are checked.
 *
 * Memory: staging buffers are malloc'd inside each call and freed before it
 * returns (one unit's span of floats, or a 1 MiB read buffer); zt_ckpt owns
 * the parsed manifest and its tables until zt_ckpt_close; the caller owns the
 * descriptor of a save directory's lock (zt_ckpt_unlock_dir).
 * Collective: zt_ckpt_check_dir, zt_ckpt_lock_dir, zt_ckpt_save,
 * zt_ckpt_restore, and zt_ckpt_open when given a world. zt_ckpt_consolidate
 * and the pure functions run in one process (no MPI).
 *
 * Testing aids: ZT_CKPT_FAIL_AFTER_BYTES=N makes saving fail with "No space left
 * on device" once this process has written N bytes of checkpoint files in
 * all (for tests where a small tmpfs cannot be mounted); ZT_CKPT_STALL_RANK=R
 * makes world rank R sleep 30 s as each save starts (a peer lost in the
 * middle of a save: the others' watchdog must end the job).
 */
#ifndef ZT_CKPT_H
#define ZT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/model.h"
#include "engine/status.h"
#include "data/tokenizer.h"
#include "engine/train/trainer.h"
#include "engine/world/world.h"

#define ZT_CKPT_SHARD_VERSION 1
/* The manifest's "format_version": 2 has "manifest_crc32"; 1 is read. */
#define ZT_CKPT_MANIFEST_VERSION 2
#define ZT_CKPT_MANIFEST_VERSION_UNCHECKED 1
#define ZT_CKPT_MAGIC "ZTSHARD"
#define ZT_CKPT_HEADER_FIXED_BYTES 64
#define ZT_CKPT_UNIT_ENTRY_BYTES 32
#define ZT_CKPT_MANIFEST "zt_manifest.json"

/* ---- Pure parts (unit-tested). ---- */

/* CRC-32 of n bytes continuing `crc` (0 to start): zlib's crc32. */
uint32_t zt_ckpt_crc32(uint32_t crc, const void *buf, size_t n);

typedef struct {
    int64_t numel, padded_numel, shard_numel, part_offset;
} zt_ckpt_unit;

typedef struct {
    uint32_t version, rank, partition_count, stage, n_units, n_sections;
    int64_t partition_numel;
    uint64_t header_bytes, data_bytes;
    zt_ckpt_unit *units; /* n_units entries, the caller's memory */
} zt_ckpt_header;

/* Bytes of the header of a shard with n_units units. */
size_t zt_ckpt_header_bytes(uint32_t n_units);
/* Writes h (header_bytes and data_bytes are derived, not read) into buf of
 * zt_ckpt_header_bytes(h->n_units) bytes. */
void zt_ckpt_header_encode(const zt_ckpt_header *h, uint8_t *buf);
/* Reads a header from buf[0, len) into h; h->units must have room for
 * max_units. ZT_ERR_DATA naming `path` for a bad magic, an unknown version,
 * more units than max_units or a header longer than len. */
zt_status zt_ckpt_header_decode(const uint8_t *buf, size_t len, const char *path,
                                uint32_t max_units, zt_ckpt_header *h);

/* One contiguous run of a resharded range: `numel` elements at element
 * `src_offset` of source rank `src_rank`'s slice go to `dst_offset` of the
 * destination. */
typedef struct {
    int src_rank;
    int64_t src_offset, dst_offset, numel;
} zt_ckpt_piece;

/* Elements [lo, hi) of a unit of `numel` parameters whose source layout cuts
 * slices of src_shard_numel: the pieces covering [lo, min(hi, numel)) in
 * order (the rest of the range is zero padding and is not read). out needs
 * zt_ckpt_pieces_max entries; returns how many it wrote. */
int zt_ckpt_pieces(int64_t numel, int64_t src_shard_numel, int64_t lo, int64_t hi,
                   zt_ckpt_piece *out);
int zt_ckpt_pieces_max(int64_t src_shard_numel, int64_t lo, int64_t hi);

/* ---- Saving. ---- */

/* What a checkpoint records besides the trainer: how to rebuild the model and
 * read its text. */
typedef struct {
    zt_model_args model;       /* the resolved arguments the model was built from */
    const zt_tokenizer *tok;   /* the data's tokenizer; NULL for the MLP */
    const char *tokenizer_dir; /* BPE files (recorded as an absolute path), or NULL */
    const char *data_path;     /* recorded for reference, or NULL */
} zt_ckpt_meta;

typedef struct {
    char tag[64];
    uint64_t bytes; /* shards and manifest */
    double seconds;
} zt_ckpt_saved;

/* Creates DIR when missing and checks that files can be created in it, so a
 * bad --save-dir fails before training. */
zt_status zt_ckpt_check_dir(const zt_world *w, const char *dir);

/* Locks DIR for this job, so that a second job saving into it is refused
 * before it trains instead of interleaving its checkpoints with this one's:
 * rank 0 takes flock(LOCK_EX | LOCK_NB) on DIR/.zerotrain.lock and writes
 * "pid host" into it (a refused job's error names them). Collective: every
 * rank returns rank 0's status; *lock is the held descriptor on rank 0, -1
 * elsewhere and on failure. The lock lasts until zt_ckpt_unlock_dir or the
 * process's end (a killed job leaves no stale lock); the file stays. On some
 * network file systems flock is not seen by other nodes (docs/checkpoints.md). */
zt_status zt_ckpt_lock_dir(const zt_world *w, const char *dir, int *lock);
void zt_ckpt_unlock_dir(int *lock);

/* Saves t at its current step as DIR/global_step<N> (see above). keep_last
 * <= 0 keeps everything. Every rank returns the same status and message. */
zt_status zt_ckpt_save(zt_trainer *t, const zt_ckpt_meta *meta, const char *dir,
                       int64_t keep_last, zt_ckpt_saved *out);

/* ---- Loading. ---- */

typedef struct {
    char dir[4096];
    char tag[128];
    char path[4352]; /* the manifest's path, named in errors */
    struct zt_ckpt_manifest *manifest; /* the parsed manifest (ckpt_impl.h) */
    /* Read and checked by zt_ckpt_open. */
    bool unchecked; /* format version 1: no manifest checksum to verify */
    int partition_count, world_size, stage, n_units, n_sections;
    int64_t partition_numel, global_steps;
    zt_ckpt_unit *units;  /* n_units */
    uint64_t *file_bytes; /* partition_count */
    uint32_t *file_crc;   /* partition_count */
} zt_ckpt;

/* Reads DIR/<tag>/zt_manifest.json (tag NULL: the one DIR/latest names). With
 * a world, rank 0 reads and every rank gets the same bytes (collective);
 * with w NULL this process reads alone. The manifest's checksum, every value
 * in it, its model against its layout and the shard files' sizes are checked
 * (a damaged checkpoint is ZT_ERR_DATA naming the file); a format-1 manifest
 * prints a notice on stderr (rank 0). */
zt_status zt_ckpt_open(zt_ckpt *c, const zt_world *w, const char *dir, const char *tag);
void zt_ckpt_close(zt_ckpt *c);

/* The model arguments the checkpoint was saved with (resolved). */
zt_status zt_ckpt_model_args(const zt_ckpt *c, zt_model_args *out);
/* The run's seed. */
uint64_t zt_ckpt_seed(const zt_ckpt *c);
/* The run's train_micro_batch_size_per_gpu; <= 0 when the manifest has none. */
int64_t zt_ckpt_micro_batch_size(const zt_ckpt *c);
/* "char", "byte", "bpe" or "" (no tokenizer: the MLP); for "bpe" *dir gets the
 * recorded directory. */
const char *zt_ckpt_tokenizer_kind(const zt_ckpt *c, const char **dir);
/* The tokenizer the checkpoint's model reads (bpe_dir, when not NULL,
 * replaces the recorded BPE directory). */
zt_status zt_ckpt_tokenizer(const zt_ckpt *c, const char *bpe_dir, zt_tokenizer *tok);
/* ZT_ERR_DATA naming the file when tok's character vocabulary differs from
 * the checkpoint's (other kinds: the kind and size must match). */
zt_status zt_ckpt_check_tokenizer(const zt_ckpt *c, const zt_tokenizer *tok);

/* Validates and loads (see above) into a freshly initialised trainer built
 * for meta->model. weights_only: the fp32 weights only (evaluation,
 * generation): no optimizer state, counters or training checks. */
zt_status zt_ckpt_restore(const zt_ckpt *c, zt_trainer *t, const zt_ckpt_meta *meta,
                          bool weights_only);

/* Writes the full fp32 weights to out_path in the --dump-params format (raw
 * little-endian float32, model order, unpadded) and out_path.json naming each
 * tensor: [{"name", "shape", "numel", "offset" (elements), "byte_offset"}].
 * Every shard's checksum is verified first. Both files are written to a
 * temporary name and renamed. */
zt_status zt_ckpt_consolidate(const zt_ckpt *c, const char *out_path);

#endif
