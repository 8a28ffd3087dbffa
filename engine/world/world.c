#include "engine/world/world.h"

#include "engine/comm/comm.h"
#include "engine/comm/peers.h"
#include "engine/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static zt_status zt_world_mpi(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return ZT_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return zt_fail(ZT_ERR_COMM, "check the MPI installation and the mpirun command line",
                   "%s failed: %s", what, msg);
}

/* The index of this rank's group (a split of the world into `group`s) =
 * how many group leaders (local rank 0) have a lower world rank, and the
 * number of groups. */
static zt_status world_index_groups(const zt_world *w, MPI_Comm group, int *index, int *count)
{
    int local = 0;
    MPI_Comm_rank(group, &local);
    int is_leader = local == 0, leaders_before = 0;
    ZT_TRY(zt_world_mpi(MPI_Exscan(&is_leader, &leaders_before, 1, MPI_INT, MPI_SUM, w->comm),
                        "MPI_Exscan"));
    /* MPI_Exscan leaves rank 0's result undefined; every member takes its
     * leader's count. */
    if (w->rank == 0)
        leaders_before = 0;
    int mine = leaders_before;
    ZT_TRY(zt_world_mpi(MPI_Bcast(&mine, 1, MPI_INT, 0, group), "MPI_Bcast"));
    *index = mine;
    return zt_world_mpi(MPI_Allreduce(&is_leader, count, 1, MPI_INT, MPI_SUM, w->comm),
                        "MPI_Allreduce");
}

zt_status zt_world_init(zt_world *w, int *argc, char ***argv)
{
    memset(w, 0, sizeof *w);
    /* Before any collective, and never a reason to skip one: a bad variable
     * leaves its default in place for the rest of the start-up. */
    w->env_status = zt_env_load();
    char env_msg[2048] = "", env_hint[1024] = "";
    if (w->env_status != ZT_OK) {
        snprintf(env_msg, sizeof env_msg, "%s", zt_status_message());
        snprintf(env_hint, sizeof env_hint, "%s", zt_status_hint());
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* The comm thread (engine/comm/worker.h) runs collectives beside the
         * compute threads, which fill the cores; Open MPI's progress loop
         * spinning without yielding takes their time slices, so overlapped
         * reductions cost backward more than they hide (docs/benchmarks.md,
         * make bench-comm). Open MPI yields on its own only when mpirun
         * itself oversubscribes. A user's setting wins. */
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        int provided = 0;
        ZT_TRY(zt_world_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
                            "MPI_Init_thread"));
        if (provided < MPI_THREAD_FUNNELED)
            return zt_fail(ZT_ERR_COMM, "use an MPI built with thread support (Open MPI is)",
                           "MPI gives thread level %d; zerotrain's OpenMP threads need at "
                           "least MPI_THREAD_FUNNELED",
                           provided);
    }
    ZT_TRY(zt_world_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &w->comm), "MPI_Comm_dup"));
    MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    zt_status_set_rank(w->rank);
    if (gethostname(w->host, sizeof w->host - 1) != 0)
        snprintf(w->host, sizeof w->host, "unknown");

    ZT_TRY(zt_comm_peers_init(w->comm));

    ZT_TRY(zt_world_mpi(MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank,
                                            MPI_INFO_NULL, &w->host_comm),
                        "MPI_Comm_split_type"));
    int host_rank = 0, host_size = 1;
    MPI_Comm_rank(w->host_comm, &host_rank);
    MPI_Comm_size(w->host_comm, &host_size);
    ZT_TRY(world_index_groups(w, w->host_comm, &w->host_index, &w->n_hosts));
    /* Node groups: the hosts, or simulated nodes of n ranks inside each host.
     * A host whose ranks n does not divide fails on its own ranks only (they
     * name their host), after every rank has split alike. */
    int rpn = zt_env_get()->ranks_per_node, n = host_size;
    int bad = rpn > 0 && host_size % rpn != 0, any_bad = 0;
    ZT_TRY(zt_world_mpi(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, w->comm),
                        "MPI_Allreduce"));
    if (rpn > 0 && !any_bad)
        n = rpn;
    if (bad && w->env_status == ZT_OK) {
        w->env_status = zt_fail(ZT_ERR_USAGE,
                                "set ZT_RANKS_PER_NODE to a divisor of the ranks on each host",
                                "ZT_RANKS_PER_NODE=%d does not divide the ranks of every host "
                                "(host %s has %d)",
                                rpn, w->host, host_size);
        snprintf(env_msg, sizeof env_msg, "%s", zt_status_message());
        snprintf(env_hint, sizeof env_hint, "%s", zt_status_hint());
    }
    ZT_TRY(zt_world_mpi(MPI_Comm_split(w->host_comm, host_rank / n, w->rank, &w->node_comm),
                        "MPI_Comm_split"));
    MPI_Comm_rank(w->node_comm, &w->local_rank);
    MPI_Comm_size(w->node_comm, &w->local_size);
    ZT_TRY(world_index_groups(w, w->node_comm, &w->node, &w->n_nodes));
    ZT_TRY(zt_world_threads_init(w->host_comm, &w->threads));
    /* The caller reads the environment's failure from the status slot: put
     * it back there, whatever a step that recovered may have recorded. */
    if (w->env_status != ZT_OK)
        zt_fail(w->env_status, env_hint, "%s", env_msg);
    return ZT_OK;
}

