/*
 * fmt_csv.c — SW_FORMAT_CSV: one line per snapshot row, per-phase rows and the all-phase
 * roll-ups ("all"), in snapshot order, after a header line. Machine units: durations in
 * seconds as plain decimal numbers (exact to the nanosecond), counts as integers, step
 * indexes -1 outside steps. Fields are quoted per RFC 4180 when they hold a comma, a
 * quote, a line break or edge spaces (quotes doubled); lines end in LF. Text is UTF-8:
 * bytes that are not become U+FFFD.
 */
#include "writer.h"

#include <inttypes.h>
#include <string.h>

static const char header[] =
    "action,phase,category,count,total_s,self_s,mean_s,std_s,pstd_s,min_s,min_step,max_s,"
    "max_step,p50_s,p90_s,p99_s,samples,samples_per_s,percent,warmup_count,warmup_total_s,"
    "warmup_mean_s";

static void put_seconds(FILE *out, uint64_t ns) {
    char buf[40];
    sw__seconds_text(ns, buf, sizeof buf);
    fprintf(out, ",%s", buf);
}

static void put_fseconds(FILE *out, double ns) {
    fprintf(out, ",%.9f", ns / 1e9);
}

/* With device time (device_rows.c): four more columns, empty for rows without it. */
static void put_device(FILE *out, const sw_snapshot *s, const sw_row *r) {
    sw_counter_summary d;
    if (sw__device_of(s, r, &d))
        fprintf(out, ",%" PRIu64 ",%.9f,%.9f,%.9f", d.count, d.mean / 1e9, d.min / 1e9,
                d.max / 1e9);
    else
        fputs(",,,,", out);
}

/* With memory per step: six more columns (bytes), filled on the roll-up row of "step" (the
 * memory is the steps'), empty elsewhere and where that part was not measured. */
static const char memory_header[] = ",rss_max_bytes,rss_last_bytes,peak_allocated_max_bytes,"
                                    "allocated_last_bytes,reserved_max_bytes,reserved_last_bytes";

static void put_memory(FILE *out, const sw_snapshot *s, const sw_row *r) {
    const sw_memory_summary *m = &s->memory;
    if (r->phase != SW_PHASE_ALL || r->action_name == NULL || strcmp(r->action_name, "step") != 0) {
        fputs(",,,,,,", out);
        return;
    }
    if (m->rss_steps > 0)
        fprintf(out, ",%" PRIu64 ",%" PRIu64, m->rss_max, m->rss_last);
    else
        fputs(",,", out);
    if (m->allocator_steps > 0)
        fprintf(out, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, m->peak_allocated_max,
                m->allocated_last, m->reserved_max, m->reserved_last);
    else
        fputs(",,,,", out);
}

/* The module rows (module_rows.c): one line per module and pass ("forward", "backward"),
 * category "module", with the count, total and self time (the host's); the columns of action
 * rows that do not apply are empty, the module columns at the end are filled. With GPU times
 * (module_device): device_count and device_mean_s are the pass's calls timed on the GPU and
 * their mean, device_total_s and device_self_s their sums. */
