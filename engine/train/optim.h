/*
 * optim: Adam/AdamW (DeepSpeed FusedAdam equations) and SGD (torch.optim.SGD)
 * on one flat shard of fp32 parameters: the whole model at stage 0, the rank's
 * partition at stages 1-3 (under mixed precision: the fp32 master copy). The
 * math is the backend's `adam`/`sgd` op, or, when the optimizer is offloaded
 * (`host`), the CPU kernels (engine/cpu/cpu.h) called directly on host memory:
 * the same functions the CPU backend's ops are, so an offloaded step rounds
 * exactly like one on the CPU device. This module owns only the step counter
 * and hyper-parameters.
 *
 * Memory: the optimizer state (Adam m and v; SGD momentum buffer) is a flat
 * float array provided by the caller (an OPTIM arena, on the host when
 * offloaded), zeroed before the first step; zt_optim_state_numel says how
 * large. Layout: Adam [m(numel) | v(numel)], SGD [buf(numel)] (empty when
 * momentum == 0). Offloaded to nvme there is no such array (state NULL): the
 * segments bring their state (zt_optim_seg.state).
 * Collective: none.
 */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/config/config.h"

typedef struct {
    zt_optim_config cfg;
    const zt_backend *be;
    bool host;     /* offloaded: state, params and grads are host memory */
    int64_t numel;
    float *state;  /* device pointer, zt_optim_state_numel(cfg, numel) floats */
    int64_t steps; /* applied steps so far (Adam's t, bias correction) */
} zt_optim;

/* Floats of optimizer state per `numel` parameters (Adam 2, SGD 1 or 0). */
int64_t zt_optim_state_numel(const zt_optim_config *cfg, int64_t numel);

void zt_optim_init(zt_optim *opt, const zt_optim_config *cfg, const zt_backend *be, bool host,
                   int64_t numel, float *state);

/* One applied step: params -= update(grads) with learning rate `lr`; beta1 and
 * beta2 replace the config's betas (OneCycle momentum; SGD momentum = beta1)
 * when >= 0. Increments `steps`. Skipped steps must not call this. */
void zt_optim_step(zt_optim *opt, float *params, const float *grads, double lr, double beta1,
                   double beta2);

/* A piece of the optimizer's span: `numel` parameters at `params` with their
 * gradients, whose state starts at element `offset` of the span's state, or,
 * when state[0] is set, is state[0] (and state[1] for Adam's second moment):
 * the nvme offload steps state swapped into its buffers. */
typedef struct {
    float *params;
    const float *grads;
    int64_t offset, numel;
    float *state[2];
} zt_optim_seg;

/* One applied step over the span given as segments (the rank's slices of each
 * unit at stages 1-3); same arguments and counting as zt_optim_step. */
void zt_optim_step_segs(zt_optim *opt, const zt_optim_seg *segs, int n_segs, double lr,
                        double beta1, double beta2);

/* The same step taken one segment at a time (so a caller can stage each
 * segment's gradient just before it is used): zt_optim_begin_step once, then
 * zt_optim_step_seg for every segment of the span. */
void zt_optim_begin_step(zt_optim *opt);
void zt_optim_step_seg(zt_optim *opt, const zt_optim_seg *seg, double lr, double beta1,
                       double beta2);

#endif
