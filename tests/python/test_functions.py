"""The function profiler (Profiler(functions=[...]), prof.functions(name)) against cProfile's own
numbers on the same code: counts exact (primitive calls too), times within noise, known sleeps,
caller -> callee edges; pstats reads every dump; collapsed stacks sum to the action's time.

Both hooks are checked: builtins=True (the profile function: Python functions and C builtins,
as cProfile) and builtins=False (the frame evaluation hook: Python functions only).
"""
import asyncio
import contextlib
import cProfile
import math
import os
import pstats
import sys
import threading
import time

import pytest

import stepwatch
from stepwatch import Profiler
from stepwatch._stepwatch import _function_hook_state as hook_state

HERE = os.path.basename(__file__)
BOTH = pytest.mark.parametrize("builtins", [True, False], ids=["builtins", "python"])
# The hook each detail switches on (docs/functions.md): from 3.12 on, builtins through
# sys.monitoring; on 3.12 Python functions too (the frame hook misses some resumes there)
BUILTINS_HOOK = "monitoring" if sys.version_info >= (3, 12) else "profile"
PYTHON_HOOK = "monitoring" if sys.version_info[:2] == (3, 12) else "eval"


# ---- code with known calls ----------------------------------------------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def ping(n):
    return pong(n - 1) if n > 0 else 0


def pong(n):
    return ping(n - 1) + 1 if n > 0 else 0


def squares(n):
    for i in range(n):
        yield i * i


def take_three():
    g = squares(10)
    got = [next(g), next(g), next(g)]
    g.close()
    return got


def fails(depth):
    if depth == 0:
        raise KeyError("deep")
    return fails(depth - 1)


def catches():
    for _ in range(4):
        try:
            fails(3)
        except KeyError:
            pass


def builtins_work():
    data = [str(i) for i in range(50)]
    return sorted(data), len(data), max(len(s) for s in data)


def builtin_kinds():
    """Every way code calls a C function: method descriptors, bound and unbound, module
    functions, builtins raising (C_RAISE), and C calling C (not seen by either profiler)."""
    xs = []
    for i in range(20):
        xs.append(i)
    append = xs.append
    append(99)
    list.append(xs, 100)
    d = dict.fromkeys("abc", 0)
    d.get("a")
    d.get("z", 1)
    ",".join([str(x) for x in xs[:5]])
    math.sqrt(2.0)
    time.perf_counter()
    isinstance(xs, list)
    sorted(xs, key=abs)
    for bad in ("1", "x"):
        try:
            int(bad)
        except ValueError:
            pass
    try:
        math.sqrt(-1.0)
    except ValueError:
        pass
    it = iter([1])
    next(it)
    next(it, None)
    return len(xs)


async def tick(n):
    await asyncio.sleep(0)
    return n


async def gather_ticks():
    return sum([await tick(i) for i in range(5)])


def coroutine_work():
    c = gather_ticks()
    try:
        while True:
            c.send(None)
    except StopIteration as stop:
        return stop.value


def nap(seconds):
    time.sleep(seconds)


def workload():
    fib(12)
    ping(9)
    take_three()
    catches()
    builtins_work()
    coroutine_work()


# ---- helpers --------------------------------------------------------------------------------

def ours(label):
    """This file's functions and the builtins they call (not the profilers' own calls)."""
    file, _, name = label
    if file == "~":
        return "_lsprof" not in name and "stepwatch" not in name
    return os.path.basename(file) == HERE and name not in ("run_in", "run_cprofile")


def cprofile_stats(fn, builtins):
    prof = cProfile.Profile(builtins=builtins)
    prof.enable()
    fn()
    prof.disable()
    prof.create_stats()
    return {k: v for k, v in prof.stats.items() if ours(k)}


def stepwatch_stats(fn, builtins, action="work"):
    prof = Profiler(functions=[action], builtins=builtins)
    with prof.action(action):
        fn()
    fs = prof.function_stats(action)
    prof.close()
    return {k: v for k, v in fs.stats.items() if ours(k)}, fs


def counts(stats):
    """{label: (primitive calls, calls)} and the callers' counts."""
    return ({k: v[:2] for k, v in stats.items()},
            {k: {c: cv[:2] for c, cv in v[4].items() if ours(c)} for k, v in stats.items()})


