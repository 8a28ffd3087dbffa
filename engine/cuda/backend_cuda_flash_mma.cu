/*
 * backend_cuda_flash_mma: the tensor-core path of the fused attention ops
 * (attn_flash_forward, attn_flash_backward; engine/backend.h) for bf16 and
 * fp16 at head sizes 64 and 128, the FlashAttention-2 schedule on
 * engine/cuda/mma.cuh's mma.sync m16n8k16, ldmatrix and cp.async. Other head
 * sizes and fp32 keep backend_cuda_flash.cu's scalar kernels.
 *
 *   forward:  a block of 4 warps owns 64 query rows of one (sample, head),
 *             16 per warp, its Q fragments in registers; K and V tiles of BN
 *             keys are double-buffered in shared memory by cp.async (the next
 *             tile in flight while this one is used); S = Q K^T and O += P V
 *             on tensor cores, the online softmax on S's accumulator
 *             fragments in registers (a row's four lanes reduce by shuffles),
 *             P rounded to the dtype as the A operand of P V; y and the O(t)
 *             log-sum-exp written last.
 *   backward: D = rowsum(dy * y) by a warp a row (coalesced), which also
 *             clears dQ's fp32 accumulator; then one kernel whose block of
 *             4 warps owns 64 keys (16 a warp, dK and dV accumulated in
 *             registers) and walks the query tiles that see them, their Q
 *             and dY copied by cp.async under the previous tile's work
 *             (dynamic shared memory, fm::BSMEM): S^T = K Q^T and
 *             dP^T = V dO^T, recomputed once, P^T from the saved lse,
 *             dV += P^T dO, dK += dS^T Q on tensor cores; dS goes through
 *             shared memory so that the block's warps add dQ += dS K for the
 *             tile into the fp32 accumulator with atomics (FA2's schedule:
 *             one recomputation of the scores); a last pass rounds dQ.
 *
 * Grid x is (sample, head) pairs, y the row blocks, so batch times heads has
 * no 65,535 limit. Causal forward blocks run the longest rows first.
 *
 * Shared memory rows are padded by 8 elements (16 bytes), so the 8 rows an
 * ldmatrix reads fall in distinct banks. Tiles past the sequence are zero
 * filled, so masked products never meet uninitialised memory.
 *
 * Numerics (docs/gpu-results.md's tolerances): products of 16-bit operands
 * are exact in the fp32 accumulators; the differences from the CPU are the
 * order of the fp32 additions, P and dS rounded to the dtype as tensor-core
 * operands, and dQ's atomic fp32 sums, whose order is the arrival order:
 * dQ can differ between runs in the last bits before its rounding (y, lse,
 * dK and dV are deterministic). The keyed dropout is the scalar path's.
 *
 * Memory: nothing is allocated; backward uses n h t (hs + 1) floats of
 * `work` (D, then the dQ accumulator (n t, c)). Collective: none.
 */
#include "engine/cuda/cuda_flash.cuh"
#include "engine/cuda/mma.cuh"

