/*
 * tensorboard: event files by hand (engine/monitor/tensorboard.h).
 */
#include "engine/monitor/tensorboard.h"

#include <errno.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "engine/path.h"

/* ------------------------------------------------------------------ CRC32C */

uint32_t zt_tb_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    static bool ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = true;
    }
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t zt_tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

/* ------------------------------------------------------------------ protobuf */

static size_t pb_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n] = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v)
            p[n] |= 0x80;
        n++;
    } while (v);
    return n;
}

static size_t pb_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

/* Event { wall_time, step (omitted when 0, as proto3 does), then `field`
 * (3: file_version, 5: summary) holding `len` bytes of `body` }. */
static size_t pb_event(uint8_t *buf, double wall_time, int64_t step, int field,
                       const uint8_t *body, size_t len)
{
    size_t n = 0;
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    buf[n++] = 0x09; /* field 1, fixed64 */
    n += pb_le(buf + n, bits, 8);
    if (step != 0) {
        buf[n++] = 0x10; /* field 2, varint */
        n += pb_varint(buf + n, (uint64_t)step);
    }
    buf[n++] = (uint8_t)(field << 3 | 2); /* length-delimited */
    n += pb_varint(buf + n, len);
    memcpy(buf + n, body, len);
    return n + len;
}

size_t zt_tb_encode_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                           const char *tag, float value)
{
    size_t tag_len = strlen(tag);
    if (cap < tag_len + 64)
        return 0;
    /* Value { tag = 1; simple_value = 2 } */
    uint8_t value_msg[512];
    if (tag_len + 16 > sizeof value_msg)
        return 0;
    size_t v = 0;
    value_msg[v++] = 0x0A;
    v += pb_varint(value_msg + v, tag_len);
    memcpy(value_msg + v, tag, tag_len);
    v += tag_len;
    uint32_t fbits;
    memcpy(&fbits, &value, sizeof fbits);
    value_msg[v++] = 0x15; /* field 2, fixed32 */
    v += pb_le(value_msg + v, fbits, 4);
    /* Summary { repeated Value value = 1 } */
    uint8_t summary[600];
    size_t s = 0;
    summary[s++] = 0x0A;
    s += pb_varint(summary + s, v);
    memcpy(summary + s, value_msg, v);
    s += v;
    return pb_event(buf, wall_time, step, 5, summary, s);
}

/* ------------------------------------------------------------------ records */

static double tb_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static void tb_write_failed(zt_tb_writer *w)
{
    if (!w->failed)
        fprintf(stderr, "zerotrain: warning: cannot write TensorBoard events to %s: %s; no "
                        "more are written\n",
                w->path, strerror(errno));
    w->failed = true;
}

/* One TFRecord: length, its masked CRC, the data, the data's masked CRC. */
static void tb_record(zt_tb_writer *w, const uint8_t *data, size_t len)
{
    if (!w->f || w->failed)
        return;
    uint8_t head[12], tail[4];
    pb_le(head, len, 8);
    pb_le(head + 8, zt_tb_mask_crc(zt_tb_crc32c(head, 8)), 4);
    pb_le(tail, zt_tb_mask_crc(zt_tb_crc32c(data, len)), 4);
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head ||
        fwrite(data, 1, len, w->f) != len || fwrite(tail, 1, sizeof tail, w->f) != sizeof tail)
        tb_write_failed(w);
}

zt_status zt_tb_open(zt_tb_writer *w, const char *dir)
{
    static int uid; /* files this process opened: TensorBoard's _global_uid */
    memset(w, 0, sizeof *w);
    const char *hint = "check tensorboard.output_path and tensorboard.job_name";
    ZT_TRY(zt_path_mkdirs(dir, "tensorboard", hint));
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir,
                     (long long)time(NULL), host, (long)getpid(), uid++);
    if (n >= (int)sizeof w->path)
        return zt_fail(ZT_ERR_IO, hint, "tensorboard directory %s: the path is too long", dir);
    w->f = fopen(w->path, "wb");
    if (!w->f)
        return zt_fail(ZT_ERR_IO, hint, "cannot create TensorBoard event file %s: %s", w->path,
                       strerror(errno));
    static const char version[] = "brain.Event:2";
    uint8_t buf[64];
    size_t len = pb_event(buf, tb_now(), 0, 3, (const uint8_t *)version, sizeof version - 1);
    tb_record(w, buf, len);
    zt_tb_flush(w);
    if (w->failed)
        return zt_fail(ZT_ERR_IO, hint, "cannot write TensorBoard event file %s", w->path);
    return ZT_OK;
}

void zt_tb_scalar(zt_tb_writer *w, const char *tag, double value, int64_t step)
{
    uint8_t buf[640];
    size_t len = zt_tb_encode_scalar(buf, sizeof buf, tb_now(), step, tag, (float)value);
    if (len > 0)
        tb_record(w, buf, len);
}

void zt_tb_flush(zt_tb_writer *w)
{
    if (w->f && !w->failed && fflush(w->f) != 0)
        tb_write_failed(w);
}

void zt_tb_close(zt_tb_writer *w)
{
    if (w->f && fclose(w->f) != 0 && !w->failed)
        tb_write_failed(w);
    w->f = NULL;
}
