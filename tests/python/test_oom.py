"""Which module ran out of memory, in every run (stepwatch/_oom.py, python/_stepwatch/_oom.c):
without Profiler(modules=...) an out-of-memory error leaving what stepwatch watches (a step,
a phase, the Profiler's `with`, stepwatch.torch's hooks, `stepwatch run`, the Lightning,
Hugging Face, Ignite and fastai front ends) is named from its traceback: the module by its
path in the model and the phase, on stderr and in the run file's notes, once; the exception
goes on with its type, message and traceback as without stepwatch, and nothing of it is
kept alive. Real torch modules raise torch.OutOfMemoryError as the CUDA allocator would."""
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import traceback
import weakref

import pytest

torch = pytest.importorskip("torch")

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402

NO_FIGURES = "allocated n/a, reserved n/a, peak n/a"  # no CUDA allocator on this machine


def oom(size="20.00 GiB"):
    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {size}")


class Boom(torch.nn.Module):
    """Runs out of memory in its forward (on its n-th call: 1 = the first)."""

    def __init__(self, at=1):
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, x):
        self.calls += 1
        if self.calls >= self.at:
            raise oom()
        return x * 2


class Explode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise oom("1.00 GiB")


class BoomInBackward(torch.nn.Module):
    def forward(self, x):
        return Explode.apply(x)


def model_with(inner):
    """Linear, then a block holding ReLU and inner: inner's path is `1.1`."""
    return torch.nn.Sequential(torch.nn.Linear(4, 4),
                               torch.nn.Sequential(torch.nn.ReLU(), inner))


def notes_of(path):
    return json.loads(stepwatch.load(str(path)).report("json"))["notes"]


def named_lines(text):
    return [line for line in text.splitlines() if line.startswith("stepwatch: out of memory")]


def failure(run, *args):
    """(type, message, frames) of what run(*args) raised."""
    try:
        run(*args)
    except BaseException as exc:  # noqa: B036 -- the test looks at whatever it is
        return (type(exc), str(exc),
                [(f.filename, f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)])
    raise AssertionError("nothing raised")


def train_step(model, step):
    """One step of a plain loop inside step (a Step, or nullcontext for no stepwatch)."""
    with step:
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()


# ---- the plain Profiler --------------------------------------------------------------------

def test_forward_oom_is_named_with_its_path_and_the_traceback_is_the_one_without_stepwatch(
        tmp_path, capsys):
    run = tmp_path / "run.sw"
    plain = failure(train_step, model_with(Boom()), contextlib.nullcontext())
    prof = stepwatch.Profiler(run_file=str(run))
    watched = failure(train_step, model_with(Boom()), prof.step())
    prof.close()
    assert watched == plain
    assert plain[0] is torch.OutOfMemoryError and plain[2][-1][1] == "forward"
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in `1.1` (forward): {NO_FIGURES}"]
    notes = notes_of(run)
    assert notes["oom_module"] == "1.1" and notes["oom_phase"] == "forward"
    assert "oom_allocated_bytes" not in notes  # no allocator, no figure


def test_backward_oom_of_an_autograd_function_is_the_backward_module_unknown(tmp_path, capsys):
    run = tmp_path / "run.sw"
    prof = stepwatch.Profiler(run_file=str(run))
    got = failure(train_step, model_with(BoomInBackward()), prof.step())
    prof.close()
    assert got[0] is torch.OutOfMemoryError and got[2][-1][1] == "backward"
    assert named_lines(capsys.readouterr().err) == [
        "stepwatch: out of memory in the backward (which module: unknown; `modules=` names it "
        f"in sampled steps): {NO_FIGURES}"]
    notes = notes_of(run)
    assert notes["oom_phase"] == "backward" and "oom_module" not in notes


def test_optimizer_step_oom_is_the_optimizer_phase(capsys):
    class OomSGD(torch.optim.SGD):
        def step(self, closure=None):
            raise oom("8.00 MiB")

    model = model_with(torch.nn.Tanh())
    opt = OomSGD(model.parameters(), lr=0.1)
    prof = stepwatch.Profiler()
    with pytest.raises(torch.OutOfMemoryError):
        with prof.step():
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    assert json.loads(prof.report("json"))["notes"]["oom_phase"] == "optimizer"
    prof.close()
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in the optimizer step: {NO_FIGURES}"]