namespace {

/* Tile shapes by head size: LDS the padded row stride (elements) of every
 * shared tile; the forward's BN keys a tile (static shared memory, under
 * 48 KB); the backward's BWARPS warps owning 16 keys each, over query tiles
 * of BBM rows, in BSMEM bytes of dynamic shared memory. Registers stay
 * under 255 a thread without spills (docs/gpu-audit.md). */
template <int HD> struct fm {
    static_assert(HD == 64 || HD == 128, "tensor-core attention has head sizes 64 and 128");
    static constexpr int LDS = HD + 8;
    static constexpr int FWARPS = 4, FBM = 16 * FWARPS, FBN = HD <= 64 ? 64 : 32;
    static constexpr int BWARPS = 4, BBN = 16 * BWARPS, BBM = 16 * BWARPS;
    /* The backward takes a query tile in BPARTS parts, one part's scores,
     * dP, P and dS live at a time; at 128, K's and V's A fragments are
     * loaded two k-steps at a time (BAROWS) and ptxas is asked for 2 blocks
     * an SM (BMINB; 0: no minimum): the settings under which neither width
     * spills (ptxas's choices move with small changes: the audit's spill
     * rule watches them). */
    static constexpr int BPARTS = HD <= 64 ? 2 : 4, BMINB = HD <= 64 ? 0 : 2;
    static constexpr bool BAROWS = HD > 64;
    /* The parts loop unrolled at 64; at 128 not, or ptxas hoists work
     * across parts and spills with dropout. */
    static constexpr int BPUNROLL = HD <= 64 ? BPARTS : 1;
    /* dQ's product in windows of BDQW column blocks (8 columns each). */
    static constexpr int BDQW = HD <= 64 ? 4 : 2;
    /* Q and dY tiles in BQBUF buffers: two at 64 (63 KB, the next tile's
     * copy runs under the whole of this one), one at 128, where two would
     * leave one block an SM (77 KB: two blocks on an A100 or H100; the
     * next tile's copy then runs under the dQ product). */
    static constexpr int BQBUF = HD <= 64 ? 2 : 1;
    static constexpr size_t BSMEM =
        ((size_t)(2 * BBN + 2 * BQBUF * BBM) * LDS + (size_t)BBN * (BBM + 8)) * sizeof(uint16_t);
};

constexpr unsigned FM_FULL = 0xffffffffu;

__device__ __forceinline__ int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Two fp32 values rounded to T, packed as an mma operand register: the
 * lower-numbered element in the low half. */
template <zt_dtype T> __device__ __forceinline__ uint32_t fm_pack(float lo, float hi)
{
    return (uint32_t)elem<T>::narrow(lo) | ((uint32_t)elem<T>::narrow(hi) << 16);
}

/* The pair of 16-bit elements at p (4-byte aligned), or zeros. */
__device__ __forceinline__ uint32_t fm_load_pair(const uint16_t *p, bool valid)
{
    return valid ? *reinterpret_cast<const uint32_t *>(p) : 0u;
}

__device__ __forceinline__ void fm_store_pair(uint16_t *p, uint32_t v)
{
    *reinterpret_cast<uint32_t *>(p) = v;
}

/* ROWS rows of HD elements from src (row stride ld) into the tile dst (row
 * stride LDS), the first `valid` by cp.async, the rest zeros, with the
 * whole block of NT threads (a fixed number of 16-byte chunks each). The
 * caller commits and waits. */
template <int HD, int ROWS, int NT>
__device__ __forceinline__ void fm_load_tile(uint16_t *dst, const uint16_t *src, int64_t ld,
                                             int64_t valid)
{
    constexpr int CH = HD / 8; /* 16-byte chunks a row */
    static_assert(ROWS * CH % NT == 0, "every thread copies the same number of chunks");
    const int ld32 = (int)ld; /* a tile's offsets fit 32 bits: flash_mma_fits */
#pragma unroll
    for (int it = 0; it < ROWS * CH / NT; it++) {
        const int e = (int)threadIdx.x + it * NT, r = e / CH, cc = e % CH;
        uint16_t *d = dst + r * fm<HD>::LDS + cc * 8;
        if (r < valid)
            zt_cp_async<16>(d, src + (r * ld32 + cc * 8));
        else
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* acc[nb] += A (16 x 16k, fragments a[k]) times B^T, B's 8 rows a block
 * (nb) of a row-major tile (rows of the tile are B's columns: ldmatrix
 * without .trans), k over the HD / 16 steps of the tile's columns. */
template <int HD, int NB, bool BF16>
__device__ __forceinline__ void fm_mma_abt(float (&acc)[NB][4], const uint32_t (&a)[HD / 16][4],
                                           const uint16_t *tile, int lane)
{
    constexpr int LDS = fm<HD>::LDS;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk += 2)
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            uint32_t b[4];
            zt_ldmatrix<4, false>(b, tile + (nb * 8 + lane % 8) * LDS + kk * 16 + (lane / 8) * 8);
            zt_mma_16816<BF16>(acc[nb], a[kk], b, acc[nb]);
            zt_mma_16816<BF16>(acc[nb], a[kk + 1], b + 2, acc[nb]);
        }
}

/* As fm_mma_abt with A rows r0 .. r0 + 15 of a row-major tile (row stride
 * LDS), loaded two k-steps at a time: 8 registers of A live, not HD / 4. */
template <int HD, int NB, bool BF16>
__device__ __forceinline__ void fm_mma_abt_rows(float (&acc)[NB][4], const uint16_t *atile, int r0,
                                                const uint16_t *tile, int lane)
{
    constexpr int LDS = fm<HD>::LDS;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk += 2) {
        uint32_t a[2][4];
#pragma unroll
        for (int k = 0; k < 2; k++)
            zt_ldmatrix<4, false>(a[k], atile + (r0 + lane % 8 + 8 * ((lane / 8) & 1)) * LDS +
                                            (kk + k) * 16 + 8 * (lane / 16));
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            uint32_t b[4];
            zt_ldmatrix<4, false>(b, tile + (nb * 8 + lane % 8) * LDS + kk * 16 + (lane / 8) * 8);
            zt_mma_16816<BF16>(acc[nb], a[0], b, acc[nb]);
            zt_mma_16816<BF16>(acc[nb], a[1], b + 2, acc[nb]);
        }
    }
}

