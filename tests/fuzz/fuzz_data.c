/*
 * fuzz_data: libFuzzer harness for the data loaders (data/text.h,
 * data/labelled.h) on files of arbitrary bytes.
 *
 * Input: one mode byte, then the file's bytes. The mode byte's bits:
 *   bit 0      0: the text loader (language-model windows), 1: the labelled
 *              CSV loader;
 *   bit 1      1: the small BPE tokenizer of common.c (else the text loader's
 *              char vocabulary, the labelled loader's byte tokenizer);
 *   bits 2-4   block size (text) or max_len (labelled): 1 + their value.
 * The file is written to the scratch directory and loaded. A load that
 * succeeds must give samples whose tokens and labels lie in the vocabulary
 * and classes, and the text loader's ids must decode back to the file.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/datamem.h"
#include "data/labelled.h"
#include "data/text.h"
#include "tests/fuzz/common.h"

#define ZT_FUZZ_MAX_SAMPLES 64

static char zt_bpe_dir[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (zt_fuzz_path(zt_bpe_dir, sizeof zt_bpe_dir, "bpe") &&
        (mkdir(zt_bpe_dir, 0700) != 0 || !zt_fuzz_write_bpe(zt_bpe_dir)))
        zt_bpe_dir[0] = '\0';
    return 0;
}

/* Samples [0, ZT_FUZZ_MAX_SAMPLES) and the last one of ds, checked against
 * its declared sizes. */
static void check_samples(const zt_dataset *ds)
{
    zt_fuzz_check(ds->n_samples > 0 && ds->tokens_numel > 0 && ds->labels_numel > 0);
    int32_t *tokens = malloc((size_t)ds->tokens_numel * sizeof *tokens);
    int32_t *labels = malloc((size_t)ds->labels_numel * sizeof *labels);
    zt_fuzz_check(tokens && labels);
    for (int64_t i = 0; i < ds->n_samples && i <= ZT_FUZZ_MAX_SAMPLES; i++) {
        int64_t index = i < ZT_FUZZ_MAX_SAMPLES ? i : ds->n_samples - 1;
        zt_sample s = {.tokens = tokens, .labels = labels};
        ds->get(ds, index, &s);
        zt_fuzz_check(s.length >= 1 && s.length <= ds->tokens_numel);
        zt_fuzz_check(ds->variable_length || s.length == ds->tokens_numel);
        for (int64_t t = 0; t < s.length; t++)
            zt_fuzz_check(tokens[t] >= 0 && tokens[t] < ds->vocab_size);
        for (int64_t l = 0; l < ds->labels_numel; l++)
            zt_fuzz_check(labels[l] >= 0 && labels[l] < ds->n_classes);
    }
    free(tokens);
    free(labels);
}

static void fuzz_text(const char *path, const char *tok_dir, int64_t block, const uint8_t *file,
                      size_t size)
{
    zt_text txt;
    if (zt_text_load(&txt, path, tok_dir, block, 7, NULL) != ZT_OK)
        return;
    zt_fuzz_check(txt.n_ids > 0 && txt.n_train < txt.n_ids);
    check_samples(&txt.train);
    check_samples(&txt.val);
    char *back = NULL;
    size_t len = 0;
    int32_t *ids = malloc((size_t)txt.n_ids * sizeof *ids);
    zt_fuzz_check(ids != NULL);
    zt_ids_load(ids, txt.ids, txt.id_bytes, 0, txt.n_ids);
    zt_fuzz_check(zt_tokenizer_decode(&txt.tok, ids, txt.n_ids, &back, &len) == ZT_OK);
    free(ids);
    zt_fuzz_check(len == size && memcmp(back, file, size) == 0);
    free(back);
    zt_text_free(&txt);
}

static void fuzz_labelled(const char *path, const char *tok_dir, int64_t max_len)
{
    zt_labelled ld;
    if (zt_labelled_load(&ld, path, tok_dir, max_len, NULL) != ZT_OK)
        return;
    check_samples(&ld.train);
    check_samples(&ld.val);
    zt_labelled_free(&ld);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    if (size < 1 || !zt_fuzz_path(path, sizeof path, "data"))
        return 0;
    unsigned mode = data[0];
    const uint8_t *file = data + 1;
    size_t file_size = size - 1;
    if (!zt_fuzz_write(path, file, file_size))
        return 0;
    const char *tok_dir = NULL;
    if (mode & 2) {
        if (!zt_bpe_dir[0])
            return 0;
        tok_dir = zt_bpe_dir;
    }
    int64_t n = 1 + ((mode >> 2) & 7);
    if (mode & 1)
        fuzz_labelled(path, tok_dir, n);
    else
        fuzz_text(path, tok_dir, n, file, file_size);
    zt_status_clear();
    return 0;
}
