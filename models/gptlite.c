#include "models/gptlite.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/layers.h"

/* ---- embedding: y = wte[tokens] + wpe[position] ---- */

static void embed_forward(const zt_unit *u, const zt_backend *be, const void *params,
                          const void *x, void *y, void *saved, void *work, const zt_batch *b)
{
    (void)x;
    (void)saved;
    (void)work;
    int64_t vocab = u->dims[0], c = u->dims[2];
    const void *wte = params, *wpe = zt_dtype_at(params, b->dt, vocab * c);
    be->embedding_forward(be, b->dt, y, b->tokens, wte, b->n * b->t, c, false); // (n, t, C)
    be->bias_add(be, b->dt, y, wpe, b->n, b->t * c);
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
    int64_t vocab = u->dims[0], seq = u->dims[1], c = u->dims[2];
    float *dwte = dparams, *dwpe = dparams + vocab * c;
    be->embedding_backward(be, b->dt, dwte, b->tokens, dy, b->n * b->t, c, vocab, accumulate);
    be->bias_grad(be, b->dt, dwpe, dy, b->n, b->t * c, accumulate);
    if (!accumulate && b->t < seq) /* positions this batch did not reach */
        be->memset_zero(be, dwpe + b->t * c, (size_t)((seq - b->t) * c) * sizeof(float));
}

/* The lookup is free; adding wpe is one FLOP per element. */
static zt_unit_cost embed_cost(const zt_unit *u, int64_t n, int64_t t)
{
    return (zt_unit_cost){.macs = 0, .flops = n * t * u->dims[2]};
}

static const zt_unit_ops embed_ops = {"Embedding", embed_forward, embed_backward, embed_cost};

void zt_gptlite_embed(zt_unit *u, int64_t vocab, int64_t seq_len, int64_t c)
{
    zt_unit_reset(u, "embed", &embed_ops);
    u->typed = true;
    u->dims[0] = vocab;
    u->dims[1] = seq_len;
    u->dims[2] = c;
    u->out_numel = seq_len * c;
    zt_unit_add_param(u, "wte", 2, (int64_t[]){vocab, c}, ZT_INIT_NORMAL, 1.0f);
    zt_unit_add_param(u, "wpe", 2, (int64_t[]){seq_len, c}, ZT_INIT_NORMAL, 1.0f);
}

/* ---- block: x += drop(proj(attn(ln_1(x)))); x += drop(mlp(ln_2(x))) ---- */

/* Views of a block's parameters, saved tensors and scratch for a batch of n
 * samples: regions are laid out at the model's sequence length, used at the
 * batch's. The fp32 statistics come first in `saved` (and the attention's
 * fp32 scratch first in `work`), so they stay aligned whatever b->dt is;
 * with a 16-bit dt each takes two elements' room (block_stats_room). */
typedef struct {
    int64_t seq, c, heads, f, rows;
    bool gelu, unfused;
    zt_dtype dt;
    const void *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fpw, *fpb;
    float *dln1w, *dln1b, *dqkvw, *dqkvb, *dprojw, *dprojb, *dln2w, *dln2b, *dfcw, *dfcb, *dfpw,
        *dfpb;
    float *mean1, *rstd1, *att, *mean2, *rstd2;
    void *ln1, *qkv, *atty, *x1, *ln2, *fch, *fca;
    float *w_att;
    void *w_f, *w_c1, *w_c2, *w_c3, *w_qkv;
    zt_attn_shape shape;
} block_view;