/* acc[nw] (16 x 8 NW) += A (16 x 16 KS: fragments a) times B, B the first
 * 16 KS rows and the 8 NW columns from 8 c0 of a row-major tile (row stride
 * LD; k along its rows: ldmatrix .trans). */
template <int LD, int KS, int NW, bool BF16>
__device__ __forceinline__ void fm_mma_ab(float (&acc)[NW][4], const uint32_t (&a)[KS][4],
                                          const uint16_t *tile, int c0, int lane)
{
    static_assert(NW % 2 == 0, "ldmatrix x4 feeds two column blocks");
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int nw = 0; nw < NW; nw += 2) {
            uint32_t b[4];
            zt_ldmatrix<4, true>(b, tile + (kk * 16 + lane % 8 + 8 * ((lane / 8) & 1)) * LD +
                                        (c0 + nw) * 8 + 8 * (lane / 16));
            zt_mma_16816<BF16>(acc[nw], a[kk], b, acc[nw]);
            zt_mma_16816<BF16>(acc[nw + 1], a[kk], b + 2, acc[nw + 1]);
        }
}

/* The A fragments of a (16 x 16 KS) product held as accumulators c[2 KS]
 * (16 x 8 blocks): the C layout of two adjacent blocks is the A layout of
 * their 16 columns, rounded to bf16 (BF16) or fp16. */
