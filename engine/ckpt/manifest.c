/*
 * manifest: zt_manifest.json, built at a save and read at a resume (ckpt.h and
 * docs/checkpoints.md describe its content). With manifest_check.c the only
 * files of engine/ckpt that read it through jansson: the rest asks the
 * functions below. A zt_ckpt holds the parsed tree and what the open checked
 * of it (manifest_check.c: the checksum and every value) until zt_ckpt_close,
 * so the readers here find every value present and in range.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dtype.h"

/* ---- Writing. ---- */

/* json_object_set_new that counts failures (a NULL value included). */
static void ckpt_put(json_t *o, const char *key, json_t *v, int *bad)
{
    if (!o || json_object_set_new(o, key, v) != 0)
        (*bad)++;
}

static void ckpt_append(json_t *a, json_t *v, int *bad)
{
    if (!a || json_array_append_new(a, v) != 0)
        (*bad)++;
}

/* A double that may be inf or nan (a diverged loss): null in JSON. */
static json_t *ckpt_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* INT rows as integers, REAL rows as reals, CHOICE rows as the choice's text. */
static json_t *ckpt_arg_json(const zt_model_arg *r, const zt_model_args *a)
{
    switch (r->kind) {
    case ZT_MODEL_ARG_INT: return json_integer((json_int_t)zt_model_arg_value(r, a));
    case ZT_MODEL_ARG_REAL: return json_real(zt_model_arg_value(r, a));
    case ZT_MODEL_ARG_CHOICE: return json_string(zt_model_arg_choice(r, a));
    }
    return NULL;
}

static json_t *ckpt_model_json(const zt_model *m, const zt_model_args *a, int *bad)
{
    json_t *o = json_object();
    ckpt_put(o, "name", json_string(m->name), bad);
    int i = 0;
    for (const zt_model_arg *r; (r = zt_ckpt_arg_next(a->name, &i));)
        ckpt_put(o, r->key, ckpt_arg_json(r, a), bad);
    ckpt_put(o, "n_params", json_integer(m->n_params), bad);
    json_t *units = json_array();
    for (int u = 0; u < m->n_units; u++) {
        const zt_unit *un = &m->units[u];
        json_t *ju = json_object(), *tensors = json_array();
        ckpt_put(ju, "name", json_string(un->name), bad);
        ckpt_put(ju, "numel", json_integer(un->param_numel), bad);
        for (int p = 0; p < un->n_params; p++) {
            json_t *jt = json_object(), *shape = json_array();
            ckpt_put(jt, "name", json_string(un->params[p].name), bad);
            for (int d = 0; d < un->params[p].ndim; d++)
                ckpt_append(shape, json_integer(un->params[p].shape[d]), bad);
            ckpt_put(jt, "shape", shape, bad);
            ckpt_append(tensors, jt, bad);
        }
        ckpt_put(ju, "tensors", tensors, bad);
        ckpt_append(units, ju, bad);
    }
    ckpt_put(o, "units", units, bad);
    return o;
}

static json_t *ckpt_layout_json(const zt_layout *lay, int *bad)
{
    json_t *o = json_object(), *units = json_array();
    ckpt_put(o, "partition_count", json_integer(lay->world_size), bad);
    ckpt_put(o, "align", json_integer(ZT_ZERO_ALIGN), bad);
    ckpt_put(o, "partition_numel", json_integer(lay->partition_numel), bad);
    for (int u = 0; u < lay->n_units; u++) {
        const zt_unit_layout *ul = &lay->units[u];
        json_t *ju = json_object();
        ckpt_put(ju, "numel", json_integer(ul->numel), bad);
        ckpt_put(ju, "padded_numel", json_integer(ul->padded_numel), bad);
        ckpt_put(ju, "shard_numel", json_integer(ul->shard_numel), bad);
        ckpt_put(ju, "part_offset", json_integer(ul->part_offset), bad);
        ckpt_append(units, ju, bad);
    }
    ckpt_put(o, "units", units, bad);
    return o;
}

