/*
 * test_env: engine/env's parse of every variable zerotrain reads: the
 * defaults, the accepted forms at both ends of each range, the refused ones
 * (each named in the message, with a hint), the first bad variable reported
 * while the good ones still take their values, and a value quoted without
 * its raw bytes. The values are set in this process's environment and
 * parsed with zt_env_parse, which reads it anew at each call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/cuda/launch.h"
#include "engine/env.h"

static const char *const VARS[] = {"ZT_COMM_TIMEOUT",     "ZT_RANKS_PER_NODE",
                                   "ZT_STOP_GRACE",       "ZT_CGROUP_ROOT",
                                   "ZT_CPU_ISA",          "ZT_CUDA_GEMM_WORKSPACE_MB",
                                   "OMP_NUM_THREADS",     "ZT_CKPT_FAIL_AFTER_BYTES",
                                   "ZT_CKPT_STALL_RANK"};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof VARS / sizeof *VARS; i++)
        unsetenv(VARS[i]);
    return 0;
}

/* NAME=value parses, and get(env) is then want. */
static void check_ok(const char *name, const char *value, double (*get)(const zt_env *),
                     double want, const char *file, int line)
{
    clear_env(NULL);
    setenv(name, value, 1);
    zt_env env;
    zt_status_clear();
    zt_status st = zt_env_parse(&env);
    if (st != ZT_OK || get(&env) != want) {
        print_error("%s:%d: %s=%s gave %s, %g; want %g (%s)\n", file, line, name, value,
                    zt_status_name(st), get(&env), want, zt_status_message());
        fail();
    }
}
#define assert_ok(name, value, get, want) check_ok((name), (value), (get), (want), __FILE__, __LINE__)

/* NAME=value is refused: ZT_ERR_USAGE, the name and `expected` in the
 * message, a hint, and get(env) still the default. */
static void check_refused(const char *name, const char *value, const char *expected,
                          double (*get)(const zt_env *), double dflt, const char *file, int line)
{
    clear_env(NULL);
    setenv(name, value, 1);
    zt_env env;
    zt_status_clear();
    zt_status st = zt_env_parse(&env);
    char want[64];
    snprintf(want, sizeof want, "%s='", name);
    if (st != ZT_ERR_USAGE || !strstr(zt_status_message(), want) ||
        !strstr(zt_status_message(), expected) || !zt_status_hint()[0] || get(&env) != dflt) {
        print_error("%s:%d: %s=\"%s\" gave %s, \"%s\" (hint \"%s\"), value %g; want usage "
                    "naming it, \"%s\", default %g\n",
                    file, line, name, value, zt_status_name(st), zt_status_message(),
                    zt_status_hint(), get(&env), expected, dflt);
        fail();
    }
}
#define assert_refused(name, value, expected, get, dflt) \
    check_refused((name), (value), (expected), (get), (dflt), __FILE__, __LINE__)

static double timeout(const zt_env *e) { return e->comm_timeout_s; }
static double rpn(const zt_env *e) { return e->ranks_per_node; }
static double grace(const zt_env *e) { return e->stop_grace_s; }
static double fail_after(const zt_env *e) { return (double)e->ckpt_fail_after_bytes; }
static double stall(const zt_env *e) { return e->ckpt_stall_rank; }
static double none(const zt_env *e) { (void)e; return 0; }

static void test_defaults(void **state)
{
    (void)state;
    zt_env env;
    assert_int_equal(zt_env_parse(&env), ZT_OK);
    assert_true(env.comm_timeout_s == 600);
    assert_int_equal(env.ranks_per_node, 0);
    assert_true(env.stop_grace_s == ZT_ENV_STOP_GRACE_DEFAULT);
    assert_string_equal(env.cgroup_root, "/sys/fs/cgroup");
    assert_null(env.cpu_isa);
    assert_null(env.cuda_gemm_workspace_mb);
    assert_int_equal(env.ckpt_fail_after_bytes, -1);
    assert_int_equal(env.ckpt_stall_rank, -1);
    /* Empty is unset, as for `VAR= cmd`. */
    setenv("ZT_COMM_TIMEOUT", "", 1);
    setenv("ZT_RANKS_PER_NODE", "", 1);
    assert_int_equal(zt_env_parse(&env), ZT_OK);
    assert_true(env.comm_timeout_s == 600);
    assert_int_equal(env.ranks_per_node, 0);
}

