/* Unit tests for what `zerotrain check` computes: nccl-tests' bus-bandwidth
 * factors and the table's sizes (engine/comm/bandwidth.h), a measured table
 * at one rank (the warm-up's result check, algbw = bytes / time), the rank
 * ranges of the watchdog's and check's messages (engine/comm/peers.h) and the
 * GPU UUID's form (engine/world/topology.h). Runs as a singleton MPI world;
 * tests/mpi/test_check.sh runs the command over ranks and hosts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <mpi.h>
#include <math.h>
#include <string.h>

#include "engine/comm/bandwidth.h"
#include "engine/comm/peers.h"
#include "engine/cpu/cpu.h"
#include "engine/world/topology.h"

/* nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and
 * reduce-scatter (n-1)/n. */
static void test_bus_factors(void **state)
{
    (void)state;
    assert_true(zt_bw_bus_factor(ZT_COMM_ALL_REDUCE, 1) == 0.0);
    assert_true(zt_bw_bus_factor(ZT_COMM_ALL_REDUCE, 2) == 1.0);
    assert_true(zt_bw_bus_factor(ZT_COMM_ALL_REDUCE, 4) == 1.5);
    assert_true(zt_bw_bus_factor(ZT_COMM_ALL_REDUCE, 8) == 1.75);
    assert_true(zt_bw_bus_factor(ZT_COMM_ALL_GATHER, 4) == 0.75);
    assert_true(zt_bw_bus_factor(ZT_COMM_REDUCE_SCATTER, 8) == 0.875);
    assert_true(zt_bw_bus_factor(ZT_COMM_REDUCE_SCATTER, 1) == 0.0);
}

static void test_sizes(void **state)
{
    (void)state;
    /* 1 KB .. 256 MB doubling: 19 rows. */
    assert_int_equal(zt_bw_n_rows(1024, (int64_t)256 << 20), 19);
    assert_int_equal(zt_bw_n_rows(1024, 1024), 1);
    assert_int_equal(zt_bw_n_rows(1024, 2047), 1);
    assert_int_equal(zt_bw_n_rows(1024, 0), 0);
    assert_int_equal(zt_bw_iters(1024), 20);
    assert_int_equal(zt_bw_iters((int64_t)4 << 20), 16);
    assert_int_equal(zt_bw_iters((int64_t)256 << 20), 2);
}

static void test_measure_one_rank(void **state)
{
    (void)state;
    zt_backend be;
    zt_comm c;
    assert_int_equal(zt_backend_cpu_init(&be), ZT_OK);
    assert_int_equal(zt_comm_mpi_init(&c, MPI_COMM_WORLD), ZT_OK);
    zt_bw_row rows[3];
    assert_int_equal(zt_bw_measure(&c, &be, 1024, 4096, rows), ZT_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rows[i].bytes, (int64_t)1024 << i);
        assert_int_equal(rows[i].iters, 20);
        for (int o = 0; o < ZT_BW_OPS; o++) {
            assert_true(rows[i].seconds[o] > 0);
            assert_true(fabs(rows[i].algbw[o] * rows[i].seconds[o] * 1e9 - rows[i].bytes) <
                        1e-6 * rows[i].bytes);
            /* One rank moves nothing over a bus. */
            assert_true(rows[i].busbw[o] == 0.0);
        }
    }
    zt_comm_free(&c);
    zt_backend_free(&be);
}

static void test_ranges(void **state)
{
    (void)state;
    char out[64];
    int a[] = {0, 0, 1, 1, 0, 1, 0, 1, 1, 1};
    zt_comm_peers_ranges(a, 10, out, sizeof out);
    assert_string_equal(out, "2-3, 5, 7-9");
    int none[] = {0, 0};
    zt_comm_peers_ranges(none, 2, out, sizeof out);
    assert_string_equal(out, "");
    int all[] = {1, 1, 1};
    zt_comm_peers_ranges(all, 3, out, sizeof out);
    assert_string_equal(out, "0-2");
    int alternate[40];
    for (int i = 0; i < 40; i++)
        alternate[i] = i % 2;
    char small[16];
    zt_comm_peers_ranges(alternate, 40, small, sizeof small);
    assert_non_null(strstr(small, "..."));
    assert_true(strlen(small) < sizeof small);
}

static void test_uuid(void **state)
{
    (void)state;
    char out[64];
    zt_topology_uuid("8d3c1a2b4e5f60718293a4b5c6d7e8f9", out, sizeof out);
    assert_string_equal(out, "GPU-8d3c1a2b-4e5f-6071-8293-a4b5c6d7e8f9");
    zt_topology_uuid("ordinal 3", out, sizeof out);
    assert_string_equal(out, "ordinal 3");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bus_factors),    cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_measure_one_rank), cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_uuid),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
