/*
 * launch: the host-side arithmetic of the CUDA backend (engine/cuda/backend_cuda*.cu),
 * in plain C so that it is compiled and unit-tested on every machine, GPU or
 * not: grid sizes for grid-stride kernels, the fixed geometry of the
 * deterministic reductions, the chunk planner of the 16-bit GEMM path, and
 * the workspace plan (its size, the ZT_CUDA_GEMM_WORKSPACE_MB override, and
 * how a workspace block is split).
 *
 * Every function is pure: its answer depends on its arguments only. In
 * particular the reduction geometry (sum of squares, bias gradient) never
 * depends on the device, so a result is the same on every GPU model.
 *
 * Memory: nothing is allocated. Collective: none.
 */
#ifndef ZT_LAUNCH_H
#define ZT_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* status.h has no linkage guard of its own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "engine/env.h"
#include "engine/status.h"

/* Threads per block of the element-wise kernels: a multiple of the warp that
 * lets eight blocks fill an SM of sm_80/sm_90 (2048 threads). */
#define ZT_LAUNCH_BLOCK 256
/* Grid-stride kernels get at most this many blocks per SM: one full wave,
 * beyond which extra blocks only add scheduling. */
#define ZT_LAUNCH_BLOCKS_PER_SM 8
/* CUDA's limits on gridDim.x and gridDim.y. */
#define ZT_LAUNCH_MAX_GRID_X 2147483647
#define ZT_LAUNCH_MAX_GRID_Y 65535

/* Sum of squares: engine/dtype.c's geometry, so the device sum is bit for
 * bit the host one. Each ZT_SUMSQ_CHUNK elements are summed in ZT_SUMSQ_LANES
 * interleaved float64 accumulators joined in a fixed tree; the chunk sums are
 * added in index order. A pass handles up to ZT_SUMSQ_PASS_CHUNKS chunks,
 * whose sums land in the scratch and then in the pinned host slot. */
#define ZT_SUMSQ_CHUNK 4096
#define ZT_SUMSQ_LANES 8
#define ZT_SUMSQ_PASS_CHUNKS 32768

/* Bias gradient: rows are cut into segments of at least this many rows,
 * each summed down its columns in row order. */
#define ZT_BIAS_GRAD_SEG_ROWS 64

/* The backend's fixed buffers, made once at init: device scratch for
 * per-block partial results, and the pinned host slot results come back
 * through. Both hold one pass of sum-of-squares chunk sums. */
#define ZT_CUDA_SCRATCH_BYTES ((size_t)1 << 20)
#define ZT_CUDA_HOST_RESULT_BYTES ((size_t)ZT_SUMSQ_PASS_CHUNKS * sizeof(double))

/* Workspace: the cuBLAS workspace (32 MiB, NVIDIA's recommendation for
 * Hopper), then two equal buffers the 16-bit GEMM path casts A and B into,
 * ZT_LAUNCH_CAST_DEFAULT_MB together unless ZT_CUDA_GEMM_WORKSPACE_MB says
 * otherwise. cuBLAS wants 256-byte aligned workspace and operands. */
#define ZT_LAUNCH_BLAS_WORKSPACE ((size_t)32 << 20)
#define ZT_LAUNCH_CAST_DEFAULT_MB 128
#define ZT_LAUNCH_CAST_MAX_MB ZT_ENV_GEMM_WORKSPACE_MB_MAX /* engine/env.h checks it at start-up */
#define ZT_LAUNCH_WS_ALIGN 256

/* A 1-D launch. Invariants: 1 <= grid <= ZT_LAUNCH_MAX_GRID_X; block is a
 * multiple of 32 in [32, ZT_LAUNCH_BLOCK]; iters = ceil(items / (grid *
 * block)) with items = ceil(n / vec), so grid * block * iters * vec >= n and
 * (iters - 1) * grid * block * vec < n (no idle round). */
typedef struct {
    uint32_t grid;
    uint32_t block;
    int64_t iters;
} zt_launch_dims;

/* Grid-stride launch over n elements (n >= 0, n < 2^62), each thread
 * taking vec (1, 2, 4 or 8) at a time; at most ZT_LAUNCH_BLOCKS_PER_SM blocks
 * per SM (sm_count < 1 counts as 1). */
zt_launch_dims zt_launch_1d(int64_t n, int vec, int sm_count);

/* A launch over the rows of a matrix: threads run along a row (coalesced),
 * blocks over columns (grid_x) and over rows (grid_y), both grid-stride.
 * Invariants: block a multiple of 32 in [32, ZT_LAUNCH_BLOCK]; 1 <= grid_x
 * <= ceil(cols / block); 1 <= grid_y <= ZT_LAUNCH_MAX_GRID_Y and grid_y <=
 * rows (when rows >= 1); grid_x * grid_y <= ZT_LAUNCH_BLOCKS_PER_SM *
 * sm_count (sm_count < 1 counts as 1). */
