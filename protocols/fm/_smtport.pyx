# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A context's side of FM's shared-memory transport, per packet, in C -- both time modes.

The queue steps themselves are `_smt.SmtRegion`'s (FM-C10, FM-C11); this is what FM's
message layer does around them for one packet: find the receiver (step 1, the SMT ID
map), check the peer's credits (the count its receiver keeps of what it consumed),
claim a frame (steps 2-3), write the FM header and the data into it (step 4), publish
it (steps 5-6); and on the receiving side, poll and take (steps 1-2), expose the frame,
release it (step 4). Every method returns the CPU time its work costs on the modeled
machine -- each atomic instruction at ``cpu.atomic_cycles`` (FM-A10), each copy at the
memory's rate, each poll at FM-A08 -- which a modeled path yields and real time ignores.

`send_one` is a whole message of at most one packet in one call: claim, header and
data now, and the frame published by `publish_pending` -- at once in real time, once
the modeled time of the work has passed in a modeled path. The general stream path
uses the same steps one by one (`claim`, `header`, `write`, `publish`).
"""
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy
from libc.stdlib cimport malloc, free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

import errno

from protocols.fm._wire cimport FM_HDR, FM_DATA, KIND_DATA, FLAG_FIRST, FLAG_LAST

__all__ = ["Peer", "SmtPort"]


cdef class Peer:
    """What a context keeps about one other FM node."""

    def __init__(self, int vnode, int host, int inst, bint smt):
        self.vnode = vnode
        self.host = host
        self.inst = inst
        self.smt = smt           # reached over the shared-memory transport
        self.rid = -1            # its SMT ID, once looked up
        self.credits = 0         # packets it may hold of ours at once
        self.sent = 0            # packets sent to it
        self.returned = 0        # packets of ours it has consumed (credits back)
        self.consumed = 0        # packets of its we have consumed
        self.credited = 0        # ... of which we have told it
        self.seq = 0             # messages sent to it
        self.skip_seq = 0xFFFFFFFF
        self.open_stream = None
        self.rx = None           # the message arriving from it

    def __repr__(self):
        return f"<FM peer {self.vnode} (host {self.host}.{self.inst}, {'smt' if self.smt else 'net'})>"


cdef class SmtPort:
    """A context's place in its job's shared-memory region."""

    def __init__(self, host, uint32_t me, uint32_t instance, costs):
        self.host = host
        self.region = host.region
        self.me = me
        self.instance = instance
        self.h = Header()
        self.rx = Header()
        self.c_atomic = costs.atomic
        self.c_copy_base = costs.copy_base
        self.c_copy_rate = costs.copy_rate
        self.c_poll = costs.smt_poll
        self.c_miss = costs.miss
        self._idx_pending = -1

    cdef inline double _copy(self, Py_ssize_t n):
        return self.c_copy_base + n / self.c_copy_rate

    # -- send ----------------------------------------------------------------------------------

    cpdef int rid_of(self, Peer peer) except -2:
        """Step 1: the receiver's SMT ID from the map; -1 before it has attached, EPIPE
        once it has left."""
        cdef int rid = self.region.lookup(peer.inst)
        if rid < 0:
            if peer.rid >= 0:
                raise OSError(errno.EPIPE, f"FM node {peer.vnode} has left the shared-memory transport")
            return -1
        peer.rid = rid
        return rid

    cpdef long long returned(self, Peer peer) except -1:
        """Credits back: the frames of ours `peer` has consumed (its count, in shared memory)."""
        cdef uint64_t v
        if peer.rid < 0 and self.rid_of(peer) < 0:
            return peer.returned
        v = self.region.consumed(peer.rid, self.me)
        if <long long> v > peer.returned:
            peer.returned = <long long> v
        return peer.returned

    cpdef int claim(self, Peer peer):
        """Steps 1-3 (the caller checked the credit): a frame of the receiver's, or -1."""
        if self.rid_of(peer) < 0:
            return -1
        cdef int idx = self.region.claim(peer.rid, self.me)
        self.claim_tries += self.region.last_tries
        return idx

    cpdef double header(self, uint32_t rid, uint32_t idx, Header h):
        """Part of step 4: the FM header at the frame's start."""
        h.pack_into(self.region.view, self.region.frame_offset(rid, idx))
        return self._copy(FM_HDR)

    cpdef double write(self, uint32_t rid, uint32_t idx, Py_ssize_t at, const unsigned char[::1] data):
        """Step 4: data into the frame at `at` (past the header)."""
        self.region.fill(rid, idx, at, data)
        return self._copy(data.shape[0])

    cpdef double publish(self, uint32_t rid, uint32_t idx, uint32_t plen):
        """Steps 5-6: hand the frame over; the receiver is told (modeled time)."""
        self.region.publish(rid, self.me, idx, FM_HDR + plen)
        self.sent += 1
        self.host.notify(rid, "smt")
        return 0.0

    def claim_cost(self):
        """CPU time of the last claim: a fetch-and-increment and a test-and-set per frame tried."""
        return self.region.last_tries * 2 * self.c_atomic

    @property
    def publish_cost(self):
        return self.c_atomic

    cpdef double send_one(self, Peer peer, int src_host, int program, int handler, unsigned int seq,
                          const unsigned char[::1] data):
        """A whole message of at most one packet: credit, claim, header, data. Its cost,
        or -1 without a credit or a frame; `publish_pending` hands it over."""
        cdef Py_ssize_t n = data.shape[0]
        return self._send_one(peer, src_host, program, handler, seq, &data[0] if n else NULL, n)

    cdef double _send_one(self, Peer peer, int src_host, int program, int handler, unsigned int seq,
                          const unsigned char* data, Py_ssize_t n) except? -2:
        cdef int idx
        cdef Header h = self.h
        cdef double cost
        cdef unsigned char* frame
        if n > FM_DATA or self._idx_pending >= 0:
            return -1.0
        if peer.sent - self.returned(peer) >= peer.credits:
            return -1.0
        idx = self.claim(peer)
        if idx < 0:
            return -1.0
        cost = self.region.last_tries * 2 * self.c_atomic
        h.kind = KIND_DATA
        h.flags = FLAG_FIRST | FLAG_LAST
        h.src = src_host
        h.dst = peer.host
        h.program = program
        h.src_inst = self.instance
        h.dst_inst = peer.inst
        h.handler = handler
        h.plen = <int> n
        h.mlen = <unsigned int> n
        h.offset = 0
        h.seq = seq
        h.credits = <unsigned int> (peer.consumed & 0xFFFFFFFF)
        frame = self.region._base + self.region.frame_offset(peer.rid, idx)      # step 4: header, data
        h.pack_at(frame)
        cost += self._copy(FM_HDR)
        if n:
            memcpy(frame + FM_HDR, data, n)
            cost += self._copy(n)
        peer.sent += 1
        self._rid_pending = peer.rid
        self._idx_pending = idx
        self._n_pending = <int> n
        return cost + self.c_atomic

    cpdef long long send_now(self, Peer peer, int src_host, int program, int handler, object data) except -3:
        """Real time: a whole message sent at once, the message numbered as ``begin``
        numbers it -- one packet by `send_one` and steps 5-6 straight away; several by
        claiming a frame for each first (steps 1-3), then filling and publishing them in
        order. Its length; -1 if it has not the credits or free frames yet; -2 when it
        needs the general path (more packets than its credits, a message to that peer
        still open, not a contiguous buffer)."""
        cdef Py_buffer pb
        cdef double cost
        cdef long long r
        if peer.open_stream is not None or self._idx_pending >= 0:
            return -2
        try:
            PyObject_GetBuffer(data, &pb, PyBUF_SIMPLE)
        except (BufferError, TypeError, ValueError):
            return -2
        try:
            if pb.len > FM_DATA:
                r = self._send_packets(peer, src_host, program, handler, <const unsigned char*> pb.buf, pb.len)
                if r >= 0:
                    peer.seq = (peer.seq + 1) & 0xFFFFFFFF
                return r
            cost = self._send_one(peer, src_host, program, handler, peer.seq, <const unsigned char*> pb.buf, pb.len)
        finally:
            PyBuffer_Release(&pb)
        if cost < 0:
            return -1
        peer.seq = (peer.seq + 1) & 0xFFFFFFFF
        self.publish_pending()
        self.n_packets_sent = 1
        return self._n_pending

    cdef long long _send_packets(self, Peer peer, int src_host, int program, int handler,
                                 const unsigned char* data, Py_ssize_t n) except -3:
        cdef Py_ssize_t npk = (n + FM_DATA - 1) // FM_DATA, k, off, plen
        cdef int* idx
        cdef int got = 0
        cdef Header h = self.h
        cdef unsigned char* frame
        if n > 0xFFFFFFFF or npk > peer.credits:
            return -2                     # the general path extracts between packets
        if peer.sent + npk - self.returned(peer) > peer.credits:
            return -1
        idx = <int*> malloc(npk * sizeof(int))
        if idx == NULL:
            raise MemoryError()
        try:
            while got < npk:
                idx[got] = self.claim(peer)
                if idx[got] < 0:
                    while got > 0:            # not all there yet: give back what we claimed
                        got -= 1
                        self.region.unclaim(peer.rid, self.me, idx[got])
                    return -1
                got += 1
            h.kind = KIND_DATA
            h.src = src_host
            h.dst = peer.host
            h.program = program
            h.src_inst = self.instance
            h.dst_inst = peer.inst
            h.handler = handler
            h.mlen = <unsigned int> n
            h.seq = peer.seq
            h.credits = <unsigned int> (peer.consumed & 0xFFFFFFFF)
            for k in range(npk):
                off = k * FM_DATA
                plen = n - off if n - off < FM_DATA else FM_DATA
                h.flags = (FLAG_FIRST if k == 0 else 0) | (FLAG_LAST if k == npk - 1 else 0)
                h.offset = <unsigned int> off
                h.plen = <int> plen
                frame = self.region._base + self.region.frame_offset(peer.rid, idx[k])
                h.pack_at(frame)
                memcpy(frame + FM_HDR, data + off, plen)
                peer.sent += 1
                self.publish(peer.rid, idx[k], <uint32_t> plen)
        finally:
            free(idx)
        self.n_packets_sent = npk
        return n

    cpdef publish_pending(self):
        if self._idx_pending >= 0:
            idx, self._idx_pending = self._idx_pending, -1
            self.publish(self._rid_pending, idx, self._n_pending)

    # -- receive -------------------------------------------------------------------------------

    cpdef int poll(self):
        """Receive steps 1-2: the next frame, taken off its queue, or -1; its header is
        parsed into `rx` (`rx_rc`: PKT_OK or why it is malformed)."""
        cdef int idx = self.region.poll(self.me)
        if idx < 0:
            return -1
        self.region.take(self.me, self.region.last_queue)
        self.rx_rc = self.rx.parse_at(self.region._base + self.region.frame_offset(self.me, idx),
                                      min(self.region.frame_len(self.me, idx), self.region.frame_bytes))
        return idx

    def poll_cost(self, bint found):
        """An empty poll looks at M queues (FM-A08 each); a hit misses once on the frame
        another CPU wrote and does a fetch-and-increment."""
        if not found:
            return self.c_poll * self.region.nqueues
        return self.c_poll + self.c_miss + self.c_atomic

    def packet(self, uint32_t idx):
        return self.region.view, self.region.frame_offset(self.me, idx), self.region.frame_len(self.me, idx)

    cpdef release(self, uint32_t idx):
        """Receive step 4: the frame is free, its sender has a credit back (and is told)."""
        cdef uint32_t src = self.region.frame_src(self.me, idx)
        self.region.release(self.me, idx)
        self.received += 1
        self.host.notify(src, "smt")

    # -- faults --------------------------------------------------------------------------------

    def reclaim(self) -> int:
        """Give back what dead processes hold in my area; the number of things given back."""
        found = 0
        for sid in range(self.region.ids_handed_out()):
            if sid == self.me:
                continue
            state, pid, start, _inst = self.region.process(sid)
            if state == 1 and not self.host.alive(pid, start):
                self.region.mark_dead(sid)
                state = 2
            if state == 2:
                frames, holes = self.region.reclaim(self.me, sid)
                self.reclaimed_frames += frames
                self.skipped_positions += holes
                found += frames + holes
        return found

    def stats(self) -> dict:
        return {"smt_id": self.me, "frames_sent": self.sent, "frames_received": self.received,
                "claim_tries": self.claim_tries, "reclaimed_frames": self.reclaimed_frames,
                "skipped_positions": self.skipped_positions, "queues": self.region.nqueues,
                "frames": self.region.nframes}
