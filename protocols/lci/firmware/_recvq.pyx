# cython: language_level=3, boundscheck=False, wraparound=False
"""Recv Queue Mgt and Recv Dispatch (LCI-C04): the receive DMA engine and what follows it.

The receive DMA engine is kept armed with a free buffer of the receive pool (LCI-A34,
A35). When the pool is empty the base protocol leaves the engine unarmed -- its credits
make that momentary, and Myrinet's flow control holds the packet in the network
(LCI-C25) -- while the retransmitting variants arm a scratch buffer and drop what lands
there (LCI-C12/C13: "the receiving NI drops packets for which it has no buffer").

Each packet is checked -- Myrinet type, kind, length, a sender the route table knows --
and dropped and counted by reason if anything is wrong; then dispatched on its kind
through a table, so that further kinds (multicast forwarding, fetch-and-add: LCI-C10,
C11) are one `register` each.

A cdef class: it runs once or more on every packet, and its state (the free list, the
drop buffer, the armed flag) sits in C fields of one object rather than behind
instance-dict lookups (docs/lci.md "Scale").
"""
from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L
from protocols.lci.firmware._records cimport known_peer

__all__ = ["RecvQueue"]


cdef class RecvQueue:
    def __init__(self, fw):
        self.fw = fw
        self.free = []
        self.dispatch = {}

    def start(self):
        fw = self.fw
        lay = fw.lay
        step = lay["rx_bytes"]
        base = lay["rx_base"] + L.RX_HEADROOM       # a route fits before each (forwarding in place)
        self.buffers = [base + i * step for i in range(fw.pool)]
        self.drop_buf = base + fw.pool * step
        self.cap = step - 4 - L.RX_HEADROOM         # room for the length word DMA'd after a packet
        self.free = list(reversed(self.buffers))
        self.armed_drop = False
        self.dispatch = {W.K_DATA: self.on_data, W.K_ACK: self.on_ack, W.K_NACK: self.on_nack,
                         W.K_RCPY: self.on_rcpy}
        self.arm()

    def register(self, int kind, handler):
        """Another packet kind: `handler(peer, buf, n)` is a generator run on the NI."""
        self.dispatch[kind] = handler

    cpdef arm(self):
        ni = self.fw.ni
        if ni.rx_armed and not (self.armed_drop and self.free):
            return
        if self.free:
            ni.rx_arm(self.free.pop(), self.cap)
            self.armed_drop = False
        elif self.fw.flow.drops_when_full:
            ni.rx_arm(self.drop_buf, self.cap)
            self.armed_drop = True

    def release(self, long long buf):
        """A pool buffer is free again (its packet is in host memory, or was dropped)."""
        if buf != self.drop_buf:
            self.free.append(buf)
        self.arm()
        yield from self.fw.flow.buffer_freed()

    def on_packet(self, pkt):
        cdef long long off
        cdef long n
        off, n = pkt
        fw = self.fw
        ni = fw.ni
        self.armed_drop = False
        self.arm()
        yield fw.c.ni_recv
        fw.counters["received"] += 1
        hdr = fw.hdr
        err = hdr.parse(ni.sram_view, off, n, fw.mtu)
        if fw.aborted is not None:
            yield from self.release(off)
            return
        if err:
            fw.malformed[W.REASONS[err]] += 1
            yield from self.release(off)
            return
        handler = self.dispatch.get(hdr.kind)
        peer = known_peer(fw, hdr.src)
        if peer is None or handler is None:
            fw.malformed["bad_source" if peer is None else "unknown_kind"] += 1
            yield from self.release(off)
            return
        if off == self.drop_buf:
            yield from fw.flow.no_buffer(peer, hdr)
            return
        if not ni.rd32(L.CB_ACCEPT):
            # No LCI process behind this NI yet (a real node before its script opened LCI):
            # nothing is accepted or acknowledged, so the sender's retransmission -- or
            # I-sdma's stall error -- sees the packet lost, not swallowed.
            fw.counters["dropped_no_process"] += 1
            yield from self.release(off)
            return
        yield from handler(peer, off, n)

    # -- the kinds every variant knows ---------------------------------------------------------

    def on_data(self, peer, buf, n):
        fw = self.fw
        ok = yield from fw.flow.on_data(peer, fw.hdr)
        if ok:
            fw.tohost.deliver(peer, buf, n)
            yield from fw.flow.accepted(peer)       # its DMA is under way: acknowledge meanwhile
        else:
            yield from self.release(buf)

    def on_ack(self, peer, buf, n):
        fw = self.fw
        up = yield from fw.flow.on_ack(peer, fw.hdr)
        if up:
            fw.tohost.deliver(peer, buf, n)
        else:
            yield from self.release(buf)

    def on_nack(self, peer, buf, n):
        yield from self.fw.flow.on_nack(peer, self.fw.hdr)
        yield from self.release(buf)

    def on_rcpy(self, peer, buf, n):
        fw = self.fw
        ok = yield from fw.flow.on_data(peer, fw.hdr)
        if ok:
            yield from fw.ntlb.on_rcpy(peer, buf, n, fw.hdr)
            yield from fw.flow.accepted(peer)
        else:
            yield from self.release(buf)