template <bool BF16, int KS>
__device__ __forceinline__ void fm_to_a(uint32_t (&a)[KS][4], const float (&c)[2 * KS][4])
{
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        a[kk][0] = zt_pack_rn<BF16>(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = zt_pack_rn<BF16>(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = zt_pack_rn<BF16>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = zt_pack_rn<BF16>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

/* A fragments of rows r0 .. r0 + 15 of a row-major tile (row stride LD),
 * its first W columns. */
template <int W, int LD>
__device__ __forceinline__ void fm_frag_rows(uint32_t (&a)[W / 16][4], const uint16_t *tile, int r0,
                                             int lane)
{
#pragma unroll
    for (int kk = 0; kk < W / 16; kk++)
        zt_ldmatrix<4, false>(a[kk], tile + (r0 + lane % 8 + 8 * ((lane / 8) & 1)) * LD +
                                         kk * 16 + 8 * (lane / 16));
}

/* ---- forward ---- */

constexpr float FM_LOG2E = 1.4426950408889634f;

template <int HD, zt_dtype T, bool DROP>
__global__ void __launch_bounds__(32 * fm<HD>::FWARPS, 2)
    flash_fwd_mma(fl_geom g, uint16_t *y, float *lse, const uint16_t *__restrict__ qkv)
{
    constexpr int BM = fm<HD>::FBM, BN = fm<HD>::FBN, LDS = fm<HD>::LDS, KS = HD / 16;
    constexpr int NB = BN / 8, ND = HD / 8, NT = 32 * fm<HD>::FWARPS;
    constexpr bool BF16 = T == ZT_BF16;
    __shared__ uint4 smem[4 * BN * LDS / 8]; // K and V, two buffers each
    uint16_t *const sk0 = reinterpret_cast<uint16_t *>(smem), *const sv0 = sk0 + 2 * BN * LDS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const int64_t pair = blockIdx.x, s = pair / g.h, hh = pair % g.h;
    const int64_t i0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BM; // longest rows first
    const int64_t rw[2] = {i0 + warp * 16 + gq, i0 + warp * 16 + gq + 8}; // this lane's rows
    const int64_t kmax = fl_allowed(g, s, min_i64(i0 + BM, g.t) - 1);    // block-uniform
    int64_t al[2];
    for (int r = 0; r < 2; r++)
        al[r] = rw[r] < g.t ? fl_allowed(g, s, rw[r]) : 0;
    const uint16_t *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    constexpr bool drop = DROP; // g.p > 0 (the host picks)
    const uint64_t key = drop ? fl_drop_key(g, s) : 0;
    const uint64_t ctr[2] = {drop ? fl_row_ctr(g, hh, rw[0]) : 0, drop ? fl_row_ctr(g, hh, rw[1]) : 0};
    const float sl2 = g.scale * FM_LOG2E; // exp(scale x) = exp2(sl2 x)
    uint32_t qf[KS][4]; // the warp's 16 rows of Q as A fragments, read once
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int x = 0; x < 4; x++) {
            const int64_t r = rw[x & 1];
            qf[kk][x] = fm_load_pair(q + (r < g.t ? r : 0) * g.ld + kk * 16 + 8 * (x / 2) + 2 * tq,
                                     r < g.t);
        }
    /* m: the running maximum of the unscaled scores (scale > 0 keeps the
     * order); l: this lane's part of the row sums. */
    float o[ND][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int64_t ntiles = (kmax + BN - 1) / BN;
    if (ntiles > 0) {
        fm_load_tile<HD, BN, NT>(sk0, k, g.ld, min_i64(BN, kmax));
        fm_load_tile<HD, BN, NT>(sv0, v, g.ld, min_i64(BN, kmax));
        zt_cp_async_commit();
    }
    for (int64_t jt = 0; jt < ntiles; jt++) {
        const int b = (int)(jt & 1) * BN * LDS; // this tile's buffer; the other's at BN LDS - b
        const int64_t j0 = jt * BN;
        if (jt + 1 < ntiles) {
            const int64_t jn = j0 + BN;
            const int nb = BN * LDS - b;
            fm_load_tile<HD, BN, NT>(sk0 + nb, k + jn * g.ld, g.ld, min_i64(BN, kmax - jn));
            fm_load_tile<HD, BN, NT>(sv0 + nb, v + jn * g.ld, g.ld, min_i64(BN, kmax - jn));
            zt_cp_async_commit();
            zt_cp_async_wait<1>();
        } else {
            zt_cp_async_wait<0>();
        }
        __syncthreads();
        float sc[NB][4] = {}; // (16, BN) unscaled scores of the warp's rows
        fm_mma_abt<HD, NB, BF16>(sc, qf, sk0 + b, lane);
        /* Keys at or past a row's allowed count are masked: tile-local
         * indices against 32-bit limits (nothing allowed: <= 0). */
        const int lim[2] = {(int)max_i64(-1, min_i64(BN, al[0] - j0)),
                            (int)max_i64(-1, min_i64(BN, al[1] - j0))};
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int x = 0; x < 4; x++) {
                if (nb * 8 + 2 * tq + (x & 1) >= lim[x / 2])
                    sc[nb][x] = -INFINITY;
                mx[x / 2] = fmaxf(mx[x / 2], sc[nb][x]);
            }
        /* The draws' counters of the tile's keys j0 + 2 tq (+ nb 8 + 1) in the two rows. */
        const uint64_t cr[2] = {drop ? ctr[0] + (uint64_t)(j0 + 2 * tq) : 0,
                                drop ? ctr[1] + (uint64_t)(j0 + 2 * tq) : 0};
        float nbase[2], corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FM_FULL, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FM_FULL, mx[r], 2));
            /* Nothing allowed yet: p = 0 against base 0; corr is 0 on the
             * first tile (m = -inf). */
            nbase[r] = mx[r] == -INFINITY ? 0.0f : -mx[r] * sl2;
            corr[r] = exp2f(fmaf(m[r], sl2, nbase[r]));
            m[r] = mx[r];
            l[r] *= corr[r];
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int x = 0; x < 4; x++) {
                float e = exp2f(fmaf(sc[nb][x], sl2, nbase[x / 2]));
                l[x / 2] += e;
                /* Dropped: 0; kept, e (dscale is applied to the row at the end). */
                if (drop && !fl_keep_bits(g, key, cr[x / 2] + (uint64_t)(nb * 8 + (x & 1))))
                    e = 0.0f;
                sc[nb][x] = e;
            }
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
#pragma unroll
            for (int x = 0; x < 4; x++)
                o[nd][x] *= corr[x / 2];
        uint32_t pa[BN / 16][4];
        fm_to_a<BF16, BN / 16>(pa, sc);
        fm_mma_ab<LDS, BN / 16, ND, BF16>(o, pa, sv0 + b, 0, lane);
        __syncthreads(); // buffer b is refilled by the next iteration but one
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(FM_FULL, l[r], 1);
        l[r] += __shfl_xor_sync(FM_FULL, l[r], 2);
        if (rw[r] >= g.t)
            continue;
        /* A row with no allowed key: y = 0, lse = 0. The kept elements'
         * dropout scale (1 without dropout) comes in here. */
        const float inv = al[r] > 0 ? g.dscale / l[r] : 0.0f;
        uint16_t *yr = y + (s * g.t + rw[r]) * g.c + hh * g.hs + 2 * tq;
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
            fm_store_pair(yr + nd * 8, fm_pack<T>(o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv));
        if (tq == 0)
            lse[pair * g.t + rw[r]] = al[r] > 0 ? m[r] * g.scale + logf(l[r]) : 0.0f;
    }
}

/* ---- backward ---- */

/* D(s, hh, i) = dy_i . y_i into dd (n, h, t), a warp a row (lanes over the
 * head's columns, then a shuffle tree), and row (s, i)'s columns of head hh
 * in dQ's accumulator cleared. */
