# cython: language_level=3, annotation_typing=False, binding=True
"""The sliding window and its acknowledgements: how an SP AM endpoint sends (SP-C05, SP-C07).

Per pair of nodes and per direction there are two sequenced channels, requests
(window 75 packets) and replies (76), SP-A28; a reply never waits behind a request, so
a request handler can always answer. The sender keeps every message until it is
acknowledged (``TxChannel.unacked``) and sends a new one only while the window has room
for all its packets (a bulk chunk counts every packet, SP-C06).

Acknowledgements are cumulative sequence numbers, one per channel, and ride on every
packet an endpoint sends (piggybacked, SP-C05). A receiver that has nothing to send
acknowledges explicitly once a quarter of the sender's window is unacknowledged
(SP-A29); ``bulk.pyx`` adds one explicit ack per bulk chunk (SP-A31). A receiver that
finds a gap drops the packet and NACKs the sequence number it expects, once per gap;
the sender goes back to it and resends it and everything after it (go-back-N). A
refusal (REJECT, EFAULT) turns a transfer into NOPs that keep their sequence numbers.

**Who gets pumped.** The endpoint keeps a work queue of the peers that have something
to send -- control packets, resends, new messages, an ack owed -- and a poll pumps
only those, in the order they got work. A peer whose window is full leaves the queue
until an ack opens it; a peer that only waits for acks is the keep-alive's business
(``keepalive.pyx``). So the work of a poll does not grow with the number of nodes.

Costs: AM's header work is paid before a packet's length is stored (the critical path
of a round trip); its retransmission copy and window bookkeeping after it (see
``costs.py``).
"""
from __future__ import annotations

import errno
from collections import deque

from kernelsim import WouldBlock

from nic_drivers.tb2 import _model as hw
from protocols.am import _wire as W
from protocols.am._checks import U32
from protocols.am._wire cimport Header, Msg, Peer, RxChannel, TxChannel

__all__ = ["Window", "AM_PROTO", "BLOCKED"]

AM_PROTO = 0x414D            # "AM": the link-level protocol id in the TB2 header


class _Blocked:
    """What a call's path returns when it cannot finish yet (see `Window.blocked`)."""
    __slots__ = ()

    def __repr__(self):
        return "BLOCKED"


BLOCKED = _Blocked()

DEF HDR_BYTES = 32           # nic_drivers.tb2._model.HDR_BYTES
DEF REG_LEN = 0              # nic_drivers.tb2._model.REG_LEN: the packet-length array
assert hw.HDR_BYTES == HDR_BYTES and hw.REG_LEN == REG_LEN



