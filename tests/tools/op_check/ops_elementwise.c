/*
 * ops_elementwise: op-check's cases for the element-wise and row ops: bias_add,
 * bias_grad, relu, cross-entropy, scale, axpy, sum_squares, has_inf_nan,
 * convert (every dtype pair) and GELU.
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/op_check/op_check.h"

void op_bias_add(void)
{
    const int64_t shapes[][2] = {{3, 5}, {1, 1}, {1, 4097}, {300, 211}, {4096, 768}, {16384, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        tcase k;
        oc_begin(&k, "bias_add", "norm", THR_EXACT, "rows=%lld cols=%lld", (long long)rows,
                 (long long)cols);
        float *hy = oc_rand_f32(rows * cols, -1, 1), *hb = oc_rand_f32(cols, -1, 1);
        pair y = oc_pair_f32(hy, rows * cols), b = oc_pair_f32(hb, cols);
        oc.cpu.bias_add(&oc.cpu, ZT_F32, y.c, b.c, rows, cols);
        oc.gpu.bias_add(&oc.gpu, ZT_F32, y.g, b.g, rows, cols);
        oc_cmp_f32(&k, "y", &y, rows * cols);
        oc_pair_free(&y);
        oc_pair_free(&b);
        free(hy);
        free(hb);
        oc_end(&k);
    }
    typed_bias_add();
}

void op_bias_grad(void)
{
    const int64_t shapes[][2] = {{4, 3},    {7, 64},    {5, 130},  {700, 97},
                                 {1000, 1}, {1, 4097},  {16384, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        if (oc.quick && rows * cols > (1 << 22))
            continue;
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            oc_begin(&k, "bias_grad", "norm", THR_F32, "rows=%lld cols=%lld accumulate=%d",
                     (long long)rows, (long long)cols, acc);
            float *hdy = oc_rand_f32(rows * cols, -1, 1);
            /* Without accumulate the old value must not be read. */
            float *hdb = acc ? oc_rand_f32(cols, -1, 1) : oc_filled(cols, NAN);
            pair dy = oc_pair_f32(hdy, rows * cols), db = oc_pair_f32(hdb, cols);
            oc.cpu.bias_grad(&oc.cpu, ZT_F32, db.c, dy.c, rows, cols, acc);
            oc.gpu.bias_grad(&oc.gpu, ZT_F32, db.g, dy.g, rows, cols, acc);
            oc_cmp_f32(&k, "dbias", &db, cols);
            oc_pair_free(&dy);
            oc_pair_free(&db);
            free(hdy);
            free(hdb);
            oc_end(&k);
        }
    }
    typed_bias_grad();
}

static const int64_t elementwise_sizes[] = {1, 17, 100003, (1 << 22) + 1};
#define N_ELEMENTWISE (int)(sizeof elementwise_sizes / sizeof elementwise_sizes[0])

void op_relu_forward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (oc.quick && n > 200000)
            continue;
        tcase k;
        oc_begin(&k, "relu_forward", "norm", THR_EXACT,
                 "n=%lld with NaN/inf/-0; in place too (NaN stays NaN)", (long long)n);
        float *hx = oc_rand_specials(n, -1, 1), *hy = oc_filled(n, 7.0f);
        pair x = oc_pair_f32(hx, n), y = oc_pair_f32(hy, n), xi = oc_pair_f32(hx, n);
        oc.cpu.relu_forward(&oc.cpu, y.c, x.c, n);
        oc.gpu.relu_forward(&oc.gpu, y.g, x.g, n);
        oc.cpu.relu_forward(&oc.cpu, xi.c, xi.c, n);
        oc.gpu.relu_forward(&oc.gpu, xi.g, xi.g, n);
        oc_cmp_f32(&k, "y", &y, n);
        oc_cmp_f32(&k, "in place", &xi, n);
        oc_pair_free(&x);
        oc_pair_free(&y);
        oc_pair_free(&xi);
        free(hx);
        free(hy);
        oc_end(&k);
    }
}