# ---- the numbers match cProfile's ------------------------------------------------------------

@BOTH
def test_counts_match_cprofile(builtins):
    want = cprofile_stats(workload, builtins)
    got, fs = stepwatch_stats(workload, builtins)
    assert counts(got) == counts(want)
    names = {k[2] for k in got}
    assert {"fib", "ping", "pong", "squares", "fails", "tick", "gather_ticks"} <= names
    # the recursive function: 465 calls, one of them primitive ("465/1" in the table)
    assert got[(__file__, fib.__code__.co_firstlineno, "fib")][:2] == (1, 465)
    # a generator resumed three times, then closed (GeneratorExit thrown in: a fourth call
    # on 3.11; 3.13 closes it without resuming it, for cProfile too)
    assert got[(__file__, squares.__code__.co_firstlineno, "squares")][:2] in ((4, 4), (3, 3))
    assert ("~", 0, "<built-in function sorted>") not in got  # pstats' '{built-in ...}'
    if builtins:
        assert got[("~", 0, "<built-in method builtins.sorted>")][:2] == (1, 1)
        assert got[("~", 0, "<built-in method builtins.len>")][1] == 51
    else:
        assert not any(k[0] == "~" for k in got)


def test_builtins_named_and_counted_as_cprofile():
    want = cprofile_stats(builtin_kinds, True)
    got, fs = stepwatch_stats(builtin_kinds, True)
    assert counts(got) == counts(want)
    assert hook_state()["depth"] == 0
    c = {k[2]: v[1] for k, v in got.items() if k[0] == "~"}
    assert {k[2] for k in got if k[0] == "~"} == {k[2] for k in want if k[0] == "~"}
    # the same C function however it was reached: 20 in the loop, bound, unbound
    assert c["<method 'append' of 'list' objects>"] == 22
    assert c["<method 'get' of 'dict' objects>"] == 2
    assert c["<built-in method math.sqrt>"] == 2  # one of them raised
    assert c["<built-in method time.perf_counter>"] == 1
    assert c["<built-in method builtins.next>"] == 2
    assert c["<built-in method builtins.sorted>"] == 1
    assert "<built-in method builtins.abs>" not in c  # called by sorted, from C


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_cprofile_started_inside_an_action_records_beside_it():
    prof = Profiler(functions=["work"], builtins=True)
    theirs = cProfile.Profile()
    with prof.action("work"):
        fib(4)
        theirs.enable()  # PROFILER_ID is left to cProfile: no "another tool is active"
        fib(5)
        theirs.disable()
    theirs.create_stats()
    key = (__file__, fib.__code__.co_firstlineno, "fib")
    assert theirs.stats[key][:2] == (1, 15)
    assert prof.function_stats("work").stats[key][:2] == (2, 24)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_no_free_monitoring_tool_takes_the_profile_function():
    taken = [i for i in (3, 4) if sys.monitoring.get_tool(i) is None]
    for i in taken:
        sys.monitoring.use_tool_id(i, "someone else")
    try:
        prof = Profiler(functions=["work"], builtins=True)
        with prof.action("work"):
            assert hook_state()["hook"] == "profile"
            builtin_kinds()
        got = {k: v for k, v in prof.function_stats("work").stats.items() if ours(k)}
        assert counts(got) == counts(cprofile_stats(builtin_kinds, True))
    finally:
        for i in taken:
            sys.monitoring.free_tool_id(i)


