/*
 * format: the pure parts of the checkpoint format (ckpt.h describes it):
 * CRC-32, the shard header's encoding, the arithmetic that cuts a unit's
 * saved slices into the pieces a new layout needs, the names of the
 * optimizer's state sections and the model arguments a manifest records. No
 * I/O; the first three are unit-tested in tests/unit/test_ckpt.c.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <pthread.h>
#include <string.h>

const char *const zt_ckpt_hint_resave =
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
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint shard %s is truncated: %zu bytes, shorter than its header",
                       path, len);
    if (memcmp(buf, ZT_CKPT_MAGIC, sizeof ZT_CKPT_MAGIC) != 0)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "%s is not a zerotrain checkpoint shard (bad magic)", path);
    h->version = ckpt_le32(buf + 8);
    if (h->version != ZT_CKPT_SHARD_VERSION)
        return zt_fail(ZT_ERR_DATA, "use the zerotrain version that wrote it",
                       "checkpoint shard %s has format version %u; this zerotrain reads %d", path,
                       h->version, ZT_CKPT_SHARD_VERSION);
    h->header_bytes = ckpt_le32(buf + 12);
    h->rank = ckpt_le32(buf + 16);
    h->partition_count = ckpt_le32(buf + 20);
    h->stage = ckpt_le32(buf + 24);
    h->n_units = ckpt_le32(buf + 28);
    h->n_sections = ckpt_le32(buf + 32);
    h->partition_numel = (int64_t)ckpt_le64(buf + 40);
    h->data_bytes = ckpt_le64(buf + 48);
    if (h->n_units > max_units || h->header_bytes != zt_ckpt_header_bytes(h->n_units))
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
                       "checkpoint shard %s: header of %u units (%llu bytes) does not fit the "
                       "manifest's %u units",
                       path, h->n_units, (unsigned long long)h->header_bytes, max_units);
    if (len < h->header_bytes)
        return zt_fail(ZT_ERR_DATA, zt_ckpt_hint_resave,
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

/* ---- State sections. ---- */

int zt_ckpt_state_names(const zt_optim_config *o, const char **names)
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

/* ---- Model arguments. ---- */

/* The registry's schema is the one list of a model's arguments: the manifest
 * records exactly its rows, so a new argument needs no change here. */
const zt_model_arg *zt_ckpt_arg_next(const char *model, int *i)
{
    int n;
    const zt_model_arg *rows = zt_model_args_schema(&n);
    for (; *i < n; (*i)++)
        if (!strcmp(rows[*i].model, model))
            return &rows[(*i)++];
    return NULL;
}
