"""The EPOS pipeline's bandwidth over Myrinet, as a measurement (EP-A01..A20, EP-C01..C08).

`bulk_pingpong` is an SPMD program for ``Cluster.run_spmd``: ranks 0 and 1 bounce a bulk
message through the Myrinet driver's pipeline (`nic_drivers.myrinet.pipeline`), and the
rows carry the packet size the pipeline chose. ``dp bandwidth --nic myrinet --pipeline
adaptive|fixed:N`` runs it; `bulk_bandwidth` runs it from a script.
"""
from __future__ import annotations

from nic_drivers.myrinet.pipeline import bulk_device, parse_pipeline, run_op

__all__ = ["BULK_SIZES", "bulk_bandwidth", "bulk_pingpong"]

BULK_SIZES = (1, 64, 255, 256, 1024, 4096, 16384, 65536, 262144, 1048576)


async def bulk_pingpong(dp, rank, size, sizes=BULK_SIZES, iters=10, pipeline="adaptive", warmup=2):
    """Ranks 0 and 1 bounce a bulk message; one-way time is half the round trip.

    A ``Cluster.run_spmd`` program: returns, on each of ranks 0 and 1, rows
    ``{"size", "mbytes_per_s", "packet_bytes", "one_way_us", "path", "messages", "delivered"}``
    (MB = 10^6 bytes; bulk transfers are flow-controlled, so every message is delivered).
    """
    if rank > 1 or size < 2:
        return None
    node = dp._node
    eng = bulk_device(node).bulk
    peer = 1 - rank
    rows = []
    for n in sizes:
        data = bytes(n)
        packet = eng.packet_size(n, pipeline)
        t0 = node.engine.now
        for i in range(warmup + iters):
            if i == warmup:
                t0 = node.engine.now
            if rank == 0:
                await run_op(node, eng.send_op(peer, data, pipeline))
                await run_op(node, eng.recv_op())
            else:
                await run_op(node, eng.recv_op())
                await run_op(node, eng.send_op(peer, data, pipeline))
        one_way = (node.engine.now - t0) / iters / 2
        rows.append({"size": n, "mbytes_per_s": n / one_way / 1e6, "packet_bytes": packet,
                     "one_way_us": one_way * 1e6, "path": "pio" if n < eng.pio_threshold else "pipeline",
                     "messages": iters, "delivered": iters})
    return rows


def bulk_bandwidth(sizes=BULK_SIZES, iters=10, pipeline="adaptive", platform=None, params=(), seed=0,
                   cluster=None):
    """Rows of the EPOS pipeline's bandwidth between two nodes over Myrinet.

    ``[{"size": n, "mbytes_per_s": x, "packet_bytes": p, "one_way_us": t, "path": ...}]``
    """
    if cluster is None:
        from libdp._cluster import Cluster
        cluster = Cluster(nodes=2, platform=platform, nic="myrinet", params=params, seed=seed)
    parse_pipeline(pipeline)
    return cluster.run_spmd(bulk_pingpong, list(sizes), iters, pipeline)[0]
