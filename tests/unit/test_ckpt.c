/* Checkpoint pure parts: the CRC-32 is zlib's, shard headers survive an
 * encode/decode round trip and bad ones are refused, and resharding a unit
 * from any old world size to any new one reassembles exactly the new slices.
 * A shard reader whose set-up ran out of memory frees without closing
 * descriptors it never opened. Manifests: the canonical form of the checksum
 * against a hand-written one and Python's CRC; an edit of a checksummed
 * manifest is refused; every value is range-checked on its own (a manifest
 * without checksum), values past int64_t arithmetic included; the model
 * the arguments build must be the layout's, and the layout the shards';
 * DIR/latest holds one tag. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>

#include "engine/ckpt/ckpt.h"
#include "engine/ckpt/ckpt_impl.h"
#include "engine/zero/layout.h"

/* The textbook bitwise CRC-32 (reflected 0xEDB88320). */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void test_crc32_known_values(void **state)
{
    (void)state;
    assert_int_equal(zt_ckpt_crc32(0, "", 0), 0);
    assert_int_equal(zt_ckpt_crc32(0, "123456789", 9), 0xCBF43926u);
    assert_int_equal(zt_ckpt_crc32(0, "The quick brown fox jumps over the lazy dog", 43),
                     0x414FA339u);
}

static void test_crc32_matches_bitwise_and_chains(void **state)
{
    (void)state;
    enum { N = 4099 };
    uint8_t buf[N];
    srand(7);
    for (int i = 0; i < N; i++)
        buf[i] = (uint8_t)rand();
    for (size_t n = 0; n < 40; n++)
        assert_int_equal(zt_ckpt_crc32(0, buf, n), crc_bitwise(buf, n));
    uint32_t whole = zt_ckpt_crc32(0, buf, N);
    assert_int_equal(whole, crc_bitwise(buf, N));
    for (int t = 0; t < 50; t++) {
        size_t a = (size_t)rand() % N, b = a + (size_t)rand() % (N - a);
        uint32_t c = zt_ckpt_crc32(0, buf, a);
        c = zt_ckpt_crc32(c, buf + a, b - a);
        c = zt_ckpt_crc32(c, buf + b, N - b);
        assert_int_equal(c, whole);
    }
    /* One flipped bit anywhere changes it. */
    for (int i = 0; i < N; i += 97) {
        buf[i] ^= 0x10;
        assert_int_not_equal(zt_ckpt_crc32(0, buf, N), whole);
        buf[i] ^= 0x10;
    }
}

static void test_header_round_trip(void **state)
{
    (void)state;
    zt_ckpt_unit units[3] = {{100, 128, 32, 0}, {1, 128, 32, 32}, {5000, 5120, 1280, 64}};
    zt_ckpt_header h = {.version = ZT_CKPT_SHARD_VERSION, .rank = 2, .partition_count = 4,
                        .stage = 3, .n_units = 3, .n_sections = 3, .partition_numel = 1344,
                        .units = units};
    size_t hb = zt_ckpt_header_bytes(3);
    assert_int_equal(hb, 64 + 3 * 32);
    uint8_t *buf = malloc(hb);
    zt_ckpt_header_encode(&h, buf);
    assert_memory_equal(buf, "ZTSHARD\0", 8);
    zt_ckpt_unit got_units[3];
    zt_ckpt_header got = {.units = got_units};
    assert_int_equal(zt_ckpt_header_decode(buf, hb, "x.zt", 3, &got), ZT_OK);
    assert_int_equal(got.version, ZT_CKPT_SHARD_VERSION);
    assert_int_equal(got.rank, 2);
    assert_int_equal(got.partition_count, 4);
    assert_int_equal(got.stage, 3);
    assert_int_equal(got.n_units, 3);
    assert_int_equal(got.n_sections, 3);
    assert_int_equal(got.partition_numel, 1344);
    assert_int_equal(got.header_bytes, hb);
    assert_int_equal(got.data_bytes, 3 * 1344 * 4);
    assert_memory_equal(got_units, units, sizeof units);
    /* Little-endian on disk whatever the host: rank at byte 16. */
    assert_int_equal(buf[16], 2);
    assert_int_equal(buf[17], 0);

    /* Refusals name the file. */
    assert_int_equal(zt_ckpt_header_decode(buf, hb, "x.zt", 2, &got), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "x.zt"));
    assert_int_equal(zt_ckpt_header_decode(buf, hb - 1, "x.zt", 3, &got), ZT_ERR_DATA);
    assert_int_equal(zt_ckpt_header_decode(buf, 10, "x.zt", 3, &got), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "truncated"));
    buf[8] = 9;
    assert_int_equal(zt_ckpt_header_decode(buf, hb, "x.zt", 3, &got), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "version"));
    buf[8] = ZT_CKPT_SHARD_VERSION;
    buf[0] = 'X';
    assert_int_equal(zt_ckpt_header_decode(buf, hb, "x.zt", 3, &got), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "magic"));
    free(buf);
}

