/*
 * mpi.c — libstepwatch_mpi: MPI as a transport of the cross-rank aggregation, and MPI's
 * collectives timed through its profiling interface (stepwatch/mpi.h, docs/ranks.md).
 *
 * Built only when CMake finds MPI; uses the public API of libstepwatch alone. The ranks layer
 * (sw_ranks_attach) does the rest: payloads, the reduction, the run file, printing.
 *
 * Rounds: a periodic one is one MPI_Gather of the payloads on a duplicate of the user's
 * communicator (so stepwatch's messages never meet the program's). The final one may find a
 * rank dead: each rank sends its payload to rank 0 with MPI_Isend, rank 0 posts one
 * MPI_Irecv per rank and tests them until all arrived or timeout_s passed, then cancels the
 * rest and reports over the ranks that answered. The duplicate communicator returns errors
 * instead of aborting (MPI_ERRORS_RETURN).
 */
#include "stepwatch/mpi.h"

#include <stdint.h>
#include <stdio.h>
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

/* The one attached profiler of this process (MPI is called from one thread). */
static struct {
    sw_profiler *p;
    MPI_Comm user_comm, comm; /* the program's, and stepwatch's duplicate of it */
    int rank, world;
    uint32_t every;
    uint64_t next_round; /* the step count at which the next periodic round is due */
    int in_round;        /* a round's own MPI calls are not timed or counted */
    sw_id coll[NCOLL], own;
    sw_id bytes[NCOLL];          /* comm:<op>:bytes, the bytes moved so far (as torch's) */
    uint64_t bytes_total[NCOLL]; /* what they hold */
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

/* The final round: point to point, rank 0 waiting at most timeout_s. */
static int gather_final(const void *mine, void *all, size_t size, double timeout_s) {
    uint64_t deadline = sw_now_ns() + (uint64_t)(timeout_s * 1e9);
    if (g.world == 1) {
        memcpy(all, mine, size);
        return 0;
    }
    int n = g.rank == 0 ? g.world - 1 : 1;
    MPI_Request *reqs = calloc((size_t)n, sizeof *reqs);
    int *done = calloc((size_t)n, sizeof *done);
    if (reqs == NULL || done == NULL) {
        free(reqs);
        free(done);
        return SW_ENOMEM;
    }
    int rc = MPI_SUCCESS;
    if (g.rank == 0) {
        memcpy(all, mine, size);
        for (int r = 1; rc == MPI_SUCCESS && r < g.world; r++)
            rc = PMPI_Irecv((char *)all + (size_t)r * size, (int)size, MPI_BYTE, r, TAG, g.comm,
                            &reqs[r - 1]);
    } else {
        rc = PMPI_Isend(mine, (int)size, MPI_BYTE, 0, TAG, g.comm, &reqs[0]);
    }
    for (int left = n; rc == MPI_SUCCESS && left > 0 && sw_now_ns() < deadline;) {
        int count = 0;
        rc = PMPI_Testsome(n, reqs, &count, done, MPI_STATUSES_IGNORE);
        left -= count > 0 ? count : 0;
        if (count <= 0)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    /* Past the deadline, let go of what did not arrive: rank 0 cancels its receives (a
     * cancelled one leaves its slot zeroed); a rank whose send rank 0 never took frees the
     * request and lets MPI finish or drop the send. */
    for (int i = 0; rc == MPI_SUCCESS && i < n; i++) {
        if (reqs[i] == MPI_REQUEST_NULL)
            continue;
        if (g.rank != 0) {
            PMPI_Request_free(&reqs[i]);
            continue;
        }
        MPI_Status status;
        int cancelled = 0;
        PMPI_Cancel(&reqs[i]);
        PMPI_Wait(&reqs[i], &status);
        PMPI_Test_cancelled(&status, &cancelled);
        if (cancelled)
            memset((char *)all + (size_t)(i + 1) * size, 0, size);
    }
    free(reqs);
    free(done);
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

/* The offset of each rank's CLOCK_REALTIME from rank 0's, for the cross-rank timeline:
 * rank 0 reads its clock t0, asks rank r for its clock, reads t1 when the answer arrives;
 * r's offset is its time minus the midpoint of t0 and t1, wrong by at most half the round
 * trip. The round with the shortest trip counts. A loaded or oversubscribed node
 * deschedules one side or the other for tens of ms, so after CLOCK_ROUNDS rounds rank 0
 * goes on until one trip took under CLOCK_SHORT_TRIP or CLOCK_MAX_NS have passed (CLOCK_DONE
 * tells r the rounds are over). Rank 0 serves the ranks one after another, once, at attach. */
static int estimate_clock(int64_t *offset) {
    const int tag = TAG + 1;
    int64_t t = 0;
    *offset = 0;
    if (g.rank != 0) {
        for (;;) {
            if (PMPI_Recv(&t, 1, MPI_INT64_T, 0, tag, g.comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                return SW_EIO;
            if (t == CLOCK_DONE)
                break;
            t = (int64_t)realtime_ns();
            if (PMPI_Send(&t, 1, MPI_INT64_T, 0, tag, g.comm) != MPI_SUCCESS)
                return SW_EIO;
        }
        return PMPI_Recv(offset, 1, MPI_INT64_T, 0, tag, g.comm, MPI_STATUS_IGNORE) == MPI_SUCCESS
                   ? 0
                   : SW_EIO;
    }
    for (int r = 1; r < g.world; r++) {
        int64_t best_trip = INT64_MAX, best = 0, start = (int64_t)realtime_ns();
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
        const int64_t done = CLOCK_DONE;
        if (PMPI_Send(&done, 1, MPI_INT64_T, r, tag, g.comm) != MPI_SUCCESS ||
            PMPI_Send(&best, 1, MPI_INT64_T, r, tag, g.comm) != MPI_SUCCESS)
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
        g.coll[i] = sw_action(p, COLL_NAMES[i]);
        char name[64]; /* "collective:MPI_Allreduce" -> "comm:MPI_Allreduce:bytes" */
        snprintf(name, sizeof name, "comm:%s:bytes", COLL_NAMES[i] + strlen("collective:"));
        g.bytes[i] = i == BARRIER ? SW_ID_NONE : sw_counter_id(p, name);
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

/* The bytes of count elements of type, times n (0 when MPI cannot say). */
static uint64_t bytes_of(int count, MPI_Datatype type, int n) {
    int size = 0;
    if (count <= 0 || PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0)
        return 0;
    return (uint64_t)count * (uint64_t)size * (uint64_t)(n > 0 ? n : 1);
}

static int comm_size(MPI_Comm comm) {
    int n = 1;
    return PMPI_Comm_size(comm, &n) == MPI_SUCCESS ? n : 1;
}

/* After a timed call of which that moved nbytes (nccl-tests' size of the op, as
 * stepwatch.collectives counts torch's): the op's bytes so far into its counter. */
static void count_bytes(sw_profiler *p, int which, uint64_t nbytes) {
    if (nbytes == 0 || g.bytes[which] == SW_ID_NONE)
        return;
    g.bytes_total[which] += nbytes;
    sw_counter(p, g.bytes[which], (double)g.bytes_total[which]);
}

/* Time call as the collective which on comm, and count the bytes it moves (nbytes, read only
 * when a profiler is attached). */
#define SW_TIMED(which, call, comm, nbytes)  \
    do {                                     \
        sw_profiler *p = before(comm);       \
        if (p)                               \
            sw_begin(p, g.coll[which]);      \
        int rc = (call);                     \
        if (p) {                             \
            sw_end(p, g.coll[which]);        \
            count_bytes(p, which, (nbytes)); \
        }                                    \
        return rc;                           \
    } while (0)

SW_API int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type,
                         MPI_Op op, MPI_Comm comm) {
    SW_TIMED(ALLREDUCE, PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm), comm,
             bytes_of(count, type, 1));
}

SW_API int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                      int root, MPI_Comm comm) {
    SW_TIMED(REDUCE, PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm), comm,
             bytes_of(count, type, 1));
}

SW_API int MPI_Bcast(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    SW_TIMED(BCAST, PMPI_Bcast(buffer, count, type, root, comm), comm, bytes_of(count, type, 1));
}

SW_API int MPI_Barrier(MPI_Comm comm) {
    SW_TIMED(BARRIER, PMPI_Barrier(comm), comm, 0);
}

SW_API int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                         int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    SW_TIMED(ALLGATHER,
             PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm,
             bytes_of(recvcount, recvtype, comm_size(comm))); /* the output */
}

SW_API int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                      int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    SW_TIMED(GATHER,
             PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),
             comm, /* the gathered whole; in place at the root: its receive count is the one */
             sendbuf == MPI_IN_PLACE ? bytes_of(recvcount, recvtype, comm_size(comm))
                                     : bytes_of(sendcount, sendtype, comm_size(comm)));
}

SW_API int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                        int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    SW_TIMED(ALLTOALL,
             PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm,
             bytes_of(recvcount, recvtype, comm_size(comm))); /* the input: as much as received */
}

SW_API int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                    MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    SW_TIMED(REDUCE_SCATTER, PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm),
             comm, bytes_of(recvcount, type, comm_size(comm))); /* the input */
}

/* The final round before MPI goes away (if the profiler was not freed first). */
SW_API int MPI_Finalize(void) {
    if (g.p != NULL)
        sw_ranks_aggregate(g.p, 1, NULL);
    if (g.comm != MPI_COMM_NULL && g.comm != (MPI_Comm)0)
        PMPI_Comm_free(&g.comm);
    return PMPI_Finalize();
}
