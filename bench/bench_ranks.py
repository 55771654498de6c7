"""What many ranks cost rank 0: reducing N ranks' payloads into the cross-rank view.

    build/venv/bin/python bench/bench_ranks.py [--out build/bench/ranks.json]
        [--before OLD/libstepwatch.so]

The payloads are real: a Profiler times 50 steps (data, forward, an all-reduce with its bytes),
and its payload is taken as each rank r of N (Profiler.rank_payload), so every slot is valid;
rank r's step times are spread a little (a straggler every 97 ranks) so the medians are not of
equal values. The time is stepwatch.ranks_view(payloads, N, "json"): decoding, the reduction
(a selection per metric for the medians: src/ranks/select.c) and writing the JSON view; the
median of 5 runs each.

--before LIB times another build's library on the same payloads in the same run (before /
after side by side, under the same load): its sw_ranks_reduce and sw_ranks_write (JSON) through
ctypes, on the payloads cut to that library's layout (version 1: the first 704 bytes, no ops
or FLOPs). The payload is RANK_PAYLOAD_SIZE bytes per rank whatever the run's length: a
periodic round gathers N times that to rank 0 (docs/ranks.md).
"""
import argparse
import ctypes
import json
import statistics
import struct
import time

import stepwatch
from stepwatch._stepwatch import RANK_PAYLOAD_SIZE

SIZES = (8, 1000, 10000, 100000)
BUDGET_MS = {10000: 10.0, 100000: 100.0}  # issue 41's goal on this machine
V1_SIZE = 704  # the payload before version 2 (no ops, no FLOPs)


def payloads(p, n):
    """n payloads of p's run, rank r's step time scaled by a small spread (its step slot's
    total_ns: the first u64 of slot 0, at byte 128 + 8)."""
    out = bytearray()
    for r in range(n):
        one = bytearray(p.rank_payload(r, n))
        total = struct.unpack_from("<Q", one, 136)[0]
        scale = 1 + (r % 13) / 100 + (0.5 if r % 97 == 1 else 0)
        struct.pack_into("<Q", one, 136, int(total * scale))
        out += one
    return bytes(out)


def as_v1(blob, n):
    """The payloads in version 1's layout: 704 bytes, version 1, bytes 112..127 zero."""
    out = bytearray()
    for r in range(n):
        one = bytearray(blob[r * RANK_PAYLOAD_SIZE:r * RANK_PAYLOAD_SIZE + V1_SIZE])
        struct.pack_into("<H", one, 4, 1)
        one[112:128] = bytes(16)
        out += one
    return bytes(out)


class OldLibrary:
    """Another build's sw_ranks_reduce + sw_ranks_write(JSON) through ctypes."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.libc = ctypes.CDLL(None)
        self.lib.sw_ranks_reduce.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                             ctypes.POINTER(ctypes.c_void_p)]
        self.lib.sw_ranks_write.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                            ctypes.c_void_p]
        self.lib.sw_ranks_free.argtypes = [ctypes.c_void_p]
        self.libc.open_memstream.restype = ctypes.c_void_p
        self.libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_size_t)]
        self.libc.fclose.argtypes = [ctypes.c_void_p]
        self.libc.free.argtypes = [ctypes.c_void_p]

    def view(self, blob, n):
        view = ctypes.c_void_p()
        rc = self.lib.sw_ranks_reduce(blob, n, ctypes.byref(view))
        if rc != 0:
            raise RuntimeError(f"sw_ranks_reduce: {rc}")
        buf, size = ctypes.c_void_p(), ctypes.c_size_t()
        f = self.libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        self.lib.sw_ranks_write(view, 6, 0, f)  # SW_FORMAT_JSON
        self.libc.fclose(f)
        text = ctypes.string_at(buf, size.value).decode()
        self.libc.free(buf)
        self.lib.sw_ranks_free(view)
        return text


def median_ms(fn, rounds=5):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--before", help="another build's libstepwatch.so, timed beside")
    a = ap.parse_args()
    old = OldLibrary(a.before) if a.before else None
    p = stepwatch.Profiler(name="bench_ranks")
    data, forward = p.action("data"), p.action("forward")
    allreduce = p.action("collective:allreduce")
    for _ in range(50):
        with p.step(32):
            with data:
                pass
            with forward:
                time.sleep(0.0002)
            with allreduce:
                p.counter("collective:allreduce.bytes", 4e6)
    results = []
    print(f"payload: {RANK_PAYLOAD_SIZE} bytes per rank")
    print(f"{'ranks':>8} {'gathered to rank 0':>19} {'reduce + JSON':>14} {'before':>12}")
    for n in SIZES:
        blob = payloads(p, n)
        view = json.loads(stepwatch.ranks_view(blob, n, "json"))
        assert view["answered"] == n and view["stragglers"], "the payloads are not all valid"
        ms = median_ms(lambda: stepwatch.ranks_view(blob, n, "json"))
        before = None
        if old:
            v1 = as_v1(blob, n)
            assert json.loads(old.view(v1, n))["answered"] == n
            before = median_ms(lambda: old.view(v1, n), 3 if n >= 100000 else 5)
        shown = f"{before:>9.2f} ms" if before is not None else ""
        print(f"{n:>8} {len(blob) / 1e6:>16.2f} MB {ms:>11.2f} ms {shown}")
        results.append({"ranks": n, "bytes": len(blob), "reduce_ms": ms,
                        "before_ms": before, "budget_ms": BUDGET_MS.get(n)})
    p.close()
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"payload_bytes": RANK_PAYLOAD_SIZE, "before": a.before,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
