# The public API of stepwatch.lightning_devicestats, for mypy and IDEs; the base is
# Lightning's Callback (Any where Lightning is not read).
from lightning.pytorch.callbacks import Callback

__all__ = ["DeviceStatsMonitor"]

class DeviceStatsMonitor(Callback):
    def __init__(self, cpu_stats: bool | None = None, extra_stats: bool = False) -> None: ...
