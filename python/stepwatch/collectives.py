"""stepwatch.collectives — every torch.distributed collective, timed where it runs.

``stepwatch.torch.instrument()`` (and so ``stepwatch run``) installs it when torch.distributed
is available; ``install(profiler, patch)`` is the call. It wraps, through the instrumentation's
own patch list (restored by uninstrument(), _patching's rule), the collectives and
point-to-point calls of ``torch.distributed`` (the distributed_c10d API: all_reduce,
all_gather, all_gather_single/_into_tensor, reduce_scatter, reduce_scatter_single/_tensor,
broadcast, reduce, all_to_all, all_to_all_single, barrier, send, recv, isend, irecv,
batch_isend_irecv, ...) and the functional collectives of
``torch.distributed._functional_collectives`` (tensor parallel's, and compiled code's). Each
call is the action ``collective:<op>``, recorded on the calling thread at its depth, so it
lands inside the forward, backward or optimizer step it runs in (docs/collectives.md):

  host time    the call itself: for a blocking collective on the CPU (gloo) the whole
               collective, the wait for the slowest rank included; for async_op=True work
               or a functional collective, the time to issue it.
  wait         the host time blocked in the Work's wait() (functional collectives:
               wait_tensor), as ``collective:<op>:wait``.
  bytes        the counter ``comm:<op>:bytes``: the bytes moved so far (nccl-tests' size:
               all_reduce, broadcast, reduce, send/recv the tensor; all_gather the output;
               reduce_scatter and all_to_all the input).
  bandwidth    per op and size class (powers of 2: ``1MiB`` holds 1 MiB up to 2 MiB), the
               counters ``comm:<op>:<class>:algbw`` and ``...:busbw`` in GB/s, one sample
               per call timed to its end on the host (CPU tensors; async work from its issue
               to the end of its wait): algbw = bytes / time, busbw = algbw x nccl-tests'
               factor for the op and the group's size n (all_reduce 2(n-1)/n; all_gather,
               reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send/recv 1).
  the group    the note ``collectives.groups``: each process group seen, its size, and its
               ranks when 8 or fewer.
  device       with device time on (Profiler(device_time=...)) and CUDA tensors: GPU events
               on the current stream, resolved later without a sync (docs/collectives.md,
               "On the GPU"): around a synchronous call (the stream waits for NCCL's: all of
               it exposed) and around an async work's wait() (the stall the stream takes);
               with TORCH_NCCL_ENABLE_TIMING=1, NCCL's own time of async work, read once
               is_completed() says so. They make each step's "device:<phase>/comm" and
               ".../comm_exposed". On the CPU (gloo), or without device time, nothing.

Not recorded twice: a collective called inside another one (batch_isend_irecv's isend, the
deprecated names calling the new ones, DDP's comm hook of stepwatch.distributed, which times
the gradient all-reduce as ``collective:allreduce`` itself), stepwatch's own collectives
(the cross-rank rounds), and code being traced by torch.compile (a wrapper there would break
the graph: it calls through untimed).
"""
import collections
import os
import sys
import threading

import torch
import torch.distributed as dist

from stepwatch._stepwatch import now_ns

__all__ = ["install", "C10D_OPS", "FUNCTIONAL_OPS", "size_class", "bus_factor", "quiet",
           "works_of", "nccl_works", "times_device"]

