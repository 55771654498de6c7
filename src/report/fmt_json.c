/*
 * fmt_json.c — SW_FORMAT_JSON: the snapshot in the versioned schema of docs/json-schema.md
 * (SW_JSON_SCHEMA_VERSION). Everything a reader needs to merge two reports exactly is
 * there: the full Welford state (count, mean, m2) and the histogram as sparse
 * [bucket, count] pairs. Durations are integer nanoseconds.
 */
#include "writer.h"

#include <stdlib.h>

#include "json_out.h"

static void put_stats(sw__jw *w, const sw_stats *st) {
    sw__jw_kv_uint(w, "count", st->count);
    sw__jw_kv_uint(w, "total_ns", st->total_ns);
    sw__jw_kv_uint(w, "self_ns", st->self_ns);
    sw__jw_kv_double(w, "mean_ns", st->count ? st->mean_ns : 0);
    sw__jw_kv_double(w, "m2", st->count ? st->m2 : 0);
    sw__jw_kv_double(w, "std_ns", sw_stats_stddev(st));
    sw__jw_kv_double(w, "pstd_ns", sw_stats_pstddev(st));
    sw__jw_kv_uint(w, "min_ns", st->count ? st->min_ns : 0);
    sw__jw_kv_int(w, "min_step", st->min_step);
    sw__jw_kv_uint(w, "max_ns", st->max_ns);
    sw__jw_kv_int(w, "max_step", st->max_step);
    sw__jw_kv_uint(w, "samples", st->samples);
    sw__jw_kv_double(w, "samples_per_s", sw_stats_samples_per_s(st));
}

static void put_row(sw__jw *w, const sw_snapshot *s, const sw_row *r) {
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "action", r->action_name);
    sw__jw_kv_uint(w, "action_id", r->action);
    int rollup = r->phase == SW_PHASE_ALL;
    sw__jw_kv_string(w, "phase", rollup ? "all" : r->phase_name);
    sw__jw_key(w, "phase_id");
    if (rollup)
        sw__jw_null(w);
    else
        sw__jw_uint(w, r->phase);
    sw__jw_key(w, "rollup");
    sw__jw_bool(w, rollup);
    sw__jw_kv_string(w, "category", sw_category_name(r->category));
    put_stats(w, &r->stats);
    sw__jw_kv_uint(w, "p50_ns", sw_stats_quantile(&r->stats, &r->hist, 0.50));
    sw__jw_kv_uint(w, "p90_ns", sw_stats_quantile(&r->stats, &r->hist, 0.90));
    sw__jw_kv_uint(w, "p99_ns", sw_stats_quantile(&r->stats, &r->hist, 0.99));
    sw__jw_kv_double(w, "percent", sw__percent(s, r->stats.total_ns));
    sw_counter_summary d;
    if (sw__device_of(s, r, &d)) { /* GPU time of the same calls (device_rows.c) */
        sw__jw_key(w, "device");
        sw__jw_object_begin(w);
        sw__jw_kv_uint(w, "count", d.count);
        sw__jw_kv_double(w, "mean_ns", d.mean);
        sw__jw_kv_double(w, "min_ns", d.min);
        sw__jw_kv_double(w, "max_ns", d.max);
        sw__jw_object_end(w);
    }
    sw__jw_key(w, "hist");
    sw__jw_array_begin(w);
    for (uint32_t i = 0; i < SW_HIST_BUCKETS; i++) {
        if (r->hist.buckets[i] == 0)
            continue;
        sw__jw_array_begin(w);
        sw__jw_uint(w, i);
        sw__jw_uint(w, r->hist.buckets[i]);
        sw__jw_array_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_key(w, "warmup");
    sw__jw_object_begin(w);
    put_stats(w, &r->warmup);
    sw__jw_object_end(w);
    sw__jw_object_end(w);
}

static void put_run(sw__jw *w, const sw_snapshot *s) {
    sw__jw_key(w, "run");
    sw__jw_object_begin(w);
    sw__jw_kv_string(w, "name", s->name);
    sw__jw_kv_string(w, "host", s->host);
    sw__jw_kv_string(w, "command", s->command);
    sw__jw_kv_int(w, "pid", s->pid);
    sw__jw_kv_int(w, "rank", s->rank);
    sw__jw_kv_int(w, "world_size", s->world_size);
    sw__jw_kv_uint(w, "start_unix_ns", s->start_unix_ns);
    sw__jw_kv_uint(w, "elapsed_ns", s->elapsed_ns);
    sw__jw_kv_uint(w, "wall_ns", s->wall_ns);
    sw__jw_kv_uint(w, "steps", s->steps);
    sw__jw_kv_uint(w, "warmup_steps", s->warmup_steps);
    sw__jw_kv_uint(w, "threads", s->threads);
    sw__jw_object_end(w);
}

