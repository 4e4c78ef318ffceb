"""Programs for real nodes: what ``run_real_spmd`` (or ``dp run``) runs once per node.

Each is ``async program(dp, rank, size, *args)`` over an attached DP (`libdp.attach`), so
the same code is a test (tests/test_real_nodes.py), a benchmark (benchmarks/
bench_real_nodes.py) and an example of a script on real nodes.

DP is unreliable and the ranks start at different times: a frame sent before the peer
opened its endpoint is dropped (and counted) by the peer's node. So every program first
*meets* its peers: it says hello (b"H") until the peer answers (b"A").

* `all_to_all` -- every node sends numbered messages to every other node; what arrived.
* `round_trips` -- rank 0 pings rank 1 and times each round trip (ns), rank 1 echoes.
* `entry_costs` -- wall time per call of ``dp_write`` (the call gate) and ``write()`` (the
  generic system-call entry) on the same endpoint, in turns.
"""
from __future__ import annotations

import time

import trio

__all__ = ["all_to_all", "round_trips", "entry_costs"]

_HELLO, _ACK, _QUIT = b"H", b"A", b"Q"


def _try_read(s, fd):
    """One message if there is one (never blocks), else None."""
    s.set_blocking(fd, False)
    try:
        return s.dp_read(fd)
    except BlockingIOError:
        return None
    finally:
        s.set_blocking(fd, True)


def _meet(s, fd, pause: float = 0.02) -> None:
    """Rank 0's side of a pair: hello until answered, then swallow the late answers."""
    while True:
        s.dp_write(fd, _HELLO)
        time.sleep(pause)
        if _try_read(s, fd) == _ACK:
            break
    time.sleep(5 * pause)
    while _try_read(s, fd) is not None:
        pass


def _pair(dp, rank: int):
    s = dp.sync
    fd = s.dp_open(1)
    s.dp_target(fd, 1 - rank, 1)
    return s, fd


async def round_trips(dp, rank, size, iters: int = 1000, nbytes: int = 1):
    """Rank 0: the wall time of each of `iters` round trips of `nbytes` bytes, in ns."""
    s, fd = _pair(dp, rank)
    if rank == 1:
        while True:
            m = s.dp_read(fd)
            if m == _QUIT:
                break
            s.dp_write(fd, _ACK if m == _HELLO else m)
        s.close(fd)
        return None
    _meet(s, fd)
    msg = b"x" * nbytes
    perf = time.perf_counter_ns
    write, read = s.dp_write, s.dp_read
    out = []
    for _ in range(iters):
        t = perf()
        write(fd, msg)
        read(fd)
        out.append(perf() - t)
    s.dp_write(fd, _QUIT)
    s.close(fd)
    return out


async def trio_round_trips(dp, rank, size, iters: int = 1000, nbytes: int = 1):
    """`round_trips` with the trio calls (``await dp.dp_write``, ``await dp.dp_read``): what
    a script written for trio pays beyond the blocking calls."""
    s, fd = _pair(dp, rank)
    if rank == 1:
        while True:
            m = await dp.dp_read(fd)
            if m == _QUIT:
                break
            await dp.dp_write(fd, _ACK if m == _HELLO else m)
        s.close(fd)
        return None
    _meet(s, fd)
    msg = b"x" * nbytes
    perf = time.perf_counter_ns
    out = []
    for _ in range(iters):
        t = perf()
        await dp.dp_write(fd, msg)
        await dp.dp_read(fd)
        out.append(perf() - t)
    s.dp_write(fd, _QUIT)
    s.close(fd)
    return out


async def entry_costs(dp, rank, size, calls: int = 20000, turns: int = 5, peer: int = 1, ep: int = 2):
    """Best wall µs per call of each entry, over `turns` turns of calls // turns calls each,
    on one endpoint whose messages go to a closed endpoint of node `peer` (dropped there)."""
    s = dp.sync
    fd = s.dp_open(ep)
    s.dp_target(fd, peer, ep)
    perf = time.perf_counter
    best = {"dp_write": float("inf"), "write": float("inf")}
    n = max(1, calls // turns)
    ring = dp._endpoint(fd).ring
    for _ in range(turns):
        for name, call in (("dp_write", s.dp_write), ("write", s.write)):
            t = perf()
            for _ in range(n):
                call(fd, b"x")
            while ring.pending():          # the gate's turn ends when the node has taken every entry
                time.sleep(0)
            best[name] = min(best[name], (perf() - t) / n * 1e6)
    s.close(fd)
    return best


async def all_to_all(dp, rank, size, rounds=20):
    """Every node sends `rounds` numbered messages to every other node; returns what arrived.

    First each node says hello (b"H") to every peer until that peer acknowledges (b"A");
    every hello is answered with an acknowledgement, also while data flows. Data messages
    are "D<src>-><dst>#<k>".
    """
    inbox, outbox = {}, {}
    for peer in range(size):
        if peer != rank:
            inbox[peer] = await dp.dp_open(100 + peer)          # endpoint 100+p receives from node p
            outbox[peer] = await dp.dp_open(200 + peer)
            await dp.dp_target(outbox[peer], peer, 100 + rank)
    acked, got = set(), {peer: [] for peer in inbox}

    async def take(peer, fd) -> bool:
        """Handle one message from `peer` if there is one (non-blocking)."""
        dp.set_blocking(fd, False)
        try:
            m = await dp.dp_read(fd)
        except BlockingIOError:
            return False
        finally:
            dp.set_blocking(fd, True)
        if m == _HELLO:
            await dp.dp_write(outbox[peer], _ACK)
        elif m == _ACK:
            acked.add(peer)
        else:
            got[peer].append(m[1:].decode())
        return True

    while len(acked) < size - 1:
        for peer, fd in outbox.items():
            if peer not in acked:
                await dp.dp_write(fd, _HELLO)
        await trio.sleep(0.02)
        for peer, fd in inbox.items():
            while await take(peer, fd):
                pass
    for k in range(rounds):
        for peer, fd in outbox.items():
            await dp.dp_write(fd, f"D{rank}->{peer}#{k}".encode())
    while any(len(v) < rounds for v in got.values()):
        busy = False
        for peer, fd in inbox.items():
            busy |= await take(peer, fd)
        if not busy:
            await trio.sleep(0.001)
    for _ in range(50):                 # answer late hellos a while: a peer may still be waiting for its ack
        for peer, fd in inbox.items():
            while await take(peer, fd):
                pass
        await trio.sleep(0.002)
    for fd in list(inbox.values()) + list(outbox.values()):
        await dp.close(fd)
    return got
