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
"""
from cpython.ref cimport PyObject, Py_XDECREF

__all__ = ["Path", "RxHandler"]


cdef class Path:
    cdef int step(self, double* cost) except -1:
        raise NotImplementedError

    def __iter__(self):
        return self

    def __next__(self):
        cdef double c
        if self.step(&c):
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
