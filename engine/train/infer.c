/*
 * infer: forward-only passes on the training buffers (slot 0): validation
 * loss and accuracy, and sampling from a language model. Dropout is off; with
 * parameters sharded the units are gathered as for training and every gather
 * is dropped at the end (the policy's flush). With pipelining each
 * micro-batch flows through the stages (zt_pipe_recv_act / send_act), the
 * last stage scores it, and a sampled token goes from the last stage to all.
 */
#include <math.h>
#include <string.h>

#include "engine/rng.h"
#include "engine/train/trainer_impl.h"

/* Forward-only passes run on slot 0's buffers, which no pipelined step
 * holds between calls. */
static void infer_use_slot0(zt_trainer *t)
{
    zt_train_use_slot(t, 0);
    t->slots_hold = -1;
}

zt_status zt_trainer_eval(zt_trainer *t, const zt_dataset *ds, int64_t iters, double *loss,
                          double *accuracy)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    int64_t mb = t->cfg->micro_batch_size, per_iter = mb * t->comm->size;
    int64_t all = (ds->n_samples + per_iter - 1) / per_iter;
    if (iters <= 0 || iters > all)
        iters = all;
    bool classify = !model->labels_per_token;
    double acc[3] = {0.0, 0.0, 0.0}; /* loss sum, counted rows, argmax hits */
    infer_use_slot0(t);
    for (int64_t it = 0; it < iters; it++) {
        for (int64_t k = 0; k < mb; k++) {
            int64_t pos = it * per_iter + (int64_t)t->comm->rank * mb + k;
            t->index_host[k] = pos < ds->n_samples ? pos : -1;
            t->row_keys_host[k] = (uint64_t)pos;
        }
        zt_batch b;
        zt_train_load(t, ds, mb, &b);
        ZT_TRY(zt_pipe_recv_act(&t->pipe, mb));
        ZT_TRY(zt_train_forward(t, &b, true));
        ZT_TRY(zt_pipe_send_act(&t->pipe, t->acts[model->n_units - 1], mb));
        if (!zt_pipe_has_loss(&t->pipe))
            continue;
        int64_t rows = mb * zt_train_rows_per_sample(t, &b);
        zt_dtype dt;
        const void *logits = zt_train_logits(t, mb, &dt);
        acc[0] += be->xent_forward_backward(be, dt, logits, t->labels, rows, model->n_classes,
                                            model->logits_ld, model->ignore_index, 1.0f, NULL);
        for (int64_t r = 0; r < rows; r++)
            acc[1] += t->labels_host[r] != model->ignore_index;
        if (!classify)
            continue;
        zt_train_logits_d2h(t, t->logits_host, model->logits_ld, logits, dt, rows,
                            model->logits_ld, model->logits_ld);
        for (int64_t r = 0; r < rows; r++) {
            const float *row = t->logits_host + r * model->logits_ld;
            int64_t best = 0;
            for (int64_t c = 1; c < model->n_classes; c++)
                if (row[c] > row[best])
                    best = c;
            acc[2] += t->labels_host[r] == best;
        }
    }
    ZT_TRY(t->policy->flush(&t->stage));
    ZT_TRY(zt_train_sum_f64(t->comm, t->world->comm, acc, 3, "the evaluation sums"));
    *loss = acc[1] > 0 ? acc[0] / acc[1] : NAN;
    *accuracy = classify && acc[1] > 0 ? acc[2] / acc[1] : NAN;
    return ZT_OK;
}

