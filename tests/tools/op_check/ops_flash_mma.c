/*
 * ops_flash_mma: op-check's cases of the fused attention ops at the shapes
 * the CUDA backend runs on tensor cores (bf16 and fp16, head sizes 64 and
 * 128; engine/cuda/backend_cuda_flash_mma.cu): T of 1, 17, 1000 and 4096,
 * causal and not, key padding (a zero-length and a one-key sample),
 * dropout.
 *
 * Metric `mag`, as the 16-bit GEMMs' (docs/gpu-results.md): each output
 * element's error over the sum of the magnitudes of the products it adds,
 * computed here on the host from the CPU backend's lse and y:
 *   y_i:   sum_j |drop(p)_ij| |v_j|       dV_j: sum_i |drop(p)_ij| |dy_i|
 *   dK_j:  sum_i |dS_ij| |q_i|            dQ_i: sum_j |dS_ij| |k_j|
 * with dS_ij = scale p_ij (drop_ij dy_i . v_j - dy_i . y_i). The tensor
 * cores round one operand of each of these products to the dtype (P, or
 * dS) and both backends round the output: 3u + u^2 with fp32 accumulation
 * (THR_ATTN_BF16, THR_ATTN_FP16). Two absolute errors no relative bound
 * covers join |P| and |dS| divided by the threshold, so that the metric
 * stays one ratio: dS's fp32 cancellation (its two dot products, each off by
 * up to gamma = hs 2^-22 of its magnitudes: four times round-to-nearest's
 * bound, room for tensor cores' truncating accumulation), and fp16's
 * underflow (an operand or an output rounded to a subnormal is off by up
 * to 2^-25; the outputs' two roundings add 2^-24 to every element).
 * lse (fp32) is judged at THR_F32.
 *
 * Memory: every buffer is freed by its case. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/rng.h"
#include "tests/tools/op_check/op_check.h"

static const struct {
    int64_t n, h, t, hs;
    bool causal, lengths;
    float p;
    bool big; /* left out by --quick */
} mma_shapes[] = {
    {2, 2, 1, 64, true, false, 0.0f, false},      {4, 2, 17, 128, false, true, 0.1f, false},
    {4, 1, 17, 64, true, true, 0.0f, false},      {1, 2, 1000, 64, true, true, 0.1f, false},
    {2, 1, 1000, 128, false, true, 0.2f, false},  {1, 1, 4096, 64, true, false, 0.0f, false},
    {1, 1, 4096, 128, true, true, 0.1f, true},
};

typedef struct {
    int64_t n, h, t, hs, c;
    bool causal;
    const int32_t *lengths;
    float scale, p, dscale;
    double thr, eta; /* the case's threshold; the dtype's underflow error */
    const zt_dropout_desc *drop;
} mma_geom;

static int64_t allowed(const mma_geom *g, int64_t s, int64_t i)
{
    int64_t a = g->causal ? i + 1 : g->t;
    return g->lengths && g->lengths[s] < a ? g->lengths[s] : a;
}

static double dotd(const float *a, const float *b, int64_t n)
{
    double acc = 0.0;
    for (int64_t d = 0; d < n; d++)
        acc += (double)a[d] * b[d];
    return acc;
}

static double dot_abs(const float *a, const float *b, int64_t n)
{
    double acc = 0.0;
    for (int64_t d = 0; d < n; d++)
        acc += fabs((double)a[d] * b[d]);
    return acc;
}

static void add_abs(float *acc, float w, const float *x, int64_t n)
{
    for (int64_t d = 0; d < n; d++)
        acc[d] += w * fabsf(x[d]);
}

/* The magnitudes of the products behind y (n t, c) and dqkv (n t, 3c), from
 * the widened inputs and the CPU's y and lse. */
