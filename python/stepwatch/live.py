"""The live figures of a running profiler, for TensorBoard.

The status line on stderr is drawn in C (``Profiler(live=...)``, ``stepwatch run --live``).
The same figures go to TensorBoard through ``torch.utils.tensorboard`` when asked::

    board = stepwatch.live.TensorBoard(prof, log_dir="runs/exp1")   # every 5 s
    ...                                                              # train
    board.close()                                                    # or `with ...:`

Each scalar is ``stepwatch/<figure>`` (steps_per_s, samples_per_s, step_p50_ms, step_p99_ms,
data_share, and ``stepwatch/share/<category>`` for the slowest category), at the global step
``total_steps``. A background thread calls :meth:`stepwatch.Live.update` (a snapshot in C)
every ``every_s`` seconds; the training thread is never touched.
"""
import threading
from typing import Any

from ._stepwatch import Live, Profiler

__all__ = ["Live", "TensorBoard"]


class TensorBoard:
    """Write a profiler's live figures to TensorBoard every ``every_s`` seconds.

    ``writer`` is a ``torch.utils.tensorboard.SummaryWriter`` (or anything with its
    ``add_scalar``/``flush``/``close``); by default one is made on ``log_dir``. A writer passed
    in is flushed at :meth:`close`, not closed."""

    def __init__(self, profiler: Profiler, log_dir: str | None = None, every_s: float = 5.0,
                 window_s: float | None = None, writer: Any = None) -> None:
        if every_s <= 0:
            raise ValueError("TensorBoard: every_s must be above 0")
        self._live = Live(profiler, window_s if window_s is not None else max(every_s, 1.0))
        self._live.update()  # the first mark: the first write covers the steps from here on
        self._own_writer = writer is None
        if writer is None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

            writer = SummaryWriter(log_dir=log_dir)
        self.writer = writer
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stepwatch-tensorboard",
                                        daemon=True)
        self._thread.start()

    def write(self) -> dict[str, Any]:
        """Take the figures now and write them (also what the thread does)."""
        v = self._live.update()
        if not v["steps"]:
            return v
        step = v["total_steps"]
        scalars = {
            "steps_per_s": v["steps_per_s"],
            "samples_per_s": v["samples_per_s"],
            "step_p50_ms": v["step_p50_ns"] and v["step_p50_ns"] / 1e6,
            "step_p99_ms": v["step_p99_ns"] and v["step_p99_ns"] / 1e6,
            "data_share": v["data_share"],
        }
        if v["slowest"] is not None:
            scalars["share/" + v["slowest"]] = v["slowest_share"]
        for name, value in scalars.items():
            if value is not None:
                self.writer.add_scalar("stepwatch/" + name, value, global_step=step)
        return v

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self.write()
            except Exception:  # a closed profiler or writer: stop quietly, never hurt training
                return

    def close(self) -> None:
        """Stop the thread, write the last figures, flush (and close our own writer)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        try:
            self.write()
        except Exception:
            pass
        self.writer.flush()
        if self._own_writer:
            self.writer.close()

    def __enter__(self) -> "TensorBoard":
        return self

    def __exit__(self, *exc: object) -> bool:
        self.close()
        return False
