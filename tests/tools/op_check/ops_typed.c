/*
 * ops_typed: op-check's cases of the typed ops (engine/backend.h, "Typed
 * tensors") on bf16 and fp16 tensors, for gemm, bias_add, bias_grad, the
 * cross-entropy, axpy and the fused epilogues (ops_typed_nn.c has the layer
 * ops). Each op's function runs them after its fp32 cases. Inputs are drawn
 * in fp32 and rounded to the dtype, so both backends get the same 16-bit
 * tensors; the CPU backend's typed op for the same dtype is the reference.
 *
 * Thresholds (main.c): an fp32 op's exact results stay exact; outputs of dt
 * otherwise get one unit in the last place of dt (an fp32 difference of the
 * two backends may round to the neighbouring 16-bit value), and fp32 outputs
 * keep their fp32 op's threshold. linear_backward has no case: the CUDA
 * backend leaves it NULL (models/layers.c then runs gemm and bias_grad).
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/op_check/op_check.h"

const zt_dtype oc_typed_dts[2] = {ZT_BF16, ZT_F16};

/* x(n) as a tensor of dt holds it, widened back; |x| when `abs`. */
static float *held(const float *x, int64_t n, zt_dtype dt, bool abs)
{
    void *h = oc_to_dtype(x, n, dt);
    float *w = oc_widen(h, dt, n);
    free(h);
    for (int64_t i = 0; abs && i < n; i++)
        w[i] = fabsf(w[i]);
    return w;
}

/* ---- gemm ---- */

/* The products a 16-bit training step runs, and the rules: all four
 * transpositions, strides wider than the rows, beta 0 (C starts NaN and must
 * not be read), accumulation, k = 0. */
static const struct {
    bool ta, tb;
    int64_t m, n, k, pad;
    float alpha, beta;
} typed_gemm_shapes[] = {
    {false, false, 5, 7, 3, 3, 0.7f, -0.3f},   {false, true, 5, 7, 3, 3, 0.7f, -0.3f},
    {true, false, 5, 7, 3, 3, 0.7f, -0.3f},    {true, true, 5, 7, 3, 3, 0.7f, -0.3f},
    {false, true, 257, 769, 65, 0, 1.0f, 0.0f}, /* a Linear's forward, x w^T */
    {false, false, 131, 97, 263, 5, 1.0f, 1.0f}, /* dx += dy w */
    {true, false, 384, 256, 1024, 0, 1.0f, 1.0f}, /* a weight gradient dy^T x, accumulated */
    {false, false, 3, 5, 0, 1, 1.0f, 2.0f},     /* k = 0: C = beta C */
    {false, true, 4, 6, 0, 0, 1.0f, 0.0f},      /* k = 0, beta = 0: zeros, C not read */
};

/* A and B of dt, C of c_dt, with gemm's mag metric over the rounded operands:
 * c_dt fp32 at fp32's threshold (the products of 16-bit values are exact,
 * only the order of the fp32 sums differs), 16-bit C at one unit of c_dt. */
