/*
 * backend: the device interface. One instance per backend (CPU always; CUDA when
 * built with nvcc), a struct of function pointers in the style of ggml's backend
 * interface. Layers, the optimizer and the engine call only these, so every
 * feature written against the CPU backend runs on the others unchanged.
 *
 * Backends are found through one table (ggml's registry): a row per backend
 * with its name, whether it was built, its device count and its init.
 * Choosing a device asks the table; only the backend's own folder (engine/cpu,
 * engine/cuda, each with a header for what is specific to it) knows more.
 *
 * Conventions: row-major tensors; pointers passed to ops are device pointers of
 * this backend; float32 math with float32 accumulation unless stated; ops are
 * enqueued on the backend's compute stream (synchronous on CPU), `sync` waits.
 * Ops that return a host value (sum_squares, has_inf_nan) synchronise.
 *
 * Typed tensors: the ops a 16-bit training step runs take a storage dtype
 * `dt` as their second argument. The tensors their comments mark (dt) are
 * stored in it: activations, the parameters they read, the activation
 * gradients between and inside units. Those marked fp32 are always float:
 * parameter gradients, per-row statistics (mean, rstd, log-sum-exp) and
 * scratch. Math is float32 whatever dt is: an op reads (dt) values widened
 * exactly, computes as its fp32 form does and rounds each (dt) output once
 * (round to nearest even; fp16 overflow gives +-inf), so a backend needs no
 * fp32 copy of a 16-bit tensor and no per-GEMM operand cast. dt = ZT_F32 is
 * the fp32 contract itself. Counts, strides and ld are in elements. Which
 * dtypes a backend takes: typed_dtypes.
 *
 * Memory: a backend's own state (impl) is made by its row's init and freed by
 * its destroy (through zt_backend_free). `alloc`/`free` hand out raw device
 * memory; only engine/arena calls them (one allocation per arena), everything
 * else lives inside arenas. A backend that needs device scratch inside its ops
 * (the CUDA backend's GEMM operand casts and cuBLAS workspace) asks for
 * `workspace_bytes` and gets a WORK-arena block through `set_workspace`;
 * without one it takes slower paths that need none. Host arenas come from
 * `host_alloc` when a backend has it (pinned memory, so copies run at full
 * speed and can be asynchronous).
 *
 * Errors: ops return nothing because a device reports failures late
 * (asynchronously); a backend records the first one and `check` returns it.
 * The trainer calls `check` once per step, so a failure stops the run within
 * one step with the op's name in the message.
 * Collective: none.
 */
#ifndef ZT_BACKEND_H
#define ZT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/dtype.h"
#include "engine/status.h"

typedef enum { ZT_DEVICE_CPU = 0, ZT_DEVICE_CUDA = 1 } zt_device_kind;

typedef struct zt_backend zt_backend;

/* Adam/AdamW hyper-parameters for one step, DeepSpeed FusedAdam equations. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    bool adam_w_mode;     /* decoupled weight decay */
    bool bias_correction;
    int64_t step;         /* applied steps including this one, >= 1 */
} zt_adam_hparams;

/* Keyed dropout over a tensor (n, a, b, c), contiguous. Element (s, i, j, k)
 * is kept iff zt_rng_uniform(row_seed, 0, (i * key_b + j) * key_c + k) >= p,
 * row_seed = zt_dropout_row_seed(seed, site, step, row_keys[s]) (engine/rng.h).
 * key_b >= b and key_c >= c are the extents of the model's largest shape, so a
 * position's mask never depends on how much padding its batch carries; row_keys
 * are global sample positions, so it never depends on the rank either. */
typedef struct {
    uint64_t seed;
    uint64_t site;             /* which dropout of the model (zt_dropout_site) */
    int64_t step;              /* optimizer step */
    const uint64_t *row_keys;  /* (n) device */
    int64_t n, a, b, c;
    int64_t key_b, key_c;
    float p;                   /* drop probability in [0, 1) */
} zt_dropout_desc;

