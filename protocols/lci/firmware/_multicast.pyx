# cython: language_level=3, boundscheck=False, wraparound=False
"""Multicast (LCI-C04, C10): packets forwarded down a spanning tree, out of the buffer they are in.

The host writes the forwarding table into SRAM at initialisation: the members of this
node's group and the tree's shape (``protocols/lci/trees.py``; one group, of all nodes
by default, LCI-A52). A multicast packet carries its root -- the node that sent it --
and every NI computes its children in the root's tree from the table.

**NI forwarding** (LCI-C10; I-sdma, I-pio, I-nirx). When a multicast packet arrives, the
flow control checks it as any packet from that sender; then the packet is copied to the
host as for unicast, and one send -- one `Forward` -- is made for each child, out of
the receive buffer itself (a route fits in the headroom before it). The forwards go
through the same NI-to-NI flow control as unicast packets: credits, or the go-back-N
window, per child. The receive buffer is freed -- and its credit returned to the
parent -- only after the host copy *and* all forwards are done (with I-nirx: all
acknowledged), so a slow child holds buffers up the tree, which is how a multicast
stream is paced.

**A multicast from this host** (any variant but I-hrx) is one send descriptor of kind
``SD_MCAST``: the NI gets the data into the send buffer the usual way (SDMA fetch or
the host's PIO) and sends that buffer to each of the root's children; the send
completion goes to the host once every child has it. The host-forwarding variant
I-sdma-hmc (LCI-C20) uses the same descriptor to forward a packet it received: one
host-to-NI transfer per hop, the same NI buffer sent to each child.

Several sends out of one buffer take turns: each writes its own route and header
(credits, sequence number, acknowledgement for *its* child) in front of the shared
payload, so a send waits while another send of the same buffer has not left the NI
(`Slot.busy`).

A cdef class working on typed `Slot` and `Forward` records (``_records.pxd``): it runs
on every multicast packet, once per child, at every node of a busy tree (docs/lci.md
"Scale").
"""
from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L
from protocols.lci.firmware._records cimport Forward, Slot, known_peer
from protocols.lci.firmware._records import Forward, Slot

__all__ = ["Multicast", "Slot", "Forward"]

cdef long RX = 0, TX = 1


