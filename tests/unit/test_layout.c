/* The flat layout (padding, shards), the MLP's parameter shapes and init, and
 * the synthetic data definition documented in data/synthetic.h. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "models/model.h"
#include "engine/rng.h"
#include "data/synthetic.h"
#include "engine/zero/allgather.h"
#include "engine/zero/gather.h"
#include "engine/zero/layout.h"
#include "engine/zero/reduce.h"

static void build_mlp(zt_model *m, int64_t w, int64_t l, int64_t in, int64_t out)
{
    zt_model_args a;
    zt_model_args_init(&a);
    a.width = w;
    a.layers = l;
    a.in_size = in;
    a.out_size = out;
    assert_int_equal(zt_model_build(&a, m), ZT_OK);
}

static void test_mlp_shape(void **state)
{
    (void)state;
    zt_model m;
    build_mlp(&m, 64, 4, 32, 10);
    assert_int_equal(m.n_units, 4);
    /* (32*64+64) + 2*(64*64+64) + (64*10+10) */
    assert_int_equal(m.n_params, 2112 + 2 * 4160 + 650);
    assert_int_equal(m.units[0].params[0].shape[0], 64);
    assert_int_equal(m.units[0].params[0].shape[1], 32);
    assert_int_equal(m.units[3].out_numel, 10);
    zt_model_free(&m);
    /* models.md: wide W=8192 L=3 is about 201M parameters, deep W=256 L=2048 about 135M */
    build_mlp(&m, 8192, 3, 0, 0);
    assert_int_equal(m.n_params, 3 * (8192LL * 8192 + 8192));
    zt_model_free(&m);
    build_mlp(&m, 256, 2048, 0, 0);
    assert_int_equal(m.n_params, 2048 * (256LL * 256 + 256));
    zt_model_free(&m);
}

static void test_layout_padding(void **state)
{
    (void)state;
    zt_model m;
    build_mlp(&m, 64, 4, 32, 10);
    zt_zero_config z = {.stage = 0};
    for (int ws = 1; ws <= 4; ws++) {
        zt_layout l;
        assert_int_equal(zt_layout_init(&l, &m, &z, ws, ws - 1), ZT_OK);
        int64_t off = 0, global = 0;
        for (int u = 0; u < l.n_units; u++) {
            const zt_unit_layout *ul = &l.units[u];
            assert_int_equal(ul->offset, off);
            assert_int_equal(ul->padded_numel % (ws * 16), 0);
            assert_true(ul->padded_numel >= ul->numel);
            assert_true(ul->padded_numel - ul->numel < ws * 16);
            assert_int_equal(ul->shard_numel * ws, ul->padded_numel);
            assert_int_equal(ul->global_index, global);
            assert_int_equal(ul->part_offset * ws, off);
            assert_false(ul->persistent);
            off += ul->padded_numel;
            global += ul->numel;
        }
        assert_int_equal(l.numel, m.n_params);
        assert_int_equal(l.padded_numel, off);
        assert_int_equal(l.partition_numel * ws, off);
        zt_layout_free(&l);
    }
    zt_model_free(&m);
}

/* Stage 3 keeps units of at most the threshold whole, until the model-wide
 * cap (unpadded elements) is reached; other stages keep nothing whole. */
static void test_layout_persistence(void **state)
{
    (void)state;
    zt_model m;
    build_mlp(&m, 64, 4, 32, 10); /* units 2112, 4160, 4160, 650 */
    zt_zero_config z = {.stage = 3,
                        .stage3_param_persistence_threshold = 2112,
                        .stage3_model_persistence_threshold = INT64_MAX};
    zt_layout l;
    assert_int_equal(zt_layout_init(&l, &m, &z, 4, 0), ZT_OK);
    assert_true(l.units[0].persistent && l.units[3].persistent);
    assert_false(l.units[1].persistent || l.units[2].persistent);
    assert_int_equal(l.persistent_numel, l.units[0].padded_numel + l.units[3].padded_numel);
    assert_int_equal(l.max_unit_numel, l.units[1].padded_numel);
    zt_layout_free(&l);
    z.stage3_model_persistence_threshold = 2112 + 649;
    assert_int_equal(zt_layout_init(&l, &m, &z, 4, 0), ZT_OK);
    assert_true(l.units[0].persistent);
    assert_false(l.units[3].persistent);
    zt_layout_free(&l);
    z.stage = 2;
    assert_int_equal(zt_layout_init(&l, &m, &z, 4, 0), ZT_OK);
    assert_int_equal(l.persistent_numel, 0);
    zt_layout_free(&l);
    zt_model_free(&m);
}

