"""Communication on the device (docs/collectives.md, "On the GPU"): on the CPU (gloo) the
collectives, their async waits and DDP's comm hook bracket nothing, record nothing and print
nothing, device time on or off; the extension's device_comm_* calls reach the per-step
figures and the report's line (through a Python event clock on the host); and DDP's tail
ends after DDP's own final callback, in the real autograd engine."""
import re
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")
dist = torch.distributed
if not dist.is_available():
    pytest.skip("torch without torch.distributed", allow_module_level=True)

import stepwatch  # noqa: E402
import stepwatch.distributed as swdist  # noqa: E402
import stepwatch.torch as swtorch  # noqa: E402
from stepwatch import collectives  # noqa: E402
from test_device import FakeGPU  # noqa: E402 (torch.cuda.Event's methods on the host)


class Counting:
    """The profiler's device calls, counted (what the recorder's device path would make)."""

    def __init__(self, profiler):
        self.profiler, self.calls = profiler, 0

    def __getattr__(self, name):
        self.calls += 1
        return getattr(self.profiler, name)


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0,
                            world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def counters(prof):
    return {c["name"]: c for c in prof.snapshot().info()["counters"]}


@pytest.mark.parametrize("timed", [True, False], ids=["device-time", "no-device-time"])
def test_cpu_collectives_bracket_nothing(one_rank, capfd, timed):
    device_time = FakeGPU().event if timed else False
    prof = stepwatch.Profiler(device_time=device_time)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, t = torch.randn(8, 64), torch.zeros(1024)
    swtorch.instrument(prof)
    swdist.watch(prof)
    rec = collectives._recorder
    assert (rec.device is not None) == bool(device_time)
    if rec.device is not None:
        rec.device.profiler = counting = Counting(prof)
    try:
        with prof.phase("train"):
            for _ in range(6):
                with prof.step(1):
                    model(x).square().mean().backward()
                    opt.step()
                    opt.zero_grad()
                    dist.all_reduce(t)
                    dist.all_reduce(t, async_op=True).wait()
            with prof.step(1):
                pass
        assert rec.device is None or (rec.device.pending == {} and not rec.device.timed_works)
    finally:
        swdist.unwatch()
        swtorch.uninstrument()
    rows = {r["action"]: r for r in prof.records("all")}
    assert rows["collective:all_reduce"]["count"] == 12  # timed on the host as ever
    if device_time:
        assert counting.calls == 0  # the CPU path never asked the device for anything
        info = prof.device_time_info()
        assert info["steps_timed"] >= 6 and info["comm_intervals"] == 0
    assert not [n for n in counters(prof) if n.endswith(("/comm", "/comm_exposed"))]
    assert "Communication" not in prof.report()
    prof.close()
    out, err = capfd.readouterr()
    assert "Communication" not in out + err and "device" not in err


def waiting_steps(prof, steps=4):
    """steps train steps whose stream "waits" 2 ms for a collective inside the forward: the
    host time each wait took."""
    forward = prof.action("forward")
    waited = []
    with prof.phase("train"):
        for _ in range(steps):
            with prof.step(1):
                with forward:
                    token = prof.device_comm_begin()
                    assert token != 0
                    t0 = time.perf_counter_ns()
                    time.sleep(0.002)
                    prof.device_comm_end(token)
                    waited.append(time.perf_counter_ns() - t0)
        with prof.step(1):  # the last one resolves at this one's begin
            pass
    return waited


def test_device_comm_calls_reach_the_figures_and_the_report():
    prof = stepwatch.Profiler(device_time=FakeGPU().event)
    assert prof.device_comm_begin() == 0  # no step open: not timed
    waited = waiting_steps(prof)
    c = counters(prof)
    comm, exposed = c["device:train/comm"], c["device:train/comm_exposed"]
    assert comm["count"] == exposed["count"] == 4
    assert comm["min"] >= 2e6 and comm["max"] <= 1.01 * max(waited) + 1e5
    assert exposed["mean"] == comm["mean"]  # on the step's stream: exposed in full
    assert prof.device_time_info()["comm_intervals"] == 4
    text = prof.report()
    assert "\nCommunication: " in text and " exposed (100 %)." in text
    prof.close()


def test_html_at_a_glance_says_it(tmp_path):
    from test_html_layout import chromium
    exe = chromium()
    path, html = tmp_path / "run.db", tmp_path / "report.html"
    prof = stepwatch.Profiler(device_time=FakeGPU().event, run_file=str(path), live=False)
    waiting_steps(prof)
    prof.close()
    stepwatch.html(path, html)
    proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           html.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = re.search(r'<p [^>]*data-comm="train"[^>]*>([^<]*)</p>', proc.stdout)
    assert line, proc.stdout[-2000:]
    assert re.fullmatch(r"Communication: [0-9.]+ ms per step on the device, [0-9.]+ ms "
                        r"exposed \(100(\.0)? ?%\)", line.group(1)), line.group(1)


def test_ddp_tail_ends_after_ddp_final_callback():
    """_backward_tail at the last bucket's hook: its end (the waits recorded, then the
    device interval ended) runs after a final callback queued after it (DDP queues its
    finalize_backward, which makes the stream wait, once the last bucket's hook returned)."""
    order = []

    class Profiler:
        def device_comm_begin(self):
            order.append("begin")
            return 7

        def device_comm_end(self, token):
            order.append(("end", token))

    class State:
        def backward_end(self):
            order.append("waits")

    engine = torch.autograd.Variable._execution_engine

    def last_bucket_hook(grad):
        swdist._backward_tail(State(), Profiler())
        engine.queue_callback(lambda: order.append("ddp finalize"))
        return grad

    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(last_bucket_hook)
    y.sum().backward()
    assert order == ["begin", "ddp finalize", "waits", ("end", 7)]
