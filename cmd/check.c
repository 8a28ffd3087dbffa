/*
 * check: `zerotrain check`, the preflight of a job. Started with the job's own
 * mpirun line and flags (with `check` after the binary), it trains nothing:
 *  1. the config loads on every rank;
 *  2. the topology: hosts, ranks per host, node groups, each rank's device
 *     (GPU UUIDs on CUDA), and which communicator was chosen and why;
 *  3. every rank sees the same zerotrain build, config, data and tokenizer
 *     files (their FNV-1a hashes, engine/fingerprint.h) and runs the same
 *     flags (cmd_same_run): a mismatch ends it with exit 2, naming the file
 *     and the rank;
 *  4. a bandwidth table per group (engine/comm/bandwidth.h): the world, the
 *     ranks of each host, one rank per host; 1 KB to --max-bytes (256 MB).
 * Rank 0 prints; exit 0 when all of it passed.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/exit.h"
#include "engine/comm/bandwidth.h"
#include "engine/comm/peers.h"
#include "engine/config/config.h"
#include "engine/env.h"
#include "engine/world/devices.h"
#include "engine/world/topology.h"

#define CHECK_MIN_BYTES 1024

static void check_help(void)
{
    printf("usage: zerotrain check [--max-bytes N] <the job's flags: --config FILE --model NAME "
           "...>\n"
           "  the preflight of a job: start it with the job's mpirun line and flags, with "
           "`check`\n"
           "  after the binary. Prints the hosts, ranks and devices, the communicator and why,\n"
           "  checks that every rank sees the same zerotrain build, config, data and tokenizer\n"
           "  files and flags (exit 2 naming the first difference), and measures all_reduce,\n"
           "  all_gather and reduce_scatter per group (world, intra-host, inter-host) from 1 KB\n"
           "  to --max-bytes, with nccl-tests' algbw and busbw.\n"
           "\n"
           "  --max-bytes N[K|M|G]            largest buffer of the bandwidth table (default "
           "256M;\n"
           "                                  0 skips the table)\n"
           "  every flag of `zerotrain --help` is accepted as the job gives it\n");
}

/* "256M", "64K", "1048576": bytes (powers of 1024), or -1. */
static int64_t check_parse_bytes(const char *s)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0)
        return -1;
    int shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end != '\0' || v > (INT64_MAX >> 31))
        return -1;
    return (int64_t)v << shift;
}

/* "0-1", "0, 2": the ranks of host h. */
static void check_host_ranks(const zt_topology_rank *t, int size, int h, char *out, size_t n)
{
    int *mask = calloc((size_t)size, sizeof *mask);
    if (!mask) {
        snprintf(out, n, "?");
        return;
    }
    for (int r = 0; r < size; r++)
        mask[r] = t[r].host_index == h;
    zt_comm_peers_ranges(mask, size, out, n);
    free(mask);
}

static void check_print_topology(const zt_world *w, const zt_topology_rank *t,
                                 const zt_device_choice *ch)
{
    printf("zerotrain check %s: %d rank(s) on %d host(s)\n", ZT_VERSION, w->size, w->n_hosts);
    printf("hosts (the ranks mpirun started on one machine: MPI_COMM_TYPE_SHARED):\n");
    for (int h = 0; h < w->n_hosts; h++) {
        int first = -1, count = 0;
        for (int r = 0; r < w->size; r++)
            if (t[r].host_index == h) {
                first = first < 0 ? r : first;
                count++;
            }
        char ranks[256];
        check_host_ranks(t, w->size, h, ranks, sizeof ranks);
        printf("  %-16s %d rank(s): %s; devices:", t[first].host, count, ranks);
        /* Each distinct device of the host once, in rank order. */
        for (int r = 0; r < w->size; r++) {
            if (t[r].host_index != h)
                continue;
            bool seen = false;
            for (int q = first; q < r && !seen; q++)
                seen = t[q].host_index == h && !strcmp(t[q].device, t[r].device);
            if (!seen)
                printf(" %s", t[r].device);
        }
        printf("\n");
    }
    printf("ranks:\n");
    for (int r = 0; r < w->size; r++)
        printf("  rank %-4d host %-16s local rank %d of %d, node %d, device %s\n", r, t[r].host,
               t[r].host_rank, t[r].host_size, t[r].node, t[r].device);
    int rpn = zt_env_get()->ranks_per_node;
    if (rpn > 0)
        printf("node groups: %d, simulated: ZT_RANKS_PER_NODE=%d ranks inside each host "
               "(hpZ and MiCS groups that must stay inside a node use these)\n",
               w->n_nodes, rpn);
    else
        printf("node groups: %d, the hosts (hpZ and MiCS groups that must stay inside a node "
               "use these)\n",
               w->n_nodes);
    printf("communicator: %s\n", ch->why);
    /* zt_world_init sets it, unless the environment did (engine/world/world.c). */
    const char *yield = getenv("OMPI_MCA_mpi_yield_when_idle");
    printf("MPI progress: OMPI_MCA_mpi_yield_when_idle=%s\n", yield ? yield : "(unset)");
}

