/*
 * path: opening user-named files without blocking, and checking outputs
 * before a run (engine/path.h).
 */
#include "engine/path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_HINT_LOOP                                                                             \
    "a symbolic link on that path leads back to itself: look at each part with `ls -l` and fix "  \
    "or remove the link"
#define PATH_HINT_READ                                                                             \
    "the user running zerotrain may not read it: `chmod a+r` the file and `chmod a+x` each "       \
    "directory above it, or run as a user who may"
#define PATH_HINT_WRITE                                                                            \
    "the user running zerotrain may not write there: `chmod u+w` the file or its directory, or "   \
    "choose a path you can write to"
#define PATH_HINT_LONG "use a shorter path (or shorter names on it)"
#define PATH_HINT_OOM                                                                              \
    "the whole file is read into memory: use a smaller file, or give the job more memory "         \
    "(ulimit -v, the memory cgroup; every rank reads its own copy)"
#define PATH_HINT_PIPE                                                                             \
    "give a regular file, or start the program that writes the pipe first (`--config <(...)` "     \
    "does both)"

/* What a file that is not a regular file is, for the messages. */
static const char *path_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

zt_status zt_path_fail(int err, const char *path, const char *what, const char *hint)
{
    switch (err) {
    case ENOENT:
        return zt_fail(ZT_ERR_IO, hint, "%s %s: No such file or directory", what, path);
    case ELOOP:
        return zt_fail(ZT_ERR_IO, PATH_HINT_LOOP,
                       "%s %s: is a symlink loop (too many levels of symbolic links)", what, path);
    case EACCES:
    case EPERM:
        return zt_fail(ZT_ERR_IO, PATH_HINT_READ, "permission denied: cannot read %s %s", what,
                       path);
    case EISDIR:
        return zt_fail(ZT_ERR_IO, hint, "%s %s: is a directory, not a file", what, path);
    case ENAMETOOLONG:
        return zt_fail(ZT_ERR_IO, PATH_HINT_LONG, "%s %s: the path is too long", what, path);
    case ENOTDIR:
        return zt_fail(ZT_ERR_IO, hint, "%s %s: a component of the path is not a directory", what,
                       path);
    default:
        return zt_fail(ZT_ERR_IO, hint, "%s %s: %s", what, path, strerror(err));
    }
}

/* Opens path without blocking and checks its kind: a regular file, or with
 * pipe_ok a pipe (*is_pipe; left non-blocking for the first read). */
static zt_status path_open(const char *path, const char *what, const char *hint, bool pipe_ok,
                           int *fd, bool *is_pipe, struct stat *sb)
{
    *is_pipe = false;
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0) {
        int e = errno;
        zt_status st = zt_path_fail(e, path, what, hint);
        errno = e;
        return st;
    }
    zt_status st = ZT_OK;
    if (fstat(*fd, sb) != 0) {
        int e = errno;
        st = zt_fail(ZT_ERR_IO, hint, "%s %s: cannot stat it: %s", what, path, strerror(e));
    } else if (S_ISFIFO(sb->st_mode) && pipe_ok) {
        *is_pipe = true;
        return ZT_OK;
    } else if (S_ISDIR(sb->st_mode)) {
        st = zt_fail(ZT_ERR_IO, hint, "%s %s: is a directory, not a file", what, path);
    } else if (!S_ISREG(sb->st_mode)) {
        st = zt_fail(ZT_ERR_IO, hint, "%s %s: is %s, not a regular file", what, path,
                     path_kind(sb->st_mode));
    } else {
        int fl = fcntl(*fd, F_GETFL);
        if (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            st = zt_fail(ZT_ERR_IO, hint, "%s %s: cannot clear O_NONBLOCK: %s", what, path,
                         strerror(errno));
    }
    if (st != ZT_OK) {
        close(*fd);
        *fd = -1;
        errno = 0;
    }
    return st;
}

zt_status zt_path_open_read(const char *path, const char *what, const char *hint, int *fd)
{
    bool is_pipe;
    struct stat sb;
    return path_open(path, what, hint, false, fd, &is_pipe, &sb);
}

