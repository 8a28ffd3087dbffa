/*
 * bpe: GPT-2's byte-level BPE tokenizer (data/tokenizer.h's bpe).
 *
 * BPE follows OpenAI's gpt-2 encoder.py exactly: the pre-tokenisation regex is
 * matched by hand (alternatives tried in order at each position, as a
 * backtracking regex engine would), each piece's UTF-8 bytes become GPT-2's
 * byte symbols, and the lowest-ranked adjacent pair is merged everywhere in the
 * piece (left to right, non-overlapping) until no ranked pair is left. Merges
 * work on token ids rather than strings: a (left id, right id) -> (rank, merged
 * id) table built from vocab.bpe and encoder.json. Pieces repeat a lot in text,
 * so their ids are cached by their bytes; the cache lives in the tokenizer,
 * which makes encoding with one BPE tokenizer single-threaded.
 *
 * Memory: the zt_bpe_vocab (tables, cache, merge scratch) is the tokenizer's
 * impl, freed by zt_bpe_free. Collective: none.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/datamem.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "data/unicode_tables.h"
#include "engine/path.h"
#include "engine/quote.h"
#include "engine/rng.h"

#define ZT_BPE_HINT                                                                                \
    "the tokenizer directory needs GPT-2's encoder.json and vocab.bpe, e.g. from "                 \
    "https://openaipublic.blob.core.windows.net/gpt-2/models/124M/ (the copies in "                \
    "../shared/data/gpt2-bpe are the reference)"

/* The piece cache's first size (it doubles as it fills). */
#define BPE_CACHE_SLOTS ((size_t)1 << 12)

typedef struct {
    int32_t a, b; /* the pair */
    int32_t rank; /* line in vocab.bpe after the version line; -1: empty slot */
    int32_t id;   /* the merged token */
} zt_bpe_merge;

typedef struct {
    size_t key_off, key_len; /* key_len 0: empty slot (pieces are never empty) */
    size_t val_off, val_len;
    uint64_t hash;
} zt_bpe_cache_slot;

typedef struct {
    int32_t rank, pos, a, b, id; /* a merge of symbols a, b at pos and next[pos] into id */
} zt_bpe_pair;

struct zt_bpe_vocab {
    int32_t byte_id[256];
    size_t n_tokens;
    size_t *tok_off, *tok_len; /* (vocab): token i is tok_bytes[tok_off[i], + tok_len[i]) */
    char *tok_bytes;
    size_t tok_bytes_len;
    zt_bpe_merge *merges;
    size_t merge_mask;
    zt_bpe_cache_slot *cache;
    size_t cache_mask, cache_count;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *vals;
    size_t vals_len, vals_cap;
    /* one piece's merge state: symbol ids and links by byte position, the pair heap */
    int32_t *sym, *next, *prev;
    zt_bpe_pair *heap, *pending;
    size_t scratch_cap;
};

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves,
 * the other 68 bytes, in order, for U+0100 onwards. */
static uint32_t gpt2_byte_char(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
            k++;
    return 256 + k;
}

static uint64_t pair_hash(int32_t a, int32_t b)
{
    return zt_rng_mix(((uint64_t)(uint32_t)a << 32) | (uint32_t)b);
}

static const zt_bpe_merge *bpe_merge_find(const zt_bpe_vocab *v, int32_t a, int32_t b)
{
    for (size_t i = pair_hash(a, b) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const zt_bpe_merge *m = &v->merges[i];
        if (m->rank < 0)
            return NULL;
        if (m->a == a && m->b == b)
            return m;
    }
}

void zt_bpe_free(zt_bpe_vocab *v)
{
    if (!v)
        return;
    free(v->tok_off);
    free(v->tok_len);
    free(v->tok_bytes);
    free(v->merges);
    free(v->cache);
    free(v->keys);
    free(v->vals);
    free(v->sym);
    free(v->next);
    free(v->prev);
    free(v->heap);
    free(v->pending);
    free(v);
}

/* encoder.json: token string -> id, every id in [0, n) exactly once; token
 * strings are spelled in GPT-2's byte alphabet. Leaves the parsed object in
 * *root for vocab.bpe's lookups. */
