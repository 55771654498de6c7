/*
 * snapshot.c — building and freeing snapshots. A snapshot owns every string it points to, so
 * it outlives the profiler or run file it came from.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

/* The public struct plus the list of strings to free with it. */
typedef struct sw__snapshot_owned {
    sw_snapshot pub;
    char **strings;
    size_t nstrings, strings_cap;
    size_t rows_cap, counters_cap, notes_cap, modules_cap;
} sw__snapshot_owned;

static sw__snapshot_owned *owned_of(sw_snapshot *s) {
    return (sw__snapshot_owned *)s; /* pub is the first member */
}

sw_snapshot *sw__snapshot_new(void) {
    sw__snapshot_owned *o = calloc(1, sizeof *o);
    if (o == NULL)
        return NULL;
    o->pub.world_size = 1;
    return &o->pub;
}

const char *sw__snapshot_string(sw_snapshot *s, const char *str) {
    if (str == NULL)
        return NULL;
    sw__snapshot_owned *o = owned_of(s);
    if (sw__grow(&o->strings, sizeof *o->strings, &o->strings_cap, o->nstrings + 1, 64) != 0)
        return NULL;
    char *copy = sw__strdup(str);
    if (copy != NULL)
        o->strings[o->nstrings++] = copy;
    return copy;
}

int sw__snapshot_add_row(sw_snapshot *s, const sw_row *row) {
    sw__snapshot_owned *o = owned_of(s);
    if (sw__grow(&s->rows, sizeof *s->rows, &o->rows_cap, s->nrows + 1, 32) != 0)
        return SW_ENOMEM;
    sw_row *copy = &s->rows[s->nrows];
    *copy = *row;
    copy->action_name = sw__snapshot_string(s, row->action_name);
    copy->phase_name = sw__snapshot_string(s, row->phase_name);
    if ((row->action_name && !copy->action_name) || (row->phase_name && !copy->phase_name))
        return SW_ENOMEM;
    s->nrows++;
    return 0;
}

int sw__snapshot_add_counter(sw_snapshot *s, const sw_counter_summary *counter) {
    sw__snapshot_owned *o = owned_of(s);
    if (sw__grow(&s->counters, sizeof *s->counters, &o->counters_cap, s->ncounters + 1, 8) != 0)
        return SW_ENOMEM;
    sw_counter_summary *copy = &s->counters[s->ncounters];
    *copy = *counter;
    copy->name = sw__snapshot_string(s, counter->name);
    if (counter->name && !copy->name)
        return SW_ENOMEM;
    s->ncounters++;
    return 0;
}

int sw__snapshot_set_note(sw_snapshot *s, const char *key, const char *value) {
    for (size_t i = 0; i < s->nnotes; i++)
        if (strcmp(s->notes[i].key, key) == 0)
            return 0; /* the first value stays (a merge adds ranks in order) */
    sw__snapshot_owned *o = owned_of(s);
    if (sw__grow(&s->notes, sizeof *s->notes, &o->notes_cap, s->nnotes + 1, 8) != 0)
        return SW_ENOMEM;
    sw_note *note = &s->notes[s->nnotes];
    note->key = sw__snapshot_string(s, key);
    note->value = sw__snapshot_string(s, value ? value : "");
    if (note->key == NULL || note->value == NULL)
        return SW_ENOMEM;
    s->nnotes++;
    return 0;
}

static int64_t larger(int64_t a, int64_t b) {
    return a > b ? a : b;
}

