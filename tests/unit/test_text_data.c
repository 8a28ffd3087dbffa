/* The text data sets: language-model windows (text.h) against a direct
 * computation of the formula, split sizes and the file errors; the labelled
 * IMDB loaders (labelled.h): CSV quoting, header order, <br />, truncation,
 * the tenth-row split, the aclImdb layout, their errors (line endings, open
 * quotes and extra columns included), and the real imdb-2500.csv.
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/labelled.h"
#include "data/text.h"

static char tmp_dir[] = "/tmp/zt_test_text_XXXXXX";

static const char *shared_dir(void)
{
    const char *s = getenv("ZT_SHARED");
    return s && *s ? s : "../shared";
}

static const char *tmp_path(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmp_dir, name);
    return p;
}

static void write_bytes(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void write_file(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text));
}

static void assert_message_has(const char *needle)
{
    if (!strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", zt_status_message(), needle);
}

/* engine/rng.h's definition, written out again so a slip there cannot hide. */
static uint64_t splitmix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t window_draw(uint64_t seed, uint64_t i)
{
    return splitmix(splitmix(splitmix(seed) ^ 5) ^ i); /* stream 5: text windows */
}

/* n characters from "\nabcdefgh" (char ids 0..8 in that order). */
static char *alphabet_text(size_t n)
{
    static const char alpha[] = "\nabcdefgh";
    char *s = malloc(n + 1);
    assert_non_null(s);
    uint64_t x = 7;
    for (size_t i = 0; i < n; i++) {
        x = splitmix(x);
        s[i] = alpha[x % 9];
    }
    s[n] = '\0';
    return s;
}

static int32_t alpha_id(char c) { return c == '\n' ? 0 : c - 'a' + 1; }

/* ------------------------------------------------------------------- text */

static void test_text_windows(void **state)
{
    (void)state;
    enum { N = 1000, BLOCK = 8 };
    char *s = alphabet_text(N);
    write_file(tmp_path("a.txt"), s);
    zt_text txt;
    assert_int_equal(zt_text_load(&txt, tmp_path("a.txt"), NULL, BLOCK, 42, NULL), ZT_OK);
    assert_int_equal(txt.tok.vocab_size, 9);
    assert_int_equal(txt.n_ids, N);
    assert_int_equal(txt.n_train, 900);
    assert_int_equal(txt.block, BLOCK);
    assert_int_equal(txt.train.n_samples, (900 - 1) / BLOCK);
    assert_int_equal(txt.val.n_samples, (100 - 1) / BLOCK);
    for (int s_ = 0; s_ < 2; s_++) {
        const zt_dataset *ds = s_ ? &txt.val : &txt.train;
        assert_int_equal(ds->x_numel, 0);
        assert_int_equal(ds->tokens_numel, BLOCK);
        assert_int_equal(ds->labels_numel, BLOCK);
        assert_int_equal(ds->n_classes, 9);
        assert_int_equal(ds->vocab_size, 9);
        assert_int_equal(ds->pad_id, 0);
        assert_false(ds->variable_length);
        assert_false(ds->shuffle);
    }
    int32_t tokens[BLOCK], labels[BLOCK];
    zt_sample smp = {.tokens = tokens, .labels = labels};
    for (int64_t i = 0; i < txt.train.n_samples; i++) {
        int64_t o = (int64_t)(window_draw(42, (uint64_t)i) % (900 - BLOCK));
        txt.train.get(&txt.train, i, &smp);
        assert_int_equal(smp.length, BLOCK);
        for (int k = 0; k < BLOCK; k++) {
            assert_int_equal(tokens[k], alpha_id(s[o + k]));
            assert_int_equal(labels[k], alpha_id(s[o + k + 1]));
        }
    }
    for (int64_t j = 0; j < txt.val.n_samples; j++) {
        int64_t o = 900 + j * BLOCK;
        txt.val.get(&txt.val, j, &smp);
        assert_int_equal(smp.length, BLOCK);
        for (int k = 0; k < BLOCK; k++) {
            assert_int_equal(tokens[k], alpha_id(s[o + k]));
            assert_int_equal(labels[k], alpha_id(s[o + k + 1]));
        }
    }
    /* Another seed, other windows. */
    zt_text other;
    assert_int_equal(zt_text_load(&other, tmp_path("a.txt"), NULL, BLOCK, 43, NULL), ZT_OK);
    int32_t t2[BLOCK], l2[BLOCK];
    zt_sample smp2 = {.tokens = t2, .labels = l2};
    int differ = 0;
    for (int64_t i = 0; i < 20; i++) {
        txt.train.get(&txt.train, i, &smp);
        other.train.get(&other.train, i, &smp2);
        differ += memcmp(tokens, t2, sizeof t2) != 0;
    }
    assert_true(differ > 10);
    zt_text_free(&other);
    zt_text_free(&txt);
    free(s);
}

