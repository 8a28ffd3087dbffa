#include "data/text.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/datamem.h"
#include "data/tokenizer_impl.h"
#include "engine/path.h"
#include "engine/rng.h"

#define TEXT_HINT "check the --data path"

/* What both splits read, and what the load holds. A separate allocation
 * rather than a pointer to the zt_text, so the caller may move its zt_text
 * after loading. */
typedef struct {
    const void *ids;
    int id_bytes;
    int64_t n_train, block;
    zt_data_memory memory;
} zt_text_windows;

static void text_window(const zt_text_windows *w, int64_t o, zt_sample *out)
{
    zt_ids_load(out->tokens, w->ids, w->id_bytes, o, w->block);
    zt_ids_load(out->labels, w->ids, w->id_bytes, o + 1, w->block);
    out->length = w->block;
}

static void text_train_get(const zt_dataset *ds, int64_t index, zt_sample *out)
{
    const zt_text_windows *w = ds->impl;
    uint64_t r = zt_rng_u64(ds->seed, ZT_RNG_STREAM_WINDOW, (uint64_t)index);
    text_window(w, (int64_t)(r % (uint64_t)(w->n_train - w->block)), out);
}

static void text_val_get(const zt_dataset *ds, int64_t index, zt_sample *out)
{
    const zt_text_windows *w = ds->impl;
    text_window(w, w->n_train + index * w->block, out);
}

/* zt_text_free owns everything the data sets point to. */
static void text_dataset_free(zt_dataset *ds) { (void)ds; }

/* ------------------------------------------------------------ the reader */

/* The file in pieces: buf[0, len) are bytes not handed out yet, the first of
 * them at file offset `offset`, on line `line`. */
typedef struct {
    const char *path;
    int fd;
    char *buf;
    size_t cap, len;
    uint64_t offset, size;
    long long line;
    bool eof;
} text_reader;

static size_t text_chunk_bytes(void)
{
    const char *env = getenv("ZT_TEXT_CHUNK_BYTES");
    long long v = env && *env ? atoll(env) : 0;
    return v >= 16 ? (size_t)v : ZT_TEXT_CHUNK;
}

static zt_status reader_open(text_reader *r, const char *path, zt_data_memory *m)
{
    *r = (text_reader){.path = path, .fd = -1, .line = 1};
    ZT_TRY(zt_path_open_read(path, "data file", TEXT_HINT, &r->fd));
    struct stat sb;
    if (fstat(r->fd, &sb) != 0)
        return zt_fail(ZT_ERR_IO, TEXT_HINT, "data file %s: cannot stat: %s", path,
                       strerror(errno));
    /* The size is a guess (a file in /proc says 0): the end of the file is
     * where reading ends. */
    r->size = (uint64_t)sb.st_size;
    m->file_bytes = r->size;
    r->cap = text_chunk_bytes();
    if (r->size > 0 && r->size + 4 < r->cap)
        r->cap = (size_t)r->size + 4;
    r->buf = malloc(r->cap);
    if (!r->buf)
        return zt_datamem_oom(path, r->cap, "the read buffer", r->size);
    m->buffer_bytes += r->cap;
    return ZT_OK;
}

static void reader_close(text_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    free(r->buf);
    r->fd = -1;
    r->buf = NULL;
}

static zt_status reader_rewind(text_reader *r)
{
    if (lseek(r->fd, 0, SEEK_SET) != 0)
        return zt_fail(ZT_ERR_IO, TEXT_HINT, "data file %s: cannot read it again: %s", r->path,
                       strerror(errno));
    r->len = 0;
    r->offset = 0;
    r->line = 1;
    r->eof = false;
    return ZT_OK;
}

static zt_status reader_fill(text_reader *r)
{
    while (!r->eof && r->len < r->cap) {
        ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return zt_fail(ZT_ERR_IO, TEXT_HINT, "data file %s: read failed: %s", r->path,
                           strerror(errno));
        r->eof = got == 0;
        r->len += (size_t)got;
    }
    return ZT_OK;
}

