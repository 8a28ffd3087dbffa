/* Arenas: planned reservations, first-fit reuse in any free order, and exact
 * current/peak accounting per class and per location. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/arena.h"
#include "engine/cpu/cpu.h"

static zt_backend be;

static int setup(void **state)
{
    (void)state;
    return zt_backend_cpu_init(&be) == ZT_OK ? 0 : -1;
}

static void test_accounting(void **state)
{
    (void)state;
    zt_memory mem;
    zt_memory_init(&mem, &be);
    zt_memory_plan(&mem, ZT_MEM_DEVICE, ZT_MEM_COMM, 1000);
    zt_memory_plan(&mem, ZT_MEM_DEVICE, ZT_MEM_COMM, 3000);
    zt_memory_plan(&mem, ZT_MEM_DEVICE, ZT_MEM_PARAMS, 100);
    zt_memory_plan(&mem, ZT_MEM_HOST, ZT_MEM_WORK, 10);
    assert_int_equal(zt_memory_reserve(&mem), ZT_OK);
    zt_arena *comm = zt_memory_arena(&mem, ZT_MEM_DEVICE, ZT_MEM_COMM);
    /* 1000 rounds to 1024, 3000 to 3008 */
    assert_int_equal(comm->reserved_bytes, 1024 + 3008);
    assert_null(zt_memory_arena(&mem, ZT_MEM_DEVICE, ZT_MEM_OPTIM)->base);

    void *a = NULL, *b = NULL, *p = NULL, *h = NULL;
    assert_int_equal(zt_arena_alloc(comm, 1000, &a), ZT_OK);
    assert_int_equal(zt_arena_alloc(comm, 3000, &b), ZT_OK);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);
    assert_int_equal(comm->current_bytes, 4000);
    assert_int_equal(zt_arena_alloc(zt_memory_arena(&mem, ZT_MEM_DEVICE, ZT_MEM_PARAMS), 100, &p),
                     ZT_OK);
    assert_int_equal(zt_arena_alloc(zt_memory_arena(&mem, ZT_MEM_HOST, ZT_MEM_WORK), 10, &h),
                     ZT_OK);
    assert_int_equal(mem.total_current[ZT_MEM_DEVICE], 4100);
    assert_int_equal(mem.total_current[ZT_MEM_HOST], 10);

    /* Full: a third block does not fit. */
    void *c = NULL;
    assert_int_equal(zt_arena_alloc(comm, 64, &c), ZT_ERR_OOM);
    assert_non_null(strstr(zt_status_message(), "COMM"));

    /* Free the first block, reuse its hole; the peak stays. */
    zt_arena_free(comm, a);
    assert_int_equal(comm->current_bytes, 3000);
    assert_int_equal(zt_arena_alloc(comm, 512, &c), ZT_OK);
    assert_ptr_equal(c, a);
    zt_mem_stats s = zt_arena_stats(comm);
    assert_int_equal(s.current, 3512);
    assert_int_equal(s.peak, 4000);
    assert_true(s.avg <= s.peak);
    assert_int_equal(mem.total_peak[ZT_MEM_DEVICE], 4100);
    zt_arena_free(comm, b);
    zt_arena_free(comm, c);
    assert_int_equal(comm->current_bytes, 0);
    zt_memory_free(&mem);
}

/* A backend with page-locked host memory (CUDA) must serve every host arena
 * from host_alloc, one call per arena, and give each back to host_free. */
static int host_allocs, host_frees;

static zt_status counting_host_alloc(const zt_backend *b, size_t bytes, void **out)
{
    host_allocs++;
    return b->alloc(b, bytes, out);
}

static void counting_host_free(const zt_backend *b, void *ptr)
{
    host_frees++;
    b->free(b, ptr);
}

static void test_host_arenas_use_host_alloc(void **state)
{
    (void)state;
    zt_backend pinned = be;
    pinned.host_alloc = counting_host_alloc;
    pinned.host_free = counting_host_free;
    zt_memory mem;
    zt_memory_init(&mem, &pinned);
    zt_memory_plan(&mem, ZT_MEM_HOST, ZT_MEM_MASTER, 4096);
    zt_memory_plan(&mem, ZT_MEM_HOST, ZT_MEM_OPTIM, 8192);
    zt_memory_plan(&mem, ZT_MEM_HOST, ZT_MEM_OPTIM, 100);
    zt_memory_plan(&mem, ZT_MEM_DEVICE, ZT_MEM_PARAMS, 4096);
    assert_int_equal(zt_memory_reserve(&mem), ZT_OK);
    assert_int_equal(host_allocs, 2);
    assert_int_equal(zt_memory_arena(&mem, ZT_MEM_HOST, ZT_MEM_OPTIM)->reserved_bytes,
                     8192 + 128);
    zt_memory_free(&mem);
    assert_int_equal(host_frees, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_accounting),
                                       cmocka_unit_test(test_host_arenas_use_host_alloc)};
    return cmocka_run_group_tests_name("arena", tests, setup, NULL);
}
