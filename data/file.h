/*
 * file: whole-file reads for the data loaders (private to data/).
 *
 * Memory: *buf is malloc'd, NUL-terminated (the NUL not counted in *len); the
 * caller frees it. Collective: none.
 */
#ifndef ZT_FILE_H
#define ZT_FILE_H

#include <stddef.h>

#include "engine/status.h"

/* A missing or unreadable file is ZT_ERR_IO naming `path` with strerror and
 * `hint`. */
zt_status zt_file_read(const char *path, const char *hint, char **buf, size_t *len);

#endif
