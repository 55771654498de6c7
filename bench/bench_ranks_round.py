"""The many-rank rounds at simulated scale: the end-of-run round through the store and the
start-up clock offsets, N ranks driven as threads of one process, before and after the trees.

    build/venv/bin/python bench/bench_ranks_round.py [--ranks 1000] [--out build/bench/ranks_round.json]

End-of-run round: a real TCPStore (torch.distributed's, as torchrun runs it) and one client
connection per simulated rank. "star" is the round as it was (each rank sets its payload and
counts itself in; rank 0 waits for the count, then checks, gets and deletes every rank's key:
about 3 N requests in turn from rank 0); "tree" is stepwatch.distributed.store_gather (every
rank waits for its children's keys and sets one; rank 0 reads 16). The time is from the
ranks' start to rank 0 holding every payload.

Clock offsets: the ping-pongs through in-process queues (a round trip is two thread
switches); "star" is rank 0 serving every rank 8 times in turn, as it was, "tree" is
stepwatch.distributed.clock_tree. The time is until every rank knows its offset; the
offsets (one clock: all near 0) are checked. The same threads, store and payloads for both.
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


def star_clock(rank, world, send, recv):
    """The clock offsets before the tree: rank 0 pings every rank in turn."""
    if rank == 0:
        for r in range(1, world):
            send(r, swd.clock_ping(r, send, recv, ROUNDS))
        return 0
    for _ in range(ROUNDS):
        recv(0)
        send(0, time.time_ns())
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


def bench_store(world, payloads):
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                           wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", port, is_master=False) for _ in range(world)]
    out = {}
    for name, fn in (("star", star_store_round), ("tree", swd.store_gather)):
        prefix = f"bench/{name}/"
        secs, res = run_ranks(world, lambda r: fn(clients[r], prefix, r, world, payloads[r], 60.0))
        assert res[0] == b"".join(payloads), f"{name}: rank 0 did not get every payload"
        out[name] = secs
    del clients, server
    return out


def bench_clock(world):
    out = {}
    for name, fn in (("star", star_clock), ("tree", swd.clock_tree)):
        q = {}
        lock = threading.Lock()

        def chan(a, b):
            with lock:
                return q.setdefault((a, b), queue.SimpleQueue())

        def body(r):
            return fn(r, world, lambda peer, v: chan(r, peer).put(v),
                      lambda peer: chan(peer, r).get())

        secs, offsets = run_ranks(world, body)
        worst = max(abs(o) for o in offsets)
        assert worst < 1e9, f"{name}: an offset of {worst} ns on one clock"
        out[name] = secs
        out[f"{name}_worst_offset_ms"] = worst / 1e6
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--out")
    a = ap.parse_args()
    world = a.ranks
    payloads = [bytes([r % 251]) * 8 + r.to_bytes(4, "little") +
                bytes(RANK_PAYLOAD_SIZE - 12) for r in range(world)]
    store = bench_store(world, payloads)
    clock = bench_clock(world)
    print(f"{world} simulated ranks (threads of one process)")
    print(f"  end-of-run round through a TCPStore: star {store['star'] * 1e3:.0f} ms, "
          f"tree {store['tree'] * 1e3:.0f} ms")
    print(f"  clock offsets by ping-pong: star {clock['star'] * 1e3:.0f} ms, "
          f"tree {clock['tree'] * 1e3:.0f} ms (largest offset on one clock: star "
          f"{clock['star_worst_offset_ms']:.2f} ms, tree {clock['tree_worst_offset_ms']:.2f} ms)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"ranks": world, "store_round_s": store, "clock": clock}, f, indent=1)


if __name__ == "__main__":
    main()
