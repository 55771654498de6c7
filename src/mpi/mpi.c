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
 * parent the wait, never a hang; rank 0 reports over the ranks that answered. The duplicate
 * communicator returns errors instead of aborting (MPI_ERRORS_RETURN). The clock offsets go
 * down a binary tree.
 */
#include "stepwatch/mpi.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG 0x5357                /* "SW" */
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

/* Test reqs[0..n) until all are done or the clock passes deadline (ns). */
static int wait_until(int n, MPI_Request *reqs, uint64_t deadline) {
    int done[64]; /* indices, unused: a rank has at most log2(2^20) children */
    int rc = MPI_SUCCESS;
    for (int left = n; rc == MPI_SUCCESS && left > 0 && sw_now_ns() < deadline;) {
        int count = 0;
        rc = PMPI_Testsome(n, reqs, &count, done, MPI_STATUSES_IGNORE);
        left -= count > 0 ? count : 0;
        if (count <= 0)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return rc;
}

/* The payloads in the block of this rank's k-th child (rank + 2^k): 2^k, or to the world's end. */
static size_t child_block(int k) {
    int child = g.rank + (1 << k);
    return (size_t)((1 << k) < g.world - child ? 1 << k : g.world - child);
}

/* The final round, up a binomial tree: rank r's subtree is the ranks r .. r + span - 1 (span:
 * r's lowest set bit, the whole world for rank 0), so a subtree's payloads are one block. A
 * rank receives its children's blocks (child r + 2^k for each 2^k < span, its block
 * 2^k payloads or up to the world's end) into their places in its own, then sends that to its
 * parent r - span: log2(N) levels, and rank 0 takes log2(N) messages, not N - 1. A rank may
 * be dead, so each level is bounded: a rank whose subtree is h levels high waits for its
 * children until timeout_s * h / levels after its start (rank 0: timeout_s), so its parent,
 * a level higher, still waits for it after it waited for a dead child. A child that did not
 * send in time has its receive cancelled and its block zeroed: its ranks did not answer (a
 * dead rank's subtree with it). A rank whose parent does not take its block lets go of the
 * send at timeout_s. */
static int gather_final(const void *mine, void *all, size_t size, double timeout_s) {
    uint64_t start = sw_now_ns(), timeout_ns = (uint64_t)(timeout_s * 1e9);
    if (g.world == 1) {
        memcpy(all, mine, size);
        return 0;
    }
    int levels = 0;
    while ((1 << levels) < g.world)
        levels++;
    int span = g.rank == 0 ? 1 << levels : g.rank & -g.rank, height = 0;
    while ((1 << height) < span)
        height++;
    size_t count = (size_t)(span < g.world - g.rank ? span : g.world - g.rank);
    unsigned char *block = g.rank == 0 ? all : calloc(count, size);
    if (block == NULL)
        return SW_ENOMEM;
    memcpy(block, mine, size);
    MPI_Request reqs[32];
    int n = 0, rc = MPI_SUCCESS;
    for (int k = 0; k < height && g.rank + (1 << k) < g.world; k++)
        reqs[n++] = MPI_REQUEST_NULL;
    for (int k = 0; rc == MPI_SUCCESS && k < n; k++)
        rc = PMPI_Irecv(block + ((size_t)1 << k) * size, (int)(child_block(k) * size), MPI_BYTE,
                        g.rank + (1 << k), TAG, g.comm, &reqs[k]);
    if (rc == MPI_SUCCESS)
        rc = wait_until(n, reqs, start + timeout_ns / (uint64_t)levels * (uint64_t)height);
    /* Past the deadline (or on an error), cancel what did not arrive: its block is zeroed */
    for (int k = 0; k < n; k++) {
        if (reqs[k] == MPI_REQUEST_NULL)
            continue;
        MPI_Status status;
        int cancelled = 0;
        PMPI_Cancel(&reqs[k]);
        PMPI_Wait(&reqs[k], &status);
        PMPI_Test_cancelled(&status, &cancelled);
        if (cancelled)
            memset(block + ((size_t)1 << k) * size, 0, child_block(k) * size);
    }
    if (g.rank == 0)
        return rc == MPI_SUCCESS ? 0 : SW_EIO;
    MPI_Request send = MPI_REQUEST_NULL;
    if (rc == MPI_SUCCESS)
        rc = PMPI_Isend(block, (int)(count * size), MPI_BYTE, g.rank - span, TAG, g.comm, &send);
    if (rc == MPI_SUCCESS)
        rc = wait_until(1, &send, start + timeout_ns);
    if (send == MPI_REQUEST_NULL)
        free(block);
    else /* the parent never took it: MPI finishes or drops the send, the block stays */
        PMPI_Request_free(&send);
    return rc == MPI_SUCCESS ? 0 : SW_EIO;
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
