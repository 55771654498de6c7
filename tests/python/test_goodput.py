"""stepwatch.goodput: the run's wall time split into steady training and its losses by cause,
in a real zero-code PyTorch loop whose start-up, data wait and idle time are known."""
import time

import pytest

torch = pytest.importorskip("torch")

import stepwatch  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402
from stepwatch import goodput  # noqa: E402


def run(sleepy, startup_s=0.2, idle_s=0.03, steps=6, run_file=None):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = sleepy(steps, sleep_s=0.01, batch=4, features=8)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = stepwatch.Profiler(warmup_steps=1, run_file=run_file)
    swtorch.instrument(prof)
    try:
        t0 = time.perf_counter_ns()
        time.sleep(startup_s)  # the script's start: before any step
        slept_startup = time.perf_counter_ns() - t0
        idle = 0
        for x, y in torch.utils.data.DataLoader(data, batch_size=None):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            t0 = time.perf_counter_ns()
            time.sleep(idle_s)  # after the optimizer: the next step's (the optimizer rule)
            idle += time.perf_counter_ns() - t0
        model.eval()
        with torch.no_grad():
            model(torch.randn(64, 8))
    finally:
        swtorch.uninstrument()
    return prof, data, slept_startup, idle


def test_parts_add_up_to_the_wall_and_name_the_known_losses(sleepy):
    prof, data, startup, idle = run(sleepy)
    p = goodput.parts(prof.snapshot())
    causes = sum(p[c] for c in goodput.CAUSES)
    assert causes + p["steady_ns"] == p["wall_ns"]  # every ns in exactly one part
    assert p["goodput"] == pytest.approx(100.0 * p["steady_ns"] / p["wall_ns"])
    assert p["data wait"] >= data.slept_ns  # the loader's sleeps are data wait
    assert p["start-up"] >= startup
    # steps follow each other under the optimizer rule: the loop's own work after an
    # optimizer step is the next step's (steady or warm-up), the last one's the end
    assert p["steady_ns"] + p["warm-up"] + p["idle"] + p["the end"] >= idle
    assert p["evaluation"] > 0  # the validation forward
    notes = prof.snapshot().info()["notes"]  # uninstrument() noted them
    assert float(notes["goodput"]) == pytest.approx(p["goodput"], abs=0.05)
    cause, _, share = notes["goodput_loss"].partition(":")
    assert cause == max(goodput.CAUSES, key=lambda c: p[c])
    assert float(share) == pytest.approx(100.0 * p[cause] / p["wall_ns"], abs=0.05)
    assert notes["goodput_parts"].startswith(f"{float(notes['goodput']):.1f} % of ")
    text = prof.report()
    assert "\ngoodput: " + notes["goodput_parts"] in text


def test_low_goodput_is_a_finding_naming_the_largest_loss(sleepy, tmp_path):
    path = str(tmp_path / "run.db")
    prof, *_ = run(sleepy, startup_s=1.0, idle_s=0.0, steps=3, run_file=path)
    notes = prof.snapshot().info()["notes"]
    prof.close()
    assert float(notes["goodput"]) < 50 and notes["goodput_loss"].startswith("start-up:")
    found = stepwatch.diagnose(path, "json")
    assert '"low-goodput"' in found and "start-up takes" in found


def test_no_training_no_goodput():
    prof = stepwatch.Profiler()
    with prof.phase("valid"):
        with prof.step(1):
            pass
    assert goodput.parts(prof.snapshot()) is None and goodput.note(prof) is None