def test_a_module_recomputed_by_checkpointing_is_named_in_the_backward(capsys):
    """torch.utils.checkpoint runs the block's forward again in the backward: the module
    that runs out there is named, by its path in the whole model, phase backward."""
    boom = Boom(at=2)  # the forward passes, its recomputation fails (the Linear needs it)
    block = torch.nn.Sequential(boom, torch.nn.Linear(4, 4))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), block)

    def forward(x):
        return torch.utils.checkpoint.checkpoint(block, model[0](x), use_reentrant=False)

    prof = stepwatch.Profiler()
    with pytest.raises(torch.OutOfMemoryError):
        with prof.step():
            forward(torch.randn(2, 4)).sum().backward()
    prof.close()
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in `1.0` (backward): {NO_FIGURES}"]


def test_oom_outside_any_module_says_where(capsys):
    prof = stepwatch.Profiler()

    def allocate():
        raise oom()

    with pytest.raises(torch.OutOfMemoryError):
        with prof.phase("train"):
            allocate()
    notes = json.loads(prof.report("json"))["notes"]
    prof.close()
    line = named_lines(capsys.readouterr().err)
    assert line == ["stepwatch: out of memory outside a module's forward and the backward (at "
                    f"test_oom.py:{allocate.__code__.co_firstlineno + 1} in allocate): "
                    f"{NO_FIGURES}"]
    assert notes["oom_phase"] == "other" and notes["oom_where"].startswith("test_oom.py:")


def test_profiler_as_context_manager_and_close_in_finally_name_it(tmp_path, capsys):
    run = tmp_path / "with.sw"
    with pytest.raises(torch.OutOfMemoryError):
        with stepwatch.Profiler(run_file=str(run)) as prof:
            model_with(Boom())(torch.randn(2, 4))
    assert prof.closed and notes_of(run)["oom_module"] == "1.1"
    run2 = tmp_path / "close.sw"
    prof = stepwatch.Profiler(run_file=str(run2))
    with pytest.raises(torch.OutOfMemoryError):
        try:
            torch.nn.Sequential(Boom())(torch.randn(2, 4))
        finally:
            prof.close()
    assert notes_of(run2)["oom_module"] == "0"
    assert len(named_lines(capsys.readouterr().err)) == 2


