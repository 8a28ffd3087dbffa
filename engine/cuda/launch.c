/*
 * launch: launch geometry, reduction plans, the 16-bit GEMM chunk planner and
 * the workspace plan of the CUDA backend, as pure host arithmetic (see
 * launch.h for each function's invariants). Built into libzt.a on every
 * machine, with or without CUDA, so the unit tests cover it everywhere.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#include "engine/cuda/launch.h"

/* a >= 0, b >= 1, a + b representable. */
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The most blocks a grid-stride kernel gets on a device with sm_count SMs. */
static int64_t blocks_cap(int sm_count)
{
    int64_t sms = sm_count < 1 ? 1 : sm_count;
    return min64(sms * ZT_LAUNCH_BLOCKS_PER_SM, ZT_LAUNCH_MAX_GRID_X);
}

/* A full block for long work; for short work the fewest whole warps that
 * cover it, so tiny launches do not park idle warps on an SM. */
static uint32_t block_for(int64_t items)
{
    if (items >= ZT_LAUNCH_BLOCK)
        return ZT_LAUNCH_BLOCK;
    return (uint32_t)(ceil_div(max64(items, 1), 32) * 32);
}

zt_launch_dims zt_launch_1d(int64_t n, int vec, int sm_count)
{
    int64_t items = n > 0 ? ceil_div(n, vec < 1 ? 1 : vec) : 0;
    uint32_t block = block_for(items);
    int64_t grid = min64(ceil_div(max64(items, 1), block), blocks_cap(sm_count));
    return (zt_launch_dims){
        .grid = (uint32_t)grid,
        .block = block,
        .iters = ceil_div(items, grid * block),
    };
}

zt_launch_grid2d zt_launch_rows(int64_t rows, int64_t cols, int sm_count)
{
    uint32_t block = block_for(cols);
    int64_t cap = blocks_cap(sm_count);
    int64_t gx = min64(ceil_div(max64(cols, 1), block), cap);
    /* cap / gx >= 1 because gx <= cap. */
    int64_t gy = min64(min64(max64(rows, 1), ZT_LAUNCH_MAX_GRID_Y), cap / gx);
    return (zt_launch_grid2d){.grid_x = (uint32_t)gx, .grid_y = (uint32_t)gy, .block = block};
}

int64_t zt_launch_sum_squares_chunks(int64_t n)
{
    return n > 0 ? ceil_div(n, ZT_SUMSQ_CHUNK) : 0;
}

zt_launch_dims zt_launch_sum_squares_pass(int64_t nc)
{
    int64_t threads = max64(nc, 1) * ZT_SUMSQ_LANES;
    return (zt_launch_dims){
        .grid = (uint32_t)ceil_div(threads, ZT_LAUNCH_BLOCK),
        .block = ZT_LAUNCH_BLOCK,
        .iters = 1,
    };
}

zt_launch_bias_plan zt_launch_bias_grad(int64_t rows, int64_t cols, int64_t capacity)
{
    int64_t segs = rows / ZT_BIAS_GRAD_SEG_ROWS;
    segs = min64(min64(segs, capacity / cols), ZT_LAUNCH_MAX_GRID_Y);
    segs = max64(segs, 1);
    /* Equal segments; recounting drops a segment the rounding left empty. */
    int64_t seg_rows = ceil_div(rows, segs);
    segs = ceil_div(rows, seg_rows);
    uint32_t block = block_for(cols);
    return (zt_launch_bias_plan){
        .segs = segs,
        .seg_rows = seg_rows,
        .block = block,
        .grid_x = (uint32_t)ceil_div(cols, block),
    };
}

/* a * b <= cap without forming the product; b >= 1. */
static bool fits(int64_t a, int64_t b, int64_t cap) { return a <= cap / b; }

