"""Device statistics and device time from Python (docs/device.md), on a machine without a GPU:
the C reader's CPU and memory figures against psutil in the same moments, the sampler's
counters in the run file, the HTML report's device charts drawn by a real Chromium, and GPU
time per phase on a clock of fake events (FakeGPU: one stream of a GPU that runs queued
kernels in real time) through Profiler(device_time=factory), also under
stepwatch.torch.instrument() on a real torch loop. Without CUDA, device_time=True warns and
changes nothing."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import stepwatch
from stepwatch.devicestats import CPU_KEYS, DeviceStats

from conftest import within

psutil = pytest.importorskip("psutil", reason="psutil is the reference (scripts/venv.sh)")


class FakeGPU:
    """One stream of a GPU running queued kernels in real time. launch(s) queues a kernel of
    s seconds; an event recorded now is reached when the GPU has run what was queued before
    it. Events have torch.cuda.Event's methods; synchronize() is counted, so a test proves
    stepwatch never calls it."""

    def __init__(self):
        self.queue_end = 0
        self.synchronized = 0
        self.events = 0

    def launch(self, seconds):
        self.queue_end = max(self.queue_end, time.monotonic_ns()) + int(seconds * 1e9)

    def idle(self):
        """Wait until the GPU ran everything (as the test's own synchronize)."""
        time.sleep(max(0, self.queue_end - time.monotonic_ns()) / 1e9 + 0.002)

    def event(self):
        self.events += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu):
        self.gpu, self.at = gpu, None

    def record(self):
        self.at = max(time.monotonic_ns(), self.gpu.queue_end)
        self.gpu.queue_end = self.at

    def query(self):
        return self.at is not None and time.monotonic_ns() >= self.at

    def elapsed_time(self, end):
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        return (end.at - self.at) / 1e6

    def synchronize(self):
        self.gpu.synchronized += 1


def counters(snapshot):
    return {c["name"]: c for c in snapshot.info()["counters"]}


# ---- the reader against psutil ---------------------------------------------------------

def test_cpu_and_memory_figures_match_psutil():
    stats = DeviceStats()
    psutil.cpu_percent()
    stats.read()  # both intervals start now
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:  # keep a core busy: the figure is not trivially 0
        pass
    mine, theirs = stats.read(), psutil.cpu_percent()
    vm, swap = psutil.virtual_memory().percent, psutil.swap_memory().percent
    print(f"cpu_percent {mine['cpu_percent']:.1f} (psutil {theirs}), vm {mine['cpu_vm_percent']:.2f} "
          f"({vm}), swap {mine['cpu_swap_percent']:.2f} ({swap})")
    assert set(mine) == set(CPU_KEYS)  # Lightning's CPU keys, on CPU
    assert abs(mine["cpu_percent"] - theirs) <= 10
    assert abs(mine["cpu_vm_percent"] - vm) <= 1.0  # psutil rounds to 0.1
    assert abs(mine["cpu_swap_percent"] - swap) <= 1.0


def test_extra_stats_and_cpu_stats_switch():
    extra = DeviceStats(extra_stats=True)
    values = extra.read()
    assert {"process_cpu_percent", "process_rss_bytes", "process_peak_rss_bytes"} <= set(values)
    rss = psutil.Process().memory_info().rss
    assert within(values["process_rss_bytes"], rss, 0.10)
    assert not any(k.startswith("gpu") for k in values)  # no NVML here ...
    assert extra.gpu_error  # ... and it says why
    assert DeviceStats(cpu_stats=False).read() == {}  # CPU only, CPU stats off: nothing
    assert set(DeviceStats(cpu_stats=True).read()) == set(CPU_KEYS)
    with pytest.raises(ValueError, match="cpu_stats"):
        DeviceStats(cpu_stats="yes")


# ---- the sampler -------------------------------------------------------------------------

