/*
 * dataset: the interface the trainer reads samples through. A sample is a pure
 * function of its global index, so which rank reads it never matters.
 *
 * A sample has up to three parts, sized per dataset: x (x_numel floats: the
 * MLP's input), tokens (tokens_numel ids in [0, vocab_size): the transformers'
 * input) and labels (labels_numel class indices in [0, n_classes), or
 * ZT_IGNORE_INDEX: one per sample for classification, one per token for a
 * language model). Variable-length datasets fill `length` <= tokens_numel
 * tokens and leave the rest of `tokens` to the caller, which pads with pad_id
 * and masks the padding out.
 *
 * What a data set read from disk holds on the host is its `memory`
 * (zt_data_memory, shared by the two splits of one load); a loader is given
 * a zt_data_budget, what this rank may hold, and refuses a data set that does
 * not fit it before making the large allocations (data/datamem.h).
 *
 * Memory: a dataset owns whatever its impl holds (freed by `free`); callers own
 * the sample buffers they pass. Collective: none.
 */
#ifndef ZT_DATASET_H
#define ZT_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#define ZT_IGNORE_INDEX (-100)

/* What a model's data is (models/registry.h names it per model). */
typedef enum {
    ZT_DATA_SYNTHETIC = 0, /* none on disk: the mlp's keyed random data set */
    ZT_DATA_TEXT,          /* a UTF-8 text file, language modelling */
    ZT_DATA_LABELLED       /* labelled reviews (CSV or an aclImdb directory) */
} zt_data_kind;

typedef struct {
    float *x;         /* (x_numel) or NULL when x_numel == 0 */
    int32_t *tokens;  /* (tokens_numel) or NULL when tokens_numel == 0 */
    int32_t *labels;  /* (labels_numel) */
    int64_t length;   /* out: valid tokens (tokens_numel unless variable_length) */
} zt_sample;

/* What one load of a data set holds on the host. Every rank loads its own
 * copy, so these are one rank's bytes. */
typedef struct {
    uint64_t file_bytes;      /* the data file, or a directory's review files together */
    int64_t tokens;           /* token ids held */
    int token_bytes;          /* each id as held: 1, 2 or 4 bytes (the vocabulary's size) */
    uint64_t ids_bytes;       /* tokens x token_bytes */
    uint64_t index_bytes;     /* labelled data: each review's offset, length and label */
    uint64_t tokenizer_bytes; /* the vocabulary, merge tables and piece cache */
    uint64_t held_bytes;      /* ids + index + tokenizer: held while training */
    uint64_t buffer_bytes;    /* read buffers and scratch, while loading only */
    uint64_t peak_bytes;      /* the most held at once while loading */
} zt_data_memory;

/* What a rank may hold while loading: bytes (ZT_DATA_NO_LIMIT: no limit) and,
 * for the message of a data set that does not fit, which limit it is. */
#define ZT_DATA_NO_LIMIT UINT64_MAX
typedef struct {
    uint64_t bytes;
    char why[768];
} zt_data_budget;

typedef struct zt_dataset zt_dataset;

struct zt_dataset {
    const char *name;
    int64_t n_samples;
    int64_t x_numel;      /* floats per sample input (0: none) */
    int64_t tokens_numel; /* token ids per sample (0: none) */
    int64_t labels_numel; /* labels per sample */
    int64_t n_classes;    /* labels lie in [0, n_classes) */
    int64_t vocab_size;   /* tokens lie in [0, vocab_size) */
    int32_t pad_id;       /* the id the caller pads short samples with */
    bool variable_length; /* samples may be shorter than tokens_numel */
    void (*get)(const zt_dataset *ds, int64_t index, zt_sample *out);
    void (*free)(zt_dataset *ds);
    void *impl;
    uint64_t seed;
    bool shuffle; /* the sampler permutes positions each epoch */
    const zt_data_memory *memory; /* NULL: generated, nothing read (synthetic) */
};

#endif
