from kernelsim.daemon._rings cimport EventRing, RingExport
from dpcore._services cimport Endpoint
from dpcore._tbp cimport TokenBufferPool


cdef class EndpointExport(RingExport):
    cdef readonly Endpoint e
    cdef readonly object owner
    cdef TokenBufferPool tbp
    cdef readonly EventRing ring
    cdef readonly int _memfd, _efd      # the ring's memory file and eventfd (the owner gets duplicates)
    cdef unsigned char[::1] _held       # one byte per pool slot: 1 while the owner holds it
    cdef readonly Py_ssize_t nheld
    cdef readonly long long bad_releases, delivered

    cdef bint _holds(self, object slot)
