/*
 * ops_typed_nn: op-check's cases of the typed layer ops on bf16 and fp16
 * tensors: embedding (forward and backward), sinusoidal positions,
 * layernorm (forward, backward, residual + layernorm), fused attention,
 * dropout and mean pooling. Inputs, references
 * and thresholds as ops_typed.c says; mean, rstd, lse and the parameter
 * gradients are fp32 outputs (tcase2).
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/tools/op_check/op_check.h"

#define TYPED_EPS 1e-5f

void typed_embedding_forward(void)
{
    const int64_t shapes[][3] = {{9, 5, 4}, {3000, 48, 37}, {1000, 33, 50257}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int acc = 0; acc < 2; acc++) {
                zt_dtype dt = oc_typed_dts[d];
                int64_t rows = shapes[s][0], cols = shapes[s][1], vocab = shapes[s][2];
                tcase k;
                oc_begin(&k, "embedding_forward", "norm", THR_EXACT,
                         "%s rows=%lld cols=%lld vocab=%lld accumulate=%d", zt_dtype_name(dt),
                         (long long)rows, (long long)cols, (long long)vocab, acc);
                int32_t *hids = oc_rand_i32(rows, 0, (int32_t)vocab);
                float *ht = oc_rand_f32(vocab * cols, -1, 1);
                float *hy = acc ? oc_rand_f32(rows * cols, -1, 1) : oc_filled(rows * cols, NAN);
                pair ids = oc_pair_new(hids, (size_t)rows * sizeof *hids);
                pair t = oc_pair_dt(ht, vocab * cols, dt), y = oc_pair_dt(hy, rows * cols, dt);
                oc.cpu.embedding_forward(&oc.cpu, dt, y.c, ids.c, t.c, rows, cols, acc);
                oc.gpu.embedding_forward(&oc.gpu, dt, y.g, ids.g, t.g, rows, cols, acc);
                oc_cmp_dt(&k, "y", &y, dt, rows * cols);
                oc_pair_free(&ids);
                oc_pair_free(&t);
                oc_pair_free(&y);
                free(hids), free(ht), free(hy);
                oc_end(&k);
            }
}

/* dtable is fp32, summed from the same 16-bit dy: fp32's threshold. */
void typed_embedding_backward(void)
{
    const int64_t shapes[][3] = {{40, 21, 6}, {4000, 70, 50}, {2048, 64, 50257}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int acc = 0; acc < 2; acc++) {
                zt_dtype dt = oc_typed_dts[d];
                int64_t rows = shapes[s][0], cols = shapes[s][1], vocab = shapes[s][2];
                tcase k;
                oc_begin(&k, "embedding_backward", "norm", THR_F32,
                         "%s rows=%lld cols=%lld vocab=%lld accumulate=%d", zt_dtype_name(dt),
                         (long long)rows, (long long)cols, (long long)vocab, acc);
                int32_t *hids = oc_rand_i32(rows, 0, (int32_t)(vocab > 1 ? vocab - 1 : 1));
                float *hdy = oc_rand_f32(rows * cols, -1, 1);
                float *ht = acc ? oc_rand_f32(vocab * cols, -1, 1) : oc_filled(vocab * cols, NAN);
                pair ids = oc_pair_new(hids, (size_t)rows * sizeof *hids);
                pair dy = oc_pair_dt(hdy, rows * cols, dt), t = oc_pair_f32(ht, vocab * cols);
                oc.cpu.embedding_backward(&oc.cpu, dt, t.c, ids.c, dy.c, rows, cols, vocab, acc);
                oc.gpu.embedding_backward(&oc.gpu, dt, t.g, ids.g, dy.g, rows, cols, vocab, acc);
                oc_cmp_f32(&k, "dtable", &t, vocab * cols);
                oc_pair_free(&ids);
                oc_pair_free(&dy);
                oc_pair_free(&t);
                free(hids), free(hdy), free(ht);
                oc_end(&k);
            }
}

/* y + PE: PE from another libm's sin/cos, as the fp32 case; the fp32 sum
 * rounded once to dt. */
