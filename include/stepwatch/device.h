/*
 * stepwatch/device.h — device statistics and device time (docs/device.md).
 * Included by stepwatch.h; do not include directly.
 *
 * Two things a host-side stopwatch cannot see:
 *   - how busy the machine is: CPU use of the process and the system, memory, and each GPU's
 *     utilization, memory, power and temperature. A sampler thread records them as counters
 *     (sw_counter) every interval: the run file, the Chrome trace, the HTML report and the
 *     report's counter lines show them beside the step time.
 *   - how long each phase of a step takes on the GPU, whose kernels run asynchronously: GPU
 *     events recorded at the begin and end of data, forward, loss, backward, optimizer,
 *     zero_grad and the step, read steps later with a non-blocking query (never a
 *     synchronize). They become counters named "device:<phase>/<action>" (nanoseconds), which
 *     every report shows as a Device column beside the host time.
 *
 * Nothing here is a build dependency: NVML (libnvidia-ml.so.1) and the CUDA runtime
 * (libcudart.so) are loaded with dlopen when asked for. Without them the CPU and memory
 * statistics still work and the GPU parts say once, on stderr, why they are off.
 */
#ifndef STEPWATCH_DEVICE_H
#define STEPWATCH_DEVICE_H
#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
 * Reading the statistics once (what the sampler records; the Python adapters log them)
 * ---------------------------------------------------------------------------------------- */

#define SW_MAX_GPUS 16

typedef struct sw_gpu_stats {
    double utilization_percent; /* kernels running, % of NVML's last sample period */
    double memory_used_bytes;
    double memory_total_bytes;
    double power_w;       /* -1 when the device does not report it */
    double temperature_c; /* -1 when the device does not report it */
} sw_gpu_stats;

typedef struct sw_device_stats {
    /* Since the previous read (since the reader was made, for the first one). */
    double process_cpu_percent; /* CPU time of this process / wall time, % of one core */
    double cpu_percent;         /* all CPUs: busy / total ticks of /proc/stat, % (psutil's
                                   cpu_percent: idle and iowait are not busy) */
    /* Now. */
    double vm_percent;              /* (MemTotal - MemAvailable) / MemTotal, % (psutil's
                                   virtual_memory().percent) */
    double swap_percent;            /* (SwapTotal - SwapFree) / SwapTotal, %; 0 without swap */
    double rss_bytes;               /* resident set of this process (/proc/self/statm) */
    double peak_rss_bytes;          /* its high-water mark (VmHWM of /proc/self/status) */
    int ngpus;                      /* GPUs in gpus[]; -1 when GPU statistics are unavailable */
    sw_gpu_stats gpus[SW_MAX_GPUS]; /* in CUDA's order when CUDA_VISIBLE_DEVICES lists
                                       indices or UUIDs, else NVML's */
} sw_device_stats;

typedef struct sw_device_reader sw_device_reader;

/* A reader of the statistics. gpus nonzero: also the GPUs, through NVML loaded now (the
 * environment's STEPWATCH_NVML names another library, for tests); when NVML cannot be
 * loaded or finds no GPU the reader still works, ngpus is -1 and sw_device_gpu_error says
 * why. SW_ENOMEM, or SW_EUNSUPPORTED without /proc. The caller owns *out. Not thread-safe:
 * one reader per thread. */
SW_API int sw_device_reader_new(int gpus, sw_device_reader **out);
/* Read everything now into *out (a few /proc reads and, with GPUs, NVML queries: about
 * 10-50 us). A statistic that cannot be read is -1. 0, or SW_EINVAL for NULL arguments. */
SW_API int sw_device_read(sw_device_reader *r, sw_device_stats *out);
/* Why the reader has no GPU statistics ("libnvidia-ml.so.1: cannot open shared object
 * file ..."), or NULL when it has them or was not asked for them. Valid until freed. */
SW_API const char *sw_device_gpu_error(const sw_device_reader *r);
SW_API void sw_device_reader_free(sw_device_reader *r);

/* ------------------------------------------------------------------------------------------
 * The sampler: a thread recording the statistics into a profiler as counters
 * ---------------------------------------------------------------------------------------- */

