/*
 * backend_cuda_flash: the CUDA backend's fused attention (attn_flash_forward
 * and attn_flash_backward, engine/backend.h): fp32 kernels, one thread per
 * query row (forward, dQ) or per key row (dK, dV), tiles of keys or queries
 * staged in shared memory and read by every thread of the block at once (a
 * broadcast), no (t, t) tensor and no atomics.
 *
 *   forward:  block = the query rows of one (sample, head); online softmax
 *             over key tiles (running max and sum, y rescaled once per tile,
 *             or per chunk of FR_CHUNK keys on the register path); lse
 *             written last.
 *   backward: D = rowsum(dy * y) into `work` (n, h, t); then dK and dV by
 *             blocks owning a run of keys, looping over query tiles in
 *             increasing order, and dQ by blocks owning a run of queries,
 *             looping over key tiles in increasing order. Each output element
 *             is written by one thread with a fixed order of additions, so
 *             results are deterministic.
 *
 * Two paths. Heads up to FR_MAX_HS (128) wide take the register path: a
 * thread's own rows (q and the y accumulator; dQ's q and accumulator; dK's and
 * dV's accumulators) live in registers, sized by the head width rounded up to
 * 32, 64 or 128 (a template parameter, so loops over it unroll; at 128 two
 * blocks share a row, each accumulating half its columns), and the rows a
 * thread reads of its own in the backward (dy; k and v) sit in shared memory
 * at a padded stride, so a warp's 32 rows fall in 32 banks. Tiles are zero
 * padded to that width. Wider heads take the wide path: a tile holds
 * min(FL_TILE, FL_SMEM / hs) rows, or is read from global memory when a row is
 * wider than FL_SMEM floats, and the thread's rows are read from global memory.
 * Dropout masks are drawn as the `dropout` op draws them on the (n, h, t, t)
 * tensor (engine/rng.h).
 *
 * Numerics: another order of additions than the CPU's (compared at fp32
 * tolerance by op-check), so the register path multiplies and adds with FMAs,
 * in four interleaved partial sums per dot product.
 *
 * Memory: ops allocate nothing; backward uses n * h * t floats of `work`.
 * Collective: none.
 */
#include "engine/cuda/cuda_nn.cuh"
#include "engine/rng.h"

#define FL_ROWS 64   /* threads per block: query (or key) rows it owns */
#define FL_TILE 32   /* rows per staged tile at most */
#define FL_SMEM 4096 /* floats per staged tile */

typedef struct {
    int64_t n, h, t, c, hs, ld; /* ld = 3c, the row stride of qkv and dqkv */
    float scale;
    bool causal;
    const int32_t *lengths;
    /* dropout: p == 0 draws nothing */
    float p, dscale;
    uint64_t seed, site;
    int64_t step, key_b, key_c;
    const uint64_t *row_keys;
    int tile;    /* rows per staged tile */
    bool staged; /* tiles fit FL_SMEM */
} fl_geom;

static __device__ int64_t fl_allowed(const fl_geom &g, int64_t s, int64_t i)
{
    int64_t a = g.causal ? i + 1 : g.t;
    return g.lengths ? min_i64(a, (int64_t)g.lengths[s]) : a;
}

static __device__ uint64_t fl_drop_key(const fl_geom &g, int64_t s)
{
    return zt_rng_mix(zt_rng_mix(zt_dropout_row_seed(g.seed, g.site, g.step, g.row_keys[s])));
}

/* The dropout factor of element (s, hh, i, j): 0 or dscale (1 without dropout). */
static __device__ float fl_kept(const fl_geom &g, uint64_t key, int64_t hh, int64_t i, int64_t j)
{
    if (g.p == 0.0f)
        return 1.0f;
    uint64_t ctr = (uint64_t)((hh * g.key_b + i) * g.key_c + j);
    float u = (float)(zt_rng_mix(key ^ ctr) >> 40) * (1.0f / 16777216.0f);
    return u >= g.p ? g.dscale : 0.0f;
}

