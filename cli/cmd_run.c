/*
 * cmd_run.c — stepwatch run [options] -- CMD ARGS...   (or -m MODULE / -c CODE [ARGS...])
 *
 * A Python command (python ... script.py, -m module, -c code) runs as "python -m
 * stepwatch.autorun ...", which instruments the script (the Python package); -m and -c
 * given to `stepwatch run` itself mean "python3 -m/-c". torchrun ARGS runs as "python -m
 * stepwatch.torchrun ARGS", which does the same in every worker. Any other program gets the
 * run file's path in STEPWATCH_RUN_FILE (and STEPWATCH_TIMELINE=1, STEPWATCH_ON_FULL,
 * STEPWATCH_RING_CAPACITY; --functions: STEPWATCH_FUNCTIONS; --device-stats, --device-time:
 * STEPWATCH_DEVICE_STATS (ms), STEPWATCH_DEVICE_TIME; --no-step-memory: STEPWATCH_STEP_MEMORY=0;
 * --modules[=K]: STEPWATCH_MODULES, "on" or K; --flops: STEPWATCH_FLOPS=1; --peak-flops F:
 * STEPWATCH_PEAK_FLOPS)
 * for a program built with stepwatch.
 * At the end it names the run files the program wrote ({rank} expanded), or says that none
 * was written.
 * The exit status is the program's (128 + N when killed by signal N).
 */
#include "live_server.h"
#include "options.h"

#include <errno.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char HELP[] =
    "usage: stepwatch run [options] -- CMD ARGS...\n"
    "       stepwatch run [options] -m MODULE [ARGS...]   (python3 -m MODULE)\n"
    "       stepwatch run [options] -c CODE [ARGS...]     (python3 -c CODE)\n\n"
    "Run CMD with profiling on and tell where the run file is. A Python command\n"
    "('python train.py ...') is instrumented without code changes (stepwatch.autorun) and\n"
    "prints its report at exit; other programs read the path from STEPWATCH_RUN_FILE.\n\n"
    "      --run-file P  the run file (default stepwatch-{rank}.db; {rank} is the rank)\n"
    "  -t, --timeline    keep every span (for 'stepwatch export --chrome')\n"
    "  -f, --format F    the report the Python command prints at exit (STEPWATCH_FORMAT):\n"
    "                    " SWCLI_HELP_FORMATS " (default: table)\n"
    "  -o, --output P    the Python command writes that report to P, not to stderr\n"
    "                    (STEPWATCH_OUTPUT)\n"
    "      --warmup N    first N steps of each phase kept out of the statistics\n"
    "      --forward M   how Python times the forward: patch (default) or hooks\n"
    "      --on-full P   when the run file's writer falls behind: drop (default; events\n"
    "                    are counted, training never waits) or block (nothing dropped)\n"
    "      --ring-capacity N\n"
    "                    events buffered per thread (default 65536, 376 bytes each)\n"
    "      --functions A,B  profile the Python functions called inside these actions\n"
    "                    (data, forward, ...): cProfile tables per action in the report\n"
    "      --builtins    with --functions, C builtins too (as cProfile; slower)\n"
    "      --live        the live status line even when stderr is not a terminal\n"
    "      --no-live     no live status line (by default: when stderr is a terminal)\n"
    "      --device-stats[=S]  sample CPU, memory and GPUs every S seconds (default 0.5)\n"
    "      --device-time  the GPU time of each phase from CUDA events (docs/device.md)\n"
    "      --no-step-memory  no memory per step (RSS; torch's CUDA allocator in Python)\n"
    "      --modules[=K] each nn.Module's forward and backward time and memory, every K-th\n"
    "                    step (default 10): the report's Modules table (docs/python.md)\n"
    "      --serve[=PORT]  serve the live HTML report, data.json and /metrics while it runs\n"
    "                    (stepwatch serve; default port 8765) and the final report after it:\n"
    "                    every rank's file of this node (torchrun's ranks) on one page\n"
    "      --linger S    with --serve: keep the final report up S seconds after the program\n"
    "                    ends (Ctrl-C ends it sooner). Default: until Ctrl-C when standard\n"
    "                    input is a terminal, else 0 (a batch job never waits on it)\n"
    "      --bind ADDR   with --serve: listen on ADDR, not 127.0.0.1 (a token in the URL)\n"
    "      --flops       count one training step's FLOPs per input shape: TFLOP/s achieved,\n"
    "                    MFU on a known GPU, tokens/s (docs/efficiency.md)\n"
    "      --peak-flops F  the device's peak FLOP/s, for MFU where stepwatch's table has none\n"
    "  -m MODULE, -c CODE  run python3 -m MODULE / -c CODE, like python itself\n"
    "  -h, --help        this help\n";

