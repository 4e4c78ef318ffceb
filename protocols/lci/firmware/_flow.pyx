# cython: language_level=3, boundscheck=False, wraparound=False, warn.unreachable=False
# (warn.unreachable off: the empty handlers are generators by a `yield` after their `return`)
"""Reliability / Flow Control (LCI-C04): the one part the variants replace.

* `Credits` (reliability=none: I-sdma, I-pio, I-rcpy, I-1k, I-4k; LCI-C07). Each NI
  reserves W receive buffers for each sender; a sender transmits only while it holds a
  credit for the destination, else the packet waits in the destination's queue. A
  receive buffer is released once its packet is in host memory; every packet back to
  the sender piggybacks the count released since, and with no return traffic the
  receiver sends an explicit credit packet after W/2 releases. No sequence numbers, no
  timers, no retransmission (LCI-C03): a packet beyond the reserved buffers can only
  be a duplicate, and the NI aborts.
* `NiGoBackN` (reliability=ni: I-nirx; LCI-C13). The go-back-N protocol of I-hrx run
  by the NI: sequence numbers and time stamps on the NI, packets kept in their send
  buffers until acknowledged (their send completion goes to the host then), cumulative
  acknowledgements piggybacked on every packet back, an explicit one after half a
  window of packets accepted, a delayed-acknowledgement timer per sender started when
  a packet arrives (LCI-C12), retransmission of every packet too long unacknowledged,
  the time-out backed off while nothing is acknowledged (``LciCosts.rto``). A packet
  is acknowledged once the NI has accepted it, not once the host has taken it: the
  host's pace is the pool's business (drops and requests to resend), and an
  acknowledgement held back until the host polls made busy hosts' peers time out and
  resend whole windows the NI already had. All senders share the receive pool; a packet that finds it
  empty is dropped and its sender asked to go back as soon as a buffer is free.
* `HostDriven` (reliability=host: I-hrx; LCI-C12). The host runs that protocol; the NI
  only sends what the host posts (data, acknowledgements, retransmissions from the
  send buffers) and drops what it has no buffer for. Acknowledgements go up to the host.
"""
from __future__ import annotations

from protocols.lci import _wire as W
from protocols.lci._window import BEHIND, EXPECTED, RxWindow, TxWindow
from protocols.lci.firmware import layout as L
from protocols.lci.firmware._records cimport NiPeer

__all__ = ["make_flow", "Credits", "NiGoBackN", "HostDriven"]


def make_flow(fw):
    return {"none": Credits, "ni": NiGoBackN, "host": HostDriven}[fw.reliability](fw)


cdef class _Flow:
    """What every flow control answers (the defaults suit the host-driven one)."""

    def __init__(self, fw):
        self.fw = fw
        self.drops_when_full = True    # arm a drop buffer when the pool is empty

    def start(self):
        pass

    def new_peer(self, peer):
        pass

    def refuses(self, int kind):
        return kind in (L.SD_ACK, L.SD_RETX)

    def may_send(self, peer):
        return True

    def keeps(self, pkt):
        return False

    def on_data(self, peer, hdr):
        return True
        yield  # pragma: no cover

    def accepted(self, peer):
        """A data packet from `peer` was accepted and is on its way to the host."""
        return
        yield  # pragma: no cover

    def on_ack(self, peer, hdr):
        """True: the acknowledgement goes up to the host."""
        self.fw.malformed["bad_kind_for_variant"] += 1
        return False
        yield  # pragma: no cover

    def on_nack(self, peer, hdr):
        self.fw.malformed["bad_kind_for_variant"] += 1
        return
        yield  # pragma: no cover

    def released(self, peer):
        return
        yield  # pragma: no cover

    def no_buffer(self, peer, hdr):
        """A packet from `peer` landed in the drop buffer: the pool was empty."""
        self.fw.counters["dropped_no_buffer"] += 1
        return
        yield  # pragma: no cover

    def buffer_freed(self):
        return
        yield  # pragma: no cover


