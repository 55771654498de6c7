"""stepwatch._oom — which module ran out of memory: the one writer of the stderr line and the
run-file notes, and the attribution from an exception's traceback.

Two ways in, both on the error path only (nothing here runs in a step that does not fail):

- ``Profiler(modules=...)``'s C hook (python/_stepwatch/_modules.c) sees the exception leave
  a module's ``__call__`` (or ``torch.autograd.backward`` in a sampled step) and knows the
  module: it asks ``unnamed(exc)``, then ``report(profiler, exc, path, phase)``.
- Everywhere else an exception leaving what stepwatch watches is handed to ``seen()``
  (python/_stepwatch/_oom.c from C: a Step's or Phase's ``__exit__``, ``Profiler.__exit__``
  and ``close()``, stepwatch.torch's forward and backward hooks; the front ends from
  Python: ``stepwatch run``, Lightning's teardown, Ignite's EXCEPTION_RAISED, fastai's fit).
  It reads the traceback once: the innermost frame of a module call (``nn.Module``'s
  ``_call_impl`` or a ``forward`` whose first argument is a module) names the module by its
  path under the model (the front end's, else the one holding the outermost module in the
  traceback); a
  frame of ``torch.autograd``'s backward makes the phase "backward" (whose module, the
  traceback cannot tell: the engine runs nodes, not modules), one of
  ``torch/optim/optimizer.py`` "optimizer".

An exception is named once: ``report`` sets the attribute ``_stepwatch_oom`` on it (its
type, message and traceback stay as they were). Nothing here keeps a frame, a traceback or
a tensor, and nothing raises: a failure leaves the note ``oom_attribution_failed``.
"""
import os
import sys

__all__ = ["report", "seen", "unnamed"]

# RuntimeError messages of out-of-memory errors that are not torch.OutOfMemoryError.
_MESSAGES = ("CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA error: out of memory",
             "MPS backend out of memory")
_MARK = "_stepwatch_oom"
_NOTES = ("oom_allocated_bytes", "oom_reserved_bytes", "oom_peak_bytes")


def unnamed(exc):
    """Is exc an out-of-memory error that no one named yet?"""
    try:
        if not isinstance(exc, RuntimeError) or _MARK in getattr(exc, "__dict__", {}):
            return False
        torch = sys.modules.get("torch")
        oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
        if oom_type is not None and isinstance(exc, oom_type):
            return True
        text = str(exc)
        return any(m in text for m in _MESSAGES)
    except Exception:
        return False


def allocator_state():
    """(allocated, reserved, peak) bytes of torch's CUDA allocator, or None when torch has
    not initialized CUDA (asking would initialize it)."""
    cuda = sys.modules.get("torch.cuda")
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        return cuda.memory_allocated(), cuda.memory_reserved(), cuda.max_memory_allocated()
    except Exception:  # never fail the exception being reported
        return None


def _mib(n):
    return f"{n / (1024 * 1024):.1f} MiB"


def _where(path, phase, at):
    if path is not None:
        return f"in `{path or '(model)'}` ({phase})"
    if phase == "backward":
        return "in the backward (which module: unknown; `modules=` names it in sampled steps)"
    if phase == "optimizer":
        return "in the optimizer step"
    if phase == "forward":
        return "in the forward (which module: unknown)"
    return "outside a module's forward and the backward" + (f" (at {at})" if at else "")


def report(profiler, exc, path, phase, at=None):
    """The one writer: stderr says where exc (an out-of-memory error) happened and the
    allocator's state now, and profiler's run gets the notes oom_module (path; '' is the
    model), oom_phase and oom_*_bytes. path None: the module is unknown. exc is marked named."""
    try:
        setattr(exc, _MARK, phase if path is None else f"{path or '(model)'} ({phase})")
    except Exception:
        pass
    state = allocator_state()
    figures = ("allocated {}, reserved {}, peak {}".format(*map(_mib, state)) if state
               else "allocated n/a, reserved n/a, peak n/a")
    try:
        sys.stderr.write(f"stepwatch: out of memory {_where(path, phase, at)}: {figures}\n")
        sys.stderr.flush()
    except Exception:
        pass
    if profiler is None or profiler.closed:
        return
    profiler.note("oom_module", None if path is None else (path or "(model)"))
    profiler.note("oom_phase", phase)
    profiler.note("oom_where", at)
    for key, value in zip(_NOTES, state or (None,) * 3):
        profiler.note(key, None if value is None else str(value))