/* Start sampling into p every interval_ms (0 = 500): counters cpu_percent, cpu_vm_percent,
 * cpu_swap_percent (Lightning's names for the system), process_cpu_percent,
 * process_rss_bytes, process_peak_rss_bytes, and per GPU gpu<N>.utilization_percent,
 * .memory_used_bytes, .memory_total_bytes, .power_w, .temperature_c. Without NVML it says
 * so once on stderr and samples the rest. The sampler stops when p is freed (its last
 * sample is taken then) and is not inherited by a fork child. sw_options.device_stats does
 * the same at sw_profiler_new. SW_ESTATE if p already samples, SW_ENOMEM. */
SW_API int sw_device_stats_start(sw_profiler *p, uint32_t interval_ms);

/* A source of more samples, called on the sampler thread at every sample, after the
 * sampler's own (the Python module adds torch's CUDA allocator statistics this way). It
 * records with sw_counter. Set it before or after the start; fn NULL removes it and waits
 * for a call in progress to return. SW_ENOTFOUND when p does not sample. */
typedef void (*sw_sample_fn)(void *ctx, sw_profiler *p);
SW_API int sw_device_stats_source(sw_profiler *p, sw_sample_fn fn, void *ctx);

/* ------------------------------------------------------------------------------------------
 * Device time per phase: GPU events at the phases' boundaries, resolved without waiting
 * ---------------------------------------------------------------------------------------- */

/* The events of a GPU runtime. Each call runs on the thread that marks the steps. Events are
 * made once and reused; every call returns 0 on success, < 0 on an error (the timing then
 * stops and says why once). */
typedef struct sw_gpu_clock {
    size_t size; /* sizeof(sw_gpu_clock) as the caller was compiled (stepwatch.h, "Structs
                    that grow") */
    void *ctx;
    /* At each step's begin: 1 when the device is in use now (the Python module answers
       torch.cuda.is_initialized(), so no event ever creates a CUDA context); 0 when not (the
       step is not timed); 2 when the stream is being captured into a CUDA graph now (the
       step is not timed, nothing is queried, and it is counted). NULL: always 1. */
    int (*ready)(void *ctx);
    int (*event_new)(void *ctx, void **event);
    /* Record event on the current stream, now. 1: not recorded (the stream is being captured
       into a CUDA graph); the span is then not timed. */
    int (*record)(void *ctx, void *event);
    /* 1 when the GPU has reached the event, 0 when not yet. Never waits. */
    int (*query)(void *ctx, void *event);
    /* Nanoseconds from start to end (both reached); 1 when one of them is not reached yet. */
    int (*elapsed_ns)(void *ctx, void *start, void *end, uint64_t *ns);
    void (*event_free)(void *ctx, void *event);
    void (*release)(void *ctx); /* when the timing stops; may be NULL */
    /* New calls go here, at the end (NULL in an older caller's clock). */
    /* Record event on stream (not the step's: a collective's stream, say), now; 0, 1 not
       recorded (that stream is being captured), < 0 an error. NULL: intervals on a named
       stream (sw_device_interval_on) are not timed. */
    int (*record_on)(void *ctx, void *event, void *stream);
} sw_gpu_clock;
#define SW_GPU_CLOCK_INIT SW__SIZED_INIT(sw_gpu_clock)

/* Time p's steps on the GPU with the CUDA runtime, loaded now with dlopen (a runtime
 * already in the process first; STEPWATCH_CUDART names another library, for tests), on
 * stream (NULL: the default stream). The first event creates the CUDA context if the
 * program has none yet. SW_EUNSUPPORTED when no CUDA runtime can be loaded (the message on
 * stderr says why), SW_ESTATE when p is already timed, SW_ENOMEM. sw_options.device_time
 * does the same at sw_profiler_new (then a missing runtime is only said, not an error). */
SW_API int sw_device_time_cuda(sw_profiler *p, void *stream);
/* The same with the events of clock (copied; its release is called when the timing stops,
 * also when this call fails). SW_EINVAL / SW_EUNSUPPORTED for its size (stepwatch.h,
 * "Structs that grow"). */
