/* What loading data holds on the host (data/datamem.h), and what happens
 * when it does not fit:
 *   - ids at their width, stored and widened back at the boundaries;
 *   - the data sets' memory against the file's size: char text N bytes of
 *     ASCII is N ids of 1 byte, tiny shakespeare's GPT-2 BPE is 338025 ids
 *     (tiktoken's count) of 2 bytes, a CSV's reviews 2 bytes a token and 16
 *     a review; loading's peak within the stated read buffers of the ids;
 *   - the file read in pieces (ZT_TEXT_CHUNK_BYTES) gives the ids of the
 *     whole file, char and BPE, for pieces from 16 bytes up, and UTF-8 errors
 *     keep the file's line and offset;
 *   - a budget the data does not fit is ZT_ERR_OOM with the breakdown before
 *     the ids are allocated (a CSV before it is read), and one that fits
 *     exactly loads;
 *   - an allocation that fails anyway (an address-space limit, set in a
 *     child process) names the file, the bytes and gives a hint; jansson
 *     running out of memory on encoder.json is ZT_ERR_OOM, not "malformed
 *     JSON". Skipped under AddressSanitizer, which reserves terabytes of
 *     address space at start;
 *   - loading 48 MiB of text raises a fresh process's peak RSS by under
 *     1.5 x the file (skipped under AddressSanitizer too).
 *
 * The shared data directory is $ZT_SHARED (tests/env.sh), else ../shared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/datamem.h"
#include "data/labelled.h"
#include "data/text.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static char tmp_dir[] = "/tmp/zt_test_datamem_XXXXXX";

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

static void assert_message_has(const char *needle)
{
    if (!strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", zt_status_message(), needle);
}

static void shakespeare(char *path, size_t n)
{
    snprintf(path, n, "%s/data/tinyshakespeare/input.txt", shared_dir());
}

static void bpe_dir(char *dir, size_t n) { snprintf(dir, n, "%s/data/gpt2-bpe", shared_dir()); }

/* n bytes of ASCII from 9 symbols. */
static char *ascii_text(size_t n)
{
    static const char alpha[] = "\nabcdefgh";
    char *s = malloc(n + 1);
    assert_non_null(s);
    uint64_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        s[i] = alpha[(x >> 33) % 9];
    }
    s[n] = '\0';
    return s;
}

static void test_ids_width(void **state)
{
    (void)state;
    assert_int_equal(zt_ids_width(1), 1);
    assert_int_equal(zt_ids_width(256), 1);
    assert_int_equal(zt_ids_width(257), 2);
    assert_int_equal(zt_ids_width(50257), 2);
    assert_int_equal(zt_ids_width(65536), 2);
    assert_int_equal(zt_ids_width(65537), 4);
    const int32_t ids[] = {0, 1, 255, 256, 65535, 65536, 2147483647};
    const int n_fit[] = {3, 5, 7}; /* how many of ids fit widths 1, 2, 4 */
    for (int k = 0; k < 3; k++) {
        int w = 1 << k;
        unsigned char store[64];
        int32_t back[8];
        memset(store, 0xAB, sizeof store);
        zt_ids_store(store, w, 1, ids, n_fit[k]);
        zt_ids_load(back, store, w, 1, n_fit[k]);
        assert_memory_equal(back, ids, (size_t)n_fit[k] * sizeof *ids);
        /* Nothing outside [1, 1 + n) was written. */
        for (int b = 0; b < w; b++)
            assert_int_equal(store[b], 0xAB);
        assert_int_equal(store[(size_t)w * (size_t)(1 + n_fit[k])], 0xAB);
    }
}

