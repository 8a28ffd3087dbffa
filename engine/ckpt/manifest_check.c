/*
 * manifest_check: what zt_ckpt_open checks of a manifest before anything
 * reads it (ckpt.h, docs/checkpoints.md): its checksum over the canonical
 * form, then every value's type and range, the relations the saver's
 * counters keep, and the model its arguments build against the layout of
 * the shards. The manifest is the one place a resumed run takes its state
 * from, so an edited or damaged value must stop it here rather than train on
 * (or allocate for) what the shards do not hold. Everything the readers need
 * is copied into the zt_ckpt_manifest once it passed.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The canonical form and its CRC-32. ---- */

static void canon_put(uint32_t *crc, const char *p, size_t n) { *crc = zt_ckpt_crc32(*crc, p, n); }

/* JSON's escapes for '"', '\\' and the control bytes; every other byte as it is. */
static void canon_string(uint32_t *crc, const char *s, size_t n)
{
    canon_put(crc, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b != '"' && b != '\\' && b >= 0x20)
            continue;
        char esc[8];
        int k = b < 0x20 ? snprintf(esc, sizeof esc, "\\u%04x", b)
                         : snprintf(esc, sizeof esc, "\\%c", b);
        canon_put(crc, s + run, i - run);
        canon_put(crc, esc, (size_t)k);
        run = i + 1;
    }
    canon_put(crc, s + run, n - run);
    canon_put(crc, "\"", 1);
}

static int canon_key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* v's canonical form into crc; `skip` is a key of v left out (NULL: none).
 * False when out of memory. */
static bool canon_value(uint32_t *crc, json_t *v, const char *skip)
{
    char num[48];
    int n = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t count = 0;
        const char **keys = malloc((json_object_size(v) + 1) * sizeof *keys);
        if (!keys)
            return false;
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val) {
            if (!skip || strcmp(key, skip) != 0)
                keys[count++] = key;
        }
        qsort(keys, count, sizeof *keys, canon_key_cmp);
        bool ok = true;
        canon_put(crc, "{", 1);
        for (size_t i = 0; ok && i < count; i++) {
            if (i > 0)
                canon_put(crc, ",", 1);
            canon_string(crc, keys[i], strlen(keys[i]));
            canon_put(crc, ":", 1);
            ok = canon_value(crc, json_object_get(v, keys[i]), NULL);
        }
        canon_put(crc, "}", 1);
        free(keys);
        return ok;
    }
    case JSON_ARRAY: {
        bool ok = true;
        canon_put(crc, "[", 1);
        for (size_t i = 0; ok && i < json_array_size(v); i++) {
            if (i > 0)
                canon_put(crc, ",", 1);
            ok = canon_value(crc, json_array_get(v, i), NULL);
        }
        canon_put(crc, "]", 1);
        return ok;
    }
    case JSON_STRING: canon_string(crc, json_string_value(v), json_string_length(v)); return true;
    case JSON_INTEGER:
        n = snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        /* 17 digits give the double back; ".0" keeps 2.0 apart from 2. */
        n = snprintf(num, sizeof num, "%.17g", json_real_value(v));
        if (!strpbrk(num, ".e"))
            n += snprintf(num + n, sizeof num - (size_t)n, ".0");
        break;
    case JSON_TRUE: n = snprintf(num, sizeof num, "true"); break;
    case JSON_FALSE: n = snprintf(num, sizeof num, "false"); break;
    case JSON_NULL: n = snprintf(num, sizeof num, "null"); break;
    }
    canon_put(crc, num, (size_t)n);
    return true;
}

zt_status zt_ckpt_manifest_crc(json_t *root, uint32_t *crc)
{
    *crc = 0;
    if (!canon_value(crc, root, ZT_CKPT_MANIFEST_CRC_KEY))
        return zt_fail(ZT_ERR_OOM, "", "cannot checksum the checkpoint manifest");
    return ZT_OK;
}

/* ---- Values at dotted paths, and their errors. ---- */

json_t *zt_ckpt_json_at(json_t *base, const char *path)
{
    char key[128];
    json_t *v = base;
    for (const char *p = path; v && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        v = json_is_object(v) ? json_object_get(v, key) : NULL;
        p += n + (dot ? 1 : 0);
    }
    return v;
}

zt_status zt_ckpt_bad_value(const zt_ckpt *c, const char *where, const char *key, json_t *v,
                            const char *what)
{
    char text[64] = "missing";
    char *dump = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (dump && strlen(dump) > 40)
        snprintf(text, sizeof text, "%.37s...", dump);
    else if (dump)
        snprintf(text, sizeof text, "%s", dump);
    free(dump);
    return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                   "checkpoint manifest %s is damaged: \"%s%s\" is %s; expected %s", c->path,
                   where, key, text, what);
}

