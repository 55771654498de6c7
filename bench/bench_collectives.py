"""What timing a collective costs in wall time, side by side: a gloo all_reduce loop in a
process group of one rank, bare and under stepwatch.torch.instrument() (collective:all_reduce,
its bytes and bandwidth counters), taking turns in one process, round after round.

    build/venv/bin/python bench/bench_collectives.py [--rounds 15] [--calls 2000] [--out F]

Per round and variant: the mean time of one call over `calls` calls; the added time is the
median over the rounds of (instrumented - bare) of the same round (taking turns at going
first), sync and async_op=True +
wait(), and the fastest round's of each variant apart (min - min: on a shared machine the
other jobs only ever add time). The instructions per call (callgrind, a steadier figure on a shared machine) are
bench_instructions.py's group "collectives"; docs/collectives.md has both.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def loop(dist, t, calls, asynchronous):
    t0 = time.perf_counter_ns()
    if asynchronous:
        for _ in range(calls):
            dist.all_reduce(t, async_op=True).wait()
    else:
        for _ in range(calls):
            dist.all_reduce(t)
    return (time.perf_counter_ns() - t0) / calls


def timed_loop(swtorch, prof, dist, t, calls, asynchronous):
    swtorch.instrument(prof)
    try:
        return loop(dist, t, calls, asynchronous)
    finally:
        swtorch.uninstrument(quiet=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--out", default=os.path.join("build", "bench", "collectives_wall.json"))
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    import stepwatch
    import stepwatch.torch as swtorch
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "pg"),
                            rank=0, world_size=1)
    t = torch.zeros(args.bytes // 4)
    added = {"sync": [], "async": []}
    bare = {"sync": [], "async": []}
    timed = {"sync": [], "async": []}
    prof = stepwatch.Profiler(name="bench")
    for _ in range(3):  # warm: gloo's buffers, the wrappers' first calls
        loop(dist, t, args.calls // 10, False)
    for r in range(args.rounds):
        for kind in ("sync", "async"):
            if r % 2:  # odd rounds time the instrumented loop first: no order to favour one
                b = timed_loop(swtorch, prof, dist, t, args.calls, kind == "async")
                a = loop(dist, t, args.calls, kind == "async")
            else:
                a = loop(dist, t, args.calls, kind == "async")
                b = timed_loop(swtorch, prof, dist, t, args.calls, kind == "async")
            bare[kind].append(a)
            timed[kind].append(b)
            added[kind].append(b - a)
    prof.close()
    dist.destroy_process_group()
    figures = {k: {"bare_ns": statistics.median(bare[k]), "added_ns": statistics.median(added[k]),
                   "added_range_ns": [min(added[k]), max(added[k])],
                   "fastest_bare_ns": min(bare[k]),
                   "fastest_added_ns": min(timed[k]) - min(bare[k])} for k in added}
    for k, f in figures.items():
        print(f"{k:5s}  bare {f['bare_ns'] / 1e3:8.2f} us/call   added {f['added_ns'] / 1e3:+7.2f} "
              f"us/call (median of {args.rounds} rounds; range {f['added_range_ns'][0] / 1e3:+.2f}"
              f" to {f['added_range_ns'][1] / 1e3:+.2f}); fastest rounds: bare "
              f"{f['fastest_bare_ns'] / 1e3:.2f}, added {f['fastest_added_ns'] / 1e3:+.2f} us/call")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"rounds": args.rounds, "calls": args.calls, "bytes": args.bytes,
                   "figures": figures}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