int sw__snapshot_add_module(sw_snapshot *s, const sw_module_row *row) {
    for (size_t i = 0; i < s->nmodules; i++) {
        sw_module_row *m = &s->modules[i];
        if (strcmp(m->path, row->path) != 0)
            continue;
        m->forward_calls += row->forward_calls;
        m->forward_ns += row->forward_ns;
        m->forward_self_ns += row->forward_self_ns;
        m->backward_calls += row->backward_calls;
        m->backward_ns += row->backward_ns;
        m->backward_self_ns += row->backward_self_ns;
        m->device_forward_calls += row->device_forward_calls;
        m->device_forward_ns += row->device_forward_ns;
        m->device_forward_self_ns += row->device_forward_self_ns;
        m->device_backward_calls += row->device_backward_calls;
        m->device_backward_ns += row->device_backward_ns;
        m->device_backward_self_ns += row->device_backward_self_ns;
        m->activation_bytes = larger(m->activation_bytes, row->activation_bytes);
        m->param_bytes = larger(m->param_bytes, row->param_bytes);
        m->grad_bytes = larger(m->grad_bytes, row->grad_bytes);
        m->optimizer_bytes = larger(m->optimizer_bytes, row->optimizer_bytes);
        return 0;
    }
    sw__snapshot_owned *o = owned_of(s);
    if (sw__grow(&s->modules, sizeof *s->modules, &o->modules_cap, s->nmodules + 1, 32) != 0)
        return SW_ENOMEM;
    sw_module_row *copy = &s->modules[s->nmodules];
    *copy = *row;
    copy->path = sw__snapshot_string(s, row->path ? row->path : "");
    copy->kind = sw__snapshot_string(s, row->kind ? row->kind : "");
    if (copy->path == NULL || copy->kind == NULL)
        return SW_ENOMEM;
    s->nmodules++;
    return 0;
}

const char *sw_snapshot_note(const sw_snapshot *s, const char *key) {
    if (s == NULL || key == NULL)
        return NULL;
    for (size_t i = 0; i < s->nnotes; i++)
        if (strcmp(s->notes[i].key, key) == 0)
            return s->notes[i].value;
    return NULL;
}

static int find_rollup(const sw_snapshot *s, size_t first_rollup, const char *action) {
    for (size_t i = first_rollup; i < s->nrows; i++)
        if (strcmp(s->rows[i].action_name, action) == 0)
            return (int)i;
    return -1;
}

int sw__snapshot_finish(sw_snapshot *s) {
    size_t nphase_rows = s->nrows;
    for (size_t i = 0; i < nphase_rows; i++) {
        /* Copy: adding a row may move s->rows. */
        sw_row source = s->rows[i];
        int at = find_rollup(s, nphase_rows, source.action_name);
        if (at < 0) {
            sw_row rollup = source;
            rollup.phase = SW_PHASE_ALL;
            rollup.phase_name = "all";
            int rc = sw__snapshot_add_row(s, &rollup);
            if (rc != 0)
                return rc;
            continue;
        }
        sw_row *into = &s->rows[at];
        sw_stats_merge(&into->stats, &source.stats);
        sw_stats_merge(&into->warmup, &source.warmup);
        sw_hist_merge(&into->hist, &source.hist);
    }
    s->wall_ns = s->elapsed_ns;
    const sw_row *fit = sw_snapshot_find(s, "fit", "all");
    if (fit != NULL && fit->stats.total_ns + fit->warmup.total_ns > 0)
        s->wall_ns = fit->stats.total_ns + fit->warmup.total_ns;
    return 0;
}

const sw_row *sw_snapshot_find(const sw_snapshot *s, const char *action, const char *phase) {
    if (s == NULL || action == NULL || phase == NULL)
        return NULL;
    for (size_t i = 0; i < s->nrows; i++) {
        const sw_row *r = &s->rows[i];
        if (r->action_name && r->phase_name && strcmp(r->action_name, action) == 0 &&
            strcmp(r->phase_name, phase) == 0)
            return r;
    }
    return NULL;
}

void sw_snapshot_free(sw_snapshot *s) {
    if (s == NULL)
        return;
    sw__snapshot_owned *o = owned_of(s);
    for (size_t i = 0; i < o->nstrings; i++)
        free(o->strings[i]);
    free(o->strings);
    free(s->rows);
    free(s->counters);
    free(s->notes);
    free(s->modules);
    free(o);
}