/* python, python3, python3.11, ... */
static int is_python(const char *program) {
    const char *base = strrchr(program, '/');
    base = base ? base + 1 : program;
    if (strncmp(base, "python", 6) != 0)
        return 0;
    for (const char *c = base + 6; *c; c++)
        if (!(*c >= '0' && *c <= '9') && *c != '.')
            return 0;
    return 1;
}

/* python [interpreter options] rest... -> python [options] -m stepwatch.autorun rest...
 * Interpreter options come before the script (-X and -W take a value). */
static char **python_argv(int argc, char **argv) {
    char **out = calloc((size_t)argc + 3, sizeof *out);
    if (out == NULL)
        return NULL;
    int i = 0, o = 0;
    out[o++] = argv[i++];
    while (i < argc && argv[i][0] == '-' && strcmp(argv[i], "-m") != 0 &&
           strcmp(argv[i], "-c") != 0 && strcmp(argv[i], "-") != 0) {
        int takes_value = strcmp(argv[i], "-X") == 0 || strcmp(argv[i], "-W") == 0;
        out[o++] = argv[i++];
        if (takes_value && i < argc)
            out[o++] = argv[i++];
    }
    out[o++] = "-m";
    out[o++] = "stepwatch.autorun";
    while (i < argc)
        out[o++] = argv[i++];
    return out;
}

/* torchrun ARGS... -> PYTHON -m stepwatch.torchrun ARGS..., PYTHON being the interpreter
 * of torchrun's script (its #! line; python3 when it cannot be read). *interpreter is
 * malloc'd. */
static char **torchrun_argv(int argc, char **argv, char **interpreter) {
    char *script = NULL;
    if (strchr(argv[0], '/') == NULL) { /* find it on PATH, as execvp would */
        const char *path = getenv("PATH");
        for (const char *dir = path; dir && *dir && script == NULL;) {
            size_t n = strcspn(dir, ":");
            char candidate[PATH_MAX];
            snprintf(candidate, sizeof candidate, "%.*s/%s", (int)n, dir, argv[0]);
            if (access(candidate, X_OK) == 0)
                script = strdup(candidate);
            dir += n + (dir[n] == ':');
        }
    }
    FILE *f = fopen(script ? script : argv[0], "r");
    free(script);
    char line[PATH_MAX + 2] = "";
    if (f == NULL || fgets(line, sizeof line, f) == NULL || strncmp(line, "#!", 2) != 0)
        snprintf(line, sizeof line, "#!python3");
    if (f)
        fclose(f);
    line[strcspn(line, " \t\r\n")] = '\0';
    *interpreter = strdup(line + 2);
    char **out = calloc((size_t)argc + 3, sizeof *out);
    if (out == NULL || *interpreter == NULL) {
        free(out);
        return NULL;
    }
    out[0] = *interpreter;
    out[1] = "-m";
    out[2] = "stepwatch.torchrun";
    for (int i = 1; i < argc; i++)
        out[i + 2] = argv[i];
    return out;
}

/* The run file as an absolute path, so the program may change directory. */
static char *absolute(const char *path) {
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL)
        return NULL;
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s/%s", cwd, path);
    return out;
}

/* python3 -m stepwatch.autorun -m|-c WHAT ARGS...: stepwatch run -m/-c. */
static char **python_target_argv(const char *flag, const char *what, int argc, char **argv) {
    char **out = calloc((size_t)argc + 6, sizeof *out);
    if (out == NULL)
        return NULL;
    int o = 0;
    out[o++] = "python3";
    out[o++] = "-m";
    out[o++] = "stepwatch.autorun";
    out[o++] = (char *)flag;
    out[o++] = (char *)what;
    for (int i = 0; i < argc; i++)
        out[o++] = argv[i];
    return out;
}

