"""Checkpoint saving timed as "checkpoint" (docs/slow-steps.md): a step that saved one is slow
for that reason. The adapters wrap what their framework saves with (zero-code torch:
torch.save; Lightning: trainer.save_checkpoint; the Hugging Face Trainer: _save_checkpoint).
A save inside a save (Lightning's and the Trainer's call torch.save) is not timed again, so
one checkpoint is one span and its time counts once.

Under zero-code torch a save made between two training steps (after ``optimizer.step()``)
is the next step's time, as everything between them is: its span is held for that step
(Loop.hold), so the step is slow for that reason and its kept spans show the save.

The time of saves inside steps goes into the note "checkpoint_in_steps_ns" (a total), so
goodput counts a checkpoint once: lost to checkpoints, not also steady training."""
import functools
import threading
import weakref

from stepwatch._stepwatch import now_ns

IN_STEPS_NOTE = "checkpoint_in_steps_ns"

_inside = threading.local()  # a save of this thread is being timed
_in_steps = weakref.WeakKeyDictionary()  # profiler: ns of its saves inside steps


def timed(profiler, function, loop=None):
    """function, timed as profiler's "checkpoint" action when no save around it is; loop:
    stepwatch.torch's Loop, which holds a save between two steps for the next one."""
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
    return functools.update_wrapper(save, function)
