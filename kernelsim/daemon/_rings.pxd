# The event ring (see _rings.pyx's essay), declared for the modules that post to one by
# C call: DP's endpoint export (dpcore/_export.pyx) posts a delivery record per message.
from libc.stdint cimport uint32_t, uint64_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    #define EV_MAGIC 0x31474E5256455044ULL  /* "DPEVRNG1" */
    typedef struct {
        uint64_t magic; uint32_t version; uint32_t slots; uint32_t rec_bytes; uint8_t _p0[44];
        uint64_t head; uint8_t _p1[56];
        uint64_t tail; uint8_t _p2[56];
        uint32_t armed; uint8_t _p3[60];
        uint64_t posted; uint64_t full; uint8_t _p4[48];
    } ev_hdr;
    _Static_assert(sizeof(ev_hdr) == 320, "event ring header");
    """
    ctypedef struct ev_hdr:
        uint64_t magic
        uint32_t version
        uint32_t slots
        uint32_t rec_bytes
        uint64_t head
        uint64_t tail
        uint32_t armed
        uint64_t posted
        uint64_t full
    uint64_t EV_MAGIC


cdef class EventRing:
    cdef object _mm
    cdef Py_buffer _view
    cdef bint _mapped
    cdef ev_hdr* _h
    cdef uint32_t* _recs
    cdef uint64_t _mask
    cdef readonly uint32_t slots
    cdef int _efd
    cdef uint64_t _local_head           # batching: the head after the records not yet published
    cdef bint _queued                   # batching: in _unpublished

    cdef _unmap(self)
    cpdef bint post(self, uint32_t a, uint32_t b, uint32_t c, uint32_t d) except -1
    cdef void _publish(self)
    cdef void _publish_head(self, uint64_t head)
    cpdef bint pending(self)
    cpdef object pop(self)
    cdef int pop_into(self, uint32_t* out) except -1
    cdef void _disarm(self)


cdef class RingExport:
    # What a node's open file shows its owner process, when the file delivers into an
    # event ring and takes operations back through its gate ring (DP's endpoint export):
    # the node's gate drain calls ring_op_raw by C with the entry still in its buffer, and
    # the file's deposit calls deliver by C to post what it has queued.
    cdef int deliver(self) except -1
    cdef int ring_op_raw(self, const unsigned char* p, Py_ssize_t n) except -1


cdef class CrowdedCore:
    # The two-strike rule of a poller pinned beside a CPU-bound process (_rings.pyx).
    cdef double last_late           # when a yield last came back late
    cdef readonly double until      # no polling before this (wall clock)
    cdef readonly long long count   # times the rule stopped the polls
    cdef bint late_yield(self, double before, double after) noexcept


# What a poller calls besides `CrowdedCore` (the node loop, kernelsim.daemon._server, and a
# script's waits, libdp._endpoint_rings): the yield between polls and a look at an epoll set.
cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        int fd
    cdef struct epoll_event:
        uint32_t events
        epoll_data_t data
    int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout)