static void block_view_init(block_view *v, const zt_unit *u, const void *params, float *dparams,
                            void *saved, void *work, const zt_batch *b)
{
    memset(v, 0, sizeof *v);
    v->seq = u->dims[0];
    v->c = u->dims[1];
    v->heads = u->dims[2];
    v->f = u->dims[3];
    v->gelu = u->dims[4] != 0;
    v->unfused = u->dims[5] != 0;
    v->rows = b->n * b->t;
    v->dt = b->dt;
    zt_dtype dt = b->dt;
    void *p[12];
    zt_unit_param_views(u, params, dt, p);
    v->ln1w = p[0], v->ln1b = p[1], v->qkvw = p[2], v->qkvb = p[3], v->projw = p[4];
    v->projb = p[5], v->ln2w = p[6], v->ln2b = p[7], v->fcw = p[8], v->fcb = p[9];
    v->fpw = p[10], v->fpb = p[11];
    if (dparams) {
        zt_unit_param_views(u, dparams, ZT_F32, p);
        v->dln1w = p[0], v->dln1b = p[1], v->dqkvw = p[2], v->dqkvb = p[3], v->dprojw = p[4];
        v->dprojb = p[5], v->dln2w = p[6], v->dln2b = p[7], v->dfcw = p[8], v->dfcb = p[9];
        v->dfpw = p[10], v->dfpb = p[11];
    }
    int64_t n = b->n, tc = v->seq * v->c, t = v->seq;
    void *s = saved;
    v->mean1 = zt_layer_take_f32(&s, n * t);
    v->rstd1 = zt_layer_take_f32(&s, n * t);
    v->mean2 = zt_layer_take_f32(&s, n * t);
    v->rstd2 = zt_layer_take_f32(&s, n * t);
    v->att = zt_layer_take_f32(&s, n * zt_attention_saved_numel(t, v->heads, v->unfused));
    v->ln1 = zt_layer_take(&s, dt, n * tc);
    v->qkv = zt_layer_take(&s, dt, n * 3 * tc);
    v->atty = zt_layer_take(&s, dt, n * tc);
    v->x1 = zt_layer_take(&s, dt, n * tc);
    v->ln2 = zt_layer_take(&s, dt, n * tc);
    if (v->gelu) /* ReLU's backward reads fca: no pre-activation kept */
        v->fch = zt_layer_take(&s, dt, n * t * v->f);
    v->fca = s;
    void *w = work;
    v->w_att = zt_layer_take_f32(&w, n * zt_attention_work_numel(t, v->c, v->heads, v->unfused));
    v->w_f = zt_layer_take(&w, dt, n * t * v->f);
    v->w_c1 = zt_layer_take(&w, dt, n * tc);
    v->w_c2 = zt_layer_take(&w, dt, n * tc);
    v->w_c3 = zt_layer_take(&w, dt, n * tc);
    v->w_qkv = w;
    v->shape = (zt_attn_shape){.n = n, .t = b->t, .max_t = t, .c = v->c, .heads = v->heads,
                               .causal = true, .lengths = b->lengths, .unfused = v->unfused};
}

/* Room for the block's fp32 statistics: twice their count where the block
 * may run on 16-bit tensors (fused attention), once where it is fp32 only. */
static int64_t block_stats_room(int64_t t, int64_t heads, bool unfused)
{
    int64_t floats = 4 * t + zt_attention_saved_numel(t, heads, unfused);
    return unfused ? floats : zt_layer_stats_room(floats, ZT_BF16);
}

static int64_t block_saved_numel(int64_t t, int64_t c, int64_t heads, int64_t f, bool unfused)
{
    return 7 * t * c + block_stats_room(t, heads, unfused) + 2 * t * f;
}

static int64_t block_work_numel(int64_t t, int64_t c, int64_t heads, int64_t f, bool unfused)
{
    return t * f + 3 * t * c + zt_attention_work_numel(t, c, heads, unfused) + 3 * t * c;
}

