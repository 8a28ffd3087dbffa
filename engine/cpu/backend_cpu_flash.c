/*
 * backend_cpu_flash: the CPU backend's fused attention (attn_flash_forward and
 * attn_flash_backward, engine/backend.h). One OpenMP task per (sample, head)
 * pair; a pair walks its query tiles of ZT_ATTN_FLASH_TILE rows in order and
 * multiplies each against all the keys its rows may see (causal tiles stop at
 * their last row) with OpenBLAS, which runs single-threaded inside the
 * parallel loop. The scores of one tile live in the pair's slice of `work`
 * (two (tile, t) blocks), never a (t, t) tensor. Every output element is
 * written by one pair with a fixed order of sums (dK and dV add up the query
 * tiles in increasing order), so results do not depend on OMP_NUM_THREADS.
 *
 * The forward softmax follows attn_softmax_forward (float32 row maximum,
 * sum, times 1 / sum) with flash_exp for expf: a polynomial within 2 ulp of
 * expf that vectorises (libm's expf does not), and the row's sum taken in
 * FLASH_LANES interleaved partial sums (one running sum is a serial chain
 * of scalar adds, about a third of the forward's own time on the
 * classifier), so the probabilities are the three-op path's to a few ulp. Backward recomputes
 * them as flash_exp(scale s - lse): that recomputation is the one elementwise
 * cost the three-op backward does not have (with expf it made the
 * classifier's attention backward ~1.4x slower). The Makefile builds this
 * file with -fno-trapping-math, without which GCC does not if-convert the
 * clamp of flash_exp and leaves its loops scalar.
 *
 * The per-pair bodies are compiled for each ISA of engine/cpu/cpu.h
 * (baseline, AVX2, AVX-512F) and the one zt_cpu_isa_get() names runs: the
 * element-wise loops (flash_exp, the softmax's lanes, the gradient of the
 * scores) take 4, 8 or 16 floats a vector; the GEMMs are OpenBLAS's either
 * way. Every path gives the same bits: -ffp-contract=off (Makefile) keeps
 * AVX-512's FMAs out, the lanes' sums keep their order, and each element sees
 * the same operations whichever vector or scalar tail handles it.
 */
#include "engine/cpu/backend_cpu_nn.h"
#include "engine/cpu/cpu.h"
#include "engine/rng.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

typedef struct {
    int64_t n, h, t, c, hs, tile;
    float scale;
    bool causal;
    const int32_t *lengths;
    const zt_dropout_desc *drop;
} flash_geom;

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

static flash_geom flash_geom_of(int64_t n, int64_t h, int64_t t, int64_t c, float scale,
                                bool causal, const int32_t *lengths, const zt_dropout_desc *drop)
{
    return (flash_geom){.n = n, .h = h, .t = t, .c = c, .hs = c / h,
                        .tile = min_i64(t, ZT_ATTN_FLASH_TILE), .scale = scale,
                        .causal = causal, .lengths = lengths, .drop = drop};
}

/* Keys row i of sample s may see. */
static int64_t flash_allowed(const flash_geom *g, int64_t s, int64_t i)
{
    int64_t a = g->causal ? i + 1 : g->t;
    return g->lengths ? min_i64(a, g->lengths[s]) : a;
}

/* The dropout key of sample s, as zt_cpu_dropout_f32 hoists it: a draw is
 * mix(key ^ counter) (engine/rng.h). */
static uint64_t flash_drop_key(const zt_dropout_desc *d, int64_t s)
{
    return zt_rng_mix(zt_rng_mix(zt_dropout_row_seed(d->seed, d->site, d->step, d->row_keys[s])));
}

static bool flash_keep(uint64_t key, uint64_t ctr, float p)
{
    return (float)(zt_rng_mix(key ^ ctr) >> 40) * (1.0f / 16777216.0f) >= p;
}

static void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

static void zero_rows(float *x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        memset(x + r * ld, 0, (size_t)cols * sizeof *x);
}

