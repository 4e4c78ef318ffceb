"""trio, running in modeled time.

`EngineClock` is a trio clock whose time *is* the engine's, and `EngineClock.drive`
is the task that moves it: it sleeps in ``trio.testing.wait_all_tasks_blocked()``
-- trio's public hook for "every other task is blocked and no I/O is ready", the
moment at which, on real hardware, the CPUs would be waiting for devices -- and then
runs engine events (devices, wires, interrupt and kernel paths) until one of them
makes a task runnable or until the next trio deadline, whichever comes first. trio
carries on at that modeled instant. This is how MockClock's autojump works, with the
engine's event list in place of a bare jump. Nothing sleeps in wall time, so a
modeled millisecond costs only the events inside it.

If every task is blocked, no engine event is pending and no trio deadline is set, the
modeled cluster can never move again: `drive` raises OSError(EDEADLK) rather than
leaving the run hanging.
"""
from __future__ import annotations

import errno
import math

import trio
import trio.testing

__all__ = ["EngineClock"]


class EngineClock(trio.abc.Clock):
    def __init__(self, engine):
        self.engine = engine

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self.engine.now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        # Never sleep in wall time for a modeled deadline: `drive` moves time instead.
        return 0.0 if deadline <= self.engine.now else 86400.0

    async def drive(self) -> None:
        """Run the engine whenever every other task is blocked (start this in the run)."""
        engine = self.engine
        stats = trio.lowlevel.current_statistics
        wait_idle = trio.testing.wait_all_tasks_blocked
        while True:
            await wait_idle()
            gap = stats().seconds_to_next_deadline
            until = engine.now + gap if gap < math.inf else math.inf
            engine.run_until_stop(until)
            if engine.stop_requested:
                continue
            if until < math.inf:
                engine.now = until          # a trio deadline expires at this modeled time
                continue
            raise OSError(errno.EDEADLK, "modeled deadlock: every process is blocked and no event is pending")