static void test_text_split_edges(void **state)
{
    (void)state;
    /* 1005 ids: the validation split is the last 1005 / 10 = 100. */
    char *s = alphabet_text(1005);
    write_file(tmp_path("b.txt"), s);
    zt_text txt;
    assert_int_equal(zt_text_load(&txt, tmp_path("b.txt"), NULL, 4, 1, NULL), ZT_OK);
    assert_int_equal(txt.n_train, 905);
    assert_int_equal(txt.train.n_samples, 904 / 4);
    assert_int_equal(txt.val.n_samples, 99 / 4);
    zt_text_free(&txt);
    free(s);

    /* 90 ids, block 8: 81 train and 9 validation ids, one window each. */
    s = alphabet_text(90);
    write_file(tmp_path("c.txt"), s);
    assert_int_equal(zt_text_load(&txt, tmp_path("c.txt"), NULL, 8, 1, NULL), ZT_OK);
    assert_int_equal(txt.train.n_samples, 10);
    assert_int_equal(txt.val.n_samples, 1);
    int32_t tokens[8], labels[8];
    zt_sample smp = {.tokens = tokens, .labels = labels};
    txt.val.get(&txt.val, 0, &smp);
    assert_int_equal(tokens[0], alpha_id(s[81]));
    assert_int_equal(labels[7], alpha_id(s[89]));
    zt_text_free(&txt);
    free(s);

    /* 89 ids: only 8 for validation, too few for block 8. */
    s = alphabet_text(89);
    write_file(tmp_path("d.txt"), s);
    assert_int_equal(zt_text_load(&txt, tmp_path("d.txt"), NULL, 8, 1, NULL), ZT_ERR_DATA);
    assert_message_has(tmp_path("d.txt"));
    assert_message_has("89 tokens (81 train, 8 validation)");
    assert_message_has("block 8");
    assert_true(strstr(zt_status_hint(), "--block-size") != NULL);
    free(s);
    assert_int_equal(zt_text_load(&txt, tmp_path("c.txt"), NULL, 0, 1, NULL), ZT_ERR_USAGE);
}

static void test_text_errors(void **state)
{
    (void)state;
    zt_text txt;
    assert_int_equal(zt_text_load(&txt, tmp_path("missing.txt"), NULL, 8, 1, NULL), ZT_ERR_IO);
    assert_message_has("missing.txt: No such file or directory");
    write_file(tmp_path("empty.txt"), "");
    assert_int_equal(zt_text_load(&txt, tmp_path("empty.txt"), NULL, 8, 1, NULL), ZT_ERR_DATA);
    assert_message_has("empty.txt: empty file");
    write_file(tmp_path("bad.txt"), "line one\nline two\nline \xC3(three)\n");
    assert_int_equal(zt_text_load(&txt, tmp_path("bad.txt"), NULL, 2, 1, NULL), ZT_ERR_DATA);
    assert_message_has("bad.txt:3: invalid UTF-8 byte 0xC3 at offset 23");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/data/gpt2-bpe", shared_dir());
    assert_int_equal(zt_text_load(&txt, tmp_path("bad.txt"), dir, 2, 1, NULL), ZT_ERR_DATA);
    assert_message_has("bad.txt:3: invalid UTF-8");
    assert_int_equal(zt_text_load(&txt, tmp_path("bad.txt"), "/nonexistent", 2, 1, NULL),
                     ZT_ERR_IO);
    assert_message_has("/nonexistent/encoder.json");
}

