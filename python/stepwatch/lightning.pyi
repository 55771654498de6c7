# The public API of stepwatch.lightning (lightning.py), for mypy and IDEs. The base classes
# are Lightning's: a type checker that reads Lightning sees a Lightning Profiler (what
# Trainer(profiler=...) takes); one that does not read it (not installed, or skipped) sees the
# base as Any, and stepwatch's own parameters are still checked. ABCMeta: the base's metaclass,
# stated for a checker that does not see the base (mypy's stubtest compares them).
import abc
import os
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.profilers import Profiler as _LightningProfiler

from stepwatch import Profiler as _Recorder
from stepwatch._stepwatch import _Format
from stepwatch.lightning_advanced import AdvancedProfiler as AdvancedProfiler
from stepwatch.lightning_devicestats import DeviceStatsMonitor as DeviceStatsMonitor
from stepwatch.thunder import TimeProfiler as TimeProfiler
from stepwatch.lightning_throughput import Throughput as Throughput
from stepwatch.lightning_throughput import ThroughputMonitor as ThroughputMonitor
from stepwatch.lightning_throughput import get_available_flops as get_available_flops
from stepwatch.lightning_throughput import measure_flops as measure_flops

__all__ = ["AdvancedProfiler", "Profiler", "SimpleProfiler", "TimeProfiler", "Throughput",
           "ThroughputMonitor", "get_available_flops", "measure_flops"]

def classify(name: str, owners: Mapping[str, object] | None = None) -> str: ...

class Profiler(_LightningProfiler, metaclass=abc.ABCMeta):
    extended: bool
    format: _Format
    warmup_steps: int
    run_file: str | None
    keep_durations: int
    loss_hooks: bool
    empty_hooks: bool
    modules: bool | int
    live: bool | None
    flops: bool | dict[str, object]
    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 extended: bool = True, format: _Format = "table", warmup_steps: int = 0,
                 run_file: str | None = None, profiler: _Recorder | None = None,
                 keep_durations: int = 1000, loss_hooks: bool = True,
                 empty_hooks: bool = False, modules: bool | int = False,
                 live: bool | None = None,
                 flops: bool | dict[str, object] = False) -> None: ...
    def _repr_html_(self) -> str: ...
    @property
    def profiler(self) -> _Recorder: ...
    def start(self, action_name: str) -> None: ...
    def stop(self, action_name: str) -> None: ...
    def setup(self, stage: str, local_rank: int | None = None,
              log_dir: str | None = None) -> None: ...
    def summary(self) -> str: ...
    def describe(self) -> None: ...
    def records(self, phase: str | None = None) -> list[dict[str, Any]]: ...
    @property
    def recorded_durations(self) -> Mapping[str, list[float]]: ...
    @property
    def unbalanced(self) -> int: ...

SimpleProfiler = Profiler
