# FM's shared-memory transport: the lock-free queues in one shared region (see _smt.pyx).

from libc.stdint cimport uint32_t, uint64_t

cdef class SmtRegion:
    cdef object _obj                # the object whose buffer holds the region
    cdef object _view_obj           # memoryview of exactly the region
    cdef readonly object view       # the same, for FM's header codec and copies
    cdef unsigned char* _base
    cdef readonly Py_ssize_t size
    cdef readonly uint32_t nproc, nqueues, nframes, frame_bytes, qlen
    cdef uint32_t _fmask, _qmask
    cdef Py_ssize_t _map_off, _proc_off, _area_off, _area_bytes, _queue_bytes, _consumed_off, _frames_off
    cdef Py_ssize_t _frame_stride
    cdef readonly int last_tries    # frames tried by the last claim (step 2-3 loops)
    cdef readonly int last_queue    # the queue the last poll found a frame in
    cdef uint32_t _rr               # where the next poll starts (round robin over the M queues)

    cdef int _check(self) except -1
    cdef unsigned char* _area(self, uint32_t rid) noexcept nogil
    cdef unsigned char* _frame(self, uint32_t rid, uint32_t idx) noexcept nogil
    cdef unsigned char* _queue(self, uint32_t rid, uint32_t q) noexcept nogil
    cdef unsigned char* _proc(self, uint32_t pid) noexcept nogil

    cpdef int lookup(self, uint32_t instance)
    cpdef int claim(self, uint32_t rid, uint32_t me)
    cpdef unclaim(self, uint32_t rid, uint32_t me, uint32_t idx)
    cpdef Py_ssize_t frame_offset(self, uint32_t rid, uint32_t idx)
    cpdef publish(self, uint32_t rid, uint32_t me, uint32_t idx, uint32_t nbytes)
    cpdef int poll(self, uint32_t me)
    cpdef take(self, uint32_t me, uint32_t q)
    cpdef release(self, uint32_t me, uint32_t idx)
    cpdef uint32_t frame_len(self, uint32_t rid, uint32_t idx)
    cpdef uint32_t frame_src(self, uint32_t rid, uint32_t idx)
    cpdef uint64_t consumed(self, uint32_t rid, uint32_t sender)
