# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""FM's receive side in C: a message as its handler sees it, handlers run, SMT frames taken.

`RecvStream` is ``await stream.receive(n)`` (FM_receive). `ContextCore` is the per-packet
half of one context: its handler dispatch -- the first packet of a message starts its
handler, later ones resume it -- in both time modes, and in real time the shared-memory
transport walked by the caller's own poll: `send_now` (a whole one-packet message) and
`extract_smt`. Its counters are C fields, added to the context's by `add_counts`.

FM 2.x hands a message to its handler as a stream the handler receives piece by piece
into its own buffers (FM-B19a). The handler is an ``async def``; each ``receive`` is an
awaitable that copies what the current packet holds and, if the handler wants more
than has arrived, suspends it (yields `NEED_MORE` to the context, which resumes the
handler when the message's next packet comes). The context opens a *window* on each
packet's data while the handler runs on it and closes it after, so the stream never
reads a slot or frame that has been released.

Costs: each awaited receive charges the module's ``receive`` cycles and each copy the
memory's rate, added to `cost` in the order they happen (the context starts `cost` at
the handler's own cost on a message's first packet); real time ignores them.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING
from libc.string cimport memcpy

import errno
import inspect
from types import CoroutineType

from protocols.fm._smtport cimport Peer, SmtPort
from protocols.fm._wire cimport Header, FM_HDR, KIND_DATA, FLAG_FIRST, FLAG_LAST

DEF MAXH = 1024
MAX_HANDLERS = MAXH             # handler IDs are 0..MAX_HANDLERS-1

__all__ = ["RecvStream", "ContextCore", "HandlerRuleError", "NEED_MORE", "MAX_HANDLERS"]


class HandlerRuleError(OSError):
    """A call FM's handlers may not make (a send or an extract from inside a handler)."""

NEED_MORE = object()            # what a suspended handler's receive yields


cdef class RecvStream:
    """A message as its handler sees it."""

    def __init__(self, ctx, int src, long long length, int handler):
        self.ctx = ctx
        self.src = src             # the sending FM node
        self.length = length
        self.handler = handler
        self.taken = 0             # bytes the handler has received
        self.arrived = 0           # bytes of the message that have arrived
        self.coro = None
        self.done = False
        c = ctx.c
        self._c_receive = c.receive
        self._c_copy_base = c.copy_base
        self._c_copy_rate = c.copy_rate

    @property
    def remaining(self) -> int:
        return self.length - self.taken

    def receive(self, n):
        """Awaitable: the next `n` bytes of the message (fewer only at its end)."""
        if type(n) is not int and not isinstance(n, int) or n < 0:
            raise OSError(errno.EINVAL, f"receive takes a byte count, not {n!r}")
        return _Receive(self, min(n, self.length), None)

    def receive_into(self, buf, n=None):
        """Awaitable: fill `buf` (or its first `n` bytes) with the message's next bytes;
        the number of bytes received."""
        mv = memoryview(buf).cast("B")
        if mv.readonly:
            raise OSError(errno.EFAULT, "receive_into needs a writable buffer")
        n = len(mv) if n is None else n
        if not isinstance(n, int) or not 0 <= n <= len(mv):
            raise OSError(errno.EINVAL, f"receive_into: {n!r} bytes do not fit a {len(mv)}-byte buffer")
        return _Receive(self, n, mv)

    cpdef open_window(self, object view, Py_ssize_t at, Py_ssize_t nbytes):
        """The handler may take `nbytes` of a packet's data at `view[at]` (until `close_window`)."""
        cdef Py_buffer pb
        PyObject_GetBuffer(view, &pb, PyBUF_SIMPLE)
        try:
            if at < 0 or nbytes < 0 or at + nbytes > pb.len:
                raise OSError(errno.EFAULT, "FM: a packet's data outside its buffer")
            self._win = <const unsigned char*> pb.buf + at
        finally:
            PyBuffer_Release(&pb)          # `view`'s owner keeps the memory while we hold `view`
        self._view = view
        self.win_pos = 0
        self.win_end = nbytes
        self.arrived += nbytes

    cpdef close_window(self):
        self._view = None
        self._win = NULL
        self.win_pos = self.win_end = 0

    cdef Py_ssize_t _take(self, Py_ssize_t want, unsigned char* out) noexcept:
        """Copy up to `want` bytes of the current packet to `out`."""
        cdef Py_ssize_t k = self.win_end - self.win_pos
        if want < k:
            k = want
        if k <= 0 or self._win == NULL:
            return 0
        memcpy(out, self._win + self.win_pos, k)
        self.win_pos += k
        self.taken += k
        self.cost += self._c_copy_base + k / self._c_copy_rate
        return k

    def __repr__(self):
        return f"<FM message from node {self.src} for handler {self.handler}: {self.taken}/{self.length} received>"


