#include "engine/ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/dtype.h"
#include "models/registry.h"

/* Shard data is written straight from memory as little-endian binary32. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint shards are little-endian: this host is not"
#endif

#define CKPT_PATH_MAX 4352
#define CKPT_READ_CHUNK (1u << 20)
#define CKPT_MANIFEST_MAX_BYTES ((int64_t)1 << 30)

static const char *const ckpt_hint_resave =
    "the checkpoint is damaged: resume from another tag (--resume TAG; each global_step<N> "
    "directory is one) or train again";

/* ---- CRC-32, slicing by 8. ---- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void ckpt_crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static uint32_t ckpt_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t zt_ckpt_crc32(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&crc_once, ckpt_crc_init);
    const uint8_t *p = buf;
    crc = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t a = crc ^ ckpt_le32(p), b = ckpt_le32(p + 4);
        crc = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^
              crc_table[5][(a >> 16) & 0xff] ^ crc_table[4][a >> 24] ^ crc_table[3][b & 0xff] ^
              crc_table[2][(b >> 8) & 0xff] ^ crc_table[1][(b >> 16) & 0xff] ^
              crc_table[0][b >> 24];
    }
    for (; n > 0; p++, n--)
        crc = crc_table[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- Shard header. ---- */

static void ckpt_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void ckpt_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t ckpt_le64(const uint8_t *p)
{
    return (uint64_t)ckpt_le32(p) | (uint64_t)ckpt_le32(p + 4) << 32;
}

size_t zt_ckpt_header_bytes(uint32_t n_units)
{
    return ZT_CKPT_HEADER_FIXED_BYTES + (size_t)n_units * ZT_CKPT_UNIT_ENTRY_BYTES;
}

void zt_ckpt_header_encode(const zt_ckpt_header *h, uint8_t *buf)
{
    size_t hb = zt_ckpt_header_bytes(h->n_units);
    memset(buf, 0, hb);
    memcpy(buf, ZT_CKPT_MAGIC, sizeof ZT_CKPT_MAGIC);
    ckpt_put32(buf + 8, h->version);
    ckpt_put32(buf + 12, (uint32_t)hb);
    ckpt_put32(buf + 16, h->rank);
    ckpt_put32(buf + 20, h->partition_count);
    ckpt_put32(buf + 24, h->stage);
    ckpt_put32(buf + 28, h->n_units);
    ckpt_put32(buf + 32, h->n_sections);
    ckpt_put64(buf + 40, (uint64_t)h->partition_numel);
    ckpt_put64(buf + 48, (uint64_t)h->n_sections * (uint64_t)h->partition_numel * 4);
    for (uint32_t u = 0; u < h->n_units; u++) {
        uint8_t *e = buf + ZT_CKPT_HEADER_FIXED_BYTES + (size_t)u * ZT_CKPT_UNIT_ENTRY_BYTES;
        ckpt_put64(e, (uint64_t)h->units[u].numel);
        ckpt_put64(e + 8, (uint64_t)h->units[u].padded_numel);
        ckpt_put64(e + 16, (uint64_t)h->units[u].shard_numel);
        ckpt_put64(e + 24, (uint64_t)h->units[u].part_offset);
    }
}

zt_status zt_ckpt_header_decode(const uint8_t *buf, size_t len, const char *path,
                                uint32_t max_units, zt_ckpt_header *h)
{
    if (len < ZT_CKPT_HEADER_FIXED_BYTES)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint shard %s is truncated: %zu bytes, shorter than its header",
                       path, len);
    if (memcmp(buf, ZT_CKPT_MAGIC, sizeof ZT_CKPT_MAGIC) != 0)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "%s is not a zerotrain checkpoint shard (bad magic)", path);
    h->version = ckpt_le32(buf + 8);
    if (h->version != ZT_CKPT_FORMAT_VERSION)
        return zt_fail(ZT_ERR_DATA, "use the zerotrain version that wrote it",
                       "checkpoint shard %s has format version %u; this zerotrain reads %d", path,
                       h->version, ZT_CKPT_FORMAT_VERSION);
    h->header_bytes = ckpt_le32(buf + 12);
    h->rank = ckpt_le32(buf + 16);
    h->partition_count = ckpt_le32(buf + 20);
    h->stage = ckpt_le32(buf + 24);
    h->n_units = ckpt_le32(buf + 28);
    h->n_sections = ckpt_le32(buf + 32);
    h->partition_numel = (int64_t)ckpt_le64(buf + 40);
    h->data_bytes = ckpt_le64(buf + 48);
    if (h->n_units > max_units || h->header_bytes != zt_ckpt_header_bytes(h->n_units))
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint shard %s: header of %u units (%llu bytes) does not fit the "
                       "manifest's %u units",
                       path, h->n_units, (unsigned long long)h->header_bytes, max_units);
    if (len < h->header_bytes)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint shard %s is truncated inside its header", path);
    for (uint32_t u = 0; u < h->n_units; u++) {
        const uint8_t *e = buf + ZT_CKPT_HEADER_FIXED_BYTES + (size_t)u * ZT_CKPT_UNIT_ENTRY_BYTES;
        h->units[u] = (zt_ckpt_unit){.numel = (int64_t)ckpt_le64(e),
                                     .padded_numel = (int64_t)ckpt_le64(e + 8),
                                     .shard_numel = (int64_t)ckpt_le64(e + 16),
                                     .part_offset = (int64_t)ckpt_le64(e + 24)};
    }
    return ZT_OK;
}

/* ---- Resharding. ---- */

int zt_ckpt_pieces(int64_t numel, int64_t src_shard_numel, int64_t lo, int64_t hi,
                   zt_ckpt_piece *out)
{
    int n = 0;
    int64_t end = hi < numel ? hi : numel;
    for (int64_t i = lo; i < end;) {
        int64_t q = i / src_shard_numel;
        int64_t stop = (q + 1) * src_shard_numel < end ? (q + 1) * src_shard_numel : end;
        out[n++] = (zt_ckpt_piece){.src_rank = (int)q,
                                   .src_offset = i - q * src_shard_numel,
                                   .dst_offset = i - lo,
                                   .numel = stop - i};
        i = stop;
    }
    return n;
}

int zt_ckpt_pieces_max(int64_t src_shard_numel, int64_t lo, int64_t hi)
{
    return (int)((hi - lo) / src_shard_numel) + 2;
}

/* ---- Files. ---- */

/* Bytes this process may still write before ZT_CKPT_FAIL_AFTER_BYTES fails a
 * save (< 0: no limit); read at the first save. */
static int64_t ckpt_budget = -1;
static bool ckpt_budget_read;

/* A file written through write(2), checksummed as it goes. */
typedef struct {
    int fd;
    const char *path;
    uint32_t crc;
    uint64_t bytes;
} ckpt_out;

static const char *const ckpt_hint_write =
    "check free space and permissions on that file system, or choose another --save-dir; "
    "the previous checkpoint and DIR/latest are untouched";

static zt_status ckpt_out_open(ckpt_out *o, const char *path)
{
    *o = (ckpt_out){.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                    .path = path};
    if (o->fd < 0)
        return zt_fail(ZT_ERR_IO,
                       errno == ENOENT ? "every rank writes its shard into DIR: across nodes it "
                                         "must be a file system they all share"
                                       : ckpt_hint_write,
                       "cannot create checkpoint file %s: %s", path, strerror(errno));
    return ZT_OK;
}

