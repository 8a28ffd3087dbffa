/*
 * ops_layers: op-check's cases for the transformer-layer ops: embedding,
 * sinusoidal positions, layernorm, attention softmax, keyed dropout and
 * mean pooling (GELU is with the element-wise ops, gemm_batched with gemm).
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/op_check/op_check.h"

void op_embedding_forward(void)
{
    const int64_t shapes[][3] = {{9, 5, 4}, {3000, 48, 37}, {1, 1, 1}, {1000, 33, 50257},
                                 {16384, 768, 65}}; /* rows, cols, vocab */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], vocab = shapes[s][2];
        if (oc.quick && rows * cols > (1 << 22))
            continue;
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            oc_begin(&k, "embedding_forward", "norm", THR_EXACT,
                     "rows=%lld cols=%lld vocab=%lld accumulate=%d", (long long)rows,
                     (long long)cols, (long long)vocab, acc);
            int32_t *hids = oc_rand_i32(rows, 0, (int32_t)vocab);
            float *ht = oc_rand_f32(vocab * cols, -1, 1);
            float *hy = acc ? oc_rand_f32(rows * cols, -1, 1) : oc_filled(rows * cols, NAN);
            pair ids = oc_pair_new(hids, (size_t)rows * sizeof *hids),
                 t = oc_pair_f32(ht, vocab * cols);
            pair y = oc_pair_f32(hy, rows * cols);
            oc.cpu.embedding_forward(&oc.cpu, ZT_F32, y.c, ids.c, t.c, rows, cols, acc);
            oc.gpu.embedding_forward(&oc.gpu, ZT_F32, y.g, ids.g, t.g, rows, cols, acc);
            oc_cmp_f32(&k, "y", &y, rows * cols);
            oc_pair_free(&ids);
            oc_pair_free(&t);
            oc_pair_free(&y);
            free(hids);
            free(ht);
            free(hy);
            oc_end(&k);
        }
    }
    typed_embedding_forward();
}

void op_embedding_backward(void)
{
    const int64_t shapes[][3] = {{40, 21, 6},       {3, 1, 2}, {4000, 70, 50},
                                 {2048, 64, 50257}, {16384, 768, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], vocab = shapes[s][2];
        if (oc.quick && rows * cols > (1 << 22))
            continue;
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            oc_begin(&k, "embedding_backward", "norm", THR_F32,
                     "rows=%lld cols=%lld vocab=%lld accumulate=%d, last row unused",
                     (long long)rows, (long long)cols, (long long)vocab, acc);
            /* ids below vocab - 1: the unused last row must become 0 or stay */
            int32_t *hids = oc_rand_i32(rows, 0, (int32_t)(vocab > 1 ? vocab - 1 : 1));
            float *hdy = oc_rand_f32(rows * cols, -1, 1);
            float *ht = acc ? oc_rand_f32(vocab * cols, -1, 1) : oc_filled(vocab * cols, NAN);
            pair ids = oc_pair_new(hids, (size_t)rows * sizeof *hids),
                 dy = oc_pair_f32(hdy, rows * cols);
            pair t = oc_pair_f32(ht, vocab * cols);
            oc.cpu.embedding_backward(&oc.cpu, ZT_F32, t.c, ids.c, dy.c, rows, cols, vocab, acc);
            oc.gpu.embedding_backward(&oc.gpu, ZT_F32, t.g, ids.g, dy.g, rows, cols, vocab, acc);
            oc_cmp_f32(&k, "dtable", &t, vocab * cols);
            oc_pair_free(&ids);
            oc_pair_free(&dy);
            oc_pair_free(&t);
            free(hids);
            free(hdy);
            free(ht);
            oc_end(&k);
        }
    }
    typed_embedding_backward();
}

void op_sinusoid_add(void)
{
    const int64_t shapes[][3] = {{3, 50, 33}, {1, 1, 1}, {4, 128, 96}, {1, 7, 5},
                                 {2, 2048, 768}}; /* n, t, cols */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], t = shapes[s][1], cols = shapes[s][2], total = n * t * cols;
        tcase k;
        oc_begin(&k, "sinusoid_add", "norm", THR_ULP, "n=%lld t=%lld cols=%lld", (long long)n,
                 (long long)t, (long long)cols);
        float *hy = oc_rand_f32(total, -1, 1);
        pair y = oc_pair_f32(hy, total);
        oc.cpu.sinusoid_add(&oc.cpu, ZT_F32, y.c, n, t, cols);
        oc.gpu.sinusoid_add(&oc.gpu, ZT_F32, y.g, n, t, cols);
        oc_cmp_f32(&k, "y", &y, total);
        oc_pair_free(&y);
        free(hy);
        oc_end(&k);
    }
    typed_sinusoid_add();
}

