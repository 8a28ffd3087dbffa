/*
 * scaler: DeepSpeed's DynamicLossScaler.update_scale, rule for rule (see
 * scaler.h and shared/reference/deepspeed-semantics.md §3).
 */
#include "engine/train/scaler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void zt_scaler_init(zt_scaler *s, const zt_fp16_config *fp16, bool use_hysteresis)
{
    memset(s, 0, sizeof *s);
    s->use_hysteresis = use_hysteresis;
    s->consecutive_hysteresis = fp16->consecutive_hysteresis;
    s->last_overflow_iter = -1;
    s->scale = 1.0;
    if (!fp16->enabled)
        return;
    if (fp16->loss_scale > 0) {
        s->scale = fp16->loss_scale;
        return;
    }
    s->dynamic = true;
    s->scale = ldexp(1.0, fp16->initial_scale_power);
    s->min_scale = fp16->min_loss_scale;
    s->window = fp16->loss_scale_window;
    s->hysteresis = fp16->hysteresis;
    s->cur_hysteresis = fp16->hysteresis;
}

static void on_overflow(zt_scaler *s, zt_scaler_event *ev)
{
    if (s->use_hysteresis && s->hysteresis > 1 && s->cur_hysteresis > 1) {
        s->cur_hysteresis--;
        ev->hysteresis_used = true;
    } else if (s->scale == s->min_scale) {
        ev->at_min = true;
    } else {
        /* DeepSpeed's max(): a scale that starts below min_loss_scale (a small
         * initial_scale_power) rises to the minimum on its first halving. */
        s->scale = fmax(s->scale / 2.0, s->min_scale);
    }
}

static void on_stable(zt_scaler *s)
{
    if (s->consecutive_hysteresis)
        s->cur_hysteresis = s->hysteresis;
    /* The overflow iteration itself does not count towards the window. */
    int64_t stable = s->iter - s->last_overflow_iter - 1;
    if (stable > 0 && stable % s->window == 0) {
        if (!s->consecutive_hysteresis)
            s->cur_hysteresis = s->hysteresis;
        s->scale *= 2.0;
    }
}

zt_scaler_event zt_scaler_update(zt_scaler *s, bool overflow)
{
    zt_scaler_event ev = {.overflow = overflow, .prev_scale = s->scale,
                          .prev_hysteresis = s->cur_hysteresis};
    if (overflow) {
        if (s->dynamic)
            on_overflow(s, &ev);
        s->last_overflow_iter = s->iter;
    } else if (s->dynamic) {
        on_stable(s);
    }
    s->iter++;
    ev.new_scale = s->scale;
    ev.new_hysteresis = s->cur_hysteresis;
    return ev;
}

int zt_scaler_overflow_line(const zt_scaler_event *ev, bool fp16, char *buf, size_t cap)
{
    static const char head[] = "[deepspeed] OVERFLOW! Rank 0 Skipping step.";
    if (!fp16)
        return snprintf(buf, cap, "%s", head);
    /* Python's int(x) truncates; %.0f of the truncated double prints it exactly,
     * also beyond 2^63 where an integer type would overflow. */
    double prev = trunc(ev->prev_scale);
    if (ev->hysteresis_used)
        return snprintf(buf, cap,
                        "%s Attempted loss scale: %.0f, but hysteresis is %d. "
                        "Reducing hysteresis to %d",
                        head, prev, ev->prev_hysteresis, ev->new_hysteresis);
    return snprintf(buf, cap, "%s Attempted loss scale: %.0f, reducing to %.0f", head, prev,
                    trunc(ev->new_scale));
}

void zt_scaler_state_get(const zt_scaler *s, zt_scaler_state *out)
{
    *out = (zt_scaler_state){.dynamic = s->dynamic,
                             .cur_scale = s->scale,
                             .cur_iter = s->iter,
                             .last_overflow_iter = s->last_overflow_iter,
                             .cur_hysteresis = s->cur_hysteresis,
                             .hysteresis = s->hysteresis,
                             .loss_scale_window = s->window,
                             .min_loss_scale = s->min_scale,
                             .consecutive_hysteresis = s->consecutive_hysteresis};
}

void zt_scaler_state_set(zt_scaler *s, const zt_scaler_state *st)
{
    if (!s->dynamic || !st->dynamic)
        return;
    s->scale = st->cur_scale;
    s->iter = st->cur_iter;
    s->last_overflow_iter = st->last_overflow_iter;
    /* A run resumed with a smaller hysteresis cannot have more left than it allows. */
    s->cur_hysteresis = st->cur_hysteresis < s->hysteresis ? (int)st->cur_hysteresis
                                                           : s->hysteresis;
}
