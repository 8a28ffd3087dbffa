/*
 * world: the MPI job as zerotrain sees it. Initialises MPI (thread level
 * FUNNELED: only the main thread calls MPI; OpenMP threads only compute), finds
 * the rank, the world size, the local rank and node groups (shared-memory split
 * of MPI_COMM_WORLD, overridable with ZT_RANKS_PER_NODE so tests can simulate
 * several nodes on one machine). Running the binary without mpirun is a world
 * of one rank (Open MPI singleton).
 *
 * Devices: one rank per device, device = local_rank % device count; several
 * ranks may share a GPU only through the staged MPI comm (NCCL needs one GPU
 * per rank). zt_device_choose turns --device/--comm into that choice.
 *
 * Memory: the communicators are owned by the world and freed by zt_world_free.
 * Collective: zt_world_init, zt_world_free, zt_world_agree.
 */
#ifndef ZT_WORLD_H
#define ZT_WORLD_H

#include <mpi.h>
#include <stdbool.h>

#include "engine/backend.h"
#include "engine/status.h"

typedef struct {
    int rank, size;
    int local_rank, local_size; /* within the node group */
    int node, n_nodes;
    char host[64];
    MPI_Comm comm;      /* duplicate of MPI_COMM_WORLD */
    MPI_Comm node_comm; /* ranks of this node group */
} zt_world;

zt_status zt_world_init(zt_world *w, int *argc, char ***argv);
void zt_world_free(zt_world *w);

/* Every rank learns whether any rank failed: returns the first failing rank's
 * status (lowest rank wins) on all ranks and sets *failed_rank, or ZT_OK. Used
 * after steps where ranks may disagree (file reads) so no rank waits forever
 * in a later collective. */
zt_status zt_world_agree(const zt_world *w, zt_status local, int *failed_rank);

typedef enum { ZT_COMM_USE_MPI = 0, ZT_COMM_USE_STAGED, ZT_COMM_USE_NCCL } zt_comm_use;

/* What --device and --comm ask for, and what the binary and the node offer. */
typedef struct {
    const char *device; /* "auto", "cpu" or "cuda" */
    const char *comm;   /* "auto", "mpi" or "nccl" */
    bool cuda_built, nccl_built;
    int gpu_count;          /* GPUs per node (the minimum over all ranks) */
    const char *no_gpu_why; /* why gpu_count is 0 */
    int local_rank, local_size;
} zt_device_request;

typedef struct {
    zt_device_kind device;
    zt_comm_use comm;   /* MPI on the CPU; staged MPI or NCCL on CUDA */
    int ordinal;        /* CUDA device of this rank */
    char notice[200];   /* one line for the user when auto chose for them ("" if none) */
} zt_device_choice;

/* auto picks CUDA when the binary has it and a GPU answers, else the CPU with a
 * notice; comm auto picks NCCL on CUDA when it is built and every rank of the
 * node has a GPU of its own, else the staged MPI comm (with a notice). An
 * explicit request that cannot be met is an error naming what is missing. */
zt_status zt_device_choose(const zt_device_request *req, zt_device_choice *out);

#endif
