/*
 * backend_cuda_flash: the CUDA backend's fused attention (attn_flash_forward
 * and attn_flash_backward, engine/backend.h): kernels templated on the dtype
 * T of qkv, y, dy and dqkv (read widened, written rounded once; fp32 math,
 * fp32 lse and work), one thread per query row (forward, dQ) or per key row
 * (dK, dV), tiles of keys or queries staged in shared memory as fp32 and read
 * by every thread of the block at once (a broadcast), no (t, t) tensor and no
 * atomics.
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
 * thread's own rows (q and the y accumulator, though at 128 the forward's q
 * sits in shared memory; dQ's q and accumulator; dK's and dV's accumulators)
 * live in registers, sized by the head width rounded up to 32, 64 or 128 (a
 * template parameter, so loops over it unroll; at 128 two blocks share a
 * row, each accumulating half its columns), and the rows a
 * thread reads of its own in the backward (dy; k and v) sit in shared memory
 * at a padded stride, so a warp's 32 rows fall in 32 banks. Tiles are zero
 * padded to that width. Wider heads take the wide path: a tile holds
 * min(FL_TILE, FL_SMEM / hs) rows, or is read from global memory when a row is
 * wider than FL_SMEM floats (STAGED false), and the thread's rows are read
 * from global memory; its accumulators are FL_COLS columns of a row in the
 * thread's local memory, grid z taking further columns (each block
 * recomputing the row's scores), so outputs are written once, rounded.
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
#include "engine/cuda/cuda_flash.cuh"

#include <type_traits>

#define FL_ROWS 64   /* threads per block: query (or key) rows it owns */
#define FL_TILE 32   /* rows per staged tile at most */
#define FL_SMEM 4096 /* floats per staged tile */
#define FL_COLS 128  /* output columns a wide-path block accumulates */

/* a . b over n elements of a tensor of A and one of B. */
template <zt_dtype A, zt_dtype B>
static __device__ float fl_dot(const raw_t<A> *a, const raw_t<B> *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t d = 0; d < n; d++)
        acc = __fadd_rn(acc, __fmul_rn(elem<A>::widen(a[d]), elem<B>::widen(b[d])));
    return acc;
}

/* The type of a wide-path tile's elements: fp32 staged, else T in place. */
template <zt_dtype T, bool STAGED> constexpr zt_dtype fl_tile_t = STAGED ? ZT_F32 : T;

/* Stages `rows` rows of width hs from src (a tensor of T, row stride ld) into
 * sh (row stride hs) with the whole block, or leaves them where they are
 * (STAGED false); returns where the tile's rows are and their stride. Callers
 * __syncthreads before (the previous tile is done) and after. */
