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
                   of yours stays, and the wait is then not measured). Every bucket's
                   all-reduce is the action "collective:allreduce", its bytes the counter
                   comm:allreduce:bytes and its bandwidth comm:allreduce:<class>:algbw
                   (from when it starts moving: its launch, or the bucket before's end);
                   its time is the part after the last bucket's launch (the backward's
                   compute done): the time this rank waits for the slowest one. A bucket
                   done before is hidden behind the compute and counts with no time.
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
import datetime
import functools
import itertools
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
SETTLE_TIMEOUT = 5.0  # seconds the end of the run waits for the last buckets to be counted
BACKWARD_WAIT = 0.02  # seconds a backward's end waits for its buckets' callbacks (they are
                      # microseconds behind; on a loaded machine a late one records itself)


class RankView:
    """The cross-rank view rank 0 got: ``text`` (the table), ``data`` (its JSON as a dict:
    world_size, answered, missing, actions, stragglers, ops (the collectives by op, with
    their bandwidth), tflops and mfu per rank, and wait: who made the others wait, in which
    op, its ``sentence``)."""

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
    """What the comm hook needs and keeps: the DDP model's process group, the action it
    records, and per backward the times that split each bucket's all-reduce into the part
    hidden behind the backward's compute and the part the rank waits for (the done-callbacks
    run on the backend's threads: the lock keeps the times whole).

    The waits are the training thread's, inside its backward: a callback that the autograd
    engine runs at the backward's end records them there (``spans`` holds them until then),
    so the step's split gives them to the collective category, not to the backward. A future
    wakes its waiters before it runs its callbacks, so the backward can end, and the run too,
    before its last buckets reach us: ``pending`` counts them; the backward's end waits for
    them briefly (BACKWARD_WAIT), the run's end longer (settle). A bucket later than that
    records itself, on its own thread."""
    __slots__ = ("group", "action", "profiler", "device", "n", "total", "classes", "lock",
                 "settled", "pending", "backward", "last_launch", "last_end", "spans",
                 "recorded", "__weakref__")

    def __init__(self, group, action, profiler, device=None):
        self.group = group
        self.action = action
        self.profiler = profiler
        self.device = device      # the profiler when it times the device, else None
        self.n = group.size() if group is not None else dist.get_world_size()
        self.total = 0            # the bytes all-reduced so far (comm:allreduce:bytes)
        self.classes = {}         # bit length of a bucket's size -> its bandwidth counters
        self.lock = threading.Lock()
        self.settled = threading.Condition(self.lock)  # pending came down to 0
        self.pending = 0          # buckets launched whose done-callback has not run
        self.backward = 0         # the backwards seen: a bucket's is the one it launched in
        self.last_launch = (-1, 0)  # (backward, when) of the last bucket launched
        self.last_end = 0         # when the latest all-reduce ended
        self.spans = []           # (start, end) of the waits not recorded yet
        self.recorded = 0         # the backwards whose waits were recorded at their end

    def done(self, backward, launch, nbytes, fut):
        end = _sw.now_ns()
        with self.lock:
            # the backend runs the buckets in order: one starts moving when the one before
            # ends (or at its launch), which the bandwidth is timed from
            moving = max(launch, self.last_end)
            self.last_end = max(self.last_end, end)
            last_backward, last_launch = self.last_launch
            # the rank waits from its last bucket's launch (the backward's compute done):
            # a bucket that ended before is hidden, counted with no time
            start = max(moving, last_launch) if last_backward == backward else end
            self.total += nbytes
            total = self.total
            late = backward < self.recorded  # its backward's end did not wait for it
            if not late:
                self.spans.append((min(start, end), end))
        if late:
            self.action.record(min(start, end), end)  # never raises, a no-op once closed
        counter = self.profiler.counter
        counter("comm:allreduce:bytes", total)
        if nbytes and end > moving:
            k = nbytes.bit_length()
            names = self.classes.get(k)
            if names is None:
                label = f"comm:allreduce:{_collectives.size_class(nbytes)}"
                names = self.classes[k] = (label + ":algbw", label + ":busbw")
            algbw = nbytes / (end - moving)  # bytes per ns = GB/s
            counter(names[0], algbw)
            counter(names[1], algbw * _collectives.bus_factor("all_reduce", self.n))

    def counted(self):
        """One launched bucket's done-callback has run."""
        with self.lock:
            self.pending -= 1
            if not self.pending:
                self.settled.notify_all()

    def settle(self, timeout):
        """Wait until every bucket launched has been counted, for at most timeout seconds
        (a hung collective must not hang the exit), and record their waits on the calling
        thread; True when settled."""
        with self.lock:
            if self.pending:
                deadline = time.monotonic() + timeout
                while self.pending:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self.settled.wait(left):  # lets go of the GIL
                        break
            settled = not self.pending
            spans, self.spans = self.spans, []
            self.recorded = self.backward
        record = self.action.record
        for start, end in spans:
            record(start, end)
        return settled

    def backward_end(self):
        """The autograd engine's callback after DDP's last one (the gradients are reduced):
        this backward's waits, recorded inside it on the training thread."""
        try:
            self.settle(BACKWARD_WAIT)
        except Exception:  # never fail the user's backward for a figure
            pass


