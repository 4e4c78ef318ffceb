from cpython.ref cimport PyObject
from kernelsim._irq cimport IrqController
from kernelsim._waits cimport WaitQueue


cdef class NetDevice:
    cdef public object node
    cdef public str name
    cdef public object hwaddr
    cdef public dict protocols
    cdef public WaitQueue tx_space
    cdef public long long rx_frames, rx_bytes, rx_dropped_proto, rx_errors
    cdef public long long tx_frames, tx_bytes, tx_busy
    cdef public int irq_line
    cdef IrqController _irq
    cdef readonly list _allocs
    cdef dict __dict__                  # a driver's own state

    cpdef set_irq(self, bint level)
    cdef int hand_over(self, unsigned int proto, Py_ssize_t addr, Py_ssize_t length, double* cost,
                       PyObject** cont) except -1
