#include "models/classifier.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/layers.h"

static size_t bytes_of(zt_dtype dt, int64_t n) { return (size_t)n * zt_dtype_size(dt); }

/* ---- embedding: y = drop(embedding[tokens] + PE) ---- */

static void embed_forward(const zt_unit *u, const zt_backend *be, const void *params,
                          const void *x, void *y, void *saved, void *work, const zt_batch *b)
{
    (void)x;
    (void)saved;
    (void)work;
    int64_t seq = u->dims[1], e = u->dims[2];
    be->embedding_forward(be, b->dt, y, b->tokens, params, b->n * b->t, e, false); // (n, t, E)
    be->sinusoid_add(be, b->dt, y, b->n, b->t, e);
    zt_dropout_desc d = zt_layer_dropout(u, 0, b, 1, b->t, e, seq, e);
    if (d.p > 0.0f)
        be->dropout(be, b->dt, y, y, &d);
}

static void embed_backward(const zt_unit *u, const zt_backend *be, const void *params,
                           const void *x, const void *y, const void *saved, void *dy, void *dx,
                           float *dparams, void *work, bool accumulate, const zt_batch *b)
{
    (void)params;
    (void)x;
    (void)y;
    (void)saved;
    (void)dx;
    (void)work;
    int64_t vocab = u->dims[0], seq = u->dims[1], e = u->dims[2];
    zt_dropout_desc d = zt_layer_dropout(u, 0, b, 1, b->t, e, seq, e);
    if (d.p > 0.0f)
        be->dropout(be, b->dt, dy, dy, &d);
    be->embedding_backward(be, b->dt, dparams, b->tokens, dy, b->n * b->t, e, vocab, accumulate);
}

/* The lookup and dropout are free; adding the sinusoids is one FLOP per element. */
static zt_unit_cost embed_cost(const zt_unit *u, int64_t n, int64_t t)
{
    return (zt_unit_cost){.macs = 0, .flops = n * t * u->dims[2]};
}

static const zt_unit_ops embed_ops = {"PositionalEmbedding", embed_forward,
                                      embed_backward, embed_cost};

void zt_classifier_embed(zt_unit *u, int64_t vocab, int64_t max_len, int64_t e, float dropout)
{
    zt_unit_reset(u, "embed", &embed_ops);
    u->typed = true;
    u->dims[0] = vocab;
    u->dims[1] = max_len;
    u->dims[2] = e;
    u->dropout = dropout;
    u->out_numel = max_len * e;
    zt_unit_add_param(u, "embedding.weight", 2, (int64_t[]){vocab, e}, ZT_INIT_NORMAL, 1.0f);
}

/* ---- encoder layer (post-LN):
 *      z1 = x + drop(out_proj(attn(x))), x1 = norm1(z1),
 *      z2 = x1 + drop(linear2(drop(act(linear1(x1))))), y = norm2(z2) ---- */

/* Views of a layer's parameters, saved tensors and scratch for a batch of n
 * samples (regions laid out at max_len, used at the batch's length). The
 * fp32 statistics come first in `saved` and the attention's fp32 scratch
 * first in `work`, so they stay aligned whatever b->dt is; the tensors after
 * them are of b->dt. */
typedef struct {
    int64_t seq, e, heads, h, rows;
    bool gelu, unfused;
    zt_dtype dt;
    void *p[12], *dp[12];
    float *mean1, *rstd1, *mean2, *rstd2, *att, *w_att;
    void *qkv, *atty, *z1, *x1, *hid, *act, *z2;
    void *w_z, *w_t, *w_h, *w_x1, *w_ay, *w_qkv;
    zt_attn_shape shape;
} layer_view;

enum { L_INW, L_INB, L_OUTW, L_OUTB, L_W1, L_B1, L_W2, L_B2, L_N1W, L_N1B, L_N2W, L_N2B };