static zt_status ckpt_out_write(ckpt_out *o, const void *buf, size_t n)
{
    const char *p = buf;
    size_t allowed = n;
    if (ckpt_budget >= 0 && (uint64_t)ckpt_budget < n)
        allowed = (size_t)ckpt_budget;
    for (size_t done = 0; done < allowed;) {
        ssize_t w = write(o->fd, p + done, allowed - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot write checkpoint file %s: %s",
                           o->path, w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    if (ckpt_budget >= 0) {
        ckpt_budget -= (int64_t)allowed;
        if (allowed < n)
            return zt_fail(ZT_ERR_IO, ckpt_hint_write,
                           "cannot write checkpoint file %s: %s (simulated by "
                           "ZT_CKPT_FAIL_AFTER_BYTES)",
                           o->path, strerror(ENOSPC));
    }
    o->crc = zt_ckpt_crc32(o->crc, buf, n);
    o->bytes += n;
    return ZT_OK;
}

/* fsync + close; a file that failed is closed without the fsync. */
static zt_status ckpt_out_close(ckpt_out *o, zt_status st)
{
    if (o->fd < 0)
        return st;
    if (st == ZT_OK && fsync(o->fd) != 0)
        st = zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot sync checkpoint file %s: %s", o->path,
                     strerror(errno));
    if (close(o->fd) != 0 && st == ZT_OK)
        st = zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot close checkpoint file %s: %s", o->path,
                     strerror(errno));
    o->fd = -1;
    return st;
}

/* A whole small file written and synced. */
static zt_status ckpt_write_file(const char *path, const void *buf, size_t n, uint32_t *crc)
{
    ckpt_out o;
    ZT_TRY(ckpt_out_open(&o, path));
    zt_status st = ckpt_out_close(&o, ckpt_out_write(&o, buf, n));
    if (crc)
        *crc = o.crc;
    return st;
}

static zt_status ckpt_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot sync checkpoint directory %s: %s",
                       dir, strerror(e));
    }
    close(fd);
    return ZT_OK;
}

/* mkdir -p, naming the component that failed. */
static zt_status ckpt_mkdirs(const char *dir)
{
    char p[CKPT_PATH_MAX];
    if (!dir[0] || snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return zt_fail(ZT_ERR_USAGE, "give a shorter --save-dir",
                       "checkpoint directory '%s' is empty or too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        struct stat sb;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                           "cannot create checkpoint directory %s: %s", p, strerror(errno));
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                           "cannot create checkpoint directory %s: %s is not a directory", dir,
                           p);
        *s = c;
        if (c == '\0')
            return ZT_OK;
    }
}

static int ckpt_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* rm -rf without following links; a missing path is fine. */
static int ckpt_remove_tree(const char *path)
{
    int rc = nftw(path, ckpt_remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return rc != 0 && errno == ENOENT ? 0 : rc;
}

/* The whole file at path into a malloc'd, NUL-terminated buffer. */
static zt_status ckpt_read_file(const char *path, const char *what, const char *hint,
                                int64_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_fail(ZT_ERR_IO, hint, "cannot read %s %s: %s", what, path, strerror(errno));
    zt_status st = ZT_OK;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size > max_bytes) {
        fclose(f);
        return zt_fail(ZT_ERR_DATA, hint, "%s %s is not a regular file of at most %lld bytes",
                       what, path, (long long)max_bytes);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld bytes for %s", (long long)sb.st_size,
                     path);
    else if (fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
        st = zt_fail(ZT_ERR_IO, hint, "cannot read %s %s: %s", what, path,
                     ferror(f) ? strerror(errno) : "file shrank while reading");
    fclose(f);
    if (st != ZT_OK) {
        free(buf);
        return st;
    }
    buf[sb.st_size] = '\0';
    *out = buf;
    *len = (size_t)sb.st_size;
    return ZT_OK;
}

static zt_status ckpt_path(char *buf, const char *a, const char *b, const char *c)
{
    int n = c ? snprintf(buf, CKPT_PATH_MAX, "%s/%s/%s", a, b, c)
              : snprintf(buf, CKPT_PATH_MAX, "%s/%s", a, b);
    if (n < 0 || n >= CKPT_PATH_MAX)
        return zt_fail(ZT_ERR_USAGE, "use a shorter checkpoint directory",
                       "checkpoint path %s/%s is too long", a, b);
    return ZT_OK;
}

static void ckpt_shard_name(char *buf, size_t cap, int rank)
{
    snprintf(buf, cap, "zero_pp_rank_%d_mp_rank_00_optim_states.zt", rank);
}

static double ckpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every rank ends with the failing rank's status and text (consolidate runs
 * with no world: nothing to agree with). */
static zt_status ckpt_agree(const zt_world *w, zt_status st)
{
    return w ? zt_comm_agree(w->comm, st, "checkpoint") : st;
}

/* ---- Model identity. ---- */

/* The manifest's "model" object records, under each row's key, every schema
 * row of the model (models/registry.h): one source for what a model's
 * arguments are. The next row of `model` after row *i, or NULL. */
static const zt_model_arg *ckpt_arg_next(const char *model, int *i)
{
    int n;
    const zt_model_arg *rows = zt_model_args_schema(&n);
    for (; *i < n; (*i)++)
        if (!strcmp(rows[*i].model, model))
            return &rows[(*i)++];
    return NULL;
}

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

/* ---- What a checkpoint reads of a trainer. ---- */

typedef struct {
    zt_trainer_stats s;
    zt_trainer_counters c;
    zt_sched_state sched;
    zt_scaler_state scaler;
    zt_sampler_state sampler;
    uint64_t seed;
} ckpt_src;

static void ckpt_src_get(zt_trainer *t, ckpt_src *v)
{
    zt_trainer_stats_get(t, &v->s);
    zt_trainer_counters_get(t, &v->c);
    zt_sched_state_get(zt_trainer_sched(t), &v->sched);
    zt_scaler_state_get(zt_trainer_scaler(t), &v->scaler);
    zt_sampler_state_get(zt_trainer_sampler(t), v->c.global_steps, &v->sampler);
    v->seed = zt_trainer_seed(t);
}

/* ---- Manifest writing. ---- */

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

static int ckpt_state_names(const zt_optim_config *o, const char **names)
{
    if (o->type != ZT_OPTIM_SGD) {
        names[0] = "exp_avg";
        names[1] = "exp_avg_sq";
        return 2;
    }
    if (o->momentum == 0.0)
        return 0;
    names[0] = "momentum_buffer";
    return 1;
}

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
    for (const zt_model_arg *r; (r = ckpt_arg_next(a->name, &i));)
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

