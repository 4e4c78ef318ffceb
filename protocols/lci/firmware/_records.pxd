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
