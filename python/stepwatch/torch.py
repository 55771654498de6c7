"""stepwatch.torch — plain PyTorch loops, zero code changes.

    import stepwatch
    stepwatch.torch.instrument()        # or: stepwatch run -- python train.py
    ... the unmodified training loop ...
    print(stepwatch.report())

Steps come from the training itself: a training step ends when the optimizer steps (with
gradient accumulation it holds several forward/backward passes), or, when there is no
optimizer object, when the backward ends; validation steps (forwards under no_grad, or of a
module in eval() mode) end at the next DataLoader batch, or, without a loader, when the model
is called again. docs/python.md, "How steps are found", has the rules and the loop shapes they
cover; the report names the rule it used (the run's "step_rule" note).

What is timed, per step:

  data       a DataLoader ``next()`` (patched ``_BaseDataLoaderIter.__next__``: no hook exists).
             The batch size is read from the batch (first tensor's first dim).
  h2d_copy   (category data) the batch's copy to the device: ``Tensor.to``/``Tensor.cuda``
             (patched), and a batch class's own ``to``/``cuda`` (patched on the class the
             first time a DataLoader gives a batch of it), called outside the model while a
             fetched batch waits for its forward: ``x.to(device, non_blocking=True)`` in the
             loop, accelerate's ``send_to_device``, the HF Trainer's ``_prepare_inputs``.
             Anywhere else (the model's casts, ``model.to``) a call costs a few checks.
  forward    the outermost ``nn.Module`` call, or a call of a ``torch.compile``d function.
             Default (forward="patch"): a wrapper on ``nn.Module.__call__``. forward="hooks":
             torch's global forward pre-hook, ended by a forward hook (``always_call=True``)
             on the outermost module. Any global module hook sends every module call down
             torch's slow hook path (~3 us per module call here), the wrapper costs a Python
             call per module (~0.2 us), so the patch is the default. Modules called while a
             batch is fetched (transforms in ``__getitem__`` or collate) are the data's.
  loss       a loss module (``_Loss``), a functional loss (``torch.nn.functional.*_loss``,
             ``cross_entropy``, ...), or a plain module returning a scalar after the forward;
             in training, when none of these ran, the time from the forward's end to the
             backward (a loss written by hand).
  backward   ``torch.autograd.backward`` (patched; ``Tensor.backward`` calls it).
  optimizer  ``Optimizer.step`` (global optimizer step pre/post hooks); its own time: the
             forward and backward a closure (LBFGS) runs are theirs.
  zero_grad  ``Optimizer.zero_grad`` and ``Module.zero_grad``, and every optimizer class
             that overrides it (patched: no hook exists).
  compile    torch.compile's compilations (torch._dynamo's compile start/end callbacks), an
             action of category other inside the forward or backward that compiled; the
             steps they ran in and the time go into the "compiled_steps" note, which
             ``stepwatch diagnose`` names and keeps out of the step statistics.
  checkpoint ``torch.save`` (patched), an action of category other: inside a step, a slow
             step's cause (docs/slow-steps.md); one saved between two steps (after the
             optimizer step) is held for the next one, whose time it is.

Phases: per forward, "valid" under no_grad/inference_mode or for a module in eval() mode,
else "train"; the whole instrumented time is "fit". Everything is restored by
``uninstrument()``, except an attribute another tool or the program wrapped after ours: that
wrapper stays (ours under it calls straight through, and one stderr line names it). A hook torch lacks is skipped with a warning; instrumentation never fails
the script.

The hooks that run every step are C callables (``stepwatch._stepwatch.Loop``,
python/_stepwatch/_torch_loop.c) holding the step's state and its rules; this file only installs
them. The two that code compiled by torch.compile may call (functional losses, compiled
functions) sit behind a small Python function that calls the original while torch traces,
so compiled graphs stay whole.
"""
import functools
import inspect
import os
import sys
import threading
import warnings
import weakref

import torch
import torch.nn.functional as _functional
import torch.nn.modules.module as _module
import torch.optim.optimizer as _optim
from torch.utils.data import dataloader as _dataloader

import stepwatch as _sw
from stepwatch import _patching
from stepwatch._stepwatch import Loop as _Loop

