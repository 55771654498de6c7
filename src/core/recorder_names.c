/*
 * recorder_names.c — action, phase and counter names: interned once, under a lock, each cut to
 * SW_NAME_MAX bytes at a character boundary; a full table folds new names into its last slot,
 * the overflow name (SW_OTHER_*), says so once on stderr and counts them in a note.
 */
#include "recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length name is cut to: at most SW__NAME_MAX bytes, and never inside a UTF-8
 * character (a cut that would split one ends before it). */
static size_t name_length(const char *name) {
    size_t n = strnlen(name, SW__NAME_MAX + 1);
    if (n <= SW__NAME_MAX)
        return n;
    n = SW__NAME_MAX;
    while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* Is stored (a cut copy) the name name is cut to? */
static int same_name(const char *stored, const char *name, size_t len) {
    return strncmp(stored, name, len) == 0 && stored[len] == '\0';
}

static char *copy_name(const char *name, size_t len) {
    char *copy = malloc(len + 1);
    if (copy != NULL) {
        memcpy(copy, name, len);
        copy[len] = '\0';
    }
    return copy;
}

/* The three tables and what a full one folds new names into (its last slot). */
enum { T_ACTIONS, T_PHASES, T_COUNTERS };
static const struct {
    const char *what, *other, *note;
    unsigned max;
} tables[3] = {
    {"action", SW_OTHER_ACTIONS, "limit.actions", SW__MAX_ACTIONS},
    {"phase", SW_OTHER_PHASES, "limit.phases", SW__MAX_PHASES},
    {"counter", SW_OTHER_COUNTERS, "limit.counters", SW__MAX_COUNTERS},
};

/* The index of the stored name name is cut to (len bytes) among names[0..n), or
 * SW_ID_NONE. */
static uint32_t find_name(char *const *names, size_t stride, uint32_t n, const char *name,
                          size_t len) {
    for (uint32_t i = 0; i < n; i++)
        if (same_name(*(char *const *)((const char *)names + i * stride), name, len))
            return i;
    return SW_ID_NONE;
}

/* The action names' index: FNV-1a over the (cut) name picks the first slot. */
enum { ACTION_SLOTS = 2 * SW__MAX_ACTIONS };
static uint32_t *action_slot(sw_profiler *p, const char *name, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    for (uint32_t i = h % ACTION_SLOTS;; i = (i + 1) % ACTION_SLOTS) {
        uint32_t id = p->action_slots[i];
        if (id == 0 || same_name(p->action_names[id - 1], name, len))
            return &p->action_slots[i]; /* never full: twice as many slots as names */
    }
}

/* Is name (not found in its table of n names) one the table folds: a new name that would
 * take the last slot, which is the overflow name's? */
static int folds(int table, uint32_t n, const char *name) {
    return n + 1 >= tables[table].max && strcmp(name, tables[table].other) != 0;
}

/* A new name was folded into a full table's overflow name: count it, say so on stderr the
 * first time (never on the hot path: interning takes a lock and is done once per name),
 * and return the text of the table's "limit.*" note (NULL: out of memory). */
static char *folded(sw_profiler *p, int table, const char *name) {
    int len = (int)name_length(name);
    if (p->folded[table]++ == 0) {
        p->folded_first[table] = copy_name(name, (size_t)len);
        sw__warn("the %s table is full (%u names): '%.*s' and every later new %s name are "
                 "recorded together as '%s'",
                 tables[table].what, tables[table].max, len, name, tables[table].what,
                 tables[table].other);
    }
    char *note = malloc(SW_NOTE_VALUE_MAX + 1);
    if (note != NULL) {
        const char *first = p->folded_first[table] ? p->folded_first[table] : "?";
        snprintf(note, SW_NOTE_VALUE_MAX + 1,
                 "%llu lookups of new %s names past the table's %u were recorded as '%s' "
                 "(a name made per step or per item?); the first: '%.200s'",
                 (unsigned long long)p->folded[table], tables[table].what, tables[table].max,
                 tables[table].other, first);
    }
    return note;
}

/* Intern under p->lock. A new name gets category cat; an existing name keeps its own (the
 * caller compares). A new name past a full table gets the overflow name's id. */
sw_id sw__action_intern_locked(sw_profiler *p, const char *name, sw_category cat) {
    size_t len = name_length(name);
    uint32_t n = atomic_load_explicit(&p->naction, memory_order_relaxed);
    uint32_t *slot = action_slot(p, name, len);
    if (*slot != 0)
        return *slot - 1;
    sw_id id;
    if (folds(T_ACTIONS, n, name)) {
        id = sw__action_intern_locked(p, SW_OTHER_ACTIONS, SW_CAT_OTHER);
        if (id != SW_ID_NONE)
            sw__set_note_locked(p, tables[T_ACTIONS].note, folded(p, T_ACTIONS, name));
        return id;
    }
    if (n >= SW__MAX_ACTIONS)
        return SW_ID_NONE; /* the overflow name's own slot is taken: cannot happen */
    char *copy = copy_name(name, len);
    if (copy == NULL)
        return SW_ID_NONE;
    p->action_names[n] = copy;
    p->action_category[n] = (uint8_t)cat;
    p->action_cause[n] = (uint8_t)sw_cause_of(name);
    *slot = n + 1;
    /* Release: a thread that sees the new count also sees the name and its category. */
    atomic_store_explicit(&p->naction, n + 1, memory_order_release);
    return n;
}

sw_id sw_action(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_ID_NONE;
    pthread_mutex_lock(&p->lock);
    sw_id id = sw__action_intern_locked(p, name, sw_category_of(name));
    pthread_mutex_unlock(&p->lock);
    return id;
}

sw_id sw_action_with_category(sw_profiler *p, const char *name, sw_category cat) {
    if (p == NULL || name == NULL || (unsigned)cat >= SW_CAT_COUNT)
        return SW_ID_NONE;
    pthread_mutex_lock(&p->lock);
    sw_id id = sw__action_intern_locked(p, name, cat);
    /* A name has one category, the one it was first interned with; a name folded into the
     * overflow name takes that one's. */
    if (id != SW_ID_NONE && p->action_category[id] != (uint8_t)cat &&
        !(strcmp(p->action_names[id], SW_OTHER_ACTIONS) == 0 &&
          strcmp(name, SW_OTHER_ACTIONS) != 0))
        id = SW_ID_NONE;
    pthread_mutex_unlock(&p->lock);
    return id;
}

sw_category sw_action_category(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return SW_CAT_OTHER;
    return (sw_category)p->action_category[id];
}

const char *sw_action_name(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load_explicit(&p->naction, memory_order_acquire))
        return NULL;
    return p->action_names[id];
}