zt_status zt_ckpt_missing(const zt_ckpt *c, const char *where, const char *key,
                          const char *what)
{
    return zt_ckpt_bad_value(c, where, key, NULL, what);
}

/* An integer in [lo, hi]. */
static zt_status chk_int(const zt_ckpt *c, json_t *base, const char *where, const char *key,
                         int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = zt_ckpt_json_at(base, key);
    if (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi) {
        *out = json_integer_value(v);
        return ZT_OK;
    }
    char what[96];
    if (hi == INT64_MAX)
        snprintf(what, sizeof what, "an integer >= %lld", (long long)lo);
    else
        snprintf(what, sizeof what, "an integer from %lld to %lld", (long long)lo, (long long)hi);
    return zt_ckpt_bad_value(c, where, key, v, what);
}

/* A number (JSON's are finite) in [lo, hi], or (lo, hi] when lo_open. */
static zt_status chk_num(const zt_ckpt *c, json_t *base, const char *where, const char *key,
                         double lo, bool lo_open, double hi, double *out)
{
    json_t *v = zt_ckpt_json_at(base, key);
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi) {
        *out = x;
        return ZT_OK;
    }
    char what[96];
    if (isinf(hi))
        snprintf(what, sizeof what, "a number %s %g", lo_open ? ">" : ">=", lo);
    else
        snprintf(what, sizeof what, "a number from %g to %g", lo, hi);
    return zt_ckpt_bad_value(c, where, key, v, what);
}

static zt_status chk_bool(const zt_ckpt *c, json_t *base, const char *where, const char *key,
                          bool *out)
{
    json_t *v = zt_ckpt_json_at(base, key);
    if (!json_is_boolean(v))
        return zt_ckpt_bad_value(c, where, key, v, "true or false");
    *out = json_is_true(v);
    return ZT_OK;
}

static zt_status chk_str(const zt_ckpt *c, json_t *base, const char *where, const char *key,
                         const char **out)
{
    json_t *v = zt_ckpt_json_at(base, key);
    if (!json_is_string(v) || json_string_length(v) == 0)
        return zt_ckpt_bad_value(c, where, key, v, "a non-empty string");
    *out = json_string_value(v);
    return ZT_OK;
}

/* One of the n strings choices[]; *idx its index. */
static zt_status chk_choice(const zt_ckpt *c, json_t *base, const char *where, const char *key,
                            const char *const *choices, int n, int *idx)
{
    json_t *v = zt_ckpt_json_at(base, key);
    for (int i = 0; json_is_string(v) && i < n; i++)
        if (!strcmp(json_string_value(v), choices[i])) {
            *idx = i;
            return ZT_OK;
        }
    char what[160];
    size_t len = (size_t)snprintf(what, sizeof what, "one of");
    for (int i = 0; i < n && len < sizeof what; i++)
        len += (size_t)snprintf(what + len, sizeof what - len, "%s \"%s\"", i ? "," : "",
                                choices[i]);
    return zt_ckpt_bad_value(c, where, key, v, what);
}

static zt_status chk_object(const zt_ckpt *c, json_t *root, const char *key, json_t **out)
{
    *out = zt_ckpt_json_at(root, key);
    return json_is_object(*out) ? ZT_OK : zt_ckpt_bad_value(c, "", key, *out, "an object");
}

/* A relation between values the saver keeps: "KEY" is HAVE, expected WANT (WHY). */
static zt_status chk_equal(const zt_ckpt *c, json_t *root, const char *key, int64_t have,
                           int64_t want, const char *why)
{
    if (have == want)
        return ZT_OK;
    char what[160];
    snprintf(what, sizeof what, "%lld (%s)", (long long)want, why);
    return zt_ckpt_bad_value(c, "", key, zt_ckpt_json_at(root, key), what);
}

/* ---- The sections. ---- */

static const char *const ckpt_dtypes[] = {"fp32", "fp16", "bf16"};
static const char *const ckpt_fp32[] = {"fp32"};
static const char *const ckpt_places[] = {"none", "cpu", "nvme"};

/* The layout and the files: the fields every read needs, with sizes that
 * keep every offset inside the files. */
