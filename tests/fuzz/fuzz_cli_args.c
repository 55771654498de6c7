/* fuzz_cli_args.c — the command's option parsing (cli/options.c): any argv, split from the
 * fuzzer's bytes at NULs, goes through getopt_long and swcli_option as a subcommand's loop
 * does; numbers and format names through their parsers. Nothing is opened or written: only
 * what the parsing decides. */
#include "fuzz_util.h"
#include "options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[64];
    int argc = 0;
    argv[argc++] = "report";
    for (char *s = copy; argc < 63 && s < copy + size; s += strlen(s) + 1)
        argv[argc++] = s;
    argv[argc] = NULL;
    static const struct option options[] = {SWCLI_OPTION_FORMAT, SWCLI_OPTION_RANK,
                                            SWCLI_OPTION_OUTPUT, SWCLI_OPTION_HELP,
                                            SWCLI_OPTION_END};
    swcli_args args = {
        .command = "report", .help = "", .format = SW_FORMAT_TABLE, .rank = -1, .output = "-"};
    optind = 0; /* glibc: 0 also resets getopt's inner state, left over from the last input */
    opterr = 0;
    for (int opt; (opt = getopt_long(argc, argv, "f:r:o:h", options, NULL)) != -1;)
        if (swcli_option(&args, opt, optarg) != SWCLI_NEXT)
            break;
    for (int i = 1; i < argc; i++) {
        long n;
        swcli_parse_number(argv[i], -5, 1000000, &n);
        sw_format f;
        if (sw_format_parse(argv[i], &f) == 0 && sw_format_name(f) == NULL)
            abort(); /* a format that parses has a name */
    }
    free(copy);
    return 0;
}