/* For the reader only: the shards hold the whole model whatever the stages. */
static json_t *ckpt_pipeline_json(const zt_pipe *p, int *bad)
{
    json_t *o = json_object(), *bounds = json_array();
    for (int s = 0; s <= p->stages; s++)
        ckpt_append(bounds, json_integer(p->bounds[s]), bad);
    ckpt_put(o, "stages", json_integer(p->stages), bad);
    ckpt_put(o, "data_parallel_size", json_integer(p->dp_size), bad);
    ckpt_put(o, "partition_method", json_string(p->partition), bad);
    ckpt_put(o, "schedule", json_string(zt_pipe_schedule_name(p->schedule)), bad);
    ckpt_put(o, "stage_first_units", bounds, bad);
    return o;
}

static json_t *ckpt_optimizer_json(const zt_ckpt_src *t, int *bad)
{
    const zt_optim_config *oc = &t->s.cfg->optimizer;
    json_t *o = json_object(), *names = json_array();
    const char *nm[2];
    int n = zt_ckpt_state_names(oc, nm);
    for (int k = 0; k < n; k++)
        ckpt_append(names, json_string(nm[k]), bad);
    ckpt_put(o, "type", json_string(zt_optim_type_name(oc->type)), bad);
    ckpt_put(o, "state_sections", names, bad);
    ckpt_put(o, "step", json_integer(t->c.optim_steps), bad);
    ckpt_put(o, "lr", json_real(oc->lr), bad);
    if (oc->type == ZT_OPTIM_SGD) {
        ckpt_put(o, "momentum", json_real(oc->momentum), bad);
    } else {
        ckpt_put(o, "betas", json_pack("[ff]", oc->beta1, oc->beta2), bad);
        ckpt_put(o, "eps", json_real(oc->eps), bad);
    }
    ckpt_put(o, "weight_decay", json_real(oc->weight_decay), bad);
    return o;
}

static json_t *ckpt_scaler_json(const zt_scaler_state *s, int *bad)
{
    json_t *o = json_object();
    ckpt_put(o, "dynamic", json_boolean(s->dynamic), bad);
    ckpt_put(o, "cur_scale", json_real(s->cur_scale), bad);
    ckpt_put(o, "cur_iter", json_integer(s->cur_iter), bad);
    ckpt_put(o, "last_overflow_iter", json_integer(s->last_overflow_iter), bad);
    ckpt_put(o, "cur_hysteresis", json_integer(s->cur_hysteresis), bad);
    ckpt_put(o, "hysteresis", json_integer(s->hysteresis), bad);
    ckpt_put(o, "loss_scale_window", json_integer(s->loss_scale_window), bad);
    ckpt_put(o, "min_loss_scale", json_real(s->min_loss_scale), bad);
    ckpt_put(o, "consecutive_hysteresis", json_boolean(s->consecutive_hysteresis), bad);
    return o;
}

static json_t *ckpt_training_json(const zt_ckpt_src *t, int *bad)
{
    const zt_config *cfg = t->s.cfg;
    json_t *o = json_object();
    ckpt_put(o, "global_steps", json_integer(t->c.global_steps), bad);
    ckpt_put(o, "skipped_steps", json_integer(t->c.skipped_steps), bad);
    ckpt_put(o, "global_samples", json_integer(t->c.global_samples), bad);
    ckpt_put(o, "micro_steps", json_integer(t->c.global_steps * cfg->gradient_accumulation_steps),
             bad);
    ckpt_put(o, "seed", json_integer((json_int_t)t->seed), bad);
    ckpt_put(o, "train_batch_size", json_integer(cfg->train_batch_size), bad);
    ckpt_put(o, "train_micro_batch_size_per_gpu", json_integer(cfg->micro_batch_size), bad);
    ckpt_put(o, "gradient_accumulation_steps", json_integer(cfg->gradient_accumulation_steps),
             bad);
    ckpt_put(o, "gradient_clipping", json_real(cfg->gradient_clipping), bad);
    return o;
}

static json_t *ckpt_sampler_json(const zt_sampler_state *s, int *bad)
{
    json_t *o = json_object();
    ckpt_put(o, "n_samples", json_integer(s->n_samples), bad);
    ckpt_put(o, "steps_per_epoch", json_integer(s->steps_per_epoch), bad);
    ckpt_put(o, "epoch", json_integer(s->epoch), bad);
    ckpt_put(o, "position", json_integer(s->position), bad);
    ckpt_put(o, "shuffle", json_boolean(s->shuffle), bad);
    return o;
}

