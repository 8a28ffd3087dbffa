/*
 * fingerprint: what a rank is about to run, as a list of named 64-bit hashes
 * (the build, every config section, the model arguments, the step count, the
 * data and tokenizer files, the flags that change which collectives run).
 * Ranks started by an MPMD mpirun line, or reading per-node config files that
 * differ, would otherwise run different collectives and hang or corrupt each
 * other; zt_world_agree_fingerprint (engine/world/world.h) compares the lists
 * and names the first field that differs.
 *
 * Hashes are FNV-1a 64 over the bytes given; a field also keeps a short text of
 * its value for the message.
 *
 * Memory: zt_fingerprint owns its field array (zt_fingerprint_free). Files are
 * read in chunks and not kept. Collective: none.
 */
#ifndef ZT_FINGERPRINT_H
#define ZT_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

#define ZT_FINGERPRINT_NAME 48
#define ZT_FINGERPRINT_VALUE 64

typedef struct {
    char name[ZT_FINGERPRINT_NAME];
    char value[ZT_FINGERPRINT_VALUE]; /* shown in messages, may be cut short */
    uint64_t hash;
} zt_fingerprint_field;

typedef struct {
    zt_fingerprint_field *fields;
    int n, cap;
    zt_status error; /* the first failed add (out of memory); ZT_OK otherwise */
} zt_fingerprint;

void zt_fingerprint_init(zt_fingerprint *fp);
void zt_fingerprint_free(zt_fingerprint *fp);

/* FNV-1a 64 of n bytes, continuing h (ZT_HASH_START to begin). */
#define ZT_HASH_START UINT64_C(0xcbf29ce484222325)
uint64_t zt_hash64(uint64_t h, const void *bytes, size_t n);

/* A field hashed from raw bytes, with `value` as its text (NULL: none). */
void zt_fingerprint_bytes(zt_fingerprint *fp, const char *name, const char *value,
                          const void *bytes, size_t n);
void zt_fingerprint_i64(zt_fingerprint *fp, const char *name, int64_t v);
void zt_fingerprint_f64(zt_fingerprint *fp, const char *name, double v);
/* NULL is "(none)", distinct from "". */
void zt_fingerprint_str(zt_fingerprint *fp, const char *name, const char *s);
/* The contents of a file, or for a directory the names and sizes of the files
 * below it (an aclImdb tree); NULL path: "(none)". ZT_ERR_IO when it cannot be
 * read (the loaders report it better: callers add files after loading). */
zt_status zt_fingerprint_file(zt_fingerprint *fp, const char *name, const char *path);

#endif
