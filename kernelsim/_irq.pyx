# cython: language_level=3, annotation_typing=False
"""The interrupt controller: level-triggered lines, one handler chain per line.

A device drives its line's level (the 21140's INTA# follows CSR5 & CSR7). While the
line is high and not in service, the controller starts an interrupt path on the CPU:
entry cost, every handler on the line, exit cost. When the path returns and the line
is still high -- the device found more work meanwhile -- it runs again.

Every received frame passes through here, so it is Cython: each line is a small typed
object that is also the completion of its own interrupt path (`Completion`: the CPU calls
it by C), and the path itself is a C state machine (`_IrqPath`, one per line, reused: a
line runs one path at a time) that runs the handlers' paths in turn -- not a generator
wrapping them, which would add a Python frame to every resume of every handler.
"""
import errno

from cpython.ref cimport PyObject, Py_XDECREF
from kernelsim._cpu cimport Completion, Cpu
from kernelsim._path cimport Path, spent, step_any

__all__ = ["IrqController"]

cdef int LEVEL_IRQ = 0


cdef class _Line(Completion):
    def __cinit__(self, IrqController ctl):
        self.handlers = []
        self.ctl = ctl
        self.path = _IrqPath.__new__(_IrqPath)

    cdef int complete(self, object value, object exc) except -1:
        """The line's interrupt path returned: run it again while the line stays high."""
        self.in_service = False
        if exc is not None:
            raise exc
        if self.level and self.handlers:
            self.ctl._start(self)
        return 0


cdef class IrqHandler:
    """A handler object `request_irq` takes instead of a path function: its path is made
    by a C call, per interrupt (the network devices: `NetDevice`)."""

    cdef object irq_path(self, double pending):
        return self.interrupt_path(pending)


cdef class _IrqPath(Path):
    """One interrupt path: the entry cost, every handler of the line in turn, the exit cost.

    The generator it replaces, for reading::

        pending = entry_s
        for _name, handler in handlers:
            pending = yield from handler(pending)
        yield pending + exit_s

    An `IrqHandler` makes its path by a C call; a handler whose path is a `Path` (the
    drivers' interrupt paths) is stepped by a C call, anything else by a generator resume.
    """
    cdef int step(self, double* cost) except -1:
        cdef PyObject* res = NULL
        cdef int r
        cdef object out, handler
        # A real-time CPU spends no modeled time: it steps a path again at once after each
        # yield (`Cpu._advance`), so the path goes on itself -- the same steps in the same
        # order, without a return to the CPU per yield (7 of them per received frame).
        while True:
            if self.cur is None:
                if self.i == len(self.handlers):
                    if self.exited:
                        self.value = None
                        return 0
                    self.exited = True
                    cost[0] = self.pending + self.exit_s
                    if self.real or spent(cost[0]):
                        continue
                    return 1
                handler = (<tuple> self.handlers[self.i])[1]
                if isinstance(handler, IrqHandler):
                    self.cur = (<IrqHandler> handler).irq_path(self.pending)
                else:
                    self.cur = handler(self.pending)
                self.i += 1
            r = step_any(self.cur, cost, &res)  # a handler's error goes to the path's completion
            if r == 1:
                if self.real:
                    continue
                return 1
            out = <object> res
            Py_XDECREF(res)
            self.cur = None
            self.pending = out


cdef class IrqController:
    NLINES = 16

    def __init__(self, Cpu cpu, costs):
        self.cpu = cpu
        self.costs = costs
        self.entry_s = costs.irq_entry
        self.exit_s = costs.irq_exit
        self._lines = [_Line(self) for _ in range(16)]

    def request_irq(self, int line, handler, str name):
        """Attach `handler` to `line`.

        A handler is a path function ``handler(pending)`` -- or an `IrqHandler`, whose
        ``irq_path(pending)`` is that function: `pending` is CPU time already spent but
        not yet yielded (the entry cost), which it folds into its first yield; it returns
        whatever it spent after its last device access, for the same reason.
        """
        if not 0 <= line < 16:
            raise OSError(errno.EINVAL, f"no IRQ line {line}")
        (<_Line> self._lines[line]).handlers.append((name, handler))

    def free_irq(self, int line, str name):
        cdef _Line ln = self._lines[line]
        ln.handlers = [(n, h) for (n, h) in ln.handlers if n != name]

    def free_line(self):
        cdef int i
        for i in range(3, 16):                   # 0-2 are the timer, keyboard, cascade
            if not (<_Line> self._lines[i]).handlers:
                return i
        raise OSError(errno.EBUSY, "no free IRQ line")

    cpdef set_level(self, int line, bint high, bint last=False):
        """Drive `line` to `high`. ``last=True``: the caller owns this instant (an engine
        event of the device's) and does nothing more at it, so the interrupt path may go
        on ahead (`Cpu.submit`)."""
        drive_line(self, line, high, last)

    cdef _start(self, _Line ln, bint last=False):
        ln.in_service = True
        ln.count += 1
        cdef _IrqPath path = ln.path       # free: its last run has returned (in_service)
        path.handlers = ln.handlers
        path.i = 0
        path.cur = None
        path.value = None
        path.exited = False
        path.pending = self.entry_s
        path.exit_s = self.exit_s
        path.real = not self.cpu.modeled
        self.cpu.submit(LEVEL_IRQ, path, ln, last)

    def stats(self):
        return {f"irq{i}": {"handlers": [n for n, _ in (<_Line> ln).handlers], "interrupts": (<_Line> ln).count}
                for i, ln in enumerate(self._lines) if (<_Line> ln).handlers}