/* The files every rank must see alike, hashed; rank 0 prints its hashes. */
static zt_status check_files(const zt_world *w, const cmd_train_flags *f)
{
    zt_fingerprint fp;
    zt_fingerprint_init(&fp);
    zt_status st = zt_fingerprint_file(&fp, "the zerotrain build", "/proc/self/exe");
    if (st == ZT_OK)
        st = zt_fingerprint_file(&fp, "the --config file", f->config_path);
    if (st == ZT_OK)
        st = cmd_fingerprint_inputs(&fp, f);
    if (st != ZT_OK && fp.error == ZT_OK)
        fp.error = st;
    st = zt_world_agree_fingerprint(w, &fp);
    if (st == ZT_OK && w->rank == 0) {
        printf("files (FNV-1a 64; the same on all %d rank(s)):\n", w->size);
        for (int i = 0; i < fp.n; i++)
            printf("  %-30s %016llx  %s\n", fp.fields[i].name,
                   (unsigned long long)fp.fields[i].hash, fp.fields[i].value);
    }
    zt_fingerprint_free(&fp);
    return st;
}

static void check_print_table(const char *title, const zt_bw_row *rows, int n)
{
    printf("%s\n", title);
    printf("  %11s %5s", "", "");
    for (int o = 0; o < ZT_BW_OPS; o++)
        printf(" | %-25s", zt_comm_kind_name(zt_bw_ops[o]));
    printf("\n  %11s %5s", "bytes", "iters");
    for (int o = 0; o < ZT_BW_OPS; o++)
        printf(" | %9s %7s %7s", "time(us)", "algbw", "busbw");
    printf("\n");
    for (int i = 0; i < n; i++) {
        printf("  %11lld %5d", (long long)rows[i].bytes, rows[i].iters);
        for (int o = 0; o < ZT_BW_OPS; o++)
            printf(" | %9.1f %7.3f %7.3f", rows[i].seconds[o] * 1e6, rows[i].algbw[o],
                   rows[i].busbw[o]);
        printf("\n");
    }
    fflush(stdout);
}

/* One group's table: every rank is in one group of the split (color); the
 * group of rank 0 is printed, the others run at the same time. */
static zt_status check_group_table(const zt_world *w, zt_comm *world, const zt_backend *be,
                                   int color, int key, const char *title, int64_t max_bytes)
{
    zt_comm sub;
    ZT_TRY(world->ops->split(world, color, key, &sub));
    int n = zt_bw_n_rows(CHECK_MIN_BYTES, max_bytes);
    zt_bw_row *rows = calloc((size_t)(n > 0 ? n : 1), sizeof *rows);
    zt_status st = rows ? ZT_OK : zt_fail(ZT_ERR_OOM, "", "cannot hold the bandwidth table");
    st = zt_comm_agree(world->side, st, "the bandwidth table");
    if (st == ZT_OK)
        st = zt_bw_measure(&sub, be, CHECK_MIN_BYTES, max_bytes, rows);
    if (st == ZT_OK && w->rank == 0) {
        char head[256];
        snprintf(head, sizeof head, "%s: %d rank(s)", title, sub.size);
        check_print_table(head, rows, n);
    }
    free(rows);
    zt_comm_free(&sub);
    return st;
}

