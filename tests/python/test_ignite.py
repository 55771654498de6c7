"""stepwatch.ignite: Ignite's BasicTimeProfiler / HandlersTimeProfiler API on the C core."""
import copy
import csv
import logging
import time
import warnings

import pytest

torch = pytest.importorskip("torch")
ignite = pytest.importorskip("ignite")
from ignite.engine import Engine, Events  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import stepwatch  # noqa: E402
from stepwatch.ignite import BasicTimeProfiler, HandlersTimeProfiler, Timer  # noqa: E402

from conftest import within  # noqa: E402


def engine_with_handlers():
    eng = Engine(lambda e, batch: None)
    calls = {"it": 0, "ep": 0}

    @eng.on(Events.ITERATION_COMPLETED)
    def log_iter(e):
        calls["it"] += 1

    @eng.on(Events.EPOCH_COMPLETED)
    def log_epoch(e):
        calls["ep"] += 1

    return eng, calls


def fetch_clock(engine):
    """The test's own timer of each batch's fetch, added before the profiler: from the end of
    its GET_BATCH_STARTED handler to the start of its GET_BATCH_COMPLETED handler. That
    interval holds stepwatch's (whose marks sit next to the fetch) and sees the same load, so
    a preemption that lengthens one lengthens the other. clock["total_ns"]: reset it per run."""
    clock = {"start": 0, "total_ns": 0}

    def started():
        clock["start"] = time.perf_counter_ns()

    def completed():
        clock["total_ns"] += time.perf_counter_ns() - clock["start"]

    engine.add_event_handler(Events.GET_BATCH_STARTED, started)
    engine.add_event_handler(Events.GET_BATCH_COMPLETED, completed)
    return clock


def assert_fetch_time(measured_ns, ds, clock):
    """stepwatch's fetch time holds the dataset's sleeps and is within ±10 % of the test's own
    timer of the same fetches (a comparison with the sleeps alone would blame the machine's
    preemptions on stepwatch: +13 ms on 3 x 30 ms sleeps at load 12)."""
    assert measured_ns >= ds.slept_ns * 0.999, (measured_ns, ds.slept_ns)
    assert within(measured_ns, clock["total_ns"]), (measured_ns, clock["total_ns"], ds.slept_ns)


def test_basic_data_wait_matches_a_known_sleep(sleepy, tmp_path):
    ds = sleepy(8, sleep_s=0.02)
    eng, calls = engine_with_handlers()
    clock = fetch_clock(eng)
    prof = BasicTimeProfiler()
    prof.attach(eng)
    eng.run(DataLoader(ds, batch_size=None), max_epochs=2)
    assert calls == {"it": 16, "ep": 2}  # the user's handlers still run
    res = prof.get_results()
    data = {r["action"]: r for r in prof.records("all")}["data"]
    assert data["count"] == 16
    assert_fetch_time(data["total_ns"], ds, clock)
    assert res["dataflow_stats"]["total"] == pytest.approx(data["total_ns"] / 1e9)
    assert set(res["dataflow_stats"]) == {"total", "min/index", "max/index", "mean", "std"}
    assert 0 <= res["dataflow_stats"]["min/index"][1] < 16
    hs = res["event_handlers_stats"]
    assert hs["ITERATION_COMPLETED"]["total"] > 0
    # an event with no user handler: no time in handlers, with the keys Ignite gives
    assert hs["COMPLETED"] == {"total": 0.0}
    assert set(hs["EPOCH_STARTED"]) == {"total", "min/index", "max/index", "mean", "std"}
    assert hs["total_time"].item() == pytest.approx(sum(
        v["total"] for k, v in hs.items() if k != "total_time"), rel=1e-5)
    # Ignite's indices: an epoch handler's is the epoch - 1
    assert {hs["EPOCH_COMPLETED"]["min/index"][1], hs["EPOCH_COMPLETED"]["max/index"][1]} == {0, 1}
    assert res["event_handlers_names"]["ITERATION_COMPLETED_names"] == [
        "engine_with_handlers.<locals>.log_iter"]
    text = prof.print_results(res)
    assert "Dataflow:" in text and "log_epoch" in text
    out = tmp_path / "basic.csv"
    prof.write_results(str(out))
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 16
    assert [float(r["iteration"]) for r in rows] == [float(i) for i in range(1, 17)]
    assert float(rows[-1]["epoch"]) == 2.0
    # the user's ITERATION_COMPLETED handler is timed per row; no handler on ITERATION_STARTED
    assert all(float(r["Event_ITERATION_COMPLETED"]) > 0 for r in rows)
    assert all(float(r["Event_ITERATION_STARTED"]) == 0 for r in rows)
    assert sum(float(r["dataflow_stats"]) for r in rows) == pytest.approx(
        data["total_ns"] / 1e9, rel=1e-6)
    # the profiler's own handlers are gone after the run
    assert stepwatch_handlers(eng) == [prof._as_first_started]  # kept to profile a rerun


