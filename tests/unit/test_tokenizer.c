/* The tokenizers: UTF-8 checking with file and line, the char vocabulary of
 * tiny shakespeare, byte ids, GPT-2 BPE ids (checked against
 * tests/reference/test_bpe.py's independent encoder) and round trips, and the
 * errors for bad tokenizer files.
 *
 * The shared data directory is $ZT_SHARED (tests/env.sh), else ../shared
 * relative to the repository root the runner starts in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/tokenizer.h"

static const char *shared_dir(void)
{
    const char *s = getenv("ZT_SHARED");
    return s && *s ? s : "../shared";
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_bytes(const char *path, const char *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static void write_file(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static void assert_message_has(const char *needle)
{
    if (!strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", zt_status_message(), needle);
}

/* Encodes s and checks the ids, then that they decode back to s. */
static void assert_encodes(const zt_tokenizer *t, const char *s, const int32_t *want, int64_t n)
{
    int32_t *ids;
    int64_t got;
    assert_int_equal(zt_tokenizer_encode(t, s, strlen(s), "test", &ids, &got), ZT_OK);
    if (want) {
        assert_int_equal(got, n);
        assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    }
    char *back;
    size_t len;
    assert_int_equal(zt_tokenizer_decode(t, ids, got, &back, &len), ZT_OK);
    assert_int_equal(len, strlen(s));
    assert_string_equal(back, s);
    free(ids);
    free(back);
}

/* ------------------------------------------------------------------ UTF-8 */

