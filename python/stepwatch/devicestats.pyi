# The public API of stepwatch.devicestats (devicestats.py), for mypy and IDEs.
__all__ = ["DeviceStats", "CPU_KEYS"]

CPU_KEYS: tuple[str, str, str]

class DeviceStats:
    cpu_stats: bool | None
    extra_stats: bool
    gpu_error: str | None
    def __init__(self, cpu_stats: bool | None = None, extra_stats: bool = False) -> None: ...
    def read(self) -> dict[str, float]: ...
