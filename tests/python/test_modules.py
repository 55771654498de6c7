"""Per-module time and memory (Profiler(modules=...), python/_stepwatch/_modules.c), and the
module an out-of-memory error came from: real torch on the CPU, against ground truth the
modules measure themselves with time.perf_counter in the same run."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")
import stepwatch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SLEEPS = []  # (module name, "forward" or "backward", seconds really slept)


def slept(name, phase, seconds):
    t0 = time.perf_counter()
    time.sleep(seconds)
    SLEEPS.append((name, phase, time.perf_counter() - t0))


class SleepInBackward(torch.autograd.Function):
    """Identity forward; its backward sleeps (a known backward time for its module)."""

    @staticmethod
    def forward(ctx, x, name, seconds):
        ctx.name, ctx.seconds = name, seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        slept(ctx.name, "backward", ctx.seconds)
        return grad, None, None


class Leaf(torch.nn.Module):
    def __init__(self, name, forward_s, backward_s, width=16):
        super().__init__()
        self.name, self.forward_s, self.backward_s = name, forward_s, backward_s
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x):
        t0 = time.perf_counter()  # the truth: the whole forward, as the loop times it
        time.sleep(self.forward_s)
        out = SleepInBackward.apply(self.lin(x), self.name, self.backward_s)
        SLEEPS.append((self.name, "forward", time.perf_counter() - t0))
        return out


class Block(torch.nn.Module):
    """Sleeps in its own forward, then calls a Leaf: self vs cumulative."""

    def __init__(self):
        super().__init__()
        self.inner = Leaf("dec.inner", 0.008, 0.012)

    def forward(self, x):
        t0 = time.perf_counter()  # the truth of its self time: its body less the inner call
        time.sleep(0.005)
        t1 = time.perf_counter()
        out = self.inner(x)
        t2 = time.perf_counter()
        out = out + 1
        SLEEPS.append(("dec", "forward", time.perf_counter() - t0 - (t2 - t1)))
        SLEEPS.append(("dec", "whole", time.perf_counter() - t0))
        return out


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Leaf("enc", 0.010, 0.020)
        self.dec = Block()
        self.act = torch.nn.ReLU(inplace=True)  # in place on a module's output
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.act(self.dec(self.enc(x))))


def modules_of(prof):
    data = json.loads(prof.report("json"))
    return data["modules"], {r["path"]: r for r in data["modules"]["rows"]}


def truth(name, phase):
    return sum(s for n, p, s in SLEEPS if n == name and p == phase)


def within(measured_ns, truth_s, tolerance=0.10):
    return abs(measured_ns / 1e9 - truth_s) <= tolerance * truth_s


def train(prof, model, steps, width=16):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for i in range(steps):
        with prof.step():
            loss = model(torch.randn(8, width)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
    return opt


def test_sleeping_modules_come_out_within_ten_percent_forward_and_backward():
    prof = stepwatch.Profiler(modules=1)
    try:
        model = Model()
        train(prof, model, 1)  # step 0: warm-up, left out of the table
        SLEEPS.clear()
        train(prof, model, 4)
        info, rows = modules_of(prof)
    finally:
        prof.close()
    assert info["every"] == 1 and info["sampled_steps"] == 4
    enc, dec, inner = rows["enc"], rows["dec"], rows["dec.inner"]
    assert enc["forward_calls"] == 4 and enc["backward_calls"] == 4
    # forward: the leaf's whole call, the block's own part, and the block with its leaf
    assert within(enc["forward_ns"], truth("enc", "forward")), (enc, SLEEPS)
    assert within(inner["forward_ns"], truth("dec.inner", "forward")), inner
    assert within(dec["forward_self_ns"], truth("dec", "forward")), dec
    assert within(dec["forward_ns"], truth("dec", "whole"))
    # backward: each leaf's autograd Function sleeps; the block has no backward of its own
    assert within(enc["backward_ns"], truth("enc", "backward")), (enc, SLEEPS)
    assert within(inner["backward_ns"], truth("dec.inner", "backward")), inner
    assert within(dec["backward_ns"], truth("dec.inner", "backward")), dec
    assert dec["backward_self_ns"] < 0.10 * dec["backward_ns"], dec
    # the model holds everything: cumulative = self + its children's
    model = rows[""]
    assert model["class"] == "Model" and rows["dec.inner"]["class"] == "Leaf"
    children = sum(rows[p]["forward_ns"] for p in ("enc", "dec", "act", "head"))
    assert model["forward_ns"] == model["forward_self_ns"] + children


def test_parameter_gradient_and_optimizer_bytes_per_module():
    prof = stepwatch.Profiler(modules=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(100, 50), torch.nn.Linear(50, 10, bias=False))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for _ in range(2):
            with prof.step():
                model(torch.randn(3, 100)).sum().backward()
                opt.step()
        _info, rows = modules_of(prof)
    finally:
        prof.close()
    first = (100 * 50 + 50) * 4
    second = 50 * 10 * 4
    assert rows["0"]["param_bytes"] == first and rows["1"]["param_bytes"] == second
    assert rows[""]["param_bytes"] == first + second
    assert rows["0"]["grad_bytes"] == first  # after a backward, before zero_grad(set_to_none)
    assert rows["1"]["optimizer_bytes"] == second  # SGD's momentum buffer
    assert rows["0"]["activation_bytes"] == -1  # no allocator counter on the CPU


def test_sampling_every_kth_step_and_no_grad_evaluation():
    prof = stepwatch.Profiler(modules=3)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        train(prof, model, 8, width=8)  # step 0 warm-up; steps 1, 4, 7 sampled
        with torch.no_grad():
            for _ in range(3):  # steps 8, 9 not sampled; 10 sampled, no graph: forward only
                with prof.step():
                    model(torch.randn(2, 8))
        info, rows = modules_of(prof)
        text = prof.report()
    finally:
        prof.close()
    assert info["every"] == 3 and info["sampled_steps"] == 4 and info["warmup_steps"] == 1
    assert rows["0"]["forward_calls"] == 4 and rows["0"]["backward_calls"] == 3
    assert "Modules (top 3 of 3 by self time" in text and "every 3 step(s) sampled" in text
    assert "warm-up (first 1 step(s)) left out" in text


def test_the_profilers_warmup_steps_are_left_out_too():
    prof = stepwatch.Profiler(modules=2, warmup_steps=3)
    try:
        train(prof, torch.nn.Sequential(torch.nn.Linear(8, 8)), 8, width=8)  # 3, 5, 7 sampled
        info, rows = modules_of(prof)
    finally:
        prof.close()
    assert info["warmup_steps"] == 3 and info["sampled_steps"] == 3
    assert rows["0"]["forward_calls"] == 3 and rows["0"]["backward_calls"] == 3


def test_every_report_format_and_the_run_file_keep_the_table(tmp_path):
    run = tmp_path / "run.sw"
    prof = stepwatch.Profiler(modules=1, run_file=str(run))
    train(prof, torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), 3, width=4)
    prof.close()
    loaded = stepwatch.load(str(run))
    md = loaded.report("markdown")
    assert "#### Modules (top 3 of 3" in md and "| 1 |" in md and "Tanh" in md
    csv_lines = loaded.report("csv").splitlines()
    header = csv_lines[0].split(",")
    assert ",module_class,param_bytes,grad_bytes,optimizer_bytes,activation_bytes" in csv_lines[0]
    tanh = [line.split(",") for line in csv_lines if line.startswith("1,forward,module,2,")]
    assert len(tanh) == 1 and len(tanh[0]) == len(header)
    assert tanh[0][header.index("module_class")] == "Tanh"
    rows = {r["path"]: r for r in json.loads(loaded.report("json"))["modules"]["rows"]}
    assert rows["0"]["param_bytes"] == 80 and rows["0"]["backward_calls"] == 2
    assert "Modules (top 3 of 3" in loaded.report("table")


OOM_SCRIPT = textwrap.dedent("""
    import sys, torch, stepwatch

    class Boom(torch.nn.Module):
        def __init__(self, phase):
            super().__init__()
            self.phase = phase
        def forward(self, x):
            if self.phase == "forward":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
            return Explode.apply(x)

    class Explode(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()
        @staticmethod
        def backward(ctx, g):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")

    phase, run = sys.argv[1], sys.argv[2]
    model = torch.nn.Sequential(torch.nn.Linear(4, 4),
                                torch.nn.Sequential(torch.nn.ReLU(), Boom(phase)))
    prof = stepwatch.Profiler(modules=True, run_file=run)
    with prof.step():
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
""")


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_out_of_memory_is_named_with_its_module_and_propagates_unchanged(tmp_path, phase):
    script = tmp_path / "oom.py"
    script.write_text(OOM_SCRIPT)
    run = tmp_path / "run.sw"
    done = subprocess.run([sys.executable, str(script), phase, str(run)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    named = [line for line in lines if line.startswith("stepwatch: out of memory")]
    assert named == [f"stepwatch: out of memory in `1.1` ({phase}): allocated n/a, "
                     "reserved n/a, peak n/a"], done.stderr
    # the exception as Python prints it: its type, message and the frame that raised it
    assert lines[-1].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    raise_line = "raise torch.OutOfMemoryError"
    assert raise_line in lines[-2], lines[-3:]
    notes = json.loads(stepwatch.load(str(run)).report("json"))["notes"]
    assert notes["oom_module"] == "1.1" and notes["oom_phase"] == phase


def test_out_of_memory_traceback_is_the_one_without_stepwatch():
    """The same failing call with and without the hooks: the same type, message and frames
    (C adds none)."""
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def frames(profiled):
        prof = stepwatch.Profiler(modules=True) if profiled else None
        model = torch.nn.Sequential(Boom())
        try:
            model(torch.randn(1))
        except torch.OutOfMemoryError as exc:
            import traceback
            got = (type(exc), str(exc),
                   [(f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)])
        if prof:
            prof.close()
        return got

    assert frames(True) == frames(False)


def test_closing_restores_torch():
    call, backward = torch.nn.Module.__call__, torch.autograd.backward
    prof = stepwatch.Profiler(modules=True)
    assert torch.nn.Module.__call__ is not call
    prof.close()
    assert torch.nn.Module.__call__ is call and torch.autograd.backward is backward


def test_bad_modules_argument_is_named():
    with pytest.raises(ValueError, match="modules must be True, False or a step interval"):
        stepwatch.Profiler(modules=-1)
    with pytest.raises(ValueError, match="modules must be"):
        stepwatch.Profiler(modules="often")


# ---- the front ends and the command -------------------------------------------------------

def test_lightning_trainer_with_modules_has_the_table():
    L = pytest.importorskip("lightning.pytorch")
    from stepwatch.lightning import Profiler
    from torch.utils.data import DataLoader, TensorDataset

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
            self.head = torch.nn.Linear(16, 1)

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.head(self.body(x)), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    prof = Profiler(modules=1)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, profiler=prof, accelerator="cpu")
    trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(16, 8), torch.randn(16, 1)),
                                  batch_size=4))
    try:
        _info, rows = modules_of(prof.profiler)
        text = prof.profiler.report()
    finally:
        prof.profiler.close()
    assert "body.0" in rows, list(rows)
    # 4 steps, the first one warm-up
    assert rows["body.0"]["forward_calls"] == 3 and rows["body.0"]["backward_calls"] == 3
    assert rows["head"]["param_bytes"] == 17 * 4
    # Adam's two moments per parameter, and its step count (a float32 tensor) per parameter
    assert rows["head"]["optimizer_bytes"] == 2 * 17 * 4 + 2 * 4
    assert "Modules (top" in text and "body.0" in text


def test_hf_trainer_with_modules_has_the_table(tmp_path):
    pytest.importorskip("transformers")
    sys.path.insert(0, HERE)
    from hftruth import make_trainer
    from stepwatch.transformers import Callback
    out = tmp_path / "report.txt"
    cb = Callback(output=str(out), modules=1, format="json")
    trainer, _clock = make_trainer(tmp_path, train=24, valid=0, epochs=1, callbacks=[cb])
    trainer.train()
    rows = {r["path"]: r for r in json.loads(out.read_text())["modules"]["rows"]}
    # 3 steps, the first one warm-up
    assert rows[""]["forward_calls"] == 2 and rows[""]["backward_calls"] == 2
    attention = [p for p in rows if p.endswith("attention")]
    assert attention and all(rows[p]["backward_ns"] > 0 for p in attention)


def test_stepwatch_run_modules_passes_it_on(tmp_path, build_dir):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    """))
    out = tmp_path / "report.json"
    done = subprocess.run([os.path.join(build_dir, "stepwatch"), "run", "--modules=2", "-f", "json",
                           "-o", str(out), "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["modules"]["every"] == 2 and report["modules"]["sampled_steps"] == 3
    rows = {r["path"]: r for r in report["modules"]["rows"]}
    assert rows["1"]["class"] == "Tanh" and rows["1"]["forward_calls"] == 3
    bad = subprocess.run([os.path.join(build_dir, "stepwatch"), "run", "--modules=0", "--",
                          sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "--modules takes a step interval" in bad.stderr


# ---- zero-code (stepwatch run --modules): the optimizer's state, warm-up, the measuring ----

def _stepwatch_run(build_dir, tmp_path, script, *args):
    """Run script under `stepwatch run --modules=1` with a run file; its modules table as
    {path: row} from the run file itself (sqlite3), and the table's notes."""
    import sqlite3
    run = tmp_path / "run.db"
    done = subprocess.run([os.path.join(build_dir, "stepwatch"), "run", "--modules=1",
                           "--run-file", str(run), "-o", str(tmp_path / "report.txt"), "--",
                           sys.executable, str(script), *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(run) as db:
        db.row_factory = sqlite3.Row
        rows = {r["path"]: dict(r) for r in db.execute("SELECT * FROM modules")}
        notes = dict(db.execute("SELECT key, value FROM notes"))
    return rows, notes


ADAM_SCRIPT = textwrap.dedent("""
    import json, sys, torch

    def main():  # the optimizer is gone once main returns, before stepwatch closes
        model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(),
                                    torch.nn.Linear(96, 8))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(6):
            model(torch.randn(4, 64)).sum().backward()
            opt.step()
            opt.zero_grad()
        def state_bytes(module):  # the truth, from the optimizer itself
            return sum(v.numel() * v.element_size() for p in module.parameters()
                       for v in opt.state[p].values() if isinstance(v, torch.Tensor))
        json.dump({name: state_bytes(m) for name, m in model.named_modules()},
                  open(sys.argv[1], "w"))

    main()
""")


def test_stepwatch_run_modules_has_the_optimizer_state_of_the_loop(tmp_path, build_dir):
    """Issue 43: under `stepwatch run --modules=1` the run file had 0 B of optimizer state
    in every row (and no gradients): the last sizes were read at close, after the script's
    main() had returned. Adam's state, as the optimizer itself counts it, is in the table."""
    script = tmp_path / "train.py"
    script.write_text(ADAM_SCRIPT)
    truth_file = tmp_path / "state.json"
    rows, _notes = _stepwatch_run(build_dir, tmp_path, script, str(truth_file))
    truth = json.loads(truth_file.read_text())
    # exp_avg and exp_avg_sq of every parameter, and its step (a float32 scalar)
    assert truth[""] == 2 * 4 * ((64 * 96 + 96) + (96 * 8 + 8)) + 4 * 4
    for path, state in truth.items():
        assert rows[path]["optimizer_bytes"] == state, (path, rows[path])
        # read after a backward of the run, not after the last zero_grad
        assert rows[path]["grad_bytes"] == rows[path]["param_bytes"], (path, rows[path])


WARMUP_SCRIPT = textwrap.dedent("""
    import json, sys, time, torch
    from time import perf_counter_ns as clock
    torch.set_num_threads(1)
    STEPS, NOTHING_CALLS = int(sys.argv[2]), 50
    own = []  # per step: the loop's own clock, ns

    def rec(key, ns):
        own[-1][key] = own[-1].get(key, 0) + ns

    class Lin(torch.nn.Linear):
        def forward(self, x):  # the Linear's own work, timed inside its call
            t0 = clock()
            y = super().forward(x)
            rec("lin_in", clock() - t0)
            return y

    class Sleepy(torch.nn.Module):  # a known sleep
        def forward(self, x):
            t0 = clock()
            time.sleep(0.003)
            rec("sleepy_in", clock() - t0)
            return x * 1.0

    class Lazy(torch.nn.Module):  # lazy initialisation: a first call of 300 ms
        def __init__(self):
            super().__init__()
            self.ready = False
        def forward(self, x):
            if not self.ready:
                time.sleep(0.3)
                self.ready = True
            return x + 0

    class Nothing(torch.nn.Module):  # does nothing: the per-call floor
        def forward(self, x):
            return x

    class Parent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lazy, self.lin, self.sleepy, self.nothing = Lazy(), Lin(256, 256), Sleepy(), Nothing()
        def forward(self, x):
            start = clock()
            time.sleep(0.002)  # its own
            children = 0
            for name in ("lazy", "lin", "sleepy"):
                t0 = clock()
                x = getattr(self, name)(x)
                t = clock() - t0
                rec(name + "_out", t)
                children += t
            t0 = clock()
            for _ in range(NOTHING_CALLS):
                x = self.nothing(x)
            t = clock() - t0
            rec("nothing_out", t)
            children += t
            # a module made per call (functional style): named by the hooks at every call
            t0 = clock()
            x = torch.nn.Identity()(x)
            t = clock() - t0
            rec("adhoc_out", t)
            children += t
            rec("parent_body_less_children", clock() - start - children)
            return x

    model = Parent()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 256)
    for step in range(STEPS):
        own.append({})
        t0 = clock()
        out = model(x)
        rec("model_out", clock() - t0)
        out.sum().backward()
        opt.step()
        opt.zero_grad()
    json.dump(own, open(sys.argv[1], "w"))
""")


def test_stepwatch_run_modules_leaves_the_warmup_out_and_charges_no_measuring(tmp_path, build_dir):
    """Issue 43: the first step's one-time costs (BLAS start-up, the first autograd call, a
    module's lazy initialisation) landed in the module table, and so did the hooks' own work
    (naming a module, node hooks) in the modules around the call. Every bound here is the
    loop's own clock (perf_counter_ns, CLOCK_MONOTONIC as stepwatch's) in the same run:
    stepwatch's interval of a call lies inside the loop's around it and holds the module's
    own work, so it is between the two, on any load."""
    script = tmp_path / "train.py"
    script.write_text(WARMUP_SCRIPT)
    truth_file = tmp_path / "own.json"
    steps = 8
    rows, notes = _stepwatch_run(build_dir, tmp_path, script, str(truth_file), str(steps))
    own = json.loads(truth_file.read_text())
    steady = own[1:]  # step 0 is warm-up: not in the table

    def total(key):
        return sum(s.get(key, 0) for s in steady)

    lin, sleepy, lazy, nothing, parent = (rows[p] for p in ("lin", "sleepy", "lazy", "nothing", ""))
    # the first step is not in the table: the lazy module's 300 ms first call is not there
    assert lin["forward_calls"] == lazy["forward_calls"] == steps - 1
    assert lin["backward_calls"] == steps - 1
    assert lazy["forward_ns"] <= total("lazy_out") < 0.3e9, (lazy, total("lazy_out"))
    # the Linear: at least its own work, at most the loop's interval around its calls
    assert total("lin_in") <= lin["forward_self_ns"] <= total("lin_out"), (lin, steady)
    # a known sleep: likewise
    assert total("sleepy_in") <= sleepy["forward_self_ns"] <= total("sleepy_out"), sleepy
    assert sleepy["forward_self_ns"] >= 0.003e9 * (steps - 1)
    # the do-nothing module: its self time per call (the floor) within the loop's per call
    calls = nothing["forward_calls"]
    assert calls == 50 * (steps - 1)
    assert 0 < nothing["forward_self_ns"] <= total("nothing_out"), nothing
    # the parent: its own body (the loop's clock, children's calls taken out) at least, and
    # at most that plus its own call's dispatch (model_out less its body) and the loop's
    # share around each child call (the statements between the loop's clock and the call:
    # no more than a whole do-nothing call, the loop's clock says). Naming the per-call
    # module (gc walks the heap: milliseconds) and the children's node hooks are the
    # measuring's, not the parent's.
    body = total("parent_body_less_children")
    dispatch = total("model_out") - sum(s["parent_body_less_children"] + s["lazy_out"]
                                        + s["lin_out"] + s["sleepy_out"] + s["nothing_out"]
                                        + s["adhoc_out"] for s in steady)
    per_call = total("nothing_out") / calls
    slack = dispatch + total("nothing_out") + 4 * (steps - 1) * per_call
    assert body <= parent["forward_self_ns"] <= body + slack, (parent, body, slack)
    assert parent["forward_ns"] == parent["forward_self_ns"] + sum(
        rows[p]["forward_ns"] for p in rows if p and "." not in p)
    assert notes["modules_warmup_steps"] == "1" and notes["modules_sampled_steps"] == str(steps - 1)


def test_html_report_draws_the_modules_table(tmp_path):
    import shutil
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    run, page = tmp_path / "run.sw", tmp_path / "report.html"
    prof = stepwatch.Profiler(modules=1, run_file=str(run))
    train(prof, torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Softsign()), 2, width=4)
    prof.close()
    stepwatch.html(str(run), str(page))
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--window-size=1400,3000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'data-rendered="1"' in dom
    table = dom[dom.index('data-table="modules"'):]
    table = table[:table.index("</table>")]
    assert "Softsign" in table and "(model)" in table and "80 B" in table  # Linear(4, 4)


def test_fastai_profile_with_modules_prints_the_table(capsys):
    pytest.importorskip("fastai.learner")
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from torch.utils.data import DataLoader, TensorDataset
    import stepwatch.fastai  # noqa: F401 -- Learner.profile

    def loader(n):
        return DataLoader(TensorDataset(torch.randn(n, 8), torch.randn(n, 1)), batch_size=4)

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    learn = Learner(DataLoaders(loader(16), loader(8)), model, loss_func=torch.nn.MSELoss(),
                    lr=0.01)
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
    call = torch.nn.Module.__call__
    learn.profile(modules=1)
    learn.fit(1)
    out = capsys.readouterr().out
    assert "Modules (top" in out and "GELU" in out, out[-3000:]
    assert torch.nn.Module.__call__ is call  # the core made for modules= closed after its report


# ---- GPU time per module: the fake CUDA runtime (tests/device/fake_cudart.c) ----------------

class FakeKernels(torch.autograd.Function):
    """Identity whose forward and backward each launch a kernel of known ns on the fake GPU."""

    @staticmethod
    def forward(ctx, x, fake, forward_ns, backward_ns):
        ctx.fake, ctx.backward_ns = fake, backward_ns
        fake.fake_gpu_launch(forward_ns)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.fake.fake_gpu_launch(ctx.backward_ns)
        return grad, None, None, None


class GpuLeaf(torch.nn.Module):
    """Kernels of known GPU time, and a host time of its own (a sleep) unlike them."""

    def __init__(self, fake, forward_ns, backward_ns, host_s=0.005):
        super().__init__()
        self.fake, self.forward_ns, self.backward_ns, self.host_s = fake, forward_ns, backward_ns, host_s
        self.lin = torch.nn.Linear(8, 8)
        self.host_ns = []  # the truth of its host time: each forward's, measured here

    def forward(self, x):
        t0 = time.perf_counter_ns()
        out = FakeKernels.apply(self.lin(x), self.fake, self.forward_ns, self.backward_ns)
        time.sleep(self.host_s)  # the GPU runs its kernel meanwhile: the host time is this
        self.host_ns.append(time.perf_counter_ns() - t0)
        return out


class GpuBlock(torch.nn.Module):
    """An inner leaf, then a kernel of its own: device self vs cumulative."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake
        self.inner = GpuLeaf(fake, 3_000_000, 2_000_000)

    def forward(self, x):
        return FakeKernels.apply(self.inner(x), self.fake, 1_000_000, 1_000_000)


class GpuModel(torch.nn.Module):
    def __init__(self, fake):
        super().__init__()
        self.enc = GpuLeaf(fake, 2_000_000, 3_000_000)
        self.dec = GpuBlock(fake)

    def forward(self, x):
        return self.dec(self.enc(x))


def test_module_device_times_on_the_step_stream(monkeypatch, fake_cudart, tmp_path):
    """With device time on (here the fake CUDA runtime, torch's answers stood in for: no CUDA
    here) each module's forward and backward are timed on the GPU by the phases' event
    machinery: the kernels' known times come out as device times (within 5 %), cumulative and
    self, while the host columns keep the host's times; nothing ever synchronizes."""
    import ctypes

    from stepwatch import devicestats

    fake = fake_cudart  # the same library stepwatch opens: one fake GPU
    monkeypatch.setattr(devicestats, "_torch_clock", lambda: (
        lambda: pytest.fail("a Python event"), lambda: True, lambda: 0))
    counts = (ctypes.c_uint64 * 6)()
    fake.fake_gpu_counts(counts)
    syncs = counts[0]
    run = tmp_path / "run.sw"
    model = GpuModel(fake)
    model(torch.randn(4, 8)).sum().backward()  # torch's first matmul starts its libraries
    prof = stepwatch.Profiler(device_time=True, modules=2, run_file=str(run))
    # The GPU kept busy with earlier work: each module's kernels queue behind it, so a host
    # that stalls (naming the modules at their first call, a loaded machine) leaves no idle
    # GPU gap in their times.
    fake.fake_gpu_launch(300_000_000)
    for _ in range(6):  # steps 0, 2, 4 sampled
        with prof.step():
            fake.fake_gpu_launch(30_000_000)
            model(torch.randn(4, 8)).sum().backward()
    time.sleep(max(0, fake.fake_gpu_idle_at() - time.monotonic_ns()) / 1e9 + 0.005)
    info = prof.device_time_info()
    prof.close()  # the last sampled step's times are taken here: the GPU got there
    fake.fake_gpu_counts(counts)
    assert counts[0] == syncs  # never synchronized
    assert info["events_in"] == "C" and info["intervals"] > 0, info
    loaded = stepwatch.load(str(run))
    data = json.loads(loaded.report("json"))
    assert data["modules"]["clock"] == "host+device"
    rows = {r["path"]: r for r in data["modules"]["rows"]}
    print({p: (r["device_forward_ns"], r["device_backward_ns"], r["forward_ns"]) for p, r in rows.items()})
    enc, dec, inner, top = rows["enc"], rows["dec"], rows["dec.inner"], rows[""]
    steps = 3
    for row in (enc, dec, inner, top):
        assert row["device_forward_calls"] == row["forward_calls"] == steps, row
        assert row["device_backward_calls"] == row["backward_calls"] == steps, row

    def ms(n):  # n ms in each sampled step, in ns
        return steps * n * 1e6

    def near(got, want):  # within 5 %
        return abs(got - want) <= 0.05 * want

    assert near(enc["device_forward_ns"], ms(2)), enc
    assert near(enc["device_backward_ns"], ms(3)), enc
    assert near(inner["device_forward_ns"], ms(3)), inner
    assert near(inner["device_backward_ns"], ms(2)), inner
    assert near(dec["device_forward_ns"], ms(4)), dec  # its kernel and its leaf's
    assert near(dec["device_forward_self_ns"], ms(1)), dec
    assert near(dec["device_backward_ns"], ms(3)), dec
    assert near(dec["device_backward_self_ns"], ms(1)), dec
    assert near(top["device_forward_ns"], ms(6)), top
    assert top["device_forward_self_ns"] < 0.05 * top["device_forward_ns"], top
    # the host columns stay the host's: the leaves' sleeps, not their kernels
    # the calls of the sampled steps 1, 3, 5 (step 0 is the modules' warm-up; host_ns[0] is
    # the call before the profiler): a loaded machine's stalls in other calls stay out
    host = sum(model.enc.host_ns[2::2])
    assert abs(enc["forward_ns"] - host) <= 0.15 * host, (enc, host)
    assert enc["forward_ns"] > 2 * enc["device_forward_ns"], enc  # 5 ms of host, 2 of GPU
    text = loaded.report("table")
    assert "by device self time; host and GPU device time" in text and "Dev fwd self" in text
    csv_lines = loaded.report("csv").splitlines()
    header = csv_lines[0].split(",")
    line = [ln.split(",") for ln in csv_lines if ln.startswith("enc,forward,module,3,")][0]
    assert len(line) == len(header) and line[header.index("device_count")] == "3"
    assert near(float(line[header.index("device_total_s")]), ms(2) / 1e9)
    # the HTML report's Modules section: the GPU's columns beside the host's, drawn
    import shutil
    chromium = shutil.which("chromium")
    if chromium is None:
        return  # the rest needs a browser (the other tests say so)
    page = tmp_path / "report.html"
    stepwatch.html(str(run), str(page))
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--window-size=1400,3000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout[done.stdout.index('data-table="modules"'):]
    table = table[:table.index("</table>")]
    assert "Dev fwd self" in table and "Dev bwd total" in table
    assert table.index("dec") < table.index("enc.lin")  # the GPU's self time ranks