void typed_sinusoid_add(void)
{
    const int64_t shapes[][3] = {{3, 50, 33}, {1, 1, 1}, {4, 128, 96}, {2, 2048, 768}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            zt_dtype dt = oc_typed_dts[d];
            int64_t n = shapes[s][0], t = shapes[s][1], cols = shapes[s][2], total = n * t * cols;
            if (oc.quick && total > (1 << 20))
                continue;
            tcase k;
            oc_begin(&k, "sinusoid_add", "norm", oc_thr_dt(dt, THR_ULP),
                     "%s n=%lld t=%lld cols=%lld", zt_dtype_name(dt), (long long)n, (long long)t,
                     (long long)cols);
            float *hy = oc_rand_f32(total, -1, 1);
            pair y = oc_pair_dt(hy, total, dt);
            oc.cpu.sinusoid_add(&oc.cpu, dt, y.c, n, t, cols);
            oc.gpu.sinusoid_add(&oc.gpu, dt, y.g, n, t, cols);
            oc_cmp_dt(&k, "y", &y, dt, total);
            oc_pair_free(&y);
            free(hy);
            oc_end(&k);
        }
}

/* ---- layernorm ---- */

static const struct {
    int64_t rows, cols;
    float offset; /* far from 0 needs a two-pass variance */
} typed_ln_shapes[] = {{4, 7, 0.0f},   {3, 33, 3.0f}, {2, 16, -100.0f}, {300, 130, 0.5f},
                       {1, 768, 0.0f}, {5, 1, 0.0f},  {2, 4099, 1.0f},  {4096, 768, 0.0f}};
#define N_TYPED_LN (sizeof typed_ln_shapes / sizeof typed_ln_shapes[0])

void typed_layernorm_forward(void)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < N_TYPED_LN; s++) {
            zt_dtype dt = oc_typed_dts[d];
            int64_t rows = typed_ln_shapes[s].rows, cols = typed_ln_shapes[s].cols;
            int64_t nx = rows * cols;
            float off = typed_ln_shapes[s].offset;
            if (oc.quick && nx > (1 << 20))
                continue;
            tcase2 k;
            oc_begin2(&k, "layernorm_forward", "norm", THR_F32, dt, "norm", THR_F32,
                      "rows=%lld cols=%lld offset=%g", (long long)rows, (long long)cols,
                      (double)off);
            float *hx = oc_rand_f32(nx, off - 1, off + 1), *hw = oc_rand_f32(cols, 0.5f, 1.5f);
            float *hb = oc_rand_f32(cols, -0.5f, 0.5f), *nan_x = oc_filled(nx, NAN);
            float *nan_r = oc_filled(rows, NAN);
            pair x = oc_pair_dt(hx, nx, dt), w = oc_pair_dt(hw, cols, dt);
            pair b = oc_pair_dt(hb, cols, dt), y = oc_pair_dt(nan_x, nx, dt);
            pair mean = oc_pair_f32(nan_r, rows), rstd = oc_pair_f32(nan_r, rows);
            oc.cpu.layernorm_forward(&oc.cpu, dt, y.c, mean.c, rstd.c, x.c, w.c, b.c, rows, cols,
                                     TYPED_EPS);
            oc.gpu.layernorm_forward(&oc.gpu, dt, y.g, mean.g, rstd.g, x.g, w.g, b.g, rows, cols,
                                     TYPED_EPS);
            oc_cmp_dt(&k.t, "y", &y, dt, nx);
            oc_cmp_f32(&k.f, "mean", &mean, rows);
            oc_cmp_f32(&k.f, "rstd", &rstd, rows);
            pair *ps[] = {&x, &w, &b, &y, &mean, &rstd};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                oc_pair_free(ps[i]);
            free(hx), free(hw), free(hb), free(nan_x), free(nan_r);
            oc_end2(&k);
        }
}