template <zt_dtype T>
__global__ void flash_rowdot_mma(fl_geom g, float *dd, float *dq_acc, const uint16_t *__restrict__ dy,
                                 const uint16_t *__restrict__ y)
{
    const int64_t total = g.n * g.h * g.t, warps = (int64_t)gridDim.x * blockDim.x / 32;
    const int lane = threadIdx.x % 32;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < total; r += warps) {
        const int64_t s = r / (g.h * g.t), hh = r / g.t % g.h, i = r % g.t;
        const int64_t off = (s * g.t + i) * g.c + hh * g.hs;
        float acc = 0.0f;
        for (int64_t d = lane; d < g.hs; d += 32) {
            acc = fmaf(elem<T>::widen(dy[off + d]), elem<T>::widen(y[off + d]), acc);
            dq_acc[off + d] = 0.0f;
        }
#pragma unroll
        for (int w = 16; w > 0; w /= 2)
            acc += __shfl_xor_sync(FM_FULL, acc, w);
        if (lane == 0)
            dd[r] = acc;
    }
}

/* dst[0] += a, dst[1] += b in global memory (dst 8-byte aligned): one
 * vector reduction where the architecture has it (sm_90, which the
 * simulator is). */
__device__ __forceinline__ void fm_red_add2(float *dst, float a, float b)
{
#if defined(ZT_CUDASIM) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(a, b));
#else
    atomicAdd(dst, a);
    atomicAdd(dst + 1, b);
#endif
}

