/*
 * bench-nvme: the swap path's own speed, the aio engine (engine/nvme/aio.h)
 * writing then reading one file of MIB mebibytes under DIR in operations of
 * OP_MIB (a swap tensor's size), with the aio settings given, each pass
 * timed from the first submit to the last wait, OPS_IN_FLIGHT operations
 * submitted before waiting (as the swapper keeps a sub-group's tensors in
 * flight). Prints one line: "WRITE_GBPS READ_GBPS direct|buffered ENGINE".
 *
 *   build/bench-nvme DIR MIB OP_MIB BLOCK_SIZE QUEUE_DEPTH THREADS
 *                    SINGLE_SUBMIT OVERLAP_EVENTS [OPS_IN_FLIGHT]
 *
 * The file is created preallocated, written, read, and removed. The read
 * bytes are checked against the written ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/nvme/aio.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(void)
{
    fprintf(stderr, "bench-nvme: %s\n", zt_status_message());
    return 1;
}

/* One pass over the file: n_ops operations of op_bytes, `flight` at a time. */
static zt_status pass(zt_aio *a, zt_aio_file *f, char *buf, int64_t n_ops, int64_t op_bytes,
                      int flight, bool write, zt_aio_op *ops)
{
    for (int64_t i = 0; i < n_ops; i += flight) {
        int64_t m = n_ops - i < flight ? n_ops - i : flight;
        for (int64_t j = 0; j < m; j++)
            ZT_TRY(zt_aio_submit(a, &ops[j], f, buf + (i + j) * op_bytes, op_bytes,
                                 (i + j) * op_bytes, write));
        for (int64_t j = 0; j < m; j++)
            ZT_TRY(zt_aio_wait(a, &ops[j]));
    }
    return ZT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 9) {
        fprintf(stderr, "usage: %s DIR MIB OP_MIB BLOCK_SIZE QUEUE_DEPTH THREADS SINGLE_SUBMIT "
                        "OVERLAP_EVENTS [OPS_IN_FLIGHT]\n",
                argv[0]);
        return 2;
    }
    const int64_t mib = atoll(argv[2]), op_mib = atoll(argv[3]);
    zt_aio_config cfg = {.block_size = atoll(argv[4]),
                         .queue_depth = atoll(argv[5]),
                         .thread_count = atoll(argv[6]),
                         .single_submit = atoi(argv[7]) != 0,
                         .overlap_events = atoi(argv[8]) != 0};
    int flight = argc > 9 ? atoi(argv[9]) : 3;
    const int64_t op_bytes = op_mib << 20, n_ops = mib / op_mib, bytes = n_ops * op_bytes;
    if (n_ops < 1 || flight < 1 || flight > 64) {
        fprintf(stderr, "bench-nvme: MIB must be a multiple of OP_MIB >= 1, flight 1-64\n");
        return 2;
    }
    zt_aio *a;
    if (zt_aio_init(&a, &cfg, ZT_AIO_AUTO) != ZT_OK)
        return fail();
    char path[ZT_AIO_PATH_MAX];
    snprintf(path, sizeof path, "%s/bench-nvme.tensor.swp", argv[1]);
    zt_aio_file f;
    if (zt_aio_file_open(&f, path, bytes, true) != ZT_OK)
        return fail();
    char *buf = NULL, *back = NULL;
    zt_aio_op *ops = calloc((size_t)flight, sizeof *ops);
    if (posix_memalign((void **)&buf, ZT_AIO_ALIGN, (size_t)bytes) ||
        posix_memalign((void **)&back, ZT_AIO_ALIGN, (size_t)bytes) || !ops) {
        fprintf(stderr, "bench-nvme: cannot allocate %lld MiB twice\n", (long long)mib);
        return 1;
    }
    for (int64_t i = 0; i < bytes; i++)
        buf[i] = (char)(i * 131 + (i >> 12));
    memset(back, 0, (size_t)bytes);
    double t0 = now();
    if (pass(a, &f, buf, n_ops, op_bytes, flight, true, ops) != ZT_OK)
        return fail();
    double t1 = now();
    if (pass(a, &f, back, n_ops, op_bytes, flight, false, ops) != ZT_OK)
        return fail();
    double t2 = now();
    if (memcmp(buf, back, (size_t)bytes) != 0) {
        fprintf(stderr, "bench-nvme: the bytes read back differ from those written\n");
        return 1;
    }
    printf("%.3f %.3f %s %s\n", (double)bytes / (t1 - t0) / 1e9, (double)bytes / (t2 - t1) / 1e9,
           f.direct ? "direct" : "buffered", zt_aio_engine_name(a));
    zt_aio_file_close(&f, true);
    zt_aio_free(a);
    free(buf);
    free(back);
    free(ops);
    return 0;
}