@BOTH
def test_known_sleeps_and_times_match_cprofile(builtins):
    def slept():
        t0 = time.perf_counter()
        for s in (0.02, 0.01, 0.03):
            nap(s)
        return time.perf_counter() - t0

    measured = []
    got, fs = stepwatch_stats(lambda: measured.append(slept()), builtins)
    key = (__file__, nap.__code__.co_firstlineno, "nap")
    cc, nc, tt, ct, callers = got[key]
    assert (cc, nc) == (3, 3)
    assert ct == pytest.approx(measured[0], rel=0.05)
    # cProfile on a run of its own: each profiler is held to its own run's clock (two runs
    # on a loaded machine oversleep differently)
    measured_by_cprofile_run = []
    want = cprofile_stats(lambda: measured_by_cprofile_run.append(slept()), builtins)
    assert want[key][:2] == (3, 3)
    assert ct / measured[0] == pytest.approx(want[key][3] / measured_by_cprofile_run[0],
                                             rel=0.05)
    if builtins:  # the sleep is its own function; nap itself does almost nothing
        sleep = got[("~", 0, "<built-in method time.sleep>")]
        assert sleep[:2] == (3, 3) and sleep[2] == pytest.approx(measured[0], rel=0.05)
        assert tt < 0.01 * ct
        assert key in sleep[4]  # called by nap
    else:  # the sleep's time stays in its Python caller
        assert tt == pytest.approx(ct, rel=0.01)
    assert fs.total_ns / 1e9 >= measured[0]


def test_edges_match_cprofile_for_mutual_recursion():
    want = cprofile_stats(lambda: ping(12), True)
    got, _ = stepwatch_stats(lambda: ping(12), True)
    ping_key = (__file__, ping.__code__.co_firstlineno, "ping")
    pong_key = (__file__, pong.__code__.co_firstlineno, "pong")
    assert got[ping_key][:2] == want[ping_key][:2] == (1, 7)
    assert got[pong_key][:2] == want[pong_key][:2] == (1, 6)
    # pstats' callers: {caller: (calls, primitive calls, tottime, cumtime)}
    assert got[pong_key][4][ping_key][:2] == want[pong_key][4][ping_key][:2]
    assert got[ping_key][4][pong_key][:2] == want[ping_key][4][pong_key][:2]
    # cumtime counts the outermost call only: never more than the action's own time
    assert got[ping_key][3] <= got[ping_key][3] + got[pong_key][2]


def test_getstats_entries_like_cprofile():
    got, fs = stepwatch_stats(lambda: fib(8), True)
    entries = {e.code: e for e in fs.getstats() if not isinstance(e.code, str)}
    e = entries[fib.__code__]
    assert (e.callcount, e.reccallcount) == (67, 66)
    assert e.totaltime >= e.inlinetime > 0
    assert {sub.code for sub in e.calls} == {fib.__code__}
    # Lightning's durations check: the inline times add up to the action's recorded calls
    assert sum(x.inlinetime for x in fs.getstats()) <= fs.total_ns / 1e9


# ---- what users read: the table, pstats files, collapsed stacks ------------------------------

def test_report_reads_like_pstats():
    prof = Profiler(functions=["work"])
    with prof.functions("work"):
        workload()
    text = prof.function_report("work", restriction=3)
    lines = text.splitlines()
    assert lines[0] == "Profile stats for: work"
    assert "function calls (" in lines[1] and "primitive calls) in " in lines[1]
    assert "   Ordered by: cumulative time" in lines
    assert any(l.startswith("   List reduced from ") and l.endswith(" to 3 due to restriction <3>")
               for l in lines)
    header = lines.index("   ncalls  tottime  percall  cumtime  percall filename:lineno(function)")
    rows = [l for l in lines[header + 1:] if l.strip()]
    assert len(rows) == 3
    # cumulative order: the outermost call first
    assert rows[0].split()[-1] == f"{HERE}:{workload.__code__.co_firstlineno}(workload)"
    assert "465/1" in prof.function_report("work")
    # the same text pstats prints for the same numbers
    fs = prof.function_stats("work")
    import io
    out = io.StringIO()
    pstats.Stats(fs, stream=out).strip_dirs().sort_stats("cumulative").print_stats()
    ours_rows = [l.split() for l in prof.function_report("work").splitlines()
                 if l[:9].strip().replace("/", "").isdigit()]
    theirs = [l.split() for l in out.getvalue().splitlines()
              if l[:9].strip().replace("/", "").isdigit()]
    assert sorted(r[0] + r[-1] for r in ours_rows) == sorted(r[0] + r[-1] for r in theirs)
    with pytest.raises(ValueError, match="sort"):
        prof.function_report(sort="bogus")
    with pytest.raises(KeyError):
        prof.function_report("never")


