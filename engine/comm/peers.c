/*
 * peers: hostnames of the world's ranks and the probe after a timeout
 * (engine/comm/peers.h).
 */
#include "engine/comm/peers.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A tag no other point-to-point message of zerotrain uses on this private
 * communicator (it has no other traffic at all). */
#define PEERS_TAG 7919

static struct {
    char (*hosts)[ZT_COMM_HOST_CHARS]; /* (size) */
    int size, rank;
    MPI_Comm probe;
} peers = {.probe = MPI_COMM_NULL};

zt_status zt_comm_peers_init(MPI_Comm world)
{
    zt_comm_peers_free();
    int size = 1, rank = 0;
    MPI_Comm_size(world, &size);
    MPI_Comm_rank(world, &rank);
    char mine[ZT_COMM_HOST_CHARS] = "";
    if (gethostname(mine, sizeof mine - 1) != 0)
        snprintf(mine, sizeof mine, "unknown");
    char(*hosts)[ZT_COMM_HOST_CHARS] = calloc((size_t)size, sizeof *hosts);
    int oom = !hosts, any_oom = 0;
    MPI_Allreduce(&oom, &any_oom, 1, MPI_INT, MPI_MAX, world);
    if (any_oom) {
        free(hosts);
        return zt_fail(ZT_ERR_OOM, "", "cannot gather the hostnames of %d ranks", size);
    }
    int rc = MPI_Allgather(mine, ZT_COMM_HOST_CHARS, MPI_CHAR, hosts, ZT_COMM_HOST_CHARS,
                           MPI_CHAR, world);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_dup(world, &peers.probe);
    if (rc != MPI_SUCCESS) {
        free(hosts);
        peers.probe = MPI_COMM_NULL;
        return zt_fail(ZT_ERR_COMM, "check the MPI installation and the mpirun command line",
                       "cannot gather the ranks' hostnames (MPI error %d)", rc);
    }
    MPI_Comm_set_errhandler(peers.probe, MPI_ERRORS_RETURN);
    peers.hosts = hosts;
    peers.size = size;
    peers.rank = rank;
    return ZT_OK;
}

void zt_comm_peers_free(void)
{
    if (peers.probe != MPI_COMM_NULL)
        MPI_Comm_free(&peers.probe);
    free(peers.hosts);
    peers.hosts = NULL;
    peers.size = 0;
}

const char *zt_comm_peers_host(int world_rank)
{
    return peers.hosts && world_rank >= 0 && world_rank < peers.size ? peers.hosts[world_rank]
                                                                       : NULL;
}

void zt_comm_peers_ranges(const int *absent, int size, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < size; r++) {
        if (!absent[r])
            continue;
        int last = r;
        while (last + 1 < size && absent[last + 1])
            last++;
        char part[48];
        if (last == r)
            snprintf(part, sizeof part, "%s%d", len ? ", " : "", r);
        else
            snprintf(part, sizeof part, "%s%d-%d", len ? ", " : "", r, last);
        if (len + strlen(part) + 4 >= n) {
            snprintf(out + len, n - len, "...");
            return;
        }
        len += (size_t)snprintf(out + len, n - len, "%s", part);
        r = last;
    }
}

/* "ranks 2-3 (host ztn1), rank 5 (host ztn2)": the absent ranks host by host,
 * in the order of each host's first absent rank. */
static void peers_describe(const int *absent, char *out, size_t n)
{
    int *mask = calloc((size_t)peers.size, sizeof *mask);
    bool *done = calloc((size_t)peers.size, sizeof *done);
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; mask && done && r < peers.size && len + 8 < n; r++) {
        if (!absent[r] || done[r])
            continue;
        int count = 0;
        for (int q = r; q < peers.size; q++) {
            mask[q] = absent[q] && !strcmp(peers.hosts[q], peers.hosts[r]);
            count += mask[q];
            done[q] = done[q] || mask[q];
        }
        char ranks[256];
        zt_comm_peers_ranges(mask, peers.size, ranks, sizeof ranks);
        len += (size_t)snprintf(out + len, n - len, "%s%s %s (host %s)", len ? ", " : "",
                                count > 1 ? "ranks" : "rank", ranks, peers.hosts[r]);
        memset(mask, 0, (size_t)peers.size * sizeof *mask);
    }
    free(mask);
    free(done);
}

int zt_comm_peers_probe(double window_s, char *out, size_t n)
{
    out[0] = '\0';
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (!peers.hosts || peers.probe == MPI_COMM_NULL || level != MPI_THREAD_MULTIPLE ||
        peers.size < 2)
        return -1;
    /* The token outlives this call: sends to ranks that never receive stay
     * pending until the job ends. */
    static int token;
    token = peers.rank;
    int size = peers.size;
    int *in = calloc((size_t)size, sizeof *in), *absent = calloc((size_t)size, sizeof *absent);
    MPI_Request *recv = malloc((size_t)size * sizeof *recv),
                *send = malloc((size_t)size * sizeof *send);
    if (!in || !absent || !recv || !send) {
        free(in), free(absent), free(recv), free(send);
        return -1;
    }
    for (int r = 0; r < size; r++) {
        recv[r] = send[r] = MPI_REQUEST_NULL;
        if (r == peers.rank)
            continue;
        absent[r] = 1;
        MPI_Irecv(&in[r], 1, MPI_INT, r, PEERS_TAG, peers.probe, &recv[r]);
        MPI_Isend(&token, 1, MPI_INT, r, PEERS_TAG, peers.probe, &send[r]);
    }
    double t0 = MPI_Wtime();
    int missing = size - 1;
    while (missing > 0 && MPI_Wtime() - t0 < window_s) {
        for (int r = 0; r < size; r++) {
            int done = 0;
            if (absent[r] && MPI_Test(&recv[r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
                done) {
                absent[r] = 0;
                missing--;
            }
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    for (int r = 0; r < size; r++) {
        /* A cancelled receive completes at once (MPI 3.1, 3.8.4), so `in`
         * can be freed; a send may never complete and is let go. */
        if (recv[r] != MPI_REQUEST_NULL) {
            MPI_Cancel(&recv[r]);
            MPI_Wait(&recv[r], MPI_STATUS_IGNORE);
        }
        if (send[r] != MPI_REQUEST_NULL)
            MPI_Request_free(&send[r]);
    }
    if (missing == 0) {
        snprintf(out, n,
                 "every other rank answered a probe (each waits in a collective: the ranks "
                 "may be in different collectives)");
    } else {
        char who[768];
        peers_describe(absent, who, sizeof who);
        snprintf(out, n,
                 "%s did not answer a probe within %.1f s (host down or cut off, or the "
                 "rank dead or stuck)",
                 who, window_s);
    }
    free(in), free(absent), free(recv), free(send);
    return missing;
}
