# The modeled ATM medium: fibers that carry 53-byte cells at the cell rate, and a
# cell switch. Declared here so the adapter model can drive a port at C level.
from kernelsim._engine cimport Engine, EventTarget


cdef class CellSink:
    """Whatever receives cells at the far end of a fiber: an adapter or a switch input."""
    cdef int rx_cell(self, const unsigned char* cell) except -1


cdef class CellPort(EventTarget):
    """One direction of one fiber: the transmitter that drives it, the sink at its end
    (a cell's arrival is its engine event: `on_event`)."""
    cdef Engine engine
    cdef object faults
    cdef bint faulty
    cdef CellSink sink
    cdef readonly double cell_s, prop_s
    cdef public double free_at
    cdef unsigned char* ring
    cdef Py_ssize_t cap, head, count
    cdef readonly long long cells
    cdef readonly double busy_s

    cdef double send_cell(self, const unsigned char* cell, double t) except -1.0
    cdef int _push(self, const unsigned char* cell) except -1
    cdef int on_event(self, int what, object arg) except -1
