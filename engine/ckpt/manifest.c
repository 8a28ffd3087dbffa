/*
 * manifest: zt_manifest.json, built at a save and read at a resume (ckpt.h and
 * docs/checkpoints.md describe its content). The only file of engine/ckpt that
 * sees jansson: the rest asks the functions below, which know every key. A
 * zt_ckpt holds the parsed tree behind its opaque `manifest` until
 * zt_ckpt_close; values the open checks (layout, files) are copied into the
 * zt_ckpt's fields, the others are read when asked for, so a damaged value
 * fails only the use that needs it.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dtype.h"

struct zt_ckpt_manifest {
    json_t *root;
};

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
    ckpt_put(root, "format_version", json_integer(ZT_CKPT_FORMAT_VERSION), &bad);
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
    *out = bad ? NULL : json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!*out)
        return zt_fail(ZT_ERR_OOM, "", "cannot build the checkpoint manifest");
    return ZT_OK;
}

/* ---- Reading: values at dotted paths. ---- */

static json_t *ckpt_root(const zt_ckpt *c) { return c->manifest ? c->manifest->root : NULL; }

/* The value at a dotted path below `base`, or NULL. */
static json_t *ckpt_at(json_t *base, const char *path)
{
    char key[128];
    json_t *v = base;
    for (const char *p = path; v && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        v = json_is_object(v) ? json_object_get(v, key) : NULL;
        p += n + (dot ? 1 : 0);
    }
    return v;
}

zt_status zt_ckpt_missing(const zt_ckpt *c, const char *where, const char *key,
                          const char *what)
{
    return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                   "checkpoint manifest %s: \"%s%s\" is missing or not %s", c->path, where, key,
                   what);
}

static zt_status ckpt_int(const zt_ckpt *c, json_t *base, const char *where, const char *key,
                          int64_t min, int64_t *out)
{
    json_t *v = ckpt_at(base, key);
    if (!json_is_integer(v) || json_integer_value(v) < min) {
        char what[64];
        snprintf(what, sizeof what, "an integer >= %lld", (long long)min);
        return zt_ckpt_missing(c, where, key, what);
    }
    *out = json_integer_value(v);
    return ZT_OK;
}

static zt_status ckpt_real_at(const zt_ckpt *c, const char *key, double *out)
{
    json_t *v = ckpt_at(ckpt_root(c), key);
    if (!json_is_number(v))
        return zt_ckpt_missing(c, "", key, "a number");
    *out = json_number_value(v);
    return ZT_OK;
}