# op: (how its bytes are read from the call's arguments, bus bandwidth kind). The byte rules
# name the argument (position, keyword) holding the tensor (or list of tensors) whose size is
# nccl-tests' "size" of the op.
_ALL_REDUCE, _GATHER, _ONE, _NONE = "all_reduce", "gather", "one", "none"
C10D_OPS = {
    "all_reduce": ((0, "tensor"), _ALL_REDUCE),
    "all_reduce_coalesced": ((0, "tensors"), _ALL_REDUCE),
    "all_gather": ((0, "tensor_list"), _GATHER),
    "all_gather_single": ((0, "output_tensor"), _GATHER),
    "all_gather_into_tensor": ((0, "output_tensor"), _GATHER),
    "reduce_scatter": ((1, "input_list"), _GATHER),
    "reduce_scatter_single": ((1, "input"), _GATHER),
    "reduce_scatter_tensor": ((1, "input"), _GATHER),
    "all_to_all": ((1, "input_tensor_list"), _GATHER),
    "all_to_all_single": ((1, "input"), _GATHER),
    "broadcast": ((0, "tensor"), _ONE),
    "reduce": ((0, "tensor"), _ONE),
    "barrier": (None, _NONE),
    "send": ((0, "tensor"), _ONE),
    "recv": ((0, "tensor"), _ONE),
    "isend": ((0, "tensor"), _ONE),
    "irecv": ((0, "tensor"), _ONE),
    "batch_isend_irecv": (None, _ONE),  # the P2POps' tensors
}
# The functional collectives take their input first ("self") and return a new tensor; an
# all-gather's output is n times its input.
FUNCTIONAL_OPS = {
    "all_reduce": ((0, "self"), _ALL_REDUCE),
    "all_reduce_coalesced": ((0, "self"), _ALL_REDUCE),
    "all_gather_single": ((0, "self"), _GATHER),
    "all_gather_tensor": ((0, "self"), _GATHER),
    "all_gather_into_tensor_coalesced": ((0, "self"), _GATHER),
    "reduce_scatter_single": ((0, "self"), _GATHER),
    "reduce_scatter_tensor": ((0, "self"), _GATHER),
    "reduce_scatter_tensor_coalesced": ((0, "self"), _GATHER),
    "all_to_all_single": ((0, "self"), _GATHER),
    "broadcast": ((0, "self"), _ONE),
}
_FUNCTIONAL_GATHERS = ("all_gather_single", "all_gather_tensor", "all_gather_into_tensor_coalesced")
_MAX_PENDING = 4096  # async works not waited for yet, kept for their wait's figures
_MAX_TIMED = 1024    # CUDA works whose NCCL time is still to read (TORCH_NCCL_ENABLE_TIMING)
_SMALL_GROUP = 8     # ranks listed in the note up to this size


def bus_factor(kind, n):
    """nccl-tests' busbw / algbw for an op of kind on a group of n ranks."""
    if n <= 1 or kind == _NONE:
        return 1.0
    if kind == _ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if kind == _GATHER:
        return (n - 1) / n
    return 1.0


def size_class(nbytes):
    """The power-of-2 size class of nbytes, named by its lower bound: 1000 -> '512B',
    1 << 20 -> '1MiB'."""
    k = max(nbytes, 1).bit_length() - 1
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if k >= shift:
            return f"{1 << (k - shift)}{unit}"
    return f"{1 << k}B"


def _on_cpu(x):
    """Whether x (a tensor or a list of them) is on the CPU: a call on its tensors ends
    before it returns (gloo), so its host time is the collective's; a CUDA one returns once
    queued."""
    if isinstance(x, (list, tuple)):
        x = x[0] if x else None
    return not isinstance(x, torch.Tensor) or x.is_cpu


def _nbytes(x):
    if isinstance(x, torch.Tensor):
        return x.nbytes
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class _Local(threading.local):
    inside = False  # a wrapped call is running on this thread: inner ones are its own
    works = None    # a list: what the calls made untimed return goes there (works_of)


_local = _Local()


class quiet:
    """``with collectives.quiet():`` the collectives inside are not recorded (DDP's comm hook
    times its all-reduce itself)."""
    __slots__ = ("before",)

    def __enter__(self):
        self.before, _local.inside = _local.inside, True
        return self

    def __exit__(self, *exc):
        _local.inside = self.before
        return False


