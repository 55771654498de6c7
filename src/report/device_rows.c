/*
 * device_rows.c — device time beside host time in the reports.
 *
 * The device layer (src/device/) records the GPU time of each phase of a step as counter
 * samples named "device:<phase>/<action>" in nanoseconds, one per call, warm-up steps kept
 * out (docs/device.md). Here they meet the rows of the same action and phase: the machine
 * formats give each such row its device figures (CSV columns, a JSON "device" object), the
 * text formats end with a table of host and device time side by side. A run without
 * device time has no such counter, and every report stays as it was.
 */
#include "writer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "device:"

/* Nonzero when counter name is "device:<phase>/<action>" for this phase (NULL: any). */
static int names_row(const char *name, const char *phase, const char *action) {
    if (name == NULL || action == NULL || strncmp(name, PREFIX, strlen(PREFIX)) != 0)
        return 0;
    const char *rest = name + strlen(PREFIX);
    size_t len = strlen(rest), alen = strlen(action);
    if (len < alen + 2 || strcmp(rest + len - alen, action) != 0 || rest[len - alen - 1] != '/')
        return 0;
    return phase == NULL ||
           (strlen(phase) == len - alen - 1 && strncmp(rest, phase, len - alen - 1) == 0);
}

static void merge(sw_counter_summary *into, const sw_counter_summary *c) {
    if (c->count == 0)
        return;
    if (into->count == 0 || c->min < into->min)
        into->min = c->min;
    if (into->count == 0 || c->max > into->max)
        into->max = c->max;
    uint64_t n = into->count + c->count;
    into->mean += (c->mean - into->mean) * (double)c->count / (double)n;
    into->last = c->last;
    into->count = n;
}

int sw__device_of(const sw_snapshot *s, const sw_row *r, sw_counter_summary *out) {
    *out = (sw_counter_summary){0};
    const char *phase = r->phase == SW_PHASE_ALL ? NULL : r->phase_name ? r->phase_name : "none";
    for (size_t i = 0; i < s->ncounters; i++)
        if (names_row(s->counters[i].name, phase, r->action_name))
            merge(out, &s->counters[i]);
    return out->count > 0;
}

int sw__device_phase_time(const char *name) {
    return name != NULL && strncmp(name, PREFIX, strlen(PREFIX)) == 0 &&
           strchr(name + strlen(PREFIX), '/') != NULL;
}

int sw__device_any(const sw_snapshot *s) {
    for (size_t i = 0; i < s->ncounters; i++)
        if (s->counters[i].count > 0 && sw__device_phase_time(s->counters[i].name))
            return 1;
    return 0;
}

/* The last value of the device timing's summary counter "device:<name>", or 0. */
static double summary(const sw_snapshot *s, const char *name) {
    for (size_t i = 0; i < s->ncounters; i++) {
        const char *n = s->counters[i].name;
        if (n && strncmp(n, PREFIX, strlen(PREFIX)) == 0 && strcmp(n + strlen(PREFIX), name) == 0)
            return s->counters[i].last;
    }
    return 0;
}

/* Which steps the table covers (written when the timing ended: a live report has none). */
static void put_steps_timed(const sw_snapshot *s, FILE *out) {
    double timed = summary(s, "steps_timed"), sampled = summary(s, "steps_sampled_out"),
           every = summary(s, "sample_every"), dropped = summary(s, "dropped_steps"),
           captured = summary(s, "steps_captured");
    if (timed + sampled + dropped + captured <= 0)
        return;
    fprintf(out, "\nSteps timed on the GPU: %.0f of %.0f", timed,
            timed + sampled + dropped + captured);
    if (every > 1)
        fprintf(out,
                "; a regular sample while the GPU ran over 512 steps behind: one step "
                "in %.0f at most (%.0f not chosen)",
                every, sampled);
    else
        fputs(" (every step)", out);
    if (dropped > 0)
        fprintf(out, "; %.0f not reached by the GPU when the run ended (never waited for)",
                dropped);
    if (captured > 0)
        fprintf(out, "; %.0f begun during a CUDA graph capture", captured);
    fputs(".\n", out);
}