static zt_status ckpt_tokenizer_json(const zt_ckpt_meta *meta, int *bad, json_t **out)
{
    static const char *kinds[] = {"char", "byte", "bpe"};
    const zt_tokenizer *tok = meta->tok;
    json_t *o = json_object();
    ckpt_put(o, "kind", json_string(kinds[tok->kind]), bad);
    ckpt_put(o, "vocab_size", json_integer(tok->vocab_size), bad);
    if (tok->kind == ZT_TOK_BPE && meta->tokenizer_dir) {
        char *abs = realpath(meta->tokenizer_dir, NULL);
        ckpt_put(o, "dir", json_string(abs ? abs : meta->tokenizer_dir), bad);
        free(abs);
    }
    if (tok->kind == ZT_TOK_CHAR) {
        /* The vocabulary is its sorted code points: decoding every id gives a
         * text whose char tokenizer is this one. */
        int32_t *ids = malloc((size_t)tok->vocab_size * sizeof *ids);
        if (!ids) {
            json_decref(o);
            return zt_fail(ZT_ERR_OOM, "", "cannot list the vocabulary");
        }
        for (int64_t i = 0; i < tok->vocab_size; i++)
            ids[i] = (int32_t)i;
        char *text = NULL;
        size_t len = 0;
        zt_status st = zt_tokenizer_decode(tok, ids, tok->vocab_size, &text, &len);
        free(ids);
        if (st != ZT_OK) {
            json_decref(o);
            return st;
        }
        ckpt_put(o, "vocabulary", json_stringn(text, len), bad);
        free(text);
    }
    *out = o;
    return ZT_OK;
}

static json_t *ckpt_history_json(const zt_ckpt_src *t, int *bad)
{
    json_t *o = json_object(), *loss = json_array(), *scale = json_array();
    for (int64_t i = 0; i < t->c.global_steps; i++) {
        ckpt_append(loss, ckpt_real(t->s.loss_history[i]), bad);
        ckpt_append(scale, ckpt_real(t->s.scale_history[i]), bad);
    }
    ckpt_put(o, "loss", loss, bad);
    ckpt_put(o, "loss_scale", scale, bad);
    return o;
}

