/*
 * recorder_notes.c — sw_set_note: key = value pairs a snapshot carries.
 */
#include "recorder.h"

#include <stdlib.h>
#include <string.h>

/* value cut to at most SW_NOTE_VALUE_MAX bytes, at a character boundary (UTF-8). */
static char *note_copy(const char *value) {
    size_t n = strlen(value);
    if (n > SW_NOTE_VALUE_MAX) {
        n = SW_NOTE_VALUE_MAX;
        while (n > 0 && ((unsigned char)value[n] & 0xC0) == 0x80)
            n--;
    }
    char *copy = malloc(n + 1);
    if (copy != NULL) {
        memcpy(copy, value, n);
        copy[n] = '\0';
    }
    return copy;
}

int sw__set_note_locked(sw_profiler *p, const char *key, char *copy) {
    int rc = 0;
    uint32_t i = 0;
    while (i < p->nnotes && strcmp(p->note_keys[i], key) != 0)
        i++;
    if (i < p->nnotes) {
        free(p->note_values[i]);
        if (copy != NULL) {
            p->note_values[i] = copy;
        } else { /* removed: keep the others in order */
            free(p->note_keys[i]);
            for (; i + 1 < p->nnotes; i++) {
                p->note_keys[i] = p->note_keys[i + 1];
                p->note_values[i] = p->note_values[i + 1];
            }
            p->nnotes--;
        }
    } else if (copy != NULL) {
        char *key_copy = p->nnotes < SW_MAX_NOTES ? sw__strdup(key) : NULL;
        rc = p->nnotes >= SW_MAX_NOTES ? SW_ELIMIT : key_copy == NULL ? SW_ENOMEM : 0;
        if (rc == 0) {
            p->note_keys[p->nnotes] = key_copy;
            p->note_values[p->nnotes++] = copy;
        } else {
            free(copy);
        }
    }
    return rc;
}

int sw_set_note(sw_profiler *p, const char *key, const char *value) {
    if (p == NULL || key == NULL || key[0] == '\0' || strlen(key) > SW_NOTE_KEY_MAX)
        return SW_EINVAL;
    char *copy = NULL;
    if (value != NULL && (copy = note_copy(value)) == NULL)
        return SW_ENOMEM;
    pthread_mutex_lock(&p->lock);
    int rc = sw__set_note_locked(p, key, copy);
    pthread_mutex_unlock(&p->lock);
    return rc;
}
