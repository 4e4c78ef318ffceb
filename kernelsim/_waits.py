"""Wait queues: how a simulated process sleeps until the kernel has something for it.

A waiter is any callable; waking calls every waiter once. The trio binding parks the
calling task and registers a waiter that reschedules it; in modeled time a wake also
asks the engine to stop so that trio runs the woken task at the current modeled time.
"""
from __future__ import annotations

__all__ = ["WaitQueue"]


class WaitQueue:
    __slots__ = ("_waiters", "engine", "wakeups")

    def __init__(self, engine):
        self._waiters: list = []
        self.engine = engine
        self.wakeups = 0

    def add(self, waiter) -> None:
        self._waiters.append(waiter)

    def discard(self, waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    def wake(self) -> None:
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        self.wakeups += 1
        for w in waiters:
            self.engine.request_stop()      # one per waiter: callers count who woke
            w()

    def __len__(self) -> int:
        return len(self._waiters)