static void test_comm_timeout(void **state)
{
    (void)state;
    assert_ok("ZT_COMM_TIMEOUT", "0", timeout, 0);
    assert_ok("ZT_COMM_TIMEOUT", "2.5", timeout, 2.5);
    assert_ok("ZT_COMM_TIMEOUT", ".5", timeout, 0.5);
    assert_ok("ZT_COMM_TIMEOUT", "600", timeout, 600);
    assert_ok("ZT_COMM_TIMEOUT", "1000000", timeout, 1e6);
    const char *bad[] = {"abc", "-1",  "10s", " ",    " 5",  "1.2.3", ".",
                         "inf", "nan", "1e3", "0x10", "1000000.5",
                         /* the livelock: past int64_t as a double */
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_refused("ZT_COMM_TIMEOUT", bad[i], "a number of seconds from 0 to 1000000",
                       timeout, 600);
}

static void test_ranks_per_node(void **state)
{
    (void)state;
    assert_ok("ZT_RANKS_PER_NODE", "1", rpn, 1);
    assert_ok("ZT_RANKS_PER_NODE", "65536", rpn, 65536);
    const char *bad[] = {"0", "abc", "-2", "2x", "65537", "99999999999999999999", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_refused("ZT_RANKS_PER_NODE", bad[i], "a whole number of ranks from 1 to 65536",
                       rpn, 0);
}

static void test_stop_grace(void **state)
{
    (void)state;
    assert_ok("ZT_STOP_GRACE", "1", grace, 1);
    assert_ok("ZT_STOP_GRACE", "0.25", grace, 0.25);
    assert_ok("ZT_STOP_GRACE", "1000000", grace, 1e6);
    const char *bad[] = {"0", "-1", "abc", "1000001", "1e9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_refused("ZT_STOP_GRACE", bad[i], "a number of seconds above 0", grace,
                       ZT_ENV_STOP_GRACE_DEFAULT);
}

static void test_host_variables(void **state)
{
    (void)state;
    zt_env env;
    clear_env(NULL);
    setenv("ZT_CGROUP_ROOT", "/tmp/cg", 1);
    setenv("ZT_CPU_ISA", "baseline", 1);
    setenv("ZT_CUDA_GEMM_WORKSPACE_MB", "256", 1);
    setenv("OMP_NUM_THREADS", "4,2", 1);
    assert_int_equal(zt_env_parse(&env), ZT_OK);
    assert_string_equal(env.cgroup_root, "/tmp/cg");
    assert_string_equal(env.cpu_isa, "baseline");
    assert_string_equal(env.cuda_gemm_workspace_mb, "256");
    assert_refused("ZT_CGROUP_ROOT", "relative/path", "an absolute path", none, 0);
    assert_refused("ZT_CPU_ISA", "avx3", "one of baseline, avx2, avx512", none, 0);
    assert_refused("ZT_CUDA_GEMM_WORKSPACE_MB", "0", "a whole number of MiB", none, 0);
    assert_refused("ZT_CUDA_GEMM_WORKSPACE_MB", "1048577", "a whole number of MiB", none, 0);
    const char *threads[] = {"abc", "0", "-1", "4,", ",4", "4,,2", "4097", "2.5"};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++)
        assert_refused("OMP_NUM_THREADS", threads[i], "a thread count from 1 to 4096", none, 0);
    assert_ok("OMP_NUM_THREADS", "4096", none, 0);
}

static void test_hooks(void **state)
{
    (void)state;
    assert_ok("ZT_CKPT_FAIL_AFTER_BYTES", "0", fail_after, 0);
    assert_ok("ZT_CKPT_FAIL_AFTER_BYTES", "9223372036854775807", fail_after,
              9223372036854775807.0);
    assert_refused("ZT_CKPT_FAIL_AFTER_BYTES", "9223372036854775808", "a byte count", fail_after,
                   -1);
    assert_refused("ZT_CKPT_FAIL_AFTER_BYTES", "-5", "a byte count", fail_after, -1);
    assert_ok("ZT_CKPT_STALL_RANK", "3", stall, 3);
    assert_refused("ZT_CKPT_STALL_RANK", "one", "a rank number", stall, -1);
    assert_refused("ZT_CKPT_STALL_RANK", "2147483648", "a rank number", stall, -1);
}

/* The names and bounds env checks are the ones their users apply: every
 * ISA name the CPU backend's, in its order; the workspace bound launch.h's. */
static void test_rules_match_their_users(void **state)
{
    (void)state;
    assert_int_equal(ZT_CPU_ISA_COUNT, 3);
    for (int i = 0; i < ZT_CPU_ISA_COUNT; i++) {
        zt_cpu_isa isa;
        assert_int_equal(zt_cpu_isa_parse(zt_env_cpu_isas[i], &isa), ZT_OK);
        assert_int_equal((int)isa, i);
    }
    zt_launch_ws ws;
    char top[32];
    snprintf(top, sizeof top, "%d", ZT_ENV_GEMM_WORKSPACE_MB_MAX);
    assert_int_equal(zt_launch_workspace(top, true, &ws), ZT_OK);
    snprintf(top, sizeof top, "%d", ZT_ENV_GEMM_WORKSPACE_MB_MAX + 1);
    assert_int_equal(zt_launch_workspace(top, true, &ws), ZT_ERR_USAGE);
}

/* Two bad variables: the first in the table's order is reported, and a
 * good one after them still takes its value. */
static void test_first_failure(void **state)
{
    (void)state;
    clear_env(NULL);
    setenv("ZT_RANKS_PER_NODE", "zero", 1);
    setenv("ZT_CKPT_STALL_RANK", "x", 1);
    setenv("ZT_COMM_TIMEOUT", "5", 1);
    setenv("ZT_CGROUP_ROOT", "/tmp/cg", 1);
    zt_env env;
    assert_int_equal(zt_env_parse(&env), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "ZT_RANKS_PER_NODE='zero'"));
    assert_true(env.comm_timeout_s == 5);
    assert_string_equal(env.cgroup_root, "/tmp/cg");
    assert_int_equal(env.ranks_per_node, 0);
    assert_int_equal(env.ckpt_stall_rank, -1);
}

