/* The progress line's pieces (engine/monitor/progress.h) and the default
 * thread count (engine/world/threads.h): durations, grouped numbers, the
 * default log path, cores / sharing ranks and cgroup quotas, against values
 * worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/monitor/progress.h"
#include "engine/world/threads.h"

static void test_durations(void **state)
{
    (void)state;
    char b[32];
    zt_progress_duration(0.0, b, sizeof b);
    assert_string_equal(b, "0:00");
    zt_progress_duration(9.6, b, sizeof b);
    assert_string_equal(b, "0:10");
    zt_progress_duration(65.0, b, sizeof b);
    assert_string_equal(b, "1:05");
    zt_progress_duration(3599.4, b, sizeof b);
    assert_string_equal(b, "59:59");
    zt_progress_duration(7385.0, b, sizeof b);
    assert_string_equal(b, "2:03:05");
    zt_progress_duration(0.0 / 0.0, b, sizeof b);
    assert_string_equal(b, "?");
    zt_progress_duration(-1.0, b, sizeof b);
    assert_string_equal(b, "?");
}

static void test_numbers(void **state)
{
    (void)state;
    char b[32];
    zt_progress_number(85.34, b, sizeof b);
    assert_string_equal(b, "85.3");
    zt_progress_number(0.04, b, sizeof b);
    assert_string_equal(b, "0.0");
    zt_progress_number(100.0, b, sizeof b);
    assert_string_equal(b, "100");
    zt_progress_number(999.5, b, sizeof b);
    assert_string_equal(b, "1,000");
    zt_progress_number(1234.4, b, sizeof b);
    assert_string_equal(b, "1,234");
    zt_progress_number(123456.0, b, sizeof b);
    assert_string_equal(b, "123,456");
    zt_progress_number(1234567.8, b, sizeof b);
    assert_string_equal(b, "1,234,568");
    zt_progress_number(1.0 / 0.0, b, sizeof b);
    assert_string_equal(b, "?");
}

static void test_log_path(void **state)
{
    (void)state;
    char b[64];
    zt_progress_log_path("runs/r.json", b, sizeof b);
    assert_string_equal(b, "runs/r.jsonl");
    zt_progress_log_path("report", b, sizeof b);
    assert_string_equal(b, "report.jsonl");
    zt_progress_log_path(".json", b, sizeof b);
    assert_string_equal(b, ".jsonl");
}

static void test_thread_default(void **state)
{
    (void)state;
    assert_int_equal(zt_threads_default(2, 2), 1);
    assert_int_equal(zt_threads_default(16, 4), 4);
    assert_int_equal(zt_threads_default(16, 3), 5);
    assert_int_equal(zt_threads_default(2, 4), 1); /* more ranks than cores: still one */
    assert_int_equal(zt_threads_default(8, 1), 8);  /* a rank bound to its own cores */
    assert_int_equal(zt_threads_default(0, 1), 1);
}

static void test_quota(void **state)
{
    (void)state;
    assert_int_equal(zt_threads_quota_cores("max 100000\n"), 0);
    assert_int_equal(zt_threads_quota_cores("200000 100000\n"), 2);
    assert_int_equal(zt_threads_quota_cores("150000 100000"), 2);
    assert_int_equal(zt_threads_quota_cores("50000 100000"), 1);
    assert_int_equal(zt_threads_quota_cores("-1 100000"), 0); /* cgroup v1: no quota */
    assert_int_equal(zt_threads_quota_cores(""), 0);
    assert_int_equal(zt_threads_quota_cores(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),   cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_log_path),    cmocka_unit_test(test_thread_default),
        cmocka_unit_test(test_quota),
    };
    return cmocka_run_group_tests_name("progress", tests, NULL, NULL);
}
