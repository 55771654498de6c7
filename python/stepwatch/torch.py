"""stepwatch.torch — plain PyTorch loops, zero code changes.

    import stepwatch
    stepwatch.torch.instrument()        # or: stepwatch run -- python train.py
    ... the unmodified training loop ...
    print(stepwatch.report())

What is timed, per step, and how:

  step       from one DataLoader ``next()`` to the next: a step is its data wait plus the
             compute on that batch. (No official hook: ``_BaseDataLoaderIter.__next__`` is
             patched.) The batch size is read from the batch (first tensor's first dim). The
             ``next()`` that ends an epoch opens no step.
  data       the ``next()`` call itself.
  forward    the outermost ``nn.Module`` call only. Default (forward="patch"): a wrapper on
             ``nn.Module.__call__``. forward="hooks": torch's global forward pre-hook, ended by
             a forward hook (``always_call=True``) on the outermost module. Measured by
             bench/bench_python.py, any global module hook sends every module call down
             torch's slow hook path (~3 us per module call here), the wrapper costs a Python
             call per module (~0.2 us), so the patch is the default.
  loss       a loss module (``torch.nn.modules.loss._Loss``) called outside a forward; when
             the loss is functional (``F.cross_entropy``) no module fires, and the time from
             the end of the forward to the start of the backward is recorded as "loss"
             instead. Both keep model time out of "loss" and cost nothing extra per call.
  backward   ``torch.autograd.backward`` (patched; ``Tensor.backward`` calls it).
  optimizer  ``Optimizer.step`` (global optimizer step pre/post hooks).
  zero_grad  ``Optimizer.zero_grad`` and ``Module.zero_grad`` (patched: no hook exists).

Phases: a DataLoader iterator whose first ``next()`` runs with grad enabled is "train", under
``no_grad``/``inference_mode`` it is "valid"; the whole instrumented time is "fit". Everything is restored by ``uninstrument()``.
A hook torch lacks is skipped with a warning; instrumentation never fails the script.

The patches and hooks that run every step are C callables (``stepwatch._stepwatch.Loop``,
python/stepwatch/_loop.c) holding the step's state; this file only installs them.
"""
import functools
import inspect
import threading
import warnings
import weakref

import torch
import torch.nn.modules.module as _module
import torch.optim.optimizer as _optim
from torch.utils.data import dataloader as _dataloader

import stepwatch as _sw
from stepwatch._stepwatch import Loop as _Loop

__all__ = ["Instrumentation", "instrument", "uninstrument", "instrumented"]

_lock = threading.Lock()
_active = None