/* Query rows per tile of the fused attention ops: the CPU backend's GEMM tile
 * (64 queries by all their keys) and the size of their scratch. */
#define ZT_ATTN_FLASH_TILE 64

/* Scratch floats attn_flash_forward/backward need for heads of size hs:
 * the CPU's two (tile, t) blocks per (sample, head) pair, so every pair runs
 * on its own, or the CUDA tensor-core backward's row sums and fp32 dQ
 * accumulator, (hs + 1) floats a row, whichever is more; linear in t. */
static inline int64_t zt_attn_flash_work_numel(int64_t n, int64_t h, int64_t t, int64_t hs)
{
    int64_t tile = t < ZT_ATTN_FLASH_TILE ? t : ZT_ATTN_FLASH_TILE;
    int64_t per_row = 2 * tile > hs + 1 ? 2 * tile : hs + 1;
    return n * h * per_row * t;
}

/* torch.optim.SGD semantics. */
typedef struct {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first_step; /* momentum buffer is initialised to the gradient */
} zt_sgd_hparams;

/* The activation of a fused linear epilogue (linear_act_forward, act_bias_grad). */
typedef enum { ZT_ACT_NONE = 0, ZT_ACT_RELU = 1, ZT_ACT_GELU = 2 } zt_act;

/* A device's memory as its driver reports it now (zt_backend mem_info). */
typedef struct {
    uint64_t free_bytes, total_bytes;
    char id[48]; /* what identifies the device physically (zt_backend_entry device_id) */
} zt_device_mem;

struct zt_backend {
    const char *name;
    zt_device_kind kind;
    void *impl;
    /* Frees what init made (impl and everything it holds) and clears *be, so
     * use after free fails loudly. Callers go through zt_backend_free. */
    void (*destroy)(zt_backend *be);

    /* Memory. alloc returns 64-byte aligned, uninitialised device memory. */
    zt_status (*alloc)(const zt_backend *be, size_t bytes, void **out);
    void (*free)(const zt_backend *be, void *ptr);
    /* Page-locked host memory (64-byte aligned) for host arenas; NULL on
     * backends whose device memory is host memory. */
    zt_status (*host_alloc)(const zt_backend *be, size_t bytes, void **out);
    void (*host_free)(const zt_backend *be, void *ptr);
    /* (optional: NULL where device memory is host memory) The device's free
     * and total memory now, and its id, so that ranks sharing it add up. */
    zt_status (*mem_info)(const zt_backend *be, zt_device_mem *out);
    /* Device scratch: workspace_bytes is what the backend asks for (0: none);
     * set_workspace hands it a block of at least that many bytes that stays
     * valid until the backend is freed or set_workspace is called again. */
    size_t workspace_bytes;
    /* The part of workspace_bytes that only GEMMs on fp32 operands use (the
     * CUDA backend's 16-bit operand casts; 0 for a backend without them). A
     * caller whose GEMMs all take 16-bit tensors as stored (typed units) may
     * hand over workspace_bytes - workspace_cast_bytes; an fp32-operand GEMM
     * then runs in fp32. */
    size_t workspace_cast_bytes;
    /* Bit dt (1 << dt) set: the typed ops take tensors of dt (ZT_F32's is
     * always set). Mixed precision runs its units on 16-bit tensors only
     * where the backend takes them; elsewhere on fp32 copies. */
    uint64_t typed_dtypes;
    void (*set_workspace)(const zt_backend *be, void *ptr, size_t bytes);
    /* The first device failure since init (ZT_OK when none), recorded with
     * zt_fail so the message names the op. Synchronises. */
    zt_status (*check)(const zt_backend *be);
    /* copy_h2d and copy_d2h return when the copy is complete (the source may be
     * reused, the destination read); copy_d2d and memset_zero are ordered on the
     * compute stream like every other op. */
    void (*copy_h2d)(const zt_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy_d2h)(const zt_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy_d2d)(const zt_backend *be, void *dst, const void *src, size_t bytes);
    void (*memset_zero)(const zt_backend *be, void *dst, size_t bytes);
    void (*sync)(const zt_backend *be);

