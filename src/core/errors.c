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

/* ---- the sentence behind the last error (sw_last_error) ---- */

#include "core.h"

#include <stdarg.h>

static _Thread_local char last_error[640];

const char *sw_last_error(void) {
    return last_error;
}

void sw__error_clear(void) {
    last_error[0] = '\0';
}

int sw__error(int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return rc;
}