void op_relu_backward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (oc.quick && n > 200000)
            continue;
        tcase k;
        oc_begin(&k, "relu_backward", "norm", THR_EXACT,
                 "n=%lld, inf dy at inactive units stays 0; in place too", (long long)n);
        float *hy = oc_rand_f32(n, -1, 1), *hdy = oc_rand_f32(n, -1, 1), *hdx = oc_filled(n, 7.0f);
        for (int64_t i = 0; i < n; i++)
            hy[i] = hy[i] > 0.0f ? hy[i] : 0.0f; /* a ReLU output */
        for (int64_t i = 0; i < n; i += 97)
            if (hy[i] == 0.0f)
                hdy[i] = i % 2 ? INFINITY : -INFINITY;
        pair y = oc_pair_f32(hy, n), dy = oc_pair_f32(hdy, n), dx = oc_pair_f32(hdx, n);
        pair di = oc_pair_f32(hdy, n);
        oc.cpu.relu_backward(&oc.cpu, dx.c, dy.c, y.c, n);
        oc.gpu.relu_backward(&oc.gpu, dx.g, dy.g, y.g, n);
        oc.cpu.relu_backward(&oc.cpu, di.c, di.c, y.c, n);
        oc.gpu.relu_backward(&oc.gpu, di.g, di.g, y.g, n);
        oc_cmp_f32(&k, "dx", &dx, n);
        oc_cmp_f32(&k, "in place", &di, n);
        oc_pair_free(&y);
        oc_pair_free(&dy);
        oc_pair_free(&dx);
        oc_pair_free(&di);
        free(hy);
        free(hdy);
        free(hdx);
        oc_end(&k);
    }
}

/* Logits rows of ld floats, the padding NaN (never read); in_place passes
 * the logits as dlogits on both backends. */
static void xent_case(int64_t rows, int64_t classes, int64_t ld, float spread, float dscale,
                      int32_t ignore, int64_t ignore_every, bool grad, bool in_place)
{
    tcase k;
    oc_begin(&k, "xent_forward_backward", "norm", THR_F32,
             "rows=%lld classes=%lld ld=%lld spread=%g dscale=%g ignore every %lld%s%s",
             (long long)rows, (long long)classes, (long long)ld, (double)spread, (double)dscale,
             (long long)ignore_every, grad ? "" : ", no dlogits", in_place ? ", in place" : "");
    float *hl = oc_rand_f32(rows * ld, -spread, spread);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = classes; j < ld; j++)
            hl[r * ld + j] = NAN;
    int32_t *hlab = oc_rand_i32(rows, 0, (int32_t)classes);
    for (int64_t r = 0; ignore_every && r < rows; r++)
        if (r % ignore_every == ignore_every - 1)
            hlab[r] = ignore;
    float *hd = in_place ? hl : oc_filled(rows * ld, 7.0f); /* ignored rows, padding: zeros */
    pair l = oc_pair_f32(hl, rows * ld), lab = oc_pair_new(hlab, (size_t)rows * sizeof *hlab);
    pair d = oc_pair_f32(hd, rows * ld);
    double lc = oc.cpu.xent_forward_backward(&oc.cpu, ZT_F32, in_place ? d.c : l.c, lab.c, rows,
                                             classes, ld, ignore, dscale, grad ? d.c : NULL);
    double lg = oc.gpu.xent_forward_backward(&oc.gpu, ZT_F32, in_place ? d.g : l.g, lab.g, rows,
                                             classes, ld, ignore, dscale, grad ? d.g : NULL);
    oc_add_err(&k, "loss", oc_rel_err(lc, lg));
    if (grad)
        oc_cmp_f32(&k, "dlogits", &d, rows * ld);
    snprintf(k.note, sizeof k.note, "loss %.10g vs cpu %.10g", lg, lc);
    oc_pair_free(&l);
    oc_pair_free(&lab);
    oc_pair_free(&d);
    free(hl);
    free(hlab);
    if (!in_place)
        free(hd);
    oc_end(&k);
}

