/*
 * test_fault_paths.c — what stepwatch does with whatever a run file or an output path names
 * (docs/reliability.md, "Paths"): it replaces only its own earlier run files and writes
 * outputs all or nothing; devices, FIFOs, links, empty and foreign files are left alone;
 * a run file that cannot be created never stops the program. Device nodes are made with
 * mknod in a private directory.
 */
#include "fault_util.h"

#include <sys/resource.h>

/* A profiler asked to write path: it works (records a step), the file's status is want. */
static void profile_to(const char *path, int want) {
    SW_TEST_PROFILER(p, .run_file = path);
    const char *written = NULL;
    assert_int_equal(sw_profiler_run_file(p, &written), want);
    sw_step_begin(p, 1);
    sw_step_end(p);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(s->steps, 1);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

static void test_run_file_never_replaces_devices(void **state) {
    char null_node[300], full_node[300];
    fault_path(null_node, sizeof null_node, "null");
    fault_path(full_node, sizeof full_node, "full");
    if (fault_mknod(null_node, 1, 3) != 0 || fault_mknod(full_node, 1, 7) != 0)
        skip();
    profile_to(null_node, SW_EEXISTS);
    profile_to(full_node, SW_EEXISTS);
    assert_true(fault_is_chardev(null_node, 1, 3));
    assert_true(fault_is_chardev(full_node, 1, 7));
    unlink(null_node);
    unlink(full_node);
}

static void test_run_file_never_replaces_what_is_not_ours(void **state) {
    char fifo[300], empty[300], notes[300], dir[300], link[300], target[300];
    fault_path(fifo, sizeof fifo, "fifo");
    fault_path(empty, sizeof empty, "empty.db");
    fault_path(notes, sizeof notes, "notes.db");
    fault_path(dir, sizeof dir, "dir.db");
    fault_path(link, sizeof link, "link.db");
    fault_path(target, sizeof target, "target.db");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fault_write_text(empty, "");
    fault_write_text(notes, "my precious notes\n");
    assert_int_equal(mkdir(dir, 0700), 0);
    profile_to(target, 0); /* a run file of ours, behind a link */
    assert_int_equal(symlink(target, link), 0);

    profile_to(fifo, SW_EEXISTS);
    profile_to(empty, SW_EEXISTS);
    profile_to(notes, SW_EEXISTS);
    profile_to(dir, SW_EEXISTS);
    profile_to(link, SW_EEXISTS);

    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(lstat(empty, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_string_equal(fault_read_text(notes), "my precious notes\n");
    assert_int_equal(lstat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(query_int(target, "SELECT steps FROM ranks"), 1);
    /* An earlier run file of ours is replaced by the next run at its path. */
    profile_to(target, 0);
    assert_int_equal(query_int(target, "SELECT complete FROM ranks"), 1);
}

/* A run file that cannot be created: the program goes on, one line on stderr says why. */
static void test_run_file_that_cannot_be_created(void **state) {
    char missing[300];
    fault_path(missing, sizeof missing, "no/such/dir/run.db");
    profile_to(missing, SW_EIO);
    char *long_name = malloc(10240 + 300);
    assert_non_null(long_name);
    int n = snprintf(long_name, 300, "%s/", g_dir);
    memset(long_name + n, 'x', 10240);
    long_name[n + 10240] = '\0';
    /* The reason is named, not "input/output error". */
    char err[300];
    fault_path(err, sizeof err, "stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    profile_to(long_name, SW_EIO);
    dup2(saved, 2);
    close(saved);
    assert_non_null(strstr(fault_read_text(err), "File name too long"));
    assert_non_null(strstr(fault_read_text(err), "training goes on without it"));
    free(long_name);
    unlink(err);
}

/* A directory we may not write, and a report we may not write (checked as an unprivileged
 * user: root may write anywhere). */
static void test_unwritable_places(void **state) {
    char dir[300], path[300], shared[300], report[300];
    fault_path(dir, sizeof dir, "readonly");
    fault_path(path, sizeof path, "readonly/run.db");
    fault_path(shared, sizeof shared, "shared");
    fault_path(report, sizeof report, "shared/report.txt");
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(shared, 0777), 0);
    chmod(shared, 0777);
    fault_write_text(report, "not yours\n");
    chmod(report, 0444);
    chmod(g_dir, 0711); /* the child may pass through */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (getuid() == 0 && setuid(65534) != 0)
            _exit(2);
        sw_options o = {.size = sizeof(sw_options), .run_file = path};
        sw_profiler *p = NULL;
        if (sw_profiler_new(&o, &p) != 0)
            _exit(3);
        int status = sw_profiler_run_file(p, NULL);
        sw_profiler_free(p);
        if (status != SW_EIO)
            _exit(4);
        int rc = sw_output_write_file(report, "mine\n", 5);
        _exit(rc == SW_EIO && strstr(sw_last_error(), "Permission denied") ? 0 : 5);
    }
    assert_int_equal(fault_wait(pid), 0);
    chmod(g_dir, 0700);
    assert_int_equal(access(path, F_OK), -1);
    assert_string_equal(fault_read_text(report), "not yours\n");
    unlink(report);
    rmdir(shared);
    rmdir(dir);
}

/* A write-ahead log without its database: SQLite would replay it into a new file. */
static void test_stray_wal_is_refused(void **state) {
    char path[300], wal[310];
    fault_path(path, sizeof path, "stray.db");
    snprintf(wal, sizeof wal, "%s-wal", path);
    fault_write_text(wal, "someone's log\n");
    profile_to(path, SW_EEXISTS);
    assert_string_equal(fault_read_text(wal), "someone's log\n");
    assert_int_equal(access(path, F_OK), -1);
    unlink(wal);
}

/* A run file a live process writes is left alone by a second one. */
static void test_run_file_of_a_live_process(void **state) {
    char path[300];
    fault_path(path, sizeof path, "live.db");
    int ready[2], go[2]; /* child -> parent, parent -> child */
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sw_options o = {.size = sizeof(sw_options), .run_file = path, .flush_interval_ms = 10};
        sw_profiler *p = NULL;
        if (sw_profiler_new(&o, &p) != 0 || sw_profiler_run_file(p, NULL) != 0)
            _exit(3);
        for (int i = 0; i < 5; i++) {
            sw_step_begin(p, 1);
            sw_step_end(p);
        }
        assert_int_equal(write(ready[1], "r", 1), 1);
        char c;
        assert_int_equal(read(go[0], &c, 1), 1); /* until the parent tried */
        for (int i = 0; i < 5; i++) {
            sw_step_begin(p, 1);
            sw_step_end(p);
        }
        sw_profiler_free(p);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    profile_to(path, SW_EBUSY);
    assert_int_equal(write(go[1], "g", 1), 1);
    assert_int_equal(fault_wait(pid), 0);
    assert_int_equal(query_int(path, "SELECT count(*) FROM steps"), 10);
    assert_int_equal(query_int(path, "SELECT complete FROM ranks"), 1);
    close(go[0]);
    close(go[1]);
    close(ready[0]);
    close(ready[1]);
}

/* ---- outputs (sw_output) ---- */

static int write_output(const char *path, const char *text) {
    return sw_output_write_file(path, text, strlen(text));
}

static void test_output_to_devices_and_fifos(void **state) {
    char null_node[300], full_node[300], fifo[300];
    fault_path(null_node, sizeof null_node, "out-null");
    fault_path(full_node, sizeof full_node, "out-full");
    fault_path(fifo, sizeof fifo, "out-fifo");
    if (fault_mknod(null_node, 1, 3) != 0 || fault_mknod(full_node, 1, 7) != 0)
        skip();
    /* Written as streams: /dev/null takes it, /dev/full refuses it; both stay devices. */
    assert_int_equal(write_output(null_node, "report\n"), 0);
    assert_int_equal(write_output(full_node, "report\n"), SW_EIO);
    assert_non_null(strstr(sw_last_error(), "No space left on device"));
    assert_true(fault_is_chardev(null_node, 1, 3));
    assert_true(fault_is_chardev(full_node, 1, 7));
    /* A FIFO: its reader gets the bytes; it stays a FIFO. */
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pid_t reader = fork();
    assert_true(reader >= 0);
    if (reader == 0) {
        char buf[64] = "";
        int fd = open(fifo, O_RDONLY);
        ssize_t n = read(fd, buf, sizeof buf - 1);
        _exit(n == 7 && memcmp(buf, "report\n", 7) == 0 ? 0 : 1);
    }
    assert_int_equal(write_output(fifo, "report\n"), 0);
    assert_int_equal(fault_wait(reader), 0);
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    unlink(null_node);
    unlink(full_node);
    unlink(fifo);
}

static void test_output_refusals(void **state) {
    char dir[300], dangling[300];
    fault_path(dir, sizeof dir, "a-directory");
    fault_path(dangling, sizeof dangling, "dangling");
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(symlink("/nonexistent/nowhere", dangling), 0);
    int before = fault_dir_entries();
    assert_int_equal(write_output(dir, "x"), SW_EEXISTS);
    assert_non_null(strstr(sw_last_error(), "is a directory"));
    assert_int_equal(write_output(dangling, "x"), SW_EEXISTS);
    assert_int_equal(fault_dir_entries(), before);
    rmdir(dir);
    unlink(dangling);
}

/* Through a symbolic link: the file it points to is replaced, the link stays. */
static void test_output_through_a_link(void **state) {
    char target[300], link[300];
    fault_path(target, sizeof target, "real.txt");
    fault_path(link, sizeof link, "link.txt");
    fault_write_text(target, "old\n");
    chmod(target, 0640);
    assert_int_equal(symlink("real.txt", link), 0);
    assert_int_equal(write_output(link, "new\n"), 0);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_string_equal(fault_read_text(target), "new\n");
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640); /* the replaced file keeps its permissions */
    unlink(link);
    unlink(target);
}

/* An old report at path (name in the test directory); the entries of the directory. */
static int old_report(char *path, size_t size, const char *name) {
    fault_path(path, size, name);
    fault_write_text(path, "the old report\n");
    return fault_dir_entries();
}

/* The old report is whole and nothing was left beside it; then it goes. */
static void old_report_kept(const char *path, int entries) {
    assert_string_equal(fault_read_text(path), "the old report\n");
    assert_int_equal(fault_dir_entries(), entries);
    unlink(path);
}

/* A write that fails half way (the file-size limit stands in for a full disk) leaves the old
 * file as it was and nothing beside it. */
static void test_output_failure_keeps_the_old_file(void **state) {
    char path[300];
    int before = old_report(path, sizeof path, "report.txt");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit limit = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &limit);
        static char big[1 << 16];
        memset(big, 'r', sizeof big);
        int rc = sw_output_write_file(path, big, sizeof big);
        _exit(rc == SW_EIO && strstr(sw_last_error(), "File too large") ? 0 : 1);
    }
    assert_int_equal(fault_wait(pid), 0);
    old_report_kept(path, before);
}

