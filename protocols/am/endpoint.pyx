# cython: language_level=3, annotation_typing=False, binding=True
"""One SP AM endpoint: the library state of the one process per node that drives the TB2.

Everything here runs on the host, in the user process, at user level: the AM library
of the paper is a user library over the memory-mapped FIFOs (SP-A18, SP-C02), and
the adapter runs IBM's standard firmware unchanged. The kernel's part (``service.py``)
is only to give this process the card and to pin its memory segments.

The endpoint is four files, one per mechanism: this one (the calls, the handler table
and segments, receiving and dispatching a packet, polling, closing), ``window.pyx``
(sequenced channels, the window, acknowledgements, NACKs and go-back, and the send
path into the FIFOs), ``bulk.pyx`` (chunked am_store/am_get) and ``keepalive.pyx``.
What every packet touches -- the header, the channels, the peer -- is Cython,
``_wire.pyx``.

Work is written as *paths* (generators yielding CPU seconds, see ``kernelsim._cpu``).
The user API (``libdp.am``) submits them for the process; a path that cannot finish
yet -- a full window, a transfer still in flight, nothing arrived -- returns
`BLOCKED` (``Window.blocked``; in real time it raises `WouldBlock`), and the caller waits
on this endpoint's event queue, as a program spinning in ``am_poll`` would. Its spin is not simulated poll by poll: when
it resumes, the polls it would have made are counted (they are the keep-alive's
clock, SP-C08) and the poll that notices the event is charged half a poll on average.
"""
from __future__ import annotations

import bisect
import errno
import inspect
from collections import deque

from kernelsim import WouldBlock
from kernelsim._waits cimport WaitQueue
from nic_drivers.tb2._model cimport RX_VALID_BIT
from nic_drivers.tb2.fifos cimport HostFifos, Packet, UserFifos

from nic_drivers.tb2 import _model as hw
from protocols.am import _wire as W
from protocols.am._checks import MAX_HANDLERS, U32
from protocols.am._checks cimport C_U32, exact_int_in, handler_index, pack_words
from protocols.am.window import AM_PROTO, BLOCKED
from protocols.am._wire cimport Header, Msg, Peer, RxChannel, TxChannel, holds, new_msg, verify_of, words_of
from protocols.am.bulk cimport Bulk, Transfer
from protocols.am._codes cimport *
from protocols.am.window cimport Events, Pump, Window
from kernelsim._path cimport Path, reuse
from kernelsim._pyiter cimport take_raised
from cpython.ref cimport PyObject, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM
cimport cython


cdef extern from "Python.h":
    # Returns NULL with the error set: the caller looks (`AmEndpoint._run_handler`).
    PyObject* PyObject_Vectorcall(object fn, PyObject** args, size_t nargsf, PyObject* kwnames)

DEF H_STATUS = 28            # nic_drivers.tb2._model: the receive status word
assert (hw.H_STATUS, hw.RX_VALID) == (H_STATUS, RX_VALID_BIT)

__all__ = ["AmEndpoint", "Segment", "Token", "HandlerRuleError", "AM_PROTO", "MAX_HANDLERS",
           "STAT_KEYS"]


class HandlerRuleError(OSError):
    """A call a handler may not make (GAM 1.1: handlers reply, they never request or
    poll), or a reply outside the rules (outside its handler, twice, from a reply)."""


class Segment:
    """Pinned memory of an endpoint that remote stores and gets may name."""

    __slots__ = ("ep", "addr", "size", "live")

    def __init__(self, ep, addr: int, size: int):
        self.ep = ep
        self.addr = addr
        self.size = size
        self.live = True

    def _span(self, off: int, n: int) -> int:
        if not self.live:
            raise OSError(errno.EFAULT, "the segment has been released")
        if not isinstance(off, int) or not isinstance(n, int) or off < 0 or n < 0 or off + n > self.size:
            raise OSError(errno.EFAULT, f"[{off}, {off}+{n}) is outside the {self.size}-byte segment")
        return self.addr + off

    def read(self, off: int = 0, n: int | None = None) -> bytes:
        n = self.size - off if n is None else n
        return self.ep.mem.read(self._span(off, n), n)

    def write(self, off: int, data) -> None:
        data = bytes(data)
        self.ep.mem.write(self._span(off, len(data)), data)

    def __repr__(self):
        return f"<Segment {self.addr:#x}+{self.size} on node {self.ep.node.nid}>"