void op_xent(void)
{
    xent_case(37, 11, 11, 3.0f, 1.0f, -100, 5, true, false);
    xent_case(5, 1, 1, 3.0f, 0.5f, -100, 0, true, false); /* one class: loss 0, gradient 0 */
    xent_case(1300, 53, 53, 4.0f, 0.01f, -100, 5, true, false);
    xent_case(9, 7, 7, 1000.0f, -2.0f, -1, 4, true, false); /* needs the max subtraction */
    /* GPT-lite char logits, padded as the model pads them, in place as trained */
    xent_case(16384, 65, 128, 5.0f, 1.0f / 16384, -100, 0, true, true);
    xent_case(4, 50257, 50257, 10.0f, 0.25f, -100, 3, true, false); /* GPT-2 BPE vocabulary */
    xent_case(4, 50257, 50304, 10.0f, 0.25f, -100, 3, true, true);  /* ... padded, in place */
    xent_case(3, 5000, 5000, 300.0f, 1.0f, -100, 0, true, true); /* rescaled running sums */
    xent_case(6, 13, 128, 2.0f, 1.0f, -100, 1, true, false);     /* every row ignored: loss 0 */
    xent_case(1300, 53, 53, 4.0f, 1.0f, -100, 5, false, false);  /* evaluation: no gradient */
    typed_xent();
}

void op_scale(void)
{
    const int64_t sizes[] = {0, 5, 100003, 1 << 22};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        if (oc.quick && n > 200000)
            continue;
        tcase k;
        oc_begin(&k, "scale", "norm", THR_EXACT, "n=%lld a=-0.375, and a=0 over inf/NaN",
                 (long long)n);
        float *hx = oc_rand_specials(n, -2, 2);
        pair x = oc_pair_f32(hx, n), z = oc_pair_f32(hx, n);
        oc.cpu.scale(&oc.cpu, x.c, -0.375f, n);
        oc.gpu.scale(&oc.gpu, x.g, -0.375f, n);
        oc.cpu.scale(&oc.cpu, z.c, 0.0f, n);
        oc.gpu.scale(&oc.gpu, z.g, 0.0f, n);
        oc_cmp_f32(&k, "a=-0.375", &x, n);
        oc_cmp_f32(&k, "a=0", &z, n);
        oc_pair_free(&x);
        oc_pair_free(&z);
        free(hx);
        oc_end(&k);
    }
}

void op_axpy(void)
{
    const int64_t sizes[] = {0, 5, 100003, 1 << 22};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        if (oc.quick && n > 200000)
            continue;
        tcase k;
        oc_begin(&k, "axpy", "norm", THR_ULP, "n=%lld a=1.5 and a=-0.3", (long long)n);
        float *hx = oc_rand_f32(n, -2, 2), *hy = oc_rand_f32(n, -2, 2);
        pair x = oc_pair_f32(hx, n), y = oc_pair_f32(hy, n), y2 = oc_pair_f32(hy, n);
        oc.cpu.axpy(&oc.cpu, ZT_F32, y.c, 1.5f, x.c, n);
        oc.gpu.axpy(&oc.gpu, ZT_F32, y.g, 1.5f, x.g, n);
        oc.cpu.axpy(&oc.cpu, ZT_F32, y2.c, -0.3f, x.c, n);
        oc.gpu.axpy(&oc.gpu, ZT_F32, y2.g, -0.3f, x.g, n);
        oc_cmp_f32(&k, "a=1.5", &y, n);
        oc_cmp_f32(&k, "a=-0.3", &y2, n);
        oc_pair_free(&x);
        oc_pair_free(&y);
        oc_pair_free(&y2);
        free(hx);
        free(hy);
        oc_end(&k);
    }
    typed_axpy();
}

