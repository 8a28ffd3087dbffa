/*
 * restore: opening a checkpoint (rank 0 resolves the tag and reads the
 * manifest, every rank gets its bytes), the tokenizer it records, and the
 * collective resume (ckpt.h gives the order): the model and training checks,
 * shard verification, loading each rank's spans from the saved slices, and
 * the counters, schedule, loss scaler and histories a resumed run takes over.
 */
#include "engine/ckpt/ckpt_impl.h"
#include "engine/comm/comm.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/path.h"

#define CKPT_MANIFEST_MAX_BYTES ((int64_t)1 << 30)

static const char *const ckpt_hint_dir = "give the --save-dir (or --load-dir) a run saved into";

/* ---- Opening. ---- */

static bool ckpt_tag_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '.';
}

/* A tag names a directory inside DIR: no separators, nothing hidden. */
static bool ckpt_tag_ok(const char *tag, size_t n)
{
    if (n == 0 || n >= 128 || tag[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ckpt_tag_char(tag[i]))
            return false;
    return true;
}

/* DIR/latest holds what a save writes there, one tag, and at most a newline
 * after it (an editor's): anything else (a NUL and more bytes, two lines) is
 * not a pointer a save wrote, and is refused rather than cut short. */
static zt_status ckpt_latest_tag(zt_ckpt *c, const char *path, const char *text, size_t n)
{
    size_t len = n > 0 && text[n - 1] == '\n' ? n - 1 : n;
    if (ckpt_tag_ok(text, len)) {
        snprintf(c->tag, sizeof c->tag, "%.*s", (int)len, text);
        return ZT_OK;
    }
    size_t bad = 0;
    while (bad < len && ckpt_tag_char(text[bad]))
        bad++;
    char what[112];
    if (len == 0)
        snprintf(what, sizeof what, "it is empty");
    else if (bad < len && text[bad] == '\0')
        snprintf(what, sizeof what, "it holds a NUL byte at offset %zu, after \"%.*s\"", bad,
                 (int)(bad < 40 ? bad : 40), text);
    else if (bad < len)
        snprintf(what, sizeof what,
                 "byte %zu is 0x%02x, not a letter, digit, '_', '-' or '.' of a tag", bad,
                 (unsigned char)text[bad]);
    else if (text[0] == '.')
        snprintf(what, sizeof what, "its tag starts with '.'");
    else
        snprintf(what, sizeof what, "its %zu bytes are longer than a tag (127 at most)", len);
    return zt_fail(ZT_ERR_DATA,
                   "the checkpoint directory is damaged: write the tag of a checkpoint in it "
                   "into that file (printf global_step<N> > DIR/latest), or name one with "
                   "--resume TAG (--tag T)",
                   "checkpoint pointer %s is damaged: %s; it should hold one tag such as "
                   "global_step100 (a final newline aside)",
                   path, what);
}

/* Rank 0's part of zt_ckpt_open: the tag and the manifest's bytes. */
static zt_status ckpt_read_manifest(zt_ckpt *c, const char *tag, char **text, size_t *len)
{
    char path[ZT_CKPT_PATH_MAX];
    if (!tag) {
        char *latest = NULL;
        size_t n = 0;
        ZT_TRY(zt_ckpt_path(path, c->dir, "latest", NULL));
        struct stat sb;
        /* Only a missing path "does not exist": a symlink loop or a denied
         * search is named as what it is (zt_path_fail). */
        if (stat(c->dir, &sb) != 0)
            return errno == ENOENT ? zt_fail(ZT_ERR_IO, ckpt_hint_dir,
                                             "checkpoint directory %s does not exist", c->dir)
                                   : zt_path_fail(errno, c->dir, "checkpoint directory",
                                                  ckpt_hint_dir);
        if (!S_ISDIR(sb.st_mode))
            return zt_fail(ZT_ERR_IO, ckpt_hint_dir, "checkpoint directory %s is not a directory",
                           c->dir);
        if (stat(path, &sb) != 0)
            return errno == ENOENT
                       ? zt_fail(ZT_ERR_IO,
                                 "nothing was saved there yet: train with --save-dir first, or "
                                 "name a tag with --resume TAG",
                                 "no checkpoint to resume in %s: %s does not exist", c->dir, path)
                       : zt_path_fail(errno, path, "checkpoint pointer", zt_ckpt_hint_resave);
        ZT_TRY(zt_path_read(path, "checkpoint pointer", zt_ckpt_hint_resave, 4096, false, &latest,
                            &n));
        zt_status st = ckpt_latest_tag(c, path, latest, n);
        free(latest);
        ZT_TRY(st);
    } else {
        if (!ckpt_tag_ok(tag, strlen(tag)))
            return zt_fail(ZT_ERR_USAGE, "a tag is a directory name such as global_step100",
                           "'%s' is not a checkpoint tag", tag);
        snprintf(c->tag, sizeof c->tag, "%s", tag);
    }
    ZT_TRY(zt_ckpt_path(c->path, c->dir, c->tag, ZT_CKPT_MANIFEST));
    char tagdir[ZT_CKPT_PATH_MAX];
    ZT_TRY(zt_ckpt_path(tagdir, c->dir, c->tag, NULL));
    const char *hint_tag = "list the directory for the tags it holds (global_step<N>)";
    struct stat sb;
    if (stat(tagdir, &sb) != 0)
        return errno == ENOENT
                   ? zt_fail(ZT_ERR_IO, hint_tag, "checkpoint %s does not exist", tagdir)
                   : zt_path_fail(errno, tagdir, "checkpoint", hint_tag);
    if (!S_ISDIR(sb.st_mode))
        return zt_fail(ZT_ERR_IO, hint_tag, "checkpoint %s is not a directory", tagdir);
    return zt_path_read(c->path, "checkpoint manifest", zt_ckpt_hint_resave,
                        CKPT_MANIFEST_MAX_BYTES, false, text, len);
}

/* Rank 0's count elements of buf to every rank of w, under the watchdog. */
static zt_status restore_bcast(const zt_world *w, void *buf, int count, MPI_Datatype type,
                               const char *what)
{
    MPI_Request r;
    return zt_comm_mpi_wait(w->comm, MPI_Ibcast(buf, count, type, 0, w->comm, &r), &r, what,
                            count);
}

zt_status zt_ckpt_open(zt_ckpt *c, const zt_world *w, const char *dir, const char *tag)
{
    memset(c, 0, sizeof *c);
    char *text = NULL;
    size_t len = 0;
    zt_status st = ZT_OK;
    if (snprintf(c->dir, sizeof c->dir, "%s", dir) >= (int)sizeof c->dir)
        st = zt_fail(ZT_ERR_USAGE, "use a shorter path", "checkpoint directory path too long");
    bool reader = !w || w->rank == 0;
    if (st == ZT_OK && reader)
        st = ckpt_read_manifest(c, tag, &text, &len);
    st = zt_ckpt_agree(w, st);
    if (st == ZT_OK && w) {
        int64_t n = (int64_t)len;
        st = restore_bcast(w, &n, 1, MPI_INT64_T, "broadcast of the manifest's size");
        if (st == ZT_OK)
            st = restore_bcast(w, c->tag, (int)sizeof c->tag, MPI_CHAR,
                               "broadcast of the checkpoint's tag");
        if (st == ZT_OK)
            st = restore_bcast(w, c->path, (int)sizeof c->path, MPI_CHAR,
                               "broadcast of the checkpoint's path");
        if (st == ZT_OK && !reader) {
            len = (size_t)n;
            text = malloc(len + 1);
        }
        if (st == ZT_OK)
            st = zt_ckpt_agree(w, text ? ZT_OK
                                       : zt_fail(ZT_ERR_OOM, "",
                                                 "cannot allocate %zu bytes for the manifest",
                                                 len));
        if (st == ZT_OK)
            st = restore_bcast(w, text, (int)len, MPI_CHAR, "broadcast of the manifest");
    }
    if (st == ZT_OK)
        st = zt_ckpt_manifest_parse(c, text, len);
    free(text);
    /* Before anything sized by the manifest's model is allocated: the shards
     * must hold what it says. */
    if (st == ZT_OK && reader)
        st = zt_ckpt_check_sizes(c);
    st = zt_ckpt_agree(w, st);
    if (st == ZT_OK && reader && c->unchecked) {
        fprintf(stderr,
                "zerotrain: note: checkpoint manifest %s has format version %d, written before "
                "manifests carried a checksum: its values are range-checked but an edit cannot "
                "be detected (saves from now on write version %d)\n",
                c->path, ZT_CKPT_MANIFEST_VERSION_UNCHECKED, ZT_CKPT_MANIFEST_VERSION);
        fflush(stderr);
    }
    if (st != ZT_OK)
        zt_ckpt_close(c);
    return st;
}

void zt_ckpt_close(zt_ckpt *c)
{
    zt_ckpt_manifest_free(c);
    free(c->units);
    free(c->file_bytes);
    free(c->file_crc);
    c->units = NULL;
    c->file_bytes = NULL;
    c->file_crc = NULL;
}

/* ---- The tokenizer. ---- */

/* The hint of a checkpoint without text: the registry's models that read text. */
static void ckpt_text_models_hint(char *buf, size_t cap)
{
    int n;
    const zt_model_entry *models = zt_model_registry(&n);
    size_t len = (size_t)snprintf(buf, cap, "generation and evaluation read text: use a");
    const char *sep = " ";
    for (int i = 0; i < n && len < cap; i++)
        if (models[i].data != ZT_DATA_SYNTHETIC) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", sep, models[i].name);
            sep = " or ";
        }
    if (len < cap)
        snprintf(buf + len, cap - len, " checkpoint");
}

