"""The many-rank rounds at simulated scale: the end-of-run round through the store and the
start-up clock offsets, N ranks driven as threads of one process, before and after the trees.

    build/venv/bin/python bench/bench_ranks_round.py [--ranks 1000] [--out build/bench/ranks_round.json]

End-of-run round: a real TCPStore (torch.distributed's, as torchrun runs it) and one client
connection per simulated rank. "star" is the round as it was (each rank sets its payload and
counts itself in; rank 0 waits for the count, then checks, gets and deletes every rank's key:
about 3 N requests in turn from rank 0); "tree" is stepwatch.distributed.store_gather (every
rank waits for its children's keys and sets one; rank 0 reads 16). The time is from the
ranks' start to rank 0 holding every payload.

Clock offsets: the ping-pongs of the same code (stepwatch.distributed.clock_tree, and the
star as it was: rank 0 serving every rank 8 times in turn) carried between the threads in
virtual time (VirtualTime: --latency-us a message, every rank's clock skewed by a known
amount): the time is when the last rank knows its offset, on the critical path, which
threads sharing one interpreter lock could not show in wall time; the offsets found are
checked against the skews.
"""
import argparse
import json
import queue
import socket
import threading
import time

import torch.distributed as dist

from stepwatch import distributed as swd
from stepwatch._stepwatch import RANK_PAYLOAD_SIZE

ROUNDS = 8


def star_store_round(store, prefix, rank, world, payload, timeout):
    """The end-of-run round before the tree (stepwatch 3ba6b74, distributed.py)."""
    store.set(prefix + str(rank), payload)
    store.add(prefix + "arrived", 1)
    if rank != 0:
        return None
    deadline = time.monotonic() + timeout
    while store.add(prefix + "arrived", 0) < world and time.monotonic() < deadline:
        time.sleep(0.02)
    out = bytearray(world * RANK_PAYLOAD_SIZE)
    for r in range(world):
        key = prefix + str(r)
        if store.check([key]):
            value = store.get(key)
            out[r * RANK_PAYLOAD_SIZE:(r + 1) * RANK_PAYLOAD_SIZE] = value
            store.delete_key(key)
    store.delete_key(prefix + "arrived")
    return bytes(out)


time_source = time  # what star_clock reads its clock from (VirtualTime in bench_clock)


def star_clock(rank, world, send, recv):
    """The clock offsets before the tree: rank 0 pings every rank in turn."""
    if rank == 0:
        for r in range(1, world):
            send(r, swd.clock_ping(r, send, recv, ROUNDS))
        return 0
    for _ in range(ROUNDS):
        recv(0)
        send(0, time_source.time_ns())
    return recv(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world, body):
    """body(rank) on world threads started together; seconds until all returned, results."""
    results = [None] * world
    start = threading.Barrier(world + 1)

    def one(r):
        start.wait()
        results[r] = body(r)

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, results


class Counting:
    """A store client that counts its requests (rank 0's)."""

    def __init__(self, store):
        self.store, self.requests = store, 0

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.requests += 1
            return method(*args, **kwargs)
        return counted


def bench_store(world, payloads):
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                           wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", port, is_master=False) for _ in range(world)]
    out = {}
    for name, fn in (("star", star_store_round), ("tree", swd.store_gather)):
        prefix = f"bench/{name}/"
        zero = Counting(clients[0])
        secs, res = run_ranks(world, lambda r: fn(zero if r == 0 else clients[r], prefix, r, world,
                                                  payloads[r], 60.0))
        assert res[0] == b"".join(payloads), f"{name}: rank 0 did not get every payload"
        out[name] = secs
        out[f"{name}_rank0_requests"] = zero.requests
    del clients, server
    return out


class VirtualTime:
    """Each simulated rank's own clock, in virtual ns: a message sent at t arrives at
    t + latency_ns, a receive moves the receiver's clock to the arrival; nothing else takes
    time. time_ns() is that clock plus the rank's skew, so the offsets the algorithm finds can
    be checked against the skews exactly. The threads only carry the messages: the time that
    counts is the virtual one (the critical path), whatever the interpreter's lock does."""

    def __init__(self, world, latency_ns):
        self.latency = latency_ns
        self.skew = [(r * 7919) % 1000003 * 1000 for r in range(world)]  # up to ~1 s apart
        self.clock = [0] * world
        self.mine = threading.local()
        self.q = {}
        self.lock = threading.Lock()

    def chan(self, a, b):
        with self.lock:
            return self.q.setdefault((a, b), queue.SimpleQueue())

    def time_ns(self):
        r = self.mine.rank
        return self.clock[r] + self.skew[r]

    def send(self, peer, value):
        r = self.mine.rank
        self.chan(r, peer).put((value, self.clock[r] + self.latency))

    def recv(self, peer):
        r = self.mine.rank
        value, at = self.chan(peer, r).get()
        self.clock[r] = max(self.clock[r], at)
        return value


def bench_clock(world, latency_ns):
    """The clock offsets of world ranks in virtual time, star and tree; the offsets found
    against the skews (exact with the same latency both ways)."""
    out = {"latency_us": latency_ns / 1e3}
    real = swd.time
    for name, fn in (("star", star_clock), ("tree", swd.clock_tree)):
        vt = VirtualTime(world, latency_ns)
        swd.time = vt  # the algorithm's time.time_ns() reads the rank's virtual clock
        global time_source
        time_source = vt

        def body(r):
            vt.mine.rank = r
            return fn(r, world, vt.send, vt.recv)

        try:
            _, offsets = run_ranks(world, body)
        finally:
            swd.time = real
            time_source = time
        worst = max(abs(o - (vt.skew[r] - vt.skew[0])) for r, o in enumerate(offsets))
        assert worst <= 64, f"{name}: an offset {worst} ns off the skew"
        out[f"{name}_ms"] = max(vt.clock) / 1e6  # when the last rank knows its offset
        out[f"{name}_worst_error_ns"] = worst
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--latency-us", type=float, default=25.0,
                    help="one message's latency in the clock simulation (virtual time)")
    ap.add_argument("--out")
    a = ap.parse_args()
    world = a.ranks
    payloads = [bytes([r % 251]) * 8 + r.to_bytes(4, "little") +
                bytes(RANK_PAYLOAD_SIZE - 12) for r in range(world)]
    store = bench_store(world, payloads)
    clock = bench_clock(world, a.latency_us * 1e3)
    print(f"{world} simulated ranks (threads of one process)")
    print(f"  end-of-run round through a TCPStore: star {store['star'] * 1e3:.0f} ms, "
          f"tree {store['tree'] * 1e3:.0f} ms; rank 0's requests: star "
          f"{store['star_rank0_requests']}, tree {store['tree_rank0_requests']}")
    print(f"  clock offsets by ping-pong, {a.latency_us:g} us a message (virtual time): star "
          f"{clock['star_ms']:.1f} ms, tree {clock['tree_ms']:.1f} ms (offsets off the skews "
          f"by at most {clock['star_worst_error_ns']} / {clock['tree_worst_error_ns']} ns)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"ranks": world, "store_round_s": store, "clock": clock}, f, indent=1)


if __name__ == "__main__":
    main()
