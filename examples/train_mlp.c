/*
 * train_mlp.c — the main job: a real MLP trained in C on the stepwatch engine, profiled.
 *
 *   train_mlp [--mnist DIR] [--epochs N] [--batch N] [--hidden N] [--sgd] [--lr F]
 *             [--delay-ms F] [--train N] [--valid N] [--seed N]
 *             [--json PATH] [--csv PATH] [--handlers-csv PATH] [--run-file PATH]
 *             [--timeline] [--quiet]
 *
 * With --mnist DIR it reads DIR/train-images-idx3-ubyte, train-labels-idx1-ubyte,
 * t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (gunzipped); otherwise it generates a
 * data set. --delay-ms makes every batch load that much slower (a sleep), so the measured
 * data wait can be checked against a known truth. Without --run-file, the run file named
 * by STEPWATCH_RUN_FILE (set by `stepwatch run -- train_mlp`) is written, if any.
 */
#include "dataset.h"
#include "trainer.h"

#include "stepwatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct args {
    const char *mnist, *json, *csv, *handlers_csv, *run_file;
    int epochs, batch, hidden, adam, ntrain, nvalid, quiet, timeline;
    double lr, delay_ms;
    unsigned long long seed;
} args;

static int usage(const char *msg) {
    fprintf(stderr,
            "train_mlp: %s\n"
            "usage: train_mlp [--mnist DIR] [--epochs N] [--batch N] [--hidden N] [--sgd]\n"
            "                 [--lr F] [--delay-ms F] [--train N] [--valid N] [--seed N]\n"
            "                 [--json PATH] [--csv PATH] [--handlers-csv PATH] [--run-file PATH]\n"
            "                 [--timeline] [--quiet]\n",
            msg);
    return 2;
}

/* A positive number from a command-line value, or -1. */
static double parse_number(const char *s) {
    char *end = NULL;
    double v = s ? strtod(s, &end) : -1;
    return s && end != s && *end == '\0' && v >= 0 ? v : -1;
}

static int parse_args(int argc, char **argv, args *a) {
    *a = (args){.epochs = 3,
                .batch = 64,
                .hidden = 128,
                .adam = 1,
                .ntrain = 8000,
                .nvalid = 2000,
                .lr = -1,
                .seed = 42};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double num = parse_number(v);
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage("options");
            return 1;
        }
        if (!strcmp(o, "--sgd")) {
            a->adam = 0;
            continue;
        }
        if (!strcmp(o, "--quiet")) {
            a->quiet = 1;
            continue;
        }
        if (!strcmp(o, "--timeline")) {
            a->timeline = 1;
            continue;
        }
        if (!v)
            return usage("missing value after an option");
        i++;
        if (!strcmp(o, "--mnist"))
            a->mnist = v;
        else if (!strcmp(o, "--json"))
            a->json = v;
        else if (!strcmp(o, "--csv"))
            a->csv = v;
        else if (!strcmp(o, "--handlers-csv"))
            a->handlers_csv = v;
        else if (!strcmp(o, "--run-file"))
            a->run_file = v;
        else if (num < 0)
            return usage("option values must be non-negative numbers");
        else if (!strcmp(o, "--epochs"))
            a->epochs = (int)num;
        else if (!strcmp(o, "--batch"))
            a->batch = (int)num;
        else if (!strcmp(o, "--hidden"))
            a->hidden = (int)num;
        else if (!strcmp(o, "--lr"))
            a->lr = num;
        else if (!strcmp(o, "--delay-ms"))
            a->delay_ms = num;
        else if (!strcmp(o, "--train"))
            a->ntrain = (int)num;
        else if (!strcmp(o, "--valid"))
            a->nvalid = (int)num;
        else if (!strcmp(o, "--seed"))
            a->seed = (unsigned long long)num;
        else
            return usage("unknown option");
    }
    if (a->epochs < 1 || a->batch < 1 || a->hidden < 1 || a->ntrain < 1)
        return usage("--epochs, --batch, --hidden and --train must be at least 1");
    if (a->lr < 0)
        a->lr = a->adam ? 1e-3 : 0.05;
    return 0;
}

