/*
 * lock: one job saves into a checkpoint directory at a time (ckpt.h). Two
 * jobs saving into one --save-dir interleaved their steps, and once left a
 * "complete" checkpoint whose shards came from both. Rank 0 holds
 * flock(LOCK_EX | LOCK_NB) on DIR/.zerotrain.lock for the job's lifetime; the
 * file names the holder ("pid host") so a refused job can say which one.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_LOCK_NAME ".zerotrain.lock"

/* DIR is held: the error, naming the other job when its lock file says. */
static zt_status ckpt_lock_busy(int fd, const char *dir)
{
    static const char *const hint =
        "wait for that job to end, or give this run another --save-dir: two jobs saving into "
        "one directory would interleave their checkpoints";
    char holder[256] = "";
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = '\0';
    long pid = 0;
    char host[128];
    if (sscanf(holder, "%ld %127s", &pid, host) == 2 && pid > 0)
        return zt_fail(ZT_ERR_USAGE, hint,
                       "checkpoint directory %s is in use by another zerotrain job (pid %ld on "
                       "host %s)",
                       dir, pid, host);
    return zt_fail(ZT_ERR_USAGE, hint,
                   "checkpoint directory %s is in use by another zerotrain job (its lock file "
                   "%s/%s does not say which)",
                   dir, dir, CKPT_LOCK_NAME);
}

/* Rank 0's part: open, lock and sign the lock file. */
static zt_status ckpt_lock(const zt_world *w, const char *dir, int *lock)
{
    char path[ZT_CKPT_PATH_MAX];
    ZT_TRY(zt_ckpt_path(path, dir, CKPT_LOCK_NAME, NULL));
    /* O_NOFOLLOW and O_NONBLOCK: a link or a FIFO planted there cannot
     * redirect or block the lock. */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        return zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                       "cannot open the lock file %s of checkpoint directory %s: %s", path, dir,
                       strerror(errno));
    struct stat sb;
    zt_status st = ZT_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = zt_fail(ZT_ERR_IO, "remove it: zerotrain creates it as a regular file",
                     "the lock file %s of checkpoint directory %s is not a regular file", path,
                     dir);
    else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        st = errno == EWOULDBLOCK
                 ? ckpt_lock_busy(fd, dir)
                 : zt_fail(ZT_ERR_IO,
                           "the file system may not support flock (some network file systems "
                           "do not): save on one that does",
                           "cannot lock checkpoint directory %s (%s): %s", dir, path,
                           strerror(errno));
    char me[256];
    int n = snprintf(me, sizeof me, "%ld %s\n", (long)getpid(), w->host);
    if (st == ZT_OK && (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)n, 0) != n))
        st = zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                     "cannot write the lock file %s: %s", path, strerror(errno));
    if (st != ZT_OK) {
        close(fd);
        return st;
    }
    *lock = fd;
    return ZT_OK;
}

zt_status zt_ckpt_lock_dir(const zt_world *w, const char *dir, int *lock)
{
    *lock = -1;
    zt_status st = zt_ckpt_agree(w, w->rank == 0 ? ckpt_lock(w, dir, lock) : ZT_OK);
    if (st != ZT_OK)
        zt_ckpt_unlock_dir(lock);
    return st;
}

void zt_ckpt_unlock_dir(int *lock)
{
    if (*lock >= 0)
        close(*lock);
    *lock = -1;
}