cdef class Window(OpenFile):
    """The sending half of an AM endpoint, and its state (window.pxd): the first of the
    chain Window < KeepAlive < Bulk < AmEndpoint."""

    def _init_window(self, params: dict) -> None:
        self.req_window = params["request_window"]
        self.rep_window = params["reply_window"]
        self.ack_div = params["ack_div"]
        self.peers = {}                         # made on first contact (see `peer`)
        self.work = deque()                     # peers with something to send, in the order they got it
        self.tx_need = 0

    cdef object blocked(self, str why):
        """A call's path cannot finish yet (a full window, a transfer in flight, nothing
        arrived): the caller waits on `events` and runs the path's continuation. In
        modeled time the path says so by returning `BLOCKED` -- a wait is the common case
        of every call, and a return code costs nothing where an exception is built and
        unwound through every frame; in real time it raises `WouldBlock`, whose wait runs
        the devices' pending work only once the caller is on the queue."""
        if self.wall_clock:
            raise WouldBlock(self.events, why)
        return BLOCKED

    # -- peers -----------------------------------------------------------------------------

    def peer(self, dest) -> W.Peer:
        """The Peer for node `dest` (EINVAL for a bad node id, EHOSTUNREACH off the switch)."""
        if not isinstance(dest, int) or isinstance(dest, bool):
            raise OSError(errno.EINVAL, f"destination node must be an int, not {dest!r}")
        p = self.peers.get(dest)
        if p is None:
            p = self._new_peer(dest)
            if p is None:
                raise OSError(errno.EHOSTUNREACH, f"node {dest} is not on this node's SP switch")
        return p

    def _new_peer(self, nid: int):
        """A Peer for a node on the switch, or None."""
        addrs = self.node.hosts.get(nid)
        hwaddr = addrs.get("tb2") if addrs else None
        if hwaddr is None:
            return None
        p = W.Peer(nid, hwaddr[2] if len(hwaddr) > 2 else 0, self.req_window, self.rep_window, self.ack_div)
        self.peers[nid] = p
        return p

    cdef int _kick(self, Peer peer) except -1:
        """`peer` has something to send: the next pump visits it."""
        if not peer.queued:
            peer.queued = True
            self.work.append(peer)
        return 0

    # -- acknowledgements, NACKs, refusals on the sending side ---------------------------------

    def _acked(self, peer, ch, cum) -> None:
        done = ch.ack(cum)
        if not done:
            return
        peer.mark = self.polls
        if not peer.unacked():
            self._settled(peer)
        if ch.pending:
            self._kick(peer)                        # the window has room again
        for m in done:
            x = m.xfer
            if x is not None and m.kind == W.K_STORE and m.flags & W.F_LAST and not x.done:
                self._finish(x)

    def _nacked(self, peer, h) -> None:
        """A NACK: everything before `h.seq` arrived; go back and resend from it."""
        self.stats_c["nacks_received"] += 1
        ch = peer.tx_rep if h.flags & W.F_REPCH else peer.tx_req
        self._acked(peer, ch, h.seq)
        if ch.go_back(h.seq):
            self.stats_c["gobacks"] += 1

    def _rejected(self, peer, ch, seq, _err) -> None:
        """The target refused message `seq` (its memory is not in the target's segments;
        REJECT carries EFAULT, the only refusal there is): everything before it arrived;
        it and the rest of its transfer become NOPs, which keep their sequence numbers,
        and the channel goes back to resend from it."""
        self._acked(peer, ch, seq)
        if not ch.unacked or ch.unacked[0].seq != seq:
            return                                  # stale: already handled
        m = ch.unacked[0]
        x = m.xfer
        if x is None or m.kind == W.K_NOP:
            return
        for m2 in ch.unacked:
            if m2.xfer is x and m2.kind != W.K_NOP:
                ch.nop(m2)
        ch.pending = deque(m2 for m2 in ch.pending if m2.xfer is not x)
        ch.resend = 0                               # the receiver dropped everything after seq
        self._transfer_refused(peer, x)

    # -- send -----------------------------------------------------------------------------

    def _pump_path(self):
        """Send what the peers on the work queue are owed; False when the send FIFO is full."""
        self._keepalive_check()
        work = self.work
        while work:
            peer = work.popleft()
            peer.queued = False
            ok = yield from self._pump_peer(peer)
            if not ok:
                if not peer.queued:
                    peer.queued = True
                    work.appendleft(peer)
                return False
        return True

    def _pump_peer(self, peer):
        """Send what this peer is owed, in order: control packets, the reply channel
        (resends, then new messages the window admits), the request channel, an
        explicit ack if one is still owed, a keep-alive if one is due."""
        st = self.stats_c
        while peer.ctl:
            kind, flags, seq, arg = peer.ctl[0]
            ok = yield from self._send_ctl(peer, kind, flags, seq, arg)
            if not ok:
                return False
            peer.ctl.popleft()
        for ch in (peer.tx_rep, peer.tx_req):
            while ch.resend < len(ch.unacked):
                ok = yield from self._send_msg(peer, ch, ch.unacked[ch.resend])
                if not ok:
                    return False
                ch.resend += 1
            pending = ch.pending
            while pending and ch.can_send(pending[0].npkts):
                m = pending.popleft()
                if not peer.unacked():
                    self._unsettled(peer)
                if not ch.unacked:
                    peer.mark = self.polls
                ch.assign(m)
                ok = yield from self._send_msg(peer, ch, m)
                if not ok:
                    return False
                ch.resend += 1
        if peer.rx_req.ack_owed or peer.rx_rep.ack_owed:
            ok = yield from self._send_ctl(peer, W.K_ACK, 0, 0, 0)
            if not ok:
                return False
            st["acks_sent"] += 1
        return (yield from self._keepalive_path(peer))

    def _send_ctl(self, Peer peer, kind, flags, seq, arg, addr=0):
        hdr = W.pack(kind | flags, 0, seq, peer.rx_req.expected, peer.rx_rep.expected, 0, 1, 0, addr, arg)
        ok = yield from self._send_one(peer, hdr, b"", self.c_hdr)
        if ok:
            peer.rx_req.acked()
            peer.rx_rep.acked()
        return ok

    def _send_msg(self, Peer peer, TxChannel ch, Msg m):
        first = m.sends == 0
        ack_req, ack_rep = peer.rx_req.expected, peer.rx_rep.expected
        kind = m.kind
        post = 0.0
        if (kind == W.K_STORE or kind == W.K_GETDATA) and not m.kept:
            read, npk, base, off, flags, tail = m.data, m.npkts, m.addr, m.src_off, kind | m.flags, m.tail
            full = self.pkt_data

            def packet(i):
                n = full if i < npk - 1 else tail
                return (W.pack(flags, m.handler, m.seq, ack_req, ack_rep, i, npk, tail, base + i * full, m.arg),
                        read(off + i * full, n))

            ok = yield from self._send_packets(peer, npk, packet, 0.0, self.c_bulk)
        else:
            data = m.data
            if m.kept:                              # a one-packet store or get reply
                hdr = W.pack(kind | m.flags, m.handler, m.seq, ack_req, ack_rep, 0, 1, m.tail, m.addr, m.arg)
                pre = self.c_bulk
                if first:
                    post = self.costs.copy(W.AM_HDR + len(data))      # the copy kept for retransmission
            else:
                hdr = W.pack(kind | m.flags, m.handler, m.seq, ack_req, ack_rep, 0, 1, 0, 0, 0)
                words = len(data) >> 2
                pre = self.c_hdr + (self.c_word * (words - 1) if words > 1 else 0.0)
                if first and kind != W.K_NOP:
                    # After the length store: keep the packet for retransmission (SP-C05)
                    # and do the window bookkeeping; a request does more of it (SP-A37).
                    post = self.costs.copy(W.AM_HDR + len(data)) + self.c_post
                    if kind != W.K_REP:
                        post += self.c_request
            ok = yield from self._send_one(peer, hdr, data, pre)
        if not ok:
            return False
        peer.rx_req.acked()
        peer.rx_rep.acked()
        if not first:
            self.stats_c["retransmitted_packets"] += m.npkts
            ch.retransmitted += m.npkts
        m.sends += 1
        if post:
            yield post
        if first and m.kept and kind == W.K_STORE and m.xfer is not None and not m.xfer.done:
            self._finish(m.xfer)                    # its data is copied: the source is free
        return True

    def _send_one(self, Peer peer, bytes hdr, bytes data, double pre):
        """`_send_packets` of one packet (a short message, a control packet, a kept store):
        the same work and costs, in the same order, without a closure and lists per packet."""
        cdef UserFifos uf = self.uf
        cdef HostFifos f = uf.fifos
        cdef Costs costs = self.costs
        cdef double cost, each = 0.0, sum_byte = 0.0
        cdef Py_ssize_t n
        cdef int units, idx
        if uf.closed:
            raise OSError(errno.EBADF, "the TB2 FIFOs are closed")
        if f.free_entries() < 1:
            try:
                yield from uf._room_path(1)
            except WouldBlock:
                self.tx_need = 1
                self.stats_c["fifo_full"] += 1
                return False
        if self.checksum:                          # the end-to-end trailer (_wire.pyx), summed as it is built
            data = W.trailer(self.node.nid, peer.nid, hdr, data)
            sum_byte = self.c_sum_byte
            each += self.c_sum_packet + sum_byte * W.AM_HDR
        idx = f.tx_next % f.send_count
        units = uf.write_entry(f.send_entry(), peer.nid, peer.route, AM_PROTO, hdr, data)
        n = len(data)
        cost = pre
        cost += each + uf.c_send + f.flush_cost(HDR_BYTES + n) + (costs.copy(n) if n else 0.0)
        if sum_byte:
            cost += sum_byte * (n - W.CHECKSUM_BYTES)
        f.tx_next += 1
        yield cost + f.c_sync + costs.pci_write
        self.adapter.reg_write(REG_LEN + idx, units, 1)       # one length byte: one MicroChannel store
        uf.sent += 1
        self.stats_c["packets_sent"] += 1
        return True

    def _send_packets(self, peer, k: int, packet, pre: float, each: float):
        """Hand `k` packets to the adapter (SP-C03): ``packet(i)`` gives the i-th one's AM
        header and data. The host prepares them a few at a time -- AM's work (`pre` once,
        `each` per packet), the send entry, its cache flush -- syncs, and stores their
        lengths in one MicroChannel store (a byte, halfword or word of the length array,
        as its alignment allows), so the adapter sends the first packets while the host
        prepares the rest. False, with the caller's state untouched, when the send FIFO
        has no room for all `k`."""
        cdef UserFifos uf = self.uf
        cdef HostFifos f = uf.fifos
        cdef Costs costs = self.costs
        cdef double cost, sum_byte = 0.0
        cdef Py_ssize_t i, j, n
        cdef bytes hdr, data
        if uf.closed:
            raise OSError(errno.EBADF, "the TB2 FIFOs are closed")
        if f.free_entries() < k:
            try:
                yield from uf._room_path(k)
            except WouldBlock:
                self.tx_need = k
                self.stats_c["fifo_full"] += 1
                return False
        dest, route = peer.nid, peer.route
        pkts = [packet(i) for i in range(k)]
        if self.checksum:                          # the end-to-end trailer (_wire.pyx), summed as it is built
            me = self.node.nid
            pkts = [(h, W.trailer(me, dest, h, d)) for h, d in pkts]
            sum_byte = self.c_sum_byte
            each += self.c_sum_packet + sum_byte * W.AM_HDR
        units = [(hw.HDR_BYTES + len(d) + hw.LEN_UNIT - 1) // hw.LEN_UNIT for _h, d in pkts]
        cost = pre
        i = 0
        for off, value, width in f.length_stores(f.tx_next % f.send_count, units):
            for j in range(i, i + width):
                hdr, data = pkts[j]
                uf.write_entry(f.send_entry(), dest, route, AM_PROTO, hdr, data)
                n = len(data)
                cost += each + uf.c_send + f.flush_cost(HDR_BYTES + n) + (costs.copy(n) if n else 0.0)
                if sum_byte:
                    cost += sum_byte * (n - W.CHECKSUM_BYTES)
                f.tx_next += 1
            yield cost + f.c_sync + costs.pci_write
            cost = 0.0
            self.adapter.reg_write(off, value, width)
            i += width
        uf.sent += k
        self.stats_c["packets_sent"] += k
        return True
