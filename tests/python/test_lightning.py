"""stepwatch.lightning.Profiler in a real Trainer: SimpleProfiler's contract (files, titles,
extended, describe/summary, recorded_durations, pickling), Lightning's names with their
categories, a breakdown that matches known delays, reports after an exception or Ctrl-C."""
import csv
import copy
import glob
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
from lightning.pytorch.profilers import SimpleProfiler  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import stepwatch  # noqa: E402
from stepwatch.lightning import Profiler, classify  # noqa: E402

from conftest import within  # noqa: E402


class Model(L.LightningModule):
    def __init__(self, fail_at=None):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)
        self.fail_at = fail_at

    def training_step(self, batch, i):
        if self.fail_at is not None and self.global_step == self.fail_at:
            raise RuntimeError("boom")
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class UsersCallback(L.Callback):
    def on_train_batch_start(self, *args):
        pass


def trainer(**kw):
    args = dict(max_epochs=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    args.update(kw)
    return L.Trainer(**args)


def small(n=16):
    return DataLoader(TensorDataset(torch.randn(n, 8), torch.randn(n, 1)), batch_size=4)


def finished_steps(prof, tmp_path):
    """The run file's steps, once the recorder completed it."""
    prof.profiler.close()
    return stepwatch.load_steps(prof.run_file)


# ---- names and categories --------------------------------------------------------------------

@pytest.mark.parametrize("name, category", [
    ("[_TrainingEpochLoop].train_dataloader_next", "data"),
    ("[_EvaluationLoop].val_next", "data"),
    ("[Strategy]DDPStrategy.batch_to_device", "data"),
    ("[LightningModule]Net.transfer_batch_to_device", "data"),
    ("[Strategy]DDPStrategy.training_step", "forward"),
    ("[Strategy]SingleDeviceStrategy.validation_step", "forward"),
    ("[Strategy]DDPStrategy.backward", "backward"),
    ("[LightningModule]Net.optimizer_step", "optimizer"),
    ("optimizer_step", "optimizer"),
    ("[LightningModule]Net.optimizer_zero_grad", "zero_grad"),
    ("[Loss]CrossEntropyLoss", "loss"),
    ("[Callback]ModelCheckpoint{'monitor': None, 'mode': 'min'}.on_train_batch_end", "callback"),
    ("[LightningModule]Net.on_train_batch_end", "callback"),
    ("run_training_batch", "other"),
    ("[Strategy]DDPStrategy.on_train_batch_start", "other"),
])
def test_every_lightning_name_has_a_category(name, category):
    assert classify(name)[0] == category


def test_steps_phases_and_names_of_a_real_fit(tmp_path):
    run_file = str(tmp_path / "run.db")
    prof = Profiler(dirpath=str(tmp_path), filename="perf", run_file=run_file)
    trainer(profiler=prof, limit_val_batches=2, max_epochs=2,
            callbacks=[UsersCallback()]).fit(Model(), small(), small())
    r = {(x["action"], x["phase"]): x for x in prof.records()}
    # each step's batch size is read from its batch: 2 epochs of 4 batches of 4 samples,
    # validation 2 batches of 4 per epoch
    train, valid = r[("step", "train")], r[("step", "valid")]
    assert (train["count"], train["samples"]) == (8, 32)
    assert (valid["count"], valid["samples"]) == (4, 16)
    assert train["samples_per_s"] > 0
    assert r[("epoch", "fit")]["count"] == 2
    # Lightning's own names stay, each with its category; nothing is added under other names
    cats = {x["action"]: x["category"] for x in prof.records("all")}
    assert cats["[_TrainingEpochLoop].train_dataloader_next"] == "data"
    assert cats["[Strategy]SingleDeviceStrategy.training_step"] == "forward"
    assert cats["[Strategy]SingleDeviceStrategy.backward"] == "backward"
    assert cats["[LightningModule]Model.optimizer_step"] == "optimizer"
    assert cats["[LightningModule]Model.optimizer_zero_grad"] == "zero_grad"
    assert "[LightningModule]Model.transfer_batch_to_device" not in cats  # inside batch_to_device
    assert cats["[Callback]UsersCallback.on_train_batch_start"] == "callback"
    assert cats["run_training_batch"] == "other"
    # hooks no one overrides are Lightning calling empty methods: not timed
    assert "[Callback]UsersCallback.on_train_batch_end" not in cats
    assert "[LightningModule]Model.on_before_backward" not in cats
    assert not {"data", "forward", "backward", "callback"} & set(cats)
    assert prof.unbalanced == 0
    assert sum(prof.profiler.snapshot().info()["misuse"].values()) == 0
    # the per-step breakdown: every train step has data, forward, backward, optimizer time
    steps = [s for s in finished_steps(prof, tmp_path) if s["phase"] == "train"]
    assert len(steps) == 8
    for s in steps:
        parts = [s[f"{c}_ns"] for c in ("data", "forward", "backward", "optimizer", "zero_grad",
                                        "callback")]
        assert all(p > 0 for p in parts), s
        assert s["duration_ns"] == sum(s[k] for k in s if k.endswith("_ns") and k not in
                                       ("duration_ns", "start_ns")), s


def test_empty_hooks_timed_on_request():
    prof = Profiler(empty_hooks=True)
    trainer(profiler=prof, limit_val_batches=0, callbacks=[UsersCallback()]).fit(
        Model(), small())
    counts = {x["action"]: x["count"] for x in prof.records("all")}
    assert counts["[Callback]UsersCallback.on_train_batch_end"] == 4
    assert counts["[LightningModule]Model.on_before_backward"] == 4


@pytest.mark.parametrize("name, timed", [
    ("[Callback]UsersCallback.on_train_batch_start", True),
    ("[Callback]UsersCallback.on_train_batch_end", False),
    ("[LightningModule]Model.on_train_batch_end", False),
    ("[LightningModule]Model.transfer_batch_to_device", False),  # Lightning's own
    ("[LightningModule]Model.optimizer_step", True),  # Lightning's, but the optimizer's span
    ("[LightningModule]Model.optimizer_zero_grad", True),
    ("[LightningModule]Model.configure_optimizers", True),  # the user's own
    ("[Strategy]SingleDeviceStrategy.on_train_batch_start", False),
    ("[Strategy]SingleDeviceStrategy.backward", True),
    ("[Callback]Unknown.on_train_batch_end", True),  # not the run's: timed
])
def test_a_hook_is_timed_when_someone_overrides_it(name, timed):
    from stepwatch.lightning import _owners_of
    t = trainer(callbacks=[UsersCallback()])
    t.strategy.connect(Model())
    category = classify(name, _owners_of(t))[0]
    assert (category is not False) == timed, (name, category)
    cb = UsersCallback()
    cb.on_train_batch_end = lambda *a: None  # set on the instance: it runs, so it is timed
    owners = {"[Callback]UsersCallback": cb}
    assert classify("[Callback]UsersCallback.on_train_batch_end", owners)[0] == "callback"


# ---- ground truth: parts that sleep known times -----------------------------------------------
# Each part sleeps a known time and is also timed whole by the loop's own clock (the sleep and
# the work around it: on a loaded machine, the few hundred microseconds of real work in a part
# can take milliseconds, and a truth of the sleep alone would miss them).

def slept(seconds, into):
    t0 = time.perf_counter_ns()
    time.sleep(seconds)
    into.append(time.perf_counter_ns() - t0)


class timing:
    """The loop's own timer: how long the with-body took, appended to into."""

    def __init__(self, into):
        self.into = into

    def __enter__(self):
        self.t0 = time.perf_counter_ns()

    def __exit__(self, *exc):
        self.into.append(time.perf_counter_ns() - self.t0)


class SleepyBackward(torch.autograd.Function):
    """Identity whose backward sleeps a known time."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.05)
        return grad


class SleepyLoss(torch.nn.MSELoss):
    def __init__(self):
        super().__init__()
        self.truth = []

    def forward(self, a, b):
        with timing(self.truth):
            time.sleep(0.03)
            return super().forward(a, b)


class SleepySGD(torch.optim.SGD):
    """Sleeps after its closure. truth: its own time, the whole step less the training_step,
    loss, zero_grad and backward its closure ran (Lightning's work in the closure between them
    is the optimizer's too, as stepwatch counts it)."""
    truth = []

    def __init__(self, params, model, **kw):
        super().__init__(params, **kw)
        self.model = model

    def step(self, closure=None):
        t0 = time.perf_counter_ns()
        loss = closure() if closure is not None else None
        time.sleep(0.03)
        super().step()
        m = self.model
        parts = m.truth[-1] + m.crit.truth[-1] + m.zero_grad_truth[-1] + m.backward_truth[-1]
        SleepySGD.truth.append(time.perf_counter_ns() - t0 - parts)
        return loss


class SleepyModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)
        self.crit = SleepyLoss()
        self.truth = []           # training_step less its loss module
        self.backward_truth = []  # the whole loss.backward()
        self.zero_grad_truth = []

    def training_step(self, batch, i):
        t0 = time.perf_counter_ns()
        x, y = batch
        time.sleep(0.05)
        loss = self.crit(SleepyBackward.apply(self.lin(x)), y)
        self.truth.append(time.perf_counter_ns() - t0 - self.crit.truth[-1])
        return loss

    def backward(self, loss, *args, **kwargs):
        with timing(self.backward_truth):
            loss.backward(*args, **kwargs)

    def optimizer_zero_grad(self, *args):
        with timing(self.zero_grad_truth):
            super().optimizer_zero_grad(*args)

    def configure_optimizers(self):
        return SleepySGD(self.parameters(), self, lr=0.01)


class SleepyCallback(L.Callback):
    def __init__(self):
        self.truth = []

    def on_train_batch_end(self, *args):
        slept(0.03, self.truth)


def test_breakdown_matches_known_delays(sleepy, tmp_path):
    """Data, forward (training_step less its loss module), loss, backward, optimizer (its own
    time, the closure excluded) and a callback each sleep a known time, timed whole by the
    loop's own clock: the per-step breakdown and the per-action totals find each within 10 %."""
    SleepySGD.truth.clear()
    ds = sleepy(8, sleep_s=0.08)
    model, cb = SleepyModel(), SleepyCallback()
    prof = Profiler(run_file=str(tmp_path / "run.db"))
    trainer(profiler=prof, limit_val_batches=0, callbacks=[cb]).fit(
        model, DataLoader(ds, batch_size=None))
    truth = {"data": ds.slept_ns, "forward": sum(model.truth), "loss": sum(model.crit.truth),
             "backward": sum(model.backward_truth), "optimizer": sum(SleepySGD.truth),
             "callback": sum(cb.truth)}
    assert [len(v) for v in (model.truth, model.backward_truth, SleepySGD.truth, cb.truth)] == [8] * 4
    assert min(model.truth) >= 50e6 and min(model.backward_truth) >= 50e6
    totals = {r["action"]: r["total_ns"] for r in prof.records("train")}
    assert within(totals["[_TrainingEpochLoop].train_dataloader_next"], truth["data"])
    assert within(totals["[Loss]SleepyLoss"], truth["loss"])
    assert within(totals["[Callback]SleepyCallback.on_train_batch_end"], truth["callback"])
    steps = finished_steps(prof, tmp_path)
    assert len(steps) == 8
    for part, known in truth.items():
        found = sum(s[f"{part}_ns"] for s in steps)
        assert within(found, known), (part, found, known)


class SlowLogger(L.Callback):
    def on_train_batch_end(self, *args):
        time.sleep(0.01)


def test_diagnose_names_a_costly_callback(tmp_path, build_dir):
    """A callback taking a large share of the run is diagnose's callback-overhead finding."""
    exe = os.path.join(build_dir or "", "stepwatch")
    if not (build_dir and os.access(exe, os.X_OK)):
        pytest.skip("needs the stepwatch command (SW_BUILD_DIR)")
    import json
    prof = Profiler(run_file=str(tmp_path / "run.db"))
    trainer(profiler=prof, limit_val_batches=0, callbacks=[SlowLogger()]).fit(
        Model(), small(64))
    prof.profiler.close()
    out = subprocess.run([exe, "diagnose", str(tmp_path / "run.db"), "--format", "json"],
                         capture_output=True, text=True)
    findings = {f["id"]: f for f in json.loads(out.stdout)["findings"]}
    assert "callback-overhead" in findings, out.stdout
    assert "[Callback]SlowLogger.on_train_batch_end" in findings["callback-overhead"]["sentence"]


# ---- SimpleProfiler's contract ----------------------------------------------------------------

def test_report_file_and_title_as_lightning_writes_them(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="perf", format="lightning")
    t = trainer(profiler=prof, limit_val_batches=2)
    t.fit(Model(), small(), small())
    t.validate(Model(), small())
    files = sorted(os.path.basename(f) for f in glob.glob(str(tmp_path / "*.txt")))
    assert files == ["fit-perf.txt", "validate-perf.txt"]
    fit = (tmp_path / "fit-perf.txt").read_text()
    assert fit.startswith("FIT Profiler Report\n")
    assert "Mean duration (s)" in fit and "Num calls" in fit and "run_training_epoch" in fit
    assert (tmp_path / "validate-perf.txt").read_text().startswith("VALIDATE Profiler Report")
    # the default format: stepwatch's table under Lightning's title
    prof = Profiler(dirpath=str(tmp_path), filename="table")
    trainer(profiler=prof, limit_val_batches=0).fit(Model(), small())
    text = (tmp_path / "fit-table.txt").read_text()
    assert text.startswith("FIT Profiler Report\nstepwatch report:") and "p99" in text


def test_extended_false_is_lightnings_short_layout():
    """The same recorded durations give Lightning's own extended=False text."""
    durations = {"on_fit_start": [1.5], "training_step": [0.25, 0.75], "backward": [0.125]}
    ours = Profiler(format="lightning", extended=False)
    t = stepwatch.now_ns()
    for name, ds in durations.items():
        for d in ds:
            ours.profiler.action(name).record(t, t + int(d * 1e9))
    theirs = SimpleProfiler(extended=False)
    for name, ds in durations.items():
        theirs.recorded_durations[name] = list(ds)
    # Lightning ends lines with os.linesep and pads with tabs; compare the text as shown
    assert ours.summary().expandtabs() == theirs.summary().replace(os.linesep, "\n").expandtabs()


def test_report_files_keep_long_names_whole(tmp_path):
    """Lightning's long names do not shrink into look-alike rows in a file."""
    names = [f"AVeryLongCallbackNameForTheReportFile{i}" for i in range(4)]
    callbacks = [type(n, (L.Callback,), {"on_before_backward": lambda *a: None})()
                 for n in names]
    for fmt in ("table", "lightning", "fastxtend"):
        prof = Profiler(dirpath=str(tmp_path), filename=fmt, format=fmt)
        trainer(profiler=prof, limit_val_batches=0, callbacks=callbacks).fit(Model(), small())
        text = (tmp_path / f"fit-{fmt}.txt").read_text()
        for n in names:
            assert f"[Callback]{n}.on_before_backward" in text, (fmt, n)
        assert "\u2026" not in text, fmt  # nothing shortened


def test_summary_and_describe_without_a_trainer(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="alone")
    with prof.profile("a"):
        with prof.profile("b"):
            time.sleep(0.01)
    text = prof.summary()
    assert text.startswith("Profiler Report\nstepwatch report:")
    assert "\nb " in text and "\na " in text
    prof.describe()
    written = (tmp_path / "alone.txt").read_text()
    assert written.startswith("Profiler Report\nstepwatch report:") and "\nb " in written
    assert prof._output_file is None  # describe() closes it, as Lightning's


def test_recorded_durations_are_the_latest_kept():
    prof = Profiler(keep_durations=3)
    # the first (dropped) and the last are long: a loaded machine, which lengthens a 2 ms
    # sleep to 9 ms, does not make short ones look like them
    for d in (0.08, 0.001, 0.001, 0.04):
        with prof.profile("x"):
            time.sleep(d)
    durations = prof.recorded_durations["x"]
    assert len(durations) == 3
    assert [v >= d for v, d in zip(durations, (0.001, 0.001, 0.04))] == [True] * 3
    assert durations[0] < 0.08 and durations[2] >= 0.04  # the latest three, in order
    assert list(prof.recorded_durations) == ["x"]
    assert {r["action"]: r["count"] for r in prof.records("all")}["x"] == 4  # stats: every call
    with pytest.raises(KeyError):
        prof.recorded_durations["never"]
    with pytest.raises(TypeError):
        prof.recorded_durations["x"] = [1.0]  # read-only (docs/python.md)
    assert Profiler(keep_durations=0).recorded_durations == {}


def test_unbalanced_start_stop_is_counted_not_raised():
    for prof in (Profiler(), Profiler(profiler=stepwatch.Profiler())):
        prof.stop("never started")
        prof.start("a")
        prof.start("a")
        prof.stop("a")
        prof.stop("a")
        prof.stop("a")
        assert prof.unbalanced == 3
        with prof.profile("ctx"):
            pass
        assert {x["action"]: x["count"] for x in prof.records("all")}["ctx"] == 1


def test_profile_is_a_c_context_manager_that_times_and_passes_exceptions():
    """After the recorder exists, profile(name) is Spans.profile (C): it returns the name as
    Lightning's yields it, times nested blocks, stops the span when the block raises and lets
    the exception through; before the recorder, Lightning's own profile() still works."""
    prof = Profiler()
    with prof.profile("early") as name:  # no recorder yet: the base class's generator
        assert name == "early"
    prof.profiler
    assert type(prof.profile("x")).__name__ == "SpanScope"
    with prof.profile("outer") as name:
        assert name == "outer"
        with prof.profile("inner"):
            pass
        with prof.profile("inner"):
            pass
    with pytest.raises(KeyError):
        with prof.profile("raises"):
            raise KeyError("through")
    scope = prof.profile("reused")
    for _ in range(2):  # one scope entered twice, as a stored context manager may be
        with scope:
            pass
    counts = {x["action"]: x["count"] for x in prof.records("all")}
    assert (counts["early"], counts["outer"], counts["inner"], counts["raises"],
            counts["reused"]) == (1, 1, 2, 1, 2)
    assert prof.unbalanced == 0 and len(prof.recorded_durations["inner"]) == 2
    assert "profile" not in pickle.loads(pickle.dumps(prof)).__dict__


def test_names_alike_in_every_hashed_word_stay_apart():
    """Spans hashes a name's start, middle and end: names that differ only elsewhere share a
    hash and are told apart by their whole text; the table grows past its first size."""
    prof = Profiler()
    prof.profiler
    # 48 bytes: the words at 0, 20 and 40 are the same, the bytes between them differ
    alike = ["A" * 8 + f"{i:012d}" + "B" * 8 + f"{i:012d}" + "D" * 8 for i in range(3)]
    assert len({len(n) for n in alike}) == 1 and len(alike[0]) == 48
    names = alike + [f"action {i}" for i in range(300)] + ["é" * 30, "日本" * 20, ""]
    for rounds in range(2):
        for name in names:
            prof.start("".join(("", name)))  # a new object each call, as Lightning's
            prof.stop("".join(("", name)))
    counts = {r["action"]: r["count"] for r in prof.records("all")}
    assert all(counts[n] == 2 for n in names), {n: counts.get(n) for n in names[:3]}
    assert prof.unbalanced == 0 and len(prof.recorded_durations) == len(names)


def test_spans_before_the_recorder_are_kept():
    """Lightning calls configure_callbacks before setup: those spans wait for the recorder."""
    prof = Profiler()
    prof.start("early")
    prof.start("outer")
    prof.stop("early")
    assert prof._recorder is None
    prof.profiler  # made now (outside a Trainer: at first use)
    prof.stop("outer")
    counts = {x["action"]: x["count"] for x in prof.records("all")}
    assert counts["early"] == 1 and counts["outer"] == 1 and prof.unbalanced == 0


def test_pickle_and_deepcopy_carry_the_options_not_the_recording(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="p", extended=False, format="lightning",
                    warmup_steps=2, run_file=str(tmp_path / "r-{rank}.db"), keep_durations=5)
    trainer(profiler=prof, limit_val_batches=0).fit(Model(), small())
    for copied in (pickle.loads(pickle.dumps(prof)), copy.deepcopy(prof)):
        assert (copied.dirpath, copied.filename, copied.extended, copied.format,
                copied.warmup_steps, copied.run_file, copied.keep_durations) == \
               (prof.dirpath, prof.filename, False, "lightning", 2, prof.run_file, 5)
        assert copied._recorder is None and copied._output_file is None
        assert list(copied.recorded_durations) == []  # a new, empty recording
        assert copied.profiler is not prof.profiler
    # a copy made before the run is a complete profiler of its own
    fresh = copy.deepcopy(Profiler(dirpath=str(tmp_path), filename="copy"))
    trainer(profiler=fresh, limit_val_batches=0).fit(Model(), small())
    assert "run_training_batch" in (tmp_path / "fit-copy.txt").read_text()


def test_teardown_leaves_the_trainer_as_it_was(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="t")
    t = trainer(profiler=prof, limit_val_batches=0)
    model = Model()
    model.crit = torch.nn.MSELoss()
    t.fit(model, small())
    assert prof._output_file is None
    assert "batch_to_device" not in vars(t.strategy) and "teardown" not in vars(t.strategy)
    assert "forward" not in vars(model.crit)
    assert [type(c).__name__ for c in t.callbacks if "stepwatch" in type(c).__module__] == []


def test_a_timed_loss_passes_its_result_and_its_exception_through():
    prof = Profiler()
    crit = torch.nn.MSELoss()
    prof.profiler  # the recorder, made at first use outside a Trainer
    timed = prof._spans.timed
    a, b = torch.ones(3), torch.zeros(3)
    assert timed("[Loss]MSELoss", crit.forward, a, b).item() == 1.0
    assert timed("[Loss]MSELoss", crit.forward, a, target=b).item() == 1.0
    with pytest.raises(RuntimeError):
        timed("[Loss]MSELoss", crit.forward, a, torch.zeros(4))  # sizes do not match
    counts = {r["action"]: (r["count"], r["category"]) for r in prof.records("all")}
    assert counts["[Loss]MSELoss"] == (3, "loss") and prof.unbalanced == 0


def test_a_module_copied_during_the_run_still_works(tmp_path):
    """Stochastic weight averaging and EMA deep-copy the LightningModule mid-run."""
    copies = []

    class Copier(L.Callback):
        def on_train_epoch_end(self, trainer, module):
            copies.append(copy.deepcopy(module))

    model = Model()
    model.crit = torch.nn.MSELoss()
    prof = Profiler()
    trainer(profiler=prof, limit_val_batches=0, callbacks=[Copier()]).fit(model, small())
    (twin,) = copies
    assert twin.crit(torch.ones(2), torch.zeros(2)).item() == 1.0


def test_profiler_records_into_a_given_profiler_and_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Profiler(format="nope")
    with pytest.raises(ValueError):
        Profiler(keep_durations=-1)
    with pytest.raises(TypeError):
        Profiler(profiler="not a profiler")
    shared = stepwatch.Profiler(name="shared")
    prof = Profiler(profiler=shared)
    prof.start("x")
    prof.stop("x")
    assert prof.profiler is shared
    assert any(r["action"] == "x" for r in shared.records())


def test_rank_is_read_from_the_trainer_at_setup():
    t = trainer()
    assert stepwatch.distributed_rank(t) == (0, 1)
    assert stepwatch.distributed_rank() is None  # no process group in this process
    prof = Profiler()
    t = trainer(profiler=prof, limit_val_batches=0)
    t.fit(Model(), small())
    info = prof.profiler.snapshot().info()
    assert (info["rank"], info["world_size"]) == (0, 1)


def test_run_file_folder_is_made_and_a_bad_one_never_stops_training(tmp_path):
    prof = Profiler(run_file=str(tmp_path / "new" / "dir" / "run-{rank}.db"))
    trainer(profiler=prof, limit_val_batches=0).fit(Model(), small())
    prof.profiler.close()
    assert stepwatch.load(str(tmp_path / "new" / "dir" / "run-0.db")).info()["steps"] == 4
    (tmp_path / "file").write_text("not a folder")
    prof = Profiler(run_file=str(tmp_path / "file" / "run.db"))
    with pytest.warns(RuntimeWarning, match="cannot write the run file"):
        trainer(profiler=prof, limit_val_batches=0).fit(Model(), small())
    assert {r["action"] for r in prof.records("all")} >= {"run_training_batch"}


# ---- failures ---------------------------------------------------------------------------------

def test_report_written_when_training_fails(tmp_path):
    prof = Profiler(dirpath=str(tmp_path), filename="crash")
    with pytest.raises(RuntimeError, match="boom"):
        trainer(profiler=prof, limit_val_batches=0).fit(Model(fail_at=2), small())
    (path,) = glob.glob(str(tmp_path / "*crash*.txt"))
    text = open(path).read()
    assert text.startswith("FIT Profiler Report") and "Misuse" not in text
    assert "[Strategy]SingleDeviceStrategy.training_step" in text
    counts = {r["action"]: r["count"] for r in prof.records("all")}
    assert counts["run_training_batch"] == 3  # the failing step's span ended too
    assert sum(prof.profiler.snapshot().info()["misuse"].values()) == 0
    assert prof.unbalanced == 0


def test_report_written_on_ctrl_c_mid_epoch(tmp_path):
    class Interrupted(Model):
        def training_step(self, batch, i):
            if self.global_step == 1:
                raise KeyboardInterrupt
            return super().training_step(batch, i)

    prof = Profiler(dirpath=str(tmp_path), filename="interrupted")
    sigint = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT after a Ctrl-C
    try:
        with pytest.raises(SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
            trainer(profiler=prof, limit_val_batches=0).fit(Interrupted(), small())
    finally:
        signal.signal(signal.SIGINT, sigint)
    (path,) = glob.glob(str(tmp_path / "*interrupted*.txt"))
    assert "[Strategy]SingleDeviceStrategy.training_step" in open(path).read()
    assert sum(prof.profiler.snapshot().info()["misuse"].values()) == 0


# ---- the benchmark -----------------------------------------------------------------------------

def test_bench_lightning_runs_every_variant(tmp_path):
    """bench/bench_lightning.py still runs and writes every figure `make bench` reports (one
    fit per variant: on a loaded test machine its figures prove nothing about the budgets,
    which are `make bench`'s; this catches a benchmark broken by a change)."""
    import json
    bench = os.path.join(os.environ.get("SW_SOURCE_DIR") or
                         os.path.join(os.path.dirname(__file__), "..", ".."), "bench")
    out = tmp_path / "lightning.json"
    run = subprocess.run([sys.executable, os.path.join(bench, "bench_lightning.py"), "--rounds",
                          "1", "--steps", "40", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stepwatch.lightning.Profiler" in run.stdout
    fig = json.loads(out.read_text())
    assert fig["step_ns"] > 0 and fig["wall_step_ns"] > 0
    assert {"none", "simple", "stepwatch", "stepwatch_time"} <= set(fig["variants"])
    for name, v in fig["variants"].items():
        assert v["steps"] == 40 - 20 - 1 and v["step_ns"] > 0, (name, v)
        lo, hi = v["overhead_ci95_ns"]
        assert lo <= hi, (name, v)
    assert set(fig["budgets_met"]) == {
        "profiler_le_third_of_simple", "time_profiler_le_simple",
        "replayed_profiler_le_third_of_simple", "replayed_time_profiler_le_simple"}
    assert fig["fits_resolve_simple"] in (True, False)
    replayed = fig["replayed"]
    assert replayed["pairs_per_step"] >= 10
    for key in ("simple_ns", "stepwatch_ns", "stepwatch_time_ns"):
        assert key in replayed, (key, replayed)


PLAIN_SCRIPT = """
import torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False,
                    num_sanity_val_steps=0)
trainer.fit(Model(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
print("global_step", trainer.global_step)
"""


def test_stepwatch_run_times_an_unmodified_lightning_script(tmp_path):
    """Zero-code instrumentation on Lightning's own loop: every training and validation batch
    is a step in its phase, and the forward and backward Lightning runs in the optimizer's
    closure are counted as themselves (docs/python.md)."""
    script = tmp_path / "train.py"
    script.write_text(PLAIN_SCRIPT)
    report = tmp_path / "report.csv"
    run = subprocess.run([sys.executable, "-m", "stepwatch", "run", "--format", "csv",
                          "--output", str(report), "--", "python", str(script)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "global_step 12" in run.stdout
    assert "stepwatch.torch:" not in run.stderr  # nothing degraded on this torch
    with open(report, newline="") as f:
        rows = {(r["action"], r["phase"]): r for r in csv.DictReader(f)}
    count = {key: int(r["count"]) for key, r in rows.items()}
    # 2 epochs: 48 samples in batches of 8 to train, of 16 to validate
    for action in ("step", "data", "forward", "loss", "backward", "optimizer"):
        assert count[(action, "train")] == 12, (action, count)
    assert count[("step", "valid")] == count[("forward", "valid")] == 6, count
    assert ("backward", "valid") not in count and ("optimizer", "valid") not in count
    assert count[("zero_grad", "train")] >= 12, count
    assert int(rows[("step", "train")]["samples"]) == 96
    # Lightning runs forward and backward in the closure that optimizer.step() calls: they
    # are counted as themselves, the optimizer keeps its own time, and the parts fit the steps
    parts = sum(float(rows[(a, "train")]["total_s"])
                for a in ("data", "forward", "loss", "backward", "optimizer", "zero_grad"))
    assert parts <= float(rows[("step", "train")]["total_s"])
    optimizer = rows[("optimizer", "train")]
    assert float(optimizer["self_s"]) == float(optimizer["total_s"])