template <int HD, zt_dtype T, bool DROP>
__global__ void __launch_bounds__(32 * fm<HD>::BWARPS, fm<HD>::BMINB)
    flash_bwd_mma(fl_geom g, uint16_t *dqkv, float *dq_acc, const uint16_t *__restrict__ dy,
                  const float *__restrict__ lse, const float *__restrict__ dd,
                  const uint16_t *__restrict__ qkv)
{
    constexpr int BN = fm<HD>::BBN, BM = fm<HD>::BBM, LDS = fm<HD>::LDS, QB = fm<HD>::BQBUF;
    constexpr int ND = HD / 8, NT = 32 * fm<HD>::BWARPS, LDD = BM + 8, QTILE = BM * LDS;
    constexpr int DQW = fm<HD>::BDQW;
    constexpr bool BF16 = T == ZT_BF16;
    __shared__ float slse[QB][BM], sdd[QB][BM]; // the tiles' lse and D
    // (BN, LDS) K and V, QB x (BM, LDS) Q and dY, (BN, LDD) dS^T: fm::BSMEM
    uint16_t *sk = reinterpret_cast<uint16_t *>(zt_dynamic_shared()), *sv = sk + BN * LDS;
    uint16_t *sq0 = sv + BN * LDS, *sdo0 = sq0 + QB * QTILE, *sds = sdo0 + QB * QTILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const int64_t pair = blockIdx.x, s = pair / g.h, hh = pair % g.h;
    const int64_t j0 = (int64_t)blockIdx.y * BN;
    const int64_t kw[2] = {j0 + warp * 16 + gq, j0 + warp * 16 + gq + 8}; // this lane's keys
    const uint16_t *q = qkv + s * g.t * g.ld + hh * g.hs, *k = q + g.c, *v = q + 2 * g.c;
    const uint16_t *dys = dy + s * g.t * g.c + hh * g.hs;
    float *dqs = dq_acc + s * g.t * g.c + hh * g.hs;
    const float *ls = lse + pair * g.t, *ds = dd + pair * g.t;
    const int64_t len = g.lengths ? g.lengths[s] : g.t;
    constexpr bool drop = DROP; // g.p > 0 (the host picks)
    const uint64_t key = drop ? fl_drop_key(g, s) : 0;
    const float sl2 = g.scale * FM_LOG2E, sd = g.scale * g.dscale; // dscale: 1 without dropout
    fm_load_tile<HD, BN, NT>(sk, k + j0 * g.ld, g.ld, min_i64(BN, g.t - j0));
    fm_load_tile<HD, BN, NT>(sv, v + j0 * g.ld, g.ld, min_i64(BN, g.t - j0));
    zt_cp_async_commit();
    /* Query tile i0's Q, dY, lse and D into buffer b, one commit group; rows
     * past t are zeros. */
    auto load_queries = [&](int64_t i0, int b) {
        const int64_t rows = min_i64(BM, g.t - i0);
        fm_load_tile<HD, BM, NT>(sq0 + b * QTILE, q + i0 * g.ld, g.ld, rows);
        fm_load_tile<HD, BM, NT>(sdo0 + b * QTILE, dys + i0 * g.c, g.c, rows);
        static_assert(BM <= NT, "a thread a row of lse and D");
        const int r = threadIdx.x;
        if (r < rows) {
            zt_cp_async<4>(&slse[b][r], ls + i0 + r);
            zt_cp_async<4>(&sdd[b][r], ds + i0 + r);
        } else if (r < BM) {
            slse[b][r] = 0.0f;
            sdd[b][r] = 0.0f;
        }
        zt_cp_async_commit();
    };
    float dk[ND][4] = {}, dv[ND][4] = {};
    /* Block-uniform: queries before the first key see none of it (causal),
     * and keys at or past the length are seen by no query. */
    const int64_t start = j0 >= len ? g.t : (g.causal ? j0 / BM * BM : 0);
    /* A lane's key kw[r] is seen by query i when i < t, kw[r] < len and,
     * causal, kw[r] <= i: i - i0 >= first[r] and i < t. */
    const int64_t kfirst[2] = {kw[0] < len ? (g.causal ? kw[0] : 0) : g.t,
                               kw[1] < len ? (g.causal ? kw[1] : 0) : g.t};
    if (start < g.t)
        load_queries(start, 0);
    int b = 0; // this tile's buffer
    for (int64_t i0 = start; i0 < g.t; i0 += BM, b = (b + 1) % QB) {
        const int64_t rows = min_i64(BM, g.t - i0);
        /* Two buffers: the next tile's copy starts now, into the buffer
         * the previous tile's part loop released before its dQ barrier. */
        if constexpr (QB == 2) {
            if (i0 + BM < g.t) {
                load_queries(i0 + BM, 1 - b);
                zt_cp_async_wait<1>();
            } else {
                zt_cp_async_wait<0>();
            }
        } else {
            zt_cp_async_wait<0>();
        }
        __syncthreads(); // this tile's copies are in; the previous dQ product left dS
        const uint16_t *sq = sq0 + b * QTILE, *sdo = sdo0 + b * QTILE;
        const float *tlse = slse[b], *tdd = sdd[b];
        /* Tile-local query limits: seen when lo[r] <= ic < hi. */
        const int hi = (int)rows;
        const int lo[2] = {(int)max_i64(0, min_i64(BM, kfirst[0] - i0)),
                           (int)max_i64(0, min_i64(BM, kfirst[1] - i0))};
        /* Dropout counters: element (query i0 + ic, key kw[r]) is at
         * cb0 + 8 r + (ic - 2 tq) key_c. */
        const uint64_t kc = (uint64_t)g.key_c;
        const uint64_t cb0 = drop ? fl_row_ctr(g, hh, i0) + 2 * tq * kc + (uint64_t)kw[0] : 0;
        /* The tile's queries in parts (fm::BPARTS), so that registers hold
         * one part's scores, dP, P and dS at a time: no spill. */
        constexpr int QW = BM / fm<HD>::BPARTS, NQP = QW / 8; // queries a part
#pragma unroll(fm<HD>::BPUNROLL)
        for (int q0 = 0; q0 < BM; q0 += QW) {
            float st[NQP][4] = {}, dpt[NQP][4] = {}; // (16 keys, QW queries): S^T and dP^T
            if constexpr (fm<HD>::BAROWS) {
                fm_mma_abt_rows<HD, NQP, BF16>(st, sk, warp * 16, sq + q0 * LDS, lane);
                fm_mma_abt_rows<HD, NQP, BF16>(dpt, sv, warp * 16, sdo + q0 * LDS, lane);
            } else {
                uint32_t ka[HD / 16][4];
                fm_frag_rows<HD, LDS>(ka, sk, warp * 16, lane);
                fm_mma_abt<HD, NQP, BF16>(st, ka, sq + q0 * LDS, lane);
                fm_frag_rows<HD, LDS>(ka, sv, warp * 16, lane);
                fm_mma_abt<HD, NQP, BF16>(dpt, ka, sdo + q0 * LDS, lane);
            }
            uint32_t pa[QW / 16][4], sa[QW / 16][4]; // P^T with dropout and dS^T, rounded
#pragma unroll
            for (int nq = 0; nq < NQP; nq++) {
                /* The draws' counters of queries q0 + nq 8 + 2 tq (+ 1), key kw[0]. */
                const uint64_t cn0 = drop ? cb0 + (uint64_t)(q0 + nq * 8) * kc : 0;
                const uint64_t cn[2] = {cn0, cn0 + kc};
#pragma unroll
                for (int x = 0; x < 4; x += 2) {
                    float pd[2], dsv[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int ic = q0 + nq * 8 + 2 * tq + e;
                        const bool seen = ic >= lo[x / 2] && ic < hi;
                        // exp(x - lse) = exp2(x log2e - lse log2e)
                        const float p =
                            seen ? exp2f(fmaf(st[nq][x + e], sl2, -tlse[ic] * FM_LOG2E)) : 0.0f;
                        /* dS = scale p (dP dscale [kept] - D), as p (dP sd - D scale)
                         * with sd = scale dscale: one FFMA; P^T's dscale goes on dV
                         * at the end. */
                        const float dsd = tdd[ic] * g.scale;
                        float t = fmaf(dpt[nq][x + e], sd, -dsd);
                        pd[e] = p;
                        if (drop) {
                            const bool keep = fl_keep_bits(g, key, cn[e] + 8 * (x / 2));
                            pd[e] = keep ? p : 0.0f;
                            t = keep ? t : -dsd;
                        }
                        dsv[e] = p * t;
                    }
                    /* fm_to_a's placement: blocks 2 kk and 2 kk + 1 make A's kk. */
                    pa[nq / 2][2 * (nq % 2) + x / 2] = zt_pack_rn<BF16>(pd[0], pd[1]);
                    const uint32_t dsp = zt_pack_rn<BF16>(dsv[0], dsv[1]);
                    sa[nq / 2][2 * (nq % 2) + x / 2] = dsp;
                    /* S^T's (key gq + 8 (x / 2), queries q0 + nq * 8 + 2 tq, + 1). */
                    fm_store_pair(sds + (warp * 16 + gq + 8 * (x / 2)) * LDD + q0 + nq * 8 + 2 * tq,
                                  dsp);
                }
            }
            fm_mma_ab<LDS, QW / 16, ND, BF16>(dv, pa, sdo + q0 * LDS, 0, lane);
            fm_mma_ab<LDS, QW / 16, ND, BF16>(dk, sa, sq + q0 * LDS, 0, lane);
        }
        __syncthreads(); // dS is whole; Q and dY are no longer read
        if constexpr (QB == 1)
            if (i0 + BM < g.t)
                load_queries(i0 + BM, 0);
        /* dQ of the warp's 16 queries += dS K over the block's BN keys, in
         * windows of 32 columns, added into the accumulator. dS is stored
         * (key, query): its A fragments (query, key) load transposed. */
        uint32_t qa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
            zt_ldmatrix<4, true>(qa[kk], sds + (kk * 16 + lane % 8 + 8 * (lane / 16)) * LDD +
                                             warp * 16 + 8 * ((lane / 8) & 1));
#pragma unroll
        for (int c0 = 0; c0 < ND; c0 += DQW) {
            float dq[DQW][4] = {};
            fm_mma_ab<LDS, BN / 16, DQW, BF16>(dq, qa, sk, c0, lane);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t i = i0 + warp * 16 + gq + 8 * r;
                if (i < g.t)
#pragma unroll
                    for (int nd = 0; nd < DQW; nd++)
                        fm_red_add2(dqs + i * g.c + (c0 + nd) * 8 + 2 * tq, dq[nd][2 * r],
                                    dq[nd][2 * r + 1]);
            }
        }
    }
    zt_cp_async_wait<0>(); // K and V, when no query sees these keys
    uint16_t *dks = dqkv + s * g.t * g.ld + g.c + hh * g.hs;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (kw[r] >= g.t)
            continue;
        uint16_t *dkr = dks + kw[r] * g.ld + 2 * tq, *dvr = dkr + g.c;