@cython.freelist(8)
@cython.freelist(8)
cdef class Token:
    """Who sent the message a handler is running for; the handle for its reply."""
    cdef readonly object ep
    cdef readonly int src
    cdef readonly bint request
    cdef public bint live, replied

    def __init__(self, ep, int src, bint request):
        self.ep = ep
        self.src = src
        self.request = request
        self.live = True
        self.replied = False

    def reply(self, handler: int, *args) -> None:
        self.ep.reply(self, handler, args)

    def __repr__(self):
        return f"<Token from node {self.src}, {'request' if self.request else 'reply'}{'' if self.live else ', spent'}>"


cdef class AmEndpoint(Bulk):
    """The AM state of one process (one per node: it owns the TB2's FIFOs). The chain
    Window < KeepAlive < Bulk < AmEndpoint is one object; its fields are in window.pxd."""

    kind = "AM endpoint"

    def export_to(self, owner):
        """Real nodes: the attached process drives the card itself (SP-A18), so the node hands
        it the adapter's frames (`kernelsim.daemon.Passthrough`); its own copy of this module
        runs the protocol (see `libdp._attach`)."""
        from kernelsim.daemon import Passthrough
        return Passthrough(owner, self.adapter.port)

    def __init__(self, service, proc, uf, params: dict):
        super().__init__(proc.node)
        node = proc.node
        self.service = service
        self.proc = proc
        self.uf = uf
        self.adapter = uf.adapter
        self.mem = node.mem
        self.engine = node.engine
        self.costs = node.costs
        self.closed = False
        self.fd = -1
        cyc = node.costs.cycles
        self.c_poll_own = cyc(params["poll_cycles"])
        self.c_dispatch = cyc(params["dispatch_cycles"])
        self.c_hdr = cyc(params["hdr_cycles"])
        self.c_word = cyc(params["word_cycles"])
        self.c_post = cyc(params["post_cycles"])
        self.c_request = cyc(params["request_cycles"])
        self.c_bulk = cyc(params["bulk_cycles"])
        self.full_poll = self.c_poll_own + uf.c_poll       # one am_poll of an empty network (SP-A35)
        self.checksum = params["checksum"]
        self.c_sum_byte = cyc(params["checksum_byte_cycles"])
        self.c_sum_packet = cyc(params["checksum_packet_cycles"])
        self.pkt_data = W.PKT_DATA - (W.CHECKSUM_BYTES if self.checksum else 0)
        self.handlers = [None] * MAX_HANDLERS
        self.hdr = W.Header()
        self.hdr.pkt_data = self.pkt_data
        self.segments = []                       # Segment, sorted by address
        self._starts = []
        self._ends = []                          # each segment's end, in the same order
        self.events = Events(node.engine)
        self.polls = 0
        self._handler_depth = 0
        self.pending_errors = deque()
        self.closing = False
        self.malformed = {k: 0 for k in W.MALFORMED_NAMES[1:] + ("bad_handler", "bad_proto", "bad_source")}
        self._init_window(params)
        self._init_bulk(params)
        self._init_keepalive(params)
        uf.adapter.on_rx = self.events          # an arrival wakes a waiting caller (by a C call)
        uf.adapter.on_tx_space = self._on_tx_space

    def __repr__(self):
        return f"AM endpoint of pid {self.proc.pid} on node {self.node.nid}"

    # -- adapter events: wake a waiting caller ---------------------------------------------

    def _on_tx_space(self) -> None:
        if self.tx_need:
            f = self.uf.fifos
            if f.send_count - ((f.tx_next - self.adapter.tx_done) & U32) >= self.tx_need:
                self.tx_need = 0
                self.events.wake()

    cpdef bint ready(self) except -1:
        """Would the caller's very next poll find work? (Something may have arrived, or
        send-FIFO room appeared, while its last path was still busy sending: a spinning
        program sees it at once, so the caller must not wait for the next event.)"""
        cdef HostFifos f = self.uf.fifos
        if f.recv_base and self.mem.rd32(f.recv_entry(f.rx_head) + H_STATUS) & RX_VALID_BIT:
            return True
        if self.tx_need and f.send_count - ((f.tx_next - self.adapter.tx_done) & U32) >= self.tx_need:
            self.tx_need = 0
            return True
        return False

    # -- handler table and segments ----------------------------------------------------------

    def set_handler(self, index: int, fn) -> None:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_HANDLERS:
            raise OSError(errno.EINVAL, f"handler index must be 0..{MAX_HANDLERS - 1}, not {index!r}")
        if fn is not None and (not callable(fn) or inspect.iscoroutinefunction(fn)):
            raise OSError(errno.EINVAL, "a handler is a plain function fn(token, *args) (it runs inside am_poll)")
        self.handlers[index] = fn

    def segment(self, nbytes: int) -> Segment:
        self._check_open()
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise OSError(errno.EINVAL, f"a segment has a positive size, not {nbytes!r}")
        line = self.uf.fifos.line
        try:
            addr = self.mem.alloc(nbytes, line)
        except MemoryError:
            raise OSError(errno.ENOMEM, f"no memory to pin a {nbytes}-byte segment") from None
        if addr + nbytes > U32:
            self.mem.release(addr)
            raise OSError(errno.ENOMEM, "segment beyond the 32-bit address space")
        seg = Segment(self, addr, nbytes)
        i = bisect.bisect(self._starts, addr)
        self._starts.insert(i, addr)
        self._ends.insert(i, addr + nbytes)
        self.segments.insert(i, seg)
        return seg

    def release_segment(self, seg: Segment) -> None:
        if seg.ep is not self or not seg.live:
            raise OSError(errno.EINVAL, "not a live segment of this endpoint")
        i = self.segments.index(seg)
        del self.segments[i]
        del self._starts[i]
        del self._ends[i]
        seg.live = False
        self.mem.release(seg.addr)

    def local_range(self, buf, nbytes: int) -> int:
        """The address of a local buffer (a Segment or an address in one); EFAULT if not ours."""
        return self._local_range(buf, nbytes)

    cdef object _local_range(self, object buf, object nbytes):
        if exact_int_in(buf, 0, C_U32) and exact_int_in(nbytes, 0, C_U32):
            # The common case, a 32-bit address and count: the same test as below, in C
            # (no boxed sum, no Python compare).
            if not Window.in_segments_c(self, <long long> buf, <long long> buf + <long long> nbytes):
                raise OSError(errno.EFAULT, f"local buffer {buf!r}+{nbytes} is not inside a registered segment")
            return buf
        addr = buf
        if type(buf) is not int:            # (an address is the common case: it skips the
            if isinstance(buf, Segment):    # isinstance of a Python class, a slow one)
                if buf.ep is not self or not buf.live:
                    raise OSError(errno.EFAULT, "the segment is not a live segment of this endpoint")
                addr = buf.addr
            if not isinstance(addr, int) or isinstance(addr, bool):
                raise OSError(errno.EFAULT, f"local buffer {addr!r}+{nbytes} is not inside a registered segment")
        if not Window.in_segments(self, addr, addr + nbytes):
            raise OSError(errno.EFAULT, f"local buffer {addr!r}+{nbytes} is not inside a registered segment")
        return addr

    # -- the rules handlers live by -----------------------------------------------------------

    def check_caller(self, call: str) -> None:
        self._check_open()
        if self._handler_depth:
            raise HandlerRuleError(errno.EDEADLK, f"{call} called from inside a handler: handlers may only reply "
                                                  "(Generic Active Messages 1.1; a request or a poll from a handler "
                                                  "can deadlock the network)")

    def _check_open(self) -> None:
        if self.closed:
            raise OSError(errno.EBADF, "the AM endpoint is closed")

    # -- building messages (no modeled time: the paths charge it when they send) --------------

    def request_msg(self, dest: int, handler: int, args) -> tuple:
        cdef Peer peer = Window.peer(self, dest)
        return peer, new_msg(K_REQ, 0, handler_index(handler), pack_words(args), 1, 0, 0, 0, 0, None, False)

    def reply(self, token, handler: int, args) -> None:
        """am_reply_M: only inside a request handler, at most once (GAM 1.1)."""
        cdef Token tok
        if not isinstance(token, Token) or (<Token> token).ep is not self:
            raise OSError(errno.EINVAL, f"not a token of this endpoint: {token!r}")
        tok = <Token> token
        if not tok.live:
            raise HandlerRuleError(errno.EINVAL, "am_reply with a token whose handler has returned "
                                                 "(a reply is sent from inside the request handler)")
        if not tok.request:
            raise HandlerRuleError(errno.EDEADLK, "am_reply from a reply handler: replies cannot be answered "
                                                  "(Generic Active Messages 1.1)")
        if tok.replied:
            raise HandlerRuleError(errno.EINVAL, "a request handler replies at most once")
        m = new_msg(K_REP, 0, handler_index(handler), pack_words(args), 1, 0, 0, 0, 0, None, False)
        (<Peer> self.peers[tok.src]).tx_rep.queue(m)
        tok.replied = True

    # -- paths: the calls ---------------------------------------------------------------------
    #
    # Each call's path is an `AmPath` (a C state machine, below): the call's own sending,
    # then a poll, then the call's verdict, with the same yields at the same instants as
    # the generators they were (request > poll > receive > handler > pump > send).

    cpdef object request_path(self, object peer, object msg, object since=None):
        """am_request_M: queue, send if the window allows, poll (every request polls)."""
        return _call_path(self, A_REQUEST, since, peer, msg, True, False)

    cpdef object transfer_path(self, object x, object since=None, bint wait=False):
        """am_store / am_store_async / am_get: the request's bookkeeping, send what the
        window allows, poll; a blocking store waits for its last acknowledgement."""
        return _call_path(self, A_TRANSFER, since, x, None, not wait, wait)

    cpdef object wait_path(self, object pred, object since=None):
        """Poll until `pred()` holds (a program's ``while (!flag) am_poll();``)."""
        return _call_path(self, A_WAIT, since, pred, None, True, False)

    def close_path(self, since=None):
        """Before the FIFOs go: acknowledge what we hold and wait for our own messages'
        acks -- for as long as a call would (``max_keepalives`` keep-alives in a row
        unanswered: ETIMEDOUT), and not for a node already reported gone; then stay
        ``close_linger`` keep-alive periods after the last packet heard (keepalive.pyx)."""
        if since is None:
            self.closing = True
            for peer in self.peers.values():
                if peer.rx_req.unacked or peer.rx_rep.unacked:
                    peer.rx_req.ack_owed = True
                    self._kick(peer)
        yield from self.poll_path(since, raise_errors=False)
        for p in self.peers.values():
            if (p.unacked() or p.tx_req.pending or p.tx_rep.pending or p.ctl) and not self.reported_gone(p):
                return self.blocked("AM endpoint draining")
        if self.lingering():
            return self.blocked("AM endpoint lingering for the peers' last keep-alives")
        f = self.uf.fifos
        if f.outstanding():
            # Let the adapter take what we handed it, so the card is free when we go.
            yield self.costs.pci_read
            f.refresh_tx_done()
            if f.outstanding():
                self.tx_need = f.send_count
                return self.blocked("AM endpoint draining the send FIFO")
        return 0

    def poll_path(self, since=None, raise_errors: bool = True):
        """am_poll: take every packet waiting (SP-C04), run their handlers, then send
        what is owed: replies, retransmissions, acks, NACKs, keep-alives."""
        return _call_path(self, A_POLL, since, None, None, raise_errors, False)

    def _raise_pending(self) -> None:
        if self.pending_errors:
            raise self.pending_errors.popleft()

    # -- receive ------------------------------------------------------------------------------

    def rx_packet_path(self, src: int, proto: int, user: bytes, data: bytes):
        """The receive entry point for one packet as taken from the FIFO (also what tests
        feed with arbitrary bytes: whatever it is, it is dropped and counted or handled)."""
        cdef AmPath path = _call_path(self, A_RX_ONE, None, None, None, False, False)
        path.pkt = Packet(src, bytes(data), proto, 0, bytes(user))
        path.state = ST_RX
        return path

    cdef int _rx_packet(self, Peer peer, Header h, bytes data) except -1:
        """One well-formed packet from `peer`: its acks, then what it is. 1 when a handler
        it ran replied (the caller then sends what the peer is owed)."""
        cdef int kind, w
        cdef bint repch
        cdef RxChannel rx
        self.counts[S_RX_PACKETS] += 1
        peer.keepalives = 0
        self.heard = self.polls
        # Every packet carries both acks (SP-C05: piggybacked where possible).
        self._acked(peer, peer.tx_req, h.ack_req)
        self._acked(peer, peer.tx_rep, h.ack_rep)
        kind = h.kind
        if kind == K_ACK:
            self.counts[S_ACKS_RECEIVED] += 1
            return 0
        if kind == K_NACK:
            self._nacked(peer, h)
            return 0
        if kind == K_KEEPALIVE:
            self._rx_keepalive(peer, h)
            return 0
        if kind == K_REJECT:
            self.counts[S_REJECTS_RECEIVED] += 1
            self._rejected(peer, peer.tx_rep if h.flags & F_REPCH else peer.tx_req, h.seq, h.arg)
            return 0
        repch = kind == K_REP or kind == K_GETDATA or (kind == K_NOP and h.flags & F_REPCH)
        rx = peer.rx_rep if repch else peer.rx_req
        w = rx.where(h.seq)
        if w == W_BEHIND:
            # A duplicate of what we have: our ack may have been lost; say it again.
            self.counts[S_DUPLICATES] += 1
            rx.ack_owed = True
            return 0
        if w == W_AHEAD:
            # A gap: drop, and NACK once per gap (SP-C05: go back to what we expect).
            self.counts[S_OUT_OF_ORDER] += 1
            if not rx.nacked:
                rx.nacked = True
                peer.ctl.append((K_NACK, F_REPCH if repch else 0, rx.expected, 0))
                self.counts[S_NACKS_SENT] += 1
            return 0
        if kind == K_REQ or kind == K_REP:
            rx.advance(1)
            fn = self.handlers[h.handler]
            if fn is None:
                self.malformed["bad_handler"] += 1
                return 0
            return self._run_handler(peer, fn, kind == K_REQ, words_of(data))
        elif kind == K_STORE:
            return self._rx_store(peer, rx, h, data)
        elif kind == K_GETDATA:
            return self._rx_getdata(peer, rx, h, data)
        elif kind == K_GETREQ:
            self._rx_getreq(peer, rx, h, data)
        else:                                     # K_NOP: a cancelled message keeps its number
            rx.advance(1)
            if not repch:
                peer.in_base = -1
        return 0

    cdef int _run_handler(self, Peer peer, object fn, bint request, tuple args) except -1:
        """Run a handler (inside the poll); 1 if it replied: the reply leaves as it returns."""
        cdef Token tok = Token.__new__(Token)
        tok.ep = self
        tok.src = peer.nid
        tok.request = request
        tok.live = True
        cdef PyObject* argv[1 + MAX_WORDS]
        cdef PyObject* res
        cdef Py_ssize_t i, n = len(args)
        self._handler_depth += 1
        if n <= MAX_WORDS:
            # Every well-formed message: the handler is called with its words spread (a
            # vectorcall, no tuple) and its error, if any, is left set as this returns, with
            # no `try ... finally` (entering one walks the thread's stack of handled
            # exceptions, ~120 instructions per handler: see kernelsim._pyiter.take_raised).
            argv[0] = <PyObject*> tok
            for i in range(n):
                argv[1 + i] = PyTuple_GET_ITEM(args, i)
            res = PyObject_Vectorcall(fn, argv, 1 + n, NULL)
            self._handler_depth -= 1
            tok.live = False
            if res == NULL:
                return -1
            Py_XDECREF(res)
        else:
            try:
                fn(tok, *args)
            finally:
                self._handler_depth -= 1
                tok.live = False
        self.counts[S_HANDLERS_RUN] += 1
        return tok.replied

    # -- close -------------------------------------------------------------------------------

    def release(self, proc) -> None:
        """Last close (or process exit): unmap the FIFOs, unpin the segments. Messages
        still unacknowledged or not yet sent are abandoned, and counted."""
        if self.closed:
            return
        self.closed = True
        self._cancel_timer()
        for p in self.peers.values():
            for ch in (p.tx_req, p.tx_rep):
                self.counts[S_ABANDONED] += len(ch.unacked) + len(ch.pending)
        if not self.uf.closed:
            self.uf.close()
        for seg in list(self.segments):
            self.release_segment(seg)
        self.service.endpoint_closed(self)
        self.events.wake()

    @property
    def stats_c(self) -> dict:
        """The counters (STAT_KEYS), as they stand."""
        cdef int i
        return {STAT_KEYS[i]: self.counts[i] for i in range(N_STATS)}

    @property
    def handlers_run(self) -> int:
        """Handlers run so far (what a program polling for requests counts)."""
        return self.counts[S_HANDLERS_RUN]

    def stats(self) -> dict:
        out = self.stats_c
        out["malformed"] = dict(self.malformed)
        out["peers"] = {p.nid: {"req_next_seq": p.tx_req.next_seq, "req_unacked": len(p.tx_req.unacked),
                                "rep_next_seq": p.tx_rep.next_seq, "rep_unacked": len(p.tx_rep.unacked),
                                "req_expected": p.rx_req.expected, "rep_expected": p.rx_rep.expected}
                        for p in sorted(self.peers.values(), key=lambda p: p.nid)
                        if p.tx_req.next_seq or p.tx_rep.next_seq or p.rx_req.accepted or p.rx_rep.accepted}
        out["fifos"] = self.uf.stats()
        return out


