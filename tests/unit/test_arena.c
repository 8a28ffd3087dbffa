/* Arenas: planned reservations, first-fit reuse in any free order, and exact
 * current/peak accounting per class and per location. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "arena.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_accounting)};
    return cmocka_run_group_tests_name("arena", tests, setup, NULL);
}