cdef class Multicast:
    def __init__(self, fw):
        self.fw = fw
        self.group = None
        self.holds = {}
        self.kids_by_root = {}

    # -- the forwarding table ---------------------------------------------------------------

    def set_table(self, group):
        """The host's initialisation: this node's group and its tree (None: no group)."""
        self.group = group
        self.kids_by_root = {}

    cpdef tuple children(self, long root):
        """This node's children in `root`'s tree, worked out from the table once per root
        (what the NI's forwarding table gives it: LCI-C10), not again for every packet."""
        kids = self.kids_by_root.get(root)
        if kids is None:
            g = self.group
            if g is None or root not in g:
                return ()                   # no tree (a bad root is not remembered)
            kids = self.kids_by_root[root] = tuple(g.children(self.fw.ni.nid, root))
        return kids

    def describe(self):
        g = self.group
        if g is None:
            return None
        return {"members": len(g), "tree": g.tree.name, "children_as_root": len(g.children(self.fw.ni.nid,
                                                                                          self.fw.ni.nid))}

    def start(self):
        fw = self.fw
        self.holds = {}
        self.kids_by_root = {}
        self.rx_slots = {}
        self.tx_slots = {}              # send buffer -> Slot, made by its first multicast (an idle NI: none)
        for p in fw.tx:
            p.slot = None
        recvq = fw.recvq
        if fw.variant.multicast == "ni":
            recvq.register(W.K_MCAST, self.on_mcast)
        else:
            recvq.register(W.K_MCAST, recvq.on_data)      # up to the host, which forwards (C12, C20)

    # -- shared buffers ---------------------------------------------------------------------

    cpdef Slot hold_rx(self, long long buf, peer, long refs):
        """Receive buffer `buf` (from `peer`) stays until `refs` uses of it are over."""
        cdef Slot slot = self.rx_slots.get(buf)
        if slot is None:
            slot = self.rx_slots[buf] = Slot(RX, buf)
        slot.refs = refs
        slot.peer = peer
        self.holds[buf] = slot
        return slot

    def unref(self, Slot slot):
        slot.refs -= 1
        if slot.refs > 0:
            return
        fw = self.fw
        if slot.kind == RX:
            del self.holds[slot.buf]
            peer, slot.peer = slot.peer, None
            yield from fw.recvq.release(slot.buf)
            yield from fw.flow.released(peer)
        else:
            fw.sendq.complete(slot.desc)

    def slot_free(self, Slot slot):
        """A send out of `slot` has left the NI: the next child's may write its header."""
        slot.busy = False
        fw = self.fw
        while slot.waiting and not slot.busy:
            peer, pkt = slot.waiting.popleft()
            slot.queued.discard(peer.nid if pkt is None else id(pkt))
            if pkt is None:
                yield from fw.sendq.unblock(peer)
            else:
                yield from fw.unicast.xmit(peer, pkt, again=True)

    def fan_out(self, Slot slot, long long buf, long length, long root, kids):
        """One forward per child out of the packet area at `buf` (route in front of it).
        `kids`: the child nodes of a received packet (its forwards go straight to the send
        queue), or None for a host descriptor's `slot.staged` forwards (they go on after
        that host's earlier packets to the same child)."""
        cdef Forward f
        cdef long i
        fw = self.fw
        c = fw.c
        for i in range(slot.staged if kids is None else len(kids)):
            yield c.ni_mcast                                # a send descriptor for the child
            if kids is None:
                f = slot.forwards[i]
                peer = fw.peers[f.dest]
            else:
                child = kids[i]
                peer = known_peer(fw, child)
                if peer is None:
                    fw.malformed["bad_source"] += 1         # the table names a node without a route
                    yield from self.unref(slot)
                    continue
                f = slot.forward(i)
                f.dest = child
            f.buf = buf
            f.length = length
            f.kind = L.SD_MCAST
            f.flags = 0
            f.aux = root
            f.seq = f.ack = -1
            if slot.kind == RX:
                fw.counters["forwards"] += 1                # (a host's multicast: mcast_sent)
                yield from fw.sendq.ready(peer, f)
            else:
                yield from fw.hostq.staged(peer, f)         # FIFO with the host's unicasts (LCI-C02)

    # -- a multicast packet arrives (NI forwarding) -------------------------------------------

    def on_mcast(self, peer, buf, n):
        fw = self.fw
        hdr = fw.hdr
        root, length = hdr.aux, hdr.length
        ok = yield from fw.flow.on_data(peer, hdr)
        if not ok:
            yield from fw.recvq.release(buf)
            return
        fw.counters["mcast_received"] += 1
        yield fw.c.ni_mcast                                 # the forwarding table
        kids = self.children(root)
        slot = self.hold_rx(buf, peer, 1 + len(kids))
        fw.tohost.deliver(peer, buf, n)
        yield from fw.flow.accepted(peer)
        # The packet area begins ROUTE_MAX before the Myrinet type, as in a send buffer.
        yield from self.fan_out(slot, buf + W.TYPE_BYTES + W.HDR_BYTES - fw.unicast.payload_off, length, root,
                                kids)

    # -- a multicast descriptor from the host ------------------------------------------------

    def on_descriptor(self, index, flags, length, buf, d):
        """SD_MCAST: send buffer `buf` to the children of root (+12) in the forwarding table."""
        fw = self.fw
        ni = fw.ni
        root = ni.rd32(d + 12)
        kids = self.children(root)
        if buf >= fw.nsend or length > fw.mtu or not kids:
            fw.counters["bad_descriptors"] += 1
            fw.sendq.complete(index)
            return
        fw.counters["mcast_sent"] += 1
        cdef Slot slot = self.tx_slots.get(buf)
        cdef Forward f
        if slot is None:
            slot = self.tx_slots[buf] = Slot(TX, buf)
        slot.desc = index
        slot.refs = len(kids)
        # One send per child, each in its child's staging queue now, in descriptor order: a
        # unicast to that child posted before this descriptor, whose data is still being
        # fetched, goes first; one posted after waits for this buffer's data (FIFO per
        # sender across unicast and multicast, LCI-C02).
        slot.staged = 0
        for child in kids:
            peer = known_peer(fw, child)
            if peer is None:
                fw.malformed["bad_source"] += 1             # the table names a node without a route
                yield from self.unref(slot)
                continue
            f = slot.forward(slot.staged)
            f.dest = child
            f.staged = False
            peer.staging.append(f)
            slot.staged += 1
        pkt = fw.tx[buf]
        if flags & L.SDF_PIO:
            fw.counters["sent_pio"] += 1
            yield from self.fan_out(slot, pkt.buf, length, root, None)
            return
        fw.counters["sent_sdma"] += 1
        yield fw.c.ni_fetch
        ni.host_dma(False, ni.rd32(d + 8), pkt.buf + fw.unicast.payload_off, length, self.on_fetched,
                    (slot, length, root))

    def on_fetched(self, item):
        slot, length, root = item
        fw = self.fw
        if fw.aborted is not None:
            return
        yield from self.fan_out(slot, fw.tx[slot.buf].buf, length, root, None)
