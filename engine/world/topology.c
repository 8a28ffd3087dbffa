/*
 * topology: every rank's host and device (engine/world/topology.h).
 */
#include "engine/world/topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zt_topology_uuid(const char *hex, char *out, size_t n)
{
    if (strlen(hex) != 32 || strspn(hex, "0123456789abcdef") != 32) {
        snprintf(out, n, "%s", hex);
        return;
    }
    snprintf(out, n, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

zt_status zt_topology_gather(const zt_world *w, const zt_backend *be, int ordinal,
                             zt_topology_rank **out)
{
    zt_topology_rank mine;
    memset(&mine, 0, sizeof mine);
    mine.rank = w->rank;
    mine.host_index = w->host_index;
    MPI_Comm_rank(w->host_comm, &mine.host_rank);
    MPI_Comm_size(w->host_comm, &mine.host_size);
    mine.node = w->node;
    mine.local_rank = w->local_rank;
    mine.local_size = w->local_size;
    snprintf(mine.host, sizeof mine.host, "%s", w->host);
    zt_device_mem mi;
    memset(&mi, 0, sizeof mi);
    if (be->kind == ZT_DEVICE_CPU) {
        snprintf(mine.device, sizeof mine.device, "cpu");
    } else {
        char uuid[64] = "";
        if (be->mem_info && be->mem_info(be, &mi) == ZT_OK)
            zt_topology_uuid(mi.id, uuid, sizeof uuid);
        snprintf(mine.device, sizeof mine.device, "%s:%d%s%s", be->name, ordinal,
                 uuid[0] ? " " : "", uuid);
    }
    zt_topology_rank *all = calloc((size_t)w->size, sizeof *all);
    int oom = !all, any_oom = 0;
    MPI_Allreduce(&oom, &any_oom, 1, MPI_INT, MPI_MAX, w->comm);
    if (any_oom) {
        free(all);
        return zt_fail(ZT_ERR_OOM, "", "cannot gather the topology of %d ranks", w->size);
    }
    if (MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                      w->comm) != MPI_SUCCESS) {
        free(all);
        return zt_fail(ZT_ERR_COMM, "", "cannot gather the topology of %d ranks", w->size);
    }
    *out = all;
    return ZT_OK;
}
