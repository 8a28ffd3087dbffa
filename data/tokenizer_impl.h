/*
 * tokenizer_impl: what the two halves of the tokenizer share, private to
 * data/: tokenizer.c (UTF-8, the char and byte tokenizers, the public entry
 * points of data/tokenizer.h) and bpe.c (GPT-2's BPE: loading encoder.json
 * and vocab.bpe, the pre-tokenizer, the merges, the piece cache).
 *
 * Memory: a zt_id_vec's array is malloc'd and belongs to whoever holds the
 * vector; a zt_bpe_vocab is the BPE tokenizer's impl, freed by zt_bpe_free.
 * Collective: none.
 */
#ifndef ZT_TOKENIZER_IMPL_H
#define ZT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"
#include "engine/status.h"

#define ZT_EOT_TEXT "<|endoftext|>"

/* ---- UTF-8 (tokenizer.c) ---- */

/* zt_utf8_check of a piece of a file whose first byte is at file offset
 * `offset`, on line `line`: the message names the file's line and offset. */
zt_status zt_utf8_check_from(const char *buf, size_t len, const char *what, long long line,
                             uint64_t offset);

/* Decodes the sequence at s[0, len), len >= 1: its byte length, or 0 with *why
 * saying what is wrong with it. */
size_t zt_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp, const char **why);
/* The next code point of text already checked by zt_utf8_check. */
size_t zt_utf8_next(const unsigned char *s, uint32_t *cp);
/* Writes cp's UTF-8 bytes (1-4) to out; returns how many. */
size_t zt_utf8_put(uint32_t cp, char *out);

/* ---- token ids being encoded (tokenizer.c) ---- */

typedef struct {
    int32_t *v;
    int64_t n, cap;
    const char *what;    /* the text's name, for an allocation that fails */
    uint64_t text_bytes; /* and its length */
} zt_id_vec;

/* Room for `extra` more ids (ZT_ERR_OOM naming a->what when there is none). */
zt_status zt_id_vec_reserve(zt_id_vec *a, int64_t extra);

/* Appends the ids of text that zt_utf8_check accepted to *out (what names it
 * in errors). */
zt_status zt_tokenizer_encode_into(const zt_tokenizer *t, const char *text, size_t len,
                                   const char *what, zt_id_vec *out);

/* ---- the char vocabulary, built piece by piece (tokenizer.c) ---- */

/* A bitmap of the code points seen (calloc'd by the caller). */
#define ZT_CHAR_SEEN_BYTES (0x110000 / 8)

/* Marks the code points of checked text in `seen`, adding their number to
 * *count. */
void zt_char_seen_add(uint8_t *seen, const char *text, size_t len, int64_t *count);
/* The char tokenizer of the code points in `seen` (what names the text; none
 * seen is an error). */
zt_status zt_tokenizer_char_from_seen(zt_tokenizer *t, const uint8_t *seen, const char *what,
                                      uint64_t text_bytes);

/* ---- GPT-2 BPE (bpe.c) ---- */

typedef struct zt_bpe_vocab zt_bpe_vocab;

/* Appends the ids of UTF-8-checked text to *out; fills the piece cache. */
zt_status zt_bpe_encode(const zt_tokenizer *t, const char *text, size_t len, zt_id_vec *out);
/* Where checked text may be cut so that its two sides encode as the whole
 * does: the last place in (0, len) where a non-whitespace character is
 * followed by whitespace (no piece of GPT-2's pattern spans one). 0: none. */
size_t zt_bpe_cut(const char *text, size_t len);
/* The bytes the vocabulary's tables, cache and scratch hold. */
uint64_t zt_bpe_host_bytes(const zt_bpe_vocab *v);
/* Frees the piece cache and the merge scratch (they fill again on use). */
void zt_bpe_trim(zt_bpe_vocab *v);
/* The bytes token `id` stands for, at *p (inside the vocabulary's tables). */
size_t zt_bpe_token_bytes(const zt_bpe_vocab *v, int32_t id, const char **p);
void zt_bpe_free(zt_bpe_vocab *v);

#endif
