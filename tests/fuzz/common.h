/*
 * common: what the libFuzzer harnesses of tests/fuzz share: a scratch
 * directory for the files the loaders read, whole-file writes, splitting one
 * fuzz input into several files, a small GPT-2-shaped BPE tokenizer, and the
 * check that stops a run on a broken invariant.
 *
 * Inputs that hold several files separate them with ZT_FUZZ_SEP, a line of
 * its own ("\n--8<--\n"); the seed corpora in tests/fuzz/corpus/ are written
 * that way.
 *
 * Memory: the scratch directory is created once per process (under /dev/shm
 * when it exists, else $TMPDIR or /tmp) and removed at exit; everything else
 * is the caller's. Collective: none (no MPI).
 */
#ifndef ZT_FUZZ_COMMON_H
#define ZT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZT_FUZZ_SEP "\n--8<--\n"

typedef struct {
    const uint8_t *data;
    size_t size;
} zt_fuzz_part;

/* The process's scratch directory (created on the first call; NULL when it
 * cannot be: the harness then skips the input). */
const char *zt_fuzz_scratch(void);

/* path = scratch/name (cap bytes); false when it does not fit or there is no
 * scratch directory. */
bool zt_fuzz_path(char *path, size_t cap, const char *name);

/* Writes data[0, size) as the whole file at path; false on any failure. */
bool zt_fuzz_write(const char *path, const void *data, size_t size);

/* Cuts data at each ZT_FUZZ_SEP into at most max parts (the last part keeps
 * any further separators); returns how many. */
int zt_fuzz_split(const uint8_t *data, size_t size, zt_fuzz_part *parts, int max);

/* Writes encoder.json and vocab.bpe of a small byte-level BPE into dir: the
 * 256 byte tokens in GPT-2's byte alphabet, a few dozen English merges and
 * <|endoftext|> last. */
bool zt_fuzz_write_bpe(const char *dir);

/* A broken invariant of the code under test: prints what and aborts, so
 * libFuzzer reports the input as a crash. */
#define zt_fuzz_check(cond)                                                              \
    do {                                                                                 \
        if (!(cond))                                                                     \
            zt_fuzz_broken(__FILE__, __LINE__, #cond);                                   \
    } while (0)
_Noreturn void zt_fuzz_broken(const char *file, int line, const char *what);

#endif
