"""gpu_check.py — the GPU check of device time (issue 31; docs/device.md, "GPU check").

    python scripts/gpu_check.py [--out FILE.json] [--budget-s 330]

One prepared run for a machine with one NVIDIA GPU, torch with CUDA, and stepwatch importable
(scripts/gpu-check.sh installs a carried wheel with pip --no-index --no-deps --target). Each
case runs in a subprocess of its own (a crash is a failed case, not a lost run), under a
deadline for the whole run. Prints a table, writes JSON, exits 0 when every case passed, 1 when
one failed; without a GPU it prints "no GPU: skipped" and exits 0.

Cases (each names what it compares; figures in the JSON):
  manual           device time per phase against torch.cuda.Event pairs at the same points,
                   manual actions around known matmuls: within 5 %
  instrument-*     the same under stepwatch.torch.instrument() with AdamW (foreach),
                   AdamW(fused=True) and SGD: forward, loss, backward, optimizer, zero_grad
  burst            20 GPU-bound steps, no synchronization: host launch time / GPU time, and
                   every step timed afterwards
  behind           300 steps with the GPU over 100 steps behind: every step timed
  cost-*           a launch-bound step (MLP 256-1024-256-10, batch 64, AdamW) and a heavy one:
                   bare, instrument(), instrument() with device time, torch.profiler
                   (CPU + CUDA), blocks alternating, medians; device time's own added time
                   <= 1 % of the launch-bound step and <= 1/10 of torch.profiler's
  nvml             NVML's memory used (stepwatch) against nvidia-smi in the same moment
  ro-*             torch.compile(mode="reduce-overhead"): a correct loop's losses equal
                   without and with device time; a faulty loop raises the same RuntimeError
                   with it as without, and the process lives
  max-autotune     torch.compile(mode="max-autotune"): losses equal
  manual-capture   a step captured by hand with torch.cuda.graph and replayed: losses equal,
                   the capture inside a timed step counted, nothing failed
  step-memory      memory per step from torch's CUDA caching allocator: each step's peak,
                   allocated and reserved bytes (live, and read back from the run file)
                   against torch.cuda.max_memory_allocated(), memory_allocated() and
                   memory_reserved() read at the step's end; the peaks follow the temporaries
                   each step makes (32 to 128 MiB); and what reading them adds to a step
                   (memory=True against memory=False, blocks alternating, medians)
  h2d-copy         the copy of a pinned batch (x.to("cuda", non_blocking=True) between the
                   DataLoader and the forward, under instrument()): one host h2d_copy per
                   step, its device time against torch.cuda.Event pairs around the copy
  modules-memory   Profiler(modules=1): a module that allocates a known 64 MiB activation
                   shows 64 MiB (+ 1 MiB) of activation memory, its parameters their bytes
  modules-oom      a real CUDA out-of-memory error from an oversized activation: the module
                   is named in the run file's notes (oom_module, oom_phase, the allocator's
                   figures) and the exception arrives as torch.OutOfMemoryError
  modules-device-time  Profiler(device_time=True, modules=1): nested modules of real matmuls
                   (milliseconds each); each module's device time, forward and backward,
                   cumulative (and the block's self), against torch.cuda.Event pairs recorded
                   by torch's own module hooks around the same calls: within 5 %; the host
                   columns stay host times; every interval timed
  mfu-bf16         Profiler(flops=True, device_time=True) on a stack of bias-free bf16
                   Linear layers (matmul-bound, 8192 wide): the counted forward and backward
                   FLOPs equal the hand count; each phase's MFU on device time (against the
                   device's row of python/stepwatch/peaks.py) is below 100 % and within 5 %
                   of the hand count over torch.cuda.Event time around the same calls
  nccl-collectives NCCL with a world of one: 16 all_reduce calls of 64 MiB (8 sync, 8 async
                   + wait) timed by instrument() as collective:all_reduce with their bytes;
                   no bandwidth counters from CUDA calls (docs/collectives.md)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TOLERANCE = 0.05
DEV = "cuda"  # "cpu" under --cpu-smoke


def S(n):
    """A size: as written on the GPU, a sixteenth under --cpu-smoke (the CPU is slow)."""
    return n if DEV == "cuda" else max(4, n // 16)


def _pinned(t):
    return t.pin_memory() if DEV == "cuda" else t


def timed_profiler(stepwatch, **kw):
    """A profiler with device time: torch's CUDA events, or fake ones under --cpu-smoke."""
    return stepwatch.Profiler(device_time=True if DEV == "cuda" else _SmokeEvent, **kw)


class _SmokeEvent:
    """torch.cuda.Event's methods on the host clock, for --cpu-smoke (events reached at once)."""

    def __init__(self, enable_timing=True):
        self.at = None

    def record(self, stream=None):
        self.at = time.perf_counter_ns()

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end.at - self.at) / 1e6


def no_gpu_reason():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any failure to import means no GPU check
        return f"torch is not importable ({e})"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


# ---- helpers used inside a case's process ---------------------------------------------------

def counters(prof):
    return {c["name"]: c for c in prof.snapshot().info()["counters"]}


def compare(device, reference, names):
    """{name: (stepwatch ms, reference ms, relative difference)} and whether all agree (within
    TOLERANCE, or 3 us for spans too short for a relative figure)."""
    rows, ok = {}, True
    for n in names:
        sw = device.get(n)
        ref = statistics.mean(reference[n]) if reference.get(n) else None
        if sw is None or ref is None:
            rows[n] = (sw, ref, None)
            ok = False
            continue
        diff = abs(sw - ref) / ref if ref > 0 else 0.0
        rows[n] = (round(sw, 4), round(ref, 4), round(diff, 4))
        ok &= diff <= TOLERANCE or abs(sw - ref) <= 0.003
    return rows, ok