static void test_memory_formula(void **state)
{
    (void)state;
    /* Char text: N ids of 1 byte; nothing else but the vocabulary. */
    enum { N = 3 << 20 };
    char *s = ascii_text(N);
    write_bytes(tmp_path("a.txt"), s, N);
    zt_text txt;
    assert_int_equal(zt_text_load(&txt, tmp_path("a.txt"), NULL, 8, 1, NULL), ZT_OK);
    const zt_data_memory *m = txt.train.memory;
    assert_non_null(m);
    assert_ptr_equal(txt.val.memory, m);
    assert_int_equal(m->file_bytes, N);
    assert_int_equal(m->tokens, N);
    assert_int_equal(m->token_bytes, 1);
    assert_int_equal(m->ids_bytes, N);
    assert_int_equal(m->index_bytes, 0);
    assert_true(m->tokenizer_bytes > 0 && m->tokenizer_bytes < 4096);
    assert_int_equal(m->held_bytes, m->ids_bytes + m->tokenizer_bytes);
    assert_int_equal(m->buffer_bytes, 0);
    /* The peak: the ids and the read buffers (1 MiB of text, 4 MiB of one
     * piece's int32 ids), never the file and its int32 ids at once. */
    assert_true(m->peak_bytes >= m->held_bytes);
    assert_true(m->peak_bytes <= m->held_bytes + ZT_TEXT_CHUNK + 4 * ZT_TEXT_CHUNK);
    zt_text_free(&txt);
    free(s);

    /* GPT-2 BPE: tiny shakespeare's 338025 tokens of 2 bytes. */
    char path[4096], dir[4096];
    shakespeare(path, sizeof path);
    bpe_dir(dir, sizeof dir);
    assert_int_equal(zt_text_load(&txt, path, dir, 64, 1, NULL), ZT_OK);
    m = txt.train.memory;
    assert_int_equal(m->file_bytes, 1115394);
    assert_int_equal(m->tokens, 338025);
    assert_int_equal(m->token_bytes, 2);
    assert_int_equal(m->ids_bytes, 2 * 338025);
    assert_int_equal(m->held_bytes, m->ids_bytes + m->tokenizer_bytes);
    /* encoder.json's tables and the merges: a few MiB, the piece cache given
     * back. */
    assert_true(m->tokenizer_bytes > (1u << 20) && m->tokenizer_bytes < (16u << 20));
    zt_text_free(&txt);

    /* A CSV: 2 bytes a token, 16 a review (its offset, length, label). */
    const char *csv = "review,sentiment\n" "one,positive\n" "two two,negative\n"
                      "three three three,positive\n" "4,negative\n" "5,negative\n" "6,positive\n"
                      "7,positive\n" "8,positive\n" "9,positive\n" "ten,negative\n";
    write_bytes(tmp_path("r.csv"), csv, strlen(csv));
    zt_labelled ld;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("r.csv"), NULL, 8, NULL), ZT_OK);
    m = ld.train.memory;
    assert_ptr_equal(ld.val.memory, m);
    /* Byte tokens, cut to 8: 3 + 7 + 8 + 1 x 6 training, 3 validation. */
    assert_int_equal(m->tokens, 3 + 7 + 8 + 6 + 3);
    assert_int_equal(m->token_bytes, 2);
    assert_int_equal(m->ids_bytes, 2 * m->tokens);
    assert_int_equal(m->index_bytes, 16 * 10);
    assert_int_equal(m->file_bytes, strlen(csv));
    assert_int_equal(m->held_bytes, m->ids_bytes + m->index_bytes);
    zt_labelled_free(&ld);
}

/* The ids of `path` read in pieces of each of chunks[0, n) bytes against
 * those of the whole file given to the tokenizer at once. */
static void assert_pieces_equal(const char *path, const char *dir, const size_t *chunks, int n)
{
    size_t len;
    char *text = read_all(path, &len);
    zt_text whole;
    unsetenv("ZT_TEXT_CHUNK_BYTES");
    assert_int_equal(zt_text_load(&whole, path, dir, 2, 1, NULL), ZT_OK);
    int32_t *want;
    int64_t n_want;
    assert_int_equal(zt_tokenizer_encode(&whole.tok, text, len, path, &want, &n_want), ZT_OK);
    int32_t *got = malloc((size_t)n_want * sizeof *got);
    assert_non_null(got);
    for (int c = 0; c < n; c++) {
        char env[32];
        snprintf(env, sizeof env, "%zu", chunks[c]);
        setenv("ZT_TEXT_CHUNK_BYTES", env, 1);
        zt_text txt;
        assert_int_equal(zt_text_load(&txt, path, dir, 2, 1, NULL), ZT_OK);
        unsetenv("ZT_TEXT_CHUNK_BYTES");
        if (txt.n_ids != n_want)
            fail_msg("%s in %zu-byte pieces: %lld ids, the whole text %lld", path, chunks[c],
                     (long long)txt.n_ids, (long long)n_want);
        zt_ids_load(got, txt.ids, txt.id_bytes, 0, txt.n_ids);
        for (int64_t i = 0; i < n_want; i++)
            if (got[i] != want[i])
                fail_msg("%s in %zu-byte pieces: id %lld is %d, the whole text's %d", path,
                         chunks[c], (long long)i, got[i], want[i]);
        zt_text_free(&txt);
    }
    free(got);
    free(want);
    free(text);
    zt_text_free(&whole);
}