/* Stage 3 whose every unit is persistent partitions nothing: a warning with
 * the numbers and the key; none when one unit is sharded or below stage 3. */
static void test_layout_persistence_warning(void **state)
{
    (void)state;
    zt_model m;
    build_mlp(&m, 64, 4, 32, 10); /* units 2112, 4160, 4160, 650 */
    zt_zero_config z = {.stage = 3,
                        .stage3_param_persistence_threshold = 100000, /* DeepSpeed's default */
                        .stage3_model_persistence_threshold = INT64_MAX};
    zt_layout l;
    char w[512];
    assert_int_equal(zt_layout_init(&l, &m, &z, 2, 0), ZT_OK);
    zt_layout_persistence_warning(&l, &z, w, sizeof w);
    assert_non_null(strstr(w, "ZeRO stage 3 partitions nothing: all 4 units are persistent (the "
                              "largest has 4160 parameters, stage3_param_persistence_threshold is "
                              "100000)"));
    assert_non_null(strstr(w, "set zero_optimization.stage3_param_persistence_threshold below "
                              "4160"));
    zt_layout_free(&l);
    z.stage3_param_persistence_threshold = 4159;
    assert_int_equal(zt_layout_init(&l, &m, &z, 2, 0), ZT_OK);
    zt_layout_persistence_warning(&l, &z, w, sizeof w);
    assert_string_equal(w, "");
    zt_layout_free(&l);
    z.stage = 2;
    z.stage3_param_persistence_threshold = 100000;
    assert_int_equal(zt_layout_init(&l, &m, &z, 2, 0), ZT_OK);
    zt_layout_persistence_warning(&l, &z, w, sizeof w);
    assert_string_equal(w, "");
    zt_layout_free(&l);
    zt_model_free(&m);
}

/* The declared COMM buffers: bucket widths per rank, the gather window. */
static void test_zero_buffer_sizes(void **state)
{
    (void)state;
    zt_model m;
    build_mlp(&m, 64, 4, 32, 10);
    zt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.zero.stage = 3;
    cfg.zero.reduce_bucket_size = 1000;
    cfg.zero.allgather_bucket_size = 1000000000;
    cfg.zero.reduce_scatter = true;
    cfg.zero.overlap_comm = true;
    cfg.zero.stage3_max_live_parameters = 5000;
    cfg.zero.zero_hpz_partition_size = 2;
    zt_layout l;
    assert_int_equal(zt_layout_init(&l, &m, &cfg.zero, 4, 1), ZT_OK);
    int count;
    int64_t send, recv;
    zt_zero_rs_buffers(&cfg, &l, &count, &send, &recv);
    assert_int_equal(count, 2);
    assert_int_equal(send, 1000);
    assert_int_equal(recv, 250);
    /* an all-gather bucket never exceeds the model */
    assert_int_equal(zt_zero_allgather_buffer_numel(&cfg, &l), l.padded_numel);
    /* live limit plus one unit over it plus one unit of slack */
    assert_int_equal(zt_zero_gather_pool_numel(&cfg, &l), 5000 + 2 * l.max_unit_numel);
    assert_int_equal(zt_zero_secondary_numel(&cfg, &l), l.padded_numel / 2);
    cfg.zero.overlap_comm = false;
    cfg.zero.reduce_scatter = false;
    cfg.zero.stage3_max_live_parameters = 1000000000;
    zt_zero_rs_buffers(&cfg, &l, &count, &send, &recv);
    assert_int_equal(count, 1);
    assert_int_equal(recv, 0);
    assert_int_equal(zt_zero_gather_pool_numel(&cfg, &l), l.padded_numel + l.max_unit_numel);
    /* The largest limit the config takes (DeepSpeed's sys.maxsize) is "no
     * limit" too, not an overflow. */
    cfg.zero.stage3_max_live_parameters = INT64_MAX;
    assert_int_equal(zt_zero_gather_pool_numel(&cfg, &l), l.padded_numel + l.max_unit_numel);
    zt_layout_free(&l);
    zt_model_free(&m);
}