void op_sum_squares(void)
{
    /* Around the 4096-element chunk, several passes of chunks, and (full run)
     * 64 Mi elements. */
    const int64_t sizes[] = {0, 1, 4095, 4096, 4097, 1000003, 3 * 4096 * 256 + 17, 1 << 26};
    for (int dt = 0; dt < ZT_NDTYPES; dt++) {
        tcase k;
        oc_begin(&k, "sum_squares", "rel", THR_F64, "%s n=0..%s%s", zt_dtype_name(dt),
                 oc.quick ? "3145745" : "67108864", dt == ZT_F32 ? ", 2^100 and 2^101" : "");
        char label[32];
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            if (oc.quick && n > (1 << 22))
                continue;
            float *x = oc_rand_f32(n, -3, 3);
            void *h = oc_to_dtype(x, n, dt);
            pair p = oc_pair_new(h, (size_t)n * zt_dtype_size(dt));
            double rc = oc.cpu.sum_squares(&oc.cpu, p.c, dt, n);
            double rg = oc.gpu.sum_squares(&oc.gpu, p.g, dt, n);
            snprintf(label, sizeof label, "n=%lld", (long long)n);
            oc_add_err(&k, label, oc_rel_err(rc, rg));
            oc_pair_free(&p);
            free(x);
            free(h);
        }
        if (dt == ZT_F32) {
            /* Squares that overflow fp32 still add up in float64: 5 * 2^200. */
            const float big[2] = {0x1p100f, -0x1p101f};
            pair p = oc_pair_f32(big, 2);
            oc_add_err(&k, "2^100,2^101",
                       oc_rel_err(ldexp(5.0, 200), oc.gpu.sum_squares(&oc.gpu, p.g, ZT_F32, 2)));
            oc_pair_free(&p);
        }
        oc_end(&k);
    }
}

void op_has_inf_nan(void)
{
    const int64_t sizes[] = {1, 9, 100003, (1 << 24) + 5};
    /* inf, -inf, NaN, -NaN and the largest finite value, per dtype */
    const uint32_t bad[ZT_NDTYPES][4] = {{0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u},
                                         {0x7c00u, 0xfc00u, 0x7e00u, 0xfe00u},
                                         {0x7f80u, 0xff80u, 0x7fc0u, 0xffc0u}};
    const uint32_t max_finite[ZT_NDTYPES] = {0x7f7fffffu, 0x7bffu, 0x7f7fu};
    const float range[ZT_NDTYPES] = {1e30f, 6e4f, 1e30f};
    for (int dt = 0; dt < ZT_NDTYPES; dt++) {
        size_t es = zt_dtype_size(dt);
        tcase k;
        oc_begin(&k, "has_inf_nan", "ndiff", THR_EXACT,
                 "%s n=0..%lld: max finite; +-inf, +-NaN at first/middle/last", zt_dtype_name(dt),
                 (long long)sizes[oc.quick ? 2 : 3]);
        if (oc.gpu.has_inf_nan(&oc.gpu, NULL, dt, 0))
            oc_miss(&k, "n=0 said true");
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t n = sizes[s];
            if (oc.quick && n > 200000)
                continue;
            float *x = oc_rand_f32(n, -range[dt], range[dt]);
            void *h = oc_to_dtype(x, n, dt);
            memcpy((char *)h + (size_t)(n / 3) * es, &max_finite[dt], es);
            pair p = oc_pair_new(h, (size_t)n * es);
            bool rc = oc.cpu.has_inf_nan(&oc.cpu, p.c, dt, n);
            bool rg = oc.gpu.has_inf_nan(&oc.gpu, p.g, dt, n);
            if (rc || rg)
                oc_miss(&k, "n=%lld finite: cuda %d, cpu %d", (long long)n, rg, rc);
            const int64_t where[3] = {0, n / 2, n - 1};
            for (int b = 0; b < 4; b++)
                for (int w = 0; w < 3; w++) {
                    size_t off = (size_t)where[w] * es;
                    /* bit patterns from the (little-endian) low bytes of a uint32 */
                    oc.cpu.copy_h2d(&oc.cpu, (char *)p.c + off, &bad[dt][b], es);
                    oc.gpu.copy_h2d(&oc.gpu, (char *)p.g + off, &bad[dt][b], es);
                    rc = oc.cpu.has_inf_nan(&oc.cpu, p.c, dt, n);
                    rg = oc.gpu.has_inf_nan(&oc.gpu, p.g, dt, n);
                    if (!rc || !rg)
                        oc_miss(&k, "n=%lld 0x%x at %lld: cuda %d, cpu %d", (long long)n,
                                (unsigned)bad[dt][b], (long long)where[w], rg, rc);
                    oc.cpu.copy_h2d(&oc.cpu, (char *)p.c + off, (char *)h + off, es);
                    oc.gpu.copy_h2d(&oc.gpu, (char *)p.g + off, (char *)h + off, es);
                }
            oc_pair_free(&p);
            free(x);
            free(h);
        }
        oc_end(&k);
    }
}

