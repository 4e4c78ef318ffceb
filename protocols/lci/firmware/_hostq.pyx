# cython: language_level=3
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

A cdef class (the board, the packet and the peer records typed, their fields C reads and
writes): it runs for every descriptor the host gives the NI.
"""

from nic_drivers.myrinet._model cimport LanaiNI
from protocols.lci.firmware._records cimport NiPeer, TxPacket
from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L

__all__ = ["HostSendQueue"]

cdef unsigned int SD_VALID = L.SD_VALID
cdef unsigned int SD_MCAST = L.SD_MCAST
cdef unsigned int SD_ACK = L.SD_ACK
cdef unsigned int SD_RETX = L.SD_RETX
cdef unsigned int SDF_PIO = L.SDF_PIO
cdef unsigned int SDF_MISS = L.SDF_MISS
cdef Py_ssize_t SD_BASE = L.SD_BASE
cdef Py_ssize_t SD_BYTES = L.SD_BYTES
cdef Py_ssize_t PAGE = L.PAGE
cdef frozenset SD_KINDS = frozenset(L.SD_KINDS)


cdef class HostSendQueue:
    def __init__(self, fw):
        self.fw = fw
        self.seen = 0
        self.looking = False

    def start(self) -> None:
        self.seen = 0
        self.looking = False
        ni = self.fw.ni
        for i in range(self.fw.nsd):
            ni.watch(SD_BASE + i * SD_BYTES, self.on_doorbell)

    cdef Py_ssize_t _slot(self, long nsd):
        return SD_BASE + (self.seen % nsd) * SD_BYTES

    def on_doorbell(self, _off):
        """One pass of the event loop over the send queue: take one descriptor."""
        fw = self.fw
        cdef LanaiNI ni = fw.ni
        cdef NiPeer peer
        cdef TxPacket pkt
        cdef long nsd = fw.nsd
        cdef unsigned int w0, w1, seq_ack, kind, flags, length, dest, buf
        cdef Py_ssize_t d
        cdef long index
        c = fw.c
        if fw.aborted is not None:
            return
        d = self._slot(nsd)
        w0 = ni.rd32(d)
        if not w0 & SD_VALID:
            return
        yield c.ni_poll + c.ni_desc
        ni.wr32(d, 0)
        index = self.seen % nsd
        self.seen += 1
        if ni.rd32(self._slot(nsd)) & SD_VALID:
            ni.post(self.on_doorbell, 0)              # more are waiting: another pass
        fw.counters["descriptors"] += 1
        kind = (w0 >> 24) & 0x7F
        flags = (w0 >> 16) & 0xFF
        length = w0 & 0xFFFF
        w1 = ni.rd32(d + 4)
        dest, buf = w1 >> 16, w1 & 0xFFFF
        if kind == SD_MCAST:
            yield from fw.multicast.on_descriptor(index, flags, length, buf, d)
            return
        found = fw.peer(dest)
        if kind not in SD_KINDS or found is None or length > fw.mtu \
                or (kind != SD_ACK and buf >= fw.nsend) or fw.flow.refuses(kind):
            fw.counters["bad_descriptors"] += 1
            fw.sendq.complete(index)
            return
        peer = found
        seq_ack = ni.rd32(d + 16)
        if kind == SD_ACK:
            fw.sendq.complete(index)
            yield from fw.unicast.send_ctl(peer, W.K_ACK, ack=seq_ack & 0xFFFF)    # the host's acknowledgement
            return
        pkt = fw.tx[buf]
        if kind == SD_RETX:
            # The retransmission is a descriptor of its own, completed when it has gone;
            # the buffer's first transmission may still be waiting for the wire, and
            # keeps its own descriptor.
            pkt.ack = seq_ack & 0xFFFF
            yield from fw.sendq.resend(peer, pkt, index)
            return
        host = fw.reliability == "host"
        pkt.dest = dest
        pkt.length = length
        pkt.desc = index
        pkt.kind = kind
        pkt.flags = flags
        pkt.seq = seq_ack >> 16 if host else -1
        pkt.ack = seq_ack & 0xFFFF if host else -1
        pkt.aux = ni.rd32(d + 12)
        payload = pkt.buf + fw.unicast.payload_off
        pkt.staged = False
        peer.staging.append(pkt)
        if flags & SDF_PIO:
            fw.counters["sent_pio"] += 1
            if flags & SDF_MISS:
                yield c.ni_ntlb
                fw.ntlb.install(ni.rd32(d + 8) // PAGE, ni.rd32(d + 20))
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

    def staged(self, NiPeer peer, pkt):
        """`pkt`'s data is in its buffer: pass on every packet to `peer` whose turn has come
        (a unicast's, or one child's send of a multicast descriptor: firmware/_multicast.pyx)."""
        if pkt is not None:
            (<TxPacket> pkt).staged = True
        q = peer.staging
        while q and (<TxPacket> q[0]).staged:
            yield from self.fw.sendq.ready(peer, q.popleft())
