/*
 * recorder_modules.c — sw_set_modules: the per-module table (time and memory of each
 * nn.Module) a front end measures and a snapshot carries.
 */
#include "recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sw__modules_free(sw_module_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)rows[i].path);
        free((char *)rows[i].kind);
    }
    free(rows);
}

/* The rows past the table's last slot, as one row: their calls and self times summed (a
 * folded module's cumulative time would count its folded children again, so its time is
 * the self time of them all); memory unknown (parameters are counted in every ancestor). */
static sw_module_row fold_rows(const sw_module_row *rows, size_t n, char *kind, size_t cap) {
    sw_module_row other = {.path = SW_OTHER_MODULES,
                           .kind = kind,
                           .activation_bytes = -1,
                           .param_bytes = -1,
                           .grad_bytes = -1,
                           .optimizer_bytes = -1};
    for (size_t i = 0; i < n; i++) {
        other.forward_calls += rows[i].forward_calls;
        other.forward_self_ns += rows[i].forward_self_ns;
        other.backward_calls += rows[i].backward_calls;
        other.backward_self_ns += rows[i].backward_self_ns;
        other.device_forward_calls += rows[i].device_forward_calls;
        other.device_forward_self_ns += rows[i].device_forward_self_ns;
        other.device_backward_calls += rows[i].device_backward_calls;
        other.device_backward_self_ns += rows[i].device_backward_self_ns;
    }
    other.forward_ns = other.forward_self_ns;
    other.backward_ns = other.backward_self_ns;
    other.device_forward_ns = other.device_forward_self_ns;
    other.device_backward_ns = other.device_backward_self_ns;
    snprintf(kind, cap, "%zu modules", n);
    return other;
}

int sw_set_modules(sw_profiler *p, const sw_module_row *rows, size_t n) {
    if (p == NULL || (rows == NULL && n > 0))
        return SW_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (rows[i].path == NULL || rows[i].kind == NULL)
            return SW_EINVAL;
    /* A model of more modules than the table holds: the last row sums the rest. */
    size_t kept = n > SW_MAX_MODULES ? SW_MAX_MODULES - 1 : n, total = kept + (n > kept);
    char kind[32];
    sw_module_row other = n > kept ? fold_rows(rows + kept, n - kept, kind, sizeof kind)
                                   : (sw_module_row){0};
    /* The copy is made outside the lock; only the swap is inside. */
    sw_module_row *copy = total ? calloc(total, sizeof *copy) : NULL;
    if (total && copy == NULL)
        return SW_ENOMEM;
    for (size_t i = 0; i < total; i++) {
        copy[i] = i < kept ? rows[i] : other;
        copy[i].path = sw__strdup(copy[i].path);
        copy[i].kind = sw__strdup(copy[i].kind);
        if (copy[i].path == NULL || copy[i].kind == NULL) {
            sw__modules_free(copy, i + 1);
            return SW_ENOMEM;
        }
    }
    if (n > kept && atomic_exchange(&p->full_warned[3], 1) == 0)
        sw__warn("the module table is full (%d rows): the %zu modules after '%s' are shown "
                 "together as '%s'",
                 SW_MAX_MODULES, n - kept, rows[kept - 1].path, SW_OTHER_MODULES);
    n = total;
    pthread_mutex_lock(&p->lock);
    sw_module_row *old = p->modules;
    size_t nold = p->nmodules;
    p->modules = copy;
    p->nmodules = n;
    pthread_mutex_unlock(&p->lock);
    sw__modules_free(old, nold);
    return 0;
}
