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

The topology is a chain of crossbar switches (``switch.hops`` of them, ``switch.ports``
ports each) with the nodes spread along it so that the first and the last node are
``switch.hops`` switches apart; with one switch every pair is one hop apart. Routes on
a chain never turn back, so they are deadlock-free, which Myrinet requires.

The *mapper* (``map_routes``) explores the switch graph breadth-first from each node
and writes, into each NI's route table, the route bytes to every node: the role of
Myricom's mapper, which loads per-node routes into the NIs (HW-MYRI). Drivers read
routes from their NI and put them into the packets they send.

Timing of one packet of ``n`` bytes (route, type, payload, plus the CRC trailer): its
head reaches a switch one propagation delay after leaving the previous element, leaves
it ``switch.hop_s`` later if the output link is free, and reaches the receiving NI; if
the NI accepts at time ``a``, the tail arrives at ``a + n / rate`` and each link is
released as the tail passes its far end. Each packet goes through the fault injector
when its tail arrives (loss, a corrupted byte that fails the NI's CRC check,
duplication, a hold-back that lets later packets pass).

A packet's whole path is not reserved at once: each output port is granted in the order
heads ask for it, as the switch's arbiter does.
"""
from __future__ import annotations

import errno
from collections import deque

from kernelsim.media.faults import FaultInjector

__all__ = ["MyrinetFabric", "chain_placement"]

ROUTE_BIT = 0x80


class _Channel:
    """One direction of one link, with the output port that drives it."""

    __slots__ = ("name", "to_ni", "target", "busy", "waiters", "packets", "bytes", "busy_s", "t_acq",
                 "waits", "wait_s")

    def __init__(self, name, to_ni, target):
        self.name = name
        self.to_ni = to_ni          # True: the far end is an NI; else a switch index
        self.target = target
        self.busy = False
        self.waiters = deque()
        self.packets = 0
        self.bytes = 0
        self.busy_s = 0.0
        self.t_acq = 0.0
        self.waits = 0
        self.wait_s = 0.0

    def stats(self):
        return {"packets": self.packets, "bytes": self.bytes, "busy_us": self.busy_s * 1e6,
                "waits": self.waits, "wait_us": self.wait_s * 1e6}


class _Packet:
    __slots__ = ("data", "pos", "src", "token", "chans", "want", "dur", "t_ask", "nbytes")


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


class MyrinetFabric:
    """Switches and links between the LANai boards of a cluster."""

    def __init__(self, engine, profile, rng=None):
        self.engine = engine
        self.faults = FaultInjector(profile, rng)
        self.byte_s = 8.0 / profile["link.rate_bps"]
        self.prop_s = profile["link.propagation_s"]
        self.crc_bytes = int(profile["link.crc_bytes"])
        self.hop_s = profile["switch.hop_s"]
        self.nswitches = int(profile["switch.hops"])
        self.ports = int(profile["switch.ports"])
        if self.ports > 0x7F:
            raise OSError(errno.EINVAL, "myrinet: a route byte names at most 127 ports")
        self.switch_out: list[list] = []        # switch -> port -> output _Channel (or None)
        self.nis: dict = {}                     # nid -> LanaiNI
        self.inject_ch: dict = {}               # nid -> _Channel NI -> switch
        self.where: dict = {}                   # nid -> (switch, port)
        self.packets = 0
        self.delivered = 0
        self.misrouted = 0
        self.lost = 0
        self.ni_wait_s = 0.0

    # -- building the network and mapping it ----------------------------------------------

    def build(self, devices) -> None:
        n = len(devices)
        placement = chain_placement(n, self.nswitches, self.ports)
        self.switch_out = [[None] * self.ports for _ in range(self.nswitches)]
        for s in range(self.nswitches):
            if s + 1 < self.nswitches:
                self.switch_out[s][self._up_port(s)] = _Channel(f"sw{s}->sw{s + 1}", False, s + 1)
            if s > 0:
                self.switch_out[s][self._down_port(s)] = _Channel(f"sw{s}->sw{s - 1}", False, s - 1)
        free = [[p for p in range(self.ports) if p not in self._chain_ports(s)] for s in range(self.nswitches)]
        for dev, s in zip(devices, placement):
            port = free[s].pop(0)
            self.attach(dev, s, port)
        self.map_routes()

    def _chain_ports(self, s):
        out = set()
        if s + 1 < self.nswitches:
            out.add(self._up_port(s))
        if s > 0:
            out.add(self._down_port(s))
        return out

    def _up_port(self, s):
        return self.ports - 1

    def _down_port(self, s):
        return self.ports - 1 if s == self.nswitches - 1 else self.ports - 2

    def attach(self, ni, switch: int, port: int) -> None:
        nid = ni.nid
        if nid in self.nis:
            raise OSError(errno.EEXIST, f"myrinet: node {nid} is already on the network")
        self.nis[nid] = ni
        self.where[nid] = (switch, port)
        self.inject_ch[nid] = _Channel(f"n{nid}->sw{switch}", False, switch)
        self.switch_out[switch][port] = _Channel(f"sw{switch}->n{nid}", True, ni)
        ni.port = self

    def map_routes(self) -> None:
        """Breadth-first search of the switch graph from every node: each NI's route table."""
        neighbours = [[(p, ch.target) for p, ch in enumerate(outs) if ch is not None and not ch.to_ni]
                      for outs in self.switch_out]
        for src, ni in self.nis.items():
            s0 = self.where[src][0]
            first_port = {s0: []}
            queue = deque([s0])
            while queue:
                s = queue.popleft()
                for port, t in neighbours[s]:
                    if t not in first_port:
                        first_port[t] = first_port[s] + [port]
                        queue.append(t)
            table = {}
            for dst, (s, port) in self.where.items():
                if s in first_port:
                    table[dst] = bytes(ROUTE_BIT | p for p in first_port[s] + [port])
            ni.route_table = table

    # -- a packet's way through ------------------------------------------------------------

    def inject(self, ni, data: bytes, token) -> None:
        """The send DMA engine of `ni` starts streaming `data` (route first) now."""
        p = _Packet()
        p.data = data
        p.pos = 0
        p.src = ni
        p.token = token
        p.nbytes = len(data) + self.crc_bytes
        p.dur = p.nbytes * self.byte_s
        p.chans = []
        ch = self.inject_ch.get(ni.nid)
        self.packets += 1
        if ch is None:                       # not cabled: the bits go nowhere
            self.engine.after(p.dur, self._sender_done, p)
            self.lost += 1
            return
        p.want = ch
        self._take(ch, p)
        self.engine.after(self.prop_s, self._at_switch, p)

    def _take(self, ch, p) -> None:
        ch.busy = True
        ch.t_acq = self.engine.now
        ch.packets += 1
        ch.bytes += p.nbytes
        p.chans.append(ch)

    def _at_switch(self, p) -> None:
        s = p.want.target
        data = p.data
        if p.pos >= len(data) or not data[p.pos] & ROUTE_BIT:
            self._misroute(p)
            return
        port = data[p.pos] & 0x7F
        outs = self.switch_out[s]
        if port >= len(outs) or outs[port] is None:
            self._misroute(p)
            return
        p.pos += 1
        p.want = outs[port]
        self.engine.after(self.hop_s, self._ask, p)

    def _ask(self, p) -> None:
        ch = p.want
        if ch.busy:
            ch.waits += 1
            p.t_ask = self.engine.now
            ch.waiters.append(p)
            return
        self._take(ch, p)
        self._forward(p)

    def _forward(self, p) -> None:
        if p.want.to_ni:
            self.engine.after(self.prop_s, self._at_ni, p)
        else:
            self.engine.after(self.prop_s, self._at_switch, p)

    def _release(self, ch) -> None:
        ch.busy = False
        ch.busy_s += self.engine.now - ch.t_acq
        if ch.waiters:
            p = ch.waiters.popleft()
            ch.wait_s += self.engine.now - p.t_ask
            self._take(ch, p)
            self._forward(p)

    def _at_ni(self, p) -> None:
        ni = p.want.target
        if ni.net_head():
            self._stream(p)
        else:
            p.t_ask = self.engine.now
            ni.rx_wait(self._granted, p)

    def _granted(self, p) -> None:
        self.ni_wait_s += self.engine.now - p.t_ask
        self._stream(p)

    def _stream(self, p) -> None:
        """The receiving NI takes the packet: the tail follows at link rate."""
        now = self.engine.now
        tail = now + p.dur
        k = len(p.chans)
        per_hop = self.hop_s + self.prop_s
        eng = self.engine
        for i, ch in enumerate(p.chans):
            if i == 0:
                continue
            t = tail - (k - 1 - i) * per_hop
            eng.at(t if t > now else now, self._release, ch)
        t0 = tail - (k - 1) * per_hop - self.prop_s
        eng.at(t0 if t0 > now else now, self._sender_done, p)
        eng.at(tail, self._tail, p)

    def _sender_done(self, p) -> None:
        if p.chans and p.chans[0] is self.inject_ch.get(p.src.nid):
            self._release(p.chans[0])
        p.src.net_sent(p.token)

    def _tail(self, p) -> None:
        ni = p.want.target
        data = p.data[p.pos:]
        copies = self.faults.apply(data) if self.faults.active else ((data, 0.0, True),)
        now_done = False
        for d, delay, ok in copies:
            if not now_done and delay == 0.0:
                now_done = True
                self.delivered += 1
                ni.net_tail(d, ok)
            else:
                self.engine.after(delay, self._direct, (ni, d, ok))
        if not now_done:
            if not copies:
                self.lost += 1
            ni.net_abort()                 # nothing stored: the armed buffer stays armed

    def _direct(self, item) -> None:
        """A fault's extra or held-back copy presents itself at the NI again."""
        ni, d, ok = item
        if ni.net_head():
            self.engine.after((len(d) + self.crc_bytes) * self.byte_s, self._direct_tail, item)
        else:
            ni.rx_wait(self._direct_granted, item)

    def _direct_granted(self, item) -> None:
        ni, d, ok = item
        self.engine.after((len(d) + self.crc_bytes) * self.byte_s, self._direct_tail, item)

    def _direct_tail(self, item) -> None:
        ni, d, ok = item
        self.delivered += 1
        ni.net_tail(d, ok)

    def _misroute(self, p) -> None:
        """A bad route byte: the switch discards the packet as it streams in."""
        self.misrouted += 1
        now = self.engine.now
        for ch in p.chans[1:]:
            self.engine.at(now + p.dur, self._release, ch)
        self.engine.at(now + p.dur, self._sender_done, p)

    # -- statistics ---------------------------------------------------------------------

    def stats(self) -> dict:
        chans = {}
        for nid, ch in self.inject_ch.items():
            chans[ch.name] = ch.stats()
        for outs in self.switch_out:
            for ch in outs:
                if ch is not None:
                    chans[ch.name] = ch.stats()
        return {"switches": self.nswitches, "ports": self.ports, "packets": self.packets,
                "delivered": self.delivered, "dropped": self.misrouted + self.lost,
                "misrouted": self.misrouted, "lost": self.lost, "ni_wait_us": self.ni_wait_s * 1e6,
                "faults": self.faults.stats(), "links": chans}
