"""stepwatch.torch on the loop shapes real scripts have, against the loops' own timers.

Each test is one loop shape written as a user would; every part of it naps a known time
and is also timed by the loop itself (torchtruth.Truth). stepwatch's steps, read back from
the run file, must match: step counts exact, every category within ±10 %, train and valid
apart, and the report must name the rule that found the steps.
"""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import stepwatch  # noqa: E402
from torchtruth import (Batches, Nap, NapLBFGS, NapLoss, PlainLoss, Truth,  # noqa: E402
                        check, forward_loss_backward, hand_loss, model_and_opt, nap, profiled,
                        retried_on_load, steps_of, train_step)

F = torch.nn.functional
NAPLOSS = NapLoss()


def rule_of(path):
    return stepwatch.load(path).info()["notes"].get("step_rule")


@retried_on_load
def test_dataloader_loop(tmp_path):
    truth = Truth()
    model, opt = model_and_opt()
    with profiled(tmp_path) as (prof, path):
        for _epoch in range(2):
            for x, y in truth.loader(DataLoader(Batches(4), batch_size=None)):
                train_step(truth, model, opt, NapLoss(), x, y)
    steps = check(path, truth)
    assert [s["batch_size"] for s in steps] == [4] * 8
    assert rule_of(path) == "optimizer"
    assert "rule: optimizer" in stepwatch.load(path).report()


@pytest.mark.parametrize("loss_fn", [NapLoss(), PlainLoss(), hand_loss],
                         ids=["_Loss", "plain-module", "by-hand"])
@retried_on_load
def test_every_kind_of_loss_is_the_loss(tmp_path, loss_fn):
    truth = Truth()
    model, opt = model_and_opt()
    with profiled(tmp_path) as (prof, path):
        for x, y in truth.loader(DataLoader(Batches(5), batch_size=None)):
            train_step(truth, model, opt, loss_fn, x, y, zero_first=False)
    check(path, truth)


@retried_on_load
def test_a_functional_loss_in_training_and_validation(tmp_path):
    """F.cross_entropy, timed itself (on logits big enough to take milliseconds)."""
    truth = Truth()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 1000), Nap())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4096, 8), torch.randint(0, 1000, (4096,))
    with profiled(tmp_path) as (prof, path):
        for _ in range(5):
            with truth.part("forward"):
                out = model(x)
            with truth.part("loss"):
                loss = F.cross_entropy(out, y)
            with truth.part("backward"):
                loss.backward()
            opt.step()
            truth.step_done()
            opt.zero_grad()
            out = loss = None  # freeing 16 MB is no part's time: not inside the next timer
        model.eval()
        with torch.no_grad():
            for _ in range(5):
                with truth.part("forward", "valid"):
                    out = model(x)
                with truth.part("loss", "valid"):
                    F.cross_entropy(out, y)
                truth.step_done("valid")
                out = None
    check(path, truth, categories=("forward", "loss", "backward"), other=False, step_time=False)
    check(path, truth, "valid", categories=("forward", "loss"), other=False, step_time=False)


@retried_on_load
def test_no_dataloader_get_batch_from_a_tensor_and_a_memmap(tmp_path):
    """nanoGPT's shape: batches drawn by the script (its time is "other", not data)."""
    truth = Truth()
    model, opt = model_and_opt()
    data = np.memmap(tmp_path / "train.bin", dtype=np.float32, mode="w+", shape=(4096,))
    data[:] = np.arange(4096, dtype=np.float32)
    source = torch.randn(1000, 8)

    def get_batch(i):
        nap("data")  # the script's own drawing: counted as "other" (no DataLoader to see)
        rows = torch.from_numpy(np.array(data[i * 32:(i + 1) * 32])).view(4, 8)
        return rows + source[i:i + 4], torch.randn(4, 1)

    with profiled(tmp_path) as (prof, path):
        for i in range(6):
            x, y = get_batch(i)
            train_step(truth, model, opt, NapLoss(), x, y)
    check(path, truth, categories=("forward", "loss", "backward", "optimizer", "zero_grad"))
    notes = stepwatch.load(path).info()["notes"]
    assert notes["step_rule"] == "optimizer"
    assert "no DataLoader" in notes["not_separated.data"]