template <zt_dtype T, bool STAGED>
static __device__ const raw_t<fl_tile_t<T, STAGED>> *
fl_stage(const fl_geom &g, float *sh, const raw_t<T> *src, int64_t ld, int64_t rows,
         int64_t *stride)
{
    if constexpr (!STAGED) {
        (void)g, (void)sh, (void)rows;
        *stride = ld;
        return src;
    } else {
        for (int64_t e = threadIdx.x; e < rows * g.hs; e += blockDim.x)
            sh[e] = elem<T>::widen(src[(e / g.hs) * ld + e % g.hs]);
        *stride = g.hs;
        return sh;
    }
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
 * the row's scores. OWNSH: at 128 the forward's q row sits in shared memory
 * (padded as dy's), and the rows a thread reads of its own there are read
 * through volatile pointers, so that the compiler cannot hoist them out of
 * the loops into registers: with them, 128-wide rows need more than the 255
 * registers a thread has, and spilled up to 768 bytes (docs/gpu-audit.md's
 * spill rule). engine/monitor/profile.c counts the FLOPs these shapes
 * execute (the width HSM, SPLIT windows that each recompute the scores):
 * keep it in step. */
template <int HSM> struct fr {
    static constexpr int ROWS = HSM <= 64 ? 64 : 32;
    static constexpr int TILE = HSM <= 64 ? 32 : 16;
    static constexpr int BTILE = HSM <= 64 ? 16 : 8;
    static constexpr int OWN = HSM + 1;
    static constexpr int SPLIT = HSM <= 64 ? 1 : 2;
    static constexpr int HA = HSM / SPLIT;
    static constexpr bool OWNSH = HSM > 64;
};

/* A thread's own row in shared memory: volatile when fr<HSM>::OWNSH. */
template <int HSM>
using fr_own_t = std::conditional_t<fr<HSM>::OWNSH, const volatile float *, const float *>;

/* a . b over HSM floats, in four partial sums (independent FMA chains). */
template <int HSM, class P> static __device__ float fr_dot(P a, const float *b)
{
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < HSM; d++)
        p[d & 3] = fmaf(a[d], b[d], p[d & 3]);
    return (p[0] + p[1]) + (p[2] + p[3]);
}

/* `cap` rows of HSM floats into sh (row stride `stride`) with the whole block:
 * the first `rows` from src (a tensor of T, row stride ld, hs columns),
 * widened, zeros elsewhere. Callers __syncthreads before (the previous tile
 * is done) and after. */
template <int HSM, zt_dtype T>
static __device__ void fr_stage(float *sh, int stride, const raw_t<T> *src, int64_t ld, int64_t hs,
                                int64_t rows, int cap)
{
    for (int e = threadIdx.x; e < cap * HSM; e += blockDim.x) {
        int r = e / HSM, d = e % HSM;
        sh[r * stride + d] = r < rows && d < hs ? elem<T>::widen(src[r * ld + d]) : 0.0f;
    }
}

/* A tile: the first `rows` rows of a (row stride lda) and of b (ldb) into
 * sa and sb (TL rows of HSM each, zero padded), between barriers (the
 * previous tile is done before, this one visible after). */
template <int HSM, int TL, zt_dtype T>
static __device__ void fr_stage_tile(float *sa, const raw_t<T> *a, int64_t lda, float *sb,
                                     const raw_t<T> *b, int64_t ldb, int64_t hs, int64_t rows)
{
    __syncthreads();
    fr_stage<HSM, T>(sa, HSM, a, lda, hs, rows, TL);
    fr_stage<HSM, T>(sb, HSM, b, ldb, hs, rows, TL);
    __syncthreads();
}

/* A thread's row of hs elements of T into registers, zero padded to HSM. */
template <int HSM, zt_dtype T>
static __device__ __forceinline__ void fr_load_row(float (&r)[HSM], const raw_t<T> *src, int64_t hs)
{
#pragma unroll
    for (int d = 0; d < HSM; d++)
        r[d] = d < hs ? elem<T>::widen(src[d]) : 0.0f;
}

template <int HSM, zt_dtype T>
static __global__ void __launch_bounds__(fr<HSM>::ROWS)
    flash_forward_reg(fl_geom g, raw_t<T> *y, float *lse, const raw_t<T> *__restrict__ qkv)
{
    constexpr int R = fr<HSM>::ROWS, TL = fr<HSM>::TILE, HA = fr<HSM>::HA;
    constexpr int OWN = fr<HSM>::OWN;
    constexpr bool OWNSH = fr<HSM>::OWNSH;
    __shared__ float sk[TL * HSM], sv[TL * HSM], sq[OWNSH ? R * OWN : 1];
    const int d0 = (int)blockIdx.z * HA; // this block's columns of y
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * R, i = i0 + threadIdx.x;
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + R, g.t) - 1); // block-uniform
    const raw_t<T> *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const bool active = i < g.t;
    const int64_t a = active ? fl_allowed(g, s, i) : 0;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    const raw_t<T> *qi = q + (active ? i : 0) * g.ld;
    float qr[OWNSH ? 1 : HSM], o[HA] = {}; // (hs) zero padded, and columns d0.. of y
    if constexpr (OWNSH) {
        /* Visible after the first tile's second barrier, the first use. */
        (void)qi;
        fr_stage<HSM, T>(sq, OWN, q + i0 * g.ld, g.ld, g.hs, min_i64(R, g.t - i0), R);
    } else {
        fr_load_row<HSM, T>(qr, qi, g.hs);
    }
    const fr_own_t<HSM> qrow = OWNSH ? sq + threadIdx.x * OWN : qr;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < kmax; j0 += TL) {
        const int64_t rows = min_i64(TL, kmax - j0);
        fr_stage_tile<HSM, TL, T>(sk, k + j0 * g.ld, g.ld, sv, v + j0 * g.ld, g.ld, g.hs, rows);
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
                    sc[jj] = g.scale * fr_dot<HSM>(qrow, kc + jj * HSM);
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
    raw_t<T> *yi = y + (s * g.t + i) * g.c + hh * g.hs; // (hs)
    const float inv = a > 0 ? 1.0f / l : 0.0f;          // a zero-length sample: y = 0, lse = 0
#pragma unroll
    for (int d = 0; d < HA; d++)
        if (d0 + d < g.hs)
            yi[d0 + d] = elem<T>::narrow(o[d] * inv);
    if (blockIdx.z == 0)
        lse[pair * g.t + i] = a > 0 ? m + logf(l) : 0.0f;
}

