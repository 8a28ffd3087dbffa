/*
 * peers: what the watchdog can say about the other ranks when a collective
 * times out. A timeout alone only says that some peer never joined; on
 * several hosts the user needs to know which one. zt_comm_peers_init (run once
 * by zt_world_init) gathers every rank's hostname and keeps a private
 * duplicate of MPI_COMM_WORLD. After a timeout, zt_comm_peers_probe sends
 * every other rank a one-int message there and waits a short window for
 * theirs: a rank whose own watchdog fired (it waits in a collective too)
 * answers; a rank on a host that was cut off, or a dead or stopped one, does
 * not, and the probe names those ranks and their hosts.
 *
 * The probe runs beside the stuck collective (another thread may sit inside
 * MPI), so it needs MPI_THREAD_MULTIPLE; without it, or without init (a tool
 * that builds comms without a world), it says nothing.
 *
 * Memory: the host table and the communicator belong to the module, freed by
 * zt_comm_peers_free. Collective: zt_comm_peers_init and zt_comm_peers_free
 * over MPI_COMM_WORLD; the probe is not (each rank runs it after its own
 * timeout, and the ranks that answer are those that do the same).
 */
#ifndef ZT_COMM_PEERS_H
#define ZT_COMM_PEERS_H

#include <mpi.h>
#include <stddef.h>

#include "engine/status.h"

#define ZT_COMM_HOST_CHARS 64

/* Gathers the hostnames of `world`'s ranks (MPI_COMM_WORLD's, in its order)
 * and duplicates it for the probe. A second call replaces the first. */
zt_status zt_comm_peers_init(MPI_Comm world);
void zt_comm_peers_free(void);

/* Host of world rank r, or NULL before init or out of range. */
const char *zt_comm_peers_host(int world_rank);

/* Asks every other rank whether it answers within window_s seconds and writes
 * one clause for the watchdog's message into out: "ranks 2-3 (host ztn1) did
 * not answer a probe within 2.5 s", or that every rank answered. Returns how
 * many ranks did not answer, or -1 when no probe could run (out is "").
 * Called once, just before the job ends: the messages of ranks that did not
 * answer are left pending. */
int zt_comm_peers_probe(double window_s, char *out, size_t n);

/* "2-3", "5" or "0, 2-3, 7": the ranks r with absent[r] set, ranges merged,
 * into out (cut short with "..." when it does not fit). */
void zt_comm_peers_ranges(const int *absent, int size, char *out, size_t n);

#endif
