/*
 * fuzz_ckpt: libFuzzer harness for what a resume reads of a checkpoint
 * (engine/ckpt): shard headers and the manifest.
 *
 * Input: the manifest, the shard of partition rank 0 and the `latest` file,
 * separated by ZT_FUZZ_SEP lines (common.h); without a third part
 * `latest` names global_step5. They are written as DIR/global_step5/
 * zt_manifest.json, its rank-0 shard and DIR/latest in the scratch directory.
 *
 * The shard's bytes go through zt_ckpt_header_decode on their own (a decoded
 * header must encode back to the same fields). The directory is opened the
 * way `zerotrain consolidate` opens it (zt_ckpt_open without a world: the
 * `latest` file, the manifest's checksum and the checks of every value, the
 * model its arguments build against the layout, the shard's size), and
 * every manifest reader runs: the model arguments, seed, micro batch, the
 * recorded char or byte tokenizer and its check, the carried-over training
 * state, and consolidation (tensor index, shard verification against size,
 * header and CRC-32, range reads), also as safetensors under the PyTorch
 * names of the model the arguments build. The shard part is parsed as a
 * safetensors file too (zt_st_parse: an accepted file's tensors, sorted by
 * offset, tile its data exactly, each its shape's bytes). BPE tokenizers are not loaded: the
 * manifest names their directory, which would read arbitrary paths. A
 * mutated manifest of format 2 rarely passes its checksum: the seeds of
 * format 1 (`*-v1`, no checksum) are the ones that reach the value checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/ckpt/ckpt_impl.h"
#include "engine/ckpt/safetensors.h"
#include "tests/fuzz/common.h"

#define ZT_FUZZ_MAX_UNITS 64
#define ZT_FUZZ_TAG "global_step5"

static char zt_ck_dir[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char tag_dir[1100];
    if (!zt_fuzz_path(zt_ck_dir, sizeof zt_ck_dir, "ck") || mkdir(zt_ck_dir, 0700) != 0 ||
        snprintf(tag_dir, sizeof tag_dir, "%s/" ZT_FUZZ_TAG, zt_ck_dir) >= (int)sizeof tag_dir ||
        mkdir(tag_dir, 0700) != 0)
        zt_ck_dir[0] = '\0';
    return 0;
}

/* decode(bytes), and decode(encode(header)) gives the same header back. */
static void fuzz_header(const uint8_t *buf, size_t len)
{
    zt_ckpt_unit units[ZT_FUZZ_MAX_UNITS], again_units[ZT_FUZZ_MAX_UNITS];
    zt_ckpt_header h = {.units = units};
    if (zt_ckpt_header_decode(buf, len, "fuzz shard", ZT_FUZZ_MAX_UNITS, &h) != ZT_OK)
        return;
    zt_fuzz_check(h.n_units <= ZT_FUZZ_MAX_UNITS && h.header_bytes <= len);
    size_t hb = zt_ckpt_header_bytes(h.n_units);
    uint8_t *enc = malloc(hb);
    zt_fuzz_check(enc != NULL);
    zt_ckpt_header_encode(&h, enc);
    zt_ckpt_header again = {.units = again_units};
    zt_fuzz_check(zt_ckpt_header_decode(enc, hb, "re-encoded", h.n_units, &again) == ZT_OK);
    zt_fuzz_check(again.rank == h.rank && again.partition_count == h.partition_count &&
                  again.stage == h.stage && again.n_units == h.n_units &&
                  again.n_sections == h.n_sections &&
                  again.partition_numel == h.partition_numel);
    zt_fuzz_check(memcmp(again_units, units, h.n_units * sizeof *units) == 0);
    free(enc);
}

static int fuzz_by_offsets(const void *pa, const void *pb)
{
    const zt_st_tensor *a = *(const zt_st_tensor *const *)pa;
    const zt_st_tensor *b = *(const zt_st_tensor *const *)pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    return a->end < b->end ? -1 : a->end > b->end;
}

/* The bytes as a safetensors file of exactly that length: an accepted one's
 * tensors, sorted by offset, lie end to end over the whole data, each its
 * dtype's bytes of its shape. */