class Refs:
    """torch.cuda.Event pairs recorded at the points stepwatch records its own."""

    def __init__(self, torch):
        self.torch, self.open, self.ms = torch, {}, {}

    def begin(self, name):
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        self.open[name] = e

    def end(self, name):
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        self.ms.setdefault(name, []).append((self.open.pop(name), e))

    def resolve(self, skip=0):
        self.torch.cuda.synchronize()
        return {n: [a.elapsed_time(b) for a, b in pairs[skip:]] for n, pairs in self.ms.items()}


def device_ms(prof, phase="train"):
    return {k.split("/", 1)[1]: v["mean"] / 1e6 for k, v in counters(prof).items()
            if k.startswith(f"device:{phase}/")}


# ---- the cases -------------------------------------------------------------------------------

def case_manual(torch, stepwatch):
    a = torch.randn(S(2048), S(2048), device=DEV)
    host = _pinned(torch.randn(S(64), S(1024), S(1024)))
    prof = timed_profiler(stepwatch, warmup_steps=2)
    acts = {n: prof.action(n) for n in ("data", "forward", "backward", "optimizer")}
    work = {"data": lambda: host.to(DEV, non_blocking=True),
            "forward": lambda: [a @ a for _ in range(4)],
            "backward": lambda: [a @ a for _ in range(8)],
            "optimizer": lambda: [a @ a for _ in range(2)]}
    refs = Refs(torch)
    with prof.phase("train"):
        for _ in range(22):
            with prof.step(1):
                for name, act in acts.items():
                    with act:
                        refs.begin(name)
                        work[name]()
                        refs.end(name)
    ref = refs.resolve(skip=2)
    with prof.step(0):
        pass
    rows, ok = compare(device_ms(prof), ref, list(acts))
    info = prof.device_time_info()
    prof.close()
    return ok and not info["failed"], {"phases_ms_sw_ref_diff": rows, "info": info}