static void test_text_pieces(void **state)
{
    (void)state;
    char path[4096], dir[4096];
    shakespeare(path, sizeof path);
    bpe_dir(dir, sizeof dir);
    const size_t big[] = {64, 2048, 65536};
    assert_pieces_equal(path, NULL, big, 3);
    assert_pieces_equal(path, dir, big, 3);
    /* Where GPT-2's pattern looks ahead: contractions, a space before a
     * word, runs of spaces, tabs and newlines, Unicode spaces (U+3000, U+00A0
     * is not one), U+001C-U+001F, multi-byte letters and digits, a run
     * without whitespace longer than the pieces. Every piece size from 16 to
     * 48 puts the cuts everywhere. */
    const char *tricky =
        "it's they're we've I'm you'll he'd 'tis O'Neil\n\n  two  spaces\t\ttabs \n"
        "\xE3\x80\x80ideographic\xE3\x80\x80space \xC2\xA0nbsp caf\xC3\xA9 "
        "\xE4\xB8\xAD\xE6\x96\x87 "
        "\xD9\xA3\xD9\xA4 123 4567 \x1C\x1D\x1E\x1F sep  \r\n"
        "averyveryveryverylongwordwithoutanywhitespaceatallthatspansmanypieces!!! ??? ...\n"
        "   trailing   \n";
    write_bytes(tmp_path("tricky.txt"), tricky, strlen(tricky));
    size_t small[33];
    for (int c = 0; c < 33; c++)
        small[c] = 16 + (size_t)c;
    assert_pieces_equal(tmp_path("tricky.txt"), NULL, small, 33);
    assert_pieces_equal(tmp_path("tricky.txt"), dir, small, 33);

    /* A bad byte far into the file keeps its line and offset. */
    char bad[400];
    size_t n = 0;
    for (int line = 1; line <= 9; line++)
        n += (size_t)snprintf(bad + n, sizeof bad - n, "line %d is fine\n", line);
    size_t off = n + 5;
    n += (size_t)snprintf(bad + n, sizeof bad - n, "line \xE4\xB8 ten\n");
    write_bytes(tmp_path("bad.txt"), bad, n);
    setenv("ZT_TEXT_CHUNK_BYTES", "16", 1);
    zt_text txt;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(zt_text_load(&txt, tmp_path("bad.txt"), k ? dir : NULL, 2, 1, NULL),
                         ZT_ERR_DATA);
        char want[128];
        snprintf(want, sizeof want, "bad.txt:10: invalid UTF-8 byte 0xE4 at offset %zu", off);
        assert_message_has(want);
    }
    unsetenv("ZT_TEXT_CHUNK_BYTES");
}

