/*
 * recorder_modules.c — sw_set_modules: the per-module table (time and memory of each
 * nn.Module) a front end measures and a snapshot carries.
 */
#include "recorder.h"

#include <stdlib.h>
#include <string.h>

void sw__modules_free(sw_module_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)rows[i].path);
        free((char *)rows[i].kind);
    }
    free(rows);
}

int sw_set_modules(sw_profiler *p, const sw_module_row *rows, size_t n) {
    if (p == NULL || (rows == NULL && n > 0))
        return SW_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (rows[i].path == NULL || rows[i].kind == NULL)
            return SW_EINVAL;
    if (n > SW_MAX_MODULES)
        n = SW_MAX_MODULES;
    /* The copy is made outside the lock; only the swap is inside. */
    sw_module_row *copy = n ? calloc(n, sizeof *copy) : NULL;
    if (n && copy == NULL)
        return SW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        copy[i] = rows[i];
        copy[i].path = sw__strdup(rows[i].path);
        copy[i].kind = sw__strdup(rows[i].kind);
        if (copy[i].path == NULL || copy[i].kind == NULL) {
            sw__modules_free(copy, i + 1);
            return SW_ENOMEM;
        }
    }
    pthread_mutex_lock(&p->lock);
    sw_module_row *old = p->modules;
    size_t nold = p->nmodules;
    p->modules = copy;
    p->nmodules = n;
    pthread_mutex_unlock(&p->lock);
    sw__modules_free(old, nold);
    return 0;
}
