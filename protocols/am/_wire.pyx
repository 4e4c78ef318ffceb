# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""SP AM on the wire: the packet header, and both ends of a sequenced channel.

(The event engine is ``kernelsim._engine``; this module is what AM puts into packets
and what it keeps about them, per packet, in Cython because it runs for every one.)

Every packet SP AM sends is one TB2 packet: 32 bytes of header, up to 224 of data
(SP-A22). The TB2 header carries destination, route, length and the link-level
protocol id; its 16 user bytes carry AM's header, so the data part is all payload --
a request's argument words, or 224 bytes of a bulk transfer:

    0  kind | flags     kind in the low 4 bits; FIRST/LAST chunk of a transfer, reply channel
    1  handler          index into the receiving endpoint's handler table
    2  seq              this message's sequence number on its channel (a chunk's packets share it)
    3  ack_req          next request-channel seq the sender expects from us (piggybacked ack)
    4  ack_rep          next reply-channel seq the sender expects from us
    5  idx              packet index inside its chunk (0..npkts-1)
    6  npkts            packets in the chunk (1..36)
    7  tail             data bytes of the chunk's last packet (the others carry 224)
    8  addr  (u32)      bulk: where this packet's data goes at the receiver; keep-alive: the
                        sender's next request and reply sequence numbers
    12 arg   (u32)      bulk: the handler's argument (last chunk) or the transfer's end address

Sequence numbers are 8 bits: a window is at most 76 messages (SP-A28), well under half
the space, so "ahead of", "behind" and "the one expected" are never ambiguous.

A channel is one direction of one kind of traffic between two nodes: requests (window
75 packets) or replies (window 76). `TxChannel` is the sender's side: the unacknowledged
messages in sequence order (the sender keeps them, SP-C05), the window in packets (a
chunk counts all its packets, SP-C06), cumulative acks, and the go-back point a NACK
sets. `RxChannel` is the receiver's: the sequence number it expects, the chunk being
assembled (a bitmap of the packets already placed by their offsets, so duplicates and
reordering inside a chunk are harmless), how many packets it has accepted but not yet
acknowledged (the explicit-ack threshold, a quarter window), and whether it has already
NACKed the current gap (one NACK per gap, so a lost packet in front of a 36-packet chunk
costs one go-back, not 36).
"""
from collections import deque
cimport cython
# The constants below as C values, for the per-packet code here (a module-level Python
# name is a dictionary lookup and a boxed compare on every use); they are asserted equal.
cimport protocols.am._codes as _C
from protocols.am._checks cimport C_U32

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

# -- packet kinds and flags --------------------------------------------------------------
K_REQ = 1          # request, 0..4 argument words                      request channel
K_REP = 2          # reply, 0..4 argument words                        reply channel
K_STORE = 3        # one packet of a chunk of an am_store              request channel
K_GETREQ = 4       # am_get's request: remote address, bytes, local address  request channel
K_GETDATA = 5      # one packet of a chunk answering an am_get         reply channel
K_ACK = 6          # explicit acknowledgement (both channels)          unsequenced
K_NACK = 7         # "I expect seq": go back to it                     unsequenced
K_KEEPALIVE = 8    # "I have sent up to addr": forces NACKs (SP-C08)   unsequenced
K_REJECT = 9       # seq refers to memory outside my segments (EFAULT) unsequenced
K_NOP = 10         # a cancelled message: keeps its sequence number     either channel
KIND_MAX = 10
F_FIRST = 0x10
F_LAST = 0x20
F_REPCH = 0x40     # NACK/REJECT/NOP: about the reply channel
FLAG_MASK = 0x70
KIND_MASK = 0x0F

AM_HDR = 16
PKT_DATA = 224
MAX_CHUNK = 64     # bound of the chunk bitmap (the protocol uses 36, SP-A26)
MAX_WORDS = 4      # SP-A34

# parse() results: 0 is a well-formed header
MAL_KIND = 1
MAL_LENGTH = 2
MAL_OFFSET = 3
MAL_SHORT = 4
MALFORMED_NAMES = ("", "bad_kind", "bad_length", "bad_offset", "short_header")

# RxChannel.where()
HERE = 0
AHEAD = 1
BEHIND = 2
# RxChannel.take()
PART = 0
COMPLETE = 1
DUP = 2
BAD = 3

cdef inline unsigned int _rd32p(const unsigned char* b) noexcept:
    return (<unsigned int> b[0] << 24) | (<unsigned int> b[1] << 16) | (<unsigned int> b[2] << 8) | b[3]


cdef inline unsigned int _rd32(const unsigned char[::1] b, Py_ssize_t i):
    return (<unsigned int> b[i] << 24) | (<unsigned int> b[i + 1] << 16) | (<unsigned int> b[i + 2] << 8) | b[i + 3]


cpdef bytes pack(int kindflags, int handler, int seq, int ack_req, int ack_rep, int idx, int npkts, int tail,
                 unsigned int addr, unsigned int arg):
    """The 16 header bytes, big-endian as they travel."""
    cdef unsigned char b[16]
    b[0] = kindflags & 0xFF
    b[1] = handler & 0xFF
    b[2] = seq & 0xFF
    b[3] = ack_req & 0xFF
    b[4] = ack_rep & 0xFF
    b[5] = idx & 0xFF
    b[6] = npkts & 0xFF
    b[7] = tail & 0xFF
    b[8] = (addr >> 24) & 0xFF
    b[9] = (addr >> 16) & 0xFF
    b[10] = (addr >> 8) & 0xFF
    b[11] = addr & 0xFF
    b[12] = (arg >> 24) & 0xFF
    b[13] = (arg >> 16) & 0xFF
    b[14] = (arg >> 8) & 0xFF
    b[15] = arg & 0xFF
    return PyBytes_FromStringAndSize(<char*> b, 16)


cpdef tuple words(const unsigned char[::1] data):
    """The argument words of a short message (big-endian u32s)."""
    cdef Py_ssize_t n = data.shape[0] // 4, i
    cdef list out = []
    for i in range(n):
        out.append(_rd32(data, 4 * i))
    return tuple(out)


cpdef tuple words_of(bytes data):
    """`words` of a packet's data as taken from the FIFO (no buffer view per packet)."""
    cdef Py_ssize_t n = len(data) // 4, i
    cdef const unsigned char* p = <const unsigned char*> PyBytes_AS_STRING(data)
    cdef tuple out = PyTuple_New(n)
    cdef object w
    for i in range(n):
        w = _rd32p(p + 4 * i)
        Py_INCREF(w)
        PyTuple_SET_ITEM(out, i, w)
    return out