static zt_status check_bandwidth(const zt_world *w, zt_comm *comm, const zt_backend *be,
                                 const zt_topology_rank *t, int64_t max_bytes)
{
    if (w->rank == 0)
        printf("bandwidth, fp32, 1 KB to %lld bytes, as nccl-tests: bytes is the all_reduce "
               "buffer,\n  the all_gather output, the reduce_scatter input; time the slowest "
               "rank's mean per call;\n  algbw = bytes / time (GB/s); busbw = algbw x 2(n-1)/n "
               "(all_reduce), x (n-1)/n (all_gather, reduce_scatter)\n",
               (long long)max_bytes);
    char title[256];
    snprintf(title, sizeof title, "world, comm %s, %d host(s)", comm->name, w->n_hosts);
    ZT_TRY(check_group_table(w, comm, be, 0, w->rank, title, max_bytes));
    const zt_topology_rank *me = &t[w->rank];
    if (w->n_hosts > 1) {
        snprintf(title, sizeof title,
                 "intra-host: host %s (every host's group at once)", t[0].host);
        ZT_TRY(check_group_table(w, comm, be, me->host_index, w->rank, title, max_bytes));
    } else if (w->rank == 0) {
        printf("intra-host: the world above (one host)\n");
    }
    if (w->n_hosts > 1) {
        snprintf(title, sizeof title,
                 "inter-host: local rank 0 of each host (one group per local rank, all at once)");
        ZT_TRY(check_group_table(w, comm, be, me->host_rank, me->host_index, title, max_bytes));
    } else if (w->rank == 0) {
        printf("inter-host: none (one host)\n");
    }
    return ZT_OK;
}

int cmd_check(int argc, char **argv)
{
    /* check's own flags; the rest is the job's command line. */
    int64_t max_bytes = (int64_t)256 << 20;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest)
        return cmd_usage_error("out of memory parsing %d arguments", argc);
    int n_rest = 0;
    const char *max_given = NULL;
    rest[n_rest++] = argv[0];
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (cmd_is_first_process())
                check_help();
            free(rest);
            return 0;
        }
        if (!strcmp(argv[i], "--max-bytes")) {
            if (max_given) {
                free(rest);
                return cmd_usage_error("--max-bytes is given twice ('%s', then '%s'): give it "
                                       "once",
                                       max_given, i + 1 < argc ? argv[i + 1] : "");
            }
            max_given = i + 1 < argc ? argv[i + 1] : "";
            int64_t v = i + 1 < argc ? check_parse_bytes(argv[i + 1]) : -1;
            if (v < 0 || (v > 0 && v < CHECK_MIN_BYTES) || v > ((int64_t)1 << 34)) {
                free(rest);
                return cmd_usage_error("--max-bytes needs a size from 1K to 16G (or 0), like "
                                       "256M, not '%s'",
                                       i + 1 < argc ? argv[i + 1] : "");
            }
            max_bytes = v;
            i++;
            continue;
        }
        rest[n_rest++] = argv[i];
    }
    cmd_train_flags flags;
    int rc = cmd_flags_train(n_rest, rest, &flags);
    if (rc != 0) {
        free(rest);
        return rc < 0 ? 0 : rc;
    }
    zt_devices_select_early(flags.dev.device);
    zt_world world;
    rc = cmd_world_start(&world, &argc, &argv);
    free(rest); /* the flags point into argv, not into rest */
    if (rc != 0)
        return rc;
    zt_config cfg;
    zt_status st = zt_config_load_file(flags.config_path, &flags.ov, world.size, &cfg);
    if ((rc = cmd_agreed_failure(&world, st)) != 0)
        return rc;

    /* Released on every way out (at `end`). */
    zt_backend be;
    zt_comm comm;
    zt_device_choice ch;
    zt_topology_rank *topo = NULL;
    memset(&be, 0, sizeof be);
    memset(&comm, 0, sizeof comm);
    memset(&ch, 0, sizeof ch);
    st = zt_world_devices_chosen(&world, &flags.dev, zt_config_compute_dtype(&cfg), &be, &comm,
                                 stdout, &ch);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    st = zt_topology_gather(&world, &be, ch.ordinal, &topo);
    if ((rc = cmd_agree(&world, st)) != 0)
        goto end;
    if (world.rank == 0)
        check_print_topology(&world, topo, &ch);
    fflush(stdout);
    if ((rc = cmd_agree(&world, check_files(&world, &flags))) != 0)
        goto end;
    if ((rc = cmd_agree(&world, cmd_same_run(&world, &flags, &cfg))) != 0)
        goto end;
    if (world.rank == 0)
        printf("settings: every rank runs the same flags and config\n");
    if (max_bytes > 0 && (st = check_bandwidth(&world, &comm, &be, topo, max_bytes)) != ZT_OK)
        cmd_fatal(&world, &comm, st);
    if (world.rank == 0) {
        printf("zerotrain check: ok: %d rank(s) on %d host(s), the same build, config, data and "
               "flags everywhere\n",
               world.size, world.n_hosts);
        fflush(stdout);
    }
end:
    free(topo);
    zt_comm_free(&comm);
    zt_backend_free(&be);
    return cmd_end(&world, rc);
}
