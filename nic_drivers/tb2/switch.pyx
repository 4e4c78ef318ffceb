# cython: language_level=3, annotation_typing=False, binding=True
"""The SP high-performance switch, modeled: what carries TB2 packets between nodes.

An SP switch board is built from 8-port switch chips in two stages: node-side chips
with a few nodes each and links up to every chip of the other stage, so a packet from
any node to any other can take one of four routes -- one per middle chip (SP-A11).
Each chip passes a packet's head on after a short delay (the whole board about
500 ns, SP-A12) and every link carries about 40 MB/s (SP-A13): a full 256-byte packet
occupies a link for 6.4 µs.

What is modeled: per packet, the links of its route -- the node's link into the
board, the node chip's link up to the route's middle chip, that chip's link down to
the destination's node chip, and the link out to the destination adapter. Each link
carries one packet at a time; a packet whose head finds a link busy waits in the chip
(the chips buffer packets, so a blocked packet does not hold the links behind it:
virtual cut-through). The route is read from the packet header, as the adapter wrote
it; a packet for a node that is not on the switch is dropped and counted. Every
packet passes through the seeded fault injector once; a corrupted one arrives with a
bad CRC, which the receiving adapter checks.
"""
from __future__ import annotations

import errno

from kernelsim.media.faults import FaultInjector
from kernelsim.media.faults cimport faults_active
from kernelsim._engine cimport Engine, EventTarget
from cpython.bytes cimport PyBytes_AS_STRING
from nic_drivers.tb2._model cimport Tb2Adapter, Tb2Port

__all__ = ["Tb2Switch", "SwitchPort"]


cdef class _Link:
    cdef readonly str name
    cdef readonly double free_at, busy_s
    cdef readonly long long packets, bytes, waits

    def __init__(self, name: str):
        self.name = name
        self.free_at = 0.0
        self.packets = 0
        self.bytes = 0
        self.busy_s = 0.0
        self.waits = 0

    cpdef double take(self, double head, double wire, Py_ssize_t nbytes):
        """The packet's head reaches this link at `head`: when does it start across it?"""
        start = head if head >= self.free_at else self.free_at
        if start > head:
            self.waits += 1
        self.free_at = start + wire
        self.packets += 1
        self.bytes += nbytes
        self.busy_s += wire
        return start

    def stats(self) -> dict:
        return {"packets": self.packets, "bytes": self.bytes, "busy_us": self.busy_s * 1e6, "waits": self.waits}


cdef class SwitchPort(Tb2Port):
    """A node's attachment to the board: what its adapter's MSMU drives."""

    cdef readonly Tb2Switch switch
    cdef readonly int nid
    cdef public object device
    cdef readonly _Link inject, eject
    cdef list _up_links, _down_links        # by route: this node's chip up, down to it

    def __init__(self, Tb2Switch switch, int nid):
        self.switch = switch
        self.nid = nid
        self.device = None
        self.inject = _Link(f"node{nid}->board")
        self.eject = _Link(f"board->node{nid}")
        self._up_links = [None] * switch.routes
        self._down_links = [None] * switch.routes

    def transmit(self, packet: bytes, t: float, ready: float = 0.0) -> tuple[float, float]:
        """Send `packet` no earlier than `t`, and so that its last byte leaves no earlier
        than `ready` (when the adapter's DMA has brought it all in: cut-through);
        (start, end) on the node's own link."""
        return self.switch._send(self, packet, t, ready)

    cdef int send(self, bytes packet, double t, double ready, double* start, double* end) except -1:
        return self.switch._send_c(self, packet, t, ready, start, end)

    cdef int on_event(self, int what, object item) except -1:
        """A packet's last byte reaches the adapter (one engine event, bound once).
        `what` 1: `item` is the packet, its CRC good; 0: a (packet, crc_ok) pair."""
        if what == 1:
            if type(self.device) is Tb2Adapter:
                (<Tb2Adapter> self.device)._rx_bytes(item, True)
            elif self.device is not None:
                self.device.rx_frame(item, True)
            return 0
        if self.device is not None:
            if type(self.device) is Tb2Adapter:
                if type(item[0]) is bytes:
                    (<Tb2Adapter> self.device)._rx_bytes(item[0], item[1])
                else:
                    # (its Python call: a C call's buffer views would be set up on every event)
                    self.device.rx_frame(item[0], item[1])
            else:
                self.device.rx_frame(item[0], item[1])
        return 0

    def _arrive(self, item) -> None:
        self.on_event(0, item)


