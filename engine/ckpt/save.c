/*
 * save: the collective save (ckpt.h gives the sequence): every writing rank
 * writes its shard into DIR/<tag>.partial, rank 0 writes the manifest and
 * publishes the directory as DIR/<tag>, then DIR/latest, then applies
 * keep_last; and the check that a --save-dir can be written before training.
 */
#include "engine/ckpt/ckpt_impl.h"
#include "engine/comm/comm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Slices of other stages' units travel to their shard's writer with this tag
 * (world communicator, host MPI: not training traffic). */
#define CKPT_PIPE_TAG 17

/* Unit g's slice of section k from this rank's span into `stage` (a host
 * buffer) when it is not host memory already; *out is where it is. */
static zt_status ckpt_slice(zt_trainer *t, const zt_ckpt_src *v, const zt_layout *full, int g,
                            uint32_t k, float *stage, const float **out)
{
    zt_trainer_span sp;
    ZT_TRY(zt_trainer_unit_span(t, g - zt_pipe_first_unit(v->s.pipe), &sp));
    const zt_unit_layout *ul = &full->units[g];
    const float *src = (k == 0 ? sp.values : sp.state[k - 1]) +
                       ((int64_t)full->rank * ul->shard_numel - sp.lo);
    *out = src;
    if (sp.loc == ZT_MEM_DEVICE) {
        v->s.be->copy_d2h(v->s.be, stage, src, (size_t)ul->shard_numel * sizeof(float));
        *out = stage;
    }
    return ZT_OK;
}

/* This rank's shard: the header, then each section's slices of every unit of
 * the whole model; units of other pipeline stages arrive from the rank of
 * that stage with the same partition rank (ckpt_send_slices), in order. A
 * failed write keeps receiving, so no sender is left waiting. */
static zt_status ckpt_write_shard(zt_trainer *t, const zt_ckpt_src *v, const zt_layout *full,
                                  const char *path, float *stage, zt_ckpt_out *o)
{
    const zt_layout *lay = full;
    const zt_pipe *pipe = v->s.pipe;
    zt_trainer_span sp;
    *o = (zt_ckpt_out){.fd = -1, .path = path, .hint = zt_ckpt_hint_write};
    ZT_TRY(zt_trainer_unit_span(t, 0, &sp));
    uint32_t n_sections = 1 + (uint32_t)sp.n_states;
    zt_ckpt_unit *units = calloc((size_t)lay->n_units, sizeof *units);
    uint8_t *head = malloc(zt_ckpt_header_bytes((uint32_t)lay->n_units));
    zt_status st = ZT_OK;
    if (!units || !head)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the header of checkpoint shard %s", path);
    if (st == ZT_OK)
        st = zt_ckpt_out_open(o, path, NULL);
    if (st == ZT_OK) {
        for (int u = 0; u < lay->n_units; u++)
            units[u] = (zt_ckpt_unit){lay->units[u].numel, lay->units[u].padded_numel,
                                      lay->units[u].shard_numel, lay->units[u].part_offset};
        zt_ckpt_header h = {.version = ZT_CKPT_SHARD_VERSION,
                            .rank = (uint32_t)lay->rank,
                            .partition_count = (uint32_t)lay->world_size,
                            .stage = (uint32_t)v->s.cfg->zero.stage,
                            .n_units = (uint32_t)lay->n_units,
                            .n_sections = n_sections,
                            .partition_numel = lay->partition_numel,
                            .units = units};
        zt_ckpt_header_encode(&h, head);
        st = zt_ckpt_out_write(o, head, zt_ckpt_header_bytes(h.n_units));
    }
    /* Every slice a later stage sends is received even after a local
     * failure, so that stage is not left waiting; not after a failed
     * receive (a lost peer), which ends the loop. */
    bool receiving = true;
    for (uint32_t k = 0; k < n_sections && receiving; k++)
        for (int g = 0; g < lay->n_units && receiving; g++) {
            int owner = zt_pipe_unit_stage(pipe, g);
            int64_t numel = lay->units[g].shard_numel;
            const float *src = stage;
            if (owner == pipe->stage) {
                if (st == ZT_OK)
                    st = ckpt_slice(t, v, full, g, k, stage, &src);
            } else {
                MPI_Comm comm = v->s.world->comm;
                MPI_Request r;
                zt_status rs = zt_comm_mpi_wait(
                    comm,
                    MPI_Irecv(stage, (int)numel, MPI_FLOAT,
                              zt_pipe_world_rank(pipe, owner, pipe->dp_rank), CKPT_PIPE_TAG, comm,
                              &r),
                    &r, "receive of a checkpoint slice", numel);
                receiving = rs == ZT_OK;
                if (st == ZT_OK)
                    st = rs;
            }
            if (st == ZT_OK)
                st = zt_ckpt_out_write(o, src, (size_t)numel * sizeof(float));
        }
    st = zt_ckpt_out_close(o, st);
    free(units);
    free(head);
    return st;
}

