/* Unit tests for engine/comm: the watchdog's message, the
 * MPI and staged comms at one rank (sequence numbers, requests, split, free),
 * the bootstrap at one rank and the NCCL comm's answers without a GPU. Runs as
 * a singleton MPI world; tests/tools/comm_check.c covers several ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/cpu/cpu.h"
#include "engine/env.h"

static void check_contains(const char *hay, const char *needle, const char *file, int line)
{
    if (!strstr(hay, needle)) {
        print_error("%s:%d: expected \"%s\" in \"%s\"\n", file, line, needle, hay);
        fail();
    }
}
#define assert_contains(hay, needle) check_contains((hay), (needle), __FILE__, __LINE__)

static void test_timeout_fail_message(void **state)
{
    (void)state;
    zt_comm c = {.name = "mpi", .rank = 3, .size = 8, .timeout_s = 2};
    zt_status_clear();
    assert_int_equal(zt_comm_timeout_fail(&c, ZT_COMM_ALL_REDUCE, 17, 4096, ZT_F16, 2.04),
                     ZT_ERR_COMM);
    assert_contains(zt_status_message(),
                    "MPI all_reduce #17 (4096 elements, fp16) did not complete within 2.0 s");
    assert_contains(zt_status_message(), "rank 3 of 8");
    assert_contains(zt_status_hint(), "stuck or dead");
    assert_contains(zt_status_hint(), "ZT_COMM_TIMEOUT=2 s");

    zt_comm n = {.name = "nccl", .rank = 0, .size = 2, .timeout_s = 600};
    zt_comm_timeout_fail(&n, ZT_COMM_REDUCE_SCATTER, 1, 10, ZT_BF16, 600.31);
    assert_contains(zt_status_message(),
                    "NCCL reduce_scatter #1 (10 elements, bf16) did not complete within 600.3 s "
                    "on rank 0 of 2");
}

/* A singleton world: collectives are identities, nothing is counted, every
 * call takes the next sequence number. */
static void test_mpi_one_rank(void **state)
{
    (void)state;
    zt_comm c;
    assert_int_equal(zt_comm_mpi_init(&c, MPI_COMM_WORLD), ZT_OK);
    assert_int_equal(c.size, 1);
    assert_int_equal(c.rank, 0);
    assert_int_equal(c.seq, 0);
    assert_true(c.timeout_s == zt_env_get()->comm_timeout_s);

    float x[3] = {1, 2, 3};
    assert_int_equal(c.ops->all_reduce(&c, x, 3, ZT_F32, ZT_RED_SUM, NULL), ZT_OK);
    assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3);
    assert_int_equal(c.seq, 1);

    zt_comm_req req;
    float y[2] = {0, 0};
    assert_int_equal(c.ops->all_gather(&c, x, y, 2, ZT_F32, &req), ZT_OK);
    assert_int_equal(req.seq, 2);
    assert_int_equal(req.kind, ZT_COMM_ALL_GATHER);
    assert_int_equal(req.numel, 2);
    assert_int_equal(req.dt, ZT_F32);
    assert_int_equal(c.ops->wait(&c, &req), ZT_OK);
    assert_false(req.pending);
    assert_true(c.ops->test(&c, &req));
    assert_true(y[0] == 1 && y[1] == 2);
    for (int k = 0; k < ZT_COMM_NKINDS; k++) {
        assert_int_equal(c.bytes[k], 0);
        assert_int_equal(c.calls[k], 0);
    }

    /* A split keeps the backend and the (possibly changed) watchdog limit. */
    c.timeout_s = 7;
    zt_comm sub;
    assert_int_equal(c.ops->split(&c, 0, 0, &sub), ZT_OK);
    assert_ptr_equal(sub.ops, c.ops);
    assert_string_equal(sub.name, "mpi");
    assert_int_equal(sub.size, 1);
    assert_int_equal(sub.seq, 0);
    assert_true(sub.timeout_s == 7);
    assert_int_equal(sub.ops->broadcast(&sub, x, 3, ZT_F32, 0, NULL), ZT_OK);
    assert_int_equal(sub.seq, 1);
    assert_int_equal(sub.ops->barrier(&sub), ZT_OK);
    zt_comm_free(&sub);
    zt_comm_free(&sub); /* twice is harmless */
    zt_comm_free(&c);

    zt_comm zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    zt_comm_free(&zeroed);
}

/* The staged comm on the CPU backend at one rank: the results a one-rank
 * world gives, requests already complete, nothing counted. */
