/*
 * sched: DeepSpeed 0.19.6 lr_schedules, formula for formula (see
 * shared/reference/deepspeed-semantics.md §6). Arithmetic is in double, in
 * the order DeepSpeed's Python evaluates it, so the rates agree with
 * DeepSpeed's to rounding.
 */
#include "engine/train/sched.h"

#include <math.h>

void zt_sched_init(zt_sched *s, const zt_sched_config *cfg, const zt_optim_config *ocfg)
{
    s->cfg = *cfg;
    s->base_lr = ocfg->lr;
    s->last_batch_iteration = -1;
    /* DeepSpeed's OneCycle cycles momentum only for optimizers whose defaults
     * have `betas`; torch.optim.SGD has none, so it switches cycling off. */
    if (ocfg->type == ZT_OPTIM_SGD)
        s->cfg.cycle_momentum = false;
}

/* Warmup progress in [0, 1) for 0 <= it < w, as WarmupLR._get_gamma. */
static double warmup_gamma(const zt_sched_config *c, int64_t it, int64_t w)
{
    if (c->warmup_type == ZT_WARMUP_LINEAR)
        return (double)it / (double)w;
    /* DeepSpeed keeps 1/ln(W) and multiplies; dividing would round differently. */
    double inverse_log_warm_up = 1.0 / log((double)w);
    return inverse_log_warm_up * log((double)(it + 1));
}

static int64_t warmup_steps(const zt_sched_config *c)
{
    /* max(2, n): ln(W) must not be 0. */
    return c->warmup_num_steps > 2 ? c->warmup_num_steps : 2;
}

static double warmup_lr(const zt_sched_config *c, double base_lr, int64_t it, bool decay)
{
    double min_lr = c->warmup_min_lr;
    double max_lr = c->warmup_max_lr < 0.0 ? base_lr : c->warmup_max_lr;
    if (it < 0)
        return min_lr;
    int64_t w = warmup_steps(c);
    double gamma;
    if (it < w) {
        gamma = warmup_gamma(c, it, w);
    } else if (decay) {
        int64_t span = c->total_num_steps - w;
        gamma = fmax(0.0, (double)(c->total_num_steps - it) / (double)(span > 1 ? span : 1));
    } else {
        gamma = 1.0;
    }
    return min_lr + (max_lr - min_lr) * gamma;
}

static double warmup_cosine_lr(const zt_sched_config *c, double base_lr, int64_t it)
{
    if (it < 0)
        return 0.0;
    int64_t w = warmup_steps(c);
    double ratio;
    if (it < w) {
        ratio = c->warmup_min_ratio + warmup_gamma(c, it, w) * (1.0 - c->warmup_min_ratio);
    } else {
        int64_t span = c->total_num_steps - w;
        double progress = fmin(1.0, (double)(it - w + 1) / (double)(span > 1 ? span : 1));
        ratio = (1.0 + cos(M_PI * progress)) / 2.0;
        ratio = fmax(0.0, c->cos_min_ratio + (1.0 - c->cos_min_ratio) * ratio);
    }
    return base_lr * ratio;
}

/* The config takes either half up to 2^63 - 1: their sum saturates. */
static int64_t one_cycle_total(const zt_sched_config *c)
{
    int64_t total;
    if (__builtin_add_overflow(c->cycle_first_step_size, c->cycle_second_step_size, &total))
        return INT64_MAX;
    return total;
}

/* Position in the cycle, 0 at min_lr and 1 at max_lr, for it < T. */
static double one_cycle_scale(const zt_sched_config *c, int64_t it)
{
    double first = (double)c->cycle_first_step_size;
    double second = (double)c->cycle_second_step_size;
    double total = first + second;
    double step_ratio = first / total;
    int64_t b = it + 1;
    double cycle = floor(1.0 + (double)b / total);
    double x = 1.0 + (double)b / total - cycle;
    int64_t pos = b % one_cycle_total(c);
    if (x <= step_ratio) {
        int64_t stairs = c->cycle_first_stair_count;
        if (stairs > 0)
            return floor((double)pos * (double)stairs / first) / (double)stairs;
        return x / step_ratio;
    }
    int64_t stairs = c->cycle_second_stair_count;
    if (stairs > 0)
        return floor((double)(one_cycle_total(c) - pos) * (double)stairs / second) /
               (double)stairs;
    return (x - 1.0) / (step_ratio - 1.0);
}