static const struct {
    int64_t rows, cols;
    float offset; /* far from 0 needs a two-pass variance */
} ln_shapes[] = {{4, 7, 0.0f},  {3, 33, 3.0f},    {2, 16, -100.0f}, {300, 130, 0.5f},
                 {1, 768, 0.0f}, {5, 1, 0.0f},    {2, 4099, 1.0f},  {4096, 768, 0.0f},
                 {16384, 768, 0.0f}};
#define N_LN_SHAPES (sizeof ln_shapes / sizeof ln_shapes[0])
#define LN_EPS 1e-5f

void op_layernorm_forward(void)
{
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        int64_t rows = ln_shapes[s].rows, cols = ln_shapes[s].cols, nx = rows * cols;
        if (oc.quick && nx > (1 << 22))
            continue;
        tcase k;
        oc_begin(&k, "layernorm_forward", "norm", THR_F32, "rows=%lld cols=%lld offset=%g",
                 (long long)rows, (long long)cols, (double)ln_shapes[s].offset);
        float *hx = oc_rand_f32(nx, ln_shapes[s].offset - 1, ln_shapes[s].offset + 1);
        float *hw = oc_rand_f32(cols, 0.5f, 1.5f), *hb = oc_rand_f32(cols, -0.5f, 0.5f);
        float *hy = oc_filled(nx, NAN), *hs = oc_filled(rows, NAN);
        pair x = oc_pair_f32(hx, nx), w = oc_pair_f32(hw, cols), b = oc_pair_f32(hb, cols);
        pair y = oc_pair_f32(hy, nx), mean = oc_pair_f32(hs, rows), rstd = oc_pair_f32(hs, rows);
        oc.cpu.layernorm_forward(&oc.cpu, ZT_F32, y.c, mean.c, rstd.c, x.c, w.c, b.c, rows, cols,
                                 LN_EPS);
        oc.gpu.layernorm_forward(&oc.gpu, ZT_F32, y.g, mean.g, rstd.g, x.g, w.g, b.g, rows, cols,
                                 LN_EPS);
        oc_cmp_f32(&k, "y", &y, nx);
        oc_cmp_f32(&k, "mean", &mean, rows);
        oc_cmp_f32(&k, "rstd", &rstd, rows);
        oc_pair_free(&x);
        oc_pair_free(&w);
        oc_pair_free(&b);
        oc_pair_free(&y);
        oc_pair_free(&mean);
        oc_pair_free(&rstd);
        free(hx);
        free(hw);
        free(hb);
        free(hy);
        free(hs);
        oc_end(&k);
    }
    typed_layernorm_forward();
}

