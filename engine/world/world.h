/*
 * world: the MPI job as zerotrain sees it. Initialises MPI asking for
 * MPI_THREAD_MULTIPLE (the main thread and the comm thread of engine/comm/
 * worker.h call MPI; OpenMP threads only compute; with FUNNELED only, the
 * collectives run on the main thread, see worker.h), finds
 * the rank, the world size, the hosts (the shared-memory split of
 * MPI_COMM_WORLD: the ranks mpirun started on one machine), the local rank and
 * node groups. A node group is a host, unless ZT_RANKS_PER_NODE=n splits each
 * host's ranks into simulated nodes of n (so tests can simulate several nodes
 * on one machine); a node group never spans two real hosts. Every rank's
 * hostname is gathered for messages (engine/comm/peers.h). Running the binary
 * without mpirun is a world of one rank (Open MPI singleton).
 *
 * Which device and communicator each rank uses: engine/world/devices.h; how
 * many threads: engine/world/threads.h (decided here).
 *
 * Memory: the communicators are owned by the world and freed by zt_world_free.
 * Collective: zt_world_init, zt_world_free, zt_world_agree,
 * zt_world_agree_fingerprint.
 */
#ifndef ZT_WORLD_H
#define ZT_WORLD_H

#include <mpi.h>
#include <stdbool.h>

#include "engine/fingerprint.h"
#include "engine/status.h"
#include "engine/world/threads.h"

typedef struct {
    int rank, size;
    int local_rank, local_size; /* within the node group */
    int node, n_nodes;
    int host_index, n_hosts; /* the physical host, numbered by its lowest rank */
    char host[64];
    MPI_Comm comm;      /* duplicate of MPI_COMM_WORLD */
    MPI_Comm node_comm; /* ranks of this node group */
    MPI_Comm host_comm; /* ranks on this physical host (shared memory), whatever
                         * ZT_RANKS_PER_NODE simulates: who can share a device */
    zt_threads threads; /* this rank's OpenMP threads (engine/world/threads.h) */
    zt_status env_status; /* a bad environment variable (engine/env.h) or
                           * ZT_RANKS_PER_NODE not dividing this host's ranks:
                           * ZT_OK, or the failure whose message the status slot
                           * holds when zt_world_init returns */
} zt_world;

/* MPI, the world and its groups. A bad environment does not fail it: every
 * rank takes part in every collective, with the bad variable's default, and
 * the failure is w->env_status, which the caller must agree on
 * (zt_world_agree) before anything else, so that every rank stops together
 * with one message. Returns a failure only when MPI itself fails. */
zt_status zt_world_init(zt_world *w, int *argc, char ***argv);
void zt_world_free(zt_world *w);

/* Every rank learns whether any rank failed: returns the first failing rank's
 * status (lowest rank wins) on all ranks and sets *failed_rank, or ZT_OK. Used
 * after steps where ranks may disagree (file reads) so no rank waits forever
 * in a later collective. Under the watchdog (zt_comm_mpi_wait): a rank that
 * never arrives makes it return ZT_ERR_COMM after ZT_COMM_TIMEOUT, with
 * *failed_rank -1. */
zt_status zt_world_agree(const zt_world *w, zt_status local, int *failed_rank);

/* Whether st is the failure the last zt_world_agree returned (every rank
 * returned it, and *first is the rank whose message it carries). A failure
 * agreed inside a step and passed up needs no second agreement: the rank
 * that failed alone may have met the others in that step's agreement from
 * its caller's, and is gone by the time they would agree again. */
bool zt_world_agreed_failure(zt_status st, int *first);

/* Every rank must run what rank 0 runs: the fingerprints (same fields in the
 * same order when every rank runs the same build) are compared field by field.
 * On any difference every rank returns the same ZT_ERR_USAGE naming the first
 * field that differs, the lowest rank it differs on and both values. A failed
 * add on any rank (fp->error) is agreed on first. Collective. */
zt_status zt_world_agree_fingerprint(const zt_world *w, const zt_fingerprint *fp);

#endif
