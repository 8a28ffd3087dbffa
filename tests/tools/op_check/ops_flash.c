/*
 * ops_flash: op-check's cases of the fused attention ops (attn_flash_forward,
 * attn_flash_backward): causal and not, key padding with a zero-length and a
 * one-key sample, dropout on and off with key extents beyond t, t across
 * several of the CUDA kernels' 64-row blocks and not a multiple of them, heads
 * of each width class of the register path (8 and 16 padded to 32, 96 to 128),
 * a head of the wide path (staged tiles, two column windows of its output)
 * and one wider than its shared-memory tile (read from global memory); then
 * the same in bf16 and fp16 (ops_typed_nn.c).
 * Backward runs on both sides from the CPU forward's y and lse, so each op is
 * judged on its own. fp32 threshold: another summation order and the online
 * softmax's rescaling (main.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/tools/op_check/op_check.h"

typedef struct {
    int64_t n, h, t, hs;
    bool causal, lengths;
    float p;
    bool big;
} flash_shape;

static const flash_shape flash_shapes[] = {
    {3, 2, 70, 8, true, true, 0.0f, false},
    {4, 2, 70, 8, false, true, 0.2f, false},
    {2, 3, 33, 16, true, false, 0.1f, false},
    {2, 2, 130, 32, true, false, 0.0f, false},
    {2, 2, 75, 96, true, true, 0.1f, false},    /* the register path's widest, padded */
    {2, 2, 40, 160, true, true, 0.1f, false},   /* the wide path staged, two column windows */
    {1, 1, 9, 4104, false, false, 0.0f, false}, /* the wide path, wider than a staged tile */
    {4, 4, 256, 64, true, true, 0.1f, true},
};

static void flash_case(const flash_shape *a)
{
    int64_t n = a->n, h = a->h, t = a->t, c = h * a->hs, rows = n * t;
    float scale = 1.0f / sqrtf((float)a->hs);
    uint64_t hkeys[8];
    for (int64_t s = 0; s < n; s++)
        hkeys[s] = 1000 + 7 * (uint64_t)s;
    int32_t *hlen = NULL;
    if (a->lengths) {
        hlen = oc_rand_i32(n, 1, (int32_t)t + 1);
        hlen[0] = (int32_t)t;
        if (n > 2)
            hlen[2] = 0;
        if (n > 3)
            hlen[3] = 1;
    }
    float *hqkv = oc_rand_f32(rows * 3 * c, -1.5f, 1.5f), *hdy = oc_rand_f32(rows * c, -1, 1);
    float *hy = oc_filled(rows * c, NAN), *hl = oc_filled(n * h * t, NAN);
    float *hd = oc_filled(rows * 3 * c, NAN);
    int64_t wn = zt_attn_flash_work_numel(n, h, t, a->hs);
    float *hw = oc_filled(wn, NAN);
    pair keys = oc_pair_new(hkeys, (size_t)n * sizeof *hkeys);
    pair len = oc_pair_new(hlen, hlen ? (size_t)n * sizeof *hlen : 0);
    pair qkv = oc_pair_f32(hqkv, rows * 3 * c), dy = oc_pair_f32(hdy, rows * c);
    pair y = oc_pair_f32(hy, rows * c), lse = oc_pair_f32(hl, n * h * t);
    pair dqkv = oc_pair_f32(hd, rows * 3 * c), work = oc_pair_f32(hw, wn);
    zt_dropout_desc dc = {.seed = 0x9e3779b97f4a7c15ull, .site = 5, .step = 42,
                          .row_keys = keys.c, .n = n, .a = h, .b = t, .c = t,
                          .key_b = t + 3, .key_c = t + 5, .p = a->p};
    zt_dropout_desc dg = dc;
    dg.row_keys = keys.g;
    const int32_t *lc = hlen ? len.c : NULL, *lg = hlen ? len.g : NULL;
    char what[120];
    snprintf(what, sizeof what, "n=%lld h=%lld t=%lld hs=%lld causal=%d lengths=%s p=%g",
             (long long)n, (long long)h, (long long)t, (long long)a->hs, a->causal,
             hlen ? "yes" : "no", (double)a->p);
    tcase k;
    oc_begin(&k, "attn_flash_forward", "norm", THR_F32, "%s", what);
    oc.cpu.attn_flash_forward(&oc.cpu, ZT_F32, y.c, lse.c, work.c, qkv.c, n, h, t, c, scale,
                              a->causal, lc, &dc);
    oc.gpu.attn_flash_forward(&oc.gpu, ZT_F32, y.g, lse.g, work.g, qkv.g, n, h, t, c, scale,
                              a->causal, lg, &dg);
    oc_cmp_f32(&k, "y", &y, rows * c);
    oc_cmp_f32(&k, "lse", &lse, n * h * t);
    oc_end(&k);
    /* The CPU's y and lse on both sides. */
    pair y2 = oc_pair_f32(y.c, rows * c), lse2 = oc_pair_f32(lse.c, n * h * t);
    oc_begin(&k, "attn_flash_backward", "norm", THR_F32, "%s", what);
    oc.cpu.attn_flash_backward(&oc.cpu, ZT_F32, dqkv.c, dy.c, y2.c, lse2.c, qkv.c, work.c, n, h, t,
                               c, scale, a->causal, lc, &dc);
    oc.gpu.attn_flash_backward(&oc.gpu, ZT_F32, dqkv.g, dy.g, y2.g, lse2.g, qkv.g, work.g, n, h, t,
                               c, scale, a->causal, lg, &dg);
    oc_cmp_f32(&k, "dqkv", &dqkv, rows * 3 * c);
    pair *ps[] = {&keys, &len, &qkv, &dy, &y, &lse, &dqkv, &work, &y2, &lse2};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        oc_pair_free(ps[i]);
    free(hlen);
    free(hqkv);
    free(hdy);
    free(hy);
    free(hl);
    free(hd);
    free(hw);
    oc_end(&k);
}

void op_attn_flash(void)
{
    for (size_t s = 0; s < sizeof flash_shapes / sizeof flash_shapes[0]; s++)
        if (!oc.quick || !flash_shapes[s].big)
            flash_case(&flash_shapes[s]);
    typed_attn_flash();
    typed_attn_flash_mma();
}