static void block_forward(const zt_unit *u, const zt_backend *be, const void *params,
                          const void *x, void *y, void *saved, void *work, const zt_batch *b)
{
    block_view v;
    block_view_init(&v, u, params, NULL, saved, work, b);
    int64_t rows = v.rows, c = v.c, f = v.f;
    zt_dtype dt = v.dt;
    zt_dropout_desc d_att = zt_layer_dropout(u, 0, b, v.heads, b->t, b->t, v.seq, v.seq);
    zt_dropout_desc d_proj = zt_layer_dropout(u, 1, b, 1, b->t, c, v.seq, c);
    zt_dropout_desc d_mlp = zt_layer_dropout(u, 2, b, 1, b->t, c, v.seq, c);

    be->layernorm_forward(be, dt, v.ln1, v.mean1, v.rstd1, x, v.ln1w, v.ln1b, rows, c,
                          ZT_LAYERNORM_EPS);
    zt_linear_forward(be, dt, v.qkv, v.ln1, v.qkvw, v.qkvb, rows, c, 3 * c); // (rows, 3C)
    zt_attention_forward(be, dt, v.atty, v.att, v.w_att, v.qkv, &v.shape, &d_att);
    zt_linear_forward(be, dt, v.w_c1, v.atty, v.projw, v.projb, rows, c, c);
    if (d_proj.p > 0.0f)
        be->dropout(be, dt, v.w_c1, v.w_c1, &d_proj);
    zt_residual_layernorm(be, dt, v.x1, v.ln2, v.mean2, v.rstd2, x, v.w_c1, v.ln2w, v.ln2b, rows,
                          c); // x1 = x + attention branch, ln2 = ln_2(x1)

    /* (rows, 4C); ReLU's backward reads its output, so only GELU keeps fch. */
    zt_linear_act_forward(be, dt, v.fca, v.gelu ? v.fch : NULL, v.ln2, v.fcw, v.fcb, rows, c, f,
                          v.gelu ? ZT_ACT_GELU : ZT_ACT_RELU);
    /* The mlp branch straight into y, then y += x1: the same sum as
     * x1 + branch (one rounding either way), with no copy of x1. */
    zt_linear_forward(be, dt, y, v.fca, v.fpw, v.fpb, rows, f, c);
    if (d_mlp.p > 0.0f)
        be->dropout(be, dt, y, y, &d_mlp);
    be->axpy(be, dt, y, 1.0f, v.x1, rows * c); // y = x1 + mlp branch
}

static void block_backward(const zt_unit *u, const zt_backend *be, const void *params,
                           const void *x, const void *y, const void *saved, void *dy, void *dx,
                           float *dparams, void *work, bool accumulate, const zt_batch *b)
{
    (void)y;
    block_view v;
    block_view_init(&v, u, params, dparams, (void *)saved, work, b);
    int64_t rows = v.rows, c = v.c, f = v.f;
    zt_dtype dt = v.dt;
    size_t rc_bytes = (size_t)(rows * c) * zt_dtype_size(dt);
    zt_dropout_desc d_att = zt_layer_dropout(u, 0, b, v.heads, b->t, b->t, v.seq, v.seq);
    zt_dropout_desc d_proj = zt_layer_dropout(u, 1, b, 1, b->t, c, v.seq, c);
    zt_dropout_desc d_mlp = zt_layer_dropout(u, 2, b, 1, b->t, c, v.seq, c);
    bool acc = accumulate;

    /* MLP branch; dy carries on as dx1 (the residual). Without dropout the
     * branch's gradient is dy itself, read before layernorm_backward adds
     * into dy. */
    const void *dbranch = zt_layer_dropped(be, dt, v.w_c1, dy, &d_mlp);
    zt_linear_backward(be, dt, v.w_f, v.dfpw, v.dfpb, dbranch, c, v.fca, v.fpw, rows, f, c, acc,
                       false);
    zt_act_bias_grad(be, dt, v.w_f, v.dfcb, v.w_f, v.gelu ? v.fch : v.fca, rows, f,
                     v.gelu ? ZT_ACT_GELU : ZT_ACT_RELU, acc);
    zt_linear_backward(be, dt, v.w_c2, v.dfcw, NULL, v.w_f, f, v.ln2, v.fcw, rows, c, f, acc,
                       false);
    be->layernorm_backward(be, dt, dy, v.dln2w, v.dln2b, v.w_c2, v.x1, v.mean2, v.rstd2, v.ln2w,
                           rows, c, true, acc); // dy is now dL/dx1

    /* Attention branch; dy (dL/dx1) is only read from here on. */
    dbranch = zt_layer_dropped(be, dt, v.w_c1, dy, &d_proj);
    zt_linear_backward(be, dt, v.w_c2, v.dprojw, v.dprojb, dbranch, c, v.atty, v.projw, rows, c,
                       c, acc, false);
    zt_attention_backward(be, dt, v.w_qkv, v.w_c2, v.atty, v.att, v.qkv, v.w_att, &v.shape,
                          &d_att);
    zt_linear_backward(be, dt, v.w_c3, v.dqkvw, v.dqkvb, v.w_qkv, 3 * c, v.ln1, v.qkvw, rows, c,
                       3 * c, acc, false);
    if (!dx) {
        be->layernorm_backward(be, dt, v.w_c2, v.dln1w, v.dln1b, v.w_c3, x, v.mean1, v.rstd1,
                               v.ln1w, rows, c, false, acc);
        return;
    }
    be->copy_d2d(be, dx, dy, rc_bytes);
    be->layernorm_backward(be, dt, dx, v.dln1w, v.dln1b, v.w_c3, x, v.mean1, v.rstd1, v.ln1w, rows,
                           c, true, acc);
}

