/*
 * shards: reading saved shard files. Verification checks each file against
 * the manifest (size, header, CRC-32 of the whole file) before anything is
 * loaded; the reader then assembles any element range of a unit from the
 * saved slices that overlap it, reading only those bytes, so a checkpoint
 * loads at any new world size (resharding) without a copy of the model.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/path.h"

#define CKPT_READ_CHUNK (1u << 20)

static zt_status ckpt_shard_path(const zt_ckpt *c, int r, char *path)
{
    char name[96];
    zt_ckpt_shard_name(name, sizeof name, r);
    return zt_ckpt_path(path, c->dir, c->tag, name);
}

static zt_status ckpt_open_shard(const zt_ckpt *c, int r, int *fd)
{
    char path[ZT_CKPT_PATH_MAX];
    ZT_TRY(ckpt_shard_path(c, r, path));
    /* A missing shard is a damaged checkpoint; a FIFO, a symlink loop or a
     * denied read is named as what it is, with its own hint. */
    zt_status st = zt_path_open_read(path, "checkpoint shard", zt_ckpt_hint_resave, fd);
    if (st != ZT_OK && errno == ENOENT)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave, "checkpoint shard %s is missing: %s",
                       path, strerror(ENOENT));
    return st;
}

/* The open shard r (fd) has the manifest's size (which the open checked
 * against the layout). */
static zt_status ckpt_shard_size(const zt_ckpt *c, int r, int fd, const char *path)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return zt_fail(ZT_ERR_IO, "", "cannot stat checkpoint shard %s: %s", path,
                       strerror(errno));
    if ((uint64_t)sb.st_size != c->file_bytes[r])
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint shard %s is %lld bytes; the manifest says %llu: the file is "
                       "truncated or was replaced",
                       path, (long long)sb.st_size, (unsigned long long)c->file_bytes[r]);
    return ZT_OK;
}

zt_status zt_ckpt_check_sizes(const zt_ckpt *c)
{
    for (int r = 0; r < c->partition_count; r++) {
        char path[ZT_CKPT_PATH_MAX];
        int fd;
        ZT_TRY(ckpt_shard_path(c, r, path));
        ZT_TRY(ckpt_open_shard(c, r, &fd));
        zt_status st = ckpt_shard_size(c, r, fd, path);
        close(fd);
        ZT_TRY(st);
    }
    return ZT_OK;
}

/* Shard r against the manifest: size, header, CRC-32 of the whole file. */
static zt_status ckpt_verify_shard(const zt_ckpt *c, int r)
{
    char path[ZT_CKPT_PATH_MAX];
    int fd;
    ZT_TRY(ckpt_shard_path(c, r, path));
    ZT_TRY(ckpt_open_shard(c, r, &fd));
    uint64_t hb = zt_ckpt_header_bytes((uint32_t)c->n_units);
    uint64_t want = c->file_bytes[r];
    zt_status st = ckpt_shard_size(c, r, fd, path);
    uint8_t *buf = st == ZT_OK ? malloc(CKPT_READ_CHUNK > hb ? CKPT_READ_CHUNK : hb) : NULL;
    zt_ckpt_unit *units = st == ZT_OK ? calloc((size_t)c->n_units, sizeof *units) : NULL;
    if (st == ZT_OK && (!buf || !units))
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate a read buffer for %s", path);
    zt_ckpt_header h = {.units = units};
    if (st == ZT_OK)
        st = zt_ckpt_pread(fd, buf, hb, 0, path);
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
            st = zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                         "checkpoint shard %s: its header (rank %u of %u, %u units, %u sections) "
                         "does not match the manifest %s",
                         path, h.rank, h.partition_count, h.n_units, h.n_sections, c->path);
    }
    uint32_t crc = 0;
    for (uint64_t off = 0; st == ZT_OK && off < want; off += CKPT_READ_CHUNK) {
        size_t n = want - off < CKPT_READ_CHUNK ? (size_t)(want - off) : CKPT_READ_CHUNK;
        st = zt_ckpt_pread(fd, buf, n, (int64_t)off, path);
        crc = zt_ckpt_crc32(crc, buf, n);
    }
    if (st == ZT_OK && crc != c->file_crc[r])
        st = zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                     "checkpoint shard %s is corrupted: CRC-32 %08x, the manifest says %08x",
                     path, crc, c->file_crc[r]);
    close(fd);
    free(buf);
    free(units);
    return st;
}

zt_status zt_ckpt_verify(const zt_ckpt *c, int rank, int size)
{
    for (int r = rank; r < c->partition_count; r += size)
        ZT_TRY(ckpt_verify_shard(c, r));
    return ZT_OK;
}

zt_status zt_ckpt_reader_init(zt_ckpt_reader *r, const zt_ckpt *c)
{
    r->c = c;
    r->fds = malloc((size_t)c->partition_count * sizeof *r->fds);
    /* Marked unopened before anything can fail: zt_ckpt_reader_free closes
     * every entry that is not -1. */
    for (int i = 0; r->fds && i < c->partition_count; i++)
        r->fds[i] = -1;
    r->pieces = malloc((size_t)(c->partition_count + 2) * sizeof *r->pieces);
    if (!r->fds || !r->pieces)
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the checkpoint reader");
    return ZT_OK;
}

void zt_ckpt_reader_free(zt_ckpt_reader *r)
{
    for (int i = 0; r->fds && i < r->c->partition_count; i++)
        if (r->fds[i] >= 0)
            close(r->fds[i]);
    free(r->fds);
    free(r->pieces);
}

zt_status zt_ckpt_read_range(zt_ckpt_reader *r, int u, int k, int64_t lo, int64_t hi,
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
        char path[ZT_CKPT_PATH_MAX];
        ZT_TRY(ckpt_shard_path(c, p->src_rank, path));
        ZT_TRY(zt_ckpt_pread(r->fds[p->src_rank], dst + p->dst_offset,
                             (size_t)p->numel * sizeof(float), at, path));
    }
    return ZT_OK;
}
