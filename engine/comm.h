/*
 * comm: the collective interface (all_reduce, reduce_scatter, all_gather,
 * broadcast, barrier, abort), a struct of function pointers with one instance
 * per backend. Each collective takes an optional request: NULL blocks; a request
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
 * MPI backend (this file's zt_comm_mpi_init): host buffers; float32 through
 * MPI_FLOAT, 16-bit elements through a 2-byte MPI type with user-defined SUM
 * and MAX operations (created once per process, freed by MPI_Finalize).
 *
 * Counters: every call adds the bytes (elements times the dtype's size) of the
 * whole logical buffer it covers to its kind: all_reduce and broadcast the buffer; reduce_scatter the full input
 * (recv_numel * size); all_gather the full output (send_numel * size). So a
 * reduce-scatter plus an all-gather of Psi elements count Psi each, exactly the
 * ZeRO paper's volume terms. A communicator of one rank counts nothing.
 *
 * Memory: buffers belong to the caller and must stay untouched until the
 * request completes. The comm owns its (duplicated) MPI communicator.
 * Collective: every operation except `test`, `wait` and the counters must be
 * called by all ranks of the communicator in the same order.
 */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

typedef enum {
    ZT_COMM_ALL_REDUCE = 0,
    ZT_COMM_REDUCE_SCATTER,
    ZT_COMM_ALL_GATHER,
    ZT_COMM_BROADCAST,
    ZT_COMM_NKINDS
} zt_comm_kind;

typedef enum { ZT_RED_SUM = 0, ZT_RED_MAX } zt_red_op;

#define ZT_COMM_REQ_PARTS 16

/* A pending non-blocking collective. Caller-owned storage. */
typedef struct {
    MPI_Request parts[ZT_COMM_REQ_PARTS];
    int n_parts;
} zt_comm_req;

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
    zt_status (*barrier)(zt_comm *c);
    /* true when the request has completed (then it needs no wait) */
    bool (*test)(zt_comm *c, zt_comm_req *req);
    zt_status (*wait)(zt_comm *c, zt_comm_req *req);
    /* Ends every rank of the job; does not return. */
    void (*abort)(zt_comm *c, int code);
} zt_comm_ops;

struct zt_comm {
    const char *name;
    const zt_comm_ops *ops;
    int rank, size;
    MPI_Comm mpi;
    uint64_t bytes[ZT_COMM_NKINDS];
    uint64_t calls[ZT_COMM_NKINDS];
};

/* MPI backend over a duplicate of `parent`. Collective over `parent`. */
zt_status zt_comm_mpi_init(zt_comm *c, MPI_Comm parent);
void zt_comm_free(zt_comm *c);

const char *zt_comm_kind_name(zt_comm_kind k);

#endif