static zt_status bpe_load_encoder(zt_bpe_vocab *v, const char *path, json_t **root,
                                  int64_t *n_tokens, int32_t *eot)
{
    char *buf;
    size_t len;
    ZT_TRY(zt_path_read(path, "tokenizer file", ZT_BPE_HINT, -1, false, &buf, &len));
    json_error_t err;
    *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    free(buf);
    /* Out of memory, jansson returns no value and, where an allocation
     * inside the parser failed, no error text either: that is not a
     * malformed file. */
    if (!*root && (json_error_code(&err) == json_error_out_of_memory || !err.text[0]))
        return zt_fail(ZT_ERR_OOM,
                       "parsed, encoder.json takes several times its size on the host: give the "
                       "job more memory (ulimit -v, the memory cgroup)",
                       "out of memory parsing %s (%zu bytes of JSON)", path, len);
    char q[ZT_QUOTE_CAP];
    if (!*root)
        return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT, "%s:%d:%d: malformed JSON: %s", path, err.line,
                       err.column, zt_quote(q, sizeof q, err.text, strlen(err.text)));
    size_t n = json_object_size(*root);
    if (!json_is_object(*root) || n == 0)
        return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT,
                       "%s: expected a non-empty JSON object of token -> id", path);
    int16_t char_byte[256 + 68];
    for (size_t c = 0; c < sizeof char_byte / sizeof *char_byte; c++)
        char_byte[c] = -1;
    for (unsigned b = 0; b < 256; b++)
        char_byte[gpt2_byte_char(b)] = (int16_t)b;

    /* A token's bytes are never longer than its key's UTF-8. */
    size_t total = 0;
    const char *key;
    json_t *val;
    json_object_foreach(*root, key, val)
    {
        total += strlen(key);
    }
    v->tok_off = malloc(n * sizeof *v->tok_off);
    v->tok_len = calloc(n, sizeof *v->tok_len);
    v->tok_bytes = malloc(total + 1);
    v->n_tokens = n;
    v->tok_bytes_len = total + 1;
    if (!v->tok_off || !v->tok_len || !v->tok_bytes)
        return zt_datamem_oom(path, 2 * n * sizeof *v->tok_off + total + 1,
                              "the token table of encoder.json", 0);
    size_t used = 0;
    json_object_foreach(*root, key, val)
    {
        size_t klen = strlen(key);
        if (klen == 0)
            return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT, "%s: an empty token", path);
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        /* tok_len is 0 only for ids not seen yet, as no token is empty. */
        if (id < 0 || (size_t)id >= n || v->tok_len[id])
            return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT,
                           "%s: token \"%s\": %s; the ids must be the integers 0..%zu, each once",
                           path, zt_quote(q, sizeof q, key, klen),
                           !json_is_integer(val)       ? "the id is not an integer"
                           : id < 0 || (size_t)id >= n ? "the id is out of range"
                                                       : "the id repeats another token's",
                           n - 1);
        v->tok_off[id] = used;
        const unsigned char *s = (const unsigned char *)key;
        for (size_t i = 0; i < klen;) {
            uint32_t cp;
            const char *why = "";
            size_t k = zt_utf8_decode(s + i, klen - i, &cp, &why);
            /* <|endoftext|> is plain ASCII, which the alphabet maps to itself. */
            if (!k || cp >= sizeof char_byte / sizeof *char_byte || char_byte[cp] < 0)
                return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT,
                               "%s: token \"%s\" has a character outside GPT-2's byte alphabet",
                               path, zt_quote(q, sizeof q, key, klen));
            v->tok_bytes[used++] = (char)char_byte[cp];
            i += k;
        }
        v->tok_len[id] = used - v->tok_off[id];
    }
    for (unsigned b = 0; b < 256; b++) {
        char c[5];
        c[zt_utf8_put(gpt2_byte_char(b), c)] = '\0';
        json_t *idv = json_object_get(*root, c);
        if (!idv)
            return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT,
                           "%s: no token for byte 0x%02X (\"%s\"): a byte-level BPE needs all 256",
                           path, b, c);
        v->byte_id[b] = (int32_t)json_integer_value(idv);
    }
    json_t *e = json_object_get(*root, ZT_EOT_TEXT);
    if (!e)
        return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT, "%s: no \"%s\" token", path, ZT_EOT_TEXT);
    *eot = (int32_t)json_integer_value(e);
    *n_tokens = (int64_t)n;
    return ZT_OK;
}

