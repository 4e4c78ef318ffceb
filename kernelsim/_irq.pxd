from kernelsim._cpu cimport Cpu


cdef class IrqHandler:
    # An interrupt handler whose path a C call makes (a driver's); the default is the
    # Python-level ``self.interrupt_path(pending)``.
    cdef object irq_path(self, double pending)


cdef class _Line:
    cdef public list handlers
    cdef public bint level
    cdef public bint in_service
    cdef public long long count
    cdef IrqController ctl


cdef class IrqController:
    cdef readonly Cpu cpu
    cdef readonly object costs
    cdef double entry_s, exit_s
    cdef list _lines

    cpdef set_level(self, int line, bint high)
    cdef _start(self, _Line ln)
