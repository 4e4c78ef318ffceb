# cython: language_level=3
"""The firmware's per-packet records as C structs with Python faces (see _records.pyx)."""


cdef class NiPeer:
    cdef public long nid
    cdef public bytes route
    cdef public long credits, in_use, released
    cdef public object blocked, staging, tx, rx, retx_timer, ack_timer
    cdef public bint nack_owed


cdef class TxPacket:
    cdef public long long buf, aux
    cdef public long index, dest, length, desc, kind, flags, seq, ack
    cdef public bint staged
    cdef public object slot


cdef class Forward(TxPacket):
    pass


cdef class Slot:
    cdef public long kind, refs, desc, staged
    cdef public long long buf
    cdef public bint busy
    cdef public object waiting, queued, peer
    cdef public list forwards
    cpdef wait(self, peer, pkt=*)
    cpdef Forward forward(self, long i)


cdef inline object known_peer(object fw, object nid):
    """`fw.peer(nid)` (the NI's record of node `nid`, made on first contact; None if it has
    no route), without that method's Python frame once the peer is known: every packet but
    the first of a pair."""
    p = fw.peers.get(nid)
    return p if p is not None else fw.peer(nid)
