/*
 * labelled: labelled-text classification data (models.md §3, IMDB sentiment).
 *
 * Two layouts, chosen by what `path` is:
 *   - a CSV file with a header naming the columns `review` and `sentiment`
 *     (any order, other columns ignored; RFC 4180 quoting, so reviews may hold
 *     commas, quotes and newlines). Labels `negative` -> 0, `positive` -> 1.
 *     Validation split: every tenth review (data row j with j % 10 == 9).
 *   - an aclImdb directory: train/pos/NAME.txt and train/neg/NAME.txt (label 1, 0),
 *     and test/pos, test/neg as the validation split when test/ exists
 *     (otherwise every tenth training review). Files are read in name order,
 *     pos before neg.
 * Each review has `<br />` replaced by a space, is tokenised (GPT-2 BPE when a
 * tokenizer directory is given, else the byte fallback), truncated to max_len
 * tokens, and kept with its length. Samples: tokens (max_len, the first
 * `length` valid; the caller pads with pad_id), labels (1). The training set is
 * shuffled by the sampler each epoch; the validation set is not.
 *
 * Errors (ZT_ERR_IO / ZT_ERR_DATA, naming the file and line): missing path,
 * empty file or directory, a header without both columns, a row with too few
 * columns or an unterminated quote, an unknown label, a review empty after
 * stripping, bad UTF-8, a split left without reviews; a max_len below 1 is
 * ZT_ERR_USAGE. labelled.c's header lists the CSV dialect's finer points.
 *
 * Tokens are held at 2 bytes each (4 for a vocabulary over 65,536 ids), with
 * 16 bytes of index (offset, length, label) a review; a CSV file is read
 * whole and parsed in place, an aclImdb directory one review file at a time.
 *
 * Memory: zt_labelled owns the tokenizer, the token arrays and both data sets
 * (free only through zt_labelled_free); the data sets' `memory` says what it
 * holds. Collective: none.
 */
#ifndef ZT_LABELLED_H
#define ZT_LABELLED_H

#include <stdint.h>

#include "data/dataset.h"
#include "engine/status.h"
#include "data/tokenizer.h"

typedef struct {
    zt_tokenizer tok;
    int64_t max_len;
    zt_dataset train, val;
    void *impl;
} zt_labelled;

/* budget NULL: no limit; otherwise data that does not fit it is ZT_ERR_OOM
 * with the breakdown (data/datamem.h): a CSV file before it is read, the
 * reviews' tokens and index as they grow. */
zt_status zt_labelled_load(zt_labelled *ld, const char *path, const char *tokenizer_dir,
                           int64_t max_len, const zt_data_budget *budget);
void zt_labelled_free(zt_labelled *ld);

#endif
