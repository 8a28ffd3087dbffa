/*
 * test_cuda_launch: the CUDA backend's host arithmetic (engine/cuda/launch.c),
 * which runs on any machine: every launch covers its elements with legal
 * block and grid sizes, the reduction plans keep their fixed geometry, the
 * 16-bit GEMM chunk planner covers the product within its buffers (or falls
 * back), and the workspace plan parses its override and splits a block into
 * aligned, disjoint parts. Edge cases: n = 0 and 1, and sizes near 2^40.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "engine/cuda/launch.h"

static const int64_t sizes[] = {0,
                                1,
                                2,
                                31,
                                32,
                                33,
                                255,
                                256,
                                257,
                                1000,
                                4095,
                                4096,
                                4097,
                                (int64_t)1 << 20,
                                ((int64_t)1 << 20) + 3,
                                1000000007,
                                (int64_t)1 << 40,
                                ((int64_t)1 << 40) + 7,
                                ((int64_t)1 << 62) - 1};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static const int sms[] = {-1, 0, 1, 7, 108, 132};
#define NSMS ((int)(sizeof sms / sizeof sms[0]))

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t cap_for(int sm) { return (int64_t)(sm < 1 ? 1 : sm) * ZT_LAUNCH_BLOCKS_PER_SM; }

static void assert_block(uint32_t block)
{
    assert_int_equal(block % 32, 0);
    assert_true(block >= 32 && block <= ZT_LAUNCH_BLOCK);
    assert_true(ZT_LAUNCH_BLOCK <= 1024);
}

static void test_1d_covers(void **state)
{
    (void)state;
    static const int vecs[] = {1, 2, 4, 8};
    for (int s = 0; s < NSIZES; s++)
        for (int v = 0; v < 4; v++)
            for (int q = 0; q < NSMS; q++) {
                int64_t n = sizes[s];
                int vec = vecs[v];
                zt_launch_dims d = zt_launch_1d(n, vec, sms[q]);
                assert_block(d.block);
                assert_true(d.grid >= 1);
                assert_true((int64_t)d.grid <= cap_for(sms[q]));
                int64_t items = ceil_div(n, vec);
                int64_t per_round = (int64_t)d.grid * d.block;
                /* Coverage without an idle round, in elements: items * vec >= n. */
                assert_true(d.iters * per_round >= items);
                if (n > 0) {
                    assert_true((d.iters - 1) * per_round < items);
                    assert_true(d.iters * per_round * vec >= n);
                    /* No block starts past the work. */
                    assert_true((int64_t)(d.grid - 1) * d.block < items);
                } else {
                    assert_int_equal(d.iters, 0);
                }
            }
}

static void test_1d_shapes(void **state)
{
    (void)state;
    zt_launch_dims d = zt_launch_1d(0, 1, 132);
    assert_int_equal(d.grid, 1);
    assert_int_equal(d.block, 32);
    d = zt_launch_1d(1, 4, 132);
    assert_int_equal(d.grid, 1);
    assert_int_equal(d.block, 32);
    assert_int_equal(d.iters, 1);
    d = zt_launch_1d(100, 1, 132);
    assert_int_equal(d.block, 128);
    /* Large work: full blocks, one wave on the device. */
    d = zt_launch_1d((int64_t)1 << 40, 4, 132);
    assert_int_equal(d.block, ZT_LAUNCH_BLOCK);
    assert_int_equal(d.grid, 132 * ZT_LAUNCH_BLOCKS_PER_SM);
    /* The grid does not depend on the SM count once the work is small. */
    assert_int_equal(zt_launch_1d(1000, 1, 1000).grid, 4);
}

static void test_rows(void **state)
{
    (void)state;
    for (int r = 0; r < NSIZES; r++)
        for (int c = 0; c < NSIZES; c++)
            for (int q = 0; q < NSMS; q++) {
                int64_t rows = sizes[r], cols = sizes[c];
                if (cols > ((int64_t)1 << 40))
                    continue;
                zt_launch_grid2d g = zt_launch_rows(rows, cols, sms[q]);
                assert_block(g.block);
                assert_true(g.grid_x >= 1 && g.grid_y >= 1);
                assert_true((int64_t)(g.grid_x - 1) * g.block < (cols > 0 ? cols : 1));
                assert_true(g.grid_y <= ZT_LAUNCH_MAX_GRID_Y);
                assert_true(rows < 1 || (int64_t)g.grid_y <= rows);
                assert_true((int64_t)g.grid_x * g.grid_y <= cap_for(sms[q]));
            }
    zt_launch_grid2d g = zt_launch_rows(1000000, 64, 132);
    assert_int_equal(g.block, 64);
    assert_int_equal(g.grid_x, 1);
    assert_int_equal(g.grid_y, 132 * ZT_LAUNCH_BLOCKS_PER_SM);
}

