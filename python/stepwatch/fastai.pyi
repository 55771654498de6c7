# The public API of stepwatch.fastai (fastai.py), for mypy and IDEs. fastai ships no types:
# its Callback base is Any to a type checker, and Learner.profile (added by this module at
# import) is reached through fastai's untyped Learner; stepwatch's own parameters are typed.
import enum
import os
from typing import Literal

from fastai.callback.core import Callback

from stepwatch import Profiler as _Recorder
from stepwatch.devicestats import DeviceStats

__all__ = ["ThroughputCallback", "ThroughputPostCallback", "SimpleProfilerCallback",
           "SimpleProfilerPostCallback", "ProfileMode", "DeviceStatsCallback"]

_Logger = Literal["wandb", "tensorboard", "csv_logger"]
_LoggerNames = _Logger | list[_Logger] | tuple[_Logger, ...] | None

class ProfileMode(str, enum.Enum):
    Throughput = "throughput"
    Simple = "simple"

class ThroughputCallback(Callback):
    show_report: bool
    plain: bool
    markdown: bool
    save_csv: bool
    csv_name: os.PathLike[str]
    rolling_average: int
    drop_first_batch: bool
    logger_callback: _LoggerNames
    extras: bool
    modules: bool | int
    live: bool | None
    flops: bool | dict[str, object]
    def __init__(self, show_report: bool = True, plain: bool = False, markdown: bool = False,
                 save_csv: bool = False, csv_name: str | os.PathLike[str] | None = None,
                 rolling_average: int = 10, drop_first_batch: bool = True,
                 logger_callback: _LoggerNames = None, profiler: _Recorder | None = None,
                 extras: bool = False, modules: bool | int = False,
                 live: bool | None = None,
                 flops: bool | dict[str, object] = False) -> None: ...
    def _repr_html_(self) -> str: ...

class ThroughputPostCallback(Callback):
    def __init__(self) -> None: ...

class SimpleProfilerCallback(ThroughputCallback): ...
class SimpleProfilerPostCallback(ThroughputPostCallback): ...

class DeviceStatsCallback(Callback):
    stats: DeviceStats
    every: int
    logger_callback: _LoggerNames
    def __init__(self, cpu_stats: bool | None = None, extra_stats: bool = False, every: int = 1,
                 logger_callback: _LoggerNames = None) -> None: ...
