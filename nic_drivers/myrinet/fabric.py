"""The modeled Myrinet network: links, crossbar switches, source routing, flow control.

Myrinet is a switched network of full-duplex point-to-point links (HW-MYRI;
LCI-C25). A packet carries its own route: one byte per switch, most significant
bit set, naming the output port; each switch consumes the first byte and forwards the
rest. Switching is cut-through (wormhole): the head goes on as soon as the output port
is free, after the switch's per-hop delay (LCI-A29, EP-A10), and the packet occupies
every link of its path until its tail has passed. Link-level flow control stops a
packet whose head cannot advance -- an output port in use by another packet, or a
receiving NI with no buffer armed -- so the network holds packets back instead of
dropping them; the stall reaches the sender, whose send DMA engine cannot finish.

Topologies (``switch.topology`` in the platform profile), each with its own routing:

* ``chain`` -- ``switch.hops`` crossbars in a row, the nodes spread along it so that
  the first and the last node are ``switch.hops`` switches apart (``chain_placement``).
  The two-node measurements of DP and EPOS use it (athlon550_lanai4).
* ``grid`` -- the PPro cluster's 3D grid of 8-port switches (LCI-A28): a mesh of
  ``switch.grid`` (XxYxZ) switches, each keeping six ports for its neighbours in
  +x, -x, +y, -y, +z, -z so that the mesh can grow in any dimension, and its other
  ports (two of eight) for hosts, filled in order (node i on switch i // 2, x
  fastest). Routing is **dimension order**: all x hops, then all y hops, then z. A
  mesh without wrap-around links routed so is deadlock-free: number the channels so
  that every x channel comes before every y channel before every z channel, and
  within one dimension and direction by position; a route only ever takes a channel
  of higher number than the one it holds, so no cycle of channels waiting on each
  other can form (Dally and Seitz's channel-dependency argument). With 64 nodes on
  the profile's 8x2x2 mesh the farthest pair is 10 switches apart (LCI-A30); more
  nodes grow the mesh by doubling its first smallest dimension (8x4x2, 8x4x4, 8x8x4,
  8x8x8 for 1024 nodes: 22 hops).
* ``clos`` -- the P3 cluster's large modular Myrinet-2000 switch with full bisection
  bandwidth (LCI-A32) as what such a switch is inside: a folded Clos (fat tree) of
  ``switch.ports``-port crossbars with ``switch.levels`` levels. A leaf (a line card)
  has half its ports for hosts and half up; the top level uses all its ports down.
  With 16-port crossbars, two levels hold 128 hosts at most 3 hops apart (LCI-A33);
  more nodes add a level (1024 hosts, 5 hops). Nodes are cabled round-robin over the
  line cards (node i on leaf i mod leaves), so a small cluster spreads over the
  cards. Routing is **up/down** with the up port chosen from the destination's
  address digits (d-mod-k): up to the lowest level whose subtree holds both ends,
  then down. Every up channel leads to a higher level and every down channel to a
  lower one, and a route never goes up after coming down: ranked by (up, level) then
  (down, reverse level), a route's channels strictly increase, so the routes are
  deadlock-free. Routes to distinct hosts of one leaf leave the top through distinct
  spines, so full bisection bandwidth holds for permutation traffic.

``MyrinetFabric.check_deadlock_free`` builds the channel dependency graph of the
routes actually loaded and looks for a cycle; the tests run it on every topology.

The *mapper* (``map_routes``) loads each NI's route table, the role of Myricom's
mapper (HW-MYRI). A table does not hold N route strings for N nodes: it asks the
topology's routing function for a route the first time its NI needs one and keeps it
(``RouteTable``), so 1024 nodes cost O(N) at build and O(destinations used) after.
Drivers read routes from their NI and put them into the packets they send.

Packets move in ``_fabric.Wire`` (Cython): cut-through timing, arbitration at each
output port in the order heads ask, back-pressure from the receiving NI, faults.
"""
from __future__ import annotations

import errno
from collections.abc import MutableMapping