static void layer_view_init(layer_view *v, const zt_unit *u, const void *params,
                            float *dparams, void *saved, void *work, const zt_batch *b)
{
    memset(v, 0, sizeof *v);
    v->seq = u->dims[0];
    v->e = u->dims[1];
    v->heads = u->dims[2];
    v->h = u->dims[3];
    v->gelu = u->dims[4] != 0;
    v->unfused = u->dims[5] != 0;
    v->rows = b->n * b->t;
    v->dt = b->dt;
    zt_dtype dt = b->dt;
    zt_unit_param_views(u, params, dt, v->p);
    if (dparams)
        zt_unit_param_views(u, dparams, ZT_F32, v->dp);
    int64_t n = b->n, t = v->seq, te = t * v->e, th = t * v->h;
    void *s = saved;
    v->mean1 = zt_layer_take_f32(&s, n * t);
    v->rstd1 = zt_layer_take_f32(&s, n * t);
    v->mean2 = zt_layer_take_f32(&s, n * t);
    v->rstd2 = zt_layer_take_f32(&s, n * t);
    v->att = zt_layer_take_f32(&s, n * zt_attention_saved_numel(t, v->heads, v->unfused));
    v->qkv = zt_layer_take(&s, dt, n * 3 * te);
    v->atty = zt_layer_take(&s, dt, n * te);
    v->z1 = zt_layer_take(&s, dt, n * te);
    v->x1 = zt_layer_take(&s, dt, n * te);
    if (v->gelu) /* ReLU's backward reads act: no pre-activation kept */
        v->hid = zt_layer_take(&s, dt, n * th);
    v->act = zt_layer_take(&s, dt, n * th);
    v->z2 = s;
    void *w = work;
    v->w_att = zt_layer_take_f32(&w, n * zt_attention_work_numel(t, v->e, v->heads, v->unfused));
    v->w_z = zt_layer_take(&w, dt, n * te);
    v->w_t = zt_layer_take(&w, dt, n * te);
    v->w_h = zt_layer_take(&w, dt, n * th);
    v->w_x1 = zt_layer_take(&w, dt, n * te);
    v->w_ay = zt_layer_take(&w, dt, n * te);
    v->w_qkv = w;
    v->shape = (zt_attn_shape){.n = n, .t = b->t, .max_t = t, .c = v->e, .heads = v->heads,
                               .causal = false, .lengths = b->lengths, .unfused = v->unfused};
}

static void layer_dropouts(const zt_unit *u, const layer_view *v, const zt_batch *b,
                           zt_dropout_desc d[4])
{
    d[0] = zt_layer_dropout(u, 0, b, v->heads, b->t, b->t, v->seq, v->seq);
    d[1] = zt_layer_dropout(u, 1, b, 1, b->t, v->e, v->seq, v->e);
    d[2] = zt_layer_dropout(u, 2, b, 1, b->t, v->h, v->seq, v->h);
    d[3] = zt_layer_dropout(u, 3, b, 1, b->t, v->e, v->seq, v->e);
}

/* dst = drop(src) (of dt), or a copy when the site is off. */
static void drop_into(const zt_backend *be, zt_dtype dt, void *dst, const void *src,
                      int64_t numel, const zt_dropout_desc *d)
{
    if (d->p > 0.0f)
        be->dropout(be, dt, dst, src, d);
    else if (dst != src)
        be->copy_d2d(be, dst, src, bytes_of(dt, numel));
}

static void layer_forward(const zt_unit *u, const zt_backend *be, const void *params,
                          const void *x, void *y, void *saved, void *work, const zt_batch *b)
{
    layer_view v;
    layer_view_init(&v, u, params, NULL, saved, work, b);
    zt_dropout_desc d[4];
    layer_dropouts(u, &v, b, d);
    int64_t rows = v.rows, e = v.e, h = v.h;
    zt_dtype dt = v.dt;

    zt_linear_forward(be, dt, v.qkv, x, v.p[L_INW], v.p[L_INB], rows, e, 3 * e); // (rows, 3E)
    zt_attention_forward(be, dt, v.atty, v.att, v.w_att, v.qkv, &v.shape, &d[0]);
    zt_linear_forward(be, dt, v.w_t, v.atty, v.p[L_OUTW], v.p[L_OUTB], rows, e, e);
    drop_into(be, dt, v.w_t, v.w_t, rows * e, &d[1]);
    zt_residual_layernorm(be, dt, v.z1, v.x1, v.mean1, v.rstd1, x, v.w_t, v.p[L_N1W], v.p[L_N1B],
                          rows, e);

    zt_linear_act_forward(be, dt, v.act, v.gelu ? v.hid : NULL, v.x1, v.p[L_W1], v.p[L_B1], rows, e,
                          h, v.gelu ? ZT_ACT_GELU : ZT_ACT_RELU); // (rows, H)
    const void *seen = zt_layer_dropped(be, dt, v.w_h, v.act, &d[2]); // what linear2 reads
    zt_linear_forward(be, dt, v.w_t, seen, v.p[L_W2], v.p[L_B2], rows, h, e);
    drop_into(be, dt, v.w_t, v.w_t, rows * e, &d[3]);
    zt_residual_layernorm(be, dt, v.z2, y, v.mean2, v.rstd2, v.x1, v.w_t, v.p[L_N2W], v.p[L_N2B],
                          rows, e);
}

