/*
 * safetensors: the format's header, written and parsed, opening a weights
 * file of either format, and consolidate's safetensors output
 * (engine/ckpt/safetensors.h).
 */
#include "engine/ckpt/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/ckpt/ckpt_impl.h"
#include "engine/path.h"

static const char *const st_hint_corrupt =
    "the file is damaged or not a weights file: write it again with zerotrain consolidate "
    "--format safetensors or scripts/zt_torch.py (docs/interop.md)";

size_t zt_st_dtype_size(const char *dtype)
{
    if (!strcmp(dtype, "F32"))
        return 4;
    if (!strcmp(dtype, "F64"))
        return 8;
    if (!strcmp(dtype, "F16") || !strcmp(dtype, "BF16"))
        return 2;
    return 0;
}

/* Bytes of any dtype the format defines (the reader checks offsets of
 * tensors it will not read too). */
static size_t st_any_dtype_size(const char *dtype)
{
    static const struct {
        const char *name;
        size_t bytes;
    } sizes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                 {"I16", 2},  {"U16", 2}, {"I32", 4}, {"U32", 4},     {"I64", 8},
                 {"U64", 8}};
    size_t n = zt_st_dtype_size(dtype);
    for (size_t i = 0; !n && i < sizeof sizes / sizeof *sizes; i++)
        if (!strcmp(dtype, sizes[i].name))
            n = sizes[i].bytes;
    return n;
}

zt_status zt_st_header(const zt_torch_tensor *ts, int n, const char *const *keys,
                       const char *const *values, int n_meta, char **out, size_t *len)
{
    json_t *root = json_object(), *meta = json_object();
    int bad = !root || !meta;
    for (int i = 0; !bad && i < n_meta; i++)
        bad |= json_object_set_new(meta, keys[i], json_string(values[i])) != 0;
    if (!bad)
        bad |= json_object_set_new(root, "__metadata__", meta) != 0;
    else
        json_decref(meta);
    uint64_t at = 0;
    for (int i = 0; !bad && i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; shape && d < ts[i].ndim; d++)
            bad |= json_array_append_new(shape, json_integer((json_int_t)ts[i].shape[d])) != 0;
        uint64_t end = at + (uint64_t)ts[i].numel * sizeof(float);
        json_t *t = json_pack("{sssos[II]}", "dtype", "F32", "shape", shape, "data_offsets",
                              (json_int_t)at, (json_int_t)end);
        bad |= !t || json_object_set_new(root, ts[i].name, t) != 0;
        at = end;
    }
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return zt_fail(ZT_ERR_OOM, "", "cannot build a safetensors header of %d tensors", n);
    size_t json_len = strlen(text), padded = (json_len + 7) / 8 * 8;
    uint8_t *buf = malloc(8 + padded);
    if (!buf) {
        free(text);
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate a %zu-byte header", padded);
    }
    for (int b = 0; b < 8; b++)
        buf[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    memcpy(buf + 8, text, json_len);
    memset(buf + 8 + json_len, ' ', padded - json_len);
    free(text);
    *out = (char *)buf;
    *len = 8 + padded;
    return ZT_OK;
}

static zt_status st_bad(const char *path, const char *what)
{
    return zt_fail(ZT_ERR_DATA, st_hint_corrupt, "%s is not a valid safetensors file: %s", path,
                   what);
}

/* A JSON shape into t's ndim, shape and numel; a message for a bad one. */
static const char *st_shape(json_t *shape, zt_st_tensor *t)
{
    if (!json_is_array(shape))
        return "an entry's shape is not a list";
    if (json_array_size(shape) > ZT_ST_MAX_DIMS)
        return "an entry has more than 8 dimensions";
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *s = json_array_get(shape, (size_t)d);
        if (!json_is_integer(s) || json_integer_value(s) < 0 ||
            __builtin_mul_overflow(t->numel, (int64_t)json_integer_value(s), &t->numel))
            return "an entry's shape is not a list of non-negative integers";
        t->shape[d] = json_integer_value(s);
    }
    return NULL;
}

/* One tensor entry of the header into t; a message for a bad one. */
static const char *st_entry(const char *name, json_t *v, uint64_t data_bytes, zt_st_tensor *t)
{
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (strlen(name) >= sizeof t->name)
        return "a tensor name is longer than 159 bytes";
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
        !json_is_array(off) || json_array_size(off) != 2)
        return "an entry lacks dtype, shape or data_offsets [begin, end]";
    if (strlen(json_string_value(dt)) >= sizeof t->dtype)
        return "an entry's dtype is not a safetensors dtype";
    snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
    const char *msg = st_shape(shape, t);
    if (msg)
        return msg;
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return "an entry's data_offsets are not [begin, end] with 0 <= begin <= end";
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    size_t es = st_any_dtype_size(t->dtype);
    uint64_t want;
    if (es && (__builtin_mul_overflow((uint64_t)t->numel, (uint64_t)es, &want) ||
               want != t->end - t->begin))
        return "an entry's data_offsets do not span its shape's bytes";
    if (t->end > data_bytes)
        return "an entry's data lies past the end of the file (truncated?)";
    return NULL;
}