static json_t *ckpt_optimizer_json(const ckpt_src *t, int *bad)
{
    const zt_optim_config *oc = &t->s.cfg->optimizer;
    json_t *o = json_object(), *names = json_array();
    const char *nm[2];
    int n = ckpt_state_names(oc, nm);
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

static json_t *ckpt_training_json(const ckpt_src *t, int *bad)
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

static json_t *ckpt_history_json(const ckpt_src *t, int *bad)
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

static zt_status ckpt_manifest_text(const ckpt_src *t, const zt_ckpt_meta *meta,
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
    ckpt_put(root, "layout", ckpt_layout_json(lay, &bad), &bad);
    ckpt_put(root, "dtype",
             json_pack("{ssssssssssss}", "params", zt_dtype_name(t->s.compute_dtype), "master", "fp32",
                       "optimizer_states", "fp32", "gradients", zt_dtype_name(t->s.grad_dtype),
                       "communication", zt_dtype_name(t->s.comm_dtype), "shards", "fp32"),
             &bad);
    ckpt_put(root, "offload",
             json_pack("{ssss}", "optimizer", t->s.offload_optimizer ? "cpu" : "none", "param",
                       t->s.offload_param ? "cpu" : "none"),
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
        ckpt_shard_name(name, sizeof name, r);
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

/* ---- Saving. ---- */

/* This rank's shard: the header, then each section's slices of every unit. */
static zt_status ckpt_write_shard(zt_trainer *t, const ckpt_src *v, const char *path,
                                  ckpt_out *o)
{
    const zt_layout *lay = v->s.layout;
    zt_trainer_span sp;
    *o = (ckpt_out){.fd = -1, .path = path};
    zt_trainer_unit_span(t, 0, &sp);
    uint32_t n_sections = 1 + (uint32_t)sp.n_states;
    zt_ckpt_unit *units = calloc((size_t)lay->n_units, sizeof *units);
    uint8_t *head = malloc(zt_ckpt_header_bytes((uint32_t)lay->n_units));
    float *stage = malloc((size_t)(lay->max_unit_numel / lay->world_size) * sizeof(float));
    zt_status st = ZT_OK;
    if (!units || !head || !stage)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the staging of checkpoint shard %s", path);
    if (st == ZT_OK)
        st = ckpt_out_open(o, path);
    if (st == ZT_OK) {
        for (int u = 0; u < lay->n_units; u++)
            units[u] = (zt_ckpt_unit){lay->units[u].numel, lay->units[u].padded_numel,
                                      lay->units[u].shard_numel, lay->units[u].part_offset};
        zt_ckpt_header h = {.version = ZT_CKPT_FORMAT_VERSION,
                            .rank = (uint32_t)lay->rank,
                            .partition_count = (uint32_t)lay->world_size,
                            .stage = (uint32_t)v->s.cfg->zero.stage,
                            .n_units = (uint32_t)lay->n_units,
                            .n_sections = n_sections,
                            .partition_numel = lay->partition_numel,
                            .units = units};
        zt_ckpt_header_encode(&h, head);
        st = ckpt_out_write(o, head, zt_ckpt_header_bytes(h.n_units));
    }
    for (uint32_t k = 0; k < n_sections && st == ZT_OK; k++)
        for (int u = 0; u < lay->n_units && st == ZT_OK; u++) {
            const zt_unit_layout *ul = &lay->units[u];
            zt_trainer_unit_span(t, u, &sp);
            const float *src = (k == 0 ? sp.values : sp.state[k - 1]) +
                               ((int64_t)lay->rank * ul->shard_numel - sp.lo);
            size_t bytes = (size_t)ul->shard_numel * sizeof(float);
            if (sp.loc == ZT_MEM_DEVICE) {
                v->s.be->copy_d2h(v->s.be, stage, src, bytes);
                src = stage;
            }
            st = ckpt_out_write(o, src, bytes);
        }
    st = ckpt_out_close(o, st);
    free(units);
    free(head);
    free(stage);
    return st;
}

/* Renames the finished partial directory to DIR/<tag>: atomically exchanged
 * with an older DIR/<tag> when there is one (which is then removed). */
static zt_status ckpt_publish(const char *dir, const char *partial, const char *final)
{
    ZT_TRY(ckpt_sync_dir(partial));
    struct stat sb;
    bool exists = lstat(final, &sb) == 0;
    int rc;
    if (!exists) {
        rc = rename(partial, final);
    } else {
        rc = renameat2(AT_FDCWD, partial, AT_FDCWD, final, RENAME_EXCHANGE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
            /* No exchange on this file system: move the old one aside first. */
            char old[CKPT_PATH_MAX + 8];
            snprintf(old, sizeof old, "%s.old", partial);
            ckpt_remove_tree(old);
            rc = rename(final, old);
            if (rc == 0)
                rc = rename(partial, final);
            if (rc == 0)
                ckpt_remove_tree(old);
        } else if (rc == 0) {
            ckpt_remove_tree(partial);
        }
    }
    if (rc != 0)
        return zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot rename %s to %s: %s", partial, final,
                       strerror(errno));
    return ckpt_sync_dir(dir);
}

static zt_status ckpt_write_latest(const char *dir, const char *tag)
{
    char tmp[CKPT_PATH_MAX], latest[CKPT_PATH_MAX];
    ZT_TRY(ckpt_path(tmp, dir, "latest.tmp", NULL));
    ZT_TRY(ckpt_path(latest, dir, "latest", NULL));
    ZT_TRY(ckpt_write_file(tmp, tag, strlen(tag), NULL));
    if (rename(tmp, latest) != 0)
        return zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot rename %s to %s: %s", tmp, latest,
                       strerror(errno));
    return ckpt_sync_dir(dir);
}

/* N of a "global_step<N>" name, or -1. */
static int64_t ckpt_tag_step(const char *name)
{
    static const char prefix[] = "global_step";
    size_t n = sizeof prefix - 1;
    if (strncmp(name, prefix, n) != 0 || !name[n])
        return -1;
    int64_t v = 0;
    for (const char *p = name + n; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int ckpt_cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* --keep-last: the keep highest global_step<M> directories with M <= step stay. */
static zt_status ckpt_prune(const char *dir, int64_t step, int64_t keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return zt_fail(ZT_ERR_IO, "", "cannot list checkpoint directory %s: %s", dir,
                       strerror(errno));
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    zt_status st = ZT_OK;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = ckpt_tag_step(e->d_name);
        char path[CKPT_PATH_MAX];
        struct stat sb;
        if (s < 0 || s > step || ckpt_path(path, dir, e->d_name, NULL) != ZT_OK ||
            lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(steps, cap * sizeof *grown);
            if (!grown) {
                st = zt_fail(ZT_ERR_OOM, "", "cannot list checkpoints");
                break;
            }
            steps = grown;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (st == ZT_OK)
        qsort(steps, n, sizeof *steps, ckpt_cmp_desc);
    for (size_t i = (size_t)keep; st == ZT_OK && i < n; i++) {
        char name[64], path[CKPT_PATH_MAX];
        snprintf(name, sizeof name, "global_step%lld", (long long)steps[i]);
        st = ckpt_path(path, dir, name, NULL);
        if (st == ZT_OK && ckpt_remove_tree(path) != 0)
            st = zt_fail(ZT_ERR_IO, "check the directory's permissions (--keep-last removes "
                                    "older checkpoints)",
                         "cannot remove old checkpoint %s: %s", path, strerror(errno));
    }
    free(steps);
    return st;
}

zt_status zt_ckpt_check_dir(const zt_world *w, const char *dir)
{
    zt_status st = ZT_OK;
    if (w->rank == 0) {
        char probe[CKPT_PATH_MAX];
        char name[64];
        snprintf(name, sizeof name, ".zt-write-test-%ld", (long)getpid());
        st = ckpt_mkdirs(dir);
        if (st == ZT_OK)
            st = ckpt_path(probe, dir, name, NULL);
        if (st == ZT_OK) {
            int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (fd < 0 || close(fd) != 0)
                st = zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                             "cannot create files in checkpoint directory %s: %s", dir,
                             strerror(errno));
            unlink(probe);
        }
    }
    return ckpt_agree(w, st);
}

zt_status zt_ckpt_save(zt_trainer *t, const zt_ckpt_meta *meta, const char *dir,
                       int64_t keep_last, zt_ckpt_saved *out)
{
    ckpt_src v;
    ckpt_src_get(t, &v);
    const zt_world *w = v.s.world;
    const zt_layout *lay = v.s.layout;
    double t0 = ckpt_now();
    memset(out, 0, sizeof *out);
    snprintf(out->tag, sizeof out->tag, "global_step%lld", (long long)v.c.global_steps);
    if (!ckpt_budget_read) {
        const char *fail_after = getenv("ZT_CKPT_FAIL_AFTER_BYTES");
        ckpt_budget = fail_after ? strtoll(fail_after, NULL, 10) : -1;
        ckpt_budget_read = true;
    }

    char partial_name[96], partial[CKPT_PATH_MAX], final[CKPT_PATH_MAX], shard[CKPT_PATH_MAX];
    char name[96];
    snprintf(partial_name, sizeof partial_name, "%s.partial", out->tag);
    zt_status st = ckpt_path(partial, dir, partial_name, NULL);
    if (st == ZT_OK)
        st = ckpt_path(final, dir, out->tag, NULL);
    if (st == ZT_OK && w->rank == 0) {
        st = ckpt_mkdirs(dir);
        if (st == ZT_OK && ckpt_remove_tree(partial) != 0)
            st = zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot remove the stale %s: %s", partial,
                         strerror(errno));
        if (st == ZT_OK && mkdir(partial, 0755) != 0)
            st = zt_fail(ZT_ERR_IO, ckpt_hint_write, "cannot create checkpoint directory %s: %s",
                         partial, strerror(errno));
    }
    ZT_TRY(ckpt_agree(w, st));

    /* The first partition group writes (MiCS replicas hold the same slices). */
    uint64_t mine[2] = {0, 0};
    ckpt_shard_name(name, sizeof name, lay->rank);
    st = ckpt_path(shard, partial, name, NULL);
    if (st == ZT_OK && w->rank < lay->world_size) {
        ckpt_out o;
        st = ckpt_write_shard(t, &v, shard, &o);
        mine[0] = o.bytes;
        mine[1] = o.crc;
    }
    st = ckpt_agree(w, st);
    uint64_t *all = w->rank == 0 ? malloc((size_t)w->size * 2 * sizeof *all) : NULL;
    if (st == ZT_OK && w->rank == 0 && !all)
        st = zt_fail(ZT_ERR_OOM, "", "cannot gather the shard checksums");
    st = ckpt_agree(w, st);
    if (st == ZT_OK &&
        MPI_Gather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, w->comm) != MPI_SUCCESS)
        st = zt_fail(ZT_ERR_COMM, "a peer rank may have died", "gathering shard sizes failed");

    if (st == ZT_OK && w->rank == 0) {
        uint64_t *bytes = malloc((size_t)lay->world_size * sizeof *bytes);
        uint32_t *crc = malloc((size_t)lay->world_size * sizeof *crc);
        char *text = NULL;
        if (!bytes || !crc)
            st = zt_fail(ZT_ERR_OOM, "", "cannot gather the shard checksums");
        for (int r = 0; st == ZT_OK && r < lay->world_size; r++) {
            bytes[r] = all[2 * r];
            crc[r] = (uint32_t)all[2 * r + 1];
            out->bytes += bytes[r];
        }
        if (st == ZT_OK)
            st = ckpt_manifest_text(&v, meta, out->tag, bytes, crc, &text);
        char path[CKPT_PATH_MAX];
        if (st == ZT_OK)
            st = ckpt_path(path, partial, ZT_CKPT_MANIFEST, NULL);
        if (st == ZT_OK)
            st = ckpt_write_file(path, text, strlen(text), NULL);
        out->bytes += text ? strlen(text) : 0;
        if (st == ZT_OK)
            st = ckpt_publish(dir, partial, final);
        if (st == ZT_OK)
            st = ckpt_write_latest(dir, out->tag);
        if (st == ZT_OK && keep_last > 0)
            st = ckpt_prune(dir, v.c.global_steps, keep_last);
        free(text);
        free(bytes);
        free(crc);
    }
    free(all);
    st = ckpt_agree(w, st);
    /* Nothing of a failed save may look like a checkpoint. */
    if (st != ZT_OK && w->rank == 0)
        ckpt_remove_tree(partial);
    out->seconds = ckpt_now() - t0;
    return st;
}

/* ---- Reading the manifest. ---- */

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

static zt_status ckpt_missing(const zt_ckpt *c, const char *where, const char *key,
                              const char *what)
{
    return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
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
        return ckpt_missing(c, where, key, what);
    }
    *out = json_integer_value(v);
    return ZT_OK;
}