# -- the end-to-end checksum (module parameter ``checksum``, off by default) ---------------
#
# The link CRC covers a packet from adapter to adapter; what goes wrong between -- a
# switch buffer, an adapter's DMA, host memory -- reaches the receiver with a valid CRC.
# With ``checksum=1`` every packet carries a 4-byte trailer after its data: Adler-32
# over a pseudo-header (source and destination node, as TCP's) and the packet's 16 AM
# header bytes and data. Any one byte changed changes the first sum by a nonzero amount
# below its modulus, so it is always caught. The receiver drops a packet whose trailer
# does not match, before it reads a single field, and counts it: to the protocol it is
# a lost packet, which go-back-N and the keep-alive resend.

CHECKSUM_BYTES = 4
cdef enum:
    ADLER_MOD = 65521

cdef inline void _adler(const unsigned char* b, Py_ssize_t n, unsigned long long* a,
                        unsigned long long* s) noexcept:
    cdef Py_ssize_t i
    cdef unsigned long long x = a[0], y = s[0]
    for i in range(n):
        x += b[i]
        y += x
    a[0] = x % ADLER_MOD
    s[0] = y % ADLER_MOD


# The three calls below work on pointers; each comes as a cpdef of buffers (any bytes-like
# object, from Python) and, for the per-packet code, a C call of bytes objects (`*_of`): a
# buffer argument costs its caller two buffer views per call, and a caller's temporaries
# of them are initialised on every entry to it, whichever branch it takes.