cdef class Credits(_Flow):
    def __init__(self, fw):
        super().__init__(fw)
        self.drops_when_full = False   # cannot happen: the network holds the packet back
        self.half = max(1, fw.window // 2)

    def may_send(self, NiPeer peer):
        return peer.credits > 0

    def on_xmit(self, NiPeer peer, pkt, again):
        peer.credits -= 1
        back, peer.released = peer.released, 0
        if back:
            self.fw.counters["credits_returned"] += back
        return back, 0, 0, 0, 0.0

    def on_data(self, NiPeer peer, hdr):
        fw = self.fw
        if hdr.credits:
            yield from self._credit(peer, hdr.credits)
        peer.in_use += 1
        if peer.in_use > fw.window:
            fw.abort(f"NI {fw.ni.nid} received more packets from node {peer.nid} than the {fw.window} receive "
                     "buffers it reserves for it: a duplicated packet; LCI without retransmission assumes a "
                     "reliable network and aborts (LCI-C03, C07)")
            return False
        return True

    def on_ack(self, peer, hdr):
        fw = self.fw
        yield fw.c.ni_ack_recv
        fw.counters["acks_received"] += 1
        yield from self._credit(peer, hdr.credits)
        return False

    def _credit(self, NiPeer peer, long k):
        fw = self.fw
        peer.credits += k
        if peer.credits > fw.window:
            fw.abort(f"NI {fw.ni.nid} got back more credits from node {peer.nid} than its window of {fw.window}: "
                     "a duplicated packet; LCI without retransmission assumes a reliable network and aborts "
                     "(LCI-C03, C07)")
            return
        yield from fw.sendq.unblock(peer)

    def released(self, NiPeer peer):
        peer.in_use -= 1
        peer.released += 1
        if peer.released >= self.half:
            back, peer.released = peer.released, 0
            self.fw.counters["credits_returned"] += back
            yield from self.fw.unicast.send_ctl(peer, W.K_ACK, credits=back)


cdef class NiGoBackN(_Flow):
    def __init__(self, fw):
        super().__init__(fw)
        self.half = max(1, fw.window // 2)
        self.nack_queue = []

    def start(self):
        self.nack_queue = []

    def new_peer(self, peer):
        peer.tx = TxWindow(self.fw.window)
        peer.rx = RxWindow()

    def may_send(self, peer):
        return peer.tx.open()

    def keeps(self, pkt):
        return True

    def on_xmit(self, peer, pkt, again):
        fw = self.fw
        if not again:
            pkt.seq = peer.tx.push(pkt, fw.ni.rtc())
            fw.timers.retx(peer)
        return 0, pkt.seq, self._ack_now(peer), W.F_HAS_ACK, fw.c.ni_seq_send

    def _ack_now(self, peer):
        """An acknowledgement goes back to `peer` (on any packet): cancel its delayed ack."""
        self.fw.timers.cancel_dack(peer)
        return peer.rx.acked()

    def on_data(self, peer, hdr):
        fw = self.fw
        yield fw.c.ni_seq_recv
        if hdr.flags & W.F_HAS_ACK:
            yield from self._acked(peer, hdr.ack)
        w = peer.rx.where(hdr.seq)
        if w == EXPECTED:
            peer.rx.accept()
            return True
        if w == BEHIND:
            fw.counters["duplicates"] += 1          # our acknowledgement was lost: say it again
            yield from self._send_ack(peer)
        else:
            fw.counters["out_of_order"] += 1        # beyond a gap: dropped, the sender goes back
        return False

    def on_ack(self, peer, hdr):
        fw = self.fw
        yield fw.c.ni_ack_recv
        fw.counters["acks_received"] += 1
        yield from self._acked(peer, hdr.ack)
        return False

    def on_nack(self, peer, hdr):
        """The receiver dropped `seq` for want of a buffer and has one now: go back to it."""
        fw = self.fw
        yield fw.c.ni_ack_recv
        fw.counters["nacks_received"] += 1
        yield from self._acked(peer, hdr.seq)
        tx = peer.tx
        i = tx.index(hdr.seq)
        if i < 0:
            return
        now = fw.ni.rtc()
        for j in range(i, tx.outstanding()):
            tx.restamp(j, now)
            yield from fw.sendq.resend(peer, tx.token(j))

    def _acked(self, peer, cum):
        fw = self.fw
        freed = peer.tx.ack(cum)
        if not freed:
            return
        for pkt in freed:
            yield from fw.sendq.done(pkt)           # the send buffer is the host's again
        fw.timers.retx(peer, restart=True)
        yield from fw.sendq.unblock(peer)

    def _send_ack(self, peer):
        yield from self.fw.unicast.send_ctl(peer, W.K_ACK, ack=self._ack_now(peer))

    def accepted(self, peer):
        if peer.rx.owed >= self.half:
            yield from self._send_ack(peer)
        elif peer.rx.owed:
            self.fw.timers.dack(peer)               # runs already, or starts now (LCI-C12)

    def no_buffer(self, peer, hdr):
        fw = self.fw
        fw.counters["dropped_no_buffer"] += 1
        if hdr.flags & W.F_HAS_ACK:
            yield from self._acked(peer, hdr.ack)           # its acknowledgement still counts
        if hdr.kind in (W.K_DATA, W.K_RCPY) and not peer.nack_owed:
            peer.nack_owed = True                           # ask for it again once a buffer is free
            self.nack_queue.append(peer)

    def buffer_freed(self):
        fw = self.fw
        while self.nack_queue and fw.recvq.free:
            peer = self.nack_queue.pop(0)
            peer.nack_owed = False
            yield from fw.unicast.send_ctl(peer, W.K_NACK, seq=peer.rx.expected, ack=peer.rx.expected)

    def on_retx_timer(self, peer):
        """Retransmit every packet to `peer` sent too long ago (LCI-C12, on the NI)."""
        fw = self.fw
        tx = peer.tx
        stale = tx.stale(fw.ni.rtc(), fw.c.rto(tx))
        if stale:
            fw.counters["retx_timeouts"] += 1
            tx.expiries += 1
            now = fw.ni.rtc()
            for j in stale:
                tx.restamp(j, now)
                yield from fw.sendq.resend(peer, tx.token(j))
        fw.timers.retx(peer)

    def on_dack_timer(self, peer):
        if peer.rx.owed:
            self.fw.counters["delayed_acks"] += 1
            yield from self._send_ack(peer)


cdef class HostDriven(_Flow):
    def refuses(self, int kind):
        return kind == L.SD_RCPY

    def on_xmit(self, peer, pkt, again):
        return 0, pkt.seq, pkt.ack, W.F_HAS_ACK, 0.0

    def on_ack(self, peer, hdr):
        return True                                 # the host's protocol takes it
        yield  # pragma: no cover