static const char *ckpt_str(const zt_ckpt *c, const char *key)
{
    json_t *v = ckpt_at(ckpt_root(c), key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- Opening: the layout and the files, checked once. ---- */

/* The fields every use needs, with the layout checked for consistency (so
 * later offsets cannot leave the files). */
static zt_status ckpt_parse(zt_ckpt *c)
{
    json_t *root = ckpt_root(c);
    int64_t v;
    const char *fmt = ckpt_str(c, "format");
    if (!fmt || strcmp(fmt, "zerotrain-checkpoint") != 0)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "%s is not a zerotrain checkpoint manifest (\"format\" is not "
                       "\"zerotrain-checkpoint\")",
                       c->path);
    ZT_TRY(ckpt_int(c, root, "", "format_version", 1, &v));
    if (v != ZT_CKPT_FORMAT_VERSION)
        return zt_fail(ZT_ERR_DATA, "use the zerotrain version that wrote it",
                       "checkpoint manifest %s has format version %lld; this zerotrain reads %d",
                       c->path, (long long)v, ZT_CKPT_FORMAT_VERSION);
    const char *tag = ckpt_str(c, "tag");
    if (!tag || strcmp(tag, c->tag) != 0)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s names tag \"%s\", not its directory's \"%s\"",
                       c->path, tag ? tag : "(none)", c->tag);
    ZT_TRY(ckpt_int(c, root, "", "world_size", 1, &v));
    c->world_size = (int)v;
    ZT_TRY(ckpt_int(c, root, "", "zero_stage", 0, &v));
    c->stage = (int)v;
    ZT_TRY(ckpt_int(c, root, "", "layout.partition_count", 1, &v));
    if (v > (1 << 20))
        return zt_ckpt_missing(c, "", "layout.partition_count", "at most 2^20");
    c->partition_count = (int)v;
    ZT_TRY(ckpt_int(c, root, "", "layout.partition_numel", 0, &c->partition_numel));
    ZT_TRY(ckpt_int(c, root, "", "training.global_steps", 0, &c->global_steps));
    json_t *sections = ckpt_at(root, "optimizer.state_sections");
    if (!json_is_array(sections) || json_array_size(sections) > ZT_TRAINER_MAX_STATES)
        return zt_ckpt_missing(c, "", "optimizer.state_sections", "an array of at most 2 names");
    c->n_sections = 1 + (int)json_array_size(sections);

    json_t *units = ckpt_at(root, "layout.units");
    json_t *munits = ckpt_at(root, "model.units");
    if (!json_is_array(units) || json_array_size(units) == 0 || json_array_size(units) > 1u << 20 ||
        !json_is_array(munits) || json_array_size(munits) != json_array_size(units))
        return zt_ckpt_missing(c, "", "layout.units", "an array as long as model.units");
    c->n_units = (int)json_array_size(units);
    c->units = calloc((size_t)c->n_units, sizeof *c->units);
    c->file_bytes = calloc((size_t)c->partition_count, sizeof *c->file_bytes);
    c->file_crc = calloc((size_t)c->partition_count, sizeof *c->file_crc);
    if (!c->units || !c->file_bytes || !c->file_crc)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the checkpoint tables");
    int64_t part = 0;
    for (int u = 0; u < c->n_units; u++) {
        char where[64];
        snprintf(where, sizeof where, "layout.units[%d].", u);
        json_t *ju = json_array_get(units, (size_t)u);
        zt_ckpt_unit *cu = &c->units[u];
        ZT_TRY(ckpt_int(c, ju, where, "numel", 0, &cu->numel));
        ZT_TRY(ckpt_int(c, ju, where, "padded_numel", 1, &cu->padded_numel));
        ZT_TRY(ckpt_int(c, ju, where, "shard_numel", 1, &cu->shard_numel));
        ZT_TRY(ckpt_int(c, ju, where, "part_offset", 0, &cu->part_offset));
        if (cu->shard_numel > INT64_MAX / c->partition_count ||
            cu->padded_numel != cu->shard_numel * c->partition_count ||
            cu->numel > cu->padded_numel || cu->part_offset != part ||
            __builtin_add_overflow(part, cu->shard_numel, &part))
            return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                           "checkpoint manifest %s: layout.units[%d] is inconsistent (numel "
                           "%lld, padded %lld, shard %lld at %lld for %d partitions)",
                           c->path, u, (long long)cu->numel, (long long)cu->padded_numel,
                           (long long)cu->shard_numel, (long long)cu->part_offset,
                           c->partition_count);
    }
    if (part != c->partition_numel)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s: the unit shards add up to %lld elements, "
                       "layout.partition_numel says %lld",
                       c->path, (long long)part, (long long)c->partition_numel);

    json_t *files = ckpt_at(root, "files");
    if (!json_is_array(files) || json_array_size(files) != (size_t)c->partition_count)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s: \"files\" should list %d shards", c->path,
                       c->partition_count);
    for (int r = 0; r < c->partition_count; r++) {
        char where[64], name[96];
        snprintf(where, sizeof where, "files[%d].", r);
        json_t *jf = json_array_get(files, (size_t)r);
        zt_ckpt_shard_name(name, sizeof name, r);
        json_t *jn = json_object_get(jf, "name"), *jc = json_object_get(jf, "crc32");
        if (!json_is_string(jn) || strcmp(json_string_value(jn), name) != 0)
            return zt_ckpt_missing(c, where, "name", name);
        ZT_TRY(ckpt_int(c, jf, where, "bytes", 0, &v));
        c->file_bytes[r] = (uint64_t)v;
        char *end = NULL;
        const char *hex = json_is_string(jc) ? json_string_value(jc) : "";
        unsigned long crc = strtoul(hex, &end, 16);
        if (strlen(hex) != 8 || *end != '\0')
            return zt_ckpt_missing(c, where, "crc32", "8 hex digits");
        c->file_crc[r] = (uint32_t)crc;
    }
    return ZT_OK;
}