static zt_status chk_layout(zt_ckpt *c, json_t *root)
{
    int64_t v;
    ZT_TRY(chk_int(c, root, "", "world_size", 1, 1 << 24, &v));
    c->world_size = (int)v;
    ZT_TRY(chk_int(c, root, "", "zero_stage", 0, 3, &v));
    c->stage = (int)v;
    ZT_TRY(chk_int(c, root, "", "layout.partition_count", 1, 1 << 20, &v));
    c->partition_count = (int)v;
    if (c->world_size % c->partition_count != 0)
        return zt_ckpt_bad_value(c, "", "layout.partition_count",
                                 zt_ckpt_json_at(root, "layout.partition_count"),
                                 "a divisor of world_size");
    ZT_TRY(chk_int(c, root, "", "layout.align", ZT_ZERO_ALIGN, ZT_ZERO_ALIGN, &v));
    ZT_TRY(chk_int(c, root, "", "layout.partition_numel", 1, INT64_MAX, &c->partition_numel));
    json_t *sections = zt_ckpt_json_at(root, "optimizer.state_sections");
    if (!json_is_array(sections) || json_array_size(sections) > ZT_TRAINER_MAX_STATES)
        return zt_ckpt_bad_value(c, "", "optimizer.state_sections", sections,
                                 "an array of at most 2 names");
    c->n_sections = 1 + (int)json_array_size(sections);

    json_t *units = zt_ckpt_json_at(root, "layout.units");
    json_t *munits = zt_ckpt_json_at(root, "model.units");
    if (!json_is_array(units) || json_array_size(units) == 0 || json_array_size(units) > 1u << 20 ||
        !json_is_array(munits) || json_array_size(munits) != json_array_size(units))
        return zt_ckpt_bad_value(c, "", "layout.units", units,
                                 "an array of 1 to 2^20 units, as long as model.units");
    c->n_units = (int)json_array_size(units);
    c->units = calloc((size_t)c->n_units, sizeof *c->units);
    c->file_bytes = calloc((size_t)c->partition_count, sizeof *c->file_bytes);
    c->file_crc = calloc((size_t)c->partition_count, sizeof *c->file_crc);
    if (!c->units || !c->file_bytes || !c->file_crc)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the checkpoint tables");
    int64_t part = 0, align = (int64_t)c->partition_count * ZT_ZERO_ALIGN;
    for (int u = 0; u < c->n_units; u++) {
        char where[64];
        snprintf(where, sizeof where, "layout.units[%d].", u);
        json_t *ju = json_array_get(units, (size_t)u);
        zt_ckpt_unit *cu = &c->units[u];
        ZT_TRY(chk_int(c, ju, where, "numel", 1, INT64_MAX - align, &cu->numel));
        ZT_TRY(chk_int(c, ju, where, "padded_numel", 1, INT64_MAX, &cu->padded_numel));
        ZT_TRY(chk_int(c, ju, where, "shard_numel", 1, INT64_MAX, &cu->shard_numel));
        ZT_TRY(chk_int(c, ju, where, "part_offset", 0, INT64_MAX, &cu->part_offset));
        /* The layout's rule (engine/zero/layout.c): numel rounded up to P x align. */
        if (cu->padded_numel != (cu->numel + align - 1) / align * align ||
            cu->shard_numel != cu->padded_numel / c->partition_count ||
            cu->part_offset != part || __builtin_add_overflow(part, cu->shard_numel, &part))
            return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                           "checkpoint manifest %s is damaged: layout.units[%d] is inconsistent "
                           "(numel %lld, padded %lld, shard %lld at %lld for %d partitions of "
                           "alignment %d)",
                           c->path, u, (long long)cu->numel, (long long)cu->padded_numel,
                           (long long)cu->shard_numel, (long long)cu->part_offset,
                           c->partition_count, ZT_ZERO_ALIGN);
    }
    if (part != c->partition_numel)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is damaged: the unit shards add up to %lld "
                       "elements, layout.partition_numel says %lld",
                       c->path, (long long)part, (long long)c->partition_numel);
    /* Every shard is its header and the sections' floats; the reader's int64_t
     * offsets must hold the end of the file. */
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)c->n_sections * 4, (uint64_t)c->partition_numel, &want) ||
        __builtin_add_overflow(want, zt_ckpt_header_bytes((uint32_t)c->n_units), &want) ||
        want > (uint64_t)INT64_MAX)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is damaged: shards of %d sections of %lld "
                       "elements would pass 2^63 bytes",
                       c->path, c->n_sections, (long long)c->partition_numel);

    json_t *files = zt_ckpt_json_at(root, "files");
    if (!json_is_array(files) || json_array_size(files) != (size_t)c->partition_count) {
        char what[64];
        snprintf(what, sizeof what, "an array of %d shards", c->partition_count);
        return zt_ckpt_bad_value(c, "", "files", files, what);
    }
    for (int r = 0; r < c->partition_count; r++) {
        char where[64], name[96];
        snprintf(where, sizeof where, "files[%d].", r);
        json_t *jf = json_array_get(files, (size_t)r);
        zt_ckpt_shard_name(name, sizeof name, r);
        const char *got;
        int idx;
        const char *names[] = {name};
        ZT_TRY(chk_choice(c, jf, where, "name", names, 1, &idx));
        ZT_TRY(chk_int(c, jf, where, "rank", r, r, &v));
        ZT_TRY(chk_int(c, jf, where, "bytes", (int64_t)want, (int64_t)want, &v));
        c->file_bytes[r] = (uint64_t)v;
        ZT_TRY(chk_str(c, jf, where, "crc32", &got));
        if (strlen(got) != 8 || strspn(got, "0123456789abcdef") != 8)
            return zt_ckpt_bad_value(c, where, "crc32", json_object_get(jf, "crc32"),
                                     "8 lower-case hex digits");
        c->file_crc[r] = (uint32_t)strtoul(got, NULL, 16);
    }
    return ZT_OK;
}

