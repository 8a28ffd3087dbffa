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
 * Memory: zt_text owns the tokenizer, the ids and both data sets (the data
 * sets point into it: free them only through zt_text_free). Collective: none.
 */
#ifndef ZT_TEXT_H
#define ZT_TEXT_H

#include <stdint.h>

#include "data/dataset.h"
#include "engine/status.h"
#include "data/tokenizer.h"

typedef struct {
    zt_tokenizer tok;
    int32_t *ids;
    int64_t n_ids, n_train, block;
    zt_dataset train, val;
} zt_text;

/* tokenizer_dir NULL: char vocabulary of the file. */
zt_status zt_text_load(zt_text *txt, const char *path, const char *tokenizer_dir, int64_t block,
                       uint64_t seed);
void zt_text_free(zt_text *txt);

#endif
