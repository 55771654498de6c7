"""stepwatch.distributed — many ranks through torch.distributed: which rank is slow, and why.

    import stepwatch, stepwatch.torch, stepwatch.distributed
    prof = stepwatch.Profiler(run_file="run-{rank}.db")
    stepwatch.torch.instrument(prof)
    stepwatch.distributed.watch(prof, aggregate_every=100)
    ... init_process_group, DistributedDataParallel, the loop, destroy_process_group ...

``stepwatch run`` and the Lightning, Ignite and fastai adapters do this by themselves. Every
rank records its own profile and run file; rank 0 prints the cross-rank view (per action the
time per step across ranks, min/median/max with the ranks at the extremes, and the straggler
ranks with their blame: data, compute or collectives) and keeps it in its run file.

What it adds, and where (docs/ranks.md):

  collective wait  DDP's gradient all-reduce, through a comm hook wrapping torch's own
                   ``allreduce_hook`` (what DDP does without a hook), registered at the
                   model's first forward when the model has no comm hook of its own (a hook
                   of yours stays, and the wait is then not measured). The last bucket's
                   all-reduce, from its launch (the backward's compute is done) to its
                   completion, is the action "collective:allreduce": the time this rank
                   waits for the slowest one.
  clock offsets    at the first DDP forward, each rank's wall clock minus rank 0's (eight
                   ping-pongs with rank 0, the shortest round trip counting), kept in its
                   run file's metadata: exports put every rank on rank 0's clock.
  aggregate_every  every N training forwards of a DDP model, one gather of
                   RANK_PAYLOAD_SIZE bytes per rank to rank 0, kept in rank 0's run file.
                   This and the clock offsets are timed as "collective:stepwatch": they
                   wait for the slowest rank like any collective.
  the end          at ``destroy_process_group`` (or at exit while the group is up), every
                   rank puts its payload into the process group's store and rank 0 waits
                   for them at most ``timeout`` seconds: a rank that died is named as
                   missing, never waited for forever.

Ranks are read late, from the process group (and a Lightning Trainer): a profiler made
before the launcher set the rank still reports under the right one.
"""
import atexit
import functools
import json
import os
import sys
import threading
import time
import warnings
import weakref

import torch
import torch.distributed as dist

import stepwatch as _sw
from stepwatch import _patching
from stepwatch import collectives as _collectives
from stepwatch._stepwatch import RANK_PAYLOAD_SIZE, ranks_view

__all__ = ["RankView", "Watch", "watch", "watch_group", "unwatch", "active", "finish",
           "RANK_PAYLOAD_SIZE", "COLLECTIVE", "ranks_view"]

COLLECTIVE = "collective:allreduce"
_OWN = "collective:stepwatch"  # stepwatch's own collectives: waits for the other ranks too
_CLOCK_ROUNDS = 8


class RankView:
    """The cross-rank view rank 0 got: ``text`` (the table), ``data`` (its JSON as a dict:
    world_size, answered, missing, actions, stragglers)."""

    def __init__(self, payloads, world_size, top=3):
        self.payloads = bytes(payloads)
        self.world_size = world_size
        self.top = top
        self.text = ranks_view(self.payloads, world_size, "table", top)
        self.data = json.loads(ranks_view(self.payloads, world_size, "json", top))

    @property
    def stragglers(self):
        return self.data["stragglers"]

    @property
    def missing(self):
        return self.data["missing"]

    def report(self, format="table", top=None):
        return ranks_view(self.payloads, self.world_size, format, top or self.top)

    # The formats the view writes itself (sw_ranks_write); a report in any other (a peer's
    # table, CSV) is followed by the view's table.
    _OWN_FORMATS = ("markdown", "md", "json")

    def report_after(self, report_format):
        """The view to print under a report in report_format: in that format where the view
        has it, else as its table (what every adapter prints below its report)."""
        return self.report(report_format if report_format in self._OWN_FORMATS else "table")

    def __repr__(self):
        worst = self.stragglers[0] if self.stragglers else None
        who = f", straggler rank {worst['rank']} ({worst['blame']})" if worst else ""
        return (f"<RankView {self.data['answered']}/{self.world_size} ranks{who}"
                f"{', missing ' + str(self.missing) if self.missing else ''}>")


