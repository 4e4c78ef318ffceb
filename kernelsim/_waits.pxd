from kernelsim._engine cimport Engine


cdef class Waiter:
    """A waiter the queue wakes by a C call (the trio binding's completions are these)."""
    cdef int wake_up(self) except -1


cdef class WaitQueue:
    cdef list _waiters
    cdef readonly Engine engine
    cdef public long long wakeups

    cpdef add(self, object waiter)
    cpdef discard(self, object waiter)
    cpdef wake(self)
