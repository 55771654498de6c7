# The public API of stepwatch.lightning_throughput (re-exported by stepwatch.lightning).
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

__all__ = ["Throughput", "ThroughputMonitor", "measure_flops", "get_available_flops"]

class Throughput:
    available_flops: float | None
    world_size: int
    separator: str
    def __init__(self, available_flops: float | None = None, world_size: int = 1,
                 window_size: int = 100, separator: str = "/") -> None: ...
    def reset(self) -> None: ...
    def update(self, *, time: float, batches: int, samples: int, lengths: int | None = None,
               flops: float | None = None) -> None: ...
    def compute(self) -> dict[str, float]: ...

class ThroughputMonitor(Callback):
    kwargs: dict[str, Any]
    batch_size_fn: Callable[[Any], int]
    length_fn: Callable[[Any], int] | None
    count_flops: bool
    available_flops: int | None
    def __init__(self, batch_size_fn: Callable[[Any], int],
                 length_fn: Callable[[Any], int] | None = None, count_flops: bool = True,
                 **kwargs: Any) -> None: ...

def measure_flops(model: torch.nn.Module, forward_fn: Callable[[], torch.Tensor],
                  loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int: ...
def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None: ...