static void typed_gemm_case(zt_dtype dt, zt_dtype c_dt, size_t s)
{
    const bool ta = typed_gemm_shapes[s].ta, tb = typed_gemm_shapes[s].tb;
    const int64_t m = typed_gemm_shapes[s].m, n = typed_gemm_shapes[s].n;
    const int64_t kk = typed_gemm_shapes[s].k, pad = typed_gemm_shapes[s].pad;
    const float alpha = typed_gemm_shapes[s].alpha, beta = typed_gemm_shapes[s].beta;
    const int64_t a_rows = ta ? kk : m, a_cols = ta ? m : kk;
    const int64_t b_rows = tb ? n : kk, b_cols = tb ? kk : n;
    const int64_t lda = (a_cols > 0 ? a_cols : 1) + pad, ldb = (b_cols > 0 ? b_cols : 1) + pad;
    const int64_t ldc = n + pad, na = a_rows * lda, nb = b_rows * ldb, nc = m * ldc;
    char op[32];
    snprintf(op, sizeof op, "gemm[%s]", oc.set->name);
    tcase k;
    oc_begin(&k, op, "mag", c_dt == ZT_F32 ? THR_F32 : oc_thr_dt(c_dt, THR_F32),
             "%s, C %s: %c%c m=%lld n=%lld k=%lld pad=%lld a=%g b=%g", zt_dtype_name(dt),
             zt_dtype_name(c_dt), ta ? 't' : 'n', tb ? 't' : 'n', (long long)m, (long long)n,
             (long long)kk, (long long)pad, (double)alpha, (double)beta);
    float *ha = oc_rand_f32(na, -1, 1), *hb = oc_rand_f32(nb, -1, 1);
    float *hc = beta == 0.0f ? oc_filled(nc, NAN) : oc_rand_f32(nc, -1, 1);
    pair A = oc_pair_dt(ha, na, dt), B = oc_pair_dt(hb, nb, dt), C = oc_pair_dt(hc, nc, c_dt);
    oc.cpu.gemm(&oc.cpu, dt, c_dt, ta, tb, m, n, kk, alpha, A.c, lda, B.c, ldb, beta, C.c, ldc);
    oc.gpu.gemm(&oc.gpu, dt, c_dt, ta, tb, m, n, kk, alpha, A.g, lda, B.g, ldb, beta, C.g, ldc);
    float *aa = held(ha, na, dt, true), *ab = held(hb, nb, dt, true);
    float *mag = held(hc, nc, c_dt, true);
    oc.cpu.gemm(&oc.cpu, ZT_F32, ZT_F32, ta, tb, m, n, kk, fabsf(alpha), aa, lda, ab, ldb,
                fabsf(beta), mag, ldc);
    void *got = oc_fetch(&C);
    float *ref = oc_widen(C.c, c_dt, nc), *gw = oc_widen(got, c_dt, nc);
    oc_add_err(&k, "C", oc_mag_err(ref, gw, mag, nc));
    oc_pair_free(&A);
    oc_pair_free(&B);
    oc_pair_free(&C);
    free(ha), free(hb), free(hc), free(aa), free(ab), free(mag), free(got), free(ref), free(gw);
    oc_end(&k);
}

void typed_gemm(void)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof typed_gemm_shapes / sizeof typed_gemm_shapes[0]; s++) {
            typed_gemm_case(oc_typed_dts[d], ZT_F32, s);
            typed_gemm_case(oc_typed_dts[d], oc_typed_dts[d], s);
        }
}

/* ---- element-wise ops and reductions ---- */

void typed_bias_add(void)
{
    const int64_t shapes[][2] = {{3, 5}, {1, 4097}, {300, 211}, {4096, 768}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            zt_dtype dt = oc_typed_dts[d];
            int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
            if (oc.quick && n > (1 << 20))
                continue;
            tcase k;
            oc_begin(&k, "bias_add", "norm", THR_EXACT, "%s rows=%lld cols=%lld",
                     zt_dtype_name(dt), (long long)rows, (long long)cols);
            float *hy = oc_rand_f32(n, -1, 1), *hb = oc_rand_f32(cols, -1, 1);
            pair y = oc_pair_dt(hy, n, dt), b = oc_pair_dt(hb, cols, dt);
            oc.cpu.bias_add(&oc.cpu, dt, y.c, b.c, rows, cols);
            oc.gpu.bias_add(&oc.gpu, dt, y.g, b.g, rows, cols);
            oc_cmp_dt(&k, "y", &y, dt, n);
            oc_pair_free(&y);
            oc_pair_free(&b);
            free(hy), free(hb);
            oc_end(&k);
        }
}

/* dbias is fp32, summed from the same 16-bit dy on both sides: fp32's threshold. */
void typed_bias_grad(void)
{
    const int64_t shapes[][2] = {{4, 3}, {5, 130}, {700, 97}, {1000, 1}, {1, 4097}, {4096, 768}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int acc = 0; acc < 2; acc++) {
                zt_dtype dt = oc_typed_dts[d];
                int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
                if (oc.quick && n > (1 << 20))
                    continue;
                tcase k;
                oc_begin(&k, "bias_grad", "norm", THR_F32, "%s rows=%lld cols=%lld accumulate=%d",
                         zt_dtype_name(dt), (long long)rows, (long long)cols, acc);
                float *hdy = oc_rand_f32(n, -1, 1);
                float *hdb = acc ? oc_rand_f32(cols, -1, 1) : oc_filled(cols, NAN);
                pair dy = oc_pair_dt(hdy, n, dt), db = oc_pair_f32(hdb, cols);
                oc.cpu.bias_grad(&oc.cpu, dt, db.c, dy.c, rows, cols, acc);
                oc.gpu.bias_grad(&oc.gpu, dt, db.g, dy.g, rows, cols, acc);
                oc_cmp_f32(&k, "dbias", &db, cols);
                oc_pair_free(&dy);
                oc_pair_free(&db);
                free(hdy), free(hdb);
                oc_end(&k);
            }
}