/* "gptlite: n_layer 2, n_embd 16777216, ...": the arguments, for a message. */
static void chk_args_text(const zt_model_args *a, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "%s:", a->name);
    int i = 0;
    const char *sep = " ";
    for (const zt_model_arg *r; len < cap && (r = zt_ckpt_arg_next(a->name, &i)); sep = ", ") {
        double v = zt_model_arg_value(r, a);
        if (r->kind == ZT_MODEL_ARG_CHOICE)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %s", sep, r->key,
                                    zt_model_arg_choice(r, a));
        else if (r->kind == ZT_MODEL_ARG_INT)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %lld", sep, r->key, (long long)v);
        else
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %g", sep, r->key, v);
    }
}

/* The arguments, each within the range of its flag (models/registry.h). */
static zt_status chk_args(const zt_ckpt *c, json_t *root, zt_model_args *out)
{
    zt_model_args_init(out);
    json_t *jm = zt_ckpt_json_at(root, "model");
    json_t *jn = json_object_get(jm, "name");
    const char *name = json_is_string(jn) ? json_string_value(jn) : "";
    if (!zt_model_find(name)) {
        char what[96];
        snprintf(what, sizeof what, "a model name (%s)", zt_model_names());
        return zt_ckpt_bad_value(c, "", "model.name", jn, what);
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    int i = 0;
    for (const zt_model_arg *r; (r = zt_ckpt_arg_next(out->name, &i));) {
        int64_t n = 0;
        double x = 0.0;
        int idx = 0;
        if (r->kind == ZT_MODEL_ARG_INT) {
            ZT_TRY(chk_int(c, jm, "model.", r->key, (int64_t)r->min, (int64_t)r->max, &n));
            x = (double)n;
        } else if (r->kind == ZT_MODEL_ARG_REAL) {
            /* [min, max): a dropout of 1 drops everything. */
            ZT_TRY(chk_num(c, jm, "model.", r->key, r->min, false, nextafter(r->max, r->min), &x));
        } else {
            ZT_TRY(chk_choice(c, jm, "model.", r->key, r->choices, 2, &idx));
            x = idx;
        }
        zt_model_arg_set(r, out, x);
    }
    return ZT_OK;
}

/* The model the arguments build must be the one the layout lays out, unit by
 * unit and tensor by tensor: an argument edited alone (n_embd 2^24 over the
 * shards of n_embd 16) would size every buffer of a resumed, generating or
 * evaluating run by what the shards do not hold. */
static zt_status chk_model(zt_ckpt *c, json_t *root, struct zt_ckpt_manifest *m)
{
    ZT_TRY(chk_args(c, root, &m->args));
    json_t *jm = zt_ckpt_json_at(root, "model");
    ZT_TRY(chk_int(c, jm, "model.", "n_params", 1, INT64_MAX, &m->n_params));
    char args[512];
    chk_args_text(&m->args, args, sizeof args);
    zt_model model;
    zt_status st = zt_model_build(&m->args, &model);
    if (st != ZT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zt_status_message());
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is damaged: its model arguments (%s) build no "
                       "model: %s",
                       c->path, args, msg);
    }
    json_t *units = json_object_get(jm, "units");
    if (model.n_units != c->n_units)
        st = zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                     "checkpoint manifest %s is damaged: its model arguments (%s) build %d "
                     "units; its layout and shards hold %d",
                     c->path, args, model.n_units, c->n_units);
    for (int u = 0; st == ZT_OK && u < c->n_units; u++) {
        const zt_unit *mu = &model.units[u];
        json_t *ju = json_array_get(units, (size_t)u), *tensors = json_object_get(ju, "tensors");
        json_t *jn = json_object_get(ju, "name"), *numel = json_object_get(ju, "numel");
        if (mu->param_numel != c->units[u].numel) {
            st = zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                         "checkpoint manifest %s is damaged: its model arguments (%s) build "
                         "unit %d (%s) of %lld parameters; its layout and shards hold %lld",
                         c->path, args, u, mu->name, (long long)mu->param_numel,
                         (long long)c->units[u].numel);
            break;
        }
        bool same = json_is_string(jn) && !strcmp(json_string_value(jn), mu->name) &&
                    json_is_integer(numel) && json_integer_value(numel) == mu->param_numel &&
                    json_is_array(tensors) && json_array_size(tensors) == (size_t)mu->n_params;
        for (int p = 0; same && p < mu->n_params; p++) {
            json_t *jt = json_array_get(tensors, (size_t)p);
            json_t *tn = json_object_get(jt, "name"), *shape = json_object_get(jt, "shape");
            same = json_is_string(tn) && !strcmp(json_string_value(tn), mu->params[p].name) &&
                   json_is_array(shape) && json_array_size(shape) == (size_t)mu->params[p].ndim;
            for (int d = 0; same && d < mu->params[p].ndim; d++) {
                json_t *dim = json_array_get(shape, (size_t)d);
                same = json_is_integer(dim) && json_integer_value(dim) == mu->params[p].shape[d];
            }
        }
        if (!same) {
            char where[64], what[160];
            snprintf(where, sizeof where, "model.units[%d]", u);
            snprintf(what, sizeof what, "unit %s of %lld parameters with the tensors its model "
                                        "arguments build",
                     mu->name, (long long)mu->param_numel);
            st = zt_ckpt_bad_value(c, where, "", ju, what);
        }
    }
    if (st == ZT_OK && model.n_params != m->n_params) {
        char what[64];
        snprintf(what, sizeof what, "%lld, the sum of its units", (long long)model.n_params);
        st = zt_ckpt_bad_value(c, "", "model.n_params", json_object_get(jm, "n_params"), what);
    }
    zt_model_free(&model);
    return st;
}

