/*
 * aio: asynchronous file I/O for the nvme offload (ZeRO-Infinity), the
 * counterpart of DeepSpeed's aio handle (csrc/aio) on io_uring (liburing).
 *
 * An operation (read or write of one contiguous byte range of one file from
 * or into one buffer) is cut into aio.block_size requests and spread over
 * aio.thread_count I/O threads (DeepSpeed's intra_op_parallelism), each with
 * its own ring keeping up to aio.queue_depth requests in flight:
 * single_submit submits requests one by one instead of in batches;
 * overlap_events refills the queue as each request completes instead of
 * waiting for the whole batch. Submitting returns at once; the caller's
 * thread computes while the I/O threads drive the rings, and waits for the
 * operation when it needs the bytes. Where the kernel refuses io_uring (some
 * container sandboxes, kernels with it disabled) the same threads run
 * blocking pread/pwrite per request instead, as asynchronous to the caller
 * (zt_aio_engine_name says which).
 *
 * Swap files are created mode 0600 and opened with O_DIRECT, as DeepSpeed's
 * are, so swapping neither fills nor thrashes the page cache; a file system
 * that refuses O_DIRECT (tmpfs before Linux 6.6, some network file systems)
 * gets buffered I/O instead and the file says so (direct false). Files are
 * preallocated to their full size when opened, so a disk too small fails
 * then, naming the file, rather than in the middle of a step. A file's name
 * is removed as soon as it is open (before its blocks are allocated): its
 * space lives exactly as long as the descriptor, so it comes back however the
 * process ends, a kill -9 and an MPI_Abort of another rank included, and
 * nothing else can delete, replace or truncate it by name. The path stays as
 * its label in messages (and in /proc/PID/fd, marked "(deleted)"). With O_DIRECT
 * the buffer, the offset and the length of every operation must be multiples
 * of ZT_AIO_ALIGN.
 *
 * Errors name the file: a failed request (ENOSPC, EIO, ...) fails the
 * operation at zt_aio_wait with the file, the offset and the system's
 * message.
 *
 * Memory: zt_aio_init allocates the engine (threads, rings), zt_aio_free
 * joins and frees it. Buffers are the caller's and must stay valid and
 * untouched (for a write) until the operation is waited for. A zt_aio_file
 * and a zt_aio_op are plain values the caller owns; an op must not be moved
 * or reused while it is in flight.
 * Thread safety: one thread (the trainer's) calls the API; the engine's
 * threads only touch the requests they were handed. Collective: none.
 */
#ifndef ZT_AIO_H
#define ZT_AIO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/config/config.h"
#include "engine/status.h"

#define ZT_AIO_ALIGN 4096
#define ZT_AIO_PATH_MAX 512

typedef struct zt_aio zt_aio;

typedef struct {
    int fd;        /* -1 when closed */
    bool direct;   /* opened with O_DIRECT */
    int64_t bytes; /* preallocated size */
    char path[ZT_AIO_PATH_MAX]; /* where it was created: a label, no longer its name */
} zt_aio_file;

/* One byte range of one operation handed to one I/O thread. */
typedef struct zt_aio_part {
    struct zt_aio_op *op;
    int64_t lo, hi; /* bytes of the operation */
    struct zt_aio_part *next;
} zt_aio_part;

typedef struct zt_aio_op {
    zt_aio_file *file;
    char *buf;
    int64_t offset, bytes;
    bool write;
    /* Guarded by the engine: parts not finished, the first error. */
    int parts_left;
    int err;            /* errno of the first failed request, 0 if none */
    int64_t err_offset; /* file offset of that request */
    zt_aio_part parts[ZT_AIO_MAX_THREADS];
} zt_aio_op;

/* The engine to use: io_uring when the kernel allows it, or blocking
 * pread/pwrite in the I/O threads (tests force the latter). */
typedef enum { ZT_AIO_AUTO = 0, ZT_AIO_PSYNC } zt_aio_engine;

/* Starts cfg->thread_count I/O threads. */
zt_status zt_aio_init(zt_aio **out, const zt_aio_config *cfg, zt_aio_engine engine);
/* Waits for nothing: every operation must have been waited for. */
void zt_aio_free(zt_aio *a);
/* "io_uring" or "pread/pwrite threads". */
const char *zt_aio_engine_name(const zt_aio *a);

/* Creates (or truncates) path with mode 0600, removes its name, and
 * preallocates `bytes` (a multiple of ZT_AIO_ALIGN). try_direct: O_DIRECT,
 * buffered when the file system refuses it. ENOSPC: a clear "no space" error
 * naming the file. */
zt_status zt_aio_file_open(zt_aio_file *f, const char *path, int64_t bytes, bool try_direct);
/* Closes (fd -1 afterwards): the file's space is freed. */
void zt_aio_file_close(zt_aio_file *f);

/* Starts reading (write false) or writing `bytes` at `offset` of f from/into
 * buf. op must not be in flight. ZT_ERR_INTERNAL for a misaligned request on
 * a direct file. */
zt_status zt_aio_submit(zt_aio *a, zt_aio_op *op, zt_aio_file *f, void *buf, int64_t bytes,
                        int64_t offset, bool write);
/* Blocks until op is complete; an op never submitted (zeroed) or already
 * waited for returns ZT_OK at once. A failed request: ZT_ERR_IO naming the
 * file, the offset and the cause. */
zt_status zt_aio_wait(zt_aio *a, zt_aio_op *op);
/* Whether op is complete (never blocks). */
bool zt_aio_done(zt_aio *a, const zt_aio_op *op);

#endif
