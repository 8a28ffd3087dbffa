/*
 * sched: DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR,
 * WarmupCosineLR, OneCycle, LRRangeTest) with DeepSpeed's step counting:
 * last_batch_iteration starts at -1, the constructor applies f(-1), and the
 * trainer calls zt_sched_step only after steps that were applied (skipped
 * fp16 overflow steps do not advance it). So the k-th applied step uses f(k-2).
 * A checkpoint keeps the position (zt_sched_state); a resumed run takes over
 * last_batch_iteration, as DeepSpeed's load_state_dict does, and keeps its own
 * configuration and base learning rate (the rate may change on resume).
 *
 * Memory: plain values. Collective: none.
 */
#ifndef ZT_SCHED_H
#define ZT_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/config/config.h"

typedef struct {
    zt_sched_config cfg;
    double base_lr;               /* optimizer lr at construction */
    int64_t last_batch_iteration; /* DeepSpeed's counter, -1 at construction */
} zt_sched;

void zt_sched_init(zt_sched *s, const zt_sched_config *cfg, const zt_optim_config *ocfg);

/* f(it): the learning rate the next applied step uses. */
double zt_sched_lr(const zt_sched *s);
/* Pure form for tests: learning rate at iteration `it` (it >= -1). */
double zt_sched_lr_at(const zt_sched_config *cfg, double base_lr, int64_t it);

/* OneCycle with cycle_momentum: writes the (beta1, beta2) the next step uses and
 * returns true; false (outputs untouched) for every other schedule. */
bool zt_sched_momentum(const zt_sched *s, double *beta1, double *beta2);

void zt_sched_step(zt_sched *s); /* last_batch_iteration += 1 */

/* What a checkpoint keeps of a schedule. */
typedef struct {
    int64_t last_batch_iteration;
    double base_lr; /* recorded, never taken over */
} zt_sched_state;

void zt_sched_state_get(const zt_sched *s, zt_sched_state *out);
/* Takes over last_batch_iteration only (see above). */
void zt_sched_state_set(zt_sched *s, const zt_sched_state *st);

#endif