def test_other_errors_and_a_runtime_error_saying_cuda_oom(capsys):
    prof = stepwatch.Profiler()
    with pytest.raises(ValueError):
        with prof.step():
            raise ValueError("CUDA out of memory")  # not a RuntimeError: not an OOM
    with pytest.raises(RuntimeError, match="shape"):
        with prof.step():
            raise RuntimeError("shape mismatch")
    assert named_lines(capsys.readouterr().err) == []

    class Cublas(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate")

    with pytest.raises(RuntimeError, match="CUBLAS"):
        with prof.step():
            model_with(Cublas())(torch.randn(2, 4))
    prof.close()
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in `1.1` (forward): {NO_FIGURES}"]


def test_a_failing_attribution_is_a_note_and_the_exception_goes_on(capsys):
    """A root whose named_modules raises (a front end's model gone wrong): no line, a note,
    the exception untouched."""
    from stepwatch import _oom

    class BadRoot(torch.nn.Module):
        def named_modules(self, *args, **kwargs):
            raise RuntimeError("broken model")

    prof = stepwatch.Profiler()
    try:
        model_with(Boom())(torch.randn(2, 4))
    except torch.OutOfMemoryError as exc:
        _oom.seen(prof, exc, root=BadRoot())
        assert str(exc).startswith("CUDA out of memory") and exc.__traceback__ is not None
    notes = json.loads(prof.report("json"))["notes"]
    prof.close()
    assert notes["oom_attribution_failed"] == "RuntimeError: broken model"
    assert named_lines(capsys.readouterr().err) == []


# ---- with modules=: named once ---------------------------------------------------------------

@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_with_modules_the_hook_names_it_and_nothing_names_it_again(tmp_path, capsys, phase):
    """modules=1 (every step sampled): the hook names the module, also in the backward; the
    step's exit, instrument()'s hooks and close() in finally say nothing more."""
    inner = Boom() if phase == "forward" else BoomInBackward()
    prof = stepwatch.Profiler(modules=1, run_file=str(tmp_path / "run.sw"))
    swtorch.instrument(prof)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            try:
                train_step(model_with(inner), prof.step())
            finally:
                prof.close()
    finally:
        swtorch.uninstrument()
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in `1.1` ({phase}): {NO_FIGURES}"]


# ---- nothing kept alive ------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["step", "modules", "instrument"])
def test_frames_and_tensors_are_released(how):
    """The tensor a failing forward held (its frame's local) dies with the exception: no
    frame, traceback or tensor stays referenced from stepwatch (no gc needed)."""
    held = []

    class Holds(torch.nn.Module):
        def forward(self, x):
            big = torch.ones(256)
            held.append(weakref.ref(big))
            raise oom()

    prof = stepwatch.Profiler(modules=1 if how == "modules" else False)
    inst = swtorch.instrument(prof) if how == "instrument" else None
    step = prof.step() if how != "instrument" else contextlib.nullcontext()
    caught = []
    try:
        with step:
            model_with(Holds())(torch.randn(2, 4))
    except torch.OutOfMemoryError as exc:
        caught.append(weakref.ref(exc))
        assert getattr(exc, "_stepwatch_oom") == "1.1 (forward)"  # it was named
    finally:
        if inst is not None:
            swtorch.uninstrument()
        prof.close()
    assert held[0]() is None and caught[0]() is None


# ---- stepwatch.torch, `stepwatch run`, the front ends -----------------------------------------

@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_instrument_alone_names_it(capsys, phase):
    """stepwatch.torch.instrument() with no step of the user's: its forward and backward
    hooks see it; the backward's exception comes out as it went in (its hook once lost it
    to a SystemError when the step's rules asked Python whether an optimizer exists)."""
    prof = stepwatch.Profiler()
    swtorch.instrument(prof)
    try:
        model = model_with(Boom(at=3) if phase == "forward" else BoomInBackward())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
            for _ in range(3):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
        notes = json.loads(prof.report("json"))["notes"]
    finally:
        swtorch.uninstrument()
        prof.close()
    assert notes["oom_phase"] == phase and notes.get("oom_module") == (
        "1.1" if phase == "forward" else None)
    assert len(named_lines(capsys.readouterr().err)) == 1


SCRIPT = textwrap.dedent("""
    import sys, torch

    class Boom(torch.nn.Module):
        def forward(self, x):
            if self.training and x.shape[0] == 3:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 4), Boom())
            self.head = torch.nn.Linear(4, 1)
        def forward(self, x):
            return self.head(self.encoder(x))

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in (2, 2, 3):
        loss = model(torch.randn(n, 4)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
""")


def traceback_of(stderr):
    """The traceback Python printed, to the exception's line."""
    lines = stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end + 1]


def test_stepwatch_run_names_it_in_a_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, cwd=str(tmp_path), env=env)
    db = tmp_path / "run.db"
    done = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--run-file", str(db), "--",
                           "python", str(script)], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path), env=env)
    assert plain.returncode == done.returncode == 1
    assert named_lines(done.stderr) == [
        f"stepwatch: out of memory in `encoder.1` (forward): {NO_FIGURES}"], done.stderr
    assert traceback_of(done.stderr) == traceback_of(plain.stderr)
    notes = notes_of(db)
    assert notes["oom_module"] == "encoder.1" and notes["oom_phase"] == "forward"


