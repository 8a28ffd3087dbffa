/* Unit tests for engine/nvme/swapper: items survive any order of gets
 * through fewer slots than items, the files always end up holding what was
 * put, reads run ahead only into free slots, a dropped slot is read again,
 * and misuse and I/O errors are errors. The reference is the files' bytes read with pread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/nvme/swapper.h"

enum { ITEMS = 5, K = 2, SLOTS = 2, MAX_SLOTS = 3, TENSOR = 2 * ZT_AIO_ALIGN };

static char dir[64];
static zt_aio *aio;
static zt_aio_file files[K];
static void *mem;

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zt_swap_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    zt_aio_config cfg = {.block_size = 4096, .queue_depth = 4, .thread_count = 2,
                         .overlap_events = true};
    if (zt_aio_init(&aio, &cfg, ZT_AIO_AUTO) != ZT_OK)
        return -1;
    for (int j = 0; j < K; j++) {
        char path[128];
        snprintf(path, sizeof path, "%s/t%d.tensor.swp", dir, j);
        if (zt_aio_file_open(&files[j], path, ITEMS * TENSOR, true) != ZT_OK)
            return -1;
    }
    return posix_memalign(&mem, ZT_AIO_ALIGN, MAX_SLOTS * K * TENSOR);
}

static int teardown(void **state)
{
    (void)state;
    for (int j = 0; j < K; j++)
        zt_aio_file_close(&files[j]);
    zt_aio_free(aio);
    free(mem);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Item i's tensor j at offset i * TENSOR of file j; the last item's tensors
 * use one block only (an extent shorter than the slot). */
static void init_swapper(zt_swapper *s, int slots)
{
    zt_swap_extent ext[ITEMS * K];
    for (int i = 0; i < ITEMS; i++)
        for (int j = 0; j < K; j++)
            ext[i * K + j] = (zt_swap_extent){j, (int64_t)i * TENSOR,
                                              i == ITEMS - 1 ? ZT_AIO_ALIGN : TENSOR};
    assert_int_equal(zt_swap_init(s, aio, files, K, ext, ITEMS, K, slots, TENSOR, mem), ZT_OK);
}

static int64_t extent_bytes(int i) { return i == ITEMS - 1 ? ZT_AIO_ALIGN : TENSOR; }

/* Value v of item i, tensor j, version ver, as 32-bit words. */
static uint32_t word(int i, int j, int ver, int64_t w)
{
    return (uint32_t)(i * 1000003 + j * 7919 + ver * 104729) ^ (uint32_t)w;
}

static void fill(void **t, int i, int ver)
{
    for (int j = 0; j < K; j++)
        for (int64_t w = 0; w < extent_bytes(i) / 4; w++)
            ((uint32_t *)t[j])[w] = word(i, j, ver, w);
}

static void expect(void *const *t, int i, int ver)
{
    for (int j = 0; j < K; j++)
        for (int64_t w = 0; w < extent_bytes(i) / 4; w++)
            assert_int_equal(((uint32_t *)t[j])[w], word(i, j, ver, w));
}

/* The files hold version ver of every item (pread, not the swapper). */
static void expect_files(const int *ver)
{
    static uint32_t buf[TENSOR / 4];
    for (int j = 0; j < K; j++) {
        char self[64]; /* a buffered descriptor (any buffer will do) of the nameless file */
        snprintf(self, sizeof self, "/proc/self/fd/%d", files[j].fd);
        int fd = open(self, O_RDONLY);
        assert_true(fd >= 0);
        for (int i = 0; i < ITEMS; i++) {
            assert_int_equal(pread(fd, buf, (size_t)extent_bytes(i), (off_t)i * TENSOR),
                             extent_bytes(i));
            for (int64_t w = 0; w < extent_bytes(i) / 4; w++)
                assert_int_equal(buf[w], word(i, j, ver[i], w));
        }
        close(fd);
    }
}

static void test_items_survive_eviction(void **state)
{
    (void)state;
    zt_swapper s;
    init_swapper(&s, SLOTS);
    void *t[K];
    int ver[ITEMS] = {0};
    int64_t written = 0;
    for (int i = 0; i < ITEMS; i++) {
        written += K * extent_bytes(i);
        assert_int_equal(zt_swap_get(&s, i, ZT_SWAP_OVERWRITE, t), ZT_OK);
        fill(t, i, 0);
        assert_int_equal(zt_swap_put(&s, i, true), ZT_OK);
    }
    assert_int_equal(s.stats.reads, 0); /* overwrites read nothing */
    assert_int_equal(zt_swap_sync(&s), ZT_OK);
    expect_files(ver);
    /* Update in an order that keeps evicting: every item comes back intact
     * and takes its new version to the file. */
    static const int order[] = {0, 4, 1, 3, 2, 0, 0, 2, 4};
    for (size_t n = 0; n < sizeof order / sizeof *order; n++) {
        int i = order[n];
        written += K * extent_bytes(i);
        assert_int_equal(zt_swap_get(&s, i, ZT_SWAP_UPDATE, t), ZT_OK);
        expect(t, i, ver[i]);
        fill(t, i, ++ver[i]);
        assert_int_equal(zt_swap_put(&s, i, true), ZT_OK);
    }
    assert_int_equal(zt_swap_sync(&s), ZT_OK);
    expect_files(ver);
    /* Two slots, LRU: 3 and 4 stay from the writes, so of the nine gets 4,
     * the repeated 0 and the second 2 hit; six read. */
    assert_int_equal(s.stats.gets, ITEMS + 9);
    assert_int_equal(s.stats.hits, 3);
    assert_int_equal(s.stats.reads, 6);
    assert_int_equal(s.stats.bytes_written, written);
    /* READ leaves the file alone. */
    assert_int_equal(zt_swap_get(&s, 1, ZT_SWAP_READ, t), ZT_OK);
    expect(t, 1, ver[1]);
    assert_int_equal(zt_swap_put(&s, 1, false), ZT_OK);
    zt_swap_free(&s);
}

