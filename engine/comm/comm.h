/*
 * comm: the collective interface (all_reduce, reduce_scatter, all_gather,
 * broadcast, all_to_all, barrier, abort) and point-to-point transfers
 * (send_recv), a struct of function pointers with one instance per backend.
 * Each collective takes an optional request: NULL blocks; a request
 * makes it non-blocking and the caller later calls `wait` (and may call `test`
 * in between to drive progress, which MPI needs to overlap with compute).
 * This is how overlap_comm overlaps gradient reduction with backward.
 *
 * Elements are of the call's dtype (engine/dtype.h). Sums always add in fp32:
 * 16-bit elements are widened, added and rounded back once per addition (what
 * NCCL does for half types), never added in 16-bit arithmetic. MAX compares
 * the values; for 16-bit elements a NaN on any rank wins, for fp32 NaN
 * handling is MPI_MAX's (the trainer's overflow check does not rely on it).
 *
 * Backends:
 * - MPI (zt_comm_mpi_init): host buffers; float32 through MPI_FLOAT, 16-bit
 *   elements through a 2-byte MPI type with user-defined SUM and MAX operations
 *   (created once per process, freed by MPI_Finalize).
 * - staged MPI (zt_comm_staged_init): device buffers of a backend whose memory
 *   is not host memory (CUDA); each call copies through page-locked host
 *   buffers around the MPI collective, so several ranks can share one GPU.
 *   Every buffer is copied (a host buffer too, through the backend's copies).
 *   Every call completes before it returns (a request comes back already
 *   complete), so overlap_comm has nothing to overlap on this path.
 * - NCCL (zt_comm_nccl_init): device buffers, collectives on a dedicated comm
 *   stream. A collective waits (on the device) for the work the compute stream
 *   queued before it; `wait` makes the compute stream wait for the collective,
 *   so the host never blocks on it and the buffer is ready for the next op.
 *
 * Sequence numbers: every collective of a comm takes the next number (from 1),
 * identical on all ranks because collectives are called in the same order.
 *
 * Watchdog: a collective that has not completed ZT_COMM_TIMEOUT seconds (default
 * 600, 0 turns it off) after it was issued fails with ZT_ERR_COMM naming the
 * collective, its sequence number, its size and the rank, instead of hanging.
 * MPI runs every collective as a blocking call on its comm thread
 * (engine/comm/worker.h) and the caller sleeps until it is done or the limit
 * passes, so waiting costs no CPU of its own; NCCL has a thread that watches
 * the comm stream, aborts the NCCL communicator and then the job, because the
 * host may be blocked in a device synchronisation where no status can be
 * returned. Before it fails, the watchdog asks the other ranks which of them
 * still answer (engine/comm/peers.h) and names the ranks and hosts that do not.
 *
 * Counters: every call adds the bytes (elements times the dtype's size) of the
 * whole logical buffer it covers to its kind: all_reduce and broadcast the
 * buffer; reduce_scatter the full input (recv_numel * size); all_gather the
 * full output (send_numel * size); all_to_all the full send buffer (numel *
 * size, this rank's own block included). So a
 * reduce-scatter plus an all-gather of Psi elements count Psi each, exactly the
 * ZeRO paper's volume terms. A communicator of one rank counts nothing.
 * send_recv counts each transfer's bytes, sent as ZT_COMM_SEND, received as
 * ZT_COMM_RECV.
 *
 * Memory: buffers belong to the caller and must stay untouched until the
 * request completes. The comm owns its (duplicated) MPI communicators: `mpi`,
 * which only the comm's own collectives use (they may be running on the comm
 * thread), and `side`, over the same ranks, for the caller's own MPI calls
 * (norms, dumps, checks) at any time.
 * Collective: every operation except `test`, `wait` and the counters must be
 * called by all ranks of the communicator in the same order.
 */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/comm/worker.h"
#include "engine/dtype.h"
#include "engine/status.h"

typedef enum {
    ZT_COMM_ALL_REDUCE = 0,
    ZT_COMM_REDUCE_SCATTER,
    ZT_COMM_ALL_GATHER,
    ZT_COMM_BROADCAST,
    ZT_COMM_ALL_TO_ALL,
    ZT_COMM_SEND, /* point to point (send_recv), counted per direction */
    ZT_COMM_RECV,
    ZT_COMM_NKINDS
} zt_comm_kind;

typedef enum { ZT_RED_SUM = 0, ZT_RED_MAX } zt_red_op;

/* One point-to-point transfer of send_recv: numel elements of dt from buf to
 * rank `peer` of the comm, or from `peer` into buf (recv). */
typedef struct {
    void *buf;
    int64_t numel;
    zt_dtype dt;
    int peer;
    bool recv;
} zt_comm_xfer;

/* The most transfers one send_recv issues together. */
#define ZT_COMM_MAX_XFERS 2

