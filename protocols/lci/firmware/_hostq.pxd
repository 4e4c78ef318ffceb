# cython: language_level=3
cdef class HostSendQueue:
    cdef public object fw
    cdef public long seen
    cdef public bint looking
    cdef Py_ssize_t _slot(self, long nsd)
