# cython: language_level=3
cdef class Unicast:
    cdef public object fw
    cdef public list ctl_free, ctl_waiting
    cdef long long _put(self, long long at, bytes route, long kind, long flags, long length, long credits, long seq,
                        long ack, long long aux) except? -1