static void mma_mags(const mma_geom *g, const float *qkv, const float *dy, const float *y,
                     const float *lse, float *ymag, float *dmag)
{
    const int64_t t = g->t, c = g->c, hs = g->hs, ld = 3 * c;
    for (int64_t s = 0; s < g->n; s++) {
        uint64_t key = g->p > 0.0f ? zt_rng_mix(zt_rng_mix(zt_dropout_row_seed(
                                         g->drop->seed, g->drop->site, g->drop->step,
                                         g->drop->row_keys[s])))
                                   : 0;
        for (int64_t hh = 0; hh < g->h; hh++) {
            const float *q = qkv + s * t * ld + hh * hs, *k = q + c, *v = q + 2 * c;
            const float *dys = dy + s * t * c + hh * hs, *ys = y + s * t * c + hh * hs;
            float *ym = ymag + s * t * c + hh * hs, *dq = dmag + s * t * ld + hh * hs;
            float *dk = dq + c, *dv = dq + 2 * c;
            for (int64_t i = 0; i < t; i++) {
                const int64_t a = allowed(g, s, i);
                const double dd = dotd(dys + i * c, ys + i * c, hs);
                const double dd_abs = dot_abs(dys + i * c, ys + i * c, hs);
                const double li = lse[(s * g->h + hh) * t + i];
                const uint64_t ctr0 = (uint64_t)((hh * g->drop->key_b + i) * g->drop->key_c);
                for (int64_t j = 0; j < a; j++) {
                    double p = exp(g->scale * dotd(q + i * ld, k + j * ld, hs) - li);
                    float kept = 1.0f;
                    if (g->p > 0.0f)
                        kept = (float)(zt_rng_mix(key ^ (ctr0 + (uint64_t)j)) >> 40) *
                                           (1.0f / 16777216.0f) >=
                                       g->p
                                   ? g->dscale
                                   : 0.0f;
                    double dp = dotd(dys + i * c, v + j * ld, hs);
                    double cancel = g->scale * p * ldexp((double)hs, -22) *
                                    (kept * dot_abs(dys + i * c, v + j * ld, hs) + dd_abs);
                    float pd = (float)(p * kept + g->eta / g->thr);
                    float ds = (float)(fabs(g->scale * p * (dp * kept - dd)) +
                                       (cancel + g->eta) / g->thr);
                    add_abs(ym + i * c, pd, v + j * ld, hs);
                    add_abs(dv + j * ld, pd, dys + i * c, hs);
                    add_abs(dk + j * ld, ds, q + i * ld, hs);
                    add_abs(dq + i * ld, ds, k + j * ld, hs);
                }
            }
        }
    }
}

/* A dt tensor's two copies, widened, judged by `mag`. */
static void cmp_mag(tcase *k, const char *output, const pair *p, zt_dtype dt, const float *mag,
                    int64_t n)
{
    void *got = oc_fetch(p);
    float *r = oc_widen(p->c, dt, n), *x = oc_widen(got, dt, n);
    oc_add_err(k, output, oc_mag_err(r, x, mag, n));
    free(got), free(r), free(x);
}

