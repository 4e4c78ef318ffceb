# The keep-alive's part of the SP AM endpoint chain (fields: window.pxd).
from protocols.am._wire cimport Peer
from protocols.am.window cimport Window


cdef class KeepAlive(Window):
    cdef int _settled(self, Peer peer) except -1
    cdef int _unsettled(self, Peer peer) except -1
    cdef int _keepalive_check(self) except -1
    cdef int _keepalive_due(self, Peer peer) except -1
    cpdef arm_timer(self)
    cdef double _next_due(self) except? -1.0
