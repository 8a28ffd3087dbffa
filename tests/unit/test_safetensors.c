/* safetensors and the PyTorch names: each model's tensors tile its flat
 * parameters in order under models.md's names (GPT-lite's stacked qkv split
 * in three, the embed/head prefixes dropped, Embedding weights named
 * ".weight"); a header written by zt_st_header is 8-byte aligned, space
 * padded and parses back to the same table; damaged headers (a length past
 * the file, not JSON, offsets that do not span the shape, data past the end,
 * a non-string metadata value, too many dimensions) are refused with the
 * file named, and dtypes --init-from does not read still parse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
               "do not span its shape's bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
               "past the end of the file");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
               "non-negative integers");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               8, "more than 8 dimensions");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "lacks dtype, shape or data_offsets");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(zt_st_parse(huge, sizeof huge, sizeof huge, "big.st", &f), ZT_ERR_DATA);
    assert_non_null(strstr(zt_status_message(), "header length 16777215 does not fit"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gptlite_names),
        cmocka_unit_test(test_classifier_and_mlp_names),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_bad_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
