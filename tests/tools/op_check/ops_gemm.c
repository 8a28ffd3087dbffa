/*
 * ops_gemm: op-check's cases for gemm and gemm_batched, run in every GEMM
 * setting, with the mag metric and, for 16-bit operands, a note against a
 * CPU GEMM of the rounded operands (main.c).
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/op_check/op_check.h"

/* One gemm or gemm_batched call: buffer sizes in floats and offsets of the
 * operands inside them (attention reads q, k and v out of one qkv row). */
typedef struct {
    bool batched, ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, ldb, ldc, sa, sb, sc, batch;
    int64_t na, nb, nc, oa, ob, oc;
} gemm_prob;

static void run_gemm(const zt_backend *be, const gemm_prob *q, const float *a, const float *b,
                     float *c)
{
    a += q->oa, b += q->ob, c += q->oc;
    if (q->batched)
        be->gemm_batched(be, q->ta, q->tb, q->m, q->n, q->k, q->alpha, a, q->lda, q->sa, b,
                         q->ldb, q->sb, q->beta, c, q->ldc, q->sc, q->batch);
    else
        be->gemm(be, ZT_F32, ZT_F32, q->ta, q->tb, q->m, q->n, q->k, q->alpha, a, q->lda, b, q->ldb,
                 q->beta, c, q->ldc);
}

static float *abs_copy(const float *x, int64_t n)
{
    float *y = oc_xmalloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        y[i] = fabsf(x[i]);
    return y;
}

static void round_to(float *x, int64_t n, zt_dtype dt)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = dt == ZT_BF16 ? zt_bf16_to_f32(zt_f32_to_bf16(x[i]))
                             : zt_f16_to_f32(zt_f32_to_f16(x[i]));
}

static void gemm_check(const gemm_prob *q, const char *what)
{
    char op[32];
    snprintf(op, sizeof op, "%s[%s]", q->batched ? "gemm_batched" : "gemm", oc.set->name);
    tcase k;
    oc_begin(&k, op, "mag", oc.set->thr, "%s", what);
    float *ha = oc_rand_f32(q->na, -1, 1), *hb = oc_rand_f32(q->nb, -1, 1);
    /* With beta == 0, C must not be read (BLAS; backend.h: "beta == 0 writes
     * zeros"): it starts as NaN. */
    float *hc = q->beta == 0.0f ? oc_filled(q->nc, NAN) : oc_rand_f32(q->nc, -1, 1);
    pair A = oc_pair_f32(ha, q->na), B = oc_pair_f32(hb, q->nb), C = oc_pair_f32(hc, q->nc);
    run_gemm(&oc.cpu, q, A.c, B.c, C.c);
    run_gemm(&oc.gpu, q, A.g, B.g, C.g);
    float *got = oc_fetch(&C);

    /* The error scale: the same product of absolute values. */
    float *aa = abs_copy(ha, q->na), *ab = abs_copy(hb, q->nb), *mag = abs_copy(hc, q->nc);
    gemm_prob qa = *q;
    qa.alpha = fabsf(q->alpha);
    qa.beta = fabsf(q->beta);
    run_gemm(&oc.cpu, &qa, aa, ab, mag);
    oc_add_err(&k, "C", oc_mag_err(C.c, got, mag, q->nc));

    if (oc.set->gemm_dt != ZT_F32) {
        round_to(ha, q->na, oc.set->gemm_dt);
        round_to(hb, q->nb, oc.set->gemm_dt);
        run_gemm(&oc.cpu, q, ha, hb, hc);
        snprintf(k.note, sizeof k.note, "vs %s-rounded operands %.1e", oc.set->name,
                 oc_mag_err(hc, got, mag, q->nc));
    }
    oc_pair_free(&A);
    oc_pair_free(&B);
    oc_pair_free(&C);
    free(ha);
    free(hb);
    free(hc);
    free(aa);
    free(ab);
    free(mag);
    free(got);
    oc_end(&k);
}

