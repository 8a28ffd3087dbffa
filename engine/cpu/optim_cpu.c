/*
 * optim_cpu: the CPU kernels of Adam/AdamW and SGD (engine/cpu/cpu.h), behind
 * the CPU backend's adam/sgd ops and the offloaded optimizer
 * (engine/train/optim.c), so an offloaded step rounds exactly like one on the
 * CPU device.
 *
 * The kernels follow the reference equations operation for operation in fp32
 * (FusedAdam's multi_tensor_adam for Adam, torch.optim.SGD for SGD), with no
 * reassociation, so a CPU step rounds like the GPU kernel it stands in for.
 * Each is an element-wise OpenMP loop with static scheduling; the mode
 * branches are taken once, outside the loops, so every loop body is
 * straight-line code the compiler turns into vector instructions. Results do
 * not depend on the thread count.
 *
 * Memory: in place on the caller's buffers; nothing is allocated.
 * Collective: none.
 */
#include "engine/cpu/cpu.h"

#include <math.h>

/* Below this many elements a kernel runs on one thread: waking the team
 * costs more than the loop. */
#define ZT_OPTIM_PAR_MIN 32768

void zt_adam_cpu(float *p_, const float *g_, float *m_, float *v_, int64_t n,
                 const zt_adam_hparams *hp)
{
    /* The parameter shard, its gradient and the two moments are disjoint
     * buffers; saying so lets the loops vectorise without alias checks. */
    float *restrict p = p_;
    const float *restrict g = g_;
    float *restrict m = m_;
    float *restrict v = v_;

    /* As FusedAdam: beta^t in double on the host, then fp32 per element. */
    float bc1 = 1.0f, bc2 = 1.0f;
    if (hp->bias_correction) {
        bc1 = (float)(1.0 - pow((double)hp->beta1, (double)hp->step));
        bc2 = (float)(1.0 - pow((double)hp->beta2, (double)hp->step));
    }
    const float lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    const float wd = hp->weight_decay;
    const float omb1 = 1.0f - b1, omb2 = 1.0f - b2;

    if (hp->adam_w_mode) {
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i], pi = p[i];
            float mi = b1 * m[i] + omb1 * gi;
            float vi = b2 * v[i] + omb2 * gi * gi;
            float update = (mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * pi;
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - lr * update;
        }
    } else {
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            float mi = b1 * m[i] + omb1 * gi;
            float vi = b2 * v[i] + omb2 * gi * gi;
            float update = (mi / bc1) / (sqrtf(vi / bc2) + eps);
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - lr * update;
        }
    }
}

void zt_sgd_cpu(float *p_, const float *g_, float *buf_, int64_t n, const zt_sgd_hparams *hp)
{
    float *restrict p = p_;
    const float *restrict g = g_;
    float *restrict buf = buf_;
    const float lr = hp->lr, mom = hp->momentum, wd = hp->weight_decay;
    const float omd = 1.0f - hp->dampening;

    if (mom == 0.0f) {
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            p[i] = pi - lr * (g[i] + wd * pi);
        }
    } else if (hp->first_step && hp->nesterov) {
        /* torch starts the buffer as a copy of the gradient, undamped. */
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            buf[i] = gi;
            p[i] = pi - lr * (gi + mom * gi);
        }
    } else if (hp->first_step) {
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            buf[i] = gi;
            p[i] = pi - lr * gi;
        }
    } else if (hp->nesterov) {
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] + wd * pi;
            float bi = mom * buf[i] + omd * gi;
            buf[i] = bi;
            p[i] = pi - lr * (gi + mom * bi);
        }
    } else {
#pragma omp parallel for schedule(static) if (n > ZT_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float pi = p[i];
            float bi = mom * buf[i] + omd * (g[i] + wd * pi);
            buf[i] = bi;
            p[i] = pi - lr * bi;
        }
    }
}
