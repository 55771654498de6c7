"""Lightning's own start of the other ranks, followed by stepwatch's zero-code run.

``Trainer(devices=N)`` without torchrun starts ranks 1..N-1 itself: its subprocess script
launcher runs the script again, ``python script.py args`` with LOCAL_RANK set. Under
``stepwatch run -- python script.py`` those ranks trained without stepwatch: unprofiled,
and named missing in the cross-rank view. While autorun runs the program, this puts
autorun, its options and the child's rank in front of that command, so every rank runs
under stepwatch and writes its own run file. Lightning's launcher module is not imported
by this: a finder on sys.meta_path patches it when the program imports it, and stop()
undoes both (docs/ranks.md).
"""
import functools
import importlib.abc
import importlib.machinery
import sys

from stepwatch import _patching

# Where Lightning keeps the command it starts the other ranks with (the unified package and
# the standalone ones); the pytorch module imports the fabric one's function by name.
LAUNCHERS = ("lightning.fabric.strategies.launchers.subprocess_script",
             "lightning.pytorch.strategies.launchers.subprocess_script",
             "lightning_fabric.strategies.launchers.subprocess_script",
             "pytorch_lightning.strategies.launchers.subprocess_script")
COMMAND = "_basic_subprocess_cmd"
RANK_OPTION = "--lightning-rank"  # autorun's: the global rank Lightning gives this child

_patches = []
_finder = None


def _child_rank(frame):
    """The global rank of the child the launcher is about to start, read from the launcher's
    frame (its loop's local_rank, its node rank and processes per node): Lightning sets only
    LOCAL_RANK in the child's environment. None when the frame is not the one expected
    (another Lightning version): the child then takes LOCAL_RANK."""
    launcher, local_rank = frame.f_locals.get("self"), frame.f_locals.get("local_rank")
    try:
        return launcher.cluster_environment.node_rank() * launcher.num_processes + local_rank
    except (AttributeError, TypeError):
        return None


def _through_autorun(command, options, rank):
    """[python, script | -m module, args...] as autorun runs it, with options first."""
    ours = [RANK_OPTION, str(rank)] if rank is not None else []
    return [command[0], "-m", "stepwatch.autorun", *options, *ours, *command[1:]]


def _patch(module, options):
    original = module.__dict__.get(COMMAND)
    if original is None or getattr(original, "_stepwatch", False):
        return  # not this Lightning's layout, or the fabric function imported already patched

    def command(*args, **kwargs):
        made = list(original(*args, **kwargs))
        if len(made) < 2 or made[0] != sys.executable:
            return made  # not the re-run of this interpreter expected: leave it as it is
        return _through_autorun(made, options, _child_rank(sys._getframe(1)))
    command = functools.update_wrapper(command, original)
    command._stepwatch = True
    setattr(module, COMMAND, command)
    _patches.append((module, COMMAND, original, command))


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a launcher module it lets the path finder find it and
    patches the module once its code has run."""

    def __init__(self, options):
        self.options = options

    def find_spec(self, name, path, target=None):
        if name not in LAUNCHERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_code, options = spec.loader.exec_module, self.options

        def exec_module(module):
            run_code(module)
            _patch(module, options)
        spec.loader.exec_module = exec_module  # this module's loader object only
        return spec


def follow(options):
    """From now on Lightning's launcher starts its ranks through autorun with options (the
    command-line options autorun itself was given; the environment's pass by themselves)."""
    global _finder
    if _finder is not None:
        return
    for name in LAUNCHERS:
        if name in sys.modules:
            _patch(sys.modules[name], options)
    _finder = _Finder(list(options))
    sys.meta_path.insert(0, _finder)


def stop():
    """Undo follow(): the finder goes, each command still ours gets its original back."""
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    _patching.restore(_patches, None)
