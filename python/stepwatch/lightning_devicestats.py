"""stepwatch.lightning.DeviceStatsMonitor: Lightning's DeviceStatsMonitor contract, with
stepwatch's device statistics on request (docs/device.md).

As Lightning's (lightning.pytorch.callbacks.DeviceStatsMonitor, 2.6): at the start and end
of every training, validation and test batch, when the Trainer's logging is due
(``log_every_n_steps``), the accelerator's statistics (``trainer.accelerator.
get_device_stats``: torch's CUDA allocator on a GPU, psutil's CPU figures on the CPU, any
accelerator's own) go to every logger of the Trainer as
``DeviceStatsMonitor.<hook><separator><name>`` at the step ``_batches_that_stepped``.
``cpu_stats``: None logs CPU figures only when the accelerator is the CPU, True always,
False never. Setting up a fit without a logger raises MisconfigurationException; CPU figures
without psutil raise ModuleNotFoundError, both at setup, as Lightning does.

The CPU figures (``cpu_percent``, ``cpu_vm_percent``, ``cpu_swap_percent``, psutil's
definitions) come from stepwatch's C reader (python/_stepwatch/_device.c): one call where
Lightning's psutil parses /proc/stat and /proc/meminfo twice in Python, the most of what a
logging step costs it; the GPU figures still come from the accelerator.

stepwatch adds, with ``extra_stats=True``, what Lightning has no key for: the process's CPU
and memory and each GPU's utilization, memory, power and temperature (NVML, loaded at run
time), read by stepwatch's C reader (``process_cpu_percent``, ``process_rss_bytes``,
``gpu0.utilization_percent``, ...), under the same prefix. For these values beside the step
time in the run file and the HTML report, give the profiler ``device_stats=True`` instead
(``stepwatch.lightning.Profiler(profiler=stepwatch.Profiler(device_stats=True))``).
"""
import importlib.util

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from . import _stepwatch
from .devicestats import CPU_KEYS

__all__ = ["DeviceStatsMonitor"]


def _is_cpu(accelerator):
    from lightning.pytorch.accelerators import CPUAccelerator
    return isinstance(accelerator, CPUAccelerator)


def _psutil_available():
    """psutil as Lightning sees it (its accelerator reads the CPU figures through psutil)."""
    try:
        from lightning.pytorch.callbacks import device_stats_monitor
        return bool(device_stats_monitor._PSUTIL_AVAILABLE)
    except (ImportError, AttributeError):
        return importlib.util.find_spec("psutil") is not None


class DeviceStatsMonitor(Callback):
    """Lightning's DeviceStatsMonitor (same hooks, keys and errors); ``extra_stats=True``
    also logs stepwatch's process and GPU statistics."""

    def __init__(self, cpu_stats=None, extra_stats=False):
        if cpu_stats not in (None, True, False):
            raise ValueError(f"cpu_stats must be None, True or False, not {cpu_stats!r}")
        self._cpu_stats = cpu_stats
        self._extra_stats = extra_stats
        self._reader = None

    def setup(self, trainer, pl_module, stage):
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `DeviceStatsMonitor` callback with `Trainer(logger=False)`.")
        device = trainer.strategy.root_device
        if self._cpu_stats is None and device.type == "cpu" and not _psutil_available():
            raise ModuleNotFoundError(
                "`DeviceStatsMonitor` cannot log CPU stats as `psutil` is not installed "
                "(pip install psutil), or pass cpu_stats=False")
        if self._reader is None:
            self._reader = _stepwatch._device_reader(bool(self._extra_stats))

    def _log(self, trainer, hook):
        if not trainer._logger_connector.should_update_logs:  # log_every_n_steps, as Lightning
            return
        device = trainer.strategy.root_device
        if self._cpu_stats is False and device.type == "cpu":
            return
        values = _stepwatch._device_read(self._reader)
        if _is_cpu(trainer.accelerator):  # Lightning's get_device_stats: the CPU figures
            stats = {k: values[k] for k in CPU_KEYS if k in values}
        else:
            stats = trainer.accelerator.get_device_stats(device)
            if self._cpu_stats:
                stats.update((k, values[k]) for k in CPU_KEYS if k in values)
        if self._extra_stats:
            stats.update((k, v) for k, v in values.items() if k not in stats and
                         k not in CPU_KEYS and k != "gpu_error")
        prefix = f"{type(self).__qualname__}.{hook}"
        step = trainer.fit_loop.epoch_loop._batches_that_stepped
        for logger in trainer.loggers:
            sep = logger.group_separator
            logger.log_metrics({f"{prefix}{sep}{k}": v for k, v in stats.items()}, step=step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._log(trainer, "on_train_batch_start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._log(trainer, "on_train_batch_end")

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._log(trainer, "on_validation_batch_start")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx=0):
        self._log(trainer, "on_validation_batch_end")

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._log(trainer, "on_test_batch_start")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._log(trainer, "on_test_batch_end")
