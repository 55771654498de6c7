"""The summary of bench/traceml/compare.sh's runs, in Markdown: overhead (wall and CPU time
against each tool's bare run, the largest process's RSS, instructions per step), each tool's
step breakdown (its own runs, and both on the same steps of one process), the top modules and
peak memory.
    python bench/traceml/summary.py OUT ROUNDS"""
import glob
import json
import os
import sqlite3
import statistics
import sys

import stepwatch

OUT, ROUNDS = sys.argv[1], int(sys.argv[2])
TOOLS = ("bare", "stepwatch", "bare-tm", "bare-torchrun", "traceml")
BASE = {"bare": "bare", "stepwatch": "bare", "bare-tm": "bare-tm",
        "bare-torchrun": "bare-tm", "traceml": "bare-tm"}
MS = 1e6


def spread(xs, fmt="{:.1f}"):
    return (fmt + " (" + fmt + ".." + fmt + ")").format(statistics.median(xs), min(xs), max(xs))


def times(tool):
    """Per round: wall s, CPU s (user+sys of the process tree), the largest process's RSS."""
    rows = [open(f"{OUT}/{tool}-{r}/time").read().split() for r in range(1, ROUNDS + 1)]
    return ([float(r[0]) for r in rows], [float(r[1]) + float(r[2]) for r in rows],
            [int(r[3]) / 1024 for r in rows])


def ratio(tool, base, i):
    a, b = times(tool)[i], times(base)[i]
    return [x / y for x, y in zip(a, b)]


def window_instructions(tool):
    """({thread: instructions}, steps) of the counting window (bench/traceml/cg/
    sitecustomize.py), or (None, None). Counting runs only inside the window, so every dump
    of the process that dumped the window holds window counts: the window's own dump (the
    thread that stepped the optimizer, cg.PID.1-01) and, at its exit, the other threads'."""
    dumps = {}
    steps = pid = None
    for path in glob.glob(f"{OUT}/cg-{tool}/dumps/cg.*-*"):
        with open(path) as f:
            for line in f:
                if line.startswith("desc: Trigger: Client Request: window "):
                    steps = int(line.rsplit(" ", 1)[1])
                    pid = os.path.basename(path).split(".")[1].split("-")[0]
                elif line.startswith("totals:"):
                    dumps[path] = int(line.split()[1])
    if pid is None:
        return None, None
    counts = {}
    for path, total in dumps.items():
        name = os.path.basename(path)  # cg.PID-THREAD or cg.PID.DUMP-THREAD
        if name.split(".")[1].split("-")[0] == pid and total:
            thread = name.rsplit("-", 1)[1]
            counts[thread] = counts.get(thread, 0) + total
    return counts, steps


def stepwatch_steps(run_file):
    return [s for s in stepwatch.load_steps(run_file) if s["phase"] == "train"]


def traceml_steps(logs):
    """TraceML's per-step events (its aggregator's SQLite file), step order."""
    db = sqlite3.connect(f"file:{glob.glob(f'{logs}/*/aggregator/telemetry')[0]}?mode=ro",
                         uri=True)
    rows = db.execute("SELECT events_json FROM step_time_samples ORDER BY step").fetchall()
    return [json.loads(r[0]) for r in rows], db


def tm(event, name):
    e = event.get(f"_traceml_internal:{name}")
    return e["cpu"]["cpu_ms"] if e else 0.0


def traceml_summary(round_):
    path = glob.glob(f"{OUT}/traceml-{round_}/logs/*/final_summary.json")
    return json.load(open(path[0])) if path else None


# ---- overhead -------------------------------------------------------------------------------
print(f"## Overhead: {ROUNDS} rounds, one tool after the other; median (min..max)\n")
print("| | wall s | wall vs bare | CPU s (user+sys) | CPU vs bare | largest process RSS MiB |")
print("|---|---|---|---|---|---|")
for tool in TOOLS:
    wall, cpu, rss = times(tool)
    base = BASE[tool]
    print(f"| {tool} | {spread(wall)} | "
          f"{'-' if base == tool else 'x' + spread(ratio(tool, base, 0), '{:.2f}')} | "
          f"{spread(cpu)} | "
          f"{'-' if base == tool else 'x' + spread(ratio(tool, base, 1), '{:.2f}')} | "
          f"{spread(rss, '{:.0f}')} |")