    /* C(m,n) = alpha * op(A) * op(B) + beta * C, row-major; op(A) is (m,k),
     * op(B) is (k,n); lda/ldb/ldc are row strides of the stored matrices.
     * A and B are (dt), C is (c_dt): a weight gradient is fp32 from 16-bit
     * operands. With c_dt 16-bit, beta * C + product is rounded once. */
    void (*gemm)(const zt_backend *be, zt_dtype dt, zt_dtype c_dt, bool trans_a, bool trans_b,
                 int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                 const void *b, int64_t ldb, float beta, void *c, int64_t ldc);
    /* y(rows, cols) (dt) += bias(cols) (dt) broadcast over rows. */
    void (*bias_add)(const zt_backend *be, zt_dtype dt, void *y, const void *bias, int64_t rows,
                     int64_t cols);
    /* dbias(cols) (fp32) = (accumulate ? dbias : 0) + sum over rows of
     * dy(rows, cols) (dt). */
    void (*bias_grad)(const zt_backend *be, zt_dtype dt, float *dbias, const void *dy,
                      int64_t rows, int64_t cols, bool accumulate);
    /* y = max(x, 0); in place allowed. */
    void (*relu_forward)(const zt_backend *be, float *y, const float *x, int64_t n);
    /* dx = dy * (y > 0); in place (dx == dy) allowed. */
    void (*relu_backward)(const zt_backend *be, float *dx, const float *dy, const float *y,
                          int64_t n);
    /* Softmax cross-entropy over rows of logits (rows, ld): columns
     * [0, classes) are the classes, columns [classes, ld) are padding (a
     * vocabulary padded to a multiple of 128), never read and never counted.
     * Rows whose label is ignore_index contribute nothing. Returns the sum over
     * counted rows of -log softmax(logits)[label] (as float64 on the host) and
     * writes dlogits (rows, ld) = dscale * (softmax - onehot): zero rows for
     * ignored labels, exactly 0 in the padding columns. dlogits may be NULL
     * (eval) or logits itself: the op reads a row (one pass, a running max
     * and rescaled sum over chunks of the row) before it writes that row, so
     * the trainer needs no separate (rows, ld) gradient buffer. Labels outside
     * [0, classes) other than ignore_index are an internal error caught
     * earlier by the data loaders. logits and dlogits are (dt). */
    double (*xent_forward_backward)(const zt_backend *be, zt_dtype dt, const void *logits,
                                    const int32_t *labels, int64_t rows, int64_t classes,
                                    int64_t ld, int32_t ignore_index, float dscale,
                                    void *dlogits);
    /* x *= a */
    void (*scale)(const zt_backend *be, float *x, float a, int64_t n);
    /* y += a * x, both (dt) */
    void (*axpy)(const zt_backend *be, zt_dtype dt, void *y, float a, const void *x, int64_t n);
    /* sum of x^2 (x read as fp32) accumulated in float64, in a fixed order */
    double (*sum_squares)(const zt_backend *be, const void *x, zt_dtype dt, int64_t n);
    /* any inf or nan in x */
    bool (*has_inf_nan)(const zt_backend *be, const void *x, zt_dtype dt, int64_t n);
    /* dst(n) = (accumulate ? dst : 0) + alpha * src in fp32, rounded once to
     * dst_dt; the semantics of zt_convert_host (engine/dtype.h). This is every
     * cast, scaled cast and mixed-type accumulation of mixed precision. */
    void (*convert)(const zt_backend *be, void *dst, zt_dtype dst_dt, const void *src,
                    zt_dtype src_dt, int64_t n, float alpha, bool accumulate);
    /* ---- Transformer layers. Float32 in and out; reductions accumulate in
     * float32 in a fixed order (the result never depends on the thread count),
     * except where float64 is stated. ---- */