/* dQ of R queries, one thread per query, over key tiles in order. */
template <int HSM, zt_dtype T>
static __global__ void __launch_bounds__(fr<HSM>::ROWS)
    flash_dq_reg(fl_geom g, raw_t<T> *dqkv, const raw_t<T> *__restrict__ dy,
                 const float *__restrict__ lse, const float *__restrict__ dd,
                 const raw_t<T> *__restrict__ qkv)
{
    constexpr int R = fr<HSM>::ROWS, BT = fr<HSM>::BTILE, OWN = fr<HSM>::OWN, HA = fr<HSM>::HA;
    __shared__ float sk[BT * HSM], sv[BT * HSM], sdy[R * OWN];
    const int d0 = (int)blockIdx.z * HA; // this block's columns of dQ
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * R, i = i0 + threadIdx.x;
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + R, g.t) - 1); // block-uniform
    const raw_t<T> *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const raw_t<T> *dys = dy + s * g.t * g.c + hh * g.hs;
    const bool active = i < g.t;
    const int64_t ir = active ? i : 0, a = active ? fl_allowed(g, s, i) : 0;
    const float li = active ? lse[pair * g.t + i] : 0.0f, di = active ? dd[pair * g.t + i] : 0.0f;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    const raw_t<T> *qi = q + ir * g.ld;
    const fr_own_t<HSM> dyi = sdy + threadIdx.x * OWN;
    float qr[HSM], dq[HA] = {}; // (hs) zero padded, and columns d0.. of dQ
    fr_load_row<HSM, T>(qr, qi, g.hs);
    /* Visible after the first tile's second barrier, the first use. */
    fr_stage<HSM, T>(sdy, OWN, dys + i0 * g.c, g.c, g.hs, min_i64(R, g.t - i0), R);
    for (int64_t j0 = 0; j0 < kmax; j0 += BT) {
        const int64_t rows = min_i64(BT, kmax - j0);
        fr_stage_tile<HSM, BT, T>(sk, k + j0 * g.ld, g.ld, sv, v + j0 * g.ld, g.ld, g.hs, rows);
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
    raw_t<T> *dqi = dqkv + (s * g.t + i) * g.ld + hh * g.hs;
#pragma unroll
    for (int d = 0; d < HA; d++)
        if (d0 + d < g.hs)
            dqi[d0 + d] = elem<T>::narrow(dq[d]);
}

