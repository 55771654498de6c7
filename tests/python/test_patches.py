"""Another tool's patches survive stepwatch's undoing (docs/reliability.md, "Patches").

For every attribute stepwatch patches, another wrapper is installed over ours after
instrument() (as TraceML, accelerate's hooks or a user's debug wrapper would); after
uninstrument() that wrapper is still the attribute and still runs, ours under it records
nothing more, and one stderr line names what was left. A clean instrument()/uninstrument()
puts back the very objects that were there before.
"""
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data import dataloader as _dataloader  # noqa: E402
import torch.optim.optimizer as _optim  # noqa: E402

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402

F = torch.nn.functional

# (owner, attribute) of every patch instrument() makes on a CPU torch (the batch class's own
# to is patched only for a batch class that has one: see test_a_batch_class_to_survives).
PATCHED = [
    (_dataloader._BaseDataLoaderIter, "__next__"),
    (_dataloader.DataLoader, "__iter__"),
    (torch.Tensor, "to"),
    (torch.Tensor, "cuda"),
    (torch.nn.Module, "__call__"),
    (F, "mse_loss"),
    (F, "cross_entropy"),
    (torch.autograd, "backward"),
    (torch.optim.Optimizer, "zero_grad"),
    (torch.nn.Module, "zero_grad"),
    (torch, "compile"),
]


def _other_wrapper(owner, name, calls):
    """What another tool does: wrap whatever is there now, count its calls."""
    inner = getattr(owner, name)
    key = f"{getattr(owner, '__name__', owner)}.{name}"

    def other(*args, **kwargs):
        calls[key] = calls.get(key, 0) + 1
        return inner(*args, **kwargs)
    other.__wrapped__ = inner
    setattr(owner, name, other)
    return key


def _train(steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(4 * steps, 8), torch.randn(4 * steps, 1)),
                        batch_size=4)
    for x, y in loader:
        x, y = x.to("cpu"), y.to(torch.float32)
        opt.zero_grad()
        model.zero_grad()
        loss = F.mse_loss(model(x), y) + 0 * F.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1]))
        torch.autograd.backward(loss)
        opt.step()
    torch.compile(lambda t: t + 1, backend="eager")
    try:
        torch.randn(1).cuda()
    except (AssertionError, RuntimeError):  # a CPU torch: the call still went through
        pass


def _put_back(originals):
    """Undo the other tool's wrappers: each attribute as it was in its owner's __dict__."""
    for (owner, name), original in zip(PATCHED, originals):
        if original is not None:
            setattr(owner, name, original)
        elif name in owner.__dict__:
            delattr(owner, name)


def _counts(prof):
    return {(r["action"], r["phase"]): r["count"] for r in prof.records()}


def test_clean_uninstrument_restores_the_exact_objects():
    before = [owner.__dict__.get(name) for owner, name in PATCHED]
    prof = stepwatch.Profiler(name="patches-clean")
    swtorch.instrument(prof)
    try:
        assert all(owner.__dict__.get(name) is not b
                   for (owner, name), b in zip(PATCHED, before)), "something was not patched"
    finally:
        swtorch.uninstrument()
    after = [owner.__dict__.get(name) for owner, name in PATCHED]
    assert all(a is b for a, b in zip(after, before)), [
        f"{o}.{n}" for (o, n), a, b in zip(PATCHED, after, before) if a is not b]
    prof.close()


def test_a_wrapper_made_after_ours_survives_uninstrument(capfd):
    originals = [owner.__dict__.get(name) for owner, name in PATCHED]
    prof = stepwatch.Profiler(name="patches-over")
    swtorch.instrument(prof)
    calls = {}
    wrappers = []
    try:
        for owner, name in PATCHED:
            _other_wrapper(owner, name, calls)
            wrappers.append(owner.__dict__[name])
        _train()
        assert _counts(prof).get(("step", "train"), 0) >= 3
        capfd.readouterr()
        swtorch.uninstrument()
        err = capfd.readouterr().err
        # said once, naming what was left
        assert err.count("left ") == 1, err
        assert "torch.nn.modules.module.Module.__call__" in err and "torch.compile" in err, err
        # the other tool's wrappers are still there...
        still = [owner.__dict__.get(name) for owner, name in PATCHED]
        assert all(s is w for s, w in zip(still, wrappers)), [
            f"{o}.{n}" for (o, n), s, w in zip(PATCHED, still, wrappers) if s is not w]
        seen = _counts(prof)
        calls.clear()
        _train()
        # ...and still run (each of them)...
        assert sorted(calls) == sorted(f"{getattr(o, '__name__', o)}.{n}" for o, n in PATCHED)
        # ...while ours under them records nothing more
        assert _counts(prof) == seen
    finally:
        swtorch.uninstrument()
        _put_back(originals)
        prof.close()


