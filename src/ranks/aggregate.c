/*
 * aggregate.c — aggregating a live run over a transport the caller brings (sw_ranks_attach,
 * sw_ranks_aggregate): this rank's payload, the transport's gather, and on rank 0 the
 * reduction, the run file and the printed view.
 *
 * The transport is kept in a sink (core/sink.h) so that freeing the profiler runs the final
 * aggregation when the program did not: sinks close newest first, so this one (attached after
 * the run file's writer) stores its round before the writer completes the file. At process
 * exit without a free nothing is gathered: the transport (MPI) may be gone by then.
 */
#include "core/sink.h"
#include "ranks.h"

#include <stdlib.h>

typedef struct ranks_sink {
    sw__sink sink; /* first: the core hands this back to the ops */
    sw_profiler *p;
    sw_ranks_options o;
    int final_done;
} ranks_sink;

static int aggregate_with(ranks_sink *rs, int final, sw_ranks **out) {
    if (out)
        *out = NULL;
    unsigned char mine[SW_RANK_PAYLOAD_SIZE];
    int rc = sw_rank_payload(rs->p, rs->o.rank, rs->o.world_size, mine, sizeof mine);
    if (rc != 0)
        return rc;
    const sw_ranks_options *o = &rs->o;
    unsigned char *all = NULL;
    if (o->rank == 0 && (all = calloc((size_t)o->world_size, SW_RANK_PAYLOAD_SIZE)) == NULL)
        return SW_ENOMEM;
    rc = o->gather(o->ctx, mine, all, SW_RANK_PAYLOAD_SIZE, final, o->timeout_s);
    if (final)
        rs->final_done = 1;
    sw_ranks *view = NULL;
    if (rc == 0 && o->rank == 0)
        rc = sw_ranks_reduce(all, o->world_size, &view);
    if (rc == 0 && o->rank == 0) {
        int stored = sw_run_add_ranks(rs->p, all, SW_RANK_PAYLOAD_SIZE, o->world_size, final);
        if (stored != 0 && stored != SW_ENOTFOUND)
            rc = stored;
        if (final && !o->quiet) {
            int written = sw_ranks_write(view, o->format, o->top, o->out ? o->out : stderr);
            rc = rc ? rc : written;
        }
    }
    free(all);
    if (out && rc == 0)
        *out = view;
    else
        sw_ranks_free(view);
    return rc;
}

static void close_sink(sw__sink *sink) {
    ranks_sink *rs = (ranks_sink *)sink;
    if (!rs->final_done)
        aggregate_with(rs, 1, NULL);
    if (rs->o.release)
        rs->o.release(rs->o.ctx);
    free(rs);
}

static void forget_in_child(sw__sink *sink) {
    free(sink);
}

static const sw__sink_ops ranks_ops = {
    .on_close = close_sink,
    .on_fork_child = forget_in_child,
};

int sw_ranks_attach(sw_profiler *p, const sw_ranks_options *given) {
    if (p == NULL || given == NULL)
        return SW_EINVAL;
    sw_ranks_options copy; /* of whatever stepwatch/ranks.h the caller was built with */
    int rc = sw__sized_in(&copy, sizeof copy, given, SW__END_OF(sw_ranks_options, release),
                          "sw_ranks_options");
    if (rc != 0)
        return rc;
    const sw_ranks_options *o = &copy;
    if (o->gather == NULL)
        return SW_EINVAL;
    if (o->format != SW_FORMAT_TABLE && o->format != SW_FORMAT_MARKDOWN &&
        o->format != SW_FORMAT_JSON)
        return SW_EFORMAT;
    if (sw__sink_find(p, &ranks_ops) != NULL)
        return SW_ESTATE;
    ranks_sink *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return SW_ENOMEM;
    rs->sink.ops = &ranks_ops;
    rs->p = p;
    rs->o = *o;
    if (rs->o.world_size <= 0) {
        rs->o.rank = sw__options(p)->rank;
        rs->o.world_size = sw__options(p)->world_size;
    }
    if (rs->o.world_size < 1 || rs->o.rank < 0 || rs->o.rank >= rs->o.world_size) {
        free(rs);
        return SW_EINVAL;
    }
    if (rs->o.timeout_s <= 0)
        rs->o.timeout_s = 30;
    sw__sink_attach(p, &rs->sink);
    return 0;
}

int sw_ranks_aggregate(sw_profiler *p, int final, sw_ranks **out) {
    if (out)
        *out = NULL;
    if (p == NULL)
        return SW_EINVAL;
    ranks_sink *rs = (ranks_sink *)sw__sink_find(p, &ranks_ops);
    if (rs == NULL)
        return SW_ENOTFOUND;
    if (final && rs->final_done)
        return 0; /* the final round runs once */
    return aggregate_with(rs, final, out);
}
