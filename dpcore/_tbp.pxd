cdef class TokenBufferPool:
    cdef object mem
    cdef unsigned char[::1] _buf
    cdef readonly Py_ssize_t base
    cdef readonly int nslots
    cdef readonly int slot_bytes
    cdef int* _fifo
    cdef int _head
    cdef readonly int count
    cdef int* _free
    cdef int _nfree
    cdef int* _len
    cdef int* _src_nid
    cdef int* _src_ep
    cdef unsigned char* _held
    cdef readonly long long deposited
    cdef readonly long long dropped_full
    cdef readonly long long dropped_too_long
    cdef readonly long long taken
    cdef readonly long long released
    cdef readonly int high_water

    cpdef bint deposit(self, Py_ssize_t src_addr, int n, int src_nid, int src_ep)
    cpdef bint deposit_bytes(self, const unsigned char[::1] data, int src_nid, int src_ep)
    cdef int _claim(self, int n)
    cdef void _queue(self, int slot, int n, int src_nid, int src_ep)
    cpdef int take(self)
    cpdef int length(self, int slot) except -1
    cpdef release(self, int slot)
