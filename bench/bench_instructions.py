"""The work each profiler adds to a real training step, counted in instructions (valgrind's
callgrind), beside wall-clock medians: every adapter against its peer, in situ.

    build/venv/bin/python bench/bench_instructions.py [--out build/bench/instructions.json]
        [--quick] [--groups lightning,ignite,fastai,torch] [--rounds 3] [--steps 100]

Wall-clock overhead on a shared machine gives no verdict: the step's own time wanders by more
than a profiler adds. The instructions a step executes hardly depend on the machine's load,
so they are counted: each group of variants runs in one Python process under
`valgrind --tool=callgrind --instr-atstart=no`; a real loop (Lightning's Trainer.fit,
Ignite's Engine.run, fastai's Learner.fit, a plain torch loop) trains a tiny MLP with one of
the variants, and its data source counts the batches it hands out: at the WARMUP-th fetch
counting starts (CALLGRIND_START_INSTRUMENTATION, through bench/callgrind_marks.c loaded with
ctypes), `steps` fetches later it stops and the counts go to one dump labelled with the
variant. Ir per step = the dump's instructions / steps, every thread of the process counted
(a profiler's own thread adds work too). The variants take turns, round after round; a
variant's added instructions are the median over the rounds of its difference to the bare
loop of the same round ("none"). The counts still move between rounds (garbage collections,
the allocator, dict layouts): take the median of several.

The same processes run natively too (no valgrind; the client requests then do nothing), for
the wall-clock figures: per-step time between the same two fetches, the median over the rounds
of the added time. On a shared machine these wander; the instructions decide the budgets.

Groups and budgets (added instructions per step, issue 33):
  lightning    none (PassThroughProfiler), stepwatch.lightning.Profiler (and the same with
               Lightning's own generator-based profile(), what its C profile() saves),
               SimpleProfiler, AdvancedProfiler (Lightning's), stepwatch's TimeProfiler,
               thunder's TimeProfiler. Profiler <= 1/10 of SimpleProfiler; TimeProfiler
               <= 1/3 of thunder's.
  devicestats  the same Trainer, none against Lightning's DeviceStatsMonitor and
               stepwatch.lightning's (Lightning's default log_every_n_steps=50: the
               counted steps hold one logging step): <= 1/5 of Lightning's.
  ignite       none, stepwatch's BasicTimeProfiler and HandlersTimeProfiler, Ignite's two:
               each <= 1/3 of Ignite's.
  fastai       none, stepwatch's Throughput and Simple profilers, fastxtend's two: each
               <= 1/5 of fastxtend's.
  torch        none, instrument(), the same with Profiler(memory=False) (what the memory
               per step costs), the same with flops=True (what counting FLOPs costs the
               steps after the counted one) and with flops_per_batch given, the interception floor (do-nothing wrappers at the same
               points, bench_torch.py), torch.profiler (CPU): instrument() <= 1/20 of
               torch.profiler's.
  modules      the torch loop: instrument() alone, and with Profiler(modules=True) (every 10th
               step sampled, the default), modules=1 (every step: a sampled step's cost) and
               modules=1000 (the hook only: what a step that is not sampled pays). Issue 32's
               budget: modules on adds <= 1 % of a launch-bound ~2 ms step (20 us) averaged
               over the run; printed as added instructions and wall time per step beside
               instrument() (no ratio to a peer).
  collectives  a gloo all_reduce of 4 KiB in a loop (one rank), bare and under
               instrument(): what timing one collective costs (collective:all_reduce, its
               bytes and bandwidth counters), sync and async_op=True + wait() (that one
               added to the same async loop bare, none_async). Issue 41's
               budget: a few us per call in host time; printed per call (no peer).
A peer that is not installed (thunder, fastxtend) is left out with a message.

The dumps of the last round stay under build/bench/callgrind/<group>/ for
`callgrind_annotate` (where a variant's instructions go, function by function).
Without valgrind, or without the marks library (CMake builds it where valgrind's headers are),
only the wall-clock figures are taken.
"""
import argparse
import contextlib
import ctypes
import gc
import glob
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _bench_util as bu  # noqa: E402

WARMUP = 30  # fetches before counting starts: the loop and the profiler in their steady state

