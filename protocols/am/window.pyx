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
from protocols.am._wire cimport Header, Msg, Peer, RxChannel, TxChannel, holds, pack, trailer_of
from protocols.am._codes cimport *
from kernelsim._path cimport Path
cimport cython
from kernelsim._pyiter cimport resume
from cpython.ref cimport PyObject, Py_XDECREF
from libc.limits cimport LLONG_MAX, LLONG_MIN

__all__ = ["Window", "Events", "AM_PROTO", "BLOCKED"]

AM_PROTO = 0x414D            # "AM": the link-level protocol id in the TB2 header


class _Blocked:
    """What a call's path returns when it cannot finish yet (see `Window.blocked`)."""
    __slots__ = ()

    def __repr__(self):
        return "BLOCKED"


BLOCKED = _Blocked()

DEF HDR_BYTES = 32           # nic_drivers.tb2._model.HDR_BYTES
DEF REG_LEN = 0              # nic_drivers.tb2._model.REG_LEN: the packet-length array
DEF LEN_UNIT = 4             # nic_drivers.tb2._model.LEN_UNIT: bytes per length-array unit
assert hw.HDR_BYTES == HDR_BYTES and hw.REG_LEN == REG_LEN and hw.LEN_UNIT == LEN_UNIT


cdef class Events(SpinnerQueue):
    """The endpoint's events (an arrival, send-FIFO room, a keep-alive due) as a wait queue
    whose spinners are a caller's am_poll loop that the engine runs itself
    (``libdp/_am_call.pyx``: `poll_until` in modeled time; see `kernelsim._spin`)."""