class works_of:
    """``with collectives.works_of(on) as works:`` with on true, the works (or tensors) the
    untimed collectives inside return go into the list works (DDP's comm hook: their NCCL
    time, nccl_works); with on false, works is None and nothing is kept."""
    __slots__ = ("on", "before")

    def __init__(self, on):
        self.on = bool(on)

    def __enter__(self):
        self.before = _local.works
        if self.on:
            _local.works = []
        return _local.works if self.on else None

    def __exit__(self, *exc):
        _local.works = self.before
        return False


def nccl_works(works):
    """Works of CUDA collectives made untimed (works_of): with device time on and
    TORCH_NCCL_ENABLE_TIMING=1, NCCL's own time of each, read once it completed."""
    rec = _recorder
    if rec is None or rec.device is None or not works:
        return
    for work in works:
        rec.note_nccl_work(work)
    rec.read_nccl_times()


def times_device(profiler):
    """Whether profiler times the device (Profiler(device_time=...)), asked once."""
    info = getattr(profiler, "device_time_info", None)
    return info is not None and info() is not None


class _Op:
    """One op's actions and counters in one profiler; its size classes made as they come."""
    __slots__ = ("rec", "name", "arg", "kind", "action", "wait", "bytes_name", "total",
                 "classes")

    def __init__(self, rec, name, arg, kind):
        self.rec, self.name, self.arg, self.kind = rec, name, arg, kind
        self.action = rec.profiler.action(f"collective:{name}")
        self.wait = rec.profiler.action(f"collective:{name}:wait")
        self.bytes_name = f"comm:{name}:bytes"
        self.total = 0
        self.classes = {}  # bit length of the size -> (algbw counter, busbw counter)

    def bandwidth(self, nbytes, n, ns):
        if nbytes <= 0 or ns <= 0:
            return
        k = nbytes.bit_length()
        names = self.classes.get(k)
        if names is None:
            label = f"comm:{self.name}:{size_class(nbytes)}"
            names = self.classes[k] = (label + ":algbw", label + ":busbw")
        algbw = nbytes / ns  # bytes per ns = GB/s
        counter = self.rec.profiler.counter
        counter(names[0], algbw)
        counter(names[1], algbw * bus_factor(self.kind, n))


