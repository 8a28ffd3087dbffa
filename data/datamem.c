/*
 * datamem: what loading a data set holds on the host (data/datamem.h).
 */
#include "data/datamem.h"

#include <stdio.h>
#include <string.h>

int zt_ids_width(int64_t vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }

void zt_ids_store(void *dst, int w, int64_t at, const int32_t *src, int64_t n)
{
    if (w == 1) {
        uint8_t *d = (uint8_t *)dst + at;
        for (int64_t i = 0; i < n; i++)
            d[i] = (uint8_t)src[i];
    } else if (w == 2) {
        uint16_t *d = (uint16_t *)dst + at;
        for (int64_t i = 0; i < n; i++)
            d[i] = (uint16_t)src[i];
    } else {
        memcpy((int32_t *)dst + at, src, (size_t)n * sizeof *src);
    }
}

void zt_ids_load(int32_t *dst, const void *src, int w, int64_t at, int64_t n)
{
    if (w == 1) {
        const uint8_t *s = (const uint8_t *)src + at;
        for (int64_t i = 0; i < n; i++)
            dst[i] = s[i];
    } else if (w == 2) {
        const uint16_t *s = (const uint16_t *)src + at;
        for (int64_t i = 0; i < n; i++)
            dst[i] = s[i];
    } else {
        memcpy(dst, (const int32_t *)src + at, (size_t)n * sizeof *dst);
    }
}

void zt_datamem_update(zt_data_memory *m)
{
    m->held_bytes = m->ids_bytes + m->index_bytes + m->tokenizer_bytes;
    if (m->held_bytes + m->buffer_bytes > m->peak_bytes)
        m->peak_bytes = m->held_bytes + m->buffer_bytes;
}

int64_t zt_datamem_grow(const zt_data_memory *m, const zt_data_budget *b, uint64_t part_bytes,
                        int64_t cap, int64_t need, int64_t first, uint64_t unit)
{
    int64_t want = 2 * cap > need ? 2 * cap : need;
    if (want < first)
        want = first;
    if (!b || b->bytes == ZT_DATA_NO_LIMIT)
        return want;
    uint64_t others = m->ids_bytes + m->index_bytes + m->tokenizer_bytes + m->buffer_bytes -
                      part_bytes;
    uint64_t room = b->bytes > others ? (b->bytes - others) / unit : 0;
    if ((uint64_t)want > room && (uint64_t)need <= room)
        want = (int64_t)room;
    return want;
}

const char *zt_datamem_size(uint64_t bytes, char *buf, size_t n)
{
    double b = (double)bytes;
    if (b >= 1024.0 * 1024.0 * 1024.0)
        snprintf(buf, n, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
    else if (b >= 1024.0 * 1024.0)
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024.0));
    else if (b >= 1024.0)
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
    return buf;
}

#define DATAMEM_HINT                                                                               \
    "use a smaller data file, fewer ranks per node (each rank loads its own copy of the "          \
    "data), or give the job more memory (ulimit -v, the memory cgroup)"

zt_status zt_datamem_fit(const zt_data_memory *m, const zt_data_budget *b, const char *path,
                         const char *when)
{
    uint64_t held = m->ids_bytes + m->index_bytes + m->tokenizer_bytes;
    uint64_t need = held + m->buffer_bytes;
    if (!b || b->bytes == ZT_DATA_NO_LIMIT || need <= b->bytes)
        return ZT_OK;
    char s[6][32];
    char index[96] = "";
    if (m->index_bytes)
        snprintf(index, sizeof index, ", review index %s",
                 zt_datamem_size(m->index_bytes, s[3], sizeof s[3]));
    return zt_fail(ZT_ERR_OOM, DATAMEM_HINT,
                   "not enough host memory to load %s (%s on disk): this rank would hold %s "
                   "(token ids %s for %lld tokens of %d byte(s)%s, tokenizer %s, read buffers "
                   "%s)%s, but %s",
                   path, zt_datamem_size(m->file_bytes, s[0], sizeof s[0]),
                   zt_datamem_size(need, s[1], sizeof s[1]),
                   zt_datamem_size(m->ids_bytes, s[2], sizeof s[2]), (long long)m->tokens,
                   m->token_bytes, index, zt_datamem_size(m->tokenizer_bytes, s[4], sizeof s[4]),
                   zt_datamem_size(m->buffer_bytes, s[5], sizeof s[5]), when, b->why);
}

zt_status zt_datamem_oom(const char *name, uint64_t bytes, const char *purpose,
                         uint64_t text_bytes)
{
    char s[2][32], hint[512];
    if (text_bytes)
        snprintf(hint, sizeof hint,
                 "the text is %s; loaded, its token ids take 1, 2 or 4 bytes each (by the "
                 "vocabulary's size), up to one per byte of text: %s",
                 zt_datamem_size(text_bytes, s[1], sizeof s[1]), DATAMEM_HINT);
    else
        snprintf(hint, sizeof hint, "give the job more memory (ulimit -v, the memory cgroup), or "
                                    "run fewer ranks per node: each rank loads its own copy");
    return zt_fail(ZT_ERR_OOM, hint,
                   "out of memory loading %s: cannot allocate %s (%llu bytes) for %s", name,
                   zt_datamem_size(bytes, s[0], sizeof s[0]), (unsigned long long)bytes, purpose);
}

json_t *zt_datamem_json(const zt_data_memory *m)
{
    return json_pack("{s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I}", "file_bytes",
                     (json_int_t)m->file_bytes, "tokens", (json_int_t)m->tokens, "token_bytes",
                     m->token_bytes, "ids_bytes", (json_int_t)m->ids_bytes, "index_bytes",
                     (json_int_t)m->index_bytes, "tokenizer_bytes",
                     (json_int_t)m->tokenizer_bytes, "held_bytes", (json_int_t)m->held_bytes,
                     "load_peak_bytes", (json_int_t)m->peak_bytes);
}
