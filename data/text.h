/*
 * text: the language-model data set over one text file (models.md §2).
 *
 * The whole file is UTF-8 checked and tokenised (char vocabulary built from the
 * file by default, GPT-2 BPE when a tokenizer directory is given) into N ids.
 * The first n_train = N - N/10 ids are the training split, the last N/10 the
 * held-out validation split.
 *
 *   train sample i, i in [0, (n_train - 1) / block):
 *     o = zt_rng_u64(seed, ZT_RNG_STREAM_WINDOW, i) % (n_train - block)
 *     tokens = ids[o, o + block), labels = ids[o + 1, o + block + 1)
 *   val sample j, j in [0, (n_val - 1) / block): the same with
 *     o = n_train + j * block (consecutive windows: a fixed evaluation set)
 *
 * The training windows are already a keyed pseudo-random draw, so the train set
 * is not shuffled again (shuffle = false). A file too short for one window in
 * each split, a missing or empty file and bad UTF-8 are ZT_ERR_DATA / ZT_ERR_IO
 * naming the file (and line).
 *
 * The file is read in pieces of ZT_TEXT_CHUNK bytes and never held whole; the
 * ids are held at the narrowest width the vocabulary allows (1 byte for up to
 * 256 symbols, 2 for GPT-2's BPE: data/datamem.h). The char vocabulary needs
 * the whole file, so that tokenizer reads it twice: first to check it, build
 * the vocabulary and count the characters, which gives the ids' exact size;
 * that is checked against the budget before the ids are allocated, and the
 * second read fills them. BPE reads it once, cutting the pieces where GPT-2's
 * pattern cannot span (zt_bpe_cut), so the ids equal those of the whole text;
 * their number is known only at the end, so each growth of the ids is checked
 * against the budget, with how far into the file it came. The piece cache is
 * given back at the end (zt_tokenizer_trim).
 *
 * ZT_TEXT_CHUNK_BYTES (testing aid, >= 16) replaces the piece size.
 *
 * Memory: zt_text owns the tokenizer, the ids and both data sets (the data
 * sets point into it: free them only through zt_text_free); the data sets'
 * `memory` says what it holds. Collective: none.
 */
#ifndef ZT_TEXT_H
#define ZT_TEXT_H

#include <stdint.h>

#include "data/dataset.h"
#include "engine/status.h"
#include "data/tokenizer.h"

#define ZT_TEXT_CHUNK ((size_t)1 << 20)

typedef struct {
    zt_tokenizer tok;
    void *ids;    /* n_ids ids of id_bytes each (zt_ids_load widens them) */
    int id_bytes; /* 1, 2 or 4 */
    int64_t n_ids, n_train, block;
    zt_dataset train, val;
} zt_text;

/* tokenizer_dir NULL: char vocabulary of the file. budget NULL: no limit;
 * otherwise a data set that does not fit it is ZT_ERR_OOM with the
 * breakdown (data/datamem.h), before its ids are allocated. */
zt_status zt_text_load(zt_text *txt, const char *path, const char *tokenizer_dir, int64_t block,
                       uint64_t seed, const zt_data_budget *budget);
void zt_text_free(zt_text *txt);

#endif