cdef unsigned int _checksum(int src, int dst, const unsigned char* user, Py_ssize_t nu, const unsigned char* data,
                            Py_ssize_t n) noexcept:
    cdef unsigned char pseudo[4]
    cdef unsigned long long a = 1, s = 0
    pseudo[0] = (src >> 8) & 0xFF
    pseudo[1] = src & 0xFF
    pseudo[2] = (dst >> 8) & 0xFF
    pseudo[3] = dst & 0xFF
    _adler(pseudo, 4, &a, &s)
    if nu > 0:
        _adler(user, nu, &a, &s)
    if n > 0:
        _adler(data, n, &a, &s)
    return <unsigned int> ((s << 16) | a)


cdef bytes _trailer(int src, int dst, const unsigned char* user, Py_ssize_t nu, const unsigned char* data,
                    Py_ssize_t n):
    cdef unsigned int c = _checksum(src, dst, user, nu, data, n)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + _C.CHECKSUM_BYTES)
    cdef unsigned char* p = <unsigned char*> PyBytes_AS_STRING(out)
    cdef Py_ssize_t i
    for i in range(n):
        p[i] = data[i]
    p[n] = (c >> 24) & 0xFF
    p[n + 1] = (c >> 16) & 0xFF
    p[n + 2] = (c >> 8) & 0xFF
    p[n + 3] = c & 0xFF
    return out


cdef bint _verify(int src, int dst, const unsigned char* user, Py_ssize_t nu, const unsigned char* data,
                  Py_ssize_t n) noexcept:
    n -= _C.CHECKSUM_BYTES
    if n < 0:
        return False
    return _checksum(src, dst, user, nu, data, n) == _rd32p(data + n)


cpdef unsigned int checksum(int src, int dst, const unsigned char[::1] user, const unsigned char[::1] data,
                            Py_ssize_t n):
    """Adler-32 of (src, dst, the AM header, the first `n` data bytes)."""
    if n > data.shape[0]:
        n = data.shape[0]
    return _checksum(src, dst, &user[0] if user.shape[0] else NULL, user.shape[0],
                     &data[0] if data.shape[0] else NULL, n)


cpdef bytes trailer(int src, int dst, const unsigned char[::1] user, const unsigned char[::1] data):
    """`data` followed by its checksum trailer, as the packet's data part."""
    return _trailer(src, dst, &user[0] if user.shape[0] else NULL, user.shape[0],
                    &data[0] if data.shape[0] else NULL, data.shape[0])


cpdef bint verify(int src, int dst, const unsigned char[::1] user, const unsigned char[::1] data):
    """Does the trailer at the end of `data` match the rest (and the header, src, dst)?"""
    return _verify(src, dst, &user[0] if user.shape[0] else NULL, user.shape[0],
                   &data[0] if data.shape[0] else NULL, data.shape[0])


cdef bytes trailer_of(int src, int dst, bytes user, bytes data):
    """`trailer` of a packet's header and data as bytes (Pump, sending)."""
    return _trailer(src, dst, <const unsigned char*> PyBytes_AS_STRING(user), len(user),
                    <const unsigned char*> PyBytes_AS_STRING(data), len(data))


cdef bint verify_of(int src, int dst, bytes user, bytes data):
    """`verify` of a packet as taken from the FIFO (AmPath, receiving)."""
    return _verify(src, dst, <const unsigned char*> PyBytes_AS_STRING(user), len(user),
                   <const unsigned char*> PyBytes_AS_STRING(data), len(data))