static void test_sum_squares_geometry(void **state)
{
    (void)state;
    assert_int_equal(zt_launch_sum_squares_chunks(0), 0);
    assert_int_equal(zt_launch_sum_squares_chunks(1), 1);
    assert_int_equal(zt_launch_sum_squares_chunks(ZT_SUMSQ_CHUNK), 1);
    assert_int_equal(zt_launch_sum_squares_chunks(ZT_SUMSQ_CHUNK + 1), 2);
    assert_int_equal(zt_launch_sum_squares_chunks((int64_t)1 << 40), (int64_t)1 << 28);
    /* A pass's chunk sums fit the scratch and the pinned slot. */
    assert_true((size_t)ZT_SUMSQ_PASS_CHUNKS * sizeof(double) <= ZT_CUDA_SCRATCH_BYTES);
    assert_true((size_t)ZT_SUMSQ_PASS_CHUNKS * sizeof(double) <= ZT_CUDA_HOST_RESULT_BYTES);
    /* Lane groups never straddle a warp or a block. */
    assert_int_equal(32 % ZT_SUMSQ_LANES, 0);
    assert_int_equal(ZT_SUMSQ_CHUNK % ZT_SUMSQ_LANES, 0);
    static const int64_t ncs[] = {1, 3, 4, 31, 32, 33, 1000, ZT_SUMSQ_PASS_CHUNKS};
    for (int i = 0; i < 8; i++) {
        zt_launch_dims d = zt_launch_sum_squares_pass(ncs[i]);
        assert_int_equal(d.block, ZT_LAUNCH_BLOCK);
        assert_int_equal(d.block % ZT_SUMSQ_LANES, 0);
        int64_t threads = (int64_t)d.grid * d.block;
        assert_true(threads >= ncs[i] * ZT_SUMSQ_LANES);
        assert_true(threads - d.block < ncs[i] * ZT_SUMSQ_LANES);
    }
}

static void check_bias_plan(int64_t rows, int64_t cols, int64_t capacity)
{
    zt_launch_bias_plan p = zt_launch_bias_grad(rows, cols, capacity);
    assert_true(p.segs >= 1 && p.segs <= ZT_LAUNCH_MAX_GRID_Y);
    assert_true(p.seg_rows >= 1);
    assert_true(p.segs * p.seg_rows >= rows);
    assert_true((p.segs - 1) * p.seg_rows < rows);
    assert_true(p.segs == 1 || p.segs * cols <= capacity);
    assert_true(p.segs == 1 || p.seg_rows >= ZT_BIAS_GRAD_SEG_ROWS);
    assert_block(p.block);
    assert_true((int64_t)p.grid_x * p.block >= cols);
    assert_true((int64_t)(p.grid_x - 1) * p.block < cols);
}

static void test_bias_grad_plan(void **state)
{
    (void)state;
    const int64_t capacity = (int64_t)(ZT_CUDA_SCRATCH_BYTES / sizeof(float));
    static const int64_t dims[] = {1,    2,     31,    63,     64,      65,      100,
                                   384,  768,   1000,  3072,   16384,   50257,   65536,
                                   1 << 20, 1 << 24, 1 << 28};
    int nd = (int)(sizeof dims / sizeof dims[0]);
    for (int r = 0; r < nd; r++)
        for (int c = 0; c < nd; c++) {
            check_bias_plan(dims[r], dims[c], capacity);
            check_bias_plan(dims[r], dims[c], 1);
        }
    /* Up to one segment's rows: the CPU order exactly. */
    assert_int_equal(zt_launch_bias_grad(ZT_BIAS_GRAD_SEG_ROWS, 384, capacity).segs, 1);
    zt_launch_bias_plan p = zt_launch_bias_grad(16384, 384, capacity);
    assert_int_equal(p.segs, 256);
    assert_int_equal(p.seg_rows, 64);
    assert_int_equal(p.block, 256);
    assert_int_equal(p.grid_x, 2);
    /* Wider than the scratch: one segment. */
    assert_int_equal(zt_launch_bias_grad(1 << 20, capacity + 1, capacity).segs, 1);
    /* Many rows: no more segments than grid.y allows. */
    assert_int_equal(zt_launch_bias_grad((int64_t)1 << 40, 1, capacity).segs,
                     ZT_LAUNCH_MAX_GRID_Y);
}

/* Tiles cover C exactly, each operand's tile fits a buffer, and only a row
 * of A longer than a buffer is refused: a 16-bit GEMM never becomes fp32. */