/* ---- communication on the device (device.h, "Communication on the device") ---- */

#define COMM_SUFFIX "/comm"
#define EXPOSED_SUFFIX "/comm_exposed"

/* The summary of counter "device:<phase, len bytes><suffix>", or NULL. */
static const sw_counter_summary *comm_counter(const sw_snapshot *s, const char *phase, size_t len,
                                              const char *suffix) {
    char name[256];
    snprintf(name, sizeof name, PREFIX "%.*s%s", (int)len, phase, suffix);
    for (size_t i = 0; i < s->ncounters; i++)
        if (s->counters[i].name && strcmp(s->counters[i].name, name) == 0)
            return &s->counters[i];
    return NULL;
}

/* A phase's communication on the device: per step, means over the steps with any. */
typedef struct comm_row {
    const char *phase; /* its name, len bytes (not NUL-terminated) */
    size_t len;
    uint64_t steps;
    double comm_ns, exposed_ns, exposed_percent;
} comm_row;

/* Counter i as a phase's communication into *row: 0, or -1 when it is not
 * "device:<phase>/comm" with samples. */
static int comm_row_at(const sw_snapshot *s, size_t i, comm_row *row) {
    const char *n = s->counters[i].name;
    size_t nlen = n ? strlen(n) : 0, plen = strlen(PREFIX), slen = strlen(COMM_SUFFIX);
    if (s->counters[i].count == 0 || nlen <= plen + slen || strncmp(n, PREFIX, plen) != 0 ||
        strcmp(n + nlen - slen, COMM_SUFFIX) != 0)
        return -1;
    const sw_counter_summary *exposed = comm_counter(s, n + plen, nlen - plen - slen,
                                                     EXPOSED_SUFFIX);
    *row = (comm_row){.phase = n + plen,
                      .len = nlen - plen - slen,
                      .steps = s->counters[i].count,
                      .comm_ns = s->counters[i].mean,
                      .exposed_ns = exposed ? exposed->mean : 0};
    row->exposed_percent = row->comm_ns > 0 ? 100 * row->exposed_ns / row->comm_ns : 0;
    return 0;
}

/* "Communication: 41.2 ms per step on the device, 6.1 ms exposed (15 %)." per phase (its
 * name said for a phase other than train). */
static void put_comm(const sw_snapshot *s, FILE *out) {
    comm_row r;
    for (size_t i = 0; i < s->ncounters; i++) {
        if (comm_row_at(s, i, &r) != 0)
            continue;
        char a[40], b[40];
        sw_format_duration(r.comm_ns, a, sizeof a);
        sw_format_duration(r.exposed_ns, b, sizeof b);
        if (r.len == 5 && strncmp(r.phase, "train", 5) == 0)
            fputs("\nCommunication: ", out);
        else
            fprintf(out, "\nCommunication in %.*s: ", (int)r.len, r.phase);
        fprintf(out, "%s per step on the device, %s exposed (%.0f %%).\n", a, b, r.exposed_percent);
    }
}

void sw__json_put_device_comm(sw__jw *w, const sw_snapshot *s) {
    int any = 0;
    comm_row r;
    for (size_t i = 0; i < s->ncounters; i++) {
        if (comm_row_at(s, i, &r) != 0)
            continue;
        if (!any++) { /* only when there is any: older readers never see an empty one */
            sw__jw_key(w, "device_comm");
            sw__jw_array_begin(w);
        }
        sw__jw_object_begin(w);
        sw__jw_key(w, "phase");
        sw__jw_string_n(w, r.phase, r.len);
        sw__jw_kv_uint(w, "steps", r.steps);
        sw__jw_kv_double(w, "comm_ns", r.comm_ns);
        sw__jw_kv_double(w, "exposed_ns", r.exposed_ns);
        sw__jw_kv_double(w, "exposed_percent", r.exposed_percent);
        sw__jw_object_end(w);
    }
    if (any)
        sw__jw_array_end(w);
}