/* A value's raw bytes never reach the terminal: control and non-ASCII
 * bytes are '?', and a long value is cut at 40 characters. */
static void test_quoting(void **state)
{
    (void)state;
    clear_env(NULL);
    setenv("ZT_COMM_TIMEOUT", "1\x1b[31m\xff\xfe", 1);
    zt_env env;
    assert_int_equal(zt_env_parse(&env), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "ZT_COMM_TIMEOUT='1?[31m?" "?'"));
    char longv[100];
    memset(longv, '7', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    setenv("ZT_COMM_TIMEOUT", longv, 1);
    assert_int_equal(zt_env_parse(&env), ZT_ERR_USAGE);
    assert_non_null(strstr(zt_status_message(), "7777...'"));
    assert_true(strlen(zt_status_message()) < 120);
}

/* zt_env_load keeps its first result: later changes to the environment do
 * not reach a running process. */
static void test_load_once(void **state)
{
    (void)state;
    clear_env(NULL);
    setenv("ZT_COMM_TIMEOUT", "7", 1);
    assert_int_equal(zt_env_load(), ZT_OK);
    setenv("ZT_COMM_TIMEOUT", "abc", 1);
    assert_int_equal(zt_env_load(), ZT_OK);
    assert_true(zt_env_get()->comm_timeout_s == 7);
    zt_fingerprint fp;
    zt_fingerprint_init(&fp);
    zt_env_fingerprint(&fp);
    assert_int_equal(fp.n, 3);
    assert_string_equal(fp.fields[0].name, "ZT_COMM_TIMEOUT");
    assert_string_equal(fp.fields[1].name, "ZT_RANKS_PER_NODE");
    assert_string_equal(fp.fields[2].name, "ZT_STOP_GRACE");
    zt_fingerprint_free(&fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test(test_comm_timeout),
        cmocka_unit_test(test_ranks_per_node),
        cmocka_unit_test(test_stop_grace),
        cmocka_unit_test(test_host_variables),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_rules_match_their_users),
        cmocka_unit_test(test_first_failure),
        cmocka_unit_test(test_quoting),
        cmocka_unit_test(test_load_once),
    };
    return cmocka_run_group_tests_name("env", tests, NULL, clear_env);
}
