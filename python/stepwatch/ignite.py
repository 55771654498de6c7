"""stepwatch.ignite — PyTorch-Ignite front end with Ignite's own API.

    profiler = stepwatch.ignite.BasicTimeProfiler()     # or HandlersTimeProfiler()
    profiler.attach(trainer)
    trainer.run(data, max_epochs=3)
    profiler.print_results(profiler.get_results())
    profiler.write_results("profile.csv")

Differences from Ignite's profilers, all on purpose:
  * memory is bounded: statistics live in the C core (per action, never per iteration);
    write_results keeps the last ``max_rows`` iterations (default 100 000) for its CSV and
    counts in ``dropped_rows`` how many older ones it let go;
  * data of unknown length works (no ``len()``, no ``epoch_length`` needed); a step begins
    when its batch arrived (at the time its fetch began), so the fetch that finds the end of
    the data opens none;
  * a run that fails (exception or Ctrl-C) is closed like a completed one and the profiler's
    handlers come off the engine; the exception propagates as without the profiler;
  * "Dataflow" is the ``next(iterator)`` call itself (between the GET_BATCH_STARTED and
    GET_BATCH_COMPLETED handlers), "Processing" the process function (between the
    ITERATION_STARTED and ITERATION_COMPLETED handlers), as in Ignite.
Under DDP (a torch.distributed process group of more than one rank when a run starts),
``stepwatch.distributed`` watches the run's profiler: DDP's gradient all-reduce is timed,
and when the run ends every rank's payload goes to rank 0, which prints the cross-rank view
(the straggler ranks and their blame, docs/ranks.md) once and adds it to ``report()``.
Results use Ignite's layout: seconds; min/index and max/index with 0-based iteration index.

Cost: no handler of the profiler runs per iteration. For the length of a run the engine's
``_fire_event`` (which Ignite calls for every event) is a C copy of Ignite's own that makes
the marks around the iteration events' handlers (``stepwatch._stepwatch.FireEvent``); it is
restored when the run ends. On an engine that fires its events otherwise (a subclass or an
instance with its own ``_fire_event``, or an Ignite whose own is not the one copied: 0.5.3 to
0.5.5, known by its source's fingerprint; that one says so in a warning, once) the marks are
C methods registered as handlers (``stepwatch._stepwatch.Marks``). See docs/python.md
"Overhead".
"""
import collections
import csv
import functools
import hashlib
import inspect
import io
import os
import textwrap
import warnings

import ignite
from ignite.engine import Engine, Events

import stepwatch as _sw
from stepwatch import _oom
from stepwatch.devicestats import DeviceStats

__all__ = ["BasicTimeProfiler", "HandlersTimeProfiler", "Timer", "DeviceStatsMonitor"]

# The per-iteration events, in FireEvent's order (the Marks' slots follow it).
_ITER_EVENTS = (Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED,
                Events.ITERATION_STARTED, Events.ITERATION_COMPLETED)
_BASIC_EVENTS = (Events.STARTED, Events.EPOCH_STARTED, Events.ITERATION_STARTED,
                 Events.ITERATION_COMPLETED, Events.EPOCH_COMPLETED, Events.COMPLETED)


class Timer(_sw.Timer):
    """Ignite's ``ignite.handlers.Timer`` (C core) with ``attach``."""

    def attach(self, engine, start=Events.STARTED, pause=Events.COMPLETED, resume=None,
               step=None):
        engine.add_event_handler(start, self.reset)
        engine.add_event_handler(pause, self.pause)
        if resume is not None:
            engine.add_event_handler(resume, self.resume)
        if step is not None:
            engine.add_event_handler(step, self.step)
        return self


