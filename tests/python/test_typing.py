"""The package is typed (issue 28): every public callable has a signature for
inspect.signature (the C ones through __text_signature__), and `mypy --strict` passes on a
user script of the documented API, against the installed package (py.typed and the stubs);
the adapters' stubs (lightning, ignite, fastai, distributed) are checked against the modules
themselves by mypy's stubtest, and without the frameworks' own types."""
import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import stepwatch

# The adapters whose frameworks are installed here; each one's __all__ is its public API.
ADAPTERS = ["stepwatch.torch", "stepwatch.distributed", "stepwatch.live", "stepwatch.functions",
            "stepwatch.lightning", "stepwatch.ignite", "stepwatch.fastai",
            "stepwatch.devicestats"]


def public_callables():
    """(qualified name, object) for every public callable: stepwatch's __all__, the adapters'
    __all__, and the public methods of every class among them (the C types included)."""
    seen = {}
    modules = [stepwatch]
    for name in ADAPTERS:
        try:
            modules.append(__import__(name, fromlist=["_"]))
        except ImportError:  # a framework that is not installed here
            continue
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type(stepwatch)) or not callable(obj):
                continue
            seen.setdefault(f"{module.__name__}.{name}", obj)
            if isinstance(obj, type):
                for attr, value in vars(obj).items():
                    if not attr.startswith("_") and callable(value):
                        seen.setdefault(f"{module.__name__}.{name}.{attr}", getattr(obj, attr))
    return sorted(seen.items())


def instantiable(cls):
    """Can Python code make one (the C types that only the profiler makes cannot)?"""
    return not cls.__flags__ & (1 << 7)  # Py_TPFLAGS_DISALLOW_INSTANTIATION


def test_every_public_callable_has_a_signature():
    callables = public_callables()
    names = [name for name, _ in callables]
    # The walk reaches the C callables the issue names, and the methods of the C types.
    for must in ("stepwatch.Profiler", "stepwatch.load", "stepwatch.html", "stepwatch.diagnose",
                 "stepwatch.compare", "stepwatch.Timer", "stepwatch.Profiler.action",
                 "stepwatch.Snapshot.report", "stepwatch.torch.instrument"):
        assert must in names, must
    missing = []
    for name, obj in callables:
        if isinstance(obj, type) and (not instantiable(obj) or issubclass(obj, BaseException)):
            continue  # made by the profiler only; an exception (CPython's have none either)
        try:
            inspect.signature(obj)
        except (ValueError, TypeError) as exc:
            missing.append(f"{name}: {exc}")
    assert missing == [], "\n".join(missing)
    assert len(callables) > 80, len(callables)


def test_the_c_signatures_say_what_the_c_code_takes():
    """Parameters as the docs name them, binding as the C parsers do."""
    sig = inspect.signature(stepwatch.Profiler)
    assert list(sig.parameters)[:3] == ["name", "warmup_steps", "run_file"]
    assert sig.parameters["on_full"].default == "drop"
    assert str(inspect.signature(stepwatch.load)) == "(path, /)"
    assert "format='table'" in str(inspect.signature(stepwatch.diagnose))
    report = inspect.signature(stepwatch.Profiler.report)
    assert report.parameters["width"].kind is inspect.Parameter.KEYWORD_ONLY
    prof = stepwatch.Profiler(live=False)
    try:
        # A bound C method drops self, as for a Python method.
        assert list(inspect.signature(prof.action).parameters) == ["name", "category"]
        assert str(inspect.signature(prof.step)) == "(batch_size=0, /)"
    finally:
        prof.close()


USER_SCRIPT = '''
"""A user's script of the documented API (README, docs/python.md), type-checked."""
import stepwatch
import stepwatch.torch
from stepwatch.live import TensorBoard


def train(path: str) -> float:
    prof = stepwatch.Profiler(name="run", warmup_steps=2, run_file=path, live=False)
    forward = prof.action("forward")
    loss = prof.action("my_loss", category="loss")
    with prof.phase("train"):
        for i in range(5):
            with prof.step(8) as step:
                step.set_batch_size(8)
                with forward:
                    pass
                prof.record(loss, stepwatch.now_ns(), stepwatch.now_ns())
    prof.counter("lr", 0.1)
    prof.note("model", "mlp")
    text: str = prof.report("markdown", width=100)
    rows = prof.records()
    total = sum(float(r["total_s"]) for r in rows)
    info = prof.snapshot().info()
    steps: int = info["steps"]
    prof.close()
    snap = stepwatch.load(path)
    print(text, steps, snap.report("json"), stepwatch.load_steps(path)[:1])
    stepwatch.html(path, path + ".html")
    stepwatch.export_chrome(path, path + ".json")
    print(stepwatch.diagnose(path), stepwatch.compare(path, snap, format="markdown"))
    timer = stepwatch.Timer(average=True)
    timer.step()
    elapsed: float = timer.value()
    return total + elapsed


def zero_code() -> None:
    inst = stepwatch.torch.instrument()
    print(inst.rule)
    stepwatch.torch.uninstrument()
    with stepwatch.step(4):
        pass
    print(stepwatch.report(), stepwatch.records("all"), stepwatch.profiler().step_count)
    stepwatch.set_profiler(None)


def decorated() -> None:
    prof = stepwatch.profiler()

    @prof.action("data")
    def load_batch(i: int) -> list[int]:
        return [i]

    print(load_batch(3), stepwatch.batch_size([[1, 2], [3, 4]]), stepwatch.category_of("data"))
    board = TensorBoard(prof, log_dir="runs/x")
    board.close()
    try:
        prof.action("x" * 300)
    except stepwatch.Error as err:
        print(err.name, err.code)
'''


