/*
 * config read: JSON values -> typed fields. "auto" and null, readers that
 * check type and bounds and say what was expected, unknown keys with a "did
 * you mean", and the generic reader that reads a section through its key
 * table (keys.c).
 */
#include "engine/config/config_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/spell.h"

/* ------------------------------------------------------------------ values */

bool zt_config_is_auto(const json_t *v)
{
    return v && json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

/* A key counts as given unless absent or "auto" (DeepSpeed drops "auto" values
 * before anything looks at them). */
bool zt_config_given(const json_t *obj, const char *key)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !zt_config_is_auto(v);
}

/* Absent, null or "auto": the default applies. */
bool zt_config_unset(const json_t *obj, const char *key)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return !v || json_is_null(v) || zt_config_is_auto(v);
}

/* The value of a ZT_CUSTOM key, or NULL for absent, null and "auto" (noted). */
json_t *zt_config_value(const zt_ctx *c, json_t *obj, const char *path, const char *key)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (zt_config_is_auto(v)) {
        char kp[ZT_PATH_MAX];
        zt_config_join(kp, path, key);
        zt_config_note(c->cfg, "%s \"auto\" -> default", kp);
    }
    return v && !json_is_null(v) && !zt_config_is_auto(v) ? v : NULL;
}

static void zt_value_text(const json_t *v, char *buf, size_t n)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (s && strlen(s) > 80)
        snprintf(buf, n, "%.77s...", s);
    else
        snprintf(buf, n, "%s", s ? s : "?");
    free(s);
}

zt_status zt_config_bad_value(const zt_ctx *c, const char *path, const json_t *v,
                              const char *expected)
{
    char got[96];
    zt_value_text(v, got, sizeof got);
    return zt_config_err(c, ZT_ERR_CONFIG, path, NULL, "got %s, expected %s", got, expected);
}

static void zt_expect_int(double lo, double hi, char *buf, size_t n)
{
    if (isinf(lo) && isinf(hi))
        snprintf(buf, n, "an integer");
    else if (isinf(hi) && lo == 0)
        snprintf(buf, n, "a non-negative integer");
    else if (isinf(hi) && lo == 1)
        snprintf(buf, n, "a positive integer");
    else if (isinf(hi))
        snprintf(buf, n, "an integer >= %.0f", lo);
    else
        snprintf(buf, n, "an integer in %.0f..%.0f", lo, hi);
}

static void zt_expect_real(double lo, double hi, bool positive, char *buf, size_t n)
{
    if (isinf(lo) && isinf(hi))
        snprintf(buf, n, "a finite number");
    else if (isinf(hi) && lo == 0)
        snprintf(buf, n, positive ? "a positive number" : "a non-negative number");
    else if (isinf(hi))
        snprintf(buf, n, positive ? "a number > %g" : "a number >= %g", lo);
    else
        snprintf(buf, n, "a number in [%g, %g]", lo, hi);
}

zt_status zt_config_read_bool(const zt_ctx *c, const char *path, const json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return zt_config_bad_value(c, path, v, "true or false");
    *out = json_is_true(v);
    return ZT_OK;
}

/* Integers may be written as integral reals: configs write 5e8. */
zt_status zt_config_read_int(const zt_ctx *c, const char *path, const json_t *v, double lo,
                             double hi, int64_t *out)
{
    char expected[64];
    zt_expect_int(lo, hi, expected, sizeof expected);
    int64_t i;
    if (json_is_integer(v)) {
        i = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d == floor(d) && d >= -0x1p63 && d < 0x1p63))
            return zt_config_bad_value(c, path, v, expected);
        i = (int64_t)d;
    } else {
        return zt_config_bad_value(c, path, v, expected);
    }
    if ((double)i < lo || (double)i > hi)
        return zt_config_bad_value(c, path, v, expected);
    *out = i;
    return ZT_OK;
}

zt_status zt_config_read_real(const zt_ctx *c, const char *path, const json_t *v, double lo,
                              double hi, bool positive, double *out)
{
    char expected[64];
    zt_expect_real(lo, hi, positive, expected, sizeof expected);
    if (!json_is_number(v))
        return zt_config_bad_value(c, path, v, expected);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (positive && d <= lo))
        return zt_config_bad_value(c, path, v, expected);
    *out = d;
    return ZT_OK;
}