#pragma unroll
        for (int nd = 0; nd < ND; nd++) {
            fm_store_pair(dkr + nd * 8, fm_pack<T>(dk[nd][2 * r], dk[nd][2 * r + 1]));
            fm_store_pair(dvr + nd * 8,
                          fm_pack<T>(dv[nd][2 * r] * g.dscale, dv[nd][2 * r + 1] * g.dscale));
        }
    }
}

/* dQ's accumulator (n t, c) rounded to T into dqkv's Q columns. */
template <zt_dtype T>
__global__ void flash_dq_round(fl_geom g, uint16_t *dqkv, const float *__restrict__ dq_acc)
{
    const int64_t total = g.n * g.t * g.c;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x)
        dqkv[e / g.c * g.ld + e % g.c] = elem<T>::narrow(dq_acc[e]);
}

/* Kernels come with and without the dropout draws (DROP), so that a run
 * without dropout carries none of their instructions or registers. */
template <int HD, zt_dtype T>
void fm_forward(cudaStream_t st, const fl_geom &g, uint16_t *y, float *lse, const uint16_t *qkv)
{
    dim3 grid((unsigned)(g.n * g.h), (unsigned)((g.t + fm<HD>::FBM - 1) / fm<HD>::FBM));
    if (g.p > 0.0f)
        ZT_LAUNCH(grid, 32 * fm<HD>::FWARPS, 0, st, flash_fwd_mma<HD, T, true>)(g, y, lse, qkv);
    else
        ZT_LAUNCH(grid, 32 * fm<HD>::FWARPS, 0, st, flash_fwd_mma<HD, T, false>)(g, y, lse, qkv);
}

