/* fault_util.h — what the fault-injection tests share: a private temporary directory, device
 * nodes made in it (never the real /dev), plain-SQLite queries, a child process. */
#ifndef SW_FAULT_UTIL_H
#define SW_FAULT_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stepwatch.h"
#include "test_helpers.h"
#include "test_sqlite.h"

/* AddressSanitizer reserves terabytes of shadow address space at start: a process under an
 * address-space limit (ulimit -v, RLIMIT_AS) cannot even start there, so the tests that
 * limit memory leave the limit out (commands) or skip (memory exhaustion) in that build. */
#if defined(__SANITIZE_ADDRESS__)
#define FAULT_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAULT_UNDER_ASAN 1
#endif
#endif
#ifndef FAULT_UNDER_ASAN
#define FAULT_UNDER_ASAN 0
#endif

static char g_dir[256];

static int fault_make_dir(void **state) {
    (void)state;
    /* tmpfs where there is one: the tests fsync a lot, and a disk makes that slow. */
    snprintf(g_dir, sizeof g_dir, "%s/sw_fault_XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int fault_remove_dir(void **state) {
    (void)state;
    if (getenv("SW_FAULT_KEEP")) { /* to look at what a failed test left */
        fprintf(stderr, "[  INFO    ] kept %s\n", g_dir);
        return 0;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static inline void fault_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", g_dir, name);
}

/* A character device node of (major, minor) made with mknod in the test's own directory:
 * 1,3 behaves as /dev/null, 1,7 as /dev/full. 0, or -1 where mknod is not allowed (not root,
 * or a container without CAP_MKNOD): the caller skips with a message. */
static inline int fault_mknod(const char *path, unsigned major_no, unsigned minor_no) {
    if (mknod(path, S_IFCHR | 0666, makedev(major_no, minor_no)) == 0)
        return 0;
    fprintf(stderr, "[  SKIP    ] mknod %s: %s: device-node checks skipped\n", path,
            strerror(errno));
    return -1;
}

/* The same node, still there, still a character device of (major, minor)? */
static inline int fault_is_chardev(const char *path, unsigned major_no, unsigned minor_no) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == major_no &&
           minor(st.st_rdev) == minor_no;
}

static inline void fault_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* The whole of a small file, or "" when it cannot be read. */
static inline const char *fault_read_text(const char *path) {
    static char buf[1 << 21];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Entries in the test directory (to see that nothing was left behind). */
static inline int fault_dir_entries(void) {
    char cmd[320];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", g_dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1)
        n = -1;
    if (p)
        pclose(p);
    return n;
}

/* How many rounds/forks/threads: the environment variable name (make fault-long sets it),
 * else n. */
static inline int fault_count(const char *name, int n) {
    const char *v = getenv(name);
    return v != NULL && atoi(v) > 0 ? atoi(v) : n;
}

static inline void fault_sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline void fault_sleep_ms(long ms) {
    fault_sleep_us(ms * 1000);
}

/* How many times what occurs in text. */
static inline int fault_count_in(const char *text, const char *what) {
    int n = 0;
    for (const char *s = strstr(text, what); s; s = strstr(s + 1, what))
        n++;
    return n;
}

/* Wait for a child; its exit status (128 + N when killed by signal N). */
static inline int fault_wait(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run the stepwatch command with args (a shell fragment) and stderr to err_path; its exit
 * status. The command lives in the build tree (SW_BUILD_DIR, set by ctest). */
static inline int fault_cli(const char *args, const char *err_path) {
    const char *build = getenv("SW_BUILD_DIR");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/stepwatch' %s 2>'%s' >/dev/null", build ? build : ".", args,
             err_path);
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif
