/*
 * loader: a model's data by kind (data/dataset.h zt_data_kind): the training
 * and validation sets and the tokenizer they were made with, whichever
 * loader the kind needs. The command line and the checkpoint subcommands load
 * through it, so neither knows which data set a model reads.
 *
 * Memory: zt_data owns the data set it loaded (zt_data_free). Collective:
 * none (every rank loads the same files).
 */
#ifndef ZT_LOADER_H
#define ZT_LOADER_H

#include <stdint.h>

#include "data/dataset.h"
#include "data/labelled.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "engine/status.h"

typedef struct {
    zt_data_kind kind;
    zt_dataset synthetic;
    zt_text text;
    zt_labelled labelled;
    zt_dataset *train, *val;  /* val NULL for synthetic data */
    const zt_tokenizer *tok;  /* NULL for synthetic data */
} zt_data;

/* Text or labelled data from `path`, tokenized with the GPT-2 BPE files in
 * tokenizer_dir (NULL: the kind's own character or byte tokenizer), cut to
 * seq_len tokens per sample; seed orders text windows. What this rank may
 * hold: budget (NULL: no limit; data/dataset.h). */
zt_status zt_data_load(zt_data *d, zt_data_kind kind, const char *path,
                       const char *tokenizer_dir, int64_t seq_len, uint64_t seed,
                       const zt_data_budget *budget);

/* The keyed synthetic data set of n_samples (data/synthetic.h). */
void zt_data_synthetic(zt_data *d, int64_t n_samples, int64_t in_size, int64_t n_classes,
                       uint64_t seed);

/* Frees what was loaded (nothing for a zeroed zt_data). */
void zt_data_free(zt_data *d);

#endif
