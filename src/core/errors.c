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
