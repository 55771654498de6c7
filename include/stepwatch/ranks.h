/*
 * stepwatch/ranks.h — many ranks: which rank is slow, and why.
 * Included by stepwatch.h; do not include directly. See docs/ranks.md.
 *
 * Every rank sums up its run in a payload of SW_RANK_PAYLOAD_SIZE bytes (per action of the
 * common vocabulary: calls, total and self time, min/p50/p99/max, std; never per-step data).
 * A transport (torch.distributed in Python, MPI in libstepwatch_mpi, or rank files read
 * back) carries the payloads to rank 0, which reduces them into an sw_ranks: per action the
 * per-step time across ranks (min, median, max, with the ranks at the extremes) and the
 * straggler ranks, worst first, each with its blame:
 *
 *   data         its data wait is longer than the other ranks'
 *   compute      its own work (the step minus data wait minus collective wait) is longer;
 *                `part` names forward, backward, optimizer, ... whose own time grew most
 *   collectives  its time inside collectives (all-reduce, barrier) is longer and makes its
 *                steps longer (a slow link, not waiting for a slower peer)
 *
 * Under data parallelism (DDP) the ranks move in lockstep: every rank's step takes as long
 * as the slowest one's, and the others spend the difference waiting in the gradient
 * all-reduce. The straggler is the rank that waits least there, which is why the collective
 * wait must be measured (actions named "collective" or "collective:<what>"; stepwatch's DDP
 * hook and the MPI wrappers record them). Without it, lockstep ranks cannot be told apart and
 * sw_ranks.collective_ranks is 0.
 *
 * Waiting: the fast ranks of a lockstep job spend the straggler's excess inside a
 * collective. The view names it in one line (sw_ranks_wait_sentence): the worst straggler
 * "made the other N ranks wait X per step in <op>", X being, over the collective ops, the
 * largest of (the other ranks' median time per step in the op minus the straggler's), N the
 * other ranks whose time in that op exceeds the straggler's by the threshold. Said only when
 * X reaches the threshold. Per op (a collective:<op> action, "collective:" cut), the view has
 * the time per step across ranks and, where the bytes are known (the counter
 * "comm:<op>:bytes", the bytes moved so far, one sample per call), the bandwidth bytes / time inside the op:
 * the slowest rank's (its link, or a rank that waits there) and the median.
 *
 * FLOP/s: a rank whose run notes "flops_per_step" (stepwatch.flops) carries it; its TFLOP/s
 * is that over its mean step, the job's the sum over the ranks; MFU where it notes
 * "peak_flops".
 *
 * Payloads are plain bytes (little-endian, versioned): a buffer of world_size payloads, one
 * per rank at offset rank * SW_RANK_PAYLOAD_SIZE, is what every transport fills; a slot left
 * zeroed is a rank that did not answer.
 */
