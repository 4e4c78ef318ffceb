"""Host Send Queue Mgt (LCI-C04): the NI side of the send descriptor ring.

The host writes a descriptor into the next slot of the ring in SRAM and sets its valid
bit; the control program's event loop finds it (one pass per descriptor, so arriving
packets are looked at in between), takes it, and gets the packet's data into the NI
send buffer the descriptor names:

* SDMA (LCI-C05): a host DMA from the host-resident packet queue the library copied
  the data into (LCI-C06);
* PIO (LCI-C15): nothing -- the host wrote the data into the send buffer itself;
* RCPY (LCI-C16): an NTLB lookup of the source's virtual page, then a host DMA from
  its physical address; on a send-side miss the host wrote the data by PIO and the
  descriptor carries the new mapping, which the NI installs now that every earlier
  hit on the old one has been processed (LCI-C18).

Then the packet goes to the send queue -- in the order the host gave the descriptors
to each destination (LCI-C02: FIFO per sender), even when a later packet's data is
in place before an earlier one's (RCPY: a send-side miss came by PIO while a hit is
still being fetched): each destination's packets wait in `peer.staging`, in
descriptor order, until the ones before them are in their buffers. I-hrx's own descriptors (an explicit ack, the
retransmission of a packet still held in its send buffer) go straight to the send
queue. A multicast descriptor (``SD_MCAST``) puts one send per child into that child's
staging queue the same way, so unicast and multicast from one host keep their order.
"""
from __future__ import annotations

from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L

__all__ = ["HostSendQueue"]


class HostSendQueue:
    def __init__(self, fw):
        self.fw = fw
        self.seen = 0
        self.looking = False

    def start(self) -> None:
        self.seen = 0
        self.looking = False
        ni = self.fw.ni
        for i in range(self.fw.nsd):
            ni.watch(L.SD_BASE + i * L.SD_BYTES, self.on_doorbell)

    def _slot(self) -> int:
        return L.SD_BASE + (self.seen % self.fw.nsd) * L.SD_BYTES

    def on_doorbell(self, _off):
        """One pass of the event loop over the send queue: take one descriptor."""
        fw = self.fw
        ni, c = fw.ni, fw.c
        if fw.aborted is not None:
            return
        d = self._slot()
        w0 = ni.rd32(d)
        if not w0 & L.SD_VALID:
            return
        yield c.ni_poll + c.ni_desc
        ni.wr32(d, 0)
        index = self.seen % fw.nsd
        self.seen += 1
        if ni.rd32(self._slot()) & L.SD_VALID:
            ni.post(self.on_doorbell, 0)              # more are waiting: another pass
        fw.counters["descriptors"] += 1
        kind = (w0 >> 24) & 0x7F
        flags = (w0 >> 16) & 0xFF
        length = w0 & 0xFFFF
        w1 = ni.rd32(d + 4)
        dest, buf = w1 >> 16, w1 & 0xFFFF
        if kind == L.SD_MCAST:
            yield from fw.multicast.on_descriptor(index, flags, length, buf, d)
            return
        peer = fw.peer(dest)
        if kind not in L.SD_KINDS or peer is None or length > fw.mtu \
                or (kind != L.SD_ACK and buf >= fw.nsend) or fw.flow.refuses(kind):
            fw.counters["bad_descriptors"] += 1
            fw.sendq.complete(index)
            return
        seq_ack = ni.rd32(d + 16)
        if kind == L.SD_ACK:
            fw.sendq.complete(index)
            yield from fw.unicast.send_ctl(peer, W.K_ACK, ack=seq_ack & 0xFFFF)    # the host's acknowledgement
            return
        pkt = fw.tx[buf]
        if kind == L.SD_RETX:
            # The retransmission is a descriptor of its own, completed when it has gone;
            # the buffer's first transmission may still be waiting for the wire, and
            # keeps its own descriptor.
            pkt.ack = seq_ack & 0xFFFF
            yield from fw.sendq.resend(peer, pkt, index)
            return
        pkt.dest = dest
        pkt.length = length
        pkt.desc = index
        pkt.kind = kind
        pkt.flags = flags
        pkt.seq = seq_ack >> 16 if fw.reliability == "host" else -1
        pkt.ack = seq_ack & 0xFFFF if fw.reliability == "host" else -1
        pkt.aux = ni.rd32(d + 12)
        payload = pkt.buf + fw.unicast.payload_off
        pkt.staged = False
        peer.staging.append(pkt)
        if flags & L.SDF_PIO:
            fw.counters["sent_pio"] += 1
            if flags & L.SDF_MISS:
                yield c.ni_ntlb
                fw.ntlb.install(ni.rd32(d + 8) // L.PAGE, ni.rd32(d + 20))
            yield from self.staged(peer, pkt)
            return
        addr = ni.rd32(d + 8)
        if fw.transfer == "rcpy":
            yield c.ni_ntlb
            phys = fw.ntlb.translate(addr, length)
            if phys < 0:
                # The host guarantees valid entries for what it sends (LCI-C17): a miss
                # here is a host error, not a network fault; the descriptor is refused.
                fw.counters["bad_descriptors"] += 1
                peer.staging.remove(pkt)
                fw.sendq.complete(index)
                yield from self.staged(peer, None)
                return
            fw.counters["sent_rcpy"] += 1
            addr = phys
        else:
            fw.counters["sent_sdma"] += 1
        yield c.ni_fetch
        ni.host_dma(False, addr, payload, length, self.on_fetched, pkt)

    def on_fetched(self, pkt):
        """The data is in the send buffer: on to the send queue."""
        fw = self.fw
        if fw.aborted is not None:
            return
        yield from self.staged(fw.peers[pkt.dest], pkt)

    def staged(self, peer, pkt):
        """`pkt`'s data is in its buffer: pass on every packet to `peer` whose turn has come
        (a unicast's, or one child's send of a multicast descriptor: firmware/_multicast.pyx)."""
        if pkt is not None:
            pkt.staged = True
        q = peer.staging
        while q and q[0].staged:
            yield from self.fw.sendq.ready(peer, q.popleft())
