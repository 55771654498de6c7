"""The extension itself: Profiler, Action, phases, steps, reports, records, Timer, errors."""
import gc
import json
import os
import platform
import subprocess
import sys
import time

import pytest

import stepwatch
from stepwatch import Profiler


def rows_by(prof, phase="all"):
    return {r["action"]: r for r in prof.records(phase)}


def test_action_is_interned_and_reused():
    p = Profiler(name="t")
    a = p.action("forward")
    assert p.action("forward") is a
    assert a.name == "forward" and isinstance(a, stepwatch.Action)
    assert p.action("backward").id != a.id


def test_with_counts_and_nesting_self_time():
    p = Profiler()
    outer, inner = p.action("outer"), p.action("inner")
    for _ in range(3):
        with outer:
            with inner:
                time.sleep(0.002)
    r = rows_by(p)
    assert r["outer"]["count"] == 3 and r["inner"]["count"] == 3
    assert r["outer"]["total_ns"] >= r["inner"]["total_ns"] >= 3 * 2_000_000
    # outer's self time excludes the nested inner spans
    assert r["outer"]["self_ns"] < r["inner"]["total_ns"]
    assert r["outer"]["self_ns"] == pytest.approx(
        r["outer"]["total_ns"] - r["inner"]["total_ns"], abs=1)


def test_exit_does_not_swallow_exceptions():
    p = Profiler()
    a = p.action("x")
    with pytest.raises(KeyError):
        with a:
            raise KeyError("boom")
    assert rows_by(p)["x"]["count"] == 1


def test_with_methods_are_bound_once_and_collected():
    # `with` takes an Action's (and a Phase's) __enter__/__exit__ bound when it was made, so
    # no bound method is allocated per statement; they must still behave like methods.
    p = Profiler()
    a, ph = p.action("x"), p.phase("train")
    assert a.__enter__ is a.__enter__ and a.__exit__ is a.__exit__
    with ph as got_phase, a as got_action:
        pass
    assert got_phase is ph and got_action is a
    assert a.__exit__(None, None, None) is False  # no span open: counted, not raised
    assert rows_by(p, "train")["x"]["count"] == 1
    with pytest.raises(TypeError, match="needs a stepwatch.Action"):
        type(a).__dict__["__enter__"].__get__(ph)
    # A bound method may outlive its action and profiler: calling it is then a no-op.
    exit_ = p.action("late").__exit__
    p.close()
    del p, a, ph
    gc.collect()
    assert exit_(None, None, None) is False

    def live_actions():
        gc.collect()
        return sum(isinstance(o, stepwatch.Action) for o in gc.get_objects())

    # Each action and its bound methods form a cycle: the collector must free it.
    before = live_actions()
    for _ in range(20):
        q = Profiler()
        with q.action("y"):
            pass
        q.close()
    del q
    assert live_actions() == before


def test_decorator_functions_and_methods():
    p = Profiler()

    @p.action("work")
    def work(x, *, y=1):
        """doc"""
        return x + y

    class C:
        @p.action("method")
        def m(self, v):
            return (self, v)

    assert work(1, y=2) == 3
    assert work.__name__ == "work" and work.__doc__ == "doc" and work.__wrapped__ is not None
    c = C()
    assert c.m(5) == (c, 5)
    r = rows_by(p)
    assert r["work"]["count"] == 1 and r["method"]["count"] == 1
    with pytest.raises(TypeError):
        p.action("x")(42)


def test_phases_steps_batch_sizes_and_samples_per_second():
    p = Profiler()
    fwd = p.action("forward")
    with p.phase("train"):
        for _ in range(4):
            with p.step(32):
                with fwd:
                    time.sleep(0.001)
    r = {(x["action"], x["phase"]): x for x in p.records()}
    step = r[("step", "train")]
    assert step["count"] == 4 and step["samples"] == 128
    assert step["samples_per_s"] == pytest.approx(128 / (step["total_ns"] / 1e9), rel=1e-6)
    assert r[("forward", "train")]["count"] == 4
    assert r[("forward", "train")]["category"] == "forward"
    assert p.step_count == 4 and p.step_index == -1