static __device__ float fl_dot(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t d = 0; d < n; d++)
        acc = __fadd_rn(acc, __fmul_rn(a[d], b[d]));
    return acc;
}

/* Stages `rows` rows of width hs from src (row stride ld) into sh (row stride
 * hs) with the whole block; returns where the tile's rows are and their
 * stride. Callers __syncthreads before (the previous tile is done) and after. */
static __device__ const float *fl_stage(const fl_geom &g, float *sh, const float *src,
                                        int64_t ld, int64_t rows, int64_t *stride)
{
    if (!g.staged) {
        *stride = ld;
        return src;
    }
    for (int64_t e = threadIdx.x; e < rows * g.hs; e += blockDim.x)
        sh[e] = src[(e / g.hs) * ld + e % g.hs];
    *stride = g.hs;
    return sh;
}

/* ---- register path: heads up to FR_MAX_HS wide ---- */

#define FR_MAX_HS 128
#define FR_CHUNK 8 /* keys whose scores a forward thread holds at once */

/* HSM: the head width rounded up. ROWS threads per block, each owning a row;
 * TILE keys per forward tile; BTILE rows per backward tile; OWN the padded
 * stride of a thread's own row in shared memory (odd: conflict-free). The
 * sizes keep static shared memory under 48 KB. SPLIT: blocks (grid z) that
 * share a row, each accumulating HA = HSM / SPLIT of its columns, so that the
 * accumulators fit in registers (two 128-wide ones spill); each recomputes
 * the row's scores. */
template <int HSM> struct fr {
    static constexpr int ROWS = HSM <= 64 ? 64 : 32;
    static constexpr int TILE = HSM <= 64 ? 32 : 16;
    static constexpr int BTILE = HSM <= 64 ? 16 : 8;
    static constexpr int OWN = HSM + 1;
    static constexpr int SPLIT = HSM <= 64 ? 1 : 2;
    static constexpr int HA = HSM / SPLIT;
};

/* a . b over HSM floats, in four partial sums (independent FMA chains). */
template <int HSM> static __device__ float fr_dot(const float *a, const float *b)
{
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < HSM; d++)
        p[d & 3] = fmaf(a[d], b[d], p[d & 3]);
    return (p[0] + p[1]) + (p[2] + p[3]);
}

/* `cap` rows of HSM floats into sh (row stride `stride`) with the whole block:
 * the first `rows` from src (row stride ld, hs columns), zeros elsewhere.
 * Callers __syncthreads before (the previous tile is done) and after. */
template <int HSM>
static __device__ void fr_stage(float *sh, int stride, const float *src, int64_t ld, int64_t hs,
                                int64_t rows, int cap)
{
    for (int e = threadIdx.x; e < cap * HSM; e += blockDim.x) {
        int r = e / HSM, d = e % HSM;
        sh[r * stride + d] = r < rows && d < hs ? src[r * ld + d] : 0.0f;
    }
}

/* A tile: the first `rows` rows of a (row stride lda) and of b (ldb) into
 * sa and sb (TL rows of HSM each, zero padded), between barriers (the
 * previous tile is done before, this one visible after). */
template <int HSM, int TL>
static __device__ void fr_stage_tile(float *sa, const float *a, int64_t lda, float *sb,
                                     const float *b, int64_t ldb, int64_t hs, int64_t rows)
{
    __syncthreads();
    fr_stage<HSM>(sa, HSM, a, lda, hs, rows, TL);
    fr_stage<HSM>(sb, HSM, b, ldb, hs, rows, TL);
    __syncthreads();
}

/* A thread's row of hs floats into registers, zero padded to HSM. */
template <int HSM>
static __device__ __forceinline__ void fr_load_row(float (&r)[HSM], const float *src, int64_t hs)
{
#pragma unroll
    for (int d = 0; d < HSM; d++)
        r[d] = d < hs ? src[d] : 0.0f;
}

