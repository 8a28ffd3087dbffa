/*
 * trainer: the training loop. Per optimizer step: for each of the
 * gradient_accumulation_steps micro-steps, read this rank's micro-batch,
 * run the units forward, the loss, the units backward (writing or accumulating
 * gradients into the flat buffer; on the boundary micro-step the ZeRO policy
 * reduces them as units finish); then at the boundary: global-norm clipping,
 * the optimizer step on the rank's shard, the scheduler step, progress lines.
 *
 * Memory: every buffer is planned into and allocated from the trainer's arenas
 * (zt_memory): PARAMS, GRADS, OPTIM on the device; ACTS (inputs, unit outputs,
 * saved tensors); WORK (activation-gradient ping-pong, host staging of the
 * micro-batch). Nothing is allocated inside the step loop.
 * Collective: zt_trainer_init, zt_trainer_train, zt_trainer_dump_params,
 * zt_trainer_param_norm, zt_trainer_write_report.
 */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "dataset.h"
#include "model.h"
#include "optim.h"
#include "sampler.h"
#include "sched.h"
#include "world.h"
#include "zero.h"

typedef struct {
    const zt_config *cfg;
    const zt_model *model;
    const zt_world *world;
    const zt_backend *be;
    zt_comm *comm;
    zt_dataset *data;
    uint64_t seed;

    zt_layout layout;
    zt_memory mem;
    zt_sampler sampler;
    zt_optim optim;
    zt_sched sched;
    zt_zero_reducer reducer;

    float *params, *grads, *optim_state; /* flat (padded_numel) on the device */
    float *x;                            /* (micro, in_numel) model input, device */
    int32_t *labels;                     /* (micro) labels, device */
    float **acts;                        /* per unit: output (micro, out_numel) */
    float **saved;                       /* per unit: (micro, saved_numel) or NULL */
    float *dact[2];                      /* activation-gradient ping-pong */
    float *x_host;                       /* (micro, in_numel) staging */
    int32_t *labels_host;                /* (micro) */

    int64_t global_steps, skipped_steps, global_samples;
    double *loss_history;
    int64_t loss_cap;
    double last_lr, last_grad_norm;
    double train_seconds, timed_seconds;
    int64_t timed_steps;
} zt_trainer;

zt_status zt_trainer_init(zt_trainer *t, const zt_config *cfg, const zt_model *m,
                          zt_dataset *data, const zt_world *w, const zt_backend *be,
                          zt_comm *comm, uint64_t seed);
void zt_trainer_free(zt_trainer *t);

/* Trains until global_steps == until_step. */
zt_status zt_trainer_train(zt_trainer *t, int64_t until_step);

/* Rank 0 writes all parameters, unpadded, in model order as little-endian
 * float32 to `path`. */
zt_status zt_trainer_dump_params(zt_trainer *t, const char *path);

/* float64 L2 norm of all parameters (same value on every rank). */
double zt_trainer_param_norm(zt_trainer *t);

/* Steps per epoch of the sampler (for --epochs). */
int64_t zt_trainer_steps_per_epoch(const zt_trainer *t);

#endif
