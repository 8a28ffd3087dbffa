/*
 * hostmem: the host memory limits of this process (engine/hostmem.h).
 */
#include "engine/hostmem.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/env.h"
#include "engine/fingerprint.h"

/* The first number in a file, or ZT_HOSTMEM_NONE ("max" and unreadable files
 * alike: no limit). */
static uint64_t hostmem_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ZT_HOSTMEM_NONE;
    unsigned long long v = 0;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    return ok ? (uint64_t)v : ZT_HOSTMEM_NONE;
}

/* v1 reports "no limit" as a huge page-rounded number. */
static uint64_t hostmem_limit(uint64_t v) { return v >= (UINT64_C(1) << 60) ? ZT_HOSTMEM_NONE : v; }

/* This process's cgroup below `mount` and its ancestors up to the mount: the
 * tightest limit among them. A container sees its own cgroup at the mount even
 * where /proc/self/cgroup names a longer path, so a path that does not exist
 * under the mount is skipped. */
static void hostmem_cgroup(zt_hostmem *h, const char *mount, const char *rel,
                           const char *limit_name, const char *usage_name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s%s", mount, rel);
    for (;;) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, limit_name);
        uint64_t limit = hostmem_limit(hostmem_number(path));
        if (limit < h->cgroup_limit) {
            h->cgroup_limit = limit;
            snprintf(h->cgroup_file, sizeof h->cgroup_file, "%s", path);
            snprintf(path, sizeof path, "%s/%s", dir, usage_name);
            uint64_t used = hostmem_number(path);
            h->cgroup_used = used == ZT_HOSTMEM_NONE ? 0 : used;
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= strlen(mount) || !slash)
            break;
        *slash = '\0';
    }
}

static void hostmem_cgroups(zt_hostmem *h)
{
    const char *root = zt_env_get()->cgroup_root;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    bool seen = false;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';
        const char *controllers = c1 + 1, *rel = c2 + 1;
        char mount[512];
        if (!strcmp(line, "0") && !controllers[0]) {
            hostmem_cgroup(h, root, !strcmp(rel, "/") ? "" : rel, "memory.max",
                           "memory.current");
            seen = true;
        } else if (strstr(controllers, "memory")) {
            snprintf(mount, sizeof mount, "%s/memory", root);
            hostmem_cgroup(h, mount, !strcmp(rel, "/") ? "" : rel, "memory.limit_in_bytes",
                           "memory.usage_in_bytes");
            seen = true;
        }
    }
    if (f)
        fclose(f);
    if (!seen) {
        char mount[512];
        snprintf(mount, sizeof mount, "%s/memory", root);
        hostmem_cgroup(h, root, "", "memory.max", "memory.current");
        hostmem_cgroup(h, mount, "", "memory.limit_in_bytes", "memory.usage_in_bytes");
    }
}

static uint64_t hostmem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return ZT_HOSTMEM_NONE;
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    return found ? (uint64_t)kb * 1024 : ZT_HOSTMEM_NONE;
}

void zt_hostmem_read(zt_hostmem *h)
{
    memset(h, 0, sizeof *h);
    h->as_limit = h->cgroup_limit = h->available = ZT_HOSTMEM_NONE;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        h->as_limit = (uint64_t)rl.rlim_cur;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f && fscanf(f, "%llu", &pages) == 1)
        h->as_used = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    if (f)
        fclose(f);
    hostmem_cgroups(h);
    h->available = hostmem_available();
}

uint64_t zt_hostmem_cgroup_id(const zt_hostmem *h)
{
    if (h->cgroup_limit == ZT_HOSTMEM_NONE)
        return 0;
    return zt_hash64(ZT_HASH_START, h->cgroup_file, strlen(h->cgroup_file));
}

/* "1.50 GiB" or, under one, "300.0 MiB". */
static const char *hostmem_size(uint64_t b, char *buf, size_t n)
{
    double g = (double)b / (1024.0 * 1024.0 * 1024.0);
    if (g >= 1.0)
        snprintf(buf, n, "%.2f GiB", g);
    else
        snprintf(buf, n, "%.1f MiB", (double)b / (1024.0 * 1024.0));
    return buf;
}

uint64_t zt_hostmem_share(const zt_hostmem *h, int node_ranks, int cgroup_ranks, char *why,
                          size_t n)
{
    uint64_t best = ZT_HOSTMEM_NONE;
    char s[3][32];
    snprintf(why, n, "no limit");
    if (h->as_limit != ZT_HOSTMEM_NONE) {
        best = h->as_limit > h->as_used ? h->as_limit - h->as_used : 0;
        snprintf(why, n, "the address-space limit (ulimit -v) leaves %s (limit %s, %s mapped "
                         "already)",
                 hostmem_size(best, s[0], sizeof s[0]),
                 hostmem_size(h->as_limit, s[1], sizeof s[1]),
                 hostmem_size(h->as_used, s[2], sizeof s[2]));
    }
    if (h->cgroup_limit != ZT_HOSTMEM_NONE) {
        uint64_t room = h->cgroup_limit > h->cgroup_used ? h->cgroup_limit - h->cgroup_used : 0;
        uint64_t each = room / (uint64_t)(cgroup_ranks > 0 ? cgroup_ranks : 1);
        if (each < best) {
            best = each;
            snprintf(why, n, "the memory cgroup leaves %s for this node's %d rank(s) in it (%s: "
                             "limit %s, %s in use)",
                     hostmem_size(room, s[0], sizeof s[0]), cgroup_ranks, h->cgroup_file,
                     hostmem_size(h->cgroup_limit, s[1], sizeof s[1]),
                     hostmem_size(h->cgroup_used, s[2], sizeof s[2]));
        }
    }
    if (h->available != ZT_HOSTMEM_NONE) {
        uint64_t each = h->available / (uint64_t)(node_ranks > 0 ? node_ranks : 1);
        if (each < best) {
            best = each;
            snprintf(why, n, "the machine has %s available (MemAvailable) for this node's %d "
                             "rank(s)",
                     hostmem_size(h->available, s[0], sizeof s[0]), node_ranks);
        }
    }
    return best;
}