static void test_text_shakespeare(void **state)
{
    (void)state;
    char path[4096], dir[4096];
    snprintf(path, sizeof path, "%s/data/tinyshakespeare/input.txt", shared_dir());
    snprintf(dir, sizeof dir, "%s/data/gpt2-bpe", shared_dir());
    zt_text txt;
    assert_int_equal(zt_text_load(&txt, path, NULL, 2048, 1337, NULL), ZT_OK);
    assert_int_equal(txt.tok.vocab_size, 65);
    assert_int_equal(txt.n_ids, 1115394);
    assert_int_equal(txt.train.n_samples, (1115394 - 111539 - 1) / 2048);
    assert_int_equal(txt.val.n_samples, (111539 - 1) / 2048);
    zt_text_free(&txt);
    /* GPT-2 BPE: 338025 tokens (as tiktoken's gpt2 encoding gives). */
    assert_int_equal(zt_text_load(&txt, path, dir, 1024, 1337, NULL), ZT_OK);
    assert_int_equal(txt.tok.vocab_size, 50257);
    assert_int_equal(txt.n_ids, 338025);
    assert_int_equal(txt.train.vocab_size, 50257);
    assert_int_equal(txt.train.pad_id, 50256);
    zt_text_free(&txt);
}

/* -------------------------------------------------------------- labelled */

typedef struct {
    int32_t tokens[64];
    int32_t label;
    int64_t length;
} got_sample;

static got_sample get(const zt_dataset *ds, int64_t i)
{
    got_sample g;
    for (int k = 0; k < 64; k++)
        g.tokens[k] = -7; /* what get() must leave alone past length */
    zt_sample smp = {.tokens = g.tokens, .labels = &g.label};
    ds->get(ds, i, &smp);
    g.length = smp.length;
    for (int64_t k = g.length; k < 64; k++)
        assert_int_equal(g.tokens[k], -7);
    return g;
}

/* A byte-tokenised sample is its text. */
static void assert_sample(const zt_dataset *ds, int64_t i, const char *text, int32_t label)
{
    got_sample g = get(ds, i);
    assert_int_equal(g.label, label);
    size_t n = strlen(text);
    if ((size_t)g.length != n)
        fail_msg("sample %lld: length %lld, want %zu (\"%s\")", (long long)i, (long long)g.length,
                 n, text);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(g.tokens[k], (unsigned char)text[k]);
}

static void test_csv_quoting(void **state)
{
    (void)state;
    /* Columns in another order, an extra column, quotes, commas, newlines,
     * CRLF, padded labels, <br />, a blank line. */
    write_file(tmp_path("q.csv"), "id,sentiment,review\r\n"
                                  "1,positive,plain review\r\n"
                                  "2, negative ,\"with, comma and \"\"quotes\"\"\"\r\n"
                                  "3,positive,\"multi\nline\r\nreview\"\r\n"
                                  "\r\n"
                                  "4,negative,a<br /><br />b<br />\n"
                                  "5,positive,\"ends with a quote\"\"\"");
    zt_labelled ld;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("q.csv"), NULL, 64, NULL), ZT_ERR_DATA);
    assert_message_has("no validation reviews (5 training, 0 validation)");
    /* Ten rows: the tenth is held out. */
    write_file(tmp_path("q.csv"),
               "id,sentiment,review\r\n"
               "1,positive,plain review\r\n"
               "2, negative ,\"with, comma and \"\"quotes\"\"\"\r\n"
               "3,positive,\"multi\nline\r\nreview\"\r\n"
               "\r\n"
               "4,negative,a<br /><br />b<br />\n"
               "5,positive,\"ends with a quote\"\"\"\n"
               "6,positive,six\n7,positive,seven\n8,negative,eight\n9,negative,nine\n"
               "10,negative,ten\n");
    assert_int_equal(zt_labelled_load(&ld, tmp_path("q.csv"), NULL, 64, NULL), ZT_OK);
    assert_int_equal(ld.train.n_samples, 9);
    assert_int_equal(ld.val.n_samples, 1);
    assert_sample(&ld.train, 0, "plain review", 1);
    assert_sample(&ld.train, 1, "with, comma and \"quotes\"", 0);
    assert_sample(&ld.train, 2, "multi\nline\r\nreview", 1);
    assert_sample(&ld.train, 3, "a  b ", 0);
    assert_sample(&ld.train, 4, "ends with a quote\"", 1);
    assert_sample(&ld.train, 8, "nine", 0);
    assert_sample(&ld.val, 0, "ten", 0);
    for (int s = 0; s < 2; s++) {
        const zt_dataset *ds = s ? &ld.val : &ld.train;
        assert_int_equal(ds->x_numel, 0);
        assert_int_equal(ds->tokens_numel, 64);
        assert_int_equal(ds->labels_numel, 1);
        assert_int_equal(ds->n_classes, 2);
        assert_int_equal(ds->vocab_size, 258);
        assert_int_equal(ds->pad_id, 257);
        assert_true(ds->variable_length);
        assert_int_equal(ds->shuffle, s == 0);
    }
    zt_labelled_free(&ld);
}