/* Rows with device time: per phase, the step first, then the categories in their order. */
typedef struct device_row {
    const sw_row *row;
    sw_counter_summary device;
} device_row;

static int rank_of(const sw_row *r) {
    return r->category == SW_CAT_OTHER ? -1 : (int)r->category;
}

static int by_phase_then_category(const void *a, const void *b) {
    const sw_row *x = ((const device_row *)a)->row, *y = ((const device_row *)b)->row;
    if (x->phase != y->phase)
        return x->phase < y->phase ? -1 : 1;
    return rank_of(x) - rank_of(y);
}

static void put_cell(FILE *out, const char *text, size_t width, int markdown) {
    if (markdown) {
        fprintf(out, " %s |", text);
    } else {
        fputs("  ", out);
        sw__put_padded(out, text, width, 1);
    }
}

void sw__put_device_section(const sw_snapshot *s, FILE *out, int markdown) {
    device_row *rows = calloc(s->nrows ? s->nrows : 1, sizeof *rows);
    if (rows == NULL)
        return;
    size_t n = 0, label_width = strlen("Action");
    char label[SW__LABEL_MAX];
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (r->phase != SW_PHASE_ALL && sw__device_of(s, r, &rows[n].device)) {
            rows[n++].row = r;
            sw__row_label(r, label, sizeof label);
            size_t w = sw__text_width(label);
            label_width = w > label_width ? w : label_width;
        }
    }
    qsort(rows, n, sizeof *rows, by_phase_then_category);
    static const char *const header[] = {"Host mean",  "Device mean", "Device min",
                                         "Device max", "Timed",       "Device/host"};
    const size_t ncols = sizeof header / sizeof *header, width = 11;
    if (markdown) {
        fputs("\n#### Device time (GPU events, per call)\n\n| Action |", out);
        for (size_t k = 0; k < ncols; k++)
            fprintf(out, " %s |", header[k]);
        fputs("\n|:---|", out);
        for (size_t k = 0; k < ncols; k++)
            fputs("---:|", out);
        fputc('\n', out);
    } else {
        fputs("\nDevice time (GPU events, per call):\n", out);
        sw__put_padded(out, "Action", label_width, 0);
        for (size_t k = 0; k < ncols; k++)
            put_cell(out, header[k], width, 0);
        fputc('\n', out);
    }
    for (size_t i = 0; i < n; i++) {
        const sw_counter_summary *d = &rows[i].device;
        double host = rows[i].row->stats.count ? rows[i].row->stats.mean_ns : 0;
        char cell[6][40];
        sw_format_duration(host, cell[0], sizeof cell[0]);
        sw_format_duration(d->mean, cell[1], sizeof cell[1]);
        sw_format_duration(d->min, cell[2], sizeof cell[2]);
        sw_format_duration(d->max, cell[3], sizeof cell[3]);
        snprintf(cell[4], sizeof cell[4], "%" PRIu64, d->count);
        if (host > 0)
            snprintf(cell[5], sizeof cell[5], "%.2f", d->mean / host);
        else
            snprintf(cell[5], sizeof cell[5], "-");
        sw__row_label(rows[i].row, label, sizeof label);
        if (markdown) {
            fputs("| ", out);
            sw__md_put_cell(out, label);
            fputs(" |", out);
        } else
            sw__put_padded(out, label, label_width, 0);
        for (size_t k = 0; k < ncols; k++)
            put_cell(out, cell[k], width, markdown);
        fputc('\n', out);
    }
    free(rows);
    put_comm(s, out);
    put_steps_timed(s, out);
}
