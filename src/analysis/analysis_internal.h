/*
 * analysis_internal.h — what compare, diagnose and the HTML report share inside the library.
 *
 * Diagnose and the HTML report read a run through sw__input, a small view that a run file
 * (run_entry.c) or a test (hand-built arrays) can provide. Both walk the step records in
 * one or two streaming passes, so memory stays bounded however long the run was.
 */
#ifndef SW_ANALYSIS_INTERNAL_H
#define SW_ANALYSIS_INTERNAL_H

#include "report/json_out.h"
#include "series.h"
#include "stepwatch.h"

/* ---- the input view ---- */

typedef struct sw__input {
    const sw_snapshot *snap; /* aggregates of the whole run (all ranks merged) */
    int nranks;              /* ranks the step records come from (>= 1) */
    void *src;
    /* Visit every step record of every rank in time order (rank -1). */
    int (*foreach_step)(void *src, sw_step_fn fn, void *ctx);
    /* Visit every counter sample in time order; NULL when there are none. */
    int (*foreach_counter)(void *src, sw_counter_fn fn, void *ctx);
    const char *(*counter_name)(void *src, int rank, sw_id counter);
    /* Visit every slow step (sw_run_foreach_slow_step); NULL when there are none. */
    int (*foreach_slow_step)(void *src, sw_step_fn fn, void *ctx);
    /* Visit the spans of the kept windows (sw_run_foreach_window_span); NULL when none. */
    int (*foreach_window_span)(void *src, sw_window_span_fn fn, void *ctx);
    const char *(*action_name)(void *src, int rank, sw_id action);
    const sw_fprofile *functions; /* the function profiles, or NULL when none were kept */
    /* "" for a run that completed its file, else what sw_run_incomplete says about it. */
    char incomplete[512];
    const sw_ranks *ranks; /* the cross-rank view (stepwatch/ranks.h), or NULL */
} sw__input;

/* ---- diagnose ---- */

typedef enum sw__severity {
    SW__SEV_INFO = 0,
    SW__SEV_WARNING = 1,
    SW__SEV_CRITICAL = 2
} sw__severity;

#define SW__FINDING_NUMBERS 8

typedef struct sw__number {
    const char *name; /* "data share" */
    double value;
    const char *unit; /* "%", "ns", "x", "steps", "" */
} sw__number;

typedef struct sw__finding {
    const char *id; /* stable key: "input-bound", "tail-stalls", ... */
    sw__severity severity;
    char title[128];
    char sentence[1536]; /* slow-steps: the five costliest steps' evidence, one per line */
    size_t nnumbers;
    sw__number numbers[SW__FINDING_NUMBERS];
} sw__finding;

#define SW__MAX_FINDINGS 16

typedef struct sw__diagnosis {
    size_t nfindings;
    sw__finding findings[SW__MAX_FINDINGS]; /* most severe first */
    uint64_t steps;                         /* steady-state step records seen */
    uint64_t step_ns;                       /* their total duration */
    int nranks;
} sw__diagnosis;

/* Run every check over in; fills d. 0 or a negative SW_E* code. */
int sw__diagnose(const sw__input *in, sw__diagnosis *d);
const char *sw__severity_name(sw__severity s);
/* Write d in fmt (SW_FORMAT_TABLE text, _MARKDOWN, _JSON; else SW_EFORMAT). s names the run. */
int sw__diagnosis_write(const sw_snapshot *s, const sw__diagnosis *d, sw_format fmt, FILE *out);
/* Findings of severity warning or worse. */
size_t sw__diagnosis_problems(const sw__diagnosis *d);
/* Append a finding to d (NULL when full) and a number to a finding (diagnose.c), for the
 * checks kept in their own files. */
sw__finding *sw__finding_add(sw__diagnosis *d, const char *id, sw__severity sev);
void sw__finding_number(sw__finding *f, const char *name, double value, const char *unit);
/* The "low-goodput" finding from the run's goodput notes, if low (diagnose_goodput.c). */
void sw__diagnose_goodput(sw__diagnosis *d, const sw_snapshot *s);
/* The "slow-steps" finding (diagnose_slow.c): the snapshot's sw_slow_summary, and the five
 * costliest slow steps with their evidence when in can visit them. */
int sw__diagnose_slow(sw__diagnosis *d, const sw__input *in);
/* A slow step and its rank; sw__slow_keep keeps the cap costliest (by excess over the
 * median) of those it is given in kept[0..n), largest first, and returns the new n. */