/* dK and dV of R keys, one thread per key, over query tiles in order. */
template <int HSM, zt_dtype T>
static __global__ void __launch_bounds__(fr<HSM>::ROWS)
    flash_dkv_reg(fl_geom g, raw_t<T> *dqkv, const raw_t<T> *__restrict__ dy,
                  const float *__restrict__ lse, const float *__restrict__ dd,
                  const raw_t<T> *__restrict__ qkv)
{
    constexpr int R = fr<HSM>::ROWS, BT = fr<HSM>::BTILE, OWN = fr<HSM>::OWN, HA = fr<HSM>::HA;
    __shared__ float sq[BT * HSM], sdy[BT * HSM], sk[R * OWN], sv[R * OWN];
    const int d0 = (int)blockIdx.z * HA; // this block's columns of dK and dV
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t j0 = (int64_t)blockIdx.x * R, j = j0 + threadIdx.x;
    const raw_t<T> *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const raw_t<T> *dys = dy + s * g.t * g.c + hh * g.hs;
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
    fr_stage<HSM, T>(sk, OWN, k + j0 * g.ld, g.ld, g.hs, min_i64(R, g.t - j0), R);
    fr_stage<HSM, T>(sv, OWN, v + j0 * g.ld, g.ld, g.hs, min_i64(R, g.t - j0), R);
    for (int64_t i0 = start; i0 < g.t; i0 += BT) {
        const int64_t rows = min_i64(BT, g.t - i0);
        fr_stage_tile<HSM, BT, T>(sq, q + i0 * g.ld, g.ld, sdy, dys + i0 * g.c, g.c, g.hs, rows);
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
    raw_t<T> *dkj = dqkv + (s * g.t + j) * g.ld + g.c + hh * g.hs, *dvj = dkj + g.c;
#pragma unroll
    for (int d = 0; d < HA; d++)
        if (d0 + d < g.hs) {
            dkj[d0 + d] = elem<T>::narrow(dk[d]);
            dvj[d0 + d] = elem<T>::narrow(dv[d]);
        }
}

template <int HSM> static dim3 fr_grid(const fl_geom &g)
{
    return dim3((unsigned)((g.t + fr<HSM>::ROWS - 1) / fr<HSM>::ROWS), (unsigned)(g.n * g.h),
                (unsigned)fr<HSM>::SPLIT);
}

template <int HSM, zt_dtype T>
static void fr_forward(cudaStream_t st, const fl_geom &g, raw_t<T> *y, float *lse,
                       const raw_t<T> *qkv)
{
    ZT_LAUNCH(fr_grid<HSM>(g), fr<HSM>::ROWS, 0, st, flash_forward_reg<HSM, T>)(g, y, lse, qkv);
}

template <int HSM, zt_dtype T>
static void fr_backward(cudaStream_t st, const fl_geom &g, raw_t<T> *dqkv, const raw_t<T> *dy,
                        const float *lse, const float *dd, const raw_t<T> *qkv)
{
    ZT_LAUNCH(fr_grid<HSM>(g), fr<HSM>::ROWS, 0, st, flash_dkv_reg<HSM, T>)
    (g, dqkv, dy, lse, dd, qkv);
    ZT_LAUNCH(fr_grid<HSM>(g), fr<HSM>::ROWS, 0, st, flash_dq_reg<HSM, T>)
    (g, dqkv, dy, lse, dd, qkv);
}

/* ---- wide path: heads wider than FR_MAX_HS ---- */

/* Output columns [d0, d0 + nd) of grid z's window. */
static __device__ __forceinline__ int64_t fl_window(const fl_geom &g, int64_t *nd)
{
    const int64_t d0 = (int64_t)blockIdx.z * FL_COLS;
    *nd = min_i64(FL_COLS, g.hs - d0);
    return d0;
}

/* ---- forward ---- */

template <zt_dtype T, bool STAGED>
static __global__ void __launch_bounds__(FL_ROWS)
    flash_forward_kernel(fl_geom g, raw_t<T> *y, float *lse, const raw_t<T> *__restrict__ qkv)
{
    constexpr zt_dtype S = fl_tile_t<T, STAGED>;
    __shared__ float sk[STAGED ? FL_SMEM : 1], sv[STAGED ? FL_SMEM : 1];
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * FL_ROWS, i = i0 + threadIdx.x;
    const int64_t last = min_i64(i0 + FL_ROWS, g.t) - 1;
    const int64_t kmax = fl_allowed(g, s, last); // block-uniform
    const raw_t<T> *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const bool active = i < g.t;
    const int64_t a = active ? fl_allowed(g, s, i) : 0;
    const raw_t<T> *qi = q + (active ? i : 0) * g.ld;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    int64_t nd;
    const int64_t d0 = fl_window(g, &nd);
    float o[FL_COLS]; // columns d0.. of y
    for (int64_t d = 0; d < nd; d++)
        o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < kmax; j0 += g.tile) {
        int64_t rows = min_i64(g.tile, kmax - j0), ks, vs;
        __syncthreads();
        const raw_t<S> *kt = fl_stage<T, STAGED>(g, sk, k + j0 * g.ld, g.ld, rows, &ks);
        const raw_t<S> *vt = fl_stage<T, STAGED>(g, sv, v + j0 * g.ld, g.ld, rows, &vs);
        __syncthreads();
        int64_t nj = min_i64(rows, a - j0);
        if (nj <= 0)
            continue;
        float sc[FL_TILE], mt = m;
        for (int64_t jj = 0; jj < nj; jj++) {
            sc[jj] = __fmul_rn(g.scale, fl_dot<T, S>(qi, kt + jj * ks, g.hs));
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
        for (int64_t d = 0; d < nd; d++) {
            float acc = __fmul_rn(o[d], corr);
            for (int64_t jj = 0; jj < nj; jj++)
                acc = __fadd_rn(acc, __fmul_rn(sc[jj], elem<S>::widen(vt[jj * vs + d0 + d])));
            o[d] = acc;
        }
    }
    if (!active)
        return;
    raw_t<T> *yi = y + (s * g.t + i) * g.c + hh * g.hs + d0; // (nd)
    /* A row with no allowed key: y = 0, lse = 0. */
    const float inv = a > 0 ? __fdiv_rn(1.0f, l) : 0.0f;
    for (int64_t d = 0; d < nd; d++)
        yi[d] = elem<T>::narrow(a > 0 ? __fmul_rn(o[d], inv) : 0.0f);
    if (blockIdx.z == 0)
        lse[pair * g.t + i] = a > 0 ? __fadd_rn(m, logf(l)) : 0.0f;
}

/* ---- backward ---- */

/* D(s, hh, i) = dy_i . y_i over head hh, into d (n, h, t). */
template <zt_dtype T>
static __global__ void flash_rowdot_kernel(fl_geom g, float *dd, const raw_t<T> *__restrict__ dy,
                                           const raw_t<T> *__restrict__ y)
{
    const int64_t total = g.n * g.h * g.t;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < total;
         r += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = r / (g.h * g.t), hh = r / g.t % g.h, i = r % g.t;
        int64_t off = (s * g.t + i) * g.c + hh * g.hs;
        dd[r] = fl_dot<T, T>(dy + off, y + off, g.hs);
    }
}

