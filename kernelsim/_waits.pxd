from kernelsim._engine cimport Engine


cdef class Waiter:
    """A waiter the queue wakes by a C call (the trio binding's completions are these)."""
    cdef int wake_up(self) except -1


cdef class Pool:
    # What a process can see of a pool mapped into it (a DP endpoint's TBP): how many
    # messages it holds. A blocking user-level call looks at it before it starts
    # (`kernelsim._trio.run_user`), by a C read rather than an attribute and an int.
    cdef readonly int count


cdef class WaitQueue:
    # Usually one waiter at a time: it has a slot of its own (`_one`), the list holds any
    # after it, so a wake neither makes a new list nor regrows one's storage.
    cdef object _one
    cdef list _waiters
    cdef readonly Engine engine
    cdef public long long wakeups

    cpdef add(self, object waiter)
    cpdef discard(self, object waiter)
    cpdef wake(self)


cdef class SpinnerQueue(WaitQueue):
    # A wait queue with places for waiters the engine runs itself (kernelsim._spin).
    cdef public Waiter spinner
    cdef list more_spinners                    # when more than one task polls (rare)
    cdef int add_spinner(self, Waiter s) except -1
    cdef int discard_spinner(self, Waiter s) except -1