/* buf[0, n) without a UTF-8 sequence that the next read completes. */
static size_t utf8_whole(const char *buf, size_t n)
{
    const unsigned char *s = (const unsigned char *)buf;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned b = s[n - back];
        if ((b & 0xC0) == 0x80)
            continue;
        size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return want > back ? n - back : n;
    }
    return n;
}

/* The next checked piece, buf[0, *n) (0: the end). `bpe` cuts it only where
 * GPT-2's pattern cannot span; a piece without such a place grows the buffer
 * (checked against the budget: m, b). */
static zt_status reader_next(text_reader *r, bool bpe, zt_data_memory *m, const zt_data_budget *b,
                             size_t *n)
{
    for (;;) {
        ZT_TRY(reader_fill(r));
        if (r->eof && r->offset == 0 && r->len == 0)
            return zt_fail(ZT_ERR_DATA, "give a text file to train on", "%s: empty file",
                           r->path);
        if (r->eof)
            m->file_bytes = r->offset + r->len;
        size_t whole = r->eof ? r->len : utf8_whole(r->buf, r->len);
        ZT_TRY(zt_utf8_check_from(r->buf, whole, r->path, r->line, r->offset));
        *n = r->eof || !bpe ? whole : zt_bpe_cut(r->buf, whole);
        if (*n > 0 || r->eof)
            return ZT_OK;
        /* One run without whitespace fills the buffer: it is one piece. */
        size_t cap = 2 * r->cap;
        m->buffer_bytes += cap - r->cap;
        ZT_TRY(zt_datamem_fit(m, b, r->path, " (a run without whitespace fills the read buffer)"));
        char *nb = realloc(r->buf, cap);
        if (!nb)
            return zt_datamem_oom(r->path, cap, "the read buffer of a run without whitespace",
                                  r->size);
        r->buf = nb;
        r->cap = cap;
        zt_datamem_update(m);
    }
}

static void reader_consume(text_reader *r, size_t n)
{
    for (const char *p = r->buf, *end = r->buf + n; (p = memchr(p, '\n', (size_t)(end - p)));
         p++)
        r->line++;
    memmove(r->buf, r->buf + n, r->len - n);
    r->len -= n;
    r->offset += n;
}

/* -------------------------------------------------------------- loading */

static zt_status text_changed(const text_reader *r)
{
    return zt_fail(ZT_ERR_DATA, "do not change the data file while a run starts",
                   "%s: the file changed while it was read (at byte %llu)", r->path,
                   (unsigned long long)r->offset);
}

/* The char tokenizer's first read: checked, the vocabulary, the count. */
static zt_status text_char_scan(zt_text *txt, text_reader *r, zt_data_memory *m,
                                const zt_data_budget *b)
{
    uint8_t *seen = calloc(ZT_CHAR_SEEN_BYTES, 1);
    if (!seen)
        return zt_datamem_oom(r->path, ZT_CHAR_SEEN_BYTES, "the char vocabulary's bitmap",
                              r->size);
    m->buffer_bytes += ZT_CHAR_SEEN_BYTES;
    zt_datamem_update(m);
    zt_status st = ZT_OK;
    int64_t count = 0;
    for (;;) {
        size_t n;
        ZT_TRY_GOTO(st, reader_next(r, false, m, b, &n), done);
        if (n == 0)
            break;
        zt_char_seen_add(seen, r->buf, n, &count);
        reader_consume(r, n);
    }
    ZT_TRY_GOTO(st, zt_tokenizer_char_from_seen(&txt->tok, seen, r->path, r->size), done);
    txt->n_ids = count;
done:
    free(seen);
    m->buffer_bytes -= ZT_CHAR_SEEN_BYTES;
    return st;
}

/* Room for `need` ids in txt->ids (capacity *cap), checked against the
 * budget. */