# group -> its variants, in the order of the table; (ours, theirs, budget) ratios
GROUPS = {
    "lightning": ["none", "stepwatch", "stepwatch_lightning_profile", "simple", "advanced",
                  "stepwatch_time", "thunder_time"],
    "devicestats": ["none", "stepwatch_devicestats", "lightning_devicestats"],
    "ignite": ["none", "stepwatch_basic", "ignite_basic", "stepwatch_handlers",
               "ignite_handlers"],
    "fastai": ["none", "stepwatch_throughput", "fastxtend_throughput", "stepwatch_simple",
               "fastxtend_simple"],
    "torch": ["none", "instrument", "instrument_no_memory", "instrument_flops",
              "instrument_flops_given", "floor", "torch_profiler"],
    "modules": ["none", "instrument", "modules_default", "modules_every_step", "modules_hook_only"],
    "collectives": ["none", "instrument", "none_async", "instrument_async"],
}
LABELS = {
    "none": "none", "stepwatch": "stepwatch Profiler",
    "stepwatch_lightning_profile": "  the same with Lightning's profile()",
    "simple": "SimpleProfiler",
    "advanced": "AdvancedProfiler (Lightning's)", "stepwatch_time": "stepwatch TimeProfiler",
    "thunder_time": "thunder's TimeProfiler",
    "stepwatch_devicestats": "stepwatch DeviceStatsMonitor",
    "lightning_devicestats": "Lightning's DeviceStatsMonitor",
    "stepwatch_basic": "stepwatch BasicTimeProfiler", "ignite_basic": "Ignite BasicTimeProfiler",
    "stepwatch_handlers": "stepwatch HandlersTimeProfiler",
    "ignite_handlers": "Ignite HandlersTimeProfiler",
    "stepwatch_throughput": "stepwatch Throughput", "fastxtend_throughput": "fastxtend Throughput",
    "stepwatch_simple": "stepwatch Simple", "fastxtend_simple": "fastxtend Simple",
    "instrument": "instrument()",
    "instrument_no_memory": "  the same, Profiler(memory=False)",
    "instrument_flops": "  the same, flops=True (counted once, before the window)",
    "instrument_flops_given": "  the same, flops_per_batch=1000 (given, not counted)",
    "floor": "interception floor",
    "torch_profiler": "torch.profiler (CPU)",
    "modules_default": "instrument(), modules=True (1 in 10)",
    "modules_every_step": "instrument(), modules=1 (every step)",
    "modules_hook_only": "instrument(), modules=1000 (hook only)",
    "none_async": "none, async_op=True + wait()",
    "instrument_async": "instrument(), async_op=True + wait()",
}
# A variant's added figures are against the bare loop "none", or against this one: the async
# collective's cost is what the instrumentation adds to the same async loop bare.
BASES = {"instrument_async": "none_async"}
BUDGETS = [  # (group, ours, theirs, at most this fraction of theirs)
    ("lightning", "stepwatch", "simple", 1 / 10),
    ("lightning", "stepwatch_time", "thunder_time", 1 / 3),
    ("devicestats", "stepwatch_devicestats", "lightning_devicestats", 1 / 5),
    ("ignite", "stepwatch_basic", "ignite_basic", 1 / 3),
    ("ignite", "stepwatch_handlers", "ignite_handlers", 1 / 3),
    ("fastai", "stepwatch_throughput", "fastxtend_throughput", 1 / 5),
    ("fastai", "stepwatch_simple", "fastxtend_simple", 1 / 5),
    ("torch", "instrument", "torch_profiler", 1 / 20),
]


# ---- the child: one group's loops, under callgrind or not ------------------------------------

