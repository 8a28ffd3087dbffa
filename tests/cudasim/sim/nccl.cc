/*
 * nccl: NCCL's communicators over MPI (tests/cudasim/include/nccl.h): unique
 * ids, ncclCommInitRank, ncclCommSplit, destroy and abort, the asynchronous
 * error, error strings and groups. The collectives are in nccl_coll.cc.
 *
 * A unique id names its creator (world rank) and a per-process counter. In
 * ncclCommInitRank every rank sends its rank and world rank to the creator
 * (who must be one of the ranks), which answers with the table of world
 * ranks; all then build the communicator with MPI_Comm_create_group, which
 * involves only them. This runs on the host thread over MPI_COMM_WORLD with
 * tags 20000-29999, with ZT_SIM_NCCL_TIMEOUT as its deadline. A communicator
 * holds two MPI communicators over its ranks: one for its collectives (the
 * device thread) and one for split and destroy (the host), since MPI forbids
 * two threads' collectives on one communicator at once.
 *
 * Like NCCL, init fails (ncclInvalidUsage, "Duplicate GPU detected") when two
 * ranks are on one GPU, told by the devices' UUIDs.
 *
 * Memory: a communicator is freed by ncclCommDestroy (which first waits for
 * its queued collectives) or ncclCommAbort (which does not; MPI
 * communicators with a collective still pending are then left to the
 * process's end). Thread safety: see zs_nccl.h.
 */
#include "tests/cudasim/sim/zs_nccl.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

namespace {

const uint32_t kIdMagic = 0x5a534e43; /* "ZSNC" */
const int kTagBase = 20000, kTagRange = 10000;

struct sim_id {
    uint32_t magic;
    int32_t creator; /* world rank */
    uint64_t counter;
    uint64_t salt;
};
static_assert(sizeof(sim_id) <= NCCL_UNIQUE_ID_BYTES, "the id fits ncclUniqueId");

/* What a joining rank tells the creator. */
struct join_msg {
    int32_t rank, world;
    uint64_t counter, salt;
};

std::mutex *g_lock = new std::mutex();
std::set<ncclComm *> *g_comms = new std::set<ncclComm *>();
std::string *g_last_error = new std::string();
thread_local int t_group_depth;

ncclResult_t fail(ncclResult_t rc, const std::string &text)
{
    zs_nccl_set_error(text);
    return rc;
}

/* MPI is there and lets the device thread call it beside the host's. */
ncclResult_t check_mpi(const char *call)
{
    int inited = 0, finalized = 0, level = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return fail(ncclInvalidUsage, zs_format("%s: the simulator's NCCL runs over MPI: call "
                                                "MPI_Init_thread first",
                                                call));
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
        return fail(ncclInvalidUsage, zs_format("%s: the simulator's NCCL needs "
                                                "MPI_THREAD_MULTIPLE (the device thread calls MPI)",
                                                call));
    return ncclSuccess;
}

/* Waits for an MPI request until the NCCL deadline; false on timeout. */
bool wait_deadline(MPI_Request *req, double deadline)
{
    for (;;) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done)
            return true;
        if (zs_now() > deadline)
            return false;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

ncclComm *make_comm(MPI_Comm mpi, int device, const std::string &name)
{
    ncclComm *c = new ncclComm();
    c->mpi = mpi;
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    MPI_Comm_dup(mpi, &c->ctl);
    MPI_Comm_set_errhandler(c->ctl, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mpi, &c->rank);
    MPI_Comm_size(mpi, &c->nranks);
    c->device = device;
    c->name = name;
    std::lock_guard<std::mutex> l(*g_lock);
    g_comms->insert(c);
    return c;
}

/* The creator's side of the rendezvous: the world rank of every rank. */
ncclResult_t gather_table(const sim_id &id, int nranks, int rank, int tag, double deadline,
                          std::vector<int> &table)
{
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    table.assign((size_t)nranks, -1);
    table[(size_t)rank] = world;
    for (int got = 1; got < nranks; got++) {
        join_msg m;
        MPI_Request req;
        MPI_Irecv(&m, (int)sizeof m, MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &req);
        if (!wait_deadline(&req, deadline)) {
            MPI_Cancel(&req);
            MPI_Request_free(&req);
            return fail(ncclSystemError,
                        zs_format("ncclCommInitRank: %d of %d ranks joined within %g s",
                                  got, nranks, zs_cfg().nccl_timeout_s));
        }
        if (m.counter != id.counter || m.salt != id.salt || m.rank < 0 || m.rank >= nranks ||
            table[(size_t)m.rank] != -1)
            return fail(ncclInvalidArgument,
                        zs_format("ncclCommInitRank: world rank %d joined as rank %d, which is "
                                  "taken or out of range, or with another id",
                                  m.world, m.rank));
        table[(size_t)m.rank] = m.world;
    }
    for (int r = 0; r < nranks; r++)
        if (r != rank)
            MPI_Send(table.data(), nranks, MPI_INT, table[(size_t)r], tag, MPI_COMM_WORLD);
    return ncclSuccess;
}

ncclResult_t join_table(const sim_id &id, int nranks, int rank, int tag, double deadline,
                        std::vector<int> &table)
{
    join_msg m;
    m.rank = rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &m.world);
    m.counter = id.counter;
    m.salt = id.salt;
    MPI_Request req;
    MPI_Isend(&m, (int)sizeof m, MPI_BYTE, id.creator, tag, MPI_COMM_WORLD, &req);
    if (!wait_deadline(&req, deadline)) {
        MPI_Cancel(&req);
        MPI_Request_free(&req);
        return fail(ncclSystemError,
                    zs_format("ncclCommInitRank: the id's creator (world rank %d) did not take "
                              "this rank's join within %g s (it must be one of the ranks)",
                              id.creator, zs_cfg().nccl_timeout_s));
    }
    table.assign((size_t)nranks, -1);
    MPI_Irecv(table.data(), nranks, MPI_INT, id.creator, tag, MPI_COMM_WORLD, &req);
    if (!wait_deadline(&req, deadline)) {
        MPI_Cancel(&req);
        MPI_Request_free(&req);
        return fail(ncclSystemError,
                    zs_format("ncclCommInitRank: not every rank joined within %g s",
                              zs_cfg().nccl_timeout_s));
    }
    return ncclSuccess;
}

} // namespace

