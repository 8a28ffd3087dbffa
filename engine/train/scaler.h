/*
 * scaler: fp16 loss scaling exactly as DeepSpeed does it (see
 * ../shared/reference/deepspeed-semantics.md section 3).
 *
 * Dynamic (fp16.loss_scale == 0): the scale starts at 2^initial_scale_power.
 * At every accumulation boundary zt_scaler_update is called once with whether
 * any rank's gradients overflowed:
 *  - overflow: if hysteresis is off (stage 0, DeepSpeed's FP16_Optimizer, which
 *    has none), the configured hysteresis is 1, or the remaining hysteresis is
 *    1, the scale halves, never below min_loss_scale; otherwise the remaining
 *    hysteresis drops by one and the scale stays. The overflow iteration is
 *    recorded. An overflow while the scale already equals min_loss_scale (on the
 *    halving path) sets `at_min`: the run cannot make progress and the caller
 *    stops it (DeepSpeed raises; zerotrain also stops at stage 0, where
 *    DeepSpeed would skip forever).
 *  - no overflow: with consecutive_hysteresis the remaining hysteresis is
 *    restored at once. stable = iter - last_overflow_iter - 1; when stable > 0
 *    and stable % loss_scale_window == 0 the scale doubles (and without
 *    consecutive_hysteresis the remaining hysteresis is restored then).
 *  - the iteration counter advances after every update, overflow or not.
 * Static (loss_scale > 0) and no scaling (bf16, fp32; scale 1): the scale never
 * changes; an overflow is still reported so the step is skipped.
 *
 * Checkpoints keep the scaler's state (zt_scaler_state, DeepSpeed's
 * DynamicLossScaler fields) and a resumed run takes it over only when both
 * runs scale dynamically: a static or absent scaler is what this run's config
 * says.
 *
 * Memory: plain value. Collective: none (the caller reduces the overflow flag
 * over the ranks first, so every rank's scaler stays identical).
 */
#ifndef ZT_SCALER_H
#define ZT_SCALER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/config/config.h"

typedef struct {
    bool dynamic;
    bool use_hysteresis; /* false: stage 0 (FP16_Optimizer) */
    double scale, min_scale;
    int64_t window;
    int hysteresis, cur_hysteresis;
    bool consecutive_hysteresis;
    int64_t iter, last_overflow_iter; /* last_overflow_iter starts at -1 */
} zt_scaler;

/* What one update did (for the log line and the report). */
typedef struct {
    bool overflow;
    bool at_min;            /* overflow with the scale at its minimum: stop */
    bool hysteresis_used;   /* overflow absorbed by hysteresis, scale kept */
    double prev_scale, new_scale;
    int prev_hysteresis, new_hysteresis;
} zt_scaler_event;

/* From the fp16 section (enabled or not: a disabled fp16 gives scale 1, static).
 * use_hysteresis: false at ZeRO stage 0. */
void zt_scaler_init(zt_scaler *s, const zt_fp16_config *fp16, bool use_hysteresis);

/* One accumulation boundary (see above). */
zt_scaler_event zt_scaler_update(zt_scaler *s, bool overflow);

/* DeepSpeed's rank-0 overflow line for an event with overflow set, without a
 * trailing newline:
 *   fp16 (dynamic or static), halving or static:
 *     "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
 *   fp16, hysteresis used:
 *     "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1"
 *   not fp16 (bf16 or fp32 overflow check):
 *     "[deepspeed] OVERFLOW! Rank 0 Skipping step."
 * Scales print as integers (int(scale) in Python: truncation). Returns what
 * snprintf returns. */
int zt_scaler_overflow_line(const zt_scaler_event *ev, bool fp16, char *buf, size_t cap);

/* What a checkpoint keeps of a scaler, under DeepSpeed's names. */
typedef struct {
    bool dynamic;
    double cur_scale;
    int64_t cur_iter, last_overflow_iter;
    int64_t cur_hysteresis;
    /* The configuration: recorded, never taken over (this run's config rules). */
    int64_t hysteresis, loss_scale_window;
    double min_loss_scale;
    bool consecutive_hysteresis;
} zt_scaler_state;

void zt_scaler_state_get(const zt_scaler *s, zt_scaler_state *out);
/* Takes over cur_scale, cur_iter, last_overflow_iter and cur_hysteresis (at
 * most this scaler's hysteresis) when both s and st are dynamic; otherwise
 * leaves s as it is. The configuration fields of st are not read. */
void zt_scaler_state_set(zt_scaler *s, const zt_scaler_state *st);

#endif
