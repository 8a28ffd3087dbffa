/*
 * comms_log: DeepSpeed's comms_logger from the comm counters
 * (engine/monitor/comms_log.h).
 */
#include "engine/monitor/comms_log.h"

#include <math.h>
#include <string.h>

_Static_assert(ZT_COMMS_OP_ALL_REDUCE == 1u << ZT_COMM_ALL_REDUCE &&
                   ZT_COMMS_OP_REDUCE_SCATTER == 1u << ZT_COMM_REDUCE_SCATTER &&
                   ZT_COMMS_OP_ALL_GATHER == 1u << ZT_COMM_ALL_GATHER &&
                   ZT_COMMS_OP_BROADCAST == 1u << ZT_COMM_BROADCAST &&
                   ZT_COMMS_OP_ALL_TO_ALL == 1u << ZT_COMM_ALL_TO_ALL &&
                   ZT_COMMS_OP_SEND == 1u << ZT_COMM_SEND &&
                   ZT_COMMS_OP_RECV == 1u << ZT_COMM_RECV,
               "the config's prof_ops bits follow zt_comm_kind");

const char *zt_comms_log_op_name(zt_comm_kind k)
{
    switch (k) {
    case ZT_COMM_ALL_REDUCE: return "all_reduce";
    case ZT_COMM_REDUCE_SCATTER: return "reduce_scatter_tensor";
    case ZT_COMM_ALL_GATHER: return "all_gather_into_tensor";
    case ZT_COMM_BROADCAST: return "broadcast";
    case ZT_COMM_ALL_TO_ALL: return "all_to_all_single";
    case ZT_COMM_SEND: return "send";
    case ZT_COMM_RECV: return "recv";
    case ZT_COMM_NKINDS: break;
    }
    return "unknown";
}

void zt_comms_log_size(double bytes, char *buf, size_t n)
{
    static const char *const names[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    if (bytes <= 0) {
        snprintf(buf, n, "0B");
        return;
    }
    int i = (int)floor(log(bytes) / log(1024.0));
    if (i < 0)
        i = 0;
    if (i > 5)
        i = 5;
    /* Python's round(x, 2) (halves to even) printed: at least one decimal, no
     * trailing zeros. */
    char num[48];
    snprintf(num, sizeof num, "%.2f", nearbyint(bytes / pow(1024.0, i) * 100.0) / 100.0);
    size_t len = strlen(num);
    while (len > 0 && num[len - 1] == '0' && num[len - 2] != '.')
        num[--len] = '\0';
    snprintf(buf, n, "%s %s", num, names[i]);
}

void zt_comms_log_init(zt_comms_log *l, const zt_config *cfg, const zt_trainer_stats *stats)
{
    memset(l, 0, sizeof *l);
    l->cfg = &cfg->comms_logger;
    l->on = cfg->comms_logger.enabled;
    for (int g = 0; g < ZT_STAGE_GROUP_N; g++) {
        const zt_comm *c = stats->groups[g];
        bool seen = !c;
        for (int k = 0; k < l->n_comms && !seen; k++)
            seen = l->comms[k] == c;
        if (!seen)
            l->comms[l->n_comms++] = c;
    }
    if (stats->pipe_group)
        l->comms[l->n_comms++] = stats->pipe_group;
    zt_comms_log_totals(l, l->last_calls, l->last_bytes);
}

static bool comms_selected(const zt_comms_log *l, int k)
{
    return l->cfg->prof_all || (l->cfg->prof_ops & (1u << k));
}

void zt_comms_log_totals(const zt_comms_log *l, uint64_t calls[ZT_COMM_NKINDS],
                         uint64_t bytes[ZT_COMM_NKINDS])
{
    for (int k = 0; k < ZT_COMM_NKINDS; k++) {
        calls[k] = bytes[k] = 0;
        for (int i = 0; i < l->n_comms && comms_selected(l, k); i++) {
            calls[k] += l->comms[i]->calls[k];
            bytes[k] += l->comms[i]->bytes[k];
        }
    }
}

void zt_comms_log_step(zt_comms_log *l, int64_t step, FILE *out)
{
    if (!l->on)
        return;
    uint64_t calls[ZT_COMM_NKINDS], bytes[ZT_COMM_NKINDS];
    zt_comms_log_totals(l, calls, bytes);
    for (int k = 0; k < ZT_COMM_NKINDS && l->cfg->verbose; k++) {
        uint64_t dc = calls[k] - l->last_calls[k], db = bytes[k] - l->last_bytes[k];
        if (dc == 0)
            continue;
        char size[32], total[32];
        zt_comms_log_size((double)db / (double)dc, size, sizeof size);
        zt_comms_log_size((double)db, total, sizeof total);
        fprintf(out, "[Rank 0] step=%lld comm op: %s | count: %llu | msg size: %s | total: %s\n",
                (long long)step, zt_comms_log_op_name((zt_comm_kind)k), (unsigned long long)dc,
                size, total);
    }
    memcpy(l->last_calls, calls, sizeof calls);
    memcpy(l->last_bytes, bytes, sizeof bytes);
}

void zt_comms_log_summary(const zt_comms_log *l, FILE *out)
{
    if (!l->on)
        return;
    uint64_t calls[ZT_COMM_NKINDS], bytes[ZT_COMM_NKINDS];
    zt_comms_log_totals(l, calls, bytes);
    fprintf(out, "%-20s%-20s%-20s%-20s\n", "Comm. Op", "Message Size", "Count", "Total Size");
    for (int k = 0; k < ZT_COMM_NKINDS; k++) {
        if (calls[k] == 0)
            continue;
        char size[32], total[32];
        zt_comms_log_size((double)bytes[k] / (double)calls[k], size, sizeof size);
        zt_comms_log_size((double)bytes[k], total, sizeof total);
        fprintf(out, "%s\n%-20s%-20s%-20llu%-20s\n", zt_comms_log_op_name((zt_comm_kind)k), "",
                size, (unsigned long long)calls[k], total);
    }
    fprintf(out, "(Message Size: the mean per call; latency and bandwidth are not measured: "
                 "zerotrain's collectives overlap compute and are not timed one by one)\n");
    fflush(out);
}
