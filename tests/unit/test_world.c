/* --device/--comm resolution (zt_device_choose): every combination of what the
 * user asks for, what the binary was built with and what the node has, against
 * the rules written in engine/world/devices.h, without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/status.h"
#include "engine/world/devices.h"

/* A CUDA+NCCL build on a node with `gpus` GPUs and `ranks` local ranks. */
static zt_device_request req(const char *device, const char *comm, int gpus, int ranks)
{
    return (zt_device_request){.device = device,
                               .comm = comm,
                               .cuda_built = true,
                               .nccl_built = true,
                               .gpu_count = gpus,
                               .shared = ranks > gpus,
                               .no_gpu_why = gpus ? "" : "no CUDA driver",
                               .gpu_driver = true,
                               .local_rank = ranks - 1,
                               .local_size = ranks};
}

static void test_auto_without_gpu_notice_only_with_a_driver(void **state)
{
    (void)state;
    zt_device_request r = req("auto", "auto", 0, 2);
    zt_device_choice c;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.device, ZT_DEVICE_CPU);
    assert_int_equal(c.comm, ZT_COMM_USE_MPI);
    assert_non_null(strstr(c.notice, "no GPU answers (no CUDA driver)"));
    assert_non_null(strstr(c.notice, "training on the CPU"));

    /* No NVIDIA driver on the host: the CPU is expected, nothing to say. */
    r.gpu_driver = false;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.device, ZT_DEVICE_CPU);
    assert_string_equal(c.notice, "");

    /* A CPU-only build has no choice to tell about, driver or not. */
    r.gpu_driver = true;
    r.cuda_built = r.nccl_built = false;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.device, ZT_DEVICE_CPU);
    assert_string_equal(c.notice, "");
}

static void test_explicit_cpu_is_silent(void **state)
{
    (void)state;
    zt_device_request r = req("cpu", "auto", 8, 8);
    zt_device_choice c;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.device, ZT_DEVICE_CPU);
    assert_int_equal(c.comm, ZT_COMM_USE_MPI);
    assert_string_equal(c.notice, "");
    r.comm = "mpi";
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_MPI);
}

static void test_cuda_errors_name_what_is_missing(void **state)
{
    (void)state;
    zt_device_choice c;
    zt_device_request r = req("cuda", "auto", 0, 1);
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_DEVICE);
    assert_non_null(strstr(zt_status_message(), "no usable GPU (no CUDA driver)"));
    assert_non_null(strstr(zt_status_hint(), "--device cpu"));

    r = req("cuda", "auto", 1, 1);
    r.cuda_built = false;
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_UNSUPPORTED);
    assert_non_null(strstr(zt_status_message(), "built without CUDA"));

    r = req("cpu", "nccl", 4, 1);
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "--comm nccl needs the CUDA backend"));

    r = req("auto", "nccl", 0, 1);
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "no CUDA driver"));

    r = req("cuda", "nccl", 1, 4);
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "4 ranks on this node share 1 GPU"));

    r = req("cuda", "nccl", 1, 1);
    r.nccl_built = false;
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_UNSUPPORTED);
    assert_non_null(strstr(zt_status_message(), "built without NCCL"));

    r = req("tpu", "auto", 1, 1);
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_USAGE);
    r = req("cuda", "gloo", 1, 1);
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_USAGE);
}

static void test_cuda_picks_device_and_comm(void **state)
{
    (void)state;
    zt_device_choice c;
    /* One rank per GPU: NCCL, device = local rank. */
    zt_device_request r = req("auto", "auto", 8, 8);
    r.local_rank = 5;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.device, ZT_DEVICE_CUDA);
    assert_int_equal(c.comm, ZT_COMM_USE_NCCL);
    assert_int_equal(c.ordinal, 5);
    assert_string_equal(c.notice, "");

    /* Four ranks on one GPU: staged MPI, all on device 0, with a notice. */
    r = req("cuda", "auto", 1, 4);
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_STAGED);
    assert_int_equal(c.ordinal, 0);
    assert_non_null(strstr(c.notice, "several ranks share a GPU"));

    /* Six ranks on four GPUs: local_rank % count. */
    r = req("cuda", "mpi", 4, 6);
    r.local_rank = 5;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_STAGED);
    assert_int_equal(c.ordinal, 1);
    assert_string_equal(c.notice, "");

    /* CUDA without NCCL: staged, and auto says why. */
    r = req("auto", "auto", 2, 2);
    r.nccl_built = false;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_STAGED);
    assert_non_null(strstr(c.notice, "built without NCCL"));

    r = req("cuda", "nccl", 2, 2);
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_NCCL);
}

/* CUDA_VISIBLE_DEVICES gives each of 4 ranks only its own GPU: every rank
 * counts 1, but the device ids differ, so NCCL is chosen (counting alone
 * would have called the GPU shared). */
static void test_own_gpu_each_behind_visible_devices(void **state)
{
    (void)state;
    zt_device_request r = req("auto", "auto", 1, 4);
    r.shared = false;
    zt_device_choice c;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.device, ZT_DEVICE_CUDA);
    assert_int_equal(c.comm, ZT_COMM_USE_NCCL);
    assert_int_equal(c.ordinal, 0);
    r.comm = "nccl";
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_NCCL);
}

/* ZT_RANKS_PER_NODE=1 on a host with 2 GPUs: each "node" has one rank, which
 * counts 2 GPUs and takes device 0; the ids show both use the same GPU, so
 * auto stages through MPI and nccl is refused instead of failing inside NCCL
 * with "duplicate GPU". */
static void test_same_gpu_by_id(void **state)
{
    (void)state;
    zt_device_request r = req("cuda", "auto", 2, 1);
    r.shared = true;
    zt_device_choice c;
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_int_equal(c.comm, ZT_COMM_USE_STAGED);
    r.comm = "nccl";
    assert_int_equal(zt_device_choose(&r, &c), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "another rank on this host uses the same GPU"));
}

/* Every choice says why (zerotrain check prints it), auto or not. */
static void test_every_choice_says_why(void **state)
{
    (void)state;
    zt_device_choice c;
    zt_device_request r = req("auto", "auto", 0, 2);
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_non_null(strstr(c.why, "device cpu (--device auto: no GPU: no CUDA driver)"));
    assert_non_null(strstr(c.why, "comm mpi"));
    r = req("auto", "auto", 4, 4);
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_non_null(strstr(c.why, "device cuda:3 (local rank 3 of 4 GPU(s)); comm nccl: --comm "
                                  "auto, this build has NCCL and every rank has a GPU"));
    r = req("cuda", "auto", 1, 2);
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_non_null(strstr(c.why, "comm mpi staged through host memory: several ranks share"));
    r = req("cuda", "mpi", 2, 2);
    assert_int_equal(zt_device_choose(&r, &c), ZT_OK);
    assert_non_null(strstr(c.why, "staged through host memory: --comm mpi"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_without_gpu_notice_only_with_a_driver),
        cmocka_unit_test(test_every_choice_says_why),
        cmocka_unit_test(test_own_gpu_each_behind_visible_devices),
        cmocka_unit_test(test_same_gpu_by_id),
        cmocka_unit_test(test_explicit_cpu_is_silent),
        cmocka_unit_test(test_cuda_errors_name_what_is_missing),
        cmocka_unit_test(test_cuda_picks_device_and_comm),
    };
    return cmocka_run_group_tests_name("world", tests, NULL, NULL);
}
