"""The user's exceptions pass through stepwatch unchanged (docs/reliability.md): every call a
stepwatch hook wraps (python/_stepwatch/: instrument()'s torch hooks, Profiler(modules=...),
the function profiler's watchers, the Ignite and Lightning front ends) raises a distinctive
exception of the user's, and the same object arrives, with its message and the traceback
whose last frame is the line that raised it: no SystemError, nothing chained to it, nothing
reported as unraisable. Where the loop catches it and goes on, the later steps are recorded
as usual (an optimizer step that raised gets no post-hook from torch: the next one must still
count). Real torch, Ignite and Lightning on the CPU."""
import json
import subprocess
import sys
import textwrap
import time
import traceback

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402


class Marked(Exception):
    """Raised by the user's code below, and by nothing else in the run."""


RAISED = []  # every Marked raised, in order
FAIL = set()  # where the user's code raises now


def boom(where):
    err = Marked(f"the user's {where} failed")
    RAISED.append(err)
    raise err


BOOM_LINE = boom.__code__.co_firstlineno + 3  # the `raise err` line


def fails(where):
    if where in FAIL:
        boom(where)


def caught(call, *args):
    """What call(*args) raised, checked to be the user's own exception, as raised."""
    before = len(RAISED)
    try:
        call(*args)
    except BaseException as exc:  # noqa: B036 -- whatever arrives is looked at
        assert len(RAISED) == before + 1, "the user's code did not raise"
        assert exc is RAISED[-1], f"{type(exc).__name__}: {exc}"
        assert type(exc) is Marked and str(exc) == str(RAISED[-1])
        last = traceback.extract_tb(exc.__traceback__)[-1]
        assert (last.filename, last.name, last.lineno) == (__file__, "boom", BOOM_LINE)
        assert exc.__context__ is None and exc.__cause__ is None
        return exc
    raise AssertionError("nothing was raised")


@pytest.fixture(autouse=True)
def no_unraisable(monkeypatch):
    """Nothing of stepwatch's is reported as unraisable meanwhile (a lost exception would)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    FAIL.clear()
    yield
    FAIL.clear()
    assert not seen, [(u.exc_type, u.exc_value, u.object) for u in seen]


@pytest.fixture
def profiler():
    """Profilers closed after the test, also when an assertion failed (modules=: the hooks on
    nn.Module.__call__ go with it)."""
    made = []

    def make(**options):
        made.append(stepwatch.Profiler(**options))
        return made[-1]
    yield make
    for prof in made:
        prof.close()


# ---- a plain PyTorch loop, every part of it the user's ---------------------------------------

class Batch:
    """A batch class with its own .to (the copy hook times it while the batch waits)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def to(self, device):
        fails("copy")
        return Batch(self.x.to(device), self.y.to(device))


