/*
 * stepwatch/mpi.h — many ranks under MPI: which rank is slow, and why (docs/ranks.md).
 *
 * Build with mpicc and link the MPI library of stepwatch before stepwatch itself:
 *
 *     mpicc train.c -lstepwatch_mpi -lstepwatch
 *
 *     sw_profiler *p;  sw_options o = SW_OPTIONS_INIT;  o.run_file = "run-{rank}.db";
 *     sw_profiler_new(&o, &p);
 *     sw_mpi_options mo = SW_MPI_OPTIONS_INIT;  mo.aggregate_every = 100;
 *     sw_mpi_attach(p, &mo);   (collective)
 *     ... the training loop (steps, actions) ...
 *     sw_profiler_free(p);     (collective: the final round; or MPI_Finalize runs it)
 *
 * From sw_mpi_attach on:
 *   - MPI's blocking collectives (MPI_Allreduce, MPI_Reduce, MPI_Bcast, MPI_Barrier,
 *     MPI_Allgather, MPI_Gather, MPI_Alltoall, MPI_Reduce_scatter_block) are timed as
 *     actions "collective:MPI_Allreduce", ... through MPI's profiling interface (this
 *     library defines them and calls PMPI_*): the time a rank spends in them, waiting for the
 *     slowest rank included, is its collective wait. Their bytes (nccl-tests' sizes) are
 *     the counter "comm:MPI_Allreduce:bytes" (running total), and each call's algorithm and
 *     bus bandwidth the counters "comm:MPI_Allreduce:<size class>:algbw" and ":busbw", as
 *     for torch.distributed (docs/collectives.md).
 *   - each rank's wall clock minus rank 0's is estimated down a binary tree (each rank's
 *     parent pings it eight times at least, the shortest round trip counts; the offsets add
 *     up the tree) and kept in its run file: exports put every rank on rank 0's clock.
 *   - every aggregate_every steps, at the next of those collectives, one gather of
 *     SW_RANK_PAYLOAD_SIZE bytes per rank to rank 0 (kept in its run file). Every rank must
 *     reach the same collective after the same number of steps (as data-parallel loops do).
 *   - the final round runs when p is freed or at MPI_Finalize, whichever comes first: the
 *     payloads go up a binomial tree of point-to-point messages to rank 0 (log2(N) levels,
 *     each rank waiting for its children its level's share of timeout_s), which waits at
 *     most timeout_s, then prints the cross-rank view (per action the time per step across
 *     ranks, the stragglers with their blame), naming the ranks that did not answer (a dead
 *     rank's children send straight to rank 0), and keeps it in its run file.
 *
 * One profiler per process is attached at a time. The calls are made on the thread that
 * calls MPI (MPI_THREAD_FUNNELED is enough).
 */
#ifndef STEPWATCH_MPI_H
#define STEPWATCH_MPI_H

#include <mpi.h>

#include "stepwatch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_mpi_options {
    size_t size;              /* sizeof(sw_mpi_options) as the caller was compiled (stepwatch.h,
                                 "Structs that grow") */
    MPI_Comm comm;            /* the ranks to aggregate over; 0 or MPI_COMM_NULL = WORLD */
    double timeout_s;         /* how long rank 0 waits at the final round; 0 = 30 s */
    FILE *out;                /* rank 0's final view; NULL = stderr */
    uint32_t aggregate_every; /* > 0: a round every N steps (see above); 0 = at the end only */
    int top;                  /* stragglers printed; 0 = 3 */
    sw_format format;         /* SW_FORMAT_TABLE (default), _MARKDOWN or _JSON */
    int quiet;                /* nonzero: print nothing (the view is still stored) */
    /* New options go here, at the end. */
} sw_mpi_options;
#define SW_MPI_OPTIONS_INIT SW__SIZED_INIT(sw_mpi_options)

/* Aggregate p across the ranks of o->comm (o may be NULL: defaults). Collective over comm
 * (it duplicates comm for its own messages and estimates the clock offsets). Returns 0,
 * SW_EINVAL (NULL p, MPI not initialized, o->size under the first release's), SW_EUNSUPPORTED
 * (o sets options of a newer stepwatch/mpi.h), SW_ESTATE (a profiler is attached already), or the
 * codes of sw_ranks_attach; SW_EIO when an MPI call fails. */
SW_API int sw_mpi_attach(sw_profiler *p, const sw_mpi_options *o);

/* One round now (collective over the attached comm): on rank 0, *out (may be NULL) gets the
 * view, to free with sw_ranks_free. SW_ENOTFOUND when nothing is attached. */
SW_API int sw_mpi_aggregate(sw_ranks **out);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_MPI_H */