static void fuzz_safetensors(const uint8_t *buf, size_t len)
{
    zt_st_file f;
    if (zt_st_parse(buf, len, len, "fuzz safetensors", &f) != ZT_OK)
        return;
    zt_fuzz_check(f.data_start >= 10 && f.data_start + f.data_bytes == len);
    const zt_st_tensor **by = malloc(((size_t)f.n + 1) * sizeof *by);
    zt_fuzz_check(by != NULL);
    for (int i = 0; i < f.n; i++) {
        size_t es = zt_st_dtype_size(f.tensors[i].dtype);
        zt_fuzz_check(!es || f.tensors[i].end - f.tensors[i].begin ==
                                 (uint64_t)f.tensors[i].numel * es);
        by[i] = &f.tensors[i];
    }
    qsort(by, (size_t)f.n, sizeof *by, fuzz_by_offsets);
    uint64_t at = 0;
    for (int i = 0; i < f.n; i++) {
        zt_fuzz_check(by[i]->begin == at && by[i]->begin <= by[i]->end);
        at = by[i]->end;
    }
    zt_fuzz_check(at == f.data_bytes);
    free(by);
    zt_st_free(&f);
}

static void fuzz_tokenizer(const zt_ckpt *c)
{
    const char *kind = zt_ckpt_tokenizer_kind(c, NULL);
    if (strcmp(kind, "char") != 0 && strcmp(kind, "byte") != 0)
        return;
    zt_tokenizer tok;
    if (zt_ckpt_tokenizer(c, NULL, &tok) != ZT_OK)
        return;
    (void)zt_ckpt_check_tokenizer(c, &tok);
    zt_tokenizer_free(&tok);
}

static void fuzz_manifest(void)
{
    zt_ckpt c;
    if (zt_ckpt_open(&c, NULL, zt_ck_dir, NULL) != ZT_OK)
        return;
    zt_fuzz_check(c.n_units >= 1 && c.partition_count >= 1 && c.n_sections >= 1);
    int64_t part = 0;
    for (int u = 0; u < c.n_units; u++) {
        zt_fuzz_check(c.units[u].part_offset == part);
        part += c.units[u].shard_numel;
    }
    zt_fuzz_check(part == c.partition_numel);
    zt_model_args args;
    (void)zt_ckpt_model_args(&c, &args);
    (void)zt_ckpt_seed(&c);
    (void)zt_ckpt_micro_batch_size(&c);
    fuzz_tokenizer(&c);
    zt_ckpt_state state;
    if (zt_ckpt_manifest_state(&c, &state) == ZT_OK)
        zt_fuzz_check(state.global_steps == c.global_steps);
    zt_ckpt_state_free(&state);
    char out[1100];
    snprintf(out, sizeof out, "%s/consolidated.bin", zt_ck_dir);
    (void)zt_ckpt_consolidate(&c, out);
    zt_model model;
    if (zt_ckpt_model_args(&c, &args) == ZT_OK && zt_model_build(&args, &model) == ZT_OK) {
        snprintf(out, sizeof out, "%s/consolidated.safetensors", zt_ck_dir);
        (void)zt_ckpt_consolidate_safetensors(&c, &model, out);
        zt_model_free(&model);
    }
    zt_ckpt_close(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!zt_ck_dir[0])
        return 0;
    zt_fuzz_part parts[3] = {{0}};
    int n = zt_fuzz_split(data, size, parts, 3);
    fuzz_header(parts[1].data, parts[1].size);
    fuzz_safetensors(parts[1].data, parts[1].size);

    char path[1400], shard[96];
    zt_ckpt_shard_name(shard, sizeof shard, 0);
    snprintf(path, sizeof path, "%s/" ZT_FUZZ_TAG "/" ZT_CKPT_MANIFEST, zt_ck_dir);
    bool ok = zt_fuzz_write(path, parts[0].data, parts[0].size);
    snprintf(path, sizeof path, "%s/" ZT_FUZZ_TAG "/%s", zt_ck_dir, shard);
    ok = ok && zt_fuzz_write(path, parts[1].data, parts[1].size);
    snprintf(path, sizeof path, "%s/latest", zt_ck_dir);
    if (n == 3)
        ok = ok && zt_fuzz_write(path, parts[2].data, parts[2].size);
    else
        ok = ok && zt_fuzz_write(path, ZT_FUZZ_TAG, sizeof ZT_FUZZ_TAG - 1);
    if (ok)
        fuzz_manifest();
    zt_status_clear();
    return 0;
}
