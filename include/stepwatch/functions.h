/*
 * stepwatch/functions.h — function-level profiles per action: which functions ran inside an
 * action, how often and for how long, counted the way cProfile counts.
 *
 * A function profile (sw_fprofile) holds a table of functions (file, line, name) and, per
 * action, call trees: one per thread that ran the action while it was profiled (or one merged
 * tree, read back from a run file). A node of a tree is one call path: a function, the node
 * of its caller, the calls made along that path, their total time (callees included) and
 * their self time. Node 0 is the action itself: its calls are the action's spans, its total
 * their time, its self time what ran in the action outside any recorded function.
 *
 * From the trees come cProfile's numbers (sw_fprofile_stats: ncalls with primitive calls,
 * tottime, cumtime, caller -> callee edges), its text report (sw_fprofile_write_table) and
 * collapsed stacks for flame graphs (sw_fprofile_write_collapsed).
 *
 * Memory grows with the distinct call paths, never with the number of calls: a tree stops
 * growing at SW_FTREE_MAX_NODES nodes; a call on a new path after that is not recorded as a
 * node (its time stays in its caller's self time) and is counted in folded_calls.
 *
 * Builders: the Python extension (python/_stepwatch/_funcprof.c, the interpreter's hooks) and
 * the -finstrument-functions library (src/instrument/). Keys are the builder's: any 64-bit
 * value naming a function (a code object's address, a C function's address). Trees made by
 * sw_fprofile_merge and by the run-file reader use function indexes as keys.
 *
 * Threads: an sw_fprofile is not thread-safe. Its builder serializes every call (the Python
 * extension holds the GIL; the instrument library takes its lock to add functions and trees,
 * and each thread writes only its own trees). Read it (stats, writers, merge) while no
 * thread writes it.
 *
 * Included by stepwatch.h; do not include directly.
 */
#ifndef STEPWATCH_FUNCTIONS_H
#define STEPWATCH_FUNCTIONS_H