/* The optimizer, the schedule and the loss scaler: what a resumed run takes
 * over, and the counters of the run that saved (one step is applied or
 * skipped, the schedule steps with every applied step). */
static zt_status chk_training(zt_ckpt *c, json_t *root, bool v1, struct zt_ckpt_manifest *m)
{
    zt_ckpt_state *s = &m->state;
    json_t *o;
    int64_t v, gas, spe;
    double x;
    bool b;
    const char *text;
    ZT_TRY(chk_object(c, root, "training", &o));
    ZT_TRY(chk_int(c, o, "training.", "global_steps", 0, INT64_MAX, &c->global_steps));
    s->global_steps = c->global_steps;
    ZT_TRY(chk_int(c, o, "training.", "skipped_steps", 0, c->global_steps, &s->skipped_steps));
    ZT_TRY(chk_int(c, o, "training.", "train_batch_size", 1, 1LL << 40, &m->train_batch));
    ZT_TRY(chk_int(c, o, "training.", "train_micro_batch_size_per_gpu", 1, m->train_batch,
                   &m->micro_batch));
    ZT_TRY(chk_int(c, o, "training.", "gradient_accumulation_steps", 1, m->train_batch, &gas));
    int64_t per_rank;
    if (__builtin_mul_overflow(m->micro_batch, gas, &per_rank) || m->train_batch % per_rank != 0)
        return zt_ckpt_bad_value(c, "training.", "train_batch_size",
                                 json_object_get(o, "train_batch_size"),
                                 "a multiple of micro batch x gradient_accumulation_steps");
    ZT_TRY(chk_int(c, o, "training.", "seed", INT64_MIN, INT64_MAX, &v));
    m->seed = (uint64_t)v;
    ZT_TRY(chk_num(c, o, "training.", "gradient_clipping", 0.0, false, INFINITY, &x));
    ZT_TRY(chk_int(c, o, "training.", "global_samples", 0, INT64_MAX, &s->global_samples));
    int64_t prod;
    if (__builtin_mul_overflow(c->global_steps, m->train_batch, &prod))
        prod = -1;
    ZT_TRY(chk_equal(c, root, "training.global_samples", s->global_samples, prod,
                     "global_steps x train_batch_size"));
    ZT_TRY(chk_int(c, o, "training.", "micro_steps", 0, INT64_MAX, &v));
    if (__builtin_mul_overflow(c->global_steps, gas, &prod))
        prod = -1;
    ZT_TRY(chk_equal(c, root, "training.micro_steps", v, prod,
                     "global_steps x gradient_accumulation_steps"));
    int64_t seed = (int64_t)m->seed;
    ZT_TRY(chk_int(c, root, "", "rng.seed", seed, seed, &v));
    ZT_TRY(chk_str(c, root, "", "rng.note", &text));

    ZT_TRY(chk_object(c, root, "sampler", &o));
    ZT_TRY(chk_int(c, o, "sampler.", "n_samples", m->train_batch, INT64_MAX, &m->n_samples));
    ZT_TRY(chk_int(c, o, "sampler.", "steps_per_epoch", 1, INT64_MAX, &spe));
    ZT_TRY(chk_equal(c, root, "sampler.steps_per_epoch", spe, m->n_samples / m->train_batch,
                     "n_samples / train_batch_size"));
    ZT_TRY(chk_int(c, o, "sampler.", "epoch", 0, INT64_MAX, &v));
    ZT_TRY(chk_equal(c, root, "sampler.epoch", v, c->global_steps / spe,
                     "global_steps / steps_per_epoch"));
    ZT_TRY(chk_int(c, o, "sampler.", "position", 0, INT64_MAX, &v));
    ZT_TRY(chk_equal(c, root, "sampler.position", v, c->global_steps % spe * m->train_batch,
                     "the step within the epoch x train_batch_size"));
    ZT_TRY(chk_bool(c, o, "sampler.", "shuffle", &b));

    ZT_TRY(chk_object(c, root, "optimizer", &o));
    static const char *const types[] = {"Adam", "AdamW", "SGD"};
    int type;
    ZT_TRY(chk_choice(c, o, "optimizer.", "type", types, 3, &type));
    m->optimizer = types[type];
    ZT_TRY(chk_num(c, o, "optimizer.", "lr", 0.0, false, INFINITY, &x));
    ZT_TRY(chk_num(c, o, "optimizer.", "weight_decay", 0.0, false, INFINITY, &x));
    const char *want[2] = {"exp_avg", "exp_avg_sq"};
    int n_want = 2;
    if (type == 2) {
        ZT_TRY(chk_num(c, o, "optimizer.", "momentum", 0.0, false, INFINITY, &x));
        want[0] = "momentum_buffer";
        n_want = x > 0.0 ? 1 : 0;
    } else {
        json_t *betas = json_object_get(o, "betas");
        if (!json_is_array(betas) || json_array_size(betas) != 2)
            return zt_ckpt_bad_value(c, "optimizer.", "betas", betas, "two numbers");
        for (size_t k = 0; k < 2; k++) {
            json_t *bk = json_array_get(betas, k);
            if (!json_is_number(bk) || json_number_value(bk) < 0.0 ||
                json_number_value(bk) >= 1.0)
                return zt_ckpt_bad_value(c, "optimizer.", "betas", betas,
                                         "two numbers from 0 to 1 (1 excluded)");
        }
        ZT_TRY(chk_num(c, o, "optimizer.", "eps", 0.0, false, INFINITY, &x));
    }
    if (!zt_ckpt_manifest_sections_are(c, want, n_want)) {
        char what[96];
        snprintf(what, sizeof what, "the %d state section(s) of %s", n_want, m->optimizer);
        return zt_ckpt_bad_value(c, "", "optimizer.state_sections",
                                 json_object_get(o, "state_sections"), what);
    }
    ZT_TRY(chk_int(c, o, "optimizer.", "step", 0, INT64_MAX, &s->optim_steps));
    ZT_TRY(chk_equal(c, root, "optimizer.step", s->optim_steps,
                     c->global_steps - s->skipped_steps,
                     "training.global_steps - training.skipped_steps"));

    ZT_TRY(chk_object(c, root, "scheduler", &o));
    ZT_TRY(chk_str(c, o, "scheduler.", "type", &text));
    ZT_TRY(chk_int(c, o, "scheduler.", "last_batch_iteration", -1, INT64_MAX,
                   &s->sched.last_batch_iteration));
    ZT_TRY(chk_equal(c, root, "scheduler.last_batch_iteration", s->sched.last_batch_iteration,
                     s->optim_steps - 1, "optimizer.step - 1"));
    ZT_TRY(chk_num(c, o, "scheduler.", "base_lr", 0.0, false, INFINITY, &s->sched.base_lr));

    zt_scaler_state *sc = &s->scaler;
    ZT_TRY(chk_object(c, root, "loss_scaler", &o));
    ZT_TRY(chk_bool(c, o, "loss_scaler.", "dynamic", &sc->dynamic));
    ZT_TRY(chk_bool(c, o, "loss_scaler.", "consecutive_hysteresis", &sc->consecutive_hysteresis));
    /* The scale multiplies the loss: it must be a positive finite number. */
    ZT_TRY(chk_num(c, o, "loss_scaler.", "cur_scale", 0.0, true, INFINITY, &sc->cur_scale));
    ZT_TRY(chk_int(c, o, "loss_scaler.", "cur_iter", 0, c->global_steps, &sc->cur_iter));
    ZT_TRY(chk_int(c, o, "loss_scaler.", "last_overflow_iter", -1, sc->cur_iter - 1,
                   &sc->last_overflow_iter));
    /* A dynamic scaler's configuration is the fp16 section's (config rules);
     * a static one records zeros. */
    int64_t dyn = sc->dynamic ? 1 : 0;
    ZT_TRY(chk_int(c, o, "loss_scaler.", "hysteresis", dyn, 1000000000, &sc->hysteresis));
    ZT_TRY(chk_int(c, o, "loss_scaler.", "cur_hysteresis", dyn, sc->hysteresis,
                   &sc->cur_hysteresis));
    ZT_TRY(chk_int(c, o, "loss_scaler.", "loss_scale_window", dyn, INT64_MAX,
                   &sc->loss_scale_window));
    ZT_TRY(chk_num(c, o, "loss_scaler.", "min_loss_scale", 0.0, sc->dynamic, INFINITY,
                   &sc->min_loss_scale));

    /* Recorded for the reader: the run's precisions and placements. */
    static const char *const dkeys[] = {"params", "master", "optimizer_states",
                                        "gradients", "communication", "shards"};
    ZT_TRY(chk_object(c, root, "dtype", &o));
    for (int k = 0; k < 6; k++) {
        bool fp32_only = k == 1 || k == 2 || k == 5;
        int idx;
        ZT_TRY(chk_choice(c, o, "dtype.", dkeys[k], fp32_only ? ckpt_fp32 : ckpt_dtypes,
                          fp32_only ? 1 : 3, &idx));
    }
    ZT_TRY(chk_object(c, root, "offload", &o));
    int idx;
    ZT_TRY(chk_choice(c, o, "offload.", "optimizer", ckpt_places, 3, &idx));
    ZT_TRY(chk_choice(c, o, "offload.", "param", ckpt_places, 3, &idx));
    ZT_TRY(chk_str(c, root, "", "zerotrain_version", &text));
    /* Format 1 manifests of versions before pipelining have no "pipeline". */
    if (v1 && !zt_ckpt_json_at(root, "pipeline"))
        return ZT_OK;
    ZT_TRY(chk_object(c, root, "pipeline", &o));
    int64_t stages, dp;
    ZT_TRY(chk_int(c, o, "pipeline.", "stages", 1, c->n_units, &stages));
    if (c->world_size % stages != 0)
        return zt_ckpt_bad_value(c, "pipeline.", "stages", json_object_get(o, "stages"),
                                 "a divisor of world_size");
    ZT_TRY(chk_int(c, o, "pipeline.", "data_parallel_size", 1, c->world_size, &dp));
    ZT_TRY(chk_equal(c, root, "pipeline.data_parallel_size", dp, c->world_size / stages,
                     "world_size / pipeline.stages"));
    ZT_TRY(chk_str(c, o, "pipeline.", "partition_method", &text));
    ZT_TRY(chk_str(c, o, "pipeline.", "schedule", &text));
    json_t *bounds = json_object_get(o, "stage_first_units");
    bool ok = json_is_array(bounds) && json_array_size(bounds) == (size_t)stages + 1;
    for (int64_t k = 0, prev = 0; ok && k <= stages; k++) {
        json_t *jb = json_array_get(bounds, (size_t)k);
        int64_t at = json_is_integer(jb) ? json_integer_value(jb) : -1;
        ok = at >= prev && at <= c->n_units && (k > 0 || at == 0) &&
             (k < stages || at == c->n_units);
        prev = at;
    }
    return ok ? ZT_OK
              : zt_ckpt_bad_value(c, "", "pipeline.stage_first_units", bounds,
                                  "the stages' first units: from 0, rising, then n_units");
}

