"""The interrupt controller: level-triggered lines, one handler chain per line.

A device drives its line's level (the 21140's INTA# follows CSR5 & CSR7). While the
line is high and not in service, the controller starts an interrupt path on the CPU:
entry cost, every handler on the line, exit cost. When the path returns and the line
is still high -- the device found more work meanwhile -- it runs again.
"""
from __future__ import annotations

import errno

from kernelsim._cpu import LEVEL_IRQ

__all__ = ["IrqController"]


class _Line:
    __slots__ = ("handlers", "level", "in_service", "count")

    def __init__(self):
        self.handlers: list = []
        self.level = False
        self.in_service = False
        self.count = 0


class IrqController:
    NLINES = 16

    def __init__(self, cpu, costs):
        self.cpu = cpu
        self.costs = costs
        self._lines = [_Line() for _ in range(self.NLINES)]

    def request_irq(self, line: int, handler, name: str) -> None:
        """Attach `handler` to `line`.

        A handler is a path function ``handler(pending)``: `pending` is CPU time already
        spent but not yet yielded (the entry cost), which it folds into its first yield;
        it returns whatever it spent after its last device access, for the same reason.
        """
        if not 0 <= line < self.NLINES:
            raise OSError(errno.EINVAL, f"no IRQ line {line}")
        self._lines[line].handlers.append((name, handler))

    def free_irq(self, line: int, name: str) -> None:
        ln = self._lines[line]
        ln.handlers = [(n, h) for (n, h) in ln.handlers if n != name]

    def free_line(self) -> int:
        for i in range(3, self.NLINES):          # 0-2 are the timer, keyboard, cascade
            if not self._lines[i].handlers:
                return i
        raise OSError(errno.EBUSY, "no free IRQ line")

    def set_level(self, line: int, high: bool) -> None:
        ln = self._lines[line]
        ln.level = high
        if high and not ln.in_service and ln.handlers:
            self._start(line, ln)

    def _start(self, line: int, ln: _Line) -> None:
        ln.in_service = True
        ln.count += 1
        self.cpu.submit(LEVEL_IRQ, self._path(ln), lambda value, exc: self._done(line, ln, exc))

    def _path(self, ln: _Line):
        pending = self.costs.irq_entry
        for _name, handler in ln.handlers:
            pending = yield from handler(pending)
        yield pending + self.costs.irq_exit

    def _done(self, line: int, ln: _Line, exc) -> None:
        ln.in_service = False
        if exc is not None:
            raise exc
        if ln.level and ln.handlers:
            self._start(line, ln)

    def stats(self) -> dict:
        return {f"irq{i}": {"handlers": [n for n, _ in ln.handlers], "interrupts": ln.count}
                for i, ln in enumerate(self._lines) if ln.handlers}
