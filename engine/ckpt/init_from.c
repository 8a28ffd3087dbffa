/*
 * init_from: --init-from FILE, a run started from given weights (a
 * safetensors file or a consolidated checkpoint; engine/ckpt/safetensors.h).
 * Every rank matches the model's tensors to the file's, then reads the
 * elements of its own span of every unit, converting them to float32, into
 * the trainer's fp32 values; the parameters are rebuilt from them. The
 * optimizer state stays as initialised (zero moments, step 0).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ckpt/ckpt_impl.h"
#include "engine/ckpt/safetensors.h"
#include "engine/dtype.h"
#include "engine/path.h"

#define INIT_CHUNK_BYTES (1u << 20)

/* Where a model tensor's elements are in the file. */
typedef struct {
    const zt_st_tensor *src;
    int64_t src_elem; /* first element within src */
} init_source;

/* The hint of a mismatch: what the file says it holds, when it says. */
static void init_hint(const zt_st_file *f, char *buf, size_t n)
{
    json_t *meta = f->metadata ? json_loads(f->metadata, 0, NULL) : NULL;
    const char *model = json_string_value(json_object_get(meta, "zerotrain.model"));
    const char *args = json_string_value(json_object_get(meta, "zerotrain.model_args"));
    if (model && args)
        snprintf(buf, n,
                 "the file was written for model %s %s: give the model flags it was trained "
                 "with (docs/interop.md lists the tensor names)",
                 model, args);
    else
        snprintf(buf, n,
                 "give the model flags the weights were trained with; docs/interop.md lists "
                 "the tensor names and shapes --init-from expects");
    json_decref(meta);
}

static bool init_same_shape(const zt_st_tensor *s, int ndim, const int64_t *shape)
{
    if (s->ndim != ndim)
        return false;
    for (int d = 0; d < ndim; d++)
        if (s->shape[d] != shape[d])
            return false;
    return true;
}