/* As ops_elementwise.c's xent_case: dlogits of dt, the loss (fp32 math on
 * the same 16-bit logits) at fp32's threshold. */
static void typed_xent_case(zt_dtype dt, int64_t rows, int64_t classes, int64_t ld, float spread,
                            float dscale, int64_t ignore_every, bool grad, bool in_place)
{
    tcase2 k;
    oc_begin2(&k, "xent_forward_backward", "norm", THR_F32, dt, "rel", THR_F32,
              "rows=%lld classes=%lld ld=%lld spread=%g dscale=%g ignore every %lld%s%s",
              (long long)rows, (long long)classes, (long long)ld, (double)spread,
              (double)dscale, (long long)ignore_every, grad ? "" : ", no dlogits",
              in_place ? ", in place" : "");
    float *hl = oc_rand_f32(rows * ld, -spread, spread);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = classes; j < ld; j++)
            hl[r * ld + j] = NAN;
    int32_t *hlab = oc_rand_i32(rows, 0, (int32_t)classes);
    for (int64_t r = 0; ignore_every && r < rows; r++)
        if (r % ignore_every == ignore_every - 1)
            hlab[r] = -100;
    float *hd = in_place ? hl : oc_filled(rows * ld, 7.0f);
    pair l = oc_pair_dt(hl, rows * ld, dt), lab = oc_pair_new(hlab, (size_t)rows * sizeof *hlab);
    pair d = oc_pair_dt(hd, rows * ld, dt);
    double lc = oc.cpu.xent_forward_backward(&oc.cpu, dt, in_place ? d.c : l.c, lab.c, rows,
                                             classes, ld, -100, dscale, grad ? d.c : NULL);
    double lg = oc.gpu.xent_forward_backward(&oc.gpu, dt, in_place ? d.g : l.g, lab.g, rows,
                                             classes, ld, -100, dscale, grad ? d.g : NULL);
    oc_add_err(&k.f, "loss", oc_rel_err(lc, lg));
    if (grad)
        oc_cmp_dt(&k.t, "dlogits", &d, dt, rows * ld);
    oc_pair_free(&l);
    oc_pair_free(&lab);
    oc_pair_free(&d);
    free(hl), free(hlab);
    if (!in_place)
        free(hd);
    oc_end2(&k);
}

void typed_xent(void)
{
    for (int d = 0; d < 2; d++) {
        zt_dtype dt = oc_typed_dts[d];
        typed_xent_case(dt, 37, 11, 11, 3.0f, 1.0f, 5, true, false);
        typed_xent_case(dt, 1300, 53, 53, 4.0f, 0.01f, 5, true, false);
        typed_xent_case(dt, 9, 7, 7, 1000.0f, -2.0f, 4, true, false);
        typed_xent_case(dt, 2048, 65, 128, 5.0f, 1.0f / 2048, 0, true, true); /* GPT-lite's */
        typed_xent_case(dt, 4, 50257, 50304, 10.0f, 0.25f, 3, true, true);   /* GPT-2's */
        typed_xent_case(dt, 3, 5000, 5000, 300.0f, 1.0f, 0, true, true);
        typed_xent_case(dt, 1300, 53, 53, 4.0f, 1.0f, 5, false, false);
    }
}