def _mlp(torch, widths):
    layers = []
    for i in range(len(widths) - 1):
        layers += [torch.nn.Linear(widths[i], widths[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(DEV)


def case_instrument(torch, stepwatch, which):
    import stepwatch.torch as swtorch
    torch.manual_seed(0)
    model = _mlp(torch, [S(2048), S(4096), S(4096), S(2048)])
    params = model.parameters()
    opt = {"adamw": lambda: torch.optim.AdamW(params, foreach=True),
           "adamw-fused": lambda: torch.optim.AdamW(params, fused=True),
           "sgd": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9)}[which]()
    refs = Refs(torch)
    model.register_forward_pre_hook(lambda *a: refs.begin("forward"))
    model.register_forward_hook(lambda *a: refs.end("forward"))
    opt.register_step_pre_hook(lambda *a: refs.begin("optimizer"))
    opt.register_step_post_hook(lambda *a: refs.end("optimizer"))
    x, y = torch.randn(S(1024), S(2048), device=DEV), torch.randn(S(1024), S(2048), device=DEV)
    prof = timed_profiler(stepwatch, warmup_steps=2)
    with swtorch.instrument(prof):
        for _ in range(22):
            out = model(x)
            refs.begin("loss")
            loss = torch.nn.functional.mse_loss(out, y)
            refs.end("loss")
            refs.begin("zero_grad")
            opt.zero_grad(set_to_none=False)  # kernels to time, inside the step
            refs.end("zero_grad")
            refs.begin("backward")
            loss.backward()
            refs.end("backward")
            opt.step()  # its end is the step's
    ref = refs.resolve(skip=2)
    with prof.step(0):
        pass
    dev = device_ms(prof)
    rows, ok = compare(dev, ref, ["forward", "loss", "backward", "optimizer", "zero_grad"])
    info = prof.device_time_info()
    prof.close()
    return ok and not info["failed"], {"phases_ms_sw_ref_diff": rows, "info": info}


def case_h2d_copy(torch, stepwatch):
    """The batch's copy, made between steps (instrument() begins a step at the forward that
    consumes its batch): host h2d_copy once per step, device time against Event pairs."""
    import stepwatch.torch as swtorch
    from torch.utils.data import DataLoader
    batch = _pinned(torch.randn(S(64), S(1024), S(512)))  # 128 MiB on the GPU
    model = torch.nn.Linear(S(512), S(16)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    refs = Refs(torch)
    prof = timed_profiler(stepwatch, warmup_steps=2)
    with swtorch.instrument(prof):
        for x in DataLoader([batch] * 22, batch_size=None):
            refs.begin("h2d_copy")
            x = x.to(DEV, non_blocking=True)
            refs.end("h2d_copy")
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    ref = refs.resolve(skip=2)
    with prof.step(0):
        pass
    rows, ok = compare(device_ms(prof), ref, ["h2d_copy"])
    host = {r["action"]: r for r in prof.records("train")}
    copies = host.get("h2d_copy", {}).get("count", 0) + host.get("h2d_copy", {}).get(
        "warmup_count", 0)
    info = prof.device_time_info()
    prof.close()
    return ok and copies == 22 and not info["failed"], {
        "h2d_copy_ms_sw_ref_diff": rows, "host_copies": copies, "info": info}


def case_step_memory(torch, stepwatch):
    """Per-step peak memory against torch.cuda.max_memory_allocated() at the same moment: the
    figures stepwatch reads at the step's end (no synchronization) are the allocator's own,
    so they must be equal to the byte; the peak is reset each step, so step i's peak follows
    the temporary it made."""
    import tempfile
    MiB = 1 << 20
    keep = torch.zeros(16 * MiB // 4, device=DEV)  # 16 MiB held across the steps
    db = os.path.join(tempfile.mkdtemp(), "memory.db")
    prof = stepwatch.Profiler(name="step-memory", run_file=db, live=False)
    ref = []
    for i in range(12):
        with prof.step(1):
            tmp = torch.ones((i % 4 + 1) * 32 * MiB // 4, device=DEV)  # 32..128 MiB
            keep += tmp[: keep.numel()]
            del tmp
            # what the program would read at the step's end (stepwatch reads after this)
            ref.append((torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
                        torch.cuda.memory_reserved()))
    live = prof.snapshot().info()["memory"]
    prof.close()
    steps = stepwatch.load_steps(db)
    got = [(s["allocated_bytes"], s["peak_allocated_bytes"], s["reserved_bytes"]) for s in steps]
    equal = got == ref
    # the peak of step i: the 16 MiB kept plus its temporary (a step-0 peak may hold more:
    # what the program allocated before its first step)
    follows = all(abs(p - (16 + (i % 4 + 1) * 32) * MiB) <= 2 * MiB
                  for i, (_, p, _) in enumerate(got) if i > 0)
    # the cost of reading: 400 empty-ish steps with and without, in alternating blocks
    def block(memory, n=100):
        p = stepwatch.Profiler(name="cost", live=False, memory=memory)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with p.step(1):
                pass
        ns = (time.perf_counter_ns() - t0) / n
        p.close()
        return ns
    on, off = [], []
    for _ in range(8):
        off.append(block(False))
        on.append(block(True))
    added_us = (statistics.median(on) - statistics.median(off)) / 1e3
    ok = equal and follows and live["allocator_steps"] == 12 and \
        live["peak_allocated_max"] == max(p for _, p, _ in ref)
    return ok, {"equal_to_torch": equal, "peaks_follow_temporaries": follows,
                "stepwatch": got, "torch": ref, "live_summary": live,
                "added_us_per_step": round(added_us, 2),
                "step_us_with": round(statistics.median(on) / 1e3, 2),
                "step_us_without": round(statistics.median(off) / 1e3, 2)}


def case_burst(torch, stepwatch):
    a = torch.randn(S(4096), S(4096), device=DEV)
    torch.cuda.synchronize()
    prof = timed_profiler(stepwatch)
    fwd = prof.action("forward")
    start, gpu0 = time.perf_counter(), torch.cuda.Event(enable_timing=True)
    gpu1 = torch.cuda.Event(enable_timing=True)
    gpu0.record()
    with prof.phase("train"):
        for _ in range(20):
            with prof.step(1):
                with fwd:
                    for _ in range(8):
                        a @ a
    host_s = time.perf_counter() - start
    gpu1.record()
    torch.cuda.synchronize()
    gpu_s = gpu0.elapsed_time(gpu1) / 1e3
    with prof.step(0):
        pass
    info = prof.device_time_info()
    prof.close()
    share = host_s / gpu_s
    return (share < 0.2 and info["steps_timed"] == 20 and not info["failed"],
            {"host_s": host_s, "gpu_s": gpu_s, "host_share": share, "info": info})


def case_behind(torch, stepwatch):
    a = torch.randn(S(4096), S(4096), device=DEV)
    prof = timed_profiler(stepwatch)
    fwd = prof.action("forward")
    with prof.phase("train"):
        for _ in range(300):
            with prof.step(1):
                with fwd:
                    a @ a
    during = prof.device_time_info()
    torch.cuda.synchronize()
    with prof.step(0):
        pass
    info = prof.device_time_info()
    prof.close()
    return (info["steps_timed"] == 300 and during["most_behind"] >= 100 and
            info["sample_every"] == 1, {"during": during, "after": info})


def case_nvml(torch, stepwatch):
    from stepwatch.devicestats import DeviceStats
    keep = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)  # 1 GiB in use
    torch.cuda.synchronize()
    uuid = str(getattr(torch.cuda.get_device_properties(0), "uuid", ""))
    stats = DeviceStats(extra_stats=True)
    mine = stats.read().get("gpu0.memory_used_bytes")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.used", "--format=csv,noheader,"
                          "nounits"], capture_output=True, text=True, timeout=30).stdout
    theirs = None
    for line in smi.strip().splitlines():
        u, used = [s.strip() for s in line.split(",")]
        if theirs is None or (uuid and uuid in u):
            theirs = float(used) * 2**20
    del keep
    ok = mine is not None and theirs is not None and abs(mine - theirs) <= max(0.02 * theirs,
                                                                               64 * 2**20)
    return ok, {"stepwatch_mib": mine and mine / 2**20, "nvidia_smi_mib": theirs and theirs / 2**20,
                "gpu_error": stats.gpu_error}


def _cost(torch, stepwatch, widths, batch, steps, rounds):
    import stepwatch.torch as swtorch
    torch.manual_seed(0)
    model = _mlp(torch, widths)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(batch, widths[0], device=DEV)
    y = torch.randint(0, widths[-1], (batch,), device=DEV)

    def block():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps

    plain_prof = stepwatch.Profiler()
    timed_prof = timed_profiler(stepwatch)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def instrumented(prof):
        with swtorch.instrument(prof):
            return block()

    def profiled():
        with torch.profiler.profile(activities=activities):
            return block()

    configs = {"bare": block, "instrument": lambda: instrumented(plain_prof),
               "device_time": lambda: instrumented(timed_prof), "torch_profiler": profiled}
    for run in configs.values():  # warm-up of each
        run()
    times = {k: [] for k in configs}
    for _ in range(rounds):
        for k, run in configs.items():
            times[k].append(run())
    med = {k: statistics.median(v) for k, v in times.items()}
    bare = med["bare"]
    added = {k: (v - bare) / bare for k, v in med.items()}
    own = (med["device_time"] - med["instrument"]) / bare  # device time's own cost
    prof_added = added["torch_profiler"]
    figures = {"step_ms": {k: v * 1e3 for k, v in med.items()},
               "added_percent": {k: 100 * v for k, v in added.items()},
               "device_time_own_percent": 100 * own,
               "device_time_own_over_profiler": own / prof_added if prof_added > 0 else None,
               "info": timed_prof.device_time_info()}
    plain_prof.close()
    timed_prof.close()
    return own <= 0.01 and (prof_added <= 0 or own <= 0.1 * prof_added), figures


def _compiled_losses(torch, stepwatch, mode, timed, steps=12, faulty=False):
    """Losses of a small training loop compiled with mode; under instrument() with device time
    when timed. faulty: keeps the previous output across runs (what CUDA graph trees forbid):
    the errors caught are returned instead."""
    import stepwatch.torch as swtorch
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _mlp(torch, [256, 512, 10])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step_fn = torch.compile(model, mode=mode)
    x = torch.randn(64, 256, device=DEV)
    y = torch.randint(0, 10, (64,), device=DEV)
    prof = timed_profiler(stepwatch) if timed else None
    if prof is not None:
        swtorch.instrument(prof)
    losses, caught, prev = [], [], None
    try:
        for _ in range(steps):
            try:
                if not faulty and mode == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()
                out = step_fn(x)
                if faulty and prev is not None:
                    out = out + prev  # the previous run's output: overwritten by now
                loss = torch.nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                prev = out if faulty else None
                if faulty:  # torch's documented example: y1 read after a second run
                    with torch.no_grad():
                        y1 = step_fn(x)
                        step_fn(x)
                        losses.append(float(y1.sum()))
            except RuntimeError as e:
                caught.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
                prev = None
    finally:
        info = None
        if prof is not None:
            swtorch.uninstrument()
            info = prof.device_time_info()
            prof.close()
    return losses, caught, info


def case_compiled_equal(torch, stepwatch, mode):
    plain, plain_caught, _ = _compiled_losses(torch, stepwatch, mode, timed=False)
    timed, timed_caught, info = _compiled_losses(torch, stepwatch, mode, timed=True)
    equal = len(plain) == len(timed) and all(abs(a - b) <= 1e-5 * max(1, abs(a))
                                             for a, b in zip(plain, timed))
    return (equal and not plain_caught and not timed_caught and not info["failed"],
            {"losses_plain": plain, "losses_timed": timed, "caught": timed_caught, "info": info})


def case_ro_faulty(torch, stepwatch, timed):
    losses, caught, info = _compiled_losses(torch, stepwatch, "reduce-overhead", timed=timed,
                                            steps=8, faulty=True)
    return True, {"losses": losses, "caught": caught, "info": info}


def case_manual_capture(torch, stepwatch):
    def run(timed):
        torch.manual_seed(0)
        model = _mlp(torch, [256, 512, 10])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
        x = torch.randn(64, 256, device=DEV)
        y = torch.randint(0, 10, (64,), device=DEV)
        prof = timed_profiler(stepwatch) if timed else None
        acts = [prof.action(n) for n in ("forward", "backward")] if timed else []
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch's docs do
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        losses = []
        with (prof.phase("train") if timed else _null()):
            # the capture inside a timed step, a span marked while it captures
            with (prof.step(1) if timed else _null()):
                with torch.cuda.graph(graph):
                    static_loss = torch.nn.functional.cross_entropy(model(x), y)
                    with (acts[1] if timed else _null()):
                        static_loss.backward()
                    opt.step()
            for _ in range(10):
                with (prof.step(1) if timed else _null()):
                    with (acts[0] if timed else _null()):
                        graph.replay()
                    losses.append(static_loss.item())
        info = None
        if timed:
            torch.cuda.synchronize()
            with prof.step(0):
                pass
            info = prof.device_time_info()
            prof.close()
        return losses, info

    plain, _ = run(False)
    timed, info = run(True)
    return (plain == timed and not info["failed"] and info["steps_timed"] >= 9,
            {"losses_plain": plain, "losses_timed": timed, "info": info})


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def case_modules_memory(torch, stepwatch):
    n = 16 * 1024 * 1024  # 64 MiB of float32

    class Allocates(torch.nn.Module):
        def forward(self, x):
            self.kept = torch.ones(n, device=DEV)  # held past the forward: its activation
            return x * 2

    model = torch.nn.Sequential(torch.nn.Linear(256, 256), Allocates()).to(DEV)
    prof = stepwatch.Profiler(modules=1)
    with prof.step():
        model(torch.randn(8, 256, device=DEV)).sum().backward()
    torch.cuda.synchronize()
    rows = {r["path"]: r for r in json.loads(prof.report("json"))["modules"]["rows"]}
    prof.close()
    act, params = rows["1"]["activation_bytes"], rows["0"]["param_bytes"]
    ok = 4 * n <= act <= 4 * n + (1 << 20) and params == (256 * 256 + 256) * 4
    return ok, {"activation_bytes": act, "expected": 4 * n, "param_bytes": params}


def case_modules_oom(torch, stepwatch):
    class Oversized(torch.nn.Module):
        def forward(self, x):
            free, total = torch.cuda.mem_get_info()
            return x + torch.empty(int(total * 2) // 4, device=DEV).sum()  # twice the GPU

    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "oom.sw")
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Sequential(Oversized())).to(DEV)
    prof = stepwatch.Profiler(modules=True, run_file=path)
    caught = None
    try:
        with prof.step():
            model(torch.randn(4, 16, device=DEV))
    except Exception as exc:  # noqa: BLE001 - the point is its type
        caught = type(exc).__name__
    prof.close()
    notes = json.loads(stepwatch.load(path).report("json")).get("notes", {})
    ok = (caught == "OutOfMemoryError" and notes.get("oom_module") == "1.0"
          and notes.get("oom_phase") == "forward" and int(notes.get("oom_reserved_bytes", 0)) > 0)
    return ok, {"caught": caught, "notes": {k: v for k, v in notes.items() if k.startswith("oom")}}


def case_modules_device_time(torch, stepwatch):
    """Per-module device time against torch.cuda.Event pairs recorded by torch's module hooks
    (forward pre/post, full backward pre/post) around the same calls, summed over the steps."""
    import tempfile
    n, rows_in = S(4096), S(2048)  # a 2048x4096 @ 4096x4096 matmul: milliseconds on a GPU

    class Mats(torch.nn.Module):
        def __init__(self, reps):
            super().__init__()
            self.reps = reps
            self.w = torch.nn.Parameter(torch.randn(n, n) / n ** 0.5)

        def forward(self, x):
            for _ in range(self.reps):
                x = x @ self.w
            return x

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Mats(2), Mats(3)
            self.w = torch.nn.Parameter(torch.randn(n, n) / n ** 0.5)

        def forward(self, x):
            return self.b(self.a(x) @ self.w)  # its own matmul between its two submodules

    model = torch.nn.Sequential(torch.nn.Linear(n, n), Mats(4), Block()).to(DEV)
    names = {"1": model[1], "2": model[2], "2.a": model[2].a, "2.b": model[2].b}
    x = torch.randn(rows_in, n, device=DEV)
    for _ in range(2):  # cuBLAS and the allocator started before anything is timed
        model(x).square().mean().backward()
    torch.cuda.synchronize()
    refs = Refs(torch)
    for path, mod in names.items():
        mod.register_forward_pre_hook(lambda m, a, p=path: refs.begin(p + "/forward"))
        mod.register_forward_hook(lambda m, a, o, p=path: refs.end(p + "/forward"))
        mod.register_full_backward_pre_hook(lambda m, g, p=path: refs.begin(p + "/backward"))
        mod.register_full_backward_hook(lambda m, gi, go, p=path: refs.end(p + "/backward"))
    run = os.path.join(tempfile.mkdtemp(), "modules.sw")
    prof = timed_profiler(stepwatch, modules=1, run_file=run)
    for _ in range(8):
        with prof.step():
            model(x).square().mean().backward()
    ref = {k: sum(v) for k, v in refs.resolve().items()}  # ms, summed over the 8 steps
    with prof.step():  # the last step resolves at the next one's begin, or at close
        pass
    info = prof.device_time_info()
    prof.close()
    data = json.loads(stepwatch.load(run).report("json"))["modules"]
    rows = {r["path"]: r for r in data["rows"]}
    sw = {}
    for path in names:
        sw[path + "/forward"] = rows[path].get("device_forward_ns", 0) / 1e6
        sw[path + "/backward"] = rows[path].get("device_backward_ns", 0) / 1e6
    sw["2/forward_self"] = rows["2"].get("device_forward_self_ns", 0) / 1e6
    ref["2/forward_self"] = ref["2/forward"] - ref["2.a/forward"] - ref["2.b/forward"]
    table, ok = compare(sw, {k: [v] for k, v in ref.items()}, sorted(sw))
    host_ms = rows["1"]["forward_ns"] / 1e6
    host_is_host = DEV != "cuda" or host_ms < 0.5 * sw["1/forward"]  # launches, not kernels
    calls = {p: (rows[p]["device_forward_calls"], rows[p]["device_backward_calls"]) for p in names}
    all_timed = all(c == (8, 8) for c in calls.values())  # every call of the 8 steps, on the GPU
    return ok and host_is_host and all_timed and data["clock"] == "host+device", {
        "device_ms_sw_ref_diff": table, "host_forward_ms_of_1": round(host_ms, 3),
        "clock": data["clock"], "device_calls_fwd_bwd": calls, "intervals": info["intervals"],
        "events_in": info["events_in"]}

def case_mfu_bf16(torch, stepwatch):
    """MFU of a matmul-bound bf16 model: FLOPs counted against the hand count, the phases' MFU
    on device time against the hand count over torch.cuda.Event pairs and the table's peak."""
    import tempfile
    from stepwatch import flops as swflops
    n, rows, layers = S(8192), S(8192), 4
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(n, n, bias=False) for _ in range(layers)])
    model = model.to(DEV, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(rows, n, device=DEV, dtype=torch.bfloat16)
    forward = 2 * rows * n * n * layers  # one matmul per layer
    backward = 2 * rows * n * n * layers + 2 * rows * n * n * (layers - 1)  # dW; dx but layer 0's
    label, peak = swflops.device_peak(torch.device(DEV), "bf16")
    given = None if peak else 1e12  # a CPU (--cpu-smoke) has no row: a figure to run with
    run = os.path.join(tempfile.mkdtemp(), "mfu.sw")
    prof = timed_profiler(stepwatch, warmup_steps=2, run_file=run,
                          flops={"peak_flops": given} if given else True)
    fwd, bwd, step = (prof.action(a) for a in ("forward", "backward", "optimizer"))
    refs = Refs(torch)
    with prof.phase("train"):
        for _ in range(12):
            with prof.step(rows):
                with fwd:
                    refs.begin("forward")
                    loss = model(x).float().square().mean()
                    refs.end("forward")
                with bwd:
                    refs.begin("backward")
                    loss.backward()
                    refs.end("backward")
                with step:
                    opt.step()
                    opt.zero_grad()
    ref = refs.resolve(skip=2)  # synchronized: close() resolves every step (no empty one
    prof.close()                # after them: the rates are per step)
    r = stepwatch.load(run)
    notes = dict(r.info()["notes"])
    phases = {e["phase"]: e for e in json.loads(r.report("json"))["efficiency"]["phases"]}
    peak = peak or given
    figures = {"device": label, "peak_flops": peak, "dtype": notes.get("compute_dtype"),
               "flops_fwd_bwd": [float(notes["flops_forward"]), float(notes["flops_backward"])],
               "hand_fwd_bwd": [forward, backward]}
    ok = float(notes["flops_forward"]) == forward and float(notes["flops_backward"]) == backward
    ok &= notes.get("compute_dtype") == "bf16" and given is None  # the table's row, on a GPU
    device = r.info()["counters"]
    timed = [c["count"] for c in device if c["name"] in ("device:train/step", "device:train/forward")]
    figures["timed_steps_forwards"] = timed
    ok &= len(timed) == 2 and timed[0] == timed[1] == 10  # every steady step, each one forward
    for phase, hand in (("forward", forward), ("backward", backward)):
        event = hand / (statistics.mean(ref[phase]) / 1e3) / peak  # the Event pairs' MFU
        sw = phases[phase].get("mfu_device")
        figures[f"mfu_{phase}_sw_event"] = [sw, round(event, 4)]
        ok &= sw is not None and 0 < sw < 1 and abs(sw - event) <= TOLERANCE * event
    figures["mfu_host_step"] = notes.get("mfu")
    return ok, figures


def case_nccl_collectives(torch, stepwatch):
    """NCCL on one GPU (a world of one still launches NCCL's kernels): instrument() times each
    dist.all_reduce as collective:all_reduce with its bytes, attributed to the step, and
    leaves CUDA calls out of the bandwidth counters (their host time is the launch)."""
    import tempfile
    import torch.distributed as dist
    import stepwatch.torch as swtorch
    backend = "nccl" if DEV == "cuda" else "gloo"
    dist.init_process_group(backend, init_method="file://" + os.path.join(tempfile.mkdtemp(),
                            "pg"), rank=0, world_size=1)
    try:
        t = torch.ones(S(1 << 24), device=DEV)  # 64 MiB on the GPU
        prof = stepwatch.Profiler()
        swtorch.instrument(prof)
        try:
            for _ in range(8):
                with prof.step():
                    dist.all_reduce(t)
                    dist.all_reduce(t, async_op=True).wait()
            torch.cuda.synchronize()
        finally:
            swtorch.uninstrument()
        rows = {r["action"]: r for r in prof.records("all")}
        c = counters(prof)
        prof.close()
    finally:
        dist.destroy_process_group()
    calls = rows.get("collective:all_reduce", {}).get("count", 0)
    moved = c.get("comm:all_reduce:bytes", {}).get("last", 0)
    bw = sorted(n for n in c if n.endswith("bw"))
    ok = calls == 16 and moved == 16 * t.numel() * 4 and (bw == [] or DEV != "cuda")
    return ok, {"calls": calls, "bytes": moved, "bandwidth_counters": bw,
                "waits": rows.get("collective:all_reduce:wait", {}).get("count", 0)}


def _one_rank(backend):
    import tempfile
    import torch.distributed as dist
    dist.init_process_group(backend, init_method="file://" + os.path.join(tempfile.mkdtemp(),
                            "pg"), rank=0, world_size=1)
    return dist


def _comm_ms(prof):
    """(comm ms, exposed ms, steps) per step of the train phase; the profiler closed."""
    c = counters(prof)
    prof.close()
    comm = c.get("device:train/comm", {})
    return (comm.get("mean", 0) / 1e6,
            c.get("device:train/comm_exposed", {}).get("mean", 0) / 1e6, comm.get("count", 0))


def case_nccl_comm_device(torch, stepwatch):
    """A synchronous NCCL all_reduce (the current stream waits for NCCL's) and an async one's
    wait(), with device time on: each step's "device:train/comm" against torch.cuda.Event
    pairs on the current stream around the same calls (the points the brackets bound), and
    all of it exposed (nothing computes meanwhile)."""
    import stepwatch.torch as swtorch
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"  # NCCL's own time of the async work
    dist = _one_rank("nccl" if DEV == "cuda" else "gloo")
    try:
        t = torch.ones(S(1 << 24), device=DEV)
        prof = timed_profiler(stepwatch)
        refs = Refs(torch)
        swtorch.instrument(prof)
        try:
            with prof.phase("train"):
                for _ in range(10):
                    with prof.step(1):
                        refs.begin("sync")
                        dist.all_reduce(t)
                        refs.end("sync")
                        work = dist.all_reduce(t, async_op=True)
                        work.wait()
                torch.cuda.synchronize()
                with prof.step(1):  # the last timed step resolves at this one's begin
                    pass
        finally:
            swtorch.uninstrument()
        ref = refs.resolve(skip=0)
        comm, exposed, steps = _comm_ms(prof)
    finally:
        dist.destroy_process_group()
    sync_ms = statistics.mean(ref["sync"]) if ref.get("sync") else None
    # the sync bracket is at most the step's comm (the async wait adds its stall, NCCL's
    # time of the async call may be larger), and every bit of it exposed
    ok = (sync_ms is not None and comm > 0 and comm >= sync_ms * (1 - TOLERANCE) and
          exposed >= sync_ms * (1 - TOLERANCE) and exposed <= comm * (1 + TOLERANCE))
    return ok, {"comm_ms": round(comm, 4), "exposed_ms": round(exposed, 4),
                "event_pairs_sync_ms": sync_ms, "steps": steps}


def case_ddp_overlap(torch, stepwatch):
    """DDP on NCCL in a world of one, its gradients in several buckets: the all-reduces of
    the early buckets run under the backward's compute, only the last buckets' tail waits:
    reported as mostly hidden (exposed under half of the communication)."""
    import stepwatch.distributed as swdist
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"
    dist = _one_rank("nccl" if DEV == "cuda" else "gloo")
    try:
        model = _mlp(torch, [S(2048)] * 9).to(DEV)
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=4)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        x = torch.randn(S(1024), S(2048), device=DEV)
        prof = timed_profiler(stepwatch)
        acts = {n: prof.action(n) for n in ("forward", "backward", "optimizer")}
        swdist.watch(prof)
        try:
            with prof.phase("train"):
                for _ in range(12):
                    with prof.step(1):
                        with acts["forward"]:
                            loss = ddp(x).square().mean()
                        with acts["backward"]:
                            loss.backward()
                        with acts["optimizer"]:
                            opt.step()
                            opt.zero_grad()
                torch.cuda.synchronize()
                with prof.step(1):
                    pass
        finally:
            swdist.unwatch()
        comm, exposed, steps = _comm_ms(prof)
    finally:
        dist.destroy_process_group()
    ok = comm > 0 and exposed < 0.5 * comm
    return ok, {"comm_ms": round(comm, 4), "exposed_ms": round(exposed, 4),
                "exposed_percent": round(100 * exposed / comm, 1) if comm else None,
                "steps": steps}