template <int HSM>
static __global__ void __launch_bounds__(fr<HSM>::ROWS)
    flash_forward_reg(fl_geom g, float *y, float *lse, const float *__restrict__ qkv)
{
    constexpr int R = fr<HSM>::ROWS, TL = fr<HSM>::TILE, HA = fr<HSM>::HA;
    __shared__ float sk[TL * HSM], sv[TL * HSM];
    const int d0 = (int)blockIdx.z * HA; // this block's columns of y
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * R, i = i0 + threadIdx.x;
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + R, g.t) - 1); // block-uniform
    const float *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const bool active = i < g.t;
    const int64_t a = active ? fl_allowed(g, s, i) : 0;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    const float *qi = q + (active ? i : 0) * g.ld;
    float qr[HSM], o[HA] = {}; // (hs) zero padded, and columns d0.. of y
    fr_load_row<HSM>(qr, qi, g.hs);
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < kmax; j0 += TL) {
        const int64_t rows = min_i64(TL, kmax - j0);
        fr_stage_tile<HSM, TL>(sk, k + j0 * g.ld, g.ld, sv, v + j0 * g.ld, g.ld, g.hs, rows);
        const int64_t nj = min_i64(rows, a - j0);
        if (nj <= 0)
            continue;
        /* Online softmax over chunks of FR_CHUNK keys: the chunk's scores in
         * registers, y rescaled once per chunk. */
#pragma unroll 1
        for (int64_t c0 = 0; c0 < nj; c0 += FR_CHUNK) {
            const int64_t nc = min_i64(FR_CHUNK, nj - c0);
            const float *kc = sk + c0 * HSM, *vc = sv + c0 * HSM;
            float sc[FR_CHUNK], mt = m;
#pragma unroll
            for (int jj = 0; jj < FR_CHUNK; jj++)
                if (jj < nc) {
                    sc[jj] = g.scale * fr_dot<HSM>(qr, kc + jj * HSM);
                    mt = fmaxf(mt, sc[jj]);
                }
            const float corr = expf(m - mt); // 0 on the first chunk (m = -inf)
            l *= corr;
#pragma unroll
            for (int jj = 0; jj < FR_CHUNK; jj++) {
                float e = 0.0f;
                if (jj < nc) {
                    e = expf(sc[jj] - mt);
                    l += e;
                    e *= fl_kept(g, key, hh, i, j0 + c0 + jj);
                }
                sc[jj] = e;
            }
            m = mt;
#pragma unroll
            for (int d = 0; d < HA; d++)
                o[d] *= corr;
#pragma unroll
            for (int jj = 0; jj < FR_CHUNK; jj++)
                if (jj < nc)
#pragma unroll
                    for (int d = 0; d < HA; d++)
                        o[d] = fmaf(sc[jj], vc[jj * HSM + d0 + d], o[d]);
        }
    }
    if (!active)
        return;
    float *yi = y + (s * g.t + i) * g.c + hh * g.hs; // (hs)
    const float inv = a > 0 ? 1.0f / l : 0.0f;       // a zero-length sample: y = 0, lse = 0
#pragma unroll
    for (int d = 0; d < HA; d++)
        if (d0 + d < g.hs)
            yi[d0 + d] = o[d] * inv;
    if (blockIdx.z == 0)
        lse[pair * g.t + i] = a > 0 ? m + logf(l) : 0.0f;
}