class Marks:
    """The callgrind client requests (bench/callgrind_marks.c); do-nothing without valgrind."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path) if path else None
        if self.lib is not None:
            self.lib.sw_cg_stop.argtypes = [ctypes.c_char_p]
        self.counting = bool(self.lib is not None and self.lib.sw_cg_running())

    def start(self):
        if self.lib is not None:
            self.lib.sw_cg_start()

    def stop(self, label):
        if self.lib is not None:
            self.lib.sw_cg_stop(label.encode())


class Window:
    """Counts the batches a loop fetches: counting runs from the WARMUP-th fetch for `steps`
    fetches (one fetch to the next is one whole step, whatever the loop does in between)."""

    def __init__(self, marks, label, steps):
        self.marks, self.label, self.steps = marks, label, steps
        self.fetches, self.wall_ns = 0, None

    def tick(self):
        self.fetches += 1
        if self.fetches == WARMUP:
            gc.collect()  # every variant starts with the collector's counts at zero
            self.t0 = time.perf_counter_ns()
            self.marks.start()
        elif self.fetches == WARMUP + self.steps:
            self.marks.stop(self.label)
            self.wall_ns = (time.perf_counter_ns() - self.t0) / self.steps

    def length(self):
        return WARMUP + self.steps + 2  # and one the loop may fetch ahead


def torch_setup():
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return torch


def tiny_mlp(torch):
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def make_dataset(torch, window):
    """A map-style dataset of window.length() batches that ticks the window at each fetch."""
    from torch.utils.data import Dataset
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))

    class Ticking(Dataset):
        def __len__(self):
            return window.length()

        def __getitem__(self, i):
            if i >= window.length():
                raise IndexError(i)
            window.tick()
            return x, y

    return Ticking()


def lightning_profile_profiler():
    """stepwatch.lightning.Profiler with Lightning's generator-based profile() (the base
    class's), as before profile() was C: the figure that C profile() is measured against."""
    import stepwatch.lightning as swl

    class LightningProfile(swl.Profiler):
        def _attach(self, recorder):
            super()._attach(recorder)
            del self.profile

    return LightningProfile()


def run_lightning(variant, window, tmp):
    torch = torch_setup()
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    import stepwatch.lightning as swl

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_mlp(torch)
            self.loss = torch.nn.CrossEntropyLoss()

        def training_step(self, batch, i):
            x, y = batch
            return self.loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    kwargs = {}
    if variant == "stepwatch":
        kwargs["profiler"] = swl.Profiler()
    elif variant == "stepwatch_lightning_profile":  # what its C profile() saves
        kwargs["profiler"] = lightning_profile_profiler()
    elif variant == "simple":
        from lightning.pytorch.profilers import SimpleProfiler
        kwargs["profiler"] = SimpleProfiler()
    elif variant == "advanced":
        from lightning.pytorch.profilers import AdvancedProfiler
        kwargs["profiler"] = AdvancedProfiler()
    elif variant == "stepwatch_time":
        kwargs["callbacks"] = [swl.TimeProfiler()]
    elif variant == "thunder_time":
        from thunder.callbacks import TimeProfiler
        kwargs["callbacks"] = [TimeProfiler()]
    elif variant == "stepwatch_devicestats":
        kwargs["callbacks"] = [swl.DeviceStatsMonitor()]
    elif variant == "lightning_devicestats":
        from lightning.pytorch.callbacks import DeviceStatsMonitor
        kwargs["callbacks"] = [DeviceStatsMonitor()]
    loader = DataLoader(make_dataset(torch, window), batch_size=None)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=CSVLogger(tmp),
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, limit_val_batches=0, num_sanity_val_steps=0,
                        **kwargs)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(Net(), loader)


def run_ignite(variant, window, tmp):
    torch = torch_setup()
    from ignite.engine import Engine, Events
    from ignite.handlers import BasicTimeProfiler, HandlersTimeProfiler

    import stepwatch.ignite as swignite
    logging.getLogger("ignite").setLevel(logging.ERROR)
    model = tiny_mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(engine, batch):
        x, y = batch
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    eng = Engine(train_step)
    seen = []
    eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(None))
    profiler = {"stepwatch_basic": swignite.BasicTimeProfiler,
                "ignite_basic": BasicTimeProfiler,
                "stepwatch_handlers": swignite.HandlersTimeProfiler,
                "ignite_handlers": HandlersTimeProfiler}.get(variant)
    if profiler is not None:
        profiler().attach(eng)
    eng.run(_Iterable(make_dataset(torch, window)), max_epochs=1)