def _stats(row, index):
    """Ignite's basic stats dict (seconds) from a stepwatch record, min/max indices through
    index(step); "not yet triggered" if never run."""
    if row is None or not row["count"]:
        return collections.OrderedDict([("total", "not yet triggered")])
    out = [("total", row["total_ns"] / 1e9)]
    if row["count"] > 1:
        out += [("min/index", (row["min_ns"] / 1e9, index(row["min_step"]))),
                ("max/index", (row["max_ns"] / 1e9, index(row["max_step"]))),
                ("mean", row["mean_ns"] / 1e9),
                ("std", row["std_ns"] / 1e9)]
    return collections.OrderedDict(out)


def _list_stats(values):
    """Ignite's basic stats of per-epoch (or per-run) values, as its _compute_basic_stats:
    over the values > 0, index = position among them, std with n - 1."""
    data = [v for v in values if v > 0]
    if not data:
        return collections.OrderedDict([("total", "not yet triggered")])
    out = [("total", sum(data))]
    if len(data) > 1:
        mean = sum(data) / len(data)
        std = (sum((v - mean) ** 2 for v in data) / (len(data) - 1)) ** 0.5
        out += [("min/index", (min(data), data.index(min(data)))),
                ("max/index", (max(data), data.index(max(data)))), ("mean", mean), ("std", std)]
    return collections.OrderedDict(out)


def _zero_stats(calls):
    """An event that fired `calls` times with no user handler: no time in handlers, with
    the keys Ignite gives an event that fired (its own markers' time, ~1 us, is not
    counted here)."""
    if calls == 0:
        return collections.OrderedDict([("total", "not yet triggered")])
    out = [("total", 0.0)]
    if calls > 1:
        out += [("min/index", (0.0, 0)), ("max/index", (0.0, 0)), ("mean", 0.0), ("std", 0.0)]
    return collections.OrderedDict(out)


def _need_pandas():
    try:
        import pandas  # noqa: F401  (Ignite writes its CSVs with pandas)
    except ImportError:
        raise ModuleNotFoundError("Need pandas to write results as files") from None


def _handler_name(handler):
    return getattr(handler, "__qualname__", handler.__class__.__name__)


# The Engine._fire_event that FireEvent copies (_ignite_fire_event.c): Ignite's own from 0.5.3 (weak
# references to the engine in the handlers' arguments) to 0.5.5, known by the fingerprint of
# its source (_fire_event_fingerprint; 0.5.4 and 0.5.5 are the same text, 0.5.3 differs by a
# comment). Any other, a later Ignite's or one patched onto Engine, is not copied: its events
# are timed through handlers instead, with one warning.
_COPIED_FIRE_EVENTS = frozenset({"d28103bea07c1ff3",   # Ignite 0.5.3
                                 "189f9cffb1d3b779"})  # Ignite 0.5.4, 0.5.5
_fire_event_warned = False


@functools.lru_cache(maxsize=4)
def _fire_event_fingerprint(func):
    """sha256 of func's source, dedented, blank lines and trailing spaces left out: the same
    for the same code on every Python version (its bytecode is not); None when the source
    cannot be read."""
    try:
        lines = [line.rstrip() for line in textwrap.dedent(inspect.getsource(func)).splitlines()]
    except (OSError, TypeError):
        return None
    return hashlib.sha256("\n".join(line for line in lines if line).encode()).hexdigest()[:16]


def _fires_events_as_ignite(engine):
    """Whether engine fires its events with the Engine._fire_event FireEvent copies (not one
    of a subclass, nor one set on the instance: those are the user's, timed through
    handlers). Asked of the bound method, not of vars(engine): in CPython 3.11+ reading an
    object's __dict__ makes it a real dict, which slows every attribute access of Ignite's
    loop on the engine (by ~0.6 us per iteration here)."""
    global _fire_event_warned
    fire = getattr(engine, "_fire_event", None)
    own = Engine.__dict__.get("_fire_event")
    if getattr(fire, "__func__", None) is not own or getattr(fire, "__self__", None) is not engine:
        return False
    if _fire_event_fingerprint(own) in _COPIED_FIRE_EVENTS:
        return True
    if not _fire_event_warned:
        _fire_event_warned = True
        warnings.warn(f"stepwatch.ignite: this Ignite's Engine._fire_event (Ignite "
                      f"{ignite.__version__}) is not the one stepwatch copies in C (Ignite "
                      f"0.5.3 to 0.5.5); its events are timed through handlers instead, which "
                      f"costs a few microseconds more per iteration", RuntimeWarning,
                      stacklevel=2)
    return False