#ifndef STEPWATCH_RANKS_H
#define STEPWATCH_RANKS_H
#ifdef __cplusplus
extern "C" {
#endif

#define SW_RANK_PAYLOAD_SIZE 1024
/* The most ranks a view covers (1,048,576: 704 MiB of payloads at rank 0). */
#define SW_RANKS_MAX_WORLD (1 << 20)

/* Write p's payload (a snapshot of it now) into buf, which holds size >= SW_RANK_PAYLOAD_SIZE
 * bytes, as rank `rank` of world_size in the transport (world_size 0: the profiler's own rank
 * and world size). Safe while other threads record. 0, SW_EINVAL, SW_ENOMEM. */
SW_API int sw_rank_payload(sw_profiler *p, int rank, int world_size, void *buf, size_t size);
/* The same from a snapshot (one rank's, e.g. sw_run_rank_snapshot). */
SW_API int sw_rank_payload_of(const sw_snapshot *s, void *buf, size_t size);

typedef enum sw_blame {
    SW_BLAME_NONE = 0,
    SW_BLAME_DATA,
    SW_BLAME_COMPUTE,
    SW_BLAME_COLLECTIVE
} sw_blame;

/* "data", "compute", "collectives"; "none". Static string. */
SW_API const char *sw_blame_name(sw_blame blame);

/* One action across ranks: each rank's time in it per step. */
typedef struct sw_rank_stat {
    const char *name; /* step, data, forward, loss, backward, optimizer, zero_grad,
                              callback, collective, and compute (step - data - collective) */
    int ranks;        /* ranks that recorded it (0: no rank did) */
    double min_ns, median_ns, max_ns;
    int min_rank, max_rank; /* the lowest rank holding the extreme */
    uint64_t calls;         /* over all ranks */
    double p99_max_ns;      /* the largest per-call p99 of any rank */
    int p99_max_rank;
} sw_rank_stat;

/* A rank slower than the others, per step. */
typedef struct sw_rank_straggler {
    int rank, local_rank;
    const char *host;
    double excess_ns; /* how much longer its own work (or, for collectives, its step)
                              takes than the median of the other ranks */
    sw_blame blame;
    double blame_ns;  /* the blamed part's excess over the other ranks' median */
    const char *part; /* compute: the part whose own time grew most ("forward", ...);
                              NULL when none stands out */
    double part_ns;
    double step_ns, data_ns, compute_ns, collective_ns; /* this rank's means per step */
} sw_rank_straggler;

/* Most collective ops a view keeps (the payload carries each rank's 5 with the most time;
 * a rank's ops whose names come past this many are counted in sw_ranks.ops_left_out). */
#define SW_RANKS_MAX_OPS 6

/* One collective op across ranks. */
typedef struct sw_rank_op {
    const char *name; /* "allreduce", "all_gather", "stepwatch" (its own rounds), ... */
    int ranks;        /* ranks that ran it */
    double min_ns, median_ns, max_ns; /* time inside it per step */
    int min_rank, max_rank;
    uint64_t calls;           /* over all ranks */
    int bw_ranks;             /* ranks whose bytes are known (0: no bandwidth) */
    double bytes_per_step;    /* median over those ranks */
    double min_bw, median_bw; /* bytes/s: bytes over time inside the op */
    int min_bw_rank;          /* the slowest */
} sw_rank_op;

/* A figure per rank across ranks (TFLOP/s, MFU); ranks 0: unknown everywhere. */
typedef struct sw_rank_rate {
    int ranks;
    double min, median, max;
    int min_rank, max_rank;
    double total; /* the sum over the ranks (the job's TFLOP/s) */
} sw_rank_rate;

/* One rank that answered with steps (the heatmap's row), ascending ranks. */
typedef struct sw_rank_row {
    int rank;
    double step_ns;                 /* mean steady step */
    double tflops;                  /* NAN: unknown */
    double op_ns[SW_RANKS_MAX_OPS]; /* time per step in ops[k] (0: none) */
} sw_rank_row;

typedef struct sw_ranks {
    int world_size;
    int answered; /* ranks whose payload arrived */
    int nmissing;
    int *missing;                  /* the ranks that did not answer, ascending */
    uint64_t min_steps, max_steps; /* steady steps per rank */
    const char *phase;    /* "train" when the ranks' payloads use the train phase, else "all" */
    int collective_ranks; /* ranks that measured collective waits */
    double threshold_ns;  /* a straggler's excess is at least this (10 % of the median step,
                              at least 50 us) */
    size_t nstats;
    sw_rank_stat *stats; /* the actions in the order above; those no rank recorded too */
    size_t nstragglers;
    sw_rank_straggler *stragglers; /* every rank past the threshold, worst first */
    /* Collectives by op, most median time first; the rows of the ranks with steps. */
    size_t nops;
    sw_rank_op *ops;
    int ops_left_out; /* ranks' ops left out: their names came past SW_RANKS_MAX_OPS */
    size_t nrows;
    sw_rank_row *rows;
    sw_rank_rate tflops; /* TFLOP/s per rank (total: the job's) */
    sw_rank_rate mfu;    /* model FLOPs utilization per rank, 0..1 */
    /* The wait the worst straggler causes (the rule above); wait_op NULL: none. */
    int wait_rank;
    const char *wait_op;
    double wait_ns;      /* per step, the other ranks' median */
    int waiting_ranks;   /* other ranks that wait at least the threshold */
    sw_blame wait_blame; /* the straggler's own blame */
} sw_ranks;

/* "rank 3 made the other 7 ranks wait 41.0 ms per step in all_gather (its own blame:
 * data)" ("made 5 other ranks wait" when not all of them do) into buf (size bytes, NUL included); "" when r has no wait. Returns buf. */
SW_API char *sw_ranks_wait_sentence(const sw_ranks *r, char *buf, size_t size);

/* Reduce the payloads of world_size ranks (rank r's at offset r * SW_RANK_PAYLOAD_SIZE of a
 * buffer of world_size * SW_RANK_PAYLOAD_SIZE bytes; a slot that is not a valid payload of
 * rank r is a rank that did not answer). The caller owns *out (sw_ranks_free). SW_EINVAL for
 * NULL arguments or world_size outside 1..SW_RANKS_MAX_WORLD, SW_ENOMEM. */
SW_API int sw_ranks_reduce(const void *payloads, int world_size, sw_ranks **out);
SW_API void sw_ranks_free(sw_ranks *r);

/* Write the cross-rank view: SW_FORMAT_TABLE (text) shows at most top stragglers (0: 3),
 * SW_FORMAT_MARKDOWN the same, SW_FORMAT_JSON all of them (SW_EFORMAT for other formats).
 * SW_EIO on a write error. */
SW_API int sw_ranks_write(const sw_ranks *r, sw_format fmt, int top, FILE *out);

/* The cross-rank view of a run file: from its ranks' aggregates when it holds several ranks
 * (a merged file), else from the last aggregation stored in it (rank 0's file of a run that
 * aggregated online; the one that more ranks answered wins when both exist). SW_ENOTFOUND
 * when the file has neither. Ranks of the world size missing from the file are missing. */
SW_API int sw_run_ranks(sw_run *run, sw_ranks **out);

/* ---- aggregating a live run over a transport (MPI: stepwatch/mpi.h) ---- */

/* Carry every rank's payload to rank 0. mine is this rank's payload (size bytes); on rank 0,
 * all has world_size * size bytes, zeroed, to fill (slot r for rank r). final: the end of
 * the run, where a rank may be dead: wait at most timeout_s, then return 0 with the slots of
 * the ranks that did not answer left zeroed. Returns 0 or a negative SW_E* code. */
typedef int (*sw_gather_fn)(void *ctx, const void *mine, void *all, size_t size, int final,
                            double timeout_s);

typedef struct sw_ranks_options {
    size_t size;          /* sizeof(sw_ranks_options) as the caller was compiled (stepwatch.h,
                             "Structs that grow") */
    int rank, world_size; /* in the transport (0, 0: the profiler's) */
    sw_gather_fn gather;
    void *ctx;
    double timeout_s;           /* the final gather's wait; 0 = 30 s */
    int top;                    /* stragglers printed; 0 = 3 */
    sw_format format;           /* rank 0's printed view: TABLE (default), MARKDOWN or JSON */
    FILE *out;                  /* where rank 0 prints the final view; NULL = stderr */
    int quiet;                  /* nonzero: print nothing (the view is still stored) */
    void (*release)(void *ctx); /* called when p is freed, after the final round: the
                                   transport lets go of ctx (NULL: nothing to do) */
    /* New options go here, at the end. */
} sw_ranks_options;
#define SW_RANKS_OPTIONS_INIT SW__SIZED_INIT(sw_ranks_options)

/* Aggregate p over a transport: sw_ranks_aggregate gathers now (collective: every rank must
 * call it, in the same order as its other collectives); on rank 0 the view is reduced,
 * stored in p's run file (sw_run_add_ranks) and, when final, printed. The final aggregation
 * also runs by itself when p is freed, if it has not run yet (collective too: free p on
 * every rank). sw_ranks_attach copies o; SW_ESTATE if p already has one. sw_ranks_aggregate
 * returns SW_ENOTFOUND without an attached transport; on rank 0, *out (may be NULL) gets the
 * view (the caller frees it). The final round runs once: later final calls return 0 at
 * once. */
SW_API int sw_ranks_attach(sw_profiler *p, const sw_ranks_options *o);
SW_API int sw_ranks_aggregate(sw_profiler *p, int final, sw_ranks **out);

#ifdef __cplusplus
}
#endif
#endif /* STEPWATCH_RANKS_H */
