/*
 * threads: each rank's OpenMP thread count (engine/world/threads.h).
 */
#include "engine/world/threads.h"

#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int zt_threads_default(int cores, int sharing)
{
    int n = sharing > 0 ? cores / sharing : cores;
    return n > 0 ? n : 1;
}

int zt_threads_quota_cores(const char *cpu_max)
{
    long long quota = 0, period = 0;
    if (!cpu_max || sscanf(cpu_max, "%lld %lld", &quota, &period) != 2 || quota <= 0 ||
        period <= 0)
        return 0;
    return (int)((quota + period - 1) / period);
}

/* The cgroup's CPU quota in cores (v2 cpu.max, else v1 cfs), 0: none. */
static int threads_cgroup_cores(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        bool ok = fgets(buf, sizeof buf, f) != NULL;
        fclose(f);
        return ok ? zt_threads_quota_cores(buf) : 0;
    }
    long long quota = -1, period = 0;
    FILE *q = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
    FILE *p = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
    if (q && p && fscanf(q, "%lld", &quota) == 1 && fscanf(p, "%lld", &period) == 1)
        snprintf(buf, sizeof buf, "%lld %lld", quota, period);
    if (q)
        fclose(q);
    if (p)
        fclose(p);
    return zt_threads_quota_cores(buf);
}

zt_status zt_world_threads_init(MPI_Comm host_comm, zt_threads *out)
{
    memset(out, 0, sizeof *out);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long c = 0; c < (n > 0 ? n : 1) && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &mine);
    }
    int n_host = 1;
    MPI_Comm_size(host_comm, &n_host);
    cpu_set_t *all = malloc((size_t)n_host * sizeof *all);
    if (!all)
        return zt_fail(ZT_ERR_OOM, "", "cannot compare the CPU affinity of %d ranks", n_host);
    int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                           host_comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return zt_fail(ZT_ERR_COMM, "", "cannot compare the ranks' CPU affinity (MPI error %d)",
                       rc);
    }
    out->sharing = 0;
    for (int r = 0; r < n_host; r++) {
        cpu_set_t both;
        CPU_AND(&both, &mine, &all[r]);
        out->sharing += CPU_COUNT(&both) > 0;
    }
    free(all);
    out->cores = CPU_COUNT(&mine);
    int quota = threads_cgroup_cores();
    if (quota > 0 && quota < out->cores)
        out->cores = quota;
    const char *env = getenv("OMP_NUM_THREADS");
    out->from_env = env && *env;
    if (out->from_env) {
        out->threads = omp_get_max_threads();
        if (out->threads > 1 && (long)out->threads * out->sharing > out->cores)
            snprintf(out->note, sizeof out->note,
                     "zerotrain: OMP_NUM_THREADS=%d x %d rank(s) is more threads than the %d "
                     "core(s) they share: expect a large slowdown (leave it unset for %d)",
                     out->threads, out->sharing, out->cores,
                     zt_threads_default(out->cores, out->sharing));
        return ZT_OK;
    }
    out->threads = zt_threads_default(out->cores, out->sharing);
    omp_set_num_threads(out->threads);
    snprintf(out->note, sizeof out->note,
             "zerotrain: OMP_NUM_THREADS is not set: %d thread(s) per rank (%d core(s) shared by "
             "%d rank(s) on this host)",
             out->threads, out->cores, out->sharing);
    return ZT_OK;
}