# ---- attribution from the traceback --------------------------------------------------------

def _torch_files():
    """The files whose frames say "backward" (torch.autograd's entry points and the engine's)
    and "optimizer" (every optimizer's step passes through optimizer.py's wrapper)."""
    def file_of(name):
        return getattr(sys.modules.get(name), "__file__", None)
    backward = {file_of(n) for n in ("torch.autograd", "torch.autograd.graph", "torch._tensor")}
    return backward - {None}, file_of("torch.optim.optimizer")


def _first_argument(frame, running):
    """The first argument of frame's function (self), read once, on the error. Not of a
    frame still running (ids in running): before Python 3.13 f_locals leaves a snapshot of
    its locals on it, which would keep them alive until it returns."""
    code = frame.f_code
    if code.co_argcount < 1 or id(frame) in running:
        return None
    return frame.f_locals.get(code.co_varnames[0])


def _running():
    """The ids of the frames on this thread's stack now."""
    ids, frame = set(), sys._getframe()
    while frame is not None:
        ids.add(id(frame))
        frame = frame.f_back
    return ids


def _path_in(root, module):
    """module's path under root ('' for root itself), or None when root does not hold it."""
    if root is None:
        return None
    for name, sub in root.named_modules():
        if sub is module:
            return name
    return None


def _attribute(exc, root):
    """(path or None, phase, where) of exc from its traceback."""
    torch = sys.modules.get("torch")
    if torch is None:  # no module, no autograd: an error of its own kind
        return None, "other", None
    nn_module = torch.nn.Module
    calls = {getattr(nn_module.__dict__.get(n), "__code__", None)
             for n in ("_call_impl", "_wrapped_call_impl")}
    backward_files, optimizer_file = _torch_files()
    phase = module = outermost = frame = None
    running = _running()
    tb, last = exc.__traceback__, None
    while tb is not None:
        frame, last = tb.tb_frame, tb
        code = frame.f_code
        if code.co_name in ("backward", "grad", "_engine_run_backward") and \
                code.co_filename in backward_files:
            phase, module = "backward", None
        elif code.co_filename == optimizer_file:
            phase, module = "optimizer", None
        elif code in calls or code.co_name == "forward":
            found = _first_argument(frame, running)
            if isinstance(found, nn_module):
                module = found
                outermost = found if outermost is None else outermost
                # a module run inside the backward (activation checkpointing) stays there
                phase = "backward" if phase == "backward" else "forward"
        tb = tb.tb_next
    del frame, tb
    at = None
    if last is not None:
        at = (f"{os.path.basename(last.tb_frame.f_code.co_filename)}:{last.tb_lineno} "
              f"in {last.tb_frame.f_code.co_name}")
    del last
    if module is None:
        return None, phase or "other", at if phase is None else None
    path = _path_in(root, module)
    if path is None:
        path = _path_in(_model_above(outermost), module)
    return (path if path is not None else type(module).__name__), phase, None


def _model_above(module):
    """The model holding module (the outermost module in a traceback is not always the model:
    a block recomputed in the backward by activation checkpointing), as Profiler(modules=...)
    finds it: gc walks the heap, once, on the error."""
    try:
        from stepwatch._modules import _owner_chain_top
        return _owner_chain_top(module)
    except Exception:  # the outermost module then
        return module


def seen(profiler, exc, root=None):
    """exc left what profiler watches: when it is an out-of-memory error not named yet, name
    where it happened from its traceback (root: the model, when the front end knows it)."""
    if not unnamed(exc):
        return
    try:
        path, phase, at = _attribute(exc, root)
        report(profiler, exc, path, phase, at)
    except Exception as failed:  # no attribution, never an error of ours
        try:
            setattr(exc, _MARK, "?")
            if profiler is not None and not profiler.closed:
                profiler.note("oom_attribution_failed",
                              f"{type(failed).__name__}: {failed}"[:200])
        except Exception:
            pass
