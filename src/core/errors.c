/* errors.c — messages and names of the SW_E* codes, from the one list in stepwatch.h. */
#include "stepwatch.h"

const char *sw_strerror(int rc) {
    switch (rc) {
    case 0:
        return "success";
#define SW__ERRNO_MESSAGE(name, value, message) \
    case value:                                 \
        return message;
        SW_ERRNO_MAP(SW__ERRNO_MESSAGE)
#undef SW__ERRNO_MESSAGE
    default:
        return "unknown error";
    }
}

const char *sw_err_name(int rc) {
    switch (rc) {
    case 0:
        return "OK";
#define SW__ERRNO_NAME(name, value, message) \
    case value:                              \
        return #name;
        SW_ERRNO_MAP(SW__ERRNO_NAME)
#undef SW__ERRNO_NAME
    default:
        return "UNKNOWN";
    }
}

/* ---- the sentence behind the last error (sw_last_error), and warnings ---- */

#include "core.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char last_error[640];

/* Format into dst; a message too long for it (a 10 kB path) loses its middle, not its end,
 * where the cause is. */
static void format_fitted(char *dst, size_t size, const char *fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    int len = vsnprintf(dst, size, fmt, ap);
    if (len >= 0 && (size_t)len >= size) {
        char *whole = malloc((size_t)len + 1);
        if (whole != NULL) {
            vsnprintf(whole, (size_t)len + 1, fmt, copy);
            static const char cut[] = " [...] ";
            size_t head = (size - sizeof cut) / 3, tail = size - sizeof cut - head;
            memcpy(dst, whole, head);
            memcpy(dst + head, cut, sizeof cut - 1);
            memcpy(dst + head + sizeof cut - 1, whole + (size_t)len - tail, tail);
            dst[size - 1] = '\0';
            free(whole);
        }
    }
    va_end(copy);
}

const char *sw_last_error(void) {
    return last_error;
}

void sw__error_clear(void) {
    last_error[0] = '\0';
}

int sw__error_about(int rc, const char *path) {
    if (rc == 0 || path == NULL || (last_error[0] != '\0' && strstr(last_error, path) != NULL))
        return rc;
    char why[sizeof last_error];
    snprintf(why, sizeof why, "%s", last_error[0] != '\0' ? last_error : sw_strerror(rc));
    return sw__error(rc, "%s: %s", path, why);
}

int sw__error(int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    format_fitted(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return rc;
}

void sw__warn(const char *fmt, ...) {
    char line[1024] = "stepwatch: ";
    size_t used = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    format_fitted(line + used, sizeof line - used - 1, fmt, ap);
    va_end(ap);
    used = strlen(line);
    line[used++] = '\n';
    ssize_t n = write(STDERR_FILENO, line, used);
    (void)n; /* nowhere left to say that stderr failed */
}
