/*
 * output.c — output files written without destroying what was there (stepwatch/output.h;
 * the rules are in docs/reliability.md).
 *
 * A regular file: the bytes go to an unnamed file in the target's directory (tempfile.c);
 * commit syncs it to disk, gives it a hidden name and renames that over the target, then
 * syncs the directory. A crash or a kill before the rename leaves the old file whole and
 * nothing beside it.
 * A device or a FIFO is a stream: written in place, never created, truncated or removed.
 *
 * Every output writer of the library, the command and the Python package goes through here.
 */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sw_output {
    FILE *stream;
    char *path;   /* as given, for messages */
    char *target; /* the regular file to replace; NULL for a stream */
    char *dir;    /* the target's directory */
    char *temp;   /* the temporary's name once it has one; NULL while unnamed */
};

static void free_output(sw_output *o) {
    free(o->path);
    free(o->target);
    free(o->dir);
    free(o->temp);
    free(o);
}

/* The descriptor a path names directly ("-", /dev/stdout, /dev/fd/N, ...), or -1. */
static int named_descriptor(const char *path) {
    if (strcmp(path, "-") == 0 || strcmp(path, "/dev/stdout") == 0)
        return STDOUT_FILENO;
    if (strcmp(path, "/dev/stderr") == 0)
        return STDERR_FILENO;
    const char *prefixes[] = {"/dev/fd/", "/proc/self/fd/"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(path, prefixes[i], n) != 0 || path[n] < '0' || path[n] > '9')
            continue;
        char *end;
        long fd = strtol(path + n, &end, 10);
        if (*end == '\0' && fd <= 1024 * 1024)
            return (int)fd;
    }
    return -1;
}

static const char *kind_of(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

/* A stream over an open descriptor we own; the descriptor is closed on failure. */
static int open_stream(sw_output *o, int fd, const char *mode) {
    o->stream = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (o->stream != NULL)
        return 0;
    int err = errno;
    if (fd >= 0)
        close(fd);
    return sw__error(err == ENOMEM ? SW_ENOMEM : SW_EIO, "%s: %s", o->path, strerror(err));
}

/* The regular file o->target gets a temporary beside it. */
static int open_temporary(sw_output *o, const struct stat *existing) {
    o->dir = sw__dir_of(o->target);
    if (o->dir == NULL)
        return SW_ENOMEM;
    int fd = sw__unnamed_open(o->dir, &o->temp);
    if (fd < 0)
        return sw__error(SW_EIO, "%s: cannot create a file in %s: %s", o->path, o->dir,
                         strerror(errno));
    if (existing != NULL)
        fchmod(fd, existing->st_mode & 07777);
    return open_stream(o, fd, "w+");
}

static int open_output(sw_output *o) {
    int fd = named_descriptor(o->path);
    if (fd >= 0) {
        fflush(fd == STDOUT_FILENO ? stdout : fd == STDERR_FILENO ? stderr : NULL);
        int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (copy < 0)
            return sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
        return open_stream(o, copy, "w");
    }
    struct stat st;
    if (lstat(o->path, &st) != 0) {
        if (errno != ENOENT)
            return sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
        o->target = sw__strdup(o->path);
        return o->target ? open_temporary(o, NULL) : SW_ENOMEM;
    }
    if (S_ISLNK(st.st_mode)) {
        if (stat(o->path, &st) != 0)
            return sw__error(SW_EEXISTS, "%s: a symbolic link to %s (%s): not followed", o->path,
                             errno == ENOENT ? "nothing" : "what cannot be reached",
                             strerror(errno));
        o->target = realpath(o->path, NULL);
        if (o->target == NULL)
            return sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
    } else {
        o->target = sw__strdup(o->path);
        if (o->target == NULL)
            return SW_ENOMEM;
    }
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        free(o->target);
        o->target = NULL;
        fd = open(o->path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
            return sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
        return open_stream(o, fd, "w");
    }
    if (!S_ISREG(st.st_mode))
        return sw__error(SW_EEXISTS, "%s: is %s", o->path, kind_of(st.st_mode));
    /* A file the user may not write is not replaced behind their back (as the shell's >). */
    if (access(o->target, W_OK) != 0)
        return sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
    return open_temporary(o, &st);
}

int sw_output_open(const char *path, sw_output **out) {
    sw__error_clear();
    if (path == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_output *o = calloc(1, sizeof *o);
    if (o == NULL || (o->path = sw__strdup(path)) == NULL) {
        free(o);
        return SW_ENOMEM;
    }
    int rc = open_output(o);
    if (rc != 0) {
        sw_output_abort(o);
        return rc;
    }
    *out = o;
    return 0;
}

FILE *sw_output_stream(sw_output *o) {
    return o ? o->stream : NULL;
}

static void sync_directory(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* the rename is done either way; this makes it durable */
        close(fd);
    }
}

int sw_output_commit(sw_output *o) {
    sw__error_clear();
    if (o == NULL)
        return SW_EINVAL;
    int rc = 0;
    errno = 0;
    if (fflush(o->stream) != 0 || ferror(o->stream))
        rc = sw__error(SW_EIO, "%s: %s", o->path, strerror(errno ? errno : EIO));
    if (rc == 0 && o->target != NULL) {
        if (fsync(fileno(o->stream)) != 0)
            rc = sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
        if (rc == 0 && sw__unnamed_name(fileno(o->stream), o->dir, &o->temp) != 0)
            rc = sw__error(SW_EIO, "%s: cannot name the new file in %s: %s", o->path, o->dir,
                           strerror(errno));
        if (rc == 0 && rename(o->temp, o->target) != 0)
            rc = sw__error(SW_EIO, "%s: %s", o->path, strerror(errno));
        if (rc == 0) {
            free(o->temp); /* renamed: nothing to remove */
            o->temp = NULL;
            sync_directory(o->dir);
        }
    }
    if (rc != 0) {
        sw_output_abort(o);
        return rc;
    }
    errno = 0;
    if (fclose(o->stream) != 0) /* a stream's last bytes (the temporary's were synced) */
        rc = sw__error(SW_EIO, "%s: %s", o->path, strerror(errno ? errno : EIO));
    free_output(o);
    return rc;
}

void sw_output_abort(sw_output *o) {
    if (o == NULL)
        return;
    if (o->stream != NULL)
        fclose(o->stream);
    if (o->temp != NULL)
        unlink(o->temp); /* ours: a name we created; the target is never touched */
    free_output(o);
}

int sw_output_write_file(const char *path, const void *data, size_t size) {
    sw_output *o = NULL;
    int rc = sw_output_open(path, &o);
    if (rc != 0)
        return rc;
    if (size > 0 && fwrite(data, 1, size, o->stream) != size) {
        int err = errno;
        sw_output_abort(o);
        return sw__error(SW_EIO, "%s: %s", path, strerror(err ? err : EIO));
    }
    return sw_output_commit(o);
}
