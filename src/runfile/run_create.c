/*
 * run_create.c — a new run file at a path, without ever destroying what is not ours.
 *
 * What may be at the path, and what happens (docs/reliability.md keeps the table):
 *   nothing                      the file is created
 *   a stepwatch run file         replaced with its -wal and -shm, unless a live process
 *                                writes it (SW_EBUSY)
 *   anything else: an empty file, a foreign file, a device, a FIFO, a directory, a
 *   symbolic link                refused (SW_EEXISTS), nothing touched
 * "Ours" is proven by the header: SQLite's magic and stepwatch's application_id, which every
 * run file carries in its main file from its first byte on (below).
 *
 * The file appears whole or not at all: its first state (schema, the rank's metadata, WAL mode) is built
 * in memory, written to an unnamed file in the directory (core/tempfile.c) and put at the
 * path in one step: linked in where nothing is, renamed over an earlier run file. A kill
 * during creation leaves the path as it was.
 *
 * Ownership: the creating process holds an exclusive flock(2) on the file for as long as it
 * writes it, through a descriptor of its own; another process finding the lock held leaves
 * the file alone. flock locks are apart from the POSIX locks SQLite takes (on Linux; an NFS
 * mount may map one onto the other), and the descriptor stays open until SQLite has closed
 * its own: closing any descriptor of a file drops the process's POSIX locks on it.
 * Replacing an earlier run file starts with that file's lock, held until the new file is in
 * place: two processes given one path decide one after the other, and the second finds the
 * first's lock ("a running process writes this run file").
 */
#include "run_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int sw__run_header_is_ours(const unsigned char header[100]) {
    return memcmp(header, "SQLite format 3", 16) == 0 &&
           be32(header + 68) == SW__RUN_APPLICATION_ID;
}

/* path + suffix, malloc'ed. */
static char *with_suffix(const char *path, const char *suffix) {
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", path, suffix);
    return s;
}

static const char *kind_of(mode_t mode) {
    return S_ISLNK(mode)    ? "a symbolic link"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

/* Remove path's -wal or -shm file: ours once the run file they belong to was proven ours.
 * Only a regular file (or a link, which unlink removes without touching its target). */
static void remove_sidecar(const char *path, const char *suffix) {
    char *side = with_suffix(path, suffix);
    struct stat st;
    if (side && lstat(side, &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)))
        unlink(side);
    free(side);
}

void sw__run_file_remove_sidecars(const char *path) {
    remove_sidecar(path, "-wal");
    remove_sidecar(path, "-shm");
}

void sw__run_file_remove(const char *path) {
    unlink(path);
    sw__run_file_remove_sidecars(path);
}

/* A -wal with no database beside it would be replayed into the new file by SQLite. */
static int refuse_stray_wal(const char *path) {
    char *wal = with_suffix(path, "-wal");
    if (wal == NULL)
        return SW_ENOMEM;
    struct stat st;
    int stray = lstat(wal, &st) == 0 && !(S_ISREG(st.st_mode) && st.st_size == 0);
    int rc = stray ? sw__error(SW_EEXISTS,
                               "%s: a write-ahead log %s is there without its database "
                               "(not stepwatch's to remove)",
                               path, wal)
                   : 0;
    free(wal);
    return rc;
}

/* What is at path, decided under the lock: nothing (*exists 0), or an earlier run file of
 * ours that no live process writes (*exists 1, and *old_fd holds its exclusive flock: it is
 * ours to replace until that descriptor closes); else the refusal. Two processes given one
 * path decide one after the other: the second finds the first's lock. */