class _Iterable:
    """A dataset as the plain iterable with a length that Engine.run takes."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __iter__(self):
        return (self.dataset[i] for i in range(len(self.dataset)))


def run_fastai(variant, window, tmp):
    torch = torch_setup()
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.optimizer import SGD
    from torch.utils.data import DataLoader
    if variant.startswith("fastxtend"):
        import fastxtend.callback.profiler as fx
    import stepwatch.fastai as sw  # imported last: every variant runs its batch loop (see bench_fastai)

    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    dls = DataLoaders(DataLoader(make_dataset(torch, window), batch_size=None),
                      DataLoader([(x, y)] * 3, batch_size=None))  # fastxtend drops the first
    learn = Learner(dls, tiny_mlp(torch), loss_func=torch.nn.CrossEntropyLoss(), opt_func=SGD,
                    lr=1e-3, path=tmp)
    if variant == "stepwatch_throughput":
        learn.profile(show_report=False)
    elif variant == "stepwatch_simple":
        learn.profile(sw.ProfileMode.Simple, show_report=False)
    elif variant == "fastxtend_throughput":
        learn.add_cbs([fx.ThroughputCallback(show_report=False), fx.ThroughputPostCallback()])
    elif variant == "fastxtend_simple":
        learn.add_cbs([fx.SimpleProfilerCallback(show_report=False),
                       fx.SimpleProfilerPostCallback()])
    with contextlib.redirect_stdout(io.StringIO()):
        learn.fit(1)


def run_torch(variant, window, tmp):
    torch = torch_setup()
    from torch.utils.data import DataLoader

    import stepwatch
    import stepwatch.torch as swtorch
    from bench_torch import passthrough, patched_points, quiet_stderr
    model = tiny_mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    undo = []
    modules = {"modules_default": True, "modules_every_step": 1, "modules_hook_only": 1000}
    flops = {"instrument_flops": True, "instrument_flops_given": {"flops_per_batch": 1000}}
    if variant in ("instrument", "instrument_no_memory") or variant in flops or \
            variant in modules:
        # instrument_no_memory: the same without memory per step (Profiler(memory=False)), so
        # the difference to instrument is what the RSS and the allocator check cost a step
        prof = stepwatch.Profiler(name="bench", memory=variant != "instrument_no_memory",
                                  modules=modules.get(variant, False))
        # instrument_flops: the FLOPs of the first step are counted (before the counted
        # window); every step after pays one pre-hook on the model and a shape look-up;
        # instrument_flops_given: flops_per_batch, nothing counted, one pre-hook a step
        swtorch.instrument(prof, flops=flops.get(variant, False))
        undo += [prof.close, swtorch.uninstrument]
    elif variant == "floor":
        undo += passthrough(patched_points())
    elif variant == "torch_profiler":
        session = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        with quiet_stderr():
            session.__enter__()
        undo.append(lambda: session.__exit__(None, None, None))
    try:
        for x, y in DataLoader(make_dataset(torch, window), batch_size=None):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
    finally:
        with quiet_stderr():
            while undo:
                undo.pop()()


def run_collectives(variant, window, tmp):
    """A gloo all_reduce of 4 KiB per "step" in a process group of one rank (the wrapper's
    cost does not depend on the group's size): bare, under instrument() (the call timed as
    collective:all_reduce with its bytes and bandwidth), and the same as async work waited
    for (the Work's wait() timed too): instrument_async's cost is its figure less
    none_async's."""
    torch = torch_setup()
    import torch.distributed as dist

    import stepwatch
    import stepwatch.torch as swtorch
    from bench_torch import quiet_stderr
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "pg"),
                                rank=0, world_size=1)
    undo = []
    if variant.startswith("instrument"):
        prof = stepwatch.Profiler(name="bench")
        swtorch.instrument(prof)
        undo += [prof.close, swtorch.uninstrument]
    t = torch.zeros(1024)
    asynchronous = variant.endswith("_async")
    try:
        for _ in range(window.length()):
            window.tick()
            if asynchronous:
                dist.all_reduce(t, async_op=True).wait()
            else:
                dist.all_reduce(t)
    finally:
        with quiet_stderr():
            while undo:
                undo.pop()()


RUNNERS = {"lightning": run_lightning, "devicestats": run_lightning, "ignite": run_ignite,
           "fastai": run_fastai,
           "torch": run_torch, "modules": run_torch, "collectives": run_collectives}


def available(group, variant):
    """Whether variant's peer is installed (the message when not)."""
    needs = {"thunder_time": "thunder.callbacks", "fastxtend_throughput":
             "fastxtend.callback.profiler", "fastxtend_simple": "fastxtend.callback.profiler"}
    if variant not in needs:
        return None
    try:
        __import__(needs[variant])
        return None
    except Exception as e:  # noqa: BLE001 -- an optional peer
        return f"{LABELS[variant]} not measured: {type(e).__name__}: {e}"


