# A context's side of FM's shared-memory transport, per packet in C (see _smtport.pyx).

from libc.stdint cimport uint32_t
from protocols.fm._smt cimport SmtRegion
from protocols.fm._wire cimport Header

cdef class Peer:
    cdef public int vnode, host, inst, rid
    cdef public bint smt
    cdef public long long credits, sent, returned, consumed, credited
    cdef public unsigned int seq, skip_seq
    cdef public object open_stream, rx

cdef class SmtPort:
    cdef public object host
    cdef public SmtRegion region
    cdef public uint32_t me, instance
    cdef Header h
    cdef public Header rx           # the header of the frame `poll` took
    cdef public int rx_rc           # ... PKT_OK, or why it is malformed
    cdef double c_atomic, c_copy_base, c_copy_rate, c_poll, c_miss
    cdef int _rid_pending
    cdef int _idx_pending
    cdef int _n_pending
    cdef public Py_ssize_t n_packets_sent   # packets of the last send_now
    cdef public long long claim_tries, sent, received, reclaimed_frames, skipped_positions

    cdef inline double _copy(self, Py_ssize_t n)
    cpdef int rid_of(self, Peer peer) except -2
    cpdef long long returned(self, Peer peer) except -1
    cpdef int claim(self, Peer peer)
    cpdef double header(self, uint32_t rid, uint32_t idx, Header h)
    cpdef double write(self, uint32_t rid, uint32_t idx, Py_ssize_t at, const unsigned char[::1] data)
    cpdef double publish(self, uint32_t rid, uint32_t idx, uint32_t plen)
    cpdef double send_one(self, Peer peer, int src_host, int program, int handler, unsigned int seq,
                          const unsigned char[::1] data)
    cdef double _send_one(self, Peer peer, int src_host, int program, int handler, unsigned int seq,
                          const unsigned char* data, Py_ssize_t n) except? -2
    cpdef long long send_now(self, Peer peer, int src_host, int program, int handler, object data) except -3
    cdef long long _send_packets(self, Peer peer, int src_host, int program, int handler,
                                 const unsigned char* data, Py_ssize_t n) except -3
    cpdef publish_pending(self)
    cpdef int poll(self)
    cpdef release(self, uint32_t idx)