void typed_layernorm_backward(void)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < N_TYPED_LN; s++) {
            zt_dtype dt = oc_typed_dts[d];
            int64_t rows = typed_ln_shapes[s].rows, cols = typed_ln_shapes[s].cols;
            int64_t nx = rows * cols;
            float off = typed_ln_shapes[s].offset;
            if (oc.quick && nx > (1 << 20))
                continue;
            float *hx = oc_rand_f32(nx, off - 1, off + 1), *hw = oc_rand_f32(cols, 0.5f, 1.5f);
            float *hb = oc_rand_f32(cols, -0.5f, 0.5f), *hdy = oc_rand_f32(nx, -1, 1);
            float *hdx0 = oc_rand_f32(nx, -1, 1), *hdw0 = oc_rand_f32(cols, -1, 1);
            float *hdb0 = oc_rand_f32(cols, -1, 1), *nan_x = oc_filled(nx, NAN);
            float *nan_c = oc_filled(cols, NAN), *nan_r = oc_filled(rows, NAN);
            pair x = oc_pair_dt(hx, nx, dt), w = oc_pair_dt(hw, cols, dt);
            pair b = oc_pair_dt(hb, cols, dt), dy = oc_pair_dt(hdy, nx, dt);
            pair y = oc_pair_dt(nan_x, nx, dt), mean = oc_pair_f32(nan_r, rows);
            pair rstd = oc_pair_f32(nan_r, rows);
            /* mean and rstd as the CPU forward writes them, the same on both sides */
            oc.cpu.layernorm_forward(&oc.cpu, dt, y.c, mean.c, rstd.c, x.c, w.c, b.c, rows, cols,
                                     TYPED_EPS);
            pair mg = oc_pair_f32(mean.c, rows), rg = oc_pair_f32(rstd.c, rows);
            /* acc_dx, acc_params; the last is dx == dy in place */
            const int variants[4][3] = {{0, 0, 0}, {1, 1, 0}, {0, 1, 0}, {0, 0, 1}};
            for (int v = 0; v < 4; v++) {
                bool acc_dx = variants[v][0], acc_p = variants[v][1], in_place = variants[v][2];
                tcase2 k;
                oc_begin2(&k, "layernorm_backward", "norm", THR_F32, dt, "norm", THR_F32,
                          "rows=%lld cols=%lld acc_dx=%d acc_params=%d%s", (long long)rows,
                          (long long)cols, acc_dx, acc_p, in_place ? " dx==dy" : "");
                pair dx = oc_pair_dt(in_place ? hdy : acc_dx ? hdx0 : nan_x, nx, dt);
                pair dw = oc_pair_f32(acc_p ? hdw0 : nan_c, cols);
                pair db = oc_pair_f32(acc_p ? hdb0 : nan_c, cols);
                const pair *g = in_place ? &dx : &dy;
                oc.cpu.layernorm_backward(&oc.cpu, dt, dx.c, dw.c, db.c, g->c, x.c, mean.c,
                                          rstd.c, w.c, rows, cols, acc_dx, acc_p);
                oc.gpu.layernorm_backward(&oc.gpu, dt, dx.g, dw.g, db.g, g->g, x.g, mg.g, rg.g,
                                          w.g, rows, cols, acc_dx, acc_p);
                oc_cmp_dt(&k.t, "dx", &dx, dt, nx);
                oc_cmp_f32(&k.f, "dw", &dw, cols);
                oc_cmp_f32(&k.f, "db", &db, cols);
                oc_pair_free(&dx);
                oc_pair_free(&dw);
                oc_pair_free(&db);
                oc_end2(&k);
            }
            pair *ps[] = {&x, &w, &b, &dy, &y, &mean, &rstd, &mg, &rg};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                oc_pair_free(ps[i]);
            free(hx), free(hw), free(hb), free(hdy), free(hdx0), free(hdw0), free(hdb0);
            free(nan_x), free(nan_c), free(nan_r);
        }
}

/* x1 = x + branch is one fp32 addition rounded to dt (so it matches exactly,
 * within the case's threshold); alias 1 is x1 == branch, 2 is x1 == x. */