class _Recorder:
    """What the wrappers record into: one profiler's ops, the async works pending a wait."""

    def __init__(self, profiler):
        self.profiler = profiler
        self.ops = {}
        self.pending = {}   # id(work or tensor) -> (op, bytes, n, issue start)
        self.groups = {}    # id(group) -> its note text
        self.note_failed = False
        # On the GPU: the profiler when it times the device (its device_comm_* calls), else
        # None, which every device path checks first (the CPU pays that one test).
        self.device = profiler if times_device(profiler) else None
        self.cuda_pending = {}  # id(a CUDA work or tensor) -> None: its wait() is bracketed
        self.nccl_timing = os.environ.get("TORCH_NCCL_ENABLE_TIMING", "0") not in ("", "0")
        self.timed_works = collections.deque()  # CUDA works whose NCCL time is to read

    def op(self, name, arg, kind):
        op = self.ops.get(name)
        if op is None:
            op = self.ops[name] = _Op(self, name, arg, kind)
        return op

    def group_size(self, group):
        """n of a c10d group (None: the default one, read once: dist.group.WORLD is a
        property of Python code), noting a group not seen before."""
        seen = self.groups.get(id(group))
        if seen is not None:
            return seen[0]
        self._note_group(id(group), dist.group.WORLD if group is None else group)
        return self.groups[id(group)][0]

    def _note_group(self, key, group):
        try:
            n = group.size()
            ranks = dist.get_process_group_ranks(group) if n <= _SMALL_GROUP else None
        except Exception:  # not a process group (a functional collective's other forms)
            n, ranks = _functional_group_size(group), None
        text = f"{n} ranks" + (f" [{','.join(map(str, ranks))}]" if ranks else "")
        self.groups[key] = (n, text)
        if not self.note_failed:
            try:
                self.profiler.note("collectives.groups",
                                   "; ".join(sorted({t for _n, t in self.groups.values()})))
            except Exception:  # a closed profiler: the figures go nowhere anyway
                self.note_failed = True

    def record(self, op, nbytes, n, t0, t1, result, cpu):
        op.action.record(t0, t1)
        if nbytes:
            op.total += nbytes
            self.profiler.counter(op.bytes_name, op.total)
        if not cpu:  # queued on a GPU stream: the host saw the launch, not the transfer
            if self.device is not None and result is not None:
                self._cuda_work(result)
            return
        if result is None:  # done when the call returned: timed to its end
            op.bandwidth(nbytes, n, t1 - t0)
        elif nbytes:
            pending = self.pending
            if len(pending) >= _MAX_PENDING:  # works never waited for (get_future, dropped)
                pending.clear()
            if isinstance(result, list):  # batch_isend_irecv: its last work ends the batch
                result = result[-1] if result else None
            key = id(getattr(result, "elem", result))  # an AsyncCollectiveTensor's tensor
            pending[key] = (op, nbytes, n, t0)

    def _cuda_work(self, result):
        """An async CUDA work (or a functional collective's tensor): its wait() is to be
        bracketed; with NCCL's timing on, its time read once it completed."""
        if isinstance(result, list):
            result = result[-1] if result else None
        if len(self.cuda_pending) >= _MAX_PENDING:
            self.cuda_pending.clear()
        self.cuda_pending[id(getattr(result, "elem", result))] = None
        self.note_nccl_work(result)
        self.read_nccl_times()

    def note_nccl_work(self, work):
        if self.nccl_timing and hasattr(work, "_get_duration"):
            if len(self.timed_works) >= _MAX_TIMED:
                self.timed_works.popleft()
            self.timed_works.append(work)

    def read_nccl_times(self):
        """NCCL's own time of the works completed so far, oldest first, into the step open
        now (never waits: is_completed() queries the work's end event)."""
        works = self.timed_works
        while works:
            work = works[0]
            try:
                if not work.is_completed():
                    return
                ns = int(work._get_duration() * 1e6)
            except Exception:  # no timing after all (another backend): stop asking
                works.clear()
                self.nccl_timing = False
                return
            works.popleft()
            self.device.device_comm_ns(ns)

    def device_wait(self, key, original, args, kwargs):
        """wait() of a CUDA work, bracketed on the current stream: the stall it puts there."""
        self.cuda_pending.pop(key, None)
        token = self.device.device_comm_begin()
        try:
            return original(*args, **kwargs)
        finally:
            self.device.device_comm_end(token)

    def waited(self, key, t0, t1, default_op):
        entry = self.pending.pop(key, None)
        op = entry[0] if entry is not None else default_op
        if op is None:
            return
        op.wait.record(t0, t1)
        if entry is not None:
            op.bandwidth(entry[1], entry[2], t1 - entry[3])


_recorder = None  # the _Recorder of the installed instrumentation, None when none


def _functional_group_size(group):
    try:
        if isinstance(group, dist.ProcessGroup):
            return group.size()
        if isinstance(group, (list, tuple)) and group:
            first = group[0]
            if isinstance(first, int):
                return len(group)
            if isinstance(first, (list, tuple)):
                return len(first)
            return first.size(group[1])  # (DeviceMesh, dim)
        if isinstance(group, str):
            return dist.distributed_c10d._resolve_process_group(group).size()
        return group.size()  # a DeviceMesh
    except Exception:
        return dist.get_world_size() if dist.is_initialized() else 1


_ours_by_module = {}  # id(a module's globals) -> whether the module is stepwatch's


def _ours(frame):
    """Whether a call comes from stepwatch itself (its cross-rank rounds). A module's
    globals live as long as the module: their id is a key the check reads in one lookup."""
    g = frame.f_globals
    ours = _ours_by_module.get(id(g))
    if ours is None:
        if len(_ours_by_module) >= 1024:  # globals made per call (exec): forget, stay small
            _ours_by_module.clear()
        ours = _ours_by_module[id(g)] = g.get("__name__", "").startswith("stepwatch.")
    return ours