__all__ = ["Instrumentation", "instrument", "uninstrument", "instrumented"]

_lock = threading.Lock()
_active = None

# The "compiled_steps" note: "STEP:NS" pairs, comma-separated, within the note's 511 bytes.
_COMPILED_NOTE = "compiled_steps"
_NOTE_MAX = 511

# The functional losses of torch.nn.functional (the loss modules call them too).
_LOSS_FUNCTIONS = ("cross_entropy", "nll_loss", "binary_cross_entropy",
                   "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
                   "gaussian_nll_loss", "ctc_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
                   "huber_loss", "margin_ranking_loss", "hinge_embedding_loss",
                   "multilabel_margin_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
                   "cosine_embedding_loss", "multi_margin_loss", "triplet_margin_loss",
                   "triplet_margin_with_distance_loss")


def _optimizer_classes():
    """Every subclass of torch.optim.Optimizer defined so far."""
    seen, stack = [], [torch.optim.Optimizer]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def _optimizer_exists():
    """Has any optimizer been made? Optimizer.__init__ marks its class's step as hooked."""
    return any(getattr(cls.__dict__.get("step"), "hooked", False)
               for cls in [torch.optim.Optimizer] + _optimizer_classes())


# False in eager code, True while torch.compile traces (torch folds the call to a constant);
# 30 ns here, torch.compiler.is_compiling 80 ns.
_tracing = getattr(torch.compiler, "is_dynamo_compiling", None) or torch.compiler.is_compiling


def _traceable(original, hook):
    """hook in eager code, original while torch.compile traces (a C hook would break the
    graph there)."""
    def wrapper(*args, **kwargs):
        if _tracing():
            return original(*args, **kwargs)
        return hook(*args, **kwargs)
    return functools.update_wrapper(wrapper, original)