static int load_data(const args *a, dataset *train, dataset *valid) {
    if (!a->mnist) {
        int rc = dataset_generate(train, a->ntrain, 10, a->seed, a->seed + 1);
        if (rc == 0 && a->nvalid > 0)
            rc = dataset_generate(valid, a->nvalid, 10, a->seed, a->seed + 2);
        if (rc < 0)
            fprintf(stderr, "train_mlp: generating data: %s\n", sw_strerror(rc));
        return rc;
    }
    char p1[4096], p2[4096], err[512] = "";
    snprintf(p1, sizeof p1, "%s/train-images-idx3-ubyte", a->mnist);
    snprintf(p2, sizeof p2, "%s/train-labels-idx1-ubyte", a->mnist);
    int rc = dataset_load_mnist(train, p1, p2, err, sizeof err);
    if (rc == 0) {
        snprintf(p1, sizeof p1, "%s/t10k-images-idx3-ubyte", a->mnist);
        snprintf(p2, sizeof p2, "%s/t10k-labels-idx1-ubyte", a->mnist);
        rc = dataset_load_mnist(valid, p1, p2, err, sizeof err);
    }
    if (rc < 0)
        fprintf(stderr, "train_mlp: %s (%s)\n", err, sw_strerror(rc));
    return rc;
}

/* EPOCH_COMPLETED: close the epoch's figures and print them. */
typedef struct run_ctx {
    trainer *t;
    int quiet;
} run_ctx;

static int log_epoch(sw_engine *e, sw_event ev, void *user) {
    run_ctx *c = user;
    trainer_epoch_done(c->t);
    const sw_engine_state *s = sw_engine_get_state(e);
    int k = c->t->epochs - 1;
    if (!c->quiet)
        printf("epoch %llu/%llu  train loss %.4f  valid loss %.4f  valid accuracy %.2f%%\n",
               (unsigned long long)s->epoch, (unsigned long long)s->max_epochs, c->t->train_loss[k],
               c->t->valid_loss[k], 100 * c->t->valid_acc[k]);
    return 0;
}

/* ITERATION_COMPLETED every 50: a progress line on stderr. */
static int log_progress(sw_engine *e, sw_event ev, void *user) {
    const run_ctx *c = user;
    const sw_engine_state *s = sw_engine_get_state(e);
    if (!c->quiet)
        fprintf(stderr, "  iteration %llu  loss %.4f\n", (unsigned long long)s->iteration,
                s->output);
    return 0;
}

static int write_json(sw_engine *e, FILE *f) {
    return sw_report(sw_engine_profiler(e), SW_FORMAT_JSON, f);
}

/* Write a file with one of the engine's writers; 0 or a negative SW_E* code (said on stderr). */
static int write_file(sw_engine *e, const char *path, int (*write)(sw_engine *, FILE *)) {
    /* All or nothing: a failed write leaves an older file of that name as it was. */
    sw_output *out = NULL;
    int rc = sw_output_open(path, &out);
    if (rc == 0) {
        rc = write(e, sw_output_stream(out));
        if (rc == 0)
            rc = sw_output_commit(out);
        else
            sw_output_abort(out);
    }
    if (rc < 0)
        fprintf(stderr, "train_mlp: writing %s: %s\n", path,
                *sw_last_error() ? sw_last_error() : sw_strerror(rc));
    return rc;
}

static int write_handlers_csv(sw_engine *e, FILE *f) {
    return sw_engine_write_handlers_csv(e, f);
}

static void section(const char *title) {
    printf("\n==== %s ====\n", title);
}

