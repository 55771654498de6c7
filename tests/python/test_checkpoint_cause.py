"""Checkpoint saving timed as "checkpoint" in the frameworks' own savers (docs/slow-steps.md):
Lightning's trainer.save_checkpoint (ModelCheckpoint every n training steps) under
stepwatch.lightning.Profiler, and the Hugging Face Trainer's _save_checkpoint (save_steps)
under stepwatch.transformers.Callback. Real Trainers, tiny local models, nothing
downloaded. The save is made slow by the model's own saving hook (a slow disk, as it were):
the step it falls in must be slow for that reason, each save one "checkpoint" span (the
torch.save calls inside are not counted again), and no other step called a checkpoint."""
import os
import time

import pytest

torch = pytest.importorskip("torch")

import stepwatch  # noqa: E402
from test_slow_steps import MACHINE, named_ns, slow_steps  # noqa: E402

SAVE_NAP = 0.4  # the saving hook's nap, s: many times a tiny model's step


def slow_disk():
    """SAVE_NAP in 40 waits, as a slow disk's writes are (one sleep would be one voluntary
    switch, fewer than the preemptions of a loaded machine: then the OS's rule reads the
    whole wait as preemption)."""
    for _ in range(40):
        time.sleep(SAVE_NAP / 40)


def checkpoint_row(path):
    return {r["action"]: r for r in stepwatch.load(path).records("all")}["checkpoint"]


def check(path, saves, outside=0, restarts=()):
    """The checkpoint row counts one span per save, the nap inside each; every step that
    saved is slow with the save's time in it, and called a checkpoint unless the OS's reading
    says the machine took more of it (sw_slow_cause's rule, as test_slow_steps reads it: the
    save's time less the off-CPU time, when preemptions outnumber waits); no other step is
    called a checkpoint. outside: how many more saves were made in no step; restarts: the
    first steps of a new loop over the loader (its start-up and first fetch: data may be
    their cause)."""
    row = checkpoint_row(path)
    assert row["count"] + row["warmup_count"] == len(saves) + outside, row
    assert row["total_ns"] + row["warmup_total_ns"] >= (len(saves) + outside) * SAVE_NAP * 1e9
    slow = slow_steps(path)
    seen = {s: (r["cause"], r["duration_ns"], r["checkpoint_ns"]) for s, r in slow.items()}
    for s in saves:
        r = slow.get(s)
        assert r is not None and r["checkpoint_ns"] >= SAVE_NAP * 1e9, (s, seen)
        explains = 2 * named_ns(r, "checkpoint") >= r["duration_ns"] - r["median_ns"]
        assert r["cause"] == "checkpoint" if explains else r["cause"] in MACHINE, (s, r)
    others = {r["cause"] for s, r in slow.items() if s not in saves and s not in restarts}
    # never a checkpoint: the machine's, a collection, or (a loaded machine) a fetch or the
    # page faults that made another step slow (a fresh-clone run beside another: data once)
    assert others <= MACHINE | {"gc", "data", "page_faults"}, seen
    assert {slow[s]["cause"] for s in restarts if s in slow} <= MACHINE | {"gc", "data"}, seen
    # the saves inside steps, noted for goodput (which counts each save once)
    in_steps = int(stepwatch.load(path).info()["notes"]["checkpoint_in_steps_ns"])
    assert len(saves) * SAVE_NAP * 1e9 <= in_steps <= row["total_ns"] + row["warmup_total_ns"]