static int64_t padded_for(int64_t numel, int world)
{
    int64_t a = (int64_t)world * ZT_ZERO_ALIGN;
    return (numel + a - 1) / a * a;
}

/* Assembles [lo, hi) of a unit from the old world's slices (each padded with
 * zeros) through the pieces, as the loader does. */
static void assemble(const float *padded_old, int64_t numel, int64_t old_shard, int64_t lo,
                     int64_t hi, float *out)
{
    zt_ckpt_piece *p = malloc((size_t)zt_ckpt_pieces_max(old_shard, lo, hi) * sizeof *p);
    int n = zt_ckpt_pieces(numel, old_shard, lo, hi, p);
    assert_true(n <= zt_ckpt_pieces_max(old_shard, lo, hi));
    for (int64_t i = 0; i < hi - lo; i++)
        out[i] = 0.0f;
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        assert_true(p[i].numel > 0);
        assert_true(p[i].src_offset >= 0 && p[i].src_offset + p[i].numel <= old_shard);
        assert_int_equal(p[i].dst_offset, covered);
        const float *slice = padded_old + (int64_t)p[i].src_rank * old_shard;
        memcpy(out + p[i].dst_offset, slice + p[i].src_offset, (size_t)p[i].numel * sizeof *out);
        covered += p[i].numel;
    }
    int64_t end = hi < numel ? hi : numel;
    assert_int_equal(covered, end > lo ? end - lo : 0);
    free(p);
}

static void test_reshard_every_world_pair(void **state)
{
    (void)state;
    srand(11);
    for (int trial = 0; trial < 20; trial++) {
        int64_t numel = 1 + rand() % (trial < 5 ? 40 : 3000);
        for (int w0 = 1; w0 <= 5; w0++) {
            int64_t p0 = padded_for(numel, w0), s0 = p0 / w0;
            float *old = calloc((size_t)p0, sizeof *old);
            for (int64_t i = 0; i < numel; i++)
                old[i] = (float)(i + 1) + 0.25f * (float)trial;
            for (int w1 = 1; w1 <= 5; w1++) {
                int64_t p1 = padded_for(numel, w1), s1 = p1 / w1;
                float *got = malloc((size_t)p1 * sizeof *got);
                /* Every new rank's slice: the values below numel, zero after. */
                for (int r = 0; r < w1; r++) {
                    assemble(old, numel, s0, r * s1, (r + 1) * s1, got);
                    for (int64_t i = 0; i < s1; i++) {
                        int64_t g = r * s1 + i;
                        assert_true(got[i] == (g < numel ? old[g] : 0.0f));
                    }
                }
                /* The whole unit (what stage 0 keeps). */
                assemble(old, numel, s0, 0, p1, got);
                for (int64_t g = 0; g < p1; g++)
                    assert_true(got[g] == (g < numel ? old[g] : 0.0f));
                free(got);
            }
            free(old);
        }
    }
}

static void test_reshard_empty_tail(void **state)
{
    (void)state;
    zt_ckpt_piece p[4];
    /* A range wholly in the padding reads nothing. */
    assert_int_equal(zt_ckpt_pieces(10, 16, 16, 32, p), 0);
    /* A range inside one old slice is one piece. */
    assert_int_equal(zt_ckpt_pieces(100, 64, 3, 20, p), 1);
    assert_int_equal(p[0].src_rank, 0);
    assert_int_equal(p[0].src_offset, 3);
    assert_int_equal(p[0].numel, 17);
    /* Across a boundary: two. */
    assert_int_equal(zt_ckpt_pieces(100, 64, 60, 70, p), 2);
    assert_int_equal(p[1].src_rank, 1);
    assert_int_equal(p[1].src_offset, 0);
    assert_int_equal(p[1].dst_offset, 4);
    assert_int_equal(p[1].numel, 6);
}

