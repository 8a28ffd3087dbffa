/* Checkpoint pure parts: the CRC-32 is zlib's, shard headers survive an
 * encode/decode round trip and bad ones are refused, and resharding a unit
 * from any old world size to any new one reassembles exactly the new slices.
 * A shard reader whose set-up ran out of memory frees without closing
 * descriptors it never opened. Manifests with values past int64_t arithmetic
 * are refused (no overflow). */
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
    zt_ckpt_header h = {.version = ZT_CKPT_FORMAT_VERSION, .rank = 2, .partition_count = 4,
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
    assert_int_equal(got.version, ZT_CKPT_FORMAT_VERSION);
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
    buf[8] = ZT_CKPT_FORMAT_VERSION;
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

/* DIR/latest and DIR/global_step1/zt_manifest.json of a two-unit MLP at one
 * partition: units of shard0 and shard1 elements (padded alike), the model
 * width and the first tensor's shape as JSON text. */
static void write_manifest(const char *dir, const char *width, const char *shape0,
                           long long shard0, long long shard1)
{
    char path[512];
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("global_step1", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/global_step1", dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/global_step1/zt_manifest.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"format\": \"zerotrain-checkpoint\", \"format_version\": 1,"
            " \"tag\": \"global_step1\", \"world_size\": 1, \"zero_stage\": 1,"
            " \"training\": {\"global_steps\": 1}, \"optimizer\": {\"state_sections\": []},"
            " \"model\": {\"name\": \"mlp\", \"width\": %s, \"layers\": 2, \"in_size\": 4,"
            "  \"out_size\": 2, \"units\": ["
            "  {\"name\": \"layers.0\", \"tensors\": [{\"name\": \"weight\", \"shape\": %s},"
            "   {\"name\": \"bias\", \"shape\": [8]}]},"
            "  {\"name\": \"layers.1\", \"tensors\": [{\"name\": \"weight\", \"shape\": [2, 8]},"
            "   {\"name\": \"bias\", \"shape\": [2]}]}]},"
            " \"layout\": {\"partition_count\": 1, \"partition_numel\": 80, \"units\": ["
            "  {\"numel\": 40, \"padded_numel\": %lld, \"shard_numel\": %lld, \"part_offset\": 0},"
            "  {\"numel\": 18, \"padded_numel\": %lld, \"shard_numel\": %lld,"
            "   \"part_offset\": %lld}]},"
            " \"files\": [{\"name\": \"zero_pp_rank_0_mp_rank_00_optim_states.zt\","
            "  \"bytes\": 0, \"crc32\": \"00000000\"}]}",
            width, shape0, shard0, shard0, shard1, shard1, shard0);
    fclose(f);
}

static void remove_manifest(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/global_step1/zt_manifest.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/global_step1", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/latest", dir);
    unlink(path);
}

static void assert_message_has(const char *needle)
{
    if (!strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", zt_status_message(), needle);
}

/* Each of these overflowed int64_t arithmetic while reading a damaged
 * manifest: undefined behaviour, reported by UBSan through
 * tests/fuzz/fuzz_ckpt. */
static void test_manifest_overflows(void **state)
{
    (void)state;
    char dir[] = "/tmp/zt_test_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    zt_ckpt c;
    zt_model_args args;

    write_manifest(dir, "8", "[8, 4]", 48, 32);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    assert_int_equal(zt_ckpt_model_args(&c, &args), ZT_OK);
    assert_int_equal(args.width, 8);
    zt_ckpt_close(&c);

    /* A width that the registry's double cannot carry back to int64_t. */
    write_manifest(dir, "9223372036854775807", "[8, 4]", 48, 32);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    assert_int_equal(zt_ckpt_model_args(&c, &args), ZT_ERR_DATA);
    assert_message_has("\"model.width\" is missing or not an integer <= 2^53");
    zt_ckpt_close(&c);

    /* Unit shards of 2^62 elements each: their sum passes INT64_MAX. */
    write_manifest(dir, "8", "[8, 4]", 1LL << 62, 1LL << 62);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_ERR_DATA);
    assert_message_has("layout.units[1] is inconsistent");

    /* A tensor of 2^62 x 4 elements. */
    write_manifest(dir, "8", "[4611686018427387904, 4]", 48, 32);
    assert_int_equal(zt_ckpt_open(&c, NULL, dir, NULL), ZT_OK);
    char out[512];
    snprintf(out, sizeof out, "%s/out.bin", dir);
    assert_int_equal(zt_ckpt_consolidate(&c, out), ZT_ERR_DATA);
    assert_message_has("model.units does not describe the layout's tensors");
    zt_ckpt_close(&c);

    remove_manifest(dir);
    rmdir(dir);
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
        cmocka_unit_test(test_manifest_overflows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
