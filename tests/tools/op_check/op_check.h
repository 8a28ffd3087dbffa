/*
 * op_check: what the files of op-check share (main.c says what the tool does
 * and how it judges a case): the thresholds, the run's state (the two
 * backends, the GEMM setting, the seed, the tallies), random inputs, tensors
 * held on both backends (pair), the error metrics and the case protocol
 * (oc_begin, oc_add_err/oc_miss/oc_cmp_*, oc_end), and one function per op.
 *
 * Memory: oc_xmalloc, oc_rand_*, oc_filled, oc_to_dtype and oc_fetch return
 * host buffers the caller frees; a pair's two buffers come from the backends
 * and go back through oc_pair_free. Collective: none (no MPI).
 */
#ifndef ZT_OP_CHECK_H
#define ZT_OP_CHECK_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/dtype.h"

/* Thresholds of the metrics (main.c says why each). */
#define THR_EXACT 0.0
#define THR_ULP 1e-6
#define THR_F32 1e-5
#define THR_F64 1e-12
#define THR_TF32 5e-3
#define THR_BF16 1e-2
#define THR_FP16 2e-3
/* Typed cases: one unit in the last place of a 16-bit output's dtype. */
#define THR_ULP_BF16 1e-2
#define THR_ULP_FP16 2e-3
/* Tensor-core attention (`mag`): 3u + u^2 with u = 2^-8 (bf16), 2^-11 (fp16)
 * plus fp32 accumulation (ops_flash_mma.c). */
#define THR_ATTN_BF16 1.2e-2
#define THR_ATTN_FP16 2e-3

/* The CUDA backend's GEMM settings, each a backend of its own. */
typedef struct {
    const char *name;
    bool tf32;
    zt_dtype gemm_dt;
    double thr; /* for gemm and gemm_batched */
} gemm_setting;

typedef struct {
    zt_backend cpu, gpu;
    void *workspace; /* the CUDA backend's, from its own alloc */
    const gemm_setting *set;
    int device;
    bool quick;
    uint64_t seed;
    uint64_t draws; /* random tensors drawn so far: each gets its own stream */
    int cases, failures;
    bool device_error;
    jmp_buf abort_op; /* where a device error ends the running op */
} oc_state;

/* The run's state (main.c). */
extern oc_state oc;

/* ---- host buffers and random inputs (common.c) ---- */

/* Prints "op-check: error: ..." and exits 1. */
void oc_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void *oc_xmalloc(size_t bytes);
void *oc_dup_bytes(const void *src, size_t bytes);
/* Uniform in [lo, hi), keyed by (seed, tensor number, index). */
float *oc_rand_f32(int64_t n, float lo, float hi);
/* Uniform integers in [lo, hi). */
int32_t *oc_rand_i32(int64_t n, int32_t lo, int32_t hi);
uint8_t *oc_rand_bytes(int64_t n);
/* Uniform values with NaN, infinities and signed zeros at fixed places. */
float *oc_rand_specials(int64_t n, float lo, float hi);
float *oc_filled(int64_t n, float v);
/* x(n) fp32 in dt's storage (rounded to nearest even), a new buffer. */
void *oc_to_dtype(const float *x, int64_t n, zt_dtype dt);

/* ---- one tensor on both backends (common.c) ---- */

typedef struct {
    void *c, *g; /* the CPU backend's copy (host memory), the CUDA backend's */
    size_t bytes;
} pair;

/* A failure of the CUDA backend outside a case's comparison: a FAIL line, then
 * the running op ends (its buffers are left behind with the backend). */