void op_layernorm_backward(void)
{
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        int64_t rows = ln_shapes[s].rows, cols = ln_shapes[s].cols, nx = rows * cols;
        if (oc.quick && nx > (1 << 22))
            continue;
        float *hx = oc_rand_f32(nx, ln_shapes[s].offset - 1, ln_shapes[s].offset + 1);
        float *hw = oc_rand_f32(cols, 0.5f, 1.5f), *hb = oc_rand_f32(cols, -0.5f, 0.5f);
        float *hdy = oc_rand_f32(nx, -1, 1);
        float *hdx0 = oc_rand_f32(nx, -1, 1), *hdw0 = oc_rand_f32(cols, -1, 1);
        float *hdb0 = oc_rand_f32(cols, -1, 1);
        /* mean and rstd as the CPU forward wrote them, the same on both sides */
        float *y = oc_xmalloc((size_t)nx * sizeof *y), *hmean = oc_xmalloc((size_t)rows * 4);
        float *hrstd = oc_xmalloc((size_t)rows * 4);
        oc.cpu.layernorm_forward(&oc.cpu, ZT_F32, y, hmean, hrstd, hx, hw, hb, rows, cols, LN_EPS);
        pair x = oc_pair_f32(hx, nx), w = oc_pair_f32(hw, cols), dy = oc_pair_f32(hdy, nx);
        pair mean = oc_pair_f32(hmean, rows), rstd = oc_pair_f32(hrstd, rows);
        /* acc_dx, acc_params; the last is dx == dy in place */
        const int variants[5][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}};
        for (int v = 0; v < 5; v++) {
            bool acc_dx = variants[v][0], acc_p = variants[v][1], in_place = variants[v][2];
            tcase k;
            oc_begin(&k, "layernorm_backward", "norm", THR_F32,
                     "rows=%lld cols=%lld acc_dx=%d acc_params=%d%s", (long long)rows,
                     (long long)cols, acc_dx, acc_p, in_place ? " dx==dy" : "");
            float *nan_x = oc_filled(nx, NAN), *nan_c = oc_filled(cols, NAN);
            pair dx = oc_pair_f32(in_place ? hdy : acc_dx ? hdx0 : nan_x, nx);
            pair dw = oc_pair_f32(acc_p ? hdw0 : nan_c, cols);
            pair db = oc_pair_f32(acc_p ? hdb0 : nan_c, cols);
            const float *dy_c = in_place ? dx.c : dy.c, *dy_g = in_place ? dx.g : dy.g;
            oc.cpu.layernorm_backward(&oc.cpu, ZT_F32, dx.c, dw.c, db.c, dy_c, x.c, mean.c, rstd.c,
                                      w.c, rows, cols, acc_dx, acc_p);
            oc.gpu.layernorm_backward(&oc.gpu, ZT_F32, dx.g, dw.g, db.g, dy_g, x.g, mean.g, rstd.g,
                                      w.g, rows, cols, acc_dx, acc_p);
            oc_cmp_f32(&k, "dx", &dx, nx);
            oc_cmp_f32(&k, "dw", &dw, cols);
            oc_cmp_f32(&k, "db", &db, cols);
            oc_pair_free(&dx);
            oc_pair_free(&dw);
            oc_pair_free(&db);
            free(nan_x);
            free(nan_c);
            oc_end(&k);
        }
        oc_pair_free(&x);
        oc_pair_free(&w);
        oc_pair_free(&dy);
        oc_pair_free(&mean);
        oc_pair_free(&rstd);
        free(hx);
        free(hw);
        free(hb);
        free(hdy);
        free(hdx0);
        free(hdw0);
        free(hdb0);
        free(y);
        free(hmean);
        free(hrstd);
    }
    typed_layernorm_backward();
}


/* Attention score shapes: lengths (when not NULL) include 0 (an all-masked
 * row), 1 and t. */
typedef struct {
    int64_t n, h, t;
    bool causal, lengths, big;
    float scale, spread;
} attn_shape;

static const attn_shape attn_shapes[] = {
    {3, 2, 5, false, true, false, 0.6f, 2.0f},    {3, 2, 5, true, true, false, 0.6f, 2.0f},
    {6, 4, 50, true, true, false, 0.3f, 4.0f},     {6, 4, 50, false, true, false, 0.3f, 4.0f},
    {2, 3, 1, true, false, false, 1.0f, 2.0f},     {4, 2, 129, true, false, false, 0.125f, 4.0f},
    {2, 2, 33, false, false, false, 1.0f, 1000.0f}, {2, 4, 300, false, true, false, 0.125f, 4.0f},
    {2, 12, 1024, true, false, true, 0.125f, 8.0f},
};

static int32_t *attn_lengths(const attn_shape *a)
{
    int32_t *len = oc_rand_i32(a->n, 1, (int32_t)a->t + 1);
    if (a->n > 1)
        len[0] = (int32_t)a->t;
    if (a->n > 2)
        len[2] = 0;
    if (a->n > 3)
        len[3] = 1;
    return len;
}

