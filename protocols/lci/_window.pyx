# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The go-back-N sliding window of I-hrx and I-nirx (LCI-C12, C13): one protocol, two homes.

I-hrx runs it in the host library, I-nirx on the NI; both use these two small state
machines, so the variants differ in *where* the work is done and what it costs there,
never in the protocol.

* `TxWindow`, per destination at the sender: sequence numbers (16 bits, wrapping), the
  unacknowledged packets in order -- each a token (the NI send buffer that still holds
  it: no copy for retransmission) and the time it was last sent -- and the window.
  A cumulative acknowledgement frees the prefix it covers; a timer expiry resends every
  unacknowledged packet whose time stamp is too old; a retransmission request (I-nirx)
  goes back to the sequence number it names. `expiries` counts the time-outs in a row
  that brought no acknowledgement: the caller backs its time-out off by it
  (``LciCosts.rto``), and an acknowledgement that frees anything resets it.
* `RxWindow`, per sender at the receiver: the sequence number expected next and how
  many packets were accepted since the last acknowledgement went back (the half-window
  ack and the delayed-ack timer look at it). Out-of-sequence packets are dropped by the
  caller: `where` says whether a packet is the expected one, a duplicate (behind) or
  beyond a gap (ahead).
"""
from collections import deque

from protocols.lci._wire cimport seq_diff

BEHIND = -1
EXPECTED = 0
AHEAD = 1


cdef class TxWindow:
    cdef public int window, next_seq
    cdef public object tokens, stamps
    cdef public long long sent, resent
    cdef public int expiries

    def __init__(self, int window):
        self.window = window
        self.next_seq = 0
        self.expiries = 0
        self.tokens = deque()
        self.stamps = deque()

    cpdef bint open(self):
        return len(self.tokens) < self.window

    cpdef int outstanding(self):
        return len(self.tokens)

    cpdef int base(self):
        """Sequence number of the oldest unacknowledged packet (next_seq if none)."""
        return (self.next_seq - len(self.tokens)) & 0xFFFF

    cpdef int push(self, object token, double now):
        """Take the next sequence number for a packet sent now."""
        cdef int seq = self.next_seq
        self.next_seq = (seq + 1) & 0xFFFF
        self.tokens.append(token)
        self.stamps.append(now)
        self.sent += 1
        return seq

    cpdef list ack(self, int cum):
        """The receiver expects `cum` next: free and return the tokens it covers."""
        cdef int n = seq_diff(cum, self.base())
        cdef list freed = []
        if n <= 0 or n > len(self.tokens):
            return freed                 # old, duplicate or nonsense: nothing to free
        for _ in range(n):
            freed.append(self.tokens.popleft())
            self.stamps.popleft()
        self.expiries = 0                # the path works: the next time-out is the base one
        return freed

    cpdef int index(self, int seq):
        """Position of `seq` among the unacknowledged packets, or -1."""
        cdef int i = seq_diff(seq, self.base())
        return i if 0 <= i < len(self.tokens) else -1

    cpdef list stale(self, double now, double timeout):
        """Positions of the packets last sent at least `timeout` ago (to resend)."""
        cdef list out = []
        cdef int i = 0
        cdef double limit = now - timeout
        for t in self.stamps:
            if <double> t <= limit:
                out.append(i)
            i += 1
        return out

    cpdef oldest_stamp(self):
        return self.stamps[0] if self.stamps else None

    cpdef object token(self, int i):
        return self.tokens[i]

    cpdef int seq_at(self, int i):
        return (self.base() + i) & 0xFFFF

    cpdef restamp(self, int i, double now):
        self.stamps[i] = now
        self.resent += 1


cdef class RxWindow:
    cdef public int expected, owed
    cdef public long long accepted, duplicates, out_of_order

    def __init__(self):
        self.expected = 0
        self.owed = 0

    cpdef int where(self, int seq):
        cdef int d = seq_diff(seq, self.expected)
        if d == 0:
            return EXPECTED
        return BEHIND if d < 0 else AHEAD

    cpdef accept(self):
        self.expected = (self.expected + 1) & 0xFFFF
        self.owed += 1
        self.accepted += 1

    cpdef int acked(self):
        """An acknowledgement goes back now (explicit or piggybacked): its value."""
        self.owed = 0
        return self.expected