void sw__json_put_misuse(sw__jw *w, const sw_misuse *m) {
    sw__jw_key(w, "misuse");
    sw__jw_object_begin(w);
    sw__jw_kv_uint(w, "end_without_begin", m->end_without_begin);
    sw__jw_kv_uint(w, "mismatched_end", m->mismatched_end);
    sw__jw_kv_uint(w, "depth_overflow", m->depth_overflow);
    sw__jw_kv_uint(w, "bad_id", m->bad_id);
    sw__jw_kv_uint(w, "phase_mismatch", m->phase_mismatch);
    sw__jw_kv_uint(w, "step_overlap", m->step_overlap);
    sw__jw_kv_uint(w, "bad_record", m->bad_record);
    sw__jw_kv_uint(w, "open_at_snapshot", m->open_at_snapshot);
    sw__jw_object_end(w);
}

/* "memory": only when some step had memory (older readers never see an empty one); each
 * part only when measured. Bytes. */
static void put_memory(sw__jw *w, const sw_memory_summary *m) {
    if (m->rss_steps == 0 && m->allocator_steps == 0)
        return;
    sw__jw_key(w, "memory");
    sw__jw_object_begin(w);
    if (m->rss_steps > 0) {
        sw__jw_kv_uint(w, "rss_steps", m->rss_steps);
        sw__jw_kv_uint(w, "rss_max", m->rss_max);
        sw__jw_kv_uint(w, "rss_last", m->rss_last);
    }
    if (m->allocator_steps > 0) {
        sw__jw_kv_uint(w, "allocator_steps", m->allocator_steps);
        sw__jw_kv_uint(w, "peak_allocated_max", m->peak_allocated_max);
        sw__jw_kv_uint(w, "allocated_last", m->allocated_last);
        sw__jw_kv_uint(w, "reserved_max", m->reserved_max);
        sw__jw_kv_uint(w, "reserved_last", m->reserved_last);
    }
    sw__jw_object_end(w);
}

/* "slow_steps": only when steps were judged (docs/slow-steps.md): the counts, their time
 * and time over their medians (ns), the steps per cause (only causes that occurred), and
 * the windows whose spans were kept or not. */
static void put_slow(sw__jw *w, const sw_slow_summary *s) {
    if (s->judged == 0)
        return;
    sw__jw_key(w, "slow_steps");
    sw__jw_object_begin(w);
    sw__jw_kv_uint(w, "judged", s->judged);
    sw__jw_kv_uint(w, "slow", s->slow);
    sw__jw_kv_uint(w, "slow_ns", s->slow_ns);
    sw__jw_kv_uint(w, "excess_ns", s->excess_ns);
    sw__jw_key(w, "causes");
    sw__jw_object_begin(w);
    for (int c = 1; c < SW_CAUSE_COUNT; c++)
        if (s->by_cause[c] > 0)
            sw__jw_kv_uint(w, sw_cause_name((sw_cause)c), s->by_cause[c]);
    sw__jw_object_end(w);
    sw__jw_kv_uint(w, "windows_kept", s->windows_kept);
    sw__jw_kv_uint(w, "windows_not_kept", s->windows_dropped);
    sw__jw_object_end(w);
}

