/*
 * files: the checkpoint's file I/O. Output files are checksummed as they are
 * written and synced before they count; whole small files are written in one
 * call (and read with engine/path's zt_path_read); shards are read with pread
 * at the offsets the layout gives.
 * Directories are created (mkdir -p), synced after renames, and removed
 * without following links. ZT_CKPT_FAIL_AFTER_BYTES (ckpt.h) fails writes
 * here.
 */
#include "engine/ckpt/ckpt_impl.h"
#include "engine/env.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Bytes this process may still write before ZT_CKPT_FAIL_AFTER_BYTES fails a
 * save (< 0: no limit); read at the first save. */
static int64_t ckpt_budget = -1;
static bool ckpt_budget_read;

void zt_ckpt_fail_after_init(void)
{
    if (ckpt_budget_read)
        return;
    ckpt_budget = zt_env_get()->ckpt_fail_after_bytes;
    ckpt_budget_read = true;
}

void zt_ckpt_stall_if_asked(int rank)
{
    if (zt_env_get()->ckpt_stall_rank == rank)
        sleep(30);
}

const char *const zt_ckpt_hint_write =
    "check free space and permissions on that file system, or choose another --save-dir; "
    "the previous checkpoint and DIR/latest are untouched";

zt_status zt_ckpt_out_open(zt_ckpt_out *o, const char *path, const char *hint)
{
    *o = (zt_ckpt_out){.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                       .path = path,
                       .hint = hint ? hint : zt_ckpt_hint_write};
    if (o->fd < 0)
        return zt_fail(ZT_ERR_IO,
                       !hint && errno == ENOENT ? "every rank writes its shard into DIR: across "
                                                  "nodes it must be a file system they all share"
                                                : o->hint,
                       "cannot create checkpoint file %s: %s", path, strerror(errno));
    return ZT_OK;
}

zt_status zt_ckpt_out_write(zt_ckpt_out *o, const void *buf, size_t n)
{
    const char *p = buf;
    size_t allowed = n;
    if (ckpt_budget >= 0 && (uint64_t)ckpt_budget < n)
        allowed = (size_t)ckpt_budget;
    for (size_t done = 0; done < allowed;) {
        ssize_t w = write(o->fd, p + done, allowed - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return zt_fail(ZT_ERR_IO, o->hint, "cannot write checkpoint file %s: %s",
                           o->path, w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    if (ckpt_budget >= 0) {
        ckpt_budget -= (int64_t)allowed;
        if (allowed < n)
            return zt_fail(ZT_ERR_IO, o->hint,
                           "cannot write checkpoint file %s: %s (simulated by "
                           "ZT_CKPT_FAIL_AFTER_BYTES)",
                           o->path, strerror(ENOSPC));
    }
    o->crc = zt_ckpt_crc32(o->crc, buf, n);
    o->bytes += n;
    return ZT_OK;
}

zt_status zt_ckpt_out_close(zt_ckpt_out *o, zt_status st)
{
    if (o->fd < 0)
        return st;
    if (st == ZT_OK && fsync(o->fd) != 0)
        st = zt_fail(ZT_ERR_IO, o->hint, "cannot sync checkpoint file %s: %s", o->path,
                     strerror(errno));
    if (close(o->fd) != 0 && st == ZT_OK)
        st = zt_fail(ZT_ERR_IO, o->hint, "cannot close checkpoint file %s: %s", o->path,
                     strerror(errno));
    o->fd = -1;
    return st;
}

zt_status zt_ckpt_write_file(const char *path, const void *buf, size_t n, uint32_t *crc,
                             const char *hint)
{
    zt_ckpt_out o;
    ZT_TRY(zt_ckpt_out_open(&o, path, hint));
    zt_status st = zt_ckpt_out_close(&o, zt_ckpt_out_write(&o, buf, n));
    if (crc)
        *crc = o.crc;
    return st;
}

zt_status zt_ckpt_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return zt_fail(ZT_ERR_IO, zt_ckpt_hint_write, "cannot sync checkpoint directory %s: %s",
                       dir, strerror(e));
    }
    close(fd);
    return ZT_OK;
}

zt_status zt_ckpt_mkdirs(const char *dir)
{
    char p[ZT_CKPT_PATH_MAX];
    if (!dir[0] || snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return zt_fail(ZT_ERR_USAGE, "give a shorter --save-dir",
                       "checkpoint directory '%s' is empty or too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        struct stat sb;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                           "cannot create checkpoint directory %s: %s", p, strerror(errno));
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                           "cannot create checkpoint directory %s: %s is not a directory", dir,
                           p);
        *s = c;
        if (c == '\0')
            return ZT_OK;
    }
}

static int ckpt_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int zt_ckpt_remove_tree(const char *path)
{
    int rc = nftw(path, ckpt_remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return rc != 0 && errno == ENOENT ? 0 : rc;
}

zt_status zt_ckpt_pread(int fd, void *buf, size_t n, int64_t offset, const char *path)
{
    char *p = buf;
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(offset + (int64_t)done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                           "checkpoint shard %s: cannot read %zu bytes at offset %lld: %s", path,
                           n, (long long)offset, r < 0 ? strerror(errno) : "the file ends early");
        done += (size_t)r;
    }
    return ZT_OK;
}

zt_status zt_ckpt_path(char *buf, const char *a, const char *b, const char *c)
{
    int n = c ? snprintf(buf, ZT_CKPT_PATH_MAX, "%s/%s/%s", a, b, c)
              : snprintf(buf, ZT_CKPT_PATH_MAX, "%s/%s", a, b);
    if (n < 0 || n >= ZT_CKPT_PATH_MAX)
        return zt_fail(ZT_ERR_USAGE, "use a shorter checkpoint directory",
                       "checkpoint path %s/%s is too long", a, b);
    return ZT_OK;
}

void zt_ckpt_shard_name(char *buf, size_t cap, int rank)
{
    snprintf(buf, cap, "zero_pp_rank_%d_mp_rank_00_optim_states.zt", rank);
}

double zt_ckpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zt_status zt_ckpt_agree(const zt_world *w, zt_status st)
{
    return w ? zt_comm_agree(w->comm, st, "checkpoint") : st;
}