/* e^x for x <= ~0 (x = scale s - lse), within ~2 ulp of expf: Cody-Waite
 * reduction x = n ln2 + r, |r| <= ln2 / 2, and Cephes' expf polynomial; 2^n
 * built in the exponent bits. Below -87 (e^x < 2^-125) it returns 0. Plain
 * arithmetic, so the compiler vectorises the loops that call it. */
static inline float flash_exp(float x)
{
    float xc = x < -87.0f ? -87.0f : x;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float q = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
    q = q * z + r + 1.0f;
    union {
        int32_t i;
        float f;
    } two_n = {.i = ((int32_t)n + 127) << 23};
    return x < -87.0f ? 0.0f : q * two_n.f;
}

/* Partial maxima and sums of a row: element j goes to lane j % FLASH_LANES
 * (the tail past the last full group to lane 0's chain, after the lanes
 * are combined in lane order). A fixed order, so the result never depends
 * on the thread count, and one that vectorises. */
#define FLASH_LANES 8

/* Row i's probabilities in place over its `a` allowed scores, zeros up to
 * kmax; returns the log-sum-exp of scale * scores. The maximum skips NaN
 * scores unless the first is NaN, as a single running maximum does. */
static inline __attribute__((always_inline)) float flash_softmax_row(float *row, int64_t a,
                                                                     int64_t kmax, float scale)
{
    float lane[FLASH_LANES];
    int64_t full = a / FLASH_LANES * FLASH_LANES;
    for (int l = 0; l < FLASH_LANES; l++)
        lane[l] = scale * row[0];
    for (int64_t j = 0; j < full; j += FLASH_LANES)
        for (int l = 0; l < FLASH_LANES; l++) {
            float z = scale * row[j + l];
            lane[l] = z > lane[l] ? z : lane[l];
        }
    float mx = lane[0];
    for (int l = 1; l < FLASH_LANES; l++)
        mx = lane[l] > mx ? lane[l] : mx;
    for (int64_t j = full; j < a; j++) {
        float z = scale * row[j];
        mx = z > mx ? z : mx;
    }
    for (int64_t j = 0; j < a; j++)
        row[j] = flash_exp(scale * row[j] - mx);
    for (int l = 0; l < FLASH_LANES; l++)
        lane[l] = 0.0f;
    for (int64_t j = 0; j < full; j += FLASH_LANES)
        for (int l = 0; l < FLASH_LANES; l++)
            lane[l] += row[j + l];
    float sum = 0.0f;
    for (int l = 0; l < FLASH_LANES; l++)
        sum += lane[l];
    for (int64_t j = full; j < a; j++)
        sum += row[j];
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < a; j++)
        row[j] *= inv;
    for (int64_t j = a; j < kmax; j++)
        row[j] = 0.0f;
    return mx + logf(sum);
}

static inline __attribute__((always_inline)) void
flash_pair_forward(const flash_geom *g, int64_t s, int64_t hh, float *y, float *lse, float *buf,
                   const float *qkv)
{
    int64_t t = g->t, c = g->c, hs = g->hs, ld = 3 * c;
    const float *q = qkv + s * t * ld + hh * hs, *k = q + c, *v = q + 2 * c;
    float *ys = y + s * t * c + hh * hs; // (t, hs) with row stride c
    float *ls = lse + (s * g->h + hh) * t; // (t)
    const zt_dropout_desc *d = g->drop;
    bool dropped = d->p > 0.0f;
    float dscale = dropped ? 1.0f / (1.0f - d->p) : 1.0f;
    uint64_t key = dropped ? flash_drop_key(d, s) : 0;
    for (int64_t i0 = 0; i0 < t; i0 += g->tile) {
        int64_t m = min_i64(g->tile, t - i0), kmax = flash_allowed(g, s, i0 + m - 1);
        if (kmax <= 0) {
            zero_rows(ys + i0 * c, m, hs, c);
            memset(ls + i0, 0, (size_t)m * sizeof *ls);
            continue;
        }
        sgemm(false, true, m, kmax, hs, q + i0 * ld, ld, k, ld, 0.0f, buf, kmax); // (m, kmax)
        for (int64_t r = 0; r < m; r++) {
            int64_t i = i0 + r, a = flash_allowed(g, s, i);
            float *row = buf + r * kmax;
            if (a <= 0) {
                memset(row, 0, (size_t)kmax * sizeof *row);
                ls[i] = 0.0f;
                continue;
            }
            ls[i] = flash_softmax_row(row, a, kmax, g->scale);
            if (!dropped)
                continue;
            uint64_t ctr0 = (uint64_t)((hh * d->key_b + i) * d->key_c);
            for (int64_t j = 0; j < a; j++)
                row[j] *= flash_keep(key, ctr0 + (uint64_t)j, d->p) ? dscale : 0.0f;
        }
        sgemm(false, false, m, hs, kmax, buf, kmax, v, ld, 0.0f, ys + i0 * c, c); // (m, hs)
    }
}