/* dst may be NULL: check the type only. */
static zt_status zt_read_str(const zt_ctx *c, const char *path, const json_t *v, char *dst,
                             size_t size)
{
    if (!json_is_string(v))
        return zt_config_bad_value(c, path, v, "a string");
    if (!dst)
        return ZT_OK;
    const char *s = json_string_value(v);
    if (strlen(s) >= size)
        return zt_config_err(c, ZT_ERR_CONFIG, path, NULL,
                             "longer than the %zu characters zerotrain keeps", size - 1);
    memcpy(dst, s, strlen(s) + 1);
    return ZT_OK;
}

/* One of `names` (case-insensitive when nocase), as its index. */
zt_status zt_config_read_choice(const zt_ctx *c, const char *path, const json_t *v,
                                const char *const *names, size_t n, bool nocase, size_t *idx)
{
    if (json_is_string(v)) {
        for (size_t i = 0; i < n; i++) {
            const char *s = json_string_value(v);
            if (nocase ? strcasecmp(s, names[i]) == 0 : strcmp(s, names[i]) == 0) {
                *idx = i;
                return ZT_OK;
            }
        }
    }
    char expected[160] = "one of";
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(expected);
        snprintf(expected + len, sizeof expected - len, "%s \"%s\"", i ? "," : "", names[i]);
    }
    return zt_config_bad_value(c, path, v, expected);
}

static zt_status zt_read_key(const zt_ctx *c, const char *path, const zt_key *k,
                             const json_t *v, void *dst)
{
    switch (k->kind) {
    case ZT_BOOL: {
        bool b = false;
        ZT_TRY(zt_config_read_bool(c, path, v, &b));
        if (dst)
            *(bool *)dst = b;
        return ZT_OK;
    }
    case ZT_INT:
    case ZT_I64: {
        int64_t i;
        ZT_TRY(zt_config_read_int(c, path, v, k->lo, k->hi, &i));
        if (dst && k->kind == ZT_INT)
            *(int *)dst = (int)i;
        else if (dst)
            *(int64_t *)dst = i;
        return ZT_OK;
    }
    case ZT_REAL: {
        double d;
        ZT_TRY(zt_config_read_real(c, path, v, k->lo, k->hi, (k->flags & ZT_POSITIVE) != 0, &d));
        if (dst)
            *(double *)dst = d;
        return ZT_OK;
    }
    case ZT_STR:
        return zt_read_str(c, path, v, dst, k->size);
    case ZT_CUSTOM:
    case ZT_FEATURE:
        break;
    }
    return zt_fail(ZT_ERR_INTERNAL, NULL, "config key %s has no generic reader", path);
}

static void zt_format_stored(const zt_key *k, const void *dst, char *buf, size_t n)
{
    switch (k->kind) {
    case ZT_BOOL: snprintf(buf, n, "%s", *(const bool *)dst ? "true" : "false"); return;
    case ZT_INT: snprintf(buf, n, "%d", *(const int *)dst); return;
    case ZT_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)dst); return;
    case ZT_REAL: snprintf(buf, n, "%g", *(const double *)dst); return;
    case ZT_STR: snprintf(buf, n, "\"%.60s\"", (const char *)dst); return;
    case ZT_CUSTOM:
    case ZT_FEATURE: break;
    }
    snprintf(buf, n, "default");
}

/* ------------------------------------------------------------------ unknown keys */

const zt_key *zt_config_find_key(const zt_key *keys, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

static zt_status zt_unknown_key(const zt_ctx *c, const char *kp, const char *name,
                                const char *section, const zt_key *keys, size_t n)
{
    const char *names[128];
    size_t m = n < ZT_LEN(names) ? n : ZT_LEN(names);
    for (size_t i = 0; i < m; i++)
        names[i] = keys[i].name;
    char suggestion[ZT_PATH_MAX + 32] = "";
    const char *close = zt_spell_closest(name, names, m);
    if (close) {
        snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", close);
    } else {
        for (size_t s = 0; s < zt_config_n_sections && !suggestion[0]; s++) {
            if (strcmp(zt_config_sections[s].path, section) == 0 ||
                !zt_config_find_key(zt_config_sections[s].keys, zt_config_sections[s].n, name))
                continue;
            char where[ZT_PATH_MAX];
            zt_config_join(where, zt_config_sections[s].path, name);
            snprintf(suggestion, sizeof suggestion, "; did you mean `%s`?", where);
        }
    }
    if (suggestion[0])
        return zt_config_err(
            c, ZT_ERR_CONFIG, kp,
            "unknown keys are refused so that a typo cannot leave a default in force",
            "unknown key%s", suggestion);
    char hint[900];
    int len = snprintf(hint, sizeof hint, "keys DeepSpeed 0.19.6 accepts %s%s:",
                       section[0] ? "in " : "at the top level", section);
    for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof hint; i++) {
        if (keys[i].kind == ZT_FEATURE)
            continue; /* accepted only to be refused: not worth suggesting */
        size_t room = sizeof hint - (size_t)len;
        if (strlen(keys[i].name) + 8 > room) {
            snprintf(hint + len, room, " ...");
            break;
        }
        len += snprintf(hint + len, room, " %s", keys[i].name);
    }
    return zt_config_err(c, ZT_ERR_CONFIG, kp, hint, "unknown key");
}