void op_attn_softmax_forward(void)
{
    for (size_t s = 0; s < sizeof attn_shapes / sizeof attn_shapes[0]; s++) {
        const attn_shape *a = &attn_shapes[s];
        if (oc.quick && a->big)
            continue;
        int64_t total = a->n * a->h * a->t * a->t;
        tcase k;
        oc_begin(&k, "attn_softmax_forward", "norm", THR_F32,
                 "n=%lld h=%lld t=%lld causal=%d lengths=%s scale=%g spread=%g", (long long)a->n,
                 (long long)a->h, (long long)a->t, a->causal, a->lengths ? "yes" : "no",
                 (double)a->scale, (double)a->spread);
        float *hatt = oc_rand_f32(total, -a->spread, a->spread);
        int32_t *hlen = a->lengths ? attn_lengths(a) : NULL;
        pair att = oc_pair_f32(hatt, total);
        pair len = oc_pair_new(hlen, a->lengths ? (size_t)a->n * sizeof *hlen : 0);
        oc.cpu.attn_softmax_forward(&oc.cpu, att.c, a->n, a->h, a->t, a->scale, a->causal,
                                    a->lengths ? len.c : NULL);
        oc.gpu.attn_softmax_forward(&oc.gpu, att.g, a->n, a->h, a->t, a->scale, a->causal,
                                    a->lengths ? len.g : NULL);
        oc_cmp_f32(&k, "p", &att, total);
        oc_pair_free(&att);
        oc_pair_free(&len);
        free(hatt);
        free(hlen);
        oc_end(&k);
    }
}

void op_attn_softmax_backward(void)
{
    for (size_t s = 0; s < sizeof attn_shapes / sizeof attn_shapes[0]; s++) {
        const attn_shape *a = &attn_shapes[s];
        if (oc.quick && a->big)
            continue;
        int64_t total = a->n * a->h * a->t * a->t, rows = a->n * a->h * a->t;
        tcase k;
        oc_begin(&k, "attn_softmax_backward", "norm", THR_F32,
                 "rows=%lld t=%lld from causal=%d lengths=%s scale=%g", (long long)rows,
                 (long long)a->t, a->causal, a->lengths ? "yes" : "no", (double)a->scale);
        /* p from the CPU forward (masked zeros included), the same on both sides */
        float *hp = oc_rand_f32(total, -a->spread, a->spread), *hd = oc_rand_f32(total, -1, 1);
        int32_t *hlen = a->lengths ? attn_lengths(a) : NULL;
        oc.cpu.attn_softmax_forward(&oc.cpu, hp, a->n, a->h, a->t, a->scale, a->causal, hlen);
        pair p = oc_pair_f32(hp, total), d = oc_pair_f32(hd, total);
        oc.cpu.attn_softmax_backward(&oc.cpu, d.c, p.c, rows, a->t, a->scale);
        oc.gpu.attn_softmax_backward(&oc.gpu, d.g, p.g, rows, a->t, a->scale);
        oc_cmp_f32(&k, "dscores", &d, total);
        oc_pair_free(&p);
        oc_pair_free(&d);
        free(hp);
        free(hd);
        free(hlen);
        oc_end(&k);
    }
}

static void dropout_case(int64_t n, int64_t a, int64_t b, int64_t c, int64_t key_b,
                         int64_t key_c, float p, bool in_place)
{
    int64_t total = n * a * b * c;
    tcase k;
    oc_begin(&k, "dropout", "norm", THR_EXACT,
             "(%lld,%lld,%lld,%lld) keys (%lld,%lld) p=%g%s; inf/NaN/-0 in x", (long long)n,
             (long long)a, (long long)b, (long long)c, (long long)key_b, (long long)key_c,
             (double)p, in_place ? " in place" : "");
    uint64_t *hkeys = oc_xmalloc((size_t)n * sizeof *hkeys);
    for (int64_t s = 0; s < n; s++)
        hkeys[s] = s == 1 ? (1ull << 40) + 3 : 1000 + 7 * (uint64_t)s;
    float *hx = oc_rand_specials(total, -1, 1), *hy = oc_filled(total, 7.0f);
    pair keys = oc_pair_new(hkeys, (size_t)n * sizeof *hkeys), x = oc_pair_f32(hx, total);
    pair y = oc_pair_f32(hy, total);
    zt_dropout_desc dc = {.seed = 0x9e3779b97f4a7c15ull, .site = 17, .step = 123456789,
                          .row_keys = keys.c, .n = n, .a = a, .b = b, .c = c, .key_b = key_b,
                          .key_c = key_c, .p = p};
    zt_dropout_desc dg = dc;
    dg.row_keys = keys.g;
    const pair *out = in_place ? &x : &y;
    oc.cpu.dropout(&oc.cpu, ZT_F32, out->c, x.c, &dc);
    oc.gpu.dropout(&oc.gpu, ZT_F32, out->g, x.g, &dg);
    oc_cmp_f32(&k, "y", out, total);
    oc_pair_free(&keys);
    oc_pair_free(&x);
    oc_pair_free(&y);
    free(hkeys);
    free(hx);
    free(hy);
    oc_end(&k);
}

