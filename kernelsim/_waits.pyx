# cython: language_level=3
"""Wait queues: how a simulated process sleeps until the kernel has something for it.

A waiter is any callable; waking calls every waiter once. The trio binding parks the
calling task and registers a waiter that reschedules it; in modeled time a wake also
asks the engine to stop so that trio runs the woken task at the current modeled time.

Every received message wakes one, so it is Cython; a `Waiter` (what the trio binding
registers) is woken by a C call, any other callable by a Python one.
"""
from kernelsim._engine cimport Engine

__all__ = ["WaitQueue", "SpinnerQueue", "Waiter", "Pool"]


cdef class Pool:
    pass


cdef class Waiter:
    cdef int wake_up(self) except -1:
        raise NotImplementedError

    def __call__(self):
        self.wake_up()


cdef inline int _wake_one(Engine engine, object w) except -1:
    engine.request_stop()               # one per waiter: callers count who woke
    if isinstance(w, Waiter):
        (<Waiter> w).wake_up()
    else:
        w()
    return 0


cdef class WaitQueue:
    def __cinit__(self, Engine engine):
        self._waiters = []
        self.engine = engine
        self.wakeups = 0

    cpdef add(self, object waiter):
        # `_one` is taken only while the list is empty, so it is always the earliest waiter
        if self._one is None and not self._waiters:
            self._one = waiter
        else:
            self._waiters.append(waiter)

    cpdef discard(self, object waiter):
        if self._one is not None and (self._one is waiter or self._one == waiter):
            self._one = None
            return
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    cpdef wake(self):
        cdef list waiters = None
        cdef object one = self._one
        if one is None and not self._waiters:
            return
        self._one = None
        if self._waiters:
            waiters = self._waiters
            self._waiters = []
        self.wakeups += 1
        if one is not None:
            _wake_one(self.engine, one)
        if waiters is not None:
            for w in waiters:
                _wake_one(self.engine, w)

    def __len__(self):
        return (self._one is not None) + len(self._waiters)


cdef class SpinnerQueue(WaitQueue):
    """A wait queue with places for one more kind of waiter: spinners, a program's poll loop
    that the engine runs itself (`kernelsim._spin`). The queue's other waiters are trio
    tasks, and waking one stops the engine so that trio runs it at this instant; a spinner
    is woken by a C call and the engine goes on -- with the spinner's own continuation, at
    this instant, before anything else. Usually one task polls: its spinner has the slot
    `spinner`; others queue behind it."""

    def __cinit__(self, Engine engine):
        self.more_spinners = []

    cdef int add_spinner(self, Waiter s) except -1:
        if self.spinner is None:
            self.spinner = s
        else:
            self.more_spinners.append(s)
        return 0

    cdef int discard_spinner(self, Waiter s) except -1:
        if self.spinner is s:
            self.spinner = self.more_spinners.pop(0) if self.more_spinners else None
        elif s in self.more_spinners:
            self.more_spinners.remove(s)
        return 0

    cpdef wake(self):
        cdef Waiter s = self.spinner
        cdef list more
        if s is not None:
            self.spinner = None
            if self._one is None and not self._waiters:
                self.wakeups += 1
            more = self.more_spinners
            if more:
                self.more_spinners = []
            s.wake_up()
            if more:
                for w in more:
                    (<Waiter> w).wake_up()
        WaitQueue.wake(self)