#ifdef __cplusplus
extern "C" {
#endif

#define SW_FNODE_NONE UINT32_MAX
/* The most nodes one tree keeps (about 64 bytes each with its share of the lookup table). */
#define SW_FTREE_MAX_NODES (1u << 20)

typedef struct sw_fprofile sw_fprofile;
typedef struct sw_ftree sw_ftree;

/* A function as cProfile names it. Built-in (C) functions have file "~", line 0 and a name
 * in angle brackets ("<built-in method time.sleep>", "<method 'append' of 'list' objects>"),
 * which pstats prints as {built-in method time.sleep}. */
typedef struct sw_func {
    const char *file;
    uint32_t line;
    const char *name;
} sw_func;

typedef struct sw_fnode {
    uint32_t parent;   /* the caller's node; node 0 (the action) has parent 0 */
    uint32_t func;     /* index in the profile's function table; unused for node 0 */
    uint64_t key;      /* the builder's key of func (0 for node 0) */
    uint64_t calls;    /* calls that returned (or were cut off by the action's end) */
    uint64_t total_ns; /* their time, callees included (in units: sw_fprofile_set_unit) */
    uint64_t self_ns;  /* their time outside recorded callees: cProfile's tottime */
} sw_fnode;

/* ---- building ---------------------------------------------------------------------------- */

/* A new, empty profile into *out. 0 or SW_ENOMEM. */
SW_API int sw_fprofile_new(sw_fprofile **out);
SW_API void sw_fprofile_free(sw_fprofile *fp);
/* Forget every tree and function (the profile is as new). */
SW_API void sw_fprofile_clear(sw_fprofile *fp);

/* Add function f (strings copied) under key; *index gets its index. A key already present
 * keeps its first function. 0, SW_EINVAL (NULL strings) or SW_ENOMEM. */
SW_API int sw_fprofile_add_func(sw_fprofile *fp, uint64_t key, const sw_func *f, uint32_t *index);
/* The index of key's function, or SW_FNODE_NONE. */
SW_API uint32_t sw_fprofile_find_func(const sw_fprofile *fp, uint64_t key);
SW_API uint32_t sw_fprofile_func_count(const sw_fprofile *fp);
/* Function index (NULL when out of range). Valid until the profile changes. */
SW_API const sw_func *sw_fprofile_func(const sw_fprofile *fp, uint32_t index);

/* A new tree of action (the name is copied), owned by fp; NULL when out of memory. Its node
 * 0 is the action. */
SW_API sw_ftree *sw_fprofile_add_tree(sw_fprofile *fp, const char *action);

/* The child of node parent called key, or SW_FNODE_NONE when there is none yet. One probe
 * of a hash table: the hot path of a builder. */
SW_API uint32_t sw_ftree_child(const sw_ftree *t, uint32_t parent, uint64_t key);
/* Make that child for function func (an index of the profile's table). SW_FNODE_NONE when
 * the tree is full or out of memory. */
SW_API uint32_t sw_ftree_add_child(sw_ftree *t, uint32_t parent, uint64_t key, uint32_t func);
/* One finished call of node: calls += 1, total and self time added. */
SW_API void sw_ftree_record(sw_ftree *t, uint32_t node, uint64_t total_ns, uint64_t self_ns);
/* Add to node's counts (merging, reading back). */
SW_API void sw_ftree_add(sw_ftree *t, uint32_t node, uint64_t calls, uint64_t total_ns,
                         uint64_t self_ns);
/* Count calls that got no node (the tree was full). */
SW_API void sw_ftree_fold(sw_ftree *t, uint64_t calls);

/* The length of one unit of the trees' times in ns (default 1: times are ns). A builder that
 * reads a cheaper clock (the CPU's time-stamp counter) records its ticks and sets the scale
 * before the profile is read; stats, writers and merges apply it. */
SW_API void sw_fprofile_set_unit(sw_fprofile *fp, double ns_per_unit);
SW_API double sw_fprofile_unit(const sw_fprofile *fp);

/* ---- recording: one thread's running calls ------------------------------------------------ */

/* The clock calls are timed with: the CPU's time-stamp counter where it ticks at a constant
 * rate (x86-64 with invariant TSC; a read costs a fraction of clock_gettime's), else
 * CLOCK_MONOTONIC in ns: the core's tick counter, whose invariance check and calibration are
 * the TSC clock's (SW_CLOCK=tsc). sw_fclock_unit: ns per tick, measured against
 * CLOCK_MONOTONIC from the first use to now, at least 20 ms apart (it sleeps the rest once,
 * when asked sooner); pass it to sw_fprofile_set_unit before reading a profile. */
SW_API uint64_t sw_fclock_now(void);
SW_API double sw_fclock_unit(void);

/* A shadow stack: one thread's running calls and the function actions open on it. A call is
 * recorded in the tree of the innermost action open when it begins; calls made directly by
 * the code that opened the action hang from the root. Not thread-safe: one per thread. */
typedef struct sw_fstack sw_fstack;
#define SW_FSTACK_MAX_OPEN 32 /* actions open at once on one thread */

SW_API int sw_fstack_new(sw_fstack **out);
SW_API void sw_fstack_free(sw_fstack *s);
/* Forget every running call and open action (a fork child). */
SW_API void sw_fstack_reset(sw_fstack *s);

/* An action opens: calls from now on go to tree (owner and action tell it apart for
 * sw_fstack_find). 0, or SW_ELIMIT with SW_FSTACK_MAX_OPEN open. */
SW_API int sw_fstack_open(sw_fstack *s, sw_ftree *tree, const void *owner, uint32_t action);
/* The index of the innermost open (owner, action), or -1. */
SW_API int sw_fstack_find(const sw_fstack *s, const void *owner, uint32_t action);
SW_API const void *sw_fstack_owner(const sw_fstack *s, uint32_t i);
/* Close the innermost open action at now (sw_fclock_now): the calls it left running are cut
 * then, its time goes to its root, and to a node "<stepwatch action NAME>" of the action it
 * was nested in (under that action's innermost running call). */
SW_API void sw_fstack_close_top(sw_fstack *s, uint64_t now);
SW_API uint32_t sw_fstack_open_count(const sw_fstack *s);
SW_API uint32_t sw_fstack_depth(const sw_fstack *s);
/* The innermost open action's tree (where a call beginning now goes), or NULL. */
SW_API sw_ftree *sw_fstack_top_tree(const sw_fstack *s);

/* A call of key begins; ident names it for its return (any value but 0). 1: recorded; 0: no
 * node for key under the running caller yet: find or add key's function in the top tree's
 * profile and call sw_fstack_enter_new; -1: not recorded (no action open, stack or tree
 * full: its return is ignored). */
SW_API int sw_fstack_enter(sw_fstack *s, uint64_t key, uintptr_t ident);
SW_API int sw_fstack_enter_new(sw_fstack *s, uint64_t key, uintptr_t ident, uint32_t func);
/* The call named ident returns (ignored unless it is the innermost recorded call). */
SW_API void sw_fstack_leave(sw_fstack *s, uintptr_t ident);

/* ---- reading ----------------------------------------------------------------------------- */

SW_API uint32_t sw_fprofile_tree_count(const sw_fprofile *fp);
SW_API const sw_ftree *sw_fprofile_tree(const sw_fprofile *fp, uint32_t i);
SW_API const char *sw_ftree_action(const sw_ftree *t);
SW_API uint32_t sw_ftree_size(const sw_ftree *t);
/* The nodes, parents before children. Valid until the tree changes. */
SW_API const sw_fnode *sw_ftree_nodes(const sw_ftree *t);
SW_API uint64_t sw_ftree_folded(const sw_ftree *t);

/* A new profile in *out with fp's functions and one tree per action (all threads' trees of
 * that action merged path by path; actions in first-seen order), times in ns. 0 or
 * SW_ENOMEM. */
SW_API int sw_fprofile_merge(const sw_fprofile *fp, sw_fprofile **out);
/* Add every function and tree of from to into (functions matched by file, line and name;
 * trees of the same action merged path by path; times converted to into's unit): joins rank
 * files. 0 or SW_ENOMEM. */
SW_API int sw_fprofile_merge_into(sw_fprofile *into, const sw_fprofile *from);

/* One function in one action, as cProfile counts it. */
typedef struct sw_fstat {
    uint32_t func;
    uint64_t calls;           /* ncalls */
    uint64_t primitive_calls; /* calls made while no other call of the function was running */
    uint64_t tottime_ns;      /* time in the function itself */
    uint64_t cumtime_ns;      /* time in primitive calls, callees included */
} sw_fstat;

/* Calls of callee made by caller (pstats' callers), counted the same way. */
typedef struct sw_fedge {
    uint32_t caller, callee;
    uint64_t calls, primitive_calls, tottime_ns, cumtime_ns;
} sw_fedge;

typedef struct sw_fstats {
    const char *action;
    uint64_t spans;        /* times the action ran while profiled */
    uint64_t total_ns;     /* their time */
    uint64_t self_ns;      /* the part outside any recorded function */
    uint64_t folded_calls; /* calls past the node limit, counted in their callers */
    size_t nfuncs;         /* functions, by cumulative time (descending) */
    sw_fstat *funcs;
    size_t nedges; /* edges, by callee then caller */
    sw_fedge *edges;
} sw_fstats;

/* cProfile's numbers for action (all its trees) into *out (caller frees with
 * sw_fstats_free). SW_ENOTFOUND when fp has no tree of action; SW_ENOMEM. */
SW_API int sw_fprofile_stats(const sw_fprofile *fp, const char *action, sw_fstats **out);
SW_API void sw_fstats_free(sw_fstats *s);

/* Actions with trees, in first-seen order: how many, and the i-th name. */
SW_API uint32_t sw_fprofile_action_count(const sw_fprofile *fp);
SW_API const char *sw_fprofile_action(const sw_fprofile *fp, uint32_t i);

/* ---- writing ----------------------------------------------------------------------------- */

typedef struct sw_ftable_options {
    size_t size;        /* sizeof(sw_ftable_options) as the caller was compiled (stepwatch.h,
                           "Structs that grow") */
    uint32_t max_lines; /* > 0: at most this many functions per action (pstats' int) */
    int full_paths;     /* nonzero: file names as recorded; 0: base names (pstats' strip_dirs) */
    double fraction;    /* in (0, 1): this share of them, rounded (pstats' float); else all */
    const char *sort;   /* "cumulative" (NULL), "tottime" or "ncalls" */
    const char *suffix; /* appended to each "Profile stats for: <action>" line, or NULL */
    /* New options go here, at the end. */
} sw_ftable_options;
#define SW_FTABLE_OPTIONS_INIT SW__SIZED_INIT(sw_ftable_options)

/* The report a cProfile user reads, for action (NULL: every action): per action
 *   Profile stats for: <action>
 *            N function calls (M primitive calls) in T seconds
 *      Ordered by: cumulative time
 *      List reduced from N to M due to restriction <M>
 *      ncalls  tottime  percall  cumtime  percall filename:lineno(function)
 * as pstats.Stats(...).strip_dirs().sort_stats(...).print_stats(...) prints it. opts may be
 * NULL. SW_EINVAL (bad sort, a size under the first release's), SW_EUNSUPPORTED (a newer
 * option set: stepwatch.h, "Structs that grow"), SW_ENOTFOUND (no such action), SW_EIO, SW_ENOMEM. */
SW_API int sw_fprofile_write_table(const sw_fprofile *fp, const char *action,
                                   const sw_ftable_options *opts, FILE *out);

/* Collapsed stacks (flamegraph.pl, speedscope, inferno): one line per call path,
 * "action;caller;callee <self ns>", for action (NULL: every action). The values of an
 * action's lines sum to its profiled time. Frames are named as in the table (base names);
 * ';' and control characters in names become ':' and '?'. SW_ENOTFOUND, SW_EIO, SW_ENOMEM. */
SW_API int sw_fprofile_write_collapsed(const sw_fprofile *fp, const char *action, FILE *out);

/* A frame's name as the table and the collapsed stacks print it, into buf (NUL-terminated,
 * cut to size): "file.py:12(name)", or "{built-in method time.sleep}" for built-ins. */
SW_API void sw_func_label(const sw_func *f, int full_path, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* STEPWATCH_FUNCTIONS_H */
