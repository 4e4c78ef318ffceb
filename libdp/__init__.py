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
"""
from libdp._api import DP, Endpoint, SyncDP
from libdp._cluster import Cluster, build_profile
from libdp._bench import bandwidth, pingpong

__all__ = ["Cluster", "DP", "Endpoint", "SyncDP", "bandwidth", "build_profile", "pingpong"]