/* The placeholders a run file's path may hold; each stands for a number (sw_options). */
static size_t placeholder(const char *at) {
    if (strncmp(at, "{rank}", 6) == 0)
        return 6;
    return strncmp(at, "{pid}", 5) == 0 ? 5 : 0;
}

/* pattern as a glob(3) pattern: a placeholder matches a digit and anything after it
 * ("[0-9]*"; is_run_file_of is exact), the rest only itself. */
static char *run_file_glob(const char *pattern) {
    char *out = malloc(6 * strlen(pattern) + 1), *o = out;
    for (const char *c = pattern; out && *c;) {
        size_t n = placeholder(c);
        if (n) {
            memcpy(o, "[0-9]*", 6);
            o += 6;
            c += n;
            continue;
        }
        if (strchr("*?[\\", *c))
            *o++ = '\\';
        *o++ = *c++;
    }
    if (out)
        *o = '\0';
    return out;
}

/* Does path match pattern with digits for each placeholder? */
static int is_run_file_of(const char *pattern, const char *path) {
    while (*pattern) {
        size_t n = placeholder(pattern);
        if (n) {
            if (*path < '0' || *path > '9')
                return 0;
            while (*path >= '0' && *path <= '9')
                path++;
            pattern += n;
        } else if (*pattern++ != *path++) {
            return 0;
        }
    }
    return *path == '\0';
}

static int before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Was path, a regular file, made or changed since `since`? */
static int written_since(const char *path, const struct timespec *since) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && !before(&st.st_mtim, since);
}

/* The run files the program named itself (run_file=...): the paths the core appended to
 * the list (STEPWATCH_RUN_FILE_LIST, one a line), less the pattern's (printed already) and
 * repeats. */
static void report_listed(const char *list, const char *pattern, const struct timespec *since,
                          size_t *shown) {
    FILE *f = list ? fopen(list, "r") : NULL;
    char text[16384]; /* a list longer than this is a courtesy cut short */
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    char *lines[256];
    size_t count = 0;
    for (char *line = text, *next; *line && count < 256; line = next) {
        next = line + strcspn(line, "\n");
        if (*next)
            *next++ = '\0';
        int repeat = 0;
        for (size_t i = 0; i < count && !repeat; i++)
            repeat = strcmp(lines[i], line) == 0;
        if (repeat || line[0] == '\0' || is_run_file_of(pattern, line) ||
            !written_since(line, since))
            continue;
        lines[count++] = line;
        fprintf(stderr, "%s%s", (*shown)++ ? ", " : "stepwatch: run file: ", line);
    }
}

/* The run files the program wrote: pattern with its placeholders matching numbers, made or
 * changed since `since`, then the others its profilers listed. Prints them, or that there
 * is none, on stderr; returns how many matched the pattern. */
static size_t report_run_files(const char *pattern, const struct timespec *since,
                               const char *list) {
    char *glob_pattern = run_file_glob(pattern);
    glob_t found = {0};
    size_t shown = 0, matched;
    if (glob_pattern != NULL && glob(glob_pattern, 0, NULL, &found) == 0) {
        for (size_t i = 0; i < found.gl_pathc; i++) {
            const char *path = found.gl_pathv[i];
            if (!is_run_file_of(pattern, path) || !written_since(path, since))
                continue; /* not this run's */
            fprintf(stderr, "%s%s", shown++ ? ", " : "stepwatch: run file: ", path);
        }
    }
    matched = shown;
    report_listed(list, pattern, since, &shown);
    if (shown > 1)
        fprintf(stderr, " (%zu files: 'stepwatch merge' joins ranks)", shown);
    if (shown == 0)
        fprintf(stderr, "stepwatch: no run file was written (%s)", pattern);
    fputc('\n', stderr);
    globfree(&found);
    free(glob_pattern);
    return matched;
}