/* dQ of R queries, one thread per query, over key tiles in order. */
template <int HSM>
static __global__ void __launch_bounds__(fr<HSM>::ROWS)
    flash_dq_reg(fl_geom g, float *dqkv, const float *__restrict__ dy,
                 const float *__restrict__ lse, const float *__restrict__ dd,
                 const float *__restrict__ qkv)
{
    constexpr int R = fr<HSM>::ROWS, BT = fr<HSM>::BTILE, OWN = fr<HSM>::OWN, HA = fr<HSM>::HA;
    __shared__ float sk[BT * HSM], sv[BT * HSM], sdy[R * OWN];
    const int d0 = (int)blockIdx.z * HA; // this block's columns of dQ
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * R, i = i0 + threadIdx.x;
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + R, g.t) - 1); // block-uniform
    const float *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const float *dys = dy + s * g.t * g.c + hh * g.hs;
    const bool active = i < g.t;
    const int64_t ir = active ? i : 0, a = active ? fl_allowed(g, s, i) : 0;
    const float li = active ? lse[pair * g.t + i] : 0.0f, di = active ? dd[pair * g.t + i] : 0.0f;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    const float *qi = q + ir * g.ld, *dyi = sdy + threadIdx.x * OWN;
    float qr[HSM], dq[HA] = {}; // (hs) zero padded, and columns d0.. of dQ
    fr_load_row<HSM>(qr, qi, g.hs);
    /* Visible after the first tile's second barrier, the first use. */
    fr_stage<HSM>(sdy, OWN, dys + i0 * g.c, g.c, g.hs, min_i64(R, g.t - i0), R);
    for (int64_t j0 = 0; j0 < kmax; j0 += BT) {
        const int64_t rows = min_i64(BT, kmax - j0);
        fr_stage_tile<HSM, BT>(sk, k + j0 * g.ld, g.ld, sv, v + j0 * g.ld, g.ld, g.hs, rows);
        const int64_t nj = min_i64(rows, a - j0);
#pragma unroll 1
        for (int jj = 0; jj < nj; jj++) {
            const float *kj = sk + jj * HSM;
            float p = expf(g.scale * fr_dot<HSM>(qr, kj) - li);
            float dp = fr_dot<HSM>(dyi, sv + jj * HSM) * fl_kept(g, key, hh, i, j0 + jj);
            float ds = g.scale * p * (dp - di);
#pragma unroll
            for (int d = 0; d < HA; d++)
                dq[d] = fmaf(ds, kj[d0 + d], dq[d]);
        }
    }
    if (!active)
        return;
    float *dqi = dqkv + (s * g.t + i) * g.ld + hh * g.hs;
#pragma unroll
    for (int d = 0; d < HA; d++)
        if (d0 + d < g.hs)
            dqi[d0 + d] = dq[d];
}

/* dK and dV of R keys, one thread per key, over query tiles in order. */
template <int HSM>
static __global__ void __launch_bounds__(fr<HSM>::ROWS)
    flash_dkv_reg(fl_geom g, float *dqkv, const float *__restrict__ dy,
                  const float *__restrict__ lse, const float *__restrict__ dd,
                  const float *__restrict__ qkv)
{
    constexpr int R = fr<HSM>::ROWS, BT = fr<HSM>::BTILE, OWN = fr<HSM>::OWN, HA = fr<HSM>::HA;
    __shared__ float sq[BT * HSM], sdy[BT * HSM], sk[R * OWN], sv[R * OWN];
    const int d0 = (int)blockIdx.z * HA; // this block's columns of dK and dV
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t j0 = (int64_t)blockIdx.x * R, j = j0 + threadIdx.x;
    const float *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const float *dys = dy + s * g.t * g.c + hh * g.hs;
    const float *ls = lse + pair * g.t, *ds = dd + pair * g.t;
    const bool active = j < g.t;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    const float *kj = sk + threadIdx.x * OWN, *vj = sv + threadIdx.x * OWN;
    float dk[HA] = {}, dv[HA] = {}; // columns d0.. of dK and dV
    const int64_t len = g.lengths ? g.lengths[s] : g.t;
    /* Block-uniform: queries before the first key see none of it (causal),
     * and keys at or past the length are seen by no query. */
    const int64_t start = j0 >= len ? g.t : (g.causal ? j0 : 0);
    /* Visible after the first tile's second barrier, the first use. */
    fr_stage<HSM>(sk, OWN, k + j0 * g.ld, g.ld, g.hs, min_i64(R, g.t - j0), R);
    fr_stage<HSM>(sv, OWN, v + j0 * g.ld, g.ld, g.hs, min_i64(R, g.t - j0), R);
    for (int64_t i0 = start; i0 < g.t; i0 += BT) {
        const int64_t rows = min_i64(BT, g.t - i0);
        fr_stage_tile<HSM, BT>(sq, q + i0 * g.ld, g.ld, sdy, dys + i0 * g.c, g.c, g.hs, rows);
        if (!active)
            continue;
#pragma unroll 1
        for (int ii = 0; ii < rows; ii++) {
            const int64_t i = i0 + ii;
            if (j >= fl_allowed(g, s, i))
                continue;
            const float *qt = sq + ii * HSM, *dyt = sdy + ii * HSM;
            float p = expf(g.scale * fr_dot<HSM>(qt, kj) - ls[i]);
            float kept = fl_kept(g, key, hh, i, j);
            float dp = fr_dot<HSM>(dyt, vj) * kept;
            float pd = p * kept, dsc = g.scale * p * (dp - ds[i]);
#pragma unroll
            for (int d = 0; d < HA; d++) {
                dv[d] = fmaf(pd, dyt[d0 + d], dv[d]);
                dk[d] = fmaf(dsc, qt[d0 + d], dk[d]);
            }
        }
    }
    if (!active)
        return;
    float *dkj = dqkv + (s * g.t + j) * g.ld + g.c + hh * g.hs, *dvj = dkj + g.c;
#pragma unroll
    for (int d = 0; d < HA; d++)
        if (d0 + d < g.hs) {
            dkj[d0 + d] = dk[d];
            dvj[d0 + d] = dv[d];
        }
}