static inline __attribute__((always_inline)) void
flash_pair_backward(const flash_geom *g, int64_t s, int64_t hh, float *dqkv, const float *dy,
                    const float *y, const float *lse, float *buf, const float *qkv)
{
    int64_t t = g->t, c = g->c, hs = g->hs, ld = 3 * c;
    const float *q = qkv + s * t * ld + hh * hs, *k = q + c, *v = q + 2 * c;
    float *dq = dqkv + s * t * ld + hh * hs, *dk = dq + c, *dv = dq + 2 * c;
    const float *dys = dy + s * t * c + hh * hs, *yo = y + s * t * c + hh * hs; // (t, hs), stride c
    const float *ls = lse + (s * g->h + hh) * t;
    float *p = buf, *ds = buf + g->tile * t; // (tile, kmax) each
    const zt_dropout_desc *d = g->drop;
    /* Locals, so the stores into the tiles cannot alias them and the row
     * loops vectorise. */
    const float scale = g->scale, p_drop = d->p;
    bool dropped = p_drop > 0.0f;
    float dscale = dropped ? 1.0f / (1.0f - p_drop) : 1.0f;
    uint64_t key = dropped ? flash_drop_key(d, s) : 0;
    zero_rows(dk, t, hs, ld);
    zero_rows(dv, t, hs, ld);
    for (int64_t i0 = 0; i0 < t; i0 += g->tile) {
        int64_t m = min_i64(g->tile, t - i0), kmax = flash_allowed(g, s, i0 + m - 1);
        if (kmax <= 0) {
            zero_rows(dq + i0 * ld, m, hs, ld);
            continue;
        }
        sgemm(false, true, m, kmax, hs, q + i0 * ld, ld, k, ld, 0.0f, p, kmax);    // scores
        sgemm(false, true, m, kmax, hs, dys + i0 * c, c, v, ld, 0.0f, ds, kmax);   // dL/dP dropped
        for (int64_t r = 0; r < m; r++) {
            int64_t i = i0 + r, a = flash_allowed(g, s, i);
            float *pr = p + r * kmax, *dr = ds + r * kmax;
            a = a < 0 ? 0 : a;
            float dsum = a > 0 ? zt_cpu_dot_f32(dys + i * c, yo + i * c, hs) : 0.0f, l = ls[i];
            uint64_t ctr0 = dropped ? (uint64_t)((hh * d->key_b + i) * d->key_c) : 0;
            for (int64_t j = 0; j < a; j++)
                pr[j] = flash_exp(scale * pr[j] - l);
            if (dropped)
                for (int64_t j = 0; j < a; j++) {
                    float kept = flash_keep(key, ctr0 + (uint64_t)j, p_drop) ? dscale : 0.0f;
                    dr[j] = scale * pr[j] * (dr[j] * kept - dsum);
                    pr[j] *= kept;
                }
            else
                for (int64_t j = 0; j < a; j++)
                    dr[j] = scale * pr[j] * (dr[j] - dsum);
            for (int64_t j = a; j < kmax; j++)
                pr[j] = dr[j] = 0.0f;
        }
        sgemm(true, false, kmax, hs, m, p, kmax, dys + i0 * c, c, 1.0f, dv, ld);     // dV += Pd^T dY
        sgemm(false, false, m, hs, kmax, ds, kmax, k, ld, 0.0f, dq + i0 * ld, ld);   // dQ = dS K
        sgemm(true, false, kmax, hs, m, ds, kmax, q + i0 * ld, ld, 1.0f, dk, ld);    // dK += dS^T Q
    }
}