def test_sampler_counters_reach_the_run_file(tmp_path, build_dir):
    path = tmp_path / "run.db"
    prof = stepwatch.Profiler(run_file=str(path), device_stats=0.05)
    with prof.phase("train"):
        for _ in range(10):
            with prof.step(8):
                time.sleep(0.02)
    live = counters(prof.snapshot())
    prof.close()
    saved = counters(stepwatch.load(str(path)))
    for name in ("cpu_percent", "cpu_vm_percent", "cpu_swap_percent", "process_cpu_percent",
                 "process_rss_bytes", "process_peak_rss_bytes"):
        assert live[name]["count"] >= 2, name
        assert saved[name]["count"] >= live[name]["count"], name  # the last sample at close
    assert within(saved["process_rss_bytes"]["last"], psutil.Process().memory_info().rss, 0.25)
    # ... and the Chrome trace's counter tracks, one point per sample
    trace = tmp_path / "trace.json"
    subprocess.run([os.path.join(build_dir, "stepwatch"), "export", str(path), "--chrome",
                    str(trace)], check=True, capture_output=True, timeout=60)
    tracks = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        if e.get("ph") == "C":
            tracks[e["name"]] = tracks.get(e["name"], 0) + 1
    assert tracks["cpu_percent"] == saved["cpu_percent"]["count"]
    assert tracks["process_rss_bytes"] == saved["process_rss_bytes"]["count"]
    with pytest.raises(ValueError, match="device_stats"):
        stepwatch.Profiler(device_stats=0)
    with pytest.raises(TypeError, match="device_time"):
        stepwatch.Profiler(device_time="cuda")


def test_html_draws_device_charts_beside_the_steps(tmp_path):
    path, html = tmp_path / "run.db", tmp_path / "run.html"
    gpu = FakeGPU()
    prof = stepwatch.Profiler(run_file=str(path), device_stats=0.05, device_time=gpu.event)
    fwd, loss = prof.action("forward"), prof.action("loss")
    with prof.phase("train"):
        for _ in range(12):
            with prof.step(8):
                gpu.launch(0.010)  # the GPU busy when forward begins: its time is exactly ...
                with fwd:
                    gpu.launch(0.004)  # ... its kernels' 4 ms, however late the host runs
                with loss:
                    gpu.idle()  # loss.item()
    gpu.idle()
    with prof.step(8):  # the last timed step resolves
        pass
    prof.close()
    stepwatch_cmd = os.path.join(os.environ["SW_BUILD_DIR"], "stepwatch")
    subprocess.run([stepwatch_cmd, "html", str(path), "-o", str(html)], check=True,
                   capture_output=True, timeout=60)
    text = html.read_text()
    doc = json.loads(text.split('id="sw-data">', 1)[1].split("</script>", 1)[0])
    fwd_row = [a for a in doc["actions"] if a["action"] == "forward" and a["phase"] == "train"]
    assert within(fwd_row[0]["device_mean_ns"], 4e6, 0.10)
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--enable-logging=stderr", "--v=0", "--dump-dom", html.as_uri()],
                          capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    assert 'data-rendered="1"' in dom and '<div id="sw-error"></div>' in dom
    device = dom.split('id="sw-device"', 1)[1].split("</section>", 1)[0]
    for name in ("cpu_percent", "process_rss_bytes", "device:train/forward"):
        assert f">{name}<" in device, name  # a chart titled with the counter
    assert ">Device<" in dom  # the actions tables' column


# ---- device time ---------------------------------------------------------------------------