static void test_csv_split_and_truncation(void **state)
{
    (void)state;
    /* 25 rows: rows 9 and 19 (0-based) are the validation split. */
    char csv[8192] = "review,sentiment\n";
    for (int j = 0; j < 25; j++) {
        char row[128];
        snprintf(row, sizeof row, "\"review number %02d, quite long\",%s\n", j,
                 j % 3 ? "positive" : "negative");
        strcat(csv, row);
    }
    write_file(tmp_path("s.csv"), csv);
    zt_labelled ld;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("s.csv"), NULL, 16, NULL), ZT_OK);
    assert_int_equal(ld.train.n_samples, 23);
    assert_int_equal(ld.val.n_samples, 2);
    assert_int_equal(ld.train.tokens_numel, 16);
    assert_sample(&ld.val, 0, "review number 09", 0);
    assert_sample(&ld.val, 1, "review number 19", 1);
    assert_sample(&ld.train, 8, "review number 08", 1);
    assert_sample(&ld.train, 9, "review number 10", 1);
    assert_sample(&ld.train, 22, "review number 24", 0);
    zt_labelled_free(&ld);

    /* A review shorter than max_len keeps its length. */
    assert_int_equal(zt_labelled_load(&ld, tmp_path("s.csv"), NULL, 40, NULL), ZT_OK);
    assert_sample(&ld.train, 0, "review number 00, quite long", 0);
    zt_labelled_free(&ld);
    assert_int_equal(zt_labelled_load(&ld, tmp_path("s.csv"), NULL, 0, NULL), ZT_ERR_USAGE);
}

static void test_csv_errors(void **state)
{
    (void)state;
    static const struct {
        const char *csv, *message;
        zt_status st;
    } cases[] = {
        {"review,sentiment\n\"a\nb\",positive\n\"c\",neutral\n",
         "e.csv:4: unknown label \"neutral\"", ZT_ERR_DATA},
        {"text,sentiment\nhello,positive\n", "e.csv:1: the header has no \"review\" column",
         ZT_ERR_DATA},
        {"review,label\nhello,positive\n", "e.csv:1: the header has no \"sentiment\" column",
         ZT_ERR_DATA},
        {"review,sentiment\nok,positive\n\"never closed,positive\nmore\n",
         "e.csv:3: unterminated quoted field", ZT_ERR_DATA},
        {"sentiment,review\npositive,fine\nnegative\n", "e.csv:3: too few columns (1;",
         ZT_ERR_DATA},
        {"review,sentiment\n\"quoted\"junk,positive\n", "e.csv:2: unexpected text after",
         ZT_ERR_DATA},
        {"review,sentiment\nfine,positive\n<br /> <br />,negative\n",
         "e.csv:3: the review is empty", ZT_ERR_DATA},
        {"review,sentiment\nfine,positive\n\n\nbad \xFE,negative\n",
         "e.csv:5: invalid UTF-8 byte 0xFE at offset 37", ZT_ERR_DATA},
        {"", "e.csv: empty file", ZT_ERR_DATA},
        {"review,sentiment\n", "e.csv: no training reviews", ZT_ERR_DATA},
        /* A header of empty fields only (found by fuzz_data: UBSan saw the
         * record's text still unallocated). */
        {",\nhello,positive\n",
         "e.csv:1: the header has no \"review\" column (its columns: \"\", \"\")", ZT_ERR_DATA},
        /* What the messages quote from the file is escaped, never raw: a
         * terminal's escape sequence, a bidi override, a long header. */
        {"\x1b]0;owned\x07review2,sentiment\nhello,positive\n",
         "e.csv:1: the header has no \"review\" column (its columns: "
         "\"\\x1B]0;owned\\x07review2\", \"sentiment\")",
         ZT_ERR_DATA},
        {"review,sentiment\nhello,\xE2\x80\xAE" "evitagen\n",
         "e.csv:2: unknown label \"\\u{202E}evitagen\"", ZT_ERR_DATA},
        {"review,sentiment\nhello,positive positive positive positive positive positive "
         "positive positive\n",
         "e.csv:2: unknown label \"positive positive positive positive positive positive "
         "positi... (71 bytes)\"",
         ZT_ERR_DATA},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_file(tmp_path("e.csv"), cases[i].csv);
        zt_labelled ld;
        assert_int_equal(zt_labelled_load(&ld, tmp_path("e.csv"), NULL, 32, NULL), cases[i].st);
        assert_message_has(cases[i].message);
    }
    zt_labelled ld;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("nope.csv"), NULL, 32, NULL), ZT_ERR_IO);
    assert_message_has("nope.csv: No such file or directory");
}