class Instrumentation:
    """The hooks and patches of one ``instrument()`` call; ``remove()`` undoes them all."""

    def __init__(self, profiler=None, phases=True, forward="patch", flops=None, live=None):
        if forward not in ("patch", "hooks"):
            raise ValueError("forward must be 'patch' or 'hooks'")
        if flops is not None and flops is not False and flops is not True \
                and not isinstance(flops, dict):
            raise ValueError("flops must be True, False or a dict of stepwatch.flops.watch's "
                             "options (flops_per_batch, length_fn, peak_flops)")
        self._flops_options = ({} if flops is True else flops) if flops else None
        self.flops = None          # the stepwatch.flops.Watch, with flops=True
        self.profiler = profiler if profiler is not None else _sw.profiler()
        self.phases = phases
        self.forward = forward
        self.missing = []          # what could not be hooked on this torch, with why
        self._handles = []         # RemovableHandles of global hooks
        self._patches = []         # (owner, attribute, original or _patching.MISSING, wrapper)
        self._module_hooks = {}    # id(module) -> (weakref(module), handle)
        self._installed = False
        self._loop = None          # the C per-step state and hooks (made by install)
        self._inside = None        # forward="hooks": the outermost module running
        self._compile_cb = None    # (start, end) callbacks given to torch._dynamo
        self._compiling = None     # (start ns, step index) of the compilation under way
        self._compiled = {}        # step index -> ns compiling in it
        self.live = live           # the notebook display: None in a Jupyter kernel, or on/off
        self._notebook = None      # stepwatch.notebook.auto's display while installed
        self.collectives = []      # the torch.distributed calls timed (stepwatch.collectives)

    # ---- installing ----------------------------------------------------------------------

    def install(self):
        if self._installed:
            return self
        p = self.profiler
        actions = [p.action(name) for name in ("data", "forward", "loss", "backward",
                                               "optimizer", "zero_grad")]
        self._fit = p.phase("fit")
        train, valid = (p.phase("train"), p.phase("valid")) if self.phases else (None, None)
        self._optimizer_hooked = False
        self._loop = _Loop(p, *actions, train, valid, torch.nn.modules.loss._Loss,
                           torch.is_grad_enabled, self._optimizer_steps_seen,
                           closure=p.action("closure"), startup=p.action("startup"),
                           loader_startup=p.action("dataloader_startup", category="data"),
                           copy=p.action("h2d_copy", category="data"))
        self._loop.read_grad_mode(os.path.join(os.path.dirname(torch.__file__), "lib",
                                               "libc10.so"))
        self._try("DataLoader batches and data wait", self._install_dataloader)
        self._try("the batch's copy to the device", self._install_copy)
        self._try("forward", self._install_forward if self.forward == "hooks"
                  else self._install_forward_patch)
        self._try("functional losses", self._install_losses)
        self._try("backward", self._install_backward)
        self._try("optimizer step", self._install_optimizer)
        self._try("zero_grad", self._install_zero_grad)
        self._try("torch.compile", self._install_compile)
        self._try("torch.save", self._install_checkpoint)
        self._try("synchronizing calls", self._install_sync)
        self._try("torch.distributed collectives", self._install_collectives)
        if "torch._dynamo" in sys.modules:  # else at the first torch.compile call
            self._try("torch.compile compilations", self._install_compile_callbacks)
        if self._flops_options is not None and getattr(p, "flops", None) is None:
            # the options were checked: a bad one raises. A Profiler(flops=...) counts already
            from stepwatch import flops as _flops
            self.flops = _flops.watch(p, **self._flops_options)
        if self.phases:
            self._fit.begin()
        self._installed = True
        from stepwatch import notebook
        self._notebook = notebook.auto(self.profiler, self.live)
        return self

    def _try(self, what, fn):
        try:
            fn()
        except Exception as exc:  # a torch without this hook: degrade, never fail
            self.missing.append(f"{what}: {exc}")
            warnings.warn(f"stepwatch.torch: {what} not timed on torch {torch.__version__} "
                          f"({exc})", RuntimeWarning, stacklevel=3)

    def _patch(self, owner, name, make):
        original = owner.__dict__.get(name, _patching.MISSING)
        wrapper = make(getattr(owner, name) if original is _patching.MISSING else original)
        setattr(owner, name, wrapper)
        self._patches.append((owner, name, original, wrapper))
        return wrapper

    def _hook(self, kind):
        def make(original):
            return functools.update_wrapper(self._loop.hook(kind, original), original)
        return make

    def _install_collectives(self):
        """Every torch.distributed collective as collective:<op> (stepwatch.collectives)."""
        from stepwatch import collectives
        self.collectives = collectives.install(self.profiler, self._patch)

    def _install_dataloader(self):
        self._patch(_dataloader._BaseDataLoaderIter, "__next__", self._hook("next"))
        self._patch(_dataloader.DataLoader, "__iter__", self._hook("iter"))

    def _install_copy(self):
        make = self._hook("copy")
        for name in ("to", "cuda"):
            self._patch(torch.Tensor, name, make)
        self._batch_types = set()
        self._loop.watch_batch_types(self._batch_type)

    def _batch_type(self, cls):
        """A DataLoader gave a batch of type cls for the first time: a batch class with its
        own to/cuda (a dataclass of tensors, transformers' BatchEncoding) gets it timed."""
        if cls in self._batch_types or issubclass(cls, (torch.Tensor, tuple, list, dict)):
            return
        self._batch_types.add(cls)
        for name in ("to", "cuda"):
            owner = next((c for c in cls.__mro__ if callable(c.__dict__.get(name))), None)
            if owner is not None and (owner, name) not in self._batch_types:
                self._batch_types.add((owner, name))  # a base shared by two batch classes
                self._patch(owner, name, self._hook("copy"))

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
                loop.module_end(output)

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
        hook = self._patch(torch.nn.Module, "__call__", self._hook("call"))
        # torch.compile(module) asks the module's __call__ for its __code__ (a C callable
        # has none); the original's is the code that runs.
        hook.__code__ = hook.__wrapped__.__code__

    def _install_losses(self):
        for name in _LOSS_FUNCTIONS:
            if callable(_functional.__dict__.get(name)):
                self._patch(_functional, name, lambda original: _traceable(
                    original, self._loop.hook("loss", original)))

    def _install_backward(self):
        self._patch(torch.autograd, "backward", self._hook("backward"))

    def _install_optimizer(self):
        self._handles.append(_optim.register_optimizer_step_pre_hook(
            self._loop.hook("optimizer_pre")))
        self._handles.append(_optim.register_optimizer_step_post_hook(
            self._loop.hook("optimizer_post")))
        self._optimizer_hooked = True

    def _optimizer_steps_seen(self):
        """Will optimizer steps be seen (an optimizer exists and its steps are hooked)? If
        not, a training step ends with its backward."""
        return self._optimizer_hooked and _optimizer_exists()

    def _install_zero_grad(self):
        make = self._hook("zero_grad")
        self._patch(torch.optim.Optimizer, "zero_grad", make)
        self._patch(torch.nn.Module, "zero_grad", make)
        for cls in _optimizer_classes():  # optimizers that override zero_grad
            if "zero_grad" in cls.__dict__:
                self._patch(cls, "zero_grad", make)
        inst = self

        def __init_subclass__(cls, **kwargs):  # and those defined from now on
            super(torch.optim.Optimizer, cls).__init_subclass__(**kwargs)
            if inst._installed and "zero_grad" in cls.__dict__:
                inst._patch(cls, "zero_grad", make)
        self._patch(torch.optim.Optimizer, "__init_subclass__",
                    lambda original: classmethod(__init_subclass__))

    def _install_checkpoint(self):
        """torch.save timed as "checkpoint": a step that saved one is slow for that reason."""
        from stepwatch import _checkpoint
        self._patch(torch, "save", functools.partial(_checkpoint.timed, self.profiler,
                                                     loop=self._loop, target=(1, "f")))

    def _install_sync(self):
        """.item(), .cpu(), torch.cuda.synchronize(), ... on CUDA timed as "sync <call>"
        (where CUDA is): a step whose host waited for the GPU is slow for that reason."""
        from stepwatch import _sync
        _sync.install(self.profiler, self._patch)

    def _install_compile(self):
        timed = self._timed_function

        def make(original):
            def compile(*args, **kwargs):
                model = args[0] if args else kwargs.get("model")
                compiled = original(*args, **kwargs)
                if not self._installed:  # uninstrumented, under another tool's wrapper
                    return compiled
                if not self._compile_callbacks_in_place():
                    self._try("torch.compile compilations", self._install_compile_callbacks)
                # compile(**options) returns a decorator that calls torch.compile again
                return compiled if model is None else timed(compiled)
            return functools.update_wrapper(compile, original)
        self._patch(torch, "compile", make)

    def _install_compile_callbacks(self):
        """Time each compilation (a recompilation of a later step takes seconds, and would
        read as a stall of its forward) and note the steps it ran in."""
        if self._compile_callbacks_in_place():
            return
        from torch._dynamo import callback_handler
        action = self.profiler.action("compile")

        def start(_args):
            try:
                self._compiling = (_sw.now_ns(), self.profiler.step_index)
            except Exception:  # a callback must never fail the compilation
                self._compiling = None

        def end(_args):
            try:
                if self._compiling is not None:
                    self._compiled_one(action, *self._compiling, _sw.now_ns())
            except Exception:
                pass
            self._compiling = None
        callback_handler.register_start_callback(start)
        callback_handler.register_end_callback(end)
        self._compile_cb = (callback_handler, start, end)

    def _compile_callbacks_in_place(self):
        """Registered, and not cleared since (torch._dynamo.reset() clears every callback)."""
        return (self._compile_cb is not None
                and self._compile_cb[1] in self._compile_cb[0].start_callbacks)

    def _compiled_one(self, action, start_ns, step, end_ns):
        action.record(start_ns, end_ns)
        if step < 0:  # compiled outside a step: no step to keep out
            return
        self._compiled[step] = self._compiled.get(step, 0) + end_ns - start_ns
        value = ""
        for s, ns in self._compiled.items():  # the first ones that fit
            pair = f"{',' if value else ''}{s}:{ns}"
            if len(value) + len(pair) > _NOTE_MAX:
                break
            value += pair
        self.profiler.note(_COMPILED_NOTE, value)

    def _remove_compile_callbacks(self):
        if self._compile_cb is None:
            return
        handler, start, end = self._compile_cb
        self._compile_cb = None
        for remove, cb in ((handler.remove_start_callback, start),
                           (handler.remove_end_callback, end)):
            try:
                remove(cb)
            except ValueError:  # torch._dynamo.reset() cleared them
                pass

    def _timed_function(self, compiled):
        """A compiled function is timed as the forward; a compiled module is a module."""
        if isinstance(compiled, torch.nn.Module) or not callable(compiled):
            return compiled
        return _traceable(compiled, self._loop.hook("function", compiled))

    # ---- removing ------------------------------------------------------------------------

    def remove(self, quiet=False):
        """Close the open step and phases, then restore every hook and patch that is still
        ours (_patching.restore: one another tool wrapped since stays, ours under it only
        calls through)."""
        if not self._installed:
            return
        self._installed = False
        self._loop.close()
        if self.flops is not None:  # after the last step ended: its figures are final
            self.flops.close()
        self._inside = None
        self._remove_compile_callbacks()
        if self.collectives:
            from stepwatch import collectives
            collectives.uninstall()
        if self.phases:
            self._fit.end()
        for handle in self._handles:
            handle.remove()
        for _ref, handle in self._module_hooks.values():
            handle.remove()
        _patching.restore(self._patches, None if quiet else "stepwatch.torch: uninstrument()")
        self._handles.clear()
        self._module_hooks.clear()
        try:  # the run is over: its goodput (stepwatch.goodput) into the notes
            from stepwatch import goodput
            goodput.note(self.profiler)
        except Exception as exc:  # a figure less, never a failed uninstrument (nor a warning
            # that -W error would raise into the program)
            print(f"stepwatch.torch: no goodput ({type(exc).__name__}: {exc})", file=sys.stderr)
        from stepwatch import notebook  # the final summary, with the notes just written
        notebook.finish(self._notebook)
        self._notebook = None

    def _repr_html_(self):
        from stepwatch import notebook
        return notebook.repr_html(self.profiler)

    def mark(self, batch_size=0):
        """stepwatch.step() while instrumented: a step boundary by hand."""
        self._loop.mark(batch_size)

    def mark_end(self):
        self._loop.mark_end()

    def bound_steps(self, on=True):
        """A front end that knows the loop (stepwatch.transformers) ends the training steps
        with step_end() while on; the optimizer step then does not."""
        self._loop.bound_steps(on)

    def step_end(self):
        """The training step in progress ends now."""
        self._loop.step_end()

    @property
    def rule(self):
        """How steps are found now: none, dataloader, forward, backward, optimizer, manual."""
        return self._loop.rule if self._loop is not None else "none"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        uninstrument()
        return False


