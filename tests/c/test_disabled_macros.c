/* test_disabled_macros.c — with -DSW_DISABLE the macros compile to nothing: no action is even
 * interned. */
#define SW_DISABLE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_helpers.h"

static void test_macros_vanish(void **state) {
    (void)state;
    SW_TEST_PROFILER(p, 0);
    int body_ran = 0;
    SW_BEGIN(p, "gone");
    SW_END(p, "gone");
    SW_SCOPE(p, "gone_too") {
        body_ran++;
    }
    assert_int_equal(body_ran, 1);
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(p, &s), 0);
    assert_null(sw_snapshot_find(s, "gone", "all"));
    assert_null(sw_snapshot_find(s, "gone_too", "all"));
    sw_snapshot_free(s);
    sw_profiler_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_macros_vanish)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