/* Killed while writing: the old file is whole, nothing is left beside it. */
static void test_output_killed_midway(void **state) {
    char path[300];
    int before = old_report(path, sizeof path, "killed.txt");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sw_output *o = NULL;
        if (sw_output_open(path, &o) != 0)
            _exit(1);
        for (int i = 0;; i++) {
            fprintf(sw_output_stream(o), "line %d\n", i);
            if (i == 1000) {
                fflush(sw_output_stream(o));
                assert_int_equal(write(ready[1], "r", 1), 1);
            }
        }
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    kill(pid, SIGKILL);
    assert_int_equal(fault_wait(pid), 128 + SIGKILL);
    close(ready[0]);
    close(ready[1]);
    old_report_kept(path, before);
}

/* The command: `stepwatch html RUN -o NODE` on a full device fails, blames the output and
 * leaves the node as it was; a report replaces an old file only when complete. */
static void test_cli_outputs(void **state) {
    char run[300], full_node[300], err[300], out[300], args[1400];
    fault_path(run, sizeof run, "cli.db");
    fault_path(full_node, sizeof full_node, "cli-full");
    fault_path(err, sizeof err, "cli-err.txt");
    fault_path(out, sizeof out, "cli-report.txt");
    profile_to(run, 0);
    if (fault_mknod(full_node, 1, 7) != 0)
        skip();
    snprintf(args, sizeof args, "html '%s' -o '%s'", run, full_node);
    assert_int_equal(fault_cli(args, err), 4);
    assert_non_null(strstr(fault_read_text(err), "cannot write"));
    assert_non_null(strstr(fault_read_text(err), "No space left on device"));
    assert_true(fault_is_chardev(full_node, 1, 7));
    fault_write_text(out, "old\n");
    snprintf(args, sizeof args, "report '%s' -o '%s'", run, out);
    assert_int_equal(fault_cli(args, err), 0);
    assert_non_null(strstr(fault_read_text(out), "step"));
    snprintf(args, sizeof args, "report '%s' -o '%s' --format nope", run, out);
    assert_int_equal(fault_cli(args, err), 2);
    assert_non_null(strstr(fault_read_text(out), "step")); /* untouched */
    unlink(full_node);
}