def test_basic_works_without_len_and_bounds_memory(tmp_path):
    def gen():
        for _ in range(50):
            yield torch.zeros(2, 3)

    eng = Engine(lambda e, batch: batch.sum())
    prof = BasicTimeProfiler(max_rows=10)
    prof.attach(eng)
    eng.run(gen(), max_epochs=1)
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["processing"]["count"] == 50 and rows["data"]["count"] == 50
    # a step per batch: the fetch that found the end opens none
    assert rows["step"]["count"] == 50
    assert rows["step"]["samples"] == 100  # batch size read from the batch
    info = prof.profiler.snapshot().info()["misuse"]
    assert info["open_at_snapshot"] == 0 and info["step_overlap"] == 0, info
    assert len(prof._marks) == 10 and prof.dropped_rows == 40
    # the kept rows are the last ten iterations, oldest first
    out = tmp_path / "basic.csv"
    prof.write_results(str(out))
    its = [float(r["iteration"]) for r in csv.DictReader(open(out))]
    assert its == [float(i) for i in range(41, 51)]


def test_handlers_profiler(sleepy, tmp_path):
    ds = sleepy(6, sleep_s=0.02)
    eng, calls = engine_with_handlers()
    clock = fetch_clock(eng)
    prof = HandlersTimeProfiler()
    prof.attach(eng)
    eng.run(DataLoader(ds, batch_size=None), max_epochs=1)
    res = prof.get_results()
    by_name = {(r[0], r[1]): r for r in res}
    it = by_name[("engine_with_handlers.<locals>.log_iter", "ITERATION_COMPLETED")]
    assert it[2] != "not triggered"
    assert res[-3][0] == "Total" and res[-2][0] == "Processing" and res[-1][0] == "Dataflow"
    assert_fetch_time(res[-1][2] * 1e9, ds, clock)
    text = prof.print_results(res)
    assert "Dataflow took total" in text
    out = tmp_path / "handlers.csv"
    prof.write_results(str(out))
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 6
    assert "engine_with_handlers.<locals>.log_iter (ITERATION_COMPLETED)" in rows[0]
    # handlers restored after the run
    assert all(not hasattr(h, "_profiler_original")
               for e in eng._event_handlers for (h, _, _) in eng._event_handlers[e])
    assert calls["it"] == 6


def ignite_prints(print_results, results, capsys):
    """What print_results prints (stdout), and what it returns."""
    capsys.readouterr()
    returned = print_results(copy.deepcopy(results))
    return capsys.readouterr().out, returned