def test_warmup_steps_are_kept_apart():
    p = Profiler(warmup_steps=2)
    a = p.action("forward")
    with p.phase("train"):
        for _ in range(5):
            p.step_begin(8)
            with a:
                pass
            p.step_end()
    r = {(x["action"], x["phase"]): x for x in p.records()}
    assert r[("forward", "train")]["count"] == 3
    assert r[("forward", "train")]["warmup_count"] == 2


def test_records_load_into_pandas():
    pd = pytest.importorskip("pandas")
    p = Profiler()
    with p.action("a"):
        pass
    df = pd.DataFrame(p.records())
    assert {"action", "phase", "count", "total_ns", "mean_ns", "std_ns", "p50_ns", "p99_ns",
            "min_step", "max_step", "self_ns", "percent"} <= set(df.columns)
    assert df.loc[df.action == "a", "count"].tolist() == [1, 1]  # phase row + roll-up
    assert set(p.records("all")[0]) == set(df.columns)


@pytest.mark.parametrize("fmt", stepwatch.FORMATS)
def test_every_report_format(fmt):
    p = Profiler(name="fmt-test")
    with p.phase("train"):
        with p.step(4):
            with p.action("forward"):
                pass
    text = p.report(fmt)
    assert "forward" in text
    if fmt == "json":
        doc = json.loads(text)
        assert isinstance(doc, dict)


def test_unknown_format_is_a_clear_error():
    p = Profiler()
    with pytest.raises(ValueError, match="unknown report format 'nope'"):
        p.report("nope")


def test_misuse_is_counted_never_raised():
    p = Profiler()
    a, b = p.action("a"), p.action("b")
    a.end()                       # end without begin
    p.end("never")                # by name, still no begin
    a.begin(); b.begin(); a.end()  # mismatched nesting
    p.step_end()                  # step end without a step
    m = p.snapshot().info()["misuse"]
    assert m["end_without_begin"] >= 2
    assert m["mismatched_end"] >= 1
    assert m["step_overlap"] >= 1


def test_enabled_switch():
    p = Profiler(enabled=False)
    a = p.action("a")
    with a:
        pass
    assert rows_by(p).get("a", {"count": 0})["count"] == 0
    p.enabled = True
    with a:
        pass
    assert rows_by(p)["a"]["count"] == 1


def test_closed_profiler_makes_actions_noops_and_reports_the_run_as_closed():
    p = Profiler()
    a = p.action("a")
    with a:
        pass
    p.close()
    p.close()  # idempotent
    with a:    # hot path: never raises, records nothing more
        pass
    a.begin(); a.end()
    assert p.closed
    assert rows_by(p)["a"]["count"] == 1  # the run as it stood at close
    assert "a" in p.report()
    with pytest.raises(stepwatch.Error) as info:
        p.action("b")  # nothing new can be recorded
    assert info.value.name == "STATE" and "closed" in str(info.value)
    del a, p
    gc.collect()


def test_a_with_block_closes_the_profiler_and_its_report_stays():
    """`with Profiler() as prof:` then `prof.report()`, as cProfile and torch.profiler allow."""
    with Profiler() as prof:
        with prof.phase("train"):
            for _ in range(3):
                with prof.step(2):
                    pass
    assert prof.closed
    assert prof.snapshot().info()["steps"] == 3
    assert "train" in prof.report()


def test_bad_arguments_raise_clearly():
    p = Profiler()
    with pytest.raises(TypeError):
        p.action(3)
    with pytest.raises(ValueError):
        p.step(-1)
    with pytest.raises(ValueError):
        p.set_batch_size(2**40)
    with pytest.raises(TypeError):
        Profiler(warmup_steps="x")


def test_counters():
    p = Profiler()
    for v in (1.0, 3.0, 2.0):
        p.counter("gpu_mem", v)
    (c,) = p.snapshot().info()["counters"]
    assert c["name"] == "gpu_mem" and c["count"] == 3
    assert (c["min"], c["max"], c["last"]) == (1.0, 3.0, 2.0)
    assert c["mean"] == pytest.approx(2.0)


