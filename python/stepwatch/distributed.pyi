# The public API of stepwatch.distributed (distributed.py), for mypy and IDEs: stepwatch's
# types only, so a script's type check does not have to read torch to see them.
from typing import Any, Literal, TextIO

from stepwatch import Profiler as _Recorder
from stepwatch._stepwatch import RANK_PAYLOAD_SIZE as RANK_PAYLOAD_SIZE
from stepwatch._stepwatch import ranks_view as ranks_view

__all__ = ["RankView", "Watch", "watch", "watch_group", "unwatch", "active", "finish",
           "RANK_PAYLOAD_SIZE", "COLLECTIVE", "ranks_view"]

_ViewFormat = Literal["table", "markdown", "md", "json"]

COLLECTIVE: str

class RankView:
    payloads: bytes
    world_size: int
    top: int
    text: str
    data: dict[str, Any]
    def __init__(self, payloads: bytes, world_size: int, top: int = 3) -> None: ...
    @property
    def stragglers(self) -> list[dict[str, Any]]: ...
    @property
    def missing(self) -> list[int]: ...
    def report(self, format: _ViewFormat = "table", top: int | None = None) -> str: ...
    def report_after(self, report_format: str) -> str: ...

class Watch:
    profiler: _Recorder
    aggregate_every: int
    timeout: float
    top: int
    format: _ViewFormat
    output: TextIO | None
    quiet: bool
    view: RankView | None
    finished: bool
    rounds: int
    measured: list[Any]
    not_measured: list[tuple[Any, str]]
    clock_offset_ns: int | None
    rank: int | None
    world_size: int | None
    def __init__(self, profiler: _Recorder, aggregate_every: int = 0, timeout: float = 30.0,
                 top: int = 3, format: _ViewFormat = "table", output: TextIO | None = None,
                 quiet: bool = False) -> None: ...
    def where(self) -> tuple[int, int] | None: ...
    def estimate_clock(self) -> int: ...
    def aggregate(self) -> RankView | None: ...
    def finish(self) -> RankView | None: ...

def active() -> Watch | None: ...
def watch(profiler: _Recorder | None = None, *, aggregate_every: int | None = None,
          timeout: float | None = None, top: int = 3, format: _ViewFormat = "table",
          output: TextIO | None = None, quiet: bool = False) -> Watch: ...
def watch_group(profiler: _Recorder, *, aggregate_every: int | None = None,
                timeout: float | None = None, top: int = 3, format: _ViewFormat = "table",
                output: TextIO | None = None, quiet: bool = False) -> Watch | None: ...
def finish(profiler: _Recorder | None = None) -> RankView | None: ...
def unwatch() -> Watch | None: ...

# The rounds as trees (the end-of-run round through a store, the clock offsets by ping-pong),
# with the transport given: what Watch uses, and what bench/bench_ranks_round.py drives.
def tree(rank: int, world: int, fanout: int) -> tuple[int | None, range]: ...
def clock_tree(rank: int, world: int, send: Any, recv: Any, fanout: int = 2,
               rounds: int = 8) -> int: ...
def clock_ping(peer: int, send: Any, recv: Any, rounds: int = 8) -> int: ...
def store_gather(store: Any, prefix: str, rank: int, world: int, payload: bytes,
                 timeout: float, fanout: int = 16) -> bytes | None: ...
