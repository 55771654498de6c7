/*
 * journal.h — the run-file writer (journal.c) and the signal handling it uses (signals.c).
 *
 * The writer is a sink (core/sink.h): sw__journal_open attaches it to a profiler, and from
 * then on the core drives it — a full ring under SW_FULL_BLOCK wakes its flusher,
 * sw_profiler_free completes and frees it, an atexit hook completes the file of a profiler
 * never freed, a fork child lets go of it without touching the parent's file.
 */
#ifndef SW_RUNFILE_JOURNAL_H
#define SW_RUNFILE_JOURNAL_H

#include "core/sink.h"

#include <signal.h>

/* Open the run file at path for p (path already has {rank} and {pid} expanded), write the
 * metadata, start the flusher thread, enable events and attach the writer to p. 0 or SW_E*.
 * On failure the writer is attached all the same, without a file, to tell
 * sw_profiler_run_file why, and one warning is printed on stderr (none for SW_EBUSY when
 * quiet_if_busy: the environment's file, already written by another profiler). Training is
 * never stopped: the caller goes on with the profiler. */
int sw__journal_open(sw_profiler *p, const char *path, int quiet_if_busy);

/* ---- signals.c: completing files on SIGINT/SIGTERM/SIGHUP ---- */

/* Install the SIGINT/SIGTERM handlers (once per process; again when another handler was
 * installed over ours) and have a signal write a byte on wake_fd, then wait until the owner
 * of wake_fd called sw__signal_done before the previous handler runs. 0 or SW_E*
 * (SW_ELIMIT past 64 watched descriptors). */
int sw__signal_watch(int wake_fd);
/* Stop writing to wake_fd (before closing it). */
void sw__signal_unwatch(int wake_fd);

/* How many SIGINT/SIGTERM arrived so far, and the last one. The flusher compares the count
 * with what it saw to know that a signal asks for completion. */
unsigned sw__signal_count(void);
int sw__signal_last(void);
/* The flusher tells the waiting handler that its file is complete. */
void sw__signal_done(void);
/* Block SIGINT/SIGTERM/SIGHUP in the calling thread (the old mask in *old): the flusher's
 * thread is started with them blocked. */
void sw__signal_block(sigset_t *old);
/* Around an owner's completing of its file (sw_profiler_free, Profiler.close): the signals
 * are blocked in this thread meanwhile, and a handler on another thread waits for the end.
 * A signal held is delivered at _end, once the file is complete. */
void sw__signal_finishing_begin(sigset_t *old);
void sw__signal_finishing_end(const sigset_t *old);
/* While path exists only as work in progress (a merge's temporary file): a SIGINT, SIGTERM or
 * SIGHUP removes it before the signal is handed on. path must stay valid until
 * sw__signal_temp_remove. 0, or SW_ELIMIT past 8 paths. */
int sw__signal_temp_add(const char *path);
void sw__signal_temp_remove(const char *path);

#endif /* SW_RUNFILE_JOURNAL_H */
