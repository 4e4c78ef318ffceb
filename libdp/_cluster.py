"""Building a cluster of simulated nodes in a few lines.

    cluster = Cluster(nodes=2)                        # P-133s with 21140s, DP loaded
    results = cluster.run_spmd(program, args...)      # one process per node, trio

A modeled cluster shares one engine; every node boots a bare kernel into which the
NIC driver and DP are loaded as modules (plus any `load=` extras). A real node (one
per OS process) is built by `Cluster.real_node` around a real transport.
"""
from __future__ import annotations

import errno
import gc
import random

import trio

from kernelsim import Engine, EngineClock, Node, load_profile, parse_param
from libdp._api import DP
from nic_drivers import nic as nic_package

__all__ = ["Cluster", "build_profile"]


MAX_NODES = 65536          # node ids are 16-bit in the Directed Message header

# The cyclic collector's young generation, per node of the cluster (modeling choice, not
# a modeled quantity: it changes no modeled output, only the simulator's CPU time). A
# collection is triggered when the *net* count of new container objects passes the
# threshold, but it walks every young object still alive -- and in a busy cluster that is
# the state in flight on every node (generators, completions, packets: ~30 objects a node
# in a 1024-node broadcast). With Python's fixed 700, each collection walked ~30 000
# objects and came every few hundred net allocations: GC work per packet grew with the
# node count (1.5 s of a 13 s 1024-node run, none of it finding garbage). A threshold that
# grows with the cluster keeps collections per packet x objects per collection constant.
YOUNG_GC_PER_NODE = 100


class _YoungGeneration:
    """``with _YoungGeneration(nodes):`` -- the collector's first threshold at least
    ``YOUNG_GC_PER_NODE * nodes`` inside, as it was after."""

    def __init__(self, nodes: int):
        self.want = YOUNG_GC_PER_NODE * nodes

    def __enter__(self):
        self.saved = gc.get_threshold()
        if self.want > self.saved[0]:
            gc.set_threshold(self.want, *self.saved[1:])
        return self

    def __exit__(self, *exc):
        gc.set_threshold(*self.saved)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def build_profile(platform: str = "p133", params=()):
    """Load a platform profile and apply KEY=VALUE overrides (strings or pairs)."""
    prof = load_profile(platform)
    items = params.items() if isinstance(params, dict) else params
    for item in items:
        if isinstance(item, str):
            key, value = parse_param(item)
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            key, value = item
        else:
            raise OSError(errno.EINVAL, f"a profile override is 'KEY=VALUE' or (key, value), not {item!r}")
        prof.override(key, value)
    return prof


def resolve_platform(platform: str | None, nic: str | None) -> tuple[str, str]:
    """Fill in what was not given: a NIC's own platform, or a platform's own NIC."""
    if platform is None:
        platform = nic_package(nic).DEFAULT_PLATFORM if nic else "p133"
    if nic is None:
        nic = load_profile(platform).nic
    return platform, nic


def parse_load(spec: str) -> tuple[str, dict]:
    """``NAME[:key=value,...]`` as given to ``--load``."""
    name, _, rest = spec.partition(":")
    params = {}
    for kv in filter(None, rest.split(",")):
        k, sep, v = kv.partition("=")
        if not sep:
            raise OSError(errno.EINVAL, f"--load {spec!r}: parameters are key=value")
        params[k.strip()] = v.strip()
    return name.strip(), params


def _sole(group: BaseExceptionGroup) -> BaseException:
    """The one leaf error of nested groups, or the group itself if there are several."""
    leaves = []

    def walk(g):
        for e in g.exceptions:
            walk(e) if isinstance(e, BaseExceptionGroup) else leaves.append(e)
    walk(group)
    return leaves[0] if len(leaves) == 1 else group


def _load_spec(spec) -> tuple[str, dict]:
    """One entry of ``load=``: ``"NAME[:k=v,...]"`` or ``(name, {params})``."""
    if isinstance(spec, str):
        return parse_load(spec)
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str) \
            and isinstance(spec[1], dict):
        return spec[0], spec[1]
    raise OSError(errno.EINVAL, f"a module to load is 'NAME[:key=value,...]' or (name, {{params}}), not {spec!r}")


def boot_modules(node, driver: str, load=()) -> None:
    """Load the NIC driver, DP, then the extras; ``load`` may give any of them parameters."""
    specs = [_load_spec(s) for s in load]
    given = {name: params for name, params in specs}
    for name in (driver, "dp"):
        node.modules.modprobe(name, **given.pop(name, {}))
    for name, params in specs:
        if name in given:
            node.modules.modprobe(name, **params)


