/*
 * ops_fused: op-check's cases for the fused epilogues (backend.h):
 * residual_layernorm_forward, linear_act_forward (in every GEMM setting) and
 * act_bias_grad. Each is compared with the CPU backend (linear_act_forward
 * with gemm's metric, mag, at its GEMM setting's threshold; act_bias_grad's
 * dbias with mag over its column's sum of |dpre|), and the CUDA
 * backend's fused result also with its own op-by-op sequence (what --fused-ops
 * off runs there), which it must match.
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/op_check/op_check.h"

#define FUSED_EPS 1e-5f

static const char *act_name(zt_act act)
{
    return act == ZT_ACT_GELU ? "gelu" : act == ZT_ACT_RELU ? "relu" : "none";
}

/* The device's fused output against its op-by-op one, as a norm error. */
static void cmp_device(tcase *k, const char *output, const pair *fused, const pair *plain,
                       int64_t n)
{
    float *a = oc_fetch(fused), *b = oc_fetch(plain);
    oc_add_err(k, output, oc_norm_err(b, a, n));
    free(a);
    free(b);
}

void op_residual_layernorm(void)
{
    static const struct {
        int64_t rows, cols;
        float offset;
    } shapes[] = {{4, 7, 0.0f},   {3, 33, 3.0f},    {2, 16, -100.0f}, {300, 130, 0.5f},
                  {1, 768, 0.0f}, {5, 1, 0.0f},     {2, 4099, 1.0f},  {4096, 768, 0.0f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s].rows, cols = shapes[s].cols, nx = rows * cols;
        if (oc.quick && nx > (1 << 21))
            continue;
        for (int in_place = 0; in_place < 2; in_place++) {
            tcase k;
            oc_begin(&k, "residual_layernorm_forward", "norm", THR_F32,
                     "rows=%lld cols=%lld offset=%g%s", (long long)rows, (long long)cols,
                     (double)shapes[s].offset, in_place ? " x1==branch" : "");
            float off = shapes[s].offset;
            float *hx = oc_rand_f32(nx, off - 1, off + 1), *hbr = oc_rand_f32(nx, -1, 1);
            float *hw = oc_rand_f32(cols, 0.5f, 1.5f), *hb = oc_rand_f32(cols, -0.5f, 0.5f);
            float *nan_x = oc_filled(nx, NAN), *nan_r = oc_filled(rows, NAN);
            pair x = oc_pair_f32(hx, nx), br = oc_pair_f32(hbr, nx), w = oc_pair_f32(hw, cols),
                 b = oc_pair_f32(hb, cols);
            pair x1 = oc_pair_f32(in_place ? hbr : nan_x, nx), y = oc_pair_f32(nan_x, nx);
            pair mean = oc_pair_f32(nan_r, rows), rstd = oc_pair_f32(nan_r, rows);
            const pair *src = in_place ? &x1 : &br;
            oc.cpu.residual_layernorm_forward(&oc.cpu, ZT_F32, x1.c, y.c, mean.c, rstd.c, x.c,
                                              src->c, w.c, b.c, rows, cols, FUSED_EPS);
            oc.gpu.residual_layernorm_forward(&oc.gpu, ZT_F32, x1.g, y.g, mean.g, rstd.g, x.g,
                                              src->g, w.g, b.g, rows, cols, FUSED_EPS);
            oc_cmp_f32(&k, "x1", &x1, nx);
            oc_cmp_f32(&k, "y", &y, nx);
            oc_cmp_f32(&k, "mean", &mean, rows);
            oc_cmp_f32(&k, "rstd", &rstd, rows);
            /* The device's copy + axpy + layernorm. */
            pair x1u = oc_pair_f32(hx, nx), yu = oc_pair_f32(nan_x, nx);
            pair mu = oc_pair_f32(nan_r, rows), ru = oc_pair_f32(nan_r, rows);
            oc.gpu.axpy(&oc.gpu, ZT_F32, x1u.g, 1.0f, br.g, nx);
            oc.gpu.layernorm_forward(&oc.gpu, ZT_F32, yu.g, mu.g, ru.g, x1u.g, w.g, b.g, rows, cols,
                                     FUSED_EPS);
            cmp_device(&k, "x1 vs op-by-op", &x1, &x1u, nx);
            cmp_device(&k, "y vs op-by-op", &y, &yu, nx);
            pair *ps[] = {&x, &br, &w, &b, &x1, &y, &mean, &rstd, &x1u, &yu, &mu, &ru};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                oc_pair_free(ps[i]);
            free(hx), free(hbr), free(hw), free(hb), free(nan_x), free(nan_r);
            oc_end(&k);
        }
    }
    typed_residual_layernorm();
}