@retried_on_load
def test_no_dataloader_a_generator_and_bptt_slices(tmp_path):
    """word_language_model's shape: BPTT slices of one long tensor, and a generator."""
    truth = Truth()
    model, opt = model_and_opt()
    source = torch.randn(40, 8)

    def slices():
        for i in range(0, 40, 8):
            nap("other")
            yield source[i:i + 4], torch.randn(4, 1)

    with profiled(tmp_path) as (prof, path):
        for x, y in slices():
            train_step(truth, model, opt, hand_loss, x, y)
    check(path, truth, categories=("forward", "loss", "backward", "optimizer", "zero_grad"))


@retried_on_load
def test_validation_under_no_grad_inside_the_loop_body(tmp_path):
    """Every 3rd step the body validates on a loader under no_grad and eval(): those are
    valid steps, never part of a training step."""
    truth = Truth()
    model, opt = model_and_opt()
    val = DataLoader(Batches(2), batch_size=None)
    with profiled(tmp_path) as (prof, path):
        for i, (x, y) in enumerate(truth.loader(DataLoader(Batches(6), batch_size=None))):
            train_step(truth, model, opt, NapLoss(), x, y)
            if i % 3 == 2:
                model.eval()
                with torch.no_grad():
                    for xv, yv in truth.loader(val, "valid"):
                        with truth.part("forward", "valid"):
                            out = model(xv)
                        with truth.part("loss", "valid"):
                            NAPLOSS(out, yv)
                        truth.step_done("valid")
                        nap("other")  # the next valid step's "other", or no step's
                model.train()
                truth.restart("train")
    check(path, truth)
    check(path, truth, "valid", categories=("data", "forward", "loss"))


@retried_on_load
def test_validation_without_a_loader_inside_the_loop(tmp_path):
    """nanoGPT's estimate_loss: every few iterations, get_batch + model under no_grad."""
    truth = Truth()
    model, opt = model_and_opt()
    with profiled(tmp_path) as (prof, path):
        for i in range(6):
            if i % 3 == 0:
                model.eval()
                with torch.no_grad():
                    for _ in range(3):
                        x = torch.randn(4, 8)
                        with truth.part("forward", "valid"):
                            out = model(x)
                        with truth.part("loss", "valid"):
                            hand_loss(out, torch.randn(4, 1))
                        truth.step_done("valid")
                model.train()
                truth.restart("valid")
                truth.restart("train")
            train_step(truth, model, opt, NapLoss(), torch.randn(4, 8), torch.randn(4, 1))
    check(path, truth)
    # a loss written by hand under no_grad is not told apart from "other"
    check(path, truth, "valid", categories=("forward",), other=False, step_time=False)


@retried_on_load
def test_break_and_early_return_open_no_step(tmp_path):
    """A batch fetched before a break or an early return, and the checkpoint after it,
    belong to no step; so does an iterator abandoned mid-epoch."""
    truth = Truth()
    model, opt = model_and_opt()

    def train_some(loader, limit):
        for i, (x, y) in enumerate(truth.loader(loader)):
            if i == limit:
                return  # early return with a batch in hand
            train_step(truth, model, opt, NapLoss(), x, y, zero_first=False)

    with profiled(tmp_path) as (prof, path):
        loader = DataLoader(Batches(8), batch_size=None)
        for i, (x, y) in enumerate(truth.loader(loader)):
            if i == 3:
                break
            train_step(truth, model, opt, NapLoss(), x, y, zero_first=False)
        truth.restart("train")
        time.sleep(0.3)  # a checkpoint: no step's time
        train_some(loader, 2)
        truth.restart("train")
        time.sleep(0.3)
        next(iter(loader))  # abandoned
        time.sleep(0.3)
    steps = check(path, truth)
    assert len(steps) == 5 and max(s["duration_ns"] for s in steps) < 0.25e9


