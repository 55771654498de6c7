/*
 * os_signals.c — the calling thread's CPU time, context switches and page faults, from
 * getrusage(RUSAGE_THREAD): one system call, read at step boundaries (recorder_slow.c says
 * how often: docs/slow-steps.md gives its cost).
 */
#include "clock.h"
#include "slow_steps.h"

#include <sys/resource.h>

int sw__os_read(sw__os_sample *out) {
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return 0;
    out->wall_ns = sw__clock_ns();
    uint64_t user = (uint64_t)ru.ru_utime.tv_sec * 1000000000u +
                    (uint64_t)ru.ru_utime.tv_usec * 1000u;
    out->sys_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000u +
                  (uint64_t)ru.ru_stime.tv_usec * 1000u;
    out->cpu_ns = user + out->sys_ns;
    out->voluntary = (uint64_t)ru.ru_nvcsw;
    out->involuntary = (uint64_t)ru.ru_nivcsw;
    out->minor = (uint64_t)ru.ru_minflt;
    out->major = (uint64_t)ru.ru_majflt;
    return 1;
#else
    (void)out;
    return 0; /* no per-thread figures here (macOS): the OS signals stay empty */
#endif
}