typedef struct {
    uint32_t grid_x;
    uint32_t grid_y;
    uint32_t block;
} zt_launch_grid2d;

zt_launch_grid2d zt_launch_rows(int64_t rows, int64_t cols, int sm_count);

/* Chunks of a sum of squares over n elements: ceil(n / ZT_SUMSQ_CHUNK). */
int64_t zt_launch_sum_squares_chunks(int64_t n);
/* One pass over nc chunks (1 <= nc <= ZT_SUMSQ_PASS_CHUNKS): one thread per
 * (chunk, lane), no grid-stride; grid * block >= nc * ZT_SUMSQ_LANES and
 * block is ZT_LAUNCH_BLOCK (a multiple of ZT_SUMSQ_LANES). */
zt_launch_dims zt_launch_sum_squares_pass(int64_t nc);

/* Bias gradient of dy (rows, cols): the rows are cut into `segs` segments of
 * `seg_rows` rows (the last one shorter, never empty); one thread per
 * (segment, column) sums its segment in row order, the first segment
 * starting from the initial dbias; when segs > 1 a second pass adds the
 * segment sums in segment order. segs == 1 is the CPU backend's order
 * exactly. Invariants: 1 <= segs <= ZT_LAUNCH_MAX_GRID_Y; segs * seg_rows >=
 * rows; (segs - 1) * seg_rows < rows; segs == 1 or segs * cols <= capacity
 * (partial sums the scratch holds); block a multiple of 32 in [32,
 * ZT_LAUNCH_BLOCK]; grid_x * block >= cols. Depends on rows, cols and
 * capacity only. rows, cols >= 1. */
typedef struct {
    int64_t segs;
    int64_t seg_rows;
    uint32_t block;
    uint32_t grid_x;
} zt_launch_bias_plan;

zt_launch_bias_plan zt_launch_bias_grad(int64_t rows, int64_t cols, int64_t capacity);

/* How the 16-bit GEMM path runs a product within cast buffers of `cap`
 * elements each (A's cast in one, B's in the other, both compact): `chunks`
 * chunks of `step` units (the last may be shorter, never empty), sizes
 * balanced. A product never falls back to fp32: what does not fit a buffer
 * runs in smaller pieces, and a GEMM whose one row of A does not fit fails. */
typedef struct {
    bool cast;
    int64_t step;
    int64_t chunks;
} zt_launch_gemm_plan;

/* C (m, n) = op(A) (m, k) op(B) (k, n) in tiles of C: m_step rows by n_step
 * columns, with A's tile (m_step x k) and B's (k x n_step) each at most cap
 * elements; steps balanced over the chunks. cast false only when one row of A
 * (k elements) alone exceeds cap. m, n, k >= 1. */
typedef struct {
    bool cast;
    int64_t m_step, m_chunks;
    int64_t n_step, n_chunks;
} zt_launch_gemm_tiles;

zt_launch_gemm_tiles zt_launch_gemm_tile(int64_t m, int64_t n, int64_t k, int64_t cap);
/* batch such products: chunks of whole batch entries; cast false when one
 * entry's A or B does not fit (the entries then go one by one in tiles).
 * m, n, k, batch >= 1. */
zt_launch_gemm_plan zt_launch_gemm_batches(int64_t m, int64_t n, int64_t k, int64_t batch,
                                           int64_t cap);

/* What the backend asks for as its workspace. blas_bytes and cast_bytes are
 * multiples of ZT_LAUNCH_WS_ALIGN; total_bytes = blas_bytes + 2 * cast_bytes
 * + ZT_LAUNCH_WS_ALIGN (slack to align a 64-byte aligned block). */
typedef struct {
    size_t blas_bytes;
    size_t cast_bytes; /* each of the two cast buffers; 0 without a 16-bit GEMM */
    size_t total_bytes;
} zt_launch_ws;

/* The plan for a backend whose GEMMs cast to 16 bits (cast16) or not.
 * gemm_mb is ZT_CUDA_GEMM_WORKSPACE_MB (NULL when unset): the MiB of both
 * cast buffers together, a whole number in [1, ZT_LAUNCH_CAST_MAX_MB];
 * anything else is ZT_ERR_USAGE, whether or not the buffers are used. */
zt_status zt_launch_workspace(const char *gemm_mb, bool cast16, zt_launch_ws *out);

/* Offsets into a workspace block at address addr of `bytes` bytes: each part
 * starts ZT_LAUNCH_WS_ALIGN aligned, parts do not overlap and lie inside the
 * block, and no part exceeds the plan. A block of total_bytes or more gets
 * every part at its planned size; a smaller one gets what fits, cuBLAS's
 * part first (a part that does not fit at all has 0 bytes). */
typedef struct {
    size_t blas_off, blas_bytes;
    size_t a_off, b_off, cast_bytes;
} zt_launch_ws_parts;

zt_launch_ws_parts zt_launch_workspace_split(uintptr_t addr, size_t bytes,
                                             const zt_launch_ws *plan);

#ifdef __cplusplus
}
#endif

#endif