zt_status zt_ckpt_manifest_parse(zt_ckpt *c, const char *text, size_t len)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    if (!root)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint manifest %s is not valid JSON: line %d: %s", c->path,
                       err.line, err.text);
    c->manifest = malloc(sizeof *c->manifest);
    if (!c->manifest) {
        json_decref(root);
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the checkpoint tables");
    }
    c->manifest->root = root;
    return ckpt_parse(c);
}

void zt_ckpt_manifest_free(zt_ckpt *c)
{
    if (c->manifest)
        json_decref(c->manifest->root);
    free(c->manifest);
    c->manifest = NULL;
}

/* ---- Values read when asked for. ---- */

/* The registry sets arguments through a double: larger integers would not
 * come back (and converting them back to int64_t is undefined). */
#define CKPT_ARG_INT_MAX ((int64_t)1 << 53)

/* The inverse of ckpt_model_json, row by row. */
zt_status zt_ckpt_model_args(const zt_ckpt *c, zt_model_args *out)
{
    zt_model_args_init(out);
    const char *name = ckpt_str(c, "model.name");
    if (!name || strlen(name) >= sizeof out->name)
        return zt_ckpt_missing(c, "", "model.name", "a model name");
    snprintf(out->name, sizeof out->name, "%s", name);
    int i = 0;
    for (const zt_model_arg *r; (r = zt_ckpt_arg_next(out->name, &i));) {
        char key[64];
        snprintf(key, sizeof key, "model.%s", r->key);
        if (r->kind == ZT_MODEL_ARG_INT) {
            int64_t v = 0;
            ZT_TRY(ckpt_int(c, ckpt_root(c), "", key, 1, &v));
            if (v > CKPT_ARG_INT_MAX)
                return zt_ckpt_missing(c, "", key, "an integer <= 2^53");
            zt_model_arg_set(r, out, (double)v);
        } else if (r->kind == ZT_MODEL_ARG_REAL) {
            double v = 0.0;
            ZT_TRY(ckpt_real_at(c, key, &v));
            zt_model_arg_set(r, out, v);
        } else {
            const char *v = ckpt_str(c, key);
            if (!v || (strcmp(v, r->choices[0]) && strcmp(v, r->choices[1]))) {
                char what[64];
                snprintf(what, sizeof what, "\"%s\" or \"%s\"", r->choices[0], r->choices[1]);
                return zt_ckpt_missing(c, "", key, what);
            }
            zt_model_arg_set(r, out, !strcmp(v, r->choices[1]));
        }
    }
    return ZT_OK;
}