static void test_init_is_rank_free_and_bounded(void **state)
{
    (void)state;
    zt_model m;
    build_mlp(&m, 64, 4, 32, 10);
    const zt_unit *u = &m.units[1];
    int64_t n = u->param_numel;
    float *full = malloc((size_t)n * sizeof(float)), *part = malloc((size_t)n * sizeof(float));
    zt_unit_init_range(u, 3, 1000, 0, n, full);
    /* Any sub-range equals the same slice of the whole: shards can init alone. */
    zt_unit_init_range(u, 3, 1000, 100, 4150, part); /* crosses weight -> bias */
    assert_memory_equal(full + 100, part, (4150 - 100) * sizeof(float));
    float bound = 1.0f / sqrtf(64.0f);
    double mean = 0.0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(fabsf(full[i]) <= bound);
        mean += full[i];
    }
    assert_true(fabs(mean / (double)n) < 0.01);
    /* The documented formula, element 7 of the weight. */
    float r = zt_rng_uniform(3, ZT_RNG_STREAM_INIT, 1007);
    assert_true(full[7] == bound * (2.0f * r - 1.0f));
    free(full);
    free(part);
    zt_model_free(&m);
}

static void test_synthetic_definition(void **state)
{
    (void)state;
    zt_dataset ds;
    zt_synthetic_init(&ds, 65536, 16, 10, 42);
    float x[16];
    int32_t y = -1;
    zt_sample smp = {.x = x, .labels = &y};
    ds.get(&ds, 12345, &smp);
    double sq = 0.0;
    for (int j = 0; j < 16; j++) {
        float u = zt_rng_uniform(42, ZT_RNG_STREAM_DATA, 12345u * 16u + (uint64_t)j);
        assert_true(x[j] == -10.0f + 20.0f * u);
        assert_true(x[j] >= -10.0f && x[j] < 10.0f);
        sq += (double)x[j] * x[j];
    }
    assert_int_equal(y, (int32_t)((int64_t)floor(sq) % 10));
    /* splitmix64 finaliser known value: mix(0) */
    assert_true(zt_rng_mix(0) == 0xE220A8397B1DCDAFull);
    /* labels are spread over the classes */
    int counts[10] = {0};
    for (int64_t i = 0; i < 2000; i++) {
        ds.get(&ds, i, &smp);
        assert_true(y >= 0 && y < 10);
        counts[y]++;
    }
    for (int c = 0; c < 10; c++)
        assert_true(counts[c] > 100);
}

static void test_bad_model_args(void **state)
{
    (void)state;
    zt_model_args a;
    zt_model_args_init(&a);
    zt_model m;
    a.layers = 1;
    assert_int_equal(zt_model_build(&a, &m), ZT_ERR_USAGE);
    zt_model_args_init(&a);
    snprintf(a.name, sizeof a.name, "resnet");
    assert_int_equal(zt_model_build(&a, &m), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "resnet"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_shape),
        cmocka_unit_test(test_layout_padding),
        cmocka_unit_test(test_layout_persistence),
        cmocka_unit_test(test_layout_persistence_warning),
        cmocka_unit_test(test_zero_buffer_sizes),
        cmocka_unit_test(test_init_is_rank_free_and_bounded),
        cmocka_unit_test(test_synthetic_definition),
        cmocka_unit_test(test_bad_model_args),
    };
    return cmocka_run_group_tests_name("layout", tests, NULL, NULL);
}