/* A plain (or batched, with `gap` floats between matrices) problem whose rows
 * are `pad` floats wider than the matrices. */
static gemm_prob dense_prob(bool batched, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            float alpha, float beta, int64_t pad, int64_t batch, int64_t gap)
{
    int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    gemm_prob q = {.batched = batched, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                   .alpha = alpha, .beta = beta, .batch = batched ? batch : 1};
    q.lda = (a_cols > 0 ? a_cols : 1) + pad;
    q.ldb = (b_cols > 0 ? b_cols : 1) + pad;
    q.ldc = (n > 0 ? n : 1) + pad;
    q.sa = a_rows * q.lda + gap;
    q.sb = b_rows * q.ldb + gap;
    q.sc = m * q.ldc + gap;
    q.na = q.sa * q.batch;
    q.nb = q.sb * q.batch;
    q.nc = q.sc * q.batch;
    return q;
}

static const char *tt(bool ta, bool tb)
{
    static const char *names[4] = {"nn", "nt", "tn", "tt"};
    return names[2 * ta + tb];
}

void op_gemm(void)
{
    static const struct {
        int64_t m, n, k, pad;
        float alpha, beta;
        bool big;
    } shapes[] = {
        {5, 7, 3, 3, 0.7f, -0.3f, false},
        {13, 4, 9, 0, 1.0f, 0.0f, false},
        {1, 1, 17, 1, -2.0f, 1.0f, false},
        {1, 4097, 33, 0, 1.0f, 0.0f, false},   /* a row of 1, odd width */
        {1023, 1, 511, 2, 1.0f, 1.0f, false},  /* a column of 1 */
        {131, 97, 263, 5, 0.25f, 0.5f, false}, /* strides wider than the rows */
        {257, 769, 65, 0, 1.0f, 0.0f, false},  /* no multiple of a tensor-core tile */
        {512, 2304, 768, 0, 1.0f, 0.0f, false}, /* GPT-2 small's qkv Linear */
        {768, 768, 4096, 0, 1.0f, 1.0f, false}, /* a weight gradient, accumulated */
        {4096, 4096, 4096, 0, 1.0f, 0.0f, true},
    };
    char what[120];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (shapes[s].big && oc.quick)
            continue;
        for (int t = 0; t < 4; t++) {
            bool ta = t / 2, tb = t % 2;
            gemm_prob q = dense_prob(false, ta, tb, shapes[s].m, shapes[s].n, shapes[s].k,
                                     shapes[s].alpha, shapes[s].beta, shapes[s].pad, 1, 0);
            snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld pad=%lld a=%g b=%g", tt(ta, tb),
                     (long long)q.m, (long long)q.n, (long long)q.k, (long long)shapes[s].pad,
                     (double)q.alpha, (double)q.beta);
            gemm_check(&q, what);
        }
    }
    /* k == 0 is C = beta C without reading A or B; m == 0 touches nothing. */
    gemm_prob q = dense_prob(false, false, false, 3, 5, 0, 1.0f, 2.0f, 1, 1, 0);
    gemm_check(&q, "nn m=3 n=5 k=0 b=2: C = beta C");
    q = dense_prob(false, true, false, 0, 5, 4, 1.0f, 0.0f, 0, 1, 0);
    q.nc = 8; /* a C the op must leave alone */
    gemm_check(&q, "tn m=0 n=5 k=4: nothing");
    typed_gemm();
}

/* Attention's batched GEMMs as models/layers.c calls them for one sample:
 * heads side by side in the rows of qkv (t, 3C) and y (t, C), scores (H, t, t). */