void op_linear_act_forward(void)
{
    const int64_t shapes[][3] = {{7, 5, 9}, {300, 48, 130}, {1, 64, 3}, {512, 96, 384},
                                 {4096, 256, 1024}}; /* rows, in, out */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2], n = rows * out;
        if (oc.quick && n > (1 << 20))
            continue;
        for (zt_act act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++) {
            for (int keep = 0; keep < 2; keep++) {
                tcase k;
                oc_begin(&k, "linear_act_forward", "mag", oc.set->thr,
                         "rows=%lld in=%lld out=%lld act=%s%s", (long long)rows, (long long)in,
                         (long long)out, act_name(act), keep ? " pre kept" : "");
                float *hx = oc_rand_f32(rows * in, -1, 1), *hw = oc_rand_f32(out * in, -1, 1);
                float *hb = oc_rand_f32(out, -1, 1), *nan_y = oc_filled(n, NAN);
                pair x = oc_pair_f32(hx, rows * in), w = oc_pair_f32(hw, out * in),
                     b = oc_pair_f32(hb, out);
                pair y = oc_pair_f32(nan_y, n), pre = oc_pair_f32(nan_y, n);
                oc.cpu.linear_act_forward(&oc.cpu, ZT_F32, y.c, keep ? pre.c : NULL, x.c, w.c, b.c,
                                          rows, in, out, act);
                oc.gpu.linear_act_forward(&oc.gpu, ZT_F32, y.g, keep ? pre.g : NULL, x.g, w.g, b.g,
                                          rows, in, out, act);
                /* gemm's metric: the error over the terms' magnitude, for y
                 * times 1.13 (GELU's steepest slope, so a GEMM error of e moves
                 * y by at most 1.13 e; ReLU's slope is 1). */
                float *mag = oc_xmalloc((size_t)n * sizeof *mag);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t o = 0; o < out; o++) {
                        double m = fabs(hb[o]);
                        for (int64_t q = 0; q < in; q++)
                            m += fabs((double)hx[r * in + q] * hw[o * in + q]);
                        mag[r * out + o] = (float)m;
                    }
                float *gy = oc_fetch(&y);
                if (keep) {
                    float *gp = oc_fetch(&pre);
                    oc_add_err(&k, "pre", oc_mag_err(pre.c, gp, mag, n));
                    free(gp);
                }
                for (int64_t i = 0; i < n; i++)
                    mag[i] *= 1.13f;
                oc_add_err(&k, "y", oc_mag_err(y.c, gy, mag, n));
                free(gy);
                free(mag);
                /* The device's gemm + bias_add + activation. */
                pair v = oc_pair_f32(nan_y, n), yu = oc_pair_f32(nan_y, n);
                oc.gpu.gemm(&oc.gpu, ZT_F32, ZT_F32, false, true, rows, out, in, 1.0f, x.g, in, w.g,
                            in, 0.0f, v.g, out);
                oc.gpu.bias_add(&oc.gpu, ZT_F32, v.g, b.g, rows, out);
                if (act == ZT_ACT_GELU)
                    oc.gpu.gelu_forward(&oc.gpu, yu.g, v.g, n);
                else if (act == ZT_ACT_RELU)
                    oc.gpu.relu_forward(&oc.gpu, yu.g, v.g, n);
                else
                    oc.gpu.copy_d2d(&oc.gpu, yu.g, v.g, (size_t)n * sizeof(float));
                cmp_device(&k, "y vs op-by-op", &y, &yu, n);
                if (keep)
                    cmp_device(&k, "pre vs op-by-op", &pre, &v, n);
                pair *ps[] = {&x, &w, &b, &y, &pre, &v, &yu};
                for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                    oc_pair_free(ps[i]);
                free(hx), free(hw), free(hb), free(nan_y);
                oc_end(&k);
            }
        }
    }
    typed_linear_act_forward();
}

/* The sum of the magnitudes of the parts of act'(x), the scale its rounding
 * errors are bounded by: GELU's 0.5 (1 + t) + 0.5 x (1 - t^2) u' can cancel
 * to 0 while each part is of order 1. */
