"""stepwatch.collectives — every torch.distributed collective, timed where it runs.

``stepwatch.torch.instrument()`` (and so ``stepwatch run``) installs it when torch.distributed
is available; ``install(profiler, patch)`` is the call. It wraps, through the instrumentation's
own patch list (restored by uninstrument(), _patching's rule), the collectives and
point-to-point calls of ``torch.distributed`` (the distributed_c10d API: all_reduce,
all_gather, all_gather_single/_into_tensor, reduce_scatter, reduce_scatter_single/_tensor,
broadcast, reduce, gather, scatter, all_to_all, all_to_all_single, barrier,
monitored_barrier, send, recv, isend, irecv, batch_isend_irecv, ...) and the functional
collectives of ``torch.distributed._functional_collectives`` (tensor parallel's, and
compiled code's). Each call is the action ``collective:<op>``, recorded on the calling
thread at its depth, so it lands inside the forward, backward or optimizer step it runs in
(docs/collectives.md):

  host time    the call itself: for a blocking collective on the CPU (gloo) the whole
               collective, the wait for the slowest rank included; for async_op=True work
               or a functional collective, the time to issue it.
  wait         the host time blocked in the Work's wait() (functional collectives:
               wait_tensor), as ``collective:<op>:wait``.
  bytes        the counter ``comm:<op>:bytes``: the bytes moved so far (nccl-tests' size:
               all_reduce, broadcast, reduce, send/recv the tensor; all_gather the output;
               reduce_scatter and all_to_all the input; gather and scatter n times a
               rank's tensor).
  bandwidth    per op and size class (powers of 2: ``1MiB`` holds 1 MiB up to 2 MiB), the
               counters ``comm:<op>:<class>:algbw`` and ``...:busbw`` in GB/s, one sample
               per call timed to its end on the host (CPU tensors; async work from its issue
               to the end of its wait): algbw = bytes / time, busbw = algbw x nccl-tests'
               factor for the op and the group's size n (all_reduce 2(n-1)/n; all_gather,
               reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast, reduce,
               send/recv 1).
  the group    the note ``collectives.groups``: each process group seen, its size, and its
               ranks when 8 or fewer.
  device       with device time on (Profiler(device_time=...)) and CUDA tensors: GPU events
               on the current stream, resolved later without a sync (docs/collectives.md,
               "On the GPU"): around a synchronous call (the stream waits for NCCL's: all of
               it exposed) and around an async work's wait() (the stall the stream takes);
               with TORCH_NCCL_ENABLE_TIMING=1, NCCL's own time of async work, read once
               is_completed() says so. They make each step's "device:<phase>/comm" and
               ".../comm_exposed". On the CPU (gloo), or without device time, nothing: the
               wrappers are the C path's alone (_Device below is made only with device time).

The per-call path is C (``stepwatch._stepwatch.Collectives``, python/_stepwatch/_collectives.c):
each wrapped function here is a three-line Python function (torch.compile traces through it:
it calls the original while compiling) that hands the call to it; Work.wait, which compiled
code does not trace, is the C side's own callable (Collectives.waiter: no Python frame per
wait). Python keeps what is rare (a process group not seen before, the note) and the tables
below.

Not recorded twice: a collective called inside another one (batch_isend_irecv's isend, the
deprecated names calling the new ones, DDP's comm hook of stepwatch.distributed, which times
the gradient all-reduce as ``collective:allreduce`` itself), stepwatch's own collectives
(the cross-rank rounds of stepwatch.distributed run under quiet()), and code being traced by
torch.compile (a wrapper there would break the graph: it calls through untimed).
"""
import collections
import functools
import os
import threading

import torch
import torch.distributed as dist

from stepwatch._stepwatch import Collectives, collectives_quiet

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
    "gather": ((0, "tensor"), _GATHER),   # one rank's tensor: n times it is the size
    "scatter": ((0, "tensor"), _GATHER),
    "barrier": (None, _NONE),
    "monitored_barrier": (None, _NONE),
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
# The ops whose byte rule reads one rank's tensor, of which the size is n times.
_TIMES_GROUP = {"c10d": ("gather", "scatter"),
                "functional": ("all_gather_single", "all_gather_tensor",
                               "all_gather_into_tensor_coalesced")}