/* Bytes of address space this process maps now (/proc/self/statm). */
static uint64_t mapped_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    unsigned long long pages = 0;
    assert_int_equal(fscanf(f, "%llu", &pages), 1);
    fclose(f);
    return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* A reader whose second allocation fails: freeing it must close nothing.
 * The fds table (64 MiB, fresh zero pages) used to be filled with -1 only
 * after both allocations succeeded, so zt_ckpt_reader_free closed fd 0 once
 * per entry. An address-space limit makes the 512 MiB pieces table fail. */
static void test_reader_free_after_failed_init(void **state)
{
    (void)state;
    if (fcntl(0, F_GETFD) < 0)
        assert_int_equal(open("/dev/null", O_RDONLY), 0);
    zt_ckpt c;
    memset(&c, 0, sizeof c);
    c.partition_count = 1 << 24;
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    lim = old;
    lim.rlim_cur = mapped_bytes() + ((rlim_t)256 << 20);
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < lim.rlim_cur)
        lim.rlim_cur = old.rlim_cur;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    zt_ckpt_reader r;
    zt_status st = zt_ckpt_reader_init(&r, &c);
    bool fds_allocated = r.fds != NULL;
    zt_ckpt_reader_free(&r);
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    assert_int_equal(st, ZT_ERR_OOM);
    assert_true(fds_allocated);
    assert_true(fcntl(0, F_GETFD) >= 0);
}

/* ---- Manifests: the checksum and the checks of every value. ---- */

/* A checkpoint of a two-unit MLP (width 8, in 4, out 2) saved at step 2 on
 * one rank with AdamW and a dynamic fp16 scaler, as a save writes it. Its
 * manifest_crc32 was computed by Python's zlib over the canonical form
 * (tests/tools/ztcheck.py manifest_crc), not by the code under test. */
static const char fixture_json[] =
    "{\"format\": \"zerotrain-checkpoint\", \"format_version\": 2,"
    " \"zerotrain_version\": \"0.1.0\","
    " \"tag\": \"global_step2\", \"world_size\": 1, \"zero_stage\": 1,"
    " \"model\": {\"name\": \"mlp\", \"width\": 8, \"layers\": 2, \"in_size\": 4, \"out_size\": 2,"
    "  \"n_params\": 58, \"units\": ["
    "  {\"name\": \"layers.0\", \"numel\": 40, \"tensors\": ["
    "   {\"name\": \"weight\", \"shape\": [8, 4]},"
    "   {\"name\": \"bias\", \"shape\": [8]}]},"
    "  {\"name\": \"layers.1\", \"numel\": 18, \"tensors\": ["
    "   {\"name\": \"weight\", \"shape\": [2, 8]},"
    "   {\"name\": \"bias\", \"shape\": [2]}]}]},"
    " \"pipeline\": {\"stages\": 1, \"data_parallel_size\": 1,"
    "  \"partition_method\": \"parameters\","
    "  \"schedule\": \"1f1b\", \"stage_first_units\": [0, 2]},"
    " \"layout\": {\"partition_count\": 1, \"align\": 16, \"partition_numel\": 80, \"units\": ["
    "  {\"numel\": 40, \"padded_numel\": 48, \"shard_numel\": 48, \"part_offset\": 0},"
    "  {\"numel\": 18, \"padded_numel\": 32, \"shard_numel\": 32, \"part_offset\": 48}]},"
    " \"dtype\": {\"params\": \"fp32\", \"master\": \"fp32\", \"optimizer_states\": \"fp32\","
    "  \"gradients\": \"fp32\", \"communication\": \"fp32\", \"shards\": \"fp32\"},"
    " \"offload\": {\"optimizer\": \"none\", \"param\": \"none\"},"
    " \"optimizer\": {\"type\": \"AdamW\", \"state_sections\": [\"exp_avg\", \"exp_avg_sq\"],"
    "  \"step\": 2, \"lr\": 0.001, \"betas\": [0.9, 0.999], \"eps\": 1e-08,"
    "  \"weight_decay\": 0.01},"
    " \"scheduler\": {\"type\": \"none\", \"last_batch_iteration\": 1, \"base_lr\": 0.001},"
    " \"loss_scaler\": {\"dynamic\": true, \"cur_scale\": 256.0, \"cur_iter\": 2,"
    "  \"last_overflow_iter\": -1, \"cur_hysteresis\": 2, \"hysteresis\": 2,"
    "  \"loss_scale_window\": 1000, \"min_loss_scale\": 1.0, \"consecutive_hysteresis\": false},"
    " \"training\": {\"global_steps\": 2, \"skipped_steps\": 0, \"global_samples\": 8,"
    "  \"micro_steps\": 2, \"seed\": 5, \"train_batch_size\": 4,"
    "  \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1,"
    "  \"gradient_clipping\": 1.0},"
    " \"sampler\": {\"n_samples\": 64, \"steps_per_epoch\": 16, \"epoch\": 0, \"position\": 8,"
    "  \"shuffle\": false},"
    " \"rng\": {\"seed\": 5, \"note\": \"counter-based\"},"
    " \"files\": [{\"name\": \"zero_pp_rank_0_mp_rank_00_optim_states.zt\", \"rank\": 0,"
    "  \"bytes\": 1088, \"crc32\": \"00000000\"}],"
    " \"history\": {\"loss\": [0.5, 0.25], \"loss_scale\": [256.0, 256.0]},"
    " \"manifest_crc32\": \"8a329632\"}";

