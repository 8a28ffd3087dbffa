/*
 * optim: the step counter and hyper-parameter plumbing around the backend's
 * adam/sgd ops, and the CPU kernels behind those ops.
 *
 * The kernels follow the reference equations operation for operation in fp32
 * (FusedAdam's multi_tensor_adam for Adam, torch.optim.SGD for SGD), with no
 * reassociation, so a CPU step rounds like the GPU kernel it stands in for.
 * Each is an element-wise OpenMP loop with static scheduling; the mode
 * branches are taken once, outside the loops, so every loop body is
 * straight-line code the compiler turns into vector instructions. Results do
 * not depend on the thread count.
 *
 * zt_optim_init zeroes the state through the backend (arena memory comes
 * uninitialised), so a checkpoint's state must be loaded after init.
 */
#include "engine/train/optim.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread: waking the team
 * costs more than the loop. */
#define ZT_OPTIM_PAR_MIN 32768

int64_t zt_optim_state_numel(const zt_optim_config *cfg, int64_t numel)
{
    if (cfg->type == ZT_OPTIM_SGD)
        return cfg->momentum != 0.0 ? numel : 0;
    return 2 * numel;
}

void zt_optim_init(zt_optim *opt, const zt_optim_config *cfg, const zt_backend *be, bool host,
                   int64_t numel, float *state)
{
    opt->cfg = *cfg;
    opt->be = be;
    opt->host = host;
    opt->numel = numel;
    opt->state = state;
    opt->steps = 0;
    size_t state_bytes = (size_t)zt_optim_state_numel(cfg, numel) * sizeof(float);
    if (state_bytes > 0 && host)
        memset(state, 0, state_bytes);
    else if (state_bytes > 0)
        be->memset_zero(be, state, state_bytes);
}

void zt_optim_begin_step(zt_optim *opt) { opt->steps++; }

void zt_optim_step_seg(zt_optim *opt, const zt_optim_seg *seg, double lr, double beta1,
                       double beta2)
{
    const zt_optim_config *c = &opt->cfg;
    const zt_backend *be = opt->be;
    if (c->type == ZT_OPTIM_SGD) {
        /* The override needs a momentum buffer, which exists only when the
         * config asked for momentum (zt_optim_state_numel). */
        double momentum = beta1 >= 0.0 && c->momentum != 0.0 ? beta1 : c->momentum;
        zt_sgd_hparams hp = {
            .lr = (float)lr,
            .momentum = (float)momentum,
            .dampening = (float)c->dampening,
            .weight_decay = (float)c->weight_decay,
            .nesterov = c->nesterov,
            .first_step = opt->steps == 1,
        };
        float *buf = opt->state ? opt->state + seg->offset : NULL;
        if (opt->host)
            zt_sgd_cpu(seg->params, seg->grads, buf, seg->numel, &hp);
        else
            be->sgd(be, seg->params, seg->grads, buf, seg->numel, &hp);
        return;
    }
    zt_adam_hparams hp = {
        .lr = (float)lr,
        .beta1 = (float)(beta1 >= 0.0 ? beta1 : c->beta1),
        .beta2 = (float)(beta2 >= 0.0 ? beta2 : c->beta2),
        .eps = (float)c->eps,
        .weight_decay = (float)c->weight_decay,
        .adam_w_mode = c->adam_w_mode,
        .bias_correction = c->bias_correction,
        .step = opt->steps,
    };
    float *m = opt->state + seg->offset, *v = opt->state + opt->numel + seg->offset;
    if (opt->host)
        zt_adam_cpu(seg->params, seg->grads, m, v, seg->numel, &hp);
    else
        be->adam(be, seg->params, seg->grads, m, v, seg->numel, &hp);
}

void zt_optim_step_segs(zt_optim *opt, const zt_optim_seg *segs, int n_segs, double lr,
                        double beta1, double beta2)
{
    zt_optim_begin_step(opt);
    for (int i = 0; i < n_segs; i++)
        zt_optim_step_seg(opt, &segs[i], lr, beta1, beta2);
}

void zt_optim_step(zt_optim *opt, float *params, const float *grads, double lr, double beta1,
                   double beta2)
{
    zt_optim_seg all = {params, grads, 0, opt->numel};
    zt_optim_step_segs(opt, &all, 1, lr, beta1, beta2);
}

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
