/*
 * zs_nccl: what the simulator's two NCCL files share: the communicator
 * (nccl.cc makes and frees it; nccl_coll.cc runs its collectives) and the
 * registry of live communicators with their pending collectives, which a hang
 * report lists.
 *
 * Memory: a communicator is owned by its handle (ncclCommDestroy/Abort).
 * Thread safety: zs_nccl_lock guards the registry, `pending`, `completed`
 * and the error text; `issued` is the host's, `started` the device thread's.
 */
#ifndef ZS_SIM_NCCL_H
#define ZS_SIM_NCCL_H

/* MPI's C API only: Open MPI's C++ bindings do not build warning-free. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <list>
#include <set>
#include <string>

#include "tests/cudasim/sim/zs_impl.h"

/* A collective queued or in flight, for hang reports. */
struct zs_coll_note {
    uint64_t issue;
    std::string what; /* "ncclAllReduce #3 (256 x float32, sum)" */
    uint32_t stream;
    bool started;
};

struct ncclComm {
    MPI_Comm mpi; /* the collectives' (device thread) */
    MPI_Comm ctl; /* split and destroy (host thread) */
    int rank, nranks, device;
    std::string name; /* the same on every rank: "comm 0.1" or "comm 0.1/color 2" */
    uint64_t issued = 0;    /* collectives queued (host) */
    uint64_t started = 0;   /* collectives started (device thread) */
    uint64_t completed = 0; /* under zs_nccl_lock */
    std::atomic<int> async_error{ncclSuccess};
    bool broken = false; /* a collective timed out: the rest fail at once */
    std::list<zs_coll_note> pending;
};

std::mutex &zs_nccl_lock();
/* Every live communicator of this process. Lock held. */
std::set<ncclComm *> &zs_nccl_comms();
/* Records the text ncclGetLastError returns. */
void zs_nccl_set_error(const std::string &text);
/* A live communicator handle (not destroyed or aborted). */
bool zs_nccl_live(ncclComm *c);
/* The calling thread's ncclGroupStart nesting (nccl.cc). */
int zs_nccl_group_depth();
/* The outermost ncclGroupEnd: queues the calling thread's held sends and
 * receives (nccl_coll.cc). */
void zs_nccl_group_flush();

#endif