STAT_KEYS = ("requests", "stores", "gets", "polls", "empty_polls", "idle_polls", "rx_packets", "packets_sent",
             "retransmitted_packets", "gobacks", "nacks_sent", "nacks_received", "acks_sent", "acks_received",
             "keepalives_sent", "keepalives_received", "rejects_sent", "rejects_received", "duplicates",
             "out_of_order", "handlers_run", "chunks_received", "stores_received", "bytes_stored",
             "stores_completed", "gets_served", "gets_completed", "fifo_full", "abandoned", "checksum_errors")


# -- the calls' paths as C state machines ------------------------------------------------------

cdef enum:
    # what the path is (`_call_path`)
    A_POLL = 0          # am_poll
    A_REQUEST = 1       # am_request_M: queue, pump the peer, poll; BLOCKED while the window is full
    A_TRANSFER = 2      # am_store / am_store_async / am_get: pump the peer, poll (a blocking store waits)
    A_WAIT = 3          # poll until a predicate holds
    A_RX_ONE = 4        # one packet handed in from outside (`rx_packet_path`)
    # where it is
    ST_BEGIN = 0
    ST_TRANSFER = 1     # a store's request bookkeeping is paid: pump its peer
    ST_OWN_PUMP = 2     # the call's own peer is being pumped, before the poll
    ST_POLL = 3
    ST_POLLED = 4
    ST_LOOK = 5
    ST_TAKE = 6
    ST_POP = 7
    ST_TAKEN = 8
    ST_DISPATCH = 9
    ST_RX = 10
    ST_RX_SUM = 11
    ST_RX_WORK = 12
    ST_RX_PUMP = 13     # a handler replied: its peer is being pumped
    ST_PUMP_ALL = 14
    ST_PUMP_NEXT = 15
    ST_PUMP_RUN = 16
    ST_END = 17

