/*
 * fingerprint: named hashes of what a rank runs (engine/fingerprint.h).
 */
#include "engine/fingerprint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint64_t zt_hash64(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

void zt_fingerprint_init(zt_fingerprint *fp) { memset(fp, 0, sizeof *fp); }

void zt_fingerprint_free(zt_fingerprint *fp)
{
    free(fp->fields);
    memset(fp, 0, sizeof *fp);
}

static zt_fingerprint_field *fingerprint_next(zt_fingerprint *fp, const char *name)
{
    if (fp->error != ZT_OK)
        return NULL;
    if (fp->n == fp->cap) {
        int cap = fp->cap ? 2 * fp->cap : 64;
        zt_fingerprint_field *f = realloc(fp->fields, (size_t)cap * sizeof *f);
        if (!f) {
            fp->error = zt_fail(ZT_ERR_OOM, "", "cannot grow the run's fingerprint");
            return NULL;
        }
        fp->fields = f;
        fp->cap = cap;
    }
    zt_fingerprint_field *f = &fp->fields[fp->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

void zt_fingerprint_bytes(zt_fingerprint *fp, const char *name, const char *value,
                          const void *bytes, size_t n)
{
    zt_fingerprint_field *f = fingerprint_next(fp, name);
    if (!f)
        return;
    snprintf(f->value, sizeof f->value, "%s", value ? value : "");
    f->hash = zt_hash64(ZT_HASH_START, bytes, n);
}

void zt_fingerprint_i64(zt_fingerprint *fp, const char *name, int64_t v)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)v);
    zt_fingerprint_bytes(fp, name, text, &v, sizeof v);
}

void zt_fingerprint_f64(zt_fingerprint *fp, const char *name, double v)
{
    char text[32];
    snprintf(text, sizeof text, "%.17g", v);
    zt_fingerprint_bytes(fp, name, text, &v, sizeof v);
}

void zt_fingerprint_str(zt_fingerprint *fp, const char *name, const char *s)
{
    const char *text = s ? s : "(none)";
    /* The NUL keeps NULL's "(none)" apart from a string of that text. */
    zt_fingerprint_bytes(fp, name, text, text, strlen(text) + (s ? 1 : 0));
}

static zt_status fingerprint_file_bytes(const char *path, uint64_t *h)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_fail(ZT_ERR_IO, "", "cannot read %s: %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        *h = zt_hash64(*h, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return zt_fail(ZT_ERR_IO, "", "cannot read %s", path);
    return ZT_OK;
}

static int fingerprint_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names (sorted, so the order readdir gives does not matter) and sizes of the
 * files below dir. */
static zt_status fingerprint_dir(const char *dir, uint64_t *h, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return zt_fail(ZT_ERR_IO, "", "cannot list %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    zt_status st = ZT_OK;
    for (struct dirent *e; st == ZT_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            char **grown = realloc(names, cap * sizeof *grown);
            if (!grown) {
                st = zt_fail(ZT_ERR_OOM, "", "cannot list %s", dir);
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name)))
            st = zt_fail(ZT_ERR_OOM, "", "cannot list %s", dir);
        else
            n++;
    }
    closedir(d);
    if (st == ZT_OK && n > 0)
        qsort(names, n, sizeof *names, fingerprint_cmp);
    for (size_t i = 0; st == ZT_OK && i < n; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &sb) != 0)
            continue;
        *h = zt_hash64(*h, names[i], strlen(names[i]) + 1);
        if (S_ISDIR(sb.st_mode) && depth < 8) {
            st = fingerprint_dir(path, h, depth + 1);
        } else {
            int64_t size = (int64_t)sb.st_size;
            *h = zt_hash64(*h, &size, sizeof size);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

zt_status zt_fingerprint_file(zt_fingerprint *fp, const char *name, const char *path)
{
    if (!path) {
        zt_fingerprint_str(fp, name, NULL);
        return ZT_OK;
    }
    struct stat sb;
    uint64_t h = ZT_HASH_START;
    zt_status st = stat(path, &sb) != 0
                       ? zt_fail(ZT_ERR_IO, "", "cannot read %s: %s", path, strerror(errno))
                   : S_ISDIR(sb.st_mode) ? fingerprint_dir(path, &h, 0)
                                         : fingerprint_file_bytes(path, &h);
    if (st != ZT_OK)
        return st;
    zt_fingerprint_field *f = fingerprint_next(fp, name);
    if (f) {
        /* The tail of the path is what tells two files apart in a message. */
        size_t len = strlen(path);
        snprintf(f->value, sizeof f->value, "%s%s", len >= sizeof f->value ? "..." : "",
                 len >= sizeof f->value ? path + len - (sizeof f->value - 4) : path);
        f->hash = h;
    }
    return ZT_OK;
}
