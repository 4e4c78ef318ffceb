# cython: language_level=3, boundscheck=False, wraparound=False
"""The records the LCI firmware touches on every packet: a peer, a send buffer's packet,
a multicast forward and the shared buffer it goes out of.

They were ``__slots__`` classes; here they are cdef classes whose numbers are C fields
in the object itself. Why: a 1024-node broadcast keeps every node busy at once, so
consecutive events touch different nodes' records, and the records no longer fit in
cache (docs/lci.md "Scale"). A slot holding a Python int points at a separate heap
object (every SRAM address is above the small-int cache); a C field keeps the number
in the record's own cache lines. The Python code reads and writes them as before.
"""
from collections import deque


cdef class NiPeer:
    """What this NI keeps about one other node (made on first contact)."""

    def __init__(self, long nid, bytes route, long window):
        self.nid = nid
        self.route = route
        self.credits = window            # reliability=none: free buffers reserved for us there
        self.in_use = 0                  # ... and ours held for it here
        self.released = 0                # released since the last credit went back
        self.blocked = deque()           # packets the flow control holds back (LCI-C05)
        self.tx = None                   # reliability=ni: TxWindow / RxWindow
        self.rx = None
        self.retx_timer = None
        self.ack_timer = None
        self.nack_owed = False
        self.staging = deque()           # taken from the host, data not all in NI buffers yet


cdef class TxPacket:
    """An NI send buffer and the packet in it (one per buffer, reused)."""

    def __init__(self, long index, long long buf):
        self.index = index
        self.buf = buf
        self.dest = self.length = self.desc = self.kind = self.flags = 0
        self.seq = self.ack = -1
        self.aux = 0
        self.staged = False              # its data is in the send buffer (see HostSendQueue)
        self.slot = None                 # multicast, F&A: the buffer this packet shares (Slot)


cdef class Forward(TxPacket):
    """One child's send out of a shared buffer (a TxPacket's fields, and the slot)."""

    def __init__(self, slot):
        self.slot = slot
        self.index = -1
        self.buf = self.dest = self.length = self.kind = self.flags = self.aux = 0
        self.staged = False             # a host multicast's: its data is in the send buffer (hostq.py)
        self.desc = 0                   # >= 0: its first transmission finishes it (no host descriptor:
        self.seq = self.ack = -1        # `SendQueue.done` gives the slot back instead)


cdef class Slot:
    """A buffer several sends go out of: who waits for its header area, what it holds."""

    def __init__(self, long kind, long long buf):
        self.kind = kind
        self.buf = buf                  # RX: the receive buffer; TX: the send buffer's index
        self.busy = False
        self.waiting = deque()          # (peer, None): unblock peer; (peer, pkt): send pkt again
        self.queued = set()             # what `waiting` holds (a peer's nid, a packet's id): once each
        self.refs = 0                   # the host copy and the sends still to finish
        self.peer = None                # RX: the sender, whose credit the buffer holds
        self.desc = -1                  # TX: the descriptor to complete
        self.forwards = []              # reused, one per child
        self.staged = 0                 # TX: how many of them wait in their children's staging queues

    cpdef wait(self, peer, pkt=None):
        """`peer`'s queue (or the retransmission of `pkt`) goes on when this buffer's send has left."""
        key = peer.nid if pkt is None else id(pkt)
        if key not in self.queued:
            self.queued.add(key)
            self.waiting.append((peer, pkt))

    cpdef Forward forward(self, long i):
        cdef list fs = self.forwards
        while len(fs) <= i:
            fs.append(Forward(self))
        return fs[i]
