/*
 * env: the environment variables, parsed once (engine/env.h).
 */
#include "engine/env.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const char *const zt_env_cpu_isas[3] = {"baseline", "avx2", "avx512"};

/* A user's value for a message: at most 40 characters, anything that is
 * not printable ASCII shown as '?', so the terminal gets no raw bytes. */
static void env_quote(const char *v, char *out, size_t n)
{
    size_t i = 0;
    for (; v[i] && i < 40 && i + 1 < n; i++)
        out[i] = isprint((unsigned char)v[i]) ? v[i] : '?';
    out[i] = '\0';
    if (v[i] && i + 4 < n)
        memcpy(out + i, "...", 4);
}

static zt_status env_bad(const char *name, const char *value, const char *expected,
                         const char *hint)
{
    char q[48];
    env_quote(value, q, sizeof q);
    return zt_fail(ZT_ERR_USAGE, hint, "%s='%s' is not %s", name, q, expected);
}

/* A plain decimal (digits with at most one '.') in [0, max]: strtod alone
 * would take " 5", "inf", "1e3" and "0x10". */
static bool env_seconds(const char *v, double max, double *out)
{
    size_t digits = strspn(v, "0123456789."), n = strlen(v);
    const char *dot = strchr(v, '.');
    if (n == 0 || digits != n || (dot && strchr(dot + 1, '.')) || (dot && n == 1))
        return false;
    double s = strtod(v, NULL);
    if (!isfinite(s) || s < 0 || s > max)
        return false;
    *out = s;
    return true;
}

/* Digits only, in [lo, hi], without overflow on the way. */
static bool env_integer(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!*v)
        return false;
    int64_t x = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        if (x > (hi - (*p - '0')) / 10)
            return false;
        x = x * 10 + (*p - '0');
    }
    if (x < lo)
        return false;
    *out = x;
    return true;
}

/* OpenMP's list form: positive counts separated by commas ("4" or "4,2"). */
static bool env_thread_list(const char *v)
{
    char part[32];
    while (*v) {
        size_t len = strcspn(v, ",");
        int64_t n = 0;
        if (len == 0 || len >= sizeof part)
            return false;
        memcpy(part, v, len);
        part[len] = '\0';
        if (!env_integer(part, 1, ZT_ENV_THREADS_MAX, &n))
            return false;
        v += len;
        if (*v == ',' && !*++v)
            return false;
    }
    return true;
}

/* The variable's value, NULL when unset or empty (an empty value is unset
 * for every variable here, as for the shell's `VAR= cmd`). */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static zt_status env_comm_timeout(zt_env *env)
{
    const char *v = env_value("ZT_COMM_TIMEOUT");
    if (v && !env_seconds(v, ZT_ENV_COMM_TIMEOUT_MAX, &env->comm_timeout_s))
        return env_bad("ZT_COMM_TIMEOUT", v, "a number of seconds from 0 to 1000000",
                       "set ZT_COMM_TIMEOUT to the seconds a collective may take (default "
                       "600; plain digits, like 120 or 2.5), or to 0 to turn the collective "
                       "watchdog off");
    return ZT_OK;
}

static zt_status env_ranks_per_node(zt_env *env)
{
    const char *v = env_value("ZT_RANKS_PER_NODE");
    int64_t n = 0;
    if (v && !env_integer(v, 1, ZT_ENV_RANKS_PER_NODE_MAX, &n))
        return env_bad("ZT_RANKS_PER_NODE", v, "a whole number of ranks from 1 to 65536",
                       "set ZT_RANKS_PER_NODE to a divisor of the ranks on each host to "
                       "simulate nodes of that many ranks, or unset it");
    env->ranks_per_node = (int)n;
    return ZT_OK;
}