int main(int argc, char **argv) {
    args a;
    int prc = parse_args(argc, argv, &a);
    if (prc != 0)
        return prc == 1 ? 0 : 2;
    dataset train = {0}, valid = {0};
    if (load_data(&a, &train, &valid) < 0)
        return 3;

    int sizes[3] = {train.dim, a.hidden, train.classes};
    trainer t;
    loader train_loader, valid_loader;
    int rc = trainer_init(&t, sizes, 3, a.batch, a.adam, (float)a.lr, a.seed);
    uint64_t delay = (uint64_t)(a.delay_ms * 1e6);
    if (rc == 0)
        rc = loader_init(&train_loader, &train, a.batch, 1, delay, a.seed);
    if (rc == 0 && valid.n > 0)
        rc = loader_init(&valid_loader, &valid, a.batch, 0, delay, a.seed);
    if (rc < 0) {
        fprintf(stderr, "train_mlp: setup: %s\n", sw_strerror(rc));
        return 1;
    }

    sw_options po = SW_OPTIONS_INIT;
    po.name = "train_mlp";
    po.warmup_steps = 1;
    /* Without --run-file, the core takes STEPWATCH_RUN_FILE/STEPWATCH_TIMELINE from the
     * environment (`stepwatch run -- train_mlp`). */
    po.run_file = a.run_file;
    po.timeline = a.timeline;
    sw_engine_options eo = SW_ENGINE_OPTIONS_INIT;
    eo.profiler_options = &po;
    eo.max_epochs = (uint64_t)a.epochs;
    eo.csv_path = a.csv;
    eo.handler_rows = a.handlers_csv ? 100000 : 0; /* the last 100,000 per column */
    sw_engine *e = NULL;
    rc = sw_engine_new(&eo, &e);
    if (rc < 0) {
        fprintf(stderr, "train_mlp: cannot start the profiler%s%s: %s\n",
                po.run_file ? " with run file " : "", po.run_file ? po.run_file : "",
                sw_strerror(rc));
        return 1;
    }
    sw_data_source ts = {sizeof(sw_data_source), loader_next, loader_reset, &train_loader,
                         loader_length(&train_loader)};
    sw_engine_set_train(e, &ts, trainer_train_step, &t);
    if (valid.n > 0) {
        sw_data_source vs = {sizeof(sw_data_source), loader_next, loader_reset, &valid_loader,
                             loader_length(&valid_loader)};
        sw_engine_set_valid(e, &vs, trainer_valid_step, &t);
    }
    run_ctx ctx = {&t, a.quiet};
    sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "log_epoch", log_epoch, &ctx, 1);
    sw_engine_on(e, SW_EVENT_ITERATION_COMPLETED, "log_progress", log_progress, &ctx, 50);

    if (!a.quiet) {
        printf("train_mlp: %s data, %d train / %d valid samples, MLP %d-%d-%d, %s lr %g, "
               "batch %d, %d epochs, data delay %.1f ms\n",
               a.mnist ? "MNIST" : "generated", train.n, valid.n, sizes[0], sizes[1], sizes[2],
               a.adam ? "Adam" : "SGD", a.lr, a.batch, a.epochs, a.delay_ms);
        section("training loop (show_training_loop)");
        sw_engine_show_training_loop(e, stdout);
        section("training");
    }
    rc = sw_engine_run(e);
    if (rc < 0)
        fprintf(stderr, "train_mlp: the run stopped: %s\n", sw_strerror(rc));

    sw_profiler *p = sw_engine_profiler(e);
    if (!a.quiet) {
        printf("first batch loss %.4f, last epoch train loss %.4f\n", t.first_batch_loss,
               t.epochs ? t.train_loss[t.epochs - 1] : 0.0);
        section("stepwatch");
        sw_report(p, SW_FORMAT_TABLE, stdout);
        section("per step split (fastxtend)");
        sw_report(p, SW_FORMAT_FASTXTEND, stdout);
        section("Ignite BasicTimeProfiler");
        sw_engine_print_basic(e, stdout);
        section("Ignite HandlersTimeProfiler");
        sw_engine_print_handlers(e, stdout);
        section("thunder TimeProfiler");
        sw_time_profiler tp;
        sw_time_profiler_init(&tp);
        const char *extra[] = {"backward", "optimizer step", "total train downtime"};
        sw_time_profiler_select(&tp, extra, 3);
        sw_time_profiler_write(&tp, e, stdout);
        if (delay) {
            const sw_stats *df = sw_engine_measure_stats(e, SW_MEASURE_DATAFLOW);
            printf("\ndata wait: measured %.3f ms per batch; simulated delay %.3f ms (slept "
                   "%.3f ms per batch)\n",
                   df->mean_ns / 1e6, a.delay_ms,
                   train_loader.batches ? train_loader.slept_ns / 1e6 / train_loader.batches : 0.0);
        }
    }
    int wrc = a.json ? write_file(e, a.json, write_json) : 0;
    if (a.handlers_csv && write_file(e, a.handlers_csv, write_handlers_csv) < 0)
        wrc = SW_EIO;

    sw_engine_free(e);
    loader_free(&train_loader);
    if (valid.n > 0)
        loader_free(&valid_loader);
    trainer_free(&t);
    dataset_free(&train);
    dataset_free(&valid);
    return rc < 0 || wrc < 0 ? 1 : 0;
}
