/*
 * devices: which device and communicator each rank uses, and building them.
 * One rank per device, device = local_rank % device count; several ranks may
 * share a GPU only through the staged MPI comm (NCCL needs one GPU per rank).
 * zt_device_choose turns --device/--comm into that choice (a pure function);
 * zt_world_devices makes every rank take the same decision and builds the
 * backend and the world's communicator.
 *
 * Memory: the backend and comm zt_world_devices initialises are the caller's
 * (zt_backend_free, zt_comm_free). Collective: zt_world_devices.
 */
#ifndef ZT_DEVICES_H
#define ZT_DEVICES_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/backend.h"
#include "engine/comm/comm.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/world/world.h"

typedef enum { ZT_COMM_USE_MPI = 0, ZT_COMM_USE_STAGED, ZT_COMM_USE_NCCL } zt_comm_use;

/* What --device and --comm ask for, and what the binary and the node offer. */
typedef struct {
    const char *device; /* "auto", "cpu" or "cuda" */
    const char *comm;   /* "auto", "mpi" or "nccl" */
    bool cuda_built, nccl_built;
    int gpu_count;          /* GPUs per node (the minimum over all ranks) */
    bool shared;            /* another rank of this host uses the same GPU (by its id) */
    const char *no_gpu_why; /* why gpu_count is 0 */
    bool gpu_driver;        /* an NVIDIA driver is loaded on this host (/proc/driver/nvidia) */
    int local_rank, local_size;
} zt_device_request;

typedef struct {
    zt_device_kind device;
    zt_comm_use comm;   /* MPI on the CPU; staged MPI or NCCL on CUDA */
    int ordinal;        /* CUDA device of this rank */
    char notice[200];   /* one line for the user when auto chose for them ("" if none) */
    char why[200];      /* why this device and comm, always (zerotrain check prints it) */
} zt_device_choice;

/* auto picks CUDA when the binary has it and a GPU answers, else the CPU,
 * with a notice only where a GPU was to be expected: a CUDA build on a host
 * whose NVIDIA driver is loaded (a CPU-only build, or a host without the
 * driver, runs on the CPU as a matter of course: the summary line says so);
 * comm auto picks NCCL on CUDA when it is built and every rank of the
 * node has a GPU of its own, else the staged MPI comm (with a notice). An
 * explicit request that cannot be met is an error naming what is missing. */
zt_status zt_device_choose(const zt_device_request *req, zt_device_choice *out);

/* Before MPI starts: unless --device is cpu, makes device local_rank % count
 * current, the local rank read from the launcher's environment (Open MPI's
 * OMPI_COMM_WORLD_LOCAL_RANK, Slurm's SLURM_LOCALID, MPICH's MPI_LOCALRANKID
 * or PMI_LOCAL_RANK), so no rank's context lands on device 0 by accident.
 * Nothing happens without a GPU or a local rank. */
void zt_devices_select_early(const char *device);

/* What the user asked for: --device, --comm ("auto", ...), --tf32,
 * --fused-ops ("off" clears the backend's fused ops; NULL or "on" keeps them),
 * --typed-tensors ("off" leaves the backend's typed ops fp32 only, so 16-bit
 * units run on fp32 copies; NULL or "on" keeps what the backend takes). */
typedef struct {
    const char *device, *comm;
    bool tf32;
    const char *fused_ops, *typed_tensors;
} zt_device_flags;

/* Every rank takes the same decision from the smallest GPU count of any node,
 * builds its backend on local_rank % count (16-bit GEMM operands in
 * gemm_dtype) into *be and the world's communicator into *comm. Whether ranks
 * share a GPU is decided by gathering each rank's device id over its host,
 * never by counting (CUDA_VISIBLE_DEVICES may show each rank only its own
 * GPU). Rank 0 prints an auto choice's notice to notice_to. */
zt_status zt_world_devices(const zt_world *w, const zt_device_flags *f, zt_dtype gemm_dtype,
                           zt_backend *be, zt_comm *comm, FILE *notice_to);
/* The same, also handing back the choice (with its `why`) in *chosen. */
zt_status zt_world_devices_chosen(const zt_world *w, const zt_device_flags *f,
                                  zt_dtype gemm_dtype, zt_backend *be, zt_comm *comm,
                                  FILE *notice_to, zt_device_choice *chosen);

#endif
