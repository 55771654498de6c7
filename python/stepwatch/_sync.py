"""Host blocking in synchronizing calls, timed as "sync <call>" (docs/slow-steps.md): a step
whose host waited for the GPU in .item(), .cpu(), .tolist(), .numpy(), .to("cpu") or
torch.cuda.synchronize() is slow for that reason (cause "sync": "blocked 120 ms in .item()").

Installed only where CUDA is (a CPU-only torch is not patched at all). A call on a tensor
that is not on CUDA costs one check (tensor.is_cuda) and calls through; under torch.compile's
tracing the original is called (the compiled graph's own syncs are its business)."""
import functools
import threading

import torch

_METHODS = ("item", "cpu", "tolist", "numpy")
_inside = threading.local()  # a call of this thread is being timed (a tensor subclass's
#                              __torch_function__, as DTensor's, calls the method again)


def _timed(action, original, *args, **kwargs):
    if getattr(_inside, "timing", False):
        return original(*args, **kwargs)
    _inside.timing = True
    try:
        with action:
            return original(*args, **kwargs)
    finally:
        _inside.timing = False


def _timed_method(profiler, name):
    action = profiler.action(f"sync .{name}()")

    def make(original):
        def call(self, *args, **kwargs):
            if not self.is_cuda or torch.compiler.is_compiling():
                return original(self, *args, **kwargs)
            return _timed(action, original, self, *args, **kwargs)
        return functools.update_wrapper(call, original)
    return make


def _to_host(args, kwargs):
    """Does Tensor.to(*args, **kwargs) copy to the CPU and wait for it (not non_blocking)?"""
    if kwargs.get("non_blocking") or (len(args) > 1 and args[1] is True):
        return False
    device = kwargs.get("device", args[0] if args else None)
    if isinstance(device, str):
        return device.split(":")[0] == "cpu"
    return isinstance(device, torch.device) and device.type == "cpu"


def _timed_to(profiler):
    action = profiler.action("sync .to()")

    def make(original):
        def to(self, *args, **kwargs):
            if not self.is_cuda or not _to_host(args, kwargs) or torch.compiler.is_compiling():
                return original(self, *args, **kwargs)
            return _timed(action, original, self, *args, **kwargs)
        return functools.update_wrapper(to, original)
    return make


def _timed_synchronize(profiler):
    action = profiler.action("sync cuda.synchronize()")  # fits sw_step_signals.sync_call

    def make(original):
        def synchronize(*args, **kwargs):
            return _timed(action, original, *args, **kwargs)
        return functools.update_wrapper(synchronize, original)
    return make


def install(profiler, patch):
    """Patch the synchronizing calls through patch(owner, name, make) (the adapter's, which
    keeps what uninstrument() restores). Returns whether they were patched (CUDA here)."""
    if not torch.cuda.is_available():
        return False
    for name in _METHODS:
        patch(torch.Tensor, name, _timed_method(profiler, name))
    patch(torch.Tensor, "to", _timed_to(profiler))
    patch(torch.cuda, "synchronize", _timed_synchronize(profiler))
    return True