static zt_status ckpt_real_at(const zt_ckpt *c, const char *key, double *out)
{
    json_t *v = ckpt_at(c->root, key);
    if (!json_is_number(v))
        return ckpt_missing(c, "", key, "a number");
    *out = json_number_value(v);
    return ZT_OK;
}

static const char *ckpt_str(const zt_ckpt *c, const char *key)
{
    json_t *v = ckpt_at(c->root, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A tag names a directory inside DIR: no separators, nothing hidden. */
static bool ckpt_tag_ok(const char *tag)
{
    size_t n = strlen(tag);
    if (n == 0 || n >= 128 || tag[0] == '.')
        return false;
    for (const char *p = tag; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return false;
    return true;
}

/* Rank 0's part of zt_ckpt_open: the tag and the manifest's bytes. */
static zt_status ckpt_read_manifest(zt_ckpt *c, const char *tag, char **text, size_t *len)
{
    char path[CKPT_PATH_MAX];
    if (!tag) {
        char *latest = NULL;
        size_t n = 0;
        ZT_TRY(ckpt_path(path, c->dir, "latest", NULL));
        struct stat sb;
        if (stat(c->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return zt_fail(ZT_ERR_IO, "give the --save-dir (or --load-dir) a run saved into",
                           "checkpoint directory %s does not exist", c->dir);
        if (stat(path, &sb) != 0)
            return zt_fail(ZT_ERR_IO,
                           "nothing was saved there yet: train with --save-dir first, or name "
                           "a tag with --resume TAG",
                           "no checkpoint to resume in %s: %s does not exist", c->dir, path);
        ZT_TRY(ckpt_read_file(path, "checkpoint pointer", ckpt_hint_resave, 4096, &latest, &n));
        while (n > 0 && (latest[n - 1] == '\n' || latest[n - 1] == '\r' || latest[n - 1] == ' '))
            latest[--n] = '\0';
        snprintf(c->tag, sizeof c->tag, "%s", latest);
        bool ok = ckpt_tag_ok(latest);
        free(latest);
        if (!ok)
            return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                           "%s does not name a checkpoint tag (global_step<N>)", path);
    } else {
        if (!ckpt_tag_ok(tag))
            return zt_fail(ZT_ERR_USAGE, "a tag is a directory name such as global_step100",
                           "'%s' is not a checkpoint tag", tag);
        snprintf(c->tag, sizeof c->tag, "%s", tag);
    }
    ZT_TRY(ckpt_path(c->path, c->dir, c->tag, ZT_CKPT_MANIFEST));
    char tagdir[CKPT_PATH_MAX];
    ZT_TRY(ckpt_path(tagdir, c->dir, c->tag, NULL));
    struct stat sb;
    if (stat(tagdir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_fail(ZT_ERR_IO, "list the directory for the tags it holds (global_step<N>)",
                       "checkpoint %s does not exist", tagdir);
    return ckpt_read_file(c->path, "checkpoint manifest", ckpt_hint_resave,
                          CKPT_MANIFEST_MAX_BYTES, text, len);
}

/* The fields every use needs, with the layout checked for consistency (so
 * later offsets cannot leave the files). */
static zt_status ckpt_parse(zt_ckpt *c)
{
    int64_t v;
    const char *fmt = ckpt_str(c, "format");
    if (!fmt || strcmp(fmt, "zerotrain-checkpoint") != 0)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "%s is not a zerotrain checkpoint manifest (\"format\" is not "
                       "\"zerotrain-checkpoint\")",
                       c->path);
    ZT_TRY(ckpt_int(c, c->root, "", "format_version", 1, &v));
    if (v != ZT_CKPT_FORMAT_VERSION)
        return zt_fail(ZT_ERR_DATA, "use the zerotrain version that wrote it",
                       "checkpoint manifest %s has format version %lld; this zerotrain reads %d",
                       c->path, (long long)v, ZT_CKPT_FORMAT_VERSION);
    const char *tag = ckpt_str(c, "tag");
    if (!tag || strcmp(tag, c->tag) != 0)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint manifest %s names tag \"%s\", not its directory's \"%s\"",
                       c->path, tag ? tag : "(none)", c->tag);
    ZT_TRY(ckpt_int(c, c->root, "", "world_size", 1, &v));
    c->world_size = (int)v;
    ZT_TRY(ckpt_int(c, c->root, "", "zero_stage", 0, &v));
    c->stage = (int)v;
    ZT_TRY(ckpt_int(c, c->root, "", "layout.partition_count", 1, &v));
    if (v > (1 << 20))
        return ckpt_missing(c, "", "layout.partition_count", "at most 2^20");
    c->partition_count = (int)v;
    ZT_TRY(ckpt_int(c, c->root, "", "layout.partition_numel", 0, &c->partition_numel));
    ZT_TRY(ckpt_int(c, c->root, "", "training.global_steps", 0, &c->global_steps));
    json_t *sections = ckpt_at(c->root, "optimizer.state_sections");
    if (!json_is_array(sections) || json_array_size(sections) > ZT_TRAINER_MAX_STATES)
        return ckpt_missing(c, "", "optimizer.state_sections", "an array of at most 2 names");
    c->n_sections = 1 + (int)json_array_size(sections);

    json_t *units = ckpt_at(c->root, "layout.units");
    json_t *munits = ckpt_at(c->root, "model.units");
    if (!json_is_array(units) || json_array_size(units) == 0 || json_array_size(units) > 1u << 20 ||
        !json_is_array(munits) || json_array_size(munits) != json_array_size(units))
        return ckpt_missing(c, "", "layout.units", "an array as long as model.units");
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
            cu->numel > cu->padded_numel || cu->part_offset != part)
            return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                           "checkpoint manifest %s: layout.units[%d] is inconsistent (numel "
                           "%lld, padded %lld, shard %lld at %lld for %d partitions)",
                           c->path, u, (long long)cu->numel, (long long)cu->padded_numel,
                           (long long)cu->shard_numel, (long long)cu->part_offset,
                           c->partition_count);
        part += cu->shard_numel;
    }
    if (part != c->partition_numel)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint manifest %s: the unit shards add up to %lld elements, "
                       "layout.partition_numel says %lld",
                       c->path, (long long)part, (long long)c->partition_numel);

    json_t *files = ckpt_at(c->root, "files");
    if (!json_is_array(files) || json_array_size(files) != (size_t)c->partition_count)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint manifest %s: \"files\" should list %d shards", c->path,
                       c->partition_count);
    for (int r = 0; r < c->partition_count; r++) {
        char where[64], name[96];
        snprintf(where, sizeof where, "files[%d].", r);
        json_t *jf = json_array_get(files, (size_t)r);
        ckpt_shard_name(name, sizeof name, r);
        json_t *jn = json_object_get(jf, "name"), *jc = json_object_get(jf, "crc32");
        if (!json_is_string(jn) || strcmp(json_string_value(jn), name) != 0)
            return ckpt_missing(c, where, "name", name);
        ZT_TRY(ckpt_int(c, jf, where, "bytes", 0, &v));
        c->file_bytes[r] = (uint64_t)v;
        char *end = NULL;
        const char *hex = json_is_string(jc) ? json_string_value(jc) : "";
        unsigned long crc = strtoul(hex, &end, 16);
        if (strlen(hex) != 8 || *end != '\0')
            return ckpt_missing(c, where, "crc32", "8 hex digits");
        c->file_crc[r] = (uint32_t)crc;
    }
    return ZT_OK;
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
    st = ckpt_agree(w, st);
    if (st == ZT_OK && w) {
        int64_t n = (int64_t)len;
        MPI_Bcast(&n, 1, MPI_INT64_T, 0, w->comm);
        MPI_Bcast(c->tag, (int)sizeof c->tag, MPI_CHAR, 0, w->comm);
        MPI_Bcast(c->path, (int)sizeof c->path, MPI_CHAR, 0, w->comm);
        if (!reader) {
            len = (size_t)n;
            text = malloc(len + 1);
        }
        int ok = text != NULL;
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, w->comm);
        if (!ok)
            st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %zu bytes for the manifest", len);
        else
            MPI_Bcast(text, (int)len, MPI_CHAR, 0, w->comm);
    }
    if (st == ZT_OK) {
        json_error_t err;
        c->root = json_loadb(text, len, 0, &err);
        if (!c->root)
            st = zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                         "checkpoint manifest %s is not valid JSON: line %d: %s", c->path,
                         err.line, err.text);
    }
    free(text);
    if (st == ZT_OK)
        st = ckpt_parse(c);
    if (st != ZT_OK)
        zt_ckpt_close(c);
    return st;
}