def test_print_results_are_ignites_text(sleepy, capsys):
    """Both print_results write through the C layouts (sw_ignite_write_*), which the C
    engine's views use too: what they print is what Ignite's own print_results prints for the
    same results, character for character, on a real run and on cells Ignite writes in
    unusual ways (names wider than the headers, non-ASCII names padded by code points,
    "not triggered", values under 1e-4 in scientific form)."""
    from ignite.handlers.time_profilers import BasicTimeProfiler as IgniteBasic
    from ignite.handlers.time_profilers import HandlersTimeProfiler as IgniteHandlers

    ds = sleepy(4, sleep_s=0.001)
    eng, _ = engine_with_handlers()
    basic, handlers = BasicTimeProfiler(), HandlersTimeProfiler()
    basic.attach(eng)
    handlers.attach(eng)
    eng.run(DataLoader(ds, batch_size=None), max_epochs=2)

    res = basic.get_results()
    ours, returned = ignite_prints(BasicTimeProfiler.print_results, res, capsys)
    theirs, theirs_returned = ignite_prints(IgniteBasic.print_results, res, capsys)
    assert ours == theirs and returned == theirs_returned
    assert "engine_with_handlers.<locals>.log_epoch" in ours and "Event handlers:" in ours

    rows = handlers.get_results()
    ours, _ = ignite_prints(HandlersTimeProfiler.print_results, rows, capsys)
    theirs, _ = ignite_prints(IgniteHandlers.print_results, rows, capsys)
    assert ours == theirs
    assert "Dataflow took total" in ours

    odd = [["\u03bb.h\u00e9ndler", "EPOCH_COMPLETED", 0.00001, (0.00001, 0), (0.00002, 1),
            0.00002, "None"],
           ["a.much_longer_handler_name_than_the_header", "ITERATION_COMPLETED",
            "not triggered", ("None", "None"), ("None", "None"), "None", "None"],
           ["Total", "", 12.5, "", "", "", ""],
           ["Processing", "None", 1.25, (0.1, 3), (0.5, 0), 0.25, 0.12346],
           ["Dataflow", "None", "not triggered", ("None", "None"), ("None", "None"), "None",
            "None"]]
    ours, _ = ignite_prints(HandlersTimeProfiler.print_results, odd, capsys)
    theirs, _ = ignite_prints(IgniteHandlers.print_results, odd, capsys)
    assert ours == theirs
    assert "1e-05/0" in ours and "\u03bb.h\u00e9ndler  " in ours
    # rows that are not Ignite's are refused, naming what is wrong
    with pytest.raises(ValueError, match="Total, Processing and Dataflow"):
        HandlersTimeProfiler.print_results(odd[:2])
    with pytest.raises(TypeError, match="9-tuple"):
        stepwatch._stepwatch.ignite_handlers_text([("a",)] * 3)


def stepwatch_handlers(eng):
    return [h for e in eng._event_handlers for (h, _, _) in eng._event_handlers[e]
            if "stepwatch" in repr(h)]


@pytest.mark.parametrize("make", [BasicTimeProfiler, HandlersTimeProfiler])
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failed_run_reraises_and_leaves_nothing_open(make, error):
    fail_at = {"it": 3}

    def step(engine, batch):
        if engine.state.iteration == fail_at["it"]:
            raise error("boom")

    eng = Engine(step)
    ran = []
    eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: ran.append(e.state.iteration))
    prof = make()
    prof.attach(eng)
    with pytest.raises(error, match="boom"):  # as Ignite does without the profiler
        eng.run([torch.zeros(2)] * 5, max_epochs=1)
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["processing"]["count"] == 2 and rows["step"]["count"] == 3
    assert stepwatch_handlers(eng) == [prof._as_first_started]
    assert Events.EXCEPTION_RAISED not in eng._event_handlers  # the next failure raises too
    assert eng._fire_event.__func__ is Engine._fire_event  # Ignite's own again
    if make is HandlersTimeProfiler:
        assert all(not hasattr(h, "_profiler_original")
                   for e in eng._event_handlers for (h, _, _) in eng._event_handlers[e])
    misuse = prof.profiler.snapshot().info()["misuse"]
    assert sum(misuse.values()) == 0, misuse
    # a second run is profiled once, and anew (as Ignite's profilers reset at STARTED)
    fail_at["it"] = None
    eng.state.max_epochs = None  # Ignite's way to run again from the start
    eng.run([torch.zeros(2)] * 5, max_epochs=1)
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["processing"]["count"] == 5 and len(ran) == 2 + 5
    misuse = prof.profiler.snapshot().info()["misuse"]
    assert sum(misuse.values()) == 0, misuse


def test_a_users_exception_handler_keeps_its_say():
    def step(engine, batch):
        raise ValueError("handled")

    eng = Engine(step)
    seen = []
    eng.add_event_handler(Events.EXCEPTION_RAISED, lambda e, exc: seen.append(str(exc)))
    prof = BasicTimeProfiler()
    prof.attach(eng)
    eng.run([1, 2], max_epochs=1)  # the user's handler swallows it, as without the profiler
    assert seen == ["handled"]
    assert stepwatch_handlers(eng) == [prof._as_first_started]
    assert len(eng._event_handlers[Events.EXCEPTION_RAISED]) == 1


def test_attach_rejects_non_engines():
    with pytest.raises(TypeError):
        BasicTimeProfiler().attach(object())
    with pytest.raises(TypeError):
        HandlersTimeProfiler().attach(object())


