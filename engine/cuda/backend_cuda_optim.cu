/*
 * backend_cuda_optim: the CUDA backend's adam and sgd ops, element-wise
 * functors run by the map kernel (cuda_common.cuh).
 *
 * Numerics: every operation of engine/cpu/optim_cpu.c's loops, in its order,
 * as a correctly rounded intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn,
 * __fsqrt_rn; no FMA), so a step rounds exactly like the CPU's.
 *
 * Memory: in place on the caller's buffers; nothing is allocated.
 * Collective: none.
 */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

namespace {

/* ---- Per-element functors. ---- */

/* FusedAdam per element, operation for operation as zt_adam_cpu. */
struct adam_coeffs {
    float lr, b1, b2, eps, wd, bc1, bc2, omb1, omb2;
};

template <bool ADAMW> struct adam_op {
    float *p;
    const float *g;
    float *m;
    float *v;
    adam_coeffs c;
    template <int W> __device__ void run(int64_t i) const
    {
        float pv[W], gv[W], mv[W], vv[W];
        load_elems<ZT_F32, W>(p, i, pv);
        load_elems<ZT_F32, W>(g, i, gv);
        load_elems<ZT_F32, W>(m, i, mv);
        load_elems<ZT_F32, W>(v, i, vv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float pi = pv[k];
            float gi = gv[k];
            if constexpr (!ADAMW)
                gi = __fadd_rn(gi, __fmul_rn(c.wd, pi));
            float mi = __fadd_rn(__fmul_rn(c.b1, mv[k]), __fmul_rn(c.omb1, gi));
            float vi = __fadd_rn(__fmul_rn(c.b2, vv[k]), __fmul_rn(__fmul_rn(c.omb2, gi), gi));
            float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, c.bc2)), c.eps);
            float update = __fdiv_rn(__fdiv_rn(mi, c.bc1), denom);
            if constexpr (ADAMW)
                update = __fadd_rn(update, __fmul_rn(c.wd, pi));
            mv[k] = mi;
            vv[k] = vi;
            pv[k] = __fsub_rn(pi, __fmul_rn(c.lr, update));
        }
        store_elems<ZT_F32, W>(m, i, mv);
        store_elems<ZT_F32, W>(v, i, vv);
        store_elems<ZT_F32, W>(p, i, pv);
    }
};

/* zt_sgd_cpu's five loops, in its order of choice. */
enum sgd_mode { SGD_PLAIN, SGD_FIRST_NESTEROV, SGD_FIRST, SGD_NESTEROV, SGD_MOMENTUM };

template <int MODE> struct sgd_op {
    float *p;
    const float *g;
    float *buf; /* unused (may be NULL) in SGD_PLAIN */
    float lr, mom, wd, omd;
    template <int W> __device__ void run(int64_t i) const
    {
        float pv[W], gv[W], bv[W];
        load_elems<ZT_F32, W>(p, i, pv);
        load_elems<ZT_F32, W>(g, i, gv);
        if constexpr (MODE == SGD_NESTEROV || MODE == SGD_MOMENTUM)
            load_elems<ZT_F32, W>(buf, i, bv);
#pragma unroll
        for (int k = 0; k < W; k++) {
            float pi = pv[k];
            float gi = __fadd_rn(gv[k], __fmul_rn(wd, pi));
            float step;
            if constexpr (MODE == SGD_PLAIN) {
                step = gi;
            } else if constexpr (MODE == SGD_FIRST_NESTEROV) {
                bv[k] = gi;
                step = __fadd_rn(gi, __fmul_rn(mom, gi));
            } else if constexpr (MODE == SGD_FIRST) {
                bv[k] = gi;
                step = gi;
            } else if constexpr (MODE == SGD_NESTEROV) {
                bv[k] = __fadd_rn(__fmul_rn(mom, bv[k]), __fmul_rn(omd, gi));
                step = __fadd_rn(gi, __fmul_rn(mom, bv[k]));
            } else {
                bv[k] = __fadd_rn(__fmul_rn(mom, bv[k]), __fmul_rn(omd, gi));
                step = bv[k];
            }
            pv[k] = __fsub_rn(pi, __fmul_rn(lr, step));
        }
        if constexpr (MODE != SGD_PLAIN)
            store_elems<ZT_F32, W>(buf, i, bv);
        store_elems<ZT_F32, W>(p, i, pv);
    }
};

/* ---- Optimizers. ---- */

void cuda_adam(const zt_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
               const zt_adam_hparams *hp)
{
    zt_cuda_impl *impl = impl_of(be);
    /* As zt_adam_cpu: beta^t in double on the host, then fp32 per element. */
    float bc1 = 1.0f, bc2 = 1.0f;
    if (hp->bias_correction) {
        bc1 = (float)(1.0 - pow((double)hp->beta1, (double)hp->step));
        bc2 = (float)(1.0 - pow((double)hp->beta2, (double)hp->step));
    }
    adam_coeffs c;
    c.lr = hp->lr;
    c.b1 = hp->beta1;
    c.b2 = hp->beta2;
    c.eps = hp->eps;
    c.wd = hp->weight_decay;
    c.bc1 = bc1;
    c.bc2 = bc2;
    c.omb1 = 1.0f - hp->beta1;
    c.omb2 = 1.0f - hp->beta2;
    bool vec4 = aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16);
    if (hp->adam_w_mode)
        launch_map4(impl, adam_op<true>{p, g, m, v, c}, n, vec4, "adam");
    else
        launch_map4(impl, adam_op<false>{p, g, m, v, c}, n, vec4, "adam");
}

template <int MODE>
void sgd_launch(zt_cuda_impl *impl, float *p, const float *g, float *buf, int64_t n,
                const zt_sgd_hparams *hp)
{
    sgd_op<MODE> op{p, g, buf, hp->lr, hp->momentum, hp->weight_decay, 1.0f - hp->dampening};
    bool vec4 = aligned(p, 16) && aligned(g, 16) && (MODE == SGD_PLAIN || aligned(buf, 16));
    launch_map4(impl, op, n, vec4, "sgd");
}

void cuda_sgd(const zt_backend *be, float *p, const float *g, float *buf, int64_t n,
              const zt_sgd_hparams *hp)
{
    zt_cuda_impl *impl = impl_of(be);
    if (hp->momentum == 0.0f)
        sgd_launch<SGD_PLAIN>(impl, p, g, buf, n, hp);
    else if (hp->first_step && hp->nesterov)
        sgd_launch<SGD_FIRST_NESTEROV>(impl, p, g, buf, n, hp);
    else if (hp->first_step)
        sgd_launch<SGD_FIRST>(impl, p, g, buf, n, hp);
    else if (hp->nesterov)
        sgd_launch<SGD_NESTEROV>(impl, p, g, buf, n, hp);
    else
        sgd_launch<SGD_MOMENTUM>(impl, p, g, buf, n, hp);
}

} // namespace

void zt_backend_cuda_optim_ops(zt_backend *be)
{
    be->adam = cuda_adam;
    be->sgd = cuda_sgd;
}