    /* y(rows, cols) (dt) = (accumulate ? y : 0) + table[ids[r]] (table (vocab,
     * cols) (dt)). */
    void (*embedding_forward)(const zt_backend *be, zt_dtype dt, void *y, const int32_t *ids,
                              const void *table, int64_t rows, int64_t cols, bool accumulate);
    /* dtable(vocab, cols) (fp32) = (accumulate ? dtable : 0) + sum over rows r
     * with ids[r] == v of dy[r] (dt), added in increasing r. */
    void (*embedding_backward)(const zt_backend *be, zt_dtype dt, float *dtable,
                               const int32_t *ids, const void *dy, int64_t rows, int64_t cols,
                               int64_t vocab, bool accumulate);
    /* y(n, t, cols) (dt) += PE(t, cols), PyTorch's sinusoidal table:
     * PE[i][2k] = sin(i * w_k), PE[i][2k+1] = cos(i * w_k), w_k = exp(-2k ln(10000) / cols),
     * computed in float64 and rounded to fp32; y + PE is added in fp32 and
     * rounded once to dt. */
    void (*sinusoid_add)(const zt_backend *be, zt_dtype dt, void *y, int64_t n, int64_t t,
                         int64_t cols);
    /* Per row of x (rows, cols): mean, rstd = 1/sqrt(var + eps) (biased var,
     * accumulated in float64), y = (x - mean) * rstd * w + b. y may not alias x.
     * x, w, b, y are (dt); mean, rstd fp32. */
    void (*layernorm_forward)(const zt_backend *be, zt_dtype dt, void *y, float *mean,
                              float *rstd, const void *x, const void *w, const void *b,
                              int64_t rows, int64_t cols, float eps);
    /* From dy: dx = (accumulate_dx ? dx : 0) + d/dx; dw, db = (accumulate_params ?
     * dw, db : 0) + sums over rows, added to the starting value in increasing row
     * order (the CUDA backend: in that order within segments of at least 1,024
     * rows, then the segment sums in segment order, so that a long column is
     * not one serial chain; a fixed order, within rounding of the CPU's).
     * dx == dy allowed. mean and rstd are what forward wrote. dx, dy, x, w are
     * (dt); dw, db, mean, rstd fp32. */
    void (*layernorm_backward)(const zt_backend *be, zt_dtype dt, void *dx, float *dw, float *db,
                               const void *dy, const void *x, const float *mean,
                               const float *rstd, const void *w, int64_t rows, int64_t cols,
                               bool accumulate_dx, bool accumulate_params);
    /* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); y == x allowed. */
    void (*gelu_forward)(const zt_backend *be, float *y, const float *x, int64_t n);
    /* dx = dy * gelu'(x); dx == dy allowed. */
    void (*gelu_backward)(const zt_backend *be, float *dx, const float *dy, const float *x,
                          int64_t n);
    /* ---- Fused epilogues. Each gives exactly the float32 results of the
     * unfused sequence it replaces (the op-by-op path of --fused-ops off, which
     * leaves these four NULL and makes models/layers.c take that sequence),
     * in fewer passes over memory or with more of the device busy. ---- */