def test_marks_reject_bad_arguments():
    p = stepwatch.Profiler()
    data, work = p.action("data"), p.action("processing")
    Marks = stepwatch._stepwatch.Marks
    with pytest.raises(TypeError, match="Marks: data must be"):
        Marks(p, "data", work)
    with pytest.raises(TypeError, match="Marks: work must be"):
        Marks(p, data, stepwatch.Profiler().action("processing"))
    with pytest.raises(ValueError, match="max_rows"):
        Marks(p, data, work, (), 0)
    with pytest.raises(TypeError, match="at most 4"):
        Marks(p, data, work, (data,) * 5)
    m = Marks(p, data, work, (p.action("callback:x"),), 3)
    with pytest.raises(IndexError, match="slot 1 out of range"):
        m.slot_begin(1)
    # an engine whose state cannot be read: zeros, never an exception
    m.fetch_begin()
    m.fetch_end(object())
    m.iteration_end(object())
    assert m.rows()[0][:2] == (0, 0) and len(m) == 1
    p.close()
    m.fetch_begin()
    m.fetch_end(object())  # a closed profiler: no-ops
    assert len(m) == 1


def test_timer_attach_like_ignite():
    eng = Engine(lambda e, b: None)
    t = Timer(average=True)
    t.attach(eng, start=Events.EPOCH_STARTED, resume=Events.ITERATION_STARTED,
             pause=Events.ITERATION_COMPLETED, step=Events.ITERATION_COMPLETED)
    eng.run([1, 2, 3, 4], max_epochs=1)
    assert t.step_count == 4 and t.value() >= 0.0
    assert isinstance(t, stepwatch.Timer)


@pytest.mark.parametrize("make", [BasicTimeProfiler, HandlersTimeProfiler])
def test_each_run_is_profiled_anew(make, sleepy):
    """An evaluator run every epoch: each run's results are that run's, as Ignite's."""
    evaluator = Engine(lambda e, b: None)
    clock = fetch_clock(evaluator)
    prof = make()
    prof.attach(evaluator)
    for n in (3, 5):
        ds = sleepy(n, sleep_s=0.03)
        clock["total_ns"] = 0
        evaluator.run(DataLoader(ds, batch_size=None), max_epochs=1)
        rows = {r["action"]: r for r in prof.records("all")}
        assert rows["processing"]["count"] == n and rows["data"]["count"] == n
        assert_fetch_time(rows["data"]["total_ns"], ds, clock)
        res = prof.get_results()
        if make is BasicTimeProfiler:
            assert_fetch_time(res["dataflow_stats"]["total"] * 1e9, ds, clock)
        else:
            assert_fetch_time(res[-1][2] * 1e9, ds, clock)


def test_basic_get_batch_and_dataflow_indices_follow_ignite():
    """Ignite stores dataflow and GET_BATCH_* times at state.iteration - 1 before the
    iteration counter advances: batch k (1-based) at k - 2, the first at the last index."""
    slow_fetch = {3}   # the batch whose GET_BATCH_STARTED handler is slowest
    eng = Engine(lambda e, b: None)

    @eng.on(Events.GET_BATCH_STARTED)
    def before_fetch(e):
        time.sleep(0.02 if e.state.iteration + 1 in slow_fetch else 0.001)

    @eng.on(Events.ITERATION_COMPLETED)
    def after_iteration(e):
        time.sleep(0.02 if e.state.iteration == 4 else 0.001)

    prof = BasicTimeProfiler()
    prof.attach(eng)
    eng.run([torch.zeros(1)] * 6, max_epochs=1)
    hs = prof.get_results()["event_handlers_stats"]
    assert hs["GET_BATCH_STARTED"]["max/index"][1] == 3 - 2
    assert hs["ITERATION_COMPLETED"]["max/index"][1] == 4 - 1


def test_timer_is_ignites_timer():
    eng = Engine(lambda e, b: time.sleep(0.002))
    t = Timer(average=False)
    t.attach(eng, start=Events.STARTED, pause=Events.COMPLETED)
    prof = HandlersTimeProfiler()
    prof.attach(eng)
    eng.run([1, 2, 3], max_epochs=1)
    assert not t.running and t.total == pytest.approx(t.value()) and t.total >= 0.006
    assert isinstance(t.step_count, float)
    t.resume()
    assert t.running
    names = {r[0] for r in prof.get_results()}
    assert not any("Timer" in n for n in names), names  # Timer's own methods are no rows


