# The public API of stepwatch.lightning_advanced (also stepwatch.lightning.AdvancedProfiler),
# for mypy and IDEs; the base is Lightning's Profiler (Any where Lightning is not read).
import abc
import os

from lightning.pytorch.profilers import Profiler as _LightningProfiler

from stepwatch import Profiler as _Recorder
from stepwatch.functions import FunctionStats

__all__ = ["AdvancedProfiler"]

class AdvancedProfiler(_LightningProfiler, metaclass=abc.ABCMeta):
    line_count_restriction: float
    dump_stats: bool
    builtins: bool
    timing: bool
    profiler: _Recorder
    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 line_count_restriction: float = 1.0, dump_stats: bool = False,
                 builtins: bool = True, timing: bool = False,
                 profiler: _Recorder | None = None) -> None: ...
    def start(self, action_name: str) -> None: ...
    def stop(self, action_name: str) -> None: ...
    @property
    def profiled_actions(self) -> dict[str, FunctionStats]: ...
    def summary(self) -> str: ...
    def teardown(self, stage: str | None) -> None: ...
