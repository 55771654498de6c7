"""Device statistics for any training loop (docs/device.md).

``DeviceStats(cpu_stats=None, extra_stats=False).read()`` gives the values Lightning's
DeviceStatsMonitor logs, under its names, wherever the loop comes from (the fastai and Ignite
adapters log them): torch's CUDA allocator statistics (``torch.cuda.memory_stats()``) while
torch uses CUDA, and the system's CPU figures (``cpu_percent``, ``cpu_vm_percent``,
``cpu_swap_percent``) on CPU, or always with ``cpu_stats=True``, never with False. The CPU
figures come from stepwatch's C reader with psutil's definitions (no psutil needed);
``cpu_percent`` is over the time since the previous read. ``extra_stats=True`` adds the
process's CPU and memory and each GPU's utilization, memory, power and temperature (NVML):
``process_cpu_percent``, ``process_rss_bytes``, ``process_peak_rss_bytes``,
``gpu0.utilization_percent``, ...

The rest is for the extension (``Profiler(device_stats=..., device_time=...)``): torch's
allocator sampled on a Python thread, and the GPU clock on ``torch.cuda.Event``.
"""
import functools
import sys
import threading
import time
import warnings
import weakref

from . import _stepwatch

__all__ = ["DeviceStats", "CPU_KEYS"]

CPU_KEYS = ("cpu_percent", "cpu_vm_percent", "cpu_swap_percent")  # Lightning's names


def _cuda_torch():
    """torch, when it is imported and uses CUDA; else None (never imports or starts CUDA)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_initialized() else None


class DeviceStats:
    """Lightning DeviceStatsMonitor's values for the current device, read now."""

    def __init__(self, cpu_stats=None, extra_stats=False):
        if cpu_stats not in (None, True, False):
            raise ValueError(f"cpu_stats must be None, True or False, not {cpu_stats!r}")
        self.cpu_stats = cpu_stats
        self.extra_stats = bool(extra_stats)
        self._reader = _stepwatch._device_reader(self.extra_stats)
        # Why there are no GPU statistics among the extras (None when there are).
        self.gpu_error = _stepwatch._device_read(self._reader)["gpu_error"]

    def read(self):
        torch = _cuda_torch()
        stats = dict(torch.cuda.memory_stats()) if torch is not None else {}
        values = _stepwatch._device_read(self._reader)
        if self.cpu_stats or (self.cpu_stats is None and torch is None):
            stats.update((k, values[k]) for k in CPU_KEYS if k in values)
        if self.extra_stats:
            stats.update((k, v) for k, v in values.items() if k not in CPU_KEYS and k != "gpu_error")
        return stats


# ---- for Profiler(device_stats=...): torch's allocator, on a thread of its own ----------

# Summed over the GPUs the process uses (a thread's current device is its own, so the
# sampler cannot know which one the training thread picked).
_TORCH_MEMORY = ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                 "reserved_bytes.all.current", "reserved_bytes.all.peak")


def _sample_torch_memory(profiler_ref, interval):
    while True:
        time.sleep(interval)
        prof = profiler_ref()
        if prof is None or prof.closed:
            return
        torch = _cuda_torch()
        if torch is not None:
            totals = dict.fromkeys(_TORCH_MEMORY, 0)
            for device in range(torch.cuda.device_count()):
                stats = torch.cuda.memory_stats(device)
                for k in _TORCH_MEMORY:
                    totals[k] += stats.get(k, 0)
            try:
                for k, v in totals.items():
                    prof.counter(k, v)
            except _stepwatch.Error:  # closed meanwhile
                return
        del prof


def _start_torch_memory(prof, interval):
    """A daemon thread recording torch's CUDA allocator into prof every interval seconds
    while torch uses CUDA; it ends with the profiler. The C sampler's thread never takes the
    GIL, so it never waits on Python nor meets an interpreter that is shutting down."""
    threading.Thread(target=_sample_torch_memory, args=(weakref.ref(prof), interval),
                     name="stepwatch-torch-memory", daemon=True).start()


# ---- for Profiler(device_time=True): the GPU clock on torch.cuda.Event -------------------

def _torch_clock():
    """(event factory, ready, stream) for torch's CUDA, or None with a warning when torch or
    CUDA is missing. stream() is asked at each step's begin: the current stream's handle
    while torch has CUDA started (so timing never starts a CUDA context), else None; the C
    side records its events with the CUDA runtime torch loaded, and checks for capture
    itself. The factory and ready() serve where that runtime cannot be found: events are then
    torch.cuda.Event objects, and ready() is true while torch has CUDA started and the current
    stream is not being captured into a CUDA graph."""
    try:
        import torch
    except ImportError as e:
        warnings.warn(f"stepwatch: no device time (torch is not importable: {e})",
                      RuntimeWarning, stacklevel=2)
        return None
    if not torch.cuda.is_available():
        warnings.warn("stepwatch: no device time (torch.cuda.is_available() is False)",
                      RuntimeWarning, stacklevel=2)
        return None

    def ready():
        return torch.cuda.is_initialized() and not torch.cuda.is_current_stream_capturing()

    def stream():
        return torch.cuda.current_stream().cuda_stream if torch.cuda.is_initialized() else None

    return functools.partial(torch.cuda.Event, enable_timing=True), ready, stream