def fire_trace(make, caplog):
    """What every handler of a busy engine sees, and Ignite's per-event debug log, with
    make() attached (None: Ignite alone). Returns (trace, debug messages, the _fire_event
    types seen during the run)."""
    trace, seen_fire = [], set()
    eng = Engine(lambda e, b: trace.append(("process", e.state.epoch, e.state.iteration, b)))
    eng.register_events("custom")

    def note(*what):
        trace.append((*what, eng.last_event_name, eng.state.epoch, eng.state.iteration))

    @eng.on(Events.EPOCH_STARTED)
    def add_late(e):
        if e.state.epoch == 1:  # appended to the list being fired: runs in this firing
            e.add_event_handler(Events.EPOCH_STARTED, late)

    def late(e):
        note("late")
        e.remove_event_handler(late, Events.EPOCH_STARTED)  # a new list; this firing goes on

    def no_engine():  # Ignite calls it without the engine
        note("no_engine")

    def with_args(e, a, b, key=None):
        note("with_args", e is eng, a, b, key)
        seen_fire.add(type(e._fire_event).__name__)

    def on_custom(e, x):
        note("custom", x)

    def on_terminate(e, iter_counter=None):  # Ignite passes iter_counter as a kwarg
        note("terminate_epoch", iter_counter)

    eng.add_event_handler(Events.GET_BATCH_COMPLETED, no_engine)
    eng.add_event_handler(Events.ITERATION_COMPLETED, with_args, 1, 2, key="k")
    eng.add_event_handler(Events.ITERATION_STARTED(every=2), lambda e: note("every2"))
    eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: e.fire_event("custom"))
    eng.add_event_handler("custom", on_custom, "x")
    eng.add_event_handler(Events.TERMINATE_SINGLE_EPOCH, on_terminate)

    @eng.on(Events.ITERATION_COMPLETED)
    def stop_epoch(e):
        if e.state.epoch == 2 and e.state.iteration == 5:
            e.terminate_epoch()

    if make is not None:
        make().attach(eng)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="ignite.engine.engine.Engine"):
        eng.run([10, 20, 30], max_epochs=3)
    log = [r.getMessage() for r in caplog.records if "Firing handlers" in r.getMessage()]
    return trace, log, seen_fire


def test_a_profiled_engine_fires_its_events_as_ignite(caplog):
    """The profilers fire the engine's events themselves during a run (FireEvent): every
    handler sees what it sees under Ignite alone, in the same order, and Ignite's debug log
    says the same."""
    trace, log, seen = fire_trace(None, caplog)
    assert seen == {"method"}
    assert ("late", Events.EPOCH_STARTED, 1, 0) in trace
    assert ("terminate_epoch", 2, Events.TERMINATE_SINGLE_EPOCH, 2, 5) in trace  # 2nd of epoch 2
    assert log and log[0] == "0 | 0, Firing handlers for event Events.STARTED"
    for make in (BasicTimeProfiler, HandlersTimeProfiler):
        trace_p, log_p, seen_p = fire_trace(make, caplog)
        assert seen_p == {"FireEvent"}
        assert trace_p == trace
        assert log_p == log


class EngineWithItsOwnFireEvent(Engine):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fired = []

    def _fire_event(self, event_name, *event_args, **event_kwargs):
        self.fired.append(event_name)
        super()._fire_event(event_name, *event_args, **event_kwargs)