void typed_axpy(void)
{
    const int64_t sizes[] = {5, 100003};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < 2; s++) {
            zt_dtype dt = oc_typed_dts[d];
            int64_t n = sizes[s];
            tcase k;
            oc_begin(&k, "axpy", "norm", oc_thr_dt(dt, THR_ULP), "%s n=%lld a=1.5 and a=-0.3",
                     zt_dtype_name(dt), (long long)n);
            float *hx = oc_rand_f32(n, -2, 2), *hy = oc_rand_f32(n, -2, 2);
            pair x = oc_pair_dt(hx, n, dt), y = oc_pair_dt(hy, n, dt), y2 = oc_pair_dt(hy, n, dt);
            oc.cpu.axpy(&oc.cpu, dt, y.c, 1.5f, x.c, n);
            oc.gpu.axpy(&oc.gpu, dt, y.g, 1.5f, x.g, n);
            oc.cpu.axpy(&oc.cpu, dt, y2.c, -0.3f, x.c, n);
            oc.gpu.axpy(&oc.gpu, dt, y2.g, -0.3f, x.g, n);
            oc_cmp_dt(&k, "a=1.5", &y, dt, n);
            oc_cmp_dt(&k, "a=-0.3", &y2, dt, n);
            oc_pair_free(&x);
            oc_pair_free(&y);
            oc_pair_free(&y2);
            free(hx), free(hy);
            oc_end(&k);
        }
}

/* ---- fused epilogues ---- */

static const char *act_label(zt_act act)
{
    return act == ZT_ACT_GELU ? "gelu" : act == ZT_ACT_RELU ? "relu" : "none";
}

/* gemm's metric, as ops_fused.c's: pre (x w^T + bias rounded once) at one
 * unit of dt, y at two (pre's rounding, which the activation carries, then
 * y's own). */
static void typed_linear_act_case(zt_dtype dt, int64_t rows, int64_t in, int64_t out, zt_act act,
                                  bool keep, bool with_bias)
{
    const int64_t n = rows * out;
    tcase k;
    oc_begin(&k, "linear_act_forward", "mag", 2.0 * oc_thr_dt(dt, THR_F32),
             "%s [%s] rows=%lld in=%lld out=%lld act=%s%s%s", zt_dtype_name(dt), oc.set->name,
             (long long)rows, (long long)in, (long long)out, act_label(act),
             keep ? " pre kept" : "", with_bias ? "" : " no bias");
    float *hx = oc_rand_f32(rows * in, -1, 1), *hw = oc_rand_f32(out * in, -1, 1);
    float *hb = oc_rand_f32(out, -1, 1), *nan_y = oc_filled(n, NAN);
    pair x = oc_pair_dt(hx, rows * in, dt), w = oc_pair_dt(hw, out * in, dt);
    pair b = oc_pair_dt(hb, out, dt), y = oc_pair_dt(nan_y, n, dt), pre = oc_pair_dt(nan_y, n, dt);
    oc.cpu.linear_act_forward(&oc.cpu, dt, y.c, keep ? pre.c : NULL, x.c, w.c,
                              with_bias ? b.c : NULL, rows, in, out, act);
    oc.gpu.linear_act_forward(&oc.gpu, dt, y.g, keep ? pre.g : NULL, x.g, w.g,
                              with_bias ? b.g : NULL, rows, in, out, act);
    float *ax = held(hx, rows * in, dt, true), *aw = held(hw, out * in, dt, true);
    float *ab = held(hb, out, dt, true), *mag = oc_xmalloc((size_t)n * sizeof *mag);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double m = with_bias ? ab[o] : 0.0;
            for (int64_t q = 0; q < in; q++)
                m += (double)ax[r * in + q] * aw[o * in + q];
            mag[r * out + o] = (float)m;
        }
    if (keep) {
        void *gp = oc_fetch(&pre);
        float *rp = oc_widen(pre.c, dt, n), *wp = oc_widen(gp, dt, n);
        oc_add_err(&k, "pre", oc_mag_err(rp, wp, mag, n));
        free(gp), free(rp), free(wp);
    }
    for (int64_t i = 0; i < n; i++)
        mag[i] *= 1.13f; /* GELU's steepest slope */
    void *gy = oc_fetch(&y);
    float *ry = oc_widen(y.c, dt, n), *wy = oc_widen(gy, dt, n);
    oc_add_err(&k, "y", oc_mag_err(ry, wy, mag, n));
    pair *ps[] = {&x, &w, &b, &y, &pre};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        oc_pair_free(ps[i]);
    free(hx), free(hw), free(hb), free(nan_y), free(ax), free(aw), free(ab), free(mag);
    free(gy), free(ry), free(wy);
    oc_end(&k);
}