def _env_number(name, kind, default):
    try:
        return kind(os.environ.get(name, "") or default)
    except ValueError:
        warnings.warn(f"stepwatch: {name}={os.environ[name]!r} is not a number; ignored",
                      RuntimeWarning, stacklevel=3)
        return default


def _up():
    """True when a default process group is there to talk through."""
    return dist.is_available() and dist.is_initialized()


def _device():
    """Where collectives take their tensors: the current GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _bytes(tensor):
    return tensor.cpu().numpy().tobytes()


# ---- the comm hook ---------------------------------------------------------------------------

class _HookState:
    """What the comm hook needs: the DDP model's process group and the action it records."""
    __slots__ = ("group", "action")

    def __init__(self, group, action):
        self.group = group
        self.action = action


def _allreduce_done(action, start, fut):
    action.record(start, _sw.now_ns())  # never raises, a no-op once the profiler closed


def timed_allreduce(state, bucket):
    """torch's default all-reduce (``allreduce_hook``), the last bucket's wait recorded. The
    future DDP gets is the default hook's own (a done-callback does not wrap its errors)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    with _collectives.quiet():  # timed here, not again as collective:all_reduce
        if not bucket.is_last():
            return allreduce_hook(state.group, bucket)
        start = _sw.now_ns()
        fut = allreduce_hook(state.group, bucket)
    fut.add_done_callback(functools.partial(_allreduce_done, state.action, start))
    return fut


def _has_comm_hook(ddp):
    """Whether the model has a comm hook: a Python one, or a built-in (C++) one."""
    if getattr(ddp, "_comm_hooks", None):
        return True
    try:
        return bool(ddp._get_ddp_logging_data().get("comm_hook"))
    except (AttributeError, RuntimeError):
        return False


# ---- one process's watch ---------------------------------------------------------------------

class Watch:
    """The many-rank side of one Profiler in this process (see the module's docs)."""

    def __init__(self, profiler, aggregate_every=0, timeout=30.0, top=3, format="table",
                 output=None, quiet=False):
        if aggregate_every < 0:
            raise ValueError(f"aggregate_every must be >= 0, not {aggregate_every}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, not {timeout}")
        ranks_view(bytes(RANK_PAYLOAD_SIZE), 1, format)  # a bad format fails here
        self.profiler = profiler
        self.aggregate_every = aggregate_every
        self.timeout = timeout
        self.top = top
        self.format = format
        self.output = output
        self.quiet = quiet
        self.view = None              # the last RankView (rank 0)
        self.finished = False
        self.rounds = 0               # aggregations done
        self.measured = []            # DDP models whose collective wait is timed
        self.not_measured = []        # (model, why) where it is not
        self.clock_offset_ns = None
        self.rank = self.world_size = None  # the process group's, once seen
        self._forwards = 0
        self._seen = weakref.WeakSet()
        self._collective = profiler.action(COLLECTIVE)
        self._own = profiler.action(_OWN)
        self._finals = 0

    # -- the rank, read when asked: the process group's once it is up --

    def where(self):
        """(rank, world_size) in the default process group, or None when there is none (the
        last seen stay in .rank and .world_size)."""
        if not _up():
            return None
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        return self.rank, self.world_size

    # -- called from DistributedDataParallel.forward --

    def _on_forward(self, ddp):
        try:
            if ddp not in self._seen:
                self._seen.add(ddp)
                self._hook(ddp)
                if self.clock_offset_ns is None:
                    with self._own:
                        self.estimate_clock()
            if ddp.training and torch.is_grad_enabled() and not self.finished:
                self._forwards += 1
                every = self.aggregate_every
                if every and self._forwards > 1 and (self._forwards - 1) % every == 0:
                    with self._own:
                        self.aggregate()
        except Exception as exc:  # never fail the user's forward for the profiler's sake
            warnings.warn(f"stepwatch.distributed: {exc!r}; the cross-rank aggregation stops",
                          RuntimeWarning, stacklevel=3)
            self.aggregate_every = 0

    def _hook(self, ddp):
        if _has_comm_hook(ddp):
            self.not_measured.append((weakref.ref(ddp), "the model has a comm hook of its own"))
            return
        ddp.register_comm_hook(_HookState(ddp.process_group, self._collective), timed_allreduce)
        self.measured.append(weakref.ref(ddp))

    # -- collectives: every rank calls these at the same point --

    def estimate_clock(self):
        """This rank's wall clock minus rank 0's, by ping-pong with rank 0 (Cristian's method,
        as libstepwatch_mpi does): rank 0 reads its clock, asks the rank for its own, reads
        its clock again when the answer arrives; the rank's offset is its time minus the
        midpoint, wrong by at most half the round trip. Of _CLOCK_ROUNDS exchanges the
        shortest round trip counts, so one where a process was descheduled does not. Rank 0
        serves the ranks in turn (world * _CLOCK_ROUNDS round trips, once). Kept in the run
        file; returns the offset in ns."""
        rank, world = self.where()
        t = torch.zeros(1, dtype=torch.int64, device=_device())
        offset = torch.zeros(1, dtype=torch.int64, device=_device())
        if rank == 0:
            for r in range(1, world):
                best_trip = best = None
                for _ in range(_CLOCK_ROUNDS):
                    t0 = time.time_ns()
                    dist.send(t, dst=r)
                    dist.recv(t, src=r)
                    theirs = int(t.item())  # waits for the answer (nccl: on the device)
                    t1 = time.time_ns()
                    if best_trip is None or t1 - t0 < best_trip:
                        best_trip, best = t1 - t0, theirs - (t0 + (t1 - t0) // 2)
                offset.fill_(best)
                dist.send(offset, dst=r)
        else:
            for _ in range(_CLOCK_ROUNDS):
                dist.recv(t, src=0)
                t.cpu()  # the request has arrived (nccl: the receive ran on the device)
                t.fill_(time.time_ns())
                dist.send(t, dst=0)
            dist.recv(offset, src=0)
        self.clock_offset_ns = int(offset.item())
        self.profiler.set_clock_offset(self.clock_offset_ns)
        return self.clock_offset_ns

    def aggregate(self):
        """One round now, through the process group (collective): rank 0 gets every rank's
        payload, keeps the round in its run file and returns the RankView; others None."""
        rank, world = self.where()
        mine = torch.frombuffer(bytearray(self.profiler.rank_payload(rank, world)),
                                dtype=torch.uint8).to(_device())
        every = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, every, dst=0)
        self.rounds += 1
        if rank != 0:
            return None
        payloads = b"".join(_bytes(t) for t in every)
        self.profiler.add_ranks(payloads, world, False)
        self.view = RankView(payloads, world, self.top)
        return self.view

    def finish(self):
        """The end-of-run round, through the process group's store: every rank leaves its
        payload there, rank 0 waits at most ``timeout`` seconds for them, names the ranks
        that did not answer, keeps the round in its run file and prints the view (unless
        quiet). Once per watch; returns the RankView on rank 0, else None."""
        if self.finished:
            return self.view
        self.finished = True
        where = self.where()
        if where is None or self.profiler.closed:
            return None
        rank, world = where
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception as exc:  # a process group without a store (or torch changed)
            warnings.warn(f"stepwatch.distributed: no store to gather through ({exc!r})",
                          RuntimeWarning, stacklevel=2)
            return None
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        prefix = f"stepwatch/ranks/{restart}/{self._finals}/"
        self._finals += 1
        try:
            store.set(prefix + str(rank), self.profiler.rank_payload(rank, world))
            store.add(prefix + "arrived", 1)
        except Exception as exc:  # rank 0 (the store's host) is gone: nothing to report to
            if rank == 0:
                warnings.warn(f"stepwatch.distributed: the store failed ({exc!r})",
                              RuntimeWarning, stacklevel=2)
            return None
        if rank != 0:
            return None
        payloads = self._collect(store, prefix, world)
        self.rounds += 1
        self.profiler.add_ranks(payloads, world, True)
        self.view = RankView(payloads, world, self.top)
        if not self.quiet:
            out = self.output or sys.stderr
            out.write(self.view.report(self.format))
            out.flush()
        return self.view

    def _collect(self, store, prefix, world):
        """Rank 0: every payload that arrives before the deadline (zeros for the others)."""
        deadline = time.monotonic() + self.timeout
        while store.add(prefix + "arrived", 0) < world and time.monotonic() < deadline:
            time.sleep(0.02)
        payloads = bytearray(world * RANK_PAYLOAD_SIZE)
        for r in range(world):
            key = prefix + str(r)
            if store.check([key]):
                value = store.get(key)
                if len(value) == RANK_PAYLOAD_SIZE:
                    payloads[r * RANK_PAYLOAD_SIZE:(r + 1) * RANK_PAYLOAD_SIZE] = value
                store.delete_key(key)
        store.delete_key(prefix + "arrived")
        return bytes(payloads)


# ---- installing: one watch per process ---------------------------------------------------

_lock = threading.RLock()
_active = None
_patches = []  # (owner, name, original, wrapper)


def active():
    """The active Watch, or None."""
    return _active


def _patch(owner, name, make):
    original = owner.__dict__[name]
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(owner, name, wrapper)
    _patches.append((owner, name, original, wrapper))


def _wrap_forward(original):
    def forward(self, *args, **kwargs):
        w = _active
        if w is not None:
            w._on_forward(self)
        return original(self, *args, **kwargs)
    return forward


def _wrap_destroy(original):
    def destroy_process_group(group=None, *args, **kwargs):
        w = _active
        if w is not None and (group is None or group is dist.group.WORLD):
            _finish_quietly(w)
        return original(group, *args, **kwargs)
    return destroy_process_group


def _finish_quietly(w):
    """w.finish(), warning instead of raising: the user's job comes first."""
    try:
        return w.finish()
    except Exception as exc:
        warnings.warn(f"stepwatch.distributed: the end-of-run aggregation failed ({exc!r})",
                      RuntimeWarning, stacklevel=3)
        return None


def _install():
    if _patches:
        return
    from torch.nn.parallel import DistributedDataParallel
    _patch(DistributedDataParallel, "forward", _wrap_forward)
    _patch(dist, "destroy_process_group", _wrap_destroy)
    # Code that imported the function itself (from torch.distributed import ...) keeps the
    # original: the exit hook below then still aggregates while the group is up.
    c10d = dist.distributed_c10d
    if c10d.__dict__.get("destroy_process_group") is _patches[-1][2]:
        _patch(c10d, "destroy_process_group", _wrap_destroy)


@atexit.register
def _at_exit():
    w = _active
    if w is not None and not w.finished and _up():
        _finish_quietly(w)


def watch(profiler=None, *, aggregate_every=None, timeout=None, top=3, format="table",
          output=None, quiet=False):
    """Watch profiler (default: stepwatch.profiler()) across ranks from now on; returns the
    Watch. aggregate_every (default $STEPWATCH_AGGREGATE_EVERY, else 0 = only at the end) and
    timeout (seconds rank 0 waits at the end; $STEPWATCH_AGGREGATE_TIMEOUT, else 30). Rank 0
    prints the final view to output (default stderr) unless quiet. Calling it again for the
    same profiler returns the active Watch; for another one, that one takes over.

    Without torch.distributed (or with a single process) nothing is gathered and nothing is
    printed."""
    global _active
    profiler = profiler if profiler is not None else _sw.profiler()
    if aggregate_every is None:
        aggregate_every = _env_number("STEPWATCH_AGGREGATE_EVERY", int, 0)
    if timeout is None:
        timeout = _env_number("STEPWATCH_AGGREGATE_TIMEOUT", float, 30.0)
    with _lock:
        if _active is not None and _active.profiler is profiler:
            return _active
        w = Watch(profiler, aggregate_every, timeout, top, format, output, quiet)
        # the training thread, as Python names it, in the run file and the Chrome trace
        profiler.name_thread(threading.current_thread().name)
        if dist.is_available():
            _install()
        _active = w
        return w


def watch_group(profiler, **options):
    """watch(profiler, **options) when a process group of more than one rank is up, else
    None: what the Lightning and Ignite adapters call when a run starts, so they aggregate
    under DDP by themselves and cost nothing in a single process."""
    if not (_up() and dist.get_world_size() > 1):
        return None
    return watch(profiler, **options)


def finish(profiler=None):
    """The end-of-run aggregation of the active watch now (collective: every rank calls it),
    if it is profiler's (any, when None); the RankView on rank 0, else None."""
    w = _active
    if w is None or (profiler is not None and w.profiler is not profiler):
        return None
    return _finish_quietly(w)


def unwatch():
    """Stop watching; the DDP forward and destroy_process_group are restored. Comm hooks
    already registered stay on their models (DDP cannot take one off), and so does a wrapper
    another tool put over ours since (_patching.restore): with no watch they
    record into a closed or forgotten profiler, i.e. nothing."""
    global _active
    with _lock:
        w, _active = _active, None
        _patching.restore(_patches, "stepwatch.distributed: unwatch()")
    return w
