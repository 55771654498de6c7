/*
 * mpi.c — libstepwatch_mpi: MPI as a transport of the cross-rank aggregation, and MPI's
 * collectives timed through its profiling interface (stepwatch/mpi.h, docs/ranks.md).
 *
 * Built only when CMake finds MPI; uses the public API of libstepwatch alone. The ranks layer
 * (sw_ranks_attach) does the rest: payloads, the reduction, the run file, printing.
 *
 * Rounds: a periodic one is one MPI_Gather of the payloads on a duplicate of the user's
 * communicator (so stepwatch's messages never meet the program's). The final one may find a
 * rank dead: it goes up a binomial tree of nonblocking sends and receives (gather_final),
 * each level bounded by timeout_s, so rank 0 takes log2(N) blocks and a dead rank costs its
 * parent the wait, never a hang (its children send straight to rank 0); rank 0 reports over
 * the ranks that answered. The duplicate communicator returns errors instead of aborting
 * (MPI_ERRORS_RETURN). The clock offsets go down a binary tree.
 */
#include "stepwatch/mpi.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG 0x5357                /* "SW" */
#define TAG_ACK (TAG + 2)         /* the final round: "your block arrived" */
#define TAG_ORPHAN (TAG + 3)      /* ...a block straight to rank 0: its parent is dead */
#define CLOCK_ROUNDS 8            /* round trips at least, per rank */
#define CLOCK_SHORT_TRIP 1000000  /* ns: a round trip this short ends the rounds early... */
#define CLOCK_MAX_NS 2000000000LL /* ...else they go on for up to this long per rank */
#define CLOCK_DONE INT64_MIN      /* rank 0's "no more rounds": the offset comes next */

/* The collectives timed, in the order of their wrappers below. */
enum { ALLREDUCE, REDUCE, BCAST, BARRIER, ALLGATHER, GATHER, ALLTOALL, REDUCE_SCATTER, NCOLL };
static const char *const COLL_NAMES[NCOLL] = {
    "collective:MPI_Allreduce", "collective:MPI_Reduce",
    "collective:MPI_Bcast",     "collective:MPI_Barrier",
    "collective:MPI_Allgather", "collective:MPI_Gather",
    "collective:MPI_Alltoall",  "collective:MPI_Reduce_scatter_block"};

/* The op's name: its action's, less "collective:". */
static const char *op_name(int which) {
    return COLL_NAMES[which] + sizeof "collective:" - 1;
}

/* nccl-tests' bus bandwidth over algorithm bandwidth for each, on n ranks (as the torch
 * side reckons it, docs/collectives.md): 2(n-1)/n for all-reduce, (n-1)/n for those that
 * move every rank's share once, 1 for those rooted at one rank. */
enum { BUS_ONE, BUS_ALL_REDUCE, BUS_SHARES };
static const int COLL_BUS[NCOLL] = {BUS_ALL_REDUCE, BUS_ONE,    BUS_ONE,    BUS_ONE,
                                    BUS_SHARES,     BUS_SHARES, BUS_SHARES, BUS_SHARES};
#define SIZE_CLASSES 64 /* one per power of 2 of the bytes */