def lightning_fit(tmp_path, callbacks=(), logger=False, profiler=True):
    """A Trainer (with stepwatch.lightning.Profiler, or none) fitting a module whose net.1.1
    runs out of memory in the second step; returns the profiler."""
    L = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    from stepwatch.lightning import Profiler

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model_with(Boom(at=2))

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x)[:, :1], y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    prof = Profiler(run_file=str(tmp_path / "run.sw")) if profiler else None
    trainer = L.Trainer(max_epochs=1, logger=logger, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, profiler=prof, callbacks=list(callbacks),
                        default_root_dir=str(tmp_path))
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    with pytest.raises(torch.OutOfMemoryError):
        trainer.fit(Model(), data)
    return prof


def test_lightning_profiler_names_it_under_the_lightning_module(tmp_path, capsys):
    """Lightning hands profilers no exception: the strategy's teardown (tapped) sees it."""
    prof = lightning_fit(tmp_path)
    notes = json.loads(prof.profiler.report("json"))["notes"]
    assert notes["oom_module"] == "net.1.1" and notes["oom_phase"] == "forward"
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in `net.1.1` (forward): {NO_FIGURES}"]


def test_lightning_time_profiler_callback_names_it_at_on_exception(tmp_path, capsys):
    """thunder's TimeProfiler callback alone (no stepwatch profiler on the Trainer): its
    on_exception names the module into the stepwatch.Profiler it was given."""
    pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger

    from stepwatch.thunder import TimeProfiler

    core = stepwatch.Profiler()
    lightning_fit(tmp_path, callbacks=[TimeProfiler(profiler=core)],
                  logger=CSVLogger(str(tmp_path / "logs")), profiler=False)
    assert json.loads(core.report("json"))["notes"]["oom_module"] == "net.1.1"
    core.close()
    assert named_lines(capsys.readouterr().err) == [
        f"stepwatch: out of memory in `net.1.1` (forward): {NO_FIGURES}"]


def test_ignite_names_it_at_exception_raised(capsys):
    pytest.importorskip("ignite")
    from ignite.engine import Engine

    from stepwatch.ignite import BasicTimeProfiler

    model = model_with(Boom(at=2))

    def step(engine, batch):
        return model(batch).sum().item()

    eng = Engine(step)
    prof = BasicTimeProfiler()
    prof.attach(eng)
    with pytest.raises(torch.OutOfMemoryError):
        eng.run([torch.randn(2, 4)] * 3, max_epochs=1)
    assert json.loads(prof.profiler.report("json"))["notes"]["oom_module"] == "1.1"
    assert len(named_lines(capsys.readouterr().err)) == 1


def test_fastai_fit_names_it_under_learn_model(capsys):
    pytest.importorskip("fastai.learner")
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from torch.utils.data import DataLoader, TensorDataset

    import stepwatch.fastai  # noqa: F401 (learn.profile)

    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 4))
    dls = DataLoaders(DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    learn = Learner(dls, model_with(Boom(at=2)), loss_func=torch.nn.MSELoss())
    learn.remove_cbs([cb for cb in learn.cbs if type(cb).__name__ == "ProgressCallback"])
    core = stepwatch.Profiler()
    learn.profile(profiler=core)
    with pytest.raises(torch.OutOfMemoryError):
        learn.fit(1)
    assert json.loads(core.report("json"))["notes"]["oom_module"] == "1.1"
    core.close()
    assert len(named_lines(capsys.readouterr().err)) == 1


def test_hugging_face_trainer_callback_names_it(tmp_path, capsys):
    """The Trainer gives callbacks no exception; the stepwatch.torch hooks the Callback
    installs see it leave the model."""
    pytest.importorskip("transformers")
    from hftruth import make_trainer

    from stepwatch.transformers import Callback

    trainer, _ = make_trainer(tmp_path, epochs=1, train=16, valid=0,
                              callbacks=[Callback(report=False)])
    attention = trainer.model.bert.encoder.layer[0].attention.output
    calls = []

    def forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise oom()
        return type(attention).forward(attention, *args, **kwargs)

    attention.forward = forward
    try:
        with pytest.raises(torch.OutOfMemoryError):
            trainer.train()
    finally:
        swtorch.uninstrument()
    assert named_lines(capsys.readouterr().err) == [
        "stepwatch: out of memory in `bert.encoder.layer.0.attention.output` (forward): "
        f"{NO_FIGURES}"]
