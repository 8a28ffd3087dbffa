/*
 * optim: the step counter and hyper-parameter plumbing around the backend's
 * adam/sgd ops; an offloaded optimizer calls the CPU backend's kernels
 * (engine/cpu/optim_cpu.c) directly on host memory.
 *
 * zt_optim_init zeroes the state through the backend (arena memory comes
 * uninitialised), so a checkpoint's state must be loaded after init.
 */
#include "engine/train/optim.h"
#include "engine/cpu/cpu.h"

#include <stddef.h>
#include <string.h>

int64_t zt_optim_state_numel(const zt_optim_config *cfg, int64_t numel)
{
    return zt_config_optim_state_floats(cfg) * numel;
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
    if (state_bytes > 0 && host && state)
        memset(state, 0, state_bytes);
    else if (state_bytes > 0 && state)
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
        float *buf = seg->state[0] ? seg->state[0] : opt->state ? opt->state + seg->offset : NULL;
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
    float *m = seg->state[0], *v = seg->state[1];
    if (!m) {
        m = opt->state + seg->offset;
        v = opt->state + opt->numel + seg->offset;
    }
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
    zt_optim_seg all = {.params = params, .grads = grads, .numel = opt->numel};
    zt_optim_step_segs(opt, &all, 1, lr, beta1, beta2);
}
