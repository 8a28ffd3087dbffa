/*
 * common: the harnesses' shared helpers (common.h).
 */
#include "tests/fuzz/common.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char zt_fuzz_dir[512];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_scratch(void) { nftw(zt_fuzz_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

const char *zt_fuzz_scratch(void)
{
    if (zt_fuzz_dir[0])
        return zt_fuzz_dir;
    struct stat sb;
    const char *base = getenv("TMPDIR");
    if (stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0)
        base = "/dev/shm";
    else if (!base || !base[0])
        base = "/tmp";
    char tmpl[sizeof zt_fuzz_dir];
    if (snprintf(tmpl, sizeof tmpl, "%s/zt-fuzz-XXXXXX", base) >= (int)sizeof tmpl ||
        !mkdtemp(tmpl)) {
        perror("zt-fuzz: cannot create a scratch directory");
        return NULL;
    }
    memcpy(zt_fuzz_dir, tmpl, sizeof zt_fuzz_dir);
    atexit(remove_scratch);
    return zt_fuzz_dir;
}

bool zt_fuzz_path(char *path, size_t cap, const char *name)
{
    const char *dir = zt_fuzz_scratch();
    return dir && snprintf(path, cap, "%s/%s", dir, name) < (int)cap;
}

bool zt_fuzz_write(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    const char *p = data;
    bool ok = true;
    while (ok && size > 0) {
        ssize_t n = write(fd, p, size);
        ok = n > 0;
        if (ok) {
            p += n;
            size -= (size_t)n;
        }
    }
    return close(fd) == 0 && ok;
}

int zt_fuzz_split(const uint8_t *data, size_t size, zt_fuzz_part *parts, int max)
{
    const size_t sep = sizeof ZT_FUZZ_SEP - 1;
    int n = 0;
    while (n < max - 1) {
        const uint8_t *cut = memmem(data, size, ZT_FUZZ_SEP, sep);
        if (!cut)
            break;
        parts[n++] = (zt_fuzz_part){data, (size_t)(cut - data)};
        size -= (size_t)(cut - data) + sep;
        data = cut + sep;
    }
    parts[n++] = (zt_fuzz_part){data, size};
    return n;
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves,
 * the other 68, in order, for U+0100 onwards. */
static unsigned gpt2_char(unsigned b)
{
    unsigned k = 0;
    for (unsigned c = 0; c <= b; c++) {
        bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        if (c == b)
            return printable ? b : 256 + k;
        k += !printable;
    }
    return 0;
}

/* The character as a JSON string body (UTF-8; '"' and '\' escaped). */
static void put_json_char(FILE *f, unsigned cp)
{
    if (cp == '"' || cp == '\\')
        fprintf(f, "\\%c", (char)cp);
    else if (cp < 0x80)
        fputc((int)cp, f);
    else
        fprintf(f, "%c%c", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F)));
}

/* The first merges of GPT-2's vocab.bpe ("Ġ" is the byte alphabet's space). */
static const char *const zt_fuzz_merges[][2] = {
    {"Ġ", "t"},   {"Ġ", "a"}, {"h", "e"},  {"i", "n"},   {"r", "e"},  {"o", "n"},
    {"Ġt", "he"}, {"e", "r"}, {"Ġ", "s"},  {"a", "t"},   {"Ġ", "w"},  {"Ġ", "o"},
    {"e", "n"},   {"Ġ", "c"}, {"i", "t"},  {"i", "s"},   {"a", "n"},  {"o", "r"},
    {"e", "s"},   {"Ġ", "b"}, {"e", "d"},  {"Ġ", "f"},   {"in", "g"}, {"Ġ", "p"},
    {"o", "u"},   {"Ġa", "n"}, {"a", "l"}, {"a", "r"},   {"Ġt", "o"}, {"Ġ", "m"},
    {"Ġo", "f"},  {"Ġ", "in"}, {"Ġ", "d"}, {"Ġ", "h"},   {"Ġan", "d"}};

bool zt_fuzz_write_bpe(const char *dir)
{
    char path[1024];
    const size_t n_merges = sizeof zt_fuzz_merges / sizeof *zt_fuzz_merges;
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputc('{', f);
    for (unsigned b = 0; b < 256; b++) {
        fputc('"', f);
        put_json_char(f, gpt2_char(b));
        fprintf(f, "\": %u, ", b);
    }
    for (size_t m = 0; m < n_merges; m++)
        fprintf(f, "\"%s%s\": %zu, ", zt_fuzz_merges[m][0], zt_fuzz_merges[m][1], 256 + m);
    fprintf(f, "\"<|endoftext|>\": %zu}", 256 + n_merges);
    bool ok = fclose(f) == 0;
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    f = fopen(path, "w");
    if (!f)
        return false;
    fputs("#version: 0.2\n", f);
    for (size_t m = 0; m < n_merges; m++)
        fprintf(f, "%s %s\n", zt_fuzz_merges[m][0], zt_fuzz_merges[m][1]);
    return fclose(f) == 0 && ok;
}

void zt_fuzz_broken(const char *file, int line, const char *what)
{
    fprintf(stderr, "zt-fuzz: %s:%d: invariant broken: %s\n", file, line, what);
    abort();
}