cdef class Window(OpenFile):
    """The sending half of an AM endpoint, and its state (window.pxd): the first of the
    chain Window < KeepAlive < Bulk < AmEndpoint."""

    def _init_window(self, params: dict) -> None:
        self.req_window = params["request_window"]
        self.rep_window = params["reply_window"]
        self.ack_div = params["ack_div"]
        self.peers = {}                         # made on first contact (see `peer`)
        # Peers with something to send, in the order they got it (`_kick`, `_next_work`): a
        # queue linked through the peers (`Peer.next_work`; a peer is on it at most once), so
        # queueing and taking one are C field stores -- a deque's are method calls, and a
        # list that empties frees its storage each time.
        self.work_head = self.work_tail = None
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

    cpdef Peer peer(self, object dest):
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
            peer.next_work = None
            if self.work_tail is None:
                self.work_head = peer
            else:
                self.work_tail.next_work = peer
            self.work_tail = peer
        return 0

    cdef Peer _next_work(self):
        """The first peer on the work queue, taken off it; None when it is empty."""
        cdef Peer peer = self.work_head
        if peer is not None:
            self.work_head = peer.next_work
            if self.work_head is None:
                self.work_tail = None
            peer.next_work = None
            peer.queued = False
        return peer

    cdef int _work_first(self, Peer peer) except -1:
        """`peer` goes back to the front of the queue (the send FIFO filled while it was pumped)."""
        if not peer.queued:
            peer.queued = True
            peer.next_work = self.work_head
            self.work_head = peer
            if self.work_tail is None:
                self.work_tail = peer
        return 0

    # -- memory ---------------------------------------------------------------------------

    cpdef bint in_segments(self, object lo, object hi) except -1:
        """[lo, hi) lies inside one segment (an empty range: at or inside one), for
        addresses as a program gives them: ints of any size. One beyond a C long long is
        beyond every segment (they lie below 2**32)."""
        if not (LLONG_MIN <= lo <= LLONG_MAX and LLONG_MIN <= hi <= LLONG_MAX):
            return False
        return self.in_segments_c(lo, hi)

    cdef bint in_segments_c(self, long long lo, long long hi) except -1:
        """`in_segments` of C values (a received header's range: nothing boxed, no Python
        compare). The segments (endpoint.pyx) are kept sorted by address, with their ends
        beside; they lie below 2**32 (endpoint.segment), so their bounds unbox."""
        cdef list starts = self._starts
        cdef Py_ssize_t a = 0, b = len(starts), mid
        cdef long long end
        if hi < lo:
            return False
        while a < b:                                # bisect_right(starts, lo)
            mid = (a + b) >> 1
            if lo < <long long> starts[mid]:
                b = mid
            else:
                a = mid + 1
        if a == 0:
            return False
        end = <long long> self._ends[a - 1]
        return hi <= end and lo <= end

    # -- acknowledgements, NACKs, refusals on the sending side ---------------------------------

    cdef int _acked(self, Peer peer, TxChannel ch, int cum) except -1:
        cdef list done = ch.ack(cum)
        cdef Msg m
        if not done:
            return 0
        peer.mark = self.polls
        if not peer.unacked():
            self._settled(peer)
        if ch.pending:
            self._kick(peer)                        # the window has room again
        for m in done:
            x = m.xfer
            if x is not None and m.kind == K_STORE and m.flags & F_LAST:
                self._finish(x)
        return 0

    # What the rest of the chain implements (keepalive.pyx, bulk.pyx), called from here as C.

    cdef int _settled(self, Peer peer) except -1:
        raise NotImplementedError

    cdef int _unsettled(self, Peer peer) except -1:
        raise NotImplementedError

    cdef int _keepalive_check(self) except -1:
        raise NotImplementedError

    cdef int _keepalive_due(self, Peer peer) except -1:
        raise NotImplementedError

    cdef int _finish(self, object x) except -1:
        raise NotImplementedError

    cdef int _run_handler(self, Peer peer, object fn, bint request, tuple args) except -1:
        raise NotImplementedError

    cdef object _local_range(self, object buf, object nbytes):
        raise NotImplementedError

    def _nacked(self, Peer peer, Header h) -> None:
        """A NACK: everything before `h.seq` arrived; go back and resend from it."""
        self.counts[S_NACKS_RECEIVED] += 1
        ch = peer.tx_rep if h.flags & F_REPCH else peer.tx_req
        self._acked(peer, ch, h.seq)
        if ch.go_back(h.seq):
            self.counts[S_GOBACKS] += 1

    def _rejected(self, Peer peer, TxChannel ch, int seq, _err) -> None:
        """The target refused message `seq` (its memory is not in the target's segments;
        REJECT carries EFAULT, the only refusal there is): everything before it arrived;
        it and the rest of its transfer become NOPs, which keep their sequence numbers,
        and the channel goes back to resend from it."""
        self._acked(peer, ch, seq)
        if not ch.unacked or ch.unacked[0].seq != seq:
            return                                  # stale: already handled
        m = ch.unacked[0]
        x = m.xfer
        if x is None or m.kind == K_NOP:
            return
        for m2 in ch.unacked:
            if m2.xfer is x and m2.kind != K_NOP:
                ch.nop(m2)
        ch.pending = deque(m2 for m2 in ch.pending if m2.xfer is not x)
        ch.resend = 0                               # the receiver dropped everything after seq
        self._transfer_refused(peer, x)

    # -- send -----------------------------------------------------------------------------

    def _send_chunk(self, Peer peer, TxChannel ch, Msg m):
        """Send one chunk of a bulk transfer (a store's or a get reply's, of more than one
        packet: `Pump` sends every other message itself): its packets read from the source
        again on every send (the sender keeps no copy of bulk data, SP-C06)."""
        cdef bint first = m.sends == 0
        ok = yield from self._send_packets(peer, m, peer.rx_req.expected, peer.rx_rep.expected, 0.0, self.c_bulk)
        if not ok:
            return False
        peer.rx_req.acked()
        peer.rx_rep.acked()
        if not first:
            self.counts[S_RETRANSMITTED_PACKETS] += m.npkts
            ch.retransmitted += m.npkts
        m.sends += 1
        return True

    def _send_packets(self, Peer peer, Msg m, int ack_req, int ack_rep, double pre, double each):
        """Hand chunk `m`'s packets to the adapter (SP-C03), each its AM header and its
        data read from the source. The host prepares them a few at a time -- AM's work
        (`pre` once, `each` per packet), the send entry, its cache flush -- syncs, and
        stores their lengths in one MicroChannel store (a byte, halfword or word of the
        length array, as its alignment allows), so the adapter sends the first packets
        while the host prepares the rest. False, with the caller's state untouched, when
        the send FIFO has no room for them all."""
        # (C integers and no closure per chunk: the packets' fields and offsets were
        # Python arithmetic in a nested function, a chunk's stores boxed tuples)
        cdef UserFifos uf = self.uf
        cdef HostFifos f = uf.fifos
        cdef Costs costs = self.costs
        cdef double cost, sum_byte = 0.0
        cdef Py_ssize_t i, j, n
        cdef int k = m.npkts, full = self.pkt_data, width
        cdef long long off
        cdef unsigned int value
        cdef bytes hdr, data
        cdef list pkts, units
        cdef int flags = m.kind | m.flags, tail = m.tail
        cdef unsigned int base = m.addr
        cdef long long src_off = m.src_off
        read = m.data
        if uf.closed:
            raise OSError(errno.EBADF, "the TB2 FIFOs are closed")
        if f.free_entries() < k:
            try:
                yield from uf._room_path(k)
            except WouldBlock:
                self.tx_need = k
                self.counts[S_FIFO_FULL] += 1
                return False
        dest, route = peer.nid, peer.route
        pkts = []
        for i in range(k):
            pkts.append((pack(flags, m.handler, m.seq, ack_req, ack_rep, <int> i, k, tail,
                              <unsigned int> (base + i * full), m.arg),
                         read(src_off + i * full, full if i < k - 1 else tail)))
        if self.checksum:                          # the end-to-end trailer (_wire.pyx), summed as it is built
            me = self.node.nid
            pkts = [(h, trailer_of(me, dest, h, d)) for h, d in pkts]
            sum_byte = self.c_sum_byte
            each += self.c_sum_packet + sum_byte * W.AM_HDR
        units = [(HDR_BYTES + len(d) + LEN_UNIT - 1) // LEN_UNIT for _h, d in pkts]
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
            self.adapter.reg_write(<unsigned int> off, value, width)
            i += width
        uf.sent += k
        self.counts[S_PACKETS_SENT] += k
        return True


# -- the pump: what a peer is owed, sent as a C state machine ---------------------------------

cdef enum:
    # what the pump is on (in this order: `Pump`'s docstring)
    P_CTL = 0
    P_REP_RESEND = 1
    P_REP_NEW = 2
    P_REQ_RESEND = 3
    P_REQ_NEW = 4
    P_ACK = 5
    P_KEEPALIVE = 6
    P_END = 7
    # where the packet being sent is
    S_IDLE = 0       # none: choose the next
    S_START = 1      # chosen, not yet written (room in the send FIFO to check)
    S_ROOM = 2       # the transmit-done counter is being read across the bus
    S_SENT = 3       # written and flushed: the length store is due
    S_POST = 4       # handed over; the retransmission copy and window bookkeeping are being paid
    S_CHUNK = 5      # a bulk chunk: `Window._send_chunk` runs it


cdef class Pump(Path):
    """Send what one peer is owed, in order: its control packets (NACKs, REJECTs), the
    reply channel (resends, then new messages the window admits), the request channel
    likewise, an explicit ack if one is still owed, a keep-alive if one is due. The
    value is False when the send FIFO is full (``tx_need`` says how much room the
    caller waits for), else True.

    A C state machine (`kernelsim._path.Path`): the same work, costs and effects at the
    same instants as the generators it replaces (pump > send message > send one packet),
    without a generator per level and a resume through each of them per packet. A
    packet's costs are yielded as they were: AM's header work, the entry's copy and
    flush, the sync and the length store before the length reaches the card; after it,
    for a new message, the retransmission copy and the window bookkeeping (costs.py).
    Bulk chunks run `Window._send_chunk` (many packets, few of them per poll)."""

    cdef int start(self, Window ep, Peer peer) except -1:
        self.ep = ep
        self.peer = peer
        self.phase = P_CTL
        self.ss = S_IDLE
        self.m = None
        self.ch = None
        self.gen = None
        return 0

    cdef int _ctl(self, int kindflags, int seq, unsigned int arg, unsigned int addr) except -1:
        """Choose a control packet (no sequence number of its own; both acks ride on it)."""
        cdef Peer peer = self.peer
        self.m = None
        self.hdr = pack(kindflags, 0, seq, peer.rx_req.expected, peer.rx_rep.expected, 0, 1, 0, addr, arg)
        self.data = b""
        self.pre = self.ep.c_hdr
        self.post = 0.0
        self.ss = S_START
        return 0

    cdef int _msg(self, TxChannel ch, Msg m) except -1:
        """Choose message `m` of channel `ch` (its first send or a resend)."""
        cdef Window ep = self.ep
        cdef Peer peer = self.peer
        cdef int kind = m.kind, words
        cdef bytes data
        self.ch = ch
        self.m = m
        self.first = m.sends == 0
        self.post = 0.0
        if (kind == K_STORE or kind == K_GETDATA) and not m.kept:
            self.gen = ep._send_chunk(peer, ch, m)
            self.ss = S_CHUNK
            return 0
        data = m.data
        self.data = data
        if m.kept:                                  # a one-packet store or get reply
            self.hdr = pack(kind | m.flags, m.handler, m.seq, peer.rx_req.expected, peer.rx_rep.expected,
                              0, 1, m.tail, m.addr, m.arg)
            self.pre = ep.c_bulk
            if self.first:
                self.post = ep.costs.copy(AM_HDR + len(data))     # the copy kept for retransmission
        else:
            self.hdr = pack(kind | m.flags, m.handler, m.seq, peer.rx_req.expected, peer.rx_rep.expected,
                              0, 1, 0, 0, 0)
            words = len(data) >> 2
            self.pre = ep.c_hdr + (ep.c_word * (words - 1) if words > 1 else 0.0)
            if self.first and kind != K_NOP:
                # After the length store: keep the packet for retransmission (SP-C05)
                # and do the window bookkeeping; a request does more of it (SP-A37).
                self.post = ep.costs.copy(AM_HDR + len(data)) + ep.c_post
                if kind != K_REP:
                    self.post += ep.c_request
        self.ss = S_START
        return 0

    cdef int _choose(self) except -1:
        """Choose the next packet: 1, or 0 when the peer is owed nothing more."""
        cdef Window ep = self.ep
        cdef Peer peer = self.peer
        cdef TxChannel ch
        cdef Msg m
        cdef tuple c
        while True:
            if self.phase == P_CTL:
                if holds(peer.ctl):
                    c = peer.ctl[0]
                    self.what = P_CTL
                    self._ctl(c[0] | c[1], c[2], c[3], 0)
                    return 1
                self.phase = P_REP_RESEND
            elif self.phase == P_REP_RESEND or self.phase == P_REQ_RESEND:
                ch = peer.tx_rep if self.phase == P_REP_RESEND else peer.tx_req
                if ch.resend < len(ch.unacked):
                    self._msg(ch, <Msg> ch.unacked[ch.resend])
                    return 1
                self.phase += 1
            elif self.phase == P_REP_NEW or self.phase == P_REQ_NEW:
                ch = peer.tx_rep if self.phase == P_REP_NEW else peer.tx_req
                pending = ch.pending
                if holds(pending) and ch.can_send((<Msg> pending[0]).npkts):
                    m = ch.next_pending()
                    if not peer.unacked():
                        ep._unsettled(peer)
                    if not ch.unacked:
                        peer.mark = ep.polls
                    ch.assign(m)
                    self._msg(ch, m)
                    return 1
                self.phase += 1
            elif self.phase == P_ACK:
                self.phase = P_KEEPALIVE
                if peer.rx_req.ack_owed or peer.rx_rep.ack_owed:
                    self.what = P_ACK
                    self._ctl(K_ACK, 0, 0, 0)
                    return 1
            elif self.phase == P_KEEPALIVE:
                self.phase = P_END
                if ep._keepalive_due(peer):
                    self.what = P_KEEPALIVE
                    self._ctl(K_KEEPALIVE, 0, 0, (peer.tx_req.next_seq << 8) | peer.tx_rep.next_seq)
                    return 1
            else:
                return 0

    cdef int _write(self, double* cost) except -1:
        """Write the chosen packet into the next send entry; its cost up to the length store."""
        cdef Window ep = self.ep
        cdef UserFifos uf = ep.uf
        cdef HostFifos f = uf.fifos
        cdef Costs costs = ep.costs
        cdef double c, each = 0.0, sum_byte = 0.0
        cdef Py_ssize_t n
        cdef bytes data = self.data
        if ep.checksum:                            # the end-to-end trailer (_wire.pyx), summed as it is built
            data = trailer_of(ep.node.nid, self.peer.nid, self.hdr, data)
            sum_byte = ep.c_sum_byte
            each += ep.c_sum_packet + sum_byte * AM_HDR
        self.idx = f.tx_next % f.send_count
        self.units = uf.write_entry(f.send_entry(), self.peer.nid, self.peer.route, AM_PROTO, self.hdr, data)
        n = len(data)
        c = self.pre
        c += each + uf.c_send + f.flush_cost(HDR_BYTES + n) + (costs.copy(n) if n else 0.0)
        if sum_byte:
            c += sum_byte * (n - CHECKSUM_BYTES)
        f.tx_next += 1
        cost[0] = c + f.c_sync + costs.pci_write
        self.ss = S_SENT
        return 0

    cdef int _handed_over(self) except -1:
        """The packet's length is stored: the card has it. What follows its send."""
        cdef Window ep = self.ep
        cdef Peer peer = self.peer
        cdef Msg m = self.m
        ep.adapter.reg_write(REG_LEN + self.idx, self.units, 1)   # one length byte: one MicroChannel store
        ep.uf.sent += 1
        ep.counts[S_PACKETS_SENT] += 1
        peer.rx_req.acked()
        peer.rx_rep.acked()
        if m is None:
            if self.what == P_CTL:
                peer.ctl.popleft()
            elif self.what == P_ACK:
                ep.counts[S_ACKS_SENT] += 1
            else:
                peer.mark = ep.polls
                peer.keepalives += 1
                ep.counts[S_KEEPALIVES_SENT] += 1
            return 0
        if not self.first:
            ep.counts[S_RETRANSMITTED_PACKETS] += m.npkts
            self.ch.retransmitted += m.npkts
        m.sends += 1
        return 0

    cdef int _sent(self) except -1:
        """A message is sent (and its bookkeeping paid): on to the next."""
        cdef Msg m = self.m
        if m is not None:
            if self.first and m.kept and m.kind == K_STORE and m.xfer is not None:
                self.ep._finish(m.xfer)             # its data is copied: the source is free
            self.ch.resend += 1
        self.ss = S_IDLE
        return 0

    cdef int step(self, double* cost) except -1:
        cdef Window ep = self.ep
        cdef HostFifos f
        cdef PyObject* res = NULL
        cdef int r
        while True:
            if self.ss == S_IDLE:
                if not self._choose():
                    self.value = True
                    return 0
            if self.ss == S_START:
                if ep.uf.closed:
                    raise OSError(errno.EBADF, "the TB2 FIFOs are closed")
                f = ep.uf.fifos
                if f.free_entries() < 1:
                    # UserFifos._room_path(1): read the transmit-done counter across the bus.
                    if 1 > f.send_count:
                        raise OSError(errno.EMSGSIZE, f"1 packets exceed the {f.send_count}-entry send FIFO")
                    cost[0] = ep.costs.pci_read
                    self.ss = S_ROOM
                    return 1
                self._write(cost)
                return 1
            if self.ss == S_ROOM:
                f = ep.uf.fifos
                f.refresh_tx_done()
                if f.free_entries() < 1:
                    ep.tx_need = 1
                    ep.counts[S_FIFO_FULL] += 1
                    self.value = False
                    return 0
                self._write(cost)
                return 1
            if self.ss == S_SENT:
                self._handed_over()
                if self.post:
                    cost[0] = self.post
                    self.ss = S_POST
                    return 1
                self._sent()
            elif self.ss == S_POST:
                self._sent()
            else:                                   # S_CHUNK
                r = resume(self.gen, &res)
                out = <object> res
                Py_XDECREF(res)
                res = NULL
                if r:
                    cost[0] = <double> out
                    return 1
                self.gen = None
                if not out:
                    self.value = False
                    return 0
                self.ch.resend += 1
                self.ss = S_IDLE