def case_slow_sync(torch, stepwatch):
    """A synchronizing .item() found as a slow step's cause (docs/slow-steps.md): zero-code
    torch on a matmul loop whose step 30 queues 100x the usual work and reads the loss with
    .item(), which waits for it: that step is slow, with cause "sync" and the call named."""
    import tempfile
    import stepwatch.torch as swt
    db = os.path.join(tempfile.mkdtemp(), "sync.db")
    prof = stepwatch.Profiler(name="slow-sync", run_file=db, live=False)
    swt.instrument(prof)
    w = torch.randn(S(2048), S(2048), device=DEV, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1e-6)
    x = torch.randn(S(2048), S(2048), device=DEV)
    for i in range(50):
        y = x
        for _ in range(100 if i == 30 else 1):
            y = torch.tanh(y @ w)
        loss = y.square().mean()
        if i == 30:
            loss.item()  # waits for the 100 matmuls queued
        loss.backward()
        opt.step()
        opt.zero_grad()
    swt.uninstrument()
    prof.close()
    import sqlite3
    rows = sqlite3.connect(db).execute(
        "SELECT step, cause, sync_ns, sync_call, duration_ns, median_ns FROM slow_steps"
        " WHERE sync_ns > 0").fetchall()
    ok = len(rows) == 1 and rows[0][1] == "sync" and rows[0][3] == "sync .item()"
    return ok, {"slow_steps_with_sync": rows}


