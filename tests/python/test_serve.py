"""The live report's server (`stepwatch serve`, `stepwatch run --serve`; docs/live.md), really
started: the C command on real run files, real sockets, real headless Chromium over the
DevTools protocol, Prometheus' own parser (prometheus_client) on /metrics, and a real torch
training run. The hostile clients (path traversal, huge headers, slowloris, many connections)
must leave it up, answering others, with its memory bounded; a loop's step time is held to
its own clock, polled and not polled, side by side in one run."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

import stepwatch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cdp import Browser  # noqa: E402


def cli(build_dir):
    exe = os.path.join(build_dir or "", "stepwatch")
    if not build_dir or not os.access(exe, os.X_OK):
        pytest.skip(f"no C command at {exe} (SW_BUILD_DIR)")
    probe = subprocess.run([exe, "serve", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("this stepwatch has no serve command")
    return exe


def make_run(path, steps=60, name="served"):
    p = stepwatch.Profiler(name=name, run_file=str(path), live=False)
    for _ in range(steps):
        with p.step(16):
            with p.action("forward"):
                sum(range(3000))
            with p.action("backward"):
                sum(range(6000))
    p.close()
    return path


class Server:
    """A `stepwatch ...` process that serves; its URL read from what it prints."""

    def __init__(self, argv, cwd, env=None):
        self.err = open(os.path.join(cwd, f"server-{time.monotonic_ns()}.err"), "w+")
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=self.err, stderr=self.err, text=True, env=env)
        deadline = time.monotonic() + 120
        self.url = None
        while self.url is None and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
            m = re.search(r"serving the live report at (http://\S+)", self.stderr())
            self.url = m.group(1) if m else None
        if self.url is None and "built without libmicrohttpd" in self.stderr():
            pytest.skip("this stepwatch was built without libmicrohttpd")
        assert self.url, self.stderr()
        m = re.match(r"http://([^/]+):(\d+)(/.*)", self.url)
        self.port, self.prefix = int(m.group(2)), m.group(3)

    def stderr(self):
        if self.err.closed:
            return self.said
        self.err.seek(0)
        return self.err.read()

    def get(self, path="", timeout=60):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.said = self.stderr()
        self.err.close()
        return self.proc.returncode


@pytest.fixture
def served(tmp_path, build_dir):
    servers = []

    def start(*args, cwd=None):
        s = Server([cli(build_dir), *args], str(cwd or tmp_path))
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def raw(port, data, source="127.0.0.1", timeout=30):
    """Send data as it is on a socket from source; what came back before the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0)) as c:
        c.sendall(data)
        out = b""
        try:
            while chunk := c.recv(65536):
                out += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        return out


def status_of(reply):
    m = re.match(rb"HTTP/1\.[01] (\d+)", reply)
    return int(m.group(1)) if m else None


# ---- what it serves ----

