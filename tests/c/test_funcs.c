/*
 * test_funcs.c — function profiles (stepwatch/functions.h): cProfile's numbers from call
 * trees (recursion, mutual recursion, edges), the table's text, collapsed stacks, merging,
 * the node limit, the shadow stack's rules (cut-off calls, nested actions, returns that are
 * not the top), and the run file: written through sw_run_add_functions, read back, merged
 * across ranks, exported as collapsed stacks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "stepwatch.h"
#include "test_helpers.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* f(file, line, name) added under key; its index. */
static uint32_t func(sw_fprofile *fp, uint64_t key, const char *name) {
    sw_func f = {.file = "/src/model.py", .line = (uint32_t)key, .name = name};
    uint32_t index;
    assert_int_equal(sw_fprofile_add_func(fp, key, &f, &index), 0);
    return index;
}

/* A child of parent for key (made if new) with one more call of total/self ns. */
static uint32_t call(sw_ftree *t, uint32_t parent, uint64_t key, uint32_t f, uint64_t total,
                     uint64_t self) {
    uint32_t n = sw_ftree_child(t, parent, key);
    if (n == SW_FNODE_NONE)
        n = sw_ftree_add_child(t, parent, key, f);
    assert_int_not_equal(n, SW_FNODE_NONE);
    sw_ftree_record(t, n, total, self);
    return n;
}

static const sw_fstat *stat_named(const sw_fprofile *fp, const sw_fstats *s, const char *name) {
    for (size_t i = 0; i < s->nfuncs; i++)
        if (strcmp(sw_fprofile_func(fp, s->funcs[i].func)->name, name) == 0)
            return &s->funcs[i];
    return NULL;
}

static char *text_of(int (*write)(const sw_fprofile *, const char *, FILE *), const sw_fprofile *fp,
                     const char *action) {
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_int_equal(write(fp, action, out), 0);
    fclose(out);
    return buf;
}

static int write_table(const sw_fprofile *fp, const char *action, FILE *out) {
    sw_ftable_options o = {.size = sizeof(sw_ftable_options), .max_lines = 2};
    return sw_fprofile_write_table(fp, action, &o, out);
}

/* step: run (1 call, 100 ns) calls rec three levels deep (rec -> rec -> rec) and helper. */
static sw_fprofile *recursion_profile(void) {
    sw_fprofile *fp = NULL;
    assert_int_equal(sw_fprofile_new(&fp), 0);
    uint32_t run = func(fp, 10, "run"), rec = func(fp, 20, "rec"), helper = func(fp, 30, "helper");
    sw_ftree *t = sw_fprofile_add_tree(fp, "step");
    sw_ftree_record(t, 0, 120, 20);
    uint32_t r = call(t, 0, 10, run, 100, 10);
    uint32_t a = call(t, r, 20, rec, 80, 20);
    uint32_t b = call(t, a, 20, rec, 60, 30);
    call(t, b, 20, rec, 30, 30);
    call(t, r, 30, helper, 10, 10);
    call(t, r, 30, helper, 0, 0);
    return fp;
}

static void test_stats_count_like_cprofile(void **state) {
    sw_fprofile *fp = recursion_profile();
    sw_fstats *s = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "step", &s), 0);
    assert_int_equal(s->spans, 1);
    assert_int_equal(s->total_ns, 120);
    assert_int_equal(s->self_ns, 20);
    const sw_fstat *rec = stat_named(fp, s, "rec");
    assert_int_equal(rec->calls, 3);
    assert_int_equal(rec->primitive_calls, 1); /* "3/1" */
    assert_int_equal(rec->tottime_ns, 80);     /* every level's own time */
    assert_int_equal(rec->cumtime_ns, 80);     /* the outermost call only */
    const sw_fstat *helper = stat_named(fp, s, "helper");
    assert_int_equal(helper->calls, 2);
    assert_int_equal(helper->primitive_calls, 2);
    assert_string_equal(sw_fprofile_func(fp, s->funcs[0].func)->name, "run"); /* cumulative */
    /* edges: run -> rec once; rec -> rec twice, the inner one recursive for that pair */
    int found = 0;
    for (size_t i = 0; i < s->nedges; i++) {
        const sw_fedge *e = &s->edges[i];
        const char *from = sw_fprofile_func(fp, e->caller)->name;
        const char *to = sw_fprofile_func(fp, e->callee)->name;
        if (strcmp(from, "rec") == 0 && strcmp(to, "rec") == 0) {
            assert_int_equal(e->calls, 2);
            assert_int_equal(e->primitive_calls, 1);
            assert_int_equal(e->cumtime_ns, 60);
            found++;
        }
        if (strcmp(from, "run") == 0 && strcmp(to, "rec") == 0) {
            assert_int_equal(e->calls, 1);
            assert_int_equal(e->cumtime_ns, 80);
            found++;
        }
    }
    assert_int_equal(found, 2);
    sw_fstats_free(s);
    assert_int_equal(sw_fprofile_stats(fp, "nope", &s), SW_ENOTFOUND);
    sw_fprofile_free(fp);
}