cdef class Header:
    """One parsed header; an endpoint reuses a single instance for every packet."""

    def __cinit__(self):
        self.pkt_data = PKT_DATA

    cpdef int parse(self, const unsigned char[::1] user, Py_ssize_t dlen, int max_chunk=36):
        """Decode and check a header against the packet's data length; 0 or a MAL_* code.

        Only structure is checked here (what no correct sender can produce); whether the
        addresses are the receiver's to write is the endpoint's business.
        """
        if user.shape[0] < _C.AM_HDR:
            return _C.MAL_SHORT
        return self._parse(&user[0], dlen, max_chunk)

    cpdef int parse_bytes(self, bytes user, Py_ssize_t dlen, int max_chunk=36):
        """`parse` of the user bytes as taken from the FIFO (no buffer view per packet)."""
        if len(user) < _C.AM_HDR:
            return _C.MAL_SHORT
        return self._parse(<const unsigned char*> PyBytes_AS_STRING(user), dlen, max_chunk)

    cdef int _parse(self, const unsigned char* user, Py_ssize_t dlen, int max_chunk):
        cdef int k
        k = user[0] & _C.KIND_MASK
        self.kind = k
        self.flags = user[0] & 0xF0
        self.handler = user[1]
        self.seq = user[2]
        self.ack_req = user[3]
        self.ack_rep = user[4]
        self.idx = user[5]
        self.npkts = user[6]
        self.tail = user[7]
        self.addr = _rd32p(user + 8)
        self.arg = _rd32p(user + 12)
        self.dlen = <int> dlen
        if k < 1 or k > _C.KIND_MAX or self.flags & 0x80:
            return _C.MAL_KIND
        if k == _C.K_STORE or k == _C.K_GETDATA:
            return self._bulk(dlen, max_chunk)
        if self.idx != 0 or self.npkts != 1:
            return _C.MAL_OFFSET
        if k == _C.K_REQ or k == _C.K_REP:
            if dlen % 4 or dlen > 4 * _C.MAX_WORDS:
                return _C.MAL_LENGTH
        elif k == _C.K_GETREQ:
            if dlen != 12:
                return _C.MAL_LENGTH
        elif dlen != 0:
            return _C.MAL_LENGTH
        return 0

    cdef int _bulk(self, Py_ssize_t dlen, int max_chunk):
        cdef long long want
        if self.npkts < 1 or self.npkts > max_chunk or self.idx >= self.npkts:
            return _C.MAL_OFFSET
        if self.tail > self.pkt_data or (self.npkts > 1 and self.tail == 0):
            return _C.MAL_LENGTH
        want = self.pkt_data if self.idx < self.npkts - 1 else self.tail
        if dlen != want:
            return _C.MAL_LENGTH
        self.chunk_base = <long long> self.addr - <long long> self.idx * self.pkt_data
        if self.chunk_base < 0:
            return _C.MAL_OFFSET
        self.chunk_len = <long long> (self.npkts - 1) * self.pkt_data + self.tail
        if self.flags & _C.F_LAST:
            self.end = self.chunk_base + self.chunk_len
        else:
            self.end = self.arg
            if self.end < self.chunk_base + self.chunk_len:
                return _C.MAL_OFFSET
        if self.end > C_U32:                    # (a C constant: 0xFFFFFFFF is a Python int to Cython)
            return _C.MAL_OFFSET
        return 0


@cython.freelist(16)
cdef class Msg:
    """One sequenced message as its sender keeps it until acknowledged: a short message
    (its data kept), a chunk of a bulk transfer (its source read again on every send,
    so a retransmission needs no copy), a get request, or a NOP placeholder. A store
    or get reply that fits in one packet is `kept`: its data is copied like a short
    message's, so its source is free at once and it is acknowledged like one."""

    def __init__(self, int kind, int flags=0, int handler=0, object data=b"", int npkts=1, int tail=0,
                 unsigned int addr=0, unsigned int arg=0, long long src_off=0, object xfer=None,
                 bint kept=False):
        self.seq = -1
        self.kind = kind
        self.flags = flags
        self.handler = handler
        self.data = data
        self.npkts = npkts
        self.tail = tail
        self.addr = addr
        self.arg = arg
        self.src_off = src_off
        self.xfer = xfer
        self.sends = 0
        self.kept = kept

    def __repr__(self):
        return f"<Msg kind={self.kind} seq={self.seq} npkts={self.npkts} sends={self.sends}>"


cdef Msg new_msg(int kind, int flags, int handler, object data, int npkts, int tail, unsigned int addr,
                 unsigned int arg, long long src_off, object xfer, bint kept):
    """``Msg(...)`` with every field given, for the endpoint's per-message code (no
    argument parsing of a Python call)."""
    cdef Msg m = Msg.__new__(Msg)
    m.seq = -1
    m.kind = kind
    m.flags = flags
    m.handler = handler
    m.data = data
    m.npkts = npkts
    m.tail = tail
    m.addr = addr
    m.arg = arg
    m.src_off = src_off
    m.xfer = xfer
    m.sends = 0
    m.kept = kept
    return m