cdef class Tb2Switch:
    cdef readonly Engine engine
    cdef public object faults
    cdef readonly double byte_s, chip_s
    cdef readonly int routes, per_chip
    cdef readonly dict ports, up, down
    cdef list _port_at                          # `ports` as a list by node id (None: no port)
    cdef readonly long long misrouted, delivered

    def __init__(self, Engine engine, profile, rng=None):
        self.engine = engine
        self.faults = FaultInjector(profile, rng)
        rate = profile["switch.link_Bps"]
        if rate <= 0:
            raise OSError(errno.EINVAL, "switch.link_Bps must be positive")
        self.byte_s = 1.0 / rate
        self.routes = max(1, int(profile["switch.routes"]))
        self.per_chip = max(1, int(profile["switch.nodes_per_chip"]))
        # Three chips on every route (node chip, middle chip, node chip) share the
        # board's hardware latency.
        self.chip_s = profile["switch.latency_s"] / 3.0
        self.ports = {}             # node id -> SwitchPort
        self._port_at = []
        self.up = {}                # (node chip, route) -> _Link
        self.down = {}              # (route, node chip) -> _Link
        self.misrouted = 0
        self.delivered = 0

    def attach(self, int nid, device) -> SwitchPort:
        if nid in self.ports:
            raise OSError(errno.EEXIST, f"switch port {nid} is already attached")
        port = SwitchPort(self, nid)
        port.device = device
        device.port = port
        self.ports[nid] = port
        if nid >= 0:
            if nid >= len(self._port_at):
                self._port_at.extend([None] * (nid + 1 - len(self._port_at)))
            self._port_at[nid] = port
        return port

    def _link(self, table: dict, key: tuple, name: str) -> _Link:
        link = table.get(key)
        if link is None:
            link = table[key] = _Link(name)
        return link

    cdef _Link _up(self, int a, int route):
        link = self.up.get((a, route))
        if link is None:                         # named once, when first used
            link = self._link(self.up, (a, route), f"chip{a}->mid{route}")
        return link

    cdef _Link _down(self, int route, int b):
        link = self.down.get((route, b))
        if link is None:
            link = self._link(self.down, (route, b), f"mid{route}->chip{b}")
        return link

    cpdef tuple _send(self, SwitchPort src, bytes packet, double t, double ready=0.0):
        cdef double start, end
        self._send_c(src, packet, t, ready, &start, &end)
        return start, end

    cdef int _send_c(self, SwitchPort src, bytes packet, double t, double ready, double* start_out,
                     double* end_out) except -1:
        """`_send` by C call: (start, end) on the node's own link in `start_out`, `end_out`."""
        cdef Py_ssize_t n = len(packet)
        cdef const unsigned char* p = <const unsigned char*> PyBytes_AS_STRING(packet)
        cdef double wire, start, end, head, arrive, delay
        cdef int dst, route, a, b
        cdef SwitchPort port
        cdef _Link up, down
        wire = n * self.byte_s
        if ready - wire > t:
            t = ready - wire                     # the link would run dry before the last byte is in
        start = src.inject.take(t, wire, n)
        end = start + wire
        start_out[0] = start
        end_out[0] = end
        dst = (p[0] << 8) | p[1] if n >= 3 else -1
        # (the ports by index: a dictionary lookup boxed the node id of every packet)
        if 0 <= dst < len(self._port_at):
            port = self._port_at[dst]
        else:
            port = self.ports.get(dst) if dst < 0 else None
        if port is None:
            self.misrouted += 1
            return 0
        route = p[2] % self.routes
        # The route's links, found once per (node, route) and kept on the ports.
        up = src._up_links[route]
        if up is None:
            up = src._up_links[route] = self._up(src.nid // self.per_chip, route)
        down = port._down_links[route]
        if down is None:
            down = port._down_links[route] = self._down(route, dst // self.per_chip)
        head = up.take(start + self.chip_s, wire, n)
        head = down.take(head + self.chip_s, wire, n)
        head = port.eject.take(head + self.chip_s, wire, n)
        arrive = head + wire                     # the last byte is in the adapter
        self.delivered += 1
        if faults_active(self.faults):
            for data, delay, ok in self.faults.apply(packet):
                self.engine.post(arrive + delay, port, 0, (data, ok))
        else:
            self.engine.post(arrive, port, 1, packet)
        return 0

    def stats(self) -> dict:
        links = {}
        for p in self.ports.values():
            links[p.inject.name] = p.inject.stats()
            links[p.eject.name] = p.eject.stats()
        for link in list(self.up.values()) + list(self.down.values()):
            links[link.name] = link.stats()
        return {"ports": len(self.ports), "routes": self.routes, "delivered": self.delivered,
                "misrouted": self.misrouted, "faults": self.faults.stats(), "links": links}