static void check_tiles_plan(int64_t m, int64_t n, int64_t k, int64_t cap)
{
    zt_launch_gemm_tiles p = zt_launch_gemm_tile(m, n, k, cap);
    if (!p.cast) {
        assert_true(k > cap);
        return;
    }
    assert_true(k <= cap);
    assert_true(p.m_step >= 1 && p.m_step <= m && p.m_step <= cap / k);
    assert_true(p.n_step >= 1 && p.n_step <= n && p.n_step <= cap / k);
    assert_true(p.m_chunks * p.m_step >= m && (p.m_chunks - 1) * p.m_step < m);
    assert_true(p.n_chunks * p.n_step >= n && (p.n_chunks - 1) * p.n_step < n);
    if (m <= cap / k)
        assert_int_equal(p.m_chunks, 1);
    if (n <= cap / k)
        assert_int_equal(p.n_chunks, 1);
}

static void check_batches_plan(int64_t m, int64_t n, int64_t k, int64_t batch, int64_t cap)
{
    zt_launch_gemm_plan p = zt_launch_gemm_batches(m, n, k, batch, cap);
    if (!p.cast) {
        assert_true(m > cap / k || k > cap / n);
        assert_int_equal(p.chunks, 1);
        assert_int_equal(p.step, batch);
        return;
    }
    assert_true(p.step >= 1 && p.step <= batch);
    assert_true(p.step <= cap / (m * k));
    assert_true(p.step <= cap / (k * n));
    assert_true(p.chunks * p.step >= batch);
    assert_true((p.chunks - 1) * p.step < batch);
}

static void test_gemm_plans(void **state)
{
    (void)state;
    static const int64_t dims[] = {1, 2, 3, 7, 64, 100, 768, 1000, 3072, 50257, (int64_t)1 << 40};
    static const int64_t caps[] = {1, 100, 4096, (int64_t)32 << 20, (int64_t)1 << 62};
    for (int a = 0; a < 11; a++)
        for (int b = 0; b < 11; b++)
            for (int c = 0; c < 11; c++)
                for (int q = 0; q < 5; q++) {
                    check_tiles_plan(dims[a], dims[b], dims[c], caps[q]);
                    check_batches_plan(dims[a], dims[b], dims[c], 96, caps[q]);
                    check_batches_plan(dims[a], dims[b], dims[c], 1, caps[q]);
                }
    /* Fits: one tile. */
    zt_launch_gemm_tiles t = zt_launch_gemm_tile(1024, 768, 768, (int64_t)32 << 20);
    assert_true(t.cast);
    assert_int_equal(t.m_chunks, 1);
    assert_int_equal(t.n_chunks, 1);
    assert_int_equal(t.m_step, 1024);
    /* A too big: rows of C in balanced chunks (1000 rows, at most 300 a chunk). */
    t = zt_launch_gemm_tile(1000, 10, 10, 3000);
    assert_true(t.cast);
    assert_int_equal(t.m_chunks, 4);
    assert_int_equal(t.m_step, 250);
    assert_int_equal(t.n_chunks, 1);
    /* B too big (the lm_head at vocab 50257 against a small buffer): columns
     * of C in balanced chunks, still 16-bit. */
    t = zt_launch_gemm_tile(10, 1000, 10, 9999);
    assert_true(t.cast);
    assert_int_equal(t.n_chunks, 2);
    assert_int_equal(t.n_step, 500);
    t = zt_launch_gemm_tile(16384, 50257, 768, (int64_t)64 << 20);
    assert_true(t.cast);
    assert_true(t.n_step * 768 <= (int64_t)64 << 20 && t.m_step * 768 <= (int64_t)64 << 20);
    /* Only a row of A longer than a buffer is refused. */
    assert_false(zt_launch_gemm_tile(4, 4, 101, 100).cast);
    /* Batched: whole entries per chunk; an entry too big goes alone in tiles. */
    zt_launch_gemm_plan p = zt_launch_gemm_batches(4, 4, 4, 10, 48);
    assert_true(p.cast);
    assert_int_equal(p.step, 3);
    assert_int_equal(p.chunks, 4);
    assert_false(zt_launch_gemm_batches(4, 4, 4, 10, 15).cast);
    assert_false(zt_launch_gemm_batches(4, 100, 4, 10, 200).cast);
}

