# The bulk-transfer part of the SP AM endpoint chain (fields: window.pxd).
from protocols.am._wire cimport Header, Peer, RxChannel, TxChannel
from protocols.am.keepalive cimport KeepAlive


cdef class Transfer:
    cdef public object kind, dest, nbytes, remote, local, handler, arg, on_done, done_arg, error
    cdef public bint blocking, done
    cdef Peer peer                  # the Peer of `dest` (a store's, set as it is made), or None


cdef class Bulk(KeepAlive):
    cdef Transfer new_store(self, object dest, object src, object nbytes, object raddr, object handler, object arg,
                            object on_done, object done_arg, bint blocking)
    cdef int _finish(self, object x) except -1
    cdef int _chunks(self, TxChannel ch, int kind, int handler, object read, long long nbytes, unsigned int addr,
                     unsigned int arg, object x, int flags=*) except -1
    cdef int _rx_store(self, Peer peer, RxChannel rx, Header h, bytes data) except -1
    cdef int _rx_getdata(self, Peer peer, RxChannel rx, Header h, bytes data) except -1
    cdef bint _accept_chunk_packet(self, RxChannel rx, Header h, bytes data) except -1
