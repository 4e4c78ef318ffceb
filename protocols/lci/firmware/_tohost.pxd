# cython: language_level=3
cdef class ToHost:
    cdef public object fw, pending
    cdef public long delivered, cons
    cdef long _take(self)
    cpdef deliver(self, peer, long long buf, long n)
    cdef _dma(self, peer, long long buf, long n, long long addr)
