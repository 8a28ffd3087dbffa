#include "data/text.h"

#include <stdlib.h>
#include <string.h>

#include "engine/path.h"
#include "engine/rng.h"

/* What both splits read. A separate allocation rather than a pointer to the
 * zt_text, so the caller may move its zt_text after loading. */
typedef struct {
    const int32_t *ids;
    int64_t n_train, block;
} zt_text_windows;

static void text_window(const zt_text_windows *w, int64_t o, zt_sample *out)
{
    memcpy(out->tokens, w->ids + o, (size_t)w->block * sizeof *out->tokens);
    memcpy(out->labels, w->ids + o + 1, (size_t)w->block * sizeof *out->labels);
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

zt_status zt_text_load(zt_text *txt, const char *path, const char *tokenizer_dir, int64_t block,
                       uint64_t seed)
{
    *txt = (zt_text){0};
    if (block < 1)
        return zt_fail(ZT_ERR_USAGE, "give --block-size >= 1", "block size %lld: must be >= 1",
                       (long long)block);
    char *buf;
    size_t len;
    ZT_TRY(zt_path_read(path, "data file", "check the --data path", -1, false, &buf, &len));
    zt_status st = ZT_OK;
    if (len == 0) {
        st = zt_fail(ZT_ERR_DATA, "give a text file to train on", "%s: empty file", path);
        goto fail;
    }
    if (tokenizer_dir)
        ZT_TRY_GOTO(st, zt_tokenizer_bpe_init(&txt->tok, tokenizer_dir), fail);
    else
        ZT_TRY_GOTO(st, zt_tokenizer_char_init(&txt->tok, buf, len, path), fail);
    ZT_TRY_GOTO(st, zt_tokenizer_encode(&txt->tok, buf, len, path, &txt->ids, &txt->n_ids), fail);
    free(buf);
    buf = NULL;

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
    zt_text_windows *w = malloc(sizeof *w);
    if (!w) {
        st = zt_fail(ZT_ERR_OOM, "", "out of memory loading %s", path);
        goto fail;
    }
    *w = (zt_text_windows){.ids = txt->ids, .n_train = n_train, .block = block};
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
                         .shuffle = false};
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
    free(buf);
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
