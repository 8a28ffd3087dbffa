/*
 * labelled: the IMDB loaders (labelled.h).
 *
 * Choices the header leaves open: a UTF-8 byte order mark before the CSV
 * header is skipped; blank lines between CSV records are skipped and do not
 * count as rows; a closing quote must be followed by a comma or the end of the
 * record; a quote inside an unquoted field is kept as text (as Python's csv
 * does); a row with more fields than the header is refused (most likely an
 * unquoted comma in a review, which would cut it short); a file whose lines
 * end in a carriage return alone is refused as such. Review text is kept as is
 * apart from `<br />` (no trimming: leading spaces change BPE tokens), but a
 * review with nothing but whitespace is an error. Directory listings are
 * sorted by strcmp, so "10_7.txt" comes before "2_3.txt". Each split must end
 * up with at least one review.
 */
#include "data/labelled.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/datamem.h"
#include "data/tokenizer_impl.h"
#include "engine/path.h"
#include "engine/quote.h"

#define ZT_CSV_HINT                                                                                \
    "expected a CSV file with a header naming the columns review and sentiment (labels "           \
    "positive / negative), or an aclImdb directory"
#define ZT_CSV_HINT_CR                                                                             \
    "its lines end in a carriage return (\\r) where \\n or \\r\\n was expected: convert the "      \
    "line endings, e.g. tr '\\r' '\\n' < FILE > FIXED.csv"
#define ZT_ACLIMDB_HINT                                                                            \
    "expected the aclImdb layout: train/pos/*.txt and train/neg/*.txt, optionally test/pos "       \
    "and test/neg"

/* One split's reviews, their tokens back to back at id_bytes each. */
typedef struct {
    void *tokens;
    int id_bytes;
    int64_t n_tokens, tokens_cap;
    int64_t *off;
    int32_t *len, *label;
    int64_t n, cap;
} zt_reviews;

/* The budget's message while reviews are read: their count is known at the
 * end only. */
#define REVIEWS_COUNTED " (reviews are counted as they are read)"

/* Bytes of one review's index entry: its offset, length and label. */
#define REVIEW_INDEX_BYTES (sizeof(int64_t) + 2 * sizeof(int32_t))

typedef struct {
    zt_reviews split[2]; /* train, val */
    zt_data_memory memory;
    const zt_data_budget *budget;
    const char *path; /* the --data path, for the budget's message */
} zt_labelled_impl;

static void labelled_get(const zt_dataset *ds, int64_t index, zt_sample *out)
{
    const zt_reviews *r = ds->impl;
    zt_ids_load(out->tokens, r->tokens, r->id_bytes, r->off[index], r->len[index]);
    out->labels[0] = r->label[index];
    out->length = r->len[index];
}

/* zt_labelled_free owns everything the data sets point to. */
static void labelled_dataset_free(zt_dataset *ds) { (void)ds; }

static void reviews_free(zt_reviews *r)
{
    free(r->tokens);
    free(r->off);
    free(r->len);
    free(r->label);
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' ||
              s[i] == '\v'))
            return false;
    return true;
}

/* Replaces each `<br />` in s[0, *n) by one space, in place. */
static void strip_br(char *s, size_t *n)
{
    static const char br[] = "<br />";
    const size_t brn = sizeof br - 1;
    size_t k = 0;
    for (size_t i = 0; i < *n;) {
        if (*n - i >= brn && memcmp(s + i, br, brn) == 0) {
            s[k++] = ' ';
            i += brn;
        } else {
            s[k++] = s[i++];
        }
    }
    *n = k;
}

/* Room for one more review and `keep` more tokens in r, checked against the
 * budget. */
