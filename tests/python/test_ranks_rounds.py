"""The many-rank rounds as trees (stepwatch.distributed): the end-of-run round through a real
TCPStore with ranks simulated as threads, one of them an interior rank that died (its subtree
still arrives, it is missing); and the clock offsets down the tree, each rank's clock skewed by
a known amount, in virtual time where the midpoint rule is exact."""
import queue
import socket
import threading

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch without torch.distributed", allow_module_level=True)

from stepwatch import distributed as swd  # noqa: E402
from stepwatch._stepwatch import RANK_PAYLOAD_SIZE  # noqa: E402


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _on_threads(ranks, body):
    results = {}

    def one(r):
        results[r] = body(r)

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_the_tree_covers_every_rank_once():
    for world, fanout in ((1, 2), (2, 2), (17, 16), (1000, 16), (37, 3)):
        seen = []
        for r in range(world):
            parent, children = swd.tree(r, world, fanout)
            assert (parent is None) == (r == 0)
            for c in children:
                assert swd.tree(c, world, fanout)[0] == r
            seen.extend(children)
        assert sorted(seen) == list(range(1, world))


def _payload(r, world):
    """A payload-sized blob naming its rank where a payload does (an i32 at byte 8)."""
    return bytes([r % 251]) * 8 + r.to_bytes(4, "little") + world.to_bytes(4, "little") + \
        bytes(RANK_PAYLOAD_SIZE - 16)


@pytest.mark.parametrize("dead", [None, 2], ids=["all-answer", "interior-rank-2-dead"])
def test_store_gather_collects_every_rank_that_answers(dead):
    world, fanout, timeout = 40, 4, 3.0  # depth 3: rank 2's children 9..12, 9's 37..39
    port = _free_port()
    server = torch.distributed.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                                        wait_for_workers=False)
    alive = [r for r in range(world) if r != dead]
    clients = {r: torch.distributed.TCPStore("127.0.0.1", port, is_master=False) for r in alive}
    got = _on_threads(alive, lambda r: swd.store_gather(
        clients[r], "t/", r, world, _payload(r, world), timeout, fanout))
    assert all(got[r] is None for r in alive if r != 0)
    blob = got[0]
    assert len(blob) == world * RANK_PAYLOAD_SIZE
    for r in range(world):
        mine = blob[r * RANK_PAYLOAD_SIZE:(r + 1) * RANK_PAYLOAD_SIZE]
        assert mine == (bytes(RANK_PAYLOAD_SIZE) if r == dead else _payload(r, world)), r
    # the keys were read and deleted on the way up: none is left over
    assert all(not clients[0].check([f"t/{r}"]) for r in range(world))
    del clients, server


def test_clock_tree_finds_every_offset():
    """Each rank's clock runs skewed by a known amount; a message takes the same time both
    ways (virtual time), so the midpoint rule is exact and every offset is found to the ns,
    summed correctly along the tree."""
    world, latency = 37, 25_000
    skew = [(r * 7919) % 1000003 * 1000 for r in range(world)]
    clock = [0] * world
    mine = threading.local()
    chans = {}
    lock = threading.Lock()

    def chan(a, b):
        with lock:
            return chans.setdefault((a, b), queue.SimpleQueue())

    class Time:
        @staticmethod
        def time_ns():
            return clock[mine.rank] + skew[mine.rank]

    def send(peer, value):
        chan(mine.rank, peer).put((value, clock[mine.rank] + latency))

    def recv(peer):
        value, at = chan(peer, mine.rank).get()
        clock[mine.rank] = max(clock[mine.rank], at)
        return value

    def body(r):
        mine.rank = r
        return swd.clock_tree(r, world, send, recv, fanout=3)

    real, swd.time = swd.time, Time
    try:
        offsets = _on_threads(range(world), body)
    finally:
        swd.time = real
    assert {r: offsets[r] for r in range(world)} == {r: skew[r] - skew[0] for r in range(world)}
    # the tree's depth, not the world, sets how long it takes: 4 levels of 3 children
    assert max(clock) < 4 * (3 * 8 * 2 + 1) * latency