class Instrumentation:
    """The hooks and patches of one ``instrument()`` call; ``remove()`` undoes them all."""

    def __init__(self, profiler=None, phases=True, forward="patch"):
        if forward not in ("patch", "hooks"):
            raise ValueError("forward must be 'patch' or 'hooks'")
        self.profiler = profiler if profiler is not None else _sw.profiler()
        self.phases = phases
        self.forward = forward
        self.missing = []          # what could not be hooked on this torch, with why
        self._handles = []         # RemovableHandles of global hooks
        self._patches = []         # (owner, attribute, original)
        self._module_hooks = {}    # id(module) -> (weakref(module), handle)
        self._installed = False
        self._loop = None          # the C per-step state and hooks (made by install)
        self._inside = None        # forward="hooks": the outermost module running

    # ---- installing ----------------------------------------------------------------------

    def install(self):
        if self._installed:
            return self
        p = self.profiler
        self._data = p.action("data")
        self._forward = p.action("forward")
        self._loss = p.action("loss")
        self._backward = p.action("backward")
        self._optimizer = p.action("optimizer")
        self._zero_grad = p.action("zero_grad")
        self._fit = p.phase("fit")
        self._train = p.phase("train")
        self._valid = p.phase("valid")
        self._loop = _Loop(p, self._data, self._forward, self._loss, self._backward,
                           self._optimizer, self._train if self.phases else None,
                           self._valid if self.phases else None,
                           torch.nn.modules.loss._Loss, torch.is_grad_enabled)
        self._try("DataLoader steps and data wait", self._install_dataloader)
        self._try("forward and loss", self._install_forward if self.forward == "hooks"
                  else self._install_forward_patch)
        self._try("backward", self._install_backward)
        self._try("optimizer step", self._install_optimizer)
        self._try("zero_grad", self._install_zero_grad)
        if self.phases:
            self._fit.begin()
        self._installed = True
        return self

    def _try(self, what, fn):
        try:
            fn()
        except Exception as exc:  # a torch without this hook: degrade, never fail
            self.missing.append(f"{what}: {exc}")
            warnings.warn(f"stepwatch.torch: {what} not timed on torch {torch.__version__} "
                          f"({exc})", RuntimeWarning, stacklevel=3)

    def _patch(self, owner, name, make):
        original = owner.__dict__[name]
        wrapper = make(original)
        functools.update_wrapper(wrapper, original)
        setattr(owner, name, wrapper)
        self._patches.append((owner, name, original))

    def _install_dataloader(self):
        self._patch(_dataloader._BaseDataLoaderIter, "__next__",
                    lambda original: self._loop.hook("next", original))

    def _install_forward(self):
        # The end hook must run even when the forward raises (always_call, torch >= 2.0):
        # without it a failed forward would leave "forward" open. Checked here, since a
        # TypeError at the first forward would fail the user's script.
        if "always_call" not in inspect.signature(torch.nn.Module.register_forward_hook).parameters:
            raise RuntimeError("register_forward_hook has no always_call; use forward='patch'")
        st, loop = self, self._loop

        def post_hook(module, args, output):
            if st._inside is module:
                st._inside = None
                loop.module_end()

        def pre_hook(module, args):
            if not loop.module_begin(module):
                return None
            entry = st._module_hooks.get(id(module))
            if entry is None or entry[0]() is not module:
                handle = module.register_forward_hook(post_hook, always_call=True)
                st._module_hooks[id(module)] = (weakref.ref(module), handle)
            st._inside = module
            return None

        self._handles.append(_module.register_module_forward_pre_hook(pre_hook))

    def _install_forward_patch(self):
        self._patch(torch.nn.Module, "__call__", lambda original: self._loop.hook("call", original))

    def _install_backward(self):
        self._patch(torch.autograd, "backward",
                    lambda original: self._loop.hook("backward", original))

    def _install_optimizer(self):
        self._handles.append(_optim.register_optimizer_step_pre_hook(
            self._loop.hook("optimizer_pre")))
        self._handles.append(_optim.register_optimizer_step_post_hook(
            self._loop.hook("optimizer_post")))

    def _install_zero_grad(self):
        # The action's own C wrapper (begin, call, end; binds as a method): no Python frame.
        self._patch(torch.optim.Optimizer, "zero_grad", self._zero_grad)
        self._patch(torch.nn.Module, "zero_grad", self._zero_grad)

    # ---- removing ------------------------------------------------------------------------

    def remove(self):
        """Close the open step and phases, then restore every hook and patch."""
        if not self._installed:
            return
        self._installed = False
        self._loop.close()
        self._inside = None
        if self.phases:
            self._fit.end()
        for handle in self._handles:
            handle.remove()
        for _ref, handle in self._module_hooks.values():
            handle.remove()
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._handles.clear()
        self._module_hooks.clear()
        self._patches.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        uninstrument()
        return False


def instrument(profiler=None, *, phases=True, forward="patch"):
    """Time every step of plain PyTorch code from now on (into profiler, or the default one).

    Returns the Instrumentation (also a context manager that uninstruments on exit). Calling
    it again while instrumented returns the active one."""
    global _active
    with _lock:
        if _active is not None:
            if profiler is not None and profiler is not _active.profiler:
                warnings.warn("stepwatch.torch: already instrumented with another profiler; "
                              "call uninstrument() first", RuntimeWarning, stacklevel=2)
            return _active
        _active = Instrumentation(profiler, phases=phases, forward=forward).install()
        return _active


def uninstrument():
    """Restore torch as it was before instrument(). A no-op when not instrumented."""
    global _active
    with _lock:
        inst, _active = _active, None
    if inst is not None:
        inst.remove()
    return inst


def instrumented():
    """The active Instrumentation, or None."""
    return _active
