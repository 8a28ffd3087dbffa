/*
 * tokenizer: the char and byte tokenizers, UTF-8 checking and decoding, and
 * the public entry points of data/tokenizer.h, which hand BPE work to bpe.c
 * (through tokenizer_impl.h).
 */
#include "data/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "data/datamem.h"
#include "data/tokenizer_impl.h"

#define ZT_BYTE_EOT 256
#define ZT_BYTE_PAD 257
#define ZT_BYTE_VOCAB 258

#define ZT_UTF8_HINT                                                                               \
    "the data must be UTF-8 text: convert it (e.g. iconv -f latin1 -t utf-8 FILE > OUT)"

/* ------------------------------------------------------------------- UTF-8 */

size_t zt_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp, const char **why)
{
    unsigned b0 = s[0];
    size_t n;
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    if (b0 < 0xC0) {
        *why = "unexpected continuation byte";
        return 0;
    }
    if (b0 < 0xC2) {
        *why = "overlong encoding";
        return 0;
    }
    if (b0 < 0xE0) {
        n = 2;
        *cp = b0 & 0x1F;
    } else if (b0 < 0xF0) {
        n = 3;
        *cp = b0 & 0x0F;
    } else if (b0 < 0xF5) {
        n = 4;
        *cp = b0 & 0x07;
    } else {
        *why = "invalid lead byte";
        return 0;
    }
    for (size_t k = 1; k < n; k++) {
        if (k >= len || (s[k] & 0xC0) != 0x80) {
            *why = "truncated sequence";
            return 0;
        }
        *cp = (*cp << 6) | (s[k] & 0x3F);
    }
    if ((n == 3 && *cp < 0x800) || (n == 4 && *cp < 0x10000)) {
        *why = "overlong encoding";
        return 0;
    }
    if (*cp >= 0xD800 && *cp <= 0xDFFF) {
        *why = "UTF-16 surrogate";
        return 0;
    }
    if (*cp > 0x10FFFF) {
        *why = "beyond U+10FFFF";
        return 0;
    }
    return n;
}

