/* options.c — the options the subcommands share, number checks and usage errors. */
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int try_help(const char *command) {
    fprintf(stderr, "Try 'stepwatch %s --help'.\n", command);
    return SWCLI_EXIT_USAGE;
}

int swcli_usage(const swcli_args *args, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    swcli_verror(fmt, ap);
    va_end(ap);
    return try_help(args->command);
}

int swcli_parse_number(const char *text, long min, long max, long *out) {
    /* Digits only, written the one way: strtol would also take " 1", "+1" and "01". */
    if (text[0] < '0' || text[0] > '9' || (text[0] == '0' && text[1] != '\0'))
        return -1;
    char *end;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || n < min || n > max)
        return -1;
    *out = n;
    return 0;
}

static int accepts(const swcli_args *args, sw_format format) {
    return args->formats == 0 || (args->formats & SWCLI_FORMAT(format)) != 0;
}

/* -f NAME: a format the subcommand writes, or SWCLI_EXIT_USAGE with the ones it does write
 * (named as the help texts name them: md for markdown). */
static int parse_format(swcli_args *args, const char *name) {
    sw_format format;
    if (sw_format_parse(name, &format) == 0 && accepts(args, format)) {
        args->format = format;
        return SWCLI_NEXT;
    }
    char list[128] = "";
    /* Every format in sw_format order: the values from 0 that have a name. */
    for (sw_format f = 0; sw_format_name(f) != NULL; f++) {
        if (!accepts(args, f))
            continue;
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                 f == SW_FORMAT_MARKDOWN ? "md" : sw_format_name(f));
    }
    if (args->formats == 0)
        swcli_error("unknown format '%s' (%s)", name, list);
    else
        swcli_error("%s cannot write format '%s' (%s)", args->command, name, list);
    return try_help(args->command);
}

int swcli_option(swcli_args *args, int opt, const char *arg) {
    switch (opt) {
    case 'f':
        return parse_format(args, arg);
    case 'r': {
        long rank;
        if (swcli_parse_number(arg, 0, SWCLI_MAX_RANK, &rank) != 0)
            return swcli_usage(args, "--rank takes a rank number from 0 to %d, not '%s'",
                               SWCLI_MAX_RANK, arg);
        args->rank = (int)rank;
        return SWCLI_NEXT;
    }
    case 'o':
        args->output = arg;
        return SWCLI_NEXT;
    case 'h':
        fputs(args->help, stdout);
        return SWCLI_EXIT_OK;
    default: /* '?': an unknown option or a missing value; getopt_long said which */
        return try_help(args->command);
    }
}