def test_dumps_load_in_pstats(tmp_path):
    prof = Profiler(functions=["a", "b"])
    with prof.action("a"):
        fib(10)
    with prof.action("b"):
        builtins_work()
    for action in prof.function_actions():
        path = tmp_path / f"{action}.prof"
        prof.function_stats(action).dump_stats(path)
        loaded = pstats.Stats(str(path))
        assert loaded.stats == prof.function_stats(action).stats
        assert loaded.total_calls > 0
    assert sorted(os.listdir(tmp_path)) == ["a.prof", "b.prof"]  # no temporary left


def test_dump_into_a_missing_folder_fails_cleanly(tmp_path):
    prof = Profiler(functions=["a"])
    with prof.action("a"):
        fib(5)
    with pytest.raises(FileNotFoundError):
        prof.function_stats("a").dump_stats(tmp_path / "nope" / "a.prof")


def collapsed_lines(text):
    return [(line.rsplit(" ", 1)[0], int(line.rsplit(" ", 1)[1])) for line in text.splitlines()]


@BOTH
def test_collapsed_stacks_sum_to_the_action_time(builtins):
    prof = Profiler(functions=["work"], builtins=builtins)
    for _ in range(3):
        with prof.action("work"):
            workload()
            nap(0.005)
    lines = collapsed_lines(prof.collapsed("work"))
    fs = prof.function_stats("work")
    assert fs.spans == 3
    total = sum(v for _, v in lines)
    assert abs(total - fs.total_ns) <= len(lines)  # rounding of ticks to ns, per line
    # every path starts at the action; fib's deepest path is 12 calls below it
    assert all(p.split(";")[0] == "work" for p, _ in lines)
    fib_label = f"{HERE}:{fib.__code__.co_firstlineno}(fib)"
    assert max(p.count(fib_label) for p, _ in lines) == 12
    # the action's own time is in the rows: within 10 % of what the core timed
    core = {r["action"]: r for r in prof.records()}["work"]["total_ns"]
    assert total == pytest.approx(core, rel=0.10)


# ---- actions, nesting, threads, fork --------------------------------------------------------

def test_nested_action_is_one_node_of_the_outer():
    prof = Profiler(functions=["outer", "inner"])
    with prof.action("outer"):
        fib(6)
        with prof.action("inner"):
            fib(8)
            nap(0.01)
    outer = prof.function_stats("outer").stats
    inner = prof.function_stats("inner").stats
    key = (__file__, fib.__code__.co_firstlineno, "fib")
    assert outer[key][:2] == (1, 25) and inner[key][:2] == (1, 67)
    nested = outer[("~", 0, "<stepwatch action inner>")]
    assert nested[:2] == (1, 1) and nested[3] >= 0.01
    lines = collapsed_lines(prof.collapsed("outer"))
    assert sum(v for _, v in lines) == pytest.approx(
        prof.function_stats("outer").total_ns, abs=len(lines))


def test_action_opened_inside_a_context_manager(builtins=True):
    # Lightning's profile(): the action begins in __enter__, which returns while it goes on
    prof = Profiler(functions=["outer", "step"])

    @contextlib.contextmanager
    def profile(name):
        prof.begin(name)
        try:
            yield
        finally:
            prof.end(name)

    def loop():
        for _ in range(3):
            with profile("step"):
                fib(5)
        return fib(7)

    with prof.action("outer"):
        loop()
    outer = prof.function_stats("outer").stats
    key = (__file__, fib.__code__.co_firstlineno, "fib")
    assert outer[key][:2] == (1, 41)  # fib(7) only; fib(5) ran in "step"
    assert prof.function_stats("step").stats[key][:2] == (3, 45)
    loop_key = (__file__, loop.__code__.co_firstlineno, "loop")
    assert outer[loop_key][:2] == (1, 1)
    assert outer[loop_key][3] == pytest.approx(prof.function_stats("outer").total_ns / 1e9,
                                               rel=0.2)
    assert hook_state()["hook"] == "off"


def test_only_the_thread_that_opened_the_action():
    prof = Profiler(functions=["work"], builtins=False)
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            ping(5)

    other = threading.Thread(target=busy)
    other.start()
    try:
        with prof.action("work"):
            for _ in range(20):
                fib(6)
                time.sleep(0.001)
    finally:
        stop.set()
        other.join()
    names = {k[2] for k in prof.function_stats("work").stats}
    assert "fib" in names and "ping" not in names and "pong" not in names