    /* Residual add + layernorm, one pass per row: x1 = x + branch (what
     * copy_d2d + axpy gave), then y, mean, rstd as layernorm_forward(x1).
     * x1 may alias x or branch; y may alias none of x1, x, branch. All (dt)
     * but mean, rstd; y normalises x1 as stored (rounded to dt). */
    void (*residual_layernorm_forward)(const zt_backend *be, zt_dtype dt, void *x1, void *y,
                                       float *mean, float *rstd, const void *x,
                                       const void *branch, const void *w, const void *b,
                                       int64_t rows, int64_t cols, float eps);
    /* Linear with its bias and activation as the GEMM's epilogue:
     * v = x(rows, in) w(out, in)^T + bias (what gemm + bias_add gave), y =
     * act(v) (relu_forward / gelu_forward). pre (rows, out), where given,
     * receives v: GELU's backward needs it; ReLU's reads y and NONE needs
     * nothing, so both take pre NULL and y is the only output. bias may be NULL.
     * All (dt); v is rounded to dt (as pre stores it) before act reads it. */
    void (*linear_act_forward)(const zt_backend *be, zt_dtype dt, void *y, void *pre,
                               const void *x, const void *w, const void *bias, int64_t rows,
                               int64_t in, int64_t out, zt_act act);
    /* The bias-gradient epilogue, one pass over dy(rows, cols): dpre = dy *
     * act'(v) (gelu_backward with v = pre; ReLU the select of relu_backward
     * with pre = y; NONE a copy, pre unused) and dbias(cols) = (accumulate ?
     * dbias : 0) + column sums of dpre in bias_grad's order. dpre == dy allowed.
     * dpre, dy, pre (dt); dbias fp32, summed from dpre as stored (rounded). */
    void (*act_bias_grad)(const zt_backend *be, zt_dtype dt, void *dpre, float *dbias,
                          const void *dy, const void *pre, int64_t rows, int64_t cols,
                          zt_act act, bool accumulate);
    /* A linear layer's backward, the three ops of its unfused sequence in one
     * call: dw(out, in) = (accumulate ? dw : 0) + dy^T x (gemm), dbias(out)
     * likewise (bias_grad; skipped when NULL), dx(rows, in) = (dx_accumulate ?
     * dx : 0) + dy w (gemm; skipped when NULL). dy (rows, out) has row stride
     * ldy >= out, and ldy == out where dbias is given. The two products are
     * independent, so a backend may run them at the same time: dx must not
     * overlap dy, x or w (models/layers.c runs an in-place dx == x op by op).
     * dx, dy, x, w (dt); dw, dbias fp32. */
    void (*linear_backward)(const zt_backend *be, zt_dtype dt, void *dx, float *dw,
                            float *dbias, const void *dy, int64_t ldy, const void *x,
                            const void *w, int64_t rows, int64_t in, int64_t out,
                            bool accumulate, bool dx_accumulate);
    /* For i in [0, batch): C_i = alpha op(A_i) op(B_i) + beta C_i with A_i = a + i *
     * stride_a, B_i = b + i * stride_b, C_i = c + i * stride_c; otherwise as gemm.
     * The C_i must not overlap. k == 0 gives C = beta C (beta == 0 writes zeros)
     * without reading A or B. */
    void (*gemm_batched)(const zt_backend *be, bool trans_a, bool trans_b, int64_t m,
                         int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                         int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                         float beta, float *c, int64_t ldc, int64_t stride_c, int64_t batch);
    /* In place on scores att (n, h, t, t): row (s, hh, i) becomes
     * softmax_j(scale * att) over the allowed keys j (j <= i when causal, and
     * j < lengths[s] <= t when lengths is not NULL); other entries become exactly
     * 0. A row with no allowed key (lengths[s] == 0) is all 0. Row maxima and
     * sums in float32, left to right; p = e * (1 / sum). */
    void (*attn_softmax_forward)(const zt_backend *be, float *att, int64_t n, int64_t h,
                                 int64_t t, float scale, bool causal, const int32_t *lengths);
    /* In place: datt (rows, t) holds dL/dP for probabilities p (rows, t) and
     * becomes dL/dscores = scale * p * (dP - sum_j dP_j p_j). */
    void (*attn_softmax_backward)(const zt_backend *be, float *datt, const float *p,
                                  int64_t rows, int64_t t, float scale);
    /* Fused (flash) attention on the fused qkv (n * t, 3c) of h heads of size
     * hs = c / h: Q, K, V are its column blocks, head hh the columns
     * [hh * hs, (hh + 1) * hs) of each. For row (s, hh, i) over the allowed keys
     * j (as attn_softmax_forward: j <= i when causal, j < lengths[s] when
     * lengths is not NULL), with p_j = softmax_j(scale q_i . k_j) and the keyed
     * mask of `drop` (a tensor (n, h, t, t): element (s, hh, i, j) is kept
     * exactly when `dropout` would keep it, scale 1 / (1 - p)):
     *   y(s, i, hh) = sum_j drop(p)_j v_j   into y (n * t, c), heads side by side,
     *   lse(s, hh, i) = log sum_j exp(scale q_i . k_j)   into lse (n, h, t).
     * A row with no allowed key gets y = 0 and lse = 0. No (t, t) tensor is
     * stored: `work` holds at least zt_attn_flash_work_numel(n, h, t, hs) floats of
     * scratch. Softmax in float32. The CPU backend sums in one fixed order;
     * the CUDA backend's tensor-core path (bf16, fp16 at head sizes 64 and
     * 128) rounds P (and backward dS) to dt as operands and adds dQ with
     * atomics (docs/gpu.md), within op-check's stated tolerances.
     * qkv, y (dt); lse, work fp32. */
    void (*attn_flash_forward)(const zt_backend *be, zt_dtype dt, void *y, float *lse,
                               float *work, const void *qkv, int64_t n, int64_t h, int64_t t,
                               int64_t c, float scale, bool causal, const int32_t *lengths,
                               const zt_dropout_desc *drop);
    /* Its backward: from dy (n * t, c), the forward's y and lse and qkv, writes
     * dqkv (n * t, 3c) (assigns), recomputing p per tile from lse (p_j =
     * exp(scale q_i . k_j - lse_i)) with D_i = dy_i . y_i. Rows with no allowed
     * key, and keys no row attends to, get zero gradients. Same `work` as the
     * forward. dqkv, dy, y, qkv (dt); lse, work fp32. */
    void (*attn_flash_backward)(const zt_backend *be, zt_dtype dt, void *dqkv, const void *dy,
                                const void *y, const float *lse, const void *qkv, float *work,
                                int64_t n, int64_t h, int64_t t, int64_t c, float scale,
                                bool causal, const int32_t *lengths, const zt_dropout_desc *drop);
    /* y = x * (keep ? scale : 0) with scale = 1.0f / (1.0f - p) in float32 and the
     * keyed mask of `d` (as torch does: inf or nan at a dropped position gives
     * nan, which the overflow check sees); p == 0 is an exact copy. y == x
     * allowed. The same call with dy for x gives the backward pass: masks are
     * recomputed, never stored. x, y (dt). */
    void (*dropout)(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                    const zt_dropout_desc *d);
    /* y(n, cols) = mean over i < lengths[s] of x(n, t, cols) (all t when lengths
     * is NULL); sums in float32 in increasing i, then divided by the length.
     * 1 <= lengths[s] <= t. x, y (dt). */
    void (*mean_pool_forward)(const zt_backend *be, zt_dtype dt, void *y, const void *x,
                              const int32_t *lengths, int64_t n, int64_t t, int64_t cols);
    /* dx(n, t, cols) = dy / len (a division) at i < len, 0 elsewhere (assigns).
     * dx, dy (dt). */
    void (*mean_pool_backward)(const zt_backend *be, zt_dtype dt, void *dx, const void *dy,
                               const int32_t *lengths, int64_t n, int64_t t, int64_t cols);

