"""stepwatch.torch.instrument(): plain PyTorch loops, zero code changes."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402

from conftest import within  # noqa: E402


def model_and_opt():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train(loader, model, opt, loss_fn):
    for x, y in loader:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()


@pytest.fixture
def prof():
    p = stepwatch.Profiler(name="torch-test")
    yield p
    swtorch.uninstrument()


def rows(p, phase):
    return {r["action"]: r for r in p.records(phase)}


def test_data_wait_matches_a_known_sleep(prof, sleepy):
    ds = sleepy(12, sleep_s=0.02)
    model, opt = model_and_opt()
    with swtorch.instrument(prof):
        train(DataLoader(ds, batch_size=None), model, opt, torch.nn.MSELoss())
    r = rows(prof, "train")
    assert ds.slept_ns >= 12 * 20_000_000
    assert r["data"]["count"] == 12
    assert within(r["data"]["total_ns"], ds.slept_ns), (r["data"]["total_ns"], ds.slept_ns)
    # every part of the step, once per step, and the step holds them all
    for name in ("step", "forward", "loss", "backward", "optimizer", "zero_grad"):
        assert r[name]["count"] == 12, name
    parts = sum(r[n]["total_ns"] for n in ("data", "forward", "loss", "backward", "optimizer",
                                           "zero_grad"))
    assert parts <= r["step"]["total_ns"]
    assert r["step"]["samples"] == 12 * 4


@pytest.mark.parametrize("forward", ["patch", "hooks"])
def test_forward_is_the_outermost_module_only(prof, forward):
    model, opt = model_and_opt()  # Sequential of 3 modules: 4 module calls per forward
    loader = DataLoader(TensorDataset(torch.randn(20, 8), torch.randn(20, 1)), batch_size=5)
    swtorch.instrument(prof, forward=forward)
    train(loader, model, opt, torch.nn.functional.mse_loss)  # functional loss: the gap
    swtorch.uninstrument()
    r = rows(prof, "train")
    assert r["forward"]["count"] == 4 and r["step"]["count"] == 4
    assert r["loss"]["count"] == 4  # forward end -> backward start
    assert prof.snapshot().info()["misuse"]["mismatched_end"] == 0


def test_validation_under_no_grad_is_the_valid_phase(prof):
    model, opt = model_and_opt()
    data = TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    swtorch.instrument(prof)
    train(DataLoader(data, batch_size=4), model, opt, torch.nn.MSELoss())
    with torch.no_grad():
        for x, _y in DataLoader(data, batch_size=8):
            model(x)
    swtorch.uninstrument()
    assert rows(prof, "train")["step"]["count"] == 4
    assert rows(prof, "valid")["step"]["count"] == 2
    assert rows(prof, "valid")["forward"]["count"] == 2
    assert "backward" not in rows(prof, "valid")


@pytest.mark.parametrize("forward", ["patch", "hooks"])
def test_uninstrument_restores_everything(prof, forward):
    from torch.nn.modules import module as mmod
    from torch.optim import optimizer as omod
    from torch.utils.data import dataloader as dmod
    before = (dmod._BaseDataLoaderIter.__next__, torch.autograd.backward,
              torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad,
              torch.nn.Module.__call__,
              len(mmod._global_forward_pre_hooks), len(omod._global_optimizer_pre_hooks),
              len(omod._global_optimizer_post_hooks))
    model, opt = model_and_opt()
    swtorch.instrument(prof, forward=forward)
    assert dmod._BaseDataLoaderIter.__next__ is not before[0]
    assert torch.autograd.backward is not before[1]
    train(DataLoader(TensorDataset(torch.randn(8, 8), torch.randn(8, 1)), batch_size=4),
          model, opt, torch.nn.MSELoss())
    assert swtorch.uninstrument() is not None
    after = (dmod._BaseDataLoaderIter.__next__, torch.autograd.backward,
             torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad,
             torch.nn.Module.__call__,
             len(mmod._global_forward_pre_hooks), len(omod._global_optimizer_pre_hooks),
             len(omod._global_optimizer_post_hooks))
    assert after == before
    assert len(model._forward_hooks) == 0  # the per-module end hook is gone too
    assert swtorch.uninstrument() is None


def test_a_torch_without_a_hook_degrades_and_says_so(prof, monkeypatch):
    # torch < 2.0 had no global optimizer step hooks: take them away
    from torch.optim import optimizer as omod
    monkeypatch.delattr(omod, "register_optimizer_step_pre_hook")
    monkeypatch.delattr(omod, "register_optimizer_step_post_hook")
    model, opt = model_and_opt()
    with pytest.warns(RuntimeWarning, match="optimizer step not timed"):
        inst = swtorch.instrument(prof)
    train(DataLoader(TensorDataset(torch.randn(12, 8), torch.randn(12, 1)), batch_size=4),
          model, opt, torch.nn.MSELoss())
    swtorch.uninstrument()
    assert len(inst.missing) == 1 and inst.missing[0].startswith("optimizer step:")
    r = rows(prof, "train")
    assert "optimizer" not in r  # not timed, and nothing else lost
    for name in ("step", "data", "forward", "loss", "backward", "zero_grad"):
        assert r[name]["count"] == 3, name
    assert sum(prof.snapshot().info()["misuse"].values()) == 0
    # its steps cannot be seen: a step ends with the backward
    assert prof.snapshot().info()["notes"]["step_rule"] == "backward"


def test_forward_hooks_need_always_call(prof, monkeypatch):
    # torch < 2.0: register_forward_hook(hook) without always_call
    original = torch.nn.Module.register_forward_hook
    monkeypatch.setattr(torch.nn.Module, "register_forward_hook",
                        lambda self, hook: original(self, hook))
    model, opt = model_and_opt()
    with pytest.warns(RuntimeWarning, match="forward not timed"):
        inst = swtorch.instrument(prof, forward="hooks")
    train(DataLoader(TensorDataset(torch.randn(8, 8), torch.randn(8, 1)), batch_size=4),
          model, opt, torch.nn.MSELoss())  # the script runs on
    swtorch.uninstrument()
    assert "always_call" in inst.missing[0]
    r = rows(prof, "train")
    assert "forward" not in r and r["backward"]["count"] == 2


@pytest.mark.parametrize("forward", ["patch", "hooks"])
def test_an_exception_in_forward_does_not_break_later_steps(prof, forward):
    class Flaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("flaky")
            return self.lin(x)

    model = Flaky()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(16, 8), torch.randn(16, 1)), batch_size=4)
    swtorch.instrument(prof, forward=forward)
    done = 0
    for x, y in loader:
        try:
            loss = torch.nn.functional.mse_loss(model(x), y)
        except RuntimeError:
            continue
        loss.backward()
        opt.step()
        done += 1
    swtorch.uninstrument()
    r = rows(prof, "train")
    assert done == 3
    assert r["forward"]["count"] == 4  # the failed one ended by always_call
    # three updates, three steps: the failed iteration's time is in the next step
    assert r["backward"]["count"] == 3 and r["step"]["count"] == 3


def test_iterable_data_without_len_gets_one_step_per_batch(prof):
    """The fetch that ends an epoch (StopIteration) opens no step, even when the loader
    cannot tell the end in advance."""
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            for _ in range(7):
                yield torch.randn(3, 8), torch.randn(3, 1)

    model, opt = model_and_opt()
    swtorch.instrument(prof)
    for _epoch in range(2):
        train(DataLoader(Stream(), batch_size=None), model, opt, torch.nn.MSELoss())
    swtorch.uninstrument()
    r = rows(prof, "train")
    assert r["step"]["count"] == 14 and r["data"]["count"] == 14
    assert r["step"]["samples"] == 14 * 3
    assert prof.snapshot().info()["misuse"]["step_overlap"] == 0


def test_a_closed_profiler_leaves_training_untouched(prof):
    model, opt = model_and_opt()
    loader = DataLoader(TensorDataset(torch.randn(8, 8), torch.randn(8, 1)), batch_size=4)
    swtorch.instrument(prof)
    prof.close()
    train(loader, model, opt, torch.nn.MSELoss())  # the hooks call straight through
    swtorch.uninstrument()
    assert prof.closed


def test_loop_rejects_bad_arguments(prof):
    from stepwatch._stepwatch import Loop
    names = ("data", "forward", "loss", "backward", "optimizer", "zero_grad")
    acts = [prof.action(n) for n in names]
    other = stepwatch.Profiler(name="other")
    rest = (torch.nn.modules.loss._Loss, torch.is_grad_enabled, lambda: True)
    with pytest.raises(TypeError, match="profiler must be a stepwatch.Profiler"):
        Loop(None, *acts, None, None, *rest)
    with pytest.raises(TypeError, match="forward must be a stepwatch.Action of the same"):
        Loop(prof, acts[0], other.action("forward"), *acts[2:], None, None, *rest)
    with pytest.raises(TypeError, match="loss_type must be a type"):
        Loop(prof, *acts, None, None, "loss", *rest[1:])
    with pytest.raises(TypeError, match="optimizer_exists callables"):
        Loop(prof, *acts, None, None, *rest[:2], None)
    loop = Loop(prof, *acts, None, None, *rest)
    with pytest.raises(ValueError, match="unknown kind 'forward'"):
        loop.hook("forward", len)
    with pytest.raises(TypeError, match="original must be callable"):
        loop.hook("next", None)
    with pytest.raises(ValueError, match="batch_size"):
        loop.mark(-1)
    assert loop.rule == "none"


def test_uninstrument_restores_the_losses_compile_and_zero_grad_overrides(prof):
    class OwnZero(torch.optim.SGD):
        def zero_grad(self, set_to_none=True):
            super().zero_grad(set_to_none)

    F = torch.nn.functional
    before = (F.cross_entropy, F.mse_loss, torch.compile, OwnZero.zero_grad,
              "__init_subclass__" in torch.optim.Optimizer.__dict__)
    swtorch.instrument(prof)
    assert F.cross_entropy is not before[0] and OwnZero.zero_grad is not before[3]
    assert F.cross_entropy.__wrapped__ is before[0]

    class Later(torch.optim.SGD):  # defined while instrumented
        def zero_grad(self, set_to_none=True):
            super().zero_grad(set_to_none)
    own = Later.__dict__["zero_grad"]
    assert own.__wrapped__.__qualname__.endswith("Later.zero_grad")
    swtorch.uninstrument()
    assert (F.cross_entropy, F.mse_loss, torch.compile, OwnZero.zero_grad,
            "__init_subclass__" in torch.optim.Optimizer.__dict__) == before
    assert Later.zero_grad is own.__wrapped__


def test_an_optimizer_that_overrides_zero_grad_is_timed(prof):
    model, _ = model_and_opt()

    class OwnZero(torch.optim.SGD):  # defined after instrument(): patched on creation
        def zero_grad(self, set_to_none=True):
            super().zero_grad(set_to_none)

    swtorch.instrument(prof)

    class Later(torch.optim.Adam):
        def zero_grad(self, set_to_none=True):
            super().zero_grad(set_to_none)

    loader = DataLoader(TensorDataset(torch.randn(12, 8), torch.randn(12, 1)), batch_size=4)
    for opt in (OwnZero(model.parameters(), lr=0.01), Later(model.parameters())):
        train(loader, model, opt, torch.nn.MSELoss())
    swtorch.uninstrument()
    r = rows(prof, "train")
    assert r["zero_grad"]["count"] == 6  # once each, not twice (the override calls super)


def test_the_first_optimizer_ends_steps_until_another_steps_alone(prof):
    """A GAN steps two optimizers per iteration: one step each iteration. An optimizer
    that then steps on its own (a new stage) takes over at its second step."""
    g, _ = model_and_opt()
    d, _ = model_and_opt()
    opt_g = torch.optim.SGD(g.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(d.parameters(), lr=0.01)
    swtorch.instrument(prof)
    for _ in range(4):
        for model, opt in ((d, opt_d), (g, opt_g)):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    for _ in range(3):
        g(torch.randn(4, 8)).sum().backward()
        opt_g.step()
    swtorch.uninstrument()
    r = rows(prof, "train")
    assert r["optimizer"]["count"] == 11
    # 4 GAN iterations end at D's steps; the stage's first G step takes over (its step holds
    # the last iteration's G), then each G step ends one
    assert r["step"]["count"] == 4 + 3


def test_no_step_at_all_is_said_in_the_notes(prof):
    swtorch.instrument(prof)
    for _batch in DataLoader(torch.randn(8, 2), batch_size=4):
        pass  # batches, nothing done with them
    swtorch.uninstrument()
    info = prof.snapshot().info()
    assert info["steps"] == 0
    assert "no model call" in info["notes"]["no_steps"]


def test_a_loss_inside_the_model_is_said_to_be_inseparable(prof):
    class WithLoss(torch.nn.Module):  # nanoGPT's shape: model(x, y) returns the loss too
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def forward(self, x, y):
            out = self.lin(x)
            return out, torch.nn.functional.mse_loss(out, y)

    model = WithLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    swtorch.instrument(prof)
    for _ in range(3):
        _out, loss = model(torch.randn(4, 8), torch.randn(4, 1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    swtorch.uninstrument()
    notes = prof.snapshot().info()["notes"]
    assert "inside the model's forward" in notes["not_separated.loss"]
    assert "no DataLoader" in notes["not_separated.data"]
    assert rows(prof, "train")["step"]["count"] == 3
    assert "loss" not in rows(prof, "train")  # the forward holds it: no gap taken for it


def test_validation_without_a_loader_is_a_step_per_batch(prof):
    """word_language_model's evaluate(): a loop over batches with no DataLoader, then the same
    with a model reloaded from its checkpoint (a new module object); an encoder and a decoder
    called apart are one step."""
    import copy
    model, _ = model_and_opt()
    enc, dec = torch.nn.Linear(8, 4), torch.nn.Linear(4, 1)
    criterion = torch.nn.MSELoss()
    swtorch.instrument(prof)
    with torch.no_grad():
        for net in (model, copy.deepcopy(model)):
            for _ in range(3):
                criterion(net(torch.randn(4, 8)), torch.randn(4, 1)).item()
        for _ in range(2):
            dec(enc(torch.randn(4, 8)))
    swtorch.uninstrument()
    assert rows(prof, "valid")["step"]["count"] == 6 + 2
    assert rows(prof, "valid")["forward"]["count"] == 6 + 4


def test_grad_mode_read_from_torch_or_through_python(prof):
    """Grad mode is read from c10::GradMode::is_enabled in the loaded torch library when it
    is there, else through torch.is_grad_enabled: both tell no_grad and inference_mode."""
    import torch.nn as nn
    model = nn.Linear(2, 1)
    inst = swtorch.instrument(prof)
    libc10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    for path, found in ((libc10, True), ("/nonexistent/libc10.so", False)):
        assert inst._loop.read_grad_mode(path) is found
        model(torch.randn(1, 2))
        with torch.no_grad():
            model(torch.randn(1, 2))
        with torch.inference_mode():
            model(torch.randn(1, 2))
    swtorch.uninstrument()
    assert rows(prof, "train")["forward"]["count"] == 2
    assert rows(prof, "valid")["forward"]["count"] == 4


def test_step_marks_without_instrument_use_the_default_profiler():
    prof = stepwatch.Profiler(name="marks")
    stepwatch.set_profiler(prof)
    try:
        for _ in range(3):
            with stepwatch.step(8):
                pass
        stepwatch.step(2)  # a call: begins a step, ended by the next mark or here
        stepwatch.step()
        prof.step_end()
    finally:
        stepwatch.set_profiler(None)
    r = {row["action"]: row for row in prof.records("all")}
    assert r["step"]["count"] == 5 and r["step"]["samples"] == 3 * 8 + 2


def test_autorun_runs_an_unmodified_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        from torch.utils.data import DataLoader, TensorDataset
        m = torch.nn.Linear(4, 1)
        o = torch.optim.SGD(m.parameters(), 0.1)
        data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        for x, y in DataLoader(data, batch_size=8):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
        print("args", sys.argv[1:])
    """))
    out = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--format", "csv", "--",
                          "python", str(script), "a", "b"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "args ['a', 'b']" in out.stdout
    report = out.stderr
    for name in ("data", "forward", "loss", "backward", "optimizer", "zero_grad", "step"):
        assert name in report, name