zt_status zt_ckpt_manifest_text(const zt_ckpt_src *t, const zt_ckpt_meta *meta,
                                const char *tag, const uint64_t *bytes, const uint32_t *crc,
                                char **out)
{
    const zt_config *cfg = t->s.cfg;
    const zt_layout *lay = t->s.layout;
    int bad = 0;
    json_t *root = json_object();
    ckpt_put(root, "format", json_string("zerotrain-checkpoint"), &bad);
    ckpt_put(root, "format_version", json_integer(ZT_CKPT_MANIFEST_VERSION), &bad);
    ckpt_put(root, "zerotrain_version", json_string(ZT_VERSION), &bad);
    ckpt_put(root, "tag", json_string(tag), &bad);
    ckpt_put(root, "model", ckpt_model_json(t->s.model, &meta->model, &bad), &bad);
    ckpt_put(root, "world_size", json_integer(t->s.world->size), &bad);
    ckpt_put(root, "zero_stage", json_integer(cfg->zero.stage), &bad);
    ckpt_put(root, "pipeline", ckpt_pipeline_json(t->s.pipe, &bad), &bad);
    ckpt_put(root, "layout", ckpt_layout_json(lay, &bad), &bad);
    ckpt_put(root, "dtype",
             json_pack("{ssssssssssss}", "params", zt_dtype_name(t->s.compute_dtype), "master",
                       "fp32", "optimizer_states", "fp32", "gradients",
                       zt_dtype_name(t->s.grad_dtype), "communication",
                       zt_dtype_name(t->s.comm_dtype), "shards", "fp32"),
             &bad);
    ckpt_put(root, "offload",
             json_pack("{ssss}", "optimizer",
                       t->s.nvme_optimizer ? "nvme" : t->s.offload_optimizer ? "cpu" : "none",
                       "param", t->s.nvme_param ? "nvme" : t->s.offload_param ? "cpu" : "none"),
             &bad);
    ckpt_put(root, "optimizer", ckpt_optimizer_json(t, &bad), &bad);
    ckpt_put(root, "scheduler",
             json_pack("{sssIsf}", "type", zt_sched_type_name(cfg->scheduler.type),
                       "last_batch_iteration", (json_int_t)t->sched.last_batch_iteration,
                       "base_lr", t->sched.base_lr),
             &bad);
    ckpt_put(root, "loss_scaler", ckpt_scaler_json(&t->scaler, &bad), &bad);
    ckpt_put(root, "training", ckpt_training_json(t, &bad), &bad);
    ckpt_put(root, "sampler", ckpt_sampler_json(&t->sampler, &bad), &bad);
    ckpt_put(root, "rng",
             json_pack("{sIss}", "seed", (json_int_t)t->seed, "note",
                       "counter-based: every draw is keyed by (seed, stream, index), no state"),
             &bad);
    if (meta->data_path) {
        char *abs = realpath(meta->data_path, NULL);
        ckpt_put(root, "data", json_pack("{ss}", "path", abs ? abs : meta->data_path), &bad);
        free(abs);
    }
    if (meta->tok) {
        json_t *tok = NULL;
        zt_status st = ckpt_tokenizer_json(meta, &bad, &tok);
        if (st != ZT_OK) {
            json_decref(root);
            return st;
        }
        ckpt_put(root, "tokenizer", tok, &bad);
    }
    json_t *files = json_array();
    for (int r = 0; r < lay->world_size; r++) {
        char name[96], hex[16];
        zt_ckpt_shard_name(name, sizeof name, r);
        snprintf(hex, sizeof hex, "%08x", crc[r]);
        ckpt_append(files,
                    json_pack("{sssisIss}", "name", name, "rank", r, "bytes",
                              (json_int_t)bytes[r], "crc32", hex),
                    &bad);
    }
    ckpt_put(root, "files", files, &bad);
    ckpt_put(root, "history", ckpt_history_json(t, &bad), &bad);
    /* Last, over everything above: the reader recomputes it from the parsed
     * values, which json_dumps writes back exactly (reals with 17 digits). */
    uint32_t sum = 0;
    zt_status st = bad ? ZT_OK : zt_ckpt_manifest_crc(root, &sum);
    if (st != ZT_OK) {
        json_decref(root);
        return st;
    }
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", sum);
    ckpt_put(root, ZT_CKPT_MANIFEST_CRC_KEY, json_string(hex), &bad);
    *out = bad ? NULL : json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot build the checkpoint manifest");
    return ZT_OK;
}

/* ---- Reading (the values were checked by zt_ckpt_manifest_check). ---- */

static json_t *ckpt_root(const zt_ckpt *c) { return c->manifest ? c->manifest->root : NULL; }

zt_status zt_ckpt_manifest_parse(zt_ckpt *c, const char *text, size_t len)
{
    json_error_t err;
    /* A key given twice would let a reader see a value the checksum's other
     * readers do not. */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is not valid JSON: line %d: %s", c->path,
                       err.line, err.text);
    c->manifest = calloc(1, sizeof *c->manifest);
    if (!c->manifest) {
        json_decref(root);
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the checkpoint tables");
    }
    c->manifest->root = root;
    return zt_ckpt_manifest_check(c);
}

void zt_ckpt_manifest_free(zt_ckpt *c)
{
    if (c->manifest)
        json_decref(c->manifest->root);
    free(c->manifest);
    c->manifest = NULL;
}

zt_status zt_ckpt_model_args(const zt_ckpt *c, zt_model_args *out)
{
    *out = c->manifest->args;
    return ZT_OK;
}

uint64_t zt_ckpt_seed(const zt_ckpt *c) { return c->manifest->seed; }

int64_t zt_ckpt_micro_batch_size(const zt_ckpt *c) { return c->manifest->micro_batch; }

const char *zt_ckpt_tokenizer_kind(const zt_ckpt *c, const char **dir)
{
    if (dir)
        *dir = c->manifest->tok_dir;
    return c->manifest->tok_kind;
}

const char *zt_ckpt_manifest_optimizer(const zt_ckpt *c) { return c->manifest->optimizer; }

bool zt_ckpt_manifest_sections_are(const zt_ckpt *c, const char *const *names, int n)
{
    json_t *theirs = zt_ckpt_json_at(ckpt_root(c), "optimizer.state_sections");
    bool same = (int)json_array_size(theirs) == n;
    for (int k = 0; same && k < n; k++) {
        json_t *v = json_array_get(theirs, (size_t)k);
        same = json_is_string(v) && !strcmp(json_string_value(v), names[k]);
    }
    return same;
}