/* ln_1, qkv Linear(C, 3C), Q K^T, scale, softmax, att V, proj Linear(C, C),
 * residual; ln_2, fc Linear(C, F), activation, proj Linear(F, C), residual. */
static zt_unit_cost block_cost(const zt_unit *u, int64_t n, int64_t t)
{
    int64_t c = u->dims[1], heads = u->dims[2], f = u->dims[3], rows = n * t;
    int64_t macs = rows * (3 * c * c + c * c + 2 * c * f) + 2 * n * t * t * c;
    int64_t elementwise = rows * (5 * c + 5 * c + 2 * c + f) + 2 * n * heads * t * t;
    return (zt_unit_cost){.macs = macs, .flops = 2 * macs + elementwise};
}

static const zt_unit_ops block_ops = {"Block", block_forward, block_backward, block_cost};

void zt_gptlite_block(zt_unit *u, const char *name, int64_t seq_len, int64_t c, int64_t heads,
                      float dropout, bool gelu, bool unfused_attention)
{
    int64_t f = 4 * c;
    zt_unit_reset(u, name, &block_ops);
    u->typed = !unfused_attention;
    u->dims[0] = seq_len;
    u->dims[1] = c;
    u->dims[2] = heads;
    u->dims[3] = f;
    u->dims[4] = gelu;
    u->dims[5] = unfused_attention;
    u->dropout = dropout;
    u->in_numel = u->out_numel = seq_len * c;
    /* block_saved_numel counts fch, which only GELU keeps. */
    u->saved_numel =
        block_saved_numel(seq_len, c, heads, f, unfused_attention) - (gelu ? 0 : seq_len * f);
    u->work_numel = block_work_numel(seq_len, c, heads, f, unfused_attention);
    float lin_c = 1.0f / sqrtf((float)c), lin_f = 1.0f / sqrtf((float)f);
    zt_unit_add_param(u, "ln_1.weight", 1, (int64_t[]){c}, ZT_INIT_ONES, 0.0f);
    zt_unit_add_param(u, "ln_1.bias", 1, (int64_t[]){c}, ZT_INIT_ZEROS, 0.0f);
    zt_unit_add_param(u, "attn.qkv.weight", 2, (int64_t[]){3 * c, c}, ZT_INIT_UNIFORM, lin_c);
    zt_unit_add_param(u, "attn.qkv.bias", 1, (int64_t[]){3 * c}, ZT_INIT_UNIFORM, lin_c);
    zt_unit_add_param(u, "attn.proj.weight", 2, (int64_t[]){c, c}, ZT_INIT_UNIFORM, lin_c);
    zt_unit_add_param(u, "attn.proj.bias", 1, (int64_t[]){c}, ZT_INIT_UNIFORM, lin_c);
    zt_unit_add_param(u, "ln_2.weight", 1, (int64_t[]){c}, ZT_INIT_ONES, 0.0f);
    zt_unit_add_param(u, "ln_2.bias", 1, (int64_t[]){c}, ZT_INIT_ZEROS, 0.0f);
    zt_unit_add_param(u, "mlp.fc.weight", 2, (int64_t[]){f, c}, ZT_INIT_UNIFORM, lin_c);
    zt_unit_add_param(u, "mlp.fc.bias", 1, (int64_t[]){f}, ZT_INIT_UNIFORM, lin_c);
    zt_unit_add_param(u, "mlp.proj.weight", 2, (int64_t[]){c, f}, ZT_INIT_UNIFORM, lin_f);
    zt_unit_add_param(u, "mlp.proj.bias", 1, (int64_t[]){c}, ZT_INIT_UNIFORM, lin_f);
}

