# The public API of stepwatch.thunder (also stepwatch.lightning.TimeProfiler), for mypy and
# IDEs; the base is Lightning's Callback (Any where Lightning is not read).
from typing import Any, Literal

from lightning.pytorch.callbacks import Callback

from stepwatch import Profiler as _Recorder

__all__ = ["TimeProfiler"]

_OptionalKey = Literal["backward", "optimizer step", "total train downtime",
                       "total val downtime"]

class TimeProfiler(Callback):
    keys: list[str]
    profiler: _Recorder | None
    deltas: dict[str, float]
    def __init__(self, *keys: _OptionalKey | Literal[True],
                 profiler: _Recorder | None = None) -> None: ...
    def compute_time_delta(self) -> dict[str, float]: ...
    def log_to_logger(self, pl_module: Any) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...
