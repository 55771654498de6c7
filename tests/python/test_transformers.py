"""Zero-code stepwatch on the loops people train with (issue 27): the Hugging Face Trainer,
accelerate's Accelerator loop and Lightning, each with parts that nap known times and are
also timed by the loop itself in the same run (hftruth, torchtruth); and
stepwatch.transformers.Callback on a real Trainer.

What must hold: train steps == the Trainer's global_step, samples == the samples trained,
valid steps and samples == what the evaluation loop consumed (a batch belongs to the step
that consumes it: fetched ahead, or with grad on for a forward under no_grad), each
category within 10 % of the loop's own timer; the DataLoader's start-up is data under its
own name; the script's start-up is apart from "fit"; Lightning's closure is not optimizer
time; a loss written as the user's function around a torch functional loss is loss.
Tiny models from configs, nothing downloaded (HF_HUB_OFFLINE=1)."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from torch.utils.data import DataLoader  # noqa: E402

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402
from hftruth import NAP, make_trainer  # noqa: E402
from torchtruth import (MS, Batches, NapLoss, Truth, check, expect, model_and_opt,  # noqa: E402
                        nap, profiled, retried_on_load, steps_of, within)

F = torch.nn.functional


def total(steps, category):
    return sum(s[category + "_ns"] for s in steps)


def records(path, phase):
    return {r["action"]: r for r in stepwatch.load(path).records(phase)}


# ---- the Trainer, zero-code ---------------------------------------------------------------

TRAINER = {  # gradient accumulation, DataLoader workers, evaluation every N updates
    "ga1-w0-eval2": dict(accumulation=1, workers=0, eval_steps=2),
    "ga2-w0-eval1": dict(accumulation=2, workers=0, eval_steps=1),
    "ga2-w2-eval2": dict(accumulation=2, workers=2, eval_steps=2),
}


@pytest.mark.parametrize("case", list(TRAINER))
@retried_on_load
def test_trainer_counts_and_times(tmp_path, case):
    """32 samples in batches of 8, 2 epochs; 16 to validate in batches of 8. Accelerate's
    loader reads one batch ahead and the Trainer draws an update's micro-batches before its
    first forward; the evaluation loop fetches with grad on and runs the forward under
    no_grad: every batch must still be counted in the step that consumed it."""
    opts = TRAINER[case]
    trainer, clock = make_trainer(tmp_path, train=32, valid=16, epochs=2, **opts)
    with profiled(tmp_path) as (prof, path):
        trainer.train()
    train, valid = steps_of(path, "train"), steps_of(path, "valid")
    ga = opts["accumulation"]
    assert len(train) == trainer.state.global_step == 8 // ga
    assert [s["batch_size"] for s in train] == [8 * ga] * len(train)
    evaluations = trainer.state.global_step // opts["eval_steps"]
    assert len(valid) == clock.valid_steps == 2 * evaluations
    assert [s["batch_size"] for s in valid] == [8] * len(valid)
    rows = records(path, "train")
    assert rows["optimizer"]["count"] == len(train)
    for phase, steps in (("train", train), ("valid", valid)):
        parts = ("forward", "backward", "optimizer") if phase == "train" else ("forward",)
        if opts["workers"] == 0:  # the collator runs here: the loop's own timer of the fetch
            assert clock.samples[phase] == sum(s["batch_size"] for s in steps)
            parts += ("data",)
        for c in parts:
            expect(within(total(steps, c) / MS, clock.ns[phase][c] / MS),
                   (case, phase, c, total(steps, c) / MS, clock.ns[phase][c] / MS))
    if opts["workers"]:
        # the workers start at every new iterator: 2 epochs and every evaluation
        startup = records(path, "all")["dataloader_startup"]
        assert startup["count"] == 2 + evaluations
        assert startup["category"] == "data"


# ---- accelerate's Accelerator loop ---------------------------------------------------------

@retried_on_load
def test_accelerate_loop_one_batch_ahead(tmp_path):
    """accelerator.prepare()d loader (it reads one batch ahead), model and optimizer; the
    loop times its own parts. Every step consumed one batch of 4, and data follows it."""
    from accelerate import Accelerator
    accelerator = Accelerator(cpu=True)
    truth = Truth()
    model, opt = model_and_opt()
    loader = DataLoader(Batches(6), batch_size=None)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    loss_fn = NapLoss()
    with profiled(tmp_path) as (prof, path):
        for _epoch in range(2):
            for x, y in truth.loader(loader):
                with truth.part("zero_grad"):
                    opt.zero_grad()
                with truth.part("forward"):
                    out = model(x)
                with truth.part("loss"):
                    loss = loss_fn(out, y)
                with truth.part("backward"):
                    accelerator.backward(loss)
                opt.step()  # NapSGD times itself
                truth.step_done()
                nap("other")
    # the loop's timer of next() holds the fetch of the batch after (one ahead): per step
    # the two differ, their sums do not
    steps = check(path, truth, other=False, step_time=False)
    assert [s["batch_size"] for s in steps] == [4] * 12
    assert sum(s["batch_size"] for s in steps) == 48


# ---- Lightning, zero-code ----------------------------------------------------------------

@retried_on_load
def test_lightning_closure_is_not_the_optimizer(tmp_path):
    """Lightning runs training_step in the closure optimizer.step() calls. The optimizer's
    own time excludes the closure; the closure's work that is neither forward, loss nor
    backward (5 ms of user code after the loss here, Lightning's bookkeeping) is "closure"."""
    L = pytest.importorskip("lightning")
    import time
    from torchtruth import Net
    user_ns, nap_ns, steps_seen = [], [], []

    class NapSGD(torch.optim.SGD):
        """Its own work naps, timed apart from the closure its step calls."""

        def step(self, closure=None):
            t0 = time.perf_counter_ns()
            nap("optimizer")
            nap_ns.append(time.perf_counter_ns() - t0)
            return super().step(closure)

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def training_step(self, batch, i):
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            t0 = time.perf_counter_ns()
            time.sleep(0.005)  # the user's own code after the loss (self.log, metrics, ...)
            user_ns.append(time.perf_counter_ns() - t0)
            return loss

        def configure_optimizers(self):
            return NapSGD(self.parameters(), lr=0.01)

        def on_train_batch_end(self, *args):
            steps_seen.append(1)

    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    with profiled(tmp_path) as (prof, path):
        trainer.fit(Model(), DataLoader(Batches(6), batch_size=None))
    train = steps_of(path, "train")
    assert len(train) == trainer.global_step == len(steps_seen) == 6
    assert [s["batch_size"] for s in train] == [4] * 6
    rows = records(path, "train")
    opt_ns = rows["optimizer"]["total_ns"]
    expect(within(opt_ns / MS, sum(nap_ns) / MS), ("optimizer", opt_ns / MS, sum(nap_ns) / MS))
    closure = rows["closure"]
    assert closure["category"] == "other" and closure["count"] == 6
    expect(closure["self_ns"] >= sum(user_ns), ("closure", closure["self_ns"] / MS, closure["total_ns"] / MS, rows["forward"]["total_ns"] / MS,
                                                sum(user_ns) / MS))


# ---- the loss as the user's function --------------------------------------------------------

def user_loss(out, y):
    """The user's loss: its own work, then a torch functional loss."""
    nap("loss")
    return F.mse_loss(out, y)


@retried_on_load
def test_a_user_loss_function_around_a_functional_loss_is_the_loss(tmp_path):
    truth = Truth()
    model, opt = model_and_opt()
    with profiled(tmp_path) as (prof, path):
        for x, y in truth.loader(DataLoader(Batches(5), batch_size=None)):
            with truth.part("zero_grad"):
                opt.zero_grad()
            with truth.part("forward"):
                out = model(x)
            with truth.part("loss"):
                loss = user_loss(out, y)
            with truth.part("backward"):
                loss.backward()
            opt.step()
            truth.step_done()
            nap("other")
    check(path, truth)


# ---- start-up: the DataLoader's and the script's ---------------------------------------------

SCRIPT = """
import sys, time, torch
sys.path.insert(0, {tests!r})
from torch.utils.data import DataLoader
from torchtruth import Batches, Net, NapLoss
time.sleep(0.5)   # the script's own start-up: imports, building the model
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Batches(4, nap_s=0.002), batch_size=None, num_workers=2)
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        NapLoss()(model(x), y).backward()
        opt.step()
"""


def test_startup_and_loader_startup_are_reported_apart(tmp_path):
    """A script that takes 0.5 s before its loop, and a DataLoader with 2 workers started at
    each of its 2 epochs: "startup" holds the first, "dataloader_startup" (data, in the
    first step of each epoch) the second; diagnose names the loader's start-up, not idle
    time between steps."""
    import subprocess
    import sys
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__))))
    db = tmp_path / "run.db"
    done = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--run-file", str(db),
                           "--", "python", str(script)], capture_output=True, text=True,
                          timeout=600, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    snap = stepwatch.load(str(db))
    rows = {(r["action"], r["phase"]): r for r in snap.records()}
    startup = rows[("startup", "fit")]
    assert startup["count"] == 1 and startup["total_ns"] >= 500 * MS
    fit = rows[("fit", "all")] if ("fit", "all") in rows else None
    if fit is not None:
        assert fit["self_ns"] < startup["total_ns"]
    loader = rows[("dataloader_startup", "train")]
    assert loader["count"] == 2 and loader["category"] == "data"
    first = [s for s in steps_of(str(db), "train")][::4]
    assert all(s["data_ns"] >= loader["min_ns"] for s in first)
    report = snap.report(full_names=True)
    assert "dataloader_startup" in report and "startup" in report
    text = stepwatch.diagnose(str(db))
    assert "Idle between steps" not in text
    if loader["total_ns"] >= 0.05 * snap.info()["wall_ns"]:
        assert "DataLoader start-up" in text