from kernelsim.media.faults import FaultInjector
from nic_drivers.myrinet._fabric import Channel, Wire

__all__ = ["MyrinetFabric", "RouteTable", "Chain", "Grid", "Clos", "make_topology", "chain_placement",
           "MAX_ROUTE_BYTES", "TOPOLOGIES"]

ROUTE_BIT = 0x80
MAX_ROUTE_BYTES = 24        # HW-MYRI: GM's route information covers a network diameter up to 24 hops
TOPOLOGIES = ("chain", "grid", "clos")


def _einval(msg):
    return OSError(errno.EINVAL, f"myrinet: {msg}")


def chain_placement(nnodes: int, nswitches: int, ports: int) -> list[int]:
    """Switch index of each node on a chain: first node on the first switch, last on the last.

    Switch i keeps ports for its chain neighbours; the hosts fill the rest, spread so
    that the ends are used first and the middle evenly after.
    """
    if nswitches < 1 or ports < 2:
        raise OSError(errno.EINVAL, "myrinet: a network needs at least one switch of at least two ports")
    cap = [ports - (0 if nswitches == 1 else (1 if i in (0, nswitches - 1) else 2)) for i in range(nswitches)]
    if min(cap) < 0:
        raise OSError(errno.EINVAL, f"myrinet: {ports}-port switches cannot form a chain")
    if sum(cap) < nnodes:
        raise OSError(errno.EINVAL, f"myrinet: {nnodes} nodes do not fit a chain of {nswitches} "
                                    f"{ports}-port switches (room for {sum(cap)}); raise switch.ports or switch.hops")
    order = [0] + ([nswitches - 1] if nswitches > 1 else [])
    lo, hi = 1, nswitches - 2
    while lo <= hi:
        order.append(lo)
        if hi != lo:
            order.append(hi)
        lo, hi = lo + 1, hi - 1
    count = [0] * nswitches
    k = 0
    for _ in range(nnodes):
        while count[order[k % len(order)]] >= cap[order[k % len(order)]]:
            k += 1
        count[order[k % len(order)]] += 1
        k += 1
    placement = []
    for s in range(nswitches):
        placement += [s] * count[s]
    return placement


# -- topologies ------------------------------------------------------------------------------
#
# A topology is arithmetic only: how many switches of how many ports, which ports are
# cabled to which, where node i plugs in, and the output ports a route takes from one
# switch to a host port of another. MyrinetFabric turns it into channels.


class Chain:
    """``nswitches`` crossbars in a row (see ``chain_placement``); routes never turn back."""

    kind = "chain"

    def __init__(self, nswitches: int, ports: int, nnodes: int):
        self.nswitches = nswitches
        self.ports = ports
        self.placement = chain_placement(nnodes, nswitches, ports)

    def _up(self, s):
        return self.ports - 1

    def _down(self, s):
        return self.ports - 1 if s == self.nswitches - 1 else self.ports - 2

    def cables(self):
        for s in range(self.nswitches - 1):
            yield s, self._up(s), s + 1, self._down(s + 1)

    def host_slots(self):
        inter = [set() for _ in range(self.nswitches)]
        for s, p, t, q in self.cables():
            inter[s].add(p)
            inter[t].add(q)
        free = [[p for p in range(self.ports) if p not in inter[s]] for s in range(self.nswitches)]
        return [(s, free[s].pop(0)) for s in self.placement]

    def route(self, s: int, t: int, port: int) -> list:
        """Output ports from switch `s` to host `port` of switch `t`."""
        if t >= s:
            return [self._up(i) for i in range(s, t)] + [port]
        return [self._down(i) for i in range(s, t, -1)] + [port]

    def diameter(self) -> int:
        return max(self.placement) - min(self.placement) + 1

    def describe(self) -> dict:
        return {"topology": self.kind, "switches": self.nswitches}


def parse_grid(text) -> tuple:
    try:
        dims = tuple(int(d) for d in str(text).lower().split("x"))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise _einval(f"switch.grid is XxYxZ switches, each at least 1, not {text!r}")
    return dims