template <int HSM> static dim3 fr_grid(const fl_geom &g)
{
    return dim3((unsigned)((g.t + fr<HSM>::ROWS - 1) / fr<HSM>::ROWS), (unsigned)(g.n * g.h),
                (unsigned)fr<HSM>::SPLIT);
}

template <int HSM>
static void fr_forward(cudaStream_t st, const fl_geom &g, float *y, float *lse, const float *qkv)
{
    ZT_LAUNCH(fr_grid<HSM>(g), fr<HSM>::ROWS, 0, st, flash_forward_reg<HSM>)(g, y, lse, qkv);
}

template <int HSM>
static void fr_backward(cudaStream_t st, const fl_geom &g, float *dqkv, const float *dy,
                        const float *lse, const float *dd, const float *qkv)
{
    ZT_LAUNCH(fr_grid<HSM>(g), fr<HSM>::ROWS, 0, st, flash_dkv_reg<HSM>)(g, dqkv, dy, lse, dd,
                                                                          qkv);
    ZT_LAUNCH(fr_grid<HSM>(g), fr<HSM>::ROWS, 0, st, flash_dq_reg<HSM>)(g, dqkv, dy, lse, dd, qkv);
}

/* ---- wide path: heads wider than FR_MAX_HS ---- */

/* ---- forward ---- */