# Frames a real node's port takes in before it runs the engine (one interrupt and one
# receive walk for them all; fewer if the card has no free buffer for the next one):
# bench_node_pass --size 1500 --batch 16 (callgrind), send and receive pass 15.5k -> 13.7k
# instructions per message; 4 receive interrupts for 64 frames instead of 64.
REAL_RX_BURST = 16


class Cluster:
    def __init__(self, nodes: int = 2, platform: str | None = None, nic: str | None = None, params=(),
                 seed: int = 0, load=()):
        if not _is_int(nodes) or not 1 <= nodes <= MAX_NODES:
            raise OSError(errno.EINVAL, f"a cluster has 1..{MAX_NODES} nodes, not {nodes!r}")
        if not _is_int(seed):
            raise OSError(errno.EINVAL, f"a seed is an int, not {seed!r}")
        platform, nic = resolve_platform(platform, nic)
        self.profile = build_profile(platform, params)
        self.nic_name = nic
        self.nic = nic_package(self.nic_name)
        self.seed = seed
        self.rng = random.Random(seed)
        self.engine = Engine()
        self.clock = EngineClock(self.engine)
        with _YoungGeneration(nodes):
            self._build(nodes, load)

    def _build(self, nodes: int, load) -> None:
        self.nodes = [Node(i, self.profile.copy(), self.engine) for i in range(nodes)]
        hosts = {n.nid: {self.nic.LINK_KIND: self.nic.hwaddr_for(n.nid)} for n in self.nodes}
        devices = []
        for n in self.nodes:
            n.hosts = hosts
            devices.append(self.nic.make_device(n))
        self.medium = self.nic.connect(self.engine, self.profile, devices, random.Random(self.seed))
        for n in self.nodes:
            boot_modules(n, self.nic.MODULE.name, load)

    @classmethod
    def real_node(cls, nid: int, hosts: dict, port, platform: str | None = None, nic: str | None = None,
                  params=(), load=()) -> Node:
        """One node in this OS process, in real time, its NIC's medium a real transport."""
        platform, nic = resolve_platform(platform, nic)
        profile = build_profile(platform, params)
        pkg = nic_package(nic)
        node = Node(nid, profile, Engine(realtime=True), modeled=False)
        node.hosts = hosts
        dev = pkg.make_device(node)
        port.attach(dev)
        port.settle = node.engine         # run by the port after a burst of frames
        port.settle_every = REAL_RX_BURST
        node.real_ports.append(port)
        boot_modules(node, pkg.MODULE.name, load)
        return node

    def node(self, nid: int) -> Node:
        """Node `nid`'s kernel (modules, statistics): the administrator's handle."""
        return self.nodes[self._nid(nid)]

    def process(self, nid: int, name: str = "proc") -> DP:
        """A new process on node `nid`, with DP bound to it."""
        return DP(self.nodes[self._nid(nid)].spawn(name))

    def _nid(self, nid) -> int:
        if not _is_int(nid) or not 0 <= nid < len(self.nodes):
            raise OSError(errno.EINVAL, f"no node {nid!r} in a {len(self.nodes)}-node cluster")
        return nid

    def run(self, async_fn, *args):
        """Run `async_fn(*args)` under trio in this cluster's modeled time.

        Errors come out as they were raised (a lone error of a nursery is unwrapped), so
        ``except OSError`` works; a modeled deadlock is OSError(EDEADLK).
        """
        # The cluster built so far lives as long as the run: the cyclic collector need not
        # walk it again and again (a full collection visits every object of every node,
        # so its cost per packet grew with the node count). Thawed afterwards, so that a
        # cluster thrown away is collected as usual.
        # And the young generation is sized for the cluster (see YOUNG_GC_PER_NODE).
        gc.freeze()
        try:
            with _YoungGeneration(len(self.nodes)):
                return trio.run(self.clock.run, async_fn, *args, clock=self.clock,
                                instruments=[self.clock.counter])
        except BaseExceptionGroup as group:
            raise _sole(group) from None
        finally:
            gc.unfreeze()

    def run_spmd(self, program, *args):
        """Run ``program(dp, rank, size, *args)`` as one process on every node; return results by rank."""
        results = [None] * len(self.nodes)

        async def rank_main(rank):
            dp = self.process(rank, getattr(program, "__name__", "spmd"))
            results[rank] = await program(dp, rank, len(self.nodes), *args)

        async def all_ranks():
            async with trio.open_nursery() as nursery:
                for r in range(len(self.nodes)):
                    nursery.start_soon(rank_main, r)
            return results

        return self.run(all_ranks)

    def stats(self) -> dict:
        out = {"engine": self.engine.stats(), "medium": self.medium.stats()}
        for n in self.nodes:
            out[n.name] = n.stats()
        return out