@retried_on_load
def test_zipped_and_nested_loaders(tmp_path):
    truth = Truth()
    model, opt = model_and_opt()
    with profiled(tmp_path) as (prof, path):
        a = DataLoader(Batches(3), batch_size=None)
        b = DataLoader(Batches(3, nap_s=0.004), batch_size=None)
        for (x, y), (x2, _y2) in zip(truth.loader(a), truth.loader(b)):
            train_step(truth, model, opt, NapLoss(), x + x2, y)
        truth.restart("train")
        for _x_outer, _ in truth.loader(DataLoader(Batches(2, nap_s=0.004), batch_size=None)):
            for x, y in truth.loader(DataLoader(Batches(2), batch_size=None)):
                train_step(truth, model, opt, NapLoss(), x, y)
    steps = check(path, truth, other=False, step_time=False)
    assert [s["batch_size"] for s in steps[:3]] == [8] * 3  # both batches of a zipped step


@retried_on_load
def test_gradient_accumulation_is_one_step_per_update(tmp_path):
    truth = Truth()
    model, opt = model_and_opt()
    loss_fn = NapLoss()
    with profiled(tmp_path) as (prof, path):
        for i, (x, y) in enumerate(truth.loader(DataLoader(Batches(9), batch_size=None))):
            with truth.part("forward"):
                out = model(x)
            with truth.part("loss"):
                loss = loss_fn(out, y)
            loss = loss / 3
            with truth.part("backward"):
                loss.backward()
            if i % 3 == 2:
                opt.step()  # NapSGD times itself
                truth.step_done()
                with truth.part("zero_grad"):
                    opt.zero_grad()
                nap("other")
    steps = check(path, truth)
    assert [s["batch_size"] for s in steps] == [12] * 3  # three batches of 4 per update


@retried_on_load
def test_lbfgs_closure_runs_several_forward_backward_per_step(tmp_path):
    truth = Truth()
    model, _ = model_and_opt()
    opt = NapLBFGS(model.parameters(), lr=0.1, max_iter=3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    calls = []

    def closure():
        calls.append(1)
        with truth.part("zero_grad"):
            opt.zero_grad()
        return forward_loss_backward(truth, model, NAPLOSS, x, y)

    with profiled(tmp_path) as (prof, path):
        for _ in range(3):
            before = truth.window().copy()
            opt.step(closure)  # NapLBFGS times itself
            inner = sum(truth.window()[c] - before[c] for c in ("zero_grad", "forward", "loss",
                                                                "backward"))
            truth.window()["optimizer"] -= inner  # the optimizer's own time
            truth.step_done()
            nap("other")
    assert len(calls) > 3
    check(path, truth)
    r = {row["action"]: row for row in stepwatch.load(path).records("train")}
    assert r["forward"]["count"] == len(calls) and r["step"]["count"] == 3


@retried_on_load
def test_transforms_that_are_modules_are_data(tmp_path):
    """A module called in __getitem__ (a transform) is the data pipeline's, not a forward."""
    truth = Truth()
    model, opt = model_and_opt()
    transform = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    with profiled(tmp_path) as (prof, path):
        loader = DataLoader(Batches(5, transform=transform), batch_size=None)
        for x, y in truth.loader(loader):
            train_step(truth, model, opt, NapLoss(), x.detach(), y)
    check(path, truth)
    r = {row["action"]: row for row in stepwatch.load(path).records("train")}
    assert r["forward"]["count"] == 5


def test_a_model_in_eval_mode_that_trains_is_training(tmp_path):
    """Frozen batch-norm: model.eval() with a backward after every forward."""
    truth = Truth()
    model, opt = model_and_opt()
    model.eval()
    with profiled(tmp_path) as (prof, path):
        for x, y in truth.loader(DataLoader(Batches(6), batch_size=None)):
            train_step(truth, model, opt, NapLoss(), x, y)
    steps = steps_of(path, "train")
    assert len(steps) >= 5  # the first forward may read as validation; then it is learnt
    assert len(steps_of(path, "valid")) <= 1


@retried_on_load
def test_manual_marks_for_a_loop_no_rule_reads(tmp_path):
    """A forward-only loop with grad on and no loader: stepwatch.step() marks the steps."""
    truth = Truth()
    model, _ = model_and_opt()
    with profiled(tmp_path) as (prof, path):
        for _ in range(4):
            with stepwatch.step(batch_size=4):
                with truth.part("forward"):
                    model(torch.randn(4, 8))
                nap("other")
            truth.step_done()
            truth.restart("train")
    steps = check(path, truth, categories=("forward",), other=False, step_time=False)
    assert [s["batch_size"] for s in steps] == [4] * 4
    assert rule_of(path) == "manual"
