/*
 * writer.h — the report writers' one interface and the helpers they share (private).
 *
 * Each format lives in its own fmt_*.c file and exports one sw__writer. report.c picks the
 * writer for a format, prints "no actions recorded" for an empty snapshot in the text
 * formats, and turns any write error into SW_EIO. A writer only writes: it may return
 * SW_ENOMEM, otherwise write errors are found by report.c through ferror().
 */
#ifndef SW_REPORT_WRITER_H
#define SW_REPORT_WRITER_H

#include "json_out.h"
#include "stepwatch.h"

typedef struct sw__writer {
    sw_format format;
    const char *name; /* as sw_format_parse reads it */
    int machine;      /* nonzero: CSV/JSON, which stay parseable when empty */
    int (*write)(const sw_snapshot *s, FILE *out, const sw_write_options *opts); /* never NULL */
} sw__writer;

extern const sw__writer sw__writer_table;
extern const sw__writer sw__writer_lightning;
extern const sw__writer sw__writer_fastxtend;
extern const sw__writer sw__writer_ignite;
extern const sw__writer sw__writer_markdown;
extern const sw__writer sw__writer_csv;
extern const sw__writer sw__writer_json;

/* The "misuse" member as the JSON report writes it (fmt_json.c); the HTML page's data
 * carries the same object. */
void sw__json_put_misuse(sw__jw *w, const sw_misuse *m);

/* ---- the goodput table (goodput_table.c) ---- */

#define SW__GOODPUT_CAUSES 16 /* causes kept from the note (goodput.py has eight) */
#define SW__GOODPUT_NAME 32   /* bytes of a cause's name, NUL included */

typedef struct sw__goodput {
    uint64_t wall_ns, steady_ns;
    size_t nlost;
    struct {
        char cause[SW__GOODPUT_NAME];
        uint64_t ns;
    } lost[SW__GOODPUT_CAUSES];
} sw__goodput;

/* The run's "goodput_ns" note read into g: 1, or 0 when there is none (or it is not in the
 * note's form). */
int sw__goodput_read(const sw_snapshot *s, sw__goodput *g);
/* The "goodput" member ({percent, wall_ns, steady_ns, lost: [{cause, ns, percent}]}) into
 * the object open in w; nothing without the note. The JSON report and the HTML page's data. */
void sw__json_put_goodput(sw__jw *w, const sw_snapshot *s);

/* ---- text helpers (text.c) ---- */

#define SW__LABEL_MAX 1024 /* bytes of a cleaned label, NUL included */

/* Copy in to out (size bytes, NUL included) for a terminal or a text file, the one rule of
 * the text formats (and under the markdown and HTML ones): control characters become visible
 * escapes (\n, \t, \r, \xHH), C1 and bidirectional controls \uXXXX (U+202E would reverse
 * the text around it), bytes that are not UTF-8 become U+FFFD. Returns the width in columns (one per code point). NULL reads as "". */
size_t sw__text_clean(const char *in, char *out, size_t size);
/* Columns taken by a clean UTF-8 string (one per code point). */
size_t sw__text_width(const char *s);
/* The columns a name may take in a layout whose own limit is max_cols: max_cols, or no limit
 * (SIZE_MAX) under opts->full_names. */
size_t sw__name_cols(const sw_write_options *opts, size_t max_cols);
/* Copy clean string in to out, shortened to at most width columns by replacing its middle
 * with "…" (the start and the end of a name say the most). */
void sw__text_fit(const char *in, size_t width, char *out, size_t size);
/* Write s padded with spaces to width columns, left- or right-aligned. */
void sw__put_padded(FILE *out, const char *s, size_t width, int right_align);

/* The clean label of a row: "action" outside phases and for roll-ups, else
 * "phase/action". */
void sw__row_label(const sw_row *r, char *out, size_t size);
/* Clean action name alone ("#id" when the row has none). */
void sw__row_action(const sw_row *r, char *out, size_t size);

/* The rows a report shows, largest total first (ties by name, so output is stable):
 * rollups nonzero takes the all-phase roll-up rows, zero the per-phase rows; when the
 * snapshot has none of the kind asked for, the other kind. *out is malloc'ed (free it);
 * returns the count, or -1 when out of memory. */
long sw__rows_select(const sw_snapshot *s, int rollups, const sw_row ***out);

/* Percent of the snapshot's wall time; 0 when the wall time is 0. */
double sw__percent(const sw_snapshot *s, uint64_t ns);
/* The width a table written to out aims for: $COLUMNS when it is a number in 40..1000; else
 * the width of out's terminal when out is one, 80 when it is a file or a pipe; for a stream
 * in memory, the terminal on stdout or stderr, else 80. */
