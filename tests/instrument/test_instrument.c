/*
 * test_instrument.c — libstepwatch_instrument on code compiled with -finstrument-functions
 * (this file and the example MLP: see tests/instrument.cmake): per-action tables with
 * cProfile's counts (recursion, mutual recursion), known sleeps, only the thread that opened
 * the action, nested actions, fork, dladdr names, and a real C training loop (the example
 * MLP on the engine) whose forward and backward functions land in their actions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dataset.h"
#include "stepwatch.h"
#include "stepwatch/instrument.h"
#include "test_helpers.h"
#include "trainer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- code with known calls (instrumented) ---- */

int fib(int n);
int ping(int n);
int pong(int n);
void nap_ms(int ms);

int fib(int n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int ping(int n) {
    return n > 0 ? pong(n - 1) : 0;
}

int pong(int n) {
    return n > 0 ? ping(n - 1) + 1 : 0;
}

void nap_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static __attribute__((noinline)) int hidden_helper(int x) { /* no dynamic symbol */
    return x * 3;
}

/* ---- helpers (instrumented too: they run outside any action, so nothing is recorded) ---- */

static const sw_fstat *stat_of(const sw_fprofile *fp, const sw_fstats *s, const char *name) {
    for (size_t i = 0; i < s->nfuncs; i++)
        if (strcmp(sw_fprofile_func(fp, s->funcs[i].func)->name, name) == 0)
            return &s->funcs[i];
    return NULL;
}

static sw_fstats *stats_of(sw_fprofile **fp, const char *action) {
    assert_int_equal(sw_instrument_profile(fp), 0);
    sw_fstats *s = NULL;
    assert_int_equal(sw_fprofile_stats(*fp, action, &s), 0);
    return s;
}

static void test_counts_like_cprofile(void **state) {
    SW_TEST_PROFILER(p);
    assert_int_equal(sw_instrument_start(p, "forward,data"), 0);
    sw_id fwd = sw_action(p, "forward");
    fib(5); /* outside any action: not recorded */
    for (int i = 0; i < 3; i++) {
        sw_begin(p, fwd);
        fib(10);
        ping(9);
        hidden_helper(i);
        sw_end(p, fwd);
    }
    sw_fprofile *fp = NULL;
    sw_fstats *s = stats_of(&fp, "forward");
    assert_int_equal(s->spans, 3);
    const sw_fstat *f = stat_of(fp, s, "fib");
    assert_non_null(f);
    assert_int_equal(f->calls, 3 * 177);
    assert_int_equal(f->primitive_calls, 3);
    const sw_fstat *pi = stat_of(fp, s, "ping"), *po = stat_of(fp, s, "pong");
    assert_non_null(pi);
    assert_non_null(po);
    assert_int_equal(pi->calls, 3 * 5);
    assert_int_equal(pi->primitive_calls, 3);
    assert_int_equal(po->calls, 3 * 5);
    assert_int_equal(po->primitive_calls, 3);
    /* the static helper has no dynamic symbol: object+offset, for addr2line */
    int hidden = 0;
    for (size_t i = 0; i < s->nfuncs; i++)
        hidden += strstr(sw_fprofile_func(fp, s->funcs[i].func)->name, "+0x") != NULL;
    assert_int_equal(hidden, 1);
    /* the table a cProfile user reads */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(sw_instrument_write_table("forward", NULL, out), 0);
    fclose(out);
    assert_non_null(strstr(text, "Profile stats for: forward\n"));
    assert_non_null(strstr(text, "531/3"));
    assert_non_null(strstr(text, "test_instrument:0(fib)"));
    free(text);
    assert_int_equal(sw_fprofile_stats(fp, "data", &(sw_fstats *){NULL}), SW_ENOTFOUND);
    sw_fstats_free(s);
    sw_fprofile_free(fp);
    sw_instrument_stop();
    sw_profiler_free(p);
}

static void test_known_sleeps_and_collapsed_sum(void **state) {
    SW_TEST_PROFILER(p);
    assert_int_equal(sw_instrument_start(p, "data"), 0);
    sw_id data = sw_action(p, "data");
    uint64_t t0 = sw_now_ns();
    sw_begin(p, data);
    for (int i = 0; i < 5; i++)
        nap_ms(4);
    sw_end(p, data);
    uint64_t wall = sw_now_ns() - t0;
    sw_fprofile *fp = NULL;
    sw_fstats *s = stats_of(&fp, "data");
    const sw_fstat *nap = stat_of(fp, s, "nap_ms");
    assert_non_null(nap);
    assert_int_equal(nap->calls, 5);
    assert_true(nap->cumtime_ns >= 20000000u && nap->cumtime_ns <= wall);
    assert_true(s->total_ns <= wall && s->total_ns >= nap->cumtime_ns);
    /* collapsed stacks: every line starts with the action, the values sum to its time */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(sw_fprofile_write_collapsed(fp, "data", out), 0);
    fclose(out);
    uint64_t sum = 0;
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        assert_int_equal(strncmp(line, "data", 4), 0);
        sum += strtoull(strrchr(line, ' ') + 1, NULL, 10);
    }
    assert_true(lines >= 2);
    assert_true(sum + (uint64_t)lines >= s->total_ns && sum <= s->total_ns + (uint64_t)lines);
    free(text);
    sw_fstats_free(s);
    sw_fprofile_free(fp);
    sw_instrument_stop();
    sw_profiler_free(p);
}