size_t zt_utf8_next(const unsigned char *s, uint32_t *cp)
{
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    if (b0 < 0xE0) {
        *cp = ((b0 & 0x1Fu) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (b0 < 0xF0) {
        *cp = ((b0 & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        return 3;
    }
    *cp = ((b0 & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

size_t zt_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static long long line_of(const char *buf, size_t off)
{
    long long line = 1;
    const char *p = buf, *end = buf + off;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        line++;
        p++;
    }
    return line;
}

zt_status zt_utf8_check_from(const char *buf, size_t len, const char *what, long long line,
                             uint64_t offset)
{
    const unsigned char *s = (const unsigned char *)buf;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        const char *why = "";
        size_t k = zt_utf8_decode(s + i, len - i, &cp, &why);
        if (!k)
            return zt_fail(ZT_ERR_DATA, ZT_UTF8_HINT,
                           "%s:%lld: invalid UTF-8 byte 0x%02X at offset %llu (%s)", what,
                           line - 1 + line_of(buf, i), s[i],
                           (unsigned long long)(offset + i), why);
        i += k;
    }
    return ZT_OK;
}

zt_status zt_utf8_check(const char *buf, size_t len, const char *what)
{
    return zt_utf8_check_from(buf, len, what, 1, 0);
}

/* ------------------------------------------------------------ id vectors */

zt_status zt_id_vec_reserve(zt_id_vec *a, int64_t extra)
{
    if (a->n + extra <= a->cap)
        return ZT_OK;
    int64_t cap = a->cap ? a->cap : 1024;
    while (cap < a->n + extra)
        cap *= 2;
    int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v)
        return zt_datamem_oom(a->what ? a->what : "a text", (uint64_t)cap * sizeof *v,
                              "token ids being encoded", a->text_bytes);
    a->v = v;
    a->cap = cap;
    return ZT_OK;
}

/* ------------------------------------------------------------------- char */

typedef struct {
    uint32_t *cps;      /* sorted unique code points; id = index */
    int32_t ascii[128]; /* id of each ASCII code point, -1 when absent */
} zt_char_vocab;

static int32_t char_id(const zt_char_vocab *cv, int64_t n, uint32_t cp)
{
    if (cp < 128)
        return cv->ascii[cp];
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cv->cps[mid] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && cv->cps[lo] == cp ? (int32_t)lo : -1;
}

void zt_char_seen_add(uint8_t *seen, const char *text, size_t len, int64_t *count)
{
    const unsigned char *s = (const unsigned char *)text;
    int64_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += zt_utf8_next(s + i, &cp);
        seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
        n++;
    }
    *count += n;
}

zt_status zt_tokenizer_char_from_seen(zt_tokenizer *t, const uint8_t *seen, const char *what,
                                      uint64_t text_bytes)
{
    *t = (zt_tokenizer){0};
    enum { N_CP = 0x110000 };
    int64_t n = 0;
    for (uint32_t cp = 0; cp < N_CP; cp++)
        n += (seen[cp >> 3] >> (cp & 7)) & 1;
    if (n == 0)
        return zt_fail(ZT_ERR_DATA, "give a non-empty text file",
                       "%s: empty text: no characters to build a vocabulary from", what);
    zt_char_vocab *cv = calloc(1, sizeof *cv);
    if (!cv)
        return zt_datamem_oom(what, sizeof *cv, "the char vocabulary", text_bytes);
    cv->cps = malloc((size_t)n * sizeof *cv->cps);
    if (!cv->cps) {
        free(cv);
        return zt_datamem_oom(what, (uint64_t)n * sizeof *cv->cps, "the char vocabulary",
                              text_bytes);
    }
    int64_t k = 0;
    for (uint32_t cp = 0; cp < N_CP; cp++)
        if (seen[cp >> 3] & (1u << (cp & 7)))
            cv->cps[k++] = cp;
    for (int c = 0; c < 128; c++)
        cv->ascii[c] = -1;
    for (int64_t i = 0; i < n && cv->cps[i] < 128; i++)
        cv->ascii[cv->cps[i]] = (int32_t)i;
    *t = (zt_tokenizer){.kind = ZT_TOK_CHAR,
                        .vocab_size = n,
                        .eot_id = -1,
                        .pad_id = 0,
                        .start_id = cv->ascii['\n'] >= 0 ? cv->ascii['\n'] : 0,
                        .impl = cv};
    return ZT_OK;
}

zt_status zt_tokenizer_char_init(zt_tokenizer *t, const char *text, size_t len, const char *what)
{
    *t = (zt_tokenizer){0};
    ZT_TRY(zt_utf8_check(text, len, what));
    /* A bitmap over all code points: one pass, sorted for free. */
    uint8_t *seen = calloc(ZT_CHAR_SEEN_BYTES, 1);
    if (!seen)
        return zt_datamem_oom(what, ZT_CHAR_SEEN_BYTES, "the char vocabulary's bitmap", len);
    int64_t count = 0;
    zt_char_seen_add(seen, text, len, &count);
    zt_status st = zt_tokenizer_char_from_seen(t, seen, what, len);
    free(seen);
    return st;
}

static zt_status char_encode(const zt_tokenizer *t, const char *text, size_t len, const char *what,
                             zt_id_vec *out)
{
    const zt_char_vocab *cv = t->impl;
    const unsigned char *s = (const unsigned char *)text;
    ZT_TRY(zt_id_vec_reserve(out, (int64_t)len));
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = zt_utf8_next(s + i, &cp);
        int32_t id = char_id(cv, t->vocab_size, cp);
        if (id < 0)
            return zt_fail(ZT_ERR_DATA,
                           "the char vocabulary is the training text's own characters; "
                           "text to encode may only use those",
                           "%s:%lld: character U+%04X is not in the vocabulary (%lld symbols)",
                           what, line_of(text, i), (unsigned)cp, (long long)t->vocab_size);
        out->v[out->n++] = id;
        i += k;
    }
    return ZT_OK;
}

/* -------------------------------------------------------------------- byte */

zt_status zt_tokenizer_byte_init(zt_tokenizer *t)
{
    *t = (zt_tokenizer){.kind = ZT_TOK_BYTE,
                        .vocab_size = ZT_BYTE_VOCAB,
                        .eot_id = ZT_BYTE_EOT,
                        .pad_id = ZT_BYTE_PAD,
                        .start_id = ZT_BYTE_EOT};
    return ZT_OK;
}

/* ----------------------------------------------------------------- common */

void zt_tokenizer_free(zt_tokenizer *t)
{
    if (!t)
        return;
    if (t->kind == ZT_TOK_CHAR && t->impl) {
        zt_char_vocab *cv = t->impl;
        free(cv->cps);
        free(cv);
    } else if (t->kind == ZT_TOK_BPE) {
        zt_bpe_free(t->impl);
    }
    *t = (zt_tokenizer){0};
}

zt_status zt_tokenizer_encode_into(const zt_tokenizer *t, const char *text, size_t len,
                                   const char *what, zt_id_vec *out)
{
    switch (t->kind) {
    case ZT_TOK_CHAR:
        return char_encode(t, text, len, what, out);
    case ZT_TOK_BYTE:
        ZT_TRY(zt_id_vec_reserve(out, (int64_t)len));
        for (size_t i = 0; i < len; i++)
            out->v[out->n++] = (unsigned char)text[i];
        return ZT_OK;
    case ZT_TOK_BPE:
        return zt_bpe_encode(t, text, len, out);
    }
    return ZT_OK;
}

zt_status zt_tokenizer_encode(const zt_tokenizer *t, const char *text, size_t len, const char *what,
                              int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    ZT_TRY(zt_utf8_check(text, len, what));
    zt_id_vec out = {.what = what, .text_bytes = len};
    /* A first block even for empty text: callers get a pointer they can free. */
    zt_status st = zt_id_vec_reserve(&out, 1);
    if (st == ZT_OK)
        st = zt_tokenizer_encode_into(t, text, len, what, &out);
    if (st != ZT_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n = out.n;
    return ZT_OK;
}

uint64_t zt_tokenizer_host_bytes(const zt_tokenizer *t)
{
    if (t->kind == ZT_TOK_CHAR && t->impl)
        return sizeof(zt_char_vocab) + (uint64_t)t->vocab_size * sizeof(uint32_t);
    if (t->kind == ZT_TOK_BPE)
        return zt_bpe_host_bytes(t->impl);
    return 0;
}

void zt_tokenizer_trim(zt_tokenizer *t)
{
    if (t->kind == ZT_TOK_BPE)
        zt_bpe_trim(t->impl);
}

/* The bytes one id decodes to: a pointer into the tables or into tmp. */
static size_t token_bytes(const zt_tokenizer *t, int32_t id, char tmp[4], const char **p)
{
    switch (t->kind) {
    case ZT_TOK_CHAR:
        *p = tmp;
        return zt_utf8_put(((const zt_char_vocab *)t->impl)->cps[id], tmp);
    case ZT_TOK_BYTE:
        if (id == ZT_BYTE_EOT) {
            *p = ZT_EOT_TEXT;
            return sizeof ZT_EOT_TEXT - 1;
        }
        tmp[0] = (char)id;
        *p = tmp;
        return id == ZT_BYTE_PAD ? 0 : 1;
    case ZT_TOK_BPE:
        /* <|endoftext|> doubles as the pad id and decodes as itself. */
        return zt_bpe_token_bytes(t->impl, id, p);
    }
    return 0;
}

zt_status zt_tokenizer_decode(const zt_tokenizer *t, const int32_t *ids, int64_t n, char **text,
                              size_t *len)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    char tmp[4];
    const char *p = NULL;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return zt_fail(ZT_ERR_DATA, "ids come from a tokenizer with a different vocabulary?",
                           "token id %d at position %lld is outside the vocabulary [0, %lld)",
                           ids[i], (long long)i, (long long)t->vocab_size);
        total += token_bytes(t, ids[i], tmp, &p);
    }
    char *out = malloc(total + 1);
    if (!out)
        return zt_fail(ZT_ERR_OOM, "decode fewer tokens, or give the job more memory",
                       "out of memory decoding %lld tokens: cannot allocate %zu bytes",
                       (long long)n, total + 1);
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t m = token_bytes(t, ids[i], tmp, &p);
        memcpy(out + k, p, m);
        k += m;
    }
    out[k] = '\0';
    *text = out;
    *len = k;
    return ZT_OK;
}
