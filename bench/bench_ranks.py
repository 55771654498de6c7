"""What many ranks cost rank 0: reducing N ranks' payloads into the cross-rank view.

    build/venv/bin/python bench/bench_ranks.py [--out build/bench/ranks.json]

The payloads are real: a Profiler times 50 steps (data, forward), and its payload is taken
as each rank r of N (Profiler.rank_payload), so every slot is valid. The time is
stepwatch.ranks_view(payloads, N, "json"): decoding, the reduction (a sort per metric for
the medians of the other ranks) and writing the JSON view; the median of 5 runs each.
The payload is RANK_PAYLOAD_SIZE bytes per rank whatever the run's length: a periodic round
gathers N times that to rank 0 (docs/ranks.md).
"""
import argparse
import json
import statistics
import time

import stepwatch
from stepwatch._stepwatch import RANK_PAYLOAD_SIZE


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a = ap.parse_args()
    p = stepwatch.Profiler(name="bench_ranks")
    data, forward = p.action("data"), p.action("forward")
    for _ in range(50):
        with p.step(32):
            with data:
                pass
            with forward:
                time.sleep(0.0002)
    results = []
    print(f"payload: {RANK_PAYLOAD_SIZE} bytes per rank")
    print(f"{'ranks':>8} {'gathered to rank 0':>19} {'reduce + JSON':>14}")
    for n in (8, 1000, 10000, 100000):
        blob = b"".join(p.rank_payload(r, n) for r in range(n))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            stepwatch.ranks_view(blob, n, "json")
            times.append(time.perf_counter() - start)
        ms = statistics.median(times) * 1e3
        print(f"{n:>8} {len(blob) / 1e6:>16.2f} MB {ms:>11.2f} ms")
        results.append({"ranks": n, "bytes": len(blob), "reduce_ms": ms})
    p.close()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"payload_bytes": RANK_PAYLOAD_SIZE, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
