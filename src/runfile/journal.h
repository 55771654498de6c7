/*
 * journal.h — what the journal's two files share: journal.c (the writer and its flusher
 * thread) and journal_signals.c (completing files on SIGINT/SIGTERM and at exit).
 */
#ifndef SW_JOURNAL_H
#define SW_JOURNAL_H

#include "core/core.h"

/* Track j so that exit() completes it and, when signals is nonzero, a SIGINT/SIGTERM wakes
 * its flusher (by a byte on wake_fd) and waits for the file to be completed before the
 * previous handler runs. Installs the handlers once per process. 0 or SW_E*. */
int sw__journal_watch(sw__journal *j, int wake_fd, int signals);
/* Stop tracking j (before closing it). */
void sw__journal_unwatch(sw__journal *j);

/* How many SIGINT/SIGTERM arrived so far, and the last one. The flusher compares the count
 * with what it saw to know that a signal asks for completion. */
unsigned sw__journal_signal_count(void);
int sw__journal_last_signal(void);
/* The flusher tells the waiting handler that its file is complete. */
void sw__journal_signal_done(void);

/* Complete j's file now (final aggregates, complete=1) and stop its flusher; the struct
 * stays valid until sw__journal_close. Called at exit for profilers never freed. */
void sw__journal_finish(sw__journal *j, const char *reason);

#endif /* SW_JOURNAL_H */