int64_t zt_ckpt_manifest_vocab_size(const zt_ckpt *c) { return c->manifest->tok_vocab_size; }

zt_status zt_ckpt_manifest_vocabulary(const zt_ckpt *c, const char **text, size_t *len)
{
    if (!c->manifest->vocab)
        return zt_ckpt_missing(c, "", "tokenizer.vocabulary", "a string");
    *text = c->manifest->vocab;
    *len = c->manifest->vocab_len;
    return ZT_OK;
}

void zt_ckpt_state_free(zt_ckpt_state *s)
{
    free(s->loss);
    free(s->loss_scale);
    s->loss = s->loss_scale = NULL;
}

/* A history of n entries (checked: numbers, or null for a loss that was not
 * finite). */
static zt_status ckpt_history(const zt_ckpt *c, const char *key, int64_t n, double **out)
{
    json_t *a = zt_ckpt_json_at(ckpt_root(c), key);
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the loss history");
    for (int64_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        (*out)[i] = json_is_number(v) ? json_number_value(v) : NAN;
    }
    return ZT_OK;
}

zt_status zt_ckpt_manifest_state(const zt_ckpt *c, zt_ckpt_state *s)
{
    *s = c->manifest->state;
    s->loss = s->loss_scale = NULL;
    ZT_TRY(ckpt_history(c, "history.loss", s->global_steps, &s->loss));
    return ckpt_history(c, "history.loss_scale", s->global_steps, &s->loss_scale);
}

/* ---- Consolidation. ---- */

/* A tensor's element count from its JSON shape; false when a dimension is
 * not a positive integer or the product overflows. */
static bool ckpt_shape_numel(json_t *shape, int64_t *numel)
{
    *numel = 1;
    if (!json_is_array(shape))
        return false;
    for (size_t d = 0; d < json_array_size(shape); d++) {
        json_t *dim = json_array_get(shape, d);
        if (!json_is_integer(dim) || json_integer_value(dim) <= 0 ||
            __builtin_mul_overflow(*numel, (int64_t)json_integer_value(dim), numel))
            return false;
    }
    return true;
}

/* FILE.json: each tensor's name, shape and place in FILE. */
zt_status zt_ckpt_manifest_tensor_index(const zt_ckpt *c, char **out)
{
    json_t *units = zt_ckpt_json_at(ckpt_root(c), "model.units"), *index = json_array();
    int bad = 0;
    int64_t offset = 0;
    for (int u = 0; !bad && u < c->n_units; u++) {
        json_t *ju = json_array_get(units, (size_t)u);
        json_t *jn = json_object_get(ju, "name"), *tensors = json_object_get(ju, "tensors");
        int64_t unit_numel = 0;
        for (size_t i = 0; !bad && json_is_string(jn) && i < json_array_size(tensors); i++) {
            json_t *jt = json_array_get(tensors, i), *shape = json_object_get(jt, "shape");
            json_t *tn = json_object_get(jt, "name");
            int64_t numel, byte_offset;
            if (!json_is_string(tn) || !ckpt_shape_numel(shape, &numel) ||
                __builtin_mul_overflow(offset, (int64_t)sizeof(float), &byte_offset)) {
                bad++;
                break;
            }
            char name[160];
            snprintf(name, sizeof name, "%s.%s", json_string_value(jn), json_string_value(tn));
            ckpt_append(index,
                        json_pack("{sssOsIsIsI}", "name", name, "shape", shape, "numel",
                                  (json_int_t)numel, "offset", (json_int_t)offset, "byte_offset",
                                  (json_int_t)byte_offset),
                        &bad);
            if (__builtin_add_overflow(offset, numel, &offset) ||
                __builtin_add_overflow(unit_numel, numel, &unit_numel))
                bad++;
        }
        if (!json_is_string(jn) || unit_numel != c->units[u].numel)
            bad++;
    }
    *out = bad ? NULL : json_dumps(index, JSON_INDENT(1));
    json_decref(index);
    if (!*out)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s: model.units does not describe the layout's "
                       "tensors",
                       c->path);
    return ZT_OK;
}