static zt_status bpe_token_id(json_t *root, const char *path, long long line, const char *tok,
                              int32_t *id)
{
    json_t *v = json_object_get(root, tok);
    char q[ZT_QUOTE_CAP];
    if (!v)
        return zt_fail(ZT_ERR_DATA, ZT_BPE_HINT,
                       "%s:%lld: token \"%s\" is not in encoder.json (a vocab.bpe from another "
                       "model, or one cut short?)",
                       path, line, zt_quote(q, sizeof q, tok, strlen(tok)));
    *id = (int32_t)json_integer_value(v);
    return ZT_OK;
}

/* vocab.bpe: an optional "#version" line, then one merge "LEFT RIGHT" a line,
 * by rank. */
static zt_status bpe_load_merges(zt_bpe_vocab *v, const char *path, json_t *root)
{
    char *buf;
    size_t len;
    ZT_TRY(zt_path_read(path, "tokenizer file", ZT_BPE_HINT, -1, false, &buf, &len));
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++)
        n_lines += buf[i] == '\n';
    size_t cap = 1024;
    while (cap < 2 * (n_lines + 1))
        cap *= 2;
    v->merges = malloc(cap * sizeof *v->merges);
    char *tok = malloc(len + 2);
    zt_status st = ZT_OK;
    if (!v->merges || !tok) {
        st = zt_datamem_oom(path, cap * sizeof *v->merges + len + 2, "the merge table of vocab.bpe",
                            0);
        goto done;
    }
    v->merge_mask = cap - 1;
    for (size_t i = 0; i < cap; i++)
        v->merges[i].rank = -1;

    int32_t rank = 0;
    long long line = 0;
    for (char *p = buf, *end = buf + len; p < end;) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        char *next = eol ? eol + 1 : end;
        if (!eol)
            eol = end;
        line++;
        size_t n = (size_t)(eol - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (line == 1 && n >= 8 && memcmp(p, "#version", 8) == 0) {
            p = next;
            continue;
        }
        /* The lookups below read C strings: a NUL would cut a token short
         * and merge LEFT and RIGHT into a shorter token, losing text. */
        if (memchr(p, '\0', n)) {
            st = zt_fail(ZT_ERR_DATA, ZT_BPE_HINT, "%s:%lld: a NUL byte in a merge line", path,
                         line);
            goto done;
        }
        memcpy(tok, p, n);
        tok[n] = '\0';
        char *sp = memchr(tok, ' ', n);
        if (!sp || sp == tok || sp == tok + n - 1 ||
            memchr(sp + 1, ' ', n - (size_t)(sp + 1 - tok))) {
            char q[ZT_QUOTE_CAP];
            st = zt_fail(ZT_ERR_DATA, ZT_BPE_HINT,
                         "%s:%lld: expected a merge \"LEFT RIGHT\" (two tokens, one space), got "
                         "\"%s\"",
                         path, line, zt_quote(q, sizeof q, tok, n));
            goto done;
        }
        *sp = '\0';
        int32_t a = 0, b = 0, m = 0;
        ZT_TRY_GOTO(st, bpe_token_id(root, path, line, tok, &a), done);
        ZT_TRY_GOTO(st, bpe_token_id(root, path, line, sp + 1, &b), done);
        /* The merged token is LEFT and RIGHT side by side: drop the space. */
        memmove(sp, sp + 1, strlen(sp + 1) + 1);
        ZT_TRY_GOTO(st, bpe_token_id(root, path, line, tok, &m), done);
        size_t i = pair_hash(a, b) & v->merge_mask;
        while (v->merges[i].rank >= 0) {
            if (v->merges[i].a == a && v->merges[i].b == b) {
                st = zt_fail(ZT_ERR_DATA, ZT_BPE_HINT, "%s:%lld: the merge repeats an earlier line",
                             path, line);
                goto done;
            }
            i = (i + 1) & v->merge_mask;
        }
        v->merges[i] = (zt_bpe_merge){.a = a, .b = b, .rank = rank++, .id = m};
        p = next;
    }
    if (rank == 0)
        st = zt_fail(ZT_ERR_DATA, ZT_BPE_HINT, "%s: no merges", path);
done:
    free(tok);
    free(buf);
    return st;
}