def test_device_time_of_known_kernels_without_synchronizing():
    gpu = FakeGPU()
    prof = stepwatch.Profiler(device_time=gpu.event, warmup_steps=1)
    data, fwd, loss, bwd, opt = (prof.action(n) for n in
                                 ("data", "forward", "loss", "backward", "optimizer"))
    with prof.phase("train"):
        for _ in range(10):
            with prof.step(16):
                with data:
                    time.sleep(0.003)
                with fwd:
                    gpu.launch(0.008)
                    time.sleep(0.001)
                with loss:  # loss.item(): the host waits for the GPU
                    gpu.idle()
                with bwd:
                    gpu.launch(0.016)
                    time.sleep(0.002)
                with opt:
                    gpu.launch(0.004)
    gpu.idle()
    with prof.step(0):
        pass
    info = prof.device_time_info()
    snap = prof.snapshot()
    c = counters(snap)
    ms = {k.split("/")[1]: v["mean"] / 1e6 for k, v in c.items() if k.startswith("device:train/")}
    print("device ms:", {k: round(v, 3) for k, v in ms.items()})
    # Each phase's kernels' time. A host stalled between a phase's begin and its launch while
    # the GPU is idle adds to that step's device time, as it would on a real GPU (a loaded
    # machine stalls for ms): the fastest step is exact, the mean a little above.
    for phase, kernels in (("forward", 8), ("backward", 16), ("optimizer", 4)):
        fastest = c[f"device:train/{phase}"]["min"] / 1e6
        assert abs(fastest - kernels) <= 0.4, phase
        assert kernels - 0.4 <= ms[phase] <= 1.25 * kernels, phase
    # The 3 ms data wait ran beside the previous step's 4 ms optimizer kernel: hidden
    assert c["device:train/data"]["min"] < 0.5e6 and ms["data"] < 0.5 * 3
    assert c["device:train/forward"]["count"] == 9  # the warm-up step kept out
    assert info == {"steps_timed": 9, "steps_dropped": 0, "spans_dropped": 0,
                    "warmup_steps": 1, "failed": False, "steps_sampled_out": 0,
                    "sample_every": 1, "steps_captured": 0, "boundaries_captured": 0,
                    "most_behind": info["most_behind"], "events": gpu.events,
                    "intervals": 0, "intervals_timed": 0, "comm_intervals": 0,
                    "events_in": "Python"}
    assert 1 <= info["most_behind"] <= 3  # the loss synchronizes every step
    assert gpu.synchronized == 0
    assert gpu.events <= 3 * 12  # pooled: made for the steps in flight, reused
    report = prof.report()
    assert "Device time (GPU events, per call):" in report
    prof.close()
    assert prof.device_time_info() is None