/* A later pipeline stage's part of its partition rank's shard: its units'
 * slices, section by section, in the writer's order. */
static zt_status ckpt_send_slices(zt_trainer *t, const zt_ckpt_src *v, const zt_layout *full,
                                  float *stage)
{
    const zt_pipe *pipe = v->s.pipe;
    zt_trainer_span sp;
    zt_status st = zt_trainer_unit_span(t, 0, &sp);
    int first = zt_pipe_first_unit(pipe);
    for (uint32_t k = 0; k < 1 + (uint32_t)sp.n_states && st == ZT_OK; k++)
        for (int g = first; g < first + pipe->stage_model.n_units && st == ZT_OK; g++) {
            const float *src = NULL;
            st = ckpt_slice(t, v, full, g, k, stage, &src);
            int64_t numel = full->units[g].shard_numel;
            MPI_Comm comm = v->s.world->comm;
            MPI_Request r;
            if (st == ZT_OK)
                st = zt_comm_mpi_wait(comm,
                                      MPI_Isend(src, (int)numel, MPI_FLOAT,
                                                zt_pipe_world_rank(pipe, 0, pipe->dp_rank),
                                                CKPT_PIPE_TAG, comm, &r),
                                      &r, "send of a checkpoint slice to its shard's writer",
                                      numel);
        }
    return st;
}

/* Renames the finished partial directory to DIR/<tag>: atomically exchanged
 * with an older DIR/<tag> when there is one (which is then removed). */
static zt_status ckpt_publish(const char *dir, const char *partial, const char *final)
{
    ZT_TRY(zt_ckpt_sync_dir(partial));
    struct stat sb;
    bool exists = lstat(final, &sb) == 0;
    int rc;
    if (!exists) {
        rc = rename(partial, final);
    } else {
        rc = renameat2(AT_FDCWD, partial, AT_FDCWD, final, RENAME_EXCHANGE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
            /* No exchange on this file system: move the old one aside first. */
            char old[ZT_CKPT_PATH_MAX + 8];
            snprintf(old, sizeof old, "%s.old", partial);
            zt_ckpt_remove_tree(old);
            rc = rename(final, old);
            if (rc == 0)
                rc = rename(partial, final);
            if (rc == 0)
                zt_ckpt_remove_tree(old);
        } else if (rc == 0) {
            zt_ckpt_remove_tree(partial);
        }
    }
    if (rc != 0)
        return zt_fail(ZT_ERR_IO, zt_ckpt_hint_write, "cannot rename %s to %s: %s", partial, final,
                       strerror(errno));
    return zt_ckpt_sync_dir(dir);
}

static zt_status ckpt_write_latest(const char *dir, const char *tag)
{
    char tmp[ZT_CKPT_PATH_MAX], latest[ZT_CKPT_PATH_MAX];
    ZT_TRY(zt_ckpt_path(tmp, dir, "latest.tmp", NULL));
    ZT_TRY(zt_ckpt_path(latest, dir, "latest", NULL));
    ZT_TRY(zt_ckpt_write_file(tmp, tag, strlen(tag), NULL, NULL));
    if (rename(tmp, latest) != 0)
        return zt_fail(ZT_ERR_IO, zt_ckpt_hint_write, "cannot rename %s to %s: %s", tmp, latest,
                       strerror(errno));
    return zt_ckpt_sync_dir(dir);
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
        char path[ZT_CKPT_PATH_MAX];
        struct stat sb;
        if (s < 0 || s > step || zt_ckpt_path(path, dir, e->d_name, NULL) != ZT_OK ||
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
        char name[64], path[ZT_CKPT_PATH_MAX];
        snprintf(name, sizeof name, "global_step%lld", (long long)steps[i]);
        st = zt_ckpt_path(path, dir, name, NULL);
        if (st == ZT_OK && zt_ckpt_remove_tree(path) != 0)
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
        char probe[ZT_CKPT_PATH_MAX];
        char name[64];
        snprintf(name, sizeof name, ".zt-write-test-%ld", (long)getpid());
        st = zt_ckpt_mkdirs(dir);
        if (st == ZT_OK)
            st = zt_ckpt_path(probe, dir, name, NULL);
        if (st == ZT_OK) {
            int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (fd < 0 || close(fd) != 0)
                st = zt_fail(ZT_ERR_IO, "choose a --save-dir you can write to",
                             "cannot create files in checkpoint directory %s: %s", dir,
                             strerror(errno));
            unlink(probe);
        }
    }
    return zt_ckpt_agree(w, st);
}

