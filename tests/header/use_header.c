/* A user's file that includes the public header and uses its macros; check_header.sh
 * compiles it with a user's strict flags as C11 and as C++. */
#include <stepwatch.h>

#include <string.h>

static int train(sw_profiler *p) {
    sw_id forward = sw_action(p, "forward");
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int i = 0; i < 3; i++) {
        sw_step_begin(p, 8);
        SW_BEGIN(p, "data");
        SW_END(p, "data");
        sw_begin(p, forward);
        sw_end(p, forward);
        {
            SW_SCOPE(p, "backward") {
            }
        }
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    const sw_phase all = SW_PHASE_ALL;
    return all == SW_PHASE_ALL ? 0 : 1;
}

int main(void) {
    sw_options opts;
    sw_profiler *p = NULL;
    sw_snapshot *s = NULL;
    int rc;
    memset(&opts, 0, sizeof opts);
    opts.size = sizeof opts;
    opts.warmup_steps = 1;
    rc = sw_profiler_new(&opts, &p);
    if (rc != 0) {
        fprintf(stderr, "%s\n", sw_strerror(rc));
        return 1;
    }
    rc = train(p);
    if (rc == 0)
        rc = sw_snapshot_take(p, &s);
    /* The sized structs' initializers, as C (designated) and as C++ (a value-initialized
     * copy) take them. */
    sw_write_options layout = SW_WRITE_OPTIONS_INIT;
    sw_engine_options engine = SW_ENGINE_OPTIONS_INIT;
    layout.full_names = 1;
    if (rc == 0 && engine.size == sizeof engine)
        rc = sw_snapshot_write_ex(s, SW_FORMAT_CSV, stdout, &layout);
    sw_snapshot_free(s);
    sw_profiler_free(p);
    return rc == 0 ? 0 : 1;
}