static zt_status reviews_grow(zt_labelled_impl *li, zt_reviews *r, int64_t keep, const char *where)
{
    zt_data_memory *m = &li->memory;
    if (r->n == r->cap) {
        int64_t cap = zt_datamem_grow(m, li->budget, (uint64_t)r->cap * REVIEW_INDEX_BYTES, r->cap,
                                      r->n + 1, 1024, REVIEW_INDEX_BYTES);
        m->index_bytes += (uint64_t)(r->n + 1 - r->cap) * REVIEW_INDEX_BYTES;
        zt_status st = zt_datamem_fit(m, li->budget, li->path, REVIEWS_COUNTED);
        m->index_bytes -= (uint64_t)(r->n + 1 - r->cap) * REVIEW_INDEX_BYTES;
        ZT_TRY(st);
        int64_t *off = realloc(r->off, (size_t)cap * sizeof *off);
        if (off)
            r->off = off;
        int32_t *len = realloc(r->len, (size_t)cap * sizeof *len);
        if (len)
            r->len = len;
        int32_t *lab = realloc(r->label, (size_t)cap * sizeof *lab);
        if (lab)
            r->label = lab;
        if (!off || !len || !lab)
            return zt_datamem_oom(where, (uint64_t)cap * REVIEW_INDEX_BYTES,
                                  "the review index (an offset, a length and a label a review)",
                                  m->file_bytes);
        m->index_bytes += (uint64_t)(cap - r->cap) * REVIEW_INDEX_BYTES;
        r->cap = cap;
        zt_datamem_update(m);
    }
    if (r->n_tokens + keep > r->tokens_cap) {
        uint64_t w = (uint64_t)r->id_bytes;
        int64_t need = r->n_tokens + keep;
        int64_t cap = zt_datamem_grow(m, li->budget, (uint64_t)r->tokens_cap * w, r->tokens_cap,
                                      need, 1 << 20, w);
        m->ids_bytes += (uint64_t)(need - r->tokens_cap) * w;
        m->tokens += keep;
        zt_status st = zt_datamem_fit(m, li->budget, li->path, REVIEWS_COUNTED);
        m->ids_bytes -= (uint64_t)(need - r->tokens_cap) * w;
        m->tokens -= keep;
        ZT_TRY(st);
        void *t = realloc(r->tokens, (size_t)cap * w);
        if (!t)
            return zt_datamem_oom(where, (uint64_t)cap * w, "the review tokens", m->file_bytes);
        m->ids_bytes += (uint64_t)(cap - r->tokens_cap) * w;
        r->tokens = t;
        r->tokens_cap = cap;
        zt_datamem_update(m);
    }
    return ZT_OK;
}

/* Tokenises text (already UTF-8 checked: `where` names it, "FILE:LINE" or
 * "FILE") and appends it, truncated to max_len tokens, to r. */
static zt_status reviews_add(zt_labelled_impl *li, zt_reviews *r, const zt_tokenizer *tok,
                             int64_t max_len, char *text, size_t n, int32_t label,
                             const char *where)
{
    strip_br(text, &n);
    if (is_blank(text, n))
        return zt_fail(ZT_ERR_DATA, "remove empty reviews from the data",
                       "%s: the review is empty (after replacing <br /> with spaces)", where);
    zt_id_vec ids = {.what = where, .text_bytes = li->memory.file_bytes};
    zt_status st = zt_tokenizer_encode_into(tok, text, n, where, &ids);
    int64_t keep = ids.n < max_len ? ids.n : max_len;
    if (st == ZT_OK)
        st = reviews_grow(li, r, keep, where);
    if (st == ZT_OK) {
        zt_ids_store(r->tokens, r->id_bytes, r->n_tokens, ids.v, keep);
        r->off[r->n] = r->n_tokens;
        r->len[r->n] = (int32_t)keep;
        r->label[r->n] = label;
        r->n++;
        r->n_tokens += keep;
        li->memory.tokens += keep;
    }
    free(ids.v);
    return st;
}

/* ------------------------------------------------------------------- CSV */

typedef struct {
    const char *path;
    uint64_t file_bytes;
    const char *p, *end;
    long long line; /* of p */
    char *text;     /* the current record's unescaped fields, back to back */
    size_t text_cap;
    size_t *field_off, *field_len;
    size_t n_fields, fields_cap;
} zt_csv;

/* Room for one more byte of the record's text: it grows with the longest
 * record, never to the file's size. */
static zt_status csv_text_grow(zt_csv *c, size_t used)
{
    if (used < c->text_cap)
        return ZT_OK;
    size_t cap = c->text_cap ? 2 * c->text_cap : 1 << 16;
    char *t = realloc(c->text, cap);
    if (!t)
        return zt_datamem_oom(c->path, cap, "the text of one CSV record", c->file_bytes);
    c->text = t;
    c->text_cap = cap;
    return ZT_OK;
}

