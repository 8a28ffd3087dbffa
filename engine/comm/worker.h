/*
 * worker: the MPI communicator's comm thread. Collectives run there as
 * blocking MPI calls, one at a time in the order they were issued, for every
 * MPI communicator of the process: Open MPI's blocking collectives (its tuned
 * algorithms) are up to several times faster than its non-blocking ones
 * (scripts/bench_comm.c measures both), and one queue keeps every rank running
 * the collectives of all its communicators in the same order. A caller waits
 * for a task at once (a blocking collective) or later (overlap_comm, while it
 * computes), sleeping on a condition variable with a deadline: that wait is
 * the watchdog, with no polling.
 *
 * The thread needs MPI_THREAD_MULTIPLE (zt_world_init asks for it). Where MPI
 * gives less, tasks run on the calling thread when submitted: still blocking
 * MPI's speed, but nothing overlaps and a stuck collective cannot time out.
 *
 * Memory: tasks are the caller's (inside its zt_comm_req) and must stay valid
 * until done, or until the process ends when a wait timed out. The thread
 * starts with the first MPI communicator and is joined when the last is freed.
 * Collective: none by itself (the tasks are).
 */
#ifndef ZT_COMM_WORKER_H
#define ZT_COMM_WORKER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct zt_comm_task zt_comm_task;

struct zt_comm_task {
    /* The blocking MPI call(s); returns the first MPI error code. */
    int (*run)(zt_comm_task *t);
    MPI_Comm comm;
    MPI_Datatype type;
    MPI_Op op;
    void *buf;          /* all_reduce, broadcast: in place */
    const void *send;   /* reduce_scatter, all_gather (MPI_IN_PLACE allowed) */
    void *recv;
    int64_t count;      /* elements per rank (reduce_scatter, all_gather) or of buf */
    size_t elem;        /* bytes of one element */
    int root;
    /* send_recv: the transfers, issued together (Isend/Irecv) and completed
     * together. */
    struct {
        void *buf;
        int count;
        int peer;
        bool recv;
    } xfers[2];
    int n_xfers;
    /* Queue and completion, under the worker's lock. */
    zt_comm_task *next;
    bool queued, done;
    int rc;
};

/* A communicator starts or stops using the thread (the first starts it, the
 * last joins it). acquire fails only when the thread cannot be created. */
bool zt_comm_worker_acquire(void);
void zt_comm_worker_release(void);

/* Queues t (or runs it now without the thread). */
void zt_comm_worker_submit(zt_comm_task *t);

/* Whether t is done (never blocks). */
bool zt_comm_worker_done(zt_comm_task *t);

/* Sleeps until t is done or `seconds` have passed (<= 0: no limit); false on
 * timeout, t still queued or running. */
bool zt_comm_worker_wait(zt_comm_task *t, double seconds);

#endif