void op_dropout(void)
{
    dropout_case(2, 3, 100, 70, 100, 70, 0.0f, false); /* p = 0: an exact copy */
    dropout_case(4, 10, 50, 50, 64, 60, 0.3f, false);  /* key extents beyond the tensor */
    dropout_case(4, 10, 50, 50, 64, 60, 0.3f, true);
    dropout_case(2, 3, 12, 9, 12, 9, 0.5f, false);
    dropout_case(1, 1, 1, 1, 1, 1, 0.9f, false);
    dropout_case(3, 12, 33, 33, 64, 64, 0.1f, true);   /* attention weights, padded keys */
    if (!oc.quick)
        dropout_case(16, 1, 1024, 768, 1024, 768, 0.1f, true); /* GPT-2 small residual */
    typed_dropout();
}

static void mean_pool_case(int64_t n, int64_t t, int64_t cols, bool with_lengths)
{
    int32_t *hlen = NULL;
    if (with_lengths) {
        hlen = oc_rand_i32(n, 1, (int32_t)t + 1);
        hlen[0] = 1;
        if (n > 1)
            hlen[1] = (int32_t)t;
    }
    float *hx = oc_rand_f32(n * t * cols, -1, 3), *hdy = oc_rand_f32(n * cols, -1, 1);
    float *hy = oc_filled(n * cols, NAN), *hdx = oc_filled(n * t * cols, NAN);
    pair len = oc_pair_new(hlen, with_lengths ? (size_t)n * sizeof *hlen : 0);
    pair x = oc_pair_f32(hx, n * t * cols), y = oc_pair_f32(hy, n * cols);
    pair dy = oc_pair_f32(hdy, n * cols), dx = oc_pair_f32(hdx, n * t * cols);
    const int32_t *lc = with_lengths ? len.c : NULL, *lg = with_lengths ? len.g : NULL;
    tcase k;
    oc_begin(&k, "mean_pool_forward", "norm", THR_F32, "n=%lld t=%lld cols=%lld lengths=%s",
             (long long)n, (long long)t, (long long)cols, with_lengths ? "yes" : "no");
    oc.cpu.mean_pool_forward(&oc.cpu, ZT_F32, y.c, x.c, lc, n, t, cols);
    oc.gpu.mean_pool_forward(&oc.gpu, ZT_F32, y.g, x.g, lg, n, t, cols);
    oc_cmp_f32(&k, "y", &y, n * cols);
    oc_end(&k);
    oc_begin(&k, "mean_pool_backward", "norm", THR_EXACT, "n=%lld t=%lld cols=%lld lengths=%s",
             (long long)n, (long long)t, (long long)cols, with_lengths ? "yes" : "no");
    oc.cpu.mean_pool_backward(&oc.cpu, ZT_F32, dx.c, dy.c, lc, n, t, cols);
    oc.gpu.mean_pool_backward(&oc.gpu, ZT_F32, dx.g, dy.g, lg, n, t, cols);
    oc_cmp_f32(&k, "dx", &dx, n * t * cols);
    oc_end(&k);
    oc_pair_free(&len);
    oc_pair_free(&x);
    oc_pair_free(&y);
    oc_pair_free(&dy);
    oc_pair_free(&dx);
    free(hlen);
    free(hx);
    free(hdy);
    free(hy);
    free(hdx);
}

/* Forward and backward are one registry entry each but share their cases. */
void op_mean_pool(void)
{
    mean_pool_case(3, 6, 10, true);
    mean_pool_case(3, 6, 10, false);
    mean_pool_case(8, 64, 80, true);
    mean_pool_case(1, 1, 1, false);
    if (!oc.quick)
        mean_pool_case(16, 512, 768, true);
    typed_mean_pool();
}