static void test_budget(void **state)
{
    (void)state;
    enum { N = 256 << 10 };
    char *s = ascii_text(N);
    write_bytes(tmp_path("b.txt"), s, N);
    free(s);
    zt_text txt;
    assert_int_equal(zt_text_load(&txt, tmp_path("b.txt"), NULL, 8, 1, NULL), ZT_OK);
    uint64_t peak = txt.train.memory->peak_bytes;
    zt_text_free(&txt);
    /* Exactly what loading takes at its peak is enough; a byte less is not,
     * and the ids are never allocated. */
    zt_data_budget b = {.bytes = peak};
    snprintf(b.why, sizeof b.why, "the test's budget is %llu bytes", (unsigned long long)peak);
    assert_int_equal(zt_text_load(&txt, tmp_path("b.txt"), NULL, 8, 1, &b), ZT_OK);
    zt_text_free(&txt);
    b.bytes = peak - 1;
    assert_int_equal(zt_text_load(&txt, tmp_path("b.txt"), NULL, 8, 1, &b), ZT_ERR_OOM);
    assert_message_has("not enough host memory to load ");
    assert_message_has("b.txt (256.0 KiB on disk): this rank would hold ");
    assert_message_has("(token ids 256.0 KiB for 262144 tokens of 1 byte(s), tokenizer ");
    assert_message_has(", but the test's budget is");
    assert_true(strstr(zt_status_hint(), "smaller data file") != NULL);
    assert_null(txt.ids);

    /* BPE: refused as the ids grow, saying how far it came. */
    char path[4096], dir[4096];
    shakespeare(path, sizeof path);
    bpe_dir(dir, sizeof dir);
    assert_int_equal(zt_text_load(&txt, path, dir, 8, 1, NULL), ZT_OK);
    b.bytes = txt.train.memory->held_bytes - 100000;
    zt_text_free(&txt);
    setenv("ZT_TEXT_CHUNK_BYTES", "65536", 1);
    assert_int_equal(zt_text_load(&txt, path, dir, 8, 1, &b), ZT_ERR_OOM);
    unsetenv("ZT_TEXT_CHUNK_BYTES");
    assert_message_has("% of the file read (GPT-2 tokens are counted as they are made; at that "
                       "rate the whole file's ids take ");
    assert_message_has("tokens of 2 byte(s)");

    /* A CSV is refused before it is read: the file alone does not fit. */
    static char csv[64 << 10];
    size_t k = (size_t)snprintf(csv, sizeof csv, "review,sentiment\n");
    while (k + 32 < sizeof csv)
        k += (size_t)snprintf(csv + k, sizeof csv - k, "a fine film,positive\n");
    write_bytes(tmp_path("big.csv"), csv, k);
    b.bytes = strlen(csv) / 2;
    zt_labelled ld;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("big.csv"), NULL, 8, &b), ZT_ERR_OOM);
    assert_message_has("big.csv (");
    assert_message_has(") (the CSV file is read whole), but the test's budget");
    /* With room for the file, the reviews are counted as they come. */
    b.bytes = strlen(csv) + 2000;
    assert_int_equal(zt_labelled_load(&ld, tmp_path("big.csv"), NULL, 8, &b), ZT_ERR_OOM);
    assert_message_has("(reviews are counted as they are read)");
}

/* Runs loader `kind` on arg in a fresh process (this binary again: a forked
 * child would find free room in the parent's heap) whose address space may
 * grow by `room` bytes only; returns its status, message and hint. */
static zt_status run_limited(const char *kind, const char *arg, size_t room, char *msg, size_t n)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(3);
        char room_s[32];
        snprintf(room_s, sizeof room_s, "%zu", room);
        execl("/proc/self/exe", "test_data_memory", "--limited", kind, arg, room_s, (char *)NULL);
        _exit(4);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fds[0], msg + got, n - 1 - got)) > 0)
        got += (size_t)r;
    msg[got] = '\0';
    close(fds[0]);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fail_msg("the limited child ended with status %d: %s", wst, msg);
    return (zt_status)atoi(msg);
}

static zt_status load_text(const char *path)
{
    zt_text txt;
    zt_status st = zt_text_load(&txt, path, NULL, 8, 1, NULL);
    zt_text_free(&txt);
    return st;
}

static zt_status load_csv(const char *path)
{
    zt_labelled ld;
    zt_status st = zt_labelled_load(&ld, path, NULL, 8, NULL);
    zt_labelled_free(&ld);
    return st;
}

static zt_status load_bpe(const char *dir)
{
    zt_tokenizer t;
    zt_status st = zt_tokenizer_bpe_init(&t, dir);
    zt_tokenizer_free(&t);
    return st;
}

static void assert_has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" lacks \"%s\"", text, needle);
}

