# cython: language_level=3, annotation_typing=False, binding=True
"""Chunked bulk transfer: am_store, am_store_async and am_get (SP-C06, SP-A25..A31).

A transfer is cut into chunks of 8064 bytes -- 36 packets of 224 data bytes (SP-A25,
SP-A26). A chunk is one message on its channel: all its packets share one sequence
number and the window slides by the chunk's packet count; the receiver places each
packet by the address it carries, so duplicates and reordering inside a chunk do no
harm, and completes the chunk when every packet is there. The window holds two chunks
(SP-A27, SP-C07), so two go at the start and chunk N leaves once chunk N-2 is
acknowledged (SP-A30) -- usually before N-1's ack is back, which keeps the pipeline
full because sending a chunk takes longer than a round trip (SP-A32).

Stores travel on the request channel; an am_get is a request (GETREQ) whose target
answers with chunks on its reply channel (GETDATA). FIRST/LAST flags mark a
transfer's ends so the receiver runs the handler once everything has landed, and
every chunk but the last carries the transfer's end address, so any one packet lets
the receiver check the whole rest of the transfer against its registered segments
before a byte is written: memory outside them is refused (REJECT, EFAULT at the
initiator) and the target is never touched.

A store's source is read again when a chunk is resent (the sender keeps no copy of
bulk data), so the source can be reused once the last chunk is acknowledged: that is
when a blocking am_store returns and when am_store_async's completion function runs.
A store (or get reply) that fits in one packet is not bulk: its data is copied with
the packet, as a request's words are (SP-C05: the sender keeps unacknowledged
messages), so it is acknowledged like a request -- piggybacked, or explicitly once a
quarter of the window is unacknowledged -- and its source is free once it has been
handed over: a blocking am_store of up to 224 bytes returns then, without waiting
for a round trip; a refusal of it comes out of a later call.
"""
from __future__ import annotations

import errno

from protocols.am import _wire as W
from protocols.am._checks cimport check_count, check_remote, handler_index, pack_words, word
from protocols.am._wire cimport Header, Msg, Peer, RxChannel, TxChannel, new_msg
cimport cython
from protocols.am.keepalive cimport KeepAlive
from protocols.am.window cimport Window
from protocols.am._codes cimport *
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from cpython.bytes cimport PyBytes_AS_STRING
from libc.string cimport memcpy

__all__ = ["Bulk", "Transfer"]


cdef inline int _write(PhysMem mem, Py_ssize_t addr, bytes data) except -1:
    """``mem.write(addr, data)`` of a packet's bytes: the same check, no buffer view per packet."""
    cdef Py_ssize_t n = len(data)
    if not span_ok(addr, n, mem.size):
        span_check(addr, n, mem.size, "physical memory")
    memcpy(&mem.buf[addr], PyBytes_AS_STRING(data), n)
    return 0


@cython.freelist(16)
cdef class Transfer:
    """An am_store / am_store_async / am_get in progress (as its initiator sees it)."""

    def __init__(self, kind, dest, nbytes, remote, local, handler, arg, on_done=None, done_arg=None, blocking=False):
        self.kind = kind
        self.dest = dest
        self.nbytes = nbytes
        self.remote = remote
        self.local = local
        self.handler = handler
        self.arg = arg
        self.on_done = on_done
        self.done_arg = done_arg
        self.blocking = blocking
        self.done = False
        self.error = None

    def __repr__(self):
        state = "failed" if self.error else "done" if self.done else "in flight"
        return f"<Transfer {self.kind} {self.nbytes} B with node {self.dest}: {state}>"