static zt_status env_stop_grace(zt_env *env)
{
    const char *v = env_value("ZT_STOP_GRACE");
    double s = 0;
    if (v && (!env_seconds(v, ZT_ENV_STOP_GRACE_MAX, &s) || s <= 0))
        return env_bad("ZT_STOP_GRACE", v, "a number of seconds above 0 and up to 1000000",
                       "set ZT_STOP_GRACE to the seconds a stopping run may take to save and "
                       "exit after SIGTERM or SIGUSR1 (default 300)");
    if (v)
        env->stop_grace_s = s;
    return ZT_OK;
}

static zt_status env_cgroup_root(zt_env *env)
{
    const char *v = env_value("ZT_CGROUP_ROOT");
    if (v && (v[0] != '/' || strlen(v) > 256))
        return env_bad("ZT_CGROUP_ROOT", v, "an absolute path of at most 256 characters",
                       "ZT_CGROUP_ROOT is the cgroup file system's mount point (default "
                       "/sys/fs/cgroup); unset it");
    if (v)
        env->cgroup_root = v;
    return ZT_OK;
}

static zt_status env_cpu_isa(zt_env *env)
{
    const char *v = env_value("ZT_CPU_ISA");
    bool known = false;
    for (size_t i = 0; v && i < sizeof zt_env_cpu_isas / sizeof *zt_env_cpu_isas; i++)
        known = known || !strcmp(v, zt_env_cpu_isas[i]);
    if (v && !known)
        return env_bad("ZT_CPU_ISA", v, "one of baseline, avx2, avx512",
                       "ZT_CPU_ISA picks the CPU optimizer kernels (every one gives the same "
                       "bits); unset it for the best this CPU runs");
    env->cpu_isa = v;
    return ZT_OK;
}

static zt_status env_gemm_workspace(zt_env *env)
{
    const char *v = env_value("ZT_CUDA_GEMM_WORKSPACE_MB");
    int64_t mb = 0;
    if (v && !env_integer(v, 1, ZT_ENV_GEMM_WORKSPACE_MB_MAX, &mb))
        return env_bad("ZT_CUDA_GEMM_WORKSPACE_MB", v, "a whole number of MiB from 1 to 1048576",
                       "set it to the MiB of the 16-bit GEMM operand buffers (default 128), "
                       "or unset it");
    env->cuda_gemm_workspace_mb = v;
    return ZT_OK;
}

static zt_status env_omp_threads(zt_env *env)
{
    (void)env;
    const char *v = env_value("OMP_NUM_THREADS");
    if (v && !env_thread_list(v))
        return env_bad("OMP_NUM_THREADS", v, "a thread count from 1 to 4096 (or a list of them)",
                       "unset OMP_NUM_THREADS and zerotrain gives each rank its share of the "
                       "cores, or set it to a positive number");
    return ZT_OK;
}

static zt_status env_ckpt_fail_after(zt_env *env)
{
    const char *v = env_value("ZT_CKPT_FAIL_AFTER_BYTES");
    int64_t n = -1;
    if (v && !env_integer(v, 0, INT64_MAX, &n))
        return env_bad("ZT_CKPT_FAIL_AFTER_BYTES", v, "a byte count >= 0",
                       "a test hook: a save fails after that many bytes; unset it");
    env->ckpt_fail_after_bytes = n;
    return ZT_OK;
}

static zt_status env_ckpt_stall_rank(zt_env *env)
{
    const char *v = env_value("ZT_CKPT_STALL_RANK");
    int64_t r = -1;
    if (v && !env_integer(v, 0, INT32_MAX, &r))
        return env_bad("ZT_CKPT_STALL_RANK", v, "a rank number >= 0",
                       "a test hook: that rank stalls as a save starts; unset it");
    env->ckpt_stall_rank = (int)r;
    return ZT_OK;
}

static const char *const env_fail_sites[] = {"backend", "pipeline", "sampler", "plan",
                                             "reserve"};