static int claim(const char *path, int *exists, int *old_fd) {
    *exists = 0;
    *old_fd = -1;
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return refuse_stray_wal(path);
        return sw__error(SW_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return sw__error(SW_EEXISTS, "%s: is %s, not a run file: left alone", path,
                         kind_of(st.st_mode));
    if (st.st_size == 0)
        return sw__error(SW_EEXISTS, "%s: an empty file stepwatch did not write: left alone", path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return sw__error(SW_EIO, "%s: %s", path, strerror(errno));
    unsigned char header[100];
    struct stat locked, now;
    int rc = 0;
    if (pread(fd, header, sizeof header, 0) != (ssize_t)sizeof header ||
        !sw__run_header_is_ours(header))
        rc = sw__error(SW_EEXISTS, "%s: exists and is not a stepwatch run file: left alone", path);
    else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        rc = sw__error(SW_EBUSY, "%s: a running process writes this run file: left alone", path);
    /* Locked: is the file we locked still the one at the path? Another process may have put
     * its new file there between our open and our lock. */
    else if (fstat(fd, &locked) != 0 || lstat(path, &now) != 0 || locked.st_ino != now.st_ino ||
             locked.st_dev != now.st_dev)
        rc = sw__error(SW_EBUSY,
                       "%s: another process took this path at the same moment: left "
                       "alone",
                       path);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    *exists = 1;
    *old_fd = fd;
    return 0;
}

int sw__run_file_check(const char *path, int *exists) {
    int old_fd = -1;
    int rc = claim(path, exists, &old_fd);
    if (old_fd >= 0)
        close(old_fd);
    return rc;
}

/* The first state of every run file, as bytes: schema and metadata built in memory, in WAL
 * mode (header bytes 18 and 19 are 2: write and read versions of a WAL database). */
static int build_image(const sw__run_meta *meta, unsigned char **image, sqlite3_int64 *size) {
    sqlite3 *db = NULL;
    int rc = sw__sqlite_rc(
        sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL));
    if (rc == 0)
        rc = sw__store_init(db);
    if (rc == 0 && meta != NULL)
        rc = sw__meta_write(db, meta);
    *image = rc == 0 ? sqlite3_serialize(db, "main", size, 0) : NULL;
    if (rc == 0 && (*image == NULL || *size < 100))
        rc = SW_ENOMEM;
    if (rc == 0)
        (*image)[18] = (*image)[19] = 2;
    sqlite3_close(db);
    return rc;
}

static int write_all(int fd, const unsigned char *data, size_t size) {
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* Put the written file (named temp) at path: beside nothing (link, which never replaces
 * anything), or over an earlier run file of ours (rename, in one step: at every moment the
 * path holds the old file or the new one). */
static int put_in_place(const char *temp, const char *path, int replace) {
    if (replace) {
        /* The old file's WAL would be replayed into the new one. */
        sw__run_file_remove_sidecars(path);
        return rename(temp, path) == 0 ? 0 : sw__error(SW_EIO, "%s: %s", path, strerror(errno));
    }
    int rc = link(temp, path);
    int err = errno;
    unlink(temp);
    if (rc == 0)
        return 0;
    return err == EEXIST
               ? sw__error(SW_EBUSY, "%s: another process created it at the same moment", path)
               : sw__error(SW_EIO, "%s: %s", path, strerror(err));
}

int sw__run_file_create(const char *path, const sw__run_meta *meta, int *lock_fd) {
    *lock_fd = -1;
    int exists = 0, old_fd = -1;
    /* The lock is taken before anything is decided, and the old file's lock held until the
     * new file has replaced it. */
    int rc = claim(path, &exists, &old_fd);
    if (rc != 0)
        return rc;
    char *dir = sw__dir_of(path), *temp = NULL;
    unsigned char *image = NULL;
    sqlite3_int64 size = 0;
    rc = dir ? build_image(meta, &image, &size) : SW_ENOMEM;
    int fd = rc == 0 ? sw__unnamed_open(dir, &temp) : -1;
    if (rc == 0 && fd < 0)
        rc = sw__error(SW_EIO, "%s: cannot create a file in %s: %s", path, dir, strerror(errno));
    /* Locked before it has a name: nobody can find it unclaimed. */
    if (rc == 0 && (flock(fd, LOCK_EX | LOCK_NB) != 0 || write_all(fd, image, (size_t)size) != 0 ||
                    fsync(fd) != 0 || sw__unnamed_name(fd, dir, &temp) != 0))
        rc = sw__error(SW_EIO, "%s: %s", path, strerror(errno));
    if (rc == 0)
        rc = put_in_place(temp, path, exists);
    if (old_fd >= 0)
        close(old_fd); /* replaced (or not): the old file's claim ends */
    if (rc != 0 && temp != NULL)
        unlink(temp);
    if (rc != 0 && fd >= 0)
        close(fd);
    sqlite3_free(image);
    free(temp);
    free(dir);
    if (rc == 0)
        *lock_fd = fd;
    return rc;
}
