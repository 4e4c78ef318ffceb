from kernelsim._waits cimport Pool


cdef class TokenBufferPool(Pool):
    cdef readonly object region        # the node's shared region holding the slots
    cdef unsigned char[::1] _buf       # region.buf while pinned
    cdef bint _pinned
    cdef readonly int nslots
    cdef readonly int slot_bytes
    cdef int* _fifo
    cdef int _head                     # (and Pool.count queued from there)
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

    cpdef bint deposit(self, const unsigned char[::1] src, Py_ssize_t off, Py_ssize_t n,
                       int src_nid, int src_ep) except -1
    cdef int _claim(self, Py_ssize_t n)
    cdef void _queue(self, int slot, int n, int src_nid, int src_ep)
    cpdef int take(self)
    cpdef int length(self, int slot) except -1
    cpdef bytes copy_out(self, int slot, Py_ssize_t nbytes)
    cpdef release(self, int slot)
    cdef int _check_held(self, int slot) except -1
    cdef int _check_pinned(self) except -1