/* What `stepwatch run` was asked, before the program's own arguments. */
typedef struct run_options {
    swcli_args args;
    const char *run_file;
    const char *format, *output, *on_full, *ring, *functions, *live, *warmup, *forward_mode;
    const char *python_flag, *python_what; /* -m MODULE or -c CODE */
    const char *modules;                   /* "on" or the step interval, as written */
    const char *peak_flops;                /* FLOP/s, as written */
    int timeline, builtins, device_time, no_step_memory, flops;
    char device_stats[24]; /* the interval in ms, as STEPWATCH_DEVICE_STATS wants it */
    int serve;             /* --serve: the live report's server (live_server.h) */
    double linger;         /* --linger: seconds the final report stays up; < 0 until Ctrl-C */
    swcli_server_options server;
} run_options;

enum {
    OPT_RUN_FILE = 1000,
    OPT_ON_FULL,
    OPT_RING_CAPACITY,
    OPT_WARMUP,
    OPT_FORWARD,
    OPT_FUNCTIONS,
    OPT_BUILTINS,
    OPT_LIVE,
    OPT_NO_LIVE,
    OPT_DEVICE_STATS,
    OPT_DEVICE_TIME,
    OPT_NO_STEP_MEMORY,
    OPT_MODULES,
    OPT_SERVE,
    OPT_LINGER,
    OPT_FLOPS,
    OPT_PEAK_FLOPS
};

/* One getopt_long result opt with its argument arg into o: SWCLI_NEXT, or the exit code to
 * end with. The values the program reads are checked here and passed on as written. */
static int run_option(run_options *o, int opt, char *arg) {
    switch (opt) {
    case 'm':
    case 'c':
        o->python_flag = opt == 'm' ? "-m" : "-c";
        o->python_what = arg;
        return SWCLI_NEXT;
    case OPT_WARMUP: {
        long steps;
        if (swcli_parse_number(arg, 0, UINT32_MAX, &steps) != 0)
            return swcli_usage(&o->args, "--warmup takes a number of steps, not '%s'", arg);
        o->warmup = arg;
        return SWCLI_NEXT;
    }
    case OPT_FORWARD:
        if (strcmp(arg, "patch") != 0 && strcmp(arg, "hooks") != 0)
            return swcli_usage(&o->args, "--forward takes patch or hooks, not '%s'", arg);
        o->forward_mode = arg;
        return SWCLI_NEXT;
    case OPT_RUN_FILE:
        o->run_file = arg;
        return SWCLI_NEXT;
    case 'o':
        o->output = arg; /* passed on as written (STEPWATCH_OUTPUT) */
        return SWCLI_NEXT;
    case 't':
        o->timeline = 1;
        return SWCLI_NEXT;
    case 'f': {
        /* -f was --run-file before it meant --format here as in every other command: a
         * path where a format belongs is that old use. No format name holds '.', '/' or '{'. */
        sw_format parsed;
        if (sw_format_parse(arg, &parsed) != 0 && strpbrk(arg, "./{") != NULL)
            return swcli_usage(&o->args,
                               "-f is --format, a report format, not '%s'; the run file is "
                               "--run-file %s",
                               arg, arg);
        int code = swcli_option(&o->args, opt, arg); /* the format check of every command */
        if (code == SWCLI_NEXT)
            o->format = arg; /* passed on as written (STEPWATCH_FORMAT) */
        return code;
    }
    case OPT_LIVE:
    case OPT_NO_LIVE:
        o->live = opt == OPT_LIVE ? "1" : "0"; /* the last one given wins */
        return SWCLI_NEXT;
    case OPT_ON_FULL:
        if (strcmp(arg, "drop") != 0 && strcmp(arg, "block") != 0)
            return swcli_usage(&o->args, "--on-full takes drop or block, not '%s'", arg);
        o->on_full = arg;
        return SWCLI_NEXT;
    case OPT_RING_CAPACITY: {
        long events;
        if (swcli_parse_number(arg, 1, SW_MAX_RING_CAPACITY, &events) != 0)
            return swcli_usage(&o->args,
                               "--ring-capacity takes a number of events from 1 to %u, "
                               "not '%s'",
                               SW_MAX_RING_CAPACITY, arg);
        o->ring = arg;
        return SWCLI_NEXT;
    }
    case OPT_FUNCTIONS:
        if (arg[0] == '\0')
            return swcli_usage(&o->args, "--functions takes action names: data,forward");
        o->functions = arg;
        return SWCLI_NEXT;
    case OPT_BUILTINS:
        o->builtins = 1;
        return SWCLI_NEXT;
    case OPT_DEVICE_STATS: {
        char *end = NULL;
        double seconds = arg ? strtod(arg, &end) : 0.5;
        /* A digit first: strtod would also take " 1", "+1" and "inf". */
        if (arg &&
            (arg[0] < '0' || arg[0] > '9' || *end != '\0' || !(seconds >= 0.01 && seconds <= 3600)))
            return swcli_usage(&o->args,
                               "--device-stats takes an interval in seconds from "
                               "0.01 to 3600, not '%s'",
                               arg);
        snprintf(o->device_stats, sizeof o->device_stats, "%.0f", seconds * 1000);
        return SWCLI_NEXT;
    }
    case OPT_DEVICE_TIME:
        o->device_time = 1;
        return SWCLI_NEXT;
    case OPT_NO_STEP_MEMORY:
        o->no_step_memory = 1;
        return SWCLI_NEXT;
    case OPT_MODULES: {
        char *end = NULL;
        long every = arg ? strtol(arg, &end, 10) : 0;
        if (arg && (arg[0] < '0' || arg[0] > '9' || *end != '\0' || every < 1 || every > 1000000))
            return swcli_usage(&o->args,
                               "--modules takes a step interval from 1 to 1000000, not '%s'", arg);
        o->modules = arg ? arg : "on";
        return SWCLI_NEXT;
    }
    case OPT_SERVE:
        o->serve = 1;
        return arg ? swcli_serve_option(&o->args, &o->server, 'p', arg) : SWCLI_NEXT;
    case OPT_LINGER: {
        char *end = NULL;
        double s = strtod(arg, &end);
        if (end == arg || *end != '\0' || !(s >= 0 && s <= 86400.0 * 365))
            return swcli_usage(&o->args, "--linger takes seconds (0 or more), not '%s'", arg);
        o->linger = s;
        return SWCLI_NEXT;
    }
    case OPT_FLOPS:
        o->flops = 1;
        return SWCLI_NEXT;
    case OPT_PEAK_FLOPS: {
        char *end = NULL;
        double peak = strtod(arg, &end);
        if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || !(peak > 0 && peak < 1e21))
            return swcli_usage(&o->args, "--peak-flops takes FLOP/s (e.g. 989e12), not '%s'", arg);
        o->peak_flops = arg;
        return SWCLI_NEXT;
    }
    default: /* --bind, and the common options */
        return swcli_serve_option(&o->args, &o->server, opt, arg);
    }
}