/* The tokenizer of the manifest's kind, not yet checked against its sizes. */
static zt_status ckpt_tokenizer_build(const zt_ckpt *c, const char *bpe_dir, zt_tokenizer *tok)
{
    const char *dir = NULL, *kind = zt_ckpt_tokenizer_kind(c, &dir);
    if (!strcmp(kind, "byte"))
        return zt_tokenizer_byte_init(tok);
    if (!strcmp(kind, "bpe")) {
        if (!bpe_dir && !dir)
            return zt_ckpt_missing(c, "", "tokenizer.dir", "a directory");
        return zt_tokenizer_bpe_init(tok, bpe_dir ? bpe_dir : dir);
    }
    if (strcmp(kind, "char") != 0) {
        char hint[256];
        ckpt_text_models_hint(hint, sizeof hint);
        return zt_fail(ZT_ERR_USAGE, hint, "checkpoint %s has no tokenizer (model %s)", c->path,
                       c->manifest->args.name);
    }
    const char *vocab;
    size_t len;
    ZT_TRY(zt_ckpt_manifest_vocabulary(c, &vocab, &len));
    return zt_tokenizer_char_init(tok, vocab, len, c->path);
}

zt_status zt_ckpt_tokenizer(const zt_ckpt *c, const char *bpe_dir, zt_tokenizer *tok)
{
    ZT_TRY(ckpt_tokenizer_build(c, bpe_dir, tok));
    /* An edited manifest (or another BPE directory) must not reach the model:
     * its ids would decode as other text, or not at all. */
    int64_t want = zt_ckpt_manifest_vocab_size(c);
    zt_model_args a;
    zt_status st = zt_ckpt_model_args(c, &a);
    const char *dir = NULL, *kind = zt_ckpt_tokenizer_kind(c, &dir);
    const char *from = !strcmp(kind, "char") ? "its \"tokenizer.vocabulary\""
                       : !strcmp(kind, "bpe") ? (bpe_dir ? bpe_dir : dir)
                                              : "the byte tokenizer";
    const char *hint = !strcmp(kind, "bpe") && bpe_dir
                           ? "give --tokenizer the BPE directory the checkpoint was trained with"
                           : zt_ckpt_hint_resave;
    if (st == ZT_OK && tok->vocab_size != want)
        st = zt_fail(ZT_ERR_DATA, hint,
                     "checkpoint manifest %s: \"tokenizer.vocab_size\" is %lld, but the tokenizer "
                     "(%s) has %lld tokens",
                     c->path, (long long)want, from, (long long)tok->vocab_size);
    else if (st == ZT_OK && a.vocab_size < tok->vocab_size)
        st = zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                     "checkpoint manifest %s: the model's vocab_size %lld is smaller than its "
                     "tokenizer's %lld tokens",
                     c->path, (long long)a.vocab_size, (long long)tok->vocab_size);
    if (st != ZT_OK)
        zt_tokenizer_free(tok);
    return st;
}

