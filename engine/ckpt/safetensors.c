/*
 * safetensors: the format's header, written and parsed, opening a weights
 * file of either format, and consolidate's safetensors output
 * (engine/ckpt/safetensors.h).
 */
#include "engine/ckpt/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
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

/* Bits of one element of each dtype the safetensors format defines (its
 * Rust reference's Dtype); 0 for a name it does not define. */
static unsigned st_dtype_bits(const char *dtype)
{
    static const struct {
        const char *name;
        unsigned bits;
    } dtypes[] = {{"BOOL", 8},    {"F4", 4},    {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
                  {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
                  {"U16", 16},    {"F16", 16},  {"BF16", 16},   {"I32", 32},    {"U32", 32},
                  {"F32", 32},    {"C64", 64},  {"F64", 64},    {"I64", 64},    {"U64", 64}};
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
        if (!strcmp(dtype, dtypes[i].name))
            return dtypes[i].bits;
    return 0;
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

/* Which file a message is about: a safetensors file, or (index set) a
 * consolidated file and its tensor index. */
typedef struct {
    const char *path;
    const char *index;
} st_where;

static zt_status st_bad(const st_where *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static zt_status st_bad(const st_where *w, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (w->index)
        return zt_fail(ZT_ERR_DATA,
                       "write it again with zerotrain consolidate (FILE and FILE.json belong "
                       "together)",
                       "%s is not a valid consolidated checkpoint: its tensor index %s: %s",
                       w->path, w->index, what);
    return zt_fail(ZT_ERR_DATA, st_hint_corrupt, "%s is not a valid safetensors file: %s", w->path,
                   what);
}

void zt_st_shape_text(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* A JSON shape into t's ndim, shape and numel (t->name already set). */
static zt_status st_shape(const st_where *w, json_t *shape, zt_st_tensor *t)
{
    if (!json_is_array(shape))
        return st_bad(w, "entry '%s' has no 'shape' list", t->name);
    if (json_array_size(shape) > ZT_ST_MAX_DIMS)
        return st_bad(w, "entry '%s' has %zu dimensions; at most %d are read", t->name,
                      json_array_size(shape), ZT_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *s = json_array_get(shape, (size_t)d);
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return st_bad(w, "entry '%s': dimension %d of its shape is not a non-negative "
                          "integer", t->name, d);
        t->shape[d] = json_integer_value(s);
    }
    for (int d = 0; d < t->ndim; d++)
        if (__builtin_mul_overflow(t->numel, t->shape[d], &t->numel)) {
            char text[ZT_ST_MAX_DIMS * 24];
            zt_st_shape_text(t->ndim, t->shape, text, sizeof text);
            return st_bad(w, "entry '%s': the element count of shape %s overflows 64 bits",
                          t->name, text);
        }
    return ZT_OK;
}

/* The entry's name into t, or the message of a name too long to keep. */
static zt_status st_name(const st_where *w, const char *name, zt_st_tensor *t)
{
    if (strlen(name) >= sizeof t->name)
        return st_bad(w, "entry '%.60s...': its name is longer than %zu bytes", name,
                      sizeof t->name - 1);
    snprintf(t->name, sizeof t->name, "%s", name);
    return ZT_OK;
}

/* One tensor entry of a safetensors header into t: its fields' types, a
 * dtype the format defines, and data_offsets spanning exactly its shape's
 * bytes inside the data. */
static zt_status st_entry(const st_where *w, const char *name, json_t *v, uint64_t data_bytes,
                          zt_st_tensor *t)
{
    ZT_TRY(st_name(w, name, t));
    json_t *dt = json_object_get(v, "dtype"), *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v))
        return st_bad(w, "entry '%s' is not an object {\"dtype\", \"shape\", \"data_offsets\"}",
                      t->name);
    if (!json_is_string(dt))
        return st_bad(w, "entry '%s' has no 'dtype' string", t->name);
    unsigned bits = st_dtype_bits(json_string_value(dt));
    if (!bits)
        return st_bad(w, "entry '%s': dtype '%.32s' is not a dtype of the safetensors format",
                      t->name, json_string_value(dt));
    snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
    ZT_TRY(st_shape(w, json_object_get(v, "shape"), t));
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) ||
        !json_is_integer(e))
        return st_bad(w, "entry '%s' has no 'data_offsets' [begin, end] of two integers",
                      t->name);
    if (json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
        return st_bad(w, "entry '%s': data_offsets [%lld, %lld] are not 0 <= begin <= end",
                      t->name, (long long)json_integer_value(b),
                      (long long)json_integer_value(e));
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    char shape[ZT_ST_MAX_DIMS * 24];
    zt_st_shape_text(t->ndim, t->shape, shape, sizeof shape);
    uint64_t want_bits;
    if (__builtin_mul_overflow((uint64_t)t->numel, (uint64_t)bits, &want_bits))
        return st_bad(w, "entry '%s': the bytes of %s %s overflow 64 bits", t->name, t->dtype,
                      shape);
    if (want_bits % 8)
        return st_bad(w, "entry '%s': %s %s does not fill whole bytes", t->name, t->dtype,
                      shape);
    if (want_bits / 8 != t->end - t->begin)
        return st_bad(w, "entry '%s': data_offsets [%llu, %llu] hold %llu bytes; %s %s is "
                      "%llu bytes", t->name, (unsigned long long)t->begin,
                      (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                      t->dtype, shape, (unsigned long long)(want_bits / 8));
    if (t->end > data_bytes)
        return st_bad(w, "entry '%s': data_offsets [%llu, %llu] lie past the end of the "
                      "file's %llu data bytes (truncated?)", t->name,
                      (unsigned long long)t->begin, (unsigned long long)t->end,
                      (unsigned long long)data_bytes);
    return ZT_OK;
}

static int st_by_offsets(const void *pa, const void *pb)
{
    const zt_st_tensor *a = *(const zt_st_tensor *const *)pa;
    const zt_st_tensor *b = *(const zt_st_tensor *const *)pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int st_by_name(const void *pa, const void *pb)
{
    return strcmp((*(const zt_st_tensor *const *)pa)->name,
                  (*(const zt_st_tensor *const *)pb)->name);
}

/* The format's layout: no two entries share a name, and their byte ranges,
 * sorted, lie end to end from the data's first byte to its last (each
 * entry checked alone cannot see an overlap, a hole or bytes left over). */
static zt_status st_layout(const st_where *w, const zt_st_file *f)
{
    if (f->n == 0)
        return f->data_bytes == 0 ? ZT_OK
                                  : st_bad(w, "no tensors, yet %llu data bytes follow the header",
                                           (unsigned long long)f->data_bytes);
    const zt_st_tensor **by = malloc((size_t)f->n * sizeof *by);
    if (!by)
        return zt_fail(ZT_ERR_OOM, "", "cannot sort the %d tensors of %s", f->n, w->path);
    for (int i = 0; i < f->n; i++)
        by[i] = &f->tensors[i];
    zt_status st = ZT_OK;
    qsort(by, (size_t)f->n, sizeof *by, st_by_name);
    for (int i = 1; st == ZT_OK && i < f->n; i++)
        if (!strcmp(by[i - 1]->name, by[i]->name))
            st = st_bad(w, "two entries are named '%s'", by[i]->name);
    qsort(by, (size_t)f->n, sizeof *by, st_by_offsets);
    uint64_t at = 0;
    for (int i = 0; st == ZT_OK && i < f->n; i++) {
        const zt_st_tensor *t = by[i], *prev = i ? by[i - 1] : NULL;
        if (t->begin < at)
            st = st_bad(w, "entries '%s' and '%s' overlap: bytes [%llu, %llu) and [%llu, %llu) "
                        "of the data (the format lays tensors end to end)", prev->name,
                        t->name, (unsigned long long)prev->begin,
                        (unsigned long long)prev->end, (unsigned long long)t->begin,
                        (unsigned long long)t->end);
        else if (t->begin > at && prev)
            st = st_bad(w, "bytes [%llu, %llu) of the data belong to no entry: a hole between "
                        "'%s' and '%s'", (unsigned long long)at, (unsigned long long)t->begin,
                        prev->name, t->name);
        else if (t->begin > at)
            st = st_bad(w, "bytes [0, %llu) of the data belong to no entry: a hole before the "
                        "first entry '%s'", (unsigned long long)t->begin, t->name);
        at = t->end;
    }
    if (st == ZT_OK && at != f->data_bytes)
        st = st_bad(w, "bytes [%llu, %llu) of the data belong to no entry: %llu trailing bytes "
                    "after the last entry '%s'", (unsigned long long)at,
                    (unsigned long long)f->data_bytes, (unsigned long long)(f->data_bytes - at),
                    by[f->n - 1]->name);
    free(by);
    return st;
}

/* __metadata__: an object of string values, kept as JSON text. */
static zt_status st_metadata(const st_where *w, json_t *v, zt_st_file *f)
{
    if (!json_is_object(v))
        return st_bad(w, "__metadata__ is not an object of strings");
    const char *k;
    json_t *s;
    json_object_foreach(v, k, s)
    {
        if (!json_is_string(s))
            return st_bad(w, "__metadata__ key '%.60s' holds a value that is not a string", k);
    }
    if (!(f->metadata = json_dumps(v, JSON_COMPACT)))
        return zt_fail(ZT_ERR_OOM, "", "cannot copy the __metadata__ of %s", w->path);
    return ZT_OK;
}

static zt_status st_parse_header(const st_where *w, json_t *root, zt_st_file *f)
{
    f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
    if (!f->tensors)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the %zu tensors of %s",
                       json_object_size(root), w->path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "__metadata__")) {
            ZT_TRY(st_metadata(w, v, f));
            continue;
        }
        ZT_TRY(st_entry(w, key, v, f->data_bytes, &f->tensors[f->n]));
        f->n++;
    }
    return st_layout(w, f);
}

zt_status zt_st_parse(const uint8_t *buf, size_t len, uint64_t file_bytes, const char *path,
                      zt_st_file *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    const st_where w = {.path = path};
    if (len < 8 || file_bytes < 8)
        return st_bad(&w, "shorter than its 8-byte header length");
    uint64_t n = 0;
    for (int b = 0; b < 8; b++)
        n |= (uint64_t)buf[b] << (8 * b);
    if (n > ZT_ST_MAX_HEADER_BYTES)
        return st_bad(&w, "header length %llu is over the format's limit of %u bytes",
                      (unsigned long long)n, ZT_ST_MAX_HEADER_BYTES);
    if (n > file_bytes - 8 || n > len - 8)
        return st_bad(&w, "header length %llu does not fit the file's %llu bytes",
                      (unsigned long long)n, (unsigned long long)file_bytes);
    if (n < 2)
        return st_bad(&w, "header length %llu cannot hold a JSON object", (unsigned long long)n);
    if (buf[8] != '{')
        return st_bad(&w, "the header is not a JSON object (its first byte is not '{')");
    json_error_t err;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!root && json_error_code(&err) == json_error_duplicate_key)
        return st_bad(&w, "the header names an entry twice (%s)", err.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return st_bad(&w, "header JSON: %s at byte %d of the header", err.text, err.position);
    }
    f->data_start = 8 + n;
    f->data_bytes = file_bytes - f->data_start;
    zt_status st = st_parse_header(&w, root, f);
    json_decref(root);
    if (st != ZT_OK)
        zt_st_free(f);
    return st;
}