def _arg(args, kwargs, where):
    pos, name = where
    return args[pos] if len(args) > pos else kwargs.get(name)


def _timed(original, args, kwargs, compiling, on_device=None):
    """Call a wrapped collective: (recorder, result, start, end) when the call is to be
    recorded, else (None, result, 0, 0) -- no recorder, inside another timed call, traced by
    torch.compile, or made by stepwatch itself (its rounds, and the calls they make).
    on_device(args, kwargs): whether the call is a synchronous one on CUDA tensors, asked
    only with device time on: then it is bracketed by events on the current stream."""
    rec = _recorder
    if rec is None or _local.inside or compiling():
        result = original(*args, **kwargs)
        if _local.works is not None and result is not None:
            _local.works.append(result)
        return None, result, 0, 0
    if _ours(sys._getframe(2)):  # the wrapper's caller
        with quiet():
            return None, original(*args, **kwargs), 0, 0
    device = rec.device
    token = device.device_comm_begin() if device is not None and on_device and \
        on_device(args, kwargs) else 0
    _local.inside = True
    t0 = now_ns()
    try:
        result = original(*args, **kwargs)
    finally:
        t1 = now_ns()
        _local.inside = False
        if token:
            device.device_comm_end(token)
    return rec, result, t0, t1


def _sync_on_cuda(name, where):
    """on_device for c10d op name: not async_op, on CUDA tensors (send and recv always wait;
    isend, irecv and batch_isend_irecv never do)."""
    if where is None or name in ("isend", "irecv", "batch_isend_irecv"):
        return None
    async_pos = _POSITIONAL_GROUP.get(name, 98) + 1 if name not in ("send", "recv") else None

    def on_device(args, kwargs):
        if async_pos is not None and (kwargs.get("async_op") or
                                      (len(args) > async_pos and args[async_pos])):
            return False
        return not _on_cpu(_arg(args, kwargs, where))
    return on_device


def _wrap_c10d(name, original):
    where, kind = C10D_OPS[name]
    compiling = torch.compiler.is_compiling
    on_device = _sync_on_cuda(name, where)

    def collective(*args, **kwargs):
        rec, result, t0, t1 = _timed(original, args, kwargs, compiling, on_device)
        if rec is None:
            return result
        try:
            op = rec.op(name, where, kind)
            if name == "batch_isend_irecv":  # the P2POps' tensors, the first one's group
                ops = args[0] if args else kwargs.get("p2p_op_list", ())
                nbytes = sum(_nbytes(p.tensor) for p in ops)
                group = ops[0].group if ops else None
                cpu = _on_cpu([p.tensor for p in ops[:1]])
            else:
                tensors = _arg(args, kwargs, where) if where is not None else None
                nbytes, cpu = _nbytes(tensors), _on_cpu(tensors)
                group = kwargs.get("group")
                if group is None and len(args) > _POSITIONAL_GROUP.get(name, 99):
                    group = args[_POSITIONAL_GROUP[name]]
            n = rec.group_size(group)
            rec.record(op, nbytes, n, t0, t1, result, cpu)
        except Exception:  # never fail the user's collective for a figure
            pass
        return result
    return collective


# Where a c10d call's group is when passed by position.
_POSITIONAL_GROUP = {
    "all_reduce": 2, "all_reduce_coalesced": 2, "all_gather": 2, "all_gather_single": 2,
    "all_gather_into_tensor": 2, "reduce_scatter": 3, "reduce_scatter_single": 3,
    "reduce_scatter_tensor": 3, "all_to_all": 2, "all_to_all_single": 4, "broadcast": 2,
    "reduce": 3, "barrier": 0, "send": 2, "recv": 2, "isend": 2, "irecv": 2}


