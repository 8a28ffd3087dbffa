/*
 * swapdir: the swap folder of a rank, its lock and files
 * (engine/nvme/swapdir.h).
 */
#include "engine/nvme/swapdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define SWAPDIR_LOCK ".zerotrain.lock"

static const char *const swapdir_hint =
    "set nvme_path to a directory on a local disk that this user can write to";

/* mkdir -p: every missing component of path. */
static zt_status swapdir_mkdirs(const char *path)
{
    char buf[ZT_AIO_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        struct stat sb;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return zt_fail(ZT_ERR_IO, swapdir_hint, "cannot create swap folder %s: %s", buf,
                           strerror(errno));
        if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return zt_fail(ZT_ERR_IO, swapdir_hint,
                           "cannot create swap folder %s: %s is not a directory", path, buf);
        if (end)
            return ZT_OK;
        *p = '/';
    }
}

static zt_status swapdir_lock(zt_swap_dir *d)
{
    char path[ZT_AIO_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", d->dir, SWAPDIR_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0)
        return zt_fail(ZT_ERR_IO, swapdir_hint, "cannot write in swap folder %s: %s", d->dir,
                       strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[128] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        return zt_fail(ZT_ERR_IO,
                       "give each job its own nvme_path: two jobs swapping into one folder "
                       "would overwrite each other's optimizer state",
                       "swap folder %s is in use by another zerotrain job (%s)", d->dir,
                       holder[0] ? holder : "its lock file does not say which");
    }
    char me[128], host[64] = "?";
    gethostname(host, sizeof host - 1);
    int len = snprintf(me, sizeof me, "pid %ld on host %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return zt_fail(ZT_ERR_IO, swapdir_hint, "cannot write lock file %s: %s", path,
                       strerror(e));
    }
    d->lock_fd = fd;
    d->locked = true;
    return ZT_OK;
}

zt_status zt_swap_dir_open(zt_swap_dir *d, const char *nvme_path, const char *sub, int rank,
                           const char *const *names, const int64_t *bytes, int n)
{
    memset(d, 0, sizeof *d);
    int len = snprintf(d->dir, sizeof d->dir, "%s/%s/rank%d", nvme_path, sub, rank);
    d->base_len = strlen(nvme_path);
    if (len < 0 || (size_t)len >= sizeof d->dir - 32)
        return zt_fail(ZT_ERR_IO, "use a shorter nvme_path", "swap folder path %s/%s is too long",
                       nvme_path, sub);
    ZT_TRY(swapdir_mkdirs(d->dir));
    ZT_TRY(swapdir_lock(d));
    d->files = calloc((size_t)n, sizeof *d->files);
    if (!d->files)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the swap file table");
    for (int i = 0; i < n; i++)
        d->files[i].fd = -1;
    d->n_files = n;
    for (int i = 0; i < n; i++) {
        char path[ZT_AIO_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s.tensor.swp", d->dir, names[i]) >=
            (int)sizeof path)
            return zt_fail(ZT_ERR_IO, "use a shorter nvme_path", "swap file path in %s is too long",
                           d->dir);
        ZT_TRY(zt_aio_file_open(&d->files[i], path, bytes[i], true));
    }
    return ZT_OK;
}

void zt_swap_dir_close(zt_swap_dir *d)
{
    for (int i = 0; i < d->n_files; i++)
        zt_aio_file_close(&d->files[i]);
    free(d->files);
    d->files = NULL;
    d->n_files = 0;
    if (d->locked) {
        char path[ZT_AIO_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", d->dir, SWAPDIR_LOCK);
        unlink(path);
        close(d->lock_fd);
        d->locked = false;
        /* The folders under nvme_path, as far as they are empty (other
         * ranks may still use theirs). */
        for (size_t n = strlen(d->dir); n > d->base_len && rmdir(d->dir) == 0;) {
            while (n > d->base_len && d->dir[n - 1] != '/')
                n--;
            while (n > d->base_len && d->dir[n - 1] == '/')
                n--;
            d->dir[n] = '\0';
        }
    }
}
