"""What a client of the live server costs the training step (issue 42, docs/live.md), in
instructions (valgrind's callgrind) and wall time beside it, side by side in one run.

    SW_BUILD_DIR=build/release build/venv/bin/python bench/bench_serve.py [--rounds 4] [--steps 300]
        [--out build/bench/serve.json]

A loop (a Profiler writing its run file, one step = a forward and a backward of pure-Python
work) runs rounds of `steps` steps, quiet and polled in turn; `stepwatch serve` serves its run
file all along, and in the polled rounds this script fetches the page, data.json and /metrics
at 10 Hz. The loop says which round it is in through a file. Under callgrind each round is one
dump (bench/callgrind_marks.c), every thread of the loop's process counted; natively the
round's median step. The server is another process: the figures should not move.
"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def child(args):
    import stepwatch
    lib = ctypes.CDLL(args.marks) if args.marks else None
    if lib is not None:
        lib.sw_cg_stop.argtypes = [ctypes.c_char_p]
    p = stepwatch.Profiler(name="bench-serve", run_file=args.run_file, live=False)
    fwd, bwd = p.action("forward"), p.action("backward")

    def step():
        t0 = time.perf_counter_ns()
        with p.step(8):
            with fwd:
                sum(range(4000))
            with bwd:
                sum(range(8000))
        return time.perf_counter_ns() - t0

    for _ in range(50):  # warm-up, and the file exists for the server
        step()
    medians = {}
    for r in range(2 * args.rounds):
        label = ("quiet" if r % 2 == 0 else "polled") + f"-{r // 2}"
        with open(args.phase, "w") as f:
            f.write(label)
        time.sleep(0.3)  # the parent's polling has begun (or ended)
        if lib is not None:
            lib.sw_cg_start()
        times = [step() for _ in range(args.steps)]
        if lib is not None:
            lib.sw_cg_stop(label.encode())
        medians[label] = statistics.median(times)
    with open(args.phase, "w") as f:
        f.write("done")
    p.close()
    print(json.dumps(medians))


def poller(url, phase_file, counts, stop):
    while not stop.is_set():
        try:
            with open(phase_file) as f:
                phase = f.read()
        except OSError:
            phase = ""
        if phase.startswith("polled"):
            for path in ("", "data.json", "metrics"):
                with urllib.request.urlopen(url + path, timeout=30) as r:
                    r.read()
                counts[phase] = counts.get(phase, 0) + 1
            time.sleep(0.1)
        else:
            time.sleep(0.02)


def read_dumps(folder):
    counts = {}
    for path in glob.glob(os.path.join(folder, "cg.*")):
        label = total = None
        with open(path) as f:
            for line in f:
                if line.startswith("desc: Trigger: Client Request: "):
                    label = line.split(": ", 3)[3].strip()
                elif line.startswith("totals:"):
                    total = int(line.split()[1])
        if label and total is not None:
            counts[label] = total
    return counts


def one_run(args, exe, valgrind):
    tmp = tempfile.mkdtemp(prefix="bench-serve-")
    run_file, phase = os.path.join(tmp, "run.db"), os.path.join(tmp, "phase")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--run-file", run_file,
           "--phase", phase, "--rounds", str(args.rounds), "--steps", str(args.steps)]
    marks = os.path.join(os.environ.get("SW_BUILD_DIR", "build/release"), "bench",
                         "libsw_callgrind_marks.so")
    if valgrind:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
               f"--callgrind-out-file={tmp}/cg.%p"] + cmd + ["--marks", os.path.abspath(marks)]
    loop = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONHASHSEED="0"))
    while not os.path.exists(phase):
        time.sleep(0.05)
    err = open(os.path.join(tmp, "serve.err"), "w+")
    server = subprocess.Popen([exe, "serve", run_file, "--port", "0"], stderr=err)
    url = None
    while url is None:
        time.sleep(0.05)
        err.seek(0)
        for word in err.read().split():
            if word.startswith("http://"):
                url = word
    counts, stop = {}, threading.Event()
    t = threading.Thread(target=poller, args=(url, phase, counts, stop), daemon=True)
    t.start()
    out, _ = loop.communicate()
    stop.set()
    t.join()
    server.terminate()
    server.wait()
    medians = json.loads(out.strip().splitlines()[-1])
    return medians, read_dumps(tmp) if valgrind else {}, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--run-file")
    ap.add_argument("--phase")
    ap.add_argument("--marks")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default=os.path.join("build", "bench", "serve.json"))
    args = ap.parse_args()
    if args.child:
        return child(args)
    exe = os.path.join(os.environ.get("SW_BUILD_DIR", "build/release"), "stepwatch")
    medians, _, polls = one_run(args, exe, valgrind=False)
    _, ir, _ = one_run(args, exe, valgrind=True)

    def side(d, kind, per=1):
        return statistics.median(v / per for k, v in d.items() if k.startswith(kind))

    fig = {
        "steps_per_round": args.steps, "rounds": args.rounds,
        "wall_median_step_ns": {"quiet": side(medians, "quiet"), "polled": side(medians, "polled")},
        "requests_per_polled_round": statistics.median(polls.values()) if polls else 0,
    }
    if ir:
        fig["ir_per_step"] = {"quiet": side(ir, "quiet", args.steps),
                              "polled": side(ir, "polled", args.steps)}
    w, i = fig["wall_median_step_ns"], fig.get("ir_per_step")
    print(f"step, median over rounds: quiet {w['quiet'] / 1e3:.1f} us, polled at 10 Hz "
          f"{w['polled'] / 1e3:.1f} us ({w['polled'] / w['quiet']:.3f}x)")
    if i:
        print(f"instructions per step: quiet {i['quiet']:.0f}, polled {i['polled']:.0f} "
              f"({i['polled'] / i['quiet']:.4f}x)")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fig, f, indent=1)


if __name__ == "__main__":
    main()