_SMALL_GROUP = 8     # ranks listed in the note up to this size
_MAX_PENDING = 4096  # CUDA works not waited for yet, whose wait() is to be bracketed
_MAX_TIMED = 1024    # CUDA works whose NCCL time is still to read (TORCH_NCCL_ENABLE_TIMING)


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


# The C side's kinds (_collectives.c) and byte rules: where a wrapped function's tensors are.
_KINDS = {_NONE: 0, _ALL_REDUCE: 1, _GATHER: 2, _ONE: 3}
_BYTES_ARG, _BYTES_NONE, _BYTES_P2P_LIST = 0, 1, 2


class quiet:
    """``with collectives.quiet():`` the collectives inside are not recorded on this thread
    (DDP's comm hook times its all-reduce itself; stepwatch.distributed's own rounds are not
    the program's)."""
    __slots__ = ("before",)

    def __enter__(self):
        self.before = collectives_quiet(True)
        return self

    def __exit__(self, *exc):
        collectives_quiet(self.before)
        return False


class _Local(threading.local):
    works = None  # a list: what the collectives return goes there (works_of)


_local = _Local()


class works_of:
    """``with collectives.works_of(on) as works:`` with on true, the works (or tensors) the
    collectives inside return go into the list works (DDP's comm hook: their NCCL time,
    nccl_works); with on false, works is None and nothing is kept."""
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
    """Works of CUDA collectives (works_of): with device time on and
    TORCH_NCCL_ENABLE_TIMING=1, NCCL's own time of each, read once it completed."""
    device = _recorder.device if _recorder is not None else None
    if device is None or not works:
        return
    for work in works:
        device.note_nccl_work(work)
    device.read_nccl_times()


def times_device(profiler):
    """Whether profiler times the device (Profiler(device_time=...)), asked once."""
    info = getattr(profiler, "device_time_info", None)
    return info is not None and info() is not None


def _on_cpu(x):
    """Whether x (a tensor or a list of them) is on the CPU: a call on its tensors ends
    before it returns (gloo); a CUDA one returns once queued."""
    if isinstance(x, (list, tuple)):
        x = x[0] if x else None
    return not isinstance(x, torch.Tensor) or x.is_cpu


def _arg(args, kwargs, where):
    pos, name = where
    return args[pos] if len(args) > pos else kwargs.get(name)


def _sync_on_cuda(name, where):
    """Whether a call of c10d op name blocks the current stream on NCCL's (not async_op, on
    CUDA tensors; send and recv always do, isend, irecv and batch_isend_irecv never): a
    function of (args, kwargs), or None for an op that never does."""
    if where is None or name in ("isend", "irecv", "batch_isend_irecv"):
        return None
    async_pos = _POSITIONAL_GROUP.get(name, 98) + 1 if name not in ("send", "recv") else None

    def on_device(args, kwargs):
        if async_pos is not None and (kwargs.get("async_op") or
                                      (len(args) > async_pos and args[async_pos])):
            return False
        return not _on_cpu(_arg(args, kwargs, where))
    return on_device


