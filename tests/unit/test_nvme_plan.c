/* Unit tests for engine/nvme/plan: DeepSpeed's sub-group rule, the buffers a
 * plan sizes, max_in_cpu and the "More elements than buffer size" error, on
 * a hand-made layout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "engine/nvme/aio.h"
#include "engine/nvme/plan.h"

/* Five units with shards of 3000, 500, 500, 4000, 100 elements (the third
 * persistent), partition coordinates in order. */
static zt_unit_layout units[5];
static zt_layout lay;
static zt_config cfg;

static void make_layout(void)
{
    static const int64_t shard[5] = {3000, 500, 500, 4000, 100};
    int64_t at = 0;
    for (int u = 0; u < 5; u++) {
        units[u] = (zt_unit_layout){.shard_numel = shard[u], .part_offset = at,
                                    .persistent = u == 2};
        at += shard[u];
    }
    lay = (zt_layout){.world_size = 2, .n_units = 5, .units = units, .partition_numel = at};
    memset(&cfg, 0, sizeof cfg);
    cfg.optimizer.type = ZT_OPTIM_ADAMW;
    cfg.zero.offload_optimizer.buffer_count = 7;
    cfg.zero.offload_param = (zt_offload_config){.buffer_count = 5, .buffer_size = 4000,
                                                 .max_in_cpu = 3500};
}

static void test_sub_groups(void **state)
{
    (void)state;
    make_layout();
    cfg.zero.sub_group_size = 3500;
    zt_nvme_plan p;
    assert_int_equal(zt_nvme_plan_init(&p, &cfg, &lay, true, false, ZT_F32), ZT_OK);
    /* Units are appended until a sub-group reaches 3500: {0, 1} (3500),
     * {2, 3} (4500), {4} (100). */
    assert_int_equal(p.n_groups, 3);
    assert_int_equal(p.groups[0].u0, 0);
    assert_int_equal(p.groups[0].u1, 2);
    assert_int_equal(p.groups[1].u1, 4);
    assert_int_equal(p.groups[1].lo, 3500);
    assert_int_equal(p.groups[1].numel, 4500);
    assert_int_equal(p.groups[2].numel, 100);
    assert_int_equal(p.group_of[3], 1);
    assert_int_equal(p.opt_tensors, 3);
    assert_string_equal(p.opt_names[1], "exp_avg");
    /* Each tensor padded to 4096 bytes, at consecutive offsets. */
    assert_int_equal(p.groups[0].bytes, 16384);  /* 14000 B */
    assert_int_equal(p.groups[1].bytes, 20480);  /* 18000 B */
    assert_int_equal(p.groups[2].bytes, 4096);
    assert_int_equal(p.groups[1].file_offset, 16384);
    assert_int_equal(p.opt_file_bytes, 16384 + 20480 + 4096);
    assert_int_equal(p.group_bytes, 20480);
    /* 7 buffers hold 2 sub-groups of 3 tensors of the largest sub-group. */
    assert_int_equal(p.opt_slots, 2);
    assert_int_equal(p.opt_swap_bytes, 2 * 3 * 20480 + ZT_AIO_ALIGN);
    /* The gradients: a fourth file of the same layout, two sub-group buffers,
     * and the host staging of a reduced bucket cut to the largest sub-group. */
    assert_int_equal(p.grad_file_bytes, p.opt_file_bytes);
    assert_int_equal(p.grad_slots, 2);
    assert_int_equal(p.grad_swap_bytes, 2 * 20480 + ZT_AIO_ALIGN);
    assert_int_equal(p.stage_numel, 4500);
    assert_int_equal(zt_nvme_plan_swap_bytes(&p), p.opt_swap_bytes + p.grad_swap_bytes);
    assert_int_equal(p.disk_bytes, 4 * p.opt_file_bytes);
    zt_nvme_plan_free(&p);
    /* One huge sub-group; buffers beyond the sub-groups are not planned. */
    cfg.zero.sub_group_size = 1000000000;
    cfg.zero.offload_optimizer.buffer_count = 30;
    assert_int_equal(zt_nvme_plan_init(&p, &cfg, &lay, true, false, ZT_F32), ZT_OK);
    assert_int_equal(p.n_groups, 1);
    assert_int_equal(p.opt_slots, 1);
    zt_nvme_plan_free(&p);
}

static void test_params(void **state)
{
    (void)state;
    make_layout();
    zt_nvme_plan p;
    /* max_in_cpu 3500: unit 0 (3000) stays, 1 (500) stays (3500 in all),
     * 2 is persistent, 3 and 4 go to files. */
    assert_int_equal(zt_nvme_plan_init(&p, &cfg, &lay, false, true, ZT_BF16), ZT_OK);
    assert_false(p.param_swapped[0] || p.param_swapped[1] || p.param_swapped[2]);
    assert_true(p.param_swapped[3] && p.param_swapped[4]);
    assert_int_equal(p.n_param_swapped, 2);
    assert_int_equal(p.param_in_cpu_numel, 3500);
    assert_int_equal(p.param_swapped_numel, 4100);
    /* Buffers: as many as swapped units (2 of 5), each the largest shard. */
    assert_int_equal(p.param_buffers, 2);
    assert_int_equal(p.param_buffer_bytes, 8192); /* 4000 bf16 */
    assert_int_equal(p.param_file_bytes, 8192 + 4096);
    assert_int_equal(p.param_swap_bytes, 2 * 8192 + ZT_AIO_ALIGN);
    zt_nvme_plan_free(&p);
    /* A swapped shard over buffer_size is DeepSpeed's error. */
    cfg.zero.offload_param.buffer_size = 3999;
    assert_int_equal(zt_nvme_plan_init(&p, &cfg, &lay, false, true, ZT_BF16), ZT_ERR_CONFIG);
    assert_non_null(strstr(zt_status_message(), "More elements 4000 than buffer size 3999"));
    zt_nvme_plan_free(&p);
    /* Everything within max_in_cpu: nothing swapped, no buffers. */
    cfg.zero.offload_param.max_in_cpu = 1000000000;
    assert_int_equal(zt_nvme_plan_init(&p, &cfg, &lay, false, true, ZT_BF16), ZT_OK);
    assert_int_equal(p.n_param_swapped, 0);
    assert_int_equal(p.param_swap_bytes, 0);
    assert_int_equal(p.disk_bytes, 0);
    zt_nvme_plan_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sub_groups),
        cmocka_unit_test(test_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
