/*
 * aio: the I/O threads, their rings and the swap files (engine/nvme/aio.h).
 *
 * Each thread owns a FIFO of parts (guarded by the engine's lock) and works
 * through one part at a time: it keeps up to queue_depth block_size requests
 * of it in flight, submits them in a batch (or one by one with
 * single_submit), and reaps one completion at a time with overlap_events,
 * refilling as it goes, or the whole batch without. When the part is done it
 * takes the lock, counts the operation's parts down and wakes the waiter. A
 * request's user data is its byte position in the operation, from which its
 * length follows (requests start at multiples of block_size).
 */
#include "engine/nvme/aio.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    struct zt_aio *a;
    pthread_t thread;
    pthread_cond_t wake;
    struct io_uring ring;
    bool ring_ok, started, stop;
    zt_aio_part *head, *tail;
} aio_worker;

struct zt_aio {
    zt_aio_config cfg;
    bool uring;
    int n_workers;
    pthread_mutex_t lock;
    pthread_cond_t done;
    aio_worker workers[ZT_AIO_MAX_THREADS];
};

const char *zt_aio_engine_name(const zt_aio *a)
{
    return a->uring ? "io_uring" : "pread/pwrite threads";
}

static int64_t aio_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* Length of the request starting at byte `at` of a part ending at `hi`. */
static int64_t aio_req_len(const zt_aio *a, int64_t at, int64_t hi)
{
    return aio_min(a->cfg.block_size, hi - at);
}

/* A completed request of n bytes that moved res (or failed with -res). */
static void aio_note(int *err, int64_t *err_at, int64_t res, int64_t n, bool write,
                     int64_t file_at)
{
    if (*err)
        return;
    if (res < 0)
        *err = (int)-res;
    else if (res < n) /* a short direct write means the disk is full; a short
                       * read, a file shorter than it should be */
        *err = write ? ENOSPC : ENODATA;
    else
        return;
    *err_at = file_at;
}

/* One part with blocking calls: the fallback where io_uring is refused. */
static void aio_run_psync(zt_aio *a, zt_aio_part *p, int *err, int64_t *err_at)
{
    zt_aio_op *op = p->op;
    for (int64_t at = p->lo; at < p->hi && !*err; at += a->cfg.block_size) {
        int64_t n = aio_req_len(a, at, p->hi), off = op->offset + at;
        ssize_t r;
        do
            r = op->write ? pwrite(op->file->fd, op->buf + at, (size_t)n, off)
                          : pread(op->file->fd, op->buf + at, (size_t)n, off);
        while (r < 0 && errno == EINTR);
        aio_note(err, err_at, r < 0 ? -(int64_t)errno : (int64_t)r, n, op->write, off);
    }
}

/* Submits what the ring holds; false when it went in. A ring that refuses a
 * submission is broken: the part fails (with what it has in flight
 * abandoned, as the whole run ends on the error). */
static bool aio_submit_failed(aio_worker *w, int *err, int64_t *err_at, const zt_aio_op *op,
                              int64_t at)
{
    int r;
    do
        r = io_uring_submit(&w->ring);
    while (r == -EINTR);
    if (r >= 0)
        return false;
    aio_note(err, err_at, r, 1, op->write, op->offset + at);
    return true;
}

/* One part through the worker's ring. */
static void aio_run_uring(zt_aio *a, aio_worker *w, zt_aio_part *p, int *err, int64_t *err_at)
{
    zt_aio_op *op = p->op;
    const int64_t qd = a->cfg.queue_depth;
    int64_t at = p->lo, inflight = 0;
    while ((at < p->hi && !*err) || inflight > 0) {
        int batch = 0;
        while (at < p->hi && !*err && inflight < qd) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
            if (!sqe)
                break;
            int64_t n = aio_req_len(a, at, p->hi);
            if (op->write)
                io_uring_prep_write(sqe, op->file->fd, op->buf + at, (unsigned)n,
                                    (uint64_t)(op->offset + at));
            else
                io_uring_prep_read(sqe, op->file->fd, op->buf + at, (unsigned)n,
                                   (uint64_t)(op->offset + at));
            io_uring_sqe_set_data64(sqe, (uint64_t)at);
            at += n;
            inflight++;
            batch++;
            if (a->cfg.single_submit && aio_submit_failed(w, err, err_at, op, at - n))
                return;
        }
        if (!a->cfg.single_submit && batch > 0 && aio_submit_failed(w, err, err_at, op, at))
            return;
        if (inflight == 0)
            break;
        /* overlap_events: back to submitting after each completion; else
         * the whole batch completes first. */
        unsigned want = a->cfg.overlap_events ? 1 : (unsigned)inflight;
        struct io_uring_cqe *cqe;
        int r = io_uring_wait_cqe_nr(&w->ring, &cqe, want);
        if (r == -EINTR || r == -EAGAIN)
            continue;
        if (r < 0) { /* the ring itself failed: nothing more will complete */
            aio_note(err, err_at, r, 1, op->write, op->offset + at);
            return;
        }
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&w->ring, head, cqe)
        {
            int64_t start = (int64_t)io_uring_cqe_get_data64(cqe);
            aio_note(err, err_at, cqe->res, aio_req_len(a, start, p->hi), op->write,
                     op->offset + start);
            seen++;
        }
        io_uring_cq_advance(&w->ring, seen);
        inflight -= seen;
    }
}