/* The tokenizer (a text model's, none for the MLP) and the histories. */
static zt_status chk_rest(zt_ckpt *c, json_t *root, struct zt_ckpt_manifest *m)
{
    const zt_model_entry *e = zt_model_find(m->args.name);
    json_t *tok = zt_ckpt_json_at(root, "tokenizer");
    m->tok_kind = "";
    m->tok_vocab_size = -1;
    if (e->data == ZT_DATA_SYNTHETIC && tok)
        return zt_ckpt_bad_value(c, "", "tokenizer", tok, "none (the model reads no text)");
    if (e->data != ZT_DATA_SYNTHETIC) {
        static const char *const kinds[] = {"char", "byte", "bpe"};
        int kind;
        ZT_TRY(chk_object(c, root, "tokenizer", &tok));
        ZT_TRY(chk_choice(c, tok, "tokenizer.", "kind", kinds, 3, &kind));
        m->tok_kind = kinds[kind];
        ZT_TRY(chk_int(c, tok, "tokenizer.", "vocab_size", 1, m->args.vocab_size,
                       &m->tok_vocab_size));
        json_t *dir = json_object_get(tok, "dir"), *voc = json_object_get(tok, "vocabulary");
        if (kind == 2 && dir)
            ZT_TRY(chk_str(c, tok, "tokenizer.", "dir", &m->tok_dir));
        if (kind == 0) {
            ZT_TRY(chk_str(c, tok, "tokenizer.", "vocabulary", &m->vocab));
            m->vocab_len = json_string_length(voc);
        }
    }
    json_t *data = zt_ckpt_json_at(root, "data");
    const char *text;
    if (data)
        ZT_TRY(chk_str(c, root, "", "data.path", &text));

    /* A loss is a number, or null where it was not finite (a diverged step
     * kept with --nonfinite continue); a loss scale is always a positive
     * number. */
    static const char *const keys[] = {"history.loss", "history.loss_scale"};
    for (int k = 0; k < 2; k++) {
        json_t *a = zt_ckpt_json_at(root, keys[k]);
        if (!json_is_array(a) || json_array_size(a) != (size_t)c->global_steps) {
            char what[64];
            snprintf(what, sizeof what, "an array of %lld numbers (global_steps)",
                     (long long)c->global_steps);
            return zt_ckpt_bad_value(c, "", keys[k], a, what);
        }
        for (size_t i = 0; i < json_array_size(a); i++) {
            json_t *x = json_array_get(a, i);
            bool ok = k == 0 ? json_is_number(x) || json_is_null(x)
                             : json_is_number(x) && json_number_value(x) > 0.0;
            if (!ok) {
                char where[64];
                snprintf(where, sizeof where, "%s[%zu]", keys[k], i);
                return zt_ckpt_bad_value(c, where, "", x,
                                         k == 0 ? "a number (null: not finite)"
                                                : "a number > 0");
            }
        }
    }
    return ZT_OK;
}

