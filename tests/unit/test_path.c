/* engine/path: reading user-named files never blocks on a FIFO and refuses
 * what is not a regular file by name (directory, FIFO, device); missing
 * files, symlink loops, long names, permission denied and non-directories
 * each get their own message; a pipe with a writer is read only when allowed;
 * output checks leave no file behind and do not touch existing ones.
 *
 * Permission cases run as root too: the test drops its effective user id to
 * nobody (65534) around them, since root passes every permission check. Every
 * case runs under alarm(), so a regression to a blocking open fails instead
 * of hanging. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/path.h"

static char tmp_dir[] = "/tmp/zt_test_path_XXXXXX";

static const char *tmp_path(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmp_dir, name);
    return p;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

static void assert_message_has(const char *needle)
{
    if (!strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", zt_status_message(), needle);
}

static void assert_message_lacks(const char *needle)
{
    if (strstr(zt_status_message(), needle))
        fail_msg("message \"%s\" has \"%s\"", zt_status_message(), needle);
}

static void assert_hint_has(const char *needle)
{
    if (!strstr(zt_status_hint(), needle))
        fail_msg("hint \"%s\" lacks \"%s\"", zt_status_hint(), needle);
}

/* Files in tmp_dir, "." and ".." not counted. */
static int entries(void)
{
    DIR *d = opendir(tmp_dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_read_regular(void **state)
{
    (void)state;
    write_file(tmp_path("a.txt"), "hello\nworld\n");
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(zt_path_read(tmp_path("a.txt"), "data file", "h", -1, false, &buf, &len),
                     ZT_OK);
    assert_int_equal(len, 12);
    assert_string_equal(buf, "hello\nworld\n");
    free(buf);
    assert_int_equal(zt_path_read(tmp_path("a.txt"), "data file", "h", 5, false, &buf, &len),
                     ZT_ERR_DATA);
    assert_null(buf);
    assert_message_has("more than the 5 expected");
    write_file(tmp_path("empty.txt"), "");
    assert_int_equal(zt_path_read(tmp_path("empty.txt"), "data file", "h", -1, false, &buf, &len),
                     ZT_OK);
    assert_int_equal(len, 0);
    assert_string_equal(buf, "");
    free(buf);
    /* The opened descriptor blocks again (O_NONBLOCK was only for the open). */
    int fd = -1;
    assert_int_equal(zt_path_open_read(tmp_path("a.txt"), "checkpoint shard", "h", &fd), ZT_OK);
    assert_true(fd >= 0);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
}

static void test_read_missing_and_loops(void **state)
{
    (void)state;
    int fd = 7;
    assert_int_equal(zt_path_open_read(tmp_path("none"), "config file", "check --config", &fd),
                     ZT_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_true(fd < 0);
    assert_message_has("config file ");
    assert_message_has("none: No such file or directory");
    assert_string_equal(zt_status_hint(), "check --config");

    /* A symlink loop is not reported as a missing file. */
    assert_int_equal(symlink(tmp_path("loop"), tmp_path("loop")), 0);
    char *buf = NULL;
    size_t len;
    assert_int_equal(zt_path_read(tmp_path("loop"), "data file", "h", -1, false, &buf, &len),
                     ZT_ERR_IO);
    assert_message_has("loop: is a symlink loop");
    assert_message_lacks("No such file");
    assert_hint_has("ls -l");
    assert_int_equal(zt_path_fail(ELOOP, "/x/y", "checkpoint directory", "h"), ZT_ERR_IO);
    assert_message_has("checkpoint directory /x/y: is a symlink loop");

    /* A regular file used as a directory. */
    write_file(tmp_path("plain"), "x");
    assert_int_equal(zt_path_open_read(tmp_path("plain/inside"), "data file", "h", &fd),
                     ZT_ERR_IO);
    assert_message_has("a component of the path is not a directory");

    /* A name longer than NAME_MAX. */
    char longname[600];
    memset(longname, 'n', 300);
    longname[300] = '\0';
    assert_int_equal(zt_path_open_read(tmp_path(longname), "data file", "h", &fd), ZT_ERR_IO);
    assert_message_has("the path is too long");
}

static void test_not_regular(void **state)
{
    (void)state;
    int fd = 7;
    assert_int_equal(zt_path_open_read(tmp_dir, "data file", "check --data", &fd), ZT_ERR_IO);
    assert_int_equal(errno, 0);
    assert_message_has(": is a directory, not a file");
    assert_string_equal(zt_status_hint(), "check --data");

    /* A FIFO nobody writes to: refused at once, not waited on (alarm). */
    assert_int_equal(mkfifo(tmp_path("fifo"), 0644), 0);
    assert_int_equal(zt_path_open_read(tmp_path("fifo"), "checkpoint shard", "h", &fd),
                     ZT_ERR_IO);
    assert_message_has("fifo: is a FIFO (named pipe), not a regular file");
    char *buf = NULL;
    size_t len;
    assert_int_equal(zt_path_read(tmp_path("fifo"), "tokenizer file", "h", -1, false, &buf, &len),
                     ZT_ERR_IO);
    assert_message_has("is a FIFO (named pipe), not a regular file");
    /* Allowed pipes: one without a writer is refused rather than read as empty. */
    assert_int_equal(zt_path_read(tmp_path("fifo"), "config file", "h", -1, true, &buf, &len),
                     ZT_ERR_IO);
    assert_message_has("is a pipe or FIFO that nothing writes to");
    assert_null(buf);

    assert_int_equal(zt_path_read("/dev/null", "config file", "h", -1, false, &buf, &len),
                     ZT_ERR_IO);
    assert_message_has("/dev/null: is a character device, not a regular file");
}

static void test_pipes(void **state)
{
    (void)state;
    char path[64], *buf = NULL;
    size_t len;
    /* Written and closed before the read: what a finished `<(echo ...)` is. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(write(p[1], "{\"a\": 1}", 8), 8);
    close(p[1]);
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
    assert_int_equal(zt_path_read(path, "config file", "h", -1, true, &buf, &len), ZT_OK);
    assert_int_equal(len, 8);
    assert_string_equal(buf, "{\"a\": 1}");
    free(buf);
    close(p[0]);

    /* A writer that writes later: the read waits for it. */
    assert_int_equal(pipe(p), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(p[0]);
        usleep(200 * 1000);
        ssize_t w = write(p[1], "late", 4);
        _exit(w == 4 ? 0 : 1);
    }
    close(p[1]);
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
    assert_int_equal(zt_path_read(path, "config file", "h", -1, true, &buf, &len), ZT_OK);
    assert_string_equal(buf, "late");
    free(buf);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* Not allowed: a pipe is not a regular file. */
    assert_int_equal(zt_path_read(path, "data file", "h", -1, false, &buf, &len), ZT_ERR_IO);
    assert_message_has("is a FIFO (named pipe), not a regular file");
    close(p[0]);
}

static void test_dirname(void **state)
{
    (void)state;
    static const char *cases[][2] = {
        {"r.json", "."},   {"/r.json", "/"},    {"a/b", "a"},   {"a//b", "a"},
        {"/x/y/z", "/x/y"}, {"a/b/", "a"},      {"/", "/"},     {"", "."},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        zt_path_dirname(cases[i][0], buf, sizeof buf);
        assert_string_equal(buf, cases[i][1]);
    }
}

static void test_check_output(void **state)
{
    (void)state;
    int before = entries();
    /* A new file in an existing directory: fine, and nothing is left behind. */
    assert_int_equal(zt_path_check_output(tmp_path("new.json"), "report", "h"), ZT_OK);
    assert_int_equal(access(tmp_path("new.json"), F_OK), -1);
    assert_int_equal(entries(), before);
    /* An existing file keeps its contents. */
    write_file(tmp_path("old.bin"), "keep me");
    assert_int_equal(zt_path_check_output(tmp_path("old.bin"), "dump", "h"), ZT_OK);
    char *buf = NULL;
    size_t len;
    assert_int_equal(zt_path_read(tmp_path("old.bin"), "dump", "h", -1, false, &buf, &len), ZT_OK);
    assert_string_equal(buf, "keep me");
    free(buf);

    assert_int_equal(zt_path_check_output("/nonexistent/dir/r.json", "report", "make it"),
                     ZT_ERR_IO);
    assert_message_has("cannot write report /nonexistent/dir/r.json: directory /nonexistent/dir "
                       "does not exist");
    assert_string_equal(zt_status_hint(), "make it");
    assert_int_equal(zt_path_check_output(tmp_dir, "dump", "h"), ZT_ERR_IO);
    assert_message_has(": it is a directory");
    if (access(tmp_path("fifo"), F_OK) != 0)
        assert_int_equal(mkfifo(tmp_path("fifo"), 0644), 0);
    assert_int_equal(zt_path_check_output(tmp_path("fifo"), "report", "h"), ZT_ERR_IO);
    assert_message_has("it is a FIFO (named pipe), not a regular file");
    write_file(tmp_path("plain"), "x");
    assert_int_equal(zt_path_check_output(tmp_path("plain/r.json"), "report", "h"), ZT_ERR_IO);
    assert_message_has("is not a directory");

    /* A directory, for outputs whose names vary (--dump-grads with %d). */
    before = entries();
    assert_int_equal(zt_path_check_output_dir(tmp_dir, "g%d.bin", "gradient dump", "h"), ZT_OK);
    assert_int_equal(entries(), before);
    assert_int_equal(zt_path_check_output_dir("/nonexistent/d", "/nonexistent/d/g%d.bin",
                                              "gradient dump", "h"),
                     ZT_ERR_IO);
    assert_message_has("cannot write gradient dump /nonexistent/d/g%d.bin: directory "
                       "/nonexistent/d does not exist");
    assert_int_equal(zt_path_check_output_dir(tmp_path("plain"), "x", "gradient dump", "h"),
                     ZT_ERR_IO);
    assert_message_has("is not a directory");
}

/* Runs the permission checks as nobody: root would pass them all. */
static void test_permission_denied(void **state)
{
    (void)state;
    write_file(tmp_path("secret"), "s");
    assert_int_equal(chmod(tmp_path("secret"), 0), 0);
    assert_int_equal(mkdir(tmp_path("ro"), 0555), 0);
    bool dropped = geteuid() == 0;
    if (dropped)
        assert_int_equal(seteuid(65534), 0);
    int fd;
    zt_status st = zt_path_open_read(tmp_path("secret"), "checkpoint shard", "resave", &fd);
    int err = errno;
    char msg[2048], hint[1024];
    snprintf(msg, sizeof msg, "%s", zt_status_message());
    snprintf(hint, sizeof hint, "%s", zt_status_hint());
    zt_status out_file = zt_path_check_output(tmp_path("secret"), "dump", "h");
    char out_file_msg[2048];
    snprintf(out_file_msg, sizeof out_file_msg, "%s", zt_status_message());
    zt_status out_dir = zt_path_check_output(tmp_path("ro/r.json"), "report", "h");
    char out_dir_hint[1024];
    snprintf(out_dir_hint, sizeof out_dir_hint, "%s", zt_status_hint());
    if (dropped)
        assert_int_equal(seteuid(0), 0);
    assert_int_equal(st, ZT_ERR_IO);
    assert_int_equal(err, EACCES);
    assert_non_null(strstr(msg, "permission denied: cannot read checkpoint shard"));
    assert_non_null(strstr(hint, "chmod a+r"));
    assert_null(strstr(hint, "resave"));
    assert_int_equal(out_file, ZT_ERR_IO);
    assert_non_null(strstr(out_file_msg, "permission denied: cannot write dump"));
    assert_int_equal(out_dir, ZT_ERR_IO);
    assert_non_null(strstr(out_dir_hint, "chmod u+w"));
    assert_int_equal(access(tmp_path("ro/r.json"), F_OK), -1);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmp_dir))
        return -1;
    /* nobody must reach the files of the permission case. */
    return chmod(tmp_dir, 0755);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int arm_alarm(void **state)
{
    (void)state;
    alarm(20);
    return 0;
}

static int disarm_alarm(void **state)
{
    (void)state;
    alarm(0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_regular, arm_alarm, disarm_alarm),
        cmocka_unit_test_setup_teardown(test_read_missing_and_loops, arm_alarm, disarm_alarm),
        cmocka_unit_test_setup_teardown(test_not_regular, arm_alarm, disarm_alarm),
        cmocka_unit_test_setup_teardown(test_pipes, arm_alarm, disarm_alarm),
        cmocka_unit_test_setup_teardown(test_dirname, arm_alarm, disarm_alarm),
        cmocka_unit_test_setup_teardown(test_check_output, arm_alarm, disarm_alarm),
        cmocka_unit_test_setup_teardown(test_permission_denied, arm_alarm, disarm_alarm),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
