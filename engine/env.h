/*
 * env: every environment variable zerotrain itself reads, parsed once and
 * bounded. zt_world_init loads them before its first collective; a bad value
 * does not stop the world's start-up (every rank still takes part in each of
 * its collectives) but is kept as the world's env_status, which cmd/ agrees
 * on at once: exit 2, printed by the lowest rank that has it. No value is
 * ever cast past its range or replaced by a default in silence.
 *
 * The variables that change what the ranks do together (the watchdog's
 * limit, the simulated node groups, the stop grace) join the cross-rank
 * fingerprint (zt_env_fingerprint), so ranks started with different values
 * stop with the variable named. The others are per host or per rank by
 * nature (a cgroup root, an ISA, test hooks).
 *
 * Not read here: OPENBLAS_* (OpenBLAS), OMPI_* and the launchers' local-rank
 * variables (engine/world/devices.c, cmd/exit.c), TMPDIR (the fuzz harness),
 * ZT_SIM_* (the CUDA simulator's hardware, tests/cudasim). OMP_NUM_THREADS is
 * the OpenMP runtime's, which ignores a bad value with a warning: it is
 * checked here too, so a typo is an error rather than all cores per rank.
 * docs/usage.md lists every variable with its bounds.
 *
 * Memory: one static zt_env; its strings point into the environment (which
 * zerotrain never changes after start-up). Collective: none.
 */
#ifndef ZT_ENV_H
#define ZT_ENV_H

#include <stdint.h>

#include "engine/fingerprint.h"
#include "engine/status.h"

/* The watchdog's limit; above it a collective is as good as never done. */
#define ZT_ENV_COMM_TIMEOUT_MAX 1e6
/* Seconds after the first stop request (SIGTERM, SIGUSR1) before a run that
 * has not ended is ended at once. */
#define ZT_ENV_STOP_GRACE_DEFAULT 300.0
#define ZT_ENV_STOP_GRACE_MAX 1e6
#define ZT_ENV_RANKS_PER_NODE_MAX 65536
#define ZT_ENV_THREADS_MAX 4096
/* ZT_CUDA_GEMM_WORKSPACE_MB's bound (engine/cuda/launch.h applies it). */
#define ZT_ENV_GEMM_WORKSPACE_MB_MAX (1 << 20)

/* ZT_CPU_ISA's names, in engine/cpu's order (tests/unit/test_env.c checks
 * that the CPU backend knows each). */
extern const char *const zt_env_cpu_isas[3];

typedef struct {
    double comm_timeout_s;  /* ZT_COMM_TIMEOUT: 600 unless set; 0 turns the watchdog off */
    int ranks_per_node;     /* ZT_RANKS_PER_NODE: 0 unless set (the hosts are the nodes) */
    double stop_grace_s;    /* ZT_STOP_GRACE: ZT_ENV_STOP_GRACE_DEFAULT unless set */
    const char *cgroup_root; /* ZT_CGROUP_ROOT: "/sys/fs/cgroup" unless set */
    const char *cpu_isa;     /* ZT_CPU_ISA: NULL unless set; one of the kernels' ISAs */
    const char *cuda_gemm_workspace_mb; /* ZT_CUDA_GEMM_WORKSPACE_MB: NULL unless set;
                                         * 1 to ZT_ENV_GEMM_WORKSPACE_MB_MAX */
    int64_t ckpt_fail_after_bytes; /* ZT_CKPT_FAIL_AFTER_BYTES (test hook): -1 unless set */
    int ckpt_stall_rank;           /* ZT_CKPT_STALL_RANK (test hook): -1 unless set */
    const char *fail_site;         /* ZT_FAIL_AT=SITE@RANK (test hook): NULL unless set */
    int fail_rank;
} zt_env;

/* ZT_FAIL_AT's failure when it names `site` and this rank (ZT_ERR_OOM,
 * as the real failures of these steps would be), else ZT_OK. The sites are
 * start-up steps a rank may fail alone: backend (its init), pipeline (the
 * pipeline's plan), sampler, plan (the trainer's layout and memory plan),
 * reserve (the arenas). tests/mpi/test_limits.sh fails each on one rank:
 * every rank must still stop together, that rank's message printed once. */
zt_status zt_env_fail_at(const char *site);

/* Parses the variables from the environment into *env: each bad one keeps
 * its default there, and the first bad one's failure (ZT_ERR_USAGE naming
 * the variable, its value and the allowed values) is returned. Reads the
 * environment anew at each call (tests use it). */
zt_status zt_env_parse(zt_env *env);

/* The process's variables: the first call parses them (zt_env_parse) and
 * every later call returns that first result. */
zt_status zt_env_load(void);

/* The loaded variables (loading them on first use; defaults where one was
 * bad, which zt_env_load reported). */
const zt_env *zt_env_get(void);

/* The variables every rank must share, as fingerprint fields. */
void zt_env_fingerprint(zt_fingerprint *fp);

#endif