/* `units` in balanced chunks of at most max_step. */
static zt_launch_gemm_plan balanced(int64_t units, int64_t max_step)
{
    int64_t chunks = ceil_div(units, max_step);
    int64_t step = ceil_div(units, chunks);
    return (zt_launch_gemm_plan){.cast = true, .step = step, .chunks = ceil_div(units, step)};
}

zt_launch_gemm_tiles zt_launch_gemm_tile(int64_t m, int64_t n, int64_t k, int64_t cap)
{
    if (cap < 1 || k > cap)
        return (zt_launch_gemm_tiles){.cast = false, .m_step = m, .m_chunks = 1, .n_step = n,
                                      .n_chunks = 1};
    /* k <= cap, so cap / k >= 1 rows of A (columns of B) fit a buffer. */
    zt_launch_gemm_plan rows = balanced(m, cap / k), cols = balanced(n, cap / k);
    return (zt_launch_gemm_tiles){.cast = true,
                                  .m_step = rows.step,
                                  .m_chunks = rows.chunks,
                                  .n_step = cols.step,
                                  .n_chunks = cols.chunks};
}

zt_launch_gemm_plan zt_launch_gemm_batches(int64_t m, int64_t n, int64_t k, int64_t batch,
                                           int64_t cap)
{
    if (cap < 1 || !fits(m, k, cap) || !fits(k, n, cap))
        return (zt_launch_gemm_plan){.cast = false, .step = batch, .chunks = 1};
    return balanced(batch, min64(cap / (m * k), cap / (k * n)));
}

/* A whole number in [1, ZT_LAUNCH_CAST_MAX_MB], digits only. */
static bool parse_mb(const char *s, int64_t *out)
{
    int64_t v = 0;
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (*s - '0');
        if (v > ZT_LAUNCH_CAST_MAX_MB)
            return false;
    }
    *out = v;
    return v >= 1;
}

zt_status zt_launch_workspace(const char *gemm_mb, bool cast16, zt_launch_ws *out)
{
    int64_t mb = ZT_LAUNCH_CAST_DEFAULT_MB;
    if (gemm_mb && !parse_mb(gemm_mb, &mb))
        return zt_fail(ZT_ERR_USAGE,
                       "set it to the MiB of the 16-bit GEMM operand buffers (default 128), "
                       "or unset it",
                       "ZT_CUDA_GEMM_WORKSPACE_MB='%.40s': expected a whole number of MiB "
                       "from 1 to %d",
                       gemm_mb, ZT_LAUNCH_CAST_MAX_MB);
    /* Half of mb MiB each: a multiple of 512 KiB, so of the alignment. */
    size_t cast = cast16 ? (size_t)mb << 19 : 0;
    *out = (zt_launch_ws){
        .blas_bytes = ZT_LAUNCH_BLAS_WORKSPACE,
        .cast_bytes = cast,
        .total_bytes = ZT_LAUNCH_BLAS_WORKSPACE + 2 * cast + ZT_LAUNCH_WS_ALIGN,
    };
    return ZT_OK;
}

static size_t align_down(size_t x) { return x / ZT_LAUNCH_WS_ALIGN * ZT_LAUNCH_WS_ALIGN; }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

zt_launch_ws_parts zt_launch_workspace_split(uintptr_t addr, size_t bytes,
                                             const zt_launch_ws *plan)
{
    size_t pad = (ZT_LAUNCH_WS_ALIGN - addr % ZT_LAUNCH_WS_ALIGN) % ZT_LAUNCH_WS_ALIGN;
    zt_launch_ws_parts p = {.blas_off = pad, .a_off = pad, .b_off = pad};
    if (bytes <= pad)
        return p;
    size_t avail = align_down(bytes - pad);
    p.blas_bytes = min_size(plan->blas_bytes, avail);
    p.cast_bytes = min_size(plan->cast_bytes, align_down((avail - p.blas_bytes) / 2));
    p.a_off = pad + p.blas_bytes;
    p.b_off = p.a_off + p.cast_bytes;
    return p;
}