static void *busy_outside(void *arg) { /* another thread: no action open there */
    int *stop = arg;
    while (!__atomic_load_n(stop, __ATOMIC_RELAXED))
        ping(6);
    return NULL;
}

static void *fib_inside(void *arg) { /* another thread opening the action itself */
    sw_profiler *p = arg;
    sw_id fwd = sw_action(p, "forward");
    sw_begin(p, fwd);
    fib(6);
    sw_end(p, fwd);
    return NULL;
}

static void test_only_threads_with_the_action_open(void **state) {
    SW_TEST_PROFILER(p);
    assert_int_equal(sw_instrument_start(p, "forward"), 0);
    int stop = 0;
    pthread_t other, inside;
    pthread_create(&other, NULL, busy_outside, &stop);
    sw_id fwd = sw_action(p, "forward");
    sw_begin(p, fwd);
    for (int i = 0; i < 20; i++) {
        fib(8);
        nap_ms(1);
    }
    sw_end(p, fwd);
    pthread_create(&inside, NULL, fib_inside, p);
    pthread_join(inside, NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(other, NULL);
    sw_fprofile *fp = NULL;
    sw_fstats *s = stats_of(&fp, "forward");
    assert_null(stat_of(fp, s, "ping"));
    assert_int_equal(stat_of(fp, s, "fib")->calls, 20 * 67 + 25);
    assert_int_equal(s->spans, 2);
    sw_fstats_free(s);
    sw_fprofile_free(fp);
    sw_instrument_stop();
    sw_profiler_free(p);
}

static void test_nested_actions_and_fork(void **state) {
    SW_TEST_PROFILER(p);
    assert_int_equal(sw_instrument_start(p, "step,forward"), 0);
    sw_id step = sw_action(p, "step_outer"), fwd = sw_action(p, "forward");
    assert_int_equal(sw_instrument_start(p, "step_outer"), 0); /* more actions later */
    sw_begin(p, step);
    fib(4);
    sw_begin(p, fwd);
    fib(6);
#ifndef __SANITIZE_THREAD__
    /* (ThreadSanitizer takes the core's locks, held across fork by its atfork handlers and
     * re-made in the child, for held ones: a false lock-order report, so not under TSan.) */
    pid_t pid = fork();
    if (pid == 0) { /* the child: nothing open, nothing recorded */
        fib(3);
        sw_fprofile *fp = NULL;
        int ok = sw_instrument_profile(&fp) == 0 && sw_fprofile_tree_count(fp) == 0;
        sw_fprofile_free(fp);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#endif
    sw_end(p, fwd);
    sw_end(p, step);
    sw_fprofile *fp = NULL;
    sw_fstats *outer = stats_of(&fp, "step_outer"), *inner = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "forward", &inner), 0);
    assert_int_equal(stat_of(fp, outer, "fib")->calls, 9);
    assert_int_equal(stat_of(fp, inner, "fib")->calls, 25);
    const sw_fstat *nested = stat_of(fp, outer, "<stepwatch action forward>");
    assert_non_null(nested);
    assert_int_equal(nested->calls, 1);
    assert_true(nested->cumtime_ns >= inner->total_ns / 2);
    sw_fstats_free(outer);
    sw_fstats_free(inner);
    sw_fprofile_free(fp);
    sw_instrument_stop();
    sw_profiler_free(p);
}

