/*
 * tokenize-tool: GPT-2 BPE encoding for tests/reference/test_bpe.py.
 *
 *     build/tests/tokenize-tool TOKENIZER_DIR STRINGS_FILE
 *
 * STRINGS_FILE holds one JSON string per line. For each, prints one line
 * {"ids": [...], "roundtrip": true|false} where roundtrip says whether
 * decode(encode(s)) gave s back byte for byte. Exit status 0, or 1 with the
 * error on stderr.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"

static int fail_status(void)
{
    fprintf(stderr, "error: %s\n", zt_status_message());
    if (zt_status_hint()[0])
        fprintf(stderr, "hint: %s\n", zt_status_hint());
    return 1;
}

static int encode_line(const zt_tokenizer *tok, const char *line, long lineno)
{
    json_error_t err;
    json_t *s = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!s || !json_is_string(s)) {
        fprintf(stderr, "error: line %ld: expected one JSON string: %s\n", lineno,
                s ? "not a string" : err.text);
        json_decref(s);
        return 1;
    }
    char what[64];
    snprintf(what, sizeof what, "string %ld", lineno);
    int32_t *ids;
    int64_t n;
    char *back = NULL;
    size_t back_len = 0;
    if (zt_tokenizer_encode(tok, json_string_value(s), json_string_length(s), what, &ids, &n) !=
            ZT_OK ||
        zt_tokenizer_decode(tok, ids, n, &back, &back_len) != ZT_OK) {
        json_decref(s);
        return fail_status();
    }
    bool same =
        back_len == json_string_length(s) && memcmp(back, json_string_value(s), back_len) == 0;
    printf("{\"ids\": [");
    for (int64_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    printf("], \"roundtrip\": %s}\n", same ? "true" : "false");
    free(ids);
    free(back);
    json_decref(s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR STRINGS_FILE\n", argv[0]);
        return 1;
    }
    zt_tokenizer tok;
    if (zt_tokenizer_bpe_init(&tok, argv[1]) != ZT_OK)
        return fail_status();
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        zt_tokenizer_free(&tok);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0)
        rc = encode_line(&tok, line, ++lineno);
    free(line);
    fclose(f);
    zt_tokenizer_free(&tok);
    return rc;
}