print("\n(bare-tm is the bare run in TraceML's venv, the base of bare-torchrun and traceml; "
      "traceml against bare-torchrun: CPU x"
      + spread(ratio("traceml", "bare-torchrun", 1), "{:.2f}") + ", wall x"
      + spread(ratio("traceml", "bare-torchrun", 0), "{:.2f}") + ")")

print("\n## Instructions per training step (callgrind, training process, "
      "optimizer steps in the window)\n")
base_ir = {}
rows = []
for tool in ("bare", "stepwatch", "bare-torchrun", "traceml"):
    counts, steps = window_instructions(tool)
    if counts is None:
        rows.append(f"| {tool} | (not counted) | | |")
        continue
    main = counts.get("01", 0) / steps
    allt = sum(counts.values()) / steps
    base_ir[tool] = (main, allt)
    ref = {"stepwatch": "bare", "traceml": "bare-torchrun"}.get(tool)
    added = ""
    if ref in base_ir:
        added = (f"{(main - base_ir[ref][0]) / 1e6:+.2f}M "
                 f"({(main / base_ir[ref][0] - 1) * 100:+.1f} %); all threads "
                 f"{(allt - base_ir[ref][1]) / 1e6:+.2f}M vs {ref}")
    rows.append(f"| {tool} | {main / 1e6:.2f}M | {allt / 1e6:.2f}M ({len(counts)} threads) | "
                f"{added} |")
print("| | training thread Ir/step | all threads Ir/step | added |")
print("|---|---|---|---|")
print("\n".join(rows))
print("\n(all threads: time-driven samplers, stepwatch's --device-stats and TraceML's, tick "
      "at valgrind's slowed clock there, so that column overstates them; their real cost is "
      "in the CPU-time ratio)")

# ---- step breakdown -------------------------------------------------------------------------
print("\n## Step breakdown, mean per training step (ms), median over the rounds\n")
KEYS = ("duration", "data", "forward", "loss", "backward", "optimizer", "zero_grad",
        "callback", "collective", "other")
sw_rounds = [stepwatch_steps(f"{OUT}/stepwatch-{r}/run.db") for r in range(1, ROUNDS + 1)]
print("stepwatch (" + str(len(sw_rounds[-1])) + " steps): " + ", ".join(
    f"{k} {statistics.median(statistics.mean(s[k + '_ns'] for s in st) for st in sw_rounds) / MS:.2f}"
    for k in KEYS))
copies = [r for r in stepwatch.load(f"{OUT}/stepwatch-{ROUNDS}/run.db").records("train")
          if r["action"] == "h2d_copy"]
if copies:
    print(f"  of data, h2d_copy (the Trainer's batch .to()): {copies[0]['mean_ns'] / MS:.2f} "
          f"(last round)")
TM_KEYS = ("step_time_ms", "input_wait_ms", "forward_ms", "backward_ms", "optimizer_ms",
           "residual_ms", "h2d_ms")
avgs = [s["step_time"]["global"]["average"] for s in
        (traceml_summary(r) for r in range(1, ROUNDS + 1)) if s]
if avgs:
    print(f"TraceML ({len(avgs)} rounds): " + ", ".join(
        f"{k[:-3]} " + ("-" if any(a.get(k) is None for a in avgs) else
                        f"{statistics.median(a[k] for a in avgs):.2f}") for k in TM_KEYS))