static zt_status text_ids_grow(zt_text *txt, int64_t *cap, int64_t need, const text_reader *r,
                               zt_data_memory *m, const zt_data_budget *b)
{
    if (need <= *cap)
        return ZT_OK;
    uint64_t w = (uint64_t)txt->id_bytes;
    int64_t want = zt_datamem_grow(m, b, m->ids_bytes, *cap, need, 0, w);
    uint64_t held = m->ids_bytes;
    m->tokens = need;
    m->ids_bytes = (uint64_t)need * w;
    /* BPE's count is known only at the end: say where it stands and what
     * the whole file takes at the rate so far. */
    char when[192], ahead[32];
    double read = (double)(r->offset ? r->offset : 1), size = (double)r->size;
    snprintf(when, sizeof when,
             " with %.0f%% of the file read (GPT-2 tokens are counted as they are made; at that "
             "rate the whole file's ids take %s)",
             100.0 * read / (size > 0 ? size : 1),
             zt_datamem_size((uint64_t)((double)need * (double)w * (size > read ? size / read : 1)),
                             ahead, sizeof ahead));
    zt_status st = zt_datamem_fit(m, b, r->path, when);
    m->ids_bytes = held;
    ZT_TRY(st);
    void *ids = realloc(txt->ids, (size_t)want * w);
    if (!ids)
        return zt_datamem_oom(r->path, (uint64_t)want * w, "the token ids", r->size);
    txt->ids = ids;
    *cap = want;
    m->ids_bytes = (uint64_t)want * w;
    zt_datamem_update(m);
    return ZT_OK;
}

/* Reads the file (again, for the char tokenizer: into the n_ids ids the scan
 * counted) and encodes it into txt->ids. */
static zt_status text_encode(zt_text *txt, text_reader *r, zt_data_memory *m,
                             const zt_data_budget *b)
{
    bool bpe = txt->tok.kind == ZT_TOK_BPE;
    int64_t cap = 0, n_ids = 0;
    /* One piece's ids before they are narrowed into txt->ids. */
    zt_id_vec piece = {.what = r->path, .text_bytes = r->size};
    zt_status st = zt_id_vec_reserve(&piece, (int64_t)r->cap);
    uint64_t piece_bytes = 0;
    if (st != ZT_OK)
        return st;
    m->buffer_bytes += piece_bytes = (uint64_t)piece.cap * sizeof *piece.v;
    if (!bpe) {
        cap = txt->n_ids;
        m->tokens = cap;
        m->ids_bytes = (uint64_t)cap * (uint64_t)txt->id_bytes;
        ZT_TRY_GOTO(st, zt_datamem_fit(m, b, r->path, ""), done);
        txt->ids = malloc((size_t)m->ids_bytes);
        if (!txt->ids) {
            st = zt_datamem_oom(r->path, m->ids_bytes, "the token ids", r->size);
            goto done;
        }
    }
    for (;;) {
        /* A run without whitespace longer than the buffer grows the piece. */
        m->buffer_bytes += (uint64_t)piece.cap * sizeof *piece.v - piece_bytes;
        piece_bytes = (uint64_t)piece.cap * sizeof *piece.v;
        zt_datamem_update(m);
        size_t n;
        ZT_TRY_GOTO(st, reader_next(r, bpe, m, b, &n), done);
        if (n == 0)
            break;
        piece.n = 0;
        ZT_TRY_GOTO(st, zt_tokenizer_encode_into(&txt->tok, r->buf, n, r->path, &piece), done);
        reader_consume(r, n);
        if (bpe) {
            m->tokenizer_bytes = zt_tokenizer_host_bytes(&txt->tok);
            ZT_TRY_GOTO(st, text_ids_grow(txt, &cap, n_ids + piece.n, r, m, b), done);
        } else if (n_ids + piece.n > cap) {
            st = text_changed(r);
            goto done;
        }
        zt_ids_store(txt->ids, txt->id_bytes, n_ids, piece.v, piece.n);
        n_ids += piece.n;
    }
    if (!bpe && n_ids != cap)
        st = text_changed(r);
done:
    m->buffer_bytes -= piece_bytes;
    free(piece.v);
    txt->n_ids = n_ids;
    if (st == ZT_OK && bpe && n_ids < cap && n_ids > 0) {
        void *fit = realloc(txt->ids, (size_t)n_ids * (size_t)txt->id_bytes);
        if (fit)
            txt->ids = fit;
    }
    m->tokens = n_ids;
    m->ids_bytes = (uint64_t)n_ids * (uint64_t)txt->id_bytes;
    return st;
}