cdef int _AM_PROTO = AM_PROTO


# `AmPath.step` calls a packet's receive and the pump of a handler's reply through pointers
# that do not say they can fail, and looks at the -1 itself (`take_raised`), to put its peer
# back on the work queue before the error goes on: a `try` block would walk the thread's
# stack of handled exceptions on every packet (see kernelsim._pyiter.take_raised).
cdef int _rx_packet_of(AmEndpoint ep, Peer peer, Header h, bytes data) except -1:
    return ep._rx_packet(peer, h, data)

cdef int _pump_step_of(Pump pump, double* cost) except -1:
    return pump.step(cost)

ctypedef int (*_RxPacketFn)(AmEndpoint, Peer, Header, bytes) noexcept
ctypedef int (*_PumpStepFn)(Pump, double*) noexcept
cdef _RxPacketFn _rx_packet_unchecked = <_RxPacketFn> _rx_packet_of
cdef _PumpStepFn _pump_step_unchecked = <_PumpStepFn> _pump_step_of


cdef list _paths = [None] * 4           # spare AmPaths (`kernelsim._path.reuse`)


cdef AmPath _call_path(AmEndpoint ep, int what, object since, object a, object b, bint raise_errors, bint wait):
    # A pipelined sweep makes a call, so a path, per transfer: a spare one (with its pump)
    # costs less than a new one, more than a short transfer's own sending.
    cdef AmPath p = <AmPath> reuse(_paths, AmPath)
    p.value = None
    p.n = p.limit = p.pump_return = 0
    p.c = 0.0
    p.pkt = None
    p.data = None
    p.peer = None
    p.ep = ep
    p.what = what
    p.since = since
    p.a = a
    p.b = b
    p.raise_errors = raise_errors
    p.wait = wait
    p.state = ST_BEGIN
    return p