zt_status zt_path_read(const char *path, const char *what, const char *hint, int64_t max_bytes,
                       bool pipe_ok, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    int fd;
    bool is_pipe, nonblocking;
    struct stat sb;
    ZT_TRY(path_open(path, what, hint, pipe_ok, &fd, &is_pipe, &sb));
    nonblocking = is_pipe;
    uint64_t limit = max_bytes < 0 ? UINT64_MAX : (uint64_t)max_bytes;
    zt_status st = ZT_OK;
    if (!is_pipe && (uint64_t)sb.st_size > limit)
        st = zt_fail(ZT_ERR_DATA, hint, "%s %s: is %lld bytes, more than the %lld expected", what,
                     path, (long long)sb.st_size, (long long)max_bytes);
    /* A regular file's size is a first guess only: it may grow while read. */
    size_t cap = is_pipe || sb.st_size < 4096 ? 4096 : (size_t)sb.st_size + 1, n = 0;
    char *b = st == ZT_OK ? malloc(cap + 1) : NULL;
    if (st == ZT_OK && !b)
        st = zt_fail(ZT_ERR_OOM, PATH_HINT_OOM, "out of memory reading %s %s (%lld bytes): "
                     "cannot allocate %zu bytes to hold it", what, path, (long long)sb.st_size,
                     cap + 1);
    while (st == ZT_OK) {
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                st = zt_fail(ZT_ERR_OOM, PATH_HINT_OOM, "out of memory reading %s %s (%zu bytes "
                             "so far): cannot allocate %zu bytes to hold it", what, path, n,
                             2 * cap + 1);
                break;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        /* A pipe whose writer has not written yet: from now on wait for it. */
        bool wait = r < 0 && nonblocking && (errno == EAGAIN || errno == EWOULDBLOCK);
        if (r > 0 || wait) {
            int fl = fcntl(fd, F_GETFL);
            if (nonblocking && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
                st = zt_fail(ZT_ERR_IO, hint, "%s %s: cannot clear O_NONBLOCK: %s", what, path,
                             strerror(errno));
            nonblocking = false;
        }
        if (wait)
            continue;
        if (r < 0) {
            st = zt_fail(ZT_ERR_IO, hint, "%s %s: read failed: %s", what, path, strerror(errno));
        } else if (r == 0 && nonblocking) {
            st = zt_fail(ZT_ERR_IO, PATH_HINT_PIPE,
                         "%s %s: is a pipe or FIFO that nothing writes to (no writer is "
                         "attached)",
                         what, path);
        } else if (r == 0) {
            break;
        } else if ((n += (size_t)r) > limit) {
            st = zt_fail(ZT_ERR_DATA, hint, "%s %s: holds more than the %lld bytes expected",
                         what, path, (long long)max_bytes);
        }
    }
    close(fd);
    if (st != ZT_OK) {
        free(b);
        return st;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return ZT_OK;
}

void zt_path_dirname(const char *path, char *buf, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    while (n > 0 && path[n - 1] != '/')
        n--;
    if (n == 0) {
        snprintf(buf, cap, ".");
        return;
    }
    while (n > 1 && path[n - 1] == '/')
        n--;
    snprintf(buf, cap, "%.*s", (int)n, path);
}

/* The error for errno `err` while checking that output `path` in directory
 * `dir` can be written. */
static zt_status path_fail_write(int err, const char *path, const char *dir, const char *what,
                                 const char *hint)
{
    switch (err) {
    case ENOENT:
        return zt_fail(ZT_ERR_IO, hint, "cannot write %s %s: directory %s does not exist", what,
                       path, dir);
    case ENOTDIR:
        return zt_fail(ZT_ERR_IO, hint,
                       "cannot write %s %s: %s (or a directory above it) is not a directory",
                       what, path, dir);
    case EACCES:
    case EPERM:
        return zt_fail(ZT_ERR_IO, PATH_HINT_WRITE,
                       "permission denied: cannot write %s %s (in directory %s)", what, path, dir);
    case EROFS:
        return zt_fail(ZT_ERR_IO, hint, "cannot write %s %s: %s is on a read-only file system",
                       what, path, dir);
    case ELOOP:
        return zt_fail(ZT_ERR_IO, PATH_HINT_LOOP,
                       "cannot write %s %s: is a symlink loop (too many levels of symbolic links)",
                       what, path);
    case ENAMETOOLONG:
        return zt_fail(ZT_ERR_IO, PATH_HINT_LONG, "cannot write %s %s: the path is too long",
                       what, path);
    case EISDIR:
        return zt_fail(ZT_ERR_IO, hint, "cannot write %s %s: it is a directory", what, path);
    default:
        return zt_fail(ZT_ERR_IO, hint, "cannot write %s %s: %s", what, path, strerror(err));
    }
}

zt_status zt_path_check_output(const char *path, const char *what, const char *hint)
{
    char dir[4096];
    zt_path_dirname(path, dir, sizeof dir);
    if (!path[0])
        return zt_fail(ZT_ERR_USAGE, hint, "cannot write %s: the path is empty", what);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return path_fail_write(EISDIR, path, dir, what, hint);
        if (!S_ISREG(sb.st_mode))
            return zt_fail(ZT_ERR_IO, hint, "cannot write %s %s: it is %s, not a regular file",
                           what, path, path_kind(sb.st_mode));
        /* No O_TRUNC: the check leaves the file as it is. */
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            return path_fail_write(errno, path, dir, what, hint);
        close(fd);
        return ZT_OK;
    }
    if (errno != ENOENT)
        return path_fail_write(errno, path, dir, what, hint);
    /* Created and removed again, so no empty file is left behind. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        /* EEXIST: a dangling symlink, or a file created meanwhile: writing
         * goes through it later. */
        return errno == EEXIST ? ZT_OK : path_fail_write(errno, path, dir, what, hint);
    close(fd);
    unlink(path);
    return ZT_OK;
}

zt_status zt_path_check_output_dir(const char *dir, const char *path, const char *what,
                                   const char *hint)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return path_fail_write(errno, path, dir, what, hint);
    if (!S_ISDIR(sb.st_mode))
        return path_fail_write(ENOTDIR, path, dir, what, hint);
    char probe[4200];
    if (snprintf(probe, sizeof probe, "%s/.zerotrain-probe-%ld", dir, (long)getpid()) >=
        (int)sizeof probe)
        return path_fail_write(ENAMETOOLONG, path, dir, what, hint);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return path_fail_write(errno, path, dir, what, hint);
    close(fd);
    unlink(probe);
    return ZT_OK;
}

zt_status zt_path_mkdirs(const char *dir, const char *what, const char *hint)
{
    char buf[4096];
    if (!dir[0])
        return zt_fail(ZT_ERR_IO, hint, "cannot create %s directory: the name is empty", what);
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return zt_fail(ZT_ERR_IO, hint, "cannot create %s directory %.64s...: the path is too long",
                       what, dir);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (buf[0] && mkdir(buf, 0777) != 0 && errno != EEXIST)
            return zt_fail(ZT_ERR_IO, hint, "cannot create %s directory %s: %s", what, buf,
                           strerror(errno));
        if (end)
            break;
        *p = '/';
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_fail(ZT_ERR_IO, hint, "cannot create %s directory %s: a file of that name is "
                                        "in the way",
                       what, dir);
    return ZT_OK;
}
