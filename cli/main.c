/*
 * main.c — the stepwatch command: dispatch "stepwatch CMD ARGS..." to swcli_cmd_CMD.
 */
#include "common.h"

#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"run", swcli_cmd_run, "profile a program: stepwatch run [--run-file P] -- CMD ARGS..."},
    {"report", swcli_cmd_report, "print a run file's report in a chosen format"},
    {"export", swcli_cmd_export, "write a Chrome trace (Perfetto) or a per-step CSV"},
    {"merge", swcli_cmd_merge, "merge run files of several ranks into one"},
    {"html", swcli_cmd_html, "write a self-contained HTML report"},
    {"compare", swcli_cmd_compare, "what got slower or faster between two runs"},
    {"diagnose", swcli_cmd_diagnose, "plain-language findings about a run"},
    {"serve", swcli_cmd_serve, "serve the live HTML report and /metrics of a running job"},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *out) {
    fputs("usage: stepwatch COMMAND [ARGS...]\n"
          "       stepwatch --version | --help | help COMMAND\n\n"
          "A stopwatch for training loops: where does each step's time go?\n\ncommands:\n",
          out);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-9s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fputs("\nRun 'stepwatch COMMAND --help' for a command's options.\n"
          "Exit codes: 0 done, 1 findings/regression, 2 bad command line, 3 bad input file,\n"
          "4 cannot write the output.\n",
          out);
}

static const command *find(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0)
            return &COMMANDS[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return SWCLI_EXIT_USAGE;
    }
    const char *first = argv[1];
    if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
        usage(stdout);
        return SWCLI_EXIT_OK;
    }
    if (strcmp(first, "--version") == 0 || strcmp(first, "-V") == 0) {
        printf("stepwatch %s\n", SW_VERSION_STRING);
        return SWCLI_EXIT_OK;
    }
    if (strcmp(first, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return SWCLI_EXIT_OK;
        }
        const command *c = find(argv[2]);
        if (c == NULL) {
            swcli_error("unknown command '%s'", argv[2]);
            return SWCLI_EXIT_USAGE;
        }
        char *help_argv[] = {argv[2], "--help", NULL};
        return c->run(2, help_argv);
    }
    const command *c = find(first);
    if (c == NULL) {
        swcli_error("unknown command '%s'", first);
        usage(stderr);
        return SWCLI_EXIT_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
