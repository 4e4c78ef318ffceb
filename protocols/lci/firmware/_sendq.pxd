# cython: language_level=3
cdef class SendQueue:
    cdef public object fw
    cdef public long cpl_prod
    cpdef complete(self, long desc)
