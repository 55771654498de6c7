/*
 * table_cells.c — the cells of the stepwatch table (Lightning's columns plus std, p50, p99
 * and self time), shared by the terminal table and the markdown table, and the lines under
 * it (run summary, misuse).
 */
#include "writer.h"

#include <inttypes.h>
#include <string.h>

const char *const sw__col_header[SW__NCOLS] = {"Mean",  "Std",   "p50",  "p99",
                                               "Calls", "Total", "Self", "%"};

static void duration_cell(double ns, char *out, size_t size) {
    sw_format_duration(ns, out, size);
}

static void percent_cell(const sw_snapshot *s, uint64_t ns, char *out, size_t size) {
    if (s->wall_ns == 0)
        snprintf(out, size, "-");
    else
        snprintf(out, size, "%.1f%%", sw__percent(s, ns));
}

void sw__cells_of(const sw_snapshot *s, const sw_stats *st, const sw_hist *hist, sw__cells *out) {
    duration_cell(st->mean_ns, out->v[SW__COL_MEAN], sizeof out->v[0]);
    if (st->count >= 2)
        duration_cell(sw_stats_stddev(st), out->v[SW__COL_STD], sizeof out->v[0]);
    else
        snprintf(out->v[SW__COL_STD], sizeof out->v[0], "-");
    if (hist != NULL && hist->count > 0) {
        duration_cell((double)sw_stats_quantile(st, hist, 0.50), out->v[SW__COL_P50],
                      sizeof out->v[0]);
        duration_cell((double)sw_stats_quantile(st, hist, 0.99), out->v[SW__COL_P99],
                      sizeof out->v[0]);
    } else {
        snprintf(out->v[SW__COL_P50], sizeof out->v[0], "-");
        snprintf(out->v[SW__COL_P99], sizeof out->v[0], "-");
    }
    snprintf(out->v[SW__COL_CALLS], sizeof out->v[0], "%" PRIu64, st->count);
    duration_cell((double)st->total_ns, out->v[SW__COL_TOTAL], sizeof out->v[0]);
    duration_cell((double)st->self_ns, out->v[SW__COL_SELF], sizeof out->v[0]);
    percent_cell(s, st->total_ns, out->v[SW__COL_PCT], sizeof out->v[0]);
}

void sw__cells_total(const sw_snapshot *s, uint64_t calls, sw__cells *out) {
    for (int c = 0; c < SW__NCOLS; c++)
        snprintf(out->v[c], sizeof out->v[0], "-");
    snprintf(out->v[SW__COL_CALLS], sizeof out->v[0], "%" PRIu64, calls);
    duration_cell((double)s->wall_ns, out->v[SW__COL_TOTAL], sizeof out->v[0]);
    percent_cell(s, s->wall_ns, out->v[SW__COL_PCT], sizeof out->v[0]);
}

void sw__run_summary(const sw_snapshot *s, char *out, size_t size) {
    char wall[32];
    sw_format_duration((double)s->wall_ns, wall, sizeof wall);
    /* How the steps were found, when the front end said (stepwatch.torch does). */
    const char *rule = sw_snapshot_note(s, "step_rule");
    char how[64] = "", clean[48];
    if (rule != NULL) {
        sw__text_clean(rule, clean, sizeof clean);
        snprintf(how, sizeof how, " (rule: %s)", clean);
    }
    int n = snprintf(out, size, "wall %s, %" PRIu64 " step%s%s, %" PRIu64 " thread%s", wall,
                     s->steps, s->steps == 1 ? "" : "s", how, s->threads,
                     s->threads == 1 ? "" : "s");
    if (s->world_size > 1 && n > 0 && (size_t)n < size) {
        if (s->rank < 0) /* a merged file: every rank together */
            snprintf(out + n, size - (size_t)n, ", all %d ranks", s->world_size);
        else
            snprintf(out + n, size - (size_t)n, ", rank %d of %d", s->rank, s->world_size);
    }
}

int sw__has_warmup(const sw_snapshot *s) {
    for (size_t i = 0; i < s->nrows; i++)
        if (s->rows[i].warmup.count > 0)
            return 1;
    return 0;
}

static void misuse_text(const sw_misuse *m, char *out, size_t size) {
    const struct {
        uint64_t n;
        const char *what;
    } items[] = {
        {m->end_without_begin, "end without begin"},       {m->mismatched_end, "mismatched end"},
        {m->depth_overflow, "too deep nesting"},           {m->bad_id, "unknown action id"},
        {m->phase_mismatch, "phase end out of order"},     {m->step_overlap, "overlapping step"},
        {m->bad_record, "record ending before it starts"}, {m->open_at_snapshot, "span still open"},
    };
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if (items[i].n == 0 || used >= size)
            continue;
        int n = snprintf(out + used, size - used, "%s%" PRIu64 " %s", used ? ", " : "", items[i].n,
                         items[i].what);
        if (n > 0)
            used += (size_t)n;
    }
}

void sw__put_problems(const sw_snapshot *s, FILE *out, const char *bullet) {
    char misuse[512];
    misuse_text(&s->misuse, misuse, sizeof misuse);
    if (misuse[0] || s->dropped_events)
        fputc('\n', out);
    if (misuse[0])
        fprintf(out, "%sMisuse: %s\n", bullet, misuse);
    if (s->dropped_events)
        fprintf(out,
                "%sDropped events: %" PRIu64
                " (not in the run file: its writer fell behind, or could not write)\n",
                bullet, s->dropped_events);
}

char *sw__bytes_text(double bytes, char *buf, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%.0f B", bytes);
    else
        snprintf(buf, size, bytes >= 100 ? "%.1f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

void sw__memory_text(const sw_memory_summary *m, char *out, size_t size) {
    char a[32], b[32], c[32], d[32], e[32], f[32];
    out[0] = '\0';
    if (m->rss_steps > 0)
        snprintf(out, size, "RSS max %s, at the end %s", sw__bytes_text((double)m->rss_max, a, 32),
                 sw__bytes_text((double)m->rss_last, b, 32));
    if (m->allocator_steps > 0) {
        size_t used = strlen(out);
        snprintf(out + used, size - used,
                 "%sallocated peak %s, at the end %s; reserved max %s, at the end %s",
                 used ? "; " : "", sw__bytes_text((double)m->peak_allocated_max, c, 32),
                 sw__bytes_text((double)m->allocated_last, d, 32),
                 sw__bytes_text((double)m->reserved_max, e, 32),
                 sw__bytes_text((double)m->reserved_last, f, 32));
    }
}

void sw__put_memory(const sw_snapshot *s, FILE *out, const char *bullet) {
    char line[256];
    sw__memory_text(&s->memory, line, sizeof line);
    if (line[0] != '\0')
        fprintf(out, "\n%sMemory per step: %s\n", bullet, line);
}
