"""libdp: Directed Point as a process sees it.

    from libdp import Cluster
    cluster = Cluster(nodes=2)                 # two P-133s with 21140s, DP loaded
    a, b = cluster.process(0), cluster.process(1)

    async def main():
        fa = await a.dp_open(5); await a.dp_target(fa, 1, 5)
        fb = await b.dp_open(5)
        await a.dp_write(fa, b"hello")
        print(await b.dp_read(fb))
    cluster.run(main)

Every call also exists blocking, as ``a.sync.dp_open(5)`` and so on.

Real nodes: ``dp = libdp.attach(node=0)`` gives a process the same calls on node 0 of a
running cluster (``dp cluster up``), each call entering that node process's kernel.
"""
from libdp._api import DP, Endpoint, SyncDP
from libdp._cluster import Cluster, build_profile
from libdp._bench import bandwidth, pingpong
from libdp._attach import attach

__all__ = ["Cluster", "DP", "Endpoint", "SyncDP", "attach", "bandwidth", "build_profile", "pingpong"]