static void test_errors(void **state) {
    SW_TEST_PROFILER(p);
    SW_TEST_PROFILER(q);
    assert_int_equal(sw_instrument_start(NULL, "forward"), SW_EINVAL);
    assert_int_equal(sw_instrument_start(p, NULL), SW_EINVAL);
    assert_int_equal(sw_instrument_start(p, ",,"), SW_EINVAL);
    assert_int_equal(sw_instrument_start(p, "forward"), 0);
    assert_int_equal(sw_instrument_start(q, "forward"), SW_ESTATE); /* one per process */
    sw_instrument_stop();
    sw_fprofile *fp = NULL;
    assert_int_equal(sw_instrument_profile(&fp), SW_ESTATE);
    sw_profiler_free(p);
    sw_profiler_free(q);
}

/* ---- a real C training loop: the example MLP on the engine ---- */

static void test_example_mlp_functions_per_action(void **state) {
    dataset tr;
    assert_int_equal(dataset_generate(&tr, 256, 10, 11, 12), 0);
    const int sizes[] = {784, 32, 10};
    trainer t;
    assert_int_equal(trainer_init(&t, sizes, 3, 32, 0, 0.05f, 5), 0);
    loader tl;
    assert_int_equal(loader_init(&tl, &tr, 32, 1, 0, 1), 0);
    sw_engine_options eo = SW_ENGINE_OPTIONS_INIT;
    eo.max_epochs = 2;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&eo, &e), 0);
    assert_int_equal(sw_instrument_start(sw_engine_profiler(e), "forward,backward,optimizer"), 0);
    sw_data_source ts = {sizeof(sw_data_source), loader_next, loader_reset, &tl,
                         loader_length(&tl)};
    sw_engine_set_train(e, &ts, trainer_train_step, &t);
    assert_int_equal(sw_engine_run(e), 0);
    int64_t steps = 2 * loader_length(&tl);
    sw_fprofile *fp = NULL;
    sw_fstats *fwd = stats_of(&fp, "forward"), *bwd = NULL, *opt = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "backward", &bwd), 0);
    assert_int_equal(sw_fprofile_stats(fp, "optimizer", &opt), 0);
    assert_int_equal(fwd->spans, steps);
    assert_int_equal(stat_of(fp, fwd, "mlp_forward")->calls, steps);
    assert_int_equal(stat_of(fp, bwd, "mlp_backward")->calls, steps);
    assert_int_equal(stat_of(fp, opt, "mlp_sgd")->calls, steps);
    assert_null(stat_of(fp, fwd, "mlp_backward"));
    /* the forward's function time is the forward's time, all of it inside mlp_forward */
    assert_true(stat_of(fp, fwd, "mlp_forward")->cumtime_ns >= fwd->total_ns * 9 / 10);
    sw_fstats_free(fwd);
    sw_fstats_free(bwd);
    sw_fstats_free(opt);
    sw_fprofile_free(fp);
    sw_instrument_stop();
    sw_engine_free(e);
    loader_free(&tl);
    trainer_free(&t);
    dataset_free(&tr);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_like_cprofile),
        cmocka_unit_test(test_known_sleeps_and_collapsed_sum),
        cmocka_unit_test(test_only_threads_with_the_action_open),
        cmocka_unit_test(test_nested_actions_and_fork),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_example_mlp_functions_per_action),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
