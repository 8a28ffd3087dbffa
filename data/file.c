#include "data/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zt_status zt_file_read(const char *path, const char *hint, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_fail(ZT_ERR_IO, hint, "%s: %s", path, strerror(errno));
    /* Read in growing chunks rather than trusting a size from fseek: the
     * path may be a pipe or a file being appended to. */
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    zt_status st = ZT_OK;
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (ferror(f)) {
            st = zt_fail(ZT_ERR_IO, hint, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(b, cap + 1);
        if (!nb) {
            free(b);
            b = NULL;
        } else {
            b = nb;
        }
    }
    fclose(f);
    if (!b)
        return zt_fail(ZT_ERR_OOM, "", "%s: out of memory reading the file", path);
    if (st != ZT_OK) {
        free(b);
        return st;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return ZT_OK;
}