/* Line endings, quotes and columns whose errors used to mislead: CR-only
 * lines got no hint, a quote left open was reported on the line after it,
 * and rows with extra columns were read silently. */
static void test_csv_layout_errors(void **state)
{
    (void)state;
    static const struct {
        const char *csv, *message, *hint;
    } cases[] = {
        {"review,sentiment\rfine,positive\rbad,negative\r",
         "e.csv: its lines end in a carriage return alone", "tr '\\r' '\\n'"},
        {"review,sentiment\rfine,positive\nbad,negative\n",
         "e.csv:1: the header has no \"sentiment\" column", "carriage return"},
        {"review,sentiment\nok,positive\n\"never closed,positive\n\"next\",negative\n",
         "e.csv:3: a quoted field opens here and runs on to line 4", "close the quoted field"},
        {"review,sentiment\nfine,positive\ngood, but long,negative\n",
         "e.csv:3: too many columns (3 where the header has 2; expected review,sentiment)",
         "quote a review that contains a comma"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_file(tmp_path("e.csv"), cases[i].csv);
        zt_labelled ld;
        assert_int_equal(zt_labelled_load(&ld, tmp_path("e.csv"), NULL, 32, NULL), ZT_ERR_DATA);
        assert_message_has(cases[i].message);
        if (!strstr(zt_status_hint(), cases[i].hint))
            fail_msg("hint \"%s\" lacks \"%s\"", zt_status_hint(), cases[i].hint);
    }
}

static void make_dir(const char *rel) { assert_int_equal(mkdir(tmp_path(rel), 0755), 0); }

static void review_file(const char *rel, const char *text) { write_file(tmp_path(rel), text); }

static void test_aclimdb_dir(void **state)
{
    (void)state;
    make_dir("acl");
    make_dir("acl/train");
    make_dir("acl/train/pos");
    make_dir("acl/train/neg");
    review_file("acl/train/pos/10_9.txt", "great<br />film");
    review_file("acl/train/pos/2_8.txt", "fine");
    review_file("acl/train/pos/notes.md", "not a review");
    review_file("acl/train/neg/0_1.txt", "awful");
    review_file("acl/train/urls_pos.txt", "not a review either");
    /* Without test/: every tenth training review is held out, and this tree
     * has too few. */
    zt_labelled ld;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl"), NULL, 8, NULL), ZT_ERR_DATA);
    assert_message_has("no validation reviews (3 training, 0 validation)");

    make_dir("acl/test");
    make_dir("acl/test/pos");
    make_dir("acl/test/neg");
    review_file("acl/test/pos/1_10.txt", "loved it");
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl"), NULL, 8, NULL), ZT_ERR_DATA);
    assert_message_has("acl/test/neg: empty directory");
    review_file("acl/test/neg/3_2.txt", "hated it, a waste of time");
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl"), NULL, 8, NULL), ZT_OK);
    assert_int_equal(ld.train.n_samples, 3);
    assert_int_equal(ld.val.n_samples, 2);
    /* Name order (strcmp), pos before neg. */
    assert_sample(&ld.train, 0, "great fi", 1);
    assert_sample(&ld.train, 1, "fine", 1);
    assert_sample(&ld.train, 2, "awful", 0);
    assert_sample(&ld.val, 0, "loved it", 1);
    assert_sample(&ld.val, 1, "hated it", 0);
    assert_true(ld.train.shuffle);
    assert_false(ld.val.shuffle);
    zt_labelled_free(&ld);

    /* Errors name the file. */
    review_file("acl/train/neg/1_3.txt", "bad \xC3\x28 byte");
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl"), NULL, 8, NULL), ZT_ERR_DATA);
    assert_message_has("acl/train/neg/1_3.txt:1: invalid UTF-8 byte 0xC3 at offset 4");
    review_file("acl/train/neg/1_3.txt", " <br />\n");
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl"), NULL, 8, NULL), ZT_ERR_DATA);
    assert_message_has("acl/train/neg/1_3.txt: the review is empty");
    unlink(tmp_path("acl/train/neg/1_3.txt"));

    /* Without test/ and enough reviews: the tenth (pos then neg) is held out. */
    make_dir("acl2");
    make_dir("acl2/train");
    make_dir("acl2/train/pos");
    make_dir("acl2/train/neg");
    for (int j = 0; j < 12; j++) {
        char rel[64], text[32];
        snprintf(rel, sizeof rel, "acl2/train/%s/%02d_5.txt", j < 7 ? "pos" : "neg", j);
        snprintf(text, sizeof text, "review %02d", j);
        review_file(rel, text);
    }
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl2"), NULL, 32, NULL), ZT_OK);
    assert_int_equal(ld.train.n_samples, 11);
    assert_int_equal(ld.val.n_samples, 1);
    assert_sample(&ld.val, 0, "review 09", 0);
    assert_sample(&ld.train, 6, "review 06", 1);
    assert_sample(&ld.train, 9, "review 10", 0);
    zt_labelled_free(&ld);

    make_dir("acl3");
    assert_int_equal(zt_labelled_load(&ld, tmp_path("acl3"), NULL, 8, NULL), ZT_ERR_DATA);
    assert_message_has("acl3/train/pos: No such file or directory");
}

static void test_imdb_2500(void **state)
{
    (void)state;
    char path[4096], dir[4096];
    snprintf(path, sizeof path, "%s/data/imdb/imdb-2500.csv", shared_dir());
    snprintf(dir, sizeof dir, "%s/data/gpt2-bpe", shared_dir());
    /* 2500 rows: 1266 positive, 1234 negative; the held-out tenth (250 rows)
     * has 134 positive and 116 negative. */
    for (int bpe = 0; bpe < 2; bpe++) {
        zt_labelled ld;
        assert_int_equal(zt_labelled_load(&ld, path, bpe ? dir : NULL, 1024, NULL), ZT_OK);
        assert_int_equal(ld.train.n_samples, 2250);
        assert_int_equal(ld.val.n_samples, 250);
        assert_int_equal(ld.train.vocab_size, bpe ? 50257 : 258);
        int32_t *tokens = malloc(1024 * sizeof *tokens);
        int32_t label;
        zt_sample smp = {.tokens = tokens, .labels = &label};
        int64_t pos[2] = {0, 0}, truncated = 0;
        for (int s = 0; s < 2; s++) {
            const zt_dataset *ds = s ? &ld.val : &ld.train;
            for (int64_t i = 0; i < ds->n_samples; i++) {
                ds->get(ds, i, &smp);
                assert_true(smp.length >= 1 && smp.length <= 1024);
                assert_true(label == 0 || label == 1);
                for (int64_t k = 0; k < smp.length; k++)
                    assert_true(tokens[k] >= 0 && tokens[k] < ds->vocab_size);
                pos[s] += label;
                truncated += smp.length == 1024;
            }
        }
        assert_int_equal(pos[0] + pos[1], 1266);
        assert_int_equal(pos[1], 134);
        assert_true(truncated > 0); /* the longest reviews exceed 1024 tokens */
        free(tokens);
        zt_labelled_free(&ld);
    }
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_windows), cmocka_unit_test(test_text_split_edges),
        cmocka_unit_test(test_text_errors),  cmocka_unit_test(test_text_shakespeare),
        cmocka_unit_test(test_csv_quoting),  cmocka_unit_test(test_csv_split_and_truncation),
        cmocka_unit_test(test_csv_errors),   cmocka_unit_test(test_aclimdb_dir),
        cmocka_unit_test(test_csv_layout_errors),
        cmocka_unit_test(test_imdb_2500),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