static zt_status csv_fields_grow(zt_csv *c)
{
    if (c->n_fields < c->fields_cap)
        return ZT_OK;
    size_t cap = c->fields_cap ? 2 * c->fields_cap : 16;
    size_t *off = realloc(c->field_off, cap * sizeof *off);
    if (off)
        c->field_off = off;
    size_t *len = realloc(c->field_len, cap * sizeof *len);
    if (len)
        c->field_len = len;
    if (!off || !len)
        return zt_datamem_oom(c->path, 2 * cap * sizeof *off, "the fields of one CSV record",
                              c->file_bytes);
    c->fields_cap = cap;
    return ZT_OK;
}

#define CSV_PUT(c, used, ch)                          \
    do {                                              \
        ZT_TRY(csv_text_grow((c), (used)));           \
        (c)->text[(used)++] = (ch);                   \
    } while (0)

/* Reads the next RFC 4180 record: *start is its first line, 0 at the end of
 * the file. Fields are c->text[field_off[i], + field_len[i]). */
static zt_status csv_record(zt_csv *c, long long *start)
{
    c->n_fields = 0;
    *start = c->p < c->end ? c->line : 0;
    if (!*start)
        return ZT_OK;
    size_t used = 0;
    /* Fields point into the text even when they are all empty. */
    ZT_TRY(csv_text_grow(c, used));
    for (;;) {
        ZT_TRY(csv_fields_grow(c));
        size_t f0 = used;
        if (c->p < c->end && *c->p == '"') {
            long long opened = c->line;
            c->p++;
            for (;;) {
                if (c->p == c->end)
                    return zt_fail(ZT_ERR_DATA, "close the quoted field with \"",
                                   "%s:%lld: unterminated quoted field (the quote opened on "
                                   "line %lld is never closed)",
                                   c->path, *start, opened);
                if (*c->p == '"') {
                    if (c->p + 1 < c->end && c->p[1] == '"') {
                        CSV_PUT(c, used, '"');
                        c->p += 2;
                        continue;
                    }
                    c->p++;
                    break;
                }
                if (*c->p == '\n')
                    c->line++;
                CSV_PUT(c, used, *c->p++);
            }
            bool at_end = c->p == c->end || *c->p == ',' || *c->p == '\n' ||
                          (*c->p == '\r' && c->p + 1 < c->end && c->p[1] == '\n');
            /* A quote that ran over lines was most likely never closed where
             * it opened: the error belongs to that line. */
            if (!at_end && opened != c->line)
                return zt_fail(ZT_ERR_DATA,
                               "close the quoted field with \" on the line it opens (a quote "
                               "inside a quoted field is written \"\")",
                               "%s:%lld: a quoted field opens here and runs on to line %lld, where "
                               "its closing quote is followed by text: is a closing quote missing "
                               "on line %lld?",
                               c->path, opened, c->line, opened);
            if (!at_end)
                return zt_fail(ZT_ERR_DATA, "a quote inside a quoted field is written \"\"",
                               "%s:%lld: unexpected text after the closing quote of a field",
                               c->path, c->line);
        } else {
            while (c->p < c->end && *c->p != ',' && *c->p != '\n' &&
                   !(*c->p == '\r' && c->p + 1 < c->end && c->p[1] == '\n'))
                CSV_PUT(c, used, *c->p++);
        }
        c->field_off[c->n_fields] = f0;
        c->field_len[c->n_fields] = used - f0;
        c->n_fields++;
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end) {
            c->p += *c->p == '\r' ? 2 : 1;
            c->line++;
        }
        return ZT_OK;
    }
}

static void trim(const char **s, size_t *n)
{
    while (*n && is_blank(*s, 1)) {
        (*s)++;
        (*n)--;
    }
    while (*n && is_blank(*s + *n - 1, 1))
        (*n)--;
}

static bool field_is(const zt_csv *c, size_t i, const char *name)
{
    const char *s = c->text + c->field_off[i];
    size_t n = c->field_len[i];
    trim(&s, &n);
    return n == strlen(name) && memcmp(s, name, n) == 0;
}