void zt_world_free(zt_world *w)
{
    zt_comm_peers_free();
    if (w->host_comm != MPI_COMM_NULL && w->host_comm)
        MPI_Comm_free(&w->host_comm);
    if (w->node_comm != MPI_COMM_NULL && w->node_comm)
        MPI_Comm_free(&w->node_comm);
    if (w->comm != MPI_COMM_NULL && w->comm)
        MPI_Comm_free(&w->comm);
}

/* What the first failing rank tells the others: its status, message, hint
 * and the rank the failure came from (the status module's slots). */
typedef struct {
    int status, origin;
    char msg[8192];
    char hint[1024];
} world_failure;

/* Agreements made so far, and the failure of the one that found the ranks
 * out of step (ZT_OK while they are in step). Only the main thread agrees. */
static int world_agreements;
static zt_status world_out_of_step;
/* The last agreement's outcome when it was a failure (its status and first
 * failing rank), -1 after one that found every rank fine. */
static zt_status world_agreed;
static int world_agreed_first = -1;

bool zt_world_agreed_failure(zt_status st, int *first)
{
    if (st == ZT_OK || st != world_agreed || world_agreed_first < 0)
        return false;
    *first = world_agreed_first;
    return true;
}

zt_status zt_world_agree(const zt_world *w, zt_status local, int *failed_rank)
{
    if (failed_rank)
        *failed_rank = -1;
    world_agreed_first = -1;
    /* Out of step already: the caller's next agreement (cmd/'s) cannot be
     * met either; the failure is returned again with no rank named, so the
     * job ends (cmd_agreed_failure prints and aborts). */
    if (world_out_of_step != ZT_OK)
        return local != ZT_OK ? local : world_out_of_step;
    /* Each agreement's number travels with the status: a rank that returned
     * early past an agreement (a bug: a failure of its own that skipped one)
     * is found here at once, instead of matching the wrong agreement or
     * hanging in a later one. */
    int n = ++world_agreements;
    int mine[3] = {local == ZT_OK ? w->size : w->rank, n, -n}, got[3] = {0, 0, 0};
    MPI_Request r;
    ZT_TRY(zt_comm_mpi_wait(w->comm, MPI_Iallreduce(mine, got, 3, MPI_INT, MPI_MIN, w->comm, &r),
                            &r, "all_reduce of the ranks' status", 3));
    int first = got[0];
    if (got[1] != -got[2]) {
        world_out_of_step =
            local != ZT_OK
                ? local
                : zt_fail(ZT_ERR_INTERNAL,
                          "a bug: a rank skipped an agreement after a failure of its own; its "
                          "own error is printed too",
                          "the ranks are out of step: this rank is at agreement #%d, another "
                          "at #%d",
                          n, n == got[1] ? -got[2] : got[1]);
        return world_out_of_step;
    }
    if (first == w->size)
        return ZT_OK;
    /* The message travels with the status: a failure agreed on here and
     * again by the caller (cmd/'s agreement, where every rank now fails) is
     * printed by the lowest rank, which must hold the first failure's text,
     * not its own empty slot. */
    static _Thread_local world_failure f; /* 9 KiB, off the stack; no malloc that could fail */
    memset(&f, 0, sizeof f);
    if (w->rank == first) {
        f.status = (int)local;
        f.origin = zt_status_origin() >= 0 ? zt_status_origin() : w->rank;
        snprintf(f.msg, sizeof f.msg, "%s", zt_status_message());
        snprintf(f.hint, sizeof f.hint, "%s", zt_status_hint());
    }
    ZT_TRY(zt_comm_mpi_wait(w->comm, MPI_Ibcast(&f, (int)sizeof f, MPI_BYTE, first, w->comm, &r),
                            &r, "broadcast of a failed rank's status", (int64_t)sizeof f));
    if (failed_rank)
        *failed_rank = first;
    if (w->rank != first)
        zt_fail_from((zt_status)f.status, f.origin, f.hint, f.msg);
    world_agreed = (zt_status)f.status;
    world_agreed_first = first;
    return (zt_status)f.status;
}

