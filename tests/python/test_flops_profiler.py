"""Profiler(flops=True): the C Profiler object counts the training steps' FLOPs as
stepwatch.flops.watch(prof) and instrument(flops=) do; its close() writes the figures and the
goodput into the notes; counting leaves training bit for bit; bad options are named."""
import math
import re

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import stepwatch  # noqa: E402
from stepwatch import flops as swflops  # noqa: E402
from test_flops import DropBN  # noqa: E402  (a Linear, BatchNorm, dropout, Linear)


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def loop(prof, model, batches):
    """A plain loop marked by hand; the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    with prof.phase("train"):
        for x, y in batches:
            with prof.step(len(x)):
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
    return losses


def batches(n=5, rows=8):
    return [(torch.randn(rows, 16), torch.randn(rows, 4)) for _ in range(n)]


def test_profiler_flops_counts_the_hand_count_and_notes_at_close():
    torch.manual_seed(0)
    model = DropBN()
    prof = stepwatch.Profiler(warmup_steps=1, flops=True)
    assert isinstance(prof.flops, swflops.Watch)
    loop(prof, model, batches())
    prof.close()
    assert prof.flops is None  # closed with the profiler
    notes = prof.snapshot().info()["notes"]
    mm = 2 * 8 * 16 * 32 + 2 * 8 * 32 * 4  # both Linear layers' forward matmuls
    assert float(notes["flops_forward"]) == mm
    # backward: both weights' gradients, and the input gradient of the second layer only
    assert float(notes["flops_backward"]) == mm + 2 * 8 * 32 * 4
    assert notes["flops_counted_steps"] == "0"
    assert "MFU unknown" in notes["efficiency"]  # a CPU: no peak, not guessed
    assert "goodput" in notes and "goodput_parts" in notes  # as instrument()'s runs
    assert notes["efficiency"].endswith(f"goodput {notes['goodput']} %")
    assert "efficiency: " in prof.report("table")


def test_profiler_flops_leaves_training_bit_for_bit():
    def run(flops):
        torch.manual_seed(3)
        model = DropBN()
        data = batches(6) + [(torch.randn(5, 16), torch.randn(5, 4))]  # a new shape
        prof = stepwatch.Profiler(flops=flops)
        losses = loop(prof, model, data)
        prof.close()
        return losses, {k: v.clone() for k, v in model.state_dict().items()}, \
            torch.get_rng_state(), prof.snapshot().info()["notes"]

    plain, counted = run(None), run(True)
    assert counted[0] == plain[0]  # every loss, exactly
    for k in plain[1]:  # weights and BatchNorm's running statistics
        assert torch.equal(counted[1][k], plain[1][k]), k
    assert torch.equal(counted[2], plain[2])
    assert "flops_per_step" not in plain[3]
    assert counted[3]["flops_counted_steps"] == "0,6"  # the first step, and the new shape's


def test_profiler_flops_options():
    torch.manual_seed(1)
    prof = stepwatch.Profiler(flops={"flops_per_batch": lambda x: 100 * len(x),
                                     "peak_flops": 1e9})
    loop(prof, DropBN(), batches(3))
    prof.close()
    notes = prof.snapshot().info()["notes"]
    assert float(notes["flops_per_step"]) == 800 and notes["flops_source"] == "flops_per_batch"
    step = next(r for r in prof.records("train") if r["action"] == "step")
    achieved = 800 / (step["total_ns"] / step["count"] * 1e-9)
    assert math.isclose(float(notes["mfu"]), achieved / 1e9, rel_tol=1e-5)
    assert "% MFU, given" in notes["efficiency"]


def test_profiler_flops_bad_options_are_named():
    with pytest.raises(ValueError, match="flops must be True, False, None or a dict"):
        stepwatch.Profiler(flops="yes")
    with pytest.raises(ValueError, match="no option peak"):
        stepwatch.Profiler(flops={"peak": 1})
    with pytest.raises(ValueError, match="peak_flops must be a number"):
        stepwatch.Profiler(flops={"peak_flops": 0})
    assert stepwatch.Profiler(flops=False).flops is None


def test_instrument_with_a_counting_profiler_counts_once():
    torch.manual_seed(2)
    model = nn.Linear(16, 4)
    prof = stepwatch.Profiler(flops=True)
    inst = stepwatch.torch.instrument(prof, flops=True)
    try:
        assert inst.flops is None  # the profiler's Watch counts: no second one
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in [(torch.randn(8, 16), torch.randn(8, 4))] * 4:
            F.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    finally:
        stepwatch.torch.uninstrument()
    prof.close()
    notes = prof.snapshot().info()["notes"]
    assert float(notes["flops_forward"]) == 2 * 8 * 16 * 4
    assert float(notes["flops_backward"]) == 2 * 8 * 16 * 4  # the weight's gradient only


def test_per_phase_block_and_json():
    """FLOPs, FLOP/s and MFU of forward, backward and optimizer: each phase's FLOPs over its
    own host time per steady step, in the text report's block and the JSON's "efficiency"."""
    import json
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    prof = stepwatch.Profiler(flops={"peak_flops": 1e11}, warmup_steps=1, live=False)
    opt = torch.optim.Adam(model.parameters())
    fwd, bwd, step_opt = (prof.action(n) for n in ("forward", "backward", "optimizer"))
    with prof.phase("train"):
        for x, y in batches(6):
            with prof.step(len(x)):
                with fwd:
                    loss = F.mse_loss(model(x), y)
                with bwd:
                    loss.backward()
                with step_opt:
                    opt.step()
                    opt.zero_grad()
    prof.close()
    notes = prof.snapshot().info()["notes"]
    rows = {r["action"]: r for r in prof.records("train")}
    steps = rows["step"]["count"]
    mm = 2 * 8 * 16 * 64 + 2 * 8 * 64 * 4
    assert float(notes["flops_forward"]) == mm
    doc = json.loads(prof.report("json"))["efficiency"]["phases"]
    assert [p["phase"] for p in doc] == ["forward", "backward", "optimizer"]
    for p in doc:
        rate = p["flops_per_step"] / (rows[p["phase"]]["total_ns"] / steps * 1e-9)
        assert p["flops_per_step"] == float(notes[f"flops_{p['phase']}"])
        assert math.isclose(p["flops_per_s"], rate, rel_tol=1e-9), p
        if p["phase"] == "optimizer":
            assert p["mfu"] is None and p["flops_per_step"] > 0  # elementwise: no MFU
        else:
            assert math.isclose(p["mfu"], rate / 1e11, rel_tol=1e-9), p
    text = prof.report("table")
    block = text.split("efficiency per phase (host time):\n", 1)[1].split("\n\n", 1)[0]
    # fixed columns: phase, FLOP/step, FLOP/s, MFU
    cells = [[line[2:12].strip(), line[13:25].strip(), line[26:38].strip(), line[39:].strip()]
             for line in block.splitlines()]
    assert cells[0] == ["phase", "FLOP/step", "FLOP/s", "MFU"]
    assert [c[0] for c in cells[1:]] == ["forward", "backward", "optimizer"]
    assert cells[1][1] == "20.5 k"  # 20,480 FLOPs
    assert cells[1][3] == f"{100 * doc[0]['mfu']:.1f} %" and cells[3][3] == "n/a"


def test_no_per_phase_block_with_flops_per_batch():
    prof = stepwatch.Profiler(flops={"flops_per_batch": 1000}, live=False)
    loop(prof, DropBN(), batches(2))
    prof.close()
    import json
    assert "efficiency per phase" not in prof.report("table")
    assert "efficiency" not in json.loads(prof.report("json"))


def test_live_line_shows_flops_and_mfu():
    """The live window's FLOP/s: the counted FLOPs per training step (noted once counted) times
    the window's training steps over its time; MFU over the given peak; in the line's text."""
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    prof = stepwatch.Profiler(flops={"peak_flops": 1e11}, live=False)
    live = stepwatch.Live(prof, window_s=3600)
    loop(prof, model, batches(4))
    v = live.update()
    per_step = float(prof.snapshot().info()["notes"]["flops_per_step"])
    assert per_step == 3 * (2 * 8 * 16 * 64 + 2 * 8 * 64 * 4) - 2 * 8 * 16 * 64  # no dx at the input
    assert math.isclose(v["flops_per_s"], per_step * 4 / v["window_s"], rel_tol=1e-9)
    assert math.isclose(v["mfu"], v["flops_per_s"] / 1e11, rel_tol=1e-9)
    text = live.format()
    assert re.search(r"  [\d.]+ [kMG]?FLOP/s \d+\.\d % MFU", text), text
    assert "FLOP/s" not in live.format(width=60)  # a narrow line leaves it out whole
    prof.close()

    plain = stepwatch.Profiler(live=False)
    live = stepwatch.Live(plain, window_s=3600)
    loop(plain, model, batches(2))
    v = live.update()
    assert v["flops_per_s"] is None and v["mfu"] is None and "FLOP/s" not in live.format()
    plain.close()


def test_live_line_with_flops_per_batch_during_the_run():
    """flops_per_batch given (an int): the live line has FLOP/s from the first batch on, not
    only at close; with gradient accumulation (3 batches a step) the first optimizer step
    notes all three batches' FLOPs."""
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(16, 4))
    prof = stepwatch.Profiler(flops={"flops_per_batch": 1000, "peak_flops": 1e9}, live=False)
    live = stepwatch.Live(prof, window_s=3600)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    with prof.phase("train"):
        for _ in range(4):
            with prof.step(24):
                for x, y in batches(3):
                    F.mse_loss(model(x), y).backward()
                    seen.append(float(prof.snapshot().info()["notes"]["flops_per_step"]))
                opt.step()
                opt.zero_grad()
    assert seen[0] == 1000  # one batch a step until the first step says more
    assert seen[3:] == [3000] * 9  # the first optimizer step: its three batches
    v = live.update()  # still running: not closed
    assert not prof.closed
    assert math.isclose(v["flops_per_s"], 3000 * 4 / v["window_s"], rel_tol=1e-9)
    assert math.isclose(v["mfu"], v["flops_per_s"] / 1e9, rel_tol=1e-9)
    assert re.search(r"  [\d.]+ [kMG]?FLOP/s \d+\.\d % MFU", live.format())
    prof.close()