cdef class _Receive:
    """One ``await stream.receive...``: its own iterator, resumed once per packet."""

    cdef RecvStream s
    cdef Py_ssize_t want, got
    cdef object buf                # the caller's memoryview (receive_into), or None
    cdef object out                # the bytes being gathered (receive), once it needs more than one packet
    cdef bint started

    def __cinit__(self, RecvStream s, Py_ssize_t n, object buf):
        self.s = s
        self.want = n
        self.buf = buf

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        cdef RecvStream s = self.s
        cdef Py_buffer pb
        cdef Py_ssize_t k
        if not self.started:
            self.started = True
            s.cost += s._c_receive
            if self.want > s.length - s.taken:
                self.want = s.length - s.taken
            if self.buf is None:
                if self.want <= s.win_end - s.win_pos:          # all here: one copy, straight to bytes
                    out = PyBytes_FromStringAndSize(NULL, self.want)
                    s._take(self.want, <unsigned char*> (<char*> out))
                    raise StopIteration(out)
                self.out = PyByteArray_FromStringAndSize(NULL, self.want)
        if self.buf is None:
            self.got += s._take(self.want - self.got, <unsigned char*> PyByteArray_AS_STRING(self.out) + self.got)
        else:
            PyObject_GetBuffer(self.buf, &pb, PyBUF_WRITABLE)
            try:
                self.got += s._take(self.want - self.got, <unsigned char*> pb.buf + self.got)
            finally:
                PyBuffer_Release(&pb)
        if self.got >= self.want:
            raise StopIteration(bytes(self.out) if self.buf is None else self.got)
        return NEED_MORE            # suspended until the message's next packet is here

    def send(self, value):
        return self.__next__()

    def throw(self, typ, val=None, tb=None):
        if val is None:
            raise typ
        raise val

    def close(self):
        pass


