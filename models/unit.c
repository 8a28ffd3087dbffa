#include "models/unit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/rng.h"
#include "models/layers.h"

void zt_unit_reset(zt_unit *u, const char *name, const zt_unit_ops *ops)
{
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", name);
    u->ops = ops;
}

void zt_unit_add_param(zt_unit *u, const char *name, int ndim, const int64_t *shape,
                       zt_init_kind init, float bound)
{
    zt_param_spec *p = &u->params[u->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->numel *= shape[d];
    }
    p->init = init;
    p->bound = bound;
    u->param_numel += p->numel;
}

void zt_unit_param_views(const zt_unit *u, const void *base, zt_dtype dt, void **out)
{
    int64_t at = 0;
    for (int i = 0; i < u->n_params; i++) {
        out[i] = zt_dtype_at(base, dt, at);
        at += u->params[i].numel;
    }
}

void zt_unit_init_range(const zt_unit *u, uint64_t seed, int64_t global_offset, int64_t lo,
                        int64_t hi, float *out)
{
    int64_t start = 0;
    for (int t = 0; t < u->n_params; t++) {
        const zt_param_spec *p = &u->params[t];
        int64_t a = lo > start ? lo : start;
        int64_t b = hi < start + p->numel ? hi : start + p->numel;
        for (int64_t i = a; i < b; i++) {
            float v = 0.0f;
            uint64_t g = (uint64_t)(global_offset + i);
            if (p->init == ZT_INIT_UNIFORM) {
                float r = zt_rng_uniform(seed, ZT_RNG_STREAM_INIT, g);
                v = p->bound * (2.0f * r - 1.0f);
            } else if (p->init == ZT_INIT_NORMAL) {
                double u1 = zt_rng_uniform(seed, ZT_RNG_STREAM_INIT, g);
                double u2 = zt_rng_uniform(seed, ZT_RNG_STREAM_INIT, g ^ (1ull << 63));
                v = (float)((double)p->bound * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2));
            } else if (p->init == ZT_INIT_ONES) {
                v = 1.0f;
            }
            out[i - lo] = v;
        }
        start += p->numel;
    }
}

static void linear_relu_forward(const zt_unit *u, const zt_backend *be, const void *params,
                                const void *x, void *y, void *saved, void *work,
                                const zt_batch *b)
{
    (void)saved;
    (void)work;
    int64_t in = u->dims[0], out = u->dims[1];
    const void *w = params;                                // (out, in)
    const void *bias = zt_dtype_at(params, b->dt, out * in); // (out)
    zt_linear_act_forward(be, b->dt, y, NULL, x, w, bias, b->n, in, out,
                          ZT_ACT_RELU); // (n, out)
}

static void linear_relu_backward(const zt_unit *u, const zt_backend *be, const void *params,
                                 const void *x, const void *y, const void *saved, void *dy,
                                 void *dx, float *dparams, void *work, bool accumulate,
                                 const zt_batch *b)
{
    (void)saved;
    (void)work;
    int64_t in = u->dims[0], out = u->dims[1];
    const void *w = params;
    float *dw = dparams;               // (out, in)
    float *dbias = dparams + out * in; // (out)
    void *dz = dy;                     // (n, out): dy through the ReLU, in place
    zt_act_bias_grad(be, b->dt, dz, dbias, dy, y, b->n, out, ZT_ACT_RELU, accumulate);
    zt_linear_backward(be, b->dt, dx, dw, NULL, dz, out, x, w, b->n, in, out, accumulate,
                       false); // dw (out, in), dx (n, in)
}

/* Linear (n, in) -> (n, out), ReLU on the output. */
static zt_unit_cost linear_relu_cost(const zt_unit *u, int64_t n, int64_t t)
{
    (void)t;
    int64_t in = u->dims[0], out = u->dims[1], macs = n * in * out;
    return (zt_unit_cost){.macs = macs, .flops = 2 * macs + n * out};
}

static const zt_unit_ops zt_linear_relu_ops = {"LinearReLU", linear_relu_forward,
                                               linear_relu_backward, linear_relu_cost};

zt_unit_cost zt_unit_forward_cost(const zt_unit *u, int64_t n, int64_t t)
{
    if (!u->ops || !u->ops->cost)
        return (zt_unit_cost){0, 0};
    return u->ops->cost(u, n, t);
}

void zt_unit_linear_relu(zt_unit *u, const char *name, int64_t in, int64_t out)
{
    zt_unit_reset(u, name, &zt_linear_relu_ops);
    u->dims[0] = in;
    u->dims[1] = out;
    u->in_numel = in;
    u->out_numel = out;
    u->typed = true;
    /* PyTorch's Linear default: kaiming-uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)), bias alike. */
    float bound = 1.0f / sqrtf((float)in);
    zt_unit_add_param(u, "weight", 2, (int64_t[]){out, in}, ZT_INIT_UNIFORM, bound);
    zt_unit_add_param(u, "bias", 1, (int64_t[]){out}, ZT_INIT_UNIFORM, bound);
}