/* Parse run's options into o; optind is then the program's name. SWCLI_NEXT, or the exit
 * code to end with. */
static int run_options_parse(run_options *o, int argc, char **argv) {
    static const struct option options[] = {
        {"run-file", required_argument, NULL, OPT_RUN_FILE},
        {"output", required_argument, NULL, 'o'},
        {"timeline", no_argument, NULL, 't'},
        SWCLI_OPTION_FORMAT,
        {"on-full", required_argument, NULL, OPT_ON_FULL},
        {"ring-capacity", required_argument, NULL, OPT_RING_CAPACITY},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"forward", required_argument, NULL, OPT_FORWARD},
        {"functions", required_argument, NULL, OPT_FUNCTIONS},
        {"builtins", no_argument, NULL, OPT_BUILTINS},
        {"live", no_argument, NULL, OPT_LIVE},
        {"no-live", no_argument, NULL, OPT_NO_LIVE},
        {"device-stats", optional_argument, NULL, OPT_DEVICE_STATS},
        {"device-time", no_argument, NULL, OPT_DEVICE_TIME},
        {"no-step-memory", no_argument, NULL, OPT_NO_STEP_MEMORY},
        {"modules", optional_argument, NULL, OPT_MODULES},
        {"serve", optional_argument, NULL, OPT_SERVE},
        {"bind", required_argument, NULL, SWCLI_OPT_BIND},
        {"linger", required_argument, NULL, OPT_LINGER},
        {"flops", no_argument, NULL, OPT_FLOPS},
        {"peak-flops", required_argument, NULL, OPT_PEAK_FLOPS},
        SWCLI_OPTION_HELP,
        SWCLI_OPTION_END};
    *o = (run_options){.args = {.command = "run", .help = HELP},
                       .run_file = "stepwatch-{rank}.db",
                       .server = {.port = SWCLI_SERVE_PORT, .follow = 1},
                       .linger = isatty(STDIN_FILENO) ? -1 : 0};
    optind = 1;
    /* '+': stop at the first non-option, the program's name; -m and -c end the options too
     * (what follows is the Python program's, as with python itself). */
    int code = SWCLI_NEXT;
    for (int opt; code == SWCLI_NEXT && o->python_flag == NULL &&
                  (opt = getopt_long(argc, argv, "+f:o:thm:c:", options, NULL)) != -1;)
        code = run_option(o, opt, optarg);
    if (code == SWCLI_NEXT && o->linger > 0 && !o->serve)
        return swcli_usage(&o->args, "--linger is how long --serve stays up: give --serve too");
    if (code == SWCLI_NEXT && o->server.bind && !o->serve)
        return swcli_usage(&o->args, "--bind is where --serve listens: give --serve too");
    if (code == SWCLI_NEXT && optind == argc && o->python_flag == NULL)
        return swcli_usage(&o->args, "run needs a command: stepwatch run -- CMD ARGS... (or "
                                     "-m MODULE, -c CODE)");
    return code;
}