zt_status zt_tokenizer_bpe_init(zt_tokenizer *t, const char *dir)
{
    *t = (zt_tokenizer){0};
    zt_bpe_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return zt_datamem_oom(dir, sizeof *v, "the BPE tokenizer", 0);
    size_t plen = strlen(dir) + sizeof "/encoder.json";
    char *path = malloc(plen);
    json_t *root = NULL;
    int64_t n = 0;
    int32_t eot = -1;
    zt_status st = ZT_OK;
    if (!path) {
        st = zt_datamem_oom(dir, plen, "the BPE tokenizer", 0);
        goto fail;
    }
    snprintf(path, plen, "%s/encoder.json", dir);
    ZT_TRY_GOTO(st, bpe_load_encoder(v, path, &root, &n, &eot), fail);
    snprintf(path, plen, "%s/vocab.bpe", dir);
    ZT_TRY_GOTO(st, bpe_load_merges(v, path, root), fail);
    v->cache_mask = BPE_CACHE_SLOTS - 1;
    v->cache = calloc(BPE_CACHE_SLOTS, sizeof *v->cache);
    if (!v->cache) {
        st = zt_datamem_oom(dir, BPE_CACHE_SLOTS * sizeof *v->cache, "the BPE piece cache", 0);
        goto fail;
    }
    json_decref(root);
    free(path);
    *t = (zt_tokenizer){.kind = ZT_TOK_BPE,
                        .vocab_size = n,
                        .eot_id = eot,
                        .pad_id = eot,
                        .start_id = eot,
                        .impl = v};
    return ZT_OK;
fail:
    json_decref(root);
    free(path);
    zt_bpe_free(v);
    return st;
}

/* GPT-2's pattern: where the piece starting at s[i] ends. Only the literal
 * space U+0020 may prefix a letter, number or symbol run. */
static size_t pretok_end(const unsigned char *s, size_t len, size_t i)
{
    if (s[i] == '\'' && i + 1 < len) {
        unsigned c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd')
            return i + 2;
        if (i + 2 < len && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
                            (c == 'l' && s[i + 2] == 'l')))
            return i + 3;
    }
    uint32_t cp;
    size_t j = i + zt_utf8_next(s + i, &cp);
    zt_unicode_class cls = zt_unicode_classify(cp);
    if (cp == ' ' && j < len) {
        uint32_t cp2;
        size_t k = zt_utf8_next(s + j, &cp2);
        zt_unicode_class c2 = zt_unicode_classify(cp2);
        if (c2 != ZT_UC_SPACE) {
            cls = c2;
            j += k;
        }
    }
    if (cls != ZT_UC_SPACE) {
        /* ` ?\p{L}+`, ` ?\p{N}+` or ` ?[^\s\p{L}\p{N}]+`: the longest run. */
        while (j < len) {
            size_t k = zt_utf8_next(s + j, &cp);
            if (zt_unicode_classify(cp) != cls)
                break;
            j += k;
        }
        return j;
    }
    /* `\s+(?!\S)` takes the whitespace run but backs off its last character
     * when a non-space follows, leaving it to prefix the next piece; a run of
     * one such character falls to `\s+`. */
    size_t last = i;
    while (j < len) {
        size_t k = zt_utf8_next(s + j, &cp);
        if (zt_unicode_classify(cp) != ZT_UC_SPACE)
            return last > i ? last : j;
        last = j;
        j += k;
    }
    return j;
}

/* sym, next, prev (4 bytes each), the heap (3 pairs) and pending (2 pairs). */
#define BPE_SCRATCH_PER_BYTE (3 * sizeof(int32_t) + 5 * sizeof(zt_bpe_pair))

static zt_status bpe_scratch_reserve(zt_bpe_vocab *v, size_t n, const zt_id_vec *out)
{
    if (n <= v->scratch_cap)
        return ZT_OK;
    size_t cap = v->scratch_cap ? v->scratch_cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *sym = realloc(v->sym, cap * sizeof *sym);
    if (sym)
        v->sym = sym;
    int32_t *next = realloc(v->next, cap * sizeof *next);
    if (next)
        v->next = next;
    int32_t *prev = realloc(v->prev, cap * sizeof *prev);
    if (prev)
        v->prev = prev;
    /* Each merge adds at most two pairs to the n - 1 initial ones. */
    zt_bpe_pair *heap = realloc(v->heap, 3 * cap * sizeof *heap);
    if (heap)
        v->heap = heap;
    zt_bpe_pair *pending = realloc(v->pending, 2 * cap * sizeof *pending);
    if (pending)
        v->pending = pending;
    if (!sym || !next || !prev || !heap || !pending) {
        char purpose[160];
        snprintf(purpose, sizeof purpose,
                 "the merge scratch of a %zu-byte piece (a run of text without whitespace "
                 "takes %zu bytes per byte)",
                 n, BPE_SCRATCH_PER_BYTE);
        return zt_datamem_oom(out->what ? out->what : "a text",
                              (uint64_t)cap * BPE_SCRATCH_PER_BYTE, purpose, out->text_bytes);
    }
    v->scratch_cap = cap;
    return ZT_OK;
}

