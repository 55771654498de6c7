/*
 * stepwatch/live.h — what a run looks like right now: the figures of the live status line,
 * over a sliding window, for anyone who wants them while the run goes on (the status line
 * itself, a TensorBoard writer, a logger). Included by stepwatch.h; do not include directly.
 */
#ifndef STEPWATCH_LIVE_H
#define STEPWATCH_LIVE_H
#ifdef __cplusplus
extern "C" {
#endif

/* The last window of a run. Undefined figures are NaN (no step ended in the window, no batch
 * sizes, no steady-state step yet). */
typedef struct sw_live_values {
    size_t size;          /* sizeof(sw_live_values) as the caller was compiled, set before
                             sw_live_update fills the rest (stepwatch.h, "Structs that grow") */
    double window_s;      /* how much time the figures cover (up to the window asked for) */
    uint64_t steps;       /* steps that ended in the window, warm-up included, all phases */
    uint64_t total_steps; /* steps that ended since the start */
    double steps_per_s;
    double samples_per_s; /* NaN when no step had a batch size */
    double step_p50_ns;   /* steady-state steps of the window, from their histogram */
    double step_p99_ns;
    double data_share;    /* time in "data" actions / time in steps, 0..1 */
    sw_category slowest;  /* the category with the most step time; SW_CAT_COUNT if none.
                              "other" is step time no categorized action covered */
    double slowest_share; /* its share of step time, 0..1 */
    double flops_per_s;   /* model FLOP/s of the window's training steps: the counted FLOPs
                             per step (the "flops_per_step" note, Profiler(flops=...)) times
                             their rate; NaN, or 0 from an older caller's struct: unknown */
    double mfu;           /* flops_per_s over the device's peak ("peak_flops" note); NaN or 0:
                             unknown */
    /* New figures go here, at the end. */
} sw_live_values;
#define SW_LIVE_VALUES_INIT SW__SIZED_INIT(sw_live_values)

typedef struct sw_live sw_live;

/* A sliding window over p's figures: each sw_live_update takes a snapshot and the figures
 * cover the time since the oldest kept update at most window_s old (the last 64 updates).
 * window_s <= 0 means 10 s. p must outlive the window. SW_EINVAL, SW_ENOMEM. Not
 * thread-safe: one caller per window (the profiler itself may record meanwhile). */
SW_API int sw_live_new(sw_profiler *p, double window_s, sw_live **out);
/* Snapshot p now and fill *out (its first out->size bytes). 0, SW_ENOMEM, SW_EINVAL (also
 * for a size under the first release's). Takes the profiler's lock briefly
 * (a snapshot): call it a few times a second at most, not per step. */
SW_API int sw_live_update(sw_live *w, sw_live_values *out);
SW_API void sw_live_free(sw_live *w);

/* The status line's text for v, at most width display columns (0 = no limit), e.g.
 * "stepwatch  12.3 steps/s  394 samples/s  step p50 81.2 ms  p99 95.0 ms  data 12 %
 *  slowest backward 48 %  412 TFLOP/s 41.6 % MFU" (the FLOP/s where known). Returns buf. */
SW_API char *sw_live_format(const sw_live_values *v, char *buf, size_t size, int width);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_LIVE_H */
