/* A user's program built against an installed stepwatch (pkg-config or CMake package). */
#include <stepwatch.h>

int main(void) {
    sw_profiler *p = NULL;
    if (sw_profiler_new(NULL, &p) != 0)
        return 1;
    SW_SCOPE(p, "forward") {
    }
    int rc = sw_report(p, SW_FORMAT_LIGHTNING, stdout);
    sw_profiler_free(p);
    return rc == 0 ? 0 : 1;
}