zt_status zt_ckpt_check_tokenizer(const zt_ckpt *c, const zt_tokenizer *tok)
{
    static const char *kinds[] = {"char", "byte", "bpe"};
    const char *kind = zt_ckpt_tokenizer_kind(c, NULL);
    int64_t size = zt_ckpt_manifest_vocab_size(c);
    if (strcmp(kind, kinds[tok->kind]) != 0 || size != tok->vocab_size)
        return zt_fail(ZT_ERR_USAGE, "resume with the --data and --tokenizer the checkpoint "
                                     "was trained with",
                       "checkpoint %s was trained with a %s tokenizer of %lld tokens; this "
                       "run's is %s with %lld",
                       c->path, kind[0] ? kind : "(no)", (long long)size, kinds[tok->kind],
                       (long long)tok->vocab_size);
    if (tok->kind != ZT_TOK_CHAR)
        return ZT_OK;
    zt_tokenizer mine;
    ZT_TRY(zt_ckpt_tokenizer(c, NULL, &mine));
    /* Same size and same code points in order: every id decodes alike. */
    zt_status st = ZT_OK;
    for (int64_t i = 0; i < tok->vocab_size && st == ZT_OK; i++) {
        int32_t id = (int32_t)i;
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        st = zt_tokenizer_decode(tok, &id, 1, &a, &la);
        if (st == ZT_OK)
            st = zt_tokenizer_decode(&mine, &id, 1, &b, &lb);
        if (st == ZT_OK && (la != lb || memcmp(a, b, la) != 0))
            st = zt_fail(ZT_ERR_USAGE, "resume with the --data file the checkpoint was trained "
                                       "on (its character vocabulary is in the manifest)",
                         "checkpoint %s: the data's character vocabulary differs from the "
                         "checkpoint's at id %lld",
                         c->path, (long long)i);
        free(a);
        free(b);
    }
    zt_tokenizer_free(&mine);
    return st;
}

