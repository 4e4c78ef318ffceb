# SP AM on the wire: declarations (the implementation and the header layout are in _wire.pyx).

cpdef bytes pack(int kindflags, int handler, int seq, int ack_req, int ack_rep, int idx, int npkts, int tail,
                 unsigned int addr, unsigned int arg)
cpdef tuple words(const unsigned char[::1] data)
cpdef tuple words_of(bytes data)
cpdef unsigned int checksum(int src, int dst, const unsigned char[::1] user, const unsigned char[::1] data,
                            Py_ssize_t n)
cpdef bytes trailer(int src, int dst, const unsigned char[::1] user, const unsigned char[::1] data)
cpdef bint verify(int src, int dst, const unsigned char[::1] user, const unsigned char[::1] data)
cdef bytes trailer_of(int src, int dst, bytes user, bytes data)
cdef bint verify_of(int src, int dst, bytes user, bytes data)
from cpython.object cimport Py_SIZE


cdef inline bint holds(object queue) noexcept:
    """``bool(queue)`` of a collections.deque (a peer's ctl and gets, a channel's pending),
    read from its size field: no call through the type's length slot."""
    return Py_SIZE(queue) != 0


cdef class Header:
    cdef public int kind, flags, handler, seq, ack_req, ack_rep, idx, npkts, tail, dlen
    cdef public int pkt_data                           # data bytes of a full bulk packet (224; 220 with the checksum)
    cdef public unsigned int addr, arg
    cdef public long long chunk_base, chunk_len, end   # bulk: the chunk's range and the transfer's end

    cpdef int parse(self, const unsigned char[::1] user, Py_ssize_t dlen, int max_chunk=*)
    cpdef int parse_bytes(self, bytes user, Py_ssize_t dlen, int max_chunk=*)
    cdef int _parse(self, const unsigned char* user, Py_ssize_t dlen, int max_chunk)
    cdef int _bulk(self, Py_ssize_t dlen, int max_chunk)


cdef class Msg:
    cdef public int seq, kind, flags, handler, npkts, tail, sends
    cdef public bint kept            # a store or get reply of one packet: its data copied, sent as a short message
    cdef public unsigned int addr, arg
    cdef public object data          # short or kept: the bytes; bulk: a callable(off, n) -> bytes
    cdef public long long src_off    # bulk: this chunk's offset in the transfer
    cdef public object xfer          # the Transfer a chunk or get request belongs to


cdef Msg new_msg(int kind, int flags, int handler, object data, int npkts, int tail, unsigned int addr,
                 unsigned int arg, long long src_off, object xfer, bint kept)


cdef class TxChannel:
    cdef public int window, next_seq, inflight, resend
    cdef public list unacked          # Msg, oldest first; unacked[resend:] are still to be (re)sent
    cdef public object pending        # collections.deque of Msg not yet given a sequence number
    cdef public long long retransmitted, goback

    cpdef bint can_send(self, int npkts)
    cdef int queue(self, Msg m) except -1
    cdef Msg next_pending(self)
    cpdef assign(self, Msg m)
    cpdef list ack(self, int cum)
    cpdef int go_back(self, int seq)
    cpdef int index(self, int seq)
    cpdef int nop(self, Msg m)


cdef class RxChannel:
    cdef public int expected, unacked, threshold, chunk_npkts, chunk_got
    cdef public bint nacked, ack_owed
    cdef unsigned long long bits
    cdef public long long accepted, duplicates, ahead

    cpdef int where(self, int seq)
    cpdef int take(self, int idx, int npkts)
    cpdef advance(self, int npkts)
    cpdef acked(self)


cdef class Peer:
    cdef public int nid, route, keepalives
    cdef public TxChannel tx_req, tx_rep
    cdef public RxChannel rx_req, rx_rep
    cdef public object ctl            # collections.deque of control packets to send: (kind, flags, seq, arg)
    cdef public object gets           # collections.deque of my am_gets to this node, in the order it serves them
    cdef public long long in_base, in_total, mark
    cdef public bint queued           # on the endpoint's work queue
    cdef Peer next_work               # the peer after it on that queue (Window.work_head)

    cpdef bint unacked(self)
    cpdef bint busy(self)
