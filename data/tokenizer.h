/*
 * tokenizer: text <-> token ids, three kinds.
 *
 *   char  the vocabulary is the sorted set of Unicode code points of a text
 *         (models.md §2: 65 symbols for tiny shakespeare); ids index that set.
 *   byte  the fallback when no tokenizer files are given: ids 0-255 are the
 *         UTF-8 bytes, 256 is <|endoftext|>, 257 is <pad> (vocab 258).
 *   bpe   GPT-2's byte-level BPE from encoder.json and vocab.bpe: GPT-2's
 *         pre-tokenisation pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
 *         ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+) with Unicode letter/number classes,
 *         bytes mapped to GPT-2's printable byte alphabet, then the merges by
 *         rank (\s is str.isspace(), so U+001C-U+001F count as whitespace
 *         where GPT-2's regex module would not: text with those four control
 *         characters may split differently). Vocab 50257; <|endoftext|> 50256 doubles as the pad id, as is
 *         usual for GPT-2 (padding is masked out anyway). Encoding a text does
 *         not parse special tokens in it: "<|endoftext|>" is plain text.
 *
 * Every text handed to a tokenizer is UTF-8 checked first (zt_utf8_check):
 * a bad byte is an error naming the file and line, never a silent
 * replacement.
 *
 * Memory: a tokenizer owns its tables (zt_tokenizer_free); encode/decode
 * return malloc'd arrays the caller frees. Collective: none.
 */
#ifndef ZT_TOKENIZER_H
#define ZT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef enum { ZT_TOK_CHAR = 0, ZT_TOK_BYTE, ZT_TOK_BPE } zt_tokenizer_kind;

typedef struct {
    zt_tokenizer_kind kind;
    int64_t vocab_size;
    int32_t eot_id;   /* <|endoftext|>, or -1 (char) */
    int32_t pad_id;   /* what padded positions hold (char: 0) */
    int32_t start_id; /* what generation starts from: '\n' when the char vocabulary
                         has it, else <|endoftext|>, else 0 */
    void *impl;
} zt_tokenizer;

/* OK when buf[0, len) is valid UTF-8; otherwise ZT_ERR_DATA naming `what`
 * (a file path), the 1-based line and the byte offset of the first bad byte. */
zt_status zt_utf8_check(const char *buf, size_t len, const char *what);

/* Char vocabulary of `text` (UTF-8 checked; `what` names it in errors; an empty
 * text is an error). */
zt_status zt_tokenizer_char_init(zt_tokenizer *t, const char *text, size_t len,
                                 const char *what);
zt_status zt_tokenizer_byte_init(zt_tokenizer *t);
/* dir holds encoder.json and vocab.bpe; a missing file is ZT_ERR_IO, a
 * malformed one ZT_ERR_DATA, naming the file (and line for vocab.bpe). */
zt_status zt_tokenizer_bpe_init(zt_tokenizer *t, const char *dir);
void zt_tokenizer_free(zt_tokenizer *t);

/* The host bytes the tokenizer holds (tables, BPE's piece cache). */
uint64_t zt_tokenizer_host_bytes(const zt_tokenizer *t);
/* Gives back what only encoding a large text needed (BPE's piece cache and
 * merge scratch, refilled on the next encode). */
void zt_tokenizer_trim(zt_tokenizer *t);

/* Encodes UTF-8 text (checked; `what` names it in errors) into *ids (malloc'd,
 * *n ids). A char tokenizer fails on a code point outside its vocabulary.
 * Not thread-safe: BPE fills a per-tokenizer cache of encoded pieces. */
zt_status zt_tokenizer_encode(const zt_tokenizer *t, const char *text, size_t len,
                              const char *what, int32_t **ids, int64_t *n);
/* Decodes ids into *text (malloc'd, NUL-terminated, *len bytes without the NUL).
 * Ids outside the vocabulary are ZT_ERR_DATA. The byte tokenizer's dedicated
 * pad (257) decodes to nothing, <|endoftext|> to "<|endoftext|>"; where pad_id
 * is also a real token (char, BPE) it decodes as that token. */
zt_status zt_tokenizer_decode(const zt_tokenizer *t, const int32_t *ids, int64_t n,
                              char **text, size_t *len);

#endif
