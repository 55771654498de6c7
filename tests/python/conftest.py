"""Shared helpers of the Python tests: a Dataset whose data wait is known."""
import os
import time

import pytest


class SleepyBatches:
    """Map-style dataset of whole batches (use DataLoader(batch_size=None)): each item sleeps
    `sleep_s` and records how long it really slept, so the data wait is known exactly even
    on a loaded machine (time.sleep may oversleep)."""

    def __init__(self, n, sleep_s=0.02, batch=4, features=8):
        import torch
        self.n, self.sleep_s, self.batch, self.features = n, sleep_s, batch, features
        self.slept_ns = 0
        self.calls = 0
        self._x = torch.randn(batch, features)
        self._y = torch.randn(batch, 1)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        t0 = time.perf_counter_ns()
        time.sleep(self.sleep_s)
        self.slept_ns += time.perf_counter_ns() - t0
        self.calls += 1
        return self._x, self._y


def within(measured, known, tol=0.10):
    """measured is within ±tol of known."""
    return abs(measured - known) <= tol * known


@pytest.fixture
def sleepy():
    return SleepyBatches


@pytest.fixture
def build_dir():
    return os.environ.get("SW_BUILD_DIR")


@pytest.fixture
def fake_cudart(monkeypatch, build_dir):
    """The fake CUDA runtime (tests/device/fake_cudart.c: one stream of a GPU that runs queued
    kernels in real time), loaded with ctypes and named to stepwatch by STEPWATCH_CUDART: the
    same library, one fake GPU. fake_gpu_launch(ns) queues a kernel; fake_gpu_counts fills
    (syncs, records, queries, created, destroyed, invalidated)."""
    import ctypes
    lib = os.path.join(build_dir or "", "tests", "libfake_cudart.so")
    if not os.path.exists(lib):
        pytest.skip("the fake CUDA runtime is not built")
    monkeypatch.setenv("STEPWATCH_CUDART", lib)
    fake = ctypes.CDLL(lib)
    fake.fake_gpu_launch.argtypes = [ctypes.c_uint64]
    fake.fake_gpu_idle_at.restype = ctypes.c_uint64
    return fake