class _Base:
    """What both profilers share: the stepwatch profiler, step and phase marks, the bounded
    per-iteration rows for write_results.

    The marks that run every iteration are made by a C ``FireEvent`` standing in for the
    engine's _fire_event (python/_stepwatch/_ignite_fire_event.c), or else by the bound methods of
    a C ``Marks`` (python/_stepwatch/_ignite.c) registered as Ignite handlers; the rows are
    kept in a C ring. Only epoch-level work runs in Python."""

    def __init__(self, profiler, phase, max_rows, slot_actions=(), live=None):
        if max_rows < 1:
            raise ValueError("max_rows must be >= 1")
        self.live = live          # the notebook display: None in a Jupyter kernel, or on/off
        self._notebook = None     # stepwatch.notebook.auto's display during a run
        self._own_profiler = profiler is None
        self.profiler = profiler
        self._phase_name, self._max_rows, self._slot_names = phase, max_rows, tuple(slot_actions)
        self._installed = []
        self._engine = None
        self._fire_event = None   # the FireEvent standing in for the engine's, during a run
        self._running = False     # between a run's STARTED and its COMPLETED (or exception)
        self._in_epoch = False
        self._ranks = None        # the stepwatch.distributed watch of the run, under DDP
        self._new_run(None)

    def _new_run(self, engine):
        """Each run is profiled anew, as Ignite's profilers reset at STARTED: a new stepwatch
        Profiler (unless one was given: it keeps every run) and new marks."""
        if self._own_profiler:
            self.profiler = _sw.Profiler(name="ignite")
        p = self.profiler
        self._steps0 = p.snapshot().info()["steps"]   # the run's first step index
        self._fit, self._epoch, self._phase = (p.phase("fit"), p.phase("epoch"),
                                               p.phase(self._phase_name))
        self._marks = _sw._stepwatch.Marks(p, p.action("data"), p.action("processing"),
                                           tuple(p.action(a) for a in self._slot_names),
                                           self._max_rows)
        self._epochs = 0
        state = getattr(engine, "state", None)
        length, epochs = getattr(state, "epoch_length", None), getattr(state, "max_epochs", None)
        self._total_iters = length * epochs if length and epochs else None

    def _iteration_index(self, step):
        """Ignite's index of an iteration-level value: iteration - 1."""
        return max(step - self._steps0, 0)

    def _fetch_index(self, step):
        """Ignite's index of a fetch-level value (dataflow, GET_BATCH_*): Ignite stores them at
        state.iteration - 1 before the iteration counter advances, so batch k (1-based) is
        at k - 2 and the run's first at the last index."""
        i = step - self._steps0 - 1
        return i % self._total_iters if self._total_iters else max(i, 0)

    @property
    def dropped_rows(self):
        """Iterations whose CSV row was let go (more than max_rows ran)."""
        return self._marks.dropped

    def attach(self, engine):
        """Attach to engine (its handlers are timed from the next run on)."""
        if not isinstance(engine, Engine):
            raise TypeError(f"Argument engine should be ignite.engine.Engine, "
                            f"but given {type(engine)}")
        # first STARTED handler: the subclass sets the run up (_as_first_started)
        if not engine.has_event_handler(self._as_first_started):
            engine._event_handlers[Events.STARTED].insert(0, (self._as_first_started, (engine,), {}))

    def _insert(self, event, fn, first, args=()):
        handlers = self._engine._event_handlers[event]
        entry = (fn, args, {})
        if first:
            handlers.insert(0, entry)
        else:
            handlers.append(entry)
        self._installed.append((event, fn))

    def _remove(self):
        """Take our handlers off the engine. Each event gets a new list, because the run ends
        from a COMPLETED or EXCEPTION_RAISED handler: Ignite is iterating over the old one."""
        handlers = self._engine._event_handlers
        ours = {}
        for event, fn in self._installed:
            ours.setdefault(event, set()).add(id(fn))
        for event, ids in ours.items():
            rest = [entry for entry in handlers[event] if id(entry[0]) not in ids]
            if rest:
                handlers[event] = rest
            else:  # Ignite re-raises an exception only when EXCEPTION_RAISED has no key
                del handlers[event]
        self._installed = []
        if self._fire_event is not None:  # the engine's own _fire_event again
            self._fire_event.close()
            if getattr(self._engine, "_fire_event", None) is self._fire_event:
                del self._engine._fire_event
            self._fire_event = None

    def _run_started(self, engine):
        """A run begins (first STARTED handler). What a failed run left is cleared first."""
        if self._running:
            self._run_finished()
        self._new_run(engine)
        self._engine = engine
        self._running = True
        import stepwatch.distributed as swdist  # Ignite imports torch anyway
        self._ranks = swdist.watch_group(self.profiler)
        self._fit.begin()
        where = _sw.distributed_rank(None)  # (rank, world) under a process group
        if where is None or where[0] == 0:
            from stepwatch import notebook
            self._notebook = notebook.auto(self.profiler, self.live)

    def _run_finished(self):
        """The run completed or failed: close what is open, take our handlers off."""
        self._marks.close()  # an iteration the engine left unfinished
        if self._in_epoch:
            self._epoch_completed_last()
        self._fit.end()
        self._running = False
        self._remove()
        if self._ranks is not None:  # every rank's run ends here: rank 0 prints the view
            import stepwatch.distributed as swdist
            swdist.finish(self.profiler)
        from stepwatch import notebook  # the final summary stays in the cell
        notebook.finish(self._notebook)
        self._notebook = None

    def _repr_html_(self):
        from stepwatch import notebook
        return notebook.repr_html(self.profiler)

    def _run_completed(self):
        """COMPLETED (last handler): the run is over."""
        self._run_finished()

    def _terminated(self):
        """TERMINATE (last handler): after terminate(skip_completed=True) no COMPLETED comes,
        so the run is over here."""
        if getattr(self._engine, "should_terminate", None) == "skip_completed":
            self._run_finished()

    def _on_exception(self, exc):
        """EXCEPTION_RAISED (Ctrl-C included): the run is over. Ignite raises the exception
        itself only when no handler is registered for the event, so when ours is the only
        one it is raised here; otherwise the user's handlers keep their say."""
        alone = len(self._engine._event_handlers[Events.EXCEPTION_RAISED]) == 1
        _oom.seen(self.profiler, exc)  # an out-of-memory error: where it happened
        if self._running:
            self._run_finished()
        if alone:
            raise exc

    def _epoch_started_first(self):
        self._epochs += 1
        self._epoch.begin()
        self._phase.begin()
        self._in_epoch = True

    def _epoch_completed_last(self):
        self._marks.close()  # an iteration the engine left unfinished (terminate)
        self._phase.end()
        self._epoch.end()
        self._in_epoch = False

    def _loop_marks(self, timed=(False,) * len(_ITER_EVENTS)):
        """The marks around next() and the process function (and, where timed[i], around the
        handlers of _ITER_EVENTS[i] as Marks slot i), and the epoch and run marks.

        On an engine firing its events with Ignite's own _fire_event, a FireEvent takes its
        place for the run: no handler of ours runs per iteration (_ignite_fire_event.c). On any
        other, the marks are registered as handlers."""
        if _fires_events_as_ignite(self._engine):
            self._fire_event = _sw._stepwatch.FireEvent(self._engine, self._marks,
                                                        _ITER_EVENTS, timed)
            self._engine._fire_event = self._fire_event
        else:
            self._handler_marks(timed)
        self._insert(Events.EPOCH_STARTED, self._epoch_started_first, first=True)
        self._insert(Events.EPOCH_COMPLETED, self._epoch_completed_last, first=False)
        self._insert(Events.COMPLETED, self._run_completed, first=False)
        self._insert(Events.TERMINATE, self._terminated, first=False)
        self._insert(Events.EXCEPTION_RAISED, self._on_exception, first=False)

    def _handler_marks(self, timed):
        """The iteration marks as handlers: the slots first and last, then the loop's marks
        innermost (next to next() and the process function)."""
        m, eng = self._marks, (self._engine,)
        for slot, event in enumerate(_ITER_EVENTS):
            if timed[slot]:
                self._insert(event, functools.partial(m.slot_begin, slot), first=True)
                self._insert(event, functools.partial(m.slot_end, slot), first=False)
        self._insert(Events.GET_BATCH_STARTED, m.fetch_begin, first=False)
        self._insert(Events.GET_BATCH_COMPLETED, m.fetch_end, first=True, args=eng)
        self._insert(Events.ITERATION_STARTED, m.work_begin, first=False)
        if self._engine._event_handlers[Events.ITERATION_COMPLETED]:
            self._insert(Events.ITERATION_COMPLETED, m.work_end, first=True)
        # iteration_end ends the work too: with no other handler, one mark does both.
        self._insert(Events.ITERATION_COMPLETED, m.iteration_end, first=False, args=eng)

    def records(self, phase=None):
        """The stepwatch rows as a list of dicts (pandas.DataFrame(records))."""
        return self.profiler.records(phase)

    def report(self, format="ignite"):
        """The stepwatch report (Ignite's summary layout by default); on rank 0 of a DDP run,
        followed by the cross-rank view."""
        text = self.profiler.report(format)
        view = self._ranks.view if self._ranks is not None else None
        if view is None:
            return text
        return text + view.report_after(format)

    def _write_csv(self, output_path, header, rows):
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(header)
        writer.writerows(rows)
        # All or nothing: a failed write leaves an older file of that name whole.
        _sw.write_output(os.fspath(output_path), text.getvalue())