def test_record_span_measured_elsewhere():
    p = Profiler()
    t0 = stepwatch.now_ns()
    p.record("external", t0, t0 + 5_000_000)
    r = rows_by(p)["external"]
    assert r["count"] == 1 and r["total_ns"] == 5_000_000


def test_threads_record_into_one_profiler():
    import threading
    p = Profiler()
    a = p.action("work")

    def run():
        for _ in range(1000):
            with a:
                pass

    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert rows_by(p)["work"]["count"] == 4000


def test_timer_like_ignite():
    t = stepwatch.Timer()
    assert t.is_running()
    time.sleep(0.01)
    t.pause()
    v = t.value()
    assert v >= 0.01
    time.sleep(0.01)
    assert t.value() == v          # paused: no growth
    t.resume()
    time.sleep(0.005)
    assert t.value() > v
    assert t.reset() is t and t.value() < v

    avg = stepwatch.Timer(average=True)
    time.sleep(0.01)
    avg.pause()
    total = stepwatch.Timer.value(avg)
    avg.step()
    avg.step()
    assert avg.step_count == 2
    assert avg.value() == pytest.approx(total / 2)


def test_default_profiler_helpers():
    prof = Profiler(name="default")
    stepwatch.set_profiler(prof)
    try:
        with stepwatch.action("x"):
            pass
        assert stepwatch.profiler() is prof
        assert any(r["action"] == "x" for r in stepwatch.records())
        assert "x" in stepwatch.report()
    finally:
        stepwatch.set_profiler(None)
    with pytest.raises(TypeError):
        stepwatch.set_profiler(object())


def test_batch_size_reads_the_first_array_like():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    x = torch.zeros(5, 3)
    assert stepwatch.batch_size(x) == 5
    assert stepwatch.batch_size((x, torch.zeros(5))) == 5
    assert stepwatch.batch_size([{"image": np.zeros((7, 2)), "label": 1}]) == 7
    # unknown: 0, never an exception
    for unknown in (None, 3, "text", (), {}, [1, 2], torch.tensor(1.0), object()):
        assert stepwatch.batch_size(unknown) == 0, unknown


def _tsc_invariant():
    """What cpuid's invariant-TSC bit says, as Linux shows it (constant_tsc and nonstop_tsc)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "constant_tsc" in flags and "nonstop_tsc" in flags


def test_clock_tsc_on_request_from_the_option_and_the_environment():
    """Profiler(clock='tsc') and SW_CLOCK=tsc switch the process to the TSC where it is
    invariant, else keep CLOCK_MONOTONIC and say so; spans are timed on it either way. Each
    in a process of its own: the switch is for the rest of the process."""
    with pytest.raises(ValueError, match="clock must be"):
        stepwatch.Profiler(clock="sundial")
    code = ("import stepwatch, time\n"
            "p = stepwatch.Profiler(clock={clock!r})\n"
            "t0, m0 = stepwatch.now_ns(), time.monotonic_ns()\n"
            "with p.action('nap'):\n"
            "    time.sleep(0.02)\n"
            "t1, m1 = stepwatch.now_ns(), time.monotonic_ns()\n"
            "total = {{r['action']: r['total_ns'] for r in p.records('all')}}['nap']\n"
            "print(stepwatch.clock_in_use(), total, t1 - t0, m1 - m0, abs(t1 - m1))\n")
    expected = "tsc" if _tsc_invariant() and platform.machine() == "x86_64" else "monotonic"
    for clock, env in (("tsc", {}), (None, {"SW_CLOCK": "tsc"})):
        run = subprocess.run([sys.executable, "-c", code.format(clock=clock)],
                             env={**os.environ, **env}, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        used, total, span, mono_span, apart = run.stdout.split()
        assert used == expected, (clock, env, run.stdout, run.stderr)
        assert ("no invariant time-stamp counter" in run.stderr) == (expected == "monotonic")
        assert int(total) >= 20_000_000  # the 20 ms nap, on whichever clock
        # the two clocks run at one rate and stay together (on a loaded machine a preemption
        # between the reads may add a few ms)
        assert abs(int(span) - int(mono_span)) < 5_000_000 and int(apart) < 5_000_000