    /* ---- Block quantization (ZeRO++ qwZ and qgZ, engine/zero/quant.h). ----
     * x(n), read as fp32, in blocks of `block` elements (the last block may be
     * shorter). Per block, with a = max |x| over it, DeepSpeed's symmetric
     * format (csrc/includes/quantization_utils.h):
     *   mult = 2^(bits-1) / a in fp32 (1 when a == 0),
     *   q = clamp(rint(x * mult), -2^(bits-1), 2^(bits-1) - 1) (ties to even),
     *   scales[b] = 1 / mult in fp32,
     * so |x - q * scale| <= scale / 2, and <= scale for the clamped +a side.
     * A block holding an inf or a NaN gets the scale NaN and q = 0: it
     * dequantizes to NaN, so an fp16 overflow is never quantized away. A block
     * so small that mult overflows (a < 2^(bits-1) / FLT_MAX) gets q = 0 and
     * the scale 0.
     * bits 8: q is int8_t[n]. bits 4: element i is the two's-complement nibble
     * of byte i / 2, the low nibble for even i (the odd tail's high nibble 0);
     * block must be even so no byte spans two blocks. */
    void (*quantize)(const zt_backend *be, void *q, float *scales, const void *x, zt_dtype dt,
                     int64_t n, int64_t block, int bits);
    /* y(n) = (accumulate ? y : 0) + q_i * scales[i / block], the product and
     * the sum each rounded in fp32 (two roundings, as `convert`), the result
     * rounded once to dt. */
    void (*dequantize)(const zt_backend *be, void *y, zt_dtype dt, const void *q,
                       const float *scales, int64_t n, int64_t block, int bits, bool accumulate);