zt_status zt_ckpt_save(zt_trainer *t, const zt_ckpt_meta *meta, const char *dir,
                       int64_t keep_last, zt_ckpt_saved *out)
{
    zt_ckpt_src v;
    zt_ckpt_src_get(t, &v);
    const zt_world *w = v.s.world;
    const zt_pipe *pipe = v.s.pipe;
    zt_ckpt_stall_if_asked(w->rank);
    /* The shards hold the whole model laid out over the partition ranks (a
     * pipeline stage's layout is the same for its units), so a checkpoint
     * saved at any P loads at any other. */
    zt_layout full;
    const zt_layout *stage_layout = v.s.layout;
    ZT_TRY(zt_ckpt_agree(w, zt_layout_init(&full, v.s.model, &v.s.cfg->zero,
                                           stage_layout->world_size, stage_layout->rank)));
    v.s.layout = &full;
    const zt_layout *lay = &full;
    double t0 = zt_ckpt_now();
    memset(out, 0, sizeof *out);
    snprintf(out->tag, sizeof out->tag, "global_step%lld", (long long)v.c.global_steps);
    zt_ckpt_fail_after_init();

    char partial_name[96], name[96];
    char partial[ZT_CKPT_PATH_MAX], final[ZT_CKPT_PATH_MAX], shard[ZT_CKPT_PATH_MAX];
    snprintf(partial_name, sizeof partial_name, "%s.partial", out->tag);
    zt_status st = zt_ckpt_path(partial, dir, partial_name, NULL);
    if (st == ZT_OK)
        st = zt_ckpt_path(final, dir, out->tag, NULL);
    if (st == ZT_OK && w->rank == 0) {
        st = zt_ckpt_mkdirs(dir);
        if (st == ZT_OK && zt_ckpt_remove_tree(partial) != 0)
            st = zt_fail(ZT_ERR_IO, zt_ckpt_hint_write, "cannot remove the stale %s: %s", partial,
                         strerror(errno));
        if (st == ZT_OK && mkdir(partial, 0755) != 0)
            st = zt_fail(ZT_ERR_IO, zt_ckpt_hint_write, "cannot create checkpoint directory %s: %s",
                         partial, strerror(errno));
    }
    /* One unit slice of host staging, agreed on before any slice moves: a
     * writer that could not receive would leave its senders waiting. */
    float *stage = malloc((size_t)(lay->max_unit_numel / lay->world_size) * sizeof(float));
    if (st == ZT_OK && !stage)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate the staging of a checkpoint slice");
    st = zt_ckpt_agree(w, st);
    if (st != ZT_OK) {
        free(stage);
        zt_layout_free(&full);
        return st;
    }

    /* The first partition group writes (MiCS replicas hold the same slices);
     * with pipelining the first stage's ranks, the others send them their
     * units. */
    uint64_t mine[2] = {0, 0};
    zt_ckpt_shard_name(name, sizeof name, lay->rank);
    st = zt_ckpt_path(shard, partial, name, NULL);
    bool part_writer = pipe->dp_rank < lay->world_size;
    if (st == ZT_OK && part_writer && pipe->stage == 0) {
        zt_ckpt_out o;
        st = ckpt_write_shard(t, &v, &full, shard, stage, &o);
        mine[0] = o.bytes;
        mine[1] = o.crc;
    } else if (part_writer) {
        st = ckpt_send_slices(t, &v, &full, stage);
    }
    free(stage);
    st = zt_ckpt_agree(w, st);
    uint64_t *all = w->rank == 0 ? malloc((size_t)w->size * 2 * sizeof *all) : NULL;
    if (st == ZT_OK && w->rank == 0 && !all)
        st = zt_fail(ZT_ERR_OOM, "", "cannot gather the shard checksums");
    st = zt_ckpt_agree(w, st);
    MPI_Request gather;
    if (st == ZT_OK)
        st = zt_comm_mpi_wait(
            w->comm, MPI_Igather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, w->comm, &gather),
            &gather, "gather of the shard sizes", 2);

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
            st = zt_ckpt_manifest_text(&v, meta, out->tag, bytes, crc, &text);
        char path[ZT_CKPT_PATH_MAX];
        if (st == ZT_OK)
            st = zt_ckpt_path(path, partial, ZT_CKPT_MANIFEST, NULL);
        if (st == ZT_OK)
            st = zt_ckpt_write_file(path, text, strlen(text), NULL, NULL);
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
    zt_layout_free(&full);
    st = zt_ckpt_agree(w, st);
    /* Nothing of a failed save may look like a checkpoint. */
    if (st != ZT_OK && w->rank == 0)
        zt_ckpt_remove_tree(partial);
    out->seconds = zt_ckpt_now() - t0;
    return st;
}

