/*
 * cudart.c — a GPU clock (sw_gpu_clock) on the CUDA runtime's events, loaded with dlopen.
 *
 * The runtime the program already uses comes first (RTLD_NOLOAD finds a libcudart that is
 * loaded), so the events live in its context; else the first that loads. Only documented
 * runtime calls with their cuda_runtime_api.h signatures are used. Two rules keep the timing
 * invisible to the program:
 *   - a query that finds an event not reached yet returns cudaErrorNotReady, which the
 *     runtime also keeps as the thread's "last error"; a program that checks
 *     cudaGetLastError after its launches (torch does) would take it for a failure. So it is
 *     cleared at once, as torch's own CUDAEvent::query does; and nothing is queried while the
 *     program has an error of its own pending (cudaPeekAtLastError), so that one is never
 *     cleared by us.
 *   - nothing is recorded on a stream that is being captured into a CUDA graph (the event
 *     would become a node of the user's graph), and a step begun then is not timed; a query
 *     (only ever at a step's begin or end) runs in relaxed capture mode, so that it can never
 *     invalidate a capture the program has under way on this thread.
 * Nothing here ever waits for the GPU: no cudaEventSynchronize, cudaStreamSynchronize or
 * cudaDeviceSynchronize is even looked up.
 */
#include "device.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cuda_error;    /* cudaError_t: 0 = cudaSuccess */
typedef void *cuda_event;  /* cudaEvent_t */
typedef void *cuda_stream; /* cudaStream_t */
#define CUDA_ERROR_NOT_READY 600
#define CUDA_EVENT_DEFAULT 0u       /* timing enabled */
#define CUDA_CAPTURE_NONE 0         /* cudaStreamCaptureStatusNone */
#define CUDA_CAPTURE_MODE_RELAXED 2 /* cudaStreamCaptureModeRelaxed */

typedef struct cudart {
    void *lib;
    cuda_stream stream;
    sw_stream_fn streams_fn; /* NULL: always stream */
    void *streams_ctx;
    void (*streams_release)(void *);
    cuda_error (*event_create)(cuda_event *, unsigned);
    cuda_error (*event_record)(cuda_event, cuda_stream);
    cuda_error (*event_query)(cuda_event);
    cuda_error (*elapsed)(float *, cuda_event, cuda_event);
    cuda_error (*event_destroy)(cuda_event);
    cuda_error (*is_capturing)(cuda_stream, int *);
    cuda_error (*get_last_error)(void);
    cuda_error (*peek_last_error)(void);
    cuda_error (*exchange_capture_mode)(int *); /* may be NULL (CUDA before 10.1) */
} cudart;

static void *open_runtime(char *why, size_t why_size) {
    const char *env = getenv("STEPWATCH_CUDART");
    if (env != NULL && env[0] != '\0') {
        void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL)
            snprintf(why, why_size, "%s", dlerror());
        return lib;
    }
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                        "libcudart.so"};
    const size_t n = sizeof names / sizeof *names;
    for (size_t i = 0; i < n; i++) { /* the program's own runtime first */
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
        if (lib != NULL)
            return lib;
    }
    for (size_t i = 0; i < n; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib != NULL)
            return lib;
    }
    snprintf(why, why_size, "no CUDA runtime (libcudart.so) loads: %s", dlerror());
    return NULL;
}

/* Clear the NotReady the runtime just kept as this thread's last error. */
static void clear_not_ready(cudart *c) {
    c->get_last_error();
}

static int cudart_event_new(void *ctx, void **event) {
    cudart *c = ctx;
    return c->event_create((cuda_event *)event, CUDA_EVENT_DEFAULT) == 0 ? 0 : SW_EIO;
}

/* Is stream being captured into a CUDA graph? 1 also when the runtime cannot tell (the
 * legacy stream while another stream captures: not ours to use then). */
static int stream_capturing(cudart *c, cuda_stream stream) {
    int status = CUDA_CAPTURE_NONE;
    if (c->is_capturing(stream, &status) != 0) {
        c->get_last_error();
        return 1;
    }
    return status != CUDA_CAPTURE_NONE;
}

static int capturing(cudart *c) {
    return stream_capturing(c, c->stream);
}

/* At a step's begin: the stream to time it on, unless it is being captured (2). */
static int cudart_ready(void *ctx) {
    cudart *c = ctx;
    if (c->streams_fn != NULL) {
        void *stream = NULL;
        if (c->streams_fn(c->streams_ctx, &stream) != 1)
            return 0;
        c->stream = stream;
    }
    if (c->peek_last_error() != 0)
        return 0; /* the program has an error to read first: stay out of its way */
    return capturing(c) ? 2 : 1;
}

static int cudart_record(void *ctx, void *event) {
    cudart *c = ctx;
    if (c->peek_last_error() != 0)
        return 1; /* the program has an error to read first: stay out of its way */
    if (capturing(c))
        return 1;
    return c->event_record(event, c->stream) == 0 ? 0 : SW_EIO;
}