/* Values where conversion rules show: zeros, infinities, NaNs (one signalling),
 * fp16's overflow threshold and subnormals with their ties, bf16's ties and
 * largest values, an fp32 subnormal; then uniform values, and small ones. */
static float *convert_values(int64_t n, int64_t rotate)
{
    static const uint32_t sp[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00000u, 0x7fa00000u, /* sNaN */
        0x477fe000u, /* 65504, fp16 max */
        0x477fefffu, /* just below 65520: rounds to 65504 */
        0x477ff000u, /* 65520: rounds to inf */
        0xc788b800u, /* -70000 */
        0x38800000u, /* 2^-14, fp16's smallest normal */
        0x33800000u, /* 2^-24, fp16's smallest subnormal */
        0x33000000u, /* 2^-25, a tie: rounds to 0 */
        0x33400000u, /* 1.5 * 2^-25: rounds to 2^-24 */
        0x00000005u, /* fp32 subnormal */
        0x3f801000u, /* 1 + 2^-11: fp16 tie to 1 */
        0x3f803000u, /* 1 + 3 * 2^-11: fp16 tie up */
        0x3f808000u, /* 1 + 2^-8: bf16 tie to 1 */
        0x3f818000u, /* 1 + 3 * 2^-8: bf16 tie up */
        0x7f7f7fffu, /* rounds to bf16's largest finite */
        0x7f7f8000u, /* ties to bf16 inf */
        0x7f7fffffu, /* fp32 max */
    };
    const int64_t nsp = (int64_t)(sizeof sp / sizeof sp[0]);
    float *x = oc_rand_f32(n, -100, 100);
    for (int64_t i = n / 2; i < n; i += 3)
        x[i] *= 1e-6f; /* fp16 subnormal range */
    for (int64_t i = 0; i < nsp && i < n; i++)
        memcpy(&x[i], &sp[(i + rotate) % nsp], sizeof(float));
    return x;
}

static void convert_run(tcase *k, zt_dtype sdt, zt_dtype ddt, int64_t n, float alpha, bool acc,
                        bool in_place)
{
    float *s32 = convert_values(n, 0), *d32 = convert_values(n, 7);
    void *hs = oc_to_dtype(s32, n, sdt), *hd = oc_to_dtype(d32, n, ddt);
    pair d = oc_pair_new(hd, (size_t)n * zt_dtype_size(ddt));
    pair s = in_place ? d : oc_pair_new(hs, (size_t)n * zt_dtype_size(sdt));
    oc.cpu.convert(&oc.cpu, d.c, ddt, s.c, sdt, n, alpha, acc);
    oc.gpu.convert(&oc.gpu, d.g, ddt, s.g, sdt, n, alpha, acc);
    char label[48];
    snprintf(label, sizeof label, "n=%lld alpha=%g", (long long)n, (double)alpha);
    oc_cmp_bits(k, label, &d, ddt, n);
    if (!in_place)
        oc_pair_free(&s);
    oc_pair_free(&d);
    free(s32);
    free(d32);
    free(hs);
    free(hd);
}