class BasicTimeProfiler(_Base):
    """Ignite's BasicTimeProfiler on the stepwatch core (see the module doc)."""

    events_to_ignore = [Events.EXCEPTION_RAISED, Events.TERMINATE, Events.TERMINATE_SINGLE_EPOCH,
                        Events.DATALOADER_STOP_ITERATION, Events.INTERRUPT]
    _CSV_EVENTS = (Events.STARTED, Events.COMPLETED, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED,
                   Events.ITERATION_STARTED, Events.ITERATION_COMPLETED,
                   Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED)

    def __init__(self, profiler=None, phase="train", max_rows=100_000, live=None):
        self.event_handlers_names = {}
        super().__init__(profiler, phase, max_rows,
                         slot_actions=[f"callback:Events.{e.name}" for e in _ITER_EVENTS],
                         live=live)

    def _new_run(self, engine):
        super()._new_run(engine)
        self._event_actions = {e: self.profiler.action(f"callback:Events.{e.name}")
                               for e in self._CSV_EVENTS}
        self._event_start = {}
        self._per_epoch = {}      # (event, epoch) -> seconds, for the epoch-level events
        self._completed = False

    def _run_completed(self):
        self._completed = True
        super()._run_completed()

    def _as_first_started(self, engine):
        self._run_started(engine)
        self.event_handlers_names = {
            e: [_handler_name(h) for (h, _, _) in engine._event_handlers[e]
                if "BasicTimeProfiler." not in repr(h)]
            for e in Events if e not in self.events_to_ignore}
        # Every profiled event's handlers are timed from a first to a last marker; an event
        # with no user handlers costs nothing (its time is 0 by definition). The
        # per-iteration events are timed by the C marks (slots), the epoch-level ones here.
        for event in self._CSV_EVENTS:
            if event is Events.STARTED:
                self._event_start[event] = _sw.now_ns()
            elif event in _ITER_EVENTS or not self.event_handlers_names.get(event):
                continue
            if event is not Events.STARTED:
                self._insert(event, functools.partial(self._event_first, event), first=True)
            self._insert(event, functools.partial(self._event_last, event), first=False)
        self._loop_marks(timed=tuple(bool(self.event_handlers_names.get(e))
                                     for e in _ITER_EVENTS))

    def _event_first(self, event):
        self._event_start[event] = _sw.now_ns()

    def _event_last(self, event):
        start = self._event_start.pop(event, None)
        if start is None:
            return
        t = _sw.now_ns()
        self._event_actions[event].record(start, t)
        self._per_epoch[(event, self._engine.state.epoch)] = (t - start) / 1e9

    def get_results(self):
        """Ignite's result dict (seconds), computed from the stepwatch statistics, with
        Ignite's indices (see _iteration_index, _fetch_index)."""
        import torch  # Ignite's total_time is a tensor
        rows = {r["action"]: r for r in self.profiler.records("all")}
        calls = {Events.STARTED: 1 if self._engine is not None else 0,
                 Events.COMPLETED: int(self._completed),
                 Events.EPOCH_STARTED: self._epochs,
                 Events.EPOCH_COMPLETED: sum(1 for (e, _) in self._per_epoch
                                             if e is Events.EPOCH_COMPLETED) or self._epochs,
                 Events.ITERATION_STARTED: (rows.get("processing") or {}).get("count", 0),
                 Events.GET_BATCH_STARTED: (rows.get("data") or {}).get("count", 0)}
        calls[Events.ITERATION_COMPLETED] = calls[Events.ITERATION_STARTED]
        calls[Events.GET_BATCH_COMPLETED] = calls[Events.GET_BATCH_STARTED]
        handler_stats = collections.OrderedDict()
        total = 0.0
        for e in Events:
            if e in self.events_to_ignore:
                continue
            name = str(e.name).replace(".", "_")
            row = rows.get(f"callback:Events.{e.name}")
            if not self.event_handlers_names.get(e):
                handler_stats[name] = _zero_stats(calls.get(e, 0))
                continue
            if e in _ITER_EVENTS:
                fetch = e in (Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED)
                handler_stats[name] = _stats(row, self._fetch_index if fetch
                                             else self._iteration_index)
            else:
                handler_stats[name] = _list_stats(
                    [v for (ev, _), v in sorted(self._per_epoch.items(), key=lambda kv: kv[0][1])
                     if ev is e])
            total += row["total_ns"] / 1e9 if row else 0.0
        handler_stats["total_time"] = torch.tensor(total)
        return collections.OrderedDict([
            ("processing_stats", _stats(rows.get("processing"), self._iteration_index)),
            ("dataflow_stats", _stats(rows.get("data"), self._fetch_index)),
            ("event_handlers_stats", handler_stats),
            ("event_handlers_names", {str(e.name).replace(".", "_") + "_names": v
                                      for e, v in self.event_handlers_names.items()}),
        ])

    @staticmethod
    def print_results(results):
        """Print in Ignite's layout; returns the text too."""
        def to_str(v):
            if isinstance(v, str):
                return v
            if isinstance(v, tuple):
                return f"{v[0]:.5f}/{v[1]}"
            return f"{v:.5f}"

        def odict_to_str(d):
            return " | ".join(to_str(v) for v in d.values())

        stats = results["event_handlers_stats"]
        others = {k: odict_to_str(v) if isinstance(v, dict) else to_str(v)
                  for k, v in stats.items()}
        names = results["event_handlers_names"]
        events = [(event, str(names.get(event + "_names", [])), others[event])
                  for event in ("STARTED", "EPOCH_STARTED", "ITERATION_STARTED",
                                "ITERATION_COMPLETED", "EPOCH_COMPLETED", "COMPLETED")]
        text = _sw._stepwatch.ignite_basic_text(odict_to_str(results["processing_stats"]),
                                                odict_to_str(results["dataflow_stats"]),
                                                others["total_time"], events)
        print(text)
        return text

    def write_results(self, output_path):
        """Ignite's per-iteration CSV (the last max_rows iterations)."""
        _need_pandas()
        header = ["epoch", "iteration", "processing_stats", "dataflow_stats", "Event_STARTED",
                  "Event_COMPLETED", "Event_EPOCH_STARTED", "Event_EPOCH_COMPLETED",
                  "Event_ITERATION_STARTED", "Event_ITERATION_COMPLETED",
                  "Event_GET_BATCH_STARTED", "Event_GET_BATCH_COMPLETED"]
        per_epoch = self._per_epoch
        started = per_epoch.get((Events.STARTED, 0), 0.0)
        completed = next((v for (e, _), v in per_epoch.items() if e is Events.COMPLETED), 0.0)
        out = []
        for epoch, it, data, proc, gbs, gbc, its, itc in self._marks.rows():
            out.append([float(epoch), float(it), proc, data, started, completed,
                        per_epoch.get((Events.EPOCH_STARTED, epoch), 0.0),
                        per_epoch.get((Events.EPOCH_COMPLETED, epoch), 0.0),
                        its, itc, gbs, gbc])
        self._write_csv(output_path, header, out)


