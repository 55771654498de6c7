/*
 * stepwatch/instrument.h — function profiles of C training loops, from GCC's and Clang's
 * -finstrument-functions hooks (the optional library stepwatch_instrument).
 *
 *   cc -finstrument-functions -rdynamic train.c -lstepwatch_instrument -lstepwatch
 *
 *   sw_profiler *p; sw_profiler_new(NULL, &p);
 *   sw_instrument_start(p, "forward,backward");   // or getenv("STEPWATCH_FUNCTIONS")
 *   ... SW_BEGIN(p, "forward"); model_forward(...); SW_END(p, "forward"); ...
 *   sw_instrument_write_table(NULL, NULL, stdout);  // cProfile's table per action
 *   sw_instrument_stop();
 *
 * Every function compiled with -finstrument-functions calls __cyg_profile_func_enter and
 * __cyg_profile_func_exit, which this library defines. They record only on a thread with a
 * chosen action open (begun through the core, any front end), into that action's call tree
 * (stepwatch/functions.h): the same tables, pstats numbers and flame graphs as Python's.
 * Elsewhere a call costs a thread-local load and a branch.
 *
 * Functions are named with dladdr(3): the symbol and the object file. Symbols of the main
 * program are found when it is linked with -rdynamic; a function without a dynamic symbol
 * (static, or no -rdynamic) is named "object+0xOFFSET" (addr2line -e object OFFSET finds
 * its source line). Files and lines are not known: the table shows "object:0(symbol)".
 *
 * Threads: one instrumented profiler per process. Each thread records into its own trees;
 * read the profile (sw_instrument_write_*, sw_instrument_profile) when no other thread has a
 * chosen action open. A fork child starts with no action open and nothing recorded.
 *
 * Included by stepwatch.h? No: include this header and link the library only where wanted.
 */
#ifndef STEPWATCH_INSTRUMENT_H
#define STEPWATCH_INSTRUMENT_H

#include "stepwatch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Profile the functions called inside the actions named in actions (comma-separated, e.g.
 * "forward,data"; interned in p) from now on. Sets p's watcher (sw_watcher_set). SW_EINVAL
 * (NULL or no name), SW_ESTATE (another profiler is instrumented, or p has another
 * watcher), SW_ELIMIT, SW_ENOMEM. May be called again with more actions for the same p. */
SW_API int sw_instrument_start(sw_profiler *p, const char *actions);
/* Stop: the hooks record nothing more, p's watcher is removed, the profile is freed. Call
 * it before sw_profiler_free(p), with no chosen action open. */
SW_API void sw_instrument_stop(void);

/* A merged copy of what was recorded (one tree per action, times in ns; the caller frees it
 * with sw_fprofile_free): for sw_fprofile_write_collapsed, or to keep. SW_ESTATE when not
 * started, SW_ENOMEM. */
SW_API int sw_instrument_profile(sw_fprofile **out);
/* The table of action (NULL: every action), as sw_fprofile_write_table. */
SW_API int sw_instrument_write_table(const char *action, const sw_ftable_options *opts, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* STEPWATCH_INSTRUMENT_H */