def test_mypy_strict_passes_on_a_user_script(mypy_run):
    # No error in the script; the same script with a wrong call added fails on that call.
    assert mypy_run.errors("user_script.py") == [], mypy_run.output
    wrong = mypy_run.errors("user_script_wrong.py")
    assert len(wrong) == 1 and "warmup_steps" in wrong[0], mypy_run.output


def test_the_installed_package_carries_its_types_and_no_c_files():
    folder = os.path.dirname(stepwatch.__file__)
    files = os.listdir(folder)
    assert "py.typed" in files and "_stepwatch.pyi" in files
    assert not [f for f in files if f.endswith((".c", ".h"))], files


ADAPTER_SCRIPT = '''
"""A user's script of the adapters (docs/python.md), type-checked."""
import io

from ignite.engine import Engine
from lightning.pytorch import Trainer

import stepwatch
import stepwatch.distributed as swdist
from stepwatch.devicestats import CPU_KEYS, DeviceStats
from stepwatch.fastai import (DeviceStatsCallback, ProfileMode, SimpleProfilerCallback,
                              SimpleProfilerPostCallback, ThroughputCallback,
                              ThroughputPostCallback)
from stepwatch.ignite import BasicTimeProfiler, DeviceStatsMonitor, HandlersTimeProfiler, Timer
from stepwatch.lightning import AdvancedProfiler, Profiler, SimpleProfiler, TimeProfiler


def lightning(path: str) -> Trainer:
    prof = Profiler(dirpath=".", filename="perf", format="markdown", warmup_steps=1,
                    run_file=path, keep_durations=10, modules=10)
    simple: Profiler = SimpleProfiler(extended=False)
    rows = prof.records("train")
    durations: list[float] = list(prof.recorded_durations.get("x", []))
    text: str = prof.summary()
    advanced = AdvancedProfiler(line_count_restriction=0.5, builtins=False, timing=True)
    timing = TimeProfiler("backward", "total val downtime", profiler=prof.profiler)
    deltas: dict[str, float] = timing.compute_time_delta()
    print(rows, durations, text, advanced.profiled_actions, simple.unbalanced, deltas)
    return Trainer(profiler=prof, callbacks=[timing])


def ignite(engine: Engine, out: str) -> str:
    basic = BasicTimeProfiler(max_rows=1000)
    basic.attach(engine)
    handlers = HandlersTimeProfiler(profiler=stepwatch.Profiler(live=False))
    handlers.attach(engine)
    timer = Timer(average=True).attach(engine)
    DeviceStatsMonitor(extra_stats=True).attach(engine)
    basic.write_results(out)
    seconds: float = timer.value()
    text: str = BasicTimeProfiler.print_results(basic.get_results())
    text += HandlersTimeProfiler.print_results(handlers.get_results())
    return text + basic.report("markdown") + str(basic.dropped_rows + seconds)


def fastai() -> list[object]:
    return [ThroughputCallback(rolling_average=5, logger_callback=["wandb", "csv_logger"],
                               profiler=stepwatch.Profiler(live=False), extras=True),
            ThroughputCallback(modules=True),
            ThroughputPostCallback(), SimpleProfilerCallback(plain=True),
            SimpleProfilerPostCallback(), DeviceStatsCallback(every=10),
            ProfileMode.Simple, ProfileMode("throughput")]


def ranks() -> None:
    prof = stepwatch.Profiler(live=False)
    watch = swdist.watch(prof, aggregate_every=100, timeout=5.0, output=io.StringIO())
    view = swdist.finish(prof)
    if view is not None:
        print(view.report("markdown", top=2), view.stragglers, view.missing)
    where = watch.where()
    if where is not None:
        rank, world = where
        print(rank + world)
    assert swdist.active() is watch and swdist.watch_group(prof) in (None, watch)
    swdist.unwatch()
    values: dict[str, float] = DeviceStats(cpu_stats=True).read()
    print(values, CPU_KEYS, swdist.COLLECTIVE, swdist.RANK_PAYLOAD_SIZE)
'''

