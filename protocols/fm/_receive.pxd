# FM's receive side in C (see _receive.pyx).

from protocols.fm._smtport cimport Peer, SmtPort
from protocols.fm._wire cimport Header

cdef class RecvStream:
    cdef public object ctx
    cdef public int src, handler
    cdef public long long length, taken, arrived
    cdef public unsigned int seq
    cdef public object coro
    cdef public bint done
    cdef public double cost          # CPU time the handler's receives have spent (copies)
    cdef public Py_ssize_t win_pos, win_end
    cdef object _view                # what holds the current packet (None between packets)
    cdef const unsigned char* _win   # its data, valid while _view is held
    cdef double _c_receive, _c_copy_base, _c_copy_rate

    cpdef open_window(self, object view, Py_ssize_t at, Py_ssize_t nbytes)
    cpdef close_window(self)
    cdef Py_ssize_t _take(self, Py_ssize_t want, unsigned char* out) noexcept


cdef class ContextCore:
    cdef object ctx
    cdef dict handlers, stats
    cdef public dict smt_peers
    cdef list peers
    cdef public SmtPort smt
    cdef long long n_extracts, n_empty, n_packets, n_bytes, n_messages, n_handlers, n_sent, n_packets_sent, n_bytes_sent
    cdef double c_handler
    cdef int program, instance, nid

    cpdef double run_handler(self, Peer peer, Header h, object view, Py_ssize_t data_at) except? -1.0
    cpdef long long extract_smt(self, SmtPort port, long long budget) except -1
    cpdef int send_now(self, object dest, object handler, object data) except -3