sw_id sw_site_id(sw_profiler *p, sw_site *site, const char *name) {
    if (p == NULL)
        return SW_ID_NONE;
    uint64_t serial = p->generation & 0xFFFFFFFFu;
    uint64_t key = __atomic_load_n(&site->key, __ATOMIC_RELAXED);
    if (SW__LIKELY(key >> 32 == serial))
        return (sw_id)key;
    sw_id id = sw_action(p, name);
    if (id != SW_ID_NONE)
        __atomic_store_n(&site->key, serial << 32 | id, __ATOMIC_RELAXED);
    return id;
}

sw_phase sw__phase_intern_locked(sw_profiler *p, const char *name) {
    size_t len = name_length(name);
    uint32_t n = atomic_load_explicit(&p->nphase, memory_order_relaxed);
    uint32_t found = find_name(p->phase_names, sizeof(char *), n, name, len);
    if (found != SW_ID_NONE) /* (SW_PHASE_NONE is phase 0, "none": not "not found") */
        return (sw_phase)found;
    if (folds(T_PHASES, n, name)) {
        sw_phase phase = sw__phase_intern_locked(p, SW_OTHER_PHASES);
        if (phase != SW_PHASE_NONE)
            sw__set_note_locked(p, tables[T_PHASES].note, folded(p, T_PHASES, name));
        return phase;
    }
    if (n >= SW__MAX_PHASES)
        return SW_PHASE_NONE;
    sw_id action = sw__action_intern_locked(p, name, sw_category_of(name));
    char *copy = copy_name(name, len);
    if (copy == NULL || action == SW_ID_NONE) {
        free(copy);
        return SW_PHASE_NONE;
    }
    p->phase_names[n] = copy;
    p->phase_action[n] = action;
    atomic_store_explicit(&p->nphase, n + 1, memory_order_release);
    return n;
}

sw_phase sw_phase_id(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL || name[0] == '\0')
        return SW_PHASE_NONE;
    pthread_mutex_lock(&p->lock);
    sw_phase phase = sw__phase_intern_locked(p, name);
    pthread_mutex_unlock(&p->lock);
    return phase;
}

const char *sw_phase_name(const sw_profiler *p, sw_phase phase) {
    if (p == NULL || phase >= atomic_load_explicit(&p->nphase, memory_order_acquire))
        return NULL;
    return p->phase_names[phase];
}

/* A new counter name under counter_lock: the next slot, or past a full table the overflow
 * name's (*note: the "limit.counters" note's text, set by the caller outside the lock). */
static sw_id counter_intern_locked(sw_profiler *p, const char *name, char **note) {
    size_t len = name_length(name);
    uint32_t n = atomic_load(&p->ncounter);
    sw_id id = find_name(&p->counters[0].name, sizeof p->counters[0], n, name, len);
    if (id != SW_ID_NONE)
        return id;
    if (folds(T_COUNTERS, n, name)) {
        id = counter_intern_locked(p, SW_OTHER_COUNTERS, note);
        if (id != SW_ID_NONE)
            *note = folded(p, T_COUNTERS, name);
        return id;
    }
    if (n >= SW__MAX_COUNTERS || (p->counters[n].name = copy_name(name, len)) == NULL)
        return SW_ID_NONE;
    atomic_store(&p->ncounter, n + 1);
    return n;
}

sw_id sw_counter_id(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_ID_NONE;
    char *note = NULL;
    pthread_mutex_lock(&p->counter_lock);
    sw_id id = counter_intern_locked(p, name, &note);
    pthread_mutex_unlock(&p->counter_lock);
    if (note != NULL) { /* notes are under p->lock, never taken inside counter_lock */
        pthread_mutex_lock(&p->lock);
        sw__set_note_locked(p, tables[T_COUNTERS].note, note);
        pthread_mutex_unlock(&p->lock);
    }
    return id;
}

const char *sw_counter_name(const sw_profiler *p, sw_id id) {
    if (p == NULL || id >= atomic_load(&((sw_profiler *)p)->ncounter))
        return NULL;
    return p->counters[id].name;
}
