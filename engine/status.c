#include "engine/status.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char zt_msg[8192]; /* room for a config's list of errors */
static _Thread_local char zt_hint_buf[1024];
static _Thread_local char zt_where[256];
static _Thread_local int zt_origin = -1;
static int zt_rank = -1;

void zt_status_set_rank(int rank) { zt_rank = rank; }

zt_status zt_fail_at(zt_status st, const char *file, int line, const char *hint,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(zt_msg, sizeof zt_msg, fmt, ap);
    va_end(ap);
    snprintf(zt_hint_buf, sizeof zt_hint_buf, "%s", hint ? hint : "");
    snprintf(zt_where, sizeof zt_where, "%s:%d", file, line);
    zt_origin = -1;
    return st;
}

zt_status zt_fail_from(zt_status st, int origin, const char *hint, const char *msg)
{
    snprintf(zt_msg, sizeof zt_msg, "%s", msg);
    snprintf(zt_hint_buf, sizeof zt_hint_buf, "%s", hint ? hint : "");
    snprintf(zt_where, sizeof zt_where, "rank %d", origin);
    zt_origin = origin;
    return st;
}

int zt_status_origin(void) { return zt_origin; }

const char *zt_status_message(void) { return zt_msg; }
const char *zt_status_hint(void) { return zt_hint_buf; }
const char *zt_status_where(void) { return zt_where; }
int zt_status_rank(void) { return zt_rank; }

void zt_status_clear(void)
{
    zt_msg[0] = zt_hint_buf[0] = zt_where[0] = '\0';
    zt_origin = -1;
}

const char *zt_status_name(zt_status st)
{
    switch (st) {
    case ZT_OK: return "ok";
    case ZT_ERR_USAGE: return "usage";
    case ZT_ERR_CONFIG: return "config";
    case ZT_ERR_IO: return "io";
    case ZT_ERR_DATA: return "data";
    case ZT_ERR_OOM: return "out of memory";
    case ZT_ERR_COMM: return "comm";
    case ZT_ERR_DEVICE: return "device";
    case ZT_ERR_UNSUPPORTED: return "unsupported";
    case ZT_ERR_NUMERIC: return "numeric";
    case ZT_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}