static void test_staged_one_rank(void **state)
{
    (void)state;
    zt_backend be;
    assert_int_equal(zt_backend_cpu_init(&be), ZT_OK);
    zt_comm c;
    assert_int_equal(zt_comm_staged_init(&c, MPI_COMM_WORLD, &be), ZT_OK);
    assert_string_equal(c.name, "staged");
    assert_int_equal(c.size, 1);

    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    zt_comm_req req;
    assert_int_equal(c.ops->all_reduce(&c, x, 4, ZT_F32, ZT_RED_MAX, &req), ZT_OK);
    assert_false(req.pending);
    assert_true(c.ops->test(&c, &req));
    assert_int_equal(c.ops->wait(&c, &req), ZT_OK);
    assert_int_equal(req.seq, 1);
    assert_int_equal(req.kind, ZT_COMM_ALL_REDUCE);
    assert_true(x[0] == 1 && x[3] == 4);

    assert_int_equal(c.ops->reduce_scatter(&c, x, y, 4, ZT_F32, ZT_RED_SUM, NULL), ZT_OK);
    assert_true(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
    memset(y, 0, sizeof y);
    assert_int_equal(c.ops->all_gather(&c, x, y, 2, ZT_F32, NULL), ZT_OK);
    assert_true(y[0] == 1 && y[1] == 2 && y[2] == 0);
    assert_int_equal(c.ops->all_gather(&c, y, y, 2, ZT_F32, NULL), ZT_OK); /* in place */
    assert_true(y[0] == 1 && y[1] == 2);
    uint16_t h[2] = {0x3c00, 0x4000};
    assert_int_equal(c.ops->broadcast(&c, h, 2, ZT_F16, 0, &req), ZT_OK);
    assert_true(h[0] == 0x3c00 && h[1] == 0x4000);
    assert_int_equal(c.seq, 5);
    assert_int_equal(req.seq, 5);
    for (int k = 0; k < ZT_COMM_NKINDS; k++)
        assert_int_equal(c.calls[k], 0);
    assert_int_equal(c.ops->barrier(&c), ZT_OK);

    zt_comm sub;
    assert_int_equal(c.ops->split(&c, 0, 0, &sub), ZT_OK);
    assert_ptr_equal(sub.ops, c.ops);
    assert_int_equal(sub.size, 1);
    assert_int_equal(sub.ops->all_reduce(&sub, x, 4, ZT_F32, ZT_RED_SUM, NULL), ZT_OK);
    assert_int_equal(sub.seq, 1);
    zt_comm_free(&sub);
    zt_comm_free(&c);
    zt_comm_free(&c);
    zt_backend_free(&be);
}

typedef struct {
    int make_calls, join_calls, nranks, rank;
    bool fail_make, fail_join;
} boot;

static zt_status boot_make(void *id, void *ctx)
{
    boot *b = ctx;
    b->make_calls++;
    if (b->fail_make)
        return zt_fail(ZT_ERR_DEVICE, "", "no id today");
    memcpy(id, "zerotrain", 10);
    return ZT_OK;
}

static zt_status boot_join(const void *id, int nranks, int rank, void *ctx)
{
    boot *b = ctx;
    b->join_calls++;
    b->nranks = nranks;
    b->rank = rank;
    if (strcmp(id, "zerotrain"))
        return zt_fail(ZT_ERR_INTERNAL, "", "wrong id");
    return b->fail_join ? zt_fail(ZT_ERR_COMM, "", "no join today") : ZT_OK;
}

static void test_bootstrap_one_rank(void **state)
{
    (void)state;
    char id[10];
    boot b = {0};
    zt_comm_bootstrap_fns fns = {
        .id_bytes = sizeof id, .make_id = boot_make, .join = boot_join, .ctx = &b};
    assert_int_equal(zt_comm_bootstrap(MPI_COMM_WORLD, &fns, id), ZT_OK);
    assert_int_equal(b.make_calls, 1);
    assert_int_equal(b.join_calls, 1);
    assert_int_equal(b.nranks, 1);
    assert_int_equal(b.rank, 0);

    b = (boot){.fail_make = true};
    assert_int_equal(zt_comm_bootstrap(MPI_COMM_WORLD, &fns, id), ZT_ERR_DEVICE);
    assert_contains(zt_status_message(), "no id today");
    assert_int_equal(b.join_calls, 0);

    b = (boot){.fail_join = true};
    assert_int_equal(zt_comm_bootstrap(MPI_COMM_WORLD, &fns, id), ZT_ERR_COMM);
    assert_contains(zt_status_message(), "no join today");
}

/* Without a GPU: a built NCCL comm refuses the CPU backend (a usage error),
 * an absent one says it is not built; neither touches the comm's storage
 * beyond zeroing it. */
static void test_nccl_without_gpu(void **state)
{
    (void)state;
    zt_backend be;
    assert_int_equal(zt_backend_cpu_init(&be), ZT_OK);
    zt_comm c;
    memset(&c, 0x5a, sizeof c);
    zt_status_clear();
    zt_status st = zt_comm_nccl_init(&c, MPI_COMM_WORLD, &be);
    if (zt_comm_nccl_built()) {
        assert_int_equal(st, ZT_ERR_USAGE);
        assert_contains(zt_status_message(), "--comm nccl needs --device cuda");
    } else {
        assert_int_equal(st, ZT_ERR_UNSUPPORTED);
        assert_contains(zt_status_message(), "built without NCCL");
    }
    assert_true(zt_status_hint()[0] != '\0');
    assert_null(c.ops);
    assert_null(c.impl);
    zt_comm_free(&c);
    zt_backend_free(&be);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_fail_message),
        cmocka_unit_test(test_mpi_one_rank),
        cmocka_unit_test(test_staged_one_rank),
        cmocka_unit_test(test_bootstrap_one_rank),
        cmocka_unit_test(test_nccl_without_gpu),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
