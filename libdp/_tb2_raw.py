"""The raw TB2 ping-pong of the SP AM paper (SP-B03): user FIFOs, application to
application, by polling -- a packet with no data and no sequence number, echoed.

`raw_pingpong_program` is an SPMD program (``async def program(dp, rank, size, ...)``)
for ``Cluster.run_spmd``: ranks 0 and 1 map their node's FIFOs and bounce packets.
`raw_pingpong(cluster)` unloads DP from the nodes first (DP and the user FIFOs cannot
share the card, SP-A18) and returns rank 0's rows.
"""
from __future__ import annotations

from nic_drivers.tb2.fifos import open_fifos

__all__ = ["raw_pingpong", "raw_pingpong_program", "PAPER_RTT_US"]

PAPER_RTT_US = (46.6, 47.0)     # SP-B03
PROTO_RAW = 0


async def raw_pingpong_program(dp, rank, size, sizes=(0,), iters=1000, warmup=10, pop_every=None):
    """Round trips between ranks 0 and 1 over the raw FIFOs; rank 0 returns the rows."""
    if rank > 1:
        return None
    # Both ranks map their FIFOs before the engine moves (no modeled time passes
    # before a rank's first call), so the first packet finds the peer's card running.
    fifos = open_fifos(dp._proc, pop_every)
    peer = 1 - rank
    rows = []
    try:
        for n in sizes:
            msg = bytes(n)
            t0 = dp.now()
            for i in range(warmup + iters):
                if i == warmup:
                    t0 = dp.now()
                if rank == 0:
                    await fifos.send(dp, peer, msg, proto=PROTO_RAW)
                    await fifos.recv(dp)
                else:
                    await fifos.recv(dp)
                    await fifos.send(dp, peer, msg, proto=PROTO_RAW)
            rtt = (dp.now() - t0) / iters
            rows.append({"size": n, "rtt_us": rtt * 1e6, "one_way_us": rtt * 1e6 / 2})
        rows_stats = fifos.stats()
    finally:
        fifos.close()
    if rows:
        rows[-1]["fifo_stats"] = rows_stats
    return rows


def raw_pingpong(cluster, iters: int = 1000, sizes=(0,), warmup: int = 10, pop_every=None):
    """Run the raw FIFO ping-pong on ranks 0 and 1 of `cluster` (DP is unloaded first)."""
    for node in cluster.nodes:
        if node.modules.loaded("dp"):
            node.modules.rmmod("dp")
    return cluster.run_spmd(raw_pingpong_program, tuple(sizes), iters, warmup, pop_every)[0]