def _cases(torch, stepwatch):
    """Every case by name, and whether --cpu-smoke runs it (the one list of them)."""
    cost_small = ([256, 1024, 256, 10], 64, 25 if DEV == "cuda" else 2, 8 if DEV == "cuda" else 1)
    both = (torch, stepwatch)
    return {
        "manual": (lambda: case_manual(*both), True),
        "instrument-adamw": (lambda: case_instrument(*both, "adamw"), True),
        "instrument-adamw-fused": (lambda: case_instrument(*both, "adamw-fused"), False),
        "instrument-sgd": (lambda: case_instrument(*both, "sgd"), True),
        "burst": (lambda: case_burst(*both), True),
        "behind": (lambda: case_behind(*both), True),
        "nvml": (lambda: case_nvml(*both), False),
        "cost-launch-bound": (lambda: _cost(*both, *cost_small), True),
        "cost-heavy": (lambda: _cost(*both, [S(4096), S(8192), S(8192), S(4096)], S(2048), 5,
                                     3), False),
        "ro-correct": (lambda: case_compiled_equal(*both, "reduce-overhead"), True),
        "ro-faulty-plain": (lambda: case_ro_faulty(*both, timed=False), False),
        "ro-faulty-timed": (lambda: case_ro_faulty(*both, timed=True), True),
        "manual-capture": (lambda: case_manual_capture(*both), False),
        "max-autotune": (lambda: case_compiled_equal(*both, "max-autotune"), False),
        "h2d-copy": (lambda: case_h2d_copy(*both), True),
        "step-memory": (lambda: case_step_memory(*both), False),
        "modules-memory": (lambda: case_modules_memory(*both), False),
        "modules-oom": (lambda: case_modules_oom(*both), False),
        "modules-device-time": (lambda: case_modules_device_time(*both), True),
        "nccl-collectives": (lambda: case_nccl_collectives(*both), True),
        "mfu-bf16": (lambda: case_mfu_bf16(*both), True),
        "nccl-comm-device": (lambda: case_nccl_comm_device(*both), True),
        "ddp-overlap": (lambda: case_ddp_overlap(*both), True),
        "slow-sync": (lambda: case_slow_sync(*both), False),
    }