static __global__ void __launch_bounds__(FL_ROWS)
    flash_forward_kernel(fl_geom g, float *y, float *lse, const float *__restrict__ qkv)
{
    __shared__ float sk[FL_SMEM], sv[FL_SMEM];
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * FL_ROWS, i = i0 + threadIdx.x;
    const int64_t last = min_i64(i0 + FL_ROWS, g.t) - 1;
    const int64_t kmax = fl_allowed(g, s, last); // block-uniform
    const float *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const bool active = i < g.t;
    const int64_t a = active ? fl_allowed(g, s, i) : 0;
    float *yi = y + (s * g.t + (active ? i : 0)) * g.c + hh * g.hs; // (hs)
    const float *qi = q + (active ? i : 0) * g.ld;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    if (active)
        for (int64_t d = 0; d < g.hs; d++)
            yi[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < kmax; j0 += g.tile) {
        int64_t rows = min_i64(g.tile, kmax - j0), ks, vs;
        __syncthreads();
        const float *kt = fl_stage(g, sk, k + j0 * g.ld, g.ld, rows, &ks);
        const float *vt = fl_stage(g, sv, v + j0 * g.ld, g.ld, rows, &vs);
        __syncthreads();
        int64_t nj = min_i64(rows, a - j0);
        if (nj <= 0)
            continue;
        float sc[FL_TILE], mt = m;
        for (int64_t jj = 0; jj < nj; jj++) {
            sc[jj] = __fmul_rn(g.scale, fl_dot(qi, kt + jj * ks, g.hs));
            mt = fmaxf(mt, sc[jj]);
        }
        const float corr = expf(m - mt); // 0 on the first tile (m = -inf)
        l = __fmul_rn(l, corr);
        for (int64_t jj = 0; jj < nj; jj++) {
            float e = expf(sc[jj] - mt);
            l = __fadd_rn(l, e);
            sc[jj] = __fmul_rn(e, fl_kept(g, key, hh, i, j0 + jj));
        }
        m = mt;
        for (int64_t d = 0; d < g.hs; d++) {
            float acc = __fmul_rn(yi[d], corr);
            for (int64_t jj = 0; jj < nj; jj++)
                acc = __fadd_rn(acc, __fmul_rn(sc[jj], vt[jj * vs + d]));
            yi[d] = acc;
        }
    }
    if (!active)
        return;
    float *li = lse + pair * g.t + i;
    if (a <= 0) {
        *li = 0.0f;
        return;
    }
    const float inv = __fdiv_rn(1.0f, l);
    for (int64_t d = 0; d < g.hs; d++)
        yi[d] = __fmul_rn(yi[d], inv);
    *li = __fadd_rn(m, logf(l));
}

/* ---- backward ---- */

/* D(s, hh, i) = dy_i . y_i over head hh, into d (n, h, t). */
static __global__ void flash_rowdot_kernel(fl_geom g, float *dd, const float *__restrict__ dy,
                                           const float *__restrict__ y)
{
    const int64_t total = g.n * g.h * g.t;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < total;
         r += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = r / (g.h * g.t), hh = r / g.t % g.h, i = r % g.t;
        int64_t off = (s * g.t + i) * g.c + hh * g.hs;
        dd[r] = fl_dot(dy + off, y + off, g.hs);
    }
}

/* dK and dV of FL_ROWS keys, one thread per key, over query tiles in order. */
static __global__ void __launch_bounds__(FL_ROWS)
    flash_dkv_kernel(fl_geom g, float *dqkv, const float *__restrict__ dy,
                     const float *__restrict__ lse, const float *__restrict__ dd,
                     const float *__restrict__ qkv)
{
    __shared__ float sq[FL_SMEM], sdy[FL_SMEM];
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t j0 = (int64_t)blockIdx.x * FL_ROWS, j = j0 + threadIdx.x;
    const float *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const float *dys = dy + s * g.t * g.c + hh * g.hs;
    const float *ls = lse + pair * g.t, *ds = dd + pair * g.t;
    const bool active = j < g.t;
    const int64_t jr = active ? j : 0;
    float *dk = dqkv + (s * g.t + jr) * g.ld + g.c + hh * g.hs, *dv = dk + g.c;
    const float *kj = k + jr * g.ld, *vj = v + jr * g.ld;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    if (active)
        for (int64_t d = 0; d < g.hs; d++)
            dk[d] = dv[d] = 0.0f;
    const int64_t len = g.lengths ? g.lengths[s] : g.t;
    /* Block-uniform: queries before the first key see none of it (causal),
     * and keys at or past the length are seen by no query. */
    const int64_t start = j0 >= len ? g.t : (g.causal ? j0 : 0);
    for (int64_t i0 = start; i0 < g.t; i0 += g.tile) {
        int64_t rows = min_i64(g.tile, g.t - i0), qs, dys_s;
        __syncthreads();
        const float *qt = fl_stage(g, sq, q + i0 * g.ld, g.ld, rows, &qs);
        const float *dyt = fl_stage(g, sdy, dys + i0 * g.c, g.c, rows, &dys_s);
        __syncthreads();
        if (!active)
            continue;
        float pd[FL_TILE], dsc[FL_TILE];
        bool any = false;
        for (int64_t ii = 0; ii < rows; ii++) {
            int64_t i = i0 + ii;
            pd[ii] = dsc[ii] = 0.0f;
            if (j >= fl_allowed(g, s, i))
                continue;
            any = true;
            float p = expf(__fmul_rn(g.scale, fl_dot(qt + ii * qs, kj, g.hs)) - ls[i]);
            float kept = fl_kept(g, key, hh, i, j);
            float dp = __fmul_rn(fl_dot(dyt + ii * dys_s, vj, g.hs), kept);
            pd[ii] = __fmul_rn(p, kept);
            dsc[ii] = __fmul_rn(__fmul_rn(g.scale, p), dp - ds[i]);
        }
        if (!any)
            continue;
        for (int64_t d = 0; d < g.hs; d++) {
            float av = dv[d], ak = dk[d];
            for (int64_t ii = 0; ii < rows; ii++) {
                av = __fadd_rn(av, __fmul_rn(pd[ii], dyt[ii * dys_s + d]));
                ak = __fadd_rn(ak, __fmul_rn(dsc[ii], qt[ii * qs + d]));
            }
            dv[d] = av;
            dk[d] = ak;
        }
    }
}