/* A pending non-blocking collective. Caller-owned storage; a request that is
 * not pending (zt_comm_req_none) waits for nothing. */
typedef struct {
    /* What is pending, for the watchdog's message. */
    zt_comm_kind kind;
    uint64_t seq;
    int64_t numel;
    zt_dtype dt;
    double t_issued; /* MPI_Wtime() at issue */
    /* NCCL: the event recorded on the comm stream after the collective. */
    void *event;
    /* MPI: the collective as a task of the comm thread. */
    zt_comm_task task;
    bool pending;
} zt_comm_req;

/* A request with nothing in flight (wait and test return at once). */
static inline void zt_comm_req_none(zt_comm_req *req) { req->pending = false; }

typedef struct zt_comm zt_comm;

typedef struct {
    zt_status (*all_reduce)(zt_comm *c, void *buf, int64_t numel, zt_dtype dt, zt_red_op op,
                            zt_comm_req *req);
    /* recv(recv_numel) = op over ranks of send[rank*recv_numel : (rank+1)*recv_numel] */
    zt_status (*reduce_scatter)(zt_comm *c, const void *send, void *recv, int64_t recv_numel,
                                zt_dtype dt, zt_red_op op, zt_comm_req *req);
    /* recv(send_numel * size): rank r's send lands at recv[r*send_numel]. send may
     * alias that slot (in place). */
    zt_status (*all_gather)(zt_comm *c, const void *send, void *recv, int64_t send_numel,
                            zt_dtype dt, zt_comm_req *req);
    zt_status (*broadcast)(zt_comm *c, void *buf, int64_t numel, zt_dtype dt, int root,
                           zt_comm_req *req);
    /* send and recv (numel * size each): block q of send (numel elements)
     * goes to rank q and lands at recv[rank * numel] there. Moves bits only
     * (no arithmetic), so any payload can travel as fp32 words. Not in place
     * (send and recv must not overlap). NCCL: grouped ncclSend/ncclRecv. */
    zt_status (*all_to_all)(zt_comm *c, const void *send, void *recv, int64_t numel,
                            zt_dtype dt, zt_comm_req *req);
    zt_status (*barrier)(zt_comm *c);
    /* Point to point, not collective: the n (<= ZT_COMM_MAX_XFERS) transfers
     * are issued together and complete as one request, so a send and a recv
     * with the same peer, in opposite directions, never wait on each other
     * (NCCL: one ncclGroupStart/End; MPI: Isend/Irecv on the comm thread). A
     * comm runs its calls in the order they were issued (the comm thread's
     * queue, NCCL's comm stream), each to completion: two ranks must issue
     * the transfers between them so that those orders match (the pipeline
     * schedule is built and tested for it). Transfers between one pair of
     * ranks in one direction are matched in the order they were issued.
     * Each transfer counts its bytes as ZT_COMM_SEND or ZT_COMM_RECV; the
     * request is described as RECV when the call receives anything, and its
     * sequence number is this rank's (ranks of a comm issue different
     * point-to-point calls, so their numbers differ). */
    zt_status (*send_recv)(zt_comm *c, const zt_comm_xfer *x, int n, zt_comm_req *req);
    /* true when the request has completed (then it needs no wait) */
    bool (*test)(zt_comm *c, zt_comm_req *req);
    zt_status (*wait)(zt_comm *c, zt_comm_req *req);
    /* Ends every rank of the job; does not return. */
    void (*abort)(zt_comm *c, int code);
    /* A comm of the same backend over the ranks of c that pass the same color,
     * ordered by key (MPI_Comm_split's rules); *out is caller storage, freed
     * with zt_comm_free. Collective over c. */
    zt_status (*split)(zt_comm *c, int color, int key, zt_comm *out);
    /* Releases what the backend holds (zt_comm_free calls it). */
    void (*free)(zt_comm *c);
} zt_comm_ops;

struct zt_comm {
    const char *name;
    const zt_comm_ops *ops;
    int rank, size;
    MPI_Comm mpi;      /* the comm's own collectives (and bootstrap) */
    MPI_Comm side;     /* the same ranks, for the caller's MPI calls beside them */
    void *impl;        /* backend state (staging buffers, NCCL communicator) */
    uint64_t seq;      /* sequence number of the last collective issued */
    double timeout_s;  /* watchdog limit, 0: off */
    uint64_t bytes[ZT_COMM_NKINDS];
    uint64_t calls[ZT_COMM_NKINDS];
    /* MPI: the request of a blocking collective, kept with the comm because a
     * wait that timed out leaves it on the comm thread's queue. */
    zt_comm_req sync_req;
    bool uses_worker;  /* holds a reference on the comm thread */
};

