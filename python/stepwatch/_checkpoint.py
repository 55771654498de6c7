"""Checkpoint saving timed as "checkpoint" (docs/slow-steps.md): a step that saved one is slow
for that reason. The adapters wrap what their framework saves with (zero-code torch:
torch.save; Lightning: trainer.save_checkpoint; the Hugging Face Trainer: _save_checkpoint).
A save inside a save (Lightning's and the Trainer's call torch.save) is not timed again, so
one checkpoint is one span and its time counts once.

Under zero-code torch a save made between two training steps (after ``optimizer.step()``)
is the next step's time, as everything between them is: its span is held for that step
(Loop.hold), so the step is slow for that reason and its kept spans show the save.

The time of saves inside steps goes into the note "checkpoint_in_steps_ns" (a total), so
goodput counts a checkpoint once: lost to checkpoints, not also steady training. Their size
(a path's file size after the save, or how far a file object's position moved) goes to the
step (Profiler.checkpoint_bytes), whose evidence then reads "checkpoint, 2.1 s, 1.2 GiB at
580 MiB/s"."""
import functools
import os
import threading
import weakref

from stepwatch._stepwatch import now_ns

IN_STEPS_NOTE = "checkpoint_in_steps_ns"

_inside = threading.local()  # a save of this thread is being timed
_in_steps = weakref.WeakKeyDictionary()  # profiler: ns of its saves inside steps


def _argument(args, kwargs, where):
    if where is None:
        return None
    position, keyword = where
    return args[position] if len(args) > position else kwargs.get(keyword)


def _position(target):
    """A file object's position (None: not a file object, or not seekable)."""
    if isinstance(target, (str, os.PathLike)) or not hasattr(target, "tell"):
        return None
    try:
        return target.tell()
    except (OSError, ValueError, AttributeError):
        return None


def _written(target, before):
    """The bytes a save to target wrote: a path's file size, or how far the file object's
    position moved; 0 when not known (a directory, a stream, another file system)."""
    try:
        if isinstance(target, (str, os.PathLike)):
            path = os.fspath(target)
            return os.path.getsize(path) if os.path.isfile(path) else 0
        after = _position(target)
        return after - before if before is not None and after is not None and after > before \
            else 0
    except (OSError, TypeError, ValueError):
        return 0


def timed(profiler, function, loop=None, target=None):
    """function, timed as profiler's "checkpoint" action when no save around it is; loop:
    stepwatch.torch's Loop, which holds a save between two steps for the next one; target:
    (position, keyword) of the argument naming the file saved to (its size is the save's)."""
    action = profiler.action("checkpoint")

    def call(args, kwargs, times):
        times[0] = now_ns()
        try:
            return function(*args, **kwargs)
        finally:
            times[1] = now_ns()

    def save(*args, **kwargs):
        if getattr(_inside, "saving", False):
            return function(*args, **kwargs)
        _inside.saving = True
        in_step = profiler.step_index >= 0
        held = not in_step and loop is not None and loop.between()
        file = _argument(args, kwargs, target)
        before = _position(file)
        times = [0, 0]  # the save's start and end, inside the action's span
        try:
            if held:
                return call(args, kwargs, times)
            with action:
                return call(args, kwargs, times)
        finally:
            _inside.saving = False
            if held:
                loop.hold(action, *times)
            if (in_step or held) and not profiler.closed:
                total = _in_steps.get(profiler, 0) + times[1] - times[0]
                _in_steps[profiler] = total
                profiler.note(IN_STEPS_NOTE, str(total))
                written = _written(file, before)
                if written > 0:
                    profiler.checkpoint_bytes(written)
    return functools.update_wrapper(save, function)