class _Device:
    """With device time on: the events the wrappers add around the C path's calls on CUDA
    tensors (the profiler's device_comm_begin/end, device_comm_ns), and the CUDA works whose
    wait() is bracketed or whose NCCL time is still to read."""

    def __init__(self, profiler):
        self.profiler = profiler
        self.pending = {}  # id(a CUDA work or tensor) -> None: its wait() is bracketed
        self.nccl_timing = os.environ.get("TORCH_NCCL_ENABLE_TIMING", "0") not in ("", "0")
        self.timed_works = collections.deque()  # CUDA works whose NCCL time is to read

    def begin(self, on_device, args, kwargs):
        """Before a wrapped call: a synchronous one on CUDA tensors is bracketed (the stream
        waits for NCCL's: exposed in full): its token, else 0."""
        if on_device is None or not on_device(args, kwargs):
            return 0
        return self.profiler.device_comm_begin()

    def end(self, token, result, where, args, kwargs):
        """After it: the bracket closed, or an async CUDA call's work kept for its wait()."""
        if token:
            self.profiler.device_comm_end(token)
        elif result is not None:
            if _local.works is not None:
                _local.works.append(result)
            elif where is not None and not _on_cpu(_arg(args, kwargs, where)):
                self.cuda_work(result)

    def cuda_work(self, result):
        """An async CUDA work (or a functional collective's tensor): its wait() is to be
        bracketed; with NCCL's timing on, its time read once it completed."""
        if isinstance(result, list):  # batch_isend_irecv: its last work ends the batch
            result = result[-1] if result else None
        if len(self.pending) >= _MAX_PENDING:  # works never waited for (get_future, dropped)
            self.pending.clear()
        self.pending[id(getattr(result, "elem", result))] = None
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
            self.profiler.device_comm_ns(ns)

    def wait_begin(self, waited):
        """Before wait() (or wait_tensor): a CUDA work's is bracketed on the current stream,
        the stall it puts there: its token, else 0."""
        if id(waited) not in self.pending:
            return 0
        del self.pending[id(waited)]
        return self.profiler.device_comm_begin()


class _Recorder:
    """What the wrappers record into: the C per-call path (``calls``, _collectives.c: the
    span, bytes, bandwidth and pending waits) and, here, what is rare: a group not seen
    before, its size and the note ``collectives.groups``."""

    def __init__(self, profiler):
        self.profiler = profiler
        self.groups = {}    # id(group) -> (n, its note text)
        self.note_failed = False
        self.calls = Collectives(profiler, self.group_size, torch.Tensor)
        # On the GPU: made only when the profiler times the device; the wrappers check it
        # once, when made (the CPU path is the C call alone).
        self.device = _Device(profiler) if times_device(profiler) else None

    def group_size(self, group, functional):
        """n of a group the C side has not seen (a c10d None: the default group, read here:
        dist.group.WORLD is a property of Python code), noting it."""
        if not functional and group is None:
            group = dist.group.WORLD
        key = id(group)
        if key not in self.groups:
            self._note_group(key, group)
        return self.groups[key][0]

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

    def site(self, name, table, group_pos, functional):
        """The C side's index of a wrapped function of op name: its byte rule and group."""
        where, kind = table[name]
        op = self.calls.op(name, _KINDS[kind])
        if name == "batch_isend_irecv" and not functional:
            rule, pos, kw = _BYTES_P2P_LIST, 0, None
        elif where is None:
            rule, pos, kw = _BYTES_NONE, -1, None
        else:
            rule, (pos, kw) = _BYTES_ARG, where
        gathers = name in _TIMES_GROUP["functional" if functional else "c10d"]
        return self.calls.site(op, rule, pos, kw, group_pos, functional, gathers)


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


# Where a c10d call's group is when passed by position (-1: by keyword only).
_POSITIONAL_GROUP = {
    "all_reduce": 2, "all_reduce_coalesced": 2, "all_gather": 2, "all_gather_single": 2,
    "all_gather_into_tensor": 2, "reduce_scatter": 3, "reduce_scatter_single": 3,
    "reduce_scatter_tensor": 3, "all_to_all": 2, "all_to_all_single": 4, "broadcast": 2,
    "reduce": 3, "gather": 3, "scatter": 3, "barrier": 0, "monitored_barrier": 0, "send": 2,
    "recv": 2, "isend": 2, "irecv": 2, "batch_isend_irecv": -1}


# Where a functional collective's group is when passed by position.
_FUNCTIONAL_GROUP = {
    "all_reduce": 2, "all_reduce_coalesced": 2, "all_gather_single": 2, "all_gather_tensor": 2,
    "all_gather_into_tensor_coalesced": 1, "reduce_scatter_single": 3,
    "reduce_scatter_tensor": 3, "reduce_scatter_tensor_coalesced": 3, "all_to_all_single": 3,
    "broadcast": 2}