/* What the program reads: the run file's absolute path and the options, only those given. */
static void run_environment(const run_options *o, const char *path) {
    const struct {
        const char *name, *value;
    } vars[] = {{"STEPWATCH_RUN_FILE", path},
                {"STEPWATCH_TIMELINE", o->timeline ? "1" : NULL},
                {"STEPWATCH_FORMAT", o->format},
                {"STEPWATCH_OUTPUT", o->output},
                {"STEPWATCH_ON_FULL", o->on_full},
                {"STEPWATCH_RING_CAPACITY", o->ring},
                {"STEPWATCH_WARMUP", o->warmup},
                {"STEPWATCH_FORWARD", o->forward_mode},
                {"STEPWATCH_FUNCTIONS", o->functions},
                {"STEPWATCH_FUNCTION_BUILTINS", o->builtins ? "1" : NULL},
                {"STEPWATCH_LIVE", o->live},
                {"STEPWATCH_DEVICE_STATS", o->device_stats[0] ? o->device_stats : NULL},
                {"STEPWATCH_DEVICE_TIME", o->device_time ? "1" : NULL},
                {"STEPWATCH_STEP_MEMORY", o->no_step_memory ? "0" : NULL},
                {"STEPWATCH_MODULES", o->modules},
                {"STEPWATCH_FLOPS", o->flops ? "1" : NULL},
                {"STEPWATCH_PEAK_FLOPS", o->peak_flops}};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (vars[i].value != NULL)
            setenv(vars[i].name, vars[i].value, 1);
}

/* The command to execute for the program cmd: the Python ones instrumented (see the top of
 * this file), any other as it is. *interpreter: what torchrun_argv allocated, or NULL. */
static char **run_argv(const run_options *o, int ncmd, char **cmd, char **interpreter) {
    *interpreter = NULL;
    if (o->python_flag)
        return python_target_argv(o->python_flag, o->python_what, ncmd, cmd);
    if (is_python(cmd[0]))
        return python_argv(ncmd, cmd);
    const char *base = strrchr(cmd[0], '/');
    if (strcmp(base ? base + 1 : cmd[0], "torchrun") == 0)
        return torchrun_argv(ncmd, cmd, interpreter);
    return cmd;
}

static pid_t g_child;

/* A terminal's Ctrl-C reaches the whole process group, the child included; a SIGTERM sent
 * to us alone is passed on so the child can complete its run file. */
static void forward(int signo) {
    if (g_child > 0)
        kill(g_child, signo);
}

/* Run argv (name: the program as the user wrote it) and wait for it: its exit status, 128 + N
 * when killed by signal N, 127 when it could not be run; -1 when no child could be made. */