cdef class Bulk(KeepAlive):
    """The bulk-transfer half of an AM endpoint (Window < KeepAlive < Bulk < AmEndpoint)."""

    def _init_bulk(self, params: dict) -> None:
        self.chunk_packets = params["chunk_packets"]
        self.chunk_bytes = self.chunk_packets * self.pkt_data

    # -- the initiator ---------------------------------------------------------------------

    def store(self, dest, src, nbytes, raddr, handler, arg, on_done=None, done_arg=None, blocking=False) -> Transfer:
        return self.new_store(dest, src, nbytes, raddr, handler, arg, on_done, done_arg, blocking)

    cdef Transfer new_store(self, object dest, object src, object nbytes, object raddr, object handler, object arg,
                            object on_done, object done_arg, bint blocking):
        """`store` for C callers (libdp._am_call): no argument parsing per transfer."""
        cdef Peer peer = Window.peer(self, dest)
        cdef Transfer x
        check_count(nbytes)
        handler = handler_index(handler)
        arg = word(arg)
        if on_done is not None and not callable(on_done):
            raise OSError(errno.EINVAL, "the completion function must be callable")
        check_remote(raddr, nbytes)
        if isinstance(src, (bytes, bytearray, memoryview)):
            data = bytes(src)
            if len(data) < nbytes:
                raise OSError(errno.EFAULT, f"the source holds {len(data)} bytes, not {nbytes}")
            local = None
        else:
            local = self._local_range(src, nbytes)
        x = Transfer.__new__(Transfer)
        x.kind, x.dest, x.nbytes, x.remote, x.local = "store", dest, nbytes, raddr, local
        x.handler, x.arg, x.on_done, x.done_arg, x.blocking = handler, arg, on_done, done_arg, blocking
        x.done, x.error = False, None
        x.peer = peer                   # (its call's path finds it here, not in self.peers)
        if nbytes <= self.pkt_data:
            # One packet: not bulk -- its data copied now (`_chunks`), read straight from the source.
            kept = data[:nbytes] if local is None else self.mem.read(local, nbytes)
            peer.tx_req.queue(new_msg(K_STORE, F_FIRST | F_LAST, handler, kept, 1, nbytes, raddr, arg, 0, x,
                                               True))
        else:
            if local is None:
                read = (lambda off, n, d=data: d[off:off + n])
            else:
                read = (lambda off, n, a=local, mem=self.mem: mem.read(a + off, n))
            self._chunks(peer.tx_req, K_STORE, handler, read, nbytes, raddr, arg, x)
        self.counts[S_STORES] += 1
        return x

    def get(self, dest, raddr, lbuf, nbytes, handler, arg, blocking=False) -> Transfer:
        cdef Peer peer = Window.peer(self, dest)
        check_count(nbytes)
        handler = handler_index(handler)
        arg = word(arg)
        check_remote(raddr, nbytes)
        local = self._local_range(lbuf, nbytes)
        x = Transfer("get", dest, nbytes, raddr, local, handler, arg, blocking=blocking)
        m = new_msg(K_GETREQ, 0, handler, pack_words((raddr, nbytes, local)), 1, 0, 0, 0, 0, x, False)
        peer.tx_req.queue(m)
        peer.gets.append(x)
        self.counts[S_GETS] += 1
        return x

    cdef int _chunks(self, TxChannel ch, int kind, int handler, object read, long long nbytes, unsigned int addr,
                     unsigned int arg, object x, int flags=0) except -1:
        """Cut a transfer into chunks of 36 packets (SP-C06): each one message, one
        sequence number; FIRST/LAST mark the ends so the receiver can run the handler
        once all has landed. Every non-last chunk carries the transfer's end address,
        so any one packet lets the receiver check the whole rest of the transfer.

        A transfer that fits in one packet is not bulk: its data is copied now and it
        travels as a short message (acknowledged by the window's rules, its source free
        as soon as it is handed over)."""
        cdef long long cb, count, end, off, c, j
        cdef int pkt = self.pkt_data, npk, f
        cdef bint last
        if nbytes <= pkt:
            ch.queue(new_msg(kind, flags | F_FIRST | F_LAST, handler, read(0, nbytes), 1, <int> nbytes, addr,
                                      arg, 0, x, True))
            return 0
        cb = self.chunk_bytes
        count = -(-nbytes // cb)
        end = addr + nbytes
        for j in range(count):
            off = j * cb
            c = min(cb, nbytes - off)
            npk = <int> (-(-c // pkt))
            last = j == count - 1
            f = flags | (F_FIRST if j == 0 else 0) | (F_LAST if last else 0)
            ch.queue(new_msg(kind, f, handler, read, npk, <int> (c - (npk - 1) * pkt), <unsigned int> (addr + off),
                                      arg if last else <unsigned int> end, off, x, False))
        return 0

    cdef int _finish(self, object xfer) except -1:
        """The store's source may be reused: its last chunk is acknowledged (the data
        has landed and the remote handler has run), or, for a one-packet store, its
        data has been copied and handed over. Run the completion function (nothing if
        the transfer is already done: the callers in window.pyx see no Transfer's fields)."""
        cdef Transfer x = <Transfer?> xfer
        if x.done:
            return 0
        x.done = True
        self.counts[S_STORES_COMPLETED] += 1
        if x.on_done is not None:
            self._handler_depth += 1
            try:
                x.on_done(x.done_arg)
            finally:
                self._handler_depth -= 1
        return 0

    def _transfer_refused(self, peer, x: Transfer) -> None:
        """The target refused `x` (its remote memory is outside the target's segments)."""
        if x.kind == "get":
            try:
                peer.gets.remove(x)
            except ValueError:
                pass
        what = "am_store to" if x.kind == "store" else "am_get from"
        returned = x.done                          # a one-packet store has already returned
        x.error = OSError(errno.EFAULT, f"{what} node {x.dest}: [{x.remote:#x}, {x.remote + x.nbytes:#x}) is "
                                        "outside the target's registered segments (nothing was written there)")
        x.done = True
        if not x.blocking or returned:
            self.pending_errors.append(x.error)

    # -- the target and the receiver of data ------------------------------------------------

    def _rx_getreq(self, peer, rx, h, data):
        raddr, nbytes, laddr = W.words_of(data)
        if not Window.in_segments(self, raddr, raddr + nbytes):
            self._refuse(peer, rx, 0, h.seq)
            return
        rx.advance(1)
        self.counts[S_GETS_SERVED] += 1
        read = (lambda off, n, a=raddr, mem=self.mem: mem.read(a + off, n))
        self._chunks(peer.tx_rep, K_GETDATA, 0, read, nbytes, laddr, 0, None)

    cdef int _rx_store(self, Peer peer, RxChannel rx, Header h, bytes data) except -1:
        """A packet of a store chunk: checked against our segments before a byte is
        written (the whole rest of the transfer at once), then placed by its offset.
        1 when the handler it ran replied (the caller sends the reply)."""
        cdef long long base, total
        if not self.in_segments_c(h.chunk_base, h.end):
            self._refuse(peer, rx, 0, h.seq)
            return 0
        if not self._accept_chunk_packet(rx, h, data):
            return 0
        if h.npkts > 1 or not h.flags & F_FIRST or not h.flags & F_LAST:
            rx.ack_owed = True                     # one acknowledgement per bulk chunk (SP-A31)
        self.counts[S_CHUNKS_RECEIVED] += 1
        if h.flags & F_FIRST or peer.in_base < 0:
            peer.in_base = h.chunk_base
            peer.in_total = 0
        peer.in_total += h.chunk_len
        if h.flags & F_LAST:
            base, total = peer.in_base, peer.in_total
            peer.in_base = -1
            self.counts[S_STORES_RECEIVED] += 1
            self.counts[S_BYTES_STORED] += total
            fn = self.handlers[h.handler]
            if fn is None:
                self.malformed["bad_handler"] += 1
                return 0
            return self._run_handler(peer, fn, True, (base, total, h.arg))
        return 0

    cdef int _rx_getdata(self, Peer peer, RxChannel rx, Header h, bytes data) except -1:
        g = peer.gets[0] if peer.gets else None
        if g is None or h.chunk_base < g.local or h.end > g.local + g.nbytes:
            self.malformed["bad_offset"] += 1
            return 0
        if not self._accept_chunk_packet(rx, h, data):
            return 0
        if h.npkts > 1 or not h.flags & F_FIRST or not h.flags & F_LAST:
            rx.ack_owed = True                     # one acknowledgement per bulk chunk (SP-A31)
        self.counts[S_CHUNKS_RECEIVED] += 1
        if h.flags & F_LAST:
            peer.gets.popleft()
            g.done = True
            self.counts[S_GETS_COMPLETED] += 1
            fn = self.handlers[g.handler]
            if fn is None:
                self.malformed["bad_handler"] += 1
                return 0
            return self._run_handler(peer, fn, False, (g.local, g.nbytes, g.arg))
        return 0

    cdef bint _accept_chunk_packet(self, RxChannel rx, Header h, bytes data) except -1:
        """Place one packet of a chunk by its offset; True once the chunk is complete."""
        cdef int r = rx.take(h.idx, h.npkts)
        if r == T_DUP:
            self.counts[S_DUPLICATES] += 1
            return False
        if r == T_BAD:
            self.malformed["bad_offset"] += 1
            return False
        if data:
            _write(self.mem, h.addr, data)
        if r != T_COMPLETE:
            return False
        rx.advance(h.npkts)
        return True

    def _refuse(self, peer, rx, flags, seq) -> None:
        """The expected message names memory we did not register: refuse it, once per
        episode, and write nothing. The sender turns it into a NOP and fails it."""
        if not rx.nacked:
            rx.nacked = True
            peer.ctl.append((W.K_REJECT, flags, seq, errno.EFAULT))
            self.counts[S_REJECTS_SENT] += 1
