/*
 * os_signals.c — the calling thread's CPU time, context switches and page faults, from
 * getrusage(RUSAGE_THREAD), and the time it waited runnable for a CPU, from
 * /proc/thread-self/schedstat's run_delay (kept open, one pread): read together at step
 * boundaries (recorder_slow.c says how often: docs/slow-steps.md gives their cost).
 */
#include "clock.h"
#include "slow_steps.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* schedstat is "<ns on the CPU> <ns runnable, waiting for a CPU> <timeslices>\n". */
static int read_run_delay(int fd, uint64_t *run_delay_ns) {
    char buf[96];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end = NULL;
    strtoull(buf, &end, 10);
    if (end == buf || *end != ' ')
        return 0;
    char *field = end;
    *run_delay_ns = strtoull(field, &end, 10);
    return end != field;
}

void sw__os_open(sw__os_files *f) {
    f->opened = 1;
    f->schedstat_fd = -1;
    const char *off = getenv("SW_STEP_SCHEDSTAT"); /* "0": getrusage alone */
    if (off && strcmp(off, "0") == 0)
        return;
    /* thread-self is this thread's task at open time: the fd stays this thread's. */
    f->schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
}

void sw__os_close(sw__os_files *f) {
    if (f->opened && f->schedstat_fd >= 0)
        close(f->schedstat_fd);
    f->opened = 0;
    f->schedstat_fd = -1;
}

int sw__os_read(const sw__os_files *f, sw__os_sample *out) {
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return 0;
    out->has_run_delay = f->schedstat_fd >= 0 &&
                         read_run_delay(f->schedstat_fd, &out->run_delay_ns);
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
    (void)f;
    (void)out;
    return 0; /* no per-thread figures here (macOS): the OS signals stay empty */
#endif
}
