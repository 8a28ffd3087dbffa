/* safetensors and the PyTorch names: each model's tensors tile its flat
 * parameters in order under models.md's names (GPT-lite's stacked qkv split
 * in three, the embed/head prefixes dropped, Embedding weights named
 * ".weight"); a header written by zt_st_header is 8-byte aligned, space
 * padded and parses back to the same table; damaged headers (a length past
 * the file or over the format's limit, not JSON, offsets that do not span
 * the shape, data past the end, a non-string metadata value, too many
 * dimensions) are refused with the file and the entry named, and dtypes
 * --init-from does not read still parse. The format's layout rule (entries,
 * sorted by offset, lie end to end over the whole data) refuses two entries
 * that overlap, a hole, trailing bytes, each naming the entries around it;
 * so do the entry checks (unknown dtype, overflowing shape, a name twice,
 * wrong field types) and the same rules on a consolidated file's index. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/ckpt/safetensors.h"
#include "models/model.h"
#include "models/torch_names.h"

static void build(zt_model *m, const char *name)
{
    zt_model_args a;
    zt_model_args_init(&a);
    snprintf(a.name, sizeof a.name, "%s", name);
    a.n_layer = 2, a.n_embd = 8, a.n_head = 2, a.block_size = 4, a.vocab_size = 10;
    a.hidden_dim = 6, a.max_len = 4, a.width = 5, a.layers = 3, a.in_size = 3, a.out_size = 2;
    assert_int_equal(zt_model_build(&a, m), ZT_OK);
}

static const zt_torch_tensor *find(const zt_torch_tensor *ts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name))
            return &ts[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Tensors tile [0, n_params) in order, each inside its unit. */
static void check_tiling(const zt_model *m, const zt_torch_tensor *ts, int n)
{
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(ts[i].offset, at);
        int64_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++)
            numel *= ts[i].shape[d];
        assert_int_equal(numel, ts[i].numel);
        assert_true(ts[i].unit_offset + ts[i].numel <= m->units[ts[i].unit].param_numel);
        at += ts[i].numel;
    }
    assert_int_equal(at, m->n_params);
}

static void test_gptlite_names(void **state)
{
    (void)state;
    zt_model m;
    build(&m, "gptlite");
    zt_torch_tensor *ts;
    int n;
    assert_int_equal(zt_torch_tensors_get(&m, &ts, &n), ZT_OK);
    check_tiling(&m, ts, n);
    assert_int_equal(n, 2 + 2 * 16 + 4); /* qkv weight and bias become 3 each */
    assert_string_equal(ts[0].name, "wte.weight");
    assert_string_equal(ts[0].zt_name, "embed.wte");
    assert_string_equal(ts[1].name, "wpe.weight");
    const zt_torch_tensor *q = find(ts, n, "h.1.attn.query.weight");
    const zt_torch_tensor *k = find(ts, n, "h.1.attn.key.weight");
    const zt_torch_tensor *v = find(ts, n, "h.1.attn.value.bias");
    assert_string_equal(q->zt_name, "h.1.attn.qkv.weight");
    assert_int_equal(q->shape[0], 8);
    assert_int_equal(q->shape[1], 8);
    assert_int_equal(q->zt_shape[0], 24);
    assert_int_equal(q->zt_offset, 0);
    assert_int_equal(k->zt_offset, 64);
    assert_int_equal(k->offset, q->offset + 64);
    assert_int_equal(v->zt_offset, 16);
    assert_int_equal(v->shape[0], 8);
    find(ts, n, "h.0.mlp.proj.bias");
    assert_string_equal(ts[n - 2].name, "lm_head.weight");
    assert_string_equal(ts[n - 4].name, "ln_f.weight");
    assert_string_equal(ts[n - 4].zt_name, "head.ln_f.weight");
    free(ts);
    zt_model_free(&m);
}

static void test_classifier_and_mlp_names(void **state)
{
    (void)state;
    zt_model m;
    build(&m, "classifier");
    zt_torch_tensor *ts;
    int n;
    assert_int_equal(zt_torch_tensors_get(&m, &ts, &n), ZT_OK);
    check_tiling(&m, ts, n);
    assert_string_equal(ts[0].name, "embedding.weight");
    const zt_torch_tensor *in = find(ts, n, "layers.1.self_attn.in_proj_weight");
    assert_int_equal(in->shape[0], 24); /* stays stacked, as PyTorch keeps it */
    find(ts, n, "layers.0.norm2.bias");
    assert_string_equal(ts[n - 1].name, "fc2.bias");
    free(ts);
    zt_model_free(&m);

    build(&m, "mlp");
    assert_int_equal(zt_torch_tensors_get(&m, &ts, &n), ZT_OK);
    check_tiling(&m, ts, n);
    assert_int_equal(n, 6);
    assert_string_equal(ts[0].name, "layers.0.weight");
    assert_string_equal(ts[5].name, "layers.2.bias");
    assert_int_equal(ts[0].shape[0], 5);
    assert_int_equal(ts[0].shape[1], 3);
    free(ts);
    zt_model_free(&m);
}