static void test_workspace_plan(void **state)
{
    (void)state;
    zt_launch_ws ws;
    assert_int_equal(zt_launch_workspace(NULL, true, &ws), ZT_OK);
    assert_int_equal(ws.blas_bytes, (size_t)32 << 20);
    assert_int_equal(ws.cast_bytes, (size_t)64 << 20);
    assert_int_equal(ws.total_bytes, ((size_t)160 << 20) + ZT_LAUNCH_WS_ALIGN);
    assert_int_equal(zt_launch_workspace(NULL, false, &ws), ZT_OK);
    assert_int_equal(ws.cast_bytes, 0);
    assert_int_equal(ws.total_bytes, ((size_t)32 << 20) + ZT_LAUNCH_WS_ALIGN);
    assert_int_equal(zt_launch_workspace("256", true, &ws), ZT_OK);
    assert_int_equal(ws.cast_bytes, (size_t)128 << 20);
    assert_int_equal(zt_launch_workspace("1", true, &ws), ZT_OK);
    assert_int_equal(ws.cast_bytes, (size_t)512 << 10);
    assert_int_equal(ws.cast_bytes % ZT_LAUNCH_WS_ALIGN, 0);
    assert_int_equal(zt_launch_workspace("1048576", true, &ws), ZT_OK);
    assert_int_equal(ws.cast_bytes, (size_t)1 << 39);

    static const char *bad[] = {"",    "0",  "-1",  "+5",      "12x",     " 12",
                                "12 ", "1.5", "0x10", "1048577", "99999999999999999999999"};
    for (int i = 0; i < 11; i++) {
        zt_launch_ws untouched = {1, 2, 3};
        zt_status_clear();
        assert_int_equal(zt_launch_workspace(bad[i], true, &untouched), ZT_ERR_USAGE);
        assert_non_null(strstr(zt_status_message(), "ZT_CUDA_GEMM_WORKSPACE_MB"));
        assert_int_equal(untouched.total_bytes, 3);
        /* Checked even when no 16-bit GEMM would use it. */
        assert_int_equal(zt_launch_workspace(bad[i], false, &untouched), ZT_ERR_USAGE);
    }
}

static void check_parts(uintptr_t addr, size_t bytes, const zt_launch_ws *ws)
{
    zt_launch_ws_parts p = zt_launch_workspace_split(addr, bytes, ws);
    assert_true(p.blas_bytes <= ws->blas_bytes);
    assert_true(p.cast_bytes <= ws->cast_bytes);
    if (p.blas_bytes > 0) {
        assert_int_equal((addr + p.blas_off) % ZT_LAUNCH_WS_ALIGN, 0);
        assert_true(p.blas_off + p.blas_bytes <= bytes);
        assert_int_equal(p.blas_bytes % ZT_LAUNCH_WS_ALIGN, 0);
    }
    if (p.cast_bytes > 0) {
        assert_int_equal((addr + p.a_off) % ZT_LAUNCH_WS_ALIGN, 0);
        assert_int_equal((addr + p.b_off) % ZT_LAUNCH_WS_ALIGN, 0);
        assert_true(p.a_off >= p.blas_off + p.blas_bytes);
        assert_true(p.b_off >= p.a_off + p.cast_bytes);
        assert_true(p.b_off + p.cast_bytes <= bytes);
        /* cuBLAS's part first: the casts get space only once it is whole. */
        assert_int_equal(p.blas_bytes, ws->blas_bytes);
    }
    if (bytes >= ws->total_bytes) {
        assert_int_equal(p.blas_bytes, ws->blas_bytes);
        assert_int_equal(p.cast_bytes, ws->cast_bytes);
    }
}

static void test_workspace_split(void **state)
{
    (void)state;
    zt_launch_ws ws16, ws32;
    assert_int_equal(zt_launch_workspace("3", true, &ws16), ZT_OK);
    assert_int_equal(zt_launch_workspace(NULL, false, &ws32), ZT_OK);
    static const uintptr_t addrs[] = {0, 64, 128, 192, 256, 4096 + 64, ((uintptr_t)1 << 40) + 192};
    for (int a = 0; a < 7; a++) {
        const zt_launch_ws *plans[] = {&ws16, &ws32};
        for (int w = 0; w < 2; w++) {
            const zt_launch_ws *ws = plans[w];
            size_t sizes_[] = {0,   1,   63,  64,  255, 256, 1000, ws->blas_bytes,
                               ws->blas_bytes + 511, ws->blas_bytes + 1024, ws->total_bytes - 1,
                               ws->total_bytes, ws->total_bytes + 12345};
            for (int s = 0; s < 13; s++)
                check_parts(addrs[a], sizes_[s], ws);
        }
    }
    /* A 64-byte aligned block of the requested size: every part at full size. */
    zt_launch_ws_parts p = zt_launch_workspace_split(64, ws16.total_bytes, &ws16);
    assert_int_equal(p.blas_off, 192);
    assert_int_equal(p.a_off, 192 + ws16.blas_bytes);
    assert_int_equal(p.b_off, 192 + ws16.blas_bytes + ws16.cast_bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1d_covers),       cmocka_unit_test(test_1d_shapes),
        cmocka_unit_test(test_rows),            cmocka_unit_test(test_sum_squares_geometry),
        cmocka_unit_test(test_bias_grad_plan),  cmocka_unit_test(test_gemm_plans),
        cmocka_unit_test(test_workspace_plan),  cmocka_unit_test(test_workspace_split),
    };
    return cmocka_run_group_tests_name("cuda_launch", tests, NULL, NULL);
}