/* dK and dV of FL_ROWS keys, one thread per key, over query tiles in order. */
template <zt_dtype T, bool STAGED>
static __global__ void __launch_bounds__(FL_ROWS)
    flash_dkv_kernel(fl_geom g, raw_t<T> *dqkv, const raw_t<T> *__restrict__ dy,
                     const float *__restrict__ lse, const float *__restrict__ dd,
                     const raw_t<T> *__restrict__ qkv)
{
    constexpr zt_dtype S = fl_tile_t<T, STAGED>;
    __shared__ float sq[STAGED ? FL_SMEM : 1], sdy[STAGED ? FL_SMEM : 1];
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t j0 = (int64_t)blockIdx.x * FL_ROWS, j = j0 + threadIdx.x;
    const raw_t<T> *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const raw_t<T> *dys = dy + s * g.t * g.c + hh * g.hs;
    const float *ls = lse + pair * g.t, *ds = dd + pair * g.t;
    const bool active = j < g.t;
    const int64_t jr = active ? j : 0;
    const raw_t<T> *kj = k + jr * g.ld, *vj = v + jr * g.ld;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    int64_t nd;
    const int64_t d0 = fl_window(g, &nd);
    float dk[FL_COLS], dv[FL_COLS]; // columns d0.. of dK and dV
    for (int64_t d = 0; d < nd; d++)
        dk[d] = dv[d] = 0.0f;
    const int64_t len = g.lengths ? g.lengths[s] : g.t;
    /* Block-uniform: queries before the first key see none of it (causal),
     * and keys at or past the length are seen by no query. */
    const int64_t start = j0 >= len ? g.t : (g.causal ? j0 : 0);
    for (int64_t i0 = start; i0 < g.t; i0 += g.tile) {
        int64_t rows = min_i64(g.tile, g.t - i0), qs, dys_s;
        __syncthreads();
        const raw_t<S> *qt = fl_stage<T, STAGED>(g, sq, q + i0 * g.ld, g.ld, rows, &qs);
        const raw_t<S> *dyt = fl_stage<T, STAGED>(g, sdy, dys + i0 * g.c, g.c, rows, &dys_s);
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
            float p = expf(__fmul_rn(g.scale, fl_dot<S, T>(qt + ii * qs, kj, g.hs)) - ls[i]);
            float kept = fl_kept(g, key, hh, i, j);
            float dp = __fmul_rn(fl_dot<S, T>(dyt + ii * dys_s, vj, g.hs), kept);
            pd[ii] = __fmul_rn(p, kept);
            dsc[ii] = __fmul_rn(__fmul_rn(g.scale, p), dp - ds[i]);
        }
        if (!any)
            continue;
        for (int64_t d = 0; d < nd; d++) {
            float av = dv[d], ak = dk[d];
            for (int64_t ii = 0; ii < rows; ii++) {
                av = __fadd_rn(av, __fmul_rn(pd[ii], elem<S>::widen(dyt[ii * dys_s + d0 + d])));
                ak = __fadd_rn(ak, __fmul_rn(dsc[ii], elem<S>::widen(qt[ii * qs + d0 + d])));
            }
            dv[d] = av;
            dk[d] = ak;
        }
    }
    if (!active)
        return;
    raw_t<T> *dkj = dqkv + (s * g.t + j) * g.ld + g.c + hh * g.hs + d0, *dvj = dkj + g.c;
    for (int64_t d = 0; d < nd; d++) {
        dkj[d] = elem<T>::narrow(dk[d]);
        dvj[d] = elem<T>::narrow(dv[d]);
    }
}

