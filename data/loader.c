/*
 * loader: a model's data by kind (data/loader.h).
 */
#include "data/loader.h"

#include <string.h>

#include "data/synthetic.h"

zt_status zt_data_load(zt_data *d, zt_data_kind kind, const char *path,
                       const char *tokenizer_dir, int64_t seq_len, uint64_t seed,
                       const zt_data_budget *budget)
{
    memset(d, 0, sizeof *d);
    d->kind = kind;
    if (kind == ZT_DATA_TEXT) {
        ZT_TRY(zt_text_load(&d->text, path, tokenizer_dir, seq_len, seed, budget));
        d->train = &d->text.train;
        d->val = &d->text.val;
        d->tok = &d->text.tok;
    } else if (kind == ZT_DATA_LABELLED) {
        ZT_TRY(zt_labelled_load(&d->labelled, path, tokenizer_dir, seq_len, budget));
        d->train = &d->labelled.train;
        d->val = &d->labelled.val;
        d->tok = &d->labelled.tok;
    }
    return ZT_OK;
}

void zt_data_synthetic(zt_data *d, int64_t n_samples, int64_t in_size, int64_t n_classes,
                       uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->kind = ZT_DATA_SYNTHETIC;
    zt_synthetic_init(&d->synthetic, n_samples, in_size, n_classes, seed);
    d->train = &d->synthetic;
}

void zt_data_free(zt_data *d)
{
    if (d->train == &d->synthetic)
        d->synthetic.free(&d->synthetic);
    else if (d->train == &d->text.train)
        zt_text_free(&d->text);
    else if (d->train == &d->labelled.train)
        zt_labelled_free(&d->labelled);
    d->train = d->val = NULL;
    d->tok = NULL;
}
