"""docs/overhead.md from `make bench`'s figures: one table per group (what, stepwatch, the
anchor, the ratio, the budget, the previous figures) and the command that reruns it.

    build/venv/bin/python bench/write_overhead_doc.py [--bench build/bench]
        [--doc docs/overhead.md] [--state docs/overhead.json] [--note GROUP=TEXT ...]

The figures come from the JSON each benchmark writes (build/bench/<file>.json). Each group's
rendered rows are kept in docs/overhead.json beside the page; when a group's JSON differs from
the one the page was last written from, what the page showed becomes the "previous" column,
so a rerun of `make bench` shows the new figures beside the last ones. A group whose JSON is
absent (a benchmark not run here: no valgrind, no Chromium) keeps its last figures, and the
page says which run they come from. Running it twice on the same JSON changes nothing.

A JSON file that lacks a figure a row needs stops the script with the file and the key
(a benchmark changed without this page); nothing is written then.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "build/venv/bin/python"


class MissingFigure(Exception):
    pass


class Fig:
    """A benchmark's JSON object; a missing key raises MissingFigure naming the file and the
    key's path (`groups.fastai.ir_added.stepwatch_simple`)."""

    def __init__(self, value, source, path=""):
        self.value, self.source, self.path = value, source, path

    def __getitem__(self, key):
        path = f"{self.path}.{key}" if self.path else str(key)
        if not isinstance(self.value, (dict, list)):
            raise MissingFigure(f"{self.source}: '{self.path}' is not an object (wanted '{path}')")
        try:
            value = self.value[key]
        except (KeyError, IndexError, TypeError):
            raise MissingFigure(f"{self.source}: no figure '{path}' (the benchmark wrote "
                                f"no such key: rerun it, or update bench/write_overhead_doc.py)"
                                ) from None
        return Fig(value, self.source, path) if isinstance(value, (dict, list)) else value

    def get(self, key, default=None):
        try:
            return self[key]
        except MissingFigure:
            return default

    def __contains__(self, key):
        return isinstance(self.value, dict) and key in self.value

    def __iter__(self):
        seq = self.value if isinstance(self.value, list) else list(self.value)
        for i, _ in enumerate(seq):
            yield self[i] if isinstance(self.value, list) else seq[i]

    def __len__(self):
        return len(self.value)


def row(key, what, stepwatch, anchor="", ratio="", budget="", met=None):
    """One table row; met: True/False appends the verdict to the budget, None none."""
    if budget and met is not None:
        budget = f"{budget} — {'met' if met else '**not met**'}"
    return {"key": key, "what": what, "stepwatch": stepwatch, "anchor": anchor,
            "ratio": ratio, "budget": budget}