size_t sw__term_width(FILE *out);
/* A number with thousands separators: 82977 -> "82,977". */
void sw__with_commas(uint64_t v, char *out, size_t size);
/* Exact seconds of a duration in ns: "1.250000000". */
void sw__seconds_text(uint64_t ns, char *out, size_t size);
/* One CSV field, the one CSV rule every CSV writer uses: quoted per RFC 4180 when it holds a
 * comma, a quote, a line break or edge spaces (quotes doubled); a field starting with = + - @
 * tab or CR gets a leading ' so no spreadsheet runs it as a formula (OWASP); bytes that are
 * not UTF-8 become U+FFFD, control characters other than tab and line feed and the
 * bidirectional controls become visible escapes (\x1B, \x0D, \u202E). NULL reads as "". */
void sw__csv_put_text(FILE *out, const char *s);

/* ---- the stepwatch table's cells, shared by the table and markdown (table_cells.c) ---- */

enum {
    SW__COL_MEAN,
    SW__COL_STD,
    SW__COL_P50,
    SW__COL_P99,
    SW__COL_CALLS,
    SW__COL_TOTAL,
    SW__COL_SELF,
    SW__COL_PCT,
    SW__NCOLS
};

extern const char *const sw__col_header[SW__NCOLS];

typedef struct sw__cells {
    char v[SW__NCOLS][40];
} sw__cells;

/* The cells of one row's statistics; hist NULL leaves p50/p99 as "-" (warm-up). */
void sw__cells_of(const sw_snapshot *s, const sw_stats *st, const sw_hist *hist, sw__cells *out);
/* The "Total" row: calls summed over the rows shown, total = the wall time. */
void sw__cells_total(const sw_snapshot *s, uint64_t calls, sw__cells *out);
/* The run's one-line summary: "wall 4.20 s, 120 steps, 2 threads, rank 1 of 4". */
void sw__run_summary(const sw_snapshot *s, char *out, size_t size);
/* The "efficiency" and "goodput_parts" notes (TFLOP/s, MFU, tokens/s; goodput:
 * efficiency_line.c), a line each after prefix; nothing for a run without them. 1 when a
 * line was written, else 0. */
int sw__put_efficiency(const sw_snapshot *s, FILE *out, const char *prefix);
/* The FLOPs, FLOP/s and MFU of forward, backward and optimizer, a small table under the
 * efficiency line (efficiency_phases.c); nothing without per-phase counts. */
void sw__put_efficiency_phases(const sw_snapshot *s, FILE *out);
/* The same as the JSON report's "efficiency" member ({phases: [{phase, flops_per_step,
 * flops_per_s, mfu}]}, null where unknown), into the object open in w. */
void sw__json_put_efficiency(sw__jw *w, const sw_snapshot *s);
/* Nonzero when some row has warm-up calls. */
int sw__has_warmup(const sw_snapshot *s);
/* When there was misuse or dropped events: a blank line, then "Misuse: 3 end without
 * begin, 1 mismatched end" and "Dropped events: N (...)", each line after bullet. */
void sw__put_problems(const sw_snapshot *s, FILE *out, const char *bullet);

/* Bytes for people: "812 B", "3.4 KiB", "512.0 MiB", "1.25 GiB". Returns buf. */
char *sw__bytes_text(double bytes, char *buf, size_t size);
/* The memory per step in one line (sw_memory_summary): "RSS max 1.25 GiB, at the end
 * 1.20 GiB; allocated peak 3.10 GiB, at the end 2.00 GiB; reserved max 4.00 GiB, at the end
 * 4.00 GiB", each part only when measured; "" when nothing was. */
void sw__memory_text(const sw_memory_summary *m, char *out, size_t size);
/* When memory was measured: a blank line, then bullet + "Memory per step: " + the line. */
void sw__put_memory(const sw_snapshot *s, FILE *out, const char *bullet);
/* Slow steps (slow_step_text.c; docs/slow-steps.md): their causes by count, largest first
 * ("gc 30, preempted 5, unknown 2"); the steps' total time (the "step" roll-up, warm-up
 * included); and the line under the table, "Slow steps: 37 (2.1 % of steps, 8.3 % of
 * time): gc 30, ...", after bullet, when there were any. */
void sw__slow_causes_text(const sw_slow_summary *s, char *out, size_t size);
uint64_t sw__all_step_ns(const sw_snapshot *s);
void sw__put_slow(const sw_snapshot *s, FILE *out, const char *bullet);

/* Write clean text as one markdown table cell, escaped so it shows as itself
 * (fmt_markdown.c). */
void sw__md_put_cell(FILE *out, const char *clean);
/* Any text from a run file (a name, a sentence holding names) in markdown: cleaned as for a
 * terminal (sw__text_clean), then escaped as a cell, so <script>, <img onerror>, | or *
 * show as themselves. The one markdown rule: every markdown writer uses it. */
void sw__md_put_text(FILE *out, const char *raw);