class Samples(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        fails("fetch")
        return self.x[i], self.y[i]


def collate(items):
    return Batch(torch.stack([x for x, _ in items]), torch.stack([y for _, y in items]))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.head = Head()

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


class Head(torch.nn.Module):  # a submodule: Profiler(modules=...) times it apart
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def forward(self, x):
        fails("forward")
        return Explode.apply(self.lin(x))


class Explode(torch.autograd.Function):
    """Identity; its backward is the user's and may raise."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        fails("backward")
        return grad


class LossModule(torch.nn.MSELoss):
    def forward(self, out, y):
        fails("loss module")
        return super().forward(out, y)


class Poisoned(torch.Tensor):
    """A target whose first torch function raises: inside the functional loss's own call."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        fails("functional loss")
        return super().__torch_function__(func, types, args, kwargs or {})


def loss_function(out, y):
    """The user's own loss function, around a functional loss (timed whole)."""
    loss = torch.nn.functional.mse_loss(out, y)
    fails("loss function")
    return loss


# torch wraps a class's step in its hooks when the first optimizer of that class is made: with
# SGD's wrapped too, Optimizer.step below runs a hooked step inside its own (a step in a step),
# as in any program that made an SGD first.
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


class Optimizer(torch.optim.SGD):
    def zero_grad(self, set_to_none=True):
        fails("zero_grad")
        super().zero_grad(set_to_none)

    def step(self, closure=None):
        fails("optimizer step")
        return super().step(closure)


def closure():
    fails("closure")


class Loop:
    def __init__(self, loss="module"):
        torch.manual_seed(0)
        self.model = Net()
        self.opt = Optimizer(self.model.parameters(), lr=0.01)
        self.batches = iter(DataLoader(Samples(), batch_size=4, collate_fn=collate))
        self.loss = loss

    def step(self):
        batch = next(self.batches).to("cpu")
        self.opt.zero_grad()
        out = self.model(batch.x)
        if self.loss == "module":
            loss = LossModule()(out, batch.y)
        elif self.loss == "functional":
            target = batch.y.as_subclass(Poisoned) if FAIL else batch.y
            loss = torch.nn.functional.mse_loss(out, target)
        else:
            loss = loss_function(out, batch.y)
        loss.backward()
        self.opt.step(closure)

    def failing_step(self, where):
        FAIL.add(where)
        try:
            return caught(self.step)
        finally:
            FAIL.discard(where)


def modules_of(prof):
    return {r["path"]: r for r in json.loads(prof.report("json"))["modules"]["rows"]}


def counts(prof):
    return {r["action"]: r["count"] for r in prof.records("train")}


def misuse(prof):
    return {k: v for k, v in prof.snapshot().info()["misuse"].items() if v}


WHERE = [  # (where the user's code raises, the loss the loop uses)
    ("fetch", "module"), ("copy", "module"), ("zero_grad", "module"), ("forward", "module"),
    ("loss module", "module"), ("functional loss", "functional"),
    ("loss function", "function"), ("backward", "module"), ("closure", "module"),
    ("optimizer step", "module"),
]


@pytest.mark.parametrize("where, loss", WHERE)
@pytest.mark.parametrize("options", [{}, {"forward": "hooks"}, {"functions": True},
                                     {"modules": True}], ids=["patch", "hooks", "functions",
                                                              "modules"])
def test_instrument_passes_each_exception_and_the_loop_goes_on(profiler, where, loss, options):
    """instrument()'s hooks, alone or with the function profiler watching every part (its
    profile function switched off as the exception leaves) or Profiler(modules=...)."""
    kwargs = {}
    if options.get("functions"):
        kwargs = dict(functions=["data", "h2d_copy", "zero_grad", "forward", "loss",
                                 "backward", "closure", "optimizer"], builtins=True)
    prof = profiler(name="exceptions", modules=1 if options.get("modules") else False, **kwargs)
    loop = Loop(loss)
    with swtorch.instrument(prof, forward=options.get("forward", "patch")):
        for _ in range(3):
            loop.step()
        before = counts(prof)
        loop.failing_step(where)
        loop.failing_step(where)  # twice in a row: an optimizer step left open twice
        for _ in range(2):
            loop.step()
    after = counts(prof)
    # the two steps after the failures are whole: their optimizer steps are recorded and end
    # their steps (those of the failed iterations are in the next one's step)
    assert after["optimizer"] == before["optimizer"] + 2, (before, after)
    assert after["step"] == before["step"] + 2, (before, after)
    assert after["forward"] >= before["forward"] + 2
    assert misuse(prof) == {}
    if options.get("modules"):
        assert modules_of(prof)["head"]["forward_calls"] >= 4  # step 0 is warm-up: left out


def test_a_step_inside_a_step_is_still_one_optimizer_step(profiler):
    """What tells a failed step from a nested one: a step of another optimizer inside an
    optimizer's step (Lookahead, ZeRO) is the outer step's, once, from its start to its end
    (the outer step sleeps after the inner one returned)."""
    class Outer(torch.optim.SGD):
        def __init__(self, params, inner):
            super().__init__(params, lr=0.0)
            self.inner = inner

        def step(self, closure=None):
            self.inner.step()
            time.sleep(0.005)
            return super().step(closure)

    prof = profiler(name="nested")
    model = torch.nn.Linear(4, 1)
    opt = Outer(model.parameters(), torch.optim.SGD(model.parameters(), lr=0.01))
    x = torch.randn(8, 4)
    with swtorch.instrument(prof):
        for _ in range(4):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    c = counts(prof)
    assert c["optimizer"] == 4 and c["step"] == 4, c
    optimizer = {r["action"]: r for r in prof.records("train")}["optimizer"]
    assert optimizer["total_ns"] >= 4 * 5_000_000
    assert misuse(prof) == {}


def test_modules_with_the_allocators_reader_pass_the_forwards_exception(profiler):
    """Profiler(modules=...) reads the CUDA allocator after each sampled module call when
    torch has CUDA: after a call that raised too. That read (torch.cuda.memory_allocated,
    which answers 0 here) ran with the exception set and cleared it (a SystemError: error
    return without exception set). CUDA is said to be there while the profiler is made."""
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        prof = profiler(name="modules-cuda", modules=1)
    finally:
        torch.cuda.is_available = real
    model = Net()
    x = torch.randn(4, 4)
    model(x).sum().backward()
    FAIL.add("forward")
    caught(model, x)
    FAIL.clear()
    model(x).sum().backward()
    assert modules_of(prof)["head"]["forward_calls"] == 2  # the first step is warm-up: left out


# ---- Ignite -------------------------------------------------------------------------------------

@pytest.mark.parametrize("profiler", ["BasicTimeProfiler", "HandlersTimeProfiler"])
def test_ignite_handler_exception_arrives_and_the_next_run_is_profiled(profiler):
    """A handler of an iteration event raises: through stepwatch's _fire_event (FireEvent) or
    its per-handler timer (HandlerTimer). Ignite re-raises it as it would alone."""
    pytest.importorskip("ignite")
    from ignite.engine import Engine, Events
    import stepwatch.ignite as swignite

    eng = Engine(lambda engine, batch: batch.sum().item())

    @eng.on(Events.ITERATION_COMPLETED)
    def check(engine):
        if engine.state.iteration == 3:
            fails("handler")

    prof = getattr(swignite, profiler)()
    prof.attach(eng)
    FAIL.add("handler")
    caught(eng.run, [torch.ones(2)] * 5, 1)
    FAIL.clear()
    eng.state.max_epochs = None  # Ignite's way to run again from the start
    eng.run([torch.ones(2)] * 5, max_epochs=1)
    rows = {r["action"]: r["count"] for r in prof.records("all")}
    assert rows["processing"] == 5, rows
    assert misuse(prof.profiler) == {}


# ---- Lightning ----------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["training_step", "transfer_batch_to_device", "loss module"])
def test_lightning_exception_arrives_through_the_profiler(where, tmp_path):
    """stepwatch.lightning.Profiler's spans, its batch_to_device tap and its timed loss
    modules: Lightning re-raises the user's exception after its teardown."""
    L = pytest.importorskip("lightning")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
            self.crit = LossModule()

        def training_step(self, batch, i):
            x, y = batch
            if i == 2:
                fails("training_step")
                return self.crit(self.lin(x), y)  # a loss module, timed by the profiler
            return torch.nn.functional.mse_loss(self.lin(x), y)

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            if self.trainer.global_step == 2:
                fails("transfer_batch_to_device")
            return super().transfer_batch_to_device(batch, device, dataloader_idx)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    from stepwatch.lightning import Profiler
    data = DataLoader(torch.utils.data.TensorDataset(torch.randn(20, 4), torch.randn(20, 1)),
                      batch_size=4)
    prof = Profiler(dirpath=str(tmp_path), filename="failed")
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=0, profiler=prof)
    FAIL.add(where)
    caught(trainer.fit, Module(), data)
    FAIL.clear()
    rows = {r["action"]: r["count"] for r in prof.records("all")}
    assert rows["run_training_batch"] >= 2, rows
    assert prof.unbalanced == 0