/* The backward's kernel for g (with or without the draws) opted in to its
 * shared memory on the current device: false where the device has less. */
template <int HD, zt_dtype T>
bool fm_backward_optin(const fl_geom &g)
{
    cudaError_t e = g.p > 0.0f ? zt_shared_optin(flash_bwd_mma<HD, T, true>, fm<HD>::BSMEM)
                               : zt_shared_optin(flash_bwd_mma<HD, T, false>, fm<HD>::BSMEM);
    if (e != cudaSuccess)
        (void)cudaGetLastError(); // not sticky: the scalar kernels run instead
    return e == cudaSuccess;
}

template <int HD, zt_dtype T>
void fm_backward(cudaStream_t st, const fl_geom &g, uint16_t *dqkv, float *dq_acc,
                 const uint16_t *dy, const float *lse, const float *dd, const uint16_t *qkv)
{
    dim3 grid((unsigned)(g.n * g.h), (unsigned)((g.t + fm<HD>::BBN - 1) / fm<HD>::BBN));
    if (g.p > 0.0f)
        ZT_LAUNCH(grid, 32 * fm<HD>::BWARPS, fm<HD>::BSMEM, st, flash_bwd_mma<HD, T, true>)
        (g, dqkv, dq_acc, dy, lse, dd, qkv);
    else
        ZT_LAUNCH(grid, 32 * fm<HD>::BWARPS, fm<HD>::BSMEM, st, flash_bwd_mma<HD, T, false>)
        (g, dqkv, dq_acc, dy, lse, dd, qkv);
}

/* A grid-stride grid of about `items` threads, capped at 8 waves of a large GPU. */
unsigned fm_grid(int64_t items, int threads)
{
    return (unsigned)min_i64((items + threads - 1) / threads, 8 * 132 * 8);
}

} // namespace

bool flash_mma_fits(zt_dtype dt, const fl_geom &g, const void *qkv, const void *rows_c)
{
    /* The tile copies add their offsets (under 64 rows of ld) in 32 bits. */
    return (dt == ZT_BF16 || dt == ZT_F16) && (g.hs == 64 || g.hs == 128) && g.scale > 0.0f &&
           g.ld < ((int64_t)1 << 24) && aligned16(qkv) && aligned16(rows_c);
}

void flash_mma_forward(cudaStream_t st, zt_dtype dt, const fl_geom &g, void *y, float *lse,
                       const void *qkv)
{
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        if constexpr (T != ZT_F32) {
            uint16_t *yt = static_cast<uint16_t *>(y);
            const uint16_t *qt = static_cast<const uint16_t *>(qkv);
            if (g.hs == 64)
                fm_forward<64, T>(st, g, yt, lse, qt);
            else
                fm_forward<128, T>(st, g, yt, lse, qt);
        }
    });
}

bool flash_mma_backward(cudaStream_t st, zt_dtype dt, const fl_geom &g, void *dqkv,
                        const void *dy, const void *y, const float *lse, float *work,
                        const void *qkv)
{
    bool ran = false;
    with_dtype(dt, [&](auto tag) {
        constexpr zt_dtype T = decltype(tag)::value;
        if constexpr (T != ZT_F32) {
            if (!(g.hs == 64 ? fm_backward_optin<64, T>(g) : fm_backward_optin<128, T>(g)))
                return;
            uint16_t *d = static_cast<uint16_t *>(dqkv);
            const uint16_t *gy = static_cast<const uint16_t *>(dy);
            const uint16_t *qt = static_cast<const uint16_t *>(qkv);
            float *dd = work, *dq_acc = work + g.n * g.h * g.t;
            const int64_t rows = g.n * g.h * g.t;
            ZT_LAUNCH(fm_grid(32 * rows, 256), 256, 0, st, flash_rowdot_mma<T>)
            (g, dd, dq_acc, gy, static_cast<const uint16_t *>(y));
            if (g.hs == 64)
                fm_backward<64, T>(st, g, d, dq_acc, gy, lse, dd, qt);
            else
                fm_backward<128, T>(st, g, d, dq_acc, gy, lse, dd, qt);
            ZT_LAUNCH(fm_grid(g.n * g.t * g.c, 256), 256, 0, st, flash_dq_round<T>)(g, d, dq_acc);
            ran = true;
        }
    });
    return ran;
}
