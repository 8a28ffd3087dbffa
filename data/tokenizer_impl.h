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
} zt_id_vec;

/* Room for `extra` more ids (ZT_ERR_OOM when there is none). */
zt_status zt_id_vec_reserve(zt_id_vec *a, int64_t extra);

/* ---- GPT-2 BPE (bpe.c) ---- */

typedef struct zt_bpe_vocab zt_bpe_vocab;

/* Appends the ids of UTF-8-checked text to *out; fills the piece cache. */
zt_status zt_bpe_encode(const zt_tokenizer *t, const char *text, size_t len, zt_id_vec *out);
/* The bytes token `id` stands for, at *p (inside the vocabulary's tables). */
size_t zt_bpe_token_bytes(const zt_bpe_vocab *v, int32_t id, const char **p);
void zt_bpe_free(zt_bpe_vocab *v);

#endif
