# cython: language_level=3
"""Wait queues: how a simulated process sleeps until the kernel has something for it.

A waiter is any callable; waking calls every waiter once. The trio binding parks the
calling task and registers a waiter that reschedules it; in modeled time a wake also
asks the engine to stop so that trio runs the woken task at the current modeled time.

Every received message wakes one, so it is Cython; a `Waiter` (what the trio binding
registers) is woken by a C call, any other callable by a Python one.
"""
from kernelsim._engine cimport Engine

__all__ = ["WaitQueue", "Waiter"]


cdef class Waiter:
    cdef int wake_up(self) except -1:
        raise NotImplementedError

    def __call__(self):
        self.wake_up()


cdef class WaitQueue:
    def __cinit__(self, Engine engine):
        self._waiters = []
        self.engine = engine
        self.wakeups = 0

    cpdef add(self, object waiter):
        self._waiters.append(waiter)

    cpdef discard(self, object waiter):
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    cpdef wake(self):
        cdef list waiters
        if not self._waiters:
            return
        waiters = self._waiters
        self._waiters = []
        self.wakeups += 1
        for w in waiters:
            self.engine.request_stop()      # one per waiter: callers count who woke
            if isinstance(w, Waiter):
                (<Waiter> w).wake_up()
            else:
                w()

    def __len__(self):
        return len(self._waiters)