def test_autorun_reports_even_when_the_script_fails(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import torch\nm = torch.nn.Linear(2, 1)\nm(torch.randn(1, 2))\n"
                      "raise SystemExit(3)\n")
    report = tmp_path / "report.txt"
    out = subprocess.run([sys.executable, "-m", "stepwatch.autorun", "--output", str(report),
                          str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 3
    assert "forward" in report.read_text()


def test_c_command_runs_python_scripts(tmp_path, build_dir):
    exe = os.path.join(build_dir or "", "stepwatch")
    if not build_dir or not os.access(exe, os.X_OK):
        pytest.skip(f"no C command at {exe} (SW_BUILD_DIR)")
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom torch.utils.data import DataLoader\n"
                      "for x in DataLoader(torch.randn(8, 2), batch_size=4):\n"
                      "    torch.nn.Linear(2, 1)(x)\n")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # In tmp_path: `stepwatch run` writes its run file (stepwatch-0.db) where it runs, and one
    # was once committed from a test run in the checkout (issue 38).
    out = subprocess.run([exe, "run", "--", sys.executable, str(script)], capture_output=True,
                         text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "forward" in out.stdout + out.stderr
    assert (tmp_path / "stepwatch-0.db").exists()


def test_compilations_are_noted_and_diagnosed_as_compilation(tmp_path):
    """A real torch.compile (dynamic=False) fed a new batch shape mid-run recompiles in that
    step: the compilations are timed as "compile", their steps go into the "compiled_steps"
    note, and diagnose names compilation instead of a tail stall (issue 31)."""
    import json
    path = tmp_path / "compiled.db"
    p = stepwatch.Profiler(name="compiled", run_file=str(path))
    torch._dynamo.reset()
    handler = torch._dynamo.callback_handler
    before = (list(handler.start_callbacks), list(handler.end_callbacks))
    with swtorch.instrument(p):
        model, opt = model_and_opt()
        compiled = torch.compile(model, backend="eager", dynamic=False)
        for i in range(30):
            x = torch.randn(4 if i < 20 else 6, 8)  # step 20: a new shape, a recompilation
            opt.zero_grad()
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
    assert (handler.start_callbacks, handler.end_callbacks) == before  # uninstrument removed
    torch._dynamo.reset()
    note = dict(pair.split(":") for pair in p.snapshot().info()["notes"]["compiled_steps"].split(","))
    assert sorted(int(s) for s in note) == [0, 20]
    assert all(int(ns) > 0 for ns in note.values())
    assert rows(p, "train")["compile"]["count"] >= 2
    p.close()
    diagnosis = json.loads(stepwatch.diagnose(str(path), "json"))
    assert diagnosis["steps"] == 28  # 30 steps, the 2 that compiled kept out
    found = {f["id"]: f for f in diagnosis["findings"]}
    assert "compilation" in found
    numbers = {n["name"]: n["value"] for n in found["compilation"]["numbers"]}
    assert numbers["compiled steps"] == 2
    assert numbers["compile time"] == sum(int(ns) for ns in note.values())
    assert "recompilation" in found["compilation"]["sentence"]
    if "tail-stalls" in found:  # the machine's own hiccups may make one, never a compilation
        p99 = {n["name"]: n["value"] for n in found["tail-stalls"]["numbers"]}["p99"]
        assert p99 < min(int(ns) for ns in note.values())