static zt_st_tensor *init_find(zt_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* Every model tensor's source, or the error naming the first that has none
 * or the first of the file's tensors the model does not read. */
static zt_status init_match(zt_st_file *f, const char *model, const zt_torch_tensor *ts, int n,
                            init_source *out)
{
    char hint[1024], want[96], got[96];
    init_hint(f, hint, sizeof hint);
    for (int i = 0; i < n; i++) {
        const zt_torch_tensor *t = &ts[i];
        zt_st_tensor *s = init_find(f, t->name);
        const int64_t *shape = t->shape;
        out[i] = (init_source){.src = s, .src_elem = 0};
        if (!s && (s = init_find(f, t->zt_name))) {
            shape = t->zt_shape;
            out[i] = (init_source){.src = s, .src_elem = t->zt_offset};
        }
        char also[96] = "";
        if (strcmp(t->name, t->zt_name) != 0)
            snprintf(also, sizeof also, " (or zerotrain's '%s')", t->zt_name);
        if (!s)
            return zt_fail(ZT_ERR_DATA, hint,
                           "--init-from %s: no tensor '%s'%s, which model %s needs", f->path,
                           t->name, also, model);
        if (!init_same_shape(s, t->ndim, shape)) {
            zt_st_shape_text(t->ndim, shape, want, sizeof want);
            zt_st_shape_text(s->ndim, s->shape, got, sizeof got);
            return zt_fail(ZT_ERR_DATA, hint,
                           "--init-from %s: tensor '%s' has shape %s; this run's %s needs %s",
                           f->path, s->name, got, model, want);
        }
        if (!zt_st_dtype_size(s->dtype))
            return zt_fail(ZT_ERR_DATA,
                           "convert the weights to a float type first (in PyTorch: "
                           "tensor.float())",
                           "--init-from %s: tensor '%s' is %s; --init-from reads F32, F64, F16 "
                           "and BF16",
                           f->path, s->name, s->dtype);
        s->used++;
    }
    for (int i = 0; i < f->n; i++)
        if (!f->tensors[i].used)
            return zt_fail(ZT_ERR_DATA, hint,
                           "--init-from %s: tensor '%s' is not a tensor of model %s (the file "
                           "holds another model, or other names)",
                           f->path, f->tensors[i].name, model);
    return ZT_OK;
}

/* Elements [a, b) of s (from its first element) as float32 into out. */
static zt_status init_read(int fd, const zt_st_file *f, const zt_st_tensor *s, int64_t a,
                           int64_t b, uint8_t *raw, float *out)
{
    size_t es = zt_st_dtype_size(s->dtype);
    int64_t per = (int64_t)(INIT_CHUNK_BYTES / es);
    for (int64_t i = a; i < b; i += per) {
        int64_t k = b - i < per ? b - i : per;
        uint64_t off = f->data_start + s->begin + (uint64_t)i * es;
        ZT_TRY(zt_ckpt_pread(fd, raw, (size_t)k * es, (int64_t)off, f->path));
        for (int64_t j = 0; j < k; j++) {
            const uint8_t *p = raw + j * (int64_t)es;
            float v;
            if (es == 4) {
                memcpy(&v, p, 4);
            } else if (es == 8) {
                double d;
                memcpy(&d, p, 8);
                v = (float)d;
            } else {
                uint16_t h = (uint16_t)(p[0] | p[1] << 8);
                v = !strcmp(s->dtype, "F16") ? zt_f16_to_f32(h) : zt_bf16_to_f32(h);
            }
            if (!isfinite(v))
                return zt_fail(ZT_ERR_DATA, "the weights hold nan or inf: not a usable start",
                               "--init-from %s: tensor '%s' element %lld is %g", f->path,
                               s->name, (long long)(i + j), v);
            out[i - a + j] = v;
        }
    }
    return ZT_OK;
}

/* This rank's span of every unit from the file. */
static zt_status init_load(zt_trainer *t, const zt_model *m, const zt_st_file *f,
                           const zt_torch_tensor *ts, int n, const init_source *src)
{
    zt_ckpt_src v;
    zt_ckpt_src_get(t, &v);
    int64_t max_span = 1;
    zt_trainer_span sp;
    for (int u = 0; u < m->n_units; u++) {
        zt_trainer_unit_span(t, u, &sp);
        max_span = sp.numel > max_span ? sp.numel : max_span;
    }
    int fd = -1;
    ZT_TRY(zt_path_open_read(f->path, "weights file", "", &fd));
    float *buf = malloc((size_t)max_span * sizeof *buf);
    uint8_t *raw = malloc(INIT_CHUNK_BYTES);
    zt_status st = buf && raw ? ZT_OK
                              : zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to stage "
                                                        "--init-from",
                                        (long long)max_span);
    int i = 0;
    for (int u = 0; st == ZT_OK && u < m->n_units; u++) {
        zt_trainer_unit_span(t, u, &sp);
        int64_t lo = sp.lo, hi = sp.lo + sp.numel;
        memset(buf, 0, (size_t)sp.numel * sizeof *buf); /* padding past the unit's tensors */
        for (; st == ZT_OK && i < n && ts[i].unit == u; i++) {
            int64_t a = ts[i].unit_offset > lo ? ts[i].unit_offset : lo;
            int64_t b = ts[i].unit_offset + ts[i].numel < hi ? ts[i].unit_offset + ts[i].numel
                                                              : hi;
            if (a < b)
                st = init_read(fd, f, src[i].src, src[i].src_elem + a - ts[i].unit_offset,
                               src[i].src_elem + b - ts[i].unit_offset, raw, buf + (a - lo));
        }
        size_t bytes = (size_t)sp.numel * sizeof *buf;
        if (st == ZT_OK && sp.loc == ZT_MEM_HOST)
            memcpy(sp.values, buf, bytes);
        else if (st == ZT_OK)
            v.s.be->copy_h2d(v.s.be, sp.values, buf, bytes);
    }
    close(fd);
    free(raw);
    free(buf);
    return st;
}

zt_status zt_ckpt_init_from(zt_trainer *t, const zt_model *m, const char *path)
{
    zt_ckpt_src v;
    zt_ckpt_src_get(t, &v);
    const zt_world *w = v.s.world;
    zt_st_file f;
    zt_torch_tensor *ts = NULL;
    init_source *src = NULL;
    int n = 0;
    /* The loader walks the whole model's units on every rank. */
    if (v.s.pipe->stages > 1)
        return zt_world_agree(w, zt_fail(ZT_ERR_UNSUPPORTED,
                                         "load the weights without --pipeline-stages, save a "
                                         "checkpoint, and --resume it with pipeline stages",
                                         "--init-from with pipeline stages is not implemented "
                                         "yet"),
                              NULL);
    zt_status st = zt_st_open(path, &f);
    if (st == ZT_OK)
        st = zt_torch_tensors_get(m, &ts, &n);
    if (st == ZT_OK && !(src = calloc((size_t)n + 1, sizeof *src)))
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %d tensor sources", n);
    if (st == ZT_OK)
        st = init_match(&f, m->name, ts, n, src);
    st = zt_ckpt_agree(w, st);
    if (st == ZT_OK)
        st = zt_ckpt_agree(w, init_load(t, m, &f, ts, n, src));
    if (st == ZT_OK)
        st = zt_ckpt_agree(w, zt_trainer_refresh_params(t));
    free(src);
    free(ts);
    zt_st_free(&f);
    return st;
}
