/*
 * proc_stats.c — the process's and the system's CPU and memory, from /proc.
 *
 * The definitions are psutil's (what Lightning's DeviceStatsMonitor logs through it), so the
 * numbers mean the same whichever reads them:
 *   cpu_percent   busy / total ticks of /proc/stat's "cpu" line between two reads, where
 *                 total excludes guest time (already counted in user) and busy excludes idle
 *                 and iowait;
 *   vm_percent    (MemTotal - MemAvailable) / MemTotal;
 *   swap_percent  (SwapTotal - SwapFree) / SwapTotal.
 * The process's own CPU time comes from CLOCK_PROCESS_CPUTIME_ID (nanoseconds, where
 * /proc/self/stat counts 10 ms ticks), its resident set from /proc/self/statm and the peak
 * from VmHWM in /proc/self/status.
 *
 * Each file is read whole into a buffer on the stack with open/read: no stdio, no
 * allocation, so the sampler thread's cost is a handful of system calls.
 */
#include "device.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Read path into buf (NUL-terminated); the length, or -1. */
static ssize_t read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n < size - 1) {
        ssize_t got = read(fd, buf + n, size - 1 - n);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* The number after "key" (a line start in /proc/meminfo or /proc/self/status), or -1. */
static double field(const char *text, const char *key) {
    size_t len = strlen(key);
    const char *line = text;
    while (line != NULL) {
        if (strncmp(line, key, len) == 0)
            return strtod(line + len, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1;
}

/* The resident set in bytes from /proc/self/statm's text ("size resident shared ...", in
 * pages); 0 when it does not read as that. */
static uint64_t statm_rss(const char *text) {
    const char *second = strchr(text, ' ');
    if (second == NULL || second[1] < '0' || second[1] > '9')
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    return strtoull(second + 1, NULL, 10) * (uint64_t)(page > 0 ? page : 4096);
}

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double percent(double part, double whole) {
    return whole > 0 ? 100.0 * part / whole : 0;
}

/* /proc/stat's first line: cpu user nice system idle iowait irq softirq steal guest
 * guest_nice (older kernels stop earlier; missing fields are 0). */
static int read_cpu_ticks(uint64_t *busy, uint64_t *total, uint64_t *steal) {
    char buf[512];
    if (read_file("/proc/stat", buf, sizeof buf) <= 0 || strncmp(buf, "cpu ", 4) != 0)
        return SW_EUNSUPPORTED;
    uint64_t t[10] = {0};
    char *at = buf + 4;
    for (int i = 0; i < 10; i++) {
        char *end;
        unsigned long long v = strtoull(at, &end, 10);
        if (end == at)
            break;
        t[i] = v;
        at = end;
    }
    uint64_t sum = 0;
    for (int i = 0; i < 10; i++)
        sum += t[i];
    *total = sum - t[8] - t[9];   /* guest and guest_nice are in user and nice */
    *busy = *total - t[3] - t[4]; /* idle and iowait are not busy */
    *steal = t[7];
    return 0;
}

/* /proc/loadavg's first figure x 100; 0 when it cannot be read. */
static uint32_t load_x100(void) {
    char buf[128];
    if (read_file("/proc/loadavg", buf, sizeof buf) <= 0)
        return 0;
    double load = strtod(buf, NULL);
    return load > 0 && load < 4e7 ? (uint32_t)(load * 100.0 + 0.5) : 0;
}

int sw__proc_read(sw__proc_mark *mark, sw_device_stats *out) {
    uint64_t busy, total, steal;
    if (read_cpu_ticks(&busy, &total, &steal) != 0)
        return SW_EUNSUPPORTED;
    uint64_t cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID), wall_ns = clock_ns(CLOCK_MONOTONIC);
    out->cpu_percent = percent((double)(busy - mark->busy_ticks),
                               (double)(total - mark->total_ticks));
    out->process_cpu_percent = percent((double)(cpu_ns - mark->process_cpu_ns),
                                       (double)(wall_ns - mark->wall_ns));
    uint64_t ticks = total - mark->total_ticks, stolen = steal - mark->steal_ticks;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *mark = (sw__proc_mark){
        .busy_ticks = busy,
        .total_ticks = total,
        .process_cpu_ns = cpu_ns,
        .wall_ns = wall_ns,
        .steal_ticks = steal,
        .steal_permille = ticks && stolen <= ticks ? (uint32_t)(1000 * stolen / ticks) : 0,
        .load_x100 = load_x100(),
        .cpus = cpus > 0 ? (uint32_t)cpus : 0};

    char buf[4096];
    out->vm_percent = out->swap_percent = -1;
    if (read_file("/proc/meminfo", buf, sizeof buf) > 0) {
        double mem_total = field(buf, "MemTotal:"), available = field(buf, "MemAvailable:");
        double swap_total = field(buf, "SwapTotal:"), swap_free = field(buf, "SwapFree:");
        if (mem_total > 0 && available >= 0)
            out->vm_percent = percent(mem_total - available, mem_total);
        if (swap_total >= 0 && swap_free >= 0)
            out->swap_percent = percent(swap_total - swap_free, swap_total);
    }
    out->rss_bytes = out->peak_rss_bytes = -1;
    if (read_file("/proc/self/statm", buf, sizeof buf) > 0) {
        uint64_t rss = statm_rss(buf);
        if (rss != 0)
            out->rss_bytes = (double)rss;
    }
    if (read_file("/proc/self/status", buf, sizeof buf) > 0) {
        double hwm_kb = field(buf, "VmHWM:");
        if (hwm_kb >= 0)
            out->peak_rss_bytes = hwm_kb * 1024.0;
    }
    return 0;
}

/* ---- the resident set at a step's end (the core's sw__rss_fn) ---- */

/* A read of /proc/self/statm is a system call of a few microseconds (4.7 us with pread on an
 * open descriptor, 24 us with open/read/close on the 2-core VM of docs/python.md's figures):
 * too much for every step of a sub-millisecond loop. So a step reads it only when the last
 * reading is SW_STEP_RSS_EVERY_MS old, through a descriptor kept open; the steps between
 * carry the last reading. The descriptor belongs to the process that opened it: /proc/self
 * was resolved at open, so a fork child (another pid) opens its own. */
static _Atomic int rss_fd = -1;
static _Atomic long rss_pid;
static _Atomic uint64_t rss_read_ns, rss_last;

/* A descriptor on this process's statm, or -1. */
static int rss_descriptor(void) {
    long pid = (long)getpid();
    int fd = atomic_load(&rss_fd);
    if (fd >= 0 && atomic_load(&rss_pid) == pid)
        return fd;
    int mine = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (mine < 0)
        return -1;
    /* Another thread may open one at the same moment: one wins, the other closes its own. */
    if (atomic_compare_exchange_strong(&rss_fd, &fd, mine)) {
        atomic_store(&rss_pid, pid);
        if (fd >= 0)
            close(fd); /* the parent's, inherited through fork */
        return mine;
    }
    close(mine);
    return fd;
}

uint64_t sw__step_rss(uint64_t now_ns) {
    uint64_t last = atomic_load_explicit(&rss_last, memory_order_relaxed);
    uint64_t read_ns = atomic_load_explicit(&rss_read_ns, memory_order_relaxed);
    if (last != 0 && now_ns >= read_ns && now_ns - read_ns < SW_STEP_RSS_EVERY_MS * 1000000ull)
        return last;
    atomic_store_explicit(&rss_read_ns, now_ns, memory_order_relaxed);
    int fd = rss_descriptor();
    char buf[128];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) {
        /* The program closed the descriptor under us (or /proc is gone): open it again next
         * time; until then the last reading stands. */
        if (fd >= 0 && atomic_compare_exchange_strong(&rss_fd, &fd, -1))
            close(fd);
        return last;
    }
    buf[n] = '\0';
    uint64_t rss = statm_rss(buf);
    if (rss != 0)
        atomic_store_explicit(&rss_last, rss, memory_order_relaxed);
    return rss != 0 ? rss : last;
}