/* The one attached profiler of this process (MPI is called from one thread). */
static struct {
    sw_profiler *p;
    MPI_Comm user_comm, comm; /* the program's, and stepwatch's duplicate of it */
    int rank, world;
    uint32_t every;
    uint64_t next_round; /* the step count at which the next periodic round is due */
    int in_round;        /* a round's own MPI calls are not timed or counted */
    sw_id coll[NCOLL], own;
    sw_id bytes[NCOLL];                      /* "comm:<op>:bytes": the running total */
    uint64_t total[NCOLL];                   /* ...its value */
    sw_id bandwidth[NCOLL][SIZE_CLASSES][2]; /* "comm:<op>:<class>:algbw", ":busbw"; 0: not yet */
} g;

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int mpi_usable(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

/* ---- the transport ---- */

/* Test reqs[0..n) (MPI_REQUEST_NULL: none) until all are done or the clock passes deadline
 * (ns); done(k), when given, as request k completes. */
static int wait_until(int n, MPI_Request *reqs, uint64_t deadline, void (*done)(int k)) {
    int finished[32]; /* indices: a rank has at most log2(2^20) children */
    int rc = MPI_SUCCESS, left = 0;
    for (int i = 0; i < n; i++)
        left += reqs[i] != MPI_REQUEST_NULL;
    while (rc == MPI_SUCCESS && left > 0 && sw_now_ns() < deadline) {
        int count = 0;
        rc = PMPI_Testsome(n, reqs, &count, finished, MPI_STATUSES_IGNORE);
        for (int i = 0; done && rc == MPI_SUCCESS && i < count; i++)
            done(finished[i]);
        left -= count > 0 ? count : 0;
        if (count <= 0)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return rc;
}

/* The final round's tree (gather_final): rank r's subtree is the ranks r .. r + span(r) - 1,
 * span(r) its lowest set bit (the whole world, 2^levels, for rank 0), so a subtree's payloads
 * are one block; r's children are r + 2^k for 2^k < span(r), its parent r - span(r). */
typedef struct tree {
    int levels;       /* 2^levels >= world */
    int span, height; /* this rank's: span = 2^height */
    size_t count;     /* the payloads of its block: span, or to the world's end */
} tree;

static int span_of(int rank, int levels) {
    return rank == 0 ? 1 << levels : rank & -rank;
}

static int log2_of(int power) {
    int k = 0;
    while ((1 << k) < power)
        k++;
    return k;
}

/* The payloads in the block of rank's child rank + 2^k: 2^k, or to the world's end. */
static size_t child_block(int rank, int k) {
    int child = rank + (1 << k);
    return (size_t)((1 << k) < g.world - child ? 1 << k : g.world - child);
}

/* When a rank of the given height stops waiting for its children: its share of the timeout,
 * a level's worth more than its children's. */
static uint64_t level_deadline(const tree *t, int height, uint64_t start, uint64_t timeout_ns) {
    return start + timeout_ns / (uint64_t)t->levels * (uint64_t)height;
}

/* Tell this rank's child rank + 2^k that its block arrived (an empty message). */
static void tell_child(int k) {
    MPI_Request sent;
    if (PMPI_Isend(NULL, 0, MPI_BYTE, g.rank + (1 << k), TAG_ACK, g.comm, &sent) == MPI_SUCCESS)
        PMPI_Request_free(&sent);
}

/* This rank's children's blocks into their places in its own, until deadline; each child is
 * told at once that its block arrived (ack: not on rank 0, whose children need not know).
 * What did not arrive is cancelled and left zeroed. */
static int receive_children(const tree *t, unsigned char *block, size_t size, uint64_t deadline,
                            int ack) {
    MPI_Request reqs[32];
    int n = 0, rc = MPI_SUCCESS;
    while (n < t->height && g.rank + (1 << n) < g.world)
        reqs[n++] = MPI_REQUEST_NULL;
    for (int k = 0; rc == MPI_SUCCESS && k < n; k++)
        rc = PMPI_Irecv(block + ((size_t)1 << k) * size, (int)(child_block(g.rank, k) * size),
                        MPI_BYTE, g.rank + (1 << k), TAG, g.comm, &reqs[k]);
    if (rc == MPI_SUCCESS)
        rc = wait_until(n, reqs, deadline, ack ? tell_child : NULL);
    for (int k = 0; k < n; k++) { /* past the deadline (or on an error) */
        if (reqs[k] == MPI_REQUEST_NULL)
            continue;
        MPI_Status status;
        int cancelled = 0;
        PMPI_Cancel(&reqs[k]);
        PMPI_Wait(&reqs[k], &status);
        PMPI_Test_cancelled(&status, &cancelled);
        if (cancelled)
            memset(block + ((size_t)1 << k) * size, 0, child_block(g.rank, k) * size);
    }
    return rc;
}

/* This rank's block to its parent; when the parent (not rank 0) does not say it arrived by
 * the parent's own deadline and a half level, the parent is taken for dead and the block goes
 * straight to rank 0 (an orphan). Sends not taken by timeout_s are let go (MPI finishes or
 * drops them; the block then stays allocated). */
static int send_up(const tree *t, unsigned char *block, size_t size, uint64_t start,
                   uint64_t timeout_ns) {
    int parent = g.rank - t->span, rc;
    MPI_Request sends[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}, ack = MPI_REQUEST_NULL;
    int bytes = (int)(t->count * size);
    rc = PMPI_Isend(block, bytes, MPI_BYTE, parent, TAG, g.comm, &sends[0]);
    if (rc == MPI_SUCCESS && parent != 0) {
        int parent_height = log2_of(span_of(parent, t->levels));
        uint64_t wait = level_deadline(t, parent_height, start, timeout_ns) +
                        timeout_ns / (uint64_t)t->levels / 2;
        rc = PMPI_Irecv(NULL, 0, MPI_BYTE, parent, TAG_ACK, g.comm, &ack);
        if (rc == MPI_SUCCESS)
            rc = wait_until(1, &ack, wait, NULL);
        if (rc == MPI_SUCCESS && ack != MPI_REQUEST_NULL)
            rc = PMPI_Isend(block, bytes, MPI_BYTE, 0, TAG_ORPHAN, g.comm, &sends[1]);
        if (ack != MPI_REQUEST_NULL) {
            PMPI_Cancel(&ack);
            PMPI_Wait(&ack, MPI_STATUS_IGNORE);
        }
    }
    if (rc == MPI_SUCCESS)
        rc = wait_until(2, sends, start + timeout_ns, NULL);
    int pending = 0;
    for (int i = 0; i < 2; i++)
        if (sends[i] != MPI_REQUEST_NULL) {
            PMPI_Request_free(&sends[i]);
            pending = 1;
        }
    if (!pending)
        free(block);
    return rc;
}

/* Whether a payload slot was never filled: it is zero (a payload starts with its magic). */
static int empty_slot(const unsigned char *slot) {
    static const unsigned char zero[8];
    return memcmp(slot, zero, sizeof zero) == 0;
}

/* Rank 0: the orphans' blocks (from ranks whose parent died), until every payload is in or
 * deadline; only a block's payloads go in (its own holes never overwrite a payload that
 * arrived another way). */
static int take_orphans(unsigned char *all, size_t size, uint64_t deadline) {
    int missing = 0;
    for (int r = 0; r < g.world; r++)
        missing += empty_slot(all + (size_t)r * size);
    while (missing > 0) {
        MPI_Status status;
        int waiting = 0, bytes = 0;
        if (PMPI_Iprobe(MPI_ANY_SOURCE, TAG_ORPHAN, g.comm, &waiting, &status) != MPI_SUCCESS)
            return SW_EIO;
        if (!waiting) {
            if (sw_now_ns() >= deadline)
                return 0;
            nanosleep(&(struct timespec){0, 1000000}, NULL);
            continue;
        }
        PMPI_Get_count(&status, MPI_BYTE, &bytes);
        int from = status.MPI_SOURCE;
        unsigned char *got = malloc(bytes > 0 ? (size_t)bytes : 1);
        if (got == NULL)
            return SW_ENOMEM;
        int rc = PMPI_Recv(got, bytes, MPI_BYTE, from, TAG_ORPHAN, g.comm, MPI_STATUS_IGNORE);
        size_t n = rc == MPI_SUCCESS && bytes > 0 ? (size_t)bytes / size : 0;
        for (size_t i = 0; i < n && from + (int)i < g.world; i++) {
            unsigned char *slot = all + (size_t)(from + (int)i) * size;
            if (empty_slot(slot) && !empty_slot(got + i * size)) {
                memcpy(slot, got + i * size, size);
                missing--;
            }
        }
        free(got);
        if (rc != MPI_SUCCESS)
            return SW_EIO;
    }
    return 0;
}

/* The final round, up the binomial tree above: each rank receives its children's blocks into
 * place and sends its block to its parent: log2(N) levels, rank 0 takes log2(N) blocks, not N
 * - 1 payloads. A rank may be dead, so each level is bounded: a rank h of the levels high
 * waits for its children until timeout_s * h / levels after its start (rank 0: timeout_s),
 * so its parent still waits for it after it waited for a dead child; a child that did not
 * send in time has its receive cancelled and its block zeroed. A dead rank's children find
 * no parent to say their block arrived and send it straight to rank 0, which takes such
 * orphans until its timeout: only the dead rank is missing. */
static int gather_final(const void *mine, void *all, size_t size, double timeout_s) {
    uint64_t start = sw_now_ns(), timeout_ns = (uint64_t)(timeout_s * 1e9);
    if (g.world == 1) {
        memcpy(all, mine, size);
        return 0;
    }
    tree t = {.levels = log2_of(g.world)};
    t.span = span_of(g.rank, t.levels);
    t.height = log2_of(t.span);
    t.count = (size_t)(t.span < g.world - g.rank ? t.span : g.world - g.rank);
    unsigned char *block = g.rank == 0 ? all : calloc(t.count, size);
    if (block == NULL)
        return SW_ENOMEM;
    memcpy(block, mine, size);
    uint64_t deadline = level_deadline(&t, t.height, start, timeout_ns);
    int rc = receive_children(&t, block, size, deadline, g.rank != 0);
    if (g.rank == 0) {
        int taken = rc == MPI_SUCCESS ? take_orphans(block, size, start + timeout_ns) : 0;
        return rc != MPI_SUCCESS ? SW_EIO : taken;
    }
    if (rc == MPI_SUCCESS)
        return send_up(&t, block, size, start, timeout_ns) == MPI_SUCCESS ? 0 : SW_EIO;
    free(block);
    return SW_EIO;
}

static int gather(void *ctx, const void *mine, void *all, size_t size, int final,
                  double timeout_s) {
    if (!mpi_usable())
        return SW_ESTATE;
    g.in_round = 1;
    int rc = final ? gather_final(mine, all, size, timeout_s)
             : PMPI_Gather(mine, (int)size, MPI_BYTE, all, (int)size, MPI_BYTE, 0, g.comm) ==
                     MPI_SUCCESS
                 ? 0
                 : SW_EIO;
    g.in_round = 0;
    return rc;
}

/* The profiler is being freed: let go of it (and of the duplicate communicator). */
static void release(void *ctx) {
    if (mpi_usable() && g.comm != MPI_COMM_NULL)
        PMPI_Comm_free(&g.comm);
    memset(&g, 0, sizeof g);
}

/* Rank r's offset from its parent's clock, measured by the parent: the parent reads its
 * clock t0, asks r for its clock, reads t1 when the answer arrives; r's offset is its time
 * minus the midpoint of t0 and t1, wrong by at most half the round trip. The round with the
 * shortest trip counts. A loaded or oversubscribed node deschedules one side or the other
 * for tens of ms, so after CLOCK_ROUNDS rounds the parent goes on until one trip took under
 * CLOCK_SHORT_TRIP or CLOCK_MAX_NS have passed (CLOCK_DONE tells r the rounds are over). */
static int measure_child(int r, int64_t *offset) {
    const int tag = TAG + 1;
    int64_t t = 0, best_trip = INT64_MAX, best = 0, start = (int64_t)realtime_ns();
    for (int i = 0; i < CLOCK_ROUNDS || (best_trip >= CLOCK_SHORT_TRIP &&
                                         (int64_t)realtime_ns() - start < CLOCK_MAX_NS);
         i++) {
        int64_t t0 = (int64_t)realtime_ns();
        if (PMPI_Send(&t0, 1, MPI_INT64_T, r, tag, g.comm) != MPI_SUCCESS ||
            PMPI_Recv(&t, 1, MPI_INT64_T, r, tag, g.comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return SW_EIO;
        int64_t t1 = (int64_t)realtime_ns();
        if (t1 - t0 < best_trip) {
            best_trip = t1 - t0;
            best = t - (t0 + (t1 - t0) / 2);
        }
    }
    *offset = best;
    return 0;
}

/* The offset of each rank's CLOCK_REALTIME from rank 0's, for the cross-rank timeline, down
 * a binary tree (rank r's parent is (r - 1) / 2): a rank answers its parent's rounds, gets
 * its offset from rank 0 (its parent's plus its own from the parent), then measures its
 * children and sends them theirs. The ranks of one level measure at once: log2(N) levels of
 * rounds instead of rank 0 serving N - 1 ranks one after another; the error is at most the
 * sum of the half round trips on the way up. Once, at attach. */
static int estimate_clock(int64_t *offset) {
    const int tag = TAG + 1;
    int64_t t = 0;
    *offset = 0;
    if (g.rank != 0) {
        int parent = (g.rank - 1) / 2;
        for (;;) {
            if (PMPI_Recv(&t, 1, MPI_INT64_T, parent, tag, g.comm, MPI_STATUS_IGNORE) !=
                MPI_SUCCESS)
                return SW_EIO;
            if (t == CLOCK_DONE)
                break;
            t = (int64_t)realtime_ns();
            if (PMPI_Send(&t, 1, MPI_INT64_T, parent, tag, g.comm) != MPI_SUCCESS)
                return SW_EIO;
        }
        if (PMPI_Recv(offset, 1, MPI_INT64_T, parent, tag, g.comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return SW_EIO;
    }
    for (int child = 2 * g.rank + 1; child <= 2 * g.rank + 2 && child < g.world; child++) {
        int64_t theirs = 0;
        if (measure_child(child, &theirs) != 0)
            return SW_EIO;
        theirs += *offset; /* from this rank's clock to rank 0's */
        const int64_t done = CLOCK_DONE;
        if (PMPI_Send(&done, 1, MPI_INT64_T, child, tag, g.comm) != MPI_SUCCESS ||
            PMPI_Send(&theirs, 1, MPI_INT64_T, child, tag, g.comm) != MPI_SUCCESS)
            return SW_EIO;
    }
    return 0;
}

/* The caller's options (NULL: defaults), of whatever stepwatch/mpi.h it was built with, as
 * stepwatch.h's "Structs that grow" reads them. This library calls only the public API, so it
 * reads the size itself (the reason is not in sw_last_error here). */
static int options_of(const sw_mpi_options *given, sw_mpi_options *o) {
    memset(o, 0, sizeof *o);
    if (given == NULL)
        return 0;
    if (given->size < offsetof(sw_mpi_options, quiet) + sizeof given->quiet)
        return SW_EINVAL;
    for (size_t i = sizeof *o; i < given->size; i++)
        if (((const unsigned char *)given)[i] != 0)
            return SW_EUNSUPPORTED;
    memcpy(o, given, given->size < sizeof *o ? given->size : sizeof *o);
    return 0;
}

int sw_mpi_attach(sw_profiler *p, const sw_mpi_options *given) {
    sw_mpi_options options;
    int rc = options_of(given, &options);
    if (rc != 0)
        return rc;
    const sw_mpi_options *o = &options;
    if (p == NULL || !mpi_usable())
        return SW_EINVAL;
    if (g.p != NULL)
        return SW_ESTATE;
    MPI_Comm user = o->comm == MPI_COMM_NULL || o->comm == (MPI_Comm)0 ? MPI_COMM_WORLD : o->comm;
    if (PMPI_Comm_dup(user, &g.comm) != MPI_SUCCESS)
        return SW_EIO;
    PMPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
    PMPI_Comm_rank(g.comm, &g.rank);
    PMPI_Comm_size(g.comm, &g.world);
    g.user_comm = user;
    sw_ranks_options ro = {.size = sizeof ro,
                           .rank = g.rank,
                           .world_size = g.world,
                           .gather = gather,
                           .timeout_s = o->timeout_s,
                           .top = o->top,
                           .format = o->format,
                           .out = o->out,
                           .quiet = o->quiet,
                           .release = release};
    rc = sw_ranks_attach(p, &ro);
    if (rc != 0) {
        PMPI_Comm_free(&g.comm);
        memset(&g, 0, sizeof g);
        return rc;
    }
    g.p = p;
    g.every = o->aggregate_every;
    g.next_round = sw_step_count(p) + g.every;
    for (int i = 0; i < NCOLL; i++) {
        char name[96];
        g.coll[i] = sw_action(p, COLL_NAMES[i]);
        snprintf(name, sizeof name, "comm:%s:bytes", op_name(i));
        g.bytes[i] = sw_counter_id(p, name);
    }
    g.own = sw_action(p, "collective:stepwatch");
    int64_t offset = 0;
    sw_begin(p, g.own);
    rc = estimate_clock(&offset);
    sw_end(p, g.own);
    if (rc == 0) {
        int kept = sw_run_set_clock_offset(p, offset);
        rc = kept == SW_ENOTFOUND ? 0 : kept;
    }
    return rc;
}

int sw_mpi_aggregate(sw_ranks **out) {
    if (out)
        *out = NULL;
    return g.p ? sw_ranks_aggregate(g.p, 0, out) : SW_ENOTFOUND;
}

/* ---- the wrappers: MPI's profiling interface ---- */

/* Before a collective on comm: the profiler to time it into, if any, after a periodic round
 * when one is due (only on the program's own communicator, which every rank calls). */
static sw_profiler *before(MPI_Comm comm) {
    sw_profiler *p = g.p;
    if (p == NULL || g.in_round)
        return NULL;
    if (g.every && comm == g.user_comm && sw_step_count(p) >= g.next_round) {
        while (g.next_round <= sw_step_count(p))
            g.next_round += g.every;
        sw_begin(p, g.own);
        sw_ranks_aggregate(p, 0, NULL);
        sw_end(p, g.own);
    }
    return p;
}

/* The bytes a call of `which` moved, as nccl-tests sizes it: the buffer every rank ends up
 * with (all-reduce, broadcast, reduce) or the whole of what is gathered or scattered. */
static uint64_t call_bytes(int count, MPI_Datatype type, int per_rank, MPI_Comm comm) {
    int size = 0, n = 1;
    if (count <= 0 || PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0)
        return 0;
    if (per_rank && PMPI_Comm_size(comm, &n) != MPI_SUCCESS)
        return 0;
    return (uint64_t)count * (uint64_t)size * (uint64_t)n;
}

/* "comm:<op>:bytes" grows by the call's bytes; its size class's algorithm and bus bandwidth
 * (bytes per ns, GB/s) get one sample each: the blocking call's time is the transfer's. */
static void count_bytes(sw_profiler *p, int which, uint64_t nbytes, MPI_Comm comm, uint64_t ns) {
    if (nbytes == 0)
        return;
    g.total[which] += nbytes;
    sw_counter(p, g.bytes[which], (double)g.total[which]);
    int n = 1;
    if (ns == 0 || PMPI_Comm_size(comm, &n) != MPI_SUCCESS)
        return;
    int k = 63 - __builtin_clzll(nbytes);
    sw_id *ids = g.bandwidth[which][k];
    if (ids[0] == 0) {
        static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
        int unit = k >= 30 ? 3 : k / 10;
        char name[128];
        snprintf(name, sizeof name, "comm:%s:%llu%s:algbw", op_name(which), 1ULL << (k - 10 * unit),
                 units[unit]);
        ids[0] = sw_counter_id(p, name);
        memcpy(strrchr(name, ':') + 1, "busbw", 6);
        ids[1] = sw_counter_id(p, name);
    }
    double algbw = (double)nbytes / (double)ns;
    double factor = n <= 1                              ? 1.0
                    : COLL_BUS[which] == BUS_ALL_REDUCE ? 2.0 * (n - 1) / n
                    : COLL_BUS[which] == BUS_SHARES     ? (double)(n - 1) / n
                                                        : 1.0;
    sw_counter(p, ids[0], algbw);
    sw_counter(p, ids[1], algbw * factor);
}

/* Time the call as `which` and count its bytes (count of type; per_rank: times the ranks). */
#define SW_TIMED(which, call, comm, count, type, per_rank)                                \
    do {                                                                                  \
        sw_profiler *p = before(comm);                                                    \
        uint64_t t0 = 0;                                                                  \
        if (p) {                                                                          \
            sw_begin(p, g.coll[which]);                                                   \
            t0 = sw_now_ns();                                                             \
        }                                                                                 \
        int rc = (call);                                                                  \
        if (p) {                                                                          \
            uint64_t ns = sw_now_ns() - t0;                                               \
            sw_end(p, g.coll[which]);                                                     \
            if (rc == MPI_SUCCESS)                                                        \
                count_bytes(p, which, call_bytes(count, type, per_rank, comm), comm, ns); \
        }                                                                                 \
        return rc;                                                                        \
    } while (0)

SW_API int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type,
                         MPI_Op op, MPI_Comm comm) {
    SW_TIMED(ALLREDUCE, PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm), comm, count, type,
             0);
}

SW_API int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                      int root, MPI_Comm comm) {
    SW_TIMED(REDUCE, PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm), comm, count, type,
             0);
}

SW_API int MPI_Bcast(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    SW_TIMED(BCAST, PMPI_Bcast(buffer, count, type, root, comm), comm, count, type, 0);
}

SW_API int MPI_Barrier(MPI_Comm comm) {
    SW_TIMED(BARRIER, PMPI_Barrier(comm), comm, 0, MPI_BYTE, 0);
}

SW_API int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                         int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    SW_TIMED(ALLGATHER,
             PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm,
             recvcount, recvtype, 1);
}

SW_API int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                      int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    SW_TIMED(GATHER,
             PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),
             comm, sendbuf == MPI_IN_PLACE ? recvcount : sendcount,
             sendbuf == MPI_IN_PLACE ? recvtype : sendtype, 1);
}

SW_API int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                        int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    SW_TIMED(ALLTOALL,
             PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm,
             recvcount, recvtype, 1);
}

SW_API int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                    MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    SW_TIMED(REDUCE_SCATTER, PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm),
             comm, recvcount, type, 1);
}

/* The final round before MPI goes away (if the profiler was not freed first). */
SW_API int MPI_Finalize(void) {
    if (g.p != NULL)
        sw_ranks_aggregate(g.p, 1, NULL);
    if (g.comm != MPI_COMM_NULL && g.comm != (MPI_Comm)0)
        PMPI_Comm_free(&g.comm);
    return PMPI_Finalize();
}