static void test_utf8_good(void **state)
{
    (void)state;
    const char *good[] = {"", "plain ASCII\n", "caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80",
                          "\xEF\xBF\xBF \xF4\x8F\xBF\xBF edge code points", "\xC2\x80"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_int_equal(zt_utf8_check(good[i], strlen(good[i]), "f.txt"), ZT_OK);
    assert_int_equal(zt_utf8_check("a\0b", 3, "f.txt"), ZT_OK); /* NUL is valid UTF-8 */
}

static void test_utf8_bad(void **state)
{
    (void)state;
    static const struct {
        const char *bytes, *message;
    } cases[] = {
        {"ab\n\x80", "f.txt:2: invalid UTF-8 byte 0x80 at offset 3 (unexpected continuation"},
        {"\xC0\xAF", "f.txt:1: invalid UTF-8 byte 0xC0 at offset 0 (overlong"},
        {"x\n\n\xE0\x80\xAF", "f.txt:3: invalid UTF-8 byte 0xE0 at offset 3 (overlong"},
        {"\xF0\x8F\xBF\xBF", "f.txt:1: invalid UTF-8 byte 0xF0 at offset 0 (overlong"},
        {"s \xED\xA0\x80", "f.txt:1: invalid UTF-8 byte 0xED at offset 2 (UTF-16 surrogate"},
        {"\xF4\x90\x80\x80", "f.txt:1: invalid UTF-8 byte 0xF4 at offset 0 (beyond U+10FFFF"},
        {"ok\xF5\x80\x80\x80", "f.txt:1: invalid UTF-8 byte 0xF5 at offset 2 (invalid lead"},
        {"\xFF", "f.txt:1: invalid UTF-8 byte 0xFF at offset 0 (invalid lead"},
        {"a\n\nb\xE2\x82", "f.txt:3: invalid UTF-8 byte 0xE2 at offset 4 (truncated"},
        {"\xE2\x28\xA1", "f.txt:1: invalid UTF-8 byte 0xE2 at offset 0 (truncated"},
        {"caf\xC3\xA9\n\xE9t\xE9", "f.txt:2: invalid UTF-8 byte 0xE9 at offset 6 (truncated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(zt_utf8_check(cases[i].bytes, strlen(cases[i].bytes), "f.txt"),
                         ZT_ERR_DATA);
        assert_message_has(cases[i].message);
        assert_true(zt_status_hint()[0] != '\0');
    }
}

/* ------------------------------------------------------------------- char */

static void test_char_shakespeare(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/data/tinyshakespeare/input.txt", shared_dir());
    size_t len;
    char *text = read_all(path, &len);
    zt_tokenizer t;
    assert_int_equal(zt_tokenizer_char_init(&t, text, len, path), ZT_OK);
    assert_int_equal(t.kind, ZT_TOK_CHAR);
    assert_int_equal(t.vocab_size, 65); /* models.md §2 */
    assert_int_equal(t.eot_id, -1);
    assert_int_equal(t.pad_id, 0);
    /* The sorted vocabulary starts "\n !$&',-.3:;?AB": '\n' is id 0. */
    assert_int_equal(t.start_id, 0);
    int32_t *ids;
    int64_t n;
    assert_int_equal(zt_tokenizer_encode(&t, text, len, path, &ids, &n), ZT_OK);
    assert_int_equal(n, (int64_t)len); /* the file is ASCII */
    /* ids follow byte order: the vocabulary is sorted by code point. */
    for (int64_t i = 1; i < n; i++)
        assert_true((ids[i] < ids[i - 1]) == ((unsigned char)text[i] < (unsigned char)text[i - 1]));
    const int32_t first[] = {18, 47, 56, 57, 58}; /* "First", as in nanoGPT's char model */
    assert_memory_equal(ids, first, sizeof first);
    char *back;
    size_t blen;
    assert_int_equal(zt_tokenizer_decode(&t, ids, n, &back, &blen), ZT_OK);
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
    free(text);
    zt_tokenizer_free(&t);
}

static void test_char_unicode(void **state)
{
    (void)state;
    const char *text = "h\xC3\xA9llo w\xC3\xB6rld \xF0\x9F\x98\x80\nzz";
    zt_tokenizer t;
    assert_int_equal(zt_tokenizer_char_init(&t, text, strlen(text), "t.txt"), ZT_OK);
    /* sorted: \n ' ' d h l o r w z é ö 😀 */
    assert_int_equal(t.vocab_size, 12);
    assert_int_equal(t.start_id, 0);
    const int32_t want[] = {3, 9, 4, 4, 5, 1, 7, 10, 6, 4, 2, 1, 11, 0, 8, 8};
    assert_encodes(&t, text, want, 16);
    /* A character the vocabulary lacks: named with its line. */
    int32_t *ids;
    int64_t n;
    assert_int_equal(zt_tokenizer_encode(&t, "zz\nhq", 5, "prompt", &ids, &n), ZT_ERR_DATA);
    assert_message_has("prompt:2: character U+0071 is not in the vocabulary (12 symbols)");
    /* Out-of-range ids. */
    char *out;
    size_t len;
    const int32_t bad[] = {0, 12};
    assert_int_equal(zt_tokenizer_decode(&t, bad, 2, &out, &len), ZT_ERR_DATA);
    assert_message_has("token id 12 at position 1");
    zt_tokenizer_free(&t);

    assert_int_equal(zt_tokenizer_char_init(&t, "ba", 2, "t.txt"), ZT_OK);
    assert_int_equal(t.start_id, 0); /* no '\n', no <|endoftext|> */
    zt_tokenizer_free(&t);
    assert_int_equal(zt_tokenizer_char_init(&t, "", 0, "empty.txt"), ZT_ERR_DATA);
    assert_message_has("empty.txt");
    assert_int_equal(zt_tokenizer_char_init(&t, "ok\n\xFF", 4, "bad.txt"), ZT_ERR_DATA);
    assert_message_has("bad.txt:2: invalid UTF-8 byte 0xFF at offset 3");
}

/* ------------------------------------------------------------------- byte */

static void test_byte(void **state)
{
    (void)state;
    zt_tokenizer t;
    assert_int_equal(zt_tokenizer_byte_init(&t), ZT_OK);
    assert_int_equal(t.vocab_size, 258);
    assert_int_equal(t.eot_id, 256);
    assert_int_equal(t.pad_id, 257);
    assert_int_equal(t.start_id, 256);
    const int32_t want[] = {0x61, 0xC3, 0xA9, 0x20, 0xF0, 0x9F, 0x98, 0x80};
    assert_encodes(&t, "a\xC3\xA9 \xF0\x9F\x98\x80", want, 8);
    assert_encodes(&t, "", NULL, 0);
    const int32_t special[] = {0x78, 257, 256, 257, 0x79};
    char *out;
    size_t len;
    assert_int_equal(zt_tokenizer_decode(&t, special, 5, &out, &len), ZT_OK);
    assert_string_equal(out, "x<|endoftext|>y");
    free(out);
    const int32_t bad[] = {258};
    assert_int_equal(zt_tokenizer_decode(&t, bad, 1, &out, &len), ZT_ERR_DATA);
    const int32_t neg[] = {-1};
    assert_int_equal(zt_tokenizer_decode(&t, neg, 1, &out, &len), ZT_ERR_DATA);
    int32_t *ids;
    int64_t n;
    assert_int_equal(zt_tokenizer_encode(&t, "\x80", 1, "in.txt", &ids, &n), ZT_ERR_DATA);
    assert_message_has("in.txt:1: invalid UTF-8 byte 0x80 at offset 0");
    zt_tokenizer_free(&t);
}

/* -------------------------------------------------------------------- BPE */

static void bpe_dir(char *buf, size_t n) { snprintf(buf, n, "%s/data/gpt2-bpe", shared_dir()); }

static void test_bpe_known_ids(void **state)
{
    (void)state;
    char dir[4096];
    bpe_dir(dir, sizeof dir);
    zt_tokenizer t;
    assert_int_equal(zt_tokenizer_bpe_init(&t, dir), ZT_OK);
    assert_int_equal(t.kind, ZT_TOK_BPE);
    assert_int_equal(t.vocab_size, 50257);
    assert_int_equal(t.eot_id, 50256);
    assert_int_equal(t.pad_id, 50256);
    assert_int_equal(t.start_id, 50256);
    /* Ids from tests/reference/test_bpe.py's encoder (the first two are also
     * the well-known GPT-2 ids). */
    static const struct {
        const char *s;
        int32_t ids[8];
        int64_t n;
    } cases[] = {
        {"Hello world", {15496, 995}, 2},
        {" Hello", {18435}, 1},
        {"\n", {198}, 1},
        {"I'm here", {40, 1101, 994}, 3},
        {"It'S", {1026, 6, 50}, 3}, /* no contraction for a capital S */
        {"  a", {220, 257}, 2},
        {"a   b", {64, 220, 220, 275}, 4}, /* the last space goes with "b" */
        {"  \n", {220, 220, 198}, 3},
        {"\xE4\xB8\xAD\xE6\x96\x87", {40792, 23877, 229}, 3},
        {"\xF0\x9F\x98\x80", {47249, 222}, 2},
        {"1234567", {10163, 2231, 3134}, 3},
        /* special tokens are not parsed in text */
        {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}, 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        assert_encodes(&t, cases[i].s, cases[i].ids, cases[i].n);
    const int32_t eot[] = {50256, 50256};
    char *out;
    size_t len;
    assert_int_equal(zt_tokenizer_decode(&t, eot, 2, &out, &len), ZT_OK);
    assert_string_equal(out, "<|endoftext|><|endoftext|>");
    free(out);
    const int32_t bad[] = {50257};
    assert_int_equal(zt_tokenizer_decode(&t, bad, 1, &out, &len), ZT_ERR_DATA);
    zt_tokenizer_free(&t);
}

static void test_bpe_round_trip(void **state)
{
    (void)state;
    char dir[4096];
    bpe_dir(dir, sizeof dir);
    zt_tokenizer t;
    assert_int_equal(zt_tokenizer_bpe_init(&t, dir), ZT_OK);
    const char *tricky[] = {
        "",
        " ",
        "   ",
        "\t\t\n \n",
        "trailing spaces   ",
        "  leading",
        "caf\xC3\xA9 \xC3\xBC"
        "ber na\xC3\xAFve",
        "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97\xE7\xAC\xA6",
        "emoji \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!",
        "e\xCC\x81 combining",
        "nbsp\xC2\xA0here\xE3\x80\x80ideographic space",
        "we're they've I'll you'd DON'T 'tis x''s",
        "3.14159 1,000,000 abc123def",
        "!!!???... ---",
        "a\x1c"
        "b\x1f"
        "c",
        "x\0y",
        "line one\r\nline two\r\n",
    };
    for (size_t i = 0; i < sizeof tricky / sizeof *tricky; i++) {
        size_t n = i == 15 ? 3 : strlen(tricky[i]);
        int32_t *ids;
        int64_t k;
        assert_int_equal(zt_tokenizer_encode(&t, tricky[i], n, "tricky", &ids, &k), ZT_OK);
        char *back;
        size_t len;
        assert_int_equal(zt_tokenizer_decode(&t, ids, k, &back, &len), ZT_OK);
        assert_int_equal(len, n);
        assert_memory_equal(back, tricky[i], n);
        free(ids);
        free(back);
    }
    zt_tokenizer_free(&t);
}

static void test_bpe_errors(void **state)
{
    (void)state;
    zt_tokenizer t;
    assert_int_equal(zt_tokenizer_bpe_init(&t, "/nonexistent/tokenizer"), ZT_ERR_IO);
    assert_message_has("/nonexistent/tokenizer/encoder.json: No such file");
    assert_true(strstr(zt_status_hint(), "vocab.bpe") != NULL);

    char tmp[] = "/tmp/zt_test_tok_XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char enc[4096], voc[4096], real[4200];
    snprintf(enc, sizeof enc, "%s/encoder.json", tmp);
    snprintf(voc, sizeof voc, "%s/vocab.bpe", tmp);

    /* Malformed JSON: file, line and column. */
    write_file(enc, "{\"a\": 0,\n \"b\": }\n");
    write_file(voc, "#version: 0.2\n");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("encoder.json:2:");
    assert_message_has("malformed JSON");

    /* The real encoder with a broken vocab.bpe: bad line, unknown token. */
    char dir[4096];
    bpe_dir(dir, sizeof dir);
    snprintf(real, sizeof real, "%s/encoder.json", dir);
    unlink(enc);
    assert_int_equal(symlink(real, enc), 0);
    write_file(voc, "#version: 0.2\n\xC4\xA0 t\nbroken-line\n");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("vocab.bpe:3: expected a merge");
    write_file(voc, "#version: 0.2\n\xC4\xA0 t\n\xC4\xA0 \xE4\xB8\xAD\n");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("vocab.bpe:3: token");
    assert_message_has("is not in encoder.json");
    write_file(voc, "#version: 0.2\n\xC4\xA0 t\n\xC4\xA0 t\n");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("vocab.bpe:3: the merge repeats");
    /* Found by tests/fuzz/fuzz_tokenizer: "o<NUL>u r" was read as the merge
     * o + r -> "o", so encoding dropped every r after an o. */
    static const char nul_line[] = "#version: 0.2\n\xC4\xA0 t\no\0u r\n";
    write_bytes(voc, nul_line, sizeof nul_line - 1);
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("vocab.bpe:3: a NUL byte");
    unlink(voc);
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_IO);
    assert_message_has("vocab.bpe: No such file");

    /* A merges file that is fine on its own: two merges give "Ġt" and "Ġa". */
    write_file(voc, "#version: 0.2\n\xC4\xA0 t\n\xC4\xA0 a\n");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_OK);
    const int32_t want[] = {256, 87, 257, 64}; /* Ġt, x, Ġa, a */
    assert_encodes(&t, " tx aa", want, 4);
    zt_tokenizer_free(&t);

    unlink(voc);
    unlink(enc);
    rmdir(tmp);
}