cdef class AmPath(Path):
    """One call of an SP AM endpoint as a C state machine (`kernelsim._path.Path`): for a
    request or a transfer, its own sending; then am_poll -- a look at the receive FIFO's
    head per packet, taking it (popping the entries every `pop_every`), dispatching it,
    its acks, its handler and the reply the handler gave; then sending what the peers on
    the work queue are owed (`Pump`) -- and last, the call's verdict: its value, or
    `BLOCKED` while it cannot finish (the caller waits on the endpoint's events and
    runs the continuation, ``since`` the time it started to wait).

    The costs and effects are those of the generators it replaces, in the same order at
    the same instants; a packet's receive runs as C calls, with no generator per level."""
    cdef AmEndpoint ep
    cdef int what, state, n, limit
    cdef object since, a, b
    cdef bint raise_errors, wait
    cdef double c
    cdef Packet pkt
    cdef bytes data
    cdef Peer peer
    cdef Pump pump
    cdef int pump_return

    cdef Pump _pump(self, Peer peer):
        if self.pump is None:
            self.pump = Pump.__new__(Pump)
        self.pump.start(self.ep, peer)
        return self.pump

    cdef int step(self, double* cost) except -1:
        cdef AmEndpoint ep = self.ep
        cdef UserFifos uf
        cdef HostFifos f
        cdef Peer peer
        cdef long long spun
        cdef int bad, replied
        while True:
            if self.state == ST_BEGIN:
                if self.since is not None:
                    self.state = ST_POLL
                elif self.what == A_REQUEST:
                    peer = <Peer> self.a
                    peer.tx_req.queue(<Msg> self.b)
                    ep.counts[S_REQUESTS] += 1
                    ep._kick(peer)
                    self._pump(peer)
                    self.state = ST_OWN_PUMP
                elif self.what == A_TRANSFER:
                    self.state = ST_TRANSFER
                    if (<Transfer> self.a).kind == "store":
                        cost[0] = ep.c_request      # a get's request is charged as its GETREQ leaves
                        return 1
                else:
                    self.state = ST_POLL
            elif self.state == ST_TRANSFER:
                peer = (<Transfer> self.a).peer       # a store's (peers are never dropped)
                if peer is None:
                    peer = <Peer> ep.peers[(<Transfer> self.a).dest]
                ep._kick(peer)
                self._pump(peer)
                self.state = ST_OWN_PUMP
            elif self.state == ST_OWN_PUMP:
                if self.pump.step(cost):
                    return 1
                self.state = ST_POLL
            elif self.state == ST_POLL:
                if ep.closed:
                    ep._check_open()
                self.state = ST_POLLED
                if self.since is not None:
                    spun = <long long> ((ep.engine.now - <double> self.since) / ep.full_poll + 1e-9) \
                        if ep.full_poll > 0 else 0
                    ep.polls += spun
                    ep.counts[S_IDLE_POLLS] += spun
                    cost[0] = 0.5 * ep.c_poll_own
                else:
                    cost[0] = ep.c_poll_own
                return 1
            elif self.state == ST_POLLED:
                ep.polls += 1
                if ep.wall_clock:
                    ep._tick_wall_clock()
                ep.counts[S_POLLS] += 1
                self.limit = ep.uf.fifos.recv_count
                self.n = 0
                self.state = ST_LOOK
            elif self.state == ST_LOOK:
                if self.n >= self.limit:
                    self.state = ST_PUMP_ALL
                    continue
                # uf.poll_path(since), inlined: a look at the head, then the packet
                cost[0] = ep.uf.look(self.since)
                self.since = None
                self.state = ST_TAKE
                return 1
            elif self.state == ST_TAKE:
                uf = ep.uf
                self.pkt = uf.take()
                if self.pkt is None:
                    self.state = ST_PUMP_ALL
                    continue
                self.c = uf.rx_cost
                self.state = ST_TAKEN
                if uf.fifos.pop_due():
                    cost[0] = self.c + ep.costs.pci_write
                    self.c = 0.0
                    self.state = ST_POP
                    return 1
            elif self.state == ST_POP:
                ep.uf.fifos.pop()
                self.state = ST_TAKEN
            elif self.state == ST_TAKEN:
                ep.uf.received += 1
                self.state = ST_DISPATCH
                cost[0] = self.c
                return 1
            elif self.state == ST_DISPATCH:
                self.n += 1
                self.state = ST_RX
                cost[0] = ep.c_dispatch
                return 1
            elif self.state == ST_RX:
                # One packet from the receive FIFO: its acks, then what it is.
                if self.pkt.proto != _AM_PROTO:
                    ep.malformed["bad_proto"] += 1
                    self.state = ST_LOOK
                    continue
                self.data = self.pkt.data
                self.state = ST_RX_WORK
                if ep.checksum:
                    # Before a single field is read: a damaged packet is a lost packet (_wire.pyx).
                    self.state = ST_RX_SUM
                    cost[0] = ep.c_sum_packet + ep.c_sum_byte * (AM_HDR + len(self.data))
                    return 1
            elif self.state == ST_RX_SUM:
                if not verify_of(self.pkt.src, ep.node.nid, <bytes> self.pkt.user, self.data):
                    ep.counts[S_CHECKSUM_ERRORS] += 1
                    self.state = ST_LOOK
                    continue
                self.data = self.data[:-CHECKSUM_BYTES]
                self.state = ST_RX_WORK
            elif self.state == ST_RX_WORK:
                self.state = ST_LOOK if self.what != A_RX_ONE else ST_END
                src = self.pkt.src
                peer = ep.peers.get(src)
                if peer is None:
                    peer = ep._new_peer(src) if isinstance(src, int) and src != ep.node.nid else None
                    if peer is None:
                        ep.malformed["bad_source"] += 1
                        continue
                bad = ep.hdr.parse_bytes(self.pkt.user, len(self.data), ep.chunk_packets)
                if bad:
                    ep.malformed[W.MALFORMED_NAMES[bad]] += 1
                    continue
                replied = _rx_packet_unchecked(ep, peer, ep.hdr, self.data)
                if replied == -1:
                    exc = take_raised()
                    if peer.busy():
                        ep._kick(peer)
                    raise exc
                if replied:
                    ep._kick(peer)
                    self._pump(peer)             # a reply leaves as the handler returns
                    self.peer = peer
                    self.pump_return = self.state
                    self.state = ST_RX_PUMP
                elif peer.busy():                # it owes an answer, a resend, an ack...
                    ep._kick(peer)
            elif self.state == ST_RX_PUMP:
                peer = self.peer
                replied = _pump_step_unchecked(self.pump, cost)
                if replied == -1:
                    exc = take_raised()
                    if peer.busy():
                        ep._kick(peer)
                    raise exc
                if replied:
                    return 1
                if peer.busy():
                    ep._kick(peer)
                self.peer = None
                self.state = self.pump_return
            elif self.state == ST_PUMP_ALL:
                # Send what the peers on the work queue are owed (stop when the send FIFO is full).
                if self.what == A_RX_ONE:
                    self.state = ST_END
                    continue
                ep._keepalive_check()
                self.state = ST_PUMP_NEXT
            elif self.state == ST_PUMP_NEXT:
                peer = ep._next_work()
                if peer is None:
                    self.state = ST_END
                    continue
                self._pump(peer)
                self.peer = peer
                self.state = ST_PUMP_RUN
            elif self.state == ST_PUMP_RUN:
                if self.pump.step(cost):
                    return 1
                peer = self.peer
                self.peer = None
                self.state = ST_PUMP_NEXT
                if not self.pump.value:
                    ep._work_first(peer)
                    self.state = ST_END
            else:
                return self._end()

    cdef int _end(self) except -1:
        """The poll is over: the call's verdict."""
        cdef AmEndpoint ep = self.ep
        if self.what == A_RX_ONE:
            self.value = None
            return 0
        if self.n == 0:
            ep.counts[S_EMPTY_POLLS] += 1
        if self.raise_errors and holds(ep.pending_errors):
            ep._raise_pending()
        self.value = self.n
        if self.what == A_REQUEST:
            if (<Msg> self.b).sends == 0:
                self.value = ep.blocked("AM request window full")
        elif self.what == A_TRANSFER:
            if self.wait:
                x = self.a
                if not x.done:
                    self.value = ep.blocked("AM store in flight")
                elif x.error is not None:
                    raise x.error
                elif holds(ep.pending_errors):
                    ep._raise_pending()
        elif self.what == A_WAIT:
            if not self.a():
                self.value = ep.blocked("waiting for AM progress")
        return 0