# The deque's methods, found once: a call of ``pending.append(m)`` from C looks the method
# up by name on every message (about twice the instructions of the call itself).
cdef object _deque_append = deque.append
cdef object _deque_popleft = deque.popleft


cdef class TxChannel:
    """The sending end of one channel to one node."""

    def __init__(self, int window, pending):
        self.window = window
        self.next_seq = 0
        self.inflight = 0
        self.resend = 0
        self.unacked = []
        self.pending = pending
        self.retransmitted = 0
        self.goback = 0

    cpdef bint can_send(self, int npkts):
        return self.inflight + npkts <= self.window

    cdef int queue(self, Msg m) except -1:
        """``pending.append(m)``: a message waits for its sequence number."""
        _deque_append(self.pending, m)
        return 0

    cdef Msg next_pending(self):
        """``pending.popleft()``: the oldest waiting message, to be sent."""
        return <Msg> _deque_popleft(self.pending)

    cpdef assign(self, Msg m):
        """Give `m` the next sequence number; it is now in the window (sent or not)."""
        m.seq = self.next_seq
        self.next_seq = (self.next_seq + 1) & 0xFF
        self.unacked.append(m)
        self.inflight += m.npkts

    cpdef list ack(self, int cum):
        """Cumulative ack: the receiver expects `cum` next. The messages it releases.

        An ack outside [oldest unacked, next seq] is stale (a duplicate or a reordered
        old packet) and is ignored."""
        cdef Py_ssize_t n, i
        cdef Msg m
        cdef list done
        if not self.unacked:
            return []
        m = <Msg> self.unacked[0]
        n = (cum - m.seq) & 0xFF
        if n == 0 or n > len(self.unacked):
            return []
        done = self.unacked[:n]
        del self.unacked[:n]
        for i in range(n):
            self.inflight -= (<Msg> done[i]).npkts
        self.resend = self.resend - n if self.resend > n else 0
        return done

    cpdef int go_back(self, int seq):
        """A NACK for `seq`: everything before it arrived; resend from it on.

        Returns 1 if the channel went back, 0 if there was nothing to resend or the
        go-back is already pending (a second NACK for the same gap)."""
        cdef Msg m
        if not self.unacked:
            return 0
        m = <Msg> self.unacked[0]
        if m.seq != seq or self.resend == 0:
            return 0
        self.resend = 0
        self.goback += 1
        return 1

    cpdef int index(self, int seq):
        cdef Py_ssize_t i
        for i in range(len(self.unacked)):
            if (<Msg> self.unacked[i]).seq == seq:
                return <int> i
        return -1

    cpdef int nop(self, Msg m):
        """Turn an unacked message into a one-packet NOP that keeps its sequence number."""
        self.inflight -= m.npkts - 1
        m.kind = _C.K_NOP
        m.flags = _C.F_REPCH if m.flags & _C.F_REPCH else 0
        m.npkts = 1
        m.tail = 0
        m.kept = False
        m.data = b""
        return 0


cdef class RxChannel:
    """The receiving end of one channel from one node."""

    def __init__(self, int threshold):
        self.expected = 0
        self.unacked = 0
        self.threshold = threshold
        self.chunk_npkts = 0
        self.chunk_got = 0
        self.bits = 0
        self.nacked = False
        self.ack_owed = False
        self.accepted = 0
        self.duplicates = 0
        self.ahead = 0

    cpdef int where(self, int seq):
        cdef int d = (seq - self.expected) & 0xFF
        if d == 0:
            return _C.W_HERE
        if d < 128:
            self.ahead += 1
            return _C.W_AHEAD
        self.duplicates += 1
        return _C.W_BEHIND

    cpdef int take(self, int idx, int npkts):
        """A packet of the expected message: place it by its index in the chunk."""
        cdef unsigned long long bit
        if self.chunk_npkts == 0:
            self.chunk_npkts = npkts
            self.chunk_got = 0
            self.bits = 0
        elif npkts != self.chunk_npkts:
            return _C.T_BAD
        bit = (<unsigned long long> 1) << idx
        if self.bits & bit:
            self.duplicates += 1
            return _C.T_DUP
        self.bits |= bit
        self.chunk_got += 1
        self.nacked = False
        return _C.T_COMPLETE if self.chunk_got == npkts else _C.T_PART

    cpdef advance(self, int npkts):
        """The expected message is complete (or consumed): expect the next."""
        self.expected = (self.expected + 1) & 0xFF
        self.chunk_npkts = 0
        self.chunk_got = 0
        self.bits = 0
        self.nacked = False
        self.unacked += npkts
        self.accepted += 1
        if self.unacked >= self.threshold:
            self.ack_owed = True

    cpdef acked(self):
        """What we accepted has just been acknowledged (piggybacked or explicit)."""
        self.unacked = 0
        self.ack_owed = False