cdef class ContextCore:
    """The per-packet half of one FM context (see the module essay)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.handlers = ctx.handlers             # the context's tables, shared, never rebound
        self.stats = ctx.stats_c
        self.c_handler = ctx.c.handler
        self.program = ctx.program
        self.instance = ctx.instance
        self.nid = ctx.node.nid
        self.smt_peers = {}                      # instance on this host -> Peer (SMT peers)
        self.peers = ctx.peers                   # by FM node (None for this one)

    def add_counts(self, dict out):
        """The C counters, added to a copy of the context's (``FmContext.stats``)."""
        for key, v in (("extracts", self.n_extracts), ("empty_polls", self.n_empty),
                       ("packets_received", self.n_packets), ("bytes_received", self.n_bytes),
                       ("messages_received", self.n_messages), ("handlers_run", self.n_handlers),
                       ("messages_sent", self.n_sent), ("packets_sent", self.n_packets_sent),
                       ("bytes_sent", self.n_bytes_sent)):
            out[key] += v

    cpdef int send_now(self, object dest, object handler, object data) except -3:
        """Real time, a whole message to a peer on this host, sent at once
        (`SmtPort.send_now`: FM-C10's steps in C): 1; 0 if it has not the credits or
        free frames yet (extract and try again, FM-C03); -1 if the general path must
        take it (it checks, waits and extracts)."""
        cdef long long n
        cdef Peer peer
        cdef object p
        if type(dest) is not int or type(handler) is not int or not 0 <= handler < MAXH \
                or not 0 <= dest < len(self.peers) or self.ctx.in_handler or self.ctx.closed:
            return -1
        p = self.peers[dest]
        if p is None:
            return -1
        peer = <Peer> p
        if not peer.smt:
            return -1
        n = self.smt.send_now(peer, self.nid, self.program, handler, data)
        if n < 0:
            return 0 if n == -1 else -1
        self.n_sent += 1
        self.n_packets_sent += self.smt.n_packets_sent
        self.n_bytes_sent += n
        return 1

    cpdef double run_handler(self, Peer peer, Header h, object view, Py_ssize_t data_at) except? -1.0:
        """Feed the packet's data to its message's handler (starting it on the first
        packet); the CPU time spent in the handler and its receives."""
        cdef RecvStream st
        cdef object start = None
        cdef object fn, r, got
        if h.flags & FLAG_FIRST:
            if peer.rx is not None and peer.rx.coro is not None:
                peer.rx.coro.close()                   # cannot happen with whole messages
            fn = self.handlers.get(h.handler)
            if fn is None:
                self.stats["dropped_unknown_handler"] += 1
                peer.rx = None
                peer.skip_seq = h.seq
                return 0.0
            st = RecvStream(self.ctx, peer.vnode, h.mlen, h.handler)
            st.seq = h.seq
            peer.rx = st
            self.n_messages += 1
            st.cost = self.c_handler
            start = fn
        else:
            st = peer.rx
            if st is None or st.done or st.seq != h.seq:
                if st is None and h.seq == peer.skip_seq:
                    pass                               # the rest of a message nobody handles
                elif st is not None and st.seq == h.seq:
                    self.stats["dropped_after_handler"] += 1     # the handler returned: FM drops the rest
                else:
                    self.stats["dropped_malformed"] += 1
                return 0.0
            st.cost = 0.0
        st.open_window(view, data_at, h.plen)
        self.ctx.in_handler = True
        try:
            if start is not None:
                self.n_handlers += 1
                r = start(st, peer.vnode)
                if type(r) is CoroutineType or inspect.iscoroutine(r):
                    st.coro = r
                else:
                    st.done = True
            if st.coro is not None:
                try:
                    got = st.coro.send(None)
                except StopIteration:
                    st.done = True
                    st.coro = None
                else:
                    if got is not NEED_MORE:
                        st.coro.close()
                        st.coro = None
                        st.done = True
                        raise HandlerRuleError(errno.EINVAL, "an FM handler may only await stream.receive() "
                                                             f"and stream.receive_into(), not {got!r}")
        finally:
            self.ctx.in_handler = False
            st.close_window()
        if h.flags & FLAG_LAST and st.coro is not None:
            st.coro.close()                            # cannot happen: receive returns at the end
            st.coro = None
            st.done = True
        return st.cost

    cpdef long long extract_smt(self, SmtPort port, long long budget) except -1:
        """Real time FM_extract over the shared-memory transport: frames taken by the
        caller's own poll (FM-C11 steps 1-2, the header parsed in C), handed to their
        handlers, released (step 4); what is not a well-formed packet of a known peer
        goes to the context's general check (`FmContext._accept`), which drops and
        counts it. Packets handled."""
        cdef long long n = 0, got
        cdef int idx
        cdef Header h = port.rx
        cdef Peer peer
        cdef object view = port.region.view
        self.n_extracts += 1
        while budget > 0:
            idx = port.poll()
            if idx < 0:
                break
            peer = None
            if port.rx_rc == 0 and h.kind == KIND_DATA and h.program == self.program \
                    and h.dst_inst == self.instance and h.src == self.nid:
                peer = self.smt_peers.get(h.src_inst)
            if peer is not None:
                got = h.plen
                self.n_packets += 1
                self.n_bytes += got
                self.run_handler(peer, h, view, port.region.frame_offset(port.me, idx) + FM_HDR)
            else:
                peer, got, _cost = self.ctx._accept(True, port.rx_rc, h, view, port.region.frame_offset(port.me, idx))
            port.release(idx)
            if peer is not None:
                peer.consumed += 1
            budget -= got if got > 1 else 1
            n += 1
        if not n:
            self.n_empty += 1
        return n