def child(args):
    """Runs one group's variants in turns; prints {"wall": {variant: [ns/step per round]},
    "skipped": {variant: why}} as the last line."""
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    marks = Marks(args.marks)
    group = args.child
    skipped = {v: why for v in GROUPS[group] if (why := available(group, v))}
    variants = [v for v in GROUPS[group] if v not in skipped]
    wall = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        RUNNERS[group]("none", Window(Marks(None), "warm", 1), tmp)  # imports, first-call caches
        for r in range(args.rounds):
            for v in variants:
                window = Window(marks, f"{v}#{r}", args.steps)
                RUNNERS[group](v, window, tmp)
                if window.wall_ns is None:
                    raise RuntimeError(f"{group}/{v}: the loop fetched {window.fetches} batches, "
                                       f"fewer than {WARMUP + args.steps}")
                wall[v].append(window.wall_ns)
    print(json.dumps({"wall": wall, "skipped": skipped}))
    return 0


# ---- the parent: each group natively and under callgrind, the table ---------------------------

def marks_library():
    """The path of libsw_callgrind_marks.so (CMake builds it where valgrind's headers are)."""
    build = os.environ.get("SW_BUILD_DIR", os.path.join("build", "release"))
    for path in (os.path.join(build, "bench", "libsw_callgrind_marks.so"),
                 os.path.join(HERE, "..", "build", "release", "bench",
                              "libsw_callgrind_marks.so")):
        if os.path.exists(path):
            return os.path.abspath(path)
    return None


def marks_or_none(who):
    """marks_library()'s path, or None, said on stderr, without it or without valgrind (then
    `who` takes no instruction counts)."""
    marks = marks_library()
    if marks is None or shutil.which("valgrind") is None:
        print(f"{who}: no valgrind or no marks library (build/release/bench/"
              "libsw_callgrind_marks.so): no instruction counts", file=sys.stderr)
        return None
    return marks


def run_child(group, rounds, steps, marks, valgrind_dir=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", group, "--rounds", str(rounds),
           "--steps", str(steps)]
    if marks:
        cmd += ["--marks", marks]
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    if valgrind_dir is not None:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
               f"--callgrind-out-file={valgrind_dir}/cg.%p"] + cmd
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{group}: {' '.join(cmd[:3])}... exited {done.returncode}:\n"
                           f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_dumps(folder):
    """{label: instructions} of the callgrind dumps in folder (the client requests' dumps)."""
    counts = {}
    for path in glob.glob(os.path.join(folder, "cg.*")):
        label, total = None, None
        with open(path) as f:
            for line in f:
                if line.startswith("desc: Trigger: Client Request: "):
                    label = line.split(": ", 3)[3].strip()
                elif line.startswith("totals:"):  # (summary: is 0 after a zeroing)
                    total = int(line.split()[1])
        if label is not None and total is not None:
            counts[label] = total
    return counts


def measure_group(group, rounds, steps, wall_rounds, marks, keep_dir):
    """The figures of one group: per variant, Ir/step per round, added Ir (median over the
    rounds of the difference to none in the same round) and the wall-clock figures."""
    fig = {"steps": steps, "rounds": rounds}
    native = run_child(group, wall_rounds, steps, marks=None)
    fig["skipped"] = native["skipped"]
    variants = [v for v in GROUPS[group] if v in native["wall"]]
    wall = native["wall"]
    fig["wall_step_ns"] = {v: statistics.median(wall[v]) for v in variants}
    fig["wall_added_ns"] = {v: bu.overhead(wall, v, base=BASES.get(v, "none")) for v in variants}
    if marks is None or shutil.which("valgrind") is None:
        fig["instructions"] = None
        return fig
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        run_child(group, rounds, steps, marks, valgrind_dir=folder)
        fig["valgrind_s"] = round(time.monotonic() - started, 1)
        counts = read_dumps(folder)
        shutil.rmtree(keep_dir, ignore_errors=True)
        os.makedirs(keep_dir, exist_ok=True)
        for path in glob.glob(os.path.join(folder, "cg.*")):  # the last round, for annotate
            with open(path) as f:
                head = f.read(4096)
            for v in variants:
                if f"Client Request: {v}#{rounds - 1}\n" in head:
                    shutil.copy(path, os.path.join(keep_dir, f"{v}.callgrind"))
    per_round = {v: [counts[f"{v}#{r}"] / steps for r in range(rounds)] for v in variants}
    fig["ir_per_step_rounds"] = per_round
    fig["ir_per_step"] = {v: statistics.median(per_round[v]) for v in variants}
    fig["ir_added"] = {v: bu.overhead(per_round, v, base=BASES.get(v, "none")) for v in variants}
    fig["ir_added_range"] = {}
    for v in variants:
        added = [a - b for a, b in zip(per_round[v], per_round[BASES.get(v, "none")])]
        fig["ir_added_range"][v] = [min(added), max(added)]
    fig["instructions"] = True
    return fig