def us(ns, sign=""):
    """A duration in ns as ns, µs or ms, three significant digits or more."""
    for unit, scale in (("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            v = ns / scale
            return f"{v:{sign}.{2 if abs(v) < 10 else 1 if abs(v) < 100 else 0}f} {unit}"
    return f"{ns:{sign}.0f} ns"


def ir(n, sign="+"):
    return f"{n / 1e6:{sign}.2f}M" if abs(n) >= 1e6 else f"{n / 1e3:{sign}.1f}k"


def times(x):
    return "∞" if math.isinf(x) else f"{x:.{0 if abs(x) >= 10 else 1 if abs(x) >= 1 else 2}f}x"


def ratio_text(ours, theirs):
    return f"{ours / theirs:.2f}" if theirs > 0 else ""


def spread(lo, hi):
    """' (lo to hi)' over the rounds, nothing for one round."""
    return "" if lo == hi else f" ({ir(lo)} to {ir(hi)})"


# ---- one function per benchmark JSON: its rows ------------------------------------------------

def core_rows(f):
    rows = []
    for key, label in (("1thread", "1 thread"), ("2threads", "2 threads at once")):
        r = f[f"ratio_{key}"]
        rows.append(row(f"pair_{key}", f"C `sw_begin`/`sw_end` pair, {label}",
                        f"{f[f'pair_ns_{key}']:.1f} ns",
                        f"2 clock reads: {f[f'floor_ns_{key}']:.1f} ns",
                        f"{r:.2f}x", "<= 1.5x", r <= 1.5))
    grown = f["rss_kib_after"] - f["rss_kib_before"]
    rows.append(row("rss", f"RSS after {f['spans']:,} spans over 10 actions",
                    f"{f['rss_kib_after']} KiB", f"before: {f['rss_kib_before']} KiB",
                    f"{grown:+d} KiB", "flat (< 1 MiB)", grown < 1024))
    if f["tsc"]:
        r = f["tsc_pair_ns"] / f["monotonic_floor_ns"]
        rows.append(row("tsc", "C pair with the TSC clock (`SW_CLOCK=tsc`), 1 thread",
                        f"{f['tsc_pair_ns']:.1f} ns",
                        f"2 `clock_gettime` reads: {f['monotonic_floor_ns']:.1f} ns; 2 TSC reads: "
                        f"{f['tsc_floor_ns']:.1f} ns",
                        f"{r:.2f}x; {f['tsc_pair_ns'] / f['tsc_floor_ns']:.2f}x",
                        "below 2 `clock_gettime` reads", r < 1))
    else:
        rows.append(row("tsc", "C pair with the TSC clock", "not measured: no invariant TSC"))
    return rows


def device_rows(f):
    added = f["step_ns_device_time"] - f["step_ns_plain"]
    rows = [row("sampler", "device sampler at 2 Hz (CPU, memory, GPUs)",
                f"{f['sampler_cpu_percent_2hz']:.2f} % of a core", "", "", "<= 1 %",
                f["sampler_cpu_percent_2hz"] <= 1),
            row("read", "one device read (/proc, NVML where a GPU is)", f"{f['read_us']:.1f} µs"),
            row("bookkeeping", "device time: bookkeeping per GPU event on the training thread "
                "(an instant GPU clock)",
                f"{f['instructions_per_event']:.0f} instructions, {f['ns_per_event']:.0f} ns per "
                f"event; {f['events_per_step']:.0f} events per 5-phase step",
                f"plain step: {us(f['step_ns_plain'])}", f"+{us(added)} per step",
                "<= 1 % of a 2 ms step (20 µs)", added <= 20_000)]
    if f["step_ns_cudart"] > 0:
        rows.append(row("cudart", "the same on the CUDA runtime (the fake one of tests/device)",
                        f"{us(f['step_ns_cudart'])} per step",
                        f"plain step: {us(f['step_ns_plain'])}"))
    return rows


def journal_rows(f):
    return [row("flusher", f"run file flusher at {f['events_per_s']:,} events/s (timeline on)",
                f"{f['flusher_cpu_percent']:.2f} % of a core", "",
                f"{f['bytes_per_step']:.0f} bytes per step, {f['dropped_events']} events dropped",
                f"<= {f['budget_percent']:g} %, none dropped",
                f["flusher_cpu_percent"] <= f["budget_percent"] and f["dropped_events"] == 0)]


def compare_rows(f):
    rows, by_actions = [], {}
    for r in f["runs"]:
        by_actions[r["actions"]] = r["compare_s"]
        half = by_actions.get(r["actions"] // 2)
        growth = r["compare_s"] / half if half else None
        rows.append(row(f"actions_{r['actions']}", f"`compare`, {r['actions']:,} actions x 5 "
                        f"phases ({r['rows']:,} rows)", f"{r['compare_s']:.2f} s",
                        f"`report` of the same snapshot: {r['report_s']:.2f} s",
                        f"{growth:.2f}x the half size" if growth else "",
                        "about 2x per doubling (n log n; n² gives 4x)" if growth else "",
                        growth <= 3 if growth else None))
    return rows


def python_rows(f):
    w, met = f["with"], f["budgets_met"]
    return [row("with", "Python `with action:`", f"{w['stepwatch_with_ns']:.0f} ns",
                f"the same `with` recording nothing: {w['floor_with_ns']:.0f} ns",
                f"+{w['stepwatch_record_ns']:.0f} ns above it", "<= 100 ns",
                met["with_le_100ns"]),
            row("vs_simple", "Python `with` against Lightning's `SimpleProfiler.profile`",
                f"{w['stepwatch_with_ns']:.0f} ns", f"{w['lightning_simple_with_ns']:.0f} ns",
                f"{w['speedup_vs_simple']:.1f}x cheaper", ">= 8x cheaper",
                met["with_ge_8x_cheaper_than_simple"])]


def torch_rows(f):
    met = f["budgets_met"]
    rows = []
    for kind, label in (("trivial", "a trivial loop (DataLoader, `Linear(1, 1)`)"),
                        ("real", "a real CPU step (MLP)"), ("real_1ms", "the same, twice as wide")):
        t = f[f"torch_{kind}"]
        budget, ok = "", None
        if kind == "real":
            budget = "<= floor + 0.5 pp; >= 20x below torch.profiler"
            ok = met["real_step_within_floor_plus_half_pct"] and \
                met["real_step_20x_below_torch_profiler"]
        rows.append(row(kind, f"`stepwatch.torch.instrument()` on {label}, step "
                        f"{us(t['step_ns'])}",
                        f"{us(t['overhead_ns'], '+')} per step ({t['slowdown_pct']:+.2f} %)",
                        f"do-nothing wrappers (the floor): {t['floor_slowdown_pct']:+.2f} %; "
                        f"torch.profiler: {us(t['profiler_overhead_ns'], '+')} "
                        f"({t['profiler_slowdown_pct']:+.1f} %)",
                        f"{t['above_floor_pct']:+.2f} pp above the floor; torch.profiler / "
                        f"stepwatch {times(t['profiler_over_stepwatch'])}", budget, ok))
    return rows


def html_rows(f):
    rows = []
    for r in f["runs"]:
        big = r["steps"] >= 1_000_000
        rows.append(row(f"steps_{r['steps']}", f"HTML report of {r['steps']:,} steps, opened in "
                        "headless Chromium", f"{r['bytes'] / 1e6:.2f} MB, drawn in "
                        f"{r['drawn_ms_median']:.0f} ms", f"written in {r['write_s']:.2f} s", "",
                        "< 2 MB and < 1 s" if big else "",
                        (r["bytes"] < 2e6 and r["drawn_ms_median"] < 1000) if big else None))
    return rows


def ranks_rows(f):
    """The reduction per world size (wall time, the process's CPU time beside), then the
    instructions of one view where they were counted; the anchor is the build timed in the
    same run (bench_ranks.py --before, --before-label says which), where it was."""
    rows = []
    label = f.get("before_label") or "sort per metric"
    for r in f["results"]:
        before = r.get("before_ms")
        budget = r.get("budget_ms")
        cpu = r.get("reduce_cpu_ms")
        shown = f"{r['reduce_ms']:.2f} ms" + (f" ({cpu:.2f} ms CPU)" if cpu is not None else "")
        rows.append(row(f"ranks_{r['ranks']}", f"rank 0 reducing {r['ranks']:,} ranks' payloads "
                        f"({f['payload_bytes']} bytes each, {r['bytes'] / 1e6:.2f} MB gathered) "
                        "into the cross-rank view (JSON)", shown,
                        f"{before:.2f} ms before ({label}, same run)" if before else "",
                        f"{before / r['reduce_ms']:.1f}x faster" if before else "",
                        f"<= {budget:g} ms" if budget else "",
                        r["reduce_ms"] <= budget if budget else None))
    counted = f.get("instructions") or {}
    for n in counted:
        c = counted[n]
        b = c.get("before")
        rows.append(row(f"ranks_ir_{n}", f"instructions of one view of {int(n):,} ranks "
                        "(callgrind)", f"{c['now'] / 1e6:.1f} M",
                        f"{b / 1e6:.1f} M before ({label})" if b else "",
                        f"{b / c['now']:.2f}x fewer" if b else ""))
    return rows


def ranks_round_rows(f):
    """The end-of-run round (a real TCPStore, wall time) and the clock offsets (virtual time)
    of simulated ranks, the star before the trees and the trees, in one run."""
    s, c, n = f["store_round_s"], f["clock"], f["ranks"]
    return [
        row("store_round", f"end-of-run round of {n:,} simulated ranks through a TCPStore "
            f"(tree; rank 0's requests {s['tree_rank0_requests']:,})",
            f"{s['tree'] * 1e3:.0f} ms",
            f"{s['star'] * 1e3:.0f} ms star (rank 0's requests {s['star_rank0_requests']:,})",
            f"{s['star'] / s['tree']:.1f}x faster"),
        row("clock", f"clock offsets of {n:,} simulated ranks, {c['latency_us']:g} µs a message "
            f"(tree; virtual time, offsets exact: {c['tree_worst_error_ns']} ns off)",
            f"{c['tree_ms']:.1f} ms", f"{c['star_ms']:.1f} ms star (8 ping-pongs a rank "
            "through rank 0)", f"{c['star_ms'] / c['tree_ms']:.0f}x faster"),
    ]


def ignite_rows(f):
    rows = []
    for kind, label in (("basic", "BasicTimeProfiler"), ("handlers", "HandlersTimeProfiler")):
        lo, hi = f[f"{kind}_ratio_range"] or (math.nan, math.nan)
        rows.append(row(kind, f"Ignite `{label}`: added per iteration of a real `Engine.run` "
                        f"({us(f['engine_iteration_ns'])} bare)",
                        f"{us(f[f'stepwatch_{kind}_overhead_ns'], '+')} (above Ignite's loop in C: "
                        f"{us(f[f'stepwatch_{kind}_above_floor_ns'], '+')})",
                        f"Ignite's: {us(f[f'ignite_{kind}_overhead_ns'], '+')}",
                        f"{f[f'{kind}_ratio']:.2f} ({lo:.2f} to {hi:.2f}); above the C loop "
                        f"{f[f'{kind}_above_floor_ratio']:.2f}", "each <= 1/3",
                        f["budgets_met"][f"{kind}_le_third_of_ignite"]))
    return rows


def fastai_rows(f):
    rows = []
    for mode in ("throughput", "simple"):
        ours = f"{us(f[f'stepwatch_{mode}_overhead_ns'], '+')}"
        what = (f"fastai {mode.capitalize()} profiler: added per batch of a real `Learner.fit` "
                f"({us(f['batch_ns'])} bare)")
        if not f["fastxtend"]:
            rows.append(row(mode, what, ours, "fastxtend not installed"))
            continue
        lo, hi = f[f"{mode}_ratio_range"] or (math.nan, math.nan)
        theirs = f"fastxtend's: {us(f[f'fastxtend_{mode}_overhead_ns'], '+')}"
        rows.append(row(mode, what, ours, theirs,
                        f"{f[f'{mode}_ratio']:.2f} ({lo:.2f} to {hi:.2f})", "<= 1/5",
                        f["budgets_met"][f"{mode}_le_fifth_of_fastxtend"]))
    return rows


WORKLOADS = {"recursive": "recursive `fib(20)`", "pipeline": "a small data pipeline",
             "lightning": "Lightning fit, training step profiled"}


def functions_rows(f):
    rows = []
    for name, w in ((n, f["workloads"][n]) for n in f["workloads"]):
        s = w["slowdown"]
        for detail, label in (("python", "Python functions"), ("builtins", "with C builtins")):
            r = w[f"overhead_ratio_{detail}"]
            rows.append(row(f"{name}_{detail}", f"{WORKLOADS.get(name, name)}, {label}: slowdown",
                            f"{s[f'stepwatch_{detail}']:.2f}x",
                            f"cProfile: {s[f'cprofile_{detail}']:.2f}x; the hook doing nothing: "
                            f"{s[f'floor_{detail}']:.2f}x", f"{r:.2f} of cProfile's overhead",
                            "<= 0.50", r <= 0.5))
        if "overhead_ratio_advanced" in w:
            rows.append(row(f"{name}_advanced", "Lightning, `AdvancedProfiler` on every action",
                            f"{s['stepwatch_advanced']:.2f}x",
                            f"Lightning's AdvancedProfiler: {s['lightning_advanced']:.2f}x",
                            f"{w['overhead_ratio_advanced']:.2f}"))
    return rows


def lightning_rows(f):
    rep, v, met = f["replayed"], f["variants"], f["budgets_met"]
    simple = rep["simple_ns"]
    rows = [row("replay_profiler", f"Lightning: work added to one training step, replayed "
                f"({rep['pairs_per_step']} profiler calls), `stepwatch.lightning.Profiler`",
                us(rep["stepwatch_ns"]), f"`SimpleProfiler`: {us(simple)}",
                f"{rep['stepwatch_ns'] / simple:.2f}", "<= 1/3",
                met["replayed_profiler_le_third_of_simple"])]
    thunder = f"; thunder's: {us(rep['thunder_time_ns'])}" if "thunder_time_ns" in rep else ""
    rows.append(row("replay_time", "the same, `stepwatch.lightning.TimeProfiler`",
                    us(rep["stepwatch_time_ns"]), f"`SimpleProfiler`: {us(simple)}{thunder}",
                    f"{rep['stepwatch_time_ns'] / simple:.2f}", "<= SimpleProfiler's",
                    met["replayed_time_profiler_le_simple"]))
    lo, hi = v["stepwatch"]["overhead_ci95_ns"]
    slo, shi = v["simple"]["overhead_ci95_ns"]
    resolved = f["fits_resolve_simple"]
    rows.append(row("fits", f"whole `Trainer.fit`s, `Profiler` (step {us(f['step_ns'])} CPU)",
                    f"{us(v['stepwatch']['overhead_ns'], '+')} ({us(lo, '+')} to {us(hi, '+')})",
                    f"`SimpleProfiler`: {us(v['simple']['overhead_ns'], '+')} ({us(slo, '+')} to "
                    f"{us(shi, '+')})",
                    ratio_text(v["stepwatch"]["overhead_ns"], v["simple"]["overhead_ns"]),
                    "<= 1/3" if resolved
                    else "no verdict: the fits do not resolve SimpleProfiler's",
                    met["profiler_le_third_of_simple"] if resolved else None))
    return rows


# bench_instructions: per group, the variants stepwatch's are held to (ours, theirs)
PEERS = {"stepwatch": "simple", "stepwatch_lightning_profile": "simple",
         "stepwatch_time": "thunder_time", "stepwatch_devicestats": "lightning_devicestats",
         "stepwatch_basic": "ignite_basic", "stepwatch_handlers": "ignite_handlers",
         "stepwatch_throughput": "fastxtend_throughput", "stepwatch_simple": "fastxtend_simple",
         "instrument": "torch_profiler", "instrument_no_memory": "torch_profiler"}
LABELS = {
    "stepwatch": "`stepwatch.lightning.Profiler`",
    "stepwatch_lightning_profile": "the same with Lightning's generator `profile()`",
    "simple": "Lightning's `SimpleProfiler`", "advanced": "Lightning's `AdvancedProfiler`",
    "stepwatch_time": "`stepwatch.lightning.TimeProfiler`",
    "thunder_time": "thunder's `TimeProfiler`",
    "stepwatch_devicestats": "`stepwatch.lightning.DeviceStatsMonitor`",
    "lightning_devicestats": "Lightning's `DeviceStatsMonitor`",
    "stepwatch_basic": "`stepwatch.ignite.BasicTimeProfiler`",
    "ignite_basic": "Ignite's `BasicTimeProfiler`",
    "stepwatch_handlers": "`stepwatch.ignite.HandlersTimeProfiler`",
    "ignite_handlers": "Ignite's `HandlersTimeProfiler`",
    "stepwatch_throughput": "stepwatch Throughput (`learn.profile()`)",
    "fastxtend_throughput": "fastxtend's `ThroughputCallback`",
    "stepwatch_simple": "stepwatch Simple",
    "fastxtend_simple": "fastxtend's `SimpleProfilerCallback`",
    "instrument": "`stepwatch.torch.instrument()`",
    "instrument_no_memory": "the same with `Profiler(memory=False)`",
    "floor": "do-nothing wrappers at the same points (the floor)",
    "torch_profiler": "`torch.profiler` (CPU)",
    "modules_default": "`instrument()` + `Profiler(modules=True)` (1 step in 10)",
    "modules_every_step": "the same, `modules=1` (every step)",
    "modules_hook_only": "the same, `modules=1000` (the hook only)",
}
LOOPS = {"lightning": "Lightning `Trainer.fit`",
         "devicestats": "Lightning `Trainer.fit` with `DeviceStatsMonitor`",
         "ignite": "Ignite `Engine.run`", "fastai": "fastai `Learner.fit`",
         "torch": "a plain torch loop", "modules": "a plain torch loop (4 module calls a step)"}
MODULES_BUDGET_IR = 60_000  # 1 % of a 2 ms launch-bound step (20 µs) at about 3 instructions/ns


def instruction_rows(f, group):
    g = f["groups"][group]
    budgets = {(b["ours"], b["theirs"]): b for b in f["budgets"] if b["group"] == group}
    variants = [v for v in g["wall_step_ns"] if v != "none"]
    if not g["instructions"]:
        return [row(v, LABELS.get(v, v), f"{us(g['wall_added_ns'][v], '+')} wall (no valgrind)",
                    f"bare step: {us(g['wall_step_ns']['none'])}") for v in variants]
    added, lo_hi = g["ir_added"], g["ir_added_range"]
    rows = []
    for v in variants:
        lo, hi = lo_hi[v]
        ours = f"{ir(added[v])} Ir per step{spread(lo, hi)}"
        anchor = f"bare step: {ir(g['ir_per_step']['none'], '')} Ir"
        ratio, budget, met = "", "", None
        peer = PEERS.get(v)
        if peer in added:
            anchor = f"{LABELS[peer]}: {ir(added[peer])}"
            ratio = f"{added[v] / added[peer]:.3f}" if added[peer] > 0 else ""
            b = budgets.get((v, peer))
            if b:
                budget, met = f"<= 1/{round(1 / b['budget'])}", b["met"]
        if group == "modules" and v.startswith("modules_") and "instrument" in added:
            over = added[v] - added["instrument"]
            anchor = f"`instrument()` alone: {ir(added['instrument'])}"
            ratio = f"{ir(over)} over it"
            if v == "modules_default":
                budget, met = f"<= {ir(MODULES_BUDGET_IR, '')} (1 % of a 2 ms step)", \
                    over <= MODULES_BUDGET_IR
        rows.append(row(v, LABELS.get(v, v), ours, anchor, ratio, budget, met))
    for v in g["skipped"]:  # a peer not installed here
        rows.append(row(v, LABELS.get(v, v), "not measured", g["skipped"][v]))
    return rows


def instr(group):
    return {"id": f"instructions_{group}", "file": "instructions.json",
            "title": f"Instructions added per step in situ: {LOOPS[group]} (callgrind)",
            "command": f"SW_BUILD_DIR=build/release {PY} bench/bench_instructions.py "
                       f"--groups {group}",
            "rows": lambda f, g=group: instruction_rows(f, g),
            "present": lambda f, g=group: g in f.get("groups", {}),
            "part": lambda f, g=group: [f["groups"][g],
                                        [b for b in f.get("budgets", []) if b["group"] == g]],
            "settings": lambda f, g=group: (f"{f['groups'][g]['steps']} steps x "
                                            f"{f['groups'][g]['rounds']} rounds")}


def group(gid, title, command, rows):
    """A group read from build/bench/<gid>.json."""
    return {"id": gid, "file": f"{gid}.json", "title": title, "command": command, "rows": rows}


C = "build/release/bench"
# The page's groups, in its order: id (its JSON file), title, the command that reruns it, rows.
GROUPS = [
    group("core", "C core: the hot path", f"{C}/bench_core build/bench/core.json", core_rows),
    group("device", "Device layer: sampler and device time",
          f"STEPWATCH_CUDART=build/release/tests/libfake_cudart.so {C}/bench_device "
          "build/bench/device.json", device_rows),
    group("journal", "Run file: the flusher", f"{C}/bench_journal build/bench/journal.json",
          journal_rows),
    group("compare", "`stepwatch compare` as actions grow",
          f"{C}/bench_compare build/bench/compare.json", compare_rows),
    group("python", "Python: a `with` on an action",
          f"SW_BUILD_DIR=build/release {PY} bench/bench_python.py", python_rows),
    group("torch", "torch: `instrument()` per step, in time", f"{PY} bench/bench_torch.py",
          torch_rows),
    group("html", "HTML report: size and open time", f"{PY} bench/bench_html.py", html_rows),
    group("ranks", "Many ranks: rank 0's reduction",
          f"{PY} bench/bench_ranks.py --out build/bench/ranks.json --before OLD/libstepwatch.so "
          "--before-label 'commit OLD' --instructions",
          ranks_rows),
    group("ranks_round", "Many ranks: the end-of-run round and the clock offsets",
          f"{PY} bench/bench_ranks_round.py --ranks 1000 --out build/bench/ranks_round.json",
          ranks_round_rows),
    group("ignite", "Ignite: per iteration, in time", f"{PY} bench/bench_ignite.py",
          ignite_rows),
    group("fastai", "fastai: per batch, in time", f"{PY} bench/bench_fastai.py", fastai_rows),
    group("functions", "Function profiling against cProfile",
          f"{PY} bench/bench_functions.py --out build/bench/functions.json", functions_rows),
    group("lightning", "Lightning: per step, in time", f"{PY} bench/bench_lightning.py",
          lightning_rows),
] + [instr(g) for g in ("lightning", "devicestats", "torch", "ignite", "fastai", "modules")]


# ---- the state beside the page, the run a group comes from, the page -------------------------

def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"


def describe_run(path, settings, note):
    when = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
    parts = [f"`{os.path.basename(path)}` of {when:%Y-%m-%d %H:%M} UTC", f"commit {git_commit()}",
             f"{os.cpu_count()} CPUs"]
    if settings:
        parts.append(settings)
    if note:
        parts.append(note)
    return ", ".join(parts)


def figures_digest(group, data):
    """What identifies a run's figures of this group: a file that several groups share
    (instructions.json) changes for one group without the others' figures changing."""
    part = group["part"](data) if "part" in group else data
    return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()[:16]


def update_group(group, bench_dir, state, notes):
    """The group's entry of the state, with this run's rows where its JSON is here."""
    entry = dict(state.get(group["id"], {}))
    path = os.path.join(bench_dir, group["file"])
    if not os.path.exists(path):
        return entry
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise MissingFigure(f"{path}: not JSON ({e})") from None
    fig = Fig(data, path)
    if "present" in group and not group["present"](data):
        return entry
    digest = figures_digest(group, data)
    same_run = entry.get("digest") == digest
    note = notes.get(group["id"], entry.get("note") if same_run else None)
    settings = group["settings"](data) if "settings" in group else ""
    run = (entry["run"] if same_run and note == entry.get("note")
           else describe_run(path, settings, note))
    new = {"digest": digest, "run": run, "note": note, "rows": group["rows"](fig)}
    if same_run:  # the figures the page showed: their previous ones stay
        if "previous" in entry:
            new["previous"] = entry["previous"]
    elif entry.get("rows"):
        new["previous"] = {"run": entry["run"],
                           "rows": {r["key"]: previous_text(r) for r in entry["rows"]},
                           "what": {r["key"]: r["what"] for r in entry["rows"]}}
    elif "previous" in entry:
        new["previous"] = entry["previous"]
    return new


def previous_text(r):
    return "; ".join(x for x in (r["stepwatch"], r["ratio"]) if x)


def cell(text):
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render_group(group, entry):
    out = [f"## {group['title']}", ""]
    rows = entry.get("rows")
    previous = entry.get("previous", {})
    out.append(f"`{group['command']}`")
    out.append("")
    if rows:
        out.append(f"Figures: {entry['run']}.")
    else:
        out.append("Not measured in any run this page was written from.")
    if previous:
        out.append(f"Previous: {previous['run']}.")
    out.append("")
    out.append("| what | stepwatch | anchor | ratio | budget | previous |")
    out.append("|---|---|---|---|---|---|")
    prev_rows = previous.get("rows", {})
    seen = set()
    for r in rows or []:
        seen.add(r["key"])
        out.append("| " + " | ".join(cell(r[c]) for c in ("what", "stepwatch", "anchor", "ratio",
                                                          "budget"))
                   + f" | {cell(prev_rows.get(r['key'], ''))} |")
    for key, text in prev_rows.items():  # a previous row this run has not (renamed, dropped)
        if key not in seen:
            what = previous.get("what", {}).get(key, key)
            out.append(f"| {cell(what)} | | | | | {cell(text)} |")
    out.append("")
    return out


HEADER = """# Overhead

Written by `make bench` (`bench/write_overhead_doc.py`, from the JSON under `build/bench/`);
do not edit by hand. Each table is one benchmark group: what is measured, stepwatch's figure,
the anchor measured beside it in the same run, their ratio, the budget, and the figures the
page showed before this run. Each group names the run its figures come from and the command
that reruns it alone. Timings move with the machine's load (the ratios much less); the
instruction counts (callgrind) hardly do. How each benchmark measures is in its script's
docstring (`bench/`).
"""


def render(state):
    lines = HEADER.splitlines() + [""]
    lines += [f"- [{g['title'].replace('`', '')}](#{anchor(g['title'])})" for g in GROUPS]
    lines.append("")
    for g in GROUPS:
        lines += render_group(g, state.get(g["id"], {}))
    return "\n".join(lines).rstrip() + "\n"


def anchor(title):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "overhead.md"))
    ap.add_argument("--state", default=None, help="default: the doc's name with .json")
    ap.add_argument("--note", action="append", default=[], metavar="GROUP=TEXT",
                    help="a note on the run of one group (e.g. a reduced setting)")
    args = ap.parse_args(argv)
    state_path = args.state or os.path.splitext(args.doc)[0] + ".json"
    notes = {}
    for n in args.note:
        group, sep, text = n.partition("=")
        if not sep or group not in {g["id"] for g in GROUPS}:
            ap.error(f"--note {n!r}: want GROUP=TEXT, GROUP one of "
                     f"{', '.join(g['id'] for g in GROUPS)}")
        notes[group] = text
    state = {}
    if os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as fh:
            state = json.load(fh)
    try:
        new = {g["id"]: update_group(g, args.bench, state, notes) for g in GROUPS}
    except MissingFigure as e:
        print(f"write_overhead_doc: {e}; {args.doc} left as it was", file=sys.stderr)
        return 1
    with open(state_path, "w", encoding="utf-8") as fh:
        json.dump(new, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    with open(args.doc, "w", encoding="utf-8") as fh:
        fh.write(render(new))
    print(f"overhead page: {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