static void test_oom_messages(void **state)
{
    (void)state;
    if (UNDER_ASAN) {
        printf("skipped: an address-space limit under AddressSanitizer\n");
        return;
    }
    enum { N = 32 << 20 };
    char *s = ascii_text(N);
    write_bytes(tmp_path("big.txt"), s, N);
    char csv[64];
    snprintf(csv, sizeof csv, "review,sentiment\n");
    memcpy(s, csv, strlen(csv));
    write_bytes(tmp_path("big.csv"), s, N);
    free(s);
    char out[4096];

    /* The text's ids: the file, the bytes, what for, and the hint. */
    assert_int_equal(run_limited("text", tmp_path("big.txt"), 8 << 20, out, sizeof out),
                     ZT_ERR_OOM);
    assert_has(out, "out of memory loading ");
    assert_has(out, "big.txt: cannot allocate 32.0 MiB (33554432 bytes) for the token ids");
    assert_has(out, "\nthe text is 32.0 MiB; loaded, its token ids take 1, 2 or 4 bytes each");
    assert_has(out, "use a smaller data file");

    /* A CSV is read whole first. */
    assert_int_equal(run_limited("csv", tmp_path("big.csv"), 8 << 20, out, sizeof out),
                     ZT_ERR_OOM);
    assert_has(out, "out of memory reading data file ");
    assert_has(out, "big.csv (33554432 bytes): cannot allocate 33554434 bytes to hold it");
    assert_has(out, "\nthe whole file is read into memory");

    /* encoder.json parsed with too little room: out of memory, not a
     * malformed file. */
    char dir[4096];
    bpe_dir(dir, sizeof dir);
    assert_int_equal(run_limited("bpe", dir, 1 << 20, out, sizeof out), ZT_ERR_OOM);
    assert_has(out, "encoder.json");
    assert_true(strstr(out, "malformed") == NULL);
    char *hint = strchr(strchr(out, '\n') + 1, '\n');
    assert_non_null(hint);
    assert_true(strlen(hint + 1) > 20);
}

/* Loading 48 MiB of char text takes a fresh process's RSS (VmHWM, the peak,
 * against VmRSS before) up by the ids (1 byte each, all written) and the read
 * buffers, under 1.5 x the file: it took 5 x (the whole file read, then
 * 4-byte ids of every character). */
static void test_peak_rss(void **state)
{
    (void)state;
    if (UNDER_ASAN) {
        printf("skipped: RSS under AddressSanitizer (shadow memory, quarantine)\n");
        return;
    }
    enum { N = 48 << 20 };
    char *s = ascii_text(N);
    write_bytes(tmp_path("peak.txt"), s, N);
    free(s);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(3);
        execl("/proc/self/exe", "test_data_memory", "--peak", tmp_path("peak.txt"), (char *)NULL);
        _exit(4);
    }
    close(fds[1]);
    char out[128] = "";
    ssize_t r = read(fds[0], out, sizeof out - 1);
    close(fds[0]);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(r > 0 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    int st = -1;
    long before = 0, after = 0;
    assert_int_equal(sscanf(out, "%d %ld %ld", &st, &before, &after), 3);
    assert_int_equal(st, ZT_OK);
    double grew = (double)(after - before) / N;
    printf("peak RSS: +%.1f MiB loading %d MiB of text (%.2f x)\n",
           (double)(after - before) / (1 << 20), N >> 20, grew);
    assert_true(grew >= 1.0);
    assert_true(grew < 1.5);
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

/* A field of /proc/self/status in bytes ("VmRSS", "VmHWM"). */
static long status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            kb = atol(line + n + 1);
    if (f)
        fclose(f);
    return kb * 1024;
}

/* The child of test_peak_rss: "STATUS RSS_BEFORE PEAK_AFTER" (bytes) around
 * loading the text file argv[1]. */
static int peak_main(char **argv)
{
    long before = status_bytes("VmRSS");
    zt_status st = load_text(argv[1]);
    printf("%d %ld %ld", (int)st, before, status_bytes("VmHWM"));
    return 0;
}

/* The child of run_limited: the limit, the load, "STATUS\nMESSAGE\nHINT". */
static int limited_main(char **argv)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (!f || fscanf(f, "%llu", &pages) != 1)
        return 5;
    fclose(f);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max =
        pages * (unsigned long long)sysconf(_SC_PAGESIZE) + strtoull(argv[3], NULL, 10);
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 6;
    zt_status st = !strcmp(argv[1], "text") ? load_text(argv[2])
                   : !strcmp(argv[1], "csv") ? load_csv(argv[2])
                                             : load_bpe(argv[2]);
    printf("%d\n%s\n%s", (int)st, zt_status_message(), zt_status_hint());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--limited"))
        return limited_main(argv + 1);
    if (argc == 3 && !strcmp(argv[1], "--peak"))
        return peak_main(argv + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_width),    cmocka_unit_test(test_memory_formula),
        cmocka_unit_test(test_text_pieces),  cmocka_unit_test(test_budget),
        cmocka_unit_test(test_oom_messages), cmocka_unit_test(test_peak_rss),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
