"""Running kernel paths on behalf of a trio task -- the binding every user half uses.

A process's call into the kernel (or its user-level library work) is a *path* run on
its node's CPU. `run_path` submits one and returns its value to the calling task;
`wait_on` blocks the task until a wait queue is woken; `run_blocking` is the loop every
blocking call is: run the path, and when it says WouldBlock, wait on the queue it
names and run the continuation. Each has a blocking twin for scripts without trio.

Modeled time: the task parks until the path returns (the engine clock moves time) --
unless it is the only task trio would run now, in which case it runs the engine itself
(see `_drive_inline`). Real time: the path runs straight through; a wait polls the
node's devices for a bounded time, then blocks on their file descriptors (the LCI
paper's polling watchdog, LCI-C09).
"""
from __future__ import annotations

import errno
import math
import os
import select
import time

import trio
from trio._core import _run as _trio_run

from kernelsim._clock import EngineClock
from kernelsim._cpu import LEVEL_PROC
from kernelsim._node import WouldBlock

__all__ = ["run_path", "wait_on", "run_blocking", "run_path_sync", "wait_on_sync", "run_blocking_sync",
           "after", "DEFAULT_SPIN_S"]

DEFAULT_SPIN_S = 1e-3    # real time: poll this long before sleeping on a descriptor


def after(cost: float, path):
    """The path `path`, preceded by `cost` seconds of CPU time."""
    yield cost
    return (yield from path)


async def run_path(node, path):
    """Run `path` at process level on `node`'s CPU; return its value or raise its error."""
    box = []
    if not node.modeled:
        node.cpu.submit(LEVEL_PROC, path, lambda v, e: box.append((v, e)))
        node.engine.run()
        await trio.lowlevel.checkpoint()
    else:
        task = trio.lowlevel.current_task()
        parked = []

        def done(v, e):
            box.append((v, e))
            node.engine.request_stop()
            if parked:
                trio.lowlevel.reschedule(task)

        node.cpu.submit(LEVEL_PROC, path, done)
        if not box and _drive_inline(node.engine, box):
            # Only this call's own completion stopped the engine: no other task can
            # have become runnable, so the schedule point has nothing to do.
            await trio.lowlevel.checkpoint_if_cancelled()
        elif box:
            await trio.lowlevel.checkpoint()
        else:
            parked.append(True)
            # A kernel path cannot be abandoned half-way: cancellation is delivered at
            # the next checkpoint, once the path has returned.
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
    value, exc = box[0]
    if exc is not None:
        raise exc
    return value


async def wait_on(node, queue, spin_s: float = DEFAULT_SPIN_S) -> None:
    """Block the calling task until `queue` is woken."""
    woken = []
    if node.modeled:
        task = trio.lowlevel.current_task()
        parked = []

        def waiter():
            woken.append(True)
            if parked:
                trio.lowlevel.reschedule(task)

        queue.add(waiter)
        if _drive_inline(node.engine, woken):
            await trio.lowlevel.checkpoint_if_cancelled()
            return
        if woken:
            await trio.lowlevel.checkpoint()
            return
        parked.append(True)

        def abort(_):
            queue.discard(waiter)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        return
    waiter = lambda: woken.append(True)  # noqa: E731
    queue.add(waiter)
    try:
        while not woken:
            _spin(node, woken, spin_s)
            if woken:
                break
            ports = node.real_ports
            if all(p.prepare_to_sleep() for p in ports) and not woken:
                await _wait_any_readable([p.fileno() for p in ports])
                for p in ports:
                    p.drain()
            else:
                await trio.lowlevel.checkpoint()
    finally:
        queue.discard(waiter)
    await trio.lowlevel.checkpoint()