static void put_modules(FILE *out, const sw_snapshot *s, int device, int module_device,
                        int memory) {
    for (size_t i = 0; i < s->nmodules; i++) {
        const sw_module_row *m = &s->modules[i];
        for (int pass = 0; pass < 2; pass++) {
            uint64_t calls = pass ? m->backward_calls : m->forward_calls;
            uint64_t total = pass ? m->backward_ns : m->forward_ns;
            if (pass && calls == 0)
                continue;
            sw__csv_put_text(out, m->path[0] ? m->path : "(model)");
            fputs(pass ? ",backward,module" : ",forward,module", out);
            fprintf(out, ",%" PRIu64, calls);
            put_seconds(out, total);
            put_seconds(out, pass ? m->backward_self_ns : m->forward_self_ns);
            put_fseconds(out, calls ? (double)total / (double)calls : 0);
            fputs(",,,,,,,,,,,,,,,", out); /* std_s .. warmup_mean_s */
            uint64_t dcalls = pass ? m->device_backward_calls : m->device_forward_calls;
            uint64_t dtotal = pass ? m->device_backward_ns : m->device_forward_ns;
            uint64_t dself = pass ? m->device_backward_self_ns : m->device_forward_self_ns;
            if (device && dcalls > 0) {
                fprintf(out, ",%" PRIu64, dcalls);
                put_fseconds(out, (double)dtotal / (double)dcalls);
                fputs(",,", out);
            } else if (device) {
                fputs(",,,,", out);
            }
            fputc(',', out);
            sw__csv_put_text(out, m->kind);
            fprintf(out, ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64, m->param_bytes,
                    m->grad_bytes, m->optimizer_bytes, m->activation_bytes);
            if (module_device && dcalls > 0) {
                put_seconds(out, dtotal);
                put_seconds(out, dself);
            } else if (module_device) {
                fputs(",,", out);
            }
            fputs(memory ? ",,,,,,\n" : "\n", out);
        }
    }
}

static int write_csv(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    (void)opts;
    int device = sw__device_any(s);
    int modules = s->nmodules > 0;
    int module_device = sw__modules_have_device(s);
    device |= module_device;
    int memory = s->memory.rss_steps > 0 || s->memory.allocator_steps > 0;
    fprintf(out, "%s%s%s%s%s\n", header,
            device ? ",device_count,device_mean_s,device_min_s,device_max_s" : "",
            modules ? ",module_class,param_bytes,grad_bytes,optimizer_bytes,activation_bytes" : "",
            module_device ? ",device_total_s,device_self_s" : "", memory ? memory_header : "");
    char id[24];
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        const sw_stats *st = &r->stats;
        if (r->action_name != NULL) {
            sw__csv_put_text(out, r->action_name);
        } else {
            snprintf(id, sizeof id, "#%" PRIu32, r->action);
            sw__csv_put_text(out, id);
        }
        fputc(',', out);
        if (r->phase == SW_PHASE_ALL)
            sw__csv_put_text(out, "all");
        else if (r->phase == SW_PHASE_NONE && r->phase_name == NULL)
            sw__csv_put_text(out, "none");
        else
            sw__csv_put_text(out, r->phase_name);
        fputc(',', out);
        sw__csv_put_text(out, sw_category_name(r->category));
        fprintf(out, ",%" PRIu64, st->count);
        put_seconds(out, st->total_ns);
        put_seconds(out, st->self_ns);
        put_fseconds(out, st->count ? st->mean_ns : 0);
        put_fseconds(out, sw_stats_stddev(st));
        put_fseconds(out, sw_stats_pstddev(st));
        put_seconds(out, st->count ? st->min_ns : 0);
        fprintf(out, ",%" PRId64, st->min_step);
        put_seconds(out, st->max_ns);
        fprintf(out, ",%" PRId64, st->max_step);
        put_seconds(out, sw_stats_quantile(&r->stats, &r->hist, 0.50));
        put_seconds(out, sw_stats_quantile(&r->stats, &r->hist, 0.90));
        put_seconds(out, sw_stats_quantile(&r->stats, &r->hist, 0.99));
        fprintf(out, ",%" PRIu64 ",%.3f,%.4f", st->samples, sw_stats_samples_per_s(st),
                sw__percent(s, st->total_ns));
        fprintf(out, ",%" PRIu64, r->warmup.count);
        put_seconds(out, r->warmup.total_ns);
        put_fseconds(out, r->warmup.count ? r->warmup.mean_ns : 0);
        if (device)
            put_device(out, s, r);
        if (modules)
            fputs(module_device ? ",,,,,,," : ",,,,,", out);
        if (memory)
            put_memory(out, s, r);
        fputc('\n', out);
    }
    put_modules(out, s, device, module_device, memory);
    return 0;
}

const sw__writer sw__writer_csv = {SW_FORMAT_CSV, "csv", 1, write_csv};