class HandlersTimeProfiler(_Base):
    """Ignite's HandlersTimeProfiler on the stepwatch core: each handler is an action
    ``callback:<qualname> (<EVENT>)``."""

    EVENT_FILTER_THESHOLD_TIME = 0.0001

    def __init__(self, profiler=None, phase="train", max_rows=100_000, live=None):
        super().__init__(profiler, phase, max_rows, live=live)

    def _new_run(self, engine):
        super()._new_run(engine)
        self._handlers = {}   # (handler name, event name) -> (action, [HandlerTimer])

    @staticmethod
    def _is_internal_handler(handler):
        owner = getattr(handler, "__self__", None)  # stepwatch's own are C or bound methods
        return (isinstance(owner, (_sw.Timer, _Base))
                or any(n in repr(handler) for n in ["HandlersTimeProfiler.", "Timer."]))

    def _wrap(self, handler, event):
        """The handler inside a C HandlerTimer (python/_stepwatch/_ignite.c) that records each
        call as ``callback:<name> (<EVENT>)`` and keeps its durations for the CSV."""
        name = _handler_name(handler)
        key = (name, getattr(event, "name", str(event)))
        if key not in self._handlers:
            self._handlers[key] = (self.profiler.action(f"callback:{name} ({key[1]})"), [])
        action, timers = self._handlers[key]
        # a filtered event's handler that did not run is not a call (as Ignite)
        threshold = self.EVENT_FILTER_THESHOLD_TIME if hasattr(handler, "_parent") else 0.0
        timer = _sw._stepwatch.HandlerTimer(handler, action, threshold, self._max_rows)
        functools.update_wrapper(timer, handler)  # name, and Ignite's _parent for filters
        timer._profiler_original = handler
        timers.append(timer)
        return timer

    def _as_first_started(self, engine):
        self._run_started(engine)
        for e in engine._allowed_events:
            for i, (func, args, kwargs) in enumerate(engine._event_handlers[e]):
                if not self._is_internal_handler(func):
                    engine._event_handlers[e][i] = (self._wrap(func, e), args, kwargs)
        self._loop_marks()

    def _run_finished(self):
        """Put the user's handlers back unwrapped, then as every profiler."""
        for handlers in self._engine._event_handlers.values():
            for i, (func, args, kwargs) in enumerate(handlers):
                original = getattr(func, "_profiler_original", None)
                if original is not None:
                    handlers[i] = (original, args, kwargs)
        super()._run_finished()

    def get_results(self):
        """Ignite's rows: [handler, event, total, (min, idx), (max, idx), mean, std] (s)."""
        rows = {r["action"]: r for r in self.profiler.records("all")}

        def basic(row, min_index, max_index):
            if row is None or not row["count"]:
                return ["not triggered", ("None", "None"), ("None", "None"), "None", "None"]
            std = round(row["std_ns"] / 1e9, 5) if row["count"] > 1 else "None"
            return [round(row["total_ns"] / 1e9, 5), (round(row["min_ns"] / 1e9, 5), min_index),
                    (round(row["max_ns"] / 1e9, 5), max_index),
                    round(row["mean_ns"] / 1e9, 5), std]

        def call_index(times, row, pick):
            """Ignite's index of a handler's min/max: its position among the handler's calls
            (the kept ones, after those let go)."""
            return row["count"] - len(times) + times.index(pick(times)) if times else 0

        out, total = [], 0.0
        for (name, event_name), (action, timers) in self._handlers.items():
            row = rows.get(action.name)
            total += row["total_ns"] / 1e9 if row else 0.0
            times = [t for timer in timers for t in timer.times()]
            out.append([name, event_name, *basic(row, call_index(times, row, min),
                                                 call_index(times, row, max))])
        out.append(["Total", "", round(total, 5), "", "", "", ""])
        # Ignite appends processing and dataflow times once per iteration: index = iteration - 1
        for label, action in (("Processing", "processing"), ("Dataflow", "data")):
            row = rows.get(action)
            out.append([label, "None", *basic(row, *(self._iteration_index(row[k]) for k in
                                                    ("min_step", "max_step")) if row else (0, 0))])
        return out

    @staticmethod
    def print_results(results):
        """Print in Ignite's table layout; returns the text too."""
        def cells(row, pairs):
            """A row's 9 str cells; (value, index) pairs split in two (an index None: the
            Total row's cells, written alone)."""
            row = list(row)
            lo, hi = (row[3], row[4]) if pairs else ((row[3], None), (row[4], None))
            return (str(row[0]), str(row[1]), str(row[2]), str(lo[0]),
                    None if lo[1] is None else str(lo[1]), str(hi[0]),
                    None if hi[1] is None else str(hi[1]), str(row[5]), str(row[6]))

        n = len(results)
        text = _sw._stepwatch.ignite_handlers_text(
            [cells(row, i != n - 3) for i, row in enumerate(results)])
        print(text)
        return text

    def write_results(self, output_path):
        """Ignite's CSV: '#', processing, dataflow, one column per handler (zero-padded)."""
        _need_pandas()
        rows = self._marks.rows()
        cols = [[r[3] for r in rows], [r[2] for r in rows]]
        header = ["#", "processing_stats", "dataflow_stats"]
        for (name, event_name), (_action, timers) in self._handlers.items():
            header.append(f"{name} ({event_name})")
            cols.append([t for timer in timers for t in timer.times()])
        n = max((len(c) for c in cols), default=0)
        out = [[float(i + 1)] + [c[i] if i < len(c) else 0.0 for c in cols] for i in range(n)]
        self._write_csv(output_path, header, out)


class DeviceStatsMonitor:
    """Lightning DeviceStatsMonitor's values for an Ignite engine (stepwatch.devicestats):
    torch's CUDA allocator while torch uses CUDA, the CPU figures on CPU (``cpu_stats``: None,
    True, False as Lightning's), stepwatch's process and GPU figures with ``extra_stats``.
    At each ``event`` they go into ``engine.state.metrics`` as
    ``DeviceStatsMonitor.<event>/<name>``, where Ignite's loggers find them, e.g.
    ``tb_logger.attach_output_handler(engine, Events.ITERATION_COMPLETED, tag="train",
    metric_names="all")``."""

    def __init__(self, cpu_stats=None, extra_stats=False):
        self.stats = DeviceStats(cpu_stats, extra_stats)

    def attach(self, engine, event=Events.ITERATION_COMPLETED):
        prefix = f"{type(self).__name__}.{event.value}/"
        engine.add_event_handler(event, self._log, prefix)
        return self

    def _log(self, engine, prefix):
        engine.state.metrics.update((prefix + k, v) for k, v in self.stats.read().items())