def test_an_optimizer_hook_of_another_tool_survives():
    prof = stepwatch.Profiler(name="patches-hooks")
    swtorch.instrument(prof)
    seen = []
    handle = _optim.register_optimizer_step_post_hook(
        lambda opt, args, kwargs: seen.append(1))
    try:
        swtorch.uninstrument()
        _train(2)
        assert len(seen) == 2
    finally:
        handle.remove()
        prof.close()


def test_a_batch_class_to_survives():
    class Batch:
        def __init__(self, x):
            self.x = x

        def to(self, device):
            return Batch(self.x.to(device))

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return Batch(torch.randn(2, 8))

    original = Batch.__dict__["to"]
    prof = stepwatch.Profiler(name="patches-batch")
    swtorch.instrument(prof)
    calls = {}
    try:
        model = torch.nn.Linear(8, 1)
        for b in DataLoader(Items(), batch_size=None):
            model(b.to("cpu").x).sum().backward()
        assert Batch.__dict__["to"] is not original  # ours
        _other_wrapper(Batch, "to", calls)
        other = Batch.__dict__["to"]
        swtorch.uninstrument()
        assert Batch.__dict__["to"] is other
        seen = _counts(prof)
        Batch(torch.randn(1)).to("cpu")
        assert calls and _counts(prof) == seen
    finally:
        swtorch.uninstrument()
        Batch.to = original
        prof.close()


def test_modules_hooks_left_under_another_wrapper_record_nothing(capfd):
    original = torch.nn.Module.__dict__["__call__"]
    prof = stepwatch.Profiler(name="patches-modules", modules=1)
    calls = {}
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        model(torch.randn(2, 4)).sum().backward()
        _other_wrapper(torch.nn.Module, "__call__", calls)
        other = torch.nn.Module.__dict__["__call__"]
        capfd.readouterr()
        prof.close()
        assert "left torch.nn.modules.module.Module.__call__" in capfd.readouterr().err
        assert torch.nn.Module.__dict__["__call__"] is other
        model(torch.randn(2, 4))
        assert calls
    finally:
        torch.nn.Module.__call__ = original


def test_ddp_patches_of_another_tool_survive_unwatch():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    import stepwatch.distributed as swdist
    if not dist.is_available():
        pytest.skip("no torch.distributed")
    originals = (DistributedDataParallel.__dict__["forward"], dist.destroy_process_group)
    prof = stepwatch.Profiler(name="patches-ddp")
    swdist.watch(prof, quiet=True)
    calls = {}
    try:
        _other_wrapper(DistributedDataParallel, "forward", calls)
        other = DistributedDataParallel.__dict__["forward"]
        swdist.unwatch()
        assert DistributedDataParallel.__dict__["forward"] is other
    finally:
        swdist.unwatch()
        DistributedDataParallel.forward = originals[0]
        dist.destroy_process_group = originals[1]
        dist.distributed_c10d.destroy_process_group = originals[1]
        prof.close()


LIGHTNING = textwrap.dedent("""
    import functools, sys, torch, lightning.pytorch as pl
    import stepwatch
    from stepwatch.lightning import Profiler
    from torch.utils.data import DataLoader, TensorDataset

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(8, 1)
        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.l(x), y)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class OtherTool(pl.Callback):  # wraps the strategy's batch_to_device after stepwatch
        calls = 0
        def on_train_start(self, trainer, pl_module):
            inner = trainer.strategy.batch_to_device
            def other(*a, **k):
                OtherTool.calls += 1
                return inner(*a, **k)
            trainer.strategy.batch_to_device = other
            OtherTool.wrapper = other

    prof = Profiler()
    data = DataLoader(TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=4)
    trainer = pl.Trainer(max_epochs=1, profiler=prof, callbacks=[OtherTool()], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    trainer.fit(M(), data)
    strategy = trainer.strategy
    assert strategy.__dict__.get("batch_to_device") is OtherTool.wrapper, "removed"
    rows = {r["action"]: r["count"] for r in prof.records("all")}
    before = rows.get("h2d_copy", 0)
    assert before == 8, rows
    OtherTool.calls = 0
    strategy.batch_to_device(torch.randn(2, 8))
    rows = {r["action"]: r["count"] for r in prof.records("all")}
    assert OtherTool.calls == 1 and rows.get("h2d_copy", 0) == before, (OtherTool.calls, rows)
    print("OK")
""")


def test_lightning_strategy_wrapper_of_another_tool_survives(tmp_path):
    pytest.importorskip("lightning")
    script = tmp_path / "lt.py"
    script.write_text(LIGHTNING)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    assert "left Strategy" in out.stderr or "(instance).batch_to_device" in out.stderr
