/* Unit tests for engine/nvme/aio: every aio setting moves the bytes a plain
 * pread sees, O_DIRECT and buffered files, both engines; errors name the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/nvme/aio.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zt_aio_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void *aligned(size_t n)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, ZT_AIO_ALIGN, n), 0);
    return p;
}

/* A byte pattern that differs per position and per seed. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

/* Writes a pattern through the engine at an offset, reads it back through
 * the engine, and checks both against pread of the file. */
static void round_trip(const zt_aio_config *cfg, zt_aio_engine engine, bool direct, unsigned seed)
{
    const int64_t file_bytes = 3 << 20, off = 5 * ZT_AIO_ALIGN,
                  bytes = (2 << 20) + 7 * ZT_AIO_ALIGN; /* not a multiple of block_size */
    zt_aio *a;
    assert_int_equal(zt_aio_init(&a, cfg, engine), ZT_OK);
    if (engine == ZT_AIO_PSYNC)
        assert_string_equal(zt_aio_engine_name(a), "pread/pwrite threads");
    char path[128];
    snprintf(path, sizeof path, "%s/rt.tensor.swp", dir);
    zt_aio_file f;
    assert_int_equal(zt_aio_file_open(&f, path, file_bytes, direct), ZT_OK);
    assert_true(f.direct == direct || !direct);
    /* Open, preallocated, and nameless: nothing is left however the
     * process ends. */
    struct stat sb;
    assert_int_equal(stat(path, &sb), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(fstat(f.fd, &sb), 0);
    assert_int_equal(sb.st_nlink, 0);
    assert_int_equal(sb.st_size, file_bytes);
    assert_true((int64_t)sb.st_blocks * 512 >= file_bytes);
    assert_int_equal(sb.st_mode & 0777, 0600);

    unsigned char *out = aligned((size_t)bytes), *in = aligned((size_t)bytes);
    unsigned char *ref = malloc((size_t)bytes);
    fill(out, (size_t)bytes, seed);
    zt_aio_op w, r;
    memset(&w, 0, sizeof w);
    memset(&r, 0, sizeof r);
    assert_int_equal(zt_aio_submit(a, &w, &f, out, bytes, off, true), ZT_OK);
    assert_int_equal(zt_aio_wait(a, &w), ZT_OK);
    assert_true(zt_aio_done(a, &w));
    assert_int_equal(zt_aio_submit(a, &r, &f, in, bytes, off, false), ZT_OK);
    assert_int_equal(zt_aio_wait(a, &r), ZT_OK);
    assert_memory_equal(in, out, (size_t)bytes);
    char self[64]; /* a second, buffered descriptor of the nameless file */
    snprintf(self, sizeof self, "/proc/self/fd/%d", f.fd);
    int fd = open(self, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, ref, (size_t)bytes, off), bytes);
    assert_memory_equal(ref, out, (size_t)bytes);
    /* Preallocated bytes around the range read as zeros. */
    unsigned char head[ZT_AIO_ALIGN];
    assert_int_equal(pread(fd, head, sizeof head, 0), (ssize_t)sizeof head);
    for (size_t i = 0; i < sizeof head; i++)
        assert_int_equal(head[i], 0);
    close(fd);
    /* A waited op waits no more; a zeroed one was never submitted. */
    assert_int_equal(zt_aio_wait(a, &r), ZT_OK);
    zt_aio_op idle;
    memset(&idle, 0, sizeof idle);
    assert_int_equal(zt_aio_wait(a, &idle), ZT_OK);
    zt_aio_file_close(&f);
    assert_int_equal(f.fd, -1);
    zt_aio_free(a);
    free(out);
    free(in);
    free(ref);
}

static void test_round_trips(void **state)
{
    (void)state;
    const zt_aio_config cfgs[] = {
        {.block_size = 1 << 20, .queue_depth = 8, .thread_count = 1, .overlap_events = true},
        {.block_size = 4096, .queue_depth = 1, .thread_count = 1, .single_submit = true},
        {.block_size = 8192, .queue_depth = 4, .thread_count = 3, .overlap_events = false},
        {.block_size = 65536, .queue_depth = 32, .thread_count = 8, .single_submit = true,
         .overlap_events = true},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        round_trip(&cfgs[i], ZT_AIO_AUTO, true, (unsigned)i);
        round_trip(&cfgs[i], ZT_AIO_PSYNC, true, (unsigned)i + 10);
        round_trip(&cfgs[i], ZT_AIO_AUTO, false, (unsigned)i + 20);
    }
}