/* ---- head: logits = lm_head(ln_f(x)) ----
 * The logits are (rows, Vp), Vp = V rounded up to ZT_GPTLITE_VOCAB_ALIGN:
 * the GEMMs compute and read V columns with row stride Vp, so lm_head keeps
 * its (V, C) shape in every checkpoint and interop format, and the bias ops,
 * which know no stride, run over all Vp columns with a bias padded by zeros
 * in `work` (the loss leaves the padding's gradient exactly 0). */

/* The padded bias (Vp, of dt) or its fp32 gradient (Vp) lives first in
 * work, then the two (rows, C) of dt. */
static void *head_work(const zt_unit *u, void *work, zt_dtype dt, int64_t rows, int k)
{
    return zt_dtype_at(work, dt, zt_layer_stats_room(u->dims[3], dt) + k * rows * u->dims[1]);
}

static void head_forward(const zt_unit *u, const zt_backend *be, const void *params,
                         const void *x, void *y, void *saved, void *work, const zt_batch *b)
{
    int64_t seq = u->dims[0], c = u->dims[1], vocab = u->dims[2], vp = u->dims[3];
    int64_t rows = b->n * b->t;
    zt_dtype dt = b->dt;
    size_t es = zt_dtype_size(dt);
    const void *lnw = params, *lnb = zt_dtype_at(params, dt, c);
    const void *w = zt_dtype_at(params, dt, 2 * c), *bias = zt_dtype_at(w, dt, vocab * c);
    void *s = saved;
    float *mean = zt_layer_take_f32(&s, b->n * seq);
    float *rstd = zt_layer_take_f32(&s, b->n * seq);
    void *ln = s; // (rows, C)
    be->layernorm_forward(be, dt, ln, mean, rstd, x, lnw, lnb, rows, c, ZT_LAYERNORM_EPS);
    be->gemm(be, dt, dt, false, true, rows, vocab, c, 1.0f, ln, c, w, c, 0.0f, y,
             vp); // (rows, V) of (rows, Vp)
    if (vp > vocab) {
        void *pb = work; // (Vp)
        be->copy_d2d(be, pb, bias, (size_t)vocab * es);
        be->memset_zero(be, zt_dtype_at(pb, dt, vocab), (size_t)(vp - vocab) * es);
        bias = pb;
    }
    be->bias_add(be, dt, y, bias, rows, vp);
}

static void head_backward(const zt_unit *u, const zt_backend *be, const void *params,
                          const void *x, const void *y, const void *saved, void *dy, void *dx,
                          float *dparams, void *work, bool accumulate, const zt_batch *b)
{
    (void)y;
    int64_t seq = u->dims[0], c = u->dims[1], vocab = u->dims[2], vp = u->dims[3];
    int64_t rows = b->n * b->t;
    zt_dtype dt = b->dt;
    const void *lnw = params, *w = zt_dtype_at(params, dt, 2 * c);
    float *dlnw = dparams, *dlnb = dparams + c, *dw = dparams + 2 * c, *db = dw + vocab * c;
    void *s = (void *)saved;
    const float *mean = zt_layer_take_f32(&s, b->n * seq);
    const float *rstd = zt_layer_take_f32(&s, b->n * seq);
    const void *ln = s;
    void *dln = head_work(u, work, dt, rows, 0), *scratch = head_work(u, work, dt, rows, 1);
    // dy: (rows, Vp), its padding columns 0; dW (V, C), dX (rows, C) into work
    zt_linear_backward(be, dt, dln, dw, NULL, dy, vp, ln, w, rows, c, vocab, accumulate, false);
    if (vp > vocab) {
        float *pg = work; // (Vp)
        if (accumulate) {
            be->copy_d2d(be, pg, db, (size_t)vocab * sizeof *pg);
            be->memset_zero(be, pg + vocab, (size_t)(vp - vocab) * sizeof *pg);
        }
        be->bias_grad(be, dt, pg, dy, rows, vp, accumulate);
        be->copy_d2d(be, db, pg, (size_t)vocab * sizeof *pg);
    } else {
        be->bias_grad(be, dt, db, dy, rows, vocab, accumulate);
    }
    be->layernorm_backward(be, dt, dx ? dx : scratch, dlnw, dlnb, dln, x, mean, rstd, lnw, rows, c,
                           false, accumulate);
}