static void test_header_round_trip(void **state)
{
    (void)state;
    zt_model m;
    build(&m, "gptlite");
    zt_torch_tensor *ts;
    int n;
    assert_int_equal(zt_torch_tensors_get(&m, &ts, &n), ZT_OK);
    const char *keys[] = {"format", "zerotrain.model"}, *values[] = {"pt", "gptlite"};
    char *h;
    size_t len;
    assert_int_equal(zt_st_header(ts, n, keys, values, 2, &h, &len), ZT_OK);
    assert_int_equal(len % 8, 0);
    uint64_t hl = 0;
    for (int b = 0; b < 8; b++)
        hl |= (uint64_t)(uint8_t)h[b] << (8 * b);
    assert_int_equal(hl, len - 8);
    assert_int_equal(h[8], '{');
    uint64_t file = len + (uint64_t)m.n_params * 4;
    zt_st_file f;
    assert_int_equal(zt_st_parse((const uint8_t *)h, len, file, "x.st", &f), ZT_OK);
    assert_int_equal(f.n, n);
    assert_int_equal(f.data_start, len);
    assert_int_equal(f.data_bytes, (uint64_t)m.n_params * 4);
    for (int i = 0; i < n; i++) {
        assert_string_equal(f.tensors[i].name, ts[i].name);
        assert_string_equal(f.tensors[i].dtype, "F32");
        assert_int_equal(f.tensors[i].begin, (uint64_t)ts[i].offset * 4);
        assert_int_equal(f.tensors[i].end, (uint64_t)(ts[i].offset + ts[i].numel) * 4);
        assert_int_equal(f.tensors[i].ndim, ts[i].ndim);
    }
    assert_non_null(strstr(f.metadata, "\"zerotrain.model\":\"gptlite\""));
    zt_st_free(&f);
    /* One byte short of the data: the last tensor runs past the end. */
    assert_int_equal(zt_st_parse((const uint8_t *)h, len, file - 1, "x.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "x.st is not a valid safetensors file"));
    assert_non_null(strstr(zt_status_message(), "past the end"));
    free(h);
    free(ts);
    zt_model_free(&m);
}

/* A file of header text j (padded) followed by data_bytes zero bytes. */
static zt_status parse_text(const char *j, uint64_t data_bytes, zt_st_file *f)
{
    size_t n = strlen(j);
    uint8_t *buf = calloc(8 + n, 1);
    for (int b = 0; b < 8; b++)
        buf[b] = (uint8_t)((uint64_t)n >> (8 * b));
    memcpy(buf + 8, j, n);
    zt_status st = zt_st_parse(buf, 8 + n, 8 + n + data_bytes, "bad.st", f);
    free(buf);
    if (st == ZT_OK)
        zt_st_free(f);
    return st;
}

static void expect_bad(const char *j, uint64_t data_bytes, const char *what)
{
    zt_st_file f;
    assert_int_equal(parse_text(j, data_bytes, &f), ZT_ERR_DATA);
    if (!strstr(zt_status_message(), what))
        fail_msg("'%s' not in '%s'", what, zt_status_message());
    assert_non_null(strstr(zt_status_message(), "bad.st"));
}

static void test_bad_headers(void **state)
{
    (void)state;
    zt_st_file f;
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                                8, &f),
                     ZT_OK);
    assert_int_equal(parse_text("{\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
                                16, &f),
                     ZT_OK);
    assert_int_equal(zt_st_dtype_size("I64"), 0);
    assert_int_equal(zt_st_dtype_size("BF16"), 2);
    expect_bad("[1, 2]", 0, "the header is not a JSON object");
    expect_bad("{\"a\": 1", 0, "header JSON");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8,
               "entry 'a': data_offsets [0, 4] hold 4 bytes; F32 [2] is 8 bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
               "entry 'a': data_offsets [0, 8] lie past the end of the file's 4 data bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
               "entry 'a': dimension 0 of its shape is not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               8, "entry 'a' has 9 dimensions; at most 8 are read");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
               "entry 'a' has no 'data_offsets' [begin, end]");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0,
               "__metadata__ key 'k' holds a value that is not a string");
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(zt_st_parse(huge, sizeof huge, sizeof huge, "big.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "header length 16777215 does not fit"));
}

/* The format's layout: sorted by offset, the entries lie end to end over the
 * whole data; each violation names the entries around it. */
static void test_layout(void **state)
{
    (void)state;
    zt_st_file f;
    const char *tiled = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"z\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[16,16]}}";
    assert_int_equal(parse_text(tiled, 16, &f), ZT_OK); /* any order, empty tensors too */
    assert_int_equal(parse_text("{}", 0, &f), ZT_OK);
    /* Two entries sharing bytes 4-8: each alone spans its shape and lies inside. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "entries 'a' and 'b' overlap: bytes [0, 8) and [4, 12) of the data");
    /* The same bytes under two names. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               8, "entries 'a' and 'b' overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
               16, "bytes [8, 12) of the data belong to no entry: a hole between 'a' and 'b'");
    expect_bad("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
               "bytes [0, 4) of the data belong to no entry: a hole before the first entry 'b'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
               "bytes [8, 12) of the data belong to no entry: 4 trailing bytes after the last "
               "entry 'a'");
    expect_bad("{\"__metadata__\":{}}", 3, "no tensors, yet 3 data bytes follow the header");
    /* An empty tensor inside another's bytes is out of place too. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
               8, "entries 'a' and 'e' overlap");
}

/* Each entry alone: its fields and their types, a dtype of the format, a
 * shape whose bytes fit 64 bits and are whole, no name twice. */
static void test_entries(void **state)
{
    (void)state;
    zt_st_file f;
    assert_int_equal(parse_text("{\"q\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]},"
                                "\"c\":{\"dtype\":\"C64\",\"shape\":[],\"data_offsets\":[3,11]}}",
                                11, &f),
                     ZT_OK);
    expect_bad("{\"q\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
               "entry 'q': F4 [3] does not fill whole bytes");
    expect_bad("{\"a\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
               "entry 'a': dtype 'Q8' is not a dtype of the safetensors format");
    expect_bad("{\"a\":{\"dtype\":\"float32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "dtype 'float32' is not a dtype");
    expect_bad("{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "entry 'a' has no 'dtype' string");
    expect_bad("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "entry 'a' has no 'dtype'");
    expect_bad("{\"a\":[1,2]}", 0, "entry 'a' is not an object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8,
               "entry 'a' has no 'shape' list");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
               "dimension 0 of its shape is not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8,
               "entry 'a' has no 'data_offsets' [begin, end] of two integers");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}", 16,
               "entry 'a' has no 'data_offsets'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
               "entry 'a': data_offsets [8, 0] are not 0 <= begin <= end");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[-8,0]}}", 8,
               "are not 0 <= begin <= end");
    /* 2^32 x 2^32 elements: the count overflows int64. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,8]}}",
               8, "entry 'a': the element count of shape [4294967296, 4294967296] overflows");
    /* 2^60 elements fit; their 2^66 bits do not. */
    expect_bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[1073741824,1073741824],"
               "\"data_offsets\":[0,8]}}",
               8, "entry 'a': the bytes of F64 [1073741824, 1073741824] overflow 64 bits");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "the header names an entry twice (duplicate object key near '\"a\"')");
    char name[400], j[600];
    memset(name, 'n', 200);
    name[200] = 0;
    snprintf(j, sizeof j, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             name);
    expect_bad(j, 4, "its name is longer than 159 bytes");
    expect_bad("{\"__metadata__\":[\"k\"]}", 0, "__metadata__ is not an object of strings");
    expect_bad("{\"__metadata__\":\"pt\"}", 0, "__metadata__ is not an object of strings");
    expect_bad("{\"__metadata__\":{\"k\":{\"deep\":\"x\"}}}", 0,
               "key 'k' holds a value that is not");
}