/* Rank `from`'s text of field i (the empty string past its list). */
static void world_bcast_value(const zt_world *w, const zt_fingerprint *fp, int i, int from,
                              char *out)
{
    char buf[ZT_FINGERPRINT_NAME + ZT_FINGERPRINT_VALUE] = "";
    if (w->rank == from && i < fp->n)
        snprintf(buf, sizeof buf, "%s", fp->fields[i].value);
    MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, from, w->comm);
    memcpy(out, buf, sizeof buf);
}

zt_status zt_world_agree_fingerprint(const zt_world *w, const zt_fingerprint *fp)
{
    ZT_TRY(zt_world_agree(w, fp->error, NULL));
    int n0 = fp->n, n_min = fp->n;
    MPI_Bcast(&n0, 1, MPI_INT, 0, w->comm);
    MPI_Allreduce(MPI_IN_PLACE, &n_min, 1, MPI_INT, MPI_MIN, w->comm);
    uint64_t *ref = malloc((size_t)(n0 > 0 ? n0 : 1) * sizeof *ref);
    int oom = !ref, any_oom = 0;
    MPI_Allreduce(&oom, &any_oom, 1, MPI_INT, MPI_MAX, w->comm);
    if (any_oom) {
        free(ref);
        return zt_fail(ZT_ERR_OOM, "", "cannot compare the ranks' settings");
    }
    for (int i = 0; w->rank == 0 && i < n0; i++)
        ref[i] = fp->fields[i].hash;
    MPI_Bcast(ref, n0, MPI_UINT64_T, 0, w->comm);
    /* This rank's first difference: a field that differs, or where one list
     * ends before the other. */
    int64_t first = INT64_MAX;
    for (int i = 0; i < n_min && first == INT64_MAX; i++)
        if (fp->fields[i].hash != ref[i])
            first = i;
    if (first == INT64_MAX && fp->n != n0)
        first = n_min;
    free(ref);
    int64_t key = first == INT64_MAX ? INT64_MAX : first * w->size + w->rank;
    MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT64_T, MPI_MIN, w->comm);
    if (key == INT64_MAX)
        return ZT_OK;
    int field = (int)(key / w->size), rank = (int)(key % w->size);
    char name[ZT_FINGERPRINT_NAME] = "", mine[ZT_FINGERPRINT_NAME + ZT_FINGERPRINT_VALUE],
         theirs[ZT_FINGERPRINT_NAME + ZT_FINGERPRINT_VALUE];
    if (field < n0 && w->rank == 0)
        snprintf(name, sizeof name, "%s", fp->fields[field].name);
    MPI_Bcast(name, (int)sizeof name, MPI_CHAR, 0, w->comm);
    world_bcast_value(w, fp, field, 0, mine);
    world_bcast_value(w, fp, field, rank, theirs);
    const char *hint = "start every rank with the same zerotrain build, flags, config and data "
                       "files (an MPMD mpirun line, or a file that differs between nodes?)";
    if (field >= n_min)
        return zt_fail(ZT_ERR_USAGE, hint,
                       "rank %d runs something other than rank 0: it records %s settings "
                       "(a different zerotrain build?)",
                       rank, field < n0 ? "fewer" : "more");
    return zt_fail(ZT_ERR_USAGE, hint,
                   "rank %d runs something other than rank 0: %s is %s%s%s on rank %d and "
                   "%s%s%s on rank 0",
                   rank, name, theirs[0] ? "'" : "", theirs[0] ? theirs : "different",
                   theirs[0] ? "'" : "", rank, mine[0] ? "'" : "", mine[0] ? mine : "other",
                   mine[0] ? "'" : "");
}
