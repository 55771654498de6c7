"""stepwatch.functions — what the function profiler recorded in one action, in cProfile's shapes.

    prof = stepwatch.Profiler(functions=["data"])
    ...
    fs = prof.function_stats("data")          # a FunctionStats
    pstats.Stats(fs).sort_stats("cumulative").print_stats(10)
    fs.dump_stats("data.prof")                # snakeviz data.prof, gprof2dot -f pstats ...
    fs.getstats()                             # cProfile.Profile.getstats()'s entries

The numbers are made in C (python/_stepwatch/_funcstats.c); this class only holds them.
"""
import collections
import marshal
import os
import tempfile
from typing import Any

__all__ = ["FunctionStats", "profiler_entry", "profiler_subentry"]

# The fields of cProfile's getstats() entries (_lsprof.profiler_entry / profiler_subentry).
profiler_entry = collections.namedtuple(
    "profiler_entry", "code callcount reccallcount totaltime inlinetime calls")
profiler_subentry = collections.namedtuple(
    "profiler_subentry", "code callcount reccallcount totaltime inlinetime")


class FunctionStats:
    """One action's functions, as cProfile counts them.

    ``stats`` is pstats' dict: ``{(file, line, name): (primitive calls, calls, tottime,
    cumtime, {caller: (calls, primitive calls, tottime, cumtime)})}`` in seconds, so
    ``pstats.Stats(fs)`` reads it like a ``cProfile.Profile``. ``spans``: how often the action
    ran while profiled; ``total_ns``: their time; ``self_ns``: the part spent outside any
    recorded function; ``folded_calls``: calls on call paths past the node limit.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self.action = data["action"]
        self.stats = data["stats"]
        self.spans = data["spans"]
        self.total_ns = data["total_ns"]
        self.self_ns = data["self_ns"]
        self.folded_calls = data["folded_calls"]
        self.builtins = data["builtins"]
        self._entries = data["entries"]

    def create_stats(self) -> None:
        """pstats.Stats(obj) calls this on profile objects; the stats are already made."""

    def getstats(self) -> list[Any]:
        """cProfile.Profile.getstats(): one entry per function (code object, or the built-in's
        label), with its callees in ``calls``."""
        return [profiler_entry(code, n, rec, total, inline,
                               [profiler_subentry(*sub) for sub in calls] or None)
                for code, n, rec, total, inline, calls in self._entries]

    def dumps(self) -> bytes:
        """The bytes of a pstats file (marshal of ``stats``, as cProfile's dump_stats)."""
        return marshal.dumps(self.stats)

    def dump_stats(self, path: "str | os.PathLike[str]") -> None:
        """Write the file pstats.Stats(path), snakeviz and gprof2dot load (marshal, as
        cProfile's dump_stats). Written to a temporary file in the same folder, then renamed:
        a reader never sees half a file, and a failed write leaves no file behind."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".stepwatch-", suffix=".prof.tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.dumps())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def print_stats(self, *restrictions: Any, sort: str = "cumulative") -> None:
        """pstats' print_stats on these stats (to stdout)."""
        import pstats
        pstats.Stats(self).strip_dirs().sort_stats(sort).print_stats(*restrictions)

    def __repr__(self) -> str:
        return (f"<FunctionStats {self.action!r}: {len(self.stats)} functions, "
                f"{self.spans} spans, {self.total_ns / 1e9:.3f} s>")
