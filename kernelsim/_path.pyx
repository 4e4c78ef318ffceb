# cython: language_level=3
"""Kernel paths as C state machines.

A path is normally a generator that yields the CPU time its work takes (see `_cpu`).
On the paths every message takes -- the call gate to the transmit doorbell, the
interrupt to the reader's wake-up -- a generator costs more than the work it models:
every resume crosses every generator it is nested in. Those paths are written as
`Path` subclasses instead: ``step(&cost)`` runs the path's C code up to its next
modeled instant and says 1 with the CPU time to spend before it goes on, or 0 once
it has returned (its value in ``value``). The CPU, the interrupt path and the kernel
entries step a Path by that C call; anything else still sees an iterator (``yield
from`` a Path works), so a Path and the generator it replaces are interchangeable --
same yields, same effects at the same instants.

`RxHandler` is the receive side of the same idea: a protocol's hand-off registered
with a network device as an object whose ``rx`` is a C call that either does all its
work at once (the common case: it returns the CPU time it spent, no path at all) or
hands back a path to run. Called from Python it is still ``handler(dev, addr, length)``
returning a path, as every protocol handler is.

Spent in place. Between two of a path's instants the CPU either moves time itself
(`Engine.advance`: nothing else can happen first) and steps the path again at once, or
posts the segment's end as an event. A path nested in others (a driver's interrupt
path in the line's, a commit in a write in a kernel entry) returns each yield up
through every path it runs in, and is stepped back down through them, only to go on
at once. While the CPU walks a Path, the paths it runs may ask it instead (`spent(c)`,
where they would yield `c`): 1, the time is spent already (the same test, the same
accounting, the same instant) and the path goes on in place; 0, it yields as before.
It is the CPU's answer for the path it walks only if every path between passes its
yields through unchanged, as the C wrappers do; a generator, which may not, runs
with no walker (`step_any`, `Path.__next__`), and a path stepped outside any walk gets 0.
"""
from cpython.ref cimport PyObject, Py_XDECREF

__all__ = ["Path", "RxHandler"]


# No walk yet; the CPU's answer once `_cpu` is imported (`set_spender`).
walk.walker = NULL
walk.spend = NULL
walk.owner = NULL
walk.refused = False


cdef PyObject* swap_walker(PyObject* walker) noexcept:
    """Make `walker` the CPU walking the paths stepped from here on; the previous one back."""
    cdef PyObject* prev = walk.walker
    walk.walker = walker
    return prev


cdef int set_spender(SpendFn fn) except -1:
    walk.spend = fn
    return 0


cdef class Path:
    cdef int step(self, double* cost) except -1:
        raise NotImplementedError

    def __iter__(self):
        return self

    def __next__(self):
        # Iterated by Python (a generator's ``yield from``): not a pass-through (`spent`).
        cdef double c
        cdef PyObject* walker = swap_walker(NULL)
        try:
            r = self.step(&c)
        finally:
            swap_walker(walker)
        if r:
            return c
        v = self.value
        self.value = None
        raise StopIteration(v)


cdef class _Spent(Path):
    """A path with no instant of its own: it returns the time it was given."""
    cdef int step(self, double* cost) except -1:
        return 0


cdef class RxHandler:
    cdef int rx(self, object dev, Py_ssize_t addr, Py_ssize_t length, double* cost,
                PyObject** cont) except -1:
        """Take the frame at `addr` (`length` bytes): 0 with the CPU time spent in
        ``cost[0]``, or 1 with a new reference to the path that goes on in ``cont[0]``."""
        raise NotImplementedError

    def __call__(self, dev, Py_ssize_t addr, Py_ssize_t length):
        cdef double c = 0.0
        cdef PyObject* cont = NULL
        cdef _Spent done
        if self.rx(dev, addr, length, &c, &cont):
            path = <object> cont
            Py_XDECREF(cont)
            return path
        done = _Spent.__new__(_Spent)
        done.value = c
        return done
