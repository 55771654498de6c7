"""stepwatch — a stopwatch for training loops.

The recording is done in C (``stepwatch._stepwatch``); this package only adds a process-wide
default profiler and lazy access to the framework adapters::

    import stepwatch
    prof = stepwatch.Profiler(name="my run", warmup_steps=2)
    fwd = prof.action("forward")
    with prof.phase("train"):
        for batch in loader:
            with prof.step(len(batch)):
                with fwd:
                    ...
    print(prof.report())                      # or prof.records() -> pandas.DataFrame

    stepwatch.torch.instrument()              # plain PyTorch, zero code changes
    Trainer(profiler=stepwatch.lightning.Profiler())
    stepwatch.ignite.BasicTimeProfiler().attach(engine)

    stepwatch.html("run.db", "report.html")   # the analyses of `stepwatch html/export/...`
    print(stepwatch.diagnose("run.db"), stepwatch.compare("base.db", "run.db"))
"""
import importlib
import pkgutil
import sys
import threading
from types import ModuleType
from typing import Any, Callable

from ._stepwatch import (
    CATEGORIES,
    FORMATS,
    JSON_SCHEMA_VERSION,
    MAX_RING_CAPACITY,
    Action,
    Error,
    Live,
    Phase,
    Profiler,
    Snapshot,
    Step,
    Timed,
    Timer,
    __version__,
    batch_size,
    category_of,
    clock_in_use,
    compare,
    diagnose,
    export_chrome,
    html,
    load,
    load_steps,
    now_ns,
    strerror,
    write_output,
)
from ._stepwatch import RANK_PAYLOAD_SIZE, ranks_view, run_ranks

# The adapters are attributes too (stepwatch.torch, ...: _ADAPTERS below) but not in __all__:
# `from stepwatch import *` imports no framework.
__all__ = [
    "Action", "Error", "Live", "Phase", "Profiler", "Snapshot", "Step", "Timed", "Timer",
    "compare", "diagnose", "export_chrome", "html",
    "JSON_SCHEMA_VERSION", "MAX_RING_CAPACITY", "__version__", "batch_size", "category_of", "load",
    "load_steps", "now_ns", "clock_in_use", "FORMATS",
    "CATEGORIES",
    "strerror", "write_output", "profiler", "set_profiler", "action", "report", "records",
    "distributed_rank",
    "step",
    "RANK_PAYLOAD_SIZE", "ranks_view", "run_ranks",
]


_default: Profiler | None = None
_default_lock = threading.Lock()


def profiler() -> Profiler:
    """The process-wide default Profiler (created on first use)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Profiler()
        return _default


def set_profiler(prof: Profiler | None) -> None:
    """Make prof the default Profiler (None: a fresh one is made on next use)."""
    global _default
    if prof is not None and not isinstance(prof, Profiler):
        raise TypeError(f"expected a stepwatch.Profiler, not {type(prof).__name__}")
    with _default_lock:
        _default = prof


def action(name: str) -> Action:
    """An action of the default profiler (context manager and decorator)."""
    return profiler().action(name)


def report(format: str = "table") -> str:
    """The default profiler's report as text."""
    return profiler().report(format)


def records(phase: str | None = None) -> list[dict[str, Any]]:
    """The default profiler's rows as a list of dicts."""
    return profiler().records(phase)


def distributed_rank(trainer: Any = None) -> tuple[int, int] | None:
    """(rank, world_size) of this process as the training framework sees it now, or None
    when nothing tells (a Profiler made with rank=0, world_size=0 then reads RANK/WORLD_SIZE,
    OMPI_COMM_WORLD_* or PMI_* from the environment, see sw_options).

    Ask late, when the job is set up: launchers give a process its rank after the script made
    its profilers (Lightning's ddp_spawn and ddp_fork start the process group in the child; its
    ddp launcher sets no RANK), so front ends make their recorder, and expand "{rank}" in
    run-file names, at setup. The answer, in order: a Lightning Trainer's global_rank and
    world_size (right from Profiler.setup on); torch.distributed's, once its process group is
    up (torchrun, any launcher); else None.
    """
    if trainer is not None:
        try:
            return int(trainer.global_rank), int(trainer.world_size)
        except (AttributeError, TypeError, ValueError, RuntimeError):
            pass
    dist = sys.modules.get("torch.distributed")  # never import torch for this
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class _StepMark:
    """What stepwatch.step() returns: as a context manager, the step ends with the block."""
    __slots__ = ("_end",)

    def __init__(self, end: Callable[[], object]) -> None:
        self._end = end

    def __enter__(self) -> "_StepMark":
        return self

    def __exit__(self, *exc: object) -> bool:
        self._end()
        return False


def step(batch_size: int = 0) -> _StepMark:
    """Mark a step by hand, for loops no rule of stepwatch.torch can read (docs/python.md).

    ``stepwatch.step()`` ends the step in progress and begins the next one here (at the
    DataLoader batch fetched for it, if one was just fetched); ``with stepwatch.step(): ...``
    also ends it at the end of the block. batch_size gives samples/s when no DataLoader
    batch tells it. While stepwatch.torch is instrumented, the first mark turns its step rules
    off (the report's rule is then "manual") and the other parts are timed as before; else the
    step is one of the default profiler's."""
    swtorch = sys.modules.get(__name__ + ".torch")
    inst = swtorch.instrumented() if swtorch is not None else None
    if inst is not None:
        inst.mark(batch_size)
        return _StepMark(inst.mark_end)
    prof = profiler()
    if prof.step_index >= 0:
        prof.step_end()
    prof.step_begin(batch_size)
    return _StepMark(lambda: prof.step_end() if prof.step_index >= 0 else None)


# Profiler's and Snapshot's rich display in Jupyter (_repr_html_); imports nothing heavy.
from . import notebook  # noqa: E402

# The adapters (torch, lightning, ignite, fastai, thunder, transformers, ...) and tools, one
# module each in this folder: the folder is their one list. Imported only when asked for
# (each imports its framework).
_ADAPTERS = frozenset(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def __getattr__(name: str) -> ModuleType:
    # The adapters import their framework: load them only when asked for.
    if name in _ADAPTERS:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'stepwatch' has no attribute {name!r}")
