/* test_fork.c — a child made by fork() starts empty and leaves the parent's data alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_helpers.h"

static void test_child_starts_clean(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    sw_id a = sw_action(p, "parent_work");
    sw_step_begin(p, 4);
    sw_begin(p, a);
    sw_end(p, a);
    sw_begin(p, a); /* open across the fork */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sw_snapshot *s = NULL;
        int ok = sw_snapshot_take(p, &s) == 0 &&
                 sw_snapshot_find(s, "parent_work", "all") == NULL && s->steps == 0 &&
                 s->misuse.open_at_snapshot == 0;
        sw_snapshot_free(s);
        /* The child records on its own. */
        sw_begin(p, a);
        sw_end(p, a);
        ok = ok && sw_snapshot_take(p, &s) == 0 &&
             sw_snapshot_find(s, "parent_work", "all")->stats.count == 1 &&
             s->misuse.end_without_begin == 0;
        sw_snapshot_free(s);
        sw_profiler_free(p);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    sw_end(p, a);
    sw_step_end(p);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_int_equal(sw_snapshot_find(s, "parent_work", "all")->stats.count, 2);
    assert_int_equal(s->steps, 1);
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_child_starts_clean)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
