"""Checkpoint saving timed as "checkpoint" (docs/slow-steps.md): a step that saved one is slow
for that reason. The adapters wrap what their framework saves with (zero-code torch:
torch.save; Lightning: trainer.save_checkpoint; the Hugging Face Trainer: _save_checkpoint).
A save inside a save (Lightning's and the Trainer's call torch.save) is not timed again, so
one checkpoint is one span and its time counts once."""
import functools
import threading

_inside = threading.local()  # a save of this thread is being timed


def timed(profiler, function):
    """function, timed as profiler's "checkpoint" action when no save around it is."""
    action = profiler.action("checkpoint")

    def save(*args, **kwargs):
        if getattr(_inside, "saving", False):
            return function(*args, **kwargs)
        _inside.saving = True
        try:
            with action:
                return function(*args, **kwargs)
        finally:
            _inside.saving = False
    return functools.update_wrapper(save, function)