/* dQ of FL_ROWS queries, one thread per query, over key tiles in order. */
template <zt_dtype T, bool STAGED>
static __global__ void __launch_bounds__(FL_ROWS)
    flash_dq_kernel(fl_geom g, raw_t<T> *dqkv, const raw_t<T> *__restrict__ dy,
                    const float *__restrict__ lse, const float *__restrict__ dd,
                    const raw_t<T> *__restrict__ qkv)
{
    constexpr zt_dtype S = fl_tile_t<T, STAGED>;
    __shared__ float sk[STAGED ? FL_SMEM : 1], sv[STAGED ? FL_SMEM : 1];
    const int64_t pair = blockIdx.y, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)blockIdx.x * FL_ROWS, i = i0 + threadIdx.x;
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + FL_ROWS, g.t) - 1); // block-uniform
    const raw_t<T> *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const bool active = i < g.t;
    const int64_t ir = active ? i : 0, a = active ? fl_allowed(g, s, i) : 0;
    const raw_t<T> *qi = q + ir * g.ld, *dyi = dy + (s * g.t + ir) * g.c + hh * g.hs;
    const float li = active ? lse[pair * g.t + i] : 0.0f, di = active ? dd[pair * g.t + i] : 0.0f;
    const uint64_t key = g.p > 0.0f ? fl_drop_key(g, s) : 0;
    int64_t nd;
    const int64_t d0 = fl_window(g, &nd);
    float dq[FL_COLS]; // columns d0.. of dQ
    for (int64_t d = 0; d < nd; d++)
        dq[d] = 0.0f;
    for (int64_t j0 = 0; j0 < kmax; j0 += g.tile) {
        int64_t rows = min_i64(g.tile, kmax - j0), ks, vs;
        __syncthreads();
        const raw_t<S> *kt = fl_stage<T, STAGED>(g, sk, k + j0 * g.ld, g.ld, rows, &ks);
        const raw_t<S> *vt = fl_stage<T, STAGED>(g, sv, v + j0 * g.ld, g.ld, rows, &vs);
        __syncthreads();
        int64_t nj = min_i64(rows, a - j0);
        if (nj <= 0)
            continue;
        float dsc[FL_TILE];
        for (int64_t jj = 0; jj < nj; jj++) {
            int64_t j = j0 + jj;
            float p = expf(__fmul_rn(g.scale, fl_dot<T, S>(qi, kt + jj * ks, g.hs)) - li);
            float dp = __fmul_rn(fl_dot<T, S>(dyi, vt + jj * vs, g.hs), fl_kept(g, key, hh, i, j));
            dsc[jj] = __fmul_rn(__fmul_rn(g.scale, p), dp - di);
        }
        for (int64_t d = 0; d < nd; d++) {
            float acc = dq[d];
            for (int64_t jj = 0; jj < nj; jj++)
                acc = __fadd_rn(acc, __fmul_rn(dsc[jj], elem<S>::widen(kt[jj * ks + d0 + d])));
            dq[d] = acc;
        }
    }
    if (!active)
        return;
    raw_t<T> *dqi = dqkv + (s * g.t + i) * g.ld + hh * g.hs + d0;
    for (int64_t d = 0; d < nd; d++)
        dqi[d] = elem<T>::narrow(dq[d]);
}