    /* One Adam/AdamW step on a flat shard, in place on p, m, v. */
    void (*adam)(const zt_backend *be, float *p, const float *g, float *m, float *v,
                 int64_t n, const zt_adam_hparams *hp);
    /* One SGD step on a flat shard; buf is the momentum buffer (unused when
     * momentum == 0). */
    void (*sgd)(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
                const zt_sgd_hparams *hp);
};

/* What init needs to know about the device, for every backend alike; a
 * backend ignores what does not apply to it (the CPU ignores all of it). */
typedef struct {
    int device;          /* device ordinal of the backend's kind (CUDA) */
    bool tf32;           /* let fp32 GEMMs use TF32 tensor cores (off: exact fp32) */
    zt_dtype gemm_dtype; /* ZT_F16/ZT_BF16: GEMM operands are rounded to it and
                          * multiplied on tensor cores with fp32 accumulation and
                          * fp32 output (what torch.autocast does); ZT_F32: fp32 */
} zt_backend_options;

/* One row of the backend table, defined next to the backend's code (a backend
 * that was not compiled in defines its row in its *_absent.c, with built()
 * false, a count of 0 and an init that fails saying why). */
typedef struct {
    const char *name;    /* the --device spelling: "cpu", "cuda" */
    zt_device_kind kind;
    /* Whether this binary was compiled with the backend. */
    bool (*built)(void);
    /* Devices this process can use; 0 with *why set (static text: no driver,
     * no device, not built) when there are none. */
    int (*device_count)(const char **why);
    /* Makes a backend on opt->device; free it with zt_backend_free. On failure
     * *be holds nothing that needs freeing. */
    zt_status (*init)(zt_backend *be, const zt_backend_options *opt);
    /* (optional) What identifies device `ordinal` physically (CUDA: its UUID,
     * as hex) into out (n bytes): ranks that see the same text share the
     * device, however CUDA_VISIBLE_DEVICES numbers it. False when unknown. */
    bool (*device_id)(int ordinal, char *out, size_t n);
    /* (optional) Makes device `ordinal` this process's current device before
     * MPI starts, so a CUDA-aware MPI creates its context there and not on
     * device 0 of every rank. */
    void (*select_early)(int ordinal);
} zt_backend_entry;

/* The rows, one per backend (engine/cpu/backend_cpu.c, engine/cuda/). The
 * table in backend.c names them through these declarations, so engine/ needs
 * no header of a backend's folder. */
extern const zt_backend_entry zt_backend_cpu_entry;
extern const zt_backend_entry zt_backend_cuda_entry;

/* The table's row for a device kind (NULL for a kind no row has). */
const zt_backend_entry *zt_backend_find(zt_device_kind kind);

/* Clears the fused ops (residual_layernorm_forward, linear_act_forward,
 * act_bias_grad, linear_backward), so models/layers.c runs the op-by-op sequences they
 * replace: --fused-ops off, the comparison the fused path is tested against. */
void zt_backend_unfuse(zt_backend *be);

/* Frees whichever backend *be is, through its destroy; a zeroed *be (never
 * initialised, or freed already) is left as it is. */
void zt_backend_free(zt_backend *be);

#endif
