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

/* The formats the subcommand writes, in sw_format order (the values from 0 that have a name:
 * the library's writer table is the one list), named as users type them: md for markdown. */
static void format_list(const swcli_args *args, char *list, size_t size) {
    list[0] = '\0';
    for (sw_format f = 0; sw_format_name(f) != NULL; f++) {
        if (!accepts(args, f))
            continue;
        size_t used = strlen(list);
        snprintf(list + used, size - used, "%s%s", used ? ", " : "",
                 f == SW_FORMAT_MARKDOWN ? "md" : sw_format_name(f));
    }
}

/* -f NAME: a format the subcommand writes, or SWCLI_EXIT_USAGE with the ones it does write. */
static int parse_format(swcli_args *args, const char *name) {
    sw_format format;
    if (sw_format_parse(name, &format) == 0 && accepts(args, format)) {
        args->format = format;
        return SWCLI_NEXT;
    }
    char list[128];
    format_list(args, list, sizeof list);
    if (args->formats == 0)
        swcli_error("unknown format '%s' (%s)", name, list);
    else
        swcli_error("%s cannot write format '%s' (%s)", args->command, name, list);
    return try_help(args->command);
}

/* The help, with each SWCLI_HELP_FORMATS in it replaced by the formats the subcommand writes. */
static void print_help(const swcli_args *args) {
    static const char token[] = SWCLI_HELP_FORMATS;
    char list[128];
    format_list(args, list, sizeof list);
    const char *text = args->help;
    for (const char *at; (at = strstr(text, token)) != NULL; text = at + sizeof token - 1) {
        fwrite(text, 1, (size_t)(at - text), stdout);
        fputs(list, stdout);
    }
    fputs(text, stdout);
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
        print_help(args);
        return SWCLI_EXIT_OK;
    default: /* '?': an unknown option or a missing value; getopt_long said which */
        return try_help(args->command);
    }
}
