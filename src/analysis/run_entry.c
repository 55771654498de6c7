/*
 * run_entry.c — the public diagnose and HTML calls on a run file: an sw__input view over
 * sw_run, then the input-based implementations (diagnose.c, html.c).
 */
#include "analysis_internal.h"

#include <stdlib.h>

static int run_steps(void *src, sw_step_fn fn, void *ctx) {
    return sw_run_foreach_step((sw_run *)src, -1, fn, ctx);
}

static int run_counters(void *src, sw_counter_fn fn, void *ctx) {
    return sw_run_foreach_counter((sw_run *)src, -1, fn, ctx);
}

static int run_slow_steps(void *src, sw_step_fn fn, void *ctx) {
    return sw_run_foreach_slow_step((sw_run *)src, -1, fn, ctx);
}

static int run_window_spans(void *src, sw_window_span_fn fn, void *ctx) {
    return sw_run_foreach_window_span((sw_run *)src, -1, fn, ctx);
}

static const char *run_action_name(void *src, int rank, sw_id action) {
    return sw_run_action_name((const sw_run *)src, rank, action);
}

static const char *run_counter_name(void *src, int rank, sw_id counter) {
    return sw_run_counter_name((const sw_run *)src, rank, counter);
}

/* A view of an open run file; *snap_out must be freed with sw_snapshot_free. */
static int input_from_run(sw_run *run, sw__input *in, sw_snapshot **snap_out) {
    *snap_out = NULL;
    sw_snapshot *snap = NULL;
    int rc = sw_run_snapshot(run, &snap);
    if (rc != 0)
        return rc;
    in->snap = snap;
    in->nranks = sw_run_rank_count(run);
    in->src = run;
    in->foreach_step = run_steps;
    in->foreach_counter = run_counters;
    in->foreach_slow_step = run_slow_steps;
    in->foreach_window_span = run_window_spans;
    in->action_name = run_action_name;
    in->counter_name = run_counter_name;
    if (sw_run_incomplete(run, in->incomplete, sizeof in->incomplete) <= 0)
        in->incomplete[0] = '\0';
    *snap_out = snap;
    return 0;
}

/* The run's cross-rank view, or NULL when it has none (one rank, nothing aggregated) or it
 * cannot be read: the other findings do not need it. */
static sw_ranks *ranks_of(sw_run *run) {
    sw_ranks *ranks = NULL;
    return sw_run_ranks(run, &ranks) == 0 ? ranks : NULL;
}

/* Diagnose run; the snapshot comes back for the writer (caller frees). */
static int diagnose_run(sw_run *run, sw__diagnosis *d, sw_snapshot **snap) {
    sw__input in = {0};
    int rc = input_from_run(run, &in, snap);
    sw_ranks *ranks = rc == 0 ? ranks_of(run) : NULL;
    in.ranks = ranks;
    if (rc == 0)
        rc = sw__diagnose(&in, d);
    sw_ranks_free(ranks);
    return rc;
}

SW_API int sw_diagnose_write(sw_run *run, sw_format fmt, FILE *out) {
    if (!run || !out)
        return SW_EINVAL;
    if (fmt != SW_FORMAT_TABLE && fmt != SW_FORMAT_MARKDOWN && fmt != SW_FORMAT_JSON)
        return SW_EFORMAT;
    sw__diagnosis *d = calloc(1, sizeof *d);
    if (!d)
        return SW_ENOMEM;
    sw_snapshot *snap = NULL;
    int rc = diagnose_run(run, d, &snap);
    if (rc == 0)
        rc = sw__diagnosis_write(snap, d, fmt, out);
    sw_snapshot_free(snap);
    free(d);
    return rc;
}

SW_API int sw_diagnose_count(sw_run *run, size_t *count) {
    if (!run || !count)
        return SW_EINVAL;
    sw__diagnosis *d = calloc(1, sizeof *d);
    if (!d)
        return SW_ENOMEM;
    sw_snapshot *snap = NULL;
    int rc = diagnose_run(run, d, &snap);
    if (rc == 0)
        *count = sw__diagnosis_problems(d);
    sw_snapshot_free(snap);
    free(d);
    return rc;
}

/* What the HTML report reads of a run: the view, its function profiles and cross-rank
 * view. html_input_free frees what html_input_open got, also after a failure. */
typedef struct html_input {
    sw__input in;
    sw_snapshot *snap;
    sw_fprofile *functions;
    sw_ranks *ranks;
} html_input;

static int html_input_open(sw_run *run, html_input *h) {
    int rc = input_from_run(run, &h->in, &h->snap);
    if (rc == 0) {
        rc = sw_run_functions(run, -1, &h->functions);
        rc = rc == SW_ENOTFOUND ? 0 : rc; /* a run without function profiles */
        h->in.functions = h->functions;
    }
    h->ranks = rc == 0 ? ranks_of(run) : NULL;
    h->in.ranks = h->ranks;
    return rc;
}

static void html_input_free(html_input *h) {
    sw_ranks_free(h->ranks);
    sw_fprofile_free(h->functions);
    sw_snapshot_free(h->snap);
}

/* write's page or document of run. */
static int html_run(sw_run *run, FILE *out, int (*write)(const sw__input *, FILE *)) {
    html_input h = {0};
    int rc = html_input_open(run, &h);
    if (rc == 0)
        rc = write(&h.in, out);
    html_input_free(&h);
    return rc;
}

SW_API int sw_html_write(sw_run *run, FILE *out) {
    if (!run || !out)
        return SW_EINVAL;
    return html_run(run, out, sw__html_write_input);
}

SW_API int sw_html_write_compare(sw_run *a, sw_run *b, FILE *out) {
    if (!a || !b || !out)
        return SW_EINVAL;
    html_input ha = {0}, hb = {0};
    int rc = html_input_open(a, &ha);
    if (rc == 0)
        rc = html_input_open(b, &hb);
    if (rc == 0)
        rc = sw__html_write_compare_input(&ha.in, &hb.in, out);
    html_input_free(&hb);
    html_input_free(&ha);
    return rc;
}

/* The live page and its data (docs/live.md): the same input as sw_html_write. */
SW_API int sw_html_write_live(sw_run *run, FILE *out) {
    if (!out)
        return SW_EINVAL;
    return run ? html_run(run, out, sw__html_write_live_input)
               : sw__html_write_live_input(NULL, out);
}

SW_API int sw_html_write_data(sw_run *run, FILE *out) {
    if (!run || !out)
        return SW_EINVAL;
    return html_run(run, out, sw__html_json_input);
}