static void test_table_text(void **state) {
    sw_fprofile *fp = recursion_profile();
    sw_fprofile_set_unit(fp, 1e6); /* units of 1 ms: seconds with three decimals */
    char *text = text_of(write_table, fp, NULL);
    const char *want = "Profile stats for: step\n"
                       "         6 function calls (4 primitive calls) in 0.100 seconds\n"
                       "\n"
                       "   Ordered by: cumulative time\n"
                       "   List reduced from 3 to 2 due to restriction <2>\n"
                       "\n"
                       "   ncalls  tottime  percall  cumtime  percall filename:lineno(function)\n"
                       "        1    0.010    0.010    0.100    0.100 model.py:10(run)\n"
                       "      3/1    0.080    0.027    0.080    0.080 model.py:20(rec)\n"
                       "\n"
                       "\n";
    assert_string_equal(text, want);
    free(text);
    /* built-ins print as pstats prints them */
    char label[128];
    sw_func b = {.file = "~", .line = 0, .name = "<built-in method time.sleep>"};
    sw_func_label(&b, 0, label, sizeof label);
    assert_string_equal(label, "{built-in method time.sleep}");
    sw_ftable_options bad = {.size = sizeof(sw_ftable_options), .sort = "bogus"};
    assert_int_equal(sw_fprofile_write_table(fp, "step", &bad, stdout), SW_EINVAL);
    sw_fprofile_free(fp);
}

static void test_collapsed_and_merge(void **state) {
    sw_fprofile *fp = recursion_profile();
    /* a second thread's tree of the same action: merged path by path */
    sw_ftree *t2 = sw_fprofile_add_tree(fp, "step");
    sw_ftree_record(t2, 0, 50, 10);
    uint32_t r = call(t2, 0, 10, 0, 40, 40);
    (void)r;
    char *text = text_of(sw_fprofile_write_collapsed, fp, "step");
    const char *want =
        "step 30\n"
        "step;model.py:10(run) 50\n"
        "step;model.py:10(run);model.py:20(rec) 20\n"
        "step;model.py:10(run);model.py:20(rec);model.py:20(rec) 30\n"
        "step;model.py:10(run);model.py:20(rec);model.py:20(rec);model.py:20(rec) 30\n"
        "step;model.py:10(run);model.py:30(helper) 10\n";
    assert_string_equal(text, want);
    free(text);
    sw_fstats *s = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "step", &s), 0);
    assert_int_equal(s->spans, 2);
    assert_int_equal(stat_named(fp, s, "run")->calls, 2);
    sw_fstats_free(s);
    /* into another profile whose keys differ: matched by label */
    sw_fprofile *other = NULL;
    assert_int_equal(sw_fprofile_new(&other), 0);
    sw_func f = {.file = "/src/model.py", .line = 20, .name = "rec"};
    uint32_t i;
    assert_int_equal(sw_fprofile_add_func(other, 0, &f, &i), 0);
    assert_int_equal(sw_fprofile_merge_into(other, fp), 0);
    assert_int_equal(sw_fprofile_func_count(other), 3);
    assert_int_equal(sw_fprofile_tree_count(other), 1);
    assert_int_equal(sw_fprofile_stats(other, "step", &s), 0);
    assert_int_equal(stat_named(other, s, "rec")->calls, 3);
    sw_fstats_free(s);
    sw_fprofile_free(other);
    sw_fprofile_free(fp);
}