/* ---- Ignite's cells (ignite_layout.c; the layouts are public: sw_ignite_write_*) ---- */

/* Ignite's title box and column line, the start of BasicTimeProfiler.print_results. */
void sw__ignite_put_title(FILE *out);
/* BasicTimeProfiler's stats cell: "total | min/index | max/index | mean | std" (seconds, 5
 * decimals; an index below 0 is "-"), the total alone for one call, "not yet triggered" for
 * none. */
void sw__ignite_stats_cell(const sw_stats *st, char *buf, size_t size);
/* Seconds as HandlersTimeProfiler prints them: Python's str(round(seconds, 5)). */
void sw__ignite_round5(double seconds, char *buf, size_t size);
/* The cells of one HandlersTimeProfiler row (Ignite's compute_basic_stats): "not triggered"
 * and "None" for no calls, std "None" for one. */
typedef struct sw__ignite_cells {
    char total[32], min[32], min_index[24], max[32], max_index[24], mean[32], std[32];
} sw__ignite_cells;
void sw__ignite_row_cells(const sw_stats *st, sw__ignite_cells *c);
/* HandlersTimeProfiler's line under its table: "<handler> took total <total>s [min/index:
 * <min>s/<min_index>, max/index: ..., mean: <mean>s, std: <std>s]". */
void sw__ignite_put_summary(FILE *out, const sw_ignite_row *r);
/* The sw_ignite_row of cells c under handler and event. */
sw_ignite_row sw__ignite_row_of(const char *handler, const char *event, const sw__ignite_cells *c);

/* ---- device time beside host time (device_rows.c) ---- */

/* The device time of row r (the counters "device:<phase>/<action>" the device layer
 * records, in ns; a roll-up row merges its action's phases) into *out: nonzero when there
 * is any. */
int sw__device_of(const sw_snapshot *s, const sw_row *r, sw_counter_summary *out);
/* Nonzero when the snapshot holds device time. */
int sw__device_any(const sw_snapshot *s);
/* Nonzero for a counter "device:<phase>/<action>": a phase's device time (ns), which the
 * Device section shows in time units (the Counters lines leave it out). */
int sw__device_phase_time(const char *name);
/* The text formats' last section: host and device time side by side per phase and action,
 * as a markdown table when markdown is nonzero. */
void sw__put_device_section(const sw_snapshot *s, FILE *out, int markdown);
/* The JSON's "device_comm": per phase, the communication on the device per step and its
 * exposed part (the counters "device:<phase>/comm" and ".../comm_exposed"); nothing when
 * the run has none. */
void sw__json_put_device_comm(sw__jw *w, const sw_snapshot *s);

/* ---- the collectives' bandwidth (comm_bandwidth.c) ---- */

#define SW__COMM_BW_ROWS 128 /* (op, size class) rows a report shows: the counters' pairs */
typedef struct sw__comm_bw {
    char op[64];         /* "all_reduce" */
    char size_class[16]; /* "4KiB": 4 KiB up to 8 KiB */
    uint64_t calls;      /* calls timed to their end */
    double algbw, busbw; /* means over the calls, GB/s */
    double best_busbw;   /* the fastest call's */
} sw__comm_bw;
/* Nonzero for a counter "comm:<op>:<class>:algbw" or ":busbw" (GB/s, one sample a call),
 * which the Collectives section shows (the Counters lines leave it out). */
int sw__comm_bw_counter(const char *name);
/* The snapshot's (op, size class) rows (at most max), by op and size: their number. */
size_t sw__comm_bw_rows(const sw_snapshot *s, sw__comm_bw *rows, size_t max);
/* The text formats' Collectives section, as a markdown table when markdown is nonzero;
 * nothing without bandwidth counters. */
void sw__put_comm_bw(const sw_snapshot *s, FILE *out, int markdown);
/* The JSON report's "collectives" member, only when there are rows. */
void sw__json_put_comm_bw(sw__jw *w, const sw_snapshot *s);

/* ---- units (units.c) ---- */

/* Bytes in binary units ("1.50 MiB"); "-" for a negative (unknown) count. */
void sw__format_bytes(int64_t bytes, char *out, size_t size);

/* ---- the modules table (module_rows.c) ---- */

/* Has some module row GPU times (device_*_calls)? */
int sw__modules_have_device(const sw_snapshot *s);
/* The snapshot's module rows, most self time (forward + backward; the GPU's when there are
 * GPU times) first: *out is malloc'ed (free it); the count, or -1 when out of memory. */
long sw__modules_sorted(const sw_snapshot *s, const sw_module_row ***out);
/* The text formats' "Modules" section (the top 20 by self time), as a markdown table when
 * markdown is nonzero. Nothing when the snapshot has no modules. */
void sw__put_modules_section(const sw_snapshot *s, FILE *out, int markdown);

#endif /* SW_REPORT_WRITER_H */