static void *aio_worker_main(void *arg)
{
    aio_worker *w = arg;
    zt_aio *a = w->a;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->wake, &a->lock);
        zt_aio_part *p = w->head;
        if (!p)
            break;
        w->head = p->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&a->lock);
        int err = 0;
        int64_t err_at = 0;
        if (w->ring_ok)
            aio_run_uring(a, w, p, &err, &err_at);
        else
            aio_run_psync(a, p, &err, &err_at);
        pthread_mutex_lock(&a->lock);
        zt_aio_op *op = p->op;
        if (err && !op->err) {
            op->err = err;
            op->err_offset = err_at;
        }
        if (--op->parts_left == 0)
            pthread_cond_broadcast(&a->done);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

zt_status zt_aio_init(zt_aio **out, const zt_aio_config *cfg, zt_aio_engine engine)
{
    *out = NULL;
    if (cfg->thread_count < 1 || cfg->thread_count > ZT_AIO_MAX_THREADS ||
        cfg->queue_depth < 1 || cfg->block_size < ZT_AIO_ALIGN ||
        cfg->block_size % ZT_AIO_ALIGN != 0)
        return zt_fail(ZT_ERR_INTERNAL, "", "aio settings out of range (the config checks them)");
    zt_aio *a = calloc(1, sizeof *a);
    if (!a)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the aio engine");
    a->cfg = *cfg;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->done, NULL);
    a->uring = engine == ZT_AIO_AUTO;
    int n = (int)cfg->thread_count;
    for (int i = 0; i < n && a->uring; i++) {
        aio_worker *w = &a->workers[i];
        w->ring_ok = io_uring_queue_init((unsigned)cfg->queue_depth, &w->ring, 0) == 0;
        if (!w->ring_ok) { /* refused: every thread falls back alike */
            for (int j = 0; j < i; j++) {
                io_uring_queue_exit(&a->workers[j].ring);
                a->workers[j].ring_ok = false;
            }
            a->uring = false;
        }
    }
    zt_status st = ZT_OK;
    for (int i = 0; i < n; i++) {
        aio_worker *w = &a->workers[i];
        w->a = a;
        pthread_cond_init(&w->wake, NULL);
        int rc = pthread_create(&w->thread, NULL, aio_worker_main, w);
        if (rc != 0) {
            st = zt_fail(ZT_ERR_OOM, "use a smaller aio.intra_op_parallelism",
                         "cannot start aio I/O thread %d of %d: %s", i + 1, n, strerror(rc));
            break;
        }
        w->started = true;
        a->n_workers++;
    }
    if (st != ZT_OK) {
        zt_aio_free(a);
        return st;
    }
    *out = a;
    return ZT_OK;
}

void zt_aio_free(zt_aio *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    for (int i = 0; i < ZT_AIO_MAX_THREADS; i++) {
        a->workers[i].stop = true;
        if (a->workers[i].started)
            pthread_cond_signal(&a->workers[i].wake);
    }
    pthread_mutex_unlock(&a->lock);
    for (int i = 0; i < ZT_AIO_MAX_THREADS; i++) {
        aio_worker *w = &a->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        if (w->ring_ok)
            io_uring_queue_exit(&w->ring);
        if (w->started)
            pthread_cond_destroy(&w->wake);
    }
    pthread_cond_destroy(&a->done);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* ------------------------------------------------------------------ files */

static const char *const aio_space_hint =
    "free space on the disk of nvme_path, or point nvme_path at a larger one";

zt_status zt_aio_file_open(zt_aio_file *f, const char *path, int64_t bytes, bool try_direct)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (strlen(path) >= sizeof f->path)
        return zt_fail(ZT_ERR_IO, "use a shorter nvme_path", "swap file path %s is too long",
                       path);
    strcpy(f->path, path);
    int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW;
    int fd = -1;
    if (try_direct) {
        fd = open(path, flags | O_DIRECT, 0600);
        f->direct = fd >= 0;
    }
    /* EINVAL: the file system has no O_DIRECT (tmpfs before Linux 6.6). */
    if (fd < 0 && (!try_direct || errno == EINVAL))
        fd = open(path, flags, 0600);
    if (fd < 0)
        return zt_fail(ZT_ERR_IO, "set nvme_path to a directory this user can write to",
                       "cannot create swap file %s: %s", path, strerror(errno));
    f->fd = fd;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        zt_aio_file_close(f);
        return zt_fail(ZT_ERR_IO, "remove it: zerotrain creates its swap files itself",
                       "swap file %s is not a regular file", path);
    }
    /* Nameless before it holds a block: no way the process ends can leave
     * its space behind. */
    if (unlink(path) != 0) {
        int e = errno;
        zt_aio_file_close(f);
        return zt_fail(ZT_ERR_IO, "set nvme_path to a directory this user can write to",
                       "cannot remove the name of swap file %s: %s", path, strerror(e));
    }
    f->bytes = bytes;
    /* Preallocated, a full disk shows now and not in the middle of a step;
     * where the file system cannot, the size is set and blocks come later. */
    int rc = bytes > 0 ? fallocate(fd, 0, 0, bytes) : 0;
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
        rc = ftruncate(fd, bytes);
    if (rc != 0) {
        int e = errno;
        zt_aio_file_close(f);
        if (e == ENOSPC || e == EDQUOT || e == EFBIG)
            return zt_fail(ZT_ERR_IO, aio_space_hint,
                           "no space for swap file %s: it needs %lld bytes (%.2f GiB): %s", path,
                           (long long)bytes, (double)bytes / (1024.0 * 1024.0 * 1024.0),
                           strerror(e));
        return zt_fail(ZT_ERR_IO, "", "cannot allocate %lld bytes for swap file %s: %s",
                       (long long)bytes, path, strerror(e));
    }
    return ZT_OK;
}