/* ------------------------------------------------------------------ generic section reader */

bool zt_config_feature_on(const json_t *v)
{
    if (json_is_null(v) || json_is_false(v))
        return false;
    if (json_is_object(v)) {
        const json_t *e = json_object_get(v, "enabled");
        return json_object_size(v) > 0 && !(e && (json_is_false(e) || zt_config_is_auto(e)));
    }
    return true;
}

void zt_config_record_unbuilt(zt_config *cfg, const char *path)
{
    if (cfg->n_unbuilt < ZT_CONFIG_MAX_UNBUILT) {
        zt_config_copy(cfg->unbuilt[cfg->n_unbuilt], sizeof cfg->unbuilt[0], path);
        cfg->n_unbuilt++;
    }
}

/* One key of a section through its table entry (parse_keys' loop body). */
static zt_status zt_parse_key(const zt_ctx *c, json_t *obj, const char *path, const char *name,
                              json_t *v, const zt_key *keys, size_t n, void *base)
{
    char kp[ZT_PATH_MAX];
    zt_config_join(kp, path, name);
    const zt_key *k = zt_config_find_key(keys, n, name);
    if (!k)
        return zt_unknown_key(c, kp, name, path, keys, n);
    if (k->alias && !zt_config_is_auto(v) && zt_config_given(obj, k->alias)) {
        char other[ZT_PATH_MAX];
        zt_config_join(other, path, k->alias);
        return zt_config_err(c, ZT_ERR_CONFIG, kp, "keep one of them",
                             "`%s` and `%s` name the same setting; give only one", kp, other);
    }
    if (k->kind == ZT_CUSTOM)
        return ZT_OK;
    void *dst = k->off == ZT_NONE ? NULL : (char *)base + k->off;
    if (zt_config_is_auto(v) && k->auto_bit) {
        c->cfg->auto_pending |= k->auto_bit; /* zt_config_resolve_run fills and notes it */
        return ZT_OK;
    }
    if (zt_config_is_auto(v)) {
        char val[80] = "";
        if (dst)
            zt_format_stored(k, dst, val, sizeof val);
        zt_config_note(c->cfg, "%s \"auto\" -> %s%s", kp, dst ? val : "default",
                       dst ? " (default)" : "");
        return ZT_OK;
    }
    if (json_is_null(v) && (k->flags & ZT_NULLABLE))
        return ZT_OK;
    if (k->kind == ZT_FEATURE) {
        if (zt_config_feature_on(v))
            zt_config_record_unbuilt(c->cfg, kp);
        return ZT_OK;
    }
    ZT_TRY(zt_read_key(c, kp, k, v, dst));
    if (k->flags & ZT_NO_EFFECT)
        zt_config_note(c->cfg, "%s has no effect in zerotrain%s%s", kp, k->why ? ": " : "",
                       k->why ? k->why : "");
    return ZT_OK;
}

/* Reads every key of `obj` through `keys` into `base`; unknown keys, wrong
 * types and two spellings of one setting are errors. Every key is read (each
 * error recorded); the first error's status is returned. */
zt_status zt_config_parse_keys(const zt_ctx *c, json_t *obj, const char *path,
                               const zt_key *keys, size_t n, void *base)
{
    const char *name;
    json_t *v;
    zt_status first = ZT_OK;
    json_object_foreach(obj, name, v) {
        zt_status st = zt_parse_key(c, obj, path, name, v, keys, n, base);
        if (first == ZT_OK)
            first = st;
    }
    return first;
}

/* obj[key] as an object, or NULL when absent or null. */
zt_status zt_config_section(const zt_ctx *c, json_t *obj, const char *path, const char *key,
                            json_t **out)
{
    char kp[ZT_PATH_MAX];
    zt_config_join(kp, path, key);
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    *out = NULL;
    if (!v || json_is_null(v))
        return ZT_OK;
    if (!json_is_object(v))
        return zt_config_bad_value(c, kp, v, "an object { ... }");
    *out = v;
    return ZT_OK;
}