static void test_node_limit_folds(void **state) {
    sw_fprofile *fp = NULL;
    assert_int_equal(sw_fprofile_new(&fp), 0);
    uint32_t f = func(fp, 1, "f");
    sw_ftree *t = sw_fprofile_add_tree(fp, "a");
    uint32_t parent = 0;
    for (uint32_t i = 1; i < SW_FTREE_MAX_NODES; i++) /* one deep path: every node new */
        parent = sw_ftree_add_child(t, parent, 1, f);
    assert_int_equal(sw_ftree_size(t), SW_FTREE_MAX_NODES);
    assert_int_equal(sw_ftree_add_child(t, parent, 1, f), SW_FNODE_NONE);
    assert_int_equal(sw_ftree_child(t, 0, 1), 1);
    sw_ftree_fold(t, 5);
    sw_fstats *s = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "a", &s), 0);
    assert_int_equal(s->folded_calls, 5);
    sw_fstats_free(s);
    sw_fprofile_free(fp);
}

/* ---- the shadow stack ---- */

static sw_ftree *tree_of(sw_fprofile *fp, const char *action) {
    sw_ftree *t = sw_fprofile_add_tree(fp, action);
    assert_non_null(t);
    return t;
}

/* enter key (adding its function when new) */
static int enter(sw_fstack *s, sw_fprofile *fp, uint64_t key, const char *name) {
    int r = sw_fstack_enter(s, key, (uintptr_t)key);
    if (r == 0)
        r = sw_fstack_enter_new(s, key, (uintptr_t)key, func(fp, key, name));
    return r;
}

static void test_stack_rules(void **state) {
    sw_fprofile *fp = NULL;
    sw_fstack *s = NULL;
    assert_int_equal(sw_fprofile_new(&fp), 0);
    assert_int_equal(sw_fstack_new(&s), 0);
    int owner;
    assert_int_equal(sw_fstack_enter(s, 1, 1), -1); /* no action open: nothing */
    sw_fstack_leave(s, 99);                         /* a return from before: ignored */
    assert_int_equal(sw_fstack_open(s, tree_of(fp, "outer"), &owner, 1), 0);
    assert_int_equal(enter(s, fp, 100, "loop"), 1);
    /* the inner action begins inside a call that returns while it goes on */
    assert_int_equal(enter(s, fp, 200, "enter_cm"), 1);
    assert_int_equal(sw_fstack_open(s, tree_of(fp, "inner"), &owner, 2), 0);
    sw_fstack_leave(s, 200); /* enter_cm returns: it is the top, popped */
    assert_int_equal(sw_fstack_depth(s), 1);
    assert_int_equal(enter(s, fp, 300, "work"), 1);
    sw_fstack_leave(s, 300);
    assert_int_equal(enter(s, fp, 400, "exit_cm"), 1); /* still running when inner ends */
    assert_int_equal(sw_fstack_find(s, &owner, 2), 1);
    sw_fstack_close_top(s, sw_fclock_now());
    assert_int_equal(sw_fstack_depth(s), 1); /* exit_cm was cut */
    sw_fstack_leave(s, 400);                 /* its return changes nothing */
    assert_int_equal(sw_fstack_depth(s), 1);
    sw_fstack_leave(s, 100);
    sw_fstack_close_top(s, sw_fclock_now());
    assert_int_equal(sw_fstack_open_count(s), 0);
    sw_fstats *outer = NULL, *inner = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "outer", &outer), 0);
    assert_int_equal(sw_fprofile_stats(fp, "inner", &inner), 0);
    assert_non_null(stat_named(fp, outer, "loop"));
    assert_non_null(stat_named(fp, outer, "enter_cm"));
    assert_null(stat_named(fp, outer, "work"));
    assert_non_null(stat_named(fp, outer, "<stepwatch action inner>"));
    assert_int_equal(stat_named(fp, inner, "work")->calls, 1);
    assert_int_equal(stat_named(fp, inner, "exit_cm")->calls, 1);
    /* the nested action's node hangs under the call running when it ended (loop) */
    int under_loop = 0;
    for (size_t i = 0; i < outer->nedges; i++)
        under_loop += strcmp(sw_fprofile_func(fp, outer->edges[i].caller)->name, "loop") == 0 &&
                      strcmp(sw_fprofile_func(fp, outer->edges[i].callee)->name,
                             "<stepwatch action inner>") == 0;
    assert_int_equal(under_loop, 1);
    sw_fstats_free(outer);
    sw_fstats_free(inner);
    for (int i = 0; i < SW_FSTACK_MAX_OPEN; i++)
        assert_int_equal(sw_fstack_open(s, tree_of(fp, "x"), &owner, 3), 0);
    assert_int_equal(sw_fstack_open(s, tree_of(fp, "x"), &owner, 3), SW_ELIMIT);
    sw_fstack_reset(s);
    assert_int_equal(sw_fstack_open_count(s), 0);
    sw_fstack_free(s);
    sw_fprofile_free(fp);
}