void typed_residual_layernorm(void)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < N_TYPED_LN; s++)
            for (int alias = 0; alias < 3; alias++) {
                zt_dtype dt = oc_typed_dts[d];
                int64_t rows = typed_ln_shapes[s].rows, cols = typed_ln_shapes[s].cols;
                int64_t nx = rows * cols;
                float off = typed_ln_shapes[s].offset;
                if (oc.quick && nx > (1 << 20))
                    continue;
                tcase2 k;
                oc_begin2(&k, "residual_layernorm_forward", "norm", THR_F32, dt, "norm", THR_F32,
                          "rows=%lld cols=%lld offset=%g%s", (long long)rows, (long long)cols,
                          (double)off, alias == 1 ? " x1==branch" : alias == 2 ? " x1==x" : "");
                float *hx = oc_rand_f32(nx, off - 1, off + 1), *hbr = oc_rand_f32(nx, -1, 1);
                float *hw = oc_rand_f32(cols, 0.5f, 1.5f), *hb = oc_rand_f32(cols, -0.5f, 0.5f);
                float *nan_x = oc_filled(nx, NAN), *nan_r = oc_filled(rows, NAN);
                pair x = oc_pair_dt(hx, nx, dt), br = oc_pair_dt(hbr, nx, dt);
                pair w = oc_pair_dt(hw, cols, dt), b = oc_pair_dt(hb, cols, dt);
                pair x1 = oc_pair_dt(alias == 1 ? hbr : alias == 2 ? hx : nan_x, nx, dt);
                pair y = oc_pair_dt(nan_x, nx, dt);
                pair mean = oc_pair_f32(nan_r, rows), rstd = oc_pair_f32(nan_r, rows);
                const pair *px = alias == 2 ? &x1 : &x, *pb = alias == 1 ? &x1 : &br;
                oc.cpu.residual_layernorm_forward(&oc.cpu, dt, x1.c, y.c, mean.c, rstd.c, px->c,
                                                  pb->c, w.c, b.c, rows, cols, TYPED_EPS);
                oc.gpu.residual_layernorm_forward(&oc.gpu, dt, x1.g, y.g, mean.g, rstd.g, px->g,
                                                  pb->g, w.g, b.g, rows, cols, TYPED_EPS);
                oc_cmp_dt(&k.t, "x1", &x1, dt, nx);
                oc_cmp_dt(&k.t, "y", &y, dt, nx);
                oc_cmp_f32(&k.f, "mean", &mean, rows);
                oc_cmp_f32(&k.f, "rstd", &rstd, rows);
                pair *ps[] = {&x, &br, &w, &b, &x1, &y, &mean, &rstd};
                for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                    oc_pair_free(ps[i]);
                free(hx), free(hbr), free(hw), free(hb), free(nan_x), free(nan_r);
                oc_end2(&k);
            }
}

/* ---- fused attention ---- */

/* n, h, t, hs, causal, lengths, p: each width class of the CUDA kernels (the
 * register path's 32, 64 and 128; the wide path staged, two column windows;
 * the wide path read from global memory), padding, dropout. */
static const struct {
    int64_t n, h, t, hs;
    bool causal, lengths;
    float p;
} typed_flash_shapes[] = {
    {3, 2, 70, 8, true, true, 0.0f},     {4, 2, 70, 8, false, true, 0.2f},
    {2, 2, 130, 64, true, false, 0.0f},  {2, 2, 75, 96, true, true, 0.1f},
    {2, 2, 40, 160, true, true, 0.1f},   {1, 1, 9, 4104, false, false, 0.0f},
};