def test_lightning_model_checkpoint_every_n_steps(tmp_path):
    L = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    import stepwatch.lightning as swl
    import test_lightning

    class Model(test_lightning.Model):
        def on_save_checkpoint(self, checkpoint):  # inside trainer.save_checkpoint
            slow_disk()

    path = tmp_path / "lightning.db"
    every, steps = 12, 40
    data = DataLoader(TensorDataset(torch.randn(steps * 4, 8), torch.randn(steps * 4, 1)),
                      batch_size=4)
    profiler = swl.Profiler(run_file=str(path))
    trainer = L.Trainer(max_epochs=1, default_root_dir=str(tmp_path), profiler=profiler,
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, num_sanity_val_steps=0,
                        callbacks=[ModelCheckpoint(dirpath=str(tmp_path / "ckpt"),
                                                   every_n_train_steps=every, save_top_k=-1)])
    trainer.fit(Model(), data)
    profiler.profiler.close()
    saved = sorted(os.listdir(tmp_path / "ckpt"))
    assert len(saved) == steps // every, saved
    # ModelCheckpoint saves in on_train_batch_end of global step n * every: step n * every - 1
    check(path, [n * every - 1 for n in range(1, steps // every + 1)])
    # each saving step carries the size of the file its save wrote
    slow = slow_steps(path)
    for n in range(1, steps // every + 1):
        size = os.path.getsize(tmp_path / "ckpt" / f"epoch=0-step={n * every}.ckpt")
        assert slow[n * every - 1]["checkpoint_bytes"] == size, (n, slow[n * every - 1], size)
    assert "save_checkpoint" not in trainer.__dict__  # the tap is gone with the run


def test_hf_trainer_save_steps(tmp_path):
    pytest.importorskip("transformers")
    from hftruth import Samples, tiny_bert  # noqa: F401 (sets HF_HUB_OFFLINE)
    from transformers import BertForSequenceClassification, Trainer, TrainingArguments

    from stepwatch.transformers import Callback

    class SlowSaving(BertForSequenceClassification):
        def save_pretrained(self, *args, **kwargs):  # inside Trainer._save_checkpoint
            slow_disk()
            return super().save_pretrained(*args, **kwargs)

    config = tiny_bert().config
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = SlowSaving(config)
    path = tmp_path / "hf.db"
    every, steps = 12, 28
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_train_epochs=1,
        save_strategy="steps", save_steps=every, eval_strategy="no", logging_strategy="no",
        report_to="none", disable_tqdm=True, use_cpu=True, seed=0)
    callback = Callback(run_file=str(path), report=False)
    trainer = Trainer(model=model, args=args, train_dataset=Samples(steps * 8),
                      callbacks=[callback])
    trainer.train()
    saved = sorted(d for d in os.listdir(tmp_path / "out") if d.startswith("checkpoint-"))
    assert saved == [f"checkpoint-{n * every}" for n in range(1, steps // every + 1)] + \
        ([f"checkpoint-{steps}"] if steps % every else []), saved
    # a save follows on_step_end of global step n: that step (index n - 1) takes it in; the
    # last one (the end of training, also a save) too
    saves = [n - 1 for n in range(every, steps + 1, every)] + ([steps - 1] if steps % every else [])
    check(path, saves)
    assert trainer.state.global_step == steps
    assert not hasattr(Trainer._save_checkpoint, "__wrapped__")  # restored at the end


class SlowFile:
    """A file torch.save writes to whose first write naps as a slow disk does."""

    def __init__(self):
        self.size, self.napped = 0, False

    def write(self, data):
        if not self.napped:
            self.napped = True
            slow_disk()
        self.size += len(data)
        return len(data)

    def flush(self):
        pass

    def tell(self):
        return self.size


def test_zero_code_save_after_the_update(tmp_path):
    """Zero-code torch: a torch.save after optimizer.step() is between two steps, in the
    time of the next one (which begins where the last ended): its span is held for that
    step, which is slow for that reason with the save in its kept spans. A save after the
    loader is done (an epoch's end) is in no step. Goodput counts every save once."""
    import sqlite3

    from torch.utils.data import DataLoader, TensorDataset

    import stepwatch.goodput
    import stepwatch.torch as swtorch

    path = tmp_path / "torch.db"
    steps, after = 40, (12, 30)  # a save after the update of these steps of epoch 0
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(steps * 4, 8), torch.randn(steps * 4, 1)),
                      batch_size=4)
    prof = stepwatch.Profiler(run_file=str(path))
    sizes = {}
    with swtorch.instrument(prof):
        for epoch in range(2):
            for i, (x, y) in enumerate(data):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                if epoch == 0 and i in after:
                    f = SlowFile()
                    torch.save(model.state_dict(), f)
                    sizes[i] = f.size
            if epoch == 0:
                torch.save(model.state_dict(), SlowFile())  # the loader is done: no step's
    prof.close()
    row = checkpoint_row(path)
    # the step after each save takes it in; the epoch's save is in no step (step 40, the
    # loader's new start, is not called a checkpoint)
    check(path, [i + 1 for i in after], outside=1, restarts=(steps,))
    db = sqlite3.connect(path)
    for i in after:  # the save is among the slow step's kept spans, its size in the step
        names = {n for (n,) in db.execute(
            "SELECT a.name FROM slow_spans s JOIN actions a ON a.id = s.action AND a.rank = "
            "s.rank WHERE s.window = ?", (i + 1,))}
        assert "checkpoint" in names, (i, names)
        (written,), = db.execute("SELECT checkpoint_bytes FROM slow_steps WHERE step = ?",
                                 (i + 1,))
        assert written == sizes[i], (i, written, sizes)
    db.close()
    if slow_steps(path)[after[0] + 1]["cause"] == "checkpoint":
        assert " at " in stepwatch.diagnose(str(path)).split(f"step {after[0] + 1}: ")[1]
    snapshot = stepwatch.load(str(path))
    parts = stepwatch.goodput.parts(snapshot)
    notes = snapshot.info()["notes"]
    in_steps = int(notes["checkpoint_in_steps_ns"])
    assert len(after) * SAVE_NAP * 1e9 <= in_steps < (len(after) + 1) * SAVE_NAP * 1e9, notes
    assert parts["checkpoints"] == row["total_ns"] + row["warmup_total_ns"]
    step = {r["action"]: r for r in snapshot.records("train")}["step"]
    # the held saves are spans of their steps: not the steps' own ("other") time
    assert step["self_ns"] + in_steps <= step["total_ns"], (step, in_steps)
    # the saves inside steps left the steady steps' time (counted once, as checkpoints)
    assert parts["steady_ns"] <= step["total_ns"] - in_steps, (parts, step)
    lost = sum(parts[c] for c in stepwatch.goodput.CAUSES)
    assert lost + parts["steady_ns"] == parts["wall_ns"], parts