uint64_t zt_ckpt_seed(const zt_ckpt *c)
{
    json_t *v = ckpt_at(ckpt_root(c), "training.seed");
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

int64_t zt_ckpt_micro_batch_size(const zt_ckpt *c)
{
    json_t *v = ckpt_at(ckpt_root(c), "training.train_micro_batch_size_per_gpu");
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

const char *zt_ckpt_tokenizer_kind(const zt_ckpt *c, const char **dir)
{
    const char *kind = ckpt_str(c, "tokenizer.kind");
    if (dir)
        *dir = ckpt_str(c, "tokenizer.dir");
    return kind ? kind : "";
}

const char *zt_ckpt_manifest_model_name(const zt_ckpt *c) { return ckpt_str(c, "model.name"); }

int64_t zt_ckpt_manifest_n_params(const zt_ckpt *c)
{
    json_t *v = ckpt_at(ckpt_root(c), "model.n_params");
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

const char *zt_ckpt_manifest_optimizer(const zt_ckpt *c) { return ckpt_str(c, "optimizer.type"); }

bool zt_ckpt_manifest_sections_are(const zt_ckpt *c, const char *const *names, int n)
{
    json_t *theirs = ckpt_at(ckpt_root(c), "optimizer.state_sections");
    bool same = (int)json_array_size(theirs) == n;
    for (int k = 0; same && k < n; k++) {
        json_t *v = json_array_get(theirs, (size_t)k);
        same = json_is_string(v) && !strcmp(json_string_value(v), names[k]);
    }
    return same;
}

zt_status zt_ckpt_manifest_train_batch(const zt_ckpt *c, int64_t *out)
{
    return ckpt_int(c, ckpt_root(c), "", "training.train_batch_size", 1, out);
}

zt_status zt_ckpt_manifest_n_samples(const zt_ckpt *c, int64_t *out)
{
    return ckpt_int(c, ckpt_root(c), "", "sampler.n_samples", 1, out);
}

int64_t zt_ckpt_manifest_vocab_size(const zt_ckpt *c)
{
    json_t *v = ckpt_at(ckpt_root(c), "tokenizer.vocab_size");
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

zt_status zt_ckpt_manifest_vocabulary(const zt_ckpt *c, const char **text, size_t *len)
{
    json_t *v = ckpt_at(ckpt_root(c), "tokenizer.vocabulary");
    if (!json_is_string(v))
        return zt_ckpt_missing(c, "", "tokenizer.vocabulary", "a string");
    *text = json_string_value(v);
    *len = json_string_length(v);
    return ZT_OK;
}

void zt_ckpt_state_free(zt_ckpt_state *s)
{
    free(s->loss);
    free(s->loss_scale);
    s->loss = s->loss_scale = NULL;
}

static zt_status ckpt_history(const zt_ckpt *c, const char *key, int64_t n, double **out)
{
    json_t *a = ckpt_at(ckpt_root(c), key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)n) {
        char what[64];
        snprintf(what, sizeof what, "an array of %lld numbers", (long long)n);
        return zt_ckpt_missing(c, "", key, what);
    }
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
    json_t *root = ckpt_root(c);
    memset(s, 0, sizeof *s);
    s->global_steps = c->global_steps;
    ZT_TRY(ckpt_int(c, root, "", "training.skipped_steps", 0, &s->skipped_steps));
    ZT_TRY(ckpt_int(c, root, "", "training.global_samples", 0, &s->global_samples));
    ZT_TRY(ckpt_int(c, root, "", "optimizer.step", 0, &s->optim_steps));
    ZT_TRY(ckpt_int(c, root, "", "scheduler.last_batch_iteration", -1,
                    &s->sched.last_batch_iteration));
    s->scaler.dynamic = json_is_true(ckpt_at(root, "loss_scaler.dynamic"));
    ZT_TRY(ckpt_real_at(c, "loss_scaler.cur_scale", &s->scaler.cur_scale));
    ZT_TRY(ckpt_int(c, root, "", "loss_scaler.cur_iter", 0, &s->scaler.cur_iter));
    ZT_TRY(ckpt_int(c, root, "", "loss_scaler.last_overflow_iter", -1,
                    &s->scaler.last_overflow_iter));
    ZT_TRY(ckpt_int(c, root, "", "loss_scaler.cur_hysteresis", 0,
                    &s->scaler.cur_hysteresis));
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
    json_t *units = ckpt_at(ckpt_root(c), "model.units"), *index = json_array();
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