def test_metrics_parse_with_prometheus_client(tmp_path, served):
    parser = pytest.importorskip("prometheus_client.parser")
    db = make_run(tmp_path / "run.db", steps=60)
    s = served("serve", str(db), "--port", "0")
    status, headers, body = s.get("metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert headers["X-Stepwatch-Run"] == "complete"
    families = {f.name: f for f in parser.text_string_to_metric_families(body.decode())}
    assert {"stepwatch_steps", "stepwatch_samples", "stepwatch_steps_per_second",
            "stepwatch_samples_per_second", "stepwatch_step_seconds", "stepwatch_category_share",
            "stepwatch_memory_bytes", "stepwatch_run_complete", "stepwatch_run_info"} <= set(families)

    def one(name, suffix="", **labels):
        got = [x.value for x in families[name].samples
               if x.name == name + suffix and all(x.labels.get(k) == v for k, v in labels.items())]
        assert len(got) == 1, (name, labels, families[name].samples)
        return got[0]

    assert families["stepwatch_steps"].type == "counter"
    assert one("stepwatch_steps", "_total", rank="0") == 60
    assert one("stepwatch_samples", "_total", rank="0") == 60 * 16
    assert one("stepwatch_run_complete") == 1
    # The rate over the last 10 s: every step of this short run, samples 16 per step.
    sps = one("stepwatch_steps_per_second", rank="0")
    assert sps > 0
    assert one("stepwatch_samples_per_second", rank="0") == pytest.approx(16 * sps, rel=1e-6)
    steady = one("stepwatch_step_seconds", "_count", rank="0", phase="train")
    p50 = one("stepwatch_step_seconds", rank="0", phase="train", quantile="0.5")
    p99 = one("stepwatch_step_seconds", rank="0", phase="train", quantile="0.99")
    mean = one("stepwatch_step_seconds", "_sum", rank="0", phase="train") / steady
    assert 0 < p50 <= p99 and p50 < 10 * mean
    shares = {x.labels["category"]: x.value for x in families["stepwatch_category_share"].samples}
    assert sum(shares.values()) == pytest.approx(1, abs=0.01)
    assert shares["backward"] > shares["data"] and shares["forward"] > 0
    assert one("stepwatch_memory_bytes", rank="0", kind="rss") > 1 << 20
    # The same figures as the run file's own report.
    rec = stepwatch.load(str(db))
    assert rec.info()["steps"] == 60


FLOPS_TRAIN = r"""
import time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 8)
for i in range(160):
    if i % 20 == 19:
        time.sleep(0.08)  # a step made slow: off the CPU, not runnable
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""


def test_metrics_carry_mfu_and_slow_steps_as_the_run_file_has_them(tmp_path, build_dir):
    """A real torch loop under `stepwatch run --flops --peak-flops 1e12` with every 20th step
    slowed by a sleep: /metrics (read by prometheus_client's parser) gives the rank's MFU,
    model FLOP/s, FLOPs per step and peak as the run file's notes hold them, and its slow
    steps per cause as the run file's slow_steps table counts them (read with sqlite3)."""
    pytest.importorskip("torch")
    parser = pytest.importorskip("prometheus_client.parser")
    exe = cli(build_dir)
    (tmp_path / "train.py").write_text(FLOPS_TRAIN)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run([exe, "run", "--flops", "--peak-flops", "1e12", "--run-file", "run.db", "--",
                    "python", "train.py"], cwd=tmp_path, env=env, check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    db = tmp_path / "run.db"
    s = Server([exe, "serve", str(db), "--port", "0"], str(tmp_path))
    try:
        body = s.get("metrics")[2].decode()
    finally:
        s.stop()
    fam = {f.name: f for f in parser.text_string_to_metric_families(body)}

    def one(name, suffix="", **labels):
        got = [x for x in fam[name].samples
               if x.name == name + suffix and all(x.labels.get(k) == v for k, v in labels.items())]
        assert len(got) == 1, (name, labels, fam[name].samples)
        return got[0]

    notes = stepwatch.load(str(db)).info()["notes"]
    assert float(notes["mfu"]) > 0
    assert one("stepwatch_mfu_ratio", rank="0").value == pytest.approx(float(notes["mfu"]))
    assert one("stepwatch_model_flops_per_second", rank="0").value == pytest.approx(
        float(notes["tflops_achieved"]) * 1e12)
    assert one("stepwatch_model_flops_per_step", rank="0").value == pytest.approx(
        float(notes["flops_per_step"]))
    peak = one("stepwatch_peak_flops_per_second", rank="0")
    assert peak.value == 1e12 and peak.labels["dtype"] == notes.get("compute_dtype", "")
    assert fam["stepwatch_mfu_ratio"].type == "gauge"
    import sqlite3
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    by_cause = dict(con.execute("SELECT cause, count(*) FROM slow_steps GROUP BY cause"))
    judged = con.execute("SELECT sum(slow_judged) FROM ranks").fetchone()[0]
    table_excess = con.execute("SELECT sum(duration_ns - median_ns) FROM slow_steps").fetchone()[0]
    con.close()
    assert sum(by_cause.values()) >= 4, by_cause  # most of the 8 sleeps at least
    got = {x.labels["cause"]: x.value for x in fam["stepwatch_slow_steps"].samples
           if x.name == "stepwatch_slow_steps_total"}
    assert {c: n for c, n in got.items() if n} == by_cause
    assert fam["stepwatch_slow_steps"].type == "counter"
    assert one("stepwatch_judged_steps", "_total", rank="0").value == judged
    excess = one("stepwatch_slow_step_excess_seconds", "_total", rank="0").value
    # what the run file's slow steps say (a loaded machine adds slow steps of its own)
    assert excess == pytest.approx(table_excess / 1e9, rel=0.01), (excess, table_excess, by_cause)


def test_data_is_what_the_html_report_embeds(tmp_path, served, build_dir):
    db = make_run(tmp_path / "run.db")
    s = served("serve", str(db), "--port", "0")
    _, headers, body = s.get("data.json")
    assert headers["Content-Type"] == "application/json"
    page = tmp_path / "report.html"
    subprocess.run([cli(build_dir), "html", str(db), "-o", str(page)], check=True,
                   capture_output=True)
    embedded = re.search(r'id="sw-data">\n(.*?)\n</script>', page.read_text(), re.S).group(1)
    assert json.loads(body) == json.loads(embedded)
    _, headers, live = s.get("")
    assert headers["Content-Type"].startswith("text/html")
    live = live.decode()
    assert "connect-src 'self'" in live and "window.swReport.redraw" in live
    assert "connect-src" not in page.read_text()  # the static report still fetches nothing


def test_waits_for_a_run_file_that_is_not_there_yet(tmp_path, served):
    (tmp_path / "runs").mkdir()
    s = served("serve", str(tmp_path / "runs"), "--port", "0")
    _, headers, body = s.get("data.json")
    assert headers["X-Stepwatch-Run"] == "waiting" and json.loads(body) is None
    make_run(tmp_path / "runs" / "stepwatch-0.db")
    deadline = time.monotonic() + 120
    while s.get("data.json")[1]["X-Stepwatch-Run"] == "waiting":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert json.loads(s.get("data.json")[2])["run"]["steps"] == 60


def test_a_directory_of_rank_files_is_one_page_of_every_rank(tmp_path, served):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(3):
        p = stepwatch.Profiler(name="ranks", run_file=str(d / f"stepwatch-{r}.db"), live=False,
                               rank=r, world_size=3)
        for _ in range(20 + 10 * r):
            with p.step(4):
                with p.action("forward"):
                    sum(range(2000 * (r + 1)))
        p.close()
    (d / "other.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 4080)  # not a run file
    s = served("serve", str(d), "--port", "0")
    data = json.loads(s.get("data.json")[2])
    assert data["run"]["ranks"] == 3
    parser = pytest.importorskip("prometheus_client.parser")
    fam = {f.name: f for f in parser.text_string_to_metric_families(s.get("metrics")[2].decode())}
    steps = {x.labels["rank"]: x.value for x in fam["stepwatch_steps"].samples}
    assert steps == {"0": 20, "1": 30, "2": 40}


# ---- safe by default ----

def test_only_three_paths_and_only_get(tmp_path, served):
    db = make_run(tmp_path / "run.db")
    (tmp_path / "secret.txt").write_text("root:x:0:0:secret\n")
    s = served("serve", str(db), "--port", "0")
    assert s.url.startswith("http://127.0.0.1:") and s.prefix == "/"
    hostile = [b"/../../../../etc/passwd", b"/%2e%2e/%2e%2e/etc/passwd", b"/data.json/../secret.txt",
               b"/..%2fsecret.txt", b"/secret.txt", b"//etc/passwd",
               b"/run.db", b"/./data.json", b"http://127.0.0.1/etc/passwd", b"/index.html",
               b"/metrics/", b"/%00", b"*"]
    for path in hostile:
        reply = raw(s.port, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status_of(reply) in (400, 404), (path, reply[:200])
        assert b"root:" not in reply and b"secret" not in reply.split(b"\r\n\r\n", 1)[-1]
    # A query string is no path: it is the metrics, whatever it says.
    reply = raw(s.port, b"GET /metrics?x=/etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(reply) == 200 and b"\r\n\r\n# HELP stepwatch_" in reply
    for method in (b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"TRACE"):
        reply = raw(s.port, method + b" /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                    b"Connection: close\r\n\r\nhello")
        assert status_of(reply) in (400, 405), (method, reply[:200])
    assert status_of(raw(s.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200
    assert s.get("metrics")[0] == 200


def test_huge_headers_are_refused_and_it_stays_up(tmp_path, served):
    db = make_run(tmp_path / "run.db")
    s = served("serve", str(db), "--port", "0")
    before = s.rss_kb()
    for size in (20_000, 1_000_000, 20_000_000):
        req = (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        try:
            reply = raw(s.port, req)
        except (BrokenPipeError, ConnectionResetError):
            reply = b""  # closed while we were still sending: refused too
        assert status_of(reply) in (None, 413, 431), reply[:200]
    reply = raw(s.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Many: 1\r\n" * 5000 + b"\r\n")
    assert status_of(reply) in (None, 413, 431)
    assert s.get("metrics")[0] == 200
    assert s.rss_kb() - before < 32 * 1024, "a refused request must not grow the server"


def test_slowloris_and_many_connections_leave_others_answered(tmp_path, served):
    db = make_run(tmp_path / "run.db")
    s = served("serve", str(db), "--port", "0")
    before = s.rss_kb()
    held = []
    stop = threading.Event()
    # 200 connections from 127.0.0.1, each sending a header byte now and then (slowloris).
    for _ in range(200):
        try:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=5,
                                         source_address=("127.0.0.1", 0))
            c.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            held.append(c)
        except OSError:
            pass

    def drip():
        while not stop.wait(1.0):
            for c in list(held):
                try:
                    c.sendall(b"a")
                except OSError:
                    held.remove(c)

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    try:
        time.sleep(2)
        # Another client (another address of the loopback) is answered meanwhile, in full.
        for _ in range(5):
            reply = raw(s.port, b"GET /data.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                        source="127.0.0.2", timeout=60)
            assert status_of(reply) == 200
            body = reply.split(b"\r\n\r\n", 1)[1]
            assert json.loads(body)["run"]["steps"] == 60
        assert s.proc.poll() is None
        assert s.rss_kb() - before < 64 * 1024, "many connections must not grow the server"
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
    # once the server has seen those closes (its per-address limit resets a connection
    # before: a fresh clone's run, once), 127.0.0.1 is answered again
    deadline = time.monotonic() + 10
    while True:
        try:
            assert s.get("metrics")[0] == 200
            break
        except OSError:  # reset by the per-address limit, or refused meanwhile
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_another_address_needs_the_flag_and_then_a_token(tmp_path, served):
    db = make_run(tmp_path / "run.db")
    s = served("serve", str(db), "--port", "0", "--bind", "0.0.0.0")
    token = re.fullmatch(r"/([0-9a-f]{32})/", s.prefix)
    assert token, s.prefix
    assert s.stderr().count(token.group(1)) == 1  # printed once, in the URL
    base = f"http://127.0.0.1:{s.port}"
    wrong = token.group(1)[:-1] + ("1" if token.group(1).endswith("0") else "0")  # one off
    for path in ("/", "/metrics", "/data.json", "/" + wrong + "/metrics", "/" + token.group(1)):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + path, timeout=30)
        assert e.value.code == 404, path
    with urllib.request.urlopen(base + s.prefix + "metrics", timeout=30) as r:
        assert r.status == 200
    other = served("serve", str(db), "--port", "0")
    assert other.prefix == "/"  # the loopback, by default, needs none


def test_bad_command_lines_are_named(tmp_path, build_dir):
    exe = cli(build_dir)
    for args, needle in ((["serve"], "serve needs a run file"),
                         (["serve", str(tmp_path / "nope.db")], "no such run file"),
                         (["serve", str(tmp_path), "--port", "70000"], "--port takes"),
                         (["run", "--bind", "0.0.0.0", "--", "true"], "give --serve too"),
                         (["run", "--serve=x", "--", "true"], "--port takes"),
                         (["run", "--linger", "5", "--", "true"], "give --serve too"),
                         (["run", "--serve=0", "--linger", "-1", "--", "true"], "--linger takes")):
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode in (2, 3) and needle in done.stderr, (args, done.stderr)


def test_a_batch_job_under_run_serve_ends_with_its_program(tmp_path, build_dir):
    """No terminal on standard input (a batch job, CI): once the program ends, run --serve
    exits with its status instead of waiting for a Ctrl-C that never comes."""
    exe = cli(build_dir)
    started = time.monotonic()
    done = subprocess.run([exe, "run", "--serve=0", "--run-file", "run.db", "--", sys.executable,
                           "-c", "import sys; sys.exit(3)"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    if "built without libmicrohttpd" in done.stderr:
        pytest.skip("this stepwatch was built without libmicrohttpd")
    assert done.returncode == 3, done.stderr
    assert "serving the live report at" in done.stderr
    assert "stays up" not in done.stderr
    # --linger keeps it up that long at most, and says so
    done = subprocess.run([exe, "run", "--serve=0", "--linger", "1", "--run-file", "run.db",
                           "--", sys.executable, "-c", "pass"], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "stays up for 1 s" in done.stderr, done.stderr
    assert time.monotonic() - started < 100


# ---- the training loop is not touched ----

LOOP = r"""
import json, sys, time
import stepwatch
out, seconds = sys.argv[1], float(sys.argv[2])
p = stepwatch.Profiler(name="polled", run_file=sys.argv[3], live=False)
rows = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    t0 = time.monotonic()
    with p.step(8):
        with p.action("forward"):
            sum(range(20000))
        with p.action("data"):
            time.sleep(0.002)
    rows.append((t0, time.monotonic() - t0))
p.close()
json.dump(rows, open(out, "w"))
"""


def test_step_time_does_not_move_while_a_client_polls(tmp_path, build_dir):
    """Quiet and polled windows of 2 s alternate in one run; the loop's own step times in
    each are compared: the median under polling (10 Hz, page + data + metrics) stays with
    the median of the quiet windows beside them."""
    exe = cli(build_dir)
    db, out = tmp_path / "run.db", tmp_path / "steps.json"
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    loop = subprocess.Popen([sys.executable, str(script), str(out), "24", str(db)])
    try:
        while not db.exists():
            time.sleep(0.05)
        s = Server([exe, "serve", str(db), "--port", "0"], str(tmp_path))
        windows, polls = [], 0
        start = time.monotonic()
        for k in range(10):
            w0 = start + 2 * k
            while time.monotonic() < w0:
                time.sleep(0.01)
            if k % 2:
                while time.monotonic() < w0 + 2:
                    for path in ("", "data.json", "metrics"):
                        s.get(path)
                        polls += 1
                    time.sleep(0.1)
                windows.append((w0, w0 + 2))
        assert loop.wait(timeout=120) == 0
    finally:
        if loop.poll() is None:
            loop.kill()
    s.stop()
    rows = json.loads(out.read_text())

    def polled(t):
        return any(a <= t < b for a, b in windows)

    def median(v):
        v = sorted(v)
        return v[len(v) // 2]

    inside = [d for t, d in rows if start <= t < start + 20 and polled(t)]
    outside = [d for t, d in rows if start <= t < start + 20 and not polled(t)]
    assert len(inside) > 100 and len(outside) > 100 and polls > 50
    ratio = median(inside) / median(outside)
    print(f"step median quiet {median(outside) * 1e3:.3f} ms, polled {median(inside) * 1e3:.3f} ms "
          f"({polls} requests), ratio {ratio:.3f}")
    assert ratio < 1.25, ratio


# ---- the proof: a real torch run under `stepwatch run --serve`, in real Chromium ----

TRAIN = r"""
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 2048
    def __getitem__(self, i):
        time.sleep(0.0004)
        return torch.randn(32), torch.randint(0, 4, ()).long()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
# Epochs go on until the test has seen the page update (it writes the stop file), so a
# slow browser start on a loaded machine never finds the run already over; capped anyway.
epoch = 0
while epoch < int(sys.argv[1]) and (epoch < 2 or not os.path.exists("stop")):
    epoch += 1
    for x, y in DataLoader(Slow(), batch_size=32):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
"""

SHOTS = os.environ.get("SW_LIVE_SHOTS")  # keep the screenshots there (outside the repository)

STEPS = "Number(document.getElementById('sw-live').getAttribute('data-steps') || 0)"


def drag_zoom(browser):
    """A drag across the first step chart, as a user zooms: the data-zoom it leaves."""
    return browser.eval("""(function () {
      var hit = document.querySelector('svg[data-chart="step-time"] rect.hit');
      var r = hit.getBoundingClientRect(), y = r.top + r.height / 2;
      function fire(type, f) {
        hit.dispatchEvent(new MouseEvent(type, { bubbles: true, cancelable: true,
          clientX: r.left + f * r.width, clientY: y }));
      }
      fire("mousedown", 0.2); fire("mousemove", 0.6); fire("mouseup", 0.6);
      return document.querySelector("div.steps").getAttribute("data-zoom");
    })()""")


def test_live_page_of_a_torch_run_in_chromium(tmp_path, build_dir):
    pytest.importorskip("torch")
    exe = cli(build_dir)
    (tmp_path / "train.py").write_text(TRAIN)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    s = Server([exe, "run", "--serve=0", "--linger", "600", "--run-file", "run.db", "--",
                "python", "train.py", "200"],
               str(tmp_path), env=env)
    browser = Browser(tmp_path)
    shots = SHOTS or str(tmp_path)
    os.makedirs(shots, exist_ok=True)
    try:
        browser.open(s.url)
        first = browser.wait_for(f"{STEPS} > 20 && document.body.getAttribute('data-rendered')")
        first = browser.eval(STEPS)
        zoom = drag_zoom(browser)
        assert zoom, "the drag zoomed nothing"
        browser.screenshot(os.path.join(shots, "live-1.png"))
        # A real pointer (trusted events) over the step chart: its tip is up.
        x, y = browser.eval("""(function () {
          var r = document.querySelector('svg[data-chart="step-time"] rect.hit').getBoundingClientRect();
          return [r.left + r.width * 0.5, r.top + r.height * 0.5]; })()""")
        browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        tip = "document.getElementById('sw-tip').style.display === 'block'"
        browser.wait_for(tip)
        polls = browser.eval("Number(document.getElementById('sw-live').getAttribute('data-polls'))")
        browser.wait_for(f"{STEPS} > {first} && Number(document.getElementById('sw-live')"
                         f".getAttribute('data-polls')) > {polls}")
        second = browser.eval(STEPS)
        assert browser.eval(tip), "the redraw took the hover's tip away"
        browser.screenshot(os.path.join(shots, "live-2.png"))
        assert second > first
        # Redrawn in place with new data: the page was not loaded again, the zoom is kept,
        # and the header's step count is the new one.
        assert browser.eval("document.querySelector('div.steps').getAttribute('data-zoom')") == zoom
        assert browser.eval("performance.getEntriesByType('navigation').length") == 1
        meta = browser.eval("document.querySelector('#sw-main .meta').textContent")
        assert re.search(r"steps: (\d[\d.]* ?k?)", meta)
        # The run ends: the same URL shows the final report.
        (tmp_path / "stop").write_text("")
        browser.wait_for("document.getElementById('sw-live').getAttribute('data-state') === 'complete'",
                         timeout=600)
        browser.eval("document.querySelector('button[data-action=\"reset-zoom\"]').click()")
        browser.screenshot(os.path.join(shots, "live-final.png"))
        live_text = browser.eval("document.getElementById('sw-main').innerText")
        final = tmp_path / "final.html"
        subprocess.run([exe, "html", str(tmp_path / "run.db"), "-o", str(final)], check=True,
                       capture_output=True)
        browser.call("Page.navigate", url=final.as_uri())
        browser.wait_for("document.body && document.body.getAttribute('data-rendered') === '1'")
        static_text = browser.eval("document.getElementById('sw-main').innerText")
        assert live_text == static_text
    finally:
        browser.close()
        code = s.stop()
    assert code == 0, s.stderr()
    assert "the run ended; its final report stays up" in s.stderr()


# ---- two nodes on one host: every rank on one page ----

def test_two_nodes_on_one_page_name_the_slow_rank(tmp_path, build_dir):
    """Two `stepwatch run -- torchrun --nnodes 2 --node_rank K --nproc_per_node 2` on one host
    (test_distributed.py's DDP script, rank 3's data loader slowed by a known delay), served
    as one directory while they run: the page's data has all four ranks and names rank 3,
    blamed on data, and so do /metrics and the page drawn in Chromium."""
    pytest.importorskip("torch.distributed")
    import test_distributed as td
    exe = cli(build_dir)
    d = tmp_path / "ranks"
    d.mkdir()
    script = tmp_path / "train_ddp.py"
    script.write_text(td.SCRIPT)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = td._env(DATA_RANK=3, STEPS=24)
    server = Server([exe, "serve", str(d), "--port", "0"], str(tmp_path))
    nodes = [subprocess.Popen(
        [exe, "run", "--run-file", str(d / "run-{rank}.db"), "--", "torchrun", "--nnodes=2",
         f"--node_rank={k}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
         f"--master_port={port}", str(script)],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for k in range(2)]
    browser = None
    try:
        outs = [n.communicate(timeout=600)[0] for n in nodes]
        assert [n.returncode for n in nodes] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
        deadline = time.monotonic() + 120
        while True:
            _, headers, body = server.get("data.json")
            data = json.loads(body)
            if headers["X-Stepwatch-Run"] == "complete" and data and data["run"]["ranks"] == 4:
                break
            assert time.monotonic() < deadline, (headers, data and data["run"])
            time.sleep(0.5)
        assert [r[0] for r in data["ranks"]["per_rank"]] == [0, 1, 2, 3]
        worst = data["ranks"]["stragglers"][0]
        assert (worst["rank"], worst["blame"]) == (3, "data"), data["ranks"]["stragglers"]
        parser = pytest.importorskip("prometheus_client.parser")
        fam = {f.name: f for f in parser.text_string_to_metric_families(
            server.get("metrics")[2].decode())}
        assert sorted(x.labels["rank"] for x in fam["stepwatch_steps"].samples) == ["0", "1", "2", "3"]
        excess = {x.labels["rank"]: x.labels["blame"]
                  for x in fam["stepwatch_straggler_excess_seconds"].samples}
        assert excess.get("3") == "data", excess
        browser = Browser(tmp_path)
        browser.open(server.url)
        browser.wait_for("document.body && document.body.getAttribute('data-rendered') === '1'")
        text = browser.eval("document.getElementById('sw-main').innerText")
        assert "ranks: 4" in text and "rank 3" in text, text[:3000]
        browser.eval("""(function () { var h = [].filter.call(document.querySelectorAll('h2'),
          function (e) { return /rank/i.test(e.textContent); })[0]; if (h) h.scrollIntoView(); })()""")
        browser.screenshot(os.path.join(SHOTS or str(tmp_path), "live-two-nodes.png"))
    finally:
        for n in nodes:
            if n.poll() is None:
                n.kill()
        if browser:
            browser.close()
        server.stop()


# ---- `stepwatch run --serve -- torchrun ...`: every rank of the node ----

def _ranks_seen(server):
    """The run state and the ranks of the page's heatmap, from data.json now."""
    _, headers, body = server.get("data.json")
    data = json.loads(body)
    per_rank = data["ranks"]["per_rank"] if data else []
    return headers["X-Stepwatch-Run"], [r[0] for r in per_rank], data


def _wait_ranks(server, ranks, deadline, running=True):
    """Poll until the page's heatmap holds ranks (while the run goes on when running)."""
    while True:
        state, seen, data = _ranks_seen(server)
        if seen == ranks and (state == "running" or not running):
            return data
        assert time.monotonic() < deadline, (state, seen)
        assert not running or state != "complete", f"the run ended before ranks {ranks} showed"
        time.sleep(0.3)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_run_serve_of_torchrun_shows_every_rank_while_it_runs(tmp_path, build_dir):
    """`stepwatch run --serve -- torchrun --nproc_per_node 3` (real gloo DDP, rank 1's data
    loader slowed): while the job runs, the page's data has a heatmap row for each of the
    three ranks, each rank's step count growing from its own run file; at the end the final
    page names rank 1, blamed on data."""
    pytest.importorskip("torch.distributed")
    import test_distributed as td
    exe = cli(build_dir)
    script = tmp_path / "train_ddp.py"
    script.write_text(td.SCRIPT)
    env = td._env(DATA_RANK=1, STEPS=300)  # 12 s at least: several of the page's rebuilds
    s = Server([exe, "run", "--serve=0", "--linger", "600", "--run-file",
                str(tmp_path / "run-{rank}.db"), "--", "torchrun", "--standalone",
                "--nproc_per_node=3", str(script)], str(tmp_path), env=env)
    try:
        deadline = time.monotonic() + 400
        first = _wait_ranks(s, [0, 1, 2], deadline)
        steps = {r[0]: r[1] for r in first["ranks"]["per_rank"]}
        while True:  # every rank's own count grows: each one's live data reaches the page
            state, seen, data = _ranks_seen(s)
            now = {r[0]: r[1] for r in data["ranks"]["per_rank"]} if seen == [0, 1, 2] else {}
            if now and all(now[r] > steps[r] for r in steps):
                break
            assert state == "running" and time.monotonic() < deadline, (state, steps, now)
            time.sleep(0.3)
        while _ranks_seen(s)[0] != "complete":
            assert time.monotonic() < deadline
            time.sleep(0.5)
        state, seen, data = _ranks_seen(s)
        assert seen == [0, 1, 2] and data["run"]["ranks"] == 3
        worst = data["ranks"]["stragglers"][0]
        assert (worst["rank"], worst["blame"]) == (1, "data"), data["ranks"]["stragglers"]
    finally:
        code = s.stop()
    assert code == 0, s.stderr()[-4000:]


def test_two_nodes_each_serve_their_own_ranks_and_never_wait_for_rank_0(tmp_path, build_dir):
    """Two nodes simulated on one host, each `stepwatch run --serve -- torchrun --nnodes 2
    --node_rank K --nproc_per_node 2` writing into a directory of its own (no shared file
    system): node 1, without rank 0, serves its ranks 2 and 3 while the job runs, and node
    0's page names the slow rank 3 of the other node from rank 0's cross-rank rounds. Both
    end with their program (batch jobs), and a node whose ranks wrote no file does not keep
    a page up for a file that will never come (--linger or not)."""
    pytest.importorskip("torch.distributed")
    import test_distributed as td
    exe = cli(build_dir)
    script = tmp_path / "train_ddp.py"
    script.write_text(td.SCRIPT)
    port = _free_port()
    env = td._env(DATA_RANK=3, STEPS=200)
    nodes = []
    for k in range(2):
        (tmp_path / f"node{k}").mkdir()
        nodes.append(Server(
            [exe, "run", "--serve=0", "--run-file", str(tmp_path / f"node{k}" / "run-{rank}.db"),
             "--", "torchrun", "--nnodes=2", f"--node_rank={k}", "--nproc_per_node=2",
             "--master_addr=127.0.0.1", f"--master_port={port}", str(script)],
            str(tmp_path), env=env))
    try:
        deadline = time.monotonic() + 400
        _wait_ranks(nodes[1], [2, 3], deadline)
        for n in nodes:  # batch jobs (stdin not a terminal): each ends with its program
            n.proc.wait(timeout=max(1, deadline - time.monotonic()))
        assert [n.proc.returncode for n in nodes] == [0, 0], [n.stderr()[-3000:] for n in nodes]
        assert "no run file of this node" not in nodes[1].stderr()
    finally:
        codes = [n.stop() for n in nodes]
    assert codes == [0, 0]
    # Node 0's last page (what `stepwatch serve` of its directory shows again): its ranks'
    # rows, and the stragglers of the whole job from rank 0's rounds.
    again = Server([exe, "serve", str(tmp_path / "node0"), "--port", "0"], str(tmp_path))
    try:
        state, seen, data = _ranks_seen(again)
        assert seen == [0, 1]
        assert data["ranks"]["world_size"] == 4
        worst = data["ranks"]["stragglers"][0]
        assert (worst["rank"], worst["blame"]) == (3, "data"), data["ranks"]["stragglers"]
    finally:
        again.stop()
    # A node whose program wrote no run file: said, and no lingering on a page of nothing.
    started = time.monotonic()
    done = subprocess.run([exe, "run", "--serve=0", "--linger", "600", "--run-file",
                           str(tmp_path / "none-{rank}.db"), "--", "sh", "-c", "exit 0"], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no run file of this node to serve" in done.stderr, done.stderr
    assert "stays up" not in done.stderr
    assert time.monotonic() - started < 100