def test_threads_each_record_their_own_calls():
    prof = Profiler(functions=["work"], builtins=True)

    def job(n):
        with prof.action("work"):
            for _ in range(n):
                fib(5)
                time.sleep(0.0005)

    threads = [threading.Thread(target=job, args=(n,)) for n in (3, 5)]
    for t in threads:
        t.start()
    job(2)
    for t in threads:
        t.join()
    fs = prof.function_stats("work")
    assert fs.spans == 3
    assert fs.stats[(__file__, fib.__code__.co_firstlineno, "fib")][:2] == (10, 150)


def test_hooks_are_off_outside_the_actions():
    prof = Profiler(functions=["py"], builtins=False)
    prof_b = Profiler(functions=["all"], builtins=True)
    assert hook_state()["hook"] == "off"
    with prof.action("py"):
        state = hook_state()
        assert state["hook"] == PYTHON_HOOK and state["open"] == 1
        assert state["frame_hook_installed"] == (PYTHON_HOOK == "eval")
    state = hook_state()
    assert state == dict(state, hook="off", open=0, depth=0, frame_hook_installed=False)
    with prof_b.action("all"):
        assert hook_state()["hook"] == BUILTINS_HOOK
    assert hook_state()["hook"] == "off"
    if sys.version_info >= (3, 12):  # the tool id is given back: nothing left registered
        assert sys.monitoring.get_tool(4) is None and sys.monitoring.get_tool(3) is None
    # an action that is not a function action switches nothing on
    with prof.action("plain"):
        assert hook_state()["hook"] == "off"


def test_a_profiler_already_running_gets_its_hook_back():
    prof = Profiler(functions=["work"], builtins=True)
    theirs = cProfile.Profile()
    theirs.enable()
    try:
        with prof.action("work"):
            fib(4)
        fib(6)  # cProfile sees this again
    finally:
        theirs.disable()
    theirs.create_stats()
    key = (__file__, fib.__code__.co_firstlineno, "fib")
    # 3.11: one profile function per thread, so cProfile misses what ran inside ours; from
    # 3.12 on cProfile records through sys.monitoring, beside ours, and sees both
    assert theirs.stats[key][:2] == ((1, 25) if sys.version_info < (3, 12) else (2, 34))
    assert prof.function_stats("work").stats[key][:2] == (1, 9)