SW_API int sw_device_time_clock(sw_profiler *p, const sw_gpu_clock *clock);

/* The stream a step's events go on, asked at each step's begin on the thread that marks it
 * (the Python module asks torch for its current stream): 1 with *stream set (NULL: the
 * default stream) to time the step, 0 not to time it (no device in use yet). */
typedef int (*sw_stream_fn)(void *ctx, void **stream);
/* sw_device_time_cuda on the stream fn names at each step's begin; release(ctx) (may be
 * NULL) when the timing stops, also when this call fails. The events are the runtime's, made
 * and recorded in C: no object and no lock per event. */
SW_API int sw_device_time_cuda_streams(sw_profiler *p, sw_stream_fn fn, void *ctx,
                                       void (*release)(void *ctx));

/* Every step is timed while the GPU is up to 1024 steps behind the host (its events wait in
 * a pool, never waited for). Further behind, a regular sample: the steps whose index is a
 * multiple of sample_every (doubled while the GPU falls behind, halved as it catches up). */
/* For loops that learn a span's host time only when it ends and record it then with
 * sw_record (stepwatch.torch's optimizer and zero_grad): action begins (begins nonzero) or
 * ends now, on the thread that marks the steps, so that the device timing records its GPU
 * events at the real boundaries. Marks come in pairs; nothing is recorded on the host.
 * Without device time it does nothing (a load and a branch). */
SW_API void sw_device_mark(sw_profiler *p, sw_id action, int begins);

typedef struct sw_device_time_info {
    size_t size;                  /* sizeof(sw_device_time_info) as the caller was compiled, set
                                before sw_device_time_info_get fills the rest (stepwatch.h,
                                "Structs that grow") */
    uint64_t steps_timed;         /* steps whose device times were recorded */
    uint64_t steps_dropped;       /* never resolved: the run ended before the GPU reached them, or
                                the step ended on another thread (counted, never waited for) */
    uint64_t spans_dropped;       /* spans over the 16 a step can time */
    uint64_t warmup_steps;        /* resolved but kept out, as the host statistics keep them */
    int failed;                   /* the runtime returned an error: timing stopped */
    uint64_t steps_sampled_out;   /* not timed by choice: the GPU was over 1024 steps behind */
    uint64_t sample_every;        /* 1: every step chosen; k: every k-th at most (the largest) */
    uint64_t steps_captured;      /* not timed: begun while the stream was captured */
    uint64_t boundaries_captured; /* span boundaries not recorded during a capture */
    uint64_t most_behind;         /* the most steps that waited for the GPU at once */
    uint64_t events;              /* GPU events made (pooled and reused) */
    uint64_t intervals;           /* intervals begun (sw_device_interval_begin) */
    uint64_t intervals_timed;     /* their times handed to sw_device_intervals_take */
    uint64_t comm_intervals;      /* communication intervals begun (sw_device_interval_on):
                                     not in intervals, never summed by tag */
    /* New figures go here, at the end. */
} sw_device_time_info;
#define SW_DEVICE_TIME_INFO_INIT SW__SIZED_INIT(sw_device_time_info)

/* What the device timing of p did so far, into the first out->size bytes of *out.
 * SW_ENOTFOUND when p is not timed; SW_EINVAL for NULL or a size under the first
 * release's. */
SW_API int sw_device_time_info_get(sw_profiler *p, sw_device_time_info *out);

/* ------------------------------------------------------------------------------------------
 * Device time of intervals inside a step (per-module times: Python's Profiler(modules=...)):
 * GPU events on the step's stream from the same pool as the phases', resolved later
 * ---------------------------------------------------------------------------------------- */

typedef struct sw_device_timing sw_device_timing;

/* p's device timing, or NULL when p is not timed on the device. Takes p's lock: ask once per
 * step or less. Valid until p is freed. */
SW_API sw_device_timing *sw_device_timing_of(sw_profiler *p);

#define SW_DEVICE_MAX_TAGS 65536u /* tags sum the intervals: 0 .. SW_DEVICE_MAX_TAGS - 1 */