/* ---- host ---- */

static fl_geom fl_geom_of(int64_t n, int64_t h, int64_t t, int64_t c, float scale, bool causal,
                          const int32_t *lengths, const zt_dropout_desc *drop)
{
    fl_geom g;
    g.n = n, g.h = h, g.t = t, g.c = c, g.hs = c / h, g.ld = 3 * c;
    g.scale = scale, g.causal = causal, g.lengths = lengths;
    g.p = drop->p, g.dscale = drop->p > 0.0f ? 1.0f / (1.0f - drop->p) : 1.0f;
    /* p < 1 (the models refuse more), so keep_min < 2^24; a p of 1 would
     * keep the draws of 2^-32 instead of none. */
    const uint32_t keep_min = (uint32_t)ceilf(drop->p * 16777216.0f);
    g.keep_hi = keep_min < (1u << 24) ? keep_min << 8 : UINT32_MAX;
    g.seed = drop->seed, g.site = drop->site, g.step = drop->step;
    g.key_b = drop->key_b, g.key_c = drop->key_c, g.row_keys = drop->row_keys;
    g.staged = g.hs <= FL_SMEM;
    g.tile = g.staged ? (int)min_i64(FL_TILE, FL_SMEM / g.hs) : FL_TILE;
    return g;
}

/* The wide path's grid: row blocks, (sample, head) pairs, column windows. */
static dim3 fl_grid(const fl_geom &g)
{
    return dim3((unsigned)((g.t + FL_ROWS - 1) / FL_ROWS), (unsigned)(g.n * g.h),
                (unsigned)((g.hs + FL_COLS - 1) / FL_COLS));
}

