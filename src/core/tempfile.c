/*
 * tempfile.c — files that appear whole or not at all: written while nobody can see them, then
 * given their name in one step. Used by every output (output.c) and by run files
 * (runfile/run_create.c).
 *
 * The file is unnamed (O_TMPFILE) while it is written, so a crash or a kill leaves nothing
 * behind; it gets a hidden name only for the moment before the rename (or link) that puts it
 * in place. Where the file system has no O_TMPFILE (some network file systems), it is a
 * hidden ".stepwatch-XXXXXX" from the start.
 */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *sw__dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return sw__strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

char *sw__real_dir_path(const char *path) {
    char *dir = sw__dir_of(path), *real = dir ? realpath(dir, NULL) : NULL;
    int err = errno;
    free(dir);
    if (real == NULL) {
        errno = err;
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(real) + strlen(base) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", base);
    free(real);
    return out;
}

int sw__unnamed_open(const char *dir, char **temp) {
    *temp = NULL;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    size_t n = strlen(dir) + 32;
    *temp = malloc(n);
    if (*temp == NULL) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(*temp, n, "%s/.stepwatch-XXXXXX", dir);
    fd = mkostemp(*temp, O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        free(*temp);
        *temp = NULL;
        errno = err;
        return -1;
    }
    fchmod(fd, 0644); /* mkostemp makes 0600; a new file is readable as fopen's would be */
    return fd;
}

int sw__unnamed_name(int fd, const char *dir, char **temp) {
    if (*temp != NULL)
        return 0; /* named from the start */
    size_t n = strlen(dir) + 48;
    char *name = malloc(n);
    if (name == NULL) {
        errno = ENOMEM;
        return -1;
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    static _Atomic unsigned serial;
    for (int attempt = 0; attempt < 100; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(name, n, "%s/.stepwatch-%x-%x%lx", dir, (unsigned)getpid(), serial++,
                 (unsigned long)ts.tv_nsec);
        /* Through /proc (any user), else AT_EMPTY_PATH (needs CAP_DAC_READ_SEARCH). */
        if (linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0 ||
            linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH) == 0) {
            *temp = name;
            return 0;
        }
        if (errno != EEXIST)
            break;
    }
    int err = errno;
    free(name);
    errno = err;
    return -1;
}