class Grid:
    """A 3D mesh of crossbars (LCI-A28) routed in dimension order (x, then y, then z)."""

    kind = "grid"
    NEIGHBOUR_PORTS = 6          # +x -x +y -y +z -z, kept on every switch

    def __init__(self, shape, ports: int, nnodes: int):
        self.ports = ports
        self.hosts = ports - self.NEIGHBOUR_PORTS
        if self.hosts < 1:
            raise _einval(f"a 3D grid needs switches of at least {self.NEIGHBOUR_PORTS + 1} ports, not {ports}")
        dims = list(parse_grid(shape))
        while dims[0] * dims[1] * dims[2] * self.hosts < nnodes:
            dims[dims.index(min(dims))] *= 2            # grow: double the first smallest dimension
        self.dims = tuple(dims)
        self.nswitches = dims[0] * dims[1] * dims[2]
        self.nnodes = nnodes

    def coords(self, s: int) -> tuple:
        x, y, z = self.dims
        return s % x, (s // x) % y, s // (x * y)

    def index(self, c) -> int:
        x, y, _ = self.dims
        return c[0] + x * (c[1] + y * c[2])

    def port(self, dim: int, step: int) -> int:
        return self.hosts + 2 * dim + (0 if step > 0 else 1)

    def cables(self):
        for s in range(self.nswitches):
            c = self.coords(s)
            for d in range(3):
                if c[d] + 1 < self.dims[d]:
                    n = list(c)
                    n[d] += 1
                    t = self.index(n)
                    yield s, self.port(d, +1), t, self.port(d, -1)

    def host_slots(self):
        return [(i // self.hosts, i % self.hosts) for i in range(self.nnodes)]

    def route(self, s: int, t: int, port: int) -> list:
        """Output ports from switch `s` to host `port` of switch `t`: x hops, y hops, z hops."""
        a, b = self.coords(s), self.coords(t)
        out = []
        for d in range(3):
            delta = b[d] - a[d]
            if delta:
                out += [self.port(d, delta)] * abs(delta)
        out.append(port)
        return out

    def diameter(self) -> int:
        """Switches on the longest route between two of the nodes (filling switches x fastest)."""
        used = -(-self.nnodes // self.hosts)
        x, y, _ = self.dims
        span_x = x - 1 if used > x else used - 1
        span_y = y - 1 if used > x * y else (used - 1) // x
        return span_x + span_y + (used - 1) // (x * y) + 1

    def describe(self) -> dict:
        return {"topology": self.kind, "switches": self.nswitches, "grid": "x".join(map(str, self.dims)),
                "hosts_per_switch": self.hosts}


class Clos:
    """A folded Clos (fat tree) of ``ports``-port crossbars, ``levels`` levels, up/down routed.

    Arithmetic with ``h = ports / 2``: a host's address is its leaf's number and its port
    on the leaf, read as digits p_{n-1} .. p_1 p_0 (p_{n-1} in [0, 2h), the others in
    [0, h)). A level-l switch (l below the top) is named by its subtree (p_{n-1} ..
    p_{l+1}) and the up choices c_0 .. c_{l-1} that lead to it; its ports 0..h-1 go
    down, h..2h-1 up; a top switch is named by its up choices alone and all its 2h
    ports go down. A route from leaf A to host p turns at the lowest level L whose
    subtree holds both: up through ports h + p_0, ..., h + p_{L-1}, then down through
    p_L, ..., p_1, and out of the leaf on p_0: 2L + 1 switches.
    """

    kind = "clos"

    def __init__(self, levels: int, ports: int, nnodes: int):
        if ports < 2 or ports % 2:
            raise _einval(f"a Clos network needs crossbars of an even number of ports, not {ports}")
        if levels < 1:
            raise _einval(f"switch.levels must be at least 1, not {levels}")
        self.ports = ports
        self.h = h = ports // 2
        while self._capacity(levels) < nnodes:
            levels += 1
            if 2 * levels - 1 > MAX_ROUTE_BYTES:
                raise _einval(f"{nnodes} nodes need a Clos deeper than routes of {MAX_ROUTE_BYTES} hops")
        self.levels = n = levels
        self.nleaves = 1 if n == 1 else 2 * h ** (n - 1)
        self.per_level = [self.nleaves] * (n - 1) + [1 if n == 1 else h ** (n - 1)]
        self.offset = [sum(self.per_level[:i]) for i in range(n)]
        self.nswitches = sum(self.per_level)
        self.nnodes = nnodes

    def _capacity(self, n):
        return 2 * self.h ** n

    def _switch(self, level, group, choice):
        top = level == self.levels - 1
        return self.offset[level] + (choice if top else group * self.h ** level + choice)

    def cables(self):
        h, n = self.h, self.levels
        for level in range(n - 1):
            groups = self.nleaves // h ** level
            for group in range(groups):
                for choice in range(h ** level):
                    s = self._switch(level, group, choice)
                    for u in range(h):
                        up_choice = choice + u * h ** level
                        if level + 1 == n - 1:
                            t, q = self._switch(level + 1, 0, up_choice), group
                        else:
                            t, q = self._switch(level + 1, group // h, up_choice), group % h
                        yield s, h + u, t, q

    def host_slots(self):
        ports_per_leaf = self.ports if self.levels == 1 else self.h
        if self.nnodes > self.nleaves * ports_per_leaf:
            raise _einval(f"{self.nnodes} nodes do not fit {self.nleaves} leaves")
        return [(i % self.nleaves, i // self.nleaves) for i in range(self.nnodes)]

    def route(self, s: int, t: int, port: int) -> list:
        """Output ports from leaf `s` to host `port` of leaf `t` (leaves are switches 0..)."""
        h = self.h
        if s == t or self.levels == 1:
            return [port]
        digits = [port]                      # p_0, p_1, ... of the destination
        g = t
        for _ in range(self.levels - 2):
            digits.append(g % h)
            g //= h
        digits.append(g)                     # p_{n-1}
        turn = self.levels - 1
        for level in range(1, self.levels - 1):
            if s // h ** level == t // h ** level:
                turn = level
                break
        return [h + digits[i] for i in range(turn)] + [digits[i] for i in range(turn, -1, -1)]

    def diameter(self) -> int:
        """Switches on the longest route between two of the nodes (striped over leaves 0..)."""
        used = min(self.nnodes, self.nleaves)
        if used <= 1:
            return 1
        turn = 1
        while turn < self.levels - 1 and used - 1 >= self.h ** turn:
            turn += 1
        return 2 * turn + 1

    def describe(self) -> dict:
        return {"topology": self.kind, "switches": self.nswitches, "levels": self.levels, "leaves": self.nleaves,
                "spines": self.per_level[-1]}


def make_topology(profile, nnodes: int):
    """The topology ``switch.topology`` names (a chain if the profile names none), sized for `nnodes`."""
    kind = str(profile.get("switch.topology", "chain"))
    ports = int(profile["switch.ports"])
    if ports > 0x7F:
        raise _einval("a route byte names at most 127 ports")
    def key(name):
        if name not in profile:
            raise _einval(f"a {kind} needs {name}, which profile {profile.name} does not have")
        return profile[name]
    if kind == "chain":
        topo = Chain(int(key("switch.hops")), ports, nnodes)
    elif kind == "grid":
        topo = Grid(key("switch.grid"), ports, nnodes)
    elif kind == "clos":
        topo = Clos(int(key("switch.levels")), ports, nnodes)
    else:
        raise _einval(f"switch.topology must be one of {', '.join(TOPOLOGIES)}, not {kind!r}")
    if topo.diameter() > MAX_ROUTE_BYTES:
        raise _einval(f"{nnodes} nodes on this {kind} are {topo.diameter()} switches apart; a route has at most "
                      f"{MAX_ROUTE_BYTES} bytes")
    return topo


class RouteTable(MutableMapping):
    """One NI's routes, node id -> route bytes, as the mapper loaded them.

    A route is computed by the topology's routing function the first time the NI needs
    it and kept, so a table costs nothing for destinations it never sends to. Reading it
    as a mapping (iteration, ``len``, ``in``) covers every destination; a route can be
    written or deleted by hand; ``used()`` is what the NI has asked for so far.
    """

    __slots__ = ("_route", "_nodes", "_cache", "_edited")

    def __init__(self, route, nodes):
        self._route = route             # callable(nid) -> bytes, or None for no such node
        self._nodes = nodes             # the destinations, as a range, keys view or collection
        self._cache = {}                # nid -> route bytes, or None once deleted
        self._edited = False            # a route written or deleted by hand

    def __getitem__(self, nid):
        try:
            r = self._cache[nid]
        except KeyError:
            r = self._route(nid) if nid in self._nodes else None
            if r is None:
                raise KeyError(nid) from None
            self._cache[nid] = r
        except TypeError:               # unhashable: no such node
            raise KeyError(nid) from None
        if r is None:
            raise KeyError(nid)
        return r

    def __setitem__(self, nid, route):
        self._cache[nid] = bytes(route)
        self._edited = True

    def __delitem__(self, nid):
        if nid not in self:
            raise KeyError(nid)
        self._cache[nid] = None
        self._edited = True

    def __contains__(self, nid):
        try:
            if nid in self._cache:
                return self._cache[nid] is not None
            return nid in self._nodes
        except TypeError:
            return False

    def __iter__(self):
        if not self._edited:
            # As the mapper loaded it: every destination (each NI of a 1024-node cluster
            # reads its table at insmod; a generator over it cost a second per cluster).
            return iter(self._nodes)
        return self._edited_iter()

    def _edited_iter(self):
        cache = self._cache
        for nid in self._nodes:
            if cache.get(nid, b"") is not None:
                yield nid
        for nid, r in list(cache.items()):
            if r is not None and nid not in self._nodes:
                yield nid

    def __len__(self):
        return len(self._nodes) if not self._edited else sum(1 for _ in self)

    def used(self) -> dict:
        return {nid: r for nid, r in self._cache.items() if r is not None}

    @property
    def known(self) -> dict:
        """The routes asked for or written so far (nid -> route bytes, None once deleted),
        the table's own dict: a driver that finds a route here needs no call per packet,
        and sees a re-route as soon as it is written."""
        return self._cache


class MyrinetFabric(Wire):
    """Switches and links between the LANai boards of a cluster (packets move in ``_fabric.Wire``)."""

    def __init__(self, engine, profile, rng=None):
        super().__init__(engine, 8.0 / profile["link.rate_bps"], profile["link.propagation_s"],
                         profile["switch.hop_s"], int(profile["link.crc_bytes"]), FaultInjector(profile, rng))
        self.profile = profile
        self.ports = int(profile["switch.ports"])
        self.topology = None
        self.nswitches = 0
        self.nis: dict = {}                     # nid -> LanaiNI
        self.where: dict = {}                   # nid -> (switch, port)

    # -- building the network and mapping it ----------------------------------------------

    def build(self, devices) -> None:
        """Cable the switches of the profile's topology, plug the boards in, map the routes."""
        topo = make_topology(self.profile, len(devices))
        self.topology = topo
        self.nswitches = topo.nswitches
        self.switch_out = [[None] * topo.ports for _ in range(topo.nswitches)]
        for s, p, t, q in topo.cables():
            self.switch_out[s][p] = Channel(f"sw{s}->sw{t}", False, t)
            self.switch_out[t][q] = Channel(f"sw{t}->sw{s}", False, s)
        for dev, (s, port) in zip(devices, topo.host_slots()):
            self.attach(dev, s, port)
        self.map_routes()

    def attach(self, ni, switch: int, port: int) -> None:
        nid = ni.nid
        if nid in self.nis:
            raise OSError(errno.EEXIST, f"myrinet: node {nid} is already on the network")
        if self.switch_out[switch][port] is not None:
            raise OSError(errno.EBUSY, f"myrinet: port {port} of switch {switch} is already cabled")
        self.nis[nid] = ni
        self.where[nid] = (switch, port)
        self.cable_in(ni, Channel(f"n{nid}->sw{switch}", False, switch))
        self.switch_out[switch][port] = Channel(f"sw{switch}->n{nid}", True, ni)
        ni.port = self

    def route(self, src: int, dst: int):
        """Route bytes from node `src`'s NI to node `dst`'s, or None if either is not cabled."""
        a = self.where.get(src)
        b = self.where.get(dst)
        if a is None or b is None:
            return None
        return bytes(ROUTE_BIT | p for p in self.topology.route(a[0], b[0], b[1]))

    def map_routes(self) -> None:
        """Load each NI's route table (routes are computed when first used)."""
        nodes = self.where.keys()
        for src, ni in self.nis.items():
            ni.route_table = RouteTable(self._router(src), nodes)

    def _router(self, src):
        route = self.route
        return lambda dst: route(src, dst)

    def path(self, route: bytes, src: int) -> list:
        """The channels a packet from node `src` with `route` holds, in order (ENETUNREACH if none)."""
        ch = self.inject_ch[src]
        chans = [ch]
        for b in route:
            if ch.to_ni or not b & ROUTE_BIT:
                raise OSError(errno.ENETUNREACH, f"myrinet: route {route.hex()} from node {src} leaves the network")
            outs = self.switch_out[ch.target]
            port = b & 0x7F
            if port >= len(outs) or outs[port] is None:
                raise OSError(errno.ENETUNREACH, f"myrinet: route {route.hex()} from node {src} names no cable")
            ch = outs[port]
            chans.append(ch)
        if not ch.to_ni:
            raise OSError(errno.ENETUNREACH, f"myrinet: route {route.hex()} from node {src} ends in a switch")
        return chans

    def check_deadlock_free(self, pairs=None):
        """The channel dependency graph of the loaded routes, searched for a cycle.

        A route that holds channel a while asking for b makes b depend on a; wormhole
        routing is deadlock-free iff that graph has no cycle (Dally and Seitz). Returns
        None when it is acyclic, else one cycle as a list of channel names. `pairs`
        (source, destination) defaults to every ordered pair of nodes.
        """
        if pairs is None:
            pairs = ((a, b) for a in self.nis for b in self.nis if a != b)
        succ: dict = {}
        for a, b in pairs:
            chans = self.path(self.nis[a].route_table[b], a)
            for x, y in zip(chans, chans[1:]):
                succ.setdefault(id(x), {})[id(y)] = y
        names = {}
        for outs in [list(self.inject_ch.values())] + self.switch_out:
            for ch in outs:
                if ch is not None:
                    names[id(ch)] = ch.name
        state: dict = {}                          # 1 on the stack, 2 done
        for root in list(succ):
            if state.get(root):
                continue
            stack = [(root, iter(succ.get(root, {})))]
            state[root] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                elif state.get(nxt) == 1:
                    cyc = [n for n, _ in stack]
                    return [names[n] for n in cyc[cyc.index(nxt):]] + [names[nxt]]
                elif not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, iter(succ.get(nxt, {}))))
        return None

    # -- statistics ---------------------------------------------------------------------

    def stats(self) -> dict:
        self.settle_channels()
        chans = {}
        for nid, ch in self.inject_ch.items():
            chans[ch.name] = ch.stats()
        for outs in self.switch_out:
            for ch in outs:
                if ch is not None:
                    chans[ch.name] = ch.stats()
        out = dict(self.topology.describe()) if self.topology else {"switches": 0}
        out.update(ports=self.ports, diameter_hops=self.topology.diameter() if self.topology else 0,
                   packets=self.packets, delivered=self.delivered, dropped=self.misrouted + self.lost,
                   misrouted=self.misrouted, lost=self.lost, ni_wait_us=self.ni_wait_s * 1e6,
                   faults=self.faults.stats(), links=chans)
        return out
