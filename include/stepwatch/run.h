/*
 * stepwatch/run.h — reading run files (one per process/rank), merging ranks, exports.
 * Included by stepwatch.h; do not include directly.
 */
#ifndef STEPWATCH_RUN_H
#define STEPWATCH_RUN_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_run sw_run;

/* Open a run file read-only (also while its run is still writing it, and after it was
 * killed: any file SQLite can read, a WAL left behind included). SW_ENOTFOUND if the file
 * does not exist, SW_EFOREIGN for a file that is not a stepwatch run file, SW_ECORRUPT for
 * a damaged one, SW_EVERSION for an unknown schema version; sw_last_error() says why. The
 * readers below (snapshots, records) say why they failed the same way. */
SW_API int sw_run_open(const char *path, sw_run **out);
SW_API void sw_run_close(sw_run *run);

/* How the run ended: 0 when every rank completed its file (the profiler was freed, the
 * program exited, or SIGINT/SIGTERM/SIGHUP came), else how many ranks did not: killed, crashed, or
 * still running. what (if not NULL) then gets "incomplete: rank 0 stopped without
 * completing its file (killed, or crashed); the file covers its first 12.3 s, ...", one
 * clause per rank (cut to size bytes). A negative SW_E* on a read error. */
SW_API int sw_run_incomplete(sw_run *run, char *what, size_t size);

/* Ranks held by the file (1 for a single-process file, N after sw_run_merge). */
SW_API int sw_run_rank_count(const sw_run *run);
/* The rank number of the index-th rank (0 <= index < sw_run_rank_count), ascending;
 * -1 for an index out of range. */
SW_API int sw_run_rank_id(const sw_run *run, int index);
/* The aggregates of the whole file (all ranks merged), or of one rank. */
SW_API int sw_run_snapshot(sw_run *run, sw_snapshot **out);
SW_API int sw_run_rank_snapshot(sw_run *run, int rank, sw_snapshot **out);

/* Visit records in time order; a callback returning nonzero stops the walk and that value
 * is returned. rank -1 = all ranks. */
typedef int (*sw_step_fn)(void *ctx, int rank, const sw_step_record *step);
typedef int (*sw_span_fn)(void *ctx, int rank, const sw_span_record *span);
typedef int (*sw_counter_fn)(void *ctx, int rank, const sw_counter_record *sample);
SW_API int sw_run_foreach_step(sw_run *run, int rank, sw_step_fn fn, void *ctx);
SW_API int sw_run_foreach_span(sw_run *run, int rank, sw_span_fn fn, void *ctx);
SW_API int sw_run_foreach_counter(sw_run *run, int rank, sw_counter_fn fn, void *ctx);

/* Slow steps (docs/slow-steps.md): every slow step the file holds, in step order per rank,
 * with its median, cause, explained_ns, signals and window_kept (of category_ns only the
 * data time; no memory figures). The spans of the kept windows (a slow step's and the step
 * before it's, SW_SLOW_WINDOWS per rank at most, the costliest), window = the slow step they
 * belong to, in window and time order. */
typedef int (*sw_window_span_fn)(void *ctx, int rank, uint64_t window, const sw_span_record *span);
SW_API int sw_run_foreach_slow_step(sw_run *run, int rank, sw_step_fn fn, void *ctx);
SW_API int sw_run_foreach_window_span(sw_run *run, int rank, sw_window_span_fn fn, void *ctx);

/* Progress of the long walk behind sw_run_foreach_span (a Chrome export of a long timeline
 * takes seconds per million spans). fn gets the stage ("reading spans", "sorting spans",
 * "writing spans"), the spans done and their total: every 65536 spans, when a stage is
 * complete, and once as the sort starts (done 0). It runs on the calling thread, inside the
 * walk. NULL turns it off (the default). */
typedef void (*sw_progress_fn)(void *ctx, const char *stage, uint64_t done, uint64_t total);
SW_API void sw_run_set_progress(sw_run *run, sw_progress_fn fn, void *ctx);

/* Names of ids as stored in the file (NULL for unknown). */
SW_API const char *sw_run_action_name(const sw_run *run, int rank, sw_id action);
SW_API const char *sw_run_phase_name(const sw_run *run, int rank, sw_phase phase);
SW_API const char *sw_run_counter_name(const sw_run *run, int rank, sw_id counter);

/* Function profiles (stepwatch/functions.h). sw_run_add_functions adds fp's calls (copied) to
 * the profile p's run file keeps, written with the next flush (so the latest state survives
 * a crash up to that flush): the Python Profiler calls it when it closes and when its profiles
 * are cleared, the instrument library when it stops. SW_ENOTFOUND when p has no run file.
 * sw_run_functions reads a file's profile (rank -1: every rank merged) into *out (the
 * caller frees it); SW_ENOTFOUND when the file holds none. */
SW_API int sw_run_add_functions(sw_profiler *p, const sw_fprofile *fp);
SW_API int sw_run_functions(sw_run *run, int rank, sw_fprofile **out);

/* Many ranks (stepwatch/ranks.h, docs/ranks.md). sw_run_add_ranks keeps one round of
 * cross-rank aggregation in p's run file (rank 0's): world_size payloads of payload_size
 * bytes each, copied, written with the next flush with the step count now; final marks the
 * end-of-run round. sw_run_set_clock_offset records this rank's wall clock minus rank 0's
 * (estimated when the ranks start), by which exports put every rank on rank 0's clock. Both
 * SW_ENOTFOUND when p has no run file, SW_ESTATE once it is complete.
 * sw_run_stored_ranks reads the last round a file holds (the last final one if any):
 * *payloads is malloc'd (the caller frees it), world_size payloads of SW_RANK_PAYLOAD_SIZE
 * bytes; SW_ENOTFOUND when the file holds none, SW_ECORRUPT for a malformed round. */
SW_API int sw_run_add_ranks(sw_profiler *p, const void *payloads, size_t payload_size,
                            int world_size, int final);
SW_API int sw_run_set_clock_offset(sw_profiler *p, int64_t offset_ns);
SW_API int sw_run_stored_ranks(sw_run *run, void **payloads, int *world_size, uint64_t *step,
                               int *final);

/* Merge run files (one per rank) into one new file at out_path: SW_EEXISTS if anything is
 * there, SW_EINVAL when two inputs hold the same rank, an input's sw_run_open error. The
 * merged file is built under a temporary name beside out_path and appears whole or not at
 * all. sw_last_error() says why a merge failed. */
SW_API int sw_run_merge(const char *const *paths, size_t npaths, const char *out_path);
/* The same, replacing out_path when it is an earlier stepwatch run file that no live process
 * writes (in one rename); anything else there is left alone (SW_EEXISTS, SW_EBUSY). */
SW_API int sw_run_merge_replace(const char *const *paths, size_t npaths, const char *out_path);

/* Exports. */
SW_API int sw_run_export_chrome(sw_run *run, FILE *out);    /* Chrome Trace Event JSON */
SW_API int sw_run_export_steps_csv(sw_run *run, FILE *out); /* Ignite-style per iteration */
/* Collapsed stacks of the function profiles (flamegraph.pl, speedscope, inferno), values in
 * ns; SW_ENOTFOUND when the file holds none. */
SW_API int sw_run_export_collapsed(sw_run *run, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_RUN_H */