/* MPI backend over a duplicate of `parent`. Collective over `parent`. */
zt_status zt_comm_mpi_init(zt_comm *c, MPI_Comm parent);
/* MPI staged through host for device buffers of `be`. Collective over `parent`. */
zt_status zt_comm_staged_init(zt_comm *c, MPI_Comm parent, const zt_backend *be);
/* NCCL over the ranks of `parent` on be's device (zt_comm_bootstrap: rank 0
 * makes the unique id, MPI_Bcast, ncclCommInitRank). Compiled when the Makefile
 * finds NCCL (ZT_HAVE_NCCL); otherwise it fails with ZT_ERR_UNSUPPORTED.
 * Collective over `parent`. */
bool zt_comm_nccl_built(void);
zt_status zt_comm_nccl_init(zt_comm *c, MPI_Comm parent, const zt_backend *be);
/* The split every backend's ops->split does: MPI_Comm_split of c's ranks,
 * then `init` of that backend over the part, keeping c's watchdog limit.
 * Collective over c. */
typedef zt_status (*zt_comm_init_fn)(zt_comm *c, MPI_Comm parent, const zt_backend *be);
zt_status zt_comm_split_as(zt_comm *c, int color, int key, zt_comm *out, zt_comm_init_fn init,
                           const zt_backend *be);
/* Frees any backend's comm; a zeroed comm is fine. */
void zt_comm_free(zt_comm *c);

/* Every rank of mpi learns whether any rank failed (`local`); all return the
 * lowest failing rank's status, with its message ("STAGE failed on rank R:
 * ...") and hint on the others, so a rank that failed alone never leaves its
 * peers waiting in the next collective and whichever rank prints tells the
 * user what went wrong. Under the watchdog (zt_comm_mpi_wait): a rank that
 * never arrives fails the others after ZT_COMM_TIMEOUT. Collective over mpi. */
zt_status zt_comm_agree(MPI_Comm mpi, zt_status local, const char *stage);

/* The watchdog for MPI calls made outside a zt_comm (agreements, checkpoint
 * transfers): rc is what the non-blocking call that started r returned;
 * waits for r by polling and fails with the watchdog's message ("MPI WHAT
 * did not complete within ... s on rank R of N; ...", after
 * probing the peers) once ZT_COMM_TIMEOUT has passed, so a peer lost in the
 * middle of one does not hang the others. Otherwise ZT_OK, or the call's
 * MPI error as ZT_ERR_COMM (naming WHAT and its NUMEL elements). */
zt_status zt_comm_mpi_wait(MPI_Comm mpi, int rc, MPI_Request *r, const char *what,
                           int64_t numel);

/* The bootstrap every device communicator follows, kept apart from NCCL so its
 * sequencing is tested without a GPU: rank 0 calls make_id (id_bytes bytes into
 * id), every rank learns whether it worked, the id is broadcast, every rank
 * calls join(id, size, rank) and all ranks agree on the outcome, so a rank that
 * fails never leaves the others waiting. Collective over `mpi`. */
typedef struct {
    size_t id_bytes;
    zt_status (*make_id)(void *id, void *ctx);
    zt_status (*join)(const void *id, int nranks, int rank, void *ctx);
    void *ctx;
} zt_comm_bootstrap_fns;
zt_status zt_comm_bootstrap(MPI_Comm mpi, const zt_comm_bootstrap_fns *fns, void *id);

/* Clears *req and records what was just issued (kind, sequence number, size,
 * issue time), which every backend's request carries for the watchdog. */
void zt_comm_req_describe(zt_comm_req *req, zt_comm_kind kind, uint64_t seq, int64_t numel,
                          zt_dtype dt);

/* The checks every backend's send_recv makes: 1 to ZT_COMM_MAX_XFERS
 * transfers with peers of c other than the caller. */
zt_status zt_comm_xfers_check(const zt_comm *c, const zt_comm_xfer *x, int n);

/* Records the watchdog's failure for collective `seq` of c (ZT_ERR_COMM),
 * after the peers' probe (which waits up to half the limit, 1 to 10 s). */
zt_status zt_comm_timeout_fail(const zt_comm *c, zt_comm_kind kind, uint64_t seq, int64_t numel,
                               zt_dtype dt, double waited_s);

/* The caller's own small all-reduce (count elements of an MPI type: the
 * loss, a norm, a flag) on an MPI communicator beside c's collectives (c->side,
 * or the world's), under c's watchdog: issued non-blocking and polled, so a
 * peer that never joins fails it after c->timeout_s with the watchdog's
 * message, naming `what` ("the loss"). Not counted. Collective over mpi. */
zt_status zt_comm_side_all_reduce(const zt_comm *c, MPI_Comm mpi, void *buf, int count,
                                  MPI_Datatype type, MPI_Op op, const char *what);

const char *zt_comm_kind_name(zt_comm_kind k);

#endif