void zt_ckpt_close(zt_ckpt *c)
{
    if (c->root)
        json_decref(c->root);
    free(c->units);
    free(c->file_bytes);
    free(c->file_crc);
    c->root = NULL;
    c->units = NULL;
    c->file_bytes = NULL;
    c->file_crc = NULL;
}

zt_status zt_ckpt_model_args(const zt_ckpt *c, zt_model_args *out)
{
    zt_model_args_init(out);
    const char *name = ckpt_str(c, "model.name");
    if (!name || strlen(name) >= sizeof out->name)
        return ckpt_missing(c, "", "model.name", "a model name");
    snprintf(out->name, sizeof out->name, "%s", name);
    int i = 0;
    for (const zt_model_arg *r; (r = ckpt_arg_next(out->name, &i));) {
        char key[64];
        snprintf(key, sizeof key, "model.%s", r->key);
        if (r->kind == ZT_MODEL_ARG_INT) {
            int64_t v = 0;
            ZT_TRY(ckpt_int(c, c->root, "", key, 1, &v));
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
                return ckpt_missing(c, "", key, what);
            }
            zt_model_arg_set(r, out, !strcmp(v, r->choices[1]));
        }
    }
    return ZT_OK;
}

uint64_t zt_ckpt_seed(const zt_ckpt *c)
{
    json_t *v = ckpt_at(c->root, "training.seed");
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

int64_t zt_ckpt_micro_batch_size(const zt_ckpt *c)
{
    json_t *v = ckpt_at(c->root, "training.train_micro_batch_size_per_gpu");
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

const char *zt_ckpt_tokenizer_kind(const zt_ckpt *c, const char **dir)
{
    const char *kind = ckpt_str(c, "tokenizer.kind");
    if (dir)
        *dir = ckpt_str(c, "tokenizer.dir");
    return kind ? kind : "";
}

zt_status zt_ckpt_tokenizer(const zt_ckpt *c, const char *bpe_dir, zt_tokenizer *tok)
{
    const char *dir = NULL, *kind = zt_ckpt_tokenizer_kind(c, &dir);
    if (!strcmp(kind, "byte"))
        return zt_tokenizer_byte_init(tok);
    if (!strcmp(kind, "bpe")) {
        if (!bpe_dir && !dir)
            return ckpt_missing(c, "", "tokenizer.dir", "a directory");
        return zt_tokenizer_bpe_init(tok, bpe_dir ? bpe_dir : dir);
    }
    if (strcmp(kind, "char") != 0) {
        char hint[256];
        ckpt_text_models_hint(hint, sizeof hint);
        return zt_fail(ZT_ERR_USAGE, hint, "checkpoint %s has no tokenizer (model %s)", c->path,
                       ckpt_str(c, "model.name") ? ckpt_str(c, "model.name") : "?");
    }
    json_t *v = ckpt_at(c->root, "tokenizer.vocabulary");
    if (!json_is_string(v))
        return ckpt_missing(c, "", "tokenizer.vocabulary", "a string");
    return zt_tokenizer_char_init(tok, json_string_value(v), json_string_length(v), c->path);
}

zt_status zt_ckpt_check_tokenizer(const zt_ckpt *c, const zt_tokenizer *tok)
{
    static const char *kinds[] = {"char", "byte", "bpe"};
    const char *kind = zt_ckpt_tokenizer_kind(c, NULL);
    int64_t size = -1;
    json_t *jv = ckpt_at(c->root, "tokenizer.vocab_size");
    if (json_is_integer(jv))
        size = json_integer_value(jv);
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

/* ---- Validation. ---- */

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
    for (const zt_model_arg *r; (r = ckpt_arg_next(a->name, &i));) {
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
    int64_t n_params = 0;
    json_t *jp = ckpt_at(c->root, "model.n_params");
    if (json_is_integer(jp))
        n_params = json_integer_value(jp);
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

/* What a resumed run takes over, read in full before anything is changed. */
typedef struct {
    int64_t global_steps, skipped_steps, global_samples, optim_steps;
    zt_sched_state sched;   /* last_batch_iteration read */
    zt_scaler_state scaler; /* what zt_scaler_state_set takes over read */
    double *loss, *loss_scale; /* global_steps each */
} ckpt_state;

static void ckpt_state_free(ckpt_state *s)
{
    free(s->loss);
    free(s->loss_scale);
    s->loss = s->loss_scale = NULL;
}

static zt_status ckpt_history(const zt_ckpt *c, const char *key, int64_t n, double **out)
{
    json_t *a = ckpt_at(c->root, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)n) {
        char what[64];
        snprintf(what, sizeof what, "an array of %lld numbers", (long long)n);
        return ckpt_missing(c, "", key, what);
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

static zt_status ckpt_read_state(const zt_ckpt *c, ckpt_state *s)
{
    memset(s, 0, sizeof *s);
    s->global_steps = c->global_steps;
    ZT_TRY(ckpt_int(c, c->root, "", "training.skipped_steps", 0, &s->skipped_steps));
    ZT_TRY(ckpt_int(c, c->root, "", "training.global_samples", 0, &s->global_samples));
    ZT_TRY(ckpt_int(c, c->root, "", "optimizer.step", 0, &s->optim_steps));
    ZT_TRY(ckpt_int(c, c->root, "", "scheduler.last_batch_iteration", -1,
                    &s->sched.last_batch_iteration));
    s->scaler.dynamic = json_is_true(ckpt_at(c->root, "loss_scaler.dynamic"));
    ZT_TRY(ckpt_real_at(c, "loss_scaler.cur_scale", &s->scaler.cur_scale));
    ZT_TRY(ckpt_int(c, c->root, "", "loss_scaler.cur_iter", 0, &s->scaler.cur_iter));
    ZT_TRY(ckpt_int(c, c->root, "", "loss_scaler.last_overflow_iter", -1,
                    &s->scaler.last_overflow_iter));
    ZT_TRY(ckpt_int(c, c->root, "", "loss_scaler.cur_hysteresis", 0,
                    &s->scaler.cur_hysteresis));
    ZT_TRY(ckpt_history(c, "history.loss", s->global_steps, &s->loss));
    return ckpt_history(c, "history.loss_scale", s->global_steps, &s->loss_scale);
}

/* Everything a resumed run must share with the saved one to continue it. */
static zt_status ckpt_check_training(const zt_ckpt *c, const ckpt_src *t,
                                     const zt_ckpt_meta *meta)
{
    const char *mine[2];
    int n = ckpt_state_names(&t->s.cfg->optimizer, mine);
    json_t *theirs = ckpt_at(c->root, "optimizer.state_sections");
    bool same = (int)json_array_size(theirs) == n;
    for (int k = 0; same && k < n; k++) {
        json_t *v = json_array_get(theirs, (size_t)k);
        same = json_is_string(v) && !strcmp(json_string_value(v), mine[k]);
    }
    if (!same) {
        const char *type = ckpt_str(c, "optimizer.type");
        return zt_fail(ZT_ERR_USAGE,
                       "resume with the optimizer the checkpoint was trained with (Adam and "
                       "AdamW share their state; SGD with momentum keeps another)",
                       "checkpoint %s holds the state of optimizer %s; this run's %s keeps %d "
                       "state section(s) of another kind",
                       c->path, type ? type : "?", zt_optim_type_name(t->s.cfg->optimizer.type), n);
    }
    int64_t tb, samples;
    ZT_TRY(ckpt_int(c, c->root, "", "training.train_batch_size", 1, &tb));
    if (tb != t->s.cfg->train_batch_size)
        return zt_fail(ZT_ERR_USAGE,
                       "keep train_batch_size when resuming (micro batch x gradient accumulation "
                       "x ranks): the data order depends on it",
                       "checkpoint %s was trained with train_batch_size %lld; this run's is %lld",
                       c->path, (long long)tb, (long long)t->s.cfg->train_batch_size);
    ZT_TRY(ckpt_int(c, c->root, "", "sampler.n_samples", 1, &samples));
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

/* ---- Shard files. ---- */

static zt_status ckpt_shard_path(const zt_ckpt *c, int r, char *path)
{
    char name[96];
    ckpt_shard_name(name, sizeof name, r);
    return ckpt_path(path, c->dir, c->tag, name);
}

static zt_status ckpt_open_shard(const zt_ckpt *c, int r, int *fd)
{
    char path[CKPT_PATH_MAX];
    ZT_TRY(ckpt_shard_path(c, r, path));
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return zt_fail(errno == ENOENT ? ZT_ERR_DATA : ZT_ERR_IO, ckpt_hint_resave,
                       "checkpoint shard %s %s: %s", path,
                       errno == ENOENT ? "is missing" : "cannot be read", strerror(errno));
    return ZT_OK;
}

/* n bytes at offset, all of them. */
static zt_status ckpt_pread(int fd, void *buf, size_t n, int64_t offset, const char *path)
{
    char *p = buf;
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(offset + (int64_t)done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                           "checkpoint shard %s: cannot read %zu bytes at offset %lld: %s", path,
                           n, (long long)offset, r < 0 ? strerror(errno) : "the file ends early");
        done += (size_t)r;
    }
    return ZT_OK;
}

/* Shard r against the manifest: size, header, CRC-32 of the whole file. */
static zt_status ckpt_verify_shard(const zt_ckpt *c, int r)
{
    char path[CKPT_PATH_MAX];
    int fd;
    ZT_TRY(ckpt_shard_path(c, r, path));
    ZT_TRY(ckpt_open_shard(c, r, &fd));
    zt_status st = ZT_OK;
    struct stat sb;
    uint64_t hb = zt_ckpt_header_bytes((uint32_t)c->n_units);
    uint64_t want = hb + (uint64_t)c->n_sections * (uint64_t)c->partition_numel * 4;
    if (fstat(fd, &sb) != 0)
        st = zt_fail(ZT_ERR_IO, "", "cannot stat checkpoint shard %s: %s", path, strerror(errno));
    else if ((uint64_t)sb.st_size != c->file_bytes[r] || c->file_bytes[r] != want)
        st = zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                     "checkpoint shard %s is %lld bytes; the manifest says %llu (the layout "
                     "needs %llu): the file is truncated or was replaced",
                     path, (long long)sb.st_size, (unsigned long long)c->file_bytes[r],
                     (unsigned long long)want);
    uint8_t *buf = st == ZT_OK ? malloc(CKPT_READ_CHUNK > hb ? CKPT_READ_CHUNK : hb) : NULL;
    zt_ckpt_unit *units = st == ZT_OK ? calloc((size_t)c->n_units, sizeof *units) : NULL;
    if (st == ZT_OK && (!buf || !units))
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate a read buffer for %s", path);
    zt_ckpt_header h = {.units = units};
    if (st == ZT_OK)
        st = ckpt_pread(fd, buf, hb, 0, path);
    if (st == ZT_OK)
        st = zt_ckpt_header_decode(buf, hb, path, (uint32_t)c->n_units, &h);
    if (st == ZT_OK) {
        bool same = h.rank == (uint32_t)r && h.partition_count == (uint32_t)c->partition_count &&
                    h.n_units == (uint32_t)c->n_units &&
                    h.n_sections == (uint32_t)c->n_sections &&
                    h.partition_numel == c->partition_numel;
        for (int u = 0; same && u < c->n_units; u++)
            same = !memcmp(&units[u], &c->units[u], sizeof *units);
        if (!same)
            st = zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                         "checkpoint shard %s: its header (rank %u of %u, %u units, %u sections) "
                         "does not match the manifest %s",
                         path, h.rank, h.partition_count, h.n_units, h.n_sections, c->path);
    }
    uint32_t crc = 0;
    for (uint64_t off = 0; st == ZT_OK && off < want; off += CKPT_READ_CHUNK) {
        size_t n = want - off < CKPT_READ_CHUNK ? (size_t)(want - off) : CKPT_READ_CHUNK;
        st = ckpt_pread(fd, buf, n, (int64_t)off, path);
        crc = zt_ckpt_crc32(crc, buf, n);
    }
    if (st == ZT_OK && crc != c->file_crc[r])
        st = zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                     "checkpoint shard %s is corrupted: CRC-32 %08x, the manifest says %08x",
                     path, crc, c->file_crc[r]);
    close(fd);
    free(buf);
    free(units);
    return st;
}

/* Shards r with r % size == rank (a world checks each file once). */
static zt_status ckpt_verify(const zt_ckpt *c, int rank, int size)
{
    for (int r = rank; r < c->partition_count; r += size)
        ZT_TRY(ckpt_verify_shard(c, r));
    return ZT_OK;
}

/* Reads ranges of sections out of the shard files, opening each once. */
typedef struct {
    const zt_ckpt *c;
    int *fds;
    zt_ckpt_piece *pieces; /* partition_count + 2 */
} ckpt_reader;

static zt_status ckpt_reader_init(ckpt_reader *r, const zt_ckpt *c)
{
    r->c = c;
    r->fds = malloc((size_t)c->partition_count * sizeof *r->fds);
    r->pieces = malloc((size_t)(c->partition_count + 2) * sizeof *r->pieces);
    if (!r->fds || !r->pieces)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the checkpoint reader");
    for (int i = 0; i < c->partition_count; i++)
        r->fds[i] = -1;
    return ZT_OK;
}

static void ckpt_reader_free(ckpt_reader *r)
{
    for (int i = 0; r->fds && i < r->c->partition_count; i++)
        if (r->fds[i] >= 0)
            close(r->fds[i]);
    free(r->fds);
    free(r->pieces);
}

/* Elements [lo, hi) of unit u's section k into dst (zero past the unit). */
static zt_status ckpt_read_range(ckpt_reader *r, int u, int k, int64_t lo, int64_t hi,
                                 float *dst)
{
    const zt_ckpt *c = r->c;
    const zt_ckpt_unit *cu = &c->units[u];
    memset(dst, 0, (size_t)(hi - lo) * sizeof *dst);
    int n = zt_ckpt_pieces(cu->numel, cu->shard_numel, lo, hi, r->pieces);
    int64_t base = (int64_t)zt_ckpt_header_bytes((uint32_t)c->n_units);
    for (int i = 0; i < n; i++) {
        const zt_ckpt_piece *p = &r->pieces[i];
        if (r->fds[p->src_rank] < 0)
            ZT_TRY(ckpt_open_shard(c, p->src_rank, &r->fds[p->src_rank]));
        int64_t at = base + ((int64_t)k * c->partition_numel + cu->part_offset + p->src_offset) *
                                (int64_t)sizeof(float);
        char path[CKPT_PATH_MAX];
        ZT_TRY(ckpt_shard_path(c, p->src_rank, path));
        ZT_TRY(ckpt_pread(r->fds[p->src_rank], dst + p->dst_offset,
                          (size_t)p->numel * sizeof(float), at, path));
    }
    return ZT_OK;
}

/* This rank's span of every unit, `sections` sections of it. */
static zt_status ckpt_load_spans(const zt_ckpt *c, zt_trainer *t, const ckpt_src *v,
                                 int sections)
{
    const zt_layout *lay = v->s.layout;
    int64_t max_span = 0;
    zt_trainer_span sp;
    for (int u = 0; u < lay->n_units; u++) {
        zt_trainer_unit_span(t, u, &sp);
        max_span = sp.numel > max_span ? sp.numel : max_span;
    }
    ckpt_reader rd;
    float *buf = malloc((size_t)max_span * sizeof *buf);
    zt_status st = ckpt_reader_init(&rd, c);
    if (st == ZT_OK && !buf)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats to stage the checkpoint",
                     (long long)max_span);
    for (int u = 0; st == ZT_OK && u < lay->n_units; u++) {
        zt_trainer_unit_span(t, u, &sp);
        for (int k = 0; st == ZT_OK && k < sections; k++) {
            st = ckpt_read_range(&rd, u, k, sp.lo, sp.lo + sp.numel, buf);
            float *dst = k == 0 ? sp.values : sp.state[k - 1];
            size_t bytes = (size_t)sp.numel * sizeof *buf;
            if (st == ZT_OK && sp.loc == ZT_MEM_HOST)
                memcpy(dst, buf, bytes);
            else if (st == ZT_OK)
                v->s.be->copy_h2d(v->s.be, dst, buf, bytes);
        }
    }
    ckpt_reader_free(&rd);
    free(buf);
    return st;
}

static zt_status ckpt_apply_state(zt_trainer *t, const ckpt_state *s)
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
    ckpt_src v;
    ckpt_src_get(t, &v);
    const zt_world *w = v.s.world;
    ckpt_state state;
    memset(&state, 0, sizeof state);
    zt_status st = ckpt_check_model(c, &meta->model, v.s.model);
    if (st == ZT_OK && !weights_only)
        st = ckpt_check_training(c, &v, meta);
    if (st == ZT_OK && !weights_only)
        st = ckpt_read_state(c, &state);
    st = ckpt_agree(w, st);
    if (st == ZT_OK)
        st = ckpt_agree(w, ckpt_verify(c, w->rank, w->size));
    if (st == ZT_OK)
        st = ckpt_agree(w, ckpt_load_spans(c, t, &v, weights_only ? 1 : c->n_sections));
    if (st == ZT_OK)
        st = ckpt_agree(w, zt_trainer_refresh_params(t));
    if (st == ZT_OK && !weights_only)
        st = ckpt_agree(w, ckpt_apply_state(t, &state));
    ckpt_state_free(&state);
    return st;
}

