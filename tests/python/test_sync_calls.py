"""Host blocking in synchronizing calls (docs/slow-steps.md): .item(), .cpu(), .tolist(),
.numpy(), .to("cpu") and torch.cuda.synchronize() timed as "sync <call>" under zero-code
torch where CUDA is, and a step that waited in one explained as "sync".

No GPU here: a child process says CUDA is available (torch.cuda.is_available, the one check
stepwatch.torch makes) so instrument() patches the calls, and a tensor subclass that is_cuda
and whose .item() waits 80 ms (in __torch_function__, under the real Tensor.item) stands in
for a tensor on a busy GPU. What is tested is stepwatch's side: the patches and their
restoring, CPU tensors calling through untimed, the span, the cause and its evidence through
the run file. The GPU run (make gpu-check) times a real synchronizing .item().
"""
import subprocess
import sys
import textwrap

import pytest

from test_slow_steps import runnable_part, slow_steps

pytest.importorskip("torch")

SLOW = 30

CHILD = textwrap.dedent("""
    import json, sys, time
    import torch
    import stepwatch, stepwatch.torch as swt
    SLOW = {slow}
    names = ("item", "cpu", "tolist", "numpy", "to")
    assert not any(n in torch.Tensor.__dict__ for n in names)
    sync_before = torch.cuda.synchronize
    torch.cuda.is_available = lambda: True  # no GPU: only the check stepwatch makes

    class Busy(torch.Tensor):  # a tensor on a GPU still running the step's kernels
        is_cuda = True

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "item":
                time.sleep(0.08)
            return super().__torch_function__(func, types, args, kwargs or {{}})

    p = stepwatch.Profiler(name="sync", run_file=sys.argv[1], live=False)
    swt.instrument(p)
    patched = [n for n in names if n in torch.Tensor.__dict__]
    assert torch.cuda.synchronize is not sync_before
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    busy = torch.tensor([1.0]).as_subclass(Busy)
    for i in range(50):
        loss = torch.nn.functional.mse_loss(model(x), y)
        if i == SLOW:
            busy.item()
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item(), loss.detach().cpu(), loss.detach().to("cpu")  # CPU tensors: untimed
    swt.uninstrument()
    restored = not any(n in torch.Tensor.__dict__ for n in names) and \\
        torch.cuda.synchronize is sync_before
    rows = {{r["action"]: r["count"] for r in p.snapshot().records("all")
            if r["action"].startswith("sync")}}
    p.close()
    print(json.dumps({{"patched": patched, "restored": restored, "rows": rows}}))
""").format(slow=SLOW)


def test_a_synchronizing_item_explains_its_step(tmp_path):
    import json
    path = tmp_path / "sync.db"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["patched"] == ["item", "cpu", "tolist", "numpy", "to"], out
    assert out["restored"], out
    # Only the busy tensor's one .item() was timed: the CPU tensors' calls went through.
    assert out["rows"] == {"sync .item()": 1}, out
    slow = slow_steps(path)
    waited = [r for r in slow.values() if r["sync_ns"] > 0]
    assert len(waited) == 1, slow  # the one step that waited, found slow
    r = waited[0]
    assert r["step"] in (SLOW - 1, SLOW, SLOW + 1), r
    assert r["sync_ns"] >= 80_000_000 and r["sync_call"] == "sync .item()", r
    # The sync explains it unless the machine preempted the wait for more than half of it
    # (the test's own reading of the step: schedstat's runnable part).
    excess = r["duration_ns"] - r["median_ns"]
    runnable = runnable_part(r)
    if 2 * (r["sync_ns"] - min(runnable, r["sync_ns"])) >= excess:
        assert r["cause"] == "sync", r
        import stepwatch
        diag = stepwatch.diagnose(path)
        assert f"step {r['step']}: " in diag and "sync: blocked" in diag and "in .item()" in diag, diag
    else:  # the machine's: preempted, or unknown when neither explains half
        assert r["cause"] in ("preempted", "unknown"), r
