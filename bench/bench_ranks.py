"""What many ranks cost rank 0: reducing N ranks' payloads into the cross-rank view.

    build/venv/bin/python bench/bench_ranks.py [--out build/bench/ranks.json]
        [--before OLD/libstepwatch.so [--before-label TEXT]] [--instructions]

The payloads are real: a Profiler times 50 steps (data, forward, an all-reduce with its bytes),
and its payload is taken as each rank r of N (Profiler.rank_payload), so every slot is valid;
rank r's step times are spread a little (a straggler every 97 ranks) so the medians are not of
equal values. The time is stepwatch.ranks_view(payloads, N, "json"): reading the payloads, the
reduction (a selection per column for the medians: src/ranks/select.c) and writing the JSON
view; the median of 5 runs each, wall time and the process's CPU time (time.process_time: on a
shared machine the wall time of the same run wanders with the other jobs, the CPU time less).

--before LIB times another build's library on the same payloads in the same run (before /
after side by side, under the same load): its sw_ranks_reduce and sw_ranks_write (JSON) through
ctypes, on the same payloads when it reads them (payload version 2), else cut to version 1's
layout (the first 704 bytes, no ops or FLOPs). --before-label says what that build is (the
overhead page's row). The payload is RANK_PAYLOAD_SIZE bytes per rank whatever the run's
length: a periodic round gathers N times that to rank 0 (docs/ranks.md).

--instructions also counts the instructions of one view of 10,000 and of 100,000 ranks (and of
the --before build's), valgrind's callgrind between two client requests
(build/release/bench/libsw_callgrind_marks.so, as bench/bench_instructions.py): the verdict on
a shared machine, where the times wander.
"""
import argparse
import ctypes
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
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


def timed_ms(fn, rounds=5):
    """The median wall and CPU time of fn over rounds, in ms."""
    wall, cpu = [], []
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def before_payloads(old, blob, n):
    """The payloads as the --before build reads them: these, or cut to version 1."""
    if json.loads(old.view(blob, n))["answered"] == n:
        return blob
    v1 = as_v1(blob, n)
    assert json.loads(old.view(v1, n))["answered"] == n, "--before reads neither layout"
    return v1


def profiler_run():
    """The Profiler whose payload every rank sends: 50 steps of data, forward, an all-reduce."""
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
    return p


# ---- instructions (callgrind) ----------------------------------------------------------------

COUNTED = (10000, 100000)


def count_child(folder, marks_path, before):
    """Under valgrind: one view of each COUNTED size between the marks, this build's and the
    --before build's, the payloads read from folder (written by the parent)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_instructions as bi
    marks = bi.Marks(marks_path)
    old = OldLibrary(before) if before else None
    for n in COUNTED:
        with open(os.path.join(folder, f"{n}.bin"), "rb") as f:
            blob = f.read()
        stepwatch.ranks_view(blob, n, "json")  # warm: the first call's page faults, lazy binds
        marks.start()
        stepwatch.ranks_view(blob, n, "json")
        marks.stop(f"now/{n}")
        if old:
            with open(os.path.join(folder, f"{n}.before.bin"), "rb") as f:
                oblob = f.read()
            old.view(oblob, n)
            marks.start()
            old.view(oblob, n)
            marks.stop(f"before/{n}")


def count_instructions(blobs, before):
    """{ranks: {"now": Ir, "before": Ir or None}}, or None without valgrind or the marks."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_instructions as bi
    marks = bi.marks_or_none("bench_ranks")
    if marks is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        for n in COUNTED:
            with open(os.path.join(folder, f"{n}.bin"), "wb") as f:
                f.write(blobs[n][0])
            if before:
                with open(os.path.join(folder, f"{n}.before.bin"), "wb") as f:
                    f.write(blobs[n][1])
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
               f"--callgrind-out-file={folder}/cg.%p", sys.executable, os.path.abspath(__file__),
               "--count-child", folder, "--marks", marks] + (["--before", before] if before else [])
        subprocess.run(cmd, check=True, env=dict(os.environ, PYTHONHASHSEED="0"))
        counts = bi.read_dumps(folder)
    return {n: {"now": counts[f"now/{n}"], "before": counts.get(f"before/{n}")} for n in COUNTED}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--before", help="another build's libstepwatch.so, timed beside")
    ap.add_argument("--before-label", default="another build",
                    help="what the --before build is (the overhead page's row)")
    ap.add_argument("--instructions", action="store_true",
                    help="also count the instructions of one view (valgrind's callgrind)")
    ap.add_argument("--count-child", help=argparse.SUPPRESS)
    ap.add_argument("--marks", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.count_child:
        count_child(a.count_child, a.marks, a.before)
        return
    old = OldLibrary(a.before) if a.before else None
    p = profiler_run()
    results, blobs = [], {}
    print(f"payload: {RANK_PAYLOAD_SIZE} bytes per rank; median of 5 runs, wall (CPU)")
    print(f"{'ranks':>8} {'gathered to rank 0':>19} {'reduce + JSON':>22} {'before':>22}")
    for n in SIZES:
        blob = payloads(p, n)
        view = json.loads(stepwatch.ranks_view(blob, n, "json"))
        assert view["answered"] == n and view["stragglers"], "the payloads are not all valid"
        ms, cpu_ms = timed_ms(lambda: stepwatch.ranks_view(blob, n, "json"))
        before = before_cpu = None
        if old:
            oblob = before_payloads(old, blob, n)
            before, before_cpu = timed_ms(lambda: old.view(oblob, n), 3 if n >= 100000 else 5)
            blobs[n] = (blob, oblob)
        else:
            blobs[n] = (blob, None)
        shown = f"{before:>9.2f} ms ({before_cpu:.2f})" if before is not None else ""
        print(f"{n:>8} {len(blob) / 1e6:>16.2f} MB {ms:>11.2f} ms ({cpu_ms:.2f}) {shown}")
        results.append({"ranks": n, "bytes": len(blob), "reduce_ms": ms, "reduce_cpu_ms": cpu_ms,
                        "before_ms": before, "before_cpu_ms": before_cpu,
                        "budget_ms": BUDGET_MS.get(n)})
    p.close()
    instructions = count_instructions(blobs, a.before) if a.instructions else None
    if instructions:
        print("instructions of one view (callgrind):")
        for n, c in instructions.items():
            b = c["before"]
            shown = f", before {b / 1e6:.1f} M ({b / c['now']:.2f}x)" if b else ""
            print(f"{n:>8} ranks: {c['now'] / 1e6:.1f} M{shown}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"payload_bytes": RANK_PAYLOAD_SIZE, "before": a.before,
                       "before_label": a.before_label if a.before else None,
                       "results": results,
                       "instructions": {str(n): c for n, c in (instructions or {}).items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