@pytest.mark.parametrize("make", [BasicTimeProfiler, HandlersTimeProfiler])
@pytest.mark.parametrize("own", ["subclass", "instance"])
def test_an_engine_with_its_own_fire_event_keeps_it(make, own, sleepy):
    """An engine that fires its events itself (a subclass, or a _fire_event set on the
    instance) keeps doing so; the marks are then handlers, with the same results."""
    ds = sleepy(4, sleep_s=0.02)
    if own == "subclass":
        eng = EngineWithItsOwnFireEvent(lambda e, b: time.sleep(0.002))
    else:
        eng = Engine(lambda e, b: time.sleep(0.002))
        eng.fired = []
        ignites = eng._fire_event

        def fire(event_name, *args, **kwargs):
            eng.fired.append(event_name)
            ignites(event_name, *args, **kwargs)
        eng._fire_event = fire
    theirs = eng._fire_event
    clock = fetch_clock(eng)
    used = []
    eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: used.append(e._fire_event))
    prof = make()
    prof.attach(eng)
    eng.run(DataLoader(ds, batch_size=None), max_epochs=1)
    assert eng.fired.count(Events.ITERATION_COMPLETED) == 4
    assert used == [theirs] * 4 and eng._fire_event == theirs
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["processing"]["count"] == 4 and rows["step"]["count"] == 4
    assert_fetch_time(rows["data"]["total_ns"], ds, clock)
    res = prof.get_results()  # the user's handler is timed as with FireEvent
    if make is BasicTimeProfiler:
        assert res["event_handlers_stats"]["ITERATION_COMPLETED"]["total"] > 0
    else:
        assert [r["count"] for a, r in rows.items()
                if a.endswith("(ITERATION_COMPLETED)")] == [4], rows
    assert stepwatch_handlers(eng) == [prof._as_first_started]


def test_the_installed_ignites_fire_event_is_the_one_copied_in_c():
    """FireEvent copies Ignite 0.5.3-0.5.5's Engine._fire_event: the installed Ignite's is
    known by its fingerprint, so a plain engine is fired by FireEvent."""
    assert stepwatch.ignite._fire_event_fingerprint(Engine._fire_event) in \
        stepwatch.ignite._COPIED_FIRE_EVENTS, ignite.__version__
    assert stepwatch.ignite._fires_events_as_ignite(Engine(lambda e, b: None))


@pytest.mark.parametrize("make", [BasicTimeProfiler, HandlersTimeProfiler])
def test_an_ignite_whose_fire_event_differs_is_timed_through_handlers(make, sleepy, monkeypatch):
    """When Ignite's own Engine._fire_event is not the one FireEvent copies (a later Ignite's;
    here the installed one with a change, set on the real Engine class), the profilers leave
    it firing the events, say so in one warning, and make their marks as handlers: the same
    figures."""
    ignites = Engine._fire_event

    def _fire_event(self, event_name, *event_args, **event_kwargs):
        self.fired.append(event_name)  # the change: a count of the events fired
        ignites(self, event_name, *event_args, **event_kwargs)

    monkeypatch.setattr(Engine, "_fire_event", _fire_event)
    monkeypatch.setattr(stepwatch.ignite, "_fire_event_warned", False)
    ds = sleepy(4, sleep_s=0.02)
    eng = Engine(lambda e, b: time.sleep(0.002))
    eng.fired = []
    clock = fetch_clock(eng)
    during = []
    eng.add_event_handler(Events.ITERATION_COMPLETED, lambda e: during.append(
        (e._fire_event.__func__, stepwatch_handlers(e))))
    prof = make()
    prof.attach(eng)
    with pytest.warns(RuntimeWarning, match="not the one stepwatch copies") as caught:
        eng.run(DataLoader(ds, batch_size=None), max_epochs=1)
    assert sum("stepwatch copies" in str(w.message) for w in caught) == 1
    assert eng.fired.count(Events.ITERATION_COMPLETED) == 4  # the changed one fired them all
    # no FireEvent: the engine's own fired every iteration, and the marks were handlers
    assert [fire for fire, _ in during] == [_fire_event] * 4
    assert all(any("Marks" in repr(h) for h in handlers) for _, handlers in during)
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["processing"]["count"] == 4 and rows["step"]["count"] == 4
    assert_fetch_time(rows["data"]["total_ns"], ds, clock)
    res = prof.get_results()
    if make is BasicTimeProfiler:
        assert res["dataflow_stats"]["total"] == pytest.approx(rows["data"]["total_ns"] / 1e9)
    else:
        assert res[-1][0] == "Dataflow" and res[-1][2] == pytest.approx(
            rows["data"]["total_ns"] / 1e9, abs=1e-5)
    # once a process: a second run warns no more
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eng.run(DataLoader(ds, batch_size=None), max_epochs=1)
    assert eng.fired.count(Events.ITERATION_COMPLETED) == 8