/* Valid UTF-8 with no control character: what a message may put on a
 * terminal (decoded here, independently of the tokenizer's decoder). */
static void assert_printable(const char *msg)
{
    const unsigned char *p = (const unsigned char *)msg;
    while (*p) {
        unsigned b = *p;
        if (b < 0x20 || b == 0x7F)
            fail_msg("message \"%s\" has control byte 0x%02X", msg, b);
        int n = b < 0x80                ? 1
                : (b & 0xE0) == 0xC0 ? 2
                : (b & 0xF0) == 0xE0 ? 3
                : (b & 0xF8) == 0xF0 ? 4
                                     : 0;
        for (int k = 1; k < n; k++)
            if ((p[k] & 0xC0) != 0x80)
                n = 0;
        if (!n || (n == 2 && b < 0xC2))
            fail_msg("message has a raw non-UTF-8 byte 0x%02X", b);
        p += n;
    }
}

/* Bytes of a user's tokenizer files in a message are escaped and capped:
 * a vocab.bpe cut inside a character used to put the raw half character on
 * the terminal, and encoder.json's parse errors a raw ESC. */
static void test_bpe_error_quoting(void **state)
{
    (void)state;
    char tmp[] = "/tmp/zt_test_tokq_XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char enc[4096], voc[4096], real[4200], dir[4096];
    snprintf(enc, sizeof enc, "%s/encoder.json", tmp);
    snprintf(voc, sizeof voc, "%s/vocab.bpe", tmp);
    bpe_dir(dir, sizeof dir);
    snprintf(real, sizeof real, "%s/encoder.json", dir);
    assert_int_equal(symlink(real, enc), 0);
    zt_tokenizer t;

    /* The real vocab.bpe cut inside the 2-byte U+00C3 of its line 12212. */
    size_t len;
    char path[4200];
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    char *full = read_all(path, &len);
    const char *cut = strstr(full, "\n\xC4\xA0 \xC3\x90\n");
    assert_non_null(cut);
    write_bytes(voc, full, (size_t)(cut - full) + 5);
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("vocab.bpe:12212: token \"\\xC3\" is not in encoder.json");
    assert_printable(zt_status_message());
    free(full);

    /* A line cut before its space: the half character is the whole line. */
    write_file(voc, "#version: 0.2\n\xC4\xA0 t\n\xE4\xB8");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("vocab.bpe:3: expected a merge \"LEFT RIGHT\" (two tokens, one space), "
                       "got \"\\xE4\\xB8\"");
    assert_printable(zt_status_message());

    /* Terminal escapes and a long line: escaped, and cut with its length. */
    char line[600] = "#version: 0.2\n\x1b]0;x\x07";
    size_t n = strlen(line);
    memset(line + n, 'q', 500);
    line[n + 500] = '\0';
    write_file(voc, line);
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("got \"\\x1B]0;x\\x07qqq");
    assert_message_has("... (506 bytes)\"");
    assert_true(strlen(zt_status_message()) < 400);
    assert_printable(zt_status_message());

    /* encoder.json: jansson quotes the bad token of a parse error raw. */
    unlink(enc);
    write_file(enc, "{\"a\": \x1b[31m}");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("malformed JSON: invalid token near '\\x1B'");
    assert_printable(zt_status_message());
    /* A token with a control character: outside GPT-2's byte alphabet. */
    write_file(enc, "{\"\\u001b[2J\": 0}");
    assert_int_equal(zt_tokenizer_bpe_init(&t, tmp), ZT_ERR_DATA);
    assert_message_has("token \"\\x1B[2J\" has a character outside");
    assert_printable(zt_status_message());

    unlink(voc);
    unlink(enc);
    rmdir(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_good),
        cmocka_unit_test(test_utf8_bad),
        cmocka_unit_test(test_char_shakespeare),
        cmocka_unit_test(test_char_unicode),
        cmocka_unit_test(test_byte),
        cmocka_unit_test(test_bpe_known_ids),
        cmocka_unit_test(test_bpe_round_trip),
        cmocka_unit_test(test_bpe_errors),
        cmocka_unit_test(test_bpe_error_quoting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