/* ln_f, lm_head Linear(C, V). */
static zt_unit_cost head_cost(const zt_unit *u, int64_t n, int64_t t)
{
    int64_t c = u->dims[1], vocab = u->dims[2], rows = n * t, macs = rows * c * vocab;
    return (zt_unit_cost){.macs = macs, .flops = 2 * macs + 5 * rows * c};
}

static const zt_unit_ops head_ops = {"LMHead", head_forward, head_backward, head_cost};

void zt_gptlite_head(zt_unit *u, int64_t seq_len, int64_t c, int64_t vocab)
{
    zt_unit_reset(u, "head", &head_ops);
    u->typed = true;
    u->dims[0] = seq_len;
    u->dims[1] = c;
    u->dims[2] = vocab;
    u->dims[3] = zt_gptlite_padded_vocab(vocab);
    u->in_numel = seq_len * c;
    u->out_numel = seq_len * u->dims[3];
    /* ln_f's output and its fp32 mean and rstd (room for 16-bit tensors). */
    u->saved_numel = seq_len * c + zt_layer_stats_room(2 * seq_len, ZT_BF16);
    /* (rows, C) twice in backward, and the padded bias (or its fp32
     * gradient) once (per sample: the plan knows no once-per-batch scratch);
     * work is counted in floats whatever the tensors' dtype. */
    u->work_numel = 2 * seq_len * c + u->dims[3];
    float lin = 1.0f / sqrtf((float)c);
    zt_unit_add_param(u, "ln_f.weight", 1, (int64_t[]){c}, ZT_INIT_ONES, 0.0f);
    zt_unit_add_param(u, "ln_f.bias", 1, (int64_t[]){c}, ZT_INIT_ZEROS, 0.0f);
    zt_unit_add_param(u, "lm_head.weight", 2, (int64_t[]){vocab, c}, ZT_INIT_UNIFORM, lin);
    zt_unit_add_param(u, "lm_head.bias", 1, (int64_t[]){vocab}, ZT_INIT_UNIFORM, lin);
}

int64_t zt_gptlite_padded_vocab(int64_t vocab)
{
    return (vocab + ZT_GPTLITE_VOCAB_ALIGN - 1) / ZT_GPTLITE_VOCAB_ALIGN * ZT_GPTLITE_VOCAB_ALIGN;
}

zt_status zt_gptlite_build(const zt_model_args *a, zt_model *m)
{
    int64_t layers = a->n_layer, c = a->n_embd, heads = a->n_head, seq = a->block_size;
    int64_t vocab = a->vocab_size;
    double p = a->dropout;
    ZT_TRY(zt_model_check_transformer("gptlite", layers, c, heads, seq, p, vocab));
    ZT_TRY(zt_model_alloc_units(m, (int)layers + 2));
    zt_gptlite_embed(&m->units[0], vocab, seq, c);
    for (int l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%d", l);
        zt_gptlite_block(&m->units[1 + l], name, seq, c, heads, (float)p, a->gelu,
                         a->unfused_attention);
    }
    zt_gptlite_head(&m->units[layers + 1], seq, c, vocab);
    m->seq_len = seq;
    m->vocab_size = vocab;
    m->hidden_size = c;
    m->labels_numel = seq;
    m->labels_per_token = true;
    m->n_classes = vocab;
    m->logits_ld = zt_gptlite_padded_vocab(vocab);
    m->loss_in_place = true;
    return ZT_OK;
}
