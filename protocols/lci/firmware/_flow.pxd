# cython: language_level=3


cdef class _Flow:
    cdef public object fw
    cdef public bint drops_when_full


cdef class Credits(_Flow):
    cdef public long half


cdef class NiGoBackN(_Flow):
    cdef public long half
    cdef public list nack_queue


cdef class HostDriven(_Flow):
    pass
