"""stepwatch.lightning.AdvancedProfiler — Lightning's AdvancedProfiler on stepwatch's function
profiler: the same per-action cProfile tables, at a fraction of cProfile's cost.

    Trainer(profiler=stepwatch.lightning.AdvancedProfiler(dirpath=".", filename="perf_logs"))

It keeps ``lightning.pytorch.profilers.AdvancedProfiler``'s contract: ``dirpath``,
``filename`` (the report goes to ``{stage}-{filename}-{local_rank}.txt``, else to the log),
``line_count_restriction`` (pstats' restriction: a line count, or a share of the lines),
``dump_stats`` (one pstats file per action, ``{stage}-{filename}-{rank}-{action}.prof``,
written to a temporary file and renamed), ``summary()``/``describe()``, ``profiled_actions``
(per action an object pstats.Stats reads, with cProfile's ``getstats()``), a ValueError for
stopping an action that never started, and pickling without the recorded data.

Differences, on purpose: an action nested in another one is profiled too, and the outer
action's table shows it as one line ``{stepwatch action <name>}`` (Lightning's switches the
outer cProfile off for good when an inner action starts). Each action is also timed as a
stepwatch action (``profiler.report()``; ``timing=True`` appends that table to the summary).
``builtins=False`` records Python functions only, much cheaper (see docs/functions.md).
"""
import os

from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.profilers import Profiler as _LightningProfiler

import stepwatch as _sw

__all__ = ["AdvancedProfiler"]


class AdvancedProfiler(_LightningProfiler):
    """Per-action function profiles of a Lightning run, as cProfile tables.

    Args:
        dirpath, filename: as Lightning's profilers (report ``{stage}-{filename}-{rank}.txt``).
        line_count_restriction: functions listed per action: an int (that many), or a float
            in [0, 1) (that share); 1.0 lists all.
        dump_stats: also write each action's pstats file into ``dirpath``.
        builtins: record C builtins too, as cProfile (default); False: Python functions only.
        timing: append stepwatch's timing table of the same actions to the summary.
        profiler: record into this stepwatch.Profiler instead of a new one.
    """

    def __init__(self, dirpath=None, filename=None, line_count_restriction=1.0, dump_stats=False,
                 builtins=True, timing=False, profiler=None):
        super().__init__(dirpath=dirpath, filename=filename)
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats
        self.builtins = builtins
        self.timing = timing
        self.profiler = profiler if profiler is not None else _sw.Profiler(
            name="lightning-advanced", builtins=builtins)
        self._actions = {}  # Lightning name -> function-profiled stepwatch Action

    def _action(self, name):
        action = self._actions.get(name)
        if action is None:
            action = self._actions[name] = self.profiler.functions(name)
        return action

    def start(self, action_name):
        self.profiler.begin(self._action(action_name))

    def profile(self, action_name):
        """``with profiler.profile(name):`` — the stepwatch Action itself, whose __enter__ and
        __exit__ are C calls: no generator-based context manager runs inside the action (its
        frames would be the action's last lines, as in Lightning's tables)."""
        return self._action(action_name)

    def stop(self, action_name):
        action = self._actions.get(action_name)
        if action is None:
            raise ValueError(
                f"Attempting to stop recording an action ({action_name}) which was never started.")
        self.profiler.end(action)

    @property
    def profiled_actions(self):
        """{action: FunctionStats}: what each action recorded so far (pstats.Stats reads each;
        ``getstats()`` gives cProfile's entries)."""
        return {name: self.profiler.function_stats(name)
                for name in self.profiler.function_actions()}

    def _restriction(self):
        r = self.line_count_restriction
        if isinstance(r, float) and not 0.0 <= r < 1.0:
            return None  # pstats ignores such a float: every line
        return r

    def _dump_stats(self, action_name, stats):
        if not self.dirpath:
            raise ValueError("AdvancedProfiler(dump_stats=True) needs a dirpath")
        path = os.path.join(self.dirpath,
                            self._prepare_filename(action_name=action_name, extension=".prof"))
        fs = get_filesystem(path)
        fs.mkdirs(self.dirpath, exist_ok=True)
        if getattr(fs, "protocol", "file") in ("file", ("file", "local")):
            stats.dump_stats(path)  # temporary file and rename
        else:
            with fs.open(path, "wb") as f:
                f.write(stats.dumps())

    def summary(self):
        suffix = f" rank: {self._local_rank}" if self._local_rank is not None else None
        stage = f"{self._stage.upper()} " if self._stage is not None else ""
        output = [stage + "Profiler Report"]
        for name in self.profiler.function_actions():
            if self.dump_stats:
                self._dump_stats(name, self.profiler.function_stats(name))
            output.append(self.profiler.function_report(
                name, restriction=self._restriction(), suffix=suffix))
        if self.timing:
            output.append(self.profiler.report())
        return os.linesep.join(output)

    def teardown(self, stage):
        super().teardown(stage=stage)
        profiler = getattr(self, "profiler", None)
        if profiler is not None and not profiler.closed:
            profiler.clear_functions()

    def __reduce__(self):
        # the recorded profiles stay behind (Lightning's drops its cProfile objects too)
        return (self.__class__, (), {"dirpath": self.dirpath, "filename": self.filename,
                                     "line_count_restriction": self.line_count_restriction,
                                     "dump_stats": self.dump_stats, "builtins": self.builtins,
                                     "timing": self.timing})

    def __setstate__(self, state):
        self.__init__(**state)