/* ---- the run file ---- */

static void write_rank(const char *path, int rank) {
    sw_options o = {.size = sizeof(sw_options), .run_file = path, .rank = rank, .world_size = 2};
    sw_profiler *p = NULL;
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    sw_fprofile *fp = recursion_profile();
    assert_int_equal(sw_run_add_functions(p, fp), 0);
    assert_int_equal(sw_run_add_functions(p, fp), 0); /* adds: twice the calls */
    sw_fprofile_free(fp);
    sw_profiler_free(p);
}

static void test_run_file_round_trip(void **state) {
    char a[300], b[300], merged[300];
    snprintf(a, sizeof a, "%s/rank0.db", sw_test_dir);
    snprintf(b, sizeof b, "%s/rank1.db", sw_test_dir);
    snprintf(merged, sizeof merged, "%s/all.db", sw_test_dir);
    write_rank(a, 0);
    write_rank(b, 1);
    sw_run *run = NULL;
    assert_int_equal(sw_run_open(a, &run), 0);
    sw_fprofile *fp = NULL;
    assert_int_equal(sw_run_functions(run, -1, &fp), 0);
    sw_fstats *s = NULL;
    assert_int_equal(sw_fprofile_stats(fp, "step", &s), 0);
    assert_int_equal(stat_named(fp, s, "rec")->calls, 6);
    assert_int_equal(stat_named(fp, s, "rec")->primitive_calls, 2);
    assert_int_equal(s->total_ns, 240);
    sw_fstats_free(s);
    sw_fprofile_free(fp);
    assert_int_equal(sw_run_functions(run, 5, &fp), SW_ENOTFOUND);
    sw_run_close(run);
    const char *paths[] = {a, b};
    assert_int_equal(sw_run_merge(paths, 2, merged), 0);
    assert_int_equal(sw_run_open(merged, &run), 0);
    assert_int_equal(sw_run_functions(run, -1, &fp), 0);
    assert_int_equal(sw_fprofile_stats(fp, "step", &s), 0);
    assert_int_equal(stat_named(fp, s, "rec")->calls, 12);
    sw_fstats_free(s);
    sw_fprofile_free(fp);
    assert_int_equal(sw_run_functions(run, 1, &fp), 0);
    sw_fprofile_free(fp);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(sw_run_export_collapsed(run, out), 0);
    fclose(out);
    assert_non_null(strstr(text, "step;model.py:10(run);model.py:20(rec) 80\n"));
    free(text);
    sw_run_close(run);
    /* a profiler without a run file, and a run file without profiles */
    SW_TEST_PROFILER(p);
    fp = recursion_profile();
    assert_int_equal(sw_run_add_functions(p, fp), SW_ENOTFOUND);
    sw_fprofile_free(fp);
    sw_profiler_free(p);
    snprintf(a, sizeof a, "%s/empty.db", sw_test_dir);
    sw_options o = {.size = sizeof(sw_options), .run_file = a};
    assert_int_equal(sw_profiler_new(&o, &p), 0);
    sw_profiler_free(p);
    assert_int_equal(sw_run_open(a, &run), 0);
    assert_int_equal(sw_run_functions(run, -1, &fp), SW_ENOTFOUND);
    sw_run_close(run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_count_like_cprofile),
        cmocka_unit_test(test_table_text),
        cmocka_unit_test(test_collapsed_and_merge),
        cmocka_unit_test(test_node_limit_folds),
        cmocka_unit_test(test_stack_rules),
        cmocka_unit_test(test_run_file_round_trip),
    };
    return cmocka_run_group_tests(tests, sw_test_make_dir, sw_test_remove_dir);
}