def case_names(on_cpu=False):
    """The cases' names in their order (on_cpu: those --cpu-smoke runs)."""
    import torch
    import stepwatch
    return [n for n, (_, cpu) in _cases(torch, stepwatch).items() if cpu or not on_cpu]


def run_case(name):
    import torch
    import stepwatch
    torch.backends.cuda.matmul.allow_tf32 = False
    case = _cases(torch, stepwatch).get(name)
    if case is None:
        raise SystemExit(f"gpu_check: no case {name!r}")
    return case[0]()


def cpu_smoke():
    """Every case that can run on the CPU, with CUDA's calls stood in for: proves the script
    runs to its end (the figures mean nothing here). Exit 1 when a case raised."""
    global DEV
    import torch
    DEV = "cpu"
    torch.cuda.Event = _SmokeEvent
    torch.cuda.synchronize = lambda *a: None
    bad = []
    names = sys.argv[sys.argv.index("--cpu-smoke") + 1:] or case_names(on_cpu=True)
    for name in names:
        try:
            ok, figures = run_case(name)
            print(f"smoke {name}: ran ({'ok' if ok else 'not ok on the CPU'}) "
                  f"{json.dumps(figures, default=str)[:200]}", flush=True)
        except Exception as e:  # noqa: BLE001 - the point is to report it
            import traceback
            traceback.print_exc()
            bad.append(name)
            print(f"smoke {name}: RAISED {type(e).__name__}: {e}", flush=True)
    print("gpu-check smoke: " + ("every case ran" if not bad else f"raised: {bad}"))
    return 1 if bad else 0