def test_device_time_under_stepwatch_torch(sleepy):
    """The zero-code loop: its data wait is recorded after the fact (the step begins once
    the batch arrived), so device data is the GPU's idle time between steps."""
    torch = pytest.importorskip("torch")
    import stepwatch.torch as swtorch
    from torch.utils.data import DataLoader

    gpu = FakeGPU()

    class Launching(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def forward(self, x):
            gpu.launch(0.003)  # its kernels
            return self.lin(x)

    model = Launching()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = sleepy(12, sleep_s=0.01)
    prof = stepwatch.Profiler(device_time=gpu.event, warmup_steps=1)
    with swtorch.instrument(prof):
        for x, y in DataLoader(data, batch_size=None):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    gpu.idle()
    snap = prof.snapshot()
    c = counters(snap)
    host_data = next(r for r in snap.records("train") if r["action"] == "data")["mean_ns"]
    print({k: round(v["mean"] / 1e6, 3) for k, v in c.items()}, host_data / 1e6)
    # The GPU idled through the fetch, but for what was left of the forward's 3 ms kernel.
    assert host_data - 4e6 <= c["device:train/data"]["mean"] <= 1.05 * host_data
    assert c["device:train/forward"]["mean"] >= 3e6  # at least its kernels
    assert gpu.synchronized == 0
    prof.close()


@pytest.mark.parametrize("make_opt", ["AdamW", "AdamW-fused", "SGD"])
def test_instrument_times_optimizer_and_zero_grad_on_the_gpu(make_opt):
    """stepwatch.torch learns the optimizer's and zero_grad's host time when they end
    (sw_record); their GPU events are still recorded at their real boundaries
    (sw_device_mark), so both get device time, whatever the optimizer."""
    torch = pytest.importorskip("torch")
    import stepwatch.torch as swtorch

    gpu = FakeGPU()
    model = torch.nn.Linear(8, 1)
    opt = {"AdamW": lambda p: torch.optim.AdamW(p, foreach=True),
           "AdamW-fused": lambda p: torch.optim.AdamW(p, fused=True),
           "SGD": lambda p: torch.optim.SGD(p, lr=0.01)}[make_opt](model.parameters())
    opt.register_step_pre_hook(lambda *a: gpu.launch(0.002))  # its kernels: 2 ms
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    prof = stepwatch.Profiler(device_time=gpu.event)
    with swtorch.instrument(prof):
        for _ in range(8):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            gpu.launch(0.001)  # between zero_grad and backward: in no phase
            loss.backward()
            opt.step()
    gpu.idle()
    with prof.step(0):
        pass
    c = counters(prof.snapshot())
    print({k: (v["count"], round(v["mean"] / 1e6, 3)) for k, v in c.items()})
    assert c["device:train/optimizer"]["count"] >= 7
    assert c["device:train/optimizer"]["min"] >= 1.9e6  # its 2 ms kernel
    assert c["device:train/zero_grad"]["count"] >= 7
    assert c["device:train/zero_grad"]["min"] < 1e6  # not the 1 ms launched after it
    prof.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # it is shown
def test_device_time_stops_when_the_runtime_fails():
    class Broken(FakeEvent):
        fail = False

        def record(self):
            if Broken.fail:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            super().record()

    gpu = FakeGPU()
    prof = stepwatch.Profiler(device_time=lambda: Broken(gpu))
    fwd = prof.action("forward")
    with prof.phase("train"):
        for i in range(6):
            Broken.fail = i >= 3
            with prof.step(1):  # training goes on whatever the clock does
                with fwd:
                    pass
    assert prof.device_time_info()["failed"] is True
    assert prof.snapshot().info()["steps"] == 6
    prof.close()


def test_device_time_true_without_cuda_changes_nothing():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: this test is for machines without it")
    with pytest.warns(RuntimeWarning, match="no device time"):
        prof = stepwatch.Profiler(device_time=True)
    plain = stepwatch.Profiler()
    for p in (prof, plain):
        with p.phase("train"):
            for _ in range(3):
                with p.step(2):
                    with p.action("forward"):
                        pass
    assert prof.device_time_info() is None
    assert prof.snapshot().info()["counters"] == []
    assert "Device" not in prof.report()
    assert [(r["action"], r["phase"], r["count"]) for r in prof.records()] == \
        [(r["action"], r["phase"], r["count"]) for r in plain.records()]
    prof.close()
    plain.close()


# ---- stepwatch run -------------------------------------------------------------------------

def test_stepwatch_run_device_stats(tmp_path, build_dir):
    script = tmp_path / "train.py"
    script.write_text(
        "import time, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for x, y in DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8):\n"
        "    time.sleep(0.05)\n"
        "    loss = ((m(x) - y) ** 2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n")
    run_file = tmp_path / "run.db"
    proc = subprocess.run([os.path.join(build_dir, "stepwatch"), "run", "--device-stats=0.1",
                           "--device-time", "--run-file", str(run_file), "--", sys.executable,
                           str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    c = counters(stepwatch.load(str(run_file)))
    assert c["process_rss_bytes"]["count"] >= 3 and c["cpu_percent"]["count"] >= 3
    assert "no device time" in proc.stderr  # asked for, said why not (no CUDA here)
    bad = subprocess.run([os.path.join(build_dir, "stepwatch"), "run", "--device-stats=0",
                          "--", "true"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--device-stats" in bad.stderr


# ---- the program's own errors (issue 31's crash) --------------------------------------------

def test_a_loop_that_raises_does_the_same_with_device_time():
    """A forward that raises ends its span while the program's exception is set: the event
    factory must not be called with it set (CPython's "SystemError: ... returned a result with
    an exception set"), a factory that then fails must not crash the process (it did:
    segfault), and the program must catch exactly its own errors, as without stepwatch. One
    process runs the loop plain, then timed, then with factories failing (as torch.cuda.Event
    does while a stream captures)."""
    pytest.importorskip("torch")
    script = os.path.join(os.path.dirname(__file__), "scripts", "device_raising_loop.py")
    modes = ["plain", "timed", "factory-fails", "factory-fails-capturing"]
    proc = subprocess.run([sys.executable, script, *modes], capture_output=True, text=True,
                          timeout=300)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    out = dict(part.split("\n", 1) for part in proc.stdout.split("== ")[1:])
    err = dict(part.split("\n", 1) for part in proc.stderr.split("== ")[1:])
    assert set(out) == set(modes)
    assert out["plain"].count("caught RuntimeError: Error: accessing tensor output") == 3
    for mode in modes[1:]:
        assert out[mode] == out["plain"], mode  # the same errors caught, the same losses
        assert "SystemError" not in err[mode]
    assert "timed True failed False" in err["timed"]  # timing went on through the errors
    assert "Exception ignored" not in err["timed"]
    for mode in modes[2:]:
        assert "failed True" in err[mode]  # stopped, the training untouched
    assert "device time stopped: the GPU runtime failed to create an event" in proc.stderr


def test_device_time_true_records_in_c_on_the_step_stream(monkeypatch, fake_cudart):
    """device_time=True records through the CUDA runtime from C (here the fake runtime of
    tests/device/fake_cudart.c, with torch's answers stood in for: no CUDA here): the stream
    is asked once per step, no Python event is ever made, the phases get their kernels'
    time."""
    import ctypes

    from stepwatch import devicestats

    fake = fake_cudart  # the same library stepwatch opens: one fake GPU
    asked, made = [], []
    monkeypatch.setattr(devicestats, "_torch_clock", lambda: (
        lambda: made.append(1), lambda: True, lambda: asked.append(1) or 0))
    prof = stepwatch.Profiler(device_time=True)
    fwd, bwd = prof.action("forward"), prof.action("backward")
    with prof.phase("train"):
        for _ in range(6):
            with prof.step(1):
                with fwd:
                    fake.fake_gpu_launch(2_000_000)  # 2 ms of kernels
                with bwd:
                    fake.fake_gpu_launch(3_000_000)
    time.sleep(max(0, fake.fake_gpu_idle_at() - time.monotonic_ns()) / 1e9 + 0.005)
    with prof.step(0):
        pass
    c = counters(prof.snapshot())
    info = prof.device_time_info()
    counts = (ctypes.c_uint64 * 6)()
    fake.fake_gpu_counts(counts)
    print(info, list(counts))
    assert made == [] and len(asked) == 7  # no Python event; the stream once per step
    assert info["events_in"] == "C"
    assert info["steps_timed"] == 6 and not info["failed"]
    assert within(c["device:train/forward"]["min"], 2e6, 0.05)
    assert within(c["device:train/backward"]["min"], 3e6, 0.05)
    assert counts[0] == 0  # never synchronized
    prof.close()


def test_gpu_check_says_no_gpu_and_passes_without_one(tmp_path):
    """make gpu-check on a machine without a GPU: skipped, said, exit 0, the JSON says why
    (scripts/gpu-check.sh without nvidia-smi; scripts/gpu_check.py with torch lacking CUDA)."""
    root = os.environ.get("SW_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: make gpu-check runs for real")
    env = dict(os.environ, PATH="/usr/bin:/bin", PYTHON=sys.executable)  # no nvidia-smi there
    if shutil.which("nvidia-smi", path=env["PATH"]):
        pytest.skip("nvidia-smi is installed here")
    sh = subprocess.run([os.path.join(root, "scripts", "gpu-check.sh"), "", str(tmp_path / "a.json")],
                        capture_output=True, text=True, timeout=60, env=env)
    assert sh.returncode == 0 and "gpu-check: no GPU: skipped" in sh.stdout, sh.stderr
    out = tmp_path / "b.json"
    py = subprocess.run([sys.executable, os.path.join(root, "scripts", "gpu_check.py"), "--out",
                         str(out)], capture_output=True, text=True, timeout=120)
    assert py.returncode == 0, py.stderr
    assert "gpu-check: no GPU: skipped (torch.cuda.is_available() is False)" in py.stdout
    assert json.loads(out.read_text()) == {"skipped": "torch.cuda.is_available() is False"}