def test_fork_child_starts_clean():
    prof = Profiler(functions=["data"], builtins=True)
    with prof.action("data"):
        fib(5)
        pid = os.fork()
        if pid == 0:  # the child: hooks off, nothing recorded, and it can profile anew
            code = 0
            try:
                state = hook_state()
                fib(6)
                if state["open"] or prof.function_actions():
                    code = 2
                if sys.version_info >= (3, 12) and any(  # the inherited events went off
                        sys.monitoring.get_tool(i) for i in (3, 4)):
                    code = 5
                with prof.action("data"):
                    fib(3)
                got = prof.function_stats("data").stats
                if got[(__file__, fib.__code__.co_firstlineno, "fib")][:2] != (1, 5):
                    code = 3
            except BaseException:
                code = 4
            os._exit(code)
        fib(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert prof.function_stats("data").stats[
        (__file__, fib.__code__.co_firstlineno, "fib")][:2] == (2, 24)


class Squares:
    """A map-style dataset whose items call Python functions."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return fib(8) + i


def test_dataloader_workers_run_unprofiled():
    torch = pytest.importorskip("torch")
    prof = Profiler(functions=["data"], builtins=False)
    loader = torch.utils.data.DataLoader(Squares(), batch_size=2, num_workers=2)
    with prof.action("data"):
        batches = list(loader)
    assert len(batches) == 4
    stats = prof.function_stats("data").stats
    here = {k[2] for k in stats if k[0] == __file__}
    assert "__getitem__" not in here and "fib" not in here  # they ran in the workers
    assert "__next__" in {k[2] for k in stats}  # the parent's side of the loader
    # the same loader without workers: the items run here and are profiled
    with prof.action("data"):
        list(torch.utils.data.DataLoader(Squares(), batch_size=2, num_workers=0))
    assert prof.function_stats("data").stats[
        (__file__, fib.__code__.co_firstlineno, "fib")][1] == 8 * 67


def test_memory_grows_with_call_paths_not_calls():
    prof = Profiler(functions=["work"], builtins=False)
    with prof.action("work"):
        fib(10)
    lines = len(prof.collapsed().splitlines())
    with prof.action("work"):
        for _ in range(300):
            fib(10)
    assert len(prof.collapsed().splitlines()) == lines
    assert prof.function_stats("work").stats[
        (__file__, fib.__code__.co_firstlineno, "fib")][1] == 301 * 177


# ---- the API around it ------------------------------------------------------------------------

def test_functions_api_and_errors():
    prof = Profiler()
    a = prof.functions("data")
    assert a is prof.action("data")
    with a:
        fib(3)
    assert prof.function_actions() == ["data"]
    prof.clear_functions()
    assert prof.function_actions() == []
    with pytest.raises(TypeError):
        Profiler(functions="data")
    with pytest.raises(TypeError):
        Profiler(functions=[1])
    with pytest.raises(KeyError):
        prof.function_stats("data")
    assert Profiler().function_report() == ""
    assert Profiler().collapsed() == ""


def test_close_with_an_action_open_switches_the_hooks_off():
    prof = Profiler(functions=["work"], builtins=True)
    a = prof.action("work")
    a.__enter__()
    fib(3)
    assert hook_state()["hook"] == BUILTINS_HOOK
    prof.close()
    assert hook_state()["hook"] == "off"
    a.__exit__(None, None, None)
    fib(3)


def test_exceptions_leave_the_stack_balanced():
    prof = Profiler(functions=["work"], builtins=False)
    with pytest.raises(KeyError):
        with prof.action("work"):
            fails(5)
    assert hook_state()["depth"] == 0
    assert prof.function_stats("work").stats[
        (__file__, fails.__code__.co_firstlineno, "fails")][:2] == (1, 6)


# ---- stepwatch run --functions -----------------------------------------------------------------

TRAIN_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

def scale(x):
    return x * 2

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.lin(scale(x))

m = Net()
o = torch.optim.SGD(m.parameters(), 0.1)
for x, y in DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8):
    o.zero_grad()
    torch.nn.functional.mse_loss(m(x), y).backward()
    o.step()
"""


def check_function_report(report, builtins):
    tables = report.split("Profile stats for: ")
    forward = next(t for t in tables if t.startswith("forward\n"))
    # 4 steps: Net.forward and scale once each per step, inside "forward"
    rows = {l.split()[-1].split("(")[-1]: l.split()[0] for l in forward.splitlines()
            if l.strip().endswith(")")}
    assert rows["forward)"] == "4" and rows["scale)"] == "4", rows
    assert ("{built-in method" in forward) == builtins
    assert any(t.startswith("data\n") for t in tables)


def test_stepwatch_run_functions(tmp_path, build_dir):
    pytest.importorskip("torch")
    import subprocess
    import sys
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    out = subprocess.run([sys.executable, "-m", "stepwatch.autorun", "--functions",
                          "forward,data", str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    check_function_report(out.stderr, builtins=False)
    exe = os.path.join(build_dir or "", "stepwatch")
    if not build_dir or not os.access(exe, os.X_OK):
        pytest.skip(f"no C command at {exe} (SW_BUILD_DIR)")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    out = subprocess.run([exe, "run", "--run-file", str(tmp_path / "run.db"), "--functions",
                          "forward,data", "--builtins", "--", sys.executable, str(script)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    check_function_report(out.stderr, builtins=True)
    # the run file keeps the profiles: collapsed stacks, summing to the actions' times
    collapsed = tmp_path / "stacks.txt"
    out = subprocess.run([exe, "export", str(tmp_path / "run.db"), "--collapsed", str(collapsed)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = collapsed_lines(collapsed.read_text())
    forward = [(p, v) for p, v in lines if p.split(";")[0] == "forward"]
    assert any(p.endswith("train.py:13(forward);train.py:5(scale)") for p, _ in forward), forward
    spans = {r["action"]: r for r in stepwatch.load(str(tmp_path / "run.db")).records()}
    assert sum(v for _, v in forward) == pytest.approx(spans["forward"]["total_ns"], rel=0.1)
    out = subprocess.run([exe, "export", str(tmp_path / "run.db"), "--collapsed", "-"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout == collapsed.read_text()
    # the HTML report draws each profiled action as a flame graph (headless Chromium)
    check_flame_graphs(exe, tmp_path / "run.db", tmp_path / "report.html")
    plain = tmp_path / "plain.db"
    subprocess.run([exe, "run", "--run-file", str(plain), "--", sys.executable, str(script)],
                   capture_output=True, timeout=300, env=env)
    out = subprocess.run([exe, "export", str(plain), "--collapsed", "-"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "holds no function profiles" in out.stderr
    bad = subprocess.run([exe, "run", "--functions", "", "--", "true"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "--functions takes action names" in bad.stderr


def check_flame_graphs(exe, run_file, html):
    import json
    import shutil
    import subprocess
    out = subprocess.run([exe, "html", str(run_file), "-o", str(html)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = html.read_text()
    data = json.loads(text.split('<script type="application/json" id="sw-data">', 1)[1]
                      .split("</script>", 1)[0])
    flames = {f["action"]: f for f in data["flames"]}
    assert {"forward", "data"} <= set(flames)
    nodes = flames["forward"]["nodes"]
    assert nodes[0][0] == -1 and nodes[0][1] == "forward"
    # the boxes add up: every node's time is its self time plus its children's
    for i, (parent, name, calls, total, self_ns) in enumerate(nodes):
        children = sum(n[3] for n in nodes if n[0] == i)
        assert total == pytest.approx(self_ns + children, abs=len(nodes)), name
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--enable-logging=stderr", "--v=0", "--dump-dom", html.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    dom = proc.stdout
    assert 'data-rendered="1"' in dom and '<div id="sw-error"></div>' in dom
    assert 'data-chart="flame" data-flame="forward"' in dom
    assert 'data-chart="flame" data-flame="data"' in dom
    assert 'data-frame="train.py:5(scale)"' in dom
    assert "Function profiles" in dom


# The profile's clock waits out its calibration (20 ms from the clock's start) the first time
# its unit is read; meanwhile the program's other threads run (the GIL is off). In a fresh
# process (the calibration is once per process): a thread records the time every half ms, and
# the call that reads the unit right after the clock started is timed. With the GIL held
# through the wait, the thread records nothing from the call's start until the wait ends
# (clock start + 20 ms, at least t0 + wait): none after its first third. Without the GIL it records there
# unless the system holds it off the CPU all that time (a loaded machine): one run of five
# is enough to show it can.
GIL_SCRIPT = '''
import threading, time
import stepwatch
ticks, stop = [], threading.Event()
def ticking():  # mostly asleep: a loaded system wakes it promptly
    while not stop.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.0005)
other = threading.Thread(target=ticking)
other.start()
prof = stepwatch.Profiler(functions=["work"], live=False)
start = time.perf_counter()
with prof.action("work"):  # the function profiler's tick clock starts here
    sum(range(10))
t0 = time.perf_counter()
prof.function_actions()  # reads the unit: waits out the rest of the calibration
t1 = time.perf_counter()
stop.set()
other.join()
wait = 0.020 - (t0 - start)  # at least this much of the calibration was left
print(wait, t1 - t0, sum(t0 + 0.3 * wait < t < t0 + wait for t in ticks))
'''


def test_the_calibration_wait_lets_other_threads_run():
    import subprocess
    runs = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", GIL_SCRIPT], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        wait, took, ran = out.stdout.split()
        runs.append((float(wait), float(took), int(ran)))
        if runs[-1][0] >= 0.010 and runs[-1][1] >= 0.9 * runs[-1][0] and runs[-1][2] > 0:
            break
    waited = [r for r in runs if r[0] >= 0.010 and r[1] >= 0.9 * r[0]]
    if not waited:  # the clock's unit is 1 without an invariant TSC: nothing to wait for
        pytest.skip(f"no calibration wait seen: {runs}")
    assert any(ran > 0 for _, _, ran in waited), runs
