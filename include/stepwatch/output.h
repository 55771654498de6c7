/*
 * stepwatch/output.h — writing an output file (a report, an export, an HTML page, a CSV)
 * without ever destroying what was there. Included by stepwatch.h; do not include directly.
 *
 * A regular file is written to an unnamed temporary file in the same directory, flushed to
 * disk, and renamed over the path only when complete: a failure at any point (full disk, a
 * write error, a crash, a kill) leaves the old file untouched and no half-written one.
 *
 * What the path names decides how it is written (docs/reliability.md):
 *   "-", "/dev/stdout", "/dev/stderr", "/dev/fd/N", "/proc/self/fd/N"
 *                      that open descriptor, written as a stream (appended where it points)
 *   a character device or a FIFO (/dev/null, a named pipe, a terminal)
 *                      opened for writing and written as a stream: never created,
 *                      truncated, renamed or removed
 *   nothing, or a regular file
 *                      temporary + rename; a replaced file keeps its permission bits
 *   a symbolic link    followed: the file it points to is replaced as above, the link stays
 *   a directory, a block device, a socket, a link to nothing
 *                      refused (SW_EEXISTS), nothing touched
 */
#ifndef STEPWATCH_OUTPUT_H
#define STEPWATCH_OUTPUT_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_output sw_output;

/* Prepare to write path (rules above). On success *out is set: write through
 * sw_output_stream, then sw_output_commit or sw_output_abort, exactly one of them. Errors:
 * SW_EINVAL (NULL arguments), SW_EEXISTS (a path of a kind that is refused), SW_EIO (the
 * system refused: no such directory, no permission, ...), SW_ENOMEM. sw_last_error() says
 * why, naming the path. Not thread-safe on one sw_output; different outputs are
 * independent. */
SW_API int sw_output_open(const char *path, sw_output **out);
/* The stream to write to (seekable for a regular file: opened "w+"). Owned by o. */
SW_API FILE *sw_output_stream(sw_output *o);
/* Finish: flush, and for a regular file sync it to disk and rename it into place. Frees o
 * (NULL is SW_EINVAL). 0, or SW_EIO when anything failed (a write error seen on the stream
 * included): then the old file is untouched and sw_last_error() says why. */
SW_API int sw_output_commit(sw_output *o);
/* Give up: the temporary file is removed, the path untouched (a stream keeps what was
 * already written into it). Frees o; NULL is a no-op. */
SW_API void sw_output_abort(sw_output *o);

/* Write size bytes of data to path through the above: all or nothing. 0 or SW_E*. */
SW_API int sw_output_write_file(const char *path, const void *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_OUTPUT_H */
