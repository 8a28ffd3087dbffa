/*
 * fuzz_tokenizer: libFuzzer harness for the tokenizer files and round trips
 * (data/tokenizer.h).
 *
 * Input: encoder.json, vocab.bpe and a text, separated by ZT_FUZZ_SEP lines
 * (common.h); missing parts are empty. Both files are written to the
 * scratch directory and loaded with zt_tokenizer_bpe_init. Whatever loads
 * must round-trip: decode(encode(text)) == text for valid UTF-8 (and the
 * text is encoded twice, the second time through the piece cache), and every
 * id of the vocabulary decodes. The byte tokenizer round-trips the text too.
 * (The char tokenizer's round trip is fuzz_data's: building a char
 * vocabulary scans all 0x110000 code points, which would halve this
 * harness's speed.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer.h"
#include "tests/fuzz/common.h"

static char zt_tok_dir[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!zt_fuzz_path(zt_tok_dir, sizeof zt_tok_dir, "tok") || mkdir(zt_tok_dir, 0700) != 0)
        zt_tok_dir[0] = '\0';
    return 0;
}

/* decode(encode(text)) == text; false when encoding refuses the text. */
static bool round_trip(const zt_tokenizer *tok, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    if (zt_tokenizer_encode(tok, text, len, "fuzz text", &ids, &n) != ZT_OK)
        return false;
    char *back = NULL;
    size_t back_len = 0;
    zt_fuzz_check(zt_tokenizer_decode(tok, ids, n, &back, &back_len) == ZT_OK);
    zt_fuzz_check(back_len == len && memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    return true;
}

static void fuzz_bpe(const zt_fuzz_part *parts, const char *text, size_t len)
{
    char enc[1100], merges[1100];
    snprintf(enc, sizeof enc, "%s/encoder.json", zt_tok_dir);
    snprintf(merges, sizeof merges, "%s/vocab.bpe", zt_tok_dir);
    if (!zt_fuzz_write(enc, parts[0].data, parts[0].size) ||
        !zt_fuzz_write(merges, parts[1].data, parts[1].size))
        return;
    zt_tokenizer tok;
    if (zt_tokenizer_bpe_init(&tok, zt_tok_dir) != ZT_OK)
        return;
    zt_fuzz_check(tok.vocab_size > 256 && tok.eot_id >= 0 && tok.eot_id < tok.vocab_size);
    if (round_trip(&tok, text, len))
        zt_fuzz_check(round_trip(&tok, text, len));
    int32_t *all = malloc((size_t)tok.vocab_size * sizeof *all);
    zt_fuzz_check(all != NULL);
    for (int64_t i = 0; i < tok.vocab_size; i++)
        all[i] = (int32_t)i;
    char *out = NULL;
    size_t out_len = 0;
    zt_fuzz_check(zt_tokenizer_decode(&tok, all, tok.vocab_size, &out, &out_len) == ZT_OK);
    free(out);
    free(all);
    zt_tokenizer_free(&tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zt_fuzz_part parts[3] = {{0}};
    zt_fuzz_split(data, size, parts, 3);
    char *text = malloc(parts[2].size + 1);
    if (!text || !zt_tok_dir[0]) {
        free(text);
        return 0;
    }
    if (parts[2].size)
        memcpy(text, parts[2].data, parts[2].size);
    text[parts[2].size] = '\0';
    size_t len = parts[2].size;
    fuzz_bpe(parts, text, len);

    zt_tokenizer tok;
    zt_fuzz_check(zt_tokenizer_byte_init(&tok) == ZT_OK);
    (void)round_trip(&tok, text, len);
    zt_tokenizer_free(&tok);
    zt_status_clear();
    free(text);
    return 0;
}