/* ---- Consolidation. ---- */

/* FILE.json: each tensor's name, shape and place in FILE. */
static zt_status ckpt_tensor_index(const zt_ckpt *c, char **out)
{
    json_t *units = ckpt_at(c->root, "model.units"), *index = json_array();
    int bad = 0;
    int64_t offset = 0;
    for (int u = 0; u < c->n_units; u++) {
        json_t *ju = json_array_get(units, (size_t)u);
        json_t *jn = json_object_get(ju, "name"), *tensors = json_object_get(ju, "tensors");
        int64_t unit_numel = 0;
        for (size_t i = 0; json_is_string(jn) && i < json_array_size(tensors); i++) {
            json_t *jt = json_array_get(tensors, i), *shape = json_object_get(jt, "shape");
            json_t *tn = json_object_get(jt, "name");
            int64_t numel = 1;
            for (size_t d = 0; d < json_array_size(shape); d++)
                numel *= json_integer_value(json_array_get(shape, d));
            if (!json_is_string(tn) || !json_is_array(shape) || numel <= 0)
                bad++;
            char name[160];
            snprintf(name, sizeof name, "%s.%s", json_string_value(jn),
                     json_is_string(tn) ? json_string_value(tn) : "?");
            ckpt_append(index,
                        json_pack("{sssOsIsIsI}", "name", name, "shape", shape, "numel",
                                  (json_int_t)numel, "offset", (json_int_t)offset, "byte_offset",
                                  (json_int_t)(offset * (int64_t)sizeof(float))),
                        &bad);
            offset += numel;
            unit_numel += numel;
        }
        if (!json_is_string(jn) || unit_numel != c->units[u].numel)
            bad++;
    }
    *out = bad ? NULL : json_dumps(index, JSON_INDENT(1));
    json_decref(index);
    if (!*out)
        return zt_fail(ZT_ERR_DATA, ckpt_hint_resave,
                       "checkpoint manifest %s: model.units does not describe the layout's "
                       "tensors",
                       c->path);
    return ZT_OK;
}