zt_status zt_trainer_eval_logits(zt_trainer *t, const zt_dataset *ds, int64_t n, float *out)
{
    const zt_model *model = t->model;
    if (t->world->size != 1)
        return zt_fail(ZT_ERR_USAGE, "run it without mpirun, or with -np 1",
                       "the logits dump is written by a world of one rank (this one has %d)",
                       t->world->size);
    int64_t mb = t->cfg->micro_batch_size;
    int64_t per_sample = (model->labels_per_token ? model->seq_len : 1) * model->n_classes;
    infer_use_slot0(t);
    for (int64_t first = 0; first < n; first += mb) {
        int64_t k_max = n - first < mb ? n - first : mb;
        for (int64_t k = 0; k < mb; k++) {
            t->index_host[k] = k < k_max ? first + k : -1;
            t->row_keys_host[k] = (uint64_t)(first + k);
        }
        zt_batch b;
        zt_train_load(t, ds, mb, &b);
        if (model->labels_per_token && b.t != model->seq_len)
            return zt_fail(ZT_ERR_USAGE, "", "sample %lld holds %lld tokens, not %lld",
                           (long long)first, (long long)b.t, (long long)model->seq_len);
        ZT_TRY(zt_train_forward(t, &b, true));
        zt_dtype dt;
        const void *logits = zt_train_logits(t, mb, &dt);
        /* Padded logits rows (model->logits_ld) are dumped without their padding. */
        zt_train_logits_d2h(t, out + first * per_sample, model->n_classes, logits, dt,
                            k_max * per_sample / model->n_classes, model->n_classes,
                            model->logits_ld);
    }
    return t->policy->flush(&t->stage);
}

zt_status zt_trainer_generate(zt_trainer *t, int32_t start, int64_t n_new, uint64_t seed,
                              int32_t *out)
{
    return zt_trainer_generate_from(t, &start, 1, n_new, 1.0, seed, out);
}

/* The token drawn from logits (V) at temperature temp with uniform u. */
static int64_t infer_pick(const float *logits, int64_t V, double temp, double u)
{
    int64_t best = 0;
    for (int64_t c = 1; c < V; c++)
        if (logits[c] > logits[best])
            best = c;
    if (temp == 0.0)
        return best;
    double mx = logits[best], sum = 0.0;
    for (int64_t c = 0; c < V; c++)
        sum += exp(((double)logits[c] - mx) / temp);
    double target = u * sum, cum = 0.0;
    for (int64_t c = 0; c < V; c++) {
        cum += exp(((double)logits[c] - mx) / temp);
        if (target < cum)
            return c;
    }
    return V - 1;
}

zt_status zt_trainer_generate_from(zt_trainer *t, const int32_t *prompt, int64_t n_prompt,
                                   int64_t n_new, double temperature, uint64_t seed,
                                   int32_t *out)
{
    const zt_model *model = t->model;
    const zt_backend *be = t->be;
    int64_t T = model->seq_len, V = model->n_classes;
    /* A vocabulary padded past the tokenizer's (--vocab-size) has logits no
     * token id stands behind: they are never drawn. */
    int64_t valid = t->data->vocab_size > 0 && t->data->vocab_size < V ? t->data->vocab_size : V;
    if (!model->labels_per_token)
        return zt_fail(ZT_ERR_USAGE, "sampling needs a language model (--model gptlite)",
                       "model %s does not generate text", model->name);
    if (n_prompt < 1)
        return zt_fail(ZT_ERR_USAGE, "give at least one prompt token", "empty prompt");
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    infer_use_slot0(t);
    for (int64_t i = 0; i < n_new; i++) {
        int64_t len = n_prompt + i, ctx = len < T ? len : T;
        be->copy_h2d(be, t->tokens, out + len - ctx, (size_t)ctx * sizeof(int32_t));
        /* Dropout is off: the row keys are never read. */
        zt_batch b = {.n = 1, .t = ctx, .tokens = t->tokens, .row_keys = t->row_keys,
                      .seed = t->seed, .step = t->global_steps, .dt = zt_train_unit_dtype(t)};
        ZT_TRY(zt_pipe_recv_act(&t->pipe, 1));
        ZT_TRY(zt_train_forward(t, &b, true));
        ZT_TRY(zt_pipe_send_act(&t->pipe, t->acts[model->n_units - 1], 1));
        if (zt_pipe_has_loss(&t->pipe)) {
            zt_dtype dt;
            const void *logits = zt_train_logits(t, 1, &dt);
            zt_train_logits_d2h(t, t->logits_host, V, zt_dtype_at(logits, dt, (ctx - 1) * model->logits_ld),
                                dt, 1, V, model->logits_ld);
            double u = (double)zt_rng_uniform(seed, ZT_RNG_STREAM_SAMPLE, (uint64_t)i);
            out[len] = (int32_t)infer_pick(t->logits_host, valid, temperature, u);
        }
        ZT_TRY(zt_pipe_bcast_last(&t->pipe, &out[len], (int)sizeof out[len]));
    }
    ZT_TRY(t->policy->flush(&t->stage));
    return ZT_OK;
}
