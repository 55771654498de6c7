"""The batch's copy to the device (issue 32, item 5): timed as "h2d_copy", a part of data.

On the CPU a copy to the CPU is nearly free, so the ground truth is a batch class whose own
`to` (the pattern of a dataclass of tensors; Lightning's batch_to_device and accelerate's
send_to_device call it) sleeps and measures how long it slept. Its copies must land in
h2d_copy within 10 %, one span per batch, and not in forward or the data wait; the model's
own casts and a model.to() are no batch copy. Real torch, Lightning, accelerate and a real
Hugging Face Trainer.
"""
import time

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402

from conftest import within  # noqa: E402

COPY_S = 0.010


class Batch:
    """A user's batch type: its to() copies its tensors and sleeps, timing itself."""

    slept_ns = 0
    calls = 0

    def __init__(self, x, y):
        self.x, self.y = x, y

    def to(self, device, non_blocking=False, **kwargs):
        t0 = time.perf_counter_ns()
        time.sleep(COPY_S)
        moved = Batch(self.x.to(device, non_blocking=non_blocking),
                      self.y.to(device, non_blocking=non_blocking))
        Batch.slept_ns += time.perf_counter_ns() - t0
        Batch.calls += 1
        return moved

    def __len__(self):
        return len(self.x)


class Pairs(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def collate(items):
    return Batch(torch.stack([a for a, _ in items]), torch.stack([b for _, b in items]))


class Casting(torch.nn.Module):
    """Casts its input (a Tensor.to inside the model: no batch copy)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.lin(x.to(torch.float32))


@pytest.fixture
def prof(tmp_path):
    Batch.slept_ns = Batch.calls = 0
    p = stepwatch.Profiler(name="h2d-test", run_file=str(tmp_path / "run.db"))
    yield p
    swtorch.uninstrument()


def rows(p, phase="train"):
    return {r["action"]: r for r in p.records(phase)}


def test_a_batch_class_copy_is_h2d_copy_not_forward_or_data(prof, tmp_path):
    model = Casting()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with swtorch.instrument(prof):
        model.to("cpu")  # no batch held: not a copy of one
        for batch in DataLoader(Pairs(32), batch_size=4, collate_fn=collate):
            batch = batch.to("cpu", non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(batch.x), batch.y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    r = rows(prof)
    assert Batch.calls == 8
    assert r["h2d_copy"]["count"] == 8  # one per batch: the nested Tensor.to are its own
    assert within(r["h2d_copy"]["total_ns"], Batch.slept_ns), (r["h2d_copy"], Batch.slept_ns)
    assert r["forward"]["total_ns"] < 0.5 * Batch.slept_ns
    assert r["data"]["total_ns"] < 0.5 * Batch.slept_ns
    assert r["h2d_copy"]["category"] == "data"
    # per step, the copy is data: each step's data holds its copy
    prof.close()
    steps = [s for s in stepwatch.load_steps(str(tmp_path / "run.db")) if s["phase"] == "train"]
    assert len(steps) == 8
    assert all(s["data_ns"] >= COPY_S * 1e9 for s in steps), [s["data_ns"] for s in steps]


def test_tensor_copies_one_span_per_batch_and_never_the_models_casts(prof):
    model = Casting()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Pairs(24), batch_size=4)
    with swtorch.instrument(prof):
        for x, y in loader:
            x, y = x.to(torch.float64, non_blocking=True), y.to(torch.float64)
            out = model(x)  # casts back inside the model
            loss = torch.nn.functional.mse_loss(out, y.to(torch.float32))  # after the forward
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.to(torch.float64)  # after the loop: no batch held
    r = rows(prof)
    # x and y copied before the forward: one span; the cast of y after the forward, the
    # model's cast and model.to are none
    assert r["h2d_copy"]["count"] == 6
    assert [x["count"] for x in prof.records() if x["action"] == "h2d_copy"
            and x["phase"] not in ("train", "all")] == []


def test_uninstrument_restores_tensor_to_and_the_batch_class(prof):
    to, cuda = torch.Tensor.to, torch.Tensor.cuda
    assert "to" not in torch.Tensor.__dict__
    original = Batch.__dict__["to"]
    with swtorch.instrument(prof):
        for batch in DataLoader(Pairs(8), batch_size=4, collate_fn=collate):
            assert type(Batch.__dict__["to"]).__name__ == "LoopHook"
            batch.to("cpu")
    assert "to" not in torch.Tensor.__dict__ and "cuda" not in torch.Tensor.__dict__
    assert torch.Tensor.to is to and torch.Tensor.cuda is cuda
    assert Batch.__dict__["to"] is original


def test_lightning_batch_to_device_is_h2d_copy(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from stepwatch.lightning import Profiler
    Batch.slept_ns = Batch.calls = 0

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def training_step(self, batch, i):
            return torch.nn.functional.mse_loss(self.lin(batch.x), batch.y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    prof = Profiler(run_file=str(tmp_path / "l.db"))
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, accelerator="cpu", profiler=prof)
    trainer.fit(Model(), DataLoader(Pairs(24), batch_size=4, collate_fn=collate))
    assert Batch.calls == 6  # Lightning's batch_to_device called the batch's own to
    r = {x["action"]: x for x in prof.profiler.records("train")}
    assert r["h2d_copy"]["count"] == 6
    assert within(r["h2d_copy"]["total_ns"], Batch.slept_ns), (r["h2d_copy"], Batch.slept_ns)
    prof.profiler.close()
    steps = stepwatch.load_steps(prof.run_file)
    train = [s for s in steps if s["phase"] == "train"]
    assert len(train) == 6
    assert sum(s["data_ns"] for s in train) >= 0.9 * Batch.slept_ns


def test_accelerate_send_to_device_is_h2d_copy(prof):
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Pairs(24), batch_size=4, collate_fn=collate)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    with swtorch.instrument(prof):
        for batch in loader:  # the prepared loader moves each batch: send_to_device
            loss = torch.nn.functional.mse_loss(model(batch.x), batch.y)
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
    r = rows(prof)
    assert Batch.calls == 6
    assert r["h2d_copy"]["count"] == 6
    assert within(r["h2d_copy"]["total_ns"], Batch.slept_ns), (r["h2d_copy"], Batch.slept_ns)
    assert r["forward"]["total_ns"] < 0.5 * Batch.slept_ns


def test_hf_trainer_prepare_inputs_is_h2d_copy(tmp_path):
    pytest.importorskip("transformers")
    from hftruth import tiny_bert
    from transformers import Trainer, TrainingArguments
    from stepwatch.transformers import Callback

    class Tokens(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 64, (8,), generator=g),
                    "labels": torch.tensor(i % 2)}

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4,
                             num_train_epochs=1, report_to=[], use_cpu=True, save_strategy="no",
                             logging_strategy="no", disable_tqdm=True)
    cb = Callback(run_file=str(tmp_path / "hf.db"), output=str(tmp_path / "report.txt"))
    Trainer(model=tiny_bert(), args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    r = {x["action"]: x for x in stepwatch.load(str(tmp_path / "hf.db")).records("train")}
    assert r["h2d_copy"]["count"] == 4  # _prepare_inputs of each of the 4 batches
    assert r["h2d_copy"]["total_ns"] > 0