def _wrap(rec, site, original, where, on_device):
    """The Python function torch sees in the original's place: code being traced by
    torch.compile calls through (the C call would break its graph; dynamo also maps the
    original c10d functions to functional ones by identity); the rest is the C side's
    (timed unless inside another timed call or quiet()), with the device's events around it
    when the profiler times the device. It carries the original's name and signature
    (__wrapped__): dynamo, which maps torch.distributed's functions as the module has them
    (this wrapper, once installed) to functional ones, reads their defaults from it."""
    compiling = torch.compiler.is_compiling
    call = rec.calls.call
    device = rec.device

    if device is not None:  # the C call made from here: its caller is the program's
        def on_gpu(*args, **kwargs):
            if compiling():
                return original(*args, **kwargs)
            token, result = device.begin(on_device, args, kwargs), None
            try:
                result = call(site, original, args, kwargs)
                return result
            finally:
                device.end(token, result, where, args, kwargs)
        return functools.update_wrapper(on_gpu, original)

    def collective(*args, **kwargs):
        if compiling():
            return original(*args, **kwargs)
        return call(site, original, args, kwargs)
    return functools.update_wrapper(collective, original)


def _wrap_wait(rec, original, check_compiling):
    """Work.wait (or the functional wait_tensor): timed when a timed call left its work
    pending, by the C side; a CUDA work's bracketed on the device (_Device.wait). Work.wait
    is C alone (Collectives.waiter) unless the device is timed; wait_tensor, which compiled
    code traces, stays a Python function that calls through while compiling."""
    compiling = torch.compiler.is_compiling
    wait = rec.calls.wait
    device = rec.device
    if device is None and not check_compiling:
        return rec.calls.waiter(original)
    if device is not None:
        wait = functools.partial(_device_wait, device, wait)

    if check_compiling:
        def wait_tensor(tensor, *args, **kwargs):
            if compiling():
                return original(tensor, *args, **kwargs)
            return wait(original, tensor, args, kwargs)
        return wait_tensor

    def work_wait(self, *args, **kwargs):
        return wait(original, self, args, kwargs)
    return work_wait


def _device_wait(device, wait, original, waited, args, kwargs):
    token = device.wait_begin(waited)
    try:
        return wait(original, waited, args, kwargs)
    finally:
        if token:
            device.profiler.device_comm_end(token)


def install(profiler, patch):
    """Wrap torch.distributed's collectives to record into profiler from now on; patch(owner,
    name, make) is the instrumentation's (it keeps what to restore). Returns the names
    wrapped. A torch without torch.distributed: nothing (an empty list)."""
    global _recorder
    if not dist.is_available():
        return []
    rec = _Recorder(profiler)
    c10d = dist.distributed_c10d
    done = []
    for name in C10D_OPS:
        original = c10d.__dict__.get(name)
        if original is None:
            continue
        site = rec.site(name, C10D_OPS, _POSITIONAL_GROUP[name], False)
        where = C10D_OPS[name][0]
        sync = _sync_on_cuda(name, where)
        wrapper = patch(c10d, name, lambda orig, site=site, where=where, sync=sync:
                        _wrap(rec, site, orig, where, sync))
        if dist.__dict__.get(name) is original:  # torch.distributed re-exports it
            patch(dist, name, lambda _orig, w=wrapper: w)
        done.append(name)
    patch(c10d.Work, "wait", lambda orig: _wrap_wait(rec, orig, False))
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:
        funcol = None
    if funcol is not None:
        for name in FUNCTIONAL_OPS:
            if name in funcol.__dict__:
                site = rec.site(name, FUNCTIONAL_OPS, _FUNCTIONAL_GROUP[name], True)
                where = FUNCTIONAL_OPS[name][0]  # never blocks the stream: its wait may
                patch(funcol, name, lambda orig, site=site, where=where:
                      _wrap(rec, site, orig, where, None))
                done.append("functional." + name)
        if "wait_tensor" in funcol.__dict__:
            patch(funcol, "wait_tensor", lambda orig: _wrap_wait(rec, orig, True))
    if _recorder is not None:
        _recorder.calls.stop()
    _recorder = rec
    return done


def uninstall():
    """Stop recording (the instrumentation restores the attributes)."""
    global _recorder
    if _recorder is not None:
        _recorder.calls.stop()
    _recorder = None
