"""check_mpi.py — run tests/mpi/mpi_train.c under mpirun and check the cross-rank view.

    check_mpi.py MPIEXEC EXE NP [--data R] [--compute R] [--kill R]

One rank slow by a known delay in its data or its forward: rank 0's view (JSON) names it with
the right blame, its run file keeps the rounds (every 3 steps and the final one), every rank's
run file has its place in the job and a small clock offset (one host). --kill R: rank R dies
(SIGKILL) after its last step; mpirun is told to keep the others going
(orte_enable_recovery), and rank 0's final round waits TIMEOUT_S, then names rank R; the
survivors finish stepwatch's work well within 120 s (mpirun itself may hang in OpenMPI's
MPI_Finalize, waiting for the dead rank: it is ended then).
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

DELAY_MS = 40
STEPS, WARMUP = 10, 2


def run_with_dead_rank(cmd, env, out, np, dead):
    """mpirun with one rank SIGKILLed: wait until every other rank is done with stepwatch
    (its done-{rank} file), then give mpirun a while to finish. OpenMPI's MPI_Finalize may
    wait forever for the dead rank (its closing fence, outside stepwatch), so mpirun is then
    ended. Returns mpirun's status, its stderr, and the seconds until the survivors were done."""
    start = time.monotonic()
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    done = [os.path.join(out, f"done-{r}") for r in range(np) if r != dead]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None and \
            not all(os.path.exists(d) for d in done):
        time.sleep(0.1)
    took = time.monotonic() - start
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.terminate()  # mpirun passes it on to its ranks
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err.seek(0)
    return proc.returncode, err.read(), took


