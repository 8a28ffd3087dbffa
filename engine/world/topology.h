/*
 * topology: where every rank runs and on which device, gathered to every
 * rank: its host (the shared-memory split, engine/world/world.h), its rank on
 * that host, its node group and local rank, and its device ("cpu", or
 * "cuda:ORDINAL" with the GPU's UUID in nvidia-smi's form, from the backend's
 * mem_info). `zerotrain check` prints it; a host's devices and which rank uses
 * which are read from it.
 *
 * Memory: zt_topology_gather allocates the array (size entries, in rank
 * order); the caller frees it with free(). Collective: zt_topology_gather.
 */
#ifndef ZT_WORLD_TOPOLOGY_H
#define ZT_WORLD_TOPOLOGY_H

#include "engine/backend.h"
#include "engine/status.h"
#include "engine/world/world.h"

typedef struct {
    int rank;
    int host_index, host_rank, host_size; /* the physical host and this rank's place on it */
    int node, local_rank, local_size;     /* the node group (simulated or a host) */
    char host[64];
    char device[96]; /* "cpu" or "cuda:0 GPU-8d3c...-..." */
} zt_topology_rank;

/* Every rank's entry to every rank; be is this rank's backend, on CUDA
 * device `ordinal`. */
zt_status zt_topology_gather(const zt_world *w, const zt_backend *be, int ordinal,
                             zt_topology_rank **out);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from 32 hex digits; other text
 * is copied as it is. */
void zt_topology_uuid(const char *hex, char *out, size_t n);

#endif