/* Clusters link scratch and home: a link in a directory above the run file is followed
 * (issue 29: SQLite's NOFOLLOW refused links in every component, "unable to open database
 * file"); only a link at the file itself is refused. */
static void test_links_above_the_run_file(void **state) {
    char real[300], via[300], via2[300], path[400], at_real[400], deep[400];
    fault_path(real, sizeof real, "real-dir");
    fault_path(via, sizeof via, "via-link");
    fault_path(via2, sizeof via2, "via-link-2");
    assert_int_equal(mkdir(real, 0700), 0);
    assert_int_equal(symlink(real, via), 0);
    assert_int_equal(symlink("via-link", via2), 0); /* a relative link to a link */
    snprintf(path, sizeof path, "%s/run.db", via);
    snprintf(deep, sizeof deep, "%s/deep.db", via2);
    profile_to(path, 0);
    profile_to(deep, 0);
    snprintf(at_real, sizeof at_real, "%s/run.db", real);
    struct stat st;
    assert_int_equal(lstat(at_real, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_run_snapshot(run, &s), 0);
    assert_int_equal(s->steps, 1);
    sw_snapshot_free(s);
    sw_run_close(run);
    snprintf(at_real, sizeof at_real, "%s/deep.db", real);
    assert_int_equal(lstat(at_real, &st), 0);
    /* A link at the file, below a linked directory: still refused, the target untouched. */
    char link_at[400];
    snprintf(link_at, sizeof link_at, "%s/link.db", via);
    assert_int_equal(symlink("run.db", link_at), 0);
    profile_to(link_at, SW_EEXISTS);
    assert_int_equal(lstat(link_at, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
}

/* RANK beyond an int (or not a number) is not a rank: {rank} never becomes -1. */
static void test_rank_from_the_environment_out_of_range(void **state) {
    char pattern[300], want[300];
    fault_path(pattern, sizeof pattern, "rank-{rank}.db");
    fault_path(want, sizeof want, "rank-0.db");
    setenv("RANK", "99999999999999999999", 1);
    profile_to(pattern, 0);
    unsetenv("RANK");
    assert_int_equal(access(want, F_OK), 0);
    char bad[300];
    fault_path(bad, sizeof bad, "rank--1.db");
    assert_int_equal(access(bad, F_OK), -1);
    setenv("RANK", "12", 1);
    profile_to(pattern, 0);
    unsetenv("RANK");
    fault_path(want, sizeof want, "rank-12.db");
    assert_int_equal(access(want, F_OK), 0);
}

/* ---- reading damaged files: every refusal names its cause ---- */

static void expect_open_error(const char *path, int rc, const char *why) {
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), rc);
    if (strstr(sw_last_error(), why) == NULL)
        fail_msg("\"%s\" does not say \"%s\"", sw_last_error(), why);
}

static void test_reader_says_why(void **state) {
    char path[300], cut[300];
    fault_path(path, sizeof path, "damaged.db");
    fault_path(cut, sizeof cut, "cut.db");
    profile_to(path, 0);
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(path, &run), 0);
    assert_int_equal(sw_run_rank_snapshot(run, 7, &(sw_snapshot *){NULL}), SW_ENOTFOUND);
    assert_non_null(strstr(sw_last_error(), "no rank 7 in this run file"));
    sw_run_close(run);
    /* A table dropped by hand: the schema check at opening says which table. */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE steps", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    expect_open_error(path, SW_ECORRUPT, "table steps missing");
    /* Cut short, another version, not ours: each says so. */
    FILE *in = fopen(path, "rb"), *out = fopen(cut, "wb");
    char buf[6000];
    size_t got = fread(buf, 1, sizeof buf, in);
    fwrite(buf, 1, got, out);
    fclose(in);
    fclose(out);
    expect_open_error(cut, SW_ECORRUPT, "truncated");
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    expect_open_error(path, SW_EVERSION, "schema version 99");
    fault_write_text(cut, "a,b\n1,2\n");
    expect_open_error(cut, SW_EFOREIGN, "not a stepwatch run file");
    expect_open_error(g_dir, SW_EFOREIGN, "a directory");
    /* A live run's file copied without its -wal: the steps are in the WAL; said so. */
    char live[300], copy[300], cmd[700];
    fault_path(live, sizeof live, "live-copy.db");
    fault_path(copy, sizeof copy, "copied.db");
    SW_TEST_PROFILER(p, .run_file = live, .no_signal_handlers = 1, .flush_interval_ms = 10);
    sw_step_begin(p, 1);
    sw_step_end(p);
    fault_sleep_ms(100); /* a flush wrote the metadata, into the WAL */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", live, copy);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sw_run_open(copy, &run), 0); /* the metadata is in the main file */
    char why[600];
    assert_int_equal(sw_run_incomplete(run, why, sizeof why), 1);
    if (strstr(why, "copied without its write-ahead log") == NULL)
        fail_msg("\"%s\" does not say the -wal is missing", why);
    sw_run_close(run);
    sw_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_file_never_replaces_devices),
        cmocka_unit_test(test_run_file_never_replaces_what_is_not_ours),
        cmocka_unit_test(test_run_file_that_cannot_be_created),
        cmocka_unit_test(test_unwritable_places),
        cmocka_unit_test(test_stray_wal_is_refused),
        cmocka_unit_test(test_run_file_of_a_live_process),
        cmocka_unit_test(test_output_to_devices_and_fifos),
        cmocka_unit_test(test_output_refusals),
        cmocka_unit_test(test_output_through_a_link),
        cmocka_unit_test(test_output_failure_keeps_the_old_file),
        cmocka_unit_test(test_output_killed_midway),
        cmocka_unit_test(test_cli_outputs),
        cmocka_unit_test(test_reader_says_why),
        cmocka_unit_test(test_links_above_the_run_file),
        cmocka_unit_test(test_rank_from_the_environment_out_of_range),
    };
    return cmocka_run_group_tests(tests, fault_make_dir, fault_remove_dir);
}