void oc_device_failure(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
pair oc_pair_new(const void *host, size_t bytes);
pair oc_pair_f32(const float *host, int64_t n);
/* host(n) rounded to dt (nearest even), on both backends. */
pair oc_pair_dt(const float *host, int64_t n, zt_dtype dt);
void oc_pair_free(pair *p);
/* The CUDA backend's copy, on the host (the caller frees it). */
void *oc_fetch(const pair *p);

/* ---- errors (common.c; main.c defines the metrics) ---- */

double oc_norm_err(const float *ref, const float *got, int64_t n);
double oc_mag_err(const float *ref, const float *got, const float *mag, int64_t n);
double oc_rel_err(double ref, double got);
uint32_t oc_bits_at(const void *p, zt_dtype dt, int64_t i);
bool oc_nan_bits(uint32_t b, zt_dtype dt);
uint32_t oc_sign_bit(zt_dtype dt);

/* ---- cases (common.c): oc_begin, then errors added, then oc_end prints the
 * line and ends the op (longjmp to oc.abort_op) on a device error ---- */

typedef struct {
    char op[32];
    char what[120];
    char worst[32]; /* the output with the largest error */
    char note[160];
    const char *metric;
    double thr, err;
} tcase;

void oc_begin(tcase *k, const char *op, const char *metric, double thr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void oc_add_err(tcase *k, const char *output, double err);
/* An exact-class mismatch: counted; the first one is described in the note. */
void oc_miss(tcase *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void oc_cmp_f32(tcase *k, const char *output, const pair *p, int64_t n);
/* A tensor of dt, both copies widened to fp32, then as oc_cmp_f32. */
void oc_cmp_dt(tcase *k, const char *output, const pair *p, zt_dtype dt, int64_t n);
/* x(n) of dt widened to fp32, a new buffer. */
float *oc_widen(const void *x, zt_dtype dt, int64_t n);
/* The threshold of a typed case's dt outputs for an fp32 op judged at thr:
 * thr itself for fp32 and for exact ops (one correctly rounded operation per
 * element, rounded once more alike on both sides), else one unit in the last
 * place of dt (main.c). */
double oc_thr_dt(zt_dtype dt, double thr);
/* Bit for bit, in dt's storage. */
void oc_cmp_bits(tcase *k, const char *output, const pair *p, zt_dtype dt, int64_t n);
void oc_end(tcase *k);

/* A typed case: its outputs of dt in t (threshold oc_thr_dt(dt, thr)), its
 * fp32 outputs (statistics, parameter gradients, a loss) in f at the fp32
 * op's threshold f_thr, as both sides compute them from the same 16-bit
 * inputs. The description is prefixed with dt's name; f prints only when an
 * output was added to it. */
typedef struct {
    tcase t, f;
} tcase2;

void oc_begin2(tcase2 *k, const char *op, const char *metric, double thr, zt_dtype dt,
               const char *f_metric, double f_thr, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
void oc_end2(tcase2 *k);

/* ---- the ops, one function each (main.c's registry runs them) ---- */

/* ops_memory.c */
void op_alloc(void);
void op_host_alloc(void);
void op_copy(void);
void op_memset_zero(void);
void op_alloc_failure(void);
/* ops_gemm.c */
void op_gemm(void);
void op_gemm_batched(void);
/* ops_elementwise.c */
void op_bias_add(void);
void op_bias_grad(void);
void op_relu_forward(void);
void op_relu_backward(void);
void op_xent(void);
void op_scale(void);
void op_axpy(void);
void op_sum_squares(void);
void op_has_inf_nan(void);
void op_convert(void);
void op_gelu_forward(void);
void op_gelu_backward(void);
/* ops_fused.c */
void op_residual_layernorm(void);
void op_linear_act_forward(void);
void op_act_bias_grad(void);
/* ops_layers.c */
void op_embedding_forward(void);
void op_embedding_backward(void);
void op_sinusoid_add(void);
void op_layernorm_forward(void);
void op_layernorm_backward(void);
void op_attn_softmax_forward(void);
void op_attn_softmax_backward(void);
/* ops_flash.c */
void op_attn_flash(void);
void op_dropout(void);
void op_mean_pool(void);
/* ops_optim.c */
void op_adam(void);
void op_sgd(void);
/* ops_quant.c */
void op_quantize(void);
/* ops_typed.c, ops_typed_nn.c: the typed ops on bf16 and fp16 tensors, run
 * by the op of the same name after its fp32 cases */
extern const zt_dtype oc_typed_dts[2];
void typed_gemm(void);
void typed_bias_add(void);
void typed_bias_grad(void);
void typed_xent(void);
void typed_axpy(void);
void typed_linear_act_forward(void);
void typed_act_bias_grad(void);
void typed_embedding_forward(void);
void typed_embedding_backward(void);
void typed_layernorm_forward(void);
void typed_layernorm_backward(void);
void typed_residual_layernorm(void);
void typed_attn_flash(void);
/* ops_flash_mma.c: the tensor-core shapes */
void typed_attn_flash_mma(void);
void typed_dropout(void);
void typed_sinusoid_add(void);
void typed_mean_pool(void);

/* --gemm-peak: cuBLAS alone, no backend (gemm_peak.c). */
int oc_gemm_peak(int device);

#endif