# Where a functional collective's group is when passed by position.
_FUNCTIONAL_GROUP = {
    "all_reduce": 2, "all_reduce_coalesced": 2, "all_gather_single": 2, "all_gather_tensor": 2,
    "all_gather_into_tensor_coalesced": 1, "reduce_scatter_single": 3,
    "reduce_scatter_tensor": 3, "reduce_scatter_tensor_coalesced": 3, "all_to_all_single": 3,
    "broadcast": 2}


def _wrap_functional(name, original):
    where, kind = FUNCTIONAL_OPS[name]
    compiling = torch.compiler.is_compiling
    gathers = name in _FUNCTIONAL_GATHERS
    group_pos = _FUNCTIONAL_GROUP[name]

    def functional(*args, **kwargs):
        rec, result, t0, t1 = _timed(original, args, kwargs, compiling)
        if rec is None:
            return result
        try:
            group = kwargs.get("group", args[group_pos] if len(args) > group_pos else None)
            key = id(group)
            if key not in rec.groups:
                rec._note_group(key, group)
            n = rec.groups[key][0]
            tensors = _arg(args, kwargs, where)
            nbytes = _nbytes(tensors) * (n if gathers else 1)
            op = rec.op(name, where, kind)
            pending = result if isinstance(result, (torch.Tensor, list)) else None
            rec.record(op, nbytes, n, t0, t1, pending, _on_cpu(tensors))
        except Exception:
            pass
        return result
    return functional


def _wrap_work_wait(original):
    def wait(self, *args, **kwargs):
        rec = _recorder
        if rec is None or _local.inside:
            return original(self, *args, **kwargs)
        t0 = now_ns()
        try:
            if rec.device is not None and id(self) in rec.cuda_pending:
                return rec.device_wait(id(self), original, (self,) + args, kwargs)
            return original(self, *args, **kwargs)
        finally:
            t1 = now_ns()
            try:
                rec.waited(id(self), t0, t1, None)
            except Exception:
                pass
    return wait


def _wrap_wait_tensor(original):
    def wait_tensor(tensor, *args, **kwargs):
        rec = _recorder
        if rec is None or _local.inside or torch.compiler.is_compiling():
            return original(tensor, *args, **kwargs)
        key = id(tensor)
        if rec.device is not None and key in rec.cuda_pending:
            return rec.device_wait(key, original, (tensor,) + args, kwargs)
        if key not in rec.pending:  # a tensor no timed collective made
            return original(tensor, *args, **kwargs)
        t0 = now_ns()
        try:
            return original(tensor, *args, **kwargs)
        finally:
            t1 = now_ns()
            try:
                rec.waited(key, t0, t1, None)
            except Exception:
                pass
    return wait_tensor


def install(profiler, patch):
    """Wrap torch.distributed's collectives to record into profiler from now on; patch(owner,
    name, make) is the instrumentation's (it keeps what to restore). Returns the names
    wrapped. A torch without torch.distributed: nothing (an empty list)."""
    global _recorder
    if not dist.is_available():
        return []
    c10d = dist.distributed_c10d
    done = []
    for name in C10D_OPS:
        original = c10d.__dict__.get(name)
        if original is None:
            continue
        wrapper = patch(c10d, name, lambda orig, name=name: _wrap_c10d(name, orig))
        if dist.__dict__.get(name) is original:  # torch.distributed re-exports it
            patch(dist, name, lambda _orig, w=wrapper: w)
        done.append(name)
    patch(c10d.Work, "wait", _wrap_work_wait)
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:
        funcol = None
    if funcol is not None:
        for name in FUNCTIONAL_OPS:
            if name in funcol.__dict__:
                patch(funcol, name, lambda orig, name=name: _wrap_functional(name, orig))
                done.append("functional." + name)
        if "wait_tensor" in funcol.__dict__:
            patch(funcol, "wait_tensor", _wrap_wait_tensor)
    _recorder = _Recorder(profiler)
    return done


def uninstall():
    """Stop recording (the instrumentation restores the attributes)."""
    global _recorder
    _recorder = None