cdef class Peer:
    """Everything an endpoint keeps about one other node: a channel each way for
    requests and for replies, the control packets it owes it, the gets it awaits
    from it, the store arriving from it, and the keep-alive's count of its silence.

    An endpoint makes a Peer the first time it talks to a node or hears from one, so a
    node's idle state does not grow with the size of the machine."""

    def __init__(self, int nid, int route, int req_window, int rep_window, int ack_div):
        self.nid = nid
        self.route = route
        self.tx_req = TxChannel(req_window, deque())
        self.tx_rep = TxChannel(rep_window, deque())
        # The receiver's explicit-ack threshold is a quarter of the *sender's* window (SP-C05).
        self.rx_req = RxChannel((req_window + ack_div - 1) // ack_div)
        self.rx_rep = RxChannel((rep_window + ack_div - 1) // ack_div)
        self.ctl = deque()            # control packets to send: (kind, flags, seq, arg)
        self.gets = deque()           # my am_gets to this node, in the order it serves them
        self.in_base = -1             # the store arriving from this node: base address, bytes so far
        self.in_total = 0
        self.mark = 0                 # poll count when its oldest unacked message last made progress
        self.keepalives = 0           # keep-alives sent since it was last heard from
        self.queued = False

    cpdef bint unacked(self):
        return len(self.tx_req.unacked) != 0 or len(self.tx_rep.unacked) != 0

    cpdef bint busy(self):
        """Something to send (or to wait for) on the way to this node."""
        cdef TxChannel t = self.tx_req, r = self.tx_rep
        return (holds(self.ctl) or holds(t.pending) or holds(r.pending) or t.resend < len(t.unacked)
                or r.resend < len(r.unacked) or self.rx_req.ack_owed or self.rx_rep.ack_owed
                or len(t.unacked) != 0 or len(r.unacked) != 0)

    def __repr__(self):
        return f"<Peer node {self.nid}>"


# The same values as C constants for the endpoint chain's per-packet code (_codes.pxd).
assert (K_REQ, K_REP, K_STORE, K_GETREQ, K_GETDATA, K_ACK, K_NACK, K_KEEPALIVE, K_REJECT, K_NOP, F_FIRST, F_LAST,
        F_REPCH, AM_HDR, CHECKSUM_BYTES, HERE, AHEAD, BEHIND, PART, COMPLETE, DUP, BAD) == \
    (_C.K_REQ, _C.K_REP, _C.K_STORE, _C.K_GETREQ, _C.K_GETDATA, _C.K_ACK, _C.K_NACK, _C.K_KEEPALIVE, _C.K_REJECT,
     _C.K_NOP, _C.F_FIRST, _C.F_LAST, _C.F_REPCH, _C.AM_HDR, _C.CHECKSUM_BYTES, _C.W_HERE, _C.W_AHEAD, _C.W_BEHIND,
     _C.T_PART, _C.T_COMPLETE, _C.T_DUP, _C.T_BAD)
assert (KIND_MAX, KIND_MASK, MAX_WORDS, MAL_KIND, MAL_LENGTH, MAL_OFFSET, MAL_SHORT) == \
    (_C.KIND_MAX, _C.KIND_MASK, _C.MAX_WORDS, _C.MAL_KIND, _C.MAL_LENGTH, _C.MAL_OFFSET, _C.MAL_SHORT)