/* An interval begins now, inside parent (a token of this step's, or 0 for none): a GPU event
 * on the step's stream, an event shared with the previous boundary only when too little time
 * passed for a kernel launch between them. Its time will be summed under tag. The token of
 * the interval, or 0 when it is not timed (no step timed on the device is open, the stream is
 * being captured, the runtime failed, a tag too large). Call it on the thread that marks the
 * steps, or on one that takes turns with it (Python's threads under the GIL: the autograd
 * engine's). */
SW_API uint64_t sw_device_interval_begin(sw_device_timing *t, uint64_t parent, uint32_t tag);
/* Interval (its token; 0 does nothing) ends now. An interval whose step ended before it is
 * not timed (counted as dropped). */
SW_API void sw_device_interval_end(sw_device_timing *t, uint64_t interval);

/* ---- Communication on the device, and how much of it is exposed ----
 *
 * An interval is compute (what sw_device_interval_begin begins) or communication, on the
 * step's stream or on a stream of its own (a collective's). Per step, once the GPU reached
 * every event of it, the device timing computes from the intervals and phases already
 * recorded (all as offsets from the step's begin event, on the device's one clock):
 *   comm     the measure of the union of the step's communication intervals;
 *   exposed  the part of it not overlapped by compute on the device: compute is the union
 *            of the step's forward, loss, backward, optimizer and zero_grad spans (on the
 *            step's stream) less the step stream's own communication intervals (that
 *            stream waiting for a collective is not computing), and the compute intervals
 *            on other streams.
 * Communication on the step's stream is so exposed in full: the compute stream waiting
 * (a synchronous NCCL call, a Work's wait()). Both become samples of the counters
 * "device:<phase>/comm" and "device:<phase>/comm_exposed" (ns, one per step with
 * communication, warm-up steps kept out), which the reports show as the line
 * "Communication: 41.2 ms per step on the device, 6.1 ms exposed (15 %)". Nothing of it
 * costs a step without communication intervals. */
#define SW_DEVICE_COMPUTE 0u
#define SW_DEVICE_COMM 1u

/* sw_device_interval_begin of an interval of kind (SW_DEVICE_COMPUTE, SW_DEVICE_COMM) on
 * stream (NULL: the step's stream; another: its events are recorded there with the clock's
 * record_on, never shared with another boundary). sw_device_interval_end ends it on the same
 * stream. 0 when not timed (as sw_device_interval_begin, and a named stream without
 * record_on, or a kind unknown). A communication interval's time goes to its step's
 * communication only: sw_device_intervals_take never sums it under its tag. */
SW_API uint64_t sw_device_interval_on(sw_device_timing *t, uint64_t parent, uint32_t tag,
                                      void *stream, unsigned kind);

/* ns of communication on the device that no interval brackets, measured elsewhere (NCCL's
 * own timing of an async collective, read once the work completed): counted in the
 * communication of the step open now (nothing when none is timed). Such a collective is
 * mostly also bracketed where the step's stream waits for it, so a step's communication is
 * the larger of the union of its communication intervals and the sum of these: never
 * counted twice, a lower bound when both kinds mix. Not in the exposed part (no interval). */
SW_API void sw_device_comm_ns(sw_device_timing *t, uint64_t ns);

typedef struct sw_device_interval_sum {
    uint64_t count;   /* intervals timed */
    uint64_t ns;      /* their GPU time */
    uint64_t self_ns; /* less the time of the intervals inside them (their children) */
} sw_device_interval_sum;

/* Add the intervals timed since the last call into sums[tag] (tag < n), resolving first the
 * steps the GPU has reached (a query each, never a wait): a step's intervals are timed once
 * the GPU ran past its end. Same threads as sw_device_interval_begin. The number of intervals
 * added. Intervals never taken (not reached, or not asked for before p is freed) are counted
 * in the counter "device:intervals_dropped". */
SW_API size_t sw_device_intervals_take(sw_device_timing *t, sw_device_interval_sum *sums, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_DEVICE_H */