static void layer_backward(const zt_unit *u, const zt_backend *be, const void *params,
                           const void *x, const void *y, const void *saved, void *dy, void *dx,
                           float *dparams, void *work, bool accumulate, const zt_batch *b)
{
    (void)y;
    layer_view v;
    layer_view_init(&v, u, params, dparams, (void *)saved, work, b);
    zt_dropout_desc d[4];
    layer_dropouts(u, &v, b, d);
    int64_t rows = v.rows, e = v.e, h = v.h;
    zt_dtype dt = v.dt;
    bool acc = accumulate;

    /* norm2, then the feed-forward branch; dz2 (w_z) also flows to x1
     * directly. Without dropout a branch reads its gradient where it is. */
    be->layernorm_backward(be, dt, v.w_z, v.dp[L_N2W], v.dp[L_N2B], dy, v.z2, v.mean2, v.rstd2,
                           v.p[L_N2W], rows, e, false, acc);
    const void *dbranch = zt_layer_dropped(be, dt, v.w_t, v.w_z, &d[3]);
    /* The activation linear2 saw: dropped into w_h, where its input gradient
     * then goes too (in place); without dropout, act itself. */
    const void *seen = zt_layer_dropped(be, dt, v.w_h, v.act, &d[2]);
    zt_linear_backward(be, dt, v.w_h, v.dp[L_W2], v.dp[L_B2], dbranch, e, seen, v.p[L_W2], rows, h,
                       e, acc, false); // dW2 (E, H), db2, dact (rows, H)
    drop_into(be, dt, v.w_h, v.w_h, rows * h, &d[2]);
    zt_act_bias_grad(be, dt, v.w_h, v.dp[L_B1], v.w_h, v.gelu ? v.hid : v.act, rows, h,
                     v.gelu ? ZT_ACT_GELU : ZT_ACT_RELU, acc);
    zt_linear_backward(be, dt, v.w_z, v.dp[L_W1], NULL, v.w_h, h, v.x1, v.p[L_W1], rows, e, h,
                       acc, true); // w_z = dx1 = dz2 + linear1's input gradient

    /* norm1, then the attention branch; dz1 (w_x1) also flows to x directly. */
    be->layernorm_backward(be, dt, v.w_x1, v.dp[L_N1W], v.dp[L_N1B], v.w_z, v.z1, v.mean1, v.rstd1,
                           v.p[L_N1W], rows, e, false, acc);
    dbranch = zt_layer_dropped(be, dt, v.w_t, v.w_x1, &d[1]);
    zt_linear_backward(be, dt, v.w_ay, v.dp[L_OUTW], v.dp[L_OUTB], dbranch, e, v.atty, v.p[L_OUTW],
                       rows, e, e, acc, false);
    zt_attention_backward(be, dt, v.w_qkv, v.w_ay, v.atty, v.att, v.qkv, v.w_att, &v.shape, &d[0]);
    if (dx)
        be->copy_d2d(be, dx, v.w_x1, bytes_of(dt, rows * e));
    zt_linear_backward(be, dt, dx, v.dp[L_INW], v.dp[L_INB], v.w_qkv, 3 * e, x, v.p[L_INW], rows, e,
                       3 * e, acc, true);
}

/* in_proj Linear(E, 3E), Q K^T, scale, softmax, att V, out_proj Linear(E, E),
 * residual, norm1; linear1 Linear(E, H), activation, linear2 Linear(H, E),
 * residual, norm2. */
static zt_unit_cost layer_cost(const zt_unit *u, int64_t n, int64_t t)
{
    int64_t e = u->dims[1], heads = u->dims[2], h = u->dims[3], rows = n * t;
    int64_t macs = rows * (3 * e * e + e * e + 2 * e * h) + 2 * n * t * t * e;
    int64_t elementwise = rows * (2 * e + 5 * e + 5 * e + h) + 2 * n * heads * t * t;
    return (zt_unit_cost){.macs = macs, .flops = 2 * macs + elementwise};
}

static const zt_unit_ops layer_ops = {"TransformerEncoderLayer", layer_forward,
                                      layer_backward, layer_cost};