/* ---- Resuming. ---- */

static const char *const ckpt_hint_model =
    "resume with the model flags the checkpoint was saved with (its zt_manifest.json lists "
    "them under \"model\"), or save this run into another --save-dir";

static zt_status ckpt_check_model(const zt_ckpt *c, const zt_model_args *a, const zt_model *m)
{
    zt_model_args saved;
    ZT_TRY(zt_ckpt_model_args(c, &saved));
    if (strcmp(saved.name, a->name) != 0)
        return zt_fail(ZT_ERR_USAGE, ckpt_hint_model,
                       "checkpoint %s holds a %s model; this run builds --model %s", c->path,
                       saved.name, a->name);
    /* Real-valued arguments (dropout) regularise training and shape no
     * parameter: a resumed run may change them. */
    int i = 0;
    for (const zt_model_arg *r; (r = zt_ckpt_arg_next(a->name, &i));) {
        double was = zt_model_arg_value(r, &saved), is = zt_model_arg_value(r, a);
        if (r->kind == ZT_MODEL_ARG_REAL || was == is)
            continue;
        if (r->kind == ZT_MODEL_ARG_INT)
            return zt_fail(ZT_ERR_USAGE, ckpt_hint_model,
                           "checkpoint %s holds %s with %s %lld; this run has %lld (%s)",
                           c->path, saved.name, r->key, (long long)was, (long long)is, r->flag);
        return zt_fail(ZT_ERR_USAGE, ckpt_hint_model,
                       "checkpoint %s holds %s with %s %s; this run has %s (%s)", c->path,
                       saved.name, r->key, zt_model_arg_choice(r, &saved),
                       zt_model_arg_choice(r, a), r->flag);
    }
    int64_t n_params = c->manifest->n_params;
    if (n_params != m->n_params || c->n_units != m->n_units)
        return zt_fail(ZT_ERR_USAGE, ckpt_hint_model,
                       "checkpoint %s holds %lld parameters in %d units; this run's %s has %lld "
                       "in %d",
                       c->path, (long long)n_params, c->n_units, m->name, (long long)m->n_params,
                       m->n_units);
    for (int u = 0; u < m->n_units; u++)
        if (c->units[u].numel != m->units[u].param_numel)
            return zt_fail(ZT_ERR_USAGE, ckpt_hint_model,
                           "checkpoint %s: unit %d (%s) has %lld parameters; this run's has %lld",
                           c->path, u, m->units[u].name, (long long)c->units[u].numel,
                           (long long)m->units[u].param_numel);
    return ZT_OK;
}

/* Everything a resumed run must share with the saved one to continue it. */
static zt_status ckpt_check_training(const zt_ckpt *c, const zt_ckpt_src *t,
                                     const zt_ckpt_meta *meta)
{
    const char *mine[2];
    int n = zt_ckpt_state_names(&t->s.cfg->optimizer, mine);
    if (!zt_ckpt_manifest_sections_are(c, mine, n)) {
        const char *type = zt_ckpt_manifest_optimizer(c);
        return zt_fail(ZT_ERR_USAGE,
                       "resume with the optimizer the checkpoint was trained with (Adam and "
                       "AdamW share their state; SGD with momentum keeps another)",
                       "checkpoint %s holds the state of optimizer %s; this run's %s keeps %d "
                       "state section(s) of another kind",
                       c->path, type ? type : "?", zt_optim_type_name(t->s.cfg->optimizer.type), n);
    }
    int64_t tb = c->manifest->train_batch, samples = c->manifest->n_samples;
    if (tb != t->s.cfg->train_batch_size)
        return zt_fail(ZT_ERR_USAGE,
                       "keep train_batch_size when resuming (micro batch x gradient accumulation "
                       "x ranks): the data order depends on it",
                       "checkpoint %s was trained with train_batch_size %lld; this run's is %lld",
                       c->path, (long long)tb, (long long)t->s.cfg->train_batch_size);
    if (samples != t->sampler.n_samples)
        return zt_fail(ZT_ERR_USAGE,
                       "resume with the --data (and --num-samples) the checkpoint was trained on",
                       "checkpoint %s was trained on %lld samples; this run's data set has %lld",
                       c->path, (long long)samples, (long long)t->sampler.n_samples);
    if (zt_ckpt_seed(c) != t->seed)
        return zt_fail(ZT_ERR_USAGE,
                       "leave --seed out when resuming (the checkpoint's is used)",
                       "checkpoint %s was trained with seed %llu; this run's --seed is %llu",
                       c->path, (unsigned long long)zt_ckpt_seed(c),
                       (unsigned long long)t->seed);
    if (meta->tok)
        ZT_TRY(zt_ckpt_check_tokenizer(c, meta->tok));
    return ZT_OK;
}