def _allreduce_done(state, backward, launch, nbytes, fut):
    try:
        state.done(backward, launch, nbytes, fut)
    except Exception:  # a closed profiler: the figures go nowhere; the gradients go on
        pass
    finally:
        state.counted()


def _after_ddp(end):
    """Run end when the autograd engine has run DDP's final callback (finalize_backward,
    which waits for every bucket): queued by a callback queued now, at the last bucket's
    hook, which runs before DDP's is queued."""
    engine = torch.autograd.Variable._execution_engine
    engine.queue_callback(lambda: engine.queue_callback(end))


def _backward_tail(state, device):
    """At the last bucket's hook the backward's compute is queued: from here to the
    backward's end the rank waits for the last all-reduces. At that end, the waits are
    recorded on the training thread (_HookState) and, with the device timed, a communication
    interval on the step's stream from now (exposed in full, docs/collectives.md)."""
    token = device.device_comm_begin() if device is not None else 0

    def end():
        state.backward_end()
        if token:
            device.device_comm_end(token)
    _after_ddp(end)


def timed_allreduce(state, bucket):
    """torch's default all-reduce (``allreduce_hook``), every bucket counted with its bytes;
    its time is what the rank waits for it once the backward's compute is done. The future
    DDP gets is the default hook's own (a done-callback does not wrap its errors). With
    device time on and the bucket on the GPU: the last buckets' exposed tail on the device,
    and NCCL's own time of each bucket where TORCH_NCCL_ENABLE_TIMING=1."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    buffer = bucket.buffer()
    nbytes = buffer.nbytes
    device = state.device if state.device is not None and buffer.is_cuda else None
    last = bucket.is_last()
    # timed here, not again as collective:all_reduce
    with _collectives.quiet(), _collectives.works_of(device) as works:
        launch = _sw.now_ns()
        fut = allreduce_hook(state.group, bucket)
    try:
        if device is not None:
            _collectives.nccl_works(works)
        if last:
            _backward_tail(state, device)
    except Exception:  # never fail the user's backward for a figure
        pass
    with state.lock:
        backward = state.backward
        state.pending += 1
        if last:
            state.last_launch = (backward, launch)
            state.backward += 1
    fut.add_done_callback(functools.partial(_allreduce_done, state, backward, launch, nbytes))
    return fut


def _has_comm_hook(ddp):
    """Whether the model has a comm hook: a Python one, or a built-in (C++) one."""
    if getattr(ddp, "_comm_hooks", None):
        return True
    try:
        return bool(ddp._get_ddp_logging_data().get("comm_hook"))
    except (AttributeError, RuntimeError):
        return False


def _flops_notes(profiler):
    """The FLOP figures so far (stepwatch.flops under stepwatch.torch) into profiler's notes,
    so the payload carries them: the counter writes them itself only when it closes, after
    the end-of-run round."""
    inst = getattr(sys.modules.get("stepwatch.torch"), "_active", None)
    counter = getattr(inst, "flops", None)
    if counter is None or counter.profiler is not profiler or counter._closed:
        return
    from stepwatch import flops as _flops
    try:
        notes = _flops._notes(counter.figures())
    except Exception as exc:  # the round goes on without FLOPs
        warnings.warn(f"stepwatch.distributed: no FLOP figures for the round ({exc!r})",
                      RuntimeWarning, stacklevel=3)
        return
    for key, value in notes.items():
        profiler.note(key, value)


# ---- the rounds as trees: rank 0 talks to a few ranks, not to every one -----------------------

_FANOUT = 16       # children per rank in the end-of-run round's tree
_CLOCK_FANOUT = 2  # and in the clock offsets' (a parent serves its children in turn)


def tree(rank, world, fanout):
    """(parent or None, children) of rank in the fanout-ary tree over ranks 0..world-1:
    rank r's parent is (r - 1) // fanout."""
    first = rank * fanout + 1
    return ((rank - 1) // fanout if rank else None), range(first, min(first + fanout, world))


def _depth(rank, fanout):
    d = 0
    while rank:
        rank, d = (rank - 1) // fanout, d + 1
    return d


def clock_tree(rank, world, send, recv, fanout=_CLOCK_FANOUT, rounds=_CLOCK_ROUNDS):
    """This rank's wall clock minus rank 0's (ns), by ping-pong down a tree (collective:
    every rank calls it). send(peer, int) and recv(peer) -> int are the transport.

    A parent reads its clock, asks a child for its own, reads its clock again when the answer
    arrives: the child's clock minus the parent's is its time minus the midpoint, wrong by at
    most half the round trip (Cristian's method, as libstepwatch_mpi does); of `rounds`
    exchanges the shortest round trip counts, so one where a process was descheduled does
    not. The parent then sends the child that plus its own offset to rank 0. The parents of
    one level work at once: fanout * rounds round trips a level, log(world) levels, where a
    star through rank 0 took world * rounds; the error is at most the sum of the half round
    trips on the way up."""
    parent, children = tree(rank, world, fanout)
    mine = 0
    if parent is not None:
        for _ in range(rounds):  # the parent measures this rank's clock
            recv(parent)
            send(parent, time.time_ns())
        mine = recv(parent)
    for child in children:
        send(child, clock_ping(child, send, recv, rounds) + mine)
    return mine


def clock_ping(peer, send, recv, rounds=_CLOCK_ROUNDS):
    """peer's clock minus this rank's (ns): the midpoint rule over `rounds` ping-pongs, the
    shortest round trip counting (the peer answers each with its time_ns)."""
    best_trip = best = None
    for _ in range(rounds):
        t0 = time.time_ns()
        send(peer, 0)
        theirs = recv(peer)
        t1 = time.time_ns()
        if best_trip is None or t1 - t0 < best_trip:
            best_trip, best = t1 - t0, theirs - (t0 + (t1 - t0) // 2)
    return best


def store_gather(store, prefix, rank, world, payload, timeout, fanout=_FANOUT):
    """The end-of-run round through the store, as a tree (no collective: a rank may be dead).
    Every rank waits for its children's keys (each holds the payloads of the child's
    subtree, concatenated), adds its own payload and sets its key; rank 0 returns the
    payloads of every rank that arrived (world * RANK_PAYLOAD_SIZE bytes, zeros for the
    others), the others None. Rank 0 reads `fanout` keys instead of world.

    Waiting is bounded: a rank at depth d of D waits for its children at most
    timeout * (D - d) / D (leaves not at all, rank 0 the whole timeout), so a parent
    outwaits its children. A child whose key is not there by then (it died, or came too
    late) is replaced by the keys of its own subtree that are (its children's, ...)."""
    parent, children = tree(rank, world, fanout)
    deepest = _depth(world - 1, fanout)
    budget = timeout * (deepest - _depth(rank, fanout)) / max(1, deepest)
    deadline = time.monotonic() + budget
    parts = [payload]
    for child in children:
        key = f"{prefix}{child}"
        left = deadline - time.monotonic()
        try:
            store.wait([key], datetime.timedelta(seconds=max(0.001, left)))
        except Exception:  # not there in time: what arrived of its subtree
            parts.extend(_adopt(store, prefix, child, world, fanout))
            continue
        parts.append(store.get(key))
        store.delete_key(key)
    blob = b"".join(parts)
    if parent is not None:
        store.set(f"{prefix}{rank}", blob)
        return None
    return _place(blob, world)


def _adopt(store, prefix, missing, world, fanout):
    """The keys of the subtree of a rank that did not answer: its children's where they are,
    else their children's, and so on (without waiting: they had their time)."""
    found, todo = [], list(tree(missing, world, fanout)[1])
    while todo:
        r = todo.pop()
        key = f"{prefix}{r}"
        if store.check([key]):
            found.append(store.get(key))
            store.delete_key(key)
        else:
            todo.extend(tree(r, world, fanout)[1])
    return found


def _place(blob, world):
    """Payloads in any order (each names its rank, a little-endian i32 at byte 8) put at
    their rank's slot of world * RANK_PAYLOAD_SIZE bytes; zeros where none came."""
    size = RANK_PAYLOAD_SIZE
    out = bytearray(world * size)
    for at in range(0, len(blob) - size + 1, size):
        r = int.from_bytes(blob[at + 8:at + 12], "little")
        if 0 <= r < world:
            out[r * size:(r + 1) * size] = blob[at:at + size]
    return bytes(out)


# ---- one process's watch ---------------------------------------------------------------------

_serials = itertools.count()


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
        self._hooks = []              # their comm hooks' states, weakly (settle_hooks)
        self.not_measured = []        # (model, why) where it is not
        self.clock_offset_ns = None
        self.rank = self.world_size = None  # the process group's, once seen
        self._forwards = 0
        self._seen = weakref.WeakSet()
        self._collective = profiler.action(COLLECTIVE)
        self._own = profiler.action(_OWN)
        self._finals = 0
        self._everyone = None         # every rank runs a watch (everyone_watches), once asked
        self._serial = next(_serials)  # this process's watches, counted: one join key each

    # -- the rank, read when asked: the process group's once it is up --

    def where(self):
        """(rank, world_size) in the default process group, or None when there is none (the
        last seen stay in .rank and .world_size)."""
        if not _up():
            return None
        world = dist.get_world_size()
        if world != self.world_size and not self.profiler.closed:
            # the profiler may predate the ranks: Lightning sets WORLD_SIZE only in the
            # ranks it starts itself, so the first one's says 1 until now
            self.profiler.set_world_size(world)
        self.rank, self.world_size = dist.get_rank(), world
        return self.rank, self.world_size

    # -- called from DistributedDataParallel.forward --

    def _on_forward(self, ddp):
        try:
            if ddp not in self._seen:
                self._seen.add(ddp)
                self._hook(ddp)
                if self.clock_offset_ns is None and self.everyone_watches():
                    with self._own:
                        self.estimate_clock()
            if ddp.training and torch.is_grad_enabled() and not self.finished \
                    and self.everyone_watches():
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
        device = self.profiler if _collectives.times_device(self.profiler) else None
        state = _HookState(ddp.process_group, self._collective, self.profiler, device)
        ddp.register_comm_hook(state, timed_allreduce)
        self.measured.append(weakref.ref(ddp))
        self._hooks.append(weakref.ref(state))  # the model holds it while it lives

    def settle_hooks(self, timeout=SETTLE_TIMEOUT):
        """Wait (at most timeout seconds in all) for the comm hooks' last buckets to be
        counted: the run's end comes right after its last backward, maybe before them."""
        deadline = time.monotonic() + timeout
        states = [state for state in (ref() for ref in self._hooks) if state is not None]
        return all([state.settle(max(deadline - time.monotonic(), 0.0)) for state in states])

    # -- collectives: every rank calls these at the same point --

    def everyone_watches(self):
        """Does every rank of the default group run a watch? Asked once, at the first DDP
        forward, through the store: a rank without stepwatch (a launcher that started it
        without `stepwatch run`) never joins one of our collectives, and a collective one
        rank never joins hangs the others or pairs with the job's own. Each rank adds itself
        to a count; the last to come says so; the others wait at most ``timeout`` for it.
        False: the clock offsets and periodic rounds stay off; the end-of-run round goes
        through the store and names the ranks that did not answer."""
        if self._everyone is None:
            self._everyone = False  # asked once: a store that fails is not asked again
            self._everyone = self._join()
        return self._everyone

    def _join(self):
        rank, world = self.where()
        store = dist.distributed_c10d._get_default_store()
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        key = f"stepwatch/joined/{restart}/{self._serial}"
        if store.add(key, 1) == world:
            store.set(key + "/all", b"1")
        try:
            store.wait([key + "/all"], datetime.timedelta(seconds=self.timeout))
            return True
        except Exception:  # the store's timeout: a rank never came
            joined = store.add(key, 0)
            warnings.warn(f"stepwatch.distributed: rank {rank}: {joined} of {world} ranks run "
                          f"stepwatch after {self.timeout:g} s; its clock offsets and periodic "
                          "rounds stay off (a collective the others never join would hang "
                          "them), the end-of-run round names who is missing",
                          RuntimeWarning, stacklevel=4)
            return False

    def estimate_clock(self):
        """This rank's wall clock minus rank 0's, down a tree of ping-pongs (clock_tree):
        each rank measures its children's clocks against its own and hands each child its
        offset to rank 0. Kept in the run file; returns the offset in ns."""
        rank, world = self.where()
        t = torch.zeros(1, dtype=torch.int64, device=_device())

        def send(peer, value):
            t.fill_(value)
            dist.send(t, dst=peer)

        def recv(peer):
            dist.recv(t, src=peer)
            return int(t.item())  # waits for the value (nccl: the receive ran on the device)

        with _collectives.quiet():  # stepwatch's own round: not one of the program's
            self.clock_offset_ns = clock_tree(rank, world, send, recv)
        self.profiler.set_clock_offset(self.clock_offset_ns)
        return self.clock_offset_ns

    def aggregate(self):
        """One round now, through the process group (collective): rank 0 gets every rank's
        payload, keeps the round in its run file and returns the RankView; others None."""
        rank, world = self.where()
        _flops_notes(self.profiler)
        mine = torch.frombuffer(bytearray(self.profiler.rank_payload(rank, world)),
                                dtype=torch.uint8).to(_device())
        every = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
        with _collectives.quiet():  # stepwatch's own round: not one of the program's
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
        self.settle_hooks()  # the last buckets belong in the payload and the run file
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
        _flops_notes(self.profiler)
        try:
            payloads = store_gather(store, prefix, rank, world,
                                    self.profiler.rank_payload(rank, world), self.timeout)
        except Exception as exc:  # rank 0 (the store's host) is gone: nothing to report to
            if rank == 0:
                warnings.warn(f"stepwatch.distributed: the store failed ({exc!r})",
                              RuntimeWarning, stacklevel=2)
            return None
        if rank != 0:
            return None
        self.rounds += 1
        self.profiler.add_ranks(payloads, world, True)
        self.view = RankView(payloads, world, self.top)
        if not self.quiet:
            out = self.output or sys.stderr
            out.write(self.view.report(self.format))
            out.flush()
        return self.view


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
