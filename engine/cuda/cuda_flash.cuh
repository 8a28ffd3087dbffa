/*
 * cuda_flash: what the CUDA backend's two fused-attention files share
 * (backend_cuda_flash.cu: the scalar kernels and the host entry points;
 * backend_cuda_flash_mma.cu: the tensor-core kernels; CUDA C++, private to
 * engine/cuda): the geometry of one call, its masks and its keyed dropout,
 * and the tensor-core path's entry points.
 *
 * Masks: row i of sample s sees keys j < fl_allowed(g, s, i) (j <= i when
 * causal, j < lengths[s] with key padding). Dropout: element (s, hh, i, j) is
 * kept exactly when the `dropout` op would keep it on the (n, h, t, t)
 * tensor (engine/rng.h), so every path draws the same mask.
 *
 * Memory: nothing is allocated; flash_mma_backward uses
 * zt_attn_flash_work_numel's floats of `work` (engine/backend.h).
 * Collective: none.
 */
#ifndef ZT_CUDA_FLASH_CUH
#define ZT_CUDA_FLASH_CUH

#include "engine/cuda/cuda_nn.cuh"
#include "engine/rng.h"

typedef struct {
    int64_t n, h, t, c, hs, ld; /* ld = 3c, the row stride of qkv and dqkv */
    float scale;
    bool causal;
    const int32_t *lengths;
    /* dropout: p == 0 draws nothing */
    float p, dscale;
    uint32_t keep_hi; /* ceil(p 2^24) << 8: kept when a draw's top 32 bits reach it */
    uint64_t seed, site;
    int64_t step, key_b, key_c;
    const uint64_t *row_keys;
    int tile;    /* rows per staged tile (scalar wide path) */
    bool staged; /* tiles fit FL_SMEM (the host picks the wide kernels by it) */
} fl_geom;

static __device__ __forceinline__ int64_t fl_allowed(const fl_geom &g, int64_t s, int64_t i)
{
    int64_t a = g.causal ? i + 1 : g.t;
    return g.lengths ? min_i64(a, (int64_t)g.lengths[s]) : a;
}

static __device__ __forceinline__ uint64_t fl_drop_key(const fl_geom &g, int64_t s)
{
    return zt_rng_mix(zt_rng_mix(zt_dropout_row_seed(g.seed, g.site, g.step, g.row_keys[s])));
}

/* The dropout counter of element (row i, key 0) of head hh; key j's is
 * this plus j. */
static __device__ __forceinline__ uint64_t fl_row_ctr(const fl_geom &g, int64_t hh, int64_t i)
{
    return (uint64_t)((hh * g.key_b + i) * g.key_c);
}

/* Whether the draw at counter ctr of row key `key` keeps its element: u >=
 * p with u = (bits >> 40) 2^-24, exact in fp32, so the integer test bits >>
 * 40 >= ceil(p 2^24), which is bits >> 32 >= ceil(p 2^24) 2^8 (keep_hi;
 * p < 1, so ceil(p 2^24) < 2^24): one compare, no shift. */
static __device__ __forceinline__ bool fl_keep_bits(const fl_geom &g, uint64_t key, uint64_t ctr)
{
    /* zt_rng_mix(key ^ ctr) up to its last multiply (engine/rng.h), whose
     * product's top 32 bits are all the test reads: the final x ^= x >> 31
     * changes only their bit 0, below keep_hi's 8 zero bits. So the high
     * word alone, without the low one's 64-bit product. */
    uint64_t x = (key ^ ctr) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    const uint32_t lo = (uint32_t)x, hi = (uint32_t)(x >> 32);
    return __umulhi(lo, 0x133111EBu) + lo * 0x94D049BBu + hi * 0x133111EBu >= g.keep_hi;
}

/* The dropout factor of element (s, hh, i, j): 0 or dscale (1 without dropout). */
static __device__ __forceinline__ float fl_kept(const fl_geom &g, uint64_t key, int64_t hh,
                                                int64_t i, int64_t j)
{
    if (g.p == 0.0f)
        return 1.0f;
    return fl_keep_bits(g, key, fl_row_ctr(g, hh, i) + (uint64_t)j) ? g.dscale : 0.0f;
}

/* The tensor-core path (backend_cuda_flash_mma.cu) takes a call when
 * flash_mma_fits: a 16-bit dtype, a head size it has kernels for, a
 * positive scale (its softmax keeps the unscaled running maximum) and the
 * alignment its 16-byte copies need. The entry points queue the kernels on
 * st and record nothing. */
bool flash_mma_fits(zt_dtype dt, const fl_geom &g, const void *qkv, const void *rows_c);
void flash_mma_forward(cudaStream_t st, zt_dtype dt, const fl_geom &g, void *y, float *lse,
                       const void *qkv);
/* false, with nothing queued, where the device cannot give the backward's
 * dynamic shared memory (fm::BSMEM, at most 77 KB: every sm_80+ GPU can). */
bool flash_mma_backward(cudaStream_t st, zt_dtype dt, const fl_geom &g, void *dqkv,
                        const void *dy, const void *y, const float *lse, float *work,
                        const void *qkv);

#endif