/* This rank's span of every unit, `sections` sections of it. */
static zt_status ckpt_load_spans(const zt_ckpt *c, zt_trainer *t, const zt_ckpt_src *v,
                                 int sections)
{
    const zt_layout *lay = v->s.layout;
    zt_trainer_span sp;
    /* A span is a unit's shard, or the whole unit when the optimizer is not
     * sharded (zt_trainer_unit_span). */
    int64_t max_span = v->s.policy->optimizer_sharded ? lay->max_unit_numel / lay->world_size
                                                      : lay->max_unit_numel;
    zt_ckpt_reader rd;
    float *buf = malloc((size_t)max_span * sizeof *buf);
    zt_status st = zt_ckpt_reader_init(&rd, c);
    if (st == ZT_OK && !buf)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to stage the checkpoint",
                     (long long)max_span);
    /* A pipeline stage's unit u is unit first + u of the whole model. */
    int first = zt_pipe_first_unit(v->s.pipe);
    for (int u = 0; st == ZT_OK && u < lay->n_units; u++) {
        st = zt_trainer_unit_span(t, u, &sp);
        for (int k = 0; st == ZT_OK && k < sections; k++) {
            st = zt_ckpt_read_range(&rd, first + u, k, sp.lo, sp.lo + sp.numel, buf);
            float *dst = k == 0 ? sp.values : sp.state[k - 1];
            size_t bytes = (size_t)sp.numel * sizeof *buf;
            if (st == ZT_OK && sp.loc == ZT_MEM_HOST)
                memcpy(dst, buf, bytes);
            else if (st == ZT_OK)
                v->s.be->copy_h2d(v->s.be, dst, buf, bytes);
        }
        if (st == ZT_OK)
            zt_trainer_span_written(t);
    }
    zt_ckpt_reader_free(&rd);
    free(buf);
    return st;
}

static zt_status ckpt_apply_state(zt_trainer *t, const zt_ckpt_state *s)
{
    zt_trainer_counters c = {.global_steps = s->global_steps,
                             .skipped_steps = s->skipped_steps,
                             .global_samples = s->global_samples,
                             .optim_steps = s->optim_steps};
    zt_trainer_counters_set(t, &c);
    zt_sched_state_set(zt_trainer_sched(t), &s->sched);
    zt_scaler_state_set(zt_trainer_scaler(t), &s->scaler);
    return zt_trainer_set_history(t, s->loss, s->loss_scale, s->global_steps);
}

zt_status zt_ckpt_restore(const zt_ckpt *c, zt_trainer *t, const zt_ckpt_meta *meta,
                          bool weights_only)
{
    zt_ckpt_src v;
    zt_ckpt_src_get(t, &v);
    const zt_world *w = v.s.world;
    zt_ckpt_state state;
    memset(&state, 0, sizeof state);
    zt_status st = ckpt_check_model(c, &meta->model, v.s.model);
    if (st == ZT_OK && !weights_only)
        st = ckpt_check_training(c, &v, meta);
    if (st == ZT_OK && !weights_only)
        st = zt_ckpt_manifest_state(c, &state);
    st = zt_ckpt_agree(w, st);
    if (st == ZT_OK)
        st = zt_ckpt_agree(w, zt_ckpt_verify(c, w->rank, w->size));
    if (st == ZT_OK)
        st = zt_ckpt_agree(w, ckpt_load_spans(c, t, &v, weights_only ? 1 : c->n_sections));
    if (st == ZT_OK)
        st = zt_ckpt_agree(w, zt_trainer_refresh_params(t));
    if (st == ZT_OK && !weights_only)
        st = zt_ckpt_agree(w, ckpt_apply_state(t, &state));
    zt_ckpt_state_free(&state);
    return st;
}