/* Many operations in flight at once complete, each with its own bytes. */
static void test_many_in_flight(void **state)
{
    (void)state;
    zt_aio_config cfg = {.block_size = 4096, .queue_depth = 4, .thread_count = 2,
                         .overlap_events = true};
    zt_aio *a;
    assert_int_equal(zt_aio_init(&a, &cfg, ZT_AIO_AUTO), ZT_OK);
    enum { N = 16, BYTES = 3 * 4096 };
    char path[128];
    snprintf(path, sizeof path, "%s/many.tensor.swp", dir);
    zt_aio_file f;
    assert_int_equal(zt_aio_file_open(&f, path, N * BYTES, true), ZT_OK);
    unsigned char *buf = aligned(N * BYTES), *back = aligned(N * BYTES);
    fill(buf, N * BYTES, 7);
    static zt_aio_op ops[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(zt_aio_submit(a, &ops[i], &f, buf + i * BYTES, BYTES, i * BYTES, true),
                         ZT_OK);
    for (int i = N - 1; i >= 0; i--)
        assert_int_equal(zt_aio_wait(a, &ops[i]), ZT_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(zt_aio_submit(a, &ops[i], &f, back + i * BYTES, BYTES, i * BYTES, false),
                         ZT_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(zt_aio_wait(a, &ops[i]), ZT_OK);
    assert_memory_equal(buf, back, N * BYTES);
    zt_aio_file_close(&f);
    zt_aio_free(a);
    free(buf);
    free(back);
}

static void test_errors_name_the_file(void **state)
{
    (void)state;
    zt_aio_config cfg = {.block_size = 4096, .queue_depth = 2, .thread_count = 2,
                         .overlap_events = true};
    zt_aio *a;
    assert_int_equal(zt_aio_init(&a, &cfg, ZT_AIO_AUTO), ZT_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/err.tensor.swp", dir);
    zt_aio_file f;
    assert_int_equal(zt_aio_file_open(&f, path, 8 * 4096, true), ZT_OK);
    unsigned char *buf = aligned(8 * 4096);
    zt_aio_op op;
    memset(&op, 0, sizeof op);

    /* Misaligned or outside the file: a bug of the caller, said as one. */
    if (f.direct)
        assert_int_equal(zt_aio_submit(a, &op, &f, buf + 512, 4096, 0, true), ZT_ERR_INTERNAL);
    assert_int_equal(zt_aio_submit(a, &op, &f, buf, 4096, 8 * 4096, true), ZT_ERR_INTERNAL);
    assert_non_null(strstr(zt_status_message(), "outside swap file"));

    /* A failing request fails its operation at wait, naming file and offset. */
    int good = f.fd;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", good);
    f.fd = open(self, O_RDONLY);
    assert_int_equal(zt_aio_submit(a, &op, &f, buf, 8 * 4096, 0, true), ZT_OK);
    assert_int_equal(zt_aio_wait(a, &op), ZT_ERR_IO);
    assert_non_null(strstr(zt_status_message(), "writing swap file"));
    assert_non_null(strstr(zt_status_message(), path));
    close(f.fd);
    f.fd = good;

    /* A file cut short behind the engine's back: the read says so. */
    assert_int_equal(ftruncate(good, 4096), 0);
    assert_int_equal(zt_aio_submit(a, &op, &f, buf, 8 * 4096, 0, false), ZT_OK);
    assert_int_equal(zt_aio_wait(a, &op), ZT_ERR_IO);
    assert_non_null(strstr(zt_status_message(), "the file ends early"));

    zt_aio_file_close(&f);

    /* A folder that is not one, and a file that cannot have its size (the
     * file-size limit stands in for a full disk: the same path). */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/nodir/x.swp", dir);
    assert_int_equal(zt_aio_file_open(&f, bad, 4096, true), ZT_ERR_IO);
    assert_non_null(strstr(zt_status_message(), "cannot create swap file"));
    struct rlimit old, small = {.rlim_cur = 1 << 16, .rlim_max = RLIM_INFINITY};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    zt_status st = zt_aio_file_open(&f, path, 1 << 20, true);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(st, ZT_ERR_IO);
    assert_non_null(strstr(zt_status_message(), "no space for swap file"));
    assert_non_null(strstr(zt_status_message(), path));
    assert_int_equal(access(path, F_OK), -1); /* removed again */
    free(buf);
    zt_aio_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_errors_name_the_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