zt_status zt_st_parse(const uint8_t *buf, size_t len, uint64_t file_bytes, const char *path,
                      zt_st_file *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    if (len < 8 || file_bytes < 8)
        return st_bad(path, "shorter than its 8-byte header length");
    uint64_t n = 0;
    for (int b = 0; b < 8; b++)
        n |= (uint64_t)buf[b] << (8 * b);
    char what[256];
    if (n < 2 || n > ZT_ST_MAX_HEADER_BYTES || n > file_bytes - 8 || n > len - 8) {
        snprintf(what, sizeof what, "header length %llu does not fit the file's %llu bytes",
                 (unsigned long long)n, (unsigned long long)file_bytes);
        return st_bad(path, what);
    }
    if (buf[8] != '{')
        return st_bad(path, "the header is not a JSON object");
    json_error_t err;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(root)) {
        json_decref(root);
        snprintf(what, sizeof what, "header JSON: %s", err.text);
        return st_bad(path, what);
    }
    f->data_start = 8 + n;
    f->data_bytes = file_bytes - f->data_start;
    f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
    const char *key, *msg = f->tensors ? NULL : "out of memory";
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (msg)
            break;
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) if (!json_is_string(mv)) msg =
                "__metadata__ holds a value that is not a string";
            if (!json_is_object(v))
                msg = "__metadata__ is not an object";
            if (!msg && !(f->metadata = json_dumps(v, JSON_COMPACT)))
                msg = "out of memory";
            continue;
        }
        msg = st_entry(key, v, f->data_bytes, &f->tensors[f->n]);
        f->n++;
    }
    json_decref(root);
    if (msg) {
        zt_st_free(f);
        return st_bad(path, msg);
    }
    return ZT_OK;
}

/* Our consolidated format: FILE.json's index, F32 tensors from offset 0. */
static zt_status st_open_consolidated(const char *path, const char *index, uint64_t file_bytes,
                                      zt_st_file *f)
{
    const char *hint = "write it again with zerotrain consolidate (FILE and FILE.json belong "
                       "together)";
    char *text = NULL;
    size_t len = 0;
    ZT_TRY(zt_path_read(index, "tensor index", hint, 64 << 20, false, &text, &len));
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    free(text);
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->data_bytes = file_bytes;
    size_t n = json_array_size(root);
    f->tensors = calloc(n + 1, sizeof *f->tensors);
    const char *msg = !json_is_array(root) ? "not a JSON array of tensors"
                      : !f->tensors        ? "out of memory"
                                           : NULL;
    for (size_t i = 0; !msg && i < n; i++) {
        json_t *e = json_array_get(root, i), *name = json_object_get(e, "name");
        json_t *off = json_object_get(e, "offset");
        if (!json_is_string(name) || !json_is_integer(off) || json_integer_value(off) < 0) {
            msg = "an entry lacks its name, shape or offset";
            break;
        }
        zt_st_tensor *t = &f->tensors[i];
        f->n++;
        if (strlen(json_string_value(name)) >= sizeof t->name) {
            msg = "a tensor name is longer than 159 bytes";
            break;
        }
        snprintf(t->name, sizeof t->name, "%s", json_string_value(name));
        snprintf(t->dtype, sizeof t->dtype, "F32");
        if ((msg = st_shape(json_object_get(e, "shape"), t)))
            break;
        if (__builtin_mul_overflow((uint64_t)json_integer_value(off), 4, &t->begin) ||
            __builtin_add_overflow(t->begin, (uint64_t)t->numel * 4, &t->end) ||
            t->end > file_bytes)
            msg = "an entry's data lies past the end of the file (truncated?)";
    }
    json_decref(root);
    if (msg) {
        zt_st_free(f);
        return zt_fail(ZT_ERR_DATA, hint, "%s is not a valid consolidated checkpoint: its "
                       "tensor index %s: %s", path, index, msg);
    }
    return ZT_OK;
}