void typed_linear_act_forward(void)
{
    const int64_t shapes[][3] = {{7, 5, 9}, {300, 48, 130}, {1, 64, 3}, {512, 96, 384}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (zt_act act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++)
                for (int v = 0; v < 3; v++) /* pre kept or not; no bias (pre kept) */
                    typed_linear_act_case(oc_typed_dts[d], shapes[s][0], shapes[s][1],
                                          shapes[s][2], act, v > 0, v < 2);
}

/* The derivative's parts, as ops_fused.c's act_grad_scale. */
static double act_scale(zt_act act, float x)
{
    if (act != ZT_ACT_GELU)
        return 1.0;
    const double k0 = 0.7978845608028654, k1 = 0.044715, v = x;
    const double t = tanh(k0 * (v + k1 * v * v * v)), du = k0 * (1.0 + 3.0 * k1 * v * v);
    return 0.5 * fabs(1.0 + t) + 0.5 * fabs(v) * (1.0 - t * t) * du;
}

/* dpre at one unit of dt; dbias, summed from dpre as stored, with the mag
 * metric at one unit too: a dpre that rounds the other way moves its term by
 * one unit of dt. */
void typed_act_bias_grad(void)
{
    const int64_t shapes[][2] = {{4, 3}, {7, 64}, {700, 97}, {1000, 1}, {1, 4097}, {4096, 768}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (zt_act act = ZT_ACT_NONE; act <= ZT_ACT_GELU; act++) {
                zt_dtype dt = oc_typed_dts[d];
                int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
                if (oc.quick && n > (1 << 20))
                    continue;
                float *hdy = oc_rand_f32(n, -1, 1), *hpre = oc_rand_f32(n, -6, 6);
                if (act == ZT_ACT_RELU)
                    for (int64_t i = 0; i < n; i++)
                        hpre[i] = hpre[i] < 0 ? 0.0f : hpre[i];
                float *ady = held(hdy, n, dt, true), *rpre = held(hpre, n, dt, false);
                pair dy = oc_pair_dt(hdy, n, dt), pre = oc_pair_dt(hpre, n, dt);
                for (int in_place = 0; in_place < 2; in_place++) {
                    bool acc = in_place; /* in place with accumulate, as trained */
                    tcase k;
                    oc_begin(&k, "act_bias_grad", "norm/mag", oc_thr_dt(dt, THR_F32),
                             "%s rows=%lld cols=%lld act=%s accumulate=%d%s", zt_dtype_name(dt),
                             (long long)rows, (long long)cols, act_label(act), acc,
                             in_place ? " dpre==dy" : "");
                    float *hdb = acc ? oc_rand_f32(cols, -1, 1) : oc_filled(cols, NAN);
                    float *nan_x = oc_filled(n, NAN);
                    pair dpre = oc_pair_dt(in_place ? hdy : nan_x, n, dt);
                    pair db = oc_pair_f32(hdb, cols);
                    const pair *src = in_place ? &dpre : &dy;
                    oc.cpu.act_bias_grad(&oc.cpu, dt, dpre.c, db.c, src->c, pre.c, rows, cols,
                                         act, acc);
                    oc.gpu.act_bias_grad(&oc.gpu, dt, dpre.g, db.g, src->g, pre.g, rows, cols,
                                         act, acc);
                    oc_cmp_dt(&k, "dpre", &dpre, dt, n);
                    float *mag = oc_xmalloc((size_t)cols * sizeof *mag);
                    for (int64_t j = 0; j < cols; j++) {
                        double m = acc ? fabs(hdb[j]) : 0.0;
                        for (int64_t r = 0; r < rows; r++)
                            m += ady[r * cols + j] * act_scale(act, rpre[r * cols + j]);
                        mag[j] = (float)m;
                    }
                    float *gdb = oc_fetch(&db);
                    oc_add_err(&k, "dbias", oc_mag_err(db.c, gdb, mag, cols));
                    oc_pair_free(&dpre);
                    oc_pair_free(&db);
                    free(hdb), free(nan_x), free(mag), free(gdb);
                    oc_end(&k);
                }
                oc_pair_free(&dy);
                oc_pair_free(&pre);
                free(hdy), free(hpre), free(ady), free(rpre);
            }
}