/* dQ of FL_ROWS queries, one thread per query, over key tiles in order. */
static __global__ void __launch_bounds__(FL_ROWS)
    flash_dq_kernel(fl_geom g, float *dqkv, const float *__restrict__ dy,
                    const float *__restrict__ lse, const float *__restrict__ dd,
                    const float *__restrict__ qkv)
{
    __shared__ float sk[FL_SMEM], sv[FL_SMEM];
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * FL_ROWS, i = i0 + threadIdx.x;
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + FL_ROWS, g.t) - 1); // block-uniform
    const float *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const bool active = i < g.t;
    const int64_t ir = active ? i : 0, a = active ? fl_allowed(g, s, i) : 0;
    const float *qi = q + ir * g.ld, *dyi = dy + (s * g.t + ir) * g.c + hh * g.hs;
    float *dq = dqkv + (s * g.t + ir) * g.ld + hh * g.hs;
    const float li = active ? lse[pair * g.t + i] : 0.0f, di = active ? dd[pair * g.t + i] : 0.0f;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    if (active)
        for (int64_t d = 0; d < g.hs; d++)
            dq[d] = 0.0f;
    for (int64_t j0 = 0; j0 < kmax; j0 += g.tile) {
        int64_t rows = min_i64(g.tile, kmax - j0), ks, vs;
        __syncthreads();
        const float *kt = fl_stage(g, sk, k + j0 * g.ld, g.ld, rows, &ks);
        const float *vt = fl_stage(g, sv, v + j0 * g.ld, g.ld, rows, &vs);
        __syncthreads();
        int64_t nj = min_i64(rows, a - j0);
        if (nj <= 0)
            continue;
        float dsc[FL_TILE];
        for (int64_t jj = 0; jj < nj; jj++) {
            int64_t j = j0 + jj;
            float p = expf(__fmul_rn(g.scale, fl_dot(qi, kt + jj * ks, g.hs)) - li);
            float dp = __fmul_rn(fl_dot(dyi, vt + jj * vs, g.hs), fl_kept(g, key, hh, i, j));
            dsc[jj] = __fmul_rn(__fmul_rn(g.scale, p), dp - di);
        }
        for (int64_t d = 0; d < g.hs; d++) {
            float acc = dq[d];
            for (int64_t jj = 0; jj < nj; jj++)
                acc = __fadd_rn(acc, __fmul_rn(dsc[jj], kt[jj * ks + d]));
            dq[d] = acc;
        }
    }
}

/* ---- host ---- */