/* ---- the bodies per ISA ---- */

typedef void (*flash_fwd_fn)(const flash_geom *g, int64_t s, int64_t hh, float *y, float *lse,
                             float *buf, const float *qkv);
typedef void (*flash_bwd_fn)(const flash_geom *g, int64_t s, int64_t hh, float *dqkv,
                             const float *dy, const float *y, const float *lse, float *buf,
                             const float *qkv);

#define FLASH_CLONES(suffix, attr)                                                              \
    attr static void flash_fwd_##suffix(const flash_geom *g, int64_t s, int64_t hh, float *y,   \
                                        float *lse, float *buf, const float *qkv)               \
    {                                                                                           \
        flash_pair_forward(g, s, hh, y, lse, buf, qkv);                                         \
    }                                                                                           \
    attr static void flash_bwd_##suffix(const flash_geom *g, int64_t s, int64_t hh,             \
                                        float *dqkv, const float *dy, const float *y,           \
                                        const float *lse, float *buf, const float *qkv)         \
    {                                                                                           \
        flash_pair_backward(g, s, hh, dqkv, dy, y, lse, buf, qkv);                              \
    }

FLASH_CLONES(baseline, )
#if defined(__x86_64__)
FLASH_CLONES(avx2, __attribute__((target(ZT_TARGET_AVX2))))
FLASH_CLONES(avx512, __attribute__((target(ZT_TARGET_AVX512))))
static const flash_fwd_fn flash_fwd[ZT_CPU_ISA_COUNT] = {flash_fwd_baseline, flash_fwd_avx2,
                                                         flash_fwd_avx512};
static const flash_bwd_fn flash_bwd[ZT_CPU_ISA_COUNT] = {flash_bwd_baseline, flash_bwd_avx2,
                                                         flash_bwd_avx512};
#else
static const flash_fwd_fn flash_fwd[ZT_CPU_ISA_COUNT] = {flash_fwd_baseline};
static const flash_bwd_fn flash_bwd[ZT_CPU_ISA_COUNT] = {flash_bwd_baseline};
#endif

void zt_cpu_attn_flash_forward_f32(const zt_backend *be, float *y, float *lse, float *work,
                                   const float *qkv, int64_t n, int64_t h, int64_t t, int64_t c,
                                   float scale, bool causal, const int32_t *lengths,
                                   const zt_dropout_desc *drop)
{
    (void)be;
    if (n == 0 || t == 0)
        return;
    flash_geom g = flash_geom_of(n, h, t, c, scale, causal, lengths, drop);
    const flash_fwd_fn fwd = flash_fwd[zt_cpu_isa_get()];
#pragma omp parallel for schedule(static)
    for (int64_t pair = 0; pair < n * h; pair++)
        fwd(&g, pair / h, pair % h, y, lse, work + pair * 2 * g.tile * t, qkv);
}

void zt_cpu_attn_flash_backward_f32(const zt_backend *be, float *dqkv, const float *dy,
                                    const float *y, const float *lse, const float *qkv,
                                    float *work, int64_t n, int64_t h, int64_t t, int64_t c,
                                    float scale, bool causal, const int32_t *lengths,
                                    const zt_dropout_desc *drop)
{
    (void)be;
    if (n == 0 || t == 0)
        return;
    flash_geom g = flash_geom_of(n, h, t, c, scale, causal, lengths, drop);
    const flash_bwd_fn bwd = flash_bwd[zt_cpu_isa_get()];
#pragma omp parallel for schedule(static)
    for (int64_t pair = 0; pair < n * h; pair++)
        bwd(&g, pair / h, pair % h, dqkv, dy, y, lse, work + pair * 2 * g.tile * t, qkv);
}