static double act_grad_scale(zt_act act, float x)
{
    if (act != ZT_ACT_GELU)
        return 1.0;
    const double k0 = 0.7978845608028654, k1 = 0.044715, v = x;
    const double t = tanh(k0 * (v + k1 * v * v * v)), du = k0 * (1.0 + 3.0 * k1 * v * v);
    return 0.5 * fabs(1.0 + t) + 0.5 * fabs(v) * (1.0 - t * t) * du;
}

void op_act_bias_grad(void)
{
    const int64_t shapes[][2] = {{4, 3},   {7, 64},   {5, 130},   {700, 97},
                                 {1000, 1}, {1, 4097}, {4096, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        if (oc.quick && n > (1 << 21))
            continue;
        for (zt_act act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++) {
            float *hdy = oc_rand_f32(n, -1, 1), *hpre = oc_rand_f32(n, -6, 6);
            if (act == ZT_ACT_RELU) /* ReLU reads its output, with exact zeros */
                for (int64_t i = 0; i < n; i++)
                    hpre[i] = hpre[i] < 0 ? 0.0f : hpre[i];
            pair dy = oc_pair_f32(hdy, n), pre = oc_pair_f32(hpre, n);
            /* accumulate; the last is dpre == dy in place */
            const int variants[3][2] = {{0, 0}, {1, 0}, {1, 1}};
            for (int vi = 0; vi < 3; vi++) {
                bool acc = variants[vi][0], in_place = variants[vi][1];
                tcase k;
                oc_begin(&k, "act_bias_grad", "norm/mag", THR_F32,
                         "rows=%lld cols=%lld act=%s accumulate=%d%s", (long long)rows,
                         (long long)cols, act_name(act), acc, in_place ? " dpre==dy" : "");
                float *hdb = acc ? oc_rand_f32(cols, -1, 1) : oc_filled(cols, NAN);
                float *nan_x = oc_filled(n, NAN);
                pair dpre = oc_pair_f32(in_place ? hdy : nan_x, n), db = oc_pair_f32(hdb, cols);
                pair dbu = oc_pair_f32(hdb, cols), du = oc_pair_f32(nan_x, n);
                const pair *src = in_place ? &dpre : &dy;
                oc.cpu.act_bias_grad(&oc.cpu, ZT_F32, dpre.c, db.c, src->c, pre.c, rows, cols, act,
                                     acc);
                oc.gpu.act_bias_grad(&oc.gpu, ZT_F32, dpre.g, db.g, src->g, pre.g, rows, cols, act,
                                     acc);
                oc_cmp_f32(&k, "dpre", &dpre, n);
                /* dbias over its column's sum of each term's scale (and the
                 * start value): the GPU's tanhf moves a term by an ulp or two
                 * of its parts, and neither a sum that cancels to near 0 nor a
                 * GELU derivative near its zero (x ~ -0.75, where its two
                 * parts cancel) may make a false alarm. */
                float *mag = oc_xmalloc((size_t)cols * sizeof *mag);
                for (int64_t j = 0; j < cols; j++) {
                    double m = acc ? fabs(hdb[j]) : 0.0;
                    for (int64_t r = 0; r < rows; r++)
                        m += fabs(hdy[r * cols + j]) * act_grad_scale(act, hpre[r * cols + j]);
                    mag[j] = (float)m;
                }
                float *gdb = oc_fetch(&db);
                oc_add_err(&k, "dbias", oc_mag_err(db.c, gdb, mag, cols));
                free(gdb);
                free(mag);
                /* The device's activation backward, then bias_grad. */
                if (act == ZT_ACT_GELU)
                    oc.gpu.gelu_backward(&oc.gpu, du.g, dy.g, pre.g, n);
                else if (act == ZT_ACT_RELU)
                    oc.gpu.relu_backward(&oc.gpu, du.g, dy.g, pre.g, n);
                else
                    oc.gpu.copy_d2d(&oc.gpu, du.g, dy.g, (size_t)n * sizeof(float));
                oc.gpu.bias_grad(&oc.gpu, ZT_F32, dbu.g, du.g, rows, cols, acc);
                cmp_device(&k, "dpre vs op-by-op", &dpre, &du, n);
                cmp_device(&k, "dbias vs op-by-op", &db, &dbu, cols);
                pair *ps[] = {&dpre, &db, &dbu, &du};
                for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                    oc_pair_free(ps[i]);
                free(hdb), free(nan_x);
                oc_end(&k);
            }
            oc_pair_free(&dy);
            oc_pair_free(&pre);
            free(hdy), free(hpre);
        }
    }
    typed_act_bias_grad();
}