def verdicts(figures):
    out = []
    for group, ours, theirs, budget in BUDGETS:
        fig = figures.get(group)
        if not fig or not fig.get("instructions") or theirs not in fig["ir_added"]:
            continue
        a, b = fig["ir_added"][ours], fig["ir_added"][theirs]
        ratio = a / b if b > 0 else float("inf")
        out.append({"group": group, "ours": ours, "theirs": theirs, "budget": budget,
                    "ratio": ratio, "met": ratio <= budget})
    return out


def fmt_ir(n, sign="+"):
    return f"{n / 1e6:{sign}.2f}M" if abs(n) >= 1e6 else f"{n / 1e3:{sign}.1f}k"


def print_figures(figures, checks):
    print(f"{'per step, in situ':42} {'Ir/step':>9} {'added Ir':>10} {'range over rounds':>19}"
          f" {'wall added':>11}  ratio / budget")
    for group, fig in figures.items():
        print(f"-- {group} ({fig['steps']} steps x {fig['rounds']} rounds under callgrind)")
        for v in GROUPS[group]:
            if v in fig["skipped"]:
                print(f"   {fig['skipped'][v]}")
                continue
            wall = fig["wall_added_ns"][v] / 1e3
            wall_text = (f"{fig['wall_step_ns'][v] / 1e3:.0f} us" if v == "none"
                         else f"{wall:+.1f} us")
            check = next((c for c in checks if c["group"] == group and c["ours"] == v), None)
            verdict = (f"{c['ratio']:.3f} <= {c['budget']:.3g} "
                       f"{'yes' if c['met'] else 'NO'}" if (c := check) else "")
            if fig.get("instructions"):
                lo, hi = fig["ir_added_range"][v]
                irs = (f"{fmt_ir(fig['ir_per_step'][v], sign='-'):>9} "
                       f"{'' if v == 'none' else fmt_ir(fig['ir_added'][v]):>10} "
                       f"{'' if v == 'none' else fmt_ir(lo) + ' to ' + fmt_ir(hi):>19}")
            else:
                irs = f"{'(no valgrind)':>40}"
            print(f"   {LABELS[v]:39} {irs} {wall_text:>11}  {verdict}")
        for v, base in BASES.items():
            if v in fig["wall_added_ns"]:
                print(f"   ({LABELS[v]}: added to {LABELS[base]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("SW_BENCH_DIR", "build/bench"),
                                                  "instructions.json"))
    ap.add_argument("--quick", action="store_true", help="one round of 50 steps (a smoke run)")
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wall-rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--child", choices=list(GROUPS), help=argparse.SUPPRESS)
    ap.add_argument("--marks", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.quick:
        args.rounds, args.wall_rounds, args.steps = 1, 2, 50
    marks = marks_library()
    if shutil.which("valgrind") is None or marks is None:
        print("bench_instructions: no valgrind or no marks library (build/release/bench/"
              "libsw_callgrind_marks.so): wall-clock figures only", file=sys.stderr)
    figures = {}
    keep = os.path.join(os.path.dirname(os.path.abspath(args.out)), "callgrind")
    for group in args.groups.split(","):
        figures[group] = measure_group(group, args.rounds, args.steps, args.wall_rounds, marks,
                                       os.path.join(keep, group))
    checks = verdicts(figures)
    print_figures(figures, checks)
    bu.write_json(args.out, {"python": sys.version.split()[0], "groups": figures,
                             "budgets": checks, "warmup": WARMUP})
    return 0


if __name__ == "__main__":
    sys.exit(main())
