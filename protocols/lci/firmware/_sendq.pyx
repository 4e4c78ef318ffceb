# cython: language_level=3, boundscheck=False, wraparound=False
"""Send Queue Mgt (LCI-C04, C05): what waits for the flow control, and send completions.

A packet whose data is in its NI send buffer goes out at once if the flow control
lets it (a credit, or room in the window) and nothing to the same destination waits
before it; otherwise it joins that destination's queue, in order. Queued packets go
out during acknowledgement processing, as credits or acknowledgements come back.

A send completion tells the host that a descriptor is done -- for the base protocol
also that its send buffer is free again, "as soon as it has been transmitted" (no
retransmission, LCI-C05); with the NI's retransmission only once acknowledged. Sends
to different destinations complete out of order, so completions are a queue: a ring
of records in host memory, each DMA'd from its own staging word in SRAM.

A cdef class (its counters C fields, its per-packet helpers C calls): it runs on every
packet, and at 1024 busy nodes the per-node state must stay small (docs/lci.md "Scale").
"""
from protocols.lci.firmware import layout as L

__all__ = ["SendQueue"]


cdef class SendQueue:
    def __init__(self, fw):
        self.fw = fw
        self.cpl_prod = 0

    def start(self):
        self.cpl_prod = 0

    def ready(self, peer, pkt):
        fw = self.fw
        if peer.blocked or not fw.flow.may_send(peer) or (pkt.slot is not None and pkt.slot.busy):
            fw.counters["blocked"] += 1
            peer.blocked.append(pkt)
            if pkt.slot is not None and pkt.slot.busy and len(peer.blocked) == 1:
                pkt.slot.wait(peer)
            return
        yield from fw.unicast.xmit(peer, pkt)

    def unblock(self, peer):
        """Acknowledgement processing: send what the flow control now admits (a multicast
        packet whose shared buffer is going out to another child waits for it, LCI-C10)."""
        fw = self.fw
        while peer.blocked and fw.flow.may_send(peer):
            slot = peer.blocked[0].slot
            if slot is not None and slot.busy:
                slot.wait(peer)
                return
            yield from fw.unicast.xmit(peer, peer.blocked.popleft())

    def resend(self, peer, pkt, long desc=-1):
        """Send a packet still held in its send buffer again (I-hrx's RETX, whose descriptor
        is `desc`; I-nirx's go-back, which has none)."""
        fw = self.fw
        fw.counters["retransmitted"] += 1
        yield from fw.unicast.xmit(peer, pkt, again=True, desc=desc)

    def on_sent(self, sent):
        """The send DMA engine has put a packet on the wire: `sent` is (packet, the
        descriptor this transmission completes or -1)."""
        fw = self.fw
        pkt, desc = sent
        yield fw.c.ni_txdone
        fw.counters["sent"] += 1
        if pkt.slot is not None:
            yield from fw.multicast.slot_free(pkt.slot)
        if desc >= 0 and not fw.flow.keeps(pkt):
            yield from self.done(pkt, desc)

    def done(self, pkt, desc=None):
        """A packet's send is over for good (sent; with I-nirx, acknowledged)."""
        if pkt.slot is None:
            self.complete(pkt.desc if desc is None else desc)
        else:
            yield from self.fw.multicast.unref(pkt.slot)

    cpdef complete(self, long desc):
        """Queue a send completion for descriptor `desc` (DMA'd into the host's ring)."""
        fw = self.fw
        ni = fw.ni
        cdef long slot = self.cpl_prod % fw.cpl_slots
        self.cpl_prod += 1
        stage = fw.lay["cpl_stage"] + 4 * (slot % fw.nsd)
        ni.wr32(stage, L.CPL_VALID | desc)
        ni.host_dma(True, fw.cpl_ring + 4 * slot, stage, 4)
