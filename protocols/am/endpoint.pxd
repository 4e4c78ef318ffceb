# The SP AM endpoint (endpoint.pyx): what the compiled call loop (libdp/_am_call.pyx)
# calls on it as C, and the per-packet methods it adds to the chain (fields: window.pxd).
from protocols.am._wire cimport Header, Peer
from protocols.am.bulk cimport Bulk


cdef class AmEndpoint(Bulk):
    cpdef bint ready(self) except -1
    cpdef object request_path(self, object peer, object msg, object since=*)
    cpdef object transfer_path(self, object x, object since=*, bint wait=*)
    cpdef object wait_path(self, object pred, object since=*)
    cdef int _rx_packet(self, Peer peer, Header h, bytes data) except -1
    cdef int _run_handler(self, Peer peer, object fn, bint request, tuple args) except -1
    cdef object _local_range(self, object buf, object nbytes)