# The frameworks as mypy sees them when they ship no types or are not installed: skipped (Any).
# A user's mypy that reads them gets their real base classes (the stubs import them); here it
# would read them all, minutes of work. The scripts' run reads torch (a user's mypy does, for
# the user script: live.py imports torch.utils.tensorboard); stubtest skips it too.
FRAMEWORKS = "lightning.*,lightning_fabric.*,ignite.*,fastai.*,fastcore.*"
SKIPPED = """
[mypy]
strict = True
[mypy-{}]
follow_imports = skip
ignore_missing_imports = True
"""
FRAMEWORKS_SKIPPED = SKIPPED.format(FRAMEWORKS)
STUBTEST_CONFIG = SKIPPED.format("torch.*," + FRAMEWORKS)


# The wrong calls added to ADAPTER_SCRIPT, each caught by the stub of its adapter.
ADAPTER_WRONG = {'Argument "max_rows" to "BasicTimeProfiler"': 'BasicTimeProfiler(max_rows="10")',
                 'Argument "logger_callback" to "ThroughputCallback"':
                     'ThroughputCallback(logger_callback="wandbx")',
                 'Argument "format" to "watch"': 'swdist.watch(format="html")',
                 'Argument "format" to "Profiler"': 'Profiler(format="xml")',
                 'Argument 1 to "TimeProfiler"': 'TimeProfiler("backwards")'}


class MypyRun:
    """One `mypy --strict` run over the scripts, read per file."""

    def __init__(self, done):
        self.returncode, self.output = done.returncode, done.stdout + done.stderr

    def errors(self, filename):
        return [line for line in self.output.splitlines()
                if line.startswith(filename + ":") and ": error:" in line]


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory):
    """mypy --strict once over the user script, the adapters' script and each one with wrong
    calls added: each mypy run reads the standard library's and torch's stubs (live.py imports
    torch.utils.tensorboard) for most of a minute, so one run instead of four (the checks are
    per file: an error is reported in the file it is in). The frameworks with no types of
    their own are skipped (FRAMEWORKS_SKIPPED, torch read: the user script's view is a user's
    own mypy's). From a temporary folder: stepwatch is the installed package (its py.typed
    and stubs), not python/."""
    pytest.importorskip("mypy")
    folder = tmp_path_factory.mktemp("mypy")
    scripts = {"user_script.py": USER_SCRIPT,
               "user_script_wrong.py": USER_SCRIPT + "\nstepwatch.Profiler(warmup_steps='2')\n",
               "adapters_script.py": ADAPTER_SCRIPT,
               "adapters_script_wrong.py":
                   ADAPTER_SCRIPT + "\n".join(ADAPTER_WRONG.values()) + "\n"}
    for name, text in scripts.items():
        (folder / name).write_text(textwrap.dedent(text))
    (folder / "mypy.ini").write_text(FRAMEWORKS_SKIPPED)
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           "--no-incremental", "--python-version", "3.11", *scripts],
                          capture_output=True, text=True, cwd=folder, timeout=600)
    run = MypyRun(done)
    # Errors in the wrong scripts only: mypy fails, and says where.
    assert run.returncode == 1 and "(checked 4 source files)" in run.output, run.output
    return run


def test_mypy_strict_passes_on_a_script_of_the_adapters(mypy_run):
    assert mypy_run.errors("adapters_script.py") == [], mypy_run.output
    wrong = mypy_run.errors("adapters_script_wrong.py")
    for message in ADAPTER_WRONG:
        assert any(message in line for line in wrong), (message, mypy_run.output)
    assert len(wrong) == len(ADAPTER_WRONG), mypy_run.output
    assert all(line.endswith("[arg-type]") for line in wrong), mypy_run.output


# What stubtest cannot judge: an enum with a str mixin gets str's __new__ from the checker.
STUBTEST_ALLOWED = ["stepwatch.fastai.ProfileMode.__new__"]


def test_the_adapter_stubs_match_the_modules(tmp_path):
    """mypy's stubtest imports each adapter and compares every name its stub declares with the
    module (parameters, defaults, kinds, properties): a stub that drifts from the code fails.
    Names the stub leaves out (the framework hooks) are not its business."""
    pytest.importorskip("mypy")
    modules = ["stepwatch.distributed", "stepwatch.devicestats"]
    for framework, adapters in (("lightning", ["lightning", "lightning_advanced", "thunder",
                                               "lightning_devicestats"]),
                                ("ignite", ["ignite"]), ("fastai", ["fastai"])):
        try:
            __import__(framework)
        except ImportError:
            continue
        modules += [f"stepwatch.{name}" for name in adapters]
    allowlist = tmp_path / "allowlist.txt"
    allowlist.write_text("".join(f"{name}\n" for name in STUBTEST_ALLOWED
                                 if name.rsplit(".", 2)[0] in modules))
    (tmp_path / "mypy.ini").write_text(STUBTEST_CONFIG)
    done = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--ignore-missing-stub",
                           "--allowlist", str(allowlist), "--mypy-config-file",
                           str(tmp_path / "mypy.ini"), *modules],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no issues found in {len(modules)} modules" in done.stdout, done.stdout
