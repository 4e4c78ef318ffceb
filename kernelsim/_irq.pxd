from kernelsim._cpu cimport Completion, Cpu
from kernelsim._path cimport Path


cdef class IrqHandler:
    # An interrupt handler whose path a C call makes (a driver's); the default is the
    # Python-level ``self.interrupt_path(pending)``.
    cdef object irq_path(self, double pending)


cdef class _IrqPath(Path):
    cdef list handlers
    cdef Py_ssize_t i
    cdef object cur                     # the running handler's path
    cdef double pending, exit_s
    cdef bint exited
    cdef bint real                      # its CPU runs in real time (see `_IrqPath.step`)


cdef class _Line(Completion):
    # A line is the completion of its interrupt path (a C call from the CPU), and owns the
    # path object it runs: at most one runs at a time (in_service).
    cdef public list handlers
    cdef public bint level
    cdef public bint in_service
    cdef public long long count
    cdef IrqController ctl
    cdef _IrqPath path


cdef class IrqController:
    cdef readonly Cpu cpu
    cdef readonly object costs
    cdef double entry_s, exit_s
    cdef list _lines

    cpdef set_level(self, int line, bint high, bint last=*)
    cdef _start(self, _Line ln, bint last=*)


cdef inline int drive_line(IrqController ctl, int line, bint high, bint last) except -1:
    """`ctl.set_level(line, high, last)` by an inline C call: a card raises and lowers its
    line once each per message, and the method call (a Python-override check) cost more
    than its work."""
    cdef _Line ln = <_Line> ctl._lines[line]
    ln.level = high
    if high and not ln.in_service and ln.handlers:
        ctl._start(ln, last)
    return 0
