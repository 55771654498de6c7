"""A training loop whose own code raises (as a model compiled with mode="reduce-overhead"
raises "accessing tensor output of CUDAGraphs that has been overwritten..." when a loop keeps
an output across runs), under stepwatch.torch.instrument() with device time on fake GPU
events. The program catches its errors and goes on; it must do exactly the same with
stepwatch as without. Prints what it caught and the losses, one per line.

    python device_raising_loop.py mode...   (plain, timed, factory-fails,
                                             factory-fails-capturing; each in turn)
"""
import sys
import time

import torch

import stepwatch
import stepwatch.torch as swtorch


class FakeEvent:
    """torch.cuda.Event's methods on a clock that completes every event at once."""
    made = 0
    fail_after = None  # raise on creation once this many exist
    capturing = False  # "while capturing": creation raises as torch's does then

    def __new__(cls):
        if cls.fail_after is not None and cls.made >= cls.fail_after:
            if cls.capturing:
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
            raise RuntimeError("CUDA error: out of memory")
        cls.made += 1
        return super().__new__(cls)

    def record(self):
        self.at = time.monotonic_ns()

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end.at - self.at) / 1e6


class Flaky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError("Error: accessing tensor output of CUDAGraphs that has been "
                               "overwritten by a subsequent run.")
        return self.lin(x)


def run(mode):
    print(f"== {mode}", flush=True)
    print(f"== {mode}", file=sys.stderr, flush=True)
    torch.manual_seed(0)
    FakeEvent.made, FakeEvent.fail_after = 0, None
    model = Flaky()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    prof = None
    if mode != "plain":
        if mode.startswith("factory-fails"):
            FakeEvent.fail_after = 4  # inside the first steps, at a span's end
            FakeEvent.capturing = mode.endswith("capturing")
        prof = stepwatch.Profiler(device_time=FakeEvent)
        swtorch.instrument(prof)
    for step in range(9):
        try:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"loss {loss.item():.6f}")
        except RuntimeError as e:
            print(f"caught {type(e).__name__}: {e}")
    if prof is not None:
        swtorch.uninstrument()
        info = prof.device_time_info()
        prof.close()
        print(f"timed {info['steps_timed'] > 0} failed {info['failed']}", file=sys.stderr,
              flush=True)


for mode in sys.argv[1:]:
    run(mode)