static int run_and_wait(char **argv, const char *name) {
    fflush(NULL);
    g_child = fork();
    if (g_child < 0) {
        swcli_error("cannot start %s: %s", name, strerror(errno));
        return -1;
    }
    if (g_child == 0) {
        execvp(argv[0], argv);
        swcli_error("cannot run %s: %s", argv[0], strerror(errno));
        _exit(127);
    }
    signal(SIGINT, SIG_IGN); /* the child gets the terminal's Ctrl-C and decides */
    signal(SIGTERM, forward);
    int status = 0;
    while (waitpid(g_child, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* --serve: every file the run-file name gives the ranks of this node ({rank} and {pid} as
 * numbers), merged into one page; the server follows the run from a second before it
 * starts. On a node without rank 0 that is the node's own ranks: it never waits for a file
 * another node writes. */
static swcli_server *start_server(run_options *o, const char *path, time_t started) {
    char *pattern = run_file_glob(path);
    if (!pattern) {
        swcli_error("out of memory");
        return NULL;
    }
    o->server.source = path;
    o->server.pattern = pattern;
    o->server.not_before = started;
    swcli_server *server = NULL;
    int rc = swcli_server_start(&o->server, &server);
    free(pattern); /* the server keeps a copy */
    o->server.pattern = NULL;
    return rc == 0 ? server : NULL;
}

/* --serve, once the program ended: the final report stays up until Ctrl-C, or --linger
 * seconds; not at all in a batch job (no terminal on standard input) unless --linger asks,
 * nor when this node wrote no run file (files: how many it wrote), where there is nothing
 * to show. */
static void serve_final(swcli_server *server, double linger, size_t files, const char *path) {
    swcli_server_finish(server);
    if (files == 0) {
        fprintf(stderr,
                "stepwatch: no run file of this node to serve (%s): the live report "
                "ends with the program\n",
                path);
        linger = 0;
    } else if (linger < 0)
        fprintf(stderr, "stepwatch: the run ended; its final report stays up until Ctrl-C\n");
    else if (linger > 0)
        fprintf(stderr,
                "stepwatch: the run ended; its final report stays up for %g s "
                "(Ctrl-C ends it sooner)\n",
                linger);
    swcli_server_wait(linger);
    swcli_server_stop(server);
}

int swcli_cmd_run(int argc, char **argv) {
    run_options o;
    int code = run_options_parse(&o, argc, argv);
    if (code != SWCLI_NEXT)
        return code;
    char **cmd = argv + optind;
    int ncmd = argc - optind;
    char *path = absolute(o.run_file);
    char *interpreter = NULL;
    char **exec_argv = run_argv(&o, ncmd, cmd, &interpreter);
    if (path == NULL || exec_argv == NULL) {
        swcli_error("out of memory");
        code = SWCLI_EXIT_IO;
    } else {
        run_environment(&o, path);
        /* The list of the run files the program's profilers name themselves (run_file=...;
         * src/profiler_new.c appends to it). */
        char list[PATH_MAX];
        const char *tmp = getenv("TMPDIR");
        snprintf(list, sizeof list, "%s/stepwatch-run-files-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int list_fd = mkstemp(list);
        if (list_fd >= 0) {
            close(list_fd);
            setenv("STEPWATCH_RUN_FILE_LIST", list, 1);
        }
        struct timespec started; /* a second early: file times come from a coarser clock */
        clock_gettime(CLOCK_REALTIME, &started);
        started.tv_sec -= 1;
        swcli_server *server = o.serve ? start_server(&o, path, started.tv_sec) : NULL;
        if (o.serve && !server)
            code = -1; /* it said why */
        else
            code = run_and_wait(exec_argv, ncmd > 0 ? cmd[0] : exec_argv[0]);
        size_t files = 0;
        if (code < 0)
            code = SWCLI_EXIT_IO;
        else if (code != 127)
            files = report_run_files(path, &started, list_fd >= 0 ? list : NULL);
        if (list_fd >= 0)
            unlink(list);
        if (server)
            serve_final(server, o.linger, files, path);
    }
    if (exec_argv != cmd)
        free(exec_argv);
    free(interpreter);
    free(path);
    return code;
}