# ---- a whole run under -X dev and -W error ------------------------------------------------------

DEV_SCRIPT = """
import sys, traceback, torch, stepwatch, stepwatch.torch as swtorch

class Marked(Exception):
    pass

def boom():
    raise Marked("mine")

class Explode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        boom()

class Failing(torch.optim.SGD):
    fail = False

    def step(self, closure=None):
        if self.fail:
            boom()
        return super().step(closure)

prof = stepwatch.Profiler(name="dev", functions=["forward", "backward", "optimizer"],
                          builtins=True)
model = torch.nn.Linear(4, 1)
opt = Failing(model.parameters(), lr=0.01)
x = torch.randn(8, 4)
swtorch.instrument(prof)
for part in ("ok", "backward", "optimizer", "ok", "ok"):
    opt.zero_grad()
    out = model(x)
    opt.fail = part == "optimizer"
    try:
        (Explode.apply(out) if part == "backward" else out).sum().backward()
        opt.step()
    except Marked as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        print(part, type(exc).__name__, exc, last.name, exc.__context__)
swtorch.uninstrument()
print("optimizer", {r["action"]: r["count"] for r in prof.records("train")}["optimizer"])
"""


def test_under_dev_mode_and_warnings_as_errors(tmp_path):
    """python -X dev (the interpreter's debug checks: its allocator hooks, faulthandler) and
    -W error (a warning of stepwatch's in these paths would become an exception of its own,
    replacing the user's): the same exceptions, and nothing on stderr."""
    script = tmp_path / "dev.py"
    script.write_text(textwrap.dedent(DEV_SCRIPT))
    done = subprocess.run([sys.executable, "-X", "dev", "-W", "error", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["backward Marked mine boom None",
                                        "optimizer Marked mine boom None",
                                        "optimizer 3"], done.stdout
    assert done.stderr == ""