# The C counters' indices (_codes.pxd) name the same statistics as STAT_KEYS.
assert len(STAT_KEYS) == N_STATS and all(STAT_KEYS[i] == k for i, k in (
    (S_REQUESTS, "requests"), (S_STORES, "stores"), (S_GETS, "gets"), (S_POLLS, "polls"), (S_EMPTY_POLLS,
    "empty_polls"), (S_IDLE_POLLS, "idle_polls"), (S_RX_PACKETS, "rx_packets"), (S_PACKETS_SENT,
    "packets_sent"), (S_RETRANSMITTED_PACKETS, "retransmitted_packets"), (S_GOBACKS, "gobacks"),
    (S_NACKS_SENT, "nacks_sent"), (S_NACKS_RECEIVED, "nacks_received"), (S_ACKS_SENT, "acks_sent"),
    (S_ACKS_RECEIVED, "acks_received"), (S_KEEPALIVES_SENT, "keepalives_sent"), (S_KEEPALIVES_RECEIVED,
    "keepalives_received"), (S_REJECTS_SENT, "rejects_sent"), (S_REJECTS_RECEIVED, "rejects_received"),
    (S_DUPLICATES, "duplicates"), (S_OUT_OF_ORDER, "out_of_order"), (S_HANDLERS_RUN, "handlers_run"),
    (S_CHUNKS_RECEIVED, "chunks_received"), (S_STORES_RECEIVED, "stores_received"), (S_BYTES_STORED,
    "bytes_stored"), (S_STORES_COMPLETED, "stores_completed"), (S_GETS_SERVED, "gets_served"),
    (S_GETS_COMPLETED, "gets_completed"), (S_FIFO_FULL, "fifo_full"), (S_ABANDONED, "abandoned"),
    (S_CHECKSUM_ERRORS, "checksum_errors")))
