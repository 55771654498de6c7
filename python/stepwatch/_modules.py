"""stepwatch._modules — per-module time and memory: Profiler(modules=True) installs it.

The per-call work is C (python/_stepwatch/_modules.c, which says how forward and backward
are timed); this file installs its two hooks (nn.Module.__call__ and
torch.autograd.backward), names modules by their path in the model (named_modules), and
counts parameter, gradient and optimizer-state bytes now and then. An out-of-memory error
the hooks see is named by stepwatch/_oom.py, as in runs without modules=.
"""
import gc
import threading
import weakref

import torch
import torch.optim.optimizer as _optim

from stepwatch import _patching
from stepwatch._stepwatch import Modules

__all__ = ["DEFAULT_EVERY", "ModuleTimes", "attach"]

# Every k-th step is sampled by default: docs/python.md gives the cost that sets it.
DEFAULT_EVERY = 10

_lock = threading.Lock()
_optimizers = weakref.WeakSet()  # optimizers that stepped (their state's bytes per parameter)
_optimizer_hook = None


def _note_optimizer(optimizer, args, kwargs):
    _optimizers.add(optimizer)


def _tensor_bytes(t):
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _owner(module):
    """The module holding module as a submodule (its _modules dict), or None. Once per
    model, when its first module called is not the model: gc walks the heap."""
    for holder in gc.get_referrers(module):
        if type(holder) is not dict:
            continue
        for ref in gc.get_referrers(holder):
            # the owner itself, or its __dict__ (once materialized, the dict refers)
            owners = gc.get_referrers(ref) if type(ref) is dict else [ref]
            for owner in owners:
                if isinstance(owner, torch.nn.Module) and owner.__dict__.get("_modules") is holder:
                    return owner
    return None


def _owner_chain_top(module):
    """The outermost module above module (module itself when none holds it)."""
    seen = {id(module)}
    while True:
        owner = _owner(module)
        if owner is None or id(owner) in seen:
            return module
        seen.add(id(owner))
        module = owner


class ModuleTimes:
    """The hooks of one Profiler(modules=...); close() restores torch."""

    def __init__(self, profiler, every, warmup_steps=0):
        global _optimizer_hook
        if every is True:
            every = DEFAULT_EVERY
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"modules must be True, False or a step interval >= 1, not {every!r}")
        self.every = every
        self._paths = {}  # id(module) -> path, for every module of the roots seen
        self._roots = []  # (root module, prefix)
        cuda = torch.cuda.is_available()
        # The first step, or the profiler's warm-up steps, are left out of the table.
        self.modules = Modules(profiler, every, torch.Tensor, self._resolve,
                               torch.cuda.memory_allocated if cuda else None, self._sizes,
                               warmup=max(1, warmup_steps))
        self._patches = []
        self._patch(torch.nn.Module, "__call__", "call")
        self._patch(torch.autograd, "backward", "backward")
        with _lock:
            if _optimizer_hook is None:
                _optimizer_hook = _optim.register_optimizer_step_post_hook(_note_optimizer)

    def _patch(self, owner, name, kind):
        original = owner.__dict__[name]
        hook = self.modules.hook(kind, original)
        hook.__wrapped__ = original
        if kind == "call":
            # torch.compile(module) asks the module's __call__ for its __code__.
            hook.__code__ = original.__code__
        setattr(owner, name, hook)
        self._patches.append((owner, name, original, hook))

    # ---- naming ----------------------------------------------------------------------------

    def _resolve(self, module, parent):
        """(path, class name) of module, first called from parent (None: outermost)."""
        path = self._paths.get(id(module))
        if path is None:
            path = self._new_root(module, parent)
        return path, type(module).__name__

    def _new_root(self, module, parent):
        """A module no known root holds: under its caller's path when its caller holds it as
        an attribute (made after the model), else a root of its own."""
        prefix = None
        if parent is not None and id(parent) in self._paths:
            base = self._paths[id(parent)]
            for name, child in parent.named_children():
                if child is module:
                    prefix = f"{base}.{name}" if base else name
        if prefix is None:
            owner = _owner_chain_top(module)
            if owner is not module and id(owner) not in self._paths:
                # called below its model (Lightning calls training_step, not the model):
                # the model names it
                self._name_tree(owner, "")
                self._roots.append((weakref.ref(owner), ""))
                if id(module) in self._paths:
                    return self._paths[id(module)]
        if prefix is None:
            if not self._roots:
                prefix = ""
            else:  # another model, or a loss module called at the top
                prefix = type(module).__name__
                n = 2
                while any(p == prefix for _m, p in self._roots):
                    prefix = f"{type(module).__name__}#{n}"
                    n += 1
            self._roots.append((weakref.ref(module), prefix))
        self._name_tree(module, prefix)
        self._paths[id(module)] = prefix
        return prefix

    def _name_tree(self, module, prefix):
        for name, sub in module.named_modules():
            full = f"{prefix}.{name}" if prefix and name else (name or prefix)
            self._paths.setdefault(id(sub), full)

    # ---- memory ----------------------------------------------------------------------------

    @staticmethod
    def _sizes(modules):
        """[(parameter, gradient, optimizer-state) bytes] per module, its submodules'
        included (a parameter shared by two submodules counted once)."""
        state_bytes = {}
        for opt in list(_optimizers):
            for param, st in getattr(opt, "state", {}).items():
                if isinstance(st, dict):
                    state_bytes[id(param)] = sum(_tensor_bytes(v) for v in st.values())
        out = []
        for module in modules:
            params = grads = optim = 0
            for p in module.parameters():
                params += _tensor_bytes(p)
                grads += _tensor_bytes(p.grad)
                optim += state_bytes.get(id(p), 0)
            out.append((params, grads, optim))
        return out

    # ---- closing ---------------------------------------------------------------------------

    def flush(self):
        self.modules.flush()

    def close(self):
        """A last flush, then torch as it was (a patch made over ours since stays, and ours
        under it only calls through)."""
        self.modules.close()
        _patching.restore(self._patches, "stepwatch: Profiler(modules=...) closed")


def attach(profiler, every, warmup_steps=0):
    """Profiler(modules=every): the hooks, installed now (True: every DEFAULT_EVERY-th step;
    the first max(1, warmup_steps) steps are left out)."""
    return ModuleTimes(profiler, every, warmup_steps)
