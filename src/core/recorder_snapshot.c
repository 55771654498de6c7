/*
 * recorder_snapshot.c — sw_snapshot_take: every thread's cells merged per (action, phase),
 * each copied under its thread's sequence lock while the thread goes on recording.
 */
#include "recorder.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Copy one cell consistently (retrying while its owner updates it). */
static void cell_read(const sw__thread *t, const sw__cell *cell, sw__cell *out) {
    for (;;) {
        uint32_t before = atomic_load_explicit(&t->seq, memory_order_acquire);
        if (before & 1) {
            sched_yield();
            continue;
        }
        const sw_stats *from[2] = {&cell->stats, &cell->warm};
        sw_stats *to[2] = {&out->stats, &out->warm};
        for (int i = 0; i < 2; i++) {
            SW__GET(to[i]->count, from[i]->count);
            SW__GET(to[i]->total_ns, from[i]->total_ns);
            SW__GET(to[i]->self_ns, from[i]->self_ns);
            SW__GET(to[i]->mean_ns, from[i]->mean_ns);
            SW__GET(to[i]->m2, from[i]->m2);
            SW__GET(to[i]->min_ns, from[i]->min_ns);
            SW__GET(to[i]->max_ns, from[i]->max_ns);
            SW__GET(to[i]->min_step, from[i]->min_step);
            SW__GET(to[i]->max_step, from[i]->max_step);
            SW__GET(to[i]->samples, from[i]->samples);
        }
        SW__GET(out->hist.count, cell->hist.count);
        for (uint32_t b = 0; b < SW_HIST_BUCKETS; b++)
            SW__GET(out->hist.buckets[b], cell->hist.buckets[b]);
        SW__GET(out->npending, cell->npending);
        for (uint32_t i = 0; i < SW__PENDING; i++)
            SW__GET(out->pending[i], cell->pending[i]);
        if (atomic_load_explicit(&t->seq, memory_order_relaxed) == before) {
            sw__cell_fold(out);
            return;
        }
    }
}

static int merge_thread_locked(const sw__thread *t, sw_id action, sw_phase phase, sw__cell *sum,
                               sw__cell *scratch) {
    if (action >= t->cells_cap || t->cells[action] == NULL || t->cells[action][phase] == NULL)
        return 0;
    cell_read(t, t->cells[action][phase], scratch);
    sw__cell_merge(sum, scratch);
    return 1;
}
int sw_snapshot_take(sw_profiler *p, sw_snapshot **out) {
    if (p == NULL || out == NULL)
        return SW_EINVAL;
    *out = NULL;
    sw_snapshot *s = sw__snapshot_new();
    sw__cell *sum = malloc(sizeof *sum), *scratch = malloc(sizeof *scratch);
    int rc = (s && sum && scratch) ? 0 : SW_ENOMEM;
    if (rc == 0) {
        s->name = sw__snapshot_string(s, p->opts.name);
        s->host = sw__snapshot_string(s, p->host);
        s->command = sw__snapshot_string(s, p->command);
        s->pid = p->pid;
        s->rank = p->opts.rank;
        s->world_size = atomic_load(&p->world_size);
        s->local_rank = p->opts.local_rank;
        s->start_unix_ns = p->origin_unix_ns;
        s->elapsed_ns = sw__clock_ns() - p->origin_ns;
        s->steps = atomic_load(&p->steps_begun);
        s->warmup_steps = p->opts.warmup_steps;
        s->dropped_events = atomic_load(&p->events_dropped);
        s->misuse = (sw_misuse){.end_without_begin = atomic_load(&p->misuse_end_without_begin),
                                .mismatched_end = atomic_load(&p->misuse_mismatched_end),
                                .depth_overflow = atomic_load(&p->misuse_depth_overflow),
                                .bad_id = atomic_load(&p->misuse_bad_id),
                                .phase_mismatch = atomic_load(&p->misuse_phase_mismatch),
                                .step_overlap = atomic_load(&p->misuse_step_overlap),
                                .bad_record = atomic_load(&p->misuse_bad_record)};
        s->memory = (sw_memory_summary){.rss_steps = atomic_load(&p->mem_rss_steps),
                                        .rss_max = atomic_load(&p->mem_rss_max),
                                        .rss_last = atomic_load(&p->mem_rss_last),
                                        .allocator_steps = atomic_load(&p->mem_alloc_steps),
                                        .peak_allocated_max = atomic_load(&p->mem_peak_max),
                                        .allocated_last = atomic_load(&p->mem_alloc_last),
                                        .reserved_max = atomic_load(&p->mem_reserved_max),
                                        .reserved_last = atomic_load(&p->mem_reserved_last)};
        s->slow = (sw_slow_summary){.judged = atomic_load(&p->slow_judged),
                                    .slow = atomic_load(&p->slow_count),
                                    .slow_ns = atomic_load(&p->slow_ns),
                                    .excess_ns = atomic_load(&p->slow_excess_ns),
                                    .windows_kept = atomic_load(&p->slow_windows_sent),
                                    .windows_dropped = atomic_load(&p->slow_windows_not_sent)};
        for (int c = 0; c < SW_CAUSE_COUNT; c++)
            s->slow.by_cause[c] = atomic_load(&p->slow_by_cause[c]);
    }
    pthread_mutex_lock(&p->lock);
    uint32_t naction = atomic_load(&p->naction), nphase = atomic_load(&p->nphase);
    /* Every thread that recorded, those that exited included (their statistics are in
     * p->retired). */
    s->threads = p->threads_seen;
    for (sw__thread *t = p->threads; rc == 0 && t; t = t->next) {
        uint32_t depth;
        SW__GET(depth, t->depth);
        s->misuse.open_at_snapshot += depth;
    }
    for (sw_id a = 0; rc == 0 && a < naction; a++) {
        for (sw_phase ph = 0; rc == 0 && ph < nphase; ph++) {
            memset(sum, 0, sizeof *sum);
            sw_stats_init(&sum->stats);
            sw_stats_init(&sum->warm);
            int found = merge_thread_locked(p->retired, a, ph, sum, scratch);
            for (sw__thread *t = p->threads; t; t = t->next)
                found |= merge_thread_locked(t, a, ph, sum, scratch);
            if (!found || sum->stats.count + sum->warm.count == 0)
                continue;
            sw_row row = {.action = a,
                          .action_name = p->action_names[a],
                          .phase = ph,
                          .phase_name = p->phase_names[ph],
                          .category = (sw_category)p->action_category[a],
                          .stats = sum->stats,
                          .warmup = sum->warm,
                          .hist = sum->hist};
            rc = sw__snapshot_add_row(s, &row);
        }
    }
    for (uint32_t i = 0; rc == 0 && i < p->nnotes; i++)
        rc = sw__snapshot_set_note(s, p->note_keys[i], p->note_values[i]);
    for (size_t i = 0; rc == 0 && i < p->nmodules; i++)
        rc = sw__snapshot_add_module(s, &p->modules[i]);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_lock(&p->counter_lock);
    for (uint32_t i = 0; rc == 0 && i < atomic_load(&p->ncounter); i++) {
        sw_counter_summary c = p->counters[i].summary;
        c.name = p->counters[i].name;
        rc = sw__snapshot_add_counter(s, &c);
    }
    pthread_mutex_unlock(&p->counter_lock);
    if (rc == 0)
        rc = sw__snapshot_finish(s);
    free(sum);
    free(scratch);
    if (rc != 0) {
        sw_snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
}