def own_times(out, np, dead):
    """Each live rank's (data, forward) per steady step by the loop's own clock, in ns."""
    times = {}
    for r in range(np):
        path = os.path.join(out, f"own-{r}")
        if r != dead and os.path.exists(path):
            times[r] = tuple(int(v) for v in open(path).read().split())
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mpiexec")
    ap.add_argument("exe")
    ap.add_argument("np", type=int)
    ap.add_argument("--data", type=int, default=-1)
    ap.add_argument("--compute", type=int, default=-1)
    ap.add_argument("--kill", type=int, default=-1)
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="sw_mpi_")
    env = dict(os.environ, DATA_RANK=str(a.data), COMPUTE_RANK=str(a.compute),
               KILL_RANK=str(a.kill), DELAY_MS=str(DELAY_MS), STEPS=str(STEPS),
               WARMUP=str(WARMUP), AGGREGATE_EVERY="3", TIMEOUT_S="5",
               # CI runs as root; mpirun refuses root without these
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [a.mpiexec, "-np", str(a.np), "--oversubscribe"]
    if a.kill >= 0:
        cmd += ["--mca", "orte_enable_recovery", "1"]
    cmd += [a.exe, out]
    if a.kill < 0:
        start = time.monotonic()
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        returncode, stderr, took = run.returncode, run.stderr, time.monotonic() - start
    else:
        returncode, stderr, took = run_with_dead_rank(cmd, env, out, a.np, a.kill)
    view_path = os.path.join(out, "view.json")
    if not os.path.exists(view_path) or os.path.getsize(view_path) == 0:
        sys.exit(f"no view from rank 0 (mpirun exit {returncode}):\n{stderr[-4000:]}")
    view = json.load(open(view_path))
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)

    if a.kill >= 0:
        check(view["answered"] == a.np - 1 and view["missing"] == [a.kill],
              f"missing {view['missing']}, answered {view['answered']}")
        check(took < 120, f"took {took:.0f} s")
    else:
        check(returncode == 0, f"mpirun exit {returncode}: {stderr[-2000:]}")
        check(view["answered"] == a.np and not view["missing"], "every rank answers")
    check(view["min_steps"] == STEPS - WARMUP, f"steps {view['min_steps']}")
    check(view["collective_ranks"] == view["answered"], "every rank timed its MPI_Allreduce")
    # the wrappers count the bytes (comm:MPI_Allreduce:bytes): one all-reduce of 2^14 floats
    # a step (mpi_train.c), so the op's bytes per step and its bandwidth on every rank
    ops = {op["name"]: op for op in view["ops"]}
    allreduce = ops.get("MPI_Allreduce", {})
    check(allreduce.get("bw_ranks") == view["answered"] and
          allreduce.get("bytes_per_step") == (1 << 14) * 4, f"MPI_Allreduce's bytes {allreduce}")
    blamed = {s["rank"]: s for s in view["stragglers"]}
    own = own_times(out, a.np, a.kill)
    for rank, blame, column in ((a.data, "data", 0), (a.compute, "compute", 1)):
        if rank < 0:
            continue
        s = blamed.get(rank)
        check(s is not None and s["blame"] == blame, f"rank {rank} blamed for {blame}: {s}")
        # the excess the loop's own clock measured: the slow rank's mean over the others'
        # median (the sleeps run long on a loaded machine; stepwatch must follow them)
        others = sorted(own[r][column] for r in own if r != rank)
        truth = own[rank][column] - others[len(others) // 2] if others else 0
        check(truth > 0.9 * DELAY_MS * 1e6, f"rank {rank}'s own excess {truth / 1e6:.1f} ms")
        if s:
            check(0.6 * truth < s["blame_ns"] < 1.6 * truth,
                  f"rank {rank}'s blamed part {s['blame_ns'] / 1e6:.1f} ms for "
                  f"{truth / 1e6:.1f} ms by its own clock ({DELAY_MS} ms slept)")
            if blame == "compute":
                check(s["part"] == "forward", f"part {s['part']}")
    slow = {a.data, a.compute} - {-1}
    if slow:
        check(view["stragglers"] and view["stragglers"][0]["rank"] in slow, "worst first")
    for r in range(a.np):
        if r == a.kill:
            continue
        db = sqlite3.connect(f"file:{os.path.join(out, f'run-{r}.db')}?mode=ro", uri=True)
        row = db.execute("SELECT rank, world_size, local_rank, clock_offset_ns FROM ranks"
                         ).fetchone()
        check(row[:3] == (r, a.np, r), f"rank {r}'s metadata {row}")
        # one host, one clock: the estimate's error is at most half its shortest round trip,
        # which the rounds bring under 1 ms (src/mpi/mpi.c) unless 2 s of them found none
        print(f"rank {r}: clock offset {row[3] / 1e3:.1f} us")
        check(abs(row[3]) < 20e6, f"rank {r}'s clock offset {row[3]} ns on one host")
        # the bytes: mpi_train.c all-reduces 1 << 14 floats per step, warm-up steps too;
        # each call's bus bandwidth is its algorithm bandwidth x 2(n-1)/n (nccl-tests)
        def samples(name):
            return [v for (v,) in db.execute(
                "SELECT value FROM counters JOIN counter_names n ON n.rank = counters.rank "
                "AND n.id = counters.counter WHERE n.name = ? ORDER BY time_ns", (name,))]
        total = samples("comm:MPI_Allreduce:bytes")
        check(total and total[-1] == STEPS * (4 << 14), f"rank {r}'s all-reduced bytes {total}")
        alg = samples("comm:MPI_Allreduce:64KiB:algbw")
        bus = samples("comm:MPI_Allreduce:64KiB:busbw")
        factor = 2 * (a.np - 1) / a.np
        check(len(alg) == len(bus) == STEPS and all(
            abs(b - v * factor) <= 1e-9 * v for v, b in zip(alg, bus)),
            f"rank {r}'s bandwidth samples {alg} {bus}")
        if r == 0:
            rounds = [f for (f,) in db.execute("SELECT final FROM rank_rounds ORDER BY round")]
            check(rounds == [0, 0, 0, 1], f"rounds {rounds} (every 3 of 10 steps, the end)")
        db.close()
    if problems:
        sys.exit("\n".join(problems) + "\n" + json.dumps(view, indent=1))
    print(f"ok: {a.np} ranks, {took:.1f} s")


if __name__ == "__main__":
    main()