static void typed_flash_case(zt_dtype dt, size_t s)
{
    const int64_t n = typed_flash_shapes[s].n, h = typed_flash_shapes[s].h;
    const int64_t t = typed_flash_shapes[s].t, hs = typed_flash_shapes[s].hs;
    const bool causal = typed_flash_shapes[s].causal;
    const int64_t c = h * hs, rows = n * t, nl = n * h * t, wn = zt_attn_flash_work_numel(n, h, t, hs);
    const float scale = 1.0f / sqrtf((float)hs), p = typed_flash_shapes[s].p;
    uint64_t hkeys[8];
    for (int64_t i = 0; i < n; i++)
        hkeys[i] = 1000 + 7 * (uint64_t)i;
    int32_t *hlen = NULL;
    if (typed_flash_shapes[s].lengths) {
        hlen = oc_rand_i32(n, 1, (int32_t)t + 1);
        hlen[0] = (int32_t)t;
        if (n > 2)
            hlen[2] = 0;
        if (n > 3)
            hlen[3] = 1;
    }
    float *hqkv = oc_rand_f32(rows * 3 * c, -1.5f, 1.5f), *hdy = oc_rand_f32(rows * c, -1, 1);
    float *nan_y = oc_filled(rows * 3 * c, NAN);
    pair keys = oc_pair_new(hkeys, (size_t)n * sizeof *hkeys);
    pair len = oc_pair_new(hlen, hlen ? (size_t)n * sizeof *hlen : 0);
    pair qkv = oc_pair_dt(hqkv, rows * 3 * c, dt), dy = oc_pair_dt(hdy, rows * c, dt);
    pair y = oc_pair_dt(nan_y, rows * c, dt), lse = oc_pair_f32(nan_y, nl);
    pair dqkv = oc_pair_dt(nan_y, rows * 3 * c, dt);
    float *hw = oc_filled(wn, NAN);
    pair work = oc_pair_f32(hw, wn);
    zt_dropout_desc dc = {.seed = 0x9e3779b97f4a7c15ull, .site = 5, .step = 42,
                          .row_keys = keys.c, .n = n, .a = h, .b = t, .c = t,
                          .key_b = t + 3, .key_c = t + 5, .p = p};
    zt_dropout_desc dg = dc;
    dg.row_keys = keys.g;
    const int32_t *lc = hlen ? len.c : NULL, *lg = hlen ? len.g : NULL;
    char what[96];
    snprintf(what, sizeof what, "n=%lld h=%lld t=%lld hs=%lld causal=%d lengths=%s p=%g",
             (long long)n, (long long)h, (long long)t, (long long)hs, causal,
             hlen ? "yes" : "no", (double)p);
    tcase2 k;
    oc_begin2(&k, "attn_flash_forward", "norm", THR_F32, dt, "norm", THR_F32, "%s", what);
    oc.cpu.attn_flash_forward(&oc.cpu, dt, y.c, lse.c, work.c, qkv.c, n, h, t, c, scale, causal,
                              lc, &dc);
    oc.gpu.attn_flash_forward(&oc.gpu, dt, y.g, lse.g, work.g, qkv.g, n, h, t, c, scale, causal,
                              lg, &dg);
    oc_cmp_dt(&k.t, "y", &y, dt, rows * c);
    oc_cmp_f32(&k.f, "lse", &lse, nl);
    oc_end2(&k);
    /* The CPU's y and lse on both sides, so the backward is judged on its own. */
    pair y2 = oc_pair_new(y.c, y.bytes), lse2 = oc_pair_f32(lse.c, nl);
    tcase kb;
    oc_begin(&kb, "attn_flash_backward", "norm", oc_thr_dt(dt, THR_F32), "%s %s",
             zt_dtype_name(dt), what);
    oc.cpu.attn_flash_backward(&oc.cpu, dt, dqkv.c, dy.c, y2.c, lse2.c, qkv.c, work.c, n, h, t,
                               c, scale, causal, lc, &dc);
    oc.gpu.attn_flash_backward(&oc.gpu, dt, dqkv.g, dy.g, y2.g, lse2.g, qkv.g, work.g, n, h, t,
                               c, scale, causal, lg, &dg);
    oc_cmp_dt(&kb, "dqkv", &dqkv, dt, rows * 3 * c);
    pair *ps[] = {&keys, &len, &qkv, &dy, &y, &lse, &dqkv, &work, &y2, &lse2};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        oc_pair_free(ps[i]);
    free(hlen), free(hqkv), free(hdy), free(nan_y), free(hw);
    oc_end(&kb);
}

void typed_attn_flash(void)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof typed_flash_shapes / sizeof typed_flash_shapes[0]; s++)
            typed_flash_case(oc_typed_dts[d], s);
}

/* ---- dropout: keyed masks, exact in every dtype ---- */

static void typed_dropout_case(zt_dtype dt, int64_t n, int64_t a, int64_t b, int64_t c,
                               int64_t key_b, int64_t key_c, float p, bool in_place)
{
    int64_t total = n * a * b * c;
    tcase k;
    oc_begin(&k, "dropout", "norm", THR_EXACT,
             "%s (%lld,%lld,%lld,%lld) keys (%lld,%lld) p=%g%s; inf/NaN/-0 in x",
             zt_dtype_name(dt), (long long)n, (long long)a, (long long)b, (long long)c,
             (long long)key_b, (long long)key_c, (double)p, in_place ? " in place" : "");
    uint64_t *hkeys = oc_xmalloc((size_t)n * sizeof *hkeys);
    for (int64_t s = 0; s < n; s++)
        hkeys[s] = s == 1 ? (1ull << 40) + 3 : 1000 + 7 * (uint64_t)s;
    float *hx = oc_rand_specials(total, -1, 1), *hy = oc_filled(total, 7.0f);
    pair keys = oc_pair_new(hkeys, (size_t)n * sizeof *hkeys), x = oc_pair_dt(hx, total, dt);
    pair y = oc_pair_dt(hy, total, dt);
    zt_dropout_desc dc = {.seed = 0x9e3779b97f4a7c15ull, .site = 17, .step = 123456789,
                          .row_keys = keys.c, .n = n, .a = a, .b = b, .c = c, .key_b = key_b,
                          .key_c = key_c, .p = p};
    zt_dropout_desc dg = dc;
    dg.row_keys = keys.g;
    const pair *out = in_place ? &x : &y;
    oc.cpu.dropout(&oc.cpu, dt, out->c, x.c, &dc);
    oc.gpu.dropout(&oc.gpu, dt, out->g, x.g, &dg);
    oc_cmp_dt(&k, "y", out, dt, total);
    oc_pair_free(&keys);
    oc_pair_free(&x);
    oc_pair_free(&y);
    free(hkeys), free(hx), free(hy);
    oc_end(&k);
}