# ---- the driver ------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-check.json")
    ap.add_argument("--budget-s", type=float, default=330, help="the whole run's deadline")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # one case, in this process
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run the cases that can run on the CPU, in this process, with fake "
                         "events: a check of this script itself, without a GPU")
    args, _ = ap.parse_known_args()
    if args.cpu_smoke:
        return cpu_smoke()
    if args.case:
        ok, figures = run_case(args.case)
        print("GPU_CHECK_RESULT " + json.dumps({"ok": bool(ok), "figures": figures}, default=str))
        return 0
    reason = no_gpu_reason()
    if reason is not None:
        print(f"gpu-check: no GPU: skipped ({reason})")
        with open(args.out, "w") as f:
            json.dump({"skipped": reason}, f)
        return 0
    import torch
    import stepwatch
    env = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": sys.version.split()[0],
           "stepwatch": getattr(stepwatch, "__version__", "?"), "stepwatch_path": stepwatch.__file__}
    print(f"gpu-check on {env['device']} (torch {env['torch']}, CUDA {env['cuda']})", flush=True)
    deadline = time.monotonic() + args.budget_s
    results = {}
    for name in case_names():
        left = deadline - time.monotonic()
        if left < 15:
            results[name] = {"ok": False, "note": "not run: the run's time budget was spent"}
            continue
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", name],
                                  capture_output=True, text=True, timeout=min(left, 150))
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("GPU_CHECK_RESULT ")]
            if proc.returncode == 0 and line:
                results[name] = json.loads(line[-1].split(" ", 1)[1])
            else:
                results[name] = {"ok": False, "note": f"exit {proc.returncode}",
                                 "stderr": proc.stderr[-3000:]}
        except subprocess.TimeoutExpired as e:
            results[name] = {"ok": False, "note": "timed out",
                             "stderr": (e.stderr or b"")[-3000:].decode("utf-8", "replace")
                             if isinstance(e.stderr, bytes) else str(e.stderr)[-3000:]}
        results[name]["seconds"] = round(time.monotonic() - t0, 1)
        print(f"  {name:24s} {'ok' if results[name]['ok'] else 'FAILED':7s} "
              f"{results[name]['seconds']:6.1f} s", flush=True)
    # The faulty reduce-overhead loop: the same errors and losses with device time as without.
    plain, timed = results.get("ro-faulty-plain", {}), results.get("ro-faulty-timed", {})
    if plain.get("figures") and timed.get("figures"):
        same = (plain["figures"]["caught"] == timed["figures"]["caught"] and
                plain["figures"]["losses"] == timed["figures"]["losses"])
        timed["ok"] = same
        timed["note"] = ("differs from the plain run" if not same else
                         "the same RuntimeErrors, the same losses" if plain["figures"]["caught"]
                         else "the same losses; torch raised nothing here (inconclusive)")
    print()
    print(f"{'case':24s} {'result':7s} figures")
    for name, r in results.items():
        fig = json.dumps(r.get("figures", r.get("note", "")), default=str)
        print(f"{name:24s} {'ok' if r['ok'] else 'FAILED':7s} {fig[:300]}")
    with open(args.out, "w") as f:
        json.dump({"environment": env, "results": results}, f, indent=1, default=str)
    failed = [n for n, r in results.items() if not r["ok"]]
    print(f"\ngpu-check: {len(results) - len(failed)} of {len(results)} passed"
          + (f"; failed: {', '.join(failed)}" if failed else "") + f"; JSON in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