void zt_classifier_layer(zt_unit *u, const char *name, int64_t max_len, int64_t e, int64_t heads,
                         int64_t hidden, float dropout, bool gelu, bool unfused_attention)
{
    int64_t t = max_len;
    zt_unit_reset(u, name, &layer_ops);
    u->typed = !unfused_attention;
    u->dims[0] = max_len;
    u->dims[1] = e;
    u->dims[2] = heads;
    u->dims[3] = hidden;
    u->dims[4] = gelu;
    u->dims[5] = unfused_attention;
    u->dropout = dropout;
    u->in_numel = u->out_numel = t * e;
    /* The fp32 statistics take two elements' room each where the layer may
     * run on 16-bit tensors (fused attention). */
    int64_t stats = 4 * t + zt_attention_saved_numel(t, heads, unfused_attention);
    u->saved_numel = 7 * t * e + 2 * t * hidden +
                     (unfused_attention ? stats : zt_layer_stats_room(stats, ZT_BF16));
    u->work_numel = 7 * t * e + t * hidden + zt_attention_work_numel(t, e, heads, unfused_attention);
    if (!gelu) /* the count above holds hid, which only GELU keeps */
        u->saved_numel -= t * hidden;
    float lin_e = 1.0f / sqrtf((float)e), lin_h = 1.0f / sqrtf((float)hidden);
    /* xavier_uniform_ on the (3E, E) in_proj_weight: fan_in E, fan_out 3E. */
    float xavier = sqrtf(6.0f / (float)(e + 3 * e));
    zt_unit_add_param(u, "self_attn.in_proj_weight", 2, (int64_t[]){3 * e, e}, ZT_INIT_UNIFORM,
                      xavier);
    zt_unit_add_param(u, "self_attn.in_proj_bias", 1, (int64_t[]){3 * e}, ZT_INIT_ZEROS, 0.0f);
    zt_unit_add_param(u, "self_attn.out_proj.weight", 2, (int64_t[]){e, e}, ZT_INIT_UNIFORM,
                      lin_e);
    zt_unit_add_param(u, "self_attn.out_proj.bias", 1, (int64_t[]){e}, ZT_INIT_ZEROS, 0.0f);
    zt_unit_add_param(u, "linear1.weight", 2, (int64_t[]){hidden, e}, ZT_INIT_UNIFORM, lin_e);
    zt_unit_add_param(u, "linear1.bias", 1, (int64_t[]){hidden}, ZT_INIT_UNIFORM, lin_e);
    zt_unit_add_param(u, "linear2.weight", 2, (int64_t[]){e, hidden}, ZT_INIT_UNIFORM, lin_h);
    zt_unit_add_param(u, "linear2.bias", 1, (int64_t[]){e}, ZT_INIT_UNIFORM, lin_h);
    zt_unit_add_param(u, "norm1.weight", 1, (int64_t[]){e}, ZT_INIT_ONES, 0.0f);
    zt_unit_add_param(u, "norm1.bias", 1, (int64_t[]){e}, ZT_INIT_ZEROS, 0.0f);
    zt_unit_add_param(u, "norm2.weight", 1, (int64_t[]){e}, ZT_INIT_ONES, 0.0f);
    zt_unit_add_param(u, "norm2.bias", 1, (int64_t[]){e}, ZT_INIT_ZEROS, 0.0f);
}

/* ---- head: fc2(drop(relu(fc1(masked_mean(x))))) ---- */

/* The head's parameters, saved tensors and scratch, all of b->dt. */
typedef struct {
    const void *w1, *b1, *w2, *b2;
    void *pooled, *act; // saved: (n, E), (n, H)
    void *dact, *dpooled; // work: (n, H), (n, E)
} head_view;

static head_view head_view_of(const zt_unit *u, const void *params, const void *saved,
                              void *work, const zt_batch *b)
{
    int64_t e = u->dims[1], h = u->dims[2], k = u->dims[3];
    zt_dtype dt = b->dt;
    head_view v;
    v.w1 = params;
    v.b1 = zt_dtype_at(v.w1, dt, h * e);
    v.w2 = zt_dtype_at(v.b1, dt, h);
    v.b2 = zt_dtype_at(v.w2, dt, k * h);
    v.pooled = (void *)saved;
    v.act = zt_dtype_at(v.pooled, dt, b->n * e);
    v.dact = work;
    v.dpooled = zt_dtype_at(work, dt, b->n * h);
    return v;
}

static void head_forward(const zt_unit *u, const zt_backend *be, const void *params,
                         const void *x, void *y, void *saved, void *work, const zt_batch *b)
{
    int64_t e = u->dims[1], h = u->dims[2], k = u->dims[3], n = b->n;
    zt_dtype dt = b->dt;
    head_view v = head_view_of(u, params, saved, work, b);
    be->mean_pool_forward(be, dt, v.pooled, x, b->lengths, n, b->t, e); // (n, E)
    zt_linear_act_forward(be, dt, v.act, NULL, v.pooled, v.w1, v.b1, n, e, h,
                          ZT_ACT_RELU); // (n, H)
    zt_dropout_desc d = zt_layer_dropout(u, 0, b, 1, 1, h, 1, h);
    drop_into(be, dt, v.dact, v.act, n * h, &d);
    zt_linear_forward(be, dt, y, v.dact, v.w2, v.b2, n, h, k); // (n, classes)
}