# ---- stepwatch.transformers.Callback ---------------------------------------------------------

@pytest.mark.parametrize("added", ["callbacks=", "add_callback"])
@retried_on_load
def test_callback_logs_reports_and_counts(tmp_path, added):
    """The Trainer's own semantics (train steps = global_step, evaluation batches as valid
    steps), the figures in every log at logging_steps (log_history, and the report_to
    loggers: TensorBoard's event files here), the report at the end. The callback passed to
    the Trainer or added to it after (no on_init_end then) goes ahead of the loggers."""
    from transformers.integrations import TensorBoardCallback

    from stepwatch.transformers import Callback
    out = tmp_path / "report.txt"
    cb = Callback(run_file=str(tmp_path / "cb.db"), output=str(out))
    trainer, clock = make_trainer(tmp_path, train=32, valid=16, epochs=1, accumulation=2,
                                  eval_steps=2, logging_steps=1,
                                  callbacks=[cb] if added == "callbacks=" else [],
                                  report_to="tensorboard")
    if added == "add_callback":
        trainer.add_callback(cb)
    trainer.train()
    order = [type(c) for c in trainer.callback_handler.callbacks]
    assert order.index(Callback) < order.index(TensorBoardCallback), order
    assert trainer.state.global_step == 2
    train, valid = steps_of(str(tmp_path / "cb.db"), "train"), steps_of(str(tmp_path / "cb.db"),
                                                                        "valid")
    assert len(train) == 2 and [s["batch_size"] for s in train] == [16, 16]
    assert len(valid) == clock.valid_steps == 2
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    for h in logs:
        assert h["stepwatch/samples_per_s"] > 0
        assert h["stepwatch/forward_ms"] > NAP["forward"] * 1e3 * 0.9
        assert set(h) >= {"stepwatch/step_ms", "stepwatch/data_ms", "stepwatch/backward_ms",
                          "stepwatch/optimizer_ms"}
    # the report_to logger got them (TensorBoard's scalars, read back from its files)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    runs = [d for d, _, files in os.walk(tmp_path / "out") if any("tfevents" in f for f in files)]
    assert runs, "no TensorBoard event file"
    tags = EventAccumulator(runs[0]).Reload().Tags()["scalars"]
    assert any("stepwatch/samples_per_s" in t for t in tags), tags
    text = out.read_text()
    assert "step" in text and "forward" in text
    assert cb.report_text == text