/* An interval's event on a stream of its own (a collective's), the same rules. */
static int cudart_record_on(void *ctx, void *event, void *stream) {
    cudart *c = ctx;
    if (c->peek_last_error() != 0 || stream_capturing(c, stream))
        return 1;
    return c->event_record(event, stream) == 0 ? 0 : SW_EIO;
}

/* A query is one of the calls a CUDA graph capture in "global" or "thread_local" mode
 * forbids (and would be invalidated by): this thread asks in relaxed mode, as torch's own
 * event queries do, then puts the program's mode back. */
static int relax(cudart *c) {
    int mode = CUDA_CAPTURE_MODE_RELAXED;
    if (c->exchange_capture_mode != NULL && c->exchange_capture_mode(&mode) != 0) {
        c->get_last_error();
        return -1;
    }
    return mode;
}

static void unrelax(cudart *c, int mode) {
    if (c->exchange_capture_mode != NULL && mode >= 0)
        c->exchange_capture_mode(&mode);
}

static int cudart_query(void *ctx, void *event) {
    cudart *c = ctx;
    if (c->peek_last_error() != 0)
        return 0;
    int mode = relax(c);
    cuda_error rc = c->event_query(event);
    unrelax(c, mode);
    if (rc == CUDA_ERROR_NOT_READY) {
        clear_not_ready(c);
        return 0;
    }
    return rc == 0 ? 1 : SW_EIO;
}

static int cudart_elapsed(void *ctx, void *start, void *end, uint64_t *ns) {
    cudart *c = ctx;
    float ms = 0;
    if (c->peek_last_error() != 0)
        return 1;
    int mode = relax(c);
    cuda_error rc = c->elapsed(&ms, start, end);
    unrelax(c, mode);
    if (rc == CUDA_ERROR_NOT_READY) {
        clear_not_ready(c);
        return 1;
    }
    if (rc != 0)
        return SW_EIO;
    *ns = ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0;
    return 0;
}

static void cudart_event_free(void *ctx, void *event) {
    cudart *c = ctx;
    c->event_destroy(event);
}

static void cudart_release(void *ctx) {
    cudart *c = ctx;
    /* The library stays loaded: unloading a CUDA runtime under a live context is unsafe. */
    if (c->streams_release != NULL)
        c->streams_release(c->streams_ctx);
    free(c);
}

int sw__cudart_clock(void *stream, sw_stream_fn streams_fn, void *ctx, void (*release)(void *),
                     sw_gpu_clock *out, char *why, size_t why_size) {
    cudart *c = calloc(1, sizeof *c);
    if (c == NULL) {
        if (release != NULL)
            release(ctx);
        return SW_ENOMEM;
    }
    c->streams_release = release;
    c->streams_ctx = ctx;
    c->lib = open_runtime(why, why_size);
    if (c->lib == NULL) {
        cudart_release(c);
        return SW_EUNSUPPORTED;
    }
    c->stream = stream;
    c->streams_fn = streams_fn;
    c->event_create = (cuda_error(*)(cuda_event *, unsigned))dlsym(c->lib,
                                                                   "cudaEventCreateWithFlags");
    c->event_record = (cuda_error(*)(cuda_event, cuda_stream))dlsym(c->lib, "cudaEventRecord");
    c->event_query = (cuda_error(*)(cuda_event))dlsym(c->lib, "cudaEventQuery");
    c->elapsed = (cuda_error(*)(float *, cuda_event, cuda_event))dlsym(c->lib,
                                                                       "cudaEventElapsedTime");
    c->event_destroy = (cuda_error(*)(cuda_event))dlsym(c->lib, "cudaEventDestroy");
    c->is_capturing = (cuda_error(*)(cuda_stream, int *))dlsym(c->lib, "cudaStreamIsCapturing");
    c->get_last_error = (cuda_error(*)(void))dlsym(c->lib, "cudaGetLastError");
    c->peek_last_error = (cuda_error(*)(void))dlsym(c->lib, "cudaPeekAtLastError");
    c->exchange_capture_mode = (cuda_error(*)(int *))dlsym(c->lib,
                                                           "cudaThreadExchangeStreamCaptureMode");
    if (!c->event_create || !c->event_record || !c->event_query || !c->elapsed ||
        !c->event_destroy || !c->is_capturing || !c->get_last_error || !c->peek_last_error) {
        snprintf(why, why_size, "the CUDA runtime lacks an event function this needs");
        cudart_release(c);
        return SW_EUNSUPPORTED;
    }
    *out = (sw_gpu_clock){.size = sizeof(sw_gpu_clock),
                          .ctx = c,
                          .ready = cudart_ready,
                          .event_new = cudart_event_new,
                          .record = cudart_record,
                          .query = cudart_query,
                          .elapsed_ns = cudart_elapsed,
                          .event_free = cudart_event_free,
                          .release = cudart_release,
                          .record_on = cudart_record_on};
    return 0;
}
