# cython: language_level=3, boundscheck=False, wraparound=False
"""Unicast (LCI-C04): a packet from its NI send buffer onto the link.

The send buffer has room for the longest route (one byte per switch, from the route
table the mapper loaded, HW-MYRI) right-aligned before LCI's Myrinet type and
header; the NI writes route and header -- with whatever the flow control piggybacks:
returned credits, sequence number, acknowledgement -- and programs the send DMA
engine from the first route byte. Control packets the NI makes itself (credits,
acknowledgements, retransmission requests) go out of a few small buffers of their own.

A cdef class (its counters C fields, its per-packet helpers C calls): it runs on every
packet, and at 1024 busy nodes the per-node state must stay small (docs/lci.md "Scale").
"""
from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L

__all__ = ["Unicast"]


cdef long PAYLOAD_OFF = L.ROUTE_MAX + W.TYPE_BYTES + W.HDR_BYTES      # in a send buffer


cdef class Unicast:
    payload_off = PAYLOAD_OFF

    def __init__(self, fw):
        self.fw = fw
        self.ctl_free = []

    def start(self):
        lay = self.fw.lay
        self.ctl_free = [lay["ctl_base"] + i * lay["ctl_bytes"] for i in range(L.CTL_BUFFERS)]
        self.ctl_waiting = []

    cdef long long _put(self, long long at, bytes route, long kind, long flags, long length, long credits, long seq,
                        long ack, long long aux) except? -1:
        """Route and header before the payload at `at` + ROUTE_MAX; returns the packet start."""
        fw = self.fw
        ni = fw.ni
        cdef long long start = at + L.ROUTE_MAX - len(route)
        ni.write(start, route)
        W.write_header(ni.sram_view, at + L.ROUTE_MAX, kind, flags, ni.nid, length, credits, seq, ack, aux)
        return start

    def xmit(self, peer, pkt, bint again=False, long desc=-1):
        fw = self.fw
        c = fw.c
        slot = pkt.slot
        if slot is not None:
            if slot.busy:
                # The buffer's header area is on its way out to another child (multicast):
                # this send goes when that one has left (the callers checked, but a
                # retransmission may not have).
                slot.wait(peer, pkt)
                return
            slot.busy = True
        credits, seq, ack, flags, extra = fw.flow.on_xmit(peer, pkt, again)
        yield c.ni_xmit + extra
        wire = pkt.flags & L.SDF_WIRE_MASK
        if wire:
            kind = wire >> L.SDF_WIRE_SHIFT
        else:
            kind = W.K_RCPY if pkt.kind == L.SD_RCPY else W.K_MCAST if pkt.kind == L.SD_MCAST else W.K_DATA
        start = self._put(pkt.buf, peer.route, kind, flags | (pkt.flags & L.SDF_NOTIFY and W.F_NOTIFY),
                          pkt.length, credits, seq, ack, pkt.aux)
        # Each transmission completes its own descriptor: the first the host's send, a
        # retransmission I-hrx's RETX (I-nirx's go-back has none; its send completes on
        # the acknowledgement). Completing per transmission, not per buffer, keeps a RETX
        # that overtakes a first transmission still queued for the wire from stealing
        # that one's completion (the host would wait for it forever).
        done = pkt.desc if not again else desc
        fw.ni.net_send(start, pkt.buf + PAYLOAD_OFF + pkt.length - start, fw.sendq.on_sent, (pkt, done))

    def send_ctl(self, peer, long kind, long credits=0, long seq=0, long ack=0):
        """An NI-made control packet to `peer` (no payload)."""
        fw = self.fw
        yield fw.c.ni_ack_send
        if not self.ctl_free:
            # All control buffers are on the wire: this one waits for the first to leave.
            self.ctl_waiting.append((peer, kind, credits, seq, ack))
            return
        at = self.ctl_free.pop()
        flags = W.F_HAS_ACK if kind == W.K_ACK and fw.reliability != "none" else 0
        start = self._put(at, peer.route, kind, flags, 0, credits, seq, ack, 0)
        if kind == W.K_NACK:
            fw.counters["nacks_sent"] += 1
        else:
            fw.counters["acks_sent"] += 1
        fw.ni.net_send(start, at + L.ROUTE_MAX + W.TYPE_BYTES + W.HDR_BYTES - start, self.on_ctl_sent, at)

    def on_ctl_sent(self, at):
        self.ctl_free.append(at)
        if self.ctl_waiting:
            peer, kind, credits, seq, ack = self.ctl_waiting.pop(0)
            yield from self.send_ctl(peer, kind, credits, seq, ack)