/* The shard size the fixture's layout gives: a 128-byte header, then 3
 * sections of 80 floats. */
#define FIXTURE_SHARD_BYTES 1088

/* The member at a dotted path ("files.0.crc32": digits index arrays). */
static json_t *json_parent_at(json_t *root, const char *path, char *last, size_t cap)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *o = root;
    char *save = NULL, *key = strtok_r(buf, ".", &save), *next;
    while ((next = strtok_r(NULL, ".", &save))) {
        o = json_is_array(o) ? json_array_get(o, strtoul(key, NULL, 10)) : json_object_get(o, key);
        assert_non_null(o);
        key = next;
    }
    snprintf(last, cap, "%s", key);
    return o;
}

/* DIR/latest ("global_step2") and DIR/global_step2/ holding the fixture with
 * `edits` (a JSON object of dotted path -> new value) applied, the members
 * of the space-separated paths in `drop` removed, and a shard of
 * shard_bytes zero bytes. */
static void write_ckpt(const char *dir, const char *edits, const char *drop, long shard_bytes)
{
    json_error_t err;
    json_t *root = json_loads(fixture_json, 0, &err), *ed = json_loads(edits, 0, &err);
    assert_non_null(root);
    assert_non_null(ed);
    const char *path;
    json_t *v;
    char last[64];
    json_object_foreach(ed, path, v) {
        json_t *o = json_parent_at(root, path, last, sizeof last);
        if (json_is_array(o))
            assert_int_equal(json_array_set(o, strtoul(last, NULL, 10), v), 0);
        else
            assert_int_equal(json_object_set(o, last, v), 0);
    }
    char paths[256];
    snprintf(paths, sizeof paths, "%s", drop);
    char *save = NULL;
    for (char *p = strtok_r(paths, " ", &save); p; p = strtok_r(NULL, " ", &save))
        json_object_del(json_parent_at(root, p, last, sizeof last), last);
    char file[512];
    snprintf(file, sizeof file, "%s/global_step2", dir);
    mkdir(file, 0700);
    snprintf(file, sizeof file, "%s/global_step2/zt_manifest.json", dir);
    assert_int_equal(json_dump_file(root, file, JSON_INDENT(1)), 0);
    json_decref(root);
    json_decref(ed);
    snprintf(file, sizeof file, "%s/latest", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("global_step2", f);
    fclose(f);
    snprintf(file, sizeof file, "%s/global_step2/zero_pp_rank_0_mp_rank_00_optim_states.zt", dir);
    f = fopen(file, "w");
    assert_non_null(f);
    for (long i = 0; i < shard_bytes; i++)
        fputc(0, f);
    fclose(f);
}

/* The fixture as format 1 (the version before checksums) with edits. */
static void write_v1(const char *dir, const char *edits)
{
    char all[4096];
    size_t n = strlen(edits);
    snprintf(all, sizeof all, "{\"format_version\": 1%s%.*s", n > 2 ? ", " : "",
             (int)(n > 2 ? n - 1 : 1), n > 2 ? edits + 1 : "}");
    write_ckpt(dir, all, "manifest_crc32", FIXTURE_SHARD_BYTES);
}

static void remove_ckpt(const char *dir)
{
    char path[512];
    const char *files[] = {"global_step2/zt_manifest.json",
                           "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.zt",
                           "global_step2/out.bin", "global_step2", "latest"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

static void assert_message_has(const char *needle)
{
    if (!strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", zt_status_message(), needle);
}

/* zt_ckpt_open refuses with ZT_ERR_DATA and a message holding `needle`. */
static void assert_open_refused(const char *dir, const char *needle)
{
    zt_ckpt c;
    zt_status st = zt_ckpt_open(&c, NULL, dir, NULL);
    if (st == ZT_OK) {
        zt_ckpt_close(&c);
        fail_msg("opened; expected a refusal naming \"%s\"", needle);
    }
    assert_int_equal(st, ZT_ERR_DATA);
    assert_message_has(needle);
    assert_message_has("zt_manifest.json is damaged");
}

/* The canonical form against a hand-written one: keys sorted at every level,
 * the top-level checksum left out (a nested key of that name kept), reals
 * with 17 digits and ".0", the three escapes, UTF-8 as it is. */
static void test_manifest_canonical_form(void **state)
{
    (void)state;
    static const char text[] =
        "{\"b\": [1, 2.0, -0.0, 1e300, 0.1, 1e16, true, false, null, -7],"
        " \"a\": \"q\\\"\\\\\\n\\u0001\xc3\xa9\", \"manifest_crc32\": \"x\","
        " \"c\": {\"manifest_crc32\": 1, \"B\": {}, \"A\": []}}";
    static const char canonical[] =
        "{\"a\":\"q\\\"\\\\\\u000a\\u0001\xc3\xa9\",\"b\":[1,2.0,-0.0,1.0000000000000001e+300,"
        "0.10000000000000001,10000000000000000.0,true,false,null,-7],"
        "\"c\":{\"A\":[],\"B\":{},\"manifest_crc32\":1}}";
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    assert_non_null(root);
    uint32_t crc = 0;
    assert_int_equal(zt_ckpt_manifest_crc(root, &crc), ZT_OK);
    assert_int_equal(crc, crc_bitwise((const uint8_t *)canonical, strlen(canonical)));
    /* Python: zlib.crc32 of ztcheck.manifest_canonical of the same object. */
    assert_int_equal(crc, 0xd8f5774au);
    json_decref(root);
}

/* Format 2 must carry its checksum and it must match; format 1 has none and
 * opens as unchecked; a checksum present is verified whatever the version. */
static void test_manifest_checksum(void **state)
{
    (void)state;
    char dir[] = "/tmp/zt_test_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    zt_ckpt c;
    write_ckpt(dir, "{}", "", FIXTURE_SHARD_BYTES);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    assert_false(c.unchecked);
    assert_int_equal(c.global_steps, 2);
    assert_int_equal(zt_ckpt_seed(&c), 5);
    zt_ckpt_close(&c);

    /* A one-digit edit of a counter, of the seed, of the scale. */
    write_ckpt(dir, "{\"optimizer.step\": 3}", "", FIXTURE_SHARD_BYTES);
    assert_open_refused(dir, "the CRC-32 of its content is");
    assert_message_has("\"manifest_crc32\" says 8a329632");
    write_ckpt(dir, "{\"training.seed\": 6, \"rng.seed\": 6}", "", FIXTURE_SHARD_BYTES);
    assert_open_refused(dir, "the CRC-32 of its content is");
    write_ckpt(dir, "{\"loss_scaler.cur_scale\": 512.0}", "", FIXTURE_SHARD_BYTES);
    assert_open_refused(dir, "the CRC-32 of its content is");
    /* A reordered, re-indented file with the same values passes. */
    write_ckpt(dir, "{\"history.loss\": [0.5, 0.25]}", "", FIXTURE_SHARD_BYTES);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    zt_ckpt_close(&c);

    write_ckpt(dir, "{}", "manifest_crc32", FIXTURE_SHARD_BYTES);
    assert_open_refused(dir, "format version 2 needs \"manifest_crc32\"");
    write_ckpt(dir, "{\"manifest_crc32\": \"8A329632\"}", "", FIXTURE_SHARD_BYTES);
    assert_open_refused(dir, "8 lower-case hex digits");
    /* Version 1 with the checksum kept: the edit of the version is found. */
    write_ckpt(dir, "{\"format_version\": 1}", "", FIXTURE_SHARD_BYTES);
    assert_open_refused(dir, "the CRC-32 of its content is");
    write_v1(dir, "{}");
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    assert_true(c.unchecked);
    zt_ckpt_close(&c);
    /* Format 1 manifests of versions before pipelining have no "pipeline". */
    write_ckpt(dir, "{\"format_version\": 1}", "manifest_crc32 pipeline", FIXTURE_SHARD_BYTES);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    zt_ckpt_close(&c);

    write_ckpt(dir, "{\"format_version\": 3}", "", FIXTURE_SHARD_BYTES);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_ERR_DATA);
    assert_message_has("has format version 3; this zerotrain reads versions 1 and 2");
    remove_ckpt(dir);
}

/* Every value is range-checked on its own (format 1: no checksum to stop an
 * edit first), each refusal naming the key. */
static void test_manifest_range_checks(void **state)
{
    (void)state;
    static const struct {
        const char *edits, *key;
    } cases[] = {
        {"{\"loss_scaler.cur_scale\": -256.0}",
         "\"loss_scaler.cur_scale\" is -256.0; expected a number > 0"},
        {"{\"loss_scaler.cur_scale\": 0}", "\"loss_scaler.cur_scale\" is 0"},
        {"{\"loss_scaler.cur_scale\": \"inf\"}", "\"loss_scaler.cur_scale\" is \"inf\""},
        {"{\"loss_scaler.cur_scale\": null}", "\"loss_scaler.cur_scale\" is null"},
        {"{\"loss_scaler.dynamic\": \"yes\"}", "\"loss_scaler.dynamic\""},
        {"{\"loss_scaler.cur_hysteresis\": 3}", "\"loss_scaler.cur_hysteresis\" is 3"},
        {"{\"loss_scaler.hysteresis\": 0, \"loss_scaler.cur_hysteresis\": 0}",
         "\"loss_scaler.hysteresis\" is 0"},
        {"{\"loss_scaler.last_overflow_iter\": 2}", "\"loss_scaler.last_overflow_iter\" is 2"},
        {"{\"loss_scaler.cur_iter\": 3}", "\"loss_scaler.cur_iter\" is 3"},
        {"{\"loss_scaler.loss_scale_window\": 0}", "\"loss_scaler.loss_scale_window\" is 0"},
        {"{\"loss_scaler.min_loss_scale\": -1.0}", "\"loss_scaler.min_loss_scale\""},
        {"{\"history.loss\": [\"x\", 0.25]}", "\"history.loss[0]\" is \"x\""},
        {"{\"history.loss\": [0.5, true]}", "\"history.loss[1]\" is true"},
        {"{\"history.loss\": [0.5]}", "\"history.loss\" is [0.5]"},
        {"{\"history.loss_scale\": [256.0, null]}", "\"history.loss_scale[1]\" is null"},
        {"{\"history.loss_scale\": [0.0, 256.0]}", "\"history.loss_scale[0]\" is 0.0"},
        {"{\"optimizer.step\": 3}", "\"optimizer.step\" is 3; expected 2"},
        {"{\"optimizer.step\": -1}", "\"optimizer.step\" is -1"},
        {"{\"optimizer.state_sections\": [\"exp_avg_sq\", \"exp_avg\"]}",
         "\"optimizer.state_sections\""},
        {"{\"optimizer.betas\": [0.9, 1.5]}", "\"optimizer.betas\""},
        {"{\"optimizer.lr\": -0.001}", "\"optimizer.lr\""},
        {"{\"scheduler.last_batch_iteration\": 5}",
         "\"scheduler.last_batch_iteration\" is 5; expected 1"},
        {"{\"training.skipped_steps\": 3}", "\"training.skipped_steps\" is 3"},
        {"{\"training.global_samples\": 9}", "\"training.global_samples\" is 9; expected 8"},
        {"{\"training.seed\": 1.5}", "\"training.seed\" is 1.5"},
        {"{\"rng.seed\": 6}", "\"rng.seed\" is 6"},
        {"{\"training.train_micro_batch_size_per_gpu\": 0}",
         "\"training.train_micro_batch_size_per_gpu\" is 0"},
        {"{\"training.gradient_clipping\": -1.0}", "\"training.gradient_clipping\""},
        {"{\"sampler.position\": 9}", "\"sampler.position\" is 9; expected 8"},
        {"{\"sampler.steps_per_epoch\": 15}", "\"sampler.steps_per_epoch\" is 15; expected 16"},
        {"{\"sampler.n_samples\": 3}", "\"sampler.n_samples\" is 3"},
        {"{\"world_size\": 1099511627776}", "\"world_size\" is 1099511627776"},
        {"{\"world_size\": \"1\"}", "\"world_size\" is \"1\""},
        {"{\"zero_stage\": 4}", "\"zero_stage\" is 4; expected an integer from 0 to 3"},
        {"{\"dtype.params\": \"fp8\"}", "\"dtype.params\" is \"fp8\""},
        {"{\"dtype.shards\": \"fp16\"}", "\"dtype.shards\" is \"fp16\""},
        {"{\"offload.param\": \"disk\"}", "\"offload.param\" is \"disk\""},
        {"{\"pipeline.stages\": 2}", "\"pipeline.stages\" is 2"},
        {"{\"files.0.crc32\": \"-0000001\"}", "\"files[0].crc32\" is \"-0000001\""},
        {"{\"files.0.bytes\": 1089}", "\"files[0].bytes\" is 1089"},
        {"{\"files.0.rank\": 1}", "\"files[0].rank\" is 1"},
        {"{\"layout.align\": 8}", "\"layout.align\" is 8"},
        {"{\"model.layers\": 70000}", "\"model.layers\" is 70000"},
        {"{\"model.name\": \"resnet\"}", "\"model.name\" is \"resnet\""},
        {"{\"model.n_params\": 59}", "\"model.n_params\" is 59; expected 58"},
        {"{\"model.units.1.name\": \"head\"}", "\"model.units[1]\""},
        {"{\"model.units.0.tensors.0.shape\": [4, 8]}", "\"model.units[0]\""},
        {"{\"tokenizer\": {\"kind\": \"byte\", \"vocab_size\": 256}}", "\"tokenizer\""},
    };
    char dir[] = "/tmp/zt_test_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_v1(dir, cases[i].edits);
        assert_open_refused(dir, cases[i].key);
    }
    /* A loss that was not finite (--nonfinite continue) is saved as null and
     * read back as nan; nothing else non-numeric is. */
    zt_ckpt c;
    zt_ckpt_state st;
    write_v1(dir, "{\"history.loss\": [null, 0.25]}");
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    assert_int_equal(zt_ckpt_manifest_state(&c, &st), ZT_OK);
    assert_true(isnan(st.loss[0]));
    assert_true(st.loss[1] == 0.25);
    assert_true(st.scaler.dynamic && st.scaler.cur_scale == 256.0);
    assert_int_equal(st.optim_steps, 2);
    zt_ckpt_state_free(&st);
    zt_ckpt_close(&c);
    remove_ckpt(dir);
}

/* The model the arguments build against the layout, and the layout against
 * the shard files, before anything is sized by them (n_embd 2^24 over
 * unchanged shards used to reach "not enough host memory"). Values past
 * int64_t arithmetic are refused without overflowing (UBSan found these
 * through tests/fuzz/fuzz_ckpt). */
static void test_manifest_model_vs_shards(void **state)
{
    (void)state;
    char dir[] = "/tmp/zt_test_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_v1(dir, "{\"model.width\": 16}");
    assert_open_refused(dir, "its model arguments (mlp: width 16, layers 2, in_size 4, "
                             "out_size 2) build unit 0 (layers.0) of 80 parameters; its layout "
                             "and shards hold 40");
    write_v1(dir, "{\"model.width\": 16777216}");
    assert_open_refused(dir, "build unit 0 (layers.0) of 83886080 parameters");
    write_v1(dir, "{\"model.width\": 9223372036854775807}");
    assert_open_refused(dir,
                        "\"model.width\" is 9223372036854775807; expected an integer from 1 to");
    /* Unit shards of 2^62 elements each: their sum passes INT64_MAX. */
    write_v1(dir, "{\"layout.units\": [{\"numel\": 40, \"padded_numel\": 4611686018427387904,"
                  " \"shard_numel\": 4611686018427387904, \"part_offset\": 0}, {\"numel\": 18,"
                  " \"padded_numel\": 4611686018427387904, \"shard_numel\": 4611686018427387904,"
                  " \"part_offset\": 4611686018427387904}]}");
    assert_open_refused(dir, "layout.units[0] is inconsistent");
    /* A tensor of 2^62 x 4 elements. */
    write_v1(dir, "{\"model.units.0.tensors.0.shape\": [4611686018427387904, 4]}");
    assert_open_refused(dir, "\"model.units[0]\"");

    /* Arguments, layout and sizes that agree (width 16), over the shard of
     * width 8: the file's size gives it away. */
    write_v1(dir, "{\"model.width\": 16, \"model.n_params\": 114, \"model.units\": ["
                  " {\"name\": \"layers.0\", \"numel\": 80, \"tensors\": [{\"name\": \"weight\","
                  "  \"shape\": [16, 4]}, {\"name\": \"bias\", \"shape\": [16]}]},"
                  " {\"name\": \"layers.1\", \"numel\": 34, \"tensors\": [{\"name\": \"weight\","
                  "  \"shape\": [2, 16]}, {\"name\": \"bias\", \"shape\": [2]}]}],"
                  " \"layout.partition_numel\": 128, \"layout.units\": ["
                  " {\"numel\": 80, \"padded_numel\": 80, \"shard_numel\": 80, \"part_offset\": 0},"
                  " {\"numel\": 34, \"padded_numel\": 48, \"shard_numel\": 48,"
                  "  \"part_offset\": 80}],"
                  " \"files.0.bytes\": 1664}");
    zt_ckpt c;
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_ERR_DATA);
    assert_message_has("zero_pp_rank_0_mp_rank_00_optim_states.zt is 1088 bytes; the manifest "
                       "says 1664");
    remove_ckpt(dir);
}

/* DIR/latest: one tag and at most a final newline. */
static void test_latest_file(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t len;
        const char *why;
    } bad[] = {
        {"global_step2\0junk", 17, "it holds a NUL byte at offset 12, after \"global_step2\""},
        {"global_step2\n\n", 14, "byte 12 is 0x0a"},
        {"global_step2\r\n", 14, "byte 12 is 0x0d"},
        {"global_step2 global_step1", 25, "byte 12 is 0x20"},
        {"../etc", 6, "byte 2 is 0x2f"},
        {".hidden", 7, "its tag starts with '.'"},
        {"", 0, "it is empty"},
    };
    char dir[] = "/tmp/zt_test_ckpt_XXXXXX", path[512];
    assert_non_null(mkdtemp(dir));
    write_ckpt(dir, "{}", "", FIXTURE_SHARD_BYTES);
    snprintf(path, sizeof path, "%s/latest", dir);
    zt_ckpt c;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fwrite(bad[i].text, 1, bad[i].len, f);
        fclose(f);
        assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_ERR_DATA);
        assert_message_has("checkpoint pointer");
        assert_message_has("is damaged");
        assert_message_has(bad[i].why);
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 200; i++)
        fputc('a', f);
    fclose(f);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_ERR_DATA);
    assert_message_has("its 200 bytes are longer than a tag (127 at most)");
    /* What a save writes, and the same with an editor's newline. */
    f = fopen(path, "w");
    fputs("global_step2\n", f);
    fclose(f);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    assert_string_equal(c.tag, "global_step2");
    zt_ckpt_close(&c);
    remove_ckpt(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32_known_values),
        cmocka_unit_test(test_crc32_matches_bitwise_and_chains),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_reshard_every_world_pair),
        cmocka_unit_test(test_reshard_empty_tail),
        cmocka_unit_test(test_reader_free_after_failed_init),
        cmocka_unit_test(test_manifest_canonical_form),
        cmocka_unit_test(test_manifest_checksum),
        cmocka_unit_test(test_manifest_range_checks),
        cmocka_unit_test(test_manifest_model_vs_shards),
        cmocka_unit_test(test_latest_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