zt_status zt_st_open(const char *path, zt_st_file *f)
{
    const char *hint = "give --init-from a safetensors file or a file written by zerotrain "
                       "consolidate";
    memset(f, 0, sizeof *f);
    int fd = -1;
    ZT_TRY(zt_path_open_read(path, "weights file", hint, &fd));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return zt_path_fail(e, path, "weights file", hint);
    }
    uint64_t size = (uint64_t)sb.st_size;
    char index[4200];
    snprintf(index, sizeof index, "%s.json", path);
    if (access(index, F_OK) == 0) {
        close(fd);
        return st_open_consolidated(path, index, size, f);
    }
    uint8_t head[8] = {0};
    uint64_t n = 0;
    zt_status st = size >= 8 ? zt_ckpt_pread(fd, head, 8, 0, path) : ZT_OK;
    for (int b = 0; b < 8; b++)
        n |= (uint64_t)head[b] << (8 * b);
    if (st == ZT_OK && (size < 8 || n > ZT_ST_MAX_HEADER_BYTES || n > size - 8)) {
        close(fd);
        return zt_st_parse(head, 8, size, path, f); /* names the bad length */
    }
    uint8_t *buf = st == ZT_OK ? malloc(8 + n) : NULL;
    if (st == ZT_OK && !buf)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the %llu-byte header of %s",
                     (unsigned long long)n, path);
    if (st == ZT_OK)
        st = zt_ckpt_pread(fd, buf, 8 + n, 0, path);
    close(fd);
    if (st == ZT_OK)
        st = zt_st_parse(buf, 8 + n, size, path, f);
    free(buf);
    return st;
}

void zt_st_free(zt_st_file *f)
{
    free(f->tensors);
    free(f->metadata);
    f->tensors = NULL;
    f->metadata = NULL;
    f->n = 0;
}

/* The resolved model arguments as a JSON object (the manifest's keys). */
static char *st_args_json(const zt_model_args *a)
{
    json_t *o = json_object();
    int i = 0, bad = !o;
    for (const zt_model_arg *r; !bad && (r = zt_ckpt_arg_next(a->name, &i));) {
        json_t *v = r->kind == ZT_MODEL_ARG_INT
                        ? json_integer((json_int_t)zt_model_arg_value(r, a))
                    : r->kind == ZT_MODEL_ARG_REAL ? json_real(zt_model_arg_value(r, a))
                                                   : json_string(zt_model_arg_choice(r, a));
        bad |= json_object_set_new(o, r->key, v) != 0;
    }
    /* 15 digits: a dropout of 0.1 reads "0.1", not 0.10000000000000001. */
    char *text = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(o);
    return text;
}

/* A character vocabulary as one UTF-8 string, id i the i-th character. */
static zt_status st_char_vocab(const zt_ckpt *c, char **out)
{
    zt_tokenizer tok;
    ZT_TRY(zt_ckpt_tokenizer(c, NULL, &tok));
    int32_t *ids = malloc((size_t)tok.vocab_size * sizeof *ids);
    size_t len = 0;
    zt_status st = ids ? ZT_OK : zt_fail(ZT_ERR_OOM, "", "cannot allocate the vocabulary");
    for (int64_t i = 0; st == ZT_OK && i < tok.vocab_size; i++)
        ids[i] = (int32_t)i;
    if (st == ZT_OK)
        st = zt_tokenizer_decode(&tok, ids, tok.vocab_size, out, &len);
    free(ids);
    zt_tokenizer_free(&tok);
    return st;
}

zt_status zt_ckpt_consolidate_safetensors(const zt_ckpt *c, const zt_model *m,
                                          const char *out_path)
{
    zt_model_args a;
    ZT_TRY(zt_ckpt_model_args(c, &a));
    bool same = m->n_units == c->n_units;
    for (int u = 0; same && u < m->n_units; u++)
        same = m->units[u].param_numel == c->units[u].numel;
    if (!same)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint %s: its units do not match the %s model its arguments build",
                       c->path, a.name);
    zt_torch_tensor *ts = NULL;
    int n = 0;
    ZT_TRY(zt_torch_tensors_get(m, &ts, &n));
    char *args = st_args_json(&a), step[32], *header = NULL, *chars = NULL;
    snprintf(step, sizeof step, "%lld", (long long)c->global_steps);
    const char *kind = zt_ckpt_tokenizer_kind(c, NULL);
    zt_status st = args ? ZT_OK : zt_fail(ZT_ERR_OOM, "", "cannot encode the model arguments");
    if (st == ZT_OK && !strcmp(kind, "char"))
        st = st_char_vocab(c, &chars);
    const char *keys[] = {"format",         "zerotrain.model",   "zerotrain.model_args",
                          "zerotrain.step", "zerotrain.version", "zerotrain.tokenizer",
                          "zerotrain.chars"};
    const char *values[] = {"pt", a.name, args, step, ZT_VERSION, kind, chars};
    size_t len = 0;
    if (st == ZT_OK)
        st = zt_st_header(ts, n, keys, values, chars ? 7 : 6, &header, &len);
    if (st == ZT_OK)
        st = zt_ckpt_write_weights(c, out_path, header, len, NULL);
    free(header);
    free(chars);
    free(args);
    free(ts);
    return st;
}
