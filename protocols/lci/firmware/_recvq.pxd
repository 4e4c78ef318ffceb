# cython: language_level=3
"""Recv Queue Mgt and Recv Dispatch (see _recvq.pyx)."""


cdef class RecvQueue:
    cdef public object fw
    cdef public list free, buffers
    cdef public dict dispatch
    cdef public long long drop_buf
    cdef public long cap
    cdef public bint armed_drop
    cpdef arm(self)