/* Decay intervals after the cycle; it >= T and decay_step_size != 0. */
static double one_cycle_decay_interval(const zt_sched_config *c, int64_t it)
{
    return (double)(it - one_cycle_total(c) + 1) / (double)c->decay_step_size;
}

static double one_cycle_lr(const zt_sched_config *c, int64_t it)
{
    if (it < one_cycle_total(c))
        return c->cycle_min_lr + (c->cycle_max_lr - c->cycle_min_lr) * one_cycle_scale(c, it);
    if (c->decay_step_size == 0 || c->decay_lr_rate == 0.0)
        return c->cycle_min_lr;
    return c->cycle_min_lr / (1.0 + c->decay_lr_rate * one_cycle_decay_interval(c, it));
}

static double one_cycle_beta1(const zt_sched_config *c, int64_t it)
{
    /* The constructor sets min_mom, not the formula's value at -1 (max_mom). */
    if (it < 0)
        return c->cycle_min_mom;
    if (it < one_cycle_total(c))
        return c->cycle_max_mom - (c->cycle_max_mom - c->cycle_min_mom) * one_cycle_scale(c, it);
    if (c->decay_step_size == 0 || c->decay_mom_rate == 0.0)
        return c->cycle_max_mom;
    return c->cycle_max_mom * (1.0 + c->decay_mom_rate * one_cycle_decay_interval(c, it));
}

static double lr_range_test_lr(const zt_sched_config *c, int64_t it)
{
    double interval = (double)(it + 1) / (double)c->lr_range_test_step_size;
    if (c->lr_range_test_staircase)
        interval = floor(interval);
    return c->lr_range_test_min_lr * (1.0 + c->lr_range_test_step_rate * interval);
}

double zt_sched_lr_at(const zt_sched_config *cfg, double base_lr, int64_t it)
{
    switch (cfg->type) {
    case ZT_SCHED_WARMUP_LR:
        return warmup_lr(cfg, base_lr, it, false);
    case ZT_SCHED_WARMUP_DECAY_LR:
        return warmup_lr(cfg, base_lr, it, true);
    case ZT_SCHED_WARMUP_COSINE_LR:
        return warmup_cosine_lr(cfg, base_lr, it);
    case ZT_SCHED_ONE_CYCLE:
        return one_cycle_lr(cfg, it);
    case ZT_SCHED_LR_RANGE_TEST:
        return lr_range_test_lr(cfg, it);
    case ZT_SCHED_NONE:
        break;
    }
    return base_lr;
}

double zt_sched_lr(const zt_sched *s)
{
    return zt_sched_lr_at(&s->cfg, s->base_lr, s->last_batch_iteration);
}

bool zt_sched_momentum(const zt_sched *s, double *beta1, double *beta2)
{
    if (s->cfg.type != ZT_SCHED_ONE_CYCLE || !s->cfg.cycle_momentum)
        return false;
    *beta1 = one_cycle_beta1(&s->cfg, s->last_batch_iteration);
    *beta2 = 0.99; /* DeepSpeed's OneCycle pins beta2 while it cycles beta1 */
    return true;
}

void zt_sched_step(zt_sched *s) { s->last_batch_iteration++; }

void zt_sched_state_get(const zt_sched *s, zt_sched_state *out)
{
    *out = (zt_sched_state){.last_batch_iteration = s->last_batch_iteration,
                            .base_lr = s->base_lr};
}

void zt_sched_state_set(zt_sched *s, const zt_sched_state *st)
{
    s->last_batch_iteration = st->last_batch_iteration;
}