/* The 8-byte length: within the file, the format's 100 MB limit, room for
 * "{}", and a header that starts as an object. */
static void test_header_length(void **state)
{
    (void)state;
    zt_st_file f;
    uint8_t over[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
    assert_int_equal(zt_st_parse(over, sizeof over, 200000000, "big.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(),
                           "big.st is not a valid safetensors file: header length 100000001 is "
                           "over the format's limit of 100000000 bytes"));
    uint8_t tiny[10] = {1, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(zt_st_parse(tiny, sizeof tiny, sizeof tiny, "tiny.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "header length 1 cannot hold a JSON object"));
    assert_int_equal(zt_st_parse(tiny, 7, 7, "short.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "short.st is not a valid safetensors file: "
                                                "shorter than its 8-byte header length"));
    uint8_t padded[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    assert_int_equal(zt_st_parse(padded, sizeof padded, sizeof padded, "pad.st", &f), ZT_OK);
    zt_st_free(&f);
    uint8_t lead[16] = {8, 0, 0, 0, 0, 0, 0, 0, ' ', '{', '}', ' ', ' ', ' ', ' ', ' '};
    assert_int_equal(zt_st_parse(lead, sizeof lead, sizeof lead, "lead.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "its first byte is not '{'"));
    uint8_t junk[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', 'x', ' ', ' ', ' ', ' '};
    assert_int_equal(zt_st_parse(junk, sizeof junk, sizeof junk, "junk.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "junk.st is not a valid safetensors file: "
                                                "header JSON"));
}

static char scratch[64];

static void write_file(const char *name, const void *bytes, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, n, fp), n);
    fclose(fp);
}

/* A consolidated FILE of data_bytes zero bytes and FILE.json = index; the
 * status of opening it (the message is left in the status slot). */
static zt_status open_consolidated(const char *index, size_t data_bytes)
{
    static const uint8_t zeros[64];
    write_file("w.bin", zeros, data_bytes);
    write_file("w.bin.json", index, strlen(index));
    char path[128];
    snprintf(path, sizeof path, "%s/w.bin", scratch);
    zt_st_file f;
    zt_status st = zt_st_open(path, &f);
    if (st == ZT_OK)
        zt_st_free(&f);
    return st;
}

static void expect_bad_index(const char *index, size_t data_bytes, const char *what)
{
    assert_int_equal(open_consolidated(index, data_bytes), ZT_ERR_DATA);
    if (!strstr(zt_status_message(), what))
        fail_msg("'%s' not in '%s'", what, zt_status_message());
    assert_non_null(strstr(zt_status_message(), "w.bin is not a valid consolidated checkpoint: "
                                                "its tensor index"));
}

/* The consolidated index (FILE.json) under the same layout rules, offsets in
 * floats; numel and byte_offset must agree with shape and offset. */
static void test_consolidated_index(void **state)
{
    (void)state;
    snprintf(scratch, sizeof scratch, "/tmp/zt-test-st-XXXXXX");
    assert_non_null(mkdtemp(scratch));
    assert_int_equal(open_consolidated("[{\"name\":\"a\",\"shape\":[2],\"numel\":2,\"offset\":0,"
                                       "\"byte_offset\":0},{\"name\":\"b\",\"shape\":[1],"
                                       "\"offset\":2}]",
                                       12),
                     ZT_OK);
    expect_bad_index("[{\"name\":\"a\",\"shape\":[2],\"offset\":0},"
                     "{\"name\":\"b\",\"shape\":[2],\"offset\":1}]",
                     12, "entries 'a' and 'b' overlap: bytes [0, 8) and [4, 12)");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[1],\"offset\":0},"
                     "{\"name\":\"b\",\"shape\":[1],\"offset\":2}]",
                     12, "bytes [4, 8) of the data belong to no entry: a hole between 'a' and 'b'");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[2],\"offset\":0}]", 12,
                     "4 trailing bytes after the last entry 'a'");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[1],\"offset\":0},"
                     "{\"name\":\"a\",\"shape\":[1],\"offset\":1}]",
                     8, "two entries are named 'a'");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[3],\"offset\":0}]", 8,
                     "entry 'a': its 3 floats at offset 0 lie past the end of the file's 8 bytes");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[2],\"numel\":3,\"offset\":0}]", 8,
                     "entry 'a': its numel is not its shape's 2 elements");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[2],\"offset\":0,\"byte_offset\":4}]", 8,
                     "entry 'a': its byte_offset is not 4 x its offset 0");
    expect_bad_index("[{\"name\":\"a\",\"shape\":[2]}]", 8,
                     "entry 'a' has no 'offset', a non-negative integer");
    expect_bad_index("[{\"shape\":[2],\"offset\":0}]", 8, "entry 0 has no 'name' string");
    expect_bad_index("{\"a\":1}", 8, "not a JSON array of tensors");
    expect_bad_index("[{\"name\":", 8, "JSON: ");
    char path[128];
    snprintf(path, sizeof path, "%s/w.bin", scratch);
    unlink(path);
    snprintf(path, sizeof path, "%s/w.bin.json", scratch);
    unlink(path);
    rmdir(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gptlite_names),
        cmocka_unit_test(test_classifier_and_mlp_names),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_entries),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_consolidated_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