typedef struct sw__slow_entry {
    int rank;
    sw_step_record r;
} sw__slow_entry;
size_t sw__slow_keep(sw__slow_entry *kept, size_t n, size_t cap, int rank, const sw_step_record *r);
/* The advice for slow steps of cause c (diagnose_slow.c; the HTML report shows it too). */
const char *sw__slow_advice(sw_cause c);
/* The "slow-collective" finding from the collectives' bandwidth counters (diagnose_comm.c). */
void sw__diagnose_comm(sw__diagnosis *d, const sw_snapshot *s);
/* The "rank-wait" finding: the cross-rank view's wait line, when it has one (diagnose_comm.c). */
void sw__diagnose_rank_wait(sw__diagnosis *d, const sw_ranks *r);
/* The findings of the device time in s, if any (diagnose_device.c). */
void sw__diagnose_device(sw__diagnosis *d, const sw_snapshot *s);
/* The steps torch.compile compiled in, from the run's "compiled_steps" note
 * (diagnose_compile.c), sorted by step. */
#define SW__MAX_COMPILED 128
typedef struct sw__compiled_step {
    uint64_t step; /* global step index */
    uint64_t ns;   /* time compiling in it */
} sw__compiled_step;
typedef struct sw__compiled {
    size_t n;
    sw__compiled_step steps[SW__MAX_COMPILED];
    uint64_t compile_ns;
} sw__compiled;
void sw__compiled_read(const sw_snapshot *s, sw__compiled *c);
int sw__compiled_has(const sw__compiled *c, uint64_t step);
/* The "compilation" finding: nkept_out training steps (kept_out_ns in all) were compiled. */
void sw__diagnose_compile(sw__diagnosis *d, const sw__compiled *c, uint64_t nkept_out,
                          uint64_t kept_out_ns, double median);
/* Memory drift (diagnose_memory.c): the steady steps' memory per rank (the first
 * SW__DRIFT_RANKS), downsampled; then the "memory-drift" finding when it rises steadily. */
#define SW__DRIFT_RANKS 16
typedef struct sw__drift {
    sw__series rss[SW__DRIFT_RANKS];       /* RSS at each step's end */
    sw__series allocated[SW__DRIFT_RANKS]; /* the allocator's bytes at each step's end */
    int err;                               /* SW_ENOMEM once a series could not be made */
} sw__drift;
void sw__drift_init(sw__drift *m);
void sw__drift_add(sw__drift *m, int rank, const sw_step_record *s);
void sw__diagnose_drift(sw__diagnosis *d, const sw__drift *m);
void sw__drift_free(sw__drift *m);
/* Write one number the way reports show it ("42.0 %", "3.41 ms", "12.3x", "17", "3.2 MiB"). */
void sw__number_text(const sw__number *n, char *buf, size_t size);

/* ---- HTML ---- */

/* The HTML report of in (html.c). */
int sw__html_write_input(const sw__input *in, FILE *out);
/* The comparison page of a (baseline) and b (html.c). */
int sw__html_write_compare_input(const sw__input *a, const sw__input *b, FILE *out);
/* The live page of in (in NULL: no run yet) and the data document alone, which its script
 * fetches (html.c, docs/live.md). */
int sw__html_write_live_input(const sw__input *in, FILE *out);
int sw__html_json_input(const sw__input *in, FILE *out);
/* The report's slow steps (html_slow.c): "slow": {...} of in's slow steps and kept windows. */
int sw__html_json_slow(sw__jw *w, const sw__input *in);
/* The report's flame graphs (html_flame.c): "flames": [...] of fp's actions (fp may be NULL). */
int sw__html_json_flames(sw__jw *w, const sw_fprofile *fp);
/* The page's style sheet and scripts: src/analysis/html/report.css, report.js and flame.js
 * (flame.js is written before report.js, which calls it, only when there is a flame graph
 * or the page is live; live.js after it),
 * embedded by cmake/embed.cmake as NUL-terminated arrays. */
extern const char sw__html_report_css[];
extern const char sw__html_report_js[];
extern const char sw__html_flame_js[];
extern const char sw__html_live_js[];
extern const char sw__html_slow_js[]; /* html/slow.js, before report.js, which calls it */

/* ---- JSON helpers (shared by compare, diagnose and HTML) ---- */

/* A JSON string literal with quotes. Escapes ", \, control characters, and also <, >, &,
 * U+2028 and U+2029, so the output is safe inside an HTML <script> element. */
void sw__json_string(FILE *out, const char *s);
/* A string the HTML report shows (its JSON, written with w): cleaned as for a terminal
 * (bidirectional and control characters made visible), then a JSON string. */
void sw__jw_display_string(sw__jw *w, const char *s);
/* A JSON number; NaN and infinities (not JSON) become null. */
void sw__json_number(FILE *out, double v);
/* HTML text with &, <, >, " and ' escaped. */
void sw__html_text(FILE *out, const char *s);
/* s for a terminal or a text file (report/writer.h's sw__text_clean): control characters
 * as visible escapes (\n, \x1B), bytes that are not UTF-8 as U+FFFD. */
void sw__clean_text(FILE *out, const char *s);

#endif /* SW_ANALYSIS_INTERNAL_H */