void op_convert(void)
{
    const int64_t sizes[] = {1, 7, 50001, (1 << 22) + 3};
    /* 1/3 is not a power of two: only there does `dst + alpha * src` with two
     * roundings differ from one fused multiply-add */
    const float alphas[] = {1.0f, -0.5f, 1024.0f, 1.0f / 3.0f};
    const int na = (int)(sizeof alphas / sizeof alphas[0]);
    int ns = oc.quick ? 3 : 4;
    for (int sdt = 0; sdt < ZT_NDTYPES; sdt++)
        for (int ddt = 0; ddt < ZT_NDTYPES; ddt++)
            for (int acc = 0; acc < 2; acc++) {
                tcase k;
                oc_begin(&k, "convert", "ndiff", THR_EXACT,
                         "%s -> %s accumulate=%d alpha 1,-0.5,1024,1/3 n=1..%lld",
                         zt_dtype_name(sdt), zt_dtype_name(ddt), acc, (long long)sizes[ns - 1]);
                for (int s = 0; s < ns; s++)
                    for (int a = 0; a < na; a++)
                        convert_run(&k, sdt, ddt, sizes[s], alphas[a], acc, false);
                oc_end(&k);
            }
    for (int dt = 0; dt < ZT_NDTYPES; dt++)
        for (int acc = 0; acc < 2; acc++) {
            tcase k;
            oc_begin(&k, "convert", "ndiff", THR_EXACT, "%s in place accumulate=%d alpha 1..1/3",
                     zt_dtype_name(dt), acc);
            for (int a = 0; a < na; a++)
                convert_run(&k, dt, dt, sizes[2], alphas[a], acc, true);
            oc_end(&k);
        }
}


/* GELU inputs: the curved middle, the saturated tails and a few large values. */
static float *gelu_inputs(int64_t n)
{
    float *x = oc_rand_f32(n, -6, 6);
    const float sp[] = {-20.0f, 20.0f, -100.0f, 100.0f, 0.0f, -0.0f};
    for (int64_t i = 0; i < 6 && i < n; i++)
        x[(i * 7919) % n] = sp[i];
    return x;
}

void op_gelu_forward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (oc.quick && n > 200000)
            continue;
        tcase k;
        oc_begin(&k, "gelu_forward", "norm", THR_F32,
                 "n=%lld x in [-6,6] and +-20, +-100; in place", (long long)n);
        float *hx = gelu_inputs(n), *hy = oc_filled(n, 7.0f);
        pair x = oc_pair_f32(hx, n), y = oc_pair_f32(hy, n), xi = oc_pair_f32(hx, n);
        oc.cpu.gelu_forward(&oc.cpu, y.c, x.c, n);
        oc.gpu.gelu_forward(&oc.gpu, y.g, x.g, n);
        oc.cpu.gelu_forward(&oc.cpu, xi.c, xi.c, n);
        oc.gpu.gelu_forward(&oc.gpu, xi.g, xi.g, n);
        oc_cmp_f32(&k, "y", &y, n);
        oc_cmp_f32(&k, "in place", &xi, n);
        oc_pair_free(&x);
        oc_pair_free(&y);
        oc_pair_free(&xi);
        free(hx);
        free(hy);
        oc_end(&k);
    }
}

void op_gelu_backward(void)
{
    for (int s = 0; s < N_ELEMENTWISE; s++) {
        int64_t n = elementwise_sizes[s];
        if (oc.quick && n > 200000)
            continue;
        tcase k;
        oc_begin(&k, "gelu_backward", "norm", THR_F32, "n=%lld; dx == dy in place", (long long)n);
        float *hx = gelu_inputs(n), *hdy = oc_rand_f32(n, -1, 1), *hdx = oc_filled(n, 7.0f);
        pair x = oc_pair_f32(hx, n), dy = oc_pair_f32(hdy, n), dx = oc_pair_f32(hdx, n);
        pair di = oc_pair_f32(hdy, n);
        oc.cpu.gelu_backward(&oc.cpu, dx.c, dy.c, x.c, n);
        oc.gpu.gelu_backward(&oc.gpu, dx.g, dy.g, x.g, n);
        oc.cpu.gelu_backward(&oc.cpu, di.c, di.c, x.c, n);
        oc.gpu.gelu_backward(&oc.gpu, di.g, di.g, x.g, n);
        oc_cmp_f32(&k, "dx", &dx, n);
        oc_cmp_f32(&k, "in place", &di, n);
        oc_pair_free(&x);
        oc_pair_free(&dy);
        oc_pair_free(&dx);
        oc_pair_free(&di);
        free(hx);
        free(hdy);
        free(hdx);
        oc_end(&k);
    }
}