void typed_dropout(void)
{
    for (int d = 0; d < 2; d++) {
        zt_dtype dt = oc_typed_dts[d];
        typed_dropout_case(dt, 2, 3, 100, 70, 100, 70, 0.0f, false); /* p = 0: a copy */
        typed_dropout_case(dt, 4, 10, 50, 50, 64, 60, 0.3f, false);
        typed_dropout_case(dt, 4, 10, 50, 50, 64, 60, 0.3f, true);
        typed_dropout_case(dt, 2, 3, 12, 9, 12, 9, 0.5f, false);
        typed_dropout_case(dt, 3, 12, 33, 33, 64, 64, 0.1f, true);
    }
}

/* ---- mean pooling: the fp32 ops' sums and divisions on the widened
 * tensors, rounded once; dx exact (one division, zeros past the length) ---- */

static void typed_mean_pool_case(zt_dtype dt, int64_t n, int64_t t, int64_t cols,
                                 bool with_lengths)
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
    pair x = oc_pair_dt(hx, n * t * cols, dt), y = oc_pair_dt(hy, n * cols, dt);
    pair dy = oc_pair_dt(hdy, n * cols, dt), dx = oc_pair_dt(hdx, n * t * cols, dt);
    const int32_t *lc = with_lengths ? len.c : NULL, *lg = with_lengths ? len.g : NULL;
    tcase k;
    oc_begin(&k, "mean_pool_forward", "norm", oc_thr_dt(dt, THR_F32),
             "%s n=%lld t=%lld cols=%lld lengths=%s", zt_dtype_name(dt), (long long)n,
             (long long)t, (long long)cols, with_lengths ? "yes" : "no");
    oc.cpu.mean_pool_forward(&oc.cpu, dt, y.c, x.c, lc, n, t, cols);
    oc.gpu.mean_pool_forward(&oc.gpu, dt, y.g, x.g, lg, n, t, cols);
    oc_cmp_dt(&k, "y", &y, dt, n * cols);
    oc_end(&k);
    oc_begin(&k, "mean_pool_backward", "norm", THR_EXACT, "%s n=%lld t=%lld cols=%lld lengths=%s",
             zt_dtype_name(dt), (long long)n, (long long)t, (long long)cols,
             with_lengths ? "yes" : "no");
    oc.cpu.mean_pool_backward(&oc.cpu, dt, dx.c, dy.c, lc, n, t, cols);
    oc.gpu.mean_pool_backward(&oc.gpu, dt, dx.g, dy.g, lg, n, t, cols);
    oc_cmp_dt(&k, "dx", &dx, dt, n * t * cols);
    oc_end(&k);
    pair *ps[] = {&len, &x, &y, &dy, &dx};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        oc_pair_free(ps[i]);
    free(hlen), free(hx), free(hdy), free(hy), free(hdx);
}

void typed_mean_pool(void)
{
    for (int d = 0; d < 2; d++) {
        zt_dtype dt = oc_typed_dts[d];
        typed_mean_pool_case(dt, 3, 6, 10, true);
        typed_mean_pool_case(dt, 3, 6, 10, false);
        typed_mean_pool_case(dt, 8, 64, 80, true);
        typed_mean_pool_case(dt, 1, 1, 1, false);
        typed_mean_pool_case(dt, 3, 40, 1000, true); /* a CPU block per sample */
        if (!oc.quick)
            typed_mean_pool_case(dt, 16, 512, 768, true);
    }
}