static zt_status env_fail_at(zt_env *env)
{
    const char *v = env_value("ZT_FAIL_AT");
    if (!v)
        return ZT_OK;
    const char *at = strchr(v, '@');
    size_t len = at ? (size_t)(at - v) : 0;
    int64_t r = -1;
    const char *site = NULL;
    for (size_t i = 0; at && i < sizeof env_fail_sites / sizeof *env_fail_sites; i++)
        if (strlen(env_fail_sites[i]) == len && !strncmp(v, env_fail_sites[i], len))
            site = env_fail_sites[i];
    if (!site || !env_integer(at + 1, 0, INT32_MAX, &r))
        return env_bad("ZT_FAIL_AT", v,
                       "SITE@RANK with a SITE of backend, pipeline, sampler, plan, reserve",
                       "a test hook: that rank fails at that start-up step; unset it");
    env->fail_site = site;
    env->fail_rank = (int)r;
    return ZT_OK;
}

zt_status zt_env_parse(zt_env *env)
{
    static zt_status (*const parsers[])(zt_env *) = {
        env_comm_timeout, env_ranks_per_node, env_stop_grace,      env_cgroup_root,
        env_cpu_isa,      env_gemm_workspace, env_omp_threads,     env_ckpt_fail_after,
        env_ckpt_stall_rank, env_fail_at};
    *env = (zt_env){.comm_timeout_s = 600,
                    .stop_grace_s = ZT_ENV_STOP_GRACE_DEFAULT,
                    .cgroup_root = "/sys/fs/cgroup",
                    .ckpt_fail_after_bytes = -1,
                    .ckpt_stall_rank = -1,
                    .fail_rank = -1};
    /* Every variable is parsed whatever an earlier one said, so defaults
     * stand only for the bad ones; the first failure is the one reported. */
    zt_status first = ZT_OK;
    char msg[2048] = "", hint[1024] = "";
    for (size_t i = 0; i < sizeof parsers / sizeof *parsers; i++) {
        zt_status st = parsers[i](env);
        if (st != ZT_OK && first == ZT_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", zt_status_message());
            snprintf(hint, sizeof hint, "%s", zt_status_hint());
        }
    }
    return first == ZT_OK ? ZT_OK : zt_fail(first, hint, "%s", msg);
}

static zt_env env_loaded;
static zt_status env_status;
static char env_msg[2048], env_hint[1024];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void env_load_once(void)
{
    env_status = zt_env_parse(&env_loaded);
    if (env_status != ZT_OK) {
        snprintf(env_msg, sizeof env_msg, "%s", zt_status_message());
        snprintf(env_hint, sizeof env_hint, "%s", zt_status_hint());
    }
}

zt_status zt_env_load(void)
{
    pthread_once(&env_once, env_load_once);
    if (env_status != ZT_OK)
        return zt_fail(env_status, env_hint, "%s", env_msg);
    return ZT_OK;
}

const zt_env *zt_env_get(void)
{
    pthread_once(&env_once, env_load_once);
    return &env_loaded;
}

zt_status zt_env_fail_at(const char *site)
{
    const zt_env *e = zt_env_get();
    if (!e->fail_site || strcmp(e->fail_site, site) != 0 || e->fail_rank != zt_status_rank())
        return ZT_OK;
    return zt_fail(ZT_ERR_OOM, "a test hook failed this step on purpose; unset ZT_FAIL_AT",
                   "ZT_FAIL_AT=%s@%d: the %s step failed on this rank", site, e->fail_rank, site);
}

void zt_env_fingerprint(zt_fingerprint *fp)
{
    const zt_env *e = zt_env_get();
    zt_fingerprint_f64(fp, "ZT_COMM_TIMEOUT", e->comm_timeout_s);
    zt_fingerprint_i64(fp, "ZT_RANKS_PER_NODE", e->ranks_per_node);
    zt_fingerprint_f64(fp, "ZT_STOP_GRACE", e->stop_grace_s);
}