static zt_status csv_header(zt_csv *c, size_t *col_review, size_t *col_label)
{
    long long start;
    ZT_TRY(csv_record(c, &start));
    if (!start)
        return zt_fail(ZT_ERR_DATA, ZT_CSV_HINT, "%s: empty file", c->path);
    *col_review = *col_label = SIZE_MAX;
    for (size_t i = 0; i < c->n_fields; i++) {
        if (*col_review == SIZE_MAX && field_is(c, i, "review"))
            *col_review = i;
        if (*col_label == SIZE_MAX && field_is(c, i, "sentiment"))
            *col_label = i;
    }
    if (*col_review == SIZE_MAX || *col_label == SIZE_MAX) {
        bool has_cr = false;
        for (size_t i = 0; i < c->n_fields && !has_cr; i++)
            has_cr = memchr(c->text + c->field_off[i], '\r', c->field_len[i]) != NULL;
        char cols[2 * ZT_QUOTE_CAP] = "";
        for (size_t i = 0, k = 0; i < c->n_fields && i < 8 && k + 1 < sizeof cols; i++) {
            char q[ZT_QUOTE_CAP];
            k += (size_t)snprintf(cols + k, sizeof cols - k, "%s\"%s\"", i ? ", " : "",
                                  zt_quote(q, sizeof q, c->text + c->field_off[i],
                                           c->field_len[i]));
        }
        return zt_fail(ZT_ERR_DATA, has_cr ? ZT_CSV_HINT_CR : ZT_CSV_HINT,
                       "%s:%lld: the header has no \"%s\" column (its columns: %s)", c->path, start,
                       *col_review == SIZE_MAX ? "review" : "sentiment", cols);
    }
    return ZT_OK;
}

static zt_status csv_load(zt_labelled_impl *li, const zt_tokenizer *tok, int64_t max_len,
                          const char *path, char *buf, size_t len)
{
    ZT_TRY(zt_utf8_check(buf, len, path));
    /* Classic Mac OS line endings: the whole file would read as one record. */
    if (memchr(buf, '\r', len) && !memchr(buf, '\n', len))
        return zt_fail(ZT_ERR_DATA, ZT_CSV_HINT_CR,
                       "%s: its lines end in a carriage return alone, so it reads as one line",
                       path);
    zt_csv c = {.path = path, .file_bytes = len, .p = buf, .end = buf + len, .line = 1};
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
        c.p += 3;
    zt_status st;
    size_t col_review = 0, col_label = 0;
    ZT_TRY_GOTO(st, csv_header(&c, &col_review, &col_label), done);
    size_t need = (col_review > col_label ? col_review : col_label) + 1, n_cols = c.n_fields;
    for (int64_t row = 0;;) {
        long long start;
        ZT_TRY_GOTO(st, csv_record(&c, &start), done);
        if (!start)
            break;
        if (c.n_fields == 1 && c.field_len[0] == 0)
            continue;
        char where[4096];
        snprintf(where, sizeof where, "%s:%lld", path, start);
        if (c.n_fields < need) {
            st = zt_fail(ZT_ERR_DATA, ZT_CSV_HINT,
                         "%s: too few columns (%zu; the header's review and sentiment need %zu)",
                         where, c.n_fields, need);
            goto done;
        }
        if (c.n_fields > n_cols) {
            st = zt_fail(ZT_ERR_DATA,
                         "quote a review that contains a comma: \"good, not great\",positive",
                         "%s: too many columns (%zu where the header has %zu; expected "
                         "review,sentiment): is a review with a comma unquoted?",
                         where, c.n_fields, n_cols);
            goto done;
        }
        const char *lab = c.text + c.field_off[col_label];
        size_t lab_n = c.field_len[col_label];
        trim(&lab, &lab_n);
        int32_t label;
        if (lab_n == 8 && memcmp(lab, "positive", 8) == 0) {
            label = 1;
        } else if (lab_n == 8 && memcmp(lab, "negative", 8) == 0) {
            label = 0;
        } else {
            char q[ZT_QUOTE_CAP];
            st = zt_fail(ZT_ERR_DATA, "labels are positive or negative",
                         "%s: unknown label \"%s\"", where, zt_quote(q, sizeof q, lab, lab_n));
            goto done;
        }
        zt_reviews *r = &li->split[row % 10 == 9];
        ZT_TRY_GOTO(st,
                    reviews_add(li, r, tok, max_len, c.text + c.field_off[col_review],
                                c.field_len[col_review], label, where),
                    done);
        row++;
    }
    st = ZT_OK;
done:
    free(c.text);
    free(c.field_off);
    free(c.field_len);
    return st;
}