static void head_backward(const zt_unit *u, const zt_backend *be, const void *params,
                          const void *x, const void *y, const void *saved, void *dy, void *dx,
                          float *dparams, void *work, bool accumulate, const zt_batch *b)
{
    (void)x;
    (void)y;
    int64_t e = u->dims[1], h = u->dims[2], k = u->dims[3], n = b->n;
    zt_dtype dt = b->dt;
    head_view v = head_view_of(u, params, saved, work, b);
    float *dw1 = dparams, *db1 = dw1 + h * e, *dw2 = db1 + h, *db2 = dw2 + k * h;
    zt_dropout_desc d = zt_layer_dropout(u, 0, b, 1, 1, h, 1, h);
    drop_into(be, dt, v.dact, v.act, n * h, &d); // the dropped activation fc2 saw
    zt_linear_backward(be, dt, v.dact, dw2, db2, dy, k, v.dact, v.w2, n, h, k, accumulate,
                       false); // in place: dact (n, H)
    drop_into(be, dt, v.dact, v.dact, n * h, &d);
    zt_act_bias_grad(be, dt, v.dact, db1, v.dact, v.act, n, h, ZT_ACT_RELU, accumulate);
    zt_linear_backward(be, dt, v.dpooled, dw1, NULL, v.dact, h, v.pooled, v.w1, n, e, h,
                       accumulate, false);
    if (dx)
        be->mean_pool_backward(be, dt, dx, v.dpooled, b->lengths, n, b->t, e);
}

/* Mean pooling, fc1 Linear(E, H), ReLU, fc2 Linear(H, classes). */
static zt_unit_cost head_cost(const zt_unit *u, int64_t n, int64_t t)
{
    int64_t e = u->dims[1], h = u->dims[2], k = u->dims[3];
    int64_t macs = n * e * h + n * h * k;
    return (zt_unit_cost){.macs = macs, .flops = 2 * macs + n * t * e + n * h};
}

static const zt_unit_ops head_ops = {"ClassifierHead", head_forward, head_backward, head_cost};

void zt_classifier_head(zt_unit *u, int64_t max_len, int64_t e, int64_t hidden, int64_t classes,
                        float dropout)
{
    zt_unit_reset(u, "head", &head_ops);
    u->typed = true;
    u->dims[0] = max_len;
    u->dims[1] = e;
    u->dims[2] = hidden;
    u->dims[3] = classes;
    u->dropout = dropout;
    u->in_numel = max_len * e;
    u->out_numel = classes;
    u->saved_numel = e + hidden;
    u->work_numel = hidden + e;
    float lin_e = 1.0f / sqrtf((float)e), lin_h = 1.0f / sqrtf((float)hidden);
    zt_unit_add_param(u, "fc1.weight", 2, (int64_t[]){hidden, e}, ZT_INIT_UNIFORM, lin_e);
    zt_unit_add_param(u, "fc1.bias", 1, (int64_t[]){hidden}, ZT_INIT_UNIFORM, lin_e);
    zt_unit_add_param(u, "fc2.weight", 2, (int64_t[]){classes, hidden}, ZT_INIT_UNIFORM, lin_h);
    zt_unit_add_param(u, "fc2.bias", 1, (int64_t[]){classes}, ZT_INIT_UNIFORM, lin_h);
}

/* Two classes: negative, positive. */
zt_status zt_classifier_build(const zt_model_args *a, zt_model *m)
{
    int64_t layers = a->n_layer, e = a->n_embd, heads = a->n_head, hidden = a->hidden_dim;
    int64_t seq = a->max_len, vocab = a->vocab_size;
    double p = a->dropout;
    ZT_TRY(zt_model_check_transformer("classifier", layers, e, heads, seq, p, vocab));
    ZT_TRY(zt_model_alloc_units(m, (int)layers + 2));
    zt_classifier_embed(&m->units[0], vocab, seq, e, (float)p);
    for (int l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d", l);
        zt_classifier_layer(&m->units[1 + l], name, seq, e, heads, hidden, (float)p, a->gelu,
                            a->unfused_attention);
    }
    zt_classifier_head(&m->units[layers + 1], seq, e, hidden, 2, (float)p);
    m->seq_len = seq;
    m->vocab_size = vocab;
    m->hidden_size = e;
    m->labels_numel = 1;
    m->n_classes = 2;
    m->loss_in_place = true;
    return ZT_OK;
}
