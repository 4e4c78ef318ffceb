# cython: language_level=3
from protocols.lci.firmware._records cimport Slot


cdef class Multicast:
    cdef public object fw, group
    cdef public dict holds, kids_by_root, rx_slots, tx_slots
    cpdef tuple children(self, long root)
    cpdef Slot hold_rx(self, long long buf, peer, long refs)