static void attn_gemm_cases(int64_t t, int64_t c, int64_t heads)
{
    int64_t hs = c / heads, tt2 = t * t;
    char what[120];
    const struct {
        const char *name;
        bool ta, tb;
        int64_t m, n, k;
        int64_t na, lda, sa, oa, nb, ldb, sb, ob, nc, ldc, sc, oc;
    } pats[] = {
        /* scores = Q K^T */
        {"S=QK^T", false, true, t, t, hs, t * 3 * c, 3 * c, hs, 0, t * 3 * c, 3 * c, hs, c,
         heads * tt2, t, tt2, 0},
        /* y = P V */
        {"y=PV", false, false, t, hs, t, heads * tt2, t, tt2, 0, t * 3 * c, 3 * c, hs, 2 * c,
         t * c, c, hs, 0},
        /* dV = P^T dy, into dqkv's v columns */
        {"dV=P^Tdy", true, false, t, hs, t, heads * tt2, t, tt2, 0, t * c, c, hs, 0,
         t * 3 * c, 3 * c, hs, 2 * c},
        /* dP = dy V^T */
        {"dP=dyV^T", false, true, t, t, hs, t * c, c, hs, 0, t * 3 * c, 3 * c, hs, 2 * c,
         heads * tt2, t, tt2, 0},
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        gemm_prob q = {.batched = true, .ta = pats[i].ta, .tb = pats[i].tb, .m = pats[i].m,
                       .n = pats[i].n, .k = pats[i].k, .alpha = 1.0f, .beta = 0.0f,
                       .lda = pats[i].lda, .ldb = pats[i].ldb, .ldc = pats[i].ldc,
                       .sa = pats[i].sa, .sb = pats[i].sb, .sc = pats[i].sc, .batch = heads,
                       .na = pats[i].na, .nb = pats[i].nb, .nc = pats[i].nc, .oa = pats[i].oa,
                       .ob = pats[i].ob, .oc = pats[i].oc};
        snprintf(what, sizeof what, "attention %s t=%lld C=%lld heads=%lld", pats[i].name,
                 (long long)t, (long long)c, (long long)heads);
        gemm_check(&q, what);
    }
}

void op_gemm_batched(void)
{
    static const struct {
        int64_t m, n, k, pad, batch, gap;
        float alpha, beta;
    } shapes[] = {
        {5, 7, 3, 1, 3, 5, 0.7f, -0.3f},
        {33, 17, 65, 0, 7, 0, 1.0f, 0.0f},
        {1, 1, 1, 0, 1, 0, 1.0f, 1.0f},
    };
    char what[120];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t / 2, tb = t % 2;
            gemm_prob q = dense_prob(true, ta, tb, shapes[s].m, shapes[s].n, shapes[s].k,
                                     shapes[s].alpha, shapes[s].beta, shapes[s].pad,
                                     shapes[s].batch, shapes[s].gap);
            snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld batch=%lld pad=%lld gap=%lld",
                     tt(ta, tb), (long long)q.m, (long long)q.n, (long long)q.k,
                     (long long)q.batch, (long long)shapes[s].pad, (long long)shapes[s].gap);
            gemm_check(&q, what);
        }
    attn_gemm_cases(16, 32, 4);
    attn_gemm_cases(17, 30, 3);
    attn_gemm_cases(128, 768, 12);
    if (!oc.quick)
        attn_gemm_cases(1024, 768, 12);
    gemm_prob q = dense_prob(true, false, false, 3, 4, 0, 1.0f, 2.0f, 0, 2, 3);
    gemm_check(&q, "nn m=3 n=4 k=0 batch=2 b=2: C = beta C");
    q = dense_prob(true, true, true, 3, 4, 0, 1.0f, 0.0f, 0, 2, 3);
    gemm_check(&q, "tt m=3 n=4 k=0 batch=2 b=0: C = 0");
    q = dense_prob(true, false, false, 3, 4, 2, 1.0f, 0.0f, 0, 0, 0);
    q.nc = 12; /* batch 0: the op must leave C alone */
    gemm_check(&q, "nn batch=0: nothing");
}