zt_status zt_text_load(zt_text *txt, const char *path, const char *tokenizer_dir, int64_t block,
                       uint64_t seed, const zt_data_budget *budget)
{
    *txt = (zt_text){0};
    if (block < 1)
        return zt_fail(ZT_ERR_USAGE, "give --block-size >= 1", "block size %lld: must be >= 1",
                       (long long)block);
    zt_text_windows *w = calloc(1, sizeof *w);
    if (!w)
        return zt_datamem_oom(path, sizeof *w, "the data set", 0);
    txt->train.impl = w;
    zt_data_memory *m = &w->memory;
    text_reader r;
    zt_status st = reader_open(&r, path, m);
    if (st == ZT_OK && tokenizer_dir)
        st = zt_tokenizer_bpe_init(&txt->tok, tokenizer_dir);
    else if (st == ZT_OK)
        st = text_char_scan(txt, &r, m, budget);
    if (st == ZT_OK && !tokenizer_dir)
        st = reader_rewind(&r);
    if (st == ZT_OK) {
        txt->id_bytes = zt_ids_width(txt->tok.vocab_size);
        m->token_bytes = txt->id_bytes;
        m->tokenizer_bytes = zt_tokenizer_host_bytes(&txt->tok);
        zt_datamem_update(m);
        st = text_encode(txt, &r, m, budget);
    }
    reader_close(&r);
    m->buffer_bytes = 0;
    zt_tokenizer_trim(&txt->tok);
    m->tokenizer_bytes = zt_tokenizer_host_bytes(&txt->tok);
    zt_datamem_update(m);
    if (st != ZT_OK)
        goto fail;

    int64_t n = txt->n_ids, n_val = n / 10, n_train = n - n_val;
    /* A window reads block + 1 ids (the labels are shifted by one). */
    if (n_train < block + 1 || n_val < block + 1) {
        st = zt_fail(ZT_ERR_DATA,
                     "lower --block-size: each split needs block + 1 tokens, and the validation "
                     "split is the last tenth of the file",
                     "%s: %lld tokens (%lld train, %lld validation) are too few for one window "
                     "of block %lld + 1 tokens in each split",
                     path, (long long)n, (long long)n_train, (long long)n_val, (long long)block);
        goto fail;
    }
    w->ids = txt->ids;
    w->id_bytes = txt->id_bytes;
    w->n_train = n_train;
    w->block = block;
    txt->n_train = n_train;
    txt->block = block;
    zt_dataset common = {.x_numel = 0,
                         .tokens_numel = block,
                         .labels_numel = block,
                         .n_classes = txt->tok.vocab_size,
                         .vocab_size = txt->tok.vocab_size,
                         .pad_id = txt->tok.pad_id,
                         .variable_length = false,
                         .free = text_dataset_free,
                         .impl = w,
                         .seed = seed,
                         .shuffle = false,
                         .memory = m};
    txt->train = common;
    txt->train.name = "text-train";
    txt->train.n_samples = (n_train - 1) / block;
    txt->train.get = text_train_get;
    txt->val = common;
    txt->val.name = "text-val";
    txt->val.n_samples = (n_val - 1) / block;
    txt->val.get = text_val_get;
    return ZT_OK;
fail:
    zt_text_free(txt);
    return st;
}

void zt_text_free(zt_text *txt)
{
    if (!txt)
        return;
    zt_tokenizer_free(&txt->tok);
    free(txt->ids);
    free(txt->train.impl);
    *txt = (zt_text){0};
}