/* ---------------------------------------------------------------- aclImdb */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The *.txt names in dir, sorted. */
static zt_status list_txt(const char *dir, char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d && errno == ENOENT)
        return zt_fail(ZT_ERR_DATA, ZT_ACLIMDB_HINT, "%s: %s", dir, strerror(errno));
    if (!d)
        return zt_path_fail(errno, dir, "review directory", ZT_ACLIMDB_HINT);
    size_t cap = 0;
    zt_status st = ZT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len < 4 || strcmp(e->d_name + len - 4, ".txt") != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            char **nn = realloc(*names, cap * sizeof *nn);
            if (!nn) {
                st = zt_datamem_oom(dir, cap * sizeof *nn, "the list of its review files", 0);
                break;
            }
            *names = nn;
        }
        if (!((*names)[*n] = strdup(e->d_name))) {
            st = zt_datamem_oom(dir, len + 1, "the list of its review files", 0);
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (st == ZT_OK && *n == 0)
        st = zt_fail(ZT_ERR_DATA, ZT_ACLIMDB_HINT, "%s: empty directory: no *.txt reviews", dir);
    if (st != ZT_OK) {
        names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return st;
    }
    qsort(*names, *n, sizeof **names, cmp_str);
    return ZT_OK;
}

/* Reads split/pos then split/neg. With `tenth` set, every tenth review goes
 * to the validation split instead of `r`. */
static zt_status dir_load_split(zt_labelled_impl *li, zt_reviews *r, bool tenth,
                                const zt_tokenizer *tok, int64_t max_len, const char *root,
                                const char *split)
{
    static const char *const sub[2] = {"pos", "neg"};
    int64_t j = 0;
    for (int s = 0; s < 2; s++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s/%s", root, split, sub[s]);
        char **names;
        size_t n;
        ZT_TRY(list_txt(dir, &names, &n));
        zt_status st = ZT_OK;
        for (size_t i = 0; i < n && st == ZT_OK; i++, j++) {
            char file[4096 + 256];
            snprintf(file, sizeof file, "%s/%s", dir, names[i]);
            char *buf = NULL;
            size_t len;
            st = zt_path_read(file, "review file", ZT_ACLIMDB_HINT, -1, false, &buf, &len);
            if (st == ZT_OK) {
                li->memory.file_bytes += len;
                st = zt_utf8_check(buf, len, file);
            }
            if (st == ZT_OK)
                st = reviews_add(li, tenth && j % 10 == 9 ? &li->split[1] : r, tok, max_len, buf,
                                 len, s == 0 ? 1 : 0, file);
            free(buf);
        }
        names_free(names, n);
        ZT_TRY(st);
    }
    return ZT_OK;
}

static zt_status dir_load(zt_labelled_impl *li, const zt_tokenizer *tok, int64_t max_len,
                          const char *root)
{
    char test[4096];
    snprintf(test, sizeof test, "%s/test", root);
    struct stat sb;
    bool has_test = stat(test, &sb) == 0 && S_ISDIR(sb.st_mode);
    ZT_TRY(dir_load_split(li, &li->split[0], !has_test, tok, max_len, root, "train"));
    if (has_test)
        ZT_TRY(dir_load_split(li, &li->split[1], false, tok, max_len, root, "test"));
    return ZT_OK;
}

/* ------------------------------------------------------------------ load */

/* What loading is done with: the arrays cut to what they hold, the
 * tokenizer's cache given back. */
static void labelled_trim(zt_labelled *ld, zt_labelled_impl *li)
{
    zt_data_memory *m = &li->memory;
    m->ids_bytes = m->index_bytes = 0;
    for (int s = 0; s < 2; s++) {
        zt_reviews *r = &li->split[s];
        if (r->n_tokens > 0 && r->n_tokens < r->tokens_cap) {
            void *t = realloc(r->tokens, (size_t)r->n_tokens * (size_t)r->id_bytes);
            if (t) {
                r->tokens = t;
                r->tokens_cap = r->n_tokens;
            }
        }
        if (r->n > 0 && r->n < r->cap) {
            int64_t *off = realloc(r->off, (size_t)r->n * sizeof *off);
            int32_t *len = realloc(r->len, (size_t)r->n * sizeof *len);
            int32_t *lab = realloc(r->label, (size_t)r->n * sizeof *lab);
            /* A failed shrink leaves that array as it was: only ones that
             * all shrank count as cut. */
            r->off = off ? off : r->off;
            r->len = len ? len : r->len;
            r->label = lab ? lab : r->label;
            if (off && len && lab)
                r->cap = r->n;
        }
        m->ids_bytes += (uint64_t)r->tokens_cap * (uint64_t)r->id_bytes;
        m->index_bytes += (uint64_t)r->cap * REVIEW_INDEX_BYTES;
    }
    m->buffer_bytes = 0;
    zt_tokenizer_trim(&ld->tok);
    m->tokenizer_bytes = zt_tokenizer_host_bytes(&ld->tok);
    zt_datamem_update(m);
}