void zt_aio_file_close(zt_aio_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

/* ------------------------------------------------------------------ operations */

zt_status zt_aio_submit(zt_aio *a, zt_aio_op *op, zt_aio_file *f, void *buf, int64_t bytes,
                        int64_t offset, bool write)
{
    if (f->direct && (((uintptr_t)buf | (uint64_t)bytes | (uint64_t)offset) % ZT_AIO_ALIGN))
        return zt_fail(ZT_ERR_INTERNAL, "",
                       "misaligned direct I/O on swap file %s: %lld bytes at offset %lld", f->path,
                       (long long)bytes, (long long)offset);
    if (bytes < 0 || offset < 0 || offset + bytes > f->bytes)
        return zt_fail(ZT_ERR_INTERNAL, "",
                       "I/O of %lld bytes at offset %lld is outside swap file %s (%lld bytes)",
                       (long long)bytes, (long long)offset, f->path, (long long)f->bytes);
    op->file = f;
    op->buf = buf;
    op->offset = offset;
    op->bytes = bytes;
    op->write = write;
    op->err = 0;
    op->err_offset = 0;
    /* Requests start at multiples of block_size; each thread takes an equal
     * run of them. */
    int64_t bs = a->cfg.block_size, reqs = (bytes + bs - 1) / bs;
    int n = a->n_workers;
    pthread_mutex_lock(&a->lock);
    op->parts_left = 0;
    for (int i = 0; i < n; i++) {
        int64_t r0 = reqs * i / n, r1 = reqs * (i + 1) / n;
        if (r1 == r0)
            continue;
        zt_aio_part *p = &op->parts[i];
        *p = (zt_aio_part){.op = op, .lo = r0 * bs, .hi = aio_min(r1 * bs, bytes)};
        aio_worker *w = &a->workers[i];
        if (w->tail)
            w->tail->next = p;
        else
            w->head = p;
        w->tail = p;
        op->parts_left++;
        pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&a->lock);
    return ZT_OK;
}

bool zt_aio_done(zt_aio *a, const zt_aio_op *op)
{
    pthread_mutex_lock(&a->lock);
    bool done = op->parts_left == 0;
    pthread_mutex_unlock(&a->lock);
    return done;
}

zt_status zt_aio_wait(zt_aio *a, zt_aio_op *op)
{
    pthread_mutex_lock(&a->lock);
    while (op->parts_left > 0)
        pthread_cond_wait(&a->done, &a->lock);
    int err = op->err;
    int64_t at = op->err_offset;
    pthread_mutex_unlock(&a->lock);
    if (!err)
        return ZT_OK;
    const char *what = op->write ? "writing" : "reading";
    if (err == ENOSPC || err == EDQUOT)
        return zt_fail(ZT_ERR_IO, aio_space_hint,
                       "%s swap file %s at offset %lld: the disk is full (%s)", what,
                       op->file->path, (long long)at, strerror(err));
    if (err == ENODATA)
        return zt_fail(ZT_ERR_IO,
                       "nothing else may touch nvme_path while training: resume from the last "
                       "checkpoint",
                       "reading swap file %s at offset %lld: the file ends early (truncated "
                       "while training?)",
                       op->file->path, (long long)at);
    return zt_fail(ZT_ERR_IO, "check the disk of nvme_path (dmesg may say more)",
                   "%s swap file %s at offset %lld: %s", what, op->file->path, (long long)at,
                   strerror(err));
}