/* Writes to path.tmp and renames it over path. */
static zt_status ckpt_commit(const char *tmp, const char *path)
{
    if (rename(tmp, path) != 0)
        return zt_fail(ZT_ERR_IO, "check the output directory", "cannot rename %s to %s: %s", tmp,
                       path, strerror(errno));
    return ZT_OK;
}

zt_status zt_ckpt_consolidate(const zt_ckpt *c, const char *out_path)
{
    char tmp[CKPT_PATH_MAX], side[CKPT_PATH_MAX], side_tmp[CKPT_PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out_path) >= (int)sizeof tmp ||
        snprintf(side, sizeof side, "%s.json", out_path) >= (int)sizeof side ||
        snprintf(side_tmp, sizeof side_tmp, "%s.json.tmp", out_path) >= (int)sizeof side_tmp)
        return zt_fail(ZT_ERR_USAGE, "use a shorter --out", "output path too long");
    char *index = NULL;
    ZT_TRY(ckpt_tensor_index(c, &index));
    zt_status st = ckpt_verify(c, 0, 1);
    int64_t max_numel = 1;
    for (int u = 0; u < c->n_units; u++)
        max_numel = c->units[u].numel > max_numel ? c->units[u].numel : max_numel;
    ckpt_reader rd;
    float *buf = malloc((size_t)max_numel * sizeof *buf);
    if (st == ZT_OK)
        st = ckpt_reader_init(&rd, c);
    else
        rd = (ckpt_reader){.c = c};
    if (st == ZT_OK && !buf)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats", (long long)max_numel);
    ckpt_out o = {.fd = -1};
    if (st == ZT_OK)
        st = ckpt_out_open(&o, tmp);
    for (int u = 0; st == ZT_OK && u < c->n_units; u++) {
        st = ckpt_read_range(&rd, u, 0, 0, c->units[u].numel, buf);
        if (st == ZT_OK)
            st = ckpt_out_write(&o, buf, (size_t)c->units[u].numel * sizeof *buf);
    }
    st = ckpt_out_close(&o, st);
    if (st == ZT_OK)
        st = ckpt_write_file(side_tmp, index, strlen(index), NULL);
    if (st == ZT_OK)
        st = ckpt_commit(tmp, out_path);
    if (st == ZT_OK)
        st = ckpt_commit(side_tmp, side);
    if (st != ZT_OK) {
        unlink(tmp);
        unlink(side_tmp);
    }
    ckpt_reader_free(&rd);
    free(buf);
    free(index);
    return st;
}
