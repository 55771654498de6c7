/*
 * stepwatch/analysis.h — comparing runs, diagnosing a run, the HTML report.
 * Included by stepwatch.h; do not include directly.
 */
#ifndef STEPWATCH_ANALYSIS_H
#define STEPWATCH_ANALYSIS_H
#ifdef __cplusplus
extern "C" {
#endif

/* Per action (all phases, then per phase): what changed from a (baseline) to b, and
 * whether it is beyond noise. A row is "slower"/"faster" when a two-sided Mann-Whitney U
 * test on the two histograms gives p < 0.01 and the mean moved by >= 5 %; "new"/"gone" for
 * actions in only one run; "unclear" with fewer than 5 calls on a side; else "same".
 * See docs/compare.md. fmt: SW_FORMAT_TABLE, SW_FORMAT_MARKDOWN, SW_FORMAT_CSV or
 * SW_FORMAT_JSON (SW_EFORMAT for others). SW_EINVAL for NULL arguments, SW_EIO on a write
 * error. The snapshots are only read. */
SW_API int sw_compare_write(const sw_snapshot *a, const sw_snapshot *b, sw_format fmt, FILE *out);
/* How many rows sw_compare_write would call "slower" (significant regressions). */
SW_API int sw_compare_regressions(const sw_snapshot *a, const sw_snapshot *b, size_t *count);

/* Plain-language findings about a run, with the numbers behind them: input-bound, callback
 * overhead, warm-up outliers, tail stalls, idle time between steps, straggler rank (with
 * ranks merged), misuse and dropped events; "No problems found" when clean. See
 * docs/diagnose.md. fmt: SW_FORMAT_TABLE (text), SW_FORMAT_MARKDOWN or SW_FORMAT_JSON
 * (SW_EFORMAT for others). Errors of the run file reader are passed on; SW_EIO on a write
 * error. Memory is bounded by the number of ranks, not steps. */
SW_API int sw_diagnose_write(sw_run *run, sw_format fmt, FILE *out);
/* The number of findings of severity warning or worse that sw_diagnose_write reports, in
 * *count (for `stepwatch diagnose --check`). */
SW_API int sw_diagnose_count(sw_run *run, size_t *count);

/* A self-contained HTML report (no network, inline CSS/JS/SVG) of a run: step time over the
 * run, the per-step breakdown by category, histograms with p50/p99, the tables, counters
 * and the diagnosis. Step series are downsampled to at most 2000 points (min/mean/max per
 * bucket), so the file stays bounded for any run length. See docs/html.md. */
SW_API int sw_html_write(sw_run *run, FILE *out);
/* The same page for two runs, a the baseline and b the new one: both runs' breakdowns side
 * by side, their step-time distributions overlaid, sw_compare_write's verdicts as a table,
 * then each run's own sections. SW_EINVAL for NULL arguments. */
SW_API int sw_html_write_compare(sw_run *a, sw_run *b, FILE *out);

/* The live page (`stepwatch serve`, docs/live.md): sw_html_write's page whose script fetches
 * "data.json" beside it every two seconds and redraws in place, keeping the zoom and the
 * hover; its Content-Security-Policy allows requests to its own origin only. run NULL: the
 * page of a run whose file is not there yet (it draws once the first fetch finds data).
 * sw_html_write_data writes the data document alone: the JSON the page embeds and fetches. */
SW_API int sw_html_write_live(sw_run *run, FILE *out);
SW_API int sw_html_write_data(sw_run *run, FILE *out);

/* The run's figures in Prometheus' text exposition format (version 0.0.4): steps and samples,
 * their rates over the last 10 s, the steady step's p50/p99, the category shares, memory,
 * per rank where the file has several, and the cross-rank view's stragglers. The names and
 * labels are listed in docs/live.md and do not change. Memory is bounded by the ranks. */
SW_API int sw_metrics_write(sw_run *run, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_ANALYSIS_H */