template <zt_dtype T, bool STAGED>
static void fl_backward(cudaStream_t st, const fl_geom &g, raw_t<T> *dqkv, const raw_t<T> *dy,
                        const float *lse, const float *dd, const raw_t<T> *qkv)
{
    ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_dkv_kernel<T, STAGED>)(g, dqkv, dy, lse, dd, qkv);
    ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_dq_kernel<T, STAGED>)(g, dqkv, dy, lse, dd, qkv);
}

static void cuda_attn_flash_forward(const zt_backend *be, zt_dtype dt, void *y, float *lse,
                                    float *work, const void *qkv, int64_t n, int64_t h,
                                    int64_t t, int64_t c, float scale, bool causal,
                                    const int32_t *lengths, const zt_dropout_desc *drop)
{
    (void)work;
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0)
        return;
    fl_geom g = fl_geom_of(n, h, t, c, scale, causal, lengths, drop);
    cudaStream_t st = impl->stream;
    if (flash_mma_fits(dt, g, qkv, y)) {
        flash_mma_forward(st, dt, g, y, lse, qkv);
        nn_record(be, "attn_flash_forward");
        return;
    }
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        raw_t<T> *yt = static_cast<raw_t<T> *>(y);
        const raw_t<T> *qt = static_cast<const raw_t<T> *>(qkv);
        if (g.hs <= 32)
            fr_forward<32, T>(st, g, yt, lse, qt);
        else if (g.hs <= 64)
            fr_forward<64, T>(st, g, yt, lse, qt);
        else if (g.hs <= FR_MAX_HS)
            fr_forward<FR_MAX_HS, T>(st, g, yt, lse, qt);
        else if (g.staged)
            ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_forward_kernel<T, true>)(g, yt, lse, qt);
        else
            ZT_LAUNCH(fl_grid(g), FL_ROWS, 0, st, flash_forward_kernel<T, false>)(g, yt, lse, qt);
    });
    nn_record(be, "attn_flash_forward");
}

static void cuda_attn_flash_backward(const zt_backend *be, zt_dtype dt, void *dqkv,
                                     const void *dy, const void *y, const float *lse,
                                     const void *qkv, float *work, int64_t n, int64_t h,
                                     int64_t t, int64_t c, float scale, bool causal,
                                     const int32_t *lengths, const zt_dropout_desc *drop)
{
    zt_cuda_impl *impl = nn_impl(be);
    if (n <= 0 || t <= 0)
        return;
    fl_geom g = fl_geom_of(n, h, t, c, scale, causal, lengths, drop);
    cudaStream_t st = impl->stream;
    if (flash_mma_fits(dt, g, qkv, dy) && aligned16(y) && aligned16(dqkv) &&
        flash_mma_backward(st, dt, g, dqkv, dy, y, lse, work, qkv)) {
        nn_record(be, "attn_flash_backward");
        return;
    }
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        using R = raw_t<T>;
        R *d = static_cast<R *>(dqkv);
        const R *gy = static_cast<const R *>(dy), *qt = static_cast<const R *>(qkv);
        ZT_LAUNCH(nn_grid(impl, n * h * t, ZT_NN_THREADS), ZT_NN_THREADS, 0, st,
                  flash_rowdot_kernel<T>)(g, work, gy, static_cast<const R *>(y));
        if (g.hs <= 32)
            fr_backward<32, T>(st, g, d, gy, lse, work, qt);
        else if (g.hs <= 64)
            fr_backward<64, T>(st, g, d, gy, lse, work, qt);
        else if (g.hs <= FR_MAX_HS)
            fr_backward<FR_MAX_HS, T>(st, g, d, gy, lse, work, qt);
        else if (g.staged)
            fl_backward<T, true>(st, g, d, gy, lse, work, qt);
        else
            fl_backward<T, false>(st, g, d, gy, lse, work, qt);
    });
    nn_record(be, "attn_flash_backward");
}

void zt_backend_cuda_flash_ops(zt_backend *be)
{
    be->attn_flash_forward = cuda_attn_flash_forward;
    be->attn_flash_backward = cuda_attn_flash_backward;
}