async def run_blocking(node, make_path, *, nonblocking=lambda: False, wake_cost: float = 0.0,
                       spin_s: float = DEFAULT_SPIN_S):
    """Run ``make_path(True)``; on WouldBlock wait and run ``make_path(False)`` after `wake_cost`.

    ``make_path(first)`` builds the path: ``first`` is False for a continuation after a
    wait (no second kernel entry). `nonblocking()` is asked after each WouldBlock:
    True turns it into BlockingIOError(EAGAIN), as on a non-blocking fd.
    """
    path = make_path(True)
    while True:
        try:
            return await run_path(node, path)
        except WouldBlock as wb:
            if nonblocking():
                raise BlockingIOError(errno.EAGAIN, str(wb.strerror)) from None
            await wait_on(node, wb.queue, spin_s)
            path = after(wake_cost, make_path(False)) if wake_cost else make_path(False)


def run_path_sync(node, path):
    return node.run_now(path)


def wait_on_sync(node, queue, spin_s: float = DEFAULT_SPIN_S) -> None:
    woken = []
    queue.add(lambda: woken.append(True))
    if node.modeled:
        while not woken:
            if not node.engine.step():
                raise OSError(errno.EDEADLK, "modeled deadlock: nothing can ever wake this call")
        return
    while not woken:
        _spin(node, woken, spin_s)
        if woken:
            break
        ports = node.real_ports
        if all(p.prepare_to_sleep() for p in ports) and not woken:
            select.select([p.fileno() for p in ports], [], [])
            for p in ports:
                p.drain()


def run_blocking_sync(node, make_path, *, nonblocking=lambda: False, wake_cost: float = 0.0,
                      spin_s: float = DEFAULT_SPIN_S):
    path = make_path(True)
    while True:
        try:
            return node.run_now(path)
        except WouldBlock as wb:
            if nonblocking():
                raise BlockingIOError(errno.EAGAIN, str(wb.strerror)) from None
            wait_on_sync(node, wb.queue, spin_s)
            path = after(wake_cost, make_path(False)) if wake_cost else make_path(False)


def _drive_inline(engine, done: list) -> bool:
    """Move modeled time from inside the calling task while it is the only one that can run.

    This is what `EngineClock.drive` would do once trio found every task blocked, less
    two task switches and a pass of trio's run loop per wait. It stops as soon as an
    event wakes anything (this task or another, or makes an fd readable) or the next
    trio deadline comes: from there trio schedules as usual. True when `done` was
    filled and nothing else was woken on the way.
    """
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, EngineClock) or not clock.only_runnable_task():
        return False
    until = _next_trio_deadline()
    stops = engine.stops
    engine.run_until_stop(until)
    return bool(done) and engine.stops == stops + 1 and clock.only_runnable_task()


def _spin(node, woken: list, spin_s: float) -> None:
    """Poll the node's devices until `woken` or `spin_s` has passed.

    Between empty polls the CPU is offered to other processes (sched_yield): when the
    peer shares this core -- more nodes than cores -- it runs at once instead of after
    the whole spin; on a core of its own the yield returns immediately.
    """
    deadline = time.perf_counter() + spin_s
    while not woken and time.perf_counter() < deadline:
        if not node.poll_devices():
            os.sched_yield()


def _next_trio_deadline() -> float:
    """When trio's next deadline falls (the clock is the engine's, so it is modeled time).

    ``current_statistics()`` answers this but also gathers I/O statistics, which made it
    the costliest call of a modeled round trip; ask the runner's deadline queue when
    this trio has one, else fall back to the public call.
    """
    try:
        return _trio_run.GLOBAL_RUN_CONTEXT.runner.deadlines.next_deadline()
    except AttributeError:
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        return trio.current_time() + gap if gap < math.inf else math.inf


async def _wait_any_readable(fds):
    if len(fds) == 1:
        await trio.lowlevel.wait_readable(fds[0])
        return
    async with trio.open_nursery() as nursery:
        async def one(fd):
            await trio.lowlevel.wait_readable(fd)
            nursery.cancel_scope.cancel()
        for fd in fds:
            nursery.start_soon(one, fd)
