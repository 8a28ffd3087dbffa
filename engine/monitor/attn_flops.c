/*
 * attn_flops: the CUDA attention kernels' FLOPs (engine/monitor/attn_flops.h).
 */
#include "engine/monitor/attn_flops.h"

static uint64_t u(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

bool zt_attn_flops_tensor_path(zt_dtype dt, int64_t hs, float scale)
{
    return (dt == ZT_BF16 || dt == ZT_F16) && (hs == 64 || hs == 128) && scale > 0.0f;
}

/* The tensor-core kernels' tile sizes (fm<HD>): forward query rows a block
 * and keys a tile, backward keys a block and queries a tile. */
enum { FM_FBM = 64, FM_BBN = 64 };
static uint64_t fm_fbn(int64_t hs) { return hs <= 64 ? 64 : 32; }

/* Query-key pairs the tensor-core forward multiplies per (sample, head):
 * each 64-row block over whole key tiles up to its last row's keys. */
static uint64_t fm_forward_pairs(int64_t t, int64_t hs, bool causal)
{
    const uint64_t bn = fm_fbn(hs), tt = u(t);
    uint64_t pairs = 0;
    for (uint64_t i0 = 0; i0 < tt; i0 += FM_FBM) {
        uint64_t last = i0 + FM_FBM < tt ? i0 + FM_FBM : tt;
        pairs += FM_FBM * bn * ceil_div(causal ? last : tt, bn);
    }
    return pairs;
}

/* ... and the backward: each key block over whole query tiles from the
 * tile of its first key (causal) or from the start. */
static uint64_t fm_backward_pairs(int64_t t, bool causal)
{
    const uint64_t bn = FM_BBN, bm = bn, tt = u(t);
    uint64_t pairs = 0;
    for (uint64_t j0 = 0; j0 < tt; j0 += bn) {
        uint64_t start = causal ? j0 / bm * bm : 0;
        pairs += bn * bm * ceil_div(tt - start, bm);
    }
    return pairs;
}

/* The scalar kernels' pairs: all t^2, or the causal triangle. */
static uint64_t scalar_pairs(int64_t n, int64_t h, int64_t t, bool causal)
{
    uint64_t tt = causal ? u(t) * (u(t) + 1) / 2 : u(t) * u(t);
    return u(n) * u(h) * tt;
}

/* The scalar kernels' row width and column windows (fr<HSM>, FL_COLS). */
static void scalar_shape(int64_t hs, uint64_t *width, uint64_t *windows)
{
    if (hs <= 128) {
        *width = hs <= 0 ? 0 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
        *windows = hs <= 64 ? 1 : 2;
    } else {
        *width = u(hs);
        *windows = (u(hs) + 127) / 128;
    }
}

zt_attn_flops zt_attn_flops_forward(zt_dtype dt, int64_t n, int64_t h, int64_t t, int64_t c,
                                    float scale, bool causal)
{
    const int64_t hs = h > 0 ? c / h : 0;
    zt_attn_flops f = {0, 0};
    if (zt_attn_flops_tensor_path(dt, hs, scale)) {
        f.tensor_flops = 4 * u(hs) * u(n) * u(h) * fm_forward_pairs(t, hs, causal);
        f.flops = f.tensor_flops;
    } else {
        /* Q K^T in every window, P V once. */
        uint64_t width, w;
        scalar_shape(hs, &width, &w);
        f.flops = (2 * w + 2) * scalar_pairs(n, h, t, causal) * width;
    }
    return f;
}

zt_attn_flops zt_attn_flops_backward(zt_dtype dt, int64_t n, int64_t h, int64_t t, int64_t c,
                                     float scale, bool causal)
{
    const int64_t hs = h > 0 ? c / h : 0;
    const uint64_t rowdot = 2 * u(n) * u(t) * u(c); /* D = rowsum(dY Y) */
    zt_attn_flops f = {0, 0};
    if (zt_attn_flops_tensor_path(dt, hs, scale)) {
        f.tensor_flops = 10 * u(hs) * u(n) * u(h) * fm_backward_pairs(t, causal);
        f.flops = f.tensor_flops + rowdot;
    } else {
        /* Q K^T and dP in every window of both the dK/dV and the dQ
         * kernels, dV, dK and dQ once. */
        uint64_t width, w;
        scalar_shape(hs, &width, &w);
        f.flops = (8 * w + 6) * scalar_pairs(n, h, t, causal) * width + rowdot;
    }
    return f;
}