/* One entry {name, shape, offset (floats), numel, byte_offset} of FILE.json;
 * numel and byte_offset, redundant, must agree when present. */
static zt_status st_index_entry(const st_where *w, size_t i, json_t *e, uint64_t file_bytes,
                                zt_st_tensor *t)
{
    json_t *name = json_object_get(e, "name"), *off = json_object_get(e, "offset");
    if (!json_is_string(name))
        return st_bad(w, "entry %zu has no 'name' string", i);
    ZT_TRY(st_name(w, json_string_value(name), t));
    snprintf(t->dtype, sizeof t->dtype, "F32");
    ZT_TRY(st_shape(w, json_object_get(e, "shape"), t));
    if (!json_is_integer(off) || json_integer_value(off) < 0)
        return st_bad(w, "entry '%s' has no 'offset', a non-negative integer", t->name);
    json_t *numel = json_object_get(e, "numel"), *byte_off = json_object_get(e, "byte_offset");
    if (numel && (!json_is_integer(numel) || json_integer_value(numel) != t->numel))
        return st_bad(w, "entry '%s': its numel is not its shape's %lld elements", t->name,
                      (long long)t->numel);
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)json_integer_value(off), 4, &t->begin) ||
        __builtin_mul_overflow((uint64_t)t->numel, 4, &bytes) ||
        __builtin_add_overflow(t->begin, bytes, &t->end) || t->end > file_bytes)
        return st_bad(w, "entry '%s': its %lld floats at offset %lld lie past the end of the "
                      "file's %llu bytes (truncated?)", t->name, (long long)t->numel,
                      (long long)json_integer_value(off), (unsigned long long)file_bytes);
    if (byte_off && (!json_is_integer(byte_off) ||
                     (uint64_t)json_integer_value(byte_off) != t->begin))
        return st_bad(w, "entry '%s': its byte_offset is not 4 x its offset %lld", t->name,
                      (long long)json_integer_value(off));
    return ZT_OK;
}

/* Our consolidated format: FILE.json's index, F32 tensors from offset 0. */
static zt_status st_open_consolidated(const char *path, const char *index, uint64_t file_bytes,
                                      zt_st_file *f)
{
    const char *hint = "write it again with zerotrain consolidate (FILE and FILE.json belong "
                       "together)";
    const st_where w = {.path = path, .index = index};
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
    zt_status st = ZT_OK;
    if (!root)
        st = st_bad(&w, "JSON: %s at line %d", err.text, err.line);
    else if (!json_is_array(root))
        st = st_bad(&w, "not a JSON array of tensors");
    else if (!(f->tensors = calloc(n + 1, sizeof *f->tensors)))
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the %zu tensors of %s", n, index);
    for (size_t i = 0; st == ZT_OK && i < n; i++, f->n++)
        st = st_index_entry(&w, i, json_array_get(root, i), file_bytes, &f->tensors[i]);
    if (st == ZT_OK)
        st = st_layout(&w, f);
    json_decref(root);
    if (st != ZT_OK)
        zt_st_free(f);
    return st;
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