static void mma_case(zt_dtype dt, size_t sh)
{
    const int64_t n = mma_shapes[sh].n, h = mma_shapes[sh].h, t = mma_shapes[sh].t;
    const int64_t hs = mma_shapes[sh].hs, c = h * hs, rows = n * t, nl = n * h * t;
    const bool causal = mma_shapes[sh].causal;
    const float p = mma_shapes[sh].p, scale = 1.0f / sqrtf((float)hs);
    const double thr = dt == ZT_BF16 ? THR_ATTN_BF16 : THR_ATTN_FP16;
    uint64_t hkeys[8];
    for (int64_t i = 0; i < n; i++)
        hkeys[i] = 2000 + 13 * (uint64_t)i;
    int32_t *hlen = NULL;
    if (mma_shapes[sh].lengths) {
        hlen = oc_rand_i32(n, 1, (int32_t)t + 1);
        hlen[0] = n > 1 ? (int32_t)t : (int32_t)(2 * t / 3 + 1);
        if (n > 2)
            hlen[2] = 0;
        if (n > 3)
            hlen[3] = 1;
    }
    float *hqkv = oc_rand_f32(rows * 3 * c, -1.5f, 1.5f), *hdy = oc_rand_f32(rows * c, -1, 1);
    float *nans = oc_filled(rows * 3 * c, NAN);
    const int64_t wn = zt_attn_flash_work_numel(n, h, t, hs);
    float *hw = oc_filled(wn, NAN);
    pair keys = oc_pair_new(hkeys, (size_t)n * sizeof *hkeys);
    pair len = oc_pair_new(hlen, hlen ? (size_t)n * sizeof *hlen : 0);
    pair qkv = oc_pair_dt(hqkv, rows * 3 * c, dt), dy = oc_pair_dt(hdy, rows * c, dt);
    pair y = oc_pair_dt(nans, rows * c, dt), lse = oc_pair_f32(nans, nl);
    pair dqkv = oc_pair_dt(nans, rows * 3 * c, dt), work = oc_pair_f32(hw, wn);
    zt_dropout_desc dc = {.seed = 0x243f6a8885a308d3ull, .site = 3, .step = 7,
                          .row_keys = keys.c, .n = n, .a = h, .b = t, .c = t,
                          .key_b = t + 1, .key_c = t + 2, .p = p};
    zt_dropout_desc dg = dc;
    dg.row_keys = keys.g;
    const int32_t *lc = hlen ? len.c : NULL, *lg = hlen ? len.g : NULL;
    char what[96];
    snprintf(what, sizeof what, "n=%lld h=%lld t=%lld hs=%lld causal=%d lengths=%s p=%g",
             (long long)n, (long long)h, (long long)t, (long long)hs, causal,
             hlen ? "yes" : "no", (double)p);
    tcase2 k;
    oc_begin2(&k, "attn_flash_forward", "mag", thr, dt, "norm", THR_F32, "%s", what);
    k.t.thr = thr; /* oc_begin2's ulp class is not this op's bound */
    oc.cpu.attn_flash_forward(&oc.cpu, dt, y.c, lse.c, work.c, qkv.c, n, h, t, c, scale, causal,
                              lc, &dc);
    oc.gpu.attn_flash_forward(&oc.gpu, dt, y.g, lse.g, work.g, qkv.g, n, h, t, c, scale, causal,
                              lg, &dg);
    /* The CPU's y and lse on both sides, so the backward is judged on its own. */
    pair y2 = oc_pair_new(y.c, y.bytes), lse2 = oc_pair_f32(lse.c, nl);
    tcase kb;
    oc_begin(&kb, "attn_flash_backward", "mag", thr, "%s %s", zt_dtype_name(dt), what);
    oc.cpu.attn_flash_backward(&oc.cpu, dt, dqkv.c, dy.c, y2.c, lse2.c, qkv.c, work.c, n, h, t,
                               c, scale, causal, lc, &dc);
    oc.gpu.attn_flash_backward(&oc.gpu, dt, dqkv.g, dy.g, y2.g, lse2.g, qkv.g, work.g, n, h, t,
                               c, scale, causal, lg, &dg);
    float *wq = oc_widen(qkv.c, dt, rows * 3 * c), *wdy = oc_widen(dy.c, dt, rows * c);
    float *wy = oc_widen(y.c, dt, rows * c);
    float *ymag = oc_filled(rows * c, 0.0f), *dmag = oc_filled(rows * 3 * c, 0.0f);
    mma_geom g = {.n = n, .h = h, .t = t, .hs = hs, .c = c, .causal = causal, .lengths = hlen,
                  .scale = scale, .p = p, .dscale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f,
                  .thr = thr, .eta = dt == ZT_F16 ? ldexp(1.0, -25) : 0.0, .drop = &dc};
    mma_mags(&g, wq, wdy, wy, lse.c, ymag, dmag);
    for (int64_t e = 0; e < rows * 3 * c; e++) {
        dmag[e] += (float)(2.0 * g.eta / thr);
        if (e < rows * c)
            ymag[e] += (float)(2.0 * g.eta / thr);
    }
    cmp_mag(&k.t, "y", &y, dt, ymag, rows * c);
    oc_cmp_f32(&k.f, "lse", &lse, nl);
    oc_end2(&k);
    cmp_mag(&kb, "dqkv", &dqkv, dt, dmag, rows * 3 * c);
    pair *ps[] = {&keys, &len, &qkv, &dy, &y, &lse, &dqkv, &work, &y2, &lse2};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        oc_pair_free(ps[i]);
    free(hlen), free(hqkv), free(hdy), free(nans), free(hw);
    free(wq), free(wdy), free(wy), free(ymag), free(dmag);
    oc_end(&kb);
}

void typed_attn_flash_mma(void)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof mma_shapes / sizeof mma_shapes[0]; s++)
            if (!oc.quick || !mma_shapes[s].big)
                mma_case(oc_typed_dts[d], s);
}