@pytest.mark.parametrize("make", [BasicTimeProfiler, HandlersTimeProfiler])
def test_two_profilers_on_one_engine(make, sleepy):
    """Two profilers on one engine: one fires the events, the other's marks are handlers;
    both see every iteration."""
    ds = sleepy(4, sleep_s=0.02)
    eng, calls = engine_with_handlers()
    clock = fetch_clock(eng)
    first, second = make(), BasicTimeProfiler()
    first.attach(eng)
    second.attach(eng)
    eng.run(DataLoader(ds, batch_size=None), max_epochs=1)
    for prof in (first, second):
        rows = {r["action"]: r for r in prof.records("all")}
        assert rows["processing"]["count"] == 4 and rows["step"]["count"] == 4
        assert_fetch_time(rows["data"]["total_ns"], ds, clock)
    assert calls["it"] == 4 and eng._fire_event.__func__ is Engine._fire_event


def test_fire_event_rejects_bad_arguments():
    p = stepwatch.Profiler()
    data, work = p.action("data"), p.action("processing")
    FireEvent, Marks = stepwatch._stepwatch.FireEvent, stepwatch._stepwatch.Marks
    eng = Engine(lambda e, b: None)
    events = (Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED, Events.ITERATION_STARTED,
              Events.ITERATION_COMPLETED)
    with pytest.raises(TypeError, match="marks must be"):
        FireEvent(eng, data, events)
    with pytest.raises(TypeError, match="events must be"):
        FireEvent(eng, None, events[:3])
    with pytest.raises(ValueError, match=r"timed\[1\] needs a Marks with at least 2 slots"):
        FireEvent(eng, Marks(p, data, work, (p.action("callback:x"),)), events,
                  (True, True, False, False))
    fire = FireEvent(eng, None, events)
    with pytest.raises(TypeError, match="event_name"):
        fire()
    eng._event_handlers[Events.STARTED].append(("not", "an entry"))
    with pytest.raises(ValueError, match=r"must be \(func, args, kwargs\)"):
        fire(Events.STARTED)  # where Ignite's loop fails too (it cannot unpack it)


def test_an_engine_firing_through_fire_event_is_freed_without_the_collector():
    """FireEvent holds its engine weakly (as Ignite's handlers do): no reference cycle."""
    import gc
    import weakref
    eng = Engine(lambda e, b: None)
    eng._fire_event = stepwatch._stepwatch.FireEvent(eng, None, (
        Events.GET_BATCH_STARTED, Events.GET_BATCH_COMPLETED, Events.ITERATION_STARTED,
        Events.ITERATION_COMPLETED))
    eng.run([1, 2], max_epochs=1)
    gone = weakref.ref(eng)
    gc.disable()
    try:
        del eng
        assert gone() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("make", [BasicTimeProfiler, HandlersTimeProfiler])
def test_a_run_terminated_without_completed_ends_there(make):
    """terminate(skip_completed=True): no COMPLETED comes, so the run ends at TERMINATE, with
    the engine's own _fire_event back and the user's handlers unwrapped."""
    eng, calls = engine_with_handlers()

    @eng.on(Events.ITERATION_COMPLETED)
    def stop(e):
        if e.state.iteration == 3:
            e.terminate(skip_completed=True)

    prof = make()
    prof.attach(eng)
    eng.run([torch.zeros(2)] * 5, max_epochs=2)
    assert calls["it"] == 3
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["step"]["count"] == 3 and rows["processing"]["count"] == 3
    assert sum(prof.profiler.snapshot().info()["misuse"].values()) == 0
    assert eng._fire_event.__func__ is Engine._fire_event
    assert stepwatch_handlers(eng) == [prof._as_first_started]
    assert all(not hasattr(h, "_profiler_original")
               for e in eng._event_handlers for (h, _, _) in eng._event_handlers[e])


def test_an_engine_logger_without_is_enabled_for_still_gets_the_message():
    """Ignite calls engine.logger.debug(message) on every event; a logger object of the
    user's that has only debug() still gets each message under the profiler."""
    class DebugOnly:
        def __init__(self):
            self.messages = []

        def debug(self, msg):
            self.messages.append(msg)

        def info(self, msg):
            pass

        error = warning = info

    logs = []
    for make in (None, HandlersTimeProfiler):
        eng = Engine(lambda e, b: None)
        eng.logger = DebugOnly()
        if make is not None:
            make().attach(eng)
        eng.run([1, 2], max_epochs=1)
        logs.append(eng.logger.messages)
    assert logs[0] and logs[1] == logs[0]