/* ---- shared with nccl_coll.cc ---- */

std::mutex &zs_nccl_lock() { return *g_lock; }

std::set<ncclComm *> &zs_nccl_comms() { return *g_comms; }

void zs_nccl_set_error(const std::string &text)
{
    std::lock_guard<std::mutex> l(*g_lock);
    *g_last_error = text;
}

bool zs_nccl_live(ncclComm *c)
{
    std::lock_guard<std::mutex> l(*g_lock);
    return c && g_comms->count(c);
}

/* ---- the API ---- */

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *unique_id)
{
    static std::atomic<uint64_t> counter{0};
    if (!unique_id)
        return fail(ncclInvalidArgument, "ncclGetUniqueId: a null id");
    ncclResult_t rc = check_mpi("ncclGetUniqueId");
    if (rc != ncclSuccess)
        return rc;
    sim_id id;
    id.magic = kIdMagic;
    MPI_Comm_rank(MPI_COMM_WORLD, &id.creator);
    id.counter = counter++;
    id.salt = ((uint64_t)getpid() << 32) ^ (uint64_t)(zs_now() * 1e9);
    memset(unique_id, 0, sizeof *unique_id);
    memcpy(unique_id->internal, &id, sizeof id);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId comm_id,
                                         int rank)
{
    if (!comm)
        return fail(ncclInvalidArgument, "ncclCommInitRank: a null comm");
    *comm = NULL;
    ncclResult_t rc = check_mpi("ncclCommInitRank");
    if (rc != ncclSuccess)
        return rc;
    sim_id id;
    memcpy(&id, comm_id.internal, sizeof id);
    if (id.magic != kIdMagic || nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument,
                    zs_format("ncclCommInitRank: rank %d of %d, or an id not from "
                              "ncclGetUniqueId",
                              rank, nranks));
    if (zs_check_current() != cudaSuccess)
        return fail(ncclUnhandledCudaError, "ncclCommInitRank: no current CUDA device");
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    int tag = kTagBase + (int)(id.counter % kTagRange);
    double deadline = zs_now() + zs_cfg().nccl_timeout_s;
    std::vector<int> table;
    rc = world == id.creator ? gather_table(id, nranks, rank, tag, deadline, table)
                             : join_table(id, nranks, rank, tag, deadline, table);
    if (rc != ncclSuccess)
        return rc;
    MPI_Group wg, g;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, nranks, table.data(), &g);
    MPI_Comm mpi = MPI_COMM_NULL;
    int mrc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &mpi);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    if (mrc != MPI_SUCCESS || mpi == MPI_COMM_NULL)
        return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_create_group failed");
    /* NCCL refuses two ranks of one communicator on one GPU. */
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, zs_current_device());
    std::vector<cudaUUID_t> uuids((size_t)nranks);
    MPI_Allgather(&prop.uuid, (int)sizeof prop.uuid, MPI_BYTE, uuids.data(),
                  (int)sizeof prop.uuid, MPI_BYTE, mpi);
    for (int r = 0; r < nranks; r++)
        if (r != rank && memcmp(&uuids[(size_t)r], &prop.uuid, sizeof prop.uuid) == 0) {
            MPI_Comm_free(&mpi);
            return fail(ncclInvalidUsage,
                        zs_format("Duplicate GPU detected : rank %d and rank %d both on CUDA "
                                  "device %x000",
                                  rank, r, prop.pciBusID));
        }
    *comm = make_comm(mpi, zs_current_device(),
                      zs_format("comm %d.%llu", id.creator, (unsigned long long)id.counter));
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                      ncclConfig_t *config)
{
    if (!zs_nccl_live(comm) || !newcomm)
        return fail(ncclInvalidArgument, "ncclCommSplit: not a live communicator");
    if (config && !config->blocking)
        return fail(ncclInvalidArgument,
                    "ncclCommSplit: non-blocking communicators are not simulated");
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return fail(ncclInvalidArgument, "ncclCommSplit: a negative color");
    MPI_Comm part = MPI_COMM_NULL;
    if (MPI_Comm_split(comm->ctl, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key,
                       &part) != MPI_SUCCESS)
        return fail(ncclSystemError, "ncclCommSplit: MPI_Comm_split failed");
    *newcomm = part == MPI_COMM_NULL
                   ? NULL
                   : make_comm(part, comm->device, zs_format("%s/color %d", comm->name.c_str(), color));
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!zs_nccl_live(comm))
        return fail(ncclInvalidArgument, "ncclCommDestroy: not a live communicator");
    /* Queued collectives complete first (each ends, or fails by timeout). */
    for (;;) {
        {
            std::lock_guard<std::mutex> l(*g_lock);
            if (comm->completed == comm->issued) {
                g_comms->erase(comm);
                break;
            }
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    if (!comm->broken) {
        MPI_Comm_free(&comm->mpi);
        MPI_Comm_free(&comm->ctl);
    }
    delete comm;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!zs_nccl_live(comm))
        return fail(ncclInvalidArgument, "ncclCommAbort: not a live communicator");
    /* Queued collectives still reference it: they find it gone and fail, and
     * the record stays (its MPI communicators may have requests pending). */
    std::lock_guard<std::mutex> l(*g_lock);
    g_comms->erase(comm);
    comm->broken = true;
    comm->async_error = ncclInvalidUsage;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    if (!comm || !async_error)
        return ncclInvalidArgument;
    *async_error = (ncclResult_t)comm->async_error.load();
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!zs_nccl_live(comm) || !count)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!zs_nccl_live(comm) || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    case ncclNumResults:
        break;
    }
    return "unknown result code";
}

extern "C" const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    thread_local std::string copy;
    std::lock_guard<std::mutex> l(*g_lock);
    copy = *g_last_error;
    return copy.c_str();
}

extern "C" ncclResult_t ncclGroupStart(void)
{
    t_group_depth++;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void)
{
    if (t_group_depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--t_group_depth == 0)
        zs_nccl_group_flush();
    return ncclSuccess;
}

int zs_nccl_group_depth() { return t_group_depth; }
