"""SP AM on real nodes: wall-clock keep-alives.

A peer whose script is slow to start is not gone: the keep-alive counts its silence in
periods with a wall-time floor (``realtime_keepalive_ms``), so a caller gives up only
after seconds of silence, and a late peer gets every message exactly once. Small: two
nodes, a few hundred messages.
"""
from __future__ import annotations

import time

from libdp._realrun import run_real_spmd
from libdp.am import AM

TIMEOUT = 60.0
H_MSG, H_DONE = 1, 2


async def _exchange(dp, rank, size, rounds, late_s):
    """Every rank sends `rounds` numbered requests to every other; the last rank's script
    opens its endpoint `late_s` seconds after the others have started sending."""
    if rank == size - 1:
        time.sleep(late_s)                     # a script that has not started yet: no endpoint, no polls
    got = {p: [] for p in range(size) if p != rank}
    done = set()

    def on_msg(tok, k):
        got[tok.src].append(k)

    def on_done(tok, _):
        done.add(tok.src)

    am = await AM.open(dp, {H_MSG: on_msg, H_DONE: on_done})
    t0 = time.perf_counter()
    try:
        for k in range(rounds):
            for p in got:
                await am.am_request_1(p, H_MSG, k)
        await am.poll_until(lambda: all(len(v) == rounds for v in got.values()))
        for p in got:
            await am.am_request_1(p, H_DONE, 0)
        await am.poll_until(lambda: len(done) == len(got))
        stats = am.stats()
    finally:
        await am.close()
    return {"got": got, "waited_s": time.perf_counter() - t0, "keepalives_sent": stats["keepalives_sent"]}


def test_a_peer_whose_script_starts_late_gets_every_message_exactly_once(tmp_path, monkeypatch):
    """Node 1's script starts 1.5 s after node 0's has begun sending. Node 0's caller
    gives up after 30 keep-alives unanswered (``max_keepalives=30``), each period at least
    100 ms of wall time: 3 s, so it waits -- where 30 periods counted in polls alone
    would pass in 20 ms (0.75 s even on a loaded host). Then node 1 NACKs what it lacks
    and every message arrives once, in order; no more keep-alives went than the floor
    allows in the time waited."""
    monkeypatch.setenv("DP_RUN_BASE", str(tmp_path))
    rounds, floor_s = 200, 0.1
    am = f"am:max_keepalives=30,realtime_keepalive_ms={floor_s * 1e3}"
    results, _stats = run_real_spmd(_exchange, rounds, 1.5, nodes=2, nic="tb2", load=[am], timeout=TIMEOUT)
    for rank, out in enumerate(results):
        assert out["got"] == {1 - rank: list(range(rounds))}
    first = results[0]
    assert first["waited_s"] >= 1.0
    assert 0 < first["keepalives_sent"] <= first["waited_s"] / floor_s + 2
