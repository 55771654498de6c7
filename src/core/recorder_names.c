/*
 * recorder_names.c — action, phase and counter names: interned once, under a lock, each cut to
 * SW_NAME_MAX bytes at a character boundary; a full table says so once.
 */
#include "recorder.h"

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

/* A table is full: say so once per table and profiler (never on the hot path: interning
 * takes a lock and is done once per name). */
static void table_full(_Atomic int *warned, const char *what, unsigned max, const char *name) {
    if (atomic_exchange(warned, 1) == 0)
        sw__warn("the %s table is full (%u names): '%.*s' and any later new %s names get no id "
                 "and are not timed",
                 what, max, (int)name_length(name), name, what);
}

/* Intern under p->lock. A new name gets category cat; an existing name keeps its own (the
 * caller compares). */
sw_id sw__action_intern_locked(sw_profiler *p, const char *name, sw_category cat) {
    size_t len = name_length(name);
    uint32_t n = atomic_load_explicit(&p->naction, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (same_name(p->action_names[i], name, len))
            return i;
    if (n >= SW__MAX_ACTIONS) {
        table_full(&p->full_warned[0], "action", SW__MAX_ACTIONS, name);
        return SW_ID_NONE;
    }
    char *copy = copy_name(name, len);
    if (copy == NULL)
        return SW_ID_NONE;
    p->action_names[n] = copy;
    p->action_category[n] = (uint8_t)cat;
    p->action_cause[n] = (uint8_t)sw_cause_of(name);
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
    if (id != SW_ID_NONE && p->action_category[id] != (uint8_t)cat)
        id = SW_ID_NONE; /* a name has one category, the one it was first interned with */
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
    for (uint32_t i = 0; i < n; i++)
        if (same_name(p->phase_names[i], name, len))
            return i;
    if (n >= SW__MAX_PHASES) {
        table_full(&p->full_warned[1], "phase", SW__MAX_PHASES, name);
        return SW_PHASE_NONE;
    }
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

sw_id sw_counter_id(sw_profiler *p, const char *name) {
    if (p == NULL || name == NULL)
        return SW_ID_NONE;
    sw_id id = SW_ID_NONE;
    size_t len = name_length(name);
    pthread_mutex_lock(&p->counter_lock);
    uint32_t n = atomic_load(&p->ncounter);
    for (uint32_t i = 0; i < n && id == SW_ID_NONE; i++)
        if (same_name(p->counters[i].name, name, len))
            id = i;
    if (id == SW_ID_NONE && n >= SW__MAX_COUNTERS)
        table_full(&p->full_warned[2], "counter", SW__MAX_COUNTERS, name);
    if (id == SW_ID_NONE && n < SW__MAX_COUNTERS) {
        p->counters[n].name = copy_name(name, len);
        if (p->counters[n].name) {
            id = n;
            atomic_store(&p->ncounter, n + 1);
        }
    }
    pthread_mutex_unlock(&p->counter_lock);
    return id;
}
