/*
 * path: opening the files a user names, and checking the files zerotrain
 * will write, with one vocabulary of errors.
 *
 * Reading: a file is opened with O_RDONLY | O_NONBLOCK | O_CLOEXEC, so a FIFO
 * or a device in place of a config, data, tokenizer or checkpoint file cannot
 * block the open; fstat then refuses anything but a regular file (naming what
 * it is: a directory, a FIFO, a device, a socket) and O_NONBLOCK is cleared.
 * The one exception is a reader that allows pipes (--config <(...)): a pipe
 * with a writer attached is read to its end, a FIFO that nothing writes to is
 * refused at once.
 *
 * Writing: zt_path_check_output and zt_path_check_output_dir say before a long
 * run whether its outputs can be written at its end. They create nothing that
 * stays: a probe file they create is removed, an existing file is opened
 * without truncation and left as it was.
 *
 * Errors are ZT_ERR_IO (exit 2: the user's input) worded "<what> <path>:
 * <cause>": No such file or directory; is a symlink loop; permission denied
 * (with a chmod hint); is a directory / a FIFO / a device, not a regular file;
 * the path is too long; a component of the path is not a directory.
 *
 * Memory: zt_path_read's *buf is malloc'd and the caller's to free; an fd from
 * zt_path_open_read is the caller's to close. Collective: none.
 */
#ifndef ZT_PATH_H
#define ZT_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

/* The error for errno `err` from opening or stat-ing `path` for reading;
 * `what` names the file ("config file", "checkpoint shard") and `hint` is
 * the hint of a missing file (the other causes bring their own). For callers
 * that probe a path themselves (stat, opendir). */
zt_status zt_path_fail(int err, const char *path, const char *what, const char *hint);

/* Opens a regular file for reading (see above) into *fd. On failure errno
 * keeps the failed open's error, or is 0 when the file opened but is not a
 * regular file (a caller may word ENOENT its own way). */
zt_status zt_path_open_read(const char *path, const char *what, const char *hint, int *fd);

/* The whole file at path into a malloc'd, NUL-terminated *buf of *len bytes
 * (the NUL not counted). max_bytes < 0: no limit; a longer file is ZT_ERR_DATA.
 * pipe_ok: a pipe or FIFO with a writer is read too (one with no writer is
 * refused instead of returning nothing). */
zt_status zt_path_read(const char *path, const char *what, const char *hint, int64_t max_bytes,
                       bool pipe_ok, char **buf, size_t *len);

/* The directory part of path into buf (cap bytes): "." when path has no
 * slash, "/" for a file at the root. */
void zt_path_dirname(const char *path, char *buf, size_t cap);

/* Whether `path` can be written later: an existing path must be a regular
 * file this process may open for writing; a missing one must be creatable in
 * an existing directory (checked by creating it and removing it again).
 * Messages read "cannot write <what> <path>: <cause>". */
zt_status zt_path_check_output(const char *path, const char *what, const char *hint);

/* Whether files can be created in directory `dir` (a probe file is created
 * and removed); the messages name the output `path` and `what` as above. */
zt_status zt_path_check_output_dir(const char *dir, const char *path, const char *what,
                                   const char *hint);

/* mkdir -p: `dir` and its missing parents (mode 0777 before the umask).
 * Messages read "cannot create <what> directory <part>: <cause>". */
zt_status zt_path_mkdirs(const char *dir, const char *what, const char *hint);

#endif