if os.path.exists(f"{OUT}/joint/run.db"):
    sw = stepwatch_steps(f"{OUT}/joint/run.db")
    ev, _ = traceml_steps(f"{OUT}/joint/logs")
    print(f"\n## The same steps, both tools in one process (joint pass: {len(sw)} stepwatch "
          f"steps, {len(ev)} TraceML steps), mean (median) ms\n")
    print("| | stepwatch | TraceML |")
    print("|---|---|---|")
    pairs = (("step", "duration", "step_time"), ("data / input wait", "data", "dataloader_next"),
             ("forward", "forward", "forward_time"), ("backward", "backward", "backward_time"),
             ("optimizer", "optimizer", "optimizer_step"))
    for label, sk, tk in pairs:
        a = [s[sk + "_ns"] / MS for s in sw]
        b = [tm(e, tk) for e in ev]
        if tk == "step_time":  # TraceML's step: its traced region plus the input wait
            b = [tm(e, "step_time") + tm(e, "dataloader_next") for e in ev]
        print(f"| {label} | {statistics.mean(a):.2f} ({statistics.median(a):.2f}) | "
              f"{statistics.mean(b):.2f} ({statistics.median(b):.2f}) |")
    per_step = {r["action"]: r["total_ns"] / len(sw) / MS
                for r in stepwatch.load(f"{OUT}/joint/run.db").records("train")}
    print(f"| of data: the DataLoader's next() / the batch's copy (h2d_copy) | "
          f"{per_step.get('data', 0):.2f} / {per_step.get('h2d_copy', 0):.2f} | "
          f"{statistics.mean(tm(e, 'dataloader_next') for e in ev):.2f} / - (CUDA only) |")

# ---- modules and memory ---------------------------------------------------------------------
db = sqlite3.connect(f"file:{OUT}/stepwatch-{ROUNDS}/run.db?mode=ro", uri=True)
notes = dict(db.execute("SELECT key, value FROM notes").fetchall())
sampled = int(notes.get("modules_sampled_steps", 1))
print(f"\n## stepwatch's top modules (last round; `--modules`: every "
      f"{notes.get('modules_every')}th step, {sampled} sampled; {notes.get('modules_clock')} "
      f"time), ms per sampled step\n")
print("| module | class | fwd self | fwd total | bwd self | bwd total | params |")
print("|---|---|---|---|---|---|---|")
for row in db.execute("SELECT path, class, forward_self_ns, forward_ns, backward_self_ns, "
                      "backward_ns, param_bytes FROM modules "
                      "ORDER BY forward_self_ns + backward_self_ns DESC LIMIT 8"):
    path, cls, fs, ft, bs, bt, pb = row
    fs, ft, bs, bt = (x / sampled / MS for x in (fs, ft, bs, bt))
    print(f"| {path or '(model)'} | {cls} | {fs:.3f} | {ft:.3f} | {bs:.3f} | {bt:.3f} | "
          f"{pb / 1024:.1f} KiB |")
print("\nTraceML 0.5.0: no per-module view (layer profiling removed upstream, see the README)")

print("\n## Peak memory (MiB)\n")
rss = [sqlite3.connect(f"file:{OUT}/stepwatch-{r}/run.db?mode=ro", uri=True)
       .execute("SELECT max(mem_rss_max) FROM ranks").fetchone()[0] / 2**20
       for r in range(1, ROUNDS + 1)]
print(f"- stepwatch: RSS per step, its maximum: {spread(rss, '{:.0f}')}")
tm_max = []
for r in range(1, ROUNDS + 1):
    logs = f"{OUT}/traceml-{r}/logs"
    if glob.glob(f"{logs}/*/aggregator/telemetry"):
        _, tdb = traceml_steps(logs)
        tm_max.append(tdb.execute("SELECT max(ram_used_bytes) FROM process_samples")
                      .fetchone()[0] / 2**20)
proc = [s["process"]["global"]["average"]["ram_bytes"] / 2**20 for s in
        (traceml_summary(r) for r in range(1, ROUNDS + 1)) if s]
if tm_max:
    print(f"- TraceML: process RSS, the largest of its samples (every 2 s): "
          f"{spread(tm_max, '{:.0f}')}; its summary's average over the steps: "
          f"{spread(proc, '{:.0f}')}; step memory: none on a CPU (CUDA's allocator only)")