/* The module table, when there is one: the sampling notes and every row. */
static void put_modules(sw__jw *w, const sw_snapshot *s) {
    sw__jw_key(w, "modules");
    sw__jw_object_begin(w);
    const char *every = sw_snapshot_note(s, "modules_every");
    const char *steps = sw_snapshot_note(s, "modules_sampled_steps");
    const char *warmup = sw_snapshot_note(s, "modules_warmup_steps");
    sw__jw_kv_uint(w, "every", every ? strtoull(every, NULL, 10) : 0);
    sw__jw_kv_uint(w, "sampled_steps", steps ? strtoull(steps, NULL, 10) : 0);
    sw__jw_kv_uint(w, "warmup_steps", warmup ? strtoull(warmup, NULL, 10) : 0);
    sw__jw_kv_string(w, "clock", sw_snapshot_note(s, "modules_clock"));
    sw__jw_key(w, "rows");
    sw__jw_array_begin(w);
    for (size_t i = 0; i < s->nmodules; i++) {
        const sw_module_row *m = &s->modules[i];
        sw__jw_object_begin(w);
        sw__jw_kv_string(w, "path", m->path);
        sw__jw_kv_string(w, "class", m->kind);
        sw__jw_kv_uint(w, "forward_calls", m->forward_calls);
        sw__jw_kv_uint(w, "forward_ns", m->forward_ns);
        sw__jw_kv_uint(w, "forward_self_ns", m->forward_self_ns);
        sw__jw_kv_uint(w, "backward_calls", m->backward_calls);
        sw__jw_kv_uint(w, "backward_ns", m->backward_ns);
        sw__jw_kv_uint(w, "backward_self_ns", m->backward_self_ns);
        if (m->device_forward_calls + m->device_backward_calls > 0) { /* GPU times */
            sw__jw_kv_uint(w, "device_forward_calls", m->device_forward_calls);
            sw__jw_kv_uint(w, "device_forward_ns", m->device_forward_ns);
            sw__jw_kv_uint(w, "device_forward_self_ns", m->device_forward_self_ns);
            sw__jw_kv_uint(w, "device_backward_calls", m->device_backward_calls);
            sw__jw_kv_uint(w, "device_backward_ns", m->device_backward_ns);
            sw__jw_kv_uint(w, "device_backward_self_ns", m->device_backward_self_ns);
        }
        sw__jw_kv_int(w, "param_bytes", m->param_bytes);
        sw__jw_kv_int(w, "grad_bytes", m->grad_bytes);
        sw__jw_kv_int(w, "optimizer_bytes", m->optimizer_bytes);
        sw__jw_kv_int(w, "activation_bytes", m->activation_bytes);
        sw__jw_object_end(w);
    }
    sw__jw_array_end(w);
    sw__jw_object_end(w);
}

static int write_json(const sw_snapshot *s, FILE *out, const sw_write_options *opts) {
    (void)opts;
    sw__jw w;
    sw__jw_init(&w, out, 3);
    sw__jw_object_begin(&w);
    sw__jw_kv_string(&w, "schema", "stepwatch.report");
    sw__jw_kv_uint(&w, "schema_version", SW_JSON_SCHEMA_VERSION);
    sw__jw_kv_string(&w, "stepwatch_version", SW_VERSION_STRING);
    put_run(&w, s);

    sw__jw_key(&w, "histogram");
    sw__jw_object_begin(&w);
    sw__jw_kv_uint(&w, "sub_bits", SW_HIST_SUB_BITS);
    sw__jw_kv_uint(&w, "max_exp", SW_HIST_MAX_EXP);
    sw__jw_kv_uint(&w, "buckets", SW_HIST_BUCKETS);
    sw__jw_object_end(&w);

    sw__jw_key(&w, "rows");
    sw__jw_array_begin(&w);
    for (size_t i = 0; i < s->nrows; i++)
        put_row(&w, s, &s->rows[i]);
    sw__jw_array_end(&w);

    sw__jw_key(&w, "counters");
    sw__jw_array_begin(&w);
    for (size_t i = 0; i < s->ncounters; i++) {
        const sw_counter_summary *c = &s->counters[i];
        sw__jw_object_begin(&w);
        sw__jw_kv_string(&w, "name", c->name);
        sw__jw_kv_uint(&w, "count", c->count);
        sw__jw_kv_double(&w, "last", c->last);
        sw__jw_kv_double(&w, "min", c->min);
        sw__jw_kv_double(&w, "max", c->max);
        sw__jw_kv_double(&w, "mean", c->mean);
        sw__jw_object_end(&w);
    }
    sw__jw_array_end(&w);

    sw__json_put_comm_bw(&w, s);
    sw__json_put_device_comm(&w, s);
    sw__json_put_misuse(&w, &s->misuse);
    sw__jw_kv_uint(&w, "dropped_events", s->dropped_events);
    put_memory(&w, &s->memory);
    put_slow(&w, &s->slow);
    sw__json_put_goodput(&w, s);
    sw__json_put_efficiency(&w, s);
    if (s->nnotes > 0) { /* only when there are any: older readers never see an empty one */
        sw__jw_key(&w, "notes");
        sw__jw_object_begin(&w);
        for (size_t i = 0; i < s->nnotes; i++)
            sw__jw_kv_string(&w, s->notes[i].key, s->notes[i].value);
        sw__jw_object_end(&w);
    }
    if (s->nmodules > 0) /* likewise */
        put_modules(&w, s);
    sw__jw_object_end(&w);
    return sw__jw_finish(&w);
}

const sw__writer sw__writer_json = {SW_FORMAT_JSON, "json", 1, write_json};