zt_status zt_labelled_load(zt_labelled *ld, const char *path, const char *tokenizer_dir,
                           int64_t max_len, const zt_data_budget *budget)
{
    *ld = (zt_labelled){0};
    if (max_len < 1)
        return zt_fail(ZT_ERR_USAGE, "give --max-len >= 1", "max_len %lld: must be >= 1",
                       (long long)max_len);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return zt_path_fail(errno, path, "data path", "check the --data path");
    zt_labelled_impl *li = calloc(1, sizeof *li);
    if (!li)
        return zt_datamem_oom(path, sizeof *li, "the data set", 0);
    ld->impl = li;
    ld->max_len = max_len;
    li->budget = budget;
    li->path = path;
    zt_data_memory *m = &li->memory;
    zt_status st;
    if (tokenizer_dir)
        ZT_TRY_GOTO(st, zt_tokenizer_bpe_init(&ld->tok, tokenizer_dir), fail);
    else
        ZT_TRY_GOTO(st, zt_tokenizer_byte_init(&ld->tok), fail);
    m->token_bytes = zt_ids_width(ld->tok.vocab_size);
    li->split[0].id_bytes = li->split[1].id_bytes = m->token_bytes;
    m->tokenizer_bytes = zt_tokenizer_host_bytes(&ld->tok);
    if (S_ISDIR(sb.st_mode)) {
        ZT_TRY_GOTO(st, dir_load(li, &ld->tok, max_len, path), fail);
    } else {
        /* The CSV is parsed in memory: the file itself must fit first. */
        m->file_bytes = (uint64_t)sb.st_size;
        m->buffer_bytes = (uint64_t)sb.st_size + 1;
        ZT_TRY_GOTO(st, zt_datamem_fit(m, budget, path, " (the CSV file is read whole)"), fail);
        char *buf;
        size_t len;
        ZT_TRY_GOTO(st,
                    zt_path_read(path, "data file", "check the --data path", -1, false, &buf,
                                 &len),
                    fail);
        zt_datamem_update(m);
        st = len ? csv_load(li, &ld->tok, max_len, path, buf, len)
                 : zt_fail(ZT_ERR_DATA, ZT_CSV_HINT, "%s: empty file", path);
        free(buf);
        if (st != ZT_OK)
            goto fail;
    }
    labelled_trim(ld, li);
    for (int s = 0; s < 2; s++)
        if (li->split[s].n == 0) {
            st = zt_fail(ZT_ERR_DATA,
                         "give more reviews: without test/ every tenth review is held out",
                         "%s: no %s reviews (%lld training, %lld validation)", path,
                         s ? "validation" : "training", (long long)li->split[0].n,
                         (long long)li->split[1].n);
            goto fail;
        }
    zt_dataset common = {.x_numel = 0,
                         .tokens_numel = max_len,
                         .labels_numel = 1,
                         .n_classes = 2,
                         .vocab_size = ld->tok.vocab_size,
                         .pad_id = ld->tok.pad_id,
                         .variable_length = true,
                         .get = labelled_get,
                         .free = labelled_dataset_free,
                         .memory = m};
    ld->train = common;
    ld->train.name = "labelled-train";
    ld->train.n_samples = li->split[0].n;
    ld->train.impl = &li->split[0];
    ld->train.shuffle = true;
    ld->val = common;
    ld->val.name = "labelled-val";
    ld->val.n_samples = li->split[1].n;
    ld->val.impl = &li->split[1];
    ld->val.shuffle = false;
    return ZT_OK;
fail:
    zt_labelled_free(ld);
    return st;
}

void zt_labelled_free(zt_labelled *ld)
{
    if (!ld)
        return;
    zt_labelled_impl *li = ld->impl;
    if (li) {
        reviews_free(&li->split[0]);
        reviews_free(&li->split[1]);
        free(li);
    }
    zt_tokenizer_free(&ld->tok);
    *ld = (zt_labelled){0};
}