/* The format, its version and the checksum, before any value is believed. */
static zt_status chk_checksum(zt_ckpt *c, json_t *root, bool *v1)
{
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "zerotrain-checkpoint") != 0)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "%s is not a zerotrain checkpoint manifest (\"format\" is not "
                       "\"zerotrain-checkpoint\")",
                       c->path);
    int64_t version;
    ZT_TRY(chk_int(c, root, "", "format_version", 1, INT64_MAX, &version));
    if (version != ZT_CKPT_MANIFEST_VERSION && version != ZT_CKPT_MANIFEST_VERSION_UNCHECKED)
        return zt_fail(ZT_ERR_DATA, "use the zerotrain version that wrote it",
                       "checkpoint manifest %s has format version %lld; this zerotrain reads "
                       "versions %d and %d",
                       c->path, (long long)version, ZT_CKPT_MANIFEST_VERSION_UNCHECKED,
                       ZT_CKPT_MANIFEST_VERSION);
    *v1 = version == ZT_CKPT_MANIFEST_VERSION_UNCHECKED;
    json_t *sum = json_object_get(root, ZT_CKPT_MANIFEST_CRC_KEY);
    /* Format 1 predates the checksum; a checksum present is checked whatever
     * the version says, so an edit of the version cannot skip it. */
    if (!sum && *v1) {
        c->unchecked = true;
        return ZT_OK;
    }
    const char *hex = json_is_string(sum) ? json_string_value(sum) : "";
    if (strlen(hex) != 8 || strspn(hex, "0123456789abcdef") != 8)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is damaged: format version %lld needs \"%s\", "
                       "8 lower-case hex digits; it is %s",
                       c->path, (long long)version, ZT_CKPT_MANIFEST_CRC_KEY,
                       sum ? "something else" : "missing");
    uint32_t crc;
    ZT_TRY(zt_ckpt_manifest_crc(root, &crc));
    if (crc != (uint32_t)strtoul(hex, NULL, 16))
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is damaged: the CRC-32 of its content is %08x, "
                       "its \"%s\" says %s (the file was edited or corrupted)",
                       c->path, crc, ZT_CKPT_MANIFEST_CRC_KEY, hex);
    return ZT_OK;
}

zt_status zt_ckpt_manifest_check(zt_ckpt *c)
{
    struct zt_ckpt_manifest *m = c->manifest;
    json_t *root = m->root;
    bool v1 = false;
    if (!json_is_object(root))
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is damaged: it is not a JSON object", c->path);
    ZT_TRY(chk_checksum(c, root, &v1));
    json_t *tag = json_object_get(root, "tag");
    if (!json_is_string(tag) || strcmp(json_string_value(tag), c->tag) != 0)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s names tag \"%s\", not its directory's \"%s\"",
                       c->path, json_is_string(tag) ? json_string_value(tag) : "(none)", c->tag);
    ZT_TRY(chk_layout(c, root));
    ZT_TRY(chk_model(c, root, m));
    ZT_TRY(chk_training(c, root, v1, m));
    return chk_rest(c, root, m);
}
