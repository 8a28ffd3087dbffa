/*
 * config json: the config text as written -> a jansson object, and the parse
 * context's messages. Comments and trailing commas are blanked (newlines
 * kept) and the line of every key is indexed, so that errors (zt_config_err)
 * cite the user's line numbers; duplicate keys name the key and its path.
 * Every error is recorded in the parse's collector and reported together at
 * the end. Notes (zt_config_note) and the JSON path helpers live here too.
 */
#include "engine/config/config_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZT_SYNTAX_HINT                                                                     \
    "zerotrain reads JSON plus # // /* */ comments and trailing commas; other hjson "      \
    "syntax (unquoted or single-quoted strings) is not supported"

/* ------------------------------------------------------------------ context */

void zt_config_ctx_free(zt_ctx *c)
{
    for (size_t i = 0; i < c->n_lines; i++)
        free(c->lines[i].path);
    free(c->lines);
    free(c->slots);
    free(c->counts);
}

/* FNV-1a. */
static uint64_t zt_path_hash(const char *s, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The slot of path[0, len): its own, or the empty one it would take. */
static size_t *zt_index_slot(const zt_ctx *c, const char *path, size_t len)
{
    size_t mask = c->n_slots - 1;
    for (size_t h = (size_t)zt_path_hash(path, len) & mask;; h = (h + 1) & mask) {
        size_t *slot = &c->slots[h];
        if (*slot == 0)
            return slot;
        const char *q = c->lines[*slot - 1].path;
        if (strncmp(q, path, len) == 0 && q[len] == '\0')
            return slot;
    }
}

/* The index of the first line of path[0, len), or -1. */
static ptrdiff_t zt_index_first(const zt_ctx *c, const char *path, size_t len)
{
    if (!c->slots)
        return -1;
    size_t *slot = zt_index_slot(c, path, len);
    return *slot ? (ptrdiff_t)*slot - 1 : -1;
}

static int zt_line_of(const zt_ctx *c, const char *path)
{
    ptrdiff_t i = zt_index_first(c, path, strlen(path));
    return i >= 0 ? c->lines[i].line : 0;
}

/* strlcpy: a truncated path is still a usable label. */
void zt_config_copy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* out (ZT_PATH_MAX) = parent.key, or key at the top level. */
void zt_config_join(char *out, const char *parent, const char *key)
{
    zt_config_copy(out, ZT_PATH_MAX, parent);
    size_t n = strlen(out);
    if (parent[0] && n + 1 < ZT_PATH_MAX)
        out[n++] = '.';
    zt_config_copy(out + n, ZT_PATH_MAX - n, key);
}

__attribute__((format(printf, 5, 6))) zt_status
zt_config_err(const zt_ctx *c, zt_status st, const char *path, const char *hint,
              const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line = path ? zt_line_of(c, path) : 0;
    if (!path)
        zt_fail(st, hint, "%s: %s", c->name, what);
    else if (line > 0)
        zt_fail(st, hint, "%s:%d: %s: %s", c->name, line, path, what);
    else
        zt_fail(st, hint, "%s: %s: %s", c->name, path, what);
    if (c->errs)
        zt_config_errors_add(c->errs, line, st, zt_status_message(), zt_status_hint());
    return st;
}

static void zt_note_v(zt_config *cfg, const char *prefix, const char *fmt, va_list ap)
{
    if (cfg->n_notes >= ZT_CONFIG_MAX_NOTES)
        return;
    char *slot = cfg->notes[cfg->n_notes++];
    if (cfg->n_notes == ZT_CONFIG_MAX_NOTES) {
        snprintf(slot, ZT_CONFIG_NOTE_LEN, "(further config notes omitted)");
        return;
    }
    size_t n = strlen(prefix);
    memcpy(slot, prefix, n + 1);
    vsnprintf(slot + n, ZT_CONFIG_NOTE_LEN - n, fmt, ap);
}

__attribute__((format(printf, 2, 3))) void zt_config_note(zt_config *cfg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_note_v(cfg, "", fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 2, 3))) void zt_config_warn(zt_config *cfg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_note_v(cfg, "warning: ", fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ error collector */

void zt_config_errors_add(zt_config_errors *e, int line, zt_status st, const char *msg,
                          const char *hint)
{
    if (e->n < ZT_CONFIG_MAX_ERRORS) {
        zt_config_error *x = &e->e[e->n];
        x->line = line;
        x->st = st;
        zt_config_copy(x->msg, sizeof x->msg, msg);
        zt_config_copy(x->hint, sizeof x->hint, hint ? hint : "");
    }
    e->n++;
}

void zt_config_errors_take(zt_config_errors *e, zt_status st, int n_before)
{
    if (st != ZT_OK && e->n == n_before)
        zt_config_errors_add(e, 0, st, zt_status_message(), zt_status_hint());
}

zt_status zt_config_errors_report(const zt_config_errors *e, const char *name)
{
    if (e->n == 0)
        return ZT_OK;
    if (e->n == 1)
        return zt_fail(e->e[0].st, e->e[0].hint[0] ? e->e[0].hint : NULL, "%s", e->e[0].msg);
    int kept = e->n < ZT_CONFIG_MAX_ERRORS ? e->n : ZT_CONFIG_MAX_ERRORS;
    int order[ZT_CONFIG_MAX_ERRORS] = {0};
    for (int i = 0; i < kept; i++)
        order[i] = i;
    /* Insertion sort by line (stable): the file read top to bottom; errors
     * without a line (between keys) come last. */
    for (int i = 1; i < kept; i++) {
        int v = order[i], j = i;
        int lv = e->e[v].line > 0 ? e->e[v].line : 1 << 30;
        while (j > 0 && (e->e[order[j - 1]].line > 0 ? e->e[order[j - 1]].line : 1 << 30) > lv) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    char text[7168];
    size_t len = (size_t)snprintf(text, sizeof text, "%s: %d errors:", name, e->n);
    int shown = 0;
    for (; shown < kept && len + 16 < sizeof text; shown++) {
        const zt_config_error *x = &e->e[order[shown]];
        size_t need = strlen(x->msg) + strlen(x->hint) + 16;
        if (len + need + 48 >= sizeof text)
            break;
        len += (size_t)snprintf(text + len, sizeof text - len, "\n  %s", x->msg);
        if (x->hint[0])
            len += (size_t)snprintf(text + len, sizeof text - len, "\n      hint: %s", x->hint);
    }
    if (shown < e->n)
        snprintf(text + len, sizeof text - len, "\n  ... and %d more", e->n - shown);
    zt_status st = e->e[order[0]].st;
    for (int i = 0; i < kept; i++)
        if (e->e[i].st == ZT_ERR_CONFIG)
            st = ZT_ERR_CONFIG;
    return zt_fail(st, "fix every line above: zerotrain lists all errors of a config in one run",
                   "%s", text);
}

/* ------------------------------------------------------------------ text preparation */

/* Blanks comments and trailing commas with spaces, keeping every newline, so
 * jansson's line:column stay those of the file as written. */
zt_status zt_config_strip_hjson(const zt_ctx *c, char *s)
{
    if ((unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
        s[0] = s[1] = s[2] = ' ';
    bool in_str = false;
    int line = 1;
    for (char *p = s; *p; p++) {
        if (*p == '\n')
            line++;
        if (in_str) {
            if (*p == '\\' && p[1] && p[1] != '\n')
                p++;
            else if (*p == '"')
                in_str = false;
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                *p++ = ' ';
            if (!*p)
                break;
            line++;
        } else if (p[0] == '/' && p[1] == '*') {
            int start = line;
            p[0] = p[1] = ' ';
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++) {
                if (*p == '\n')
                    line++;
                else
                    *p = ' ';
            }
            if (!*p)
                return zt_fail(ZT_ERR_CONFIG, ZT_SYNTAX_HINT, "%s:%d: unterminated /* comment",
                               c->name, start);
            p[0] = p[1] = ' ';
            p++;
        }
    }
    in_str = false;
    for (char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                in_str = false;
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == ',') {
            const char *q = p + 1;
            while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
                q++;
            if (*q == '}' || *q == ']')
                *p = ' ';
        }
    }
    return ZT_OK;
}

static const char *const zt_index_oom = "no memory for the config's key index";

static zt_status zt_index_add(zt_ctx *c, const char *path, int line)
{
    if (c->n_lines == c->cap_lines) {
        size_t cap = c->cap_lines ? 2 * c->cap_lines : 64;
        zt_key_line *v = realloc(c->lines, cap * sizeof *v);
        if (!v)
            return zt_fail(ZT_ERR_OOM, NULL, "%s: %s", c->name, zt_index_oom);
        c->lines = v;
        c->cap_lines = cap;
    }
    char *p = strdup(path);
    if (!p)
        return zt_fail(ZT_ERR_OOM, NULL, "%s: %s", c->name, zt_index_oom);
    c->lines[c->n_lines].path = p;
    c->lines[c->n_lines].line = line;
    c->n_lines++;
    return ZT_OK;
}

/* The hash of the finished index: at most half full. */
static zt_status zt_index_hash(zt_ctx *c)
{
    size_t n = 16;
    while (n < 2 * c->n_lines)
        n *= 2;
    c->slots = calloc(n, sizeof *c->slots);
    c->counts = calloc(c->n_lines ? c->n_lines : 1, sizeof *c->counts);
    if (!c->slots || !c->counts)
        return zt_fail(ZT_ERR_OOM, NULL, "%s: %s", c->name, zt_index_oom);
    c->n_slots = n;
    for (size_t i = 0; i < c->n_lines; i++) {
        size_t *slot = zt_index_slot(c, c->lines[i].path, strlen(c->lines[i].path));
        if (*slot == 0)
            *slot = i + 1;
        c->counts[*slot - 1]++;
    }
    return ZT_OK;
}

/* Records "json.path -> line" for every key by following the nesting of the
 * comment-free text, then hashes the paths. Malformed text only ends the scan
 * early: jansson reports it. */
static zt_status zt_index_scan(zt_ctx *c, const char *s)
{
    enum { MAX_DEPTH = 64 };
    struct {
        bool object;
        size_t path_len;
    } stack[MAX_DEPTH];
    char path[ZT_PATH_MAX] = "";
    char key_path[ZT_PATH_MAX] = ""; /* path of the last key read, until its value opens */
    int depth = 0, line = 1;
    bool expect_key = false, have_key = false;

    for (const char *p = s; *p; p++) {
        switch (*p) {
        case '\n':
            line++;
            break;
        case '"': {
            char key[ZT_PATH_MAX];
            size_t n = 0;
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                if (*p == '\n')
                    line++;
                if (n + 1 < sizeof key)
                    key[n++] = *p;
            }
            if (!*p)
                return ZT_OK;
            key[n] = '\0';
            if (depth > 0 && stack[depth - 1].object && expect_key) {
                zt_config_join(key_path, path, key);
                ZT_TRY(zt_index_add(c, key_path, line));
                expect_key = false;
                have_key = true;
            }
            break;
        }
        case '{':
        case '[':
            if (depth == MAX_DEPTH)
                return ZT_OK;
            stack[depth].object = *p == '{';
            stack[depth].path_len = strlen(path);
            if (depth > 0 && stack[depth - 1].object && have_key)
                snprintf(path, sizeof path, "%s", key_path);
            else if (depth > 0 && !stack[depth - 1].object)
                strncat(path, "[]", sizeof path - strlen(path) - 1);
            depth++;
            expect_key = *p == '{';
            have_key = false;
            break;
        case '}':
        case ']':
            if (depth == 0)
                return ZT_OK;
            depth--;
            path[stack[depth].path_len] = '\0';
            expect_key = have_key = false;
            break;
        case ',':
            expect_key = depth > 0 && stack[depth - 1].object;
            have_key = false;
            break;
        default:
            break;
        }
    }
    return ZT_OK;
}

zt_status zt_config_index_keys(zt_ctx *c, const char *s)
{
    ZT_TRY(zt_index_scan(c, s));
    return zt_index_hash(c);
}

/* How many times the index holds the first `len` characters of a path as a
 * path of its own. */
static int zt_index_count(const zt_ctx *c, const char *path, size_t len)
{
    ptrdiff_t i = zt_index_first(c, path, len);
    return i >= 0 ? c->counts[i] : 0;
}

/* A path the index recorded twice is a duplicate key. Keys inside arrays
 * ("x[].k") are skipped: two array elements may hold the same key; so are
 * keys inside a duplicated object (the object is the one error). */
void zt_config_duplicate_keys(const zt_ctx *c)
{
    for (size_t i = 0; i < c->n_lines; i++) {
        const char *p = c->lines[i].path;
        if (strstr(p, "[]"))
            continue;
        bool inside_dup = false;
        for (const char *d = strchr(p, '.'); d && !inside_dup; d = strchr(d + 1, '.'))
            inside_dup = zt_index_count(c, p, (size_t)(d - p)) > 1;
        if (inside_dup)
            continue;
        ptrdiff_t first = zt_index_first(c, p, strlen(p));
        if (first < 0 || (size_t)first == i)
            continue;
        const char *dot = strrchr(p, '.');
        char what[ZT_PATH_MAX + 128];
        snprintf(what, sizeof what,
                 "%s:%d: Duplicate keys in DeepSpeed config: ['%s'] (%s is given twice, first "
                 "at line %d)",
                 c->name, c->lines[i].line, dot ? dot + 1 : p, p, c->lines[first].line);
        zt_fail(ZT_ERR_CONFIG, "remove one of the two", "%s", what);
        if (c->errs)
            zt_config_errors_add(c->errs, c->lines[i].line, ZT_ERR_CONFIG, what,
                                 "remove one of the two");
    }
}

zt_status zt_config_load_json(const zt_ctx *c, const char *text, json_t **root)
{
    json_error_t err;
    *root = json_loads(text, 0, &err);
    if (!*root) {
        return zt_fail(ZT_ERR_CONFIG, ZT_SYNTAX_HINT, "%s:%d:%d: %s", c->name, err.line,
                       err.column, err.text);
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return zt_fail(ZT_ERR_CONFIG, "a DeepSpeed config is one JSON object: { ... }",
                       "%s: the config must be a JSON object", c->name);
    }
    return ZT_OK;
}