static bool pair_less(const zt_bpe_pair *x, const zt_bpe_pair *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(zt_bpe_pair *h, size_t *n, zt_bpe_pair e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(&e, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static zt_bpe_pair heap_pop(zt_bpe_pair *h, size_t *n)
{
    zt_bpe_pair top = h[0], e = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && pair_less(&h[c + 1], &h[c]))
            c++;
        if (!pair_less(&h[c], &e))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = e;
    return top;
}

/* Adds the pair of symbols at pos and next[pos] to `out` when it is a merge. */
static void pair_note(const zt_bpe_vocab *v, int32_t pos, zt_bpe_pair *out, size_t *n, bool heap)
{
    const zt_bpe_merge *m = bpe_merge_find(v, v->sym[pos], v->sym[v->next[pos]]);
    if (!m)
        return;
    zt_bpe_pair e = {.rank = m->rank, .pos = pos, .a = m->a, .b = m->b, .id = m->id};
    if (heap)
        heap_push(out, n, e);
    else
        out[(*n)++] = e;
}

/* Merges one piece's bytes into out. encoder.py merges every occurrence of the
 * best pair before it looks for the next best; pairs the merges create wait in
 * `pending` until that pass ends, so a vocab.bpe whose later merges outrank
 * earlier ones still gives encoder.py's answer. */
static zt_status bpe_merge_piece(zt_bpe_vocab *v, const unsigned char *w, size_t n, zt_id_vec *out)
{
    ZT_TRY(bpe_scratch_reserve(v, n, out));
    int32_t *sym = v->sym, *next = v->next, *prev = v->prev;
    for (size_t i = 0; i < n; i++) {
        sym[i] = v->byte_id[w[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        pair_note(v, (int32_t)i, v->heap, &nh, true);
    while (nh > 0) {
        int32_t rank = v->heap[0].rank;
        size_t np = 0;
        while (nh > 0 && v->heap[0].rank == rank) {
            zt_bpe_pair e = heap_pop(v->heap, &nh);
            int32_t p = e.pos, q = next[p];
            /* Stale when an earlier merge consumed or changed either side. */
            if (sym[p] != e.a || q < 0 || sym[q] != e.b)
                continue;
            sym[p] = e.id;
            sym[q] = -1;
            next[p] = next[q];
            if (next[p] >= 0)
                prev[next[p]] = p;
            if (prev[p] >= 0)
                pair_note(v, prev[p], v->pending, &np, false);
            if (next[p] >= 0)
                pair_note(v, p, v->pending, &np, false);
        }
        for (size_t k = 0; k < np; k++)
            heap_push(v->heap, &nh, v->pending[k]);
    }
    int64_t count = 0;
    for (int32_t p = 0; p >= 0; p = next[p])
        count++;
    ZT_TRY(zt_id_vec_reserve(out, count));
    for (int32_t p = 0; p >= 0; p = next[p])
        out->v[out->n++] = sym[p];
    return ZT_OK;
}

static uint64_t bytes_hash(const unsigned char *s, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001B3ull;
    return h;
}

static zt_status bpe_cache_oom(const zt_id_vec *out, uint64_t bytes)
{
    return zt_datamem_oom(out->what ? out->what : "a text", bytes, "the BPE piece cache",
                          out->text_bytes);
}

static zt_status bpe_cache_grow(zt_bpe_vocab *v, const zt_id_vec *out)
{
    size_t cap = 2 * (v->cache_mask + 1);
    zt_bpe_cache_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return bpe_cache_oom(out, cap * sizeof *slots);
    for (size_t i = 0; i <= v->cache_mask; i++) {
        zt_bpe_cache_slot s = v->cache[i];
        if (!s.key_len)
            continue;
        size_t j = s.hash & (cap - 1);
        while (slots[j].key_len)
            j = (j + 1) & (cap - 1);
        slots[j] = s;
    }
    free(v->cache);
    v->cache = slots;
    v->cache_mask = cap - 1;
    return ZT_OK;
}

static zt_status bpe_encode_piece(zt_bpe_vocab *v, const unsigned char *w, size_t n, zt_id_vec *out)
{
    uint64_t h = bytes_hash(w, n);
    size_t i = h & v->cache_mask;
    for (; v->cache[i].key_len; i = (i + 1) & v->cache_mask) {
        const zt_bpe_cache_slot *s = &v->cache[i];
        if (s->hash == h && s->key_len == n && memcmp(v->keys + s->key_off, w, n) == 0) {
            ZT_TRY(zt_id_vec_reserve(out, (int64_t)s->val_len));
            memcpy(out->v + out->n, v->vals + s->val_off, s->val_len * sizeof *v->vals);
            out->n += (int64_t)s->val_len;
            return ZT_OK;
        }
    }
    int64_t first = out->n;
    ZT_TRY(bpe_merge_piece(v, w, n, out));
    size_t nv = (size_t)(out->n - first);
    if (v->keys_len + n > v->keys_cap) {
        size_t cap = v->keys_cap ? v->keys_cap : 1 << 16;
        while (cap < v->keys_len + n)
            cap *= 2;
        char *k = realloc(v->keys, cap);
        if (!k)
            return bpe_cache_oom(out, cap);
        v->keys = k;
        v->keys_cap = cap;
    }
    if (v->vals_len + nv > v->vals_cap) {
        size_t cap = v->vals_cap ? v->vals_cap : 1 << 14;
        while (cap < v->vals_len + nv)
            cap *= 2;
        int32_t *vals = realloc(v->vals, cap * sizeof *vals);
        if (!vals)
            return bpe_cache_oom(out, cap * sizeof *vals);
        v->vals = vals;
        v->vals_cap = cap;
    }
    memcpy(v->keys + v->keys_len, w, n);
    memcpy(v->vals + v->vals_len, out->v + first, nv * sizeof *v->vals);
    v->cache[i] = (zt_bpe_cache_slot){
        .key_off = v->keys_len, .key_len = n, .val_off = v->vals_len, .val_len = nv, .hash = h};
    v->keys_len += n;
    v->vals_len += nv;
    if (++v->cache_count * 2 > v->cache_mask + 1)
        ZT_TRY(bpe_cache_grow(v, out));
    return ZT_OK;
}

zt_status zt_bpe_encode(const zt_tokenizer *t, const char *text, size_t len, zt_id_vec *out)
{
    zt_bpe_vocab *v = t->impl;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t j = pretok_end(s, len, i);
        ZT_TRY(bpe_encode_piece(v, s + i, j - i, out));
        i = j;
    }
    return ZT_OK;
}

size_t zt_bpe_token_bytes(const zt_bpe_vocab *v, int32_t id, const char **p)
{
    *p = v->tok_bytes + v->tok_off[id];
    return v->tok_len[id];
}

size_t zt_bpe_cut(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    bool after_space = false;
    for (size_t end = len; end > 0;) {
        size_t start = end - 1;
        while (start > 0 && (s[start] & 0xC0) == 0x80)
            start--;
        uint32_t cp;
        zt_utf8_next(s + start, &cp);
        bool space = zt_unicode_classify(cp) == ZT_UC_SPACE;
        if (after_space && !space)
            return end;
        after_space = space;
        end = start;
    }
    return 0;
}

uint64_t zt_bpe_host_bytes(const zt_bpe_vocab *v)
{
    size_t n = (size_t)(v->merge_mask + 1);
    return sizeof *v + (v->tok_off ? v->n_tokens * (sizeof *v->tok_off + sizeof *v->tok_len) : 0) +
           v->tok_bytes_len + (v->merges ? n * sizeof *v->merges : 0) +
           (v->cache_mask + 1) * sizeof *v->cache + v->keys_cap + v->vals_cap * sizeof *v->vals +
           v->scratch_cap * BPE_SCRATCH_PER_BYTE;
}

void zt_bpe_trim(zt_bpe_vocab *v)
{
    zt_bpe_cache_slot *small = calloc(BPE_CACHE_SLOTS, sizeof *small);
    /* Without room for a smaller cache the one there stays. */
    if (small) {
        free(v->cache);
        v->cache = small;
        v->cache_mask = BPE_CACHE_SLOTS - 1;
        v->cache_count = 0;
        free(v->keys);
        free(v->vals);
        v->keys = NULL;
        v->vals = NULL;
        v->keys_len = v->keys_cap = v->vals_len = v->vals_cap = 0;
    }
    free(v->sym);
    free(v->next);
    free(v->prev);
    free(v->heap);
    free(v->pending);
    v->sym = v->next = v->prev = NULL;
    v->heap = v->pending = NULL;
    v->scratch_cap = 0;
}