static void test_prefetch(void **state)
{
    (void)state;
    zt_swapper s;
    init_swapper(&s, 3);
    void *t[K];
    /* Item 0 is written; reads ahead of 1 and 2 fill the two free slots. */
    assert_int_equal(zt_swap_get(&s, 0, ZT_SWAP_OVERWRITE, t), ZT_OK);
    fill(t, 0, 5);
    assert_int_equal(zt_swap_put(&s, 0, true), ZT_OK);
    assert_int_equal(zt_swap_prefetch(&s, 1), ZT_OK);
    assert_int_equal(zt_swap_prefetch(&s, 2), ZT_OK);
    /* Once 0's write is done its slot is idle and takes 3; then every
     * slot holds a read ahead not used yet, and 4 is not read. */
    assert_int_equal(zt_swap_flush(&s, 0), ZT_OK);
    assert_int_equal(zt_swap_prefetch(&s, 3), ZT_OK); /* takes 0's idle slot */
    assert_int_equal(zt_swap_prefetch(&s, 4), ZT_OK); /* nothing left: skipped */
    assert_int_equal(s.stats.prefetches, 3);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(zt_swap_get(&s, i, ZT_SWAP_READ, t), ZT_OK);
        assert_int_equal(zt_swap_put(&s, i, false), ZT_OK);
    }
    assert_int_equal(s.stats.hits, 3);
    /* A locked slot is never taken: with every slot locked a get fails. */
    zt_swapper one;
    zt_swap_free(&s);
    init_swapper(&one, 1);
    assert_int_equal(zt_swap_get(&one, 0, ZT_SWAP_READ, t), ZT_OK);
    assert_int_equal(zt_swap_prefetch(&one, 1), ZT_OK);
    assert_int_equal(one.stats.prefetches, 0);
    assert_int_equal(zt_swap_get(&one, 1, ZT_SWAP_READ, t), ZT_ERR_INTERNAL);
    assert_non_null(strstr(zt_status_message(), "all 1 swap buffers are in use"));
    assert_int_equal(zt_swap_get(&one, 0, ZT_SWAP_READ, t), ZT_ERR_INTERNAL);
    assert_int_equal(zt_swap_put(&one, 0, false), ZT_OK);
    assert_int_equal(zt_swap_put(&one, 0, false), ZT_ERR_INTERNAL);
    assert_non_null(strstr(zt_status_message(), "put without get"));
    zt_swap_free(&one);
}

/* drop: a buffer changed and not written back is forgotten, so the next get
 * reads the file's bytes again (the nvme gradients, scaled in place by the
 * step); a got item cannot be dropped. */
static void test_drop(void **state)
{
    (void)state;
    zt_swapper s;
    init_swapper(&s, SLOTS);
    void *t[K];
    assert_int_equal(zt_swap_get(&s, 1, ZT_SWAP_OVERWRITE, t), ZT_OK);
    fill(t, 1, 7);
    assert_int_equal(zt_swap_put(&s, 1, true), ZT_OK);
    /* UPDATE: the write in flight is waited for before the buffer changes. */
    assert_int_equal(zt_swap_get(&s, 1, ZT_SWAP_UPDATE, t), ZT_OK);
    assert_int_equal(zt_swap_drop(&s, 1), ZT_ERR_INTERNAL);
    assert_non_null(strstr(zt_status_message(), "dropped while got"));
    memset(t[0], 0xab, TENSOR); /* changed, not to be written */
    assert_int_equal(zt_swap_put(&s, 1, false), ZT_OK);
    assert_int_equal(zt_swap_drop(&s, 1), ZT_OK);
    assert_int_equal(s.where[1], -1);
    assert_int_equal(zt_swap_drop(&s, 1), ZT_OK); /* not held: nothing to do */
    int64_t reads = s.stats.reads;
    assert_int_equal(zt_swap_get(&s, 1, ZT_SWAP_READ, t), ZT_OK);
    assert_int_equal(s.stats.reads, reads + 1);
    expect(t, 1, 7);
    assert_int_equal(zt_swap_put(&s, 1, false), ZT_OK);
    zt_swap_free(&s);
}

static void test_io_errors(void **state)
{
    (void)state;
    zt_swapper s;
    init_swapper(&s, SLOTS);
    void *t[K];
    /* A file cut short: the demand read fails naming it, the slot is free. */
    assert_int_equal(ftruncate(files[1].fd, TENSOR), 0);
    assert_int_equal(zt_swap_get(&s, 3, ZT_SWAP_UPDATE, t), ZT_ERR_IO);
    assert_non_null(strstr(zt_status_message(), files[1].path));
    assert_int_equal(s.where[3], -1);
    assert_int_equal(ftruncate(files[1].fd, ITEMS * TENSOR), 0);
    assert_int_equal(zt_swap_get(&s, 3, ZT_SWAP_UPDATE, t), ZT_OK);
    assert_int_equal(zt_swap_put(&s, 3, false), ZT_OK);
    zt_swap_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items_survive_eviction),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_drop),
        cmocka_unit_test(test_io_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