def instrument(profiler=None, *, phases=True, forward="patch", flops=None, live=None):
    """Time every step of plain PyTorch code from now on (into profiler, or the default one).

    flops=True counts one training step's FLOPs per input shape (stepwatch.flops): achieved
    TFLOP/s, MFU where the device's peak is known, tokens/s, in the profiler's notes at
    uninstrument(); a dict passes stepwatch.flops.watch's options (flops_per_batch=,
    length_fn=, peak_flops=).

    Returns the Instrumentation (also a context manager that uninstruments on exit). Calling
    it again while instrumented returns the active one."""
    global _active
    with _lock:
        if _active is not None:
            if profiler is not None and profiler is not _active.profiler:
                warnings.warn("stepwatch.torch: already instrumented with another profiler; "
                              "call uninstrument() first", RuntimeWarning, stacklevel=2)
            return _active
        _active = Instrumentation(profiler, phases=phases, forward=forward, flops=flops,
                                  live=live).install()
        return _active


def uninstrument(*, quiet=False):
    """Restore torch as it was before instrument(), but for attributes another tool wrapped
    since (they stay; one stderr line names them unless quiet: `stepwatch run` at the
    program's end, after e.g. Lightning wrapped torch.compile on import). A no-op when not
    instrumented."""
    global _active
    with _lock:
        inst, _active = _active, None
    if inst is not None:
        inst.remove(quiet)
    return inst


def instrumented():
    """The active Instrumentation, or None."""
    return _active