static fl_geom fl_geom_of(int64_t n, int64_t h, int64_t t, int64_t c, float scale, bool causal,
                          const int32_t *lengths, const zt_dropout_desc *drop)
{
    fl_geom g;
    g.n = n, g.h = h, g.t = t, g.c = c, g.hs = c / h, g.ld = 3 * c;
    g.scale = scale, g.causal = causal, g.lengths = lengths;
    g.p = drop->p, g.dscale = drop->p > 0.0f ? 1.0f / (1.0f - drop->p) : 1.0f;
    g.seed = drop->seed, g.site = drop->site, g.step = drop->step;
    g.key_b = drop->key_b, g.key_c = drop->key_c, g.row_keys = drop->row_keys;
    g.staged = g.hs <= FL_SMEM;
    g.tile = g.staged ? (int)min_i64(FL_TILE, FL_SMEM / g.hs) : FL_TILE;
    return g;
}

static dim3 fl_grid(const fl_geom &g)
{
    return dim3((unsigned)((g.t + FL_ROWS - 1) / FL_ROWS), (unsigned)(g.n * g.h));
}

static void cuda_attn_flash_forward(const zt_backend *be, zt_dtype dt, void *y_, float *lse,
                                    float *work, const void *qkv_, int64_t n, int64_t h,
                                    int64_t t, int64_t c, float scale, bool causal,
                                    const int32_t *lengths, const zt_dropout_desc *drop)
{
    (void)work;
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0 || !zt_cuda_fp32_only(impl, dt, "attn_flash_forward"))
        return;
    float *y = static_cast<float *>(y_);
    const float *qkv = static_cast<const float *>(qkv_);
    fl_geom g = fl_geom_of(n, h, t, c, scale, causal, lengths, drop);
    cudaStream_t st = impl->stream;
    if (g.hs <= 32)
        fr_forward<32>(st, g, y, lse, qkv);
    else if (g.hs <= 64)
        fr_forward<64>(st, g, y, lse, qkv);
    else if (g.hs <= FR_MAX_HS)
        fr_forward<FR_MAX_HS>(st, g, y, lse, qkv);
    else
        ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_forward_kernel)(g, y, lse, qkv);
    nn_record(be, "attn_flash_forward");
}

static void cuda_attn_flash_backward(const zt_backend *be, zt_dtype dt, void *dqkv_,
                                     const void *dy_, const void *y_, const float *lse,
                                     const void *qkv_, float *work, int64_t n, int64_t h,
                                     int64_t t, int64_t c, float scale, bool causal,
                                     const int32_t *lengths, const zt_dropout_desc *drop)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0 || !zt_cuda_fp32_only(impl, dt, "attn_flash_backward"))
        return;
    float *dqkv = static_cast<float *>(dqkv_);
    const float *dy = static_cast<const float *>(dy_), *y = static_cast<const float *>(y_);
    const float *qkv = static_cast<const float *>(qkv_);
    fl_geom g = fl_geom_of(n, h, t, c, scale, causal, lengths, drop);
    ZT_LAUNCH(nn_grid(impl, n * h * t, ZT_NN_THREADS), ZT_NN_THREADS, 0, impl->stream,
              flash_rowdot_kernel)(g, work, dy, y);
    cudaStream_t st = impl->stream;
    if (g.hs <= 32) {
        fr_backward<32>(st, g, dqkv, dy, lse, work, qkv);
    } else if (g.hs <= 64) {
        fr_backward<64>(st, g, dqkv, dy, lse, work, qkv);
    } else if (g.hs <= FR_MAX_HS) {
        fr_backward<FR_MAX_HS>(st, g, dqkv, dy, lse, work, qkv);
    } else {
        ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_dkv_kernel)(g, dqkv, dy, lse, work, qkv);
        ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_dq_kernel)(g, dqkv, dy, lse, work, qkv);
    }
    nn_record(be, "attn_flash_backward");
}

void zt_backend_cuda_flash_ops(zt_backend *be)
{
    be->attn_flash_forward = cuda_attn_flash_forward;
    be->attn_flash_backward = cuda_attn_flash_backward;
}
