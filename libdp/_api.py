"""The DP calls, as a process sees them: UNIX-I/O-like, async (trio) and sync.

`DP` is the library bound to one simulated process. Its async methods are trio
checkpoints; `DP.sync` offers the same calls as blocking functions. In modeled time a
call submits its path (library code, a system-call or call-gate entry, the kernel's
work) to the node's CPU and parks the task until the path returns; in real time the
path runs straight through. A call that finds nothing to do yet (an empty pool, a full
transmit ring) waits: in modeled time on the kernel's wait queue; in real time by
polling the devices for a bounded time and then blocking on their file descriptors --
the LCI paper's polling watchdog (FACTS LCI-C09).

Every misuse raises OSError with the errno a UNIX programmer expects; a non-blocking
fd raises BlockingIOError instead of waiting.
"""
from __future__ import annotations

import errno
import math
import select
import time

import trio

from kernelsim import EngineClock, LEVEL_PROC, WouldBlock

__all__ = ["DP", "SyncDP", "Endpoint"]


def _after(cost, path):
    yield cost
    return (yield from path)




class DP:
    """DP for one process (async)."""

    def __init__(self, proc, *, spin_s: float = 1e-3):
        self.proc = proc
        self.node = proc.node
        self.spin_s = spin_s
        self.sync = SyncDP(self)
        p = self.node.profile
        self._poll_cost = self.node.costs.cycles(p["dp.poll_cycles"])
        self._wake_cost = self.node.costs.wakeup

    @property
    def nid(self) -> int:
        return self.node.nid

    def now(self) -> float:
        """Seconds on this process's clock: modeled time, or the host's in real time."""
        return self.node.engine.now if self.node.modeled else time.perf_counter()

    # -- the calls ---------------------------------------------------------------------

    async def dp_open(self, ep: int) -> int:
        return await self._syscall("dp_open", (ep,))

    async def dp_target(self, fd: int, nid: int, ep: int) -> int:
        return await self._syscall("dp_target", (fd, nid, ep))

    async def dp_write(self, fd: int, data) -> int:
        data = _bytes(data)
        return await self._call(lambda entry: self.node.callgate_path(self.proc, "dp_write", (fd, data), entry),
                                fd, self._wake_cost)

    async def write(self, fd: int, data) -> int:
        data = _bytes(data)
        return await self._call(lambda entry: self.node.syscall_path(self.proc, "write", (fd, data), entry),
                                fd, self._wake_cost)

    async def read(self, fd: int, nbytes: int) -> bytes:
        _check_count(nbytes)
        return await self._call(lambda entry: self.node.syscall_path(self.proc, "read", (fd, nbytes), entry),
                                fd, self._wake_cost)

    async def dp_read(self, fd: int, nbytes: int = 65536) -> bytes:
        """Copy the next message out of the endpoint's TBP (user-level; polls while empty)."""
        _check_count(nbytes)
        ep = self._endpoint(fd)
        return await self._call(lambda entry: ep.dp.read_path(ep, nbytes), fd, self._poll_cost,
                                await self._poll_pool(ep))

    async def dp_read_token(self, fd: int):
        """Zero-copy read: a Token whose `.data` is a read-only view of the TBP slot."""
        ep = self._endpoint(fd)
        return await self._call(lambda entry: ep.dp.take_path(ep), fd, self._poll_cost,
                                await self._poll_pool(ep))

    async def _poll_pool(self, ep) -> float:
        """The TBP is mapped into the process: look at its count before entering anything.

        Returns the time the poll took to notice a message it had to wait for."""
        if ep.tbp.count == 0 and not ep.nonblocking:
            await self._wait(ep.readers)
            return self._poll_cost
        return 0.0

    async def close(self, fd: int) -> int:
        return await self._syscall("close", (fd,))

    def set_blocking(self, fd: int, blocking: bool) -> None:
        self.proc.fds.get(fd).nonblocking = not blocking

    async def endpoint(self, ep: int, target: tuple | None = None) -> "Endpoint":
        fd = await self.dp_open(ep)
        e = Endpoint(self, fd, ep)
        if target is not None:
            await e.target(*target)
        return e

    # -- machinery ---------------------------------------------------------------------

    def _endpoint(self, fd):
        dp = self.node.services.get("dp")
        f = self.proc.fds.get(fd)
        if dp is None or f.kind != "DP endpoint":
            raise OSError(errno.EINVAL, f"fd {fd} is not a DP endpoint")
        return f

    async def _syscall(self, name, args):
        return await self._call(lambda entry: self.node.syscall_path(self.proc, name, args, entry), None, 0.0)

    async def _call(self, make_path, fd, wake_cost, before: float = 0.0):
        path = make_path(True) if not before else _after(before, make_path(True))
        while True:
            try:
                return await self._submit(path)
            except WouldBlock as wb:
                if fd is not None and self.proc.fds.get(fd).nonblocking:
                    raise BlockingIOError(errno.EAGAIN, str(wb.strerror)) from None
                await self._wait(wb.queue)
                path = _after(wake_cost, make_path(False))

    async def _submit(self, path):
        node = self.node
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
                # Only this call's own completion stopped the engine: no other task
                # can have become runnable, so the schedule point has nothing to do.
                await trio.lowlevel.checkpoint_if_cancelled()
            elif box:
                await trio.lowlevel.checkpoint()
            else:
                parked.append(True)
                # A kernel path cannot be abandoned half-way: cancellation is delivered
                # at the next checkpoint, once the path has returned.
                await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        value, exc = box[0]
        if exc is not None:
            raise exc
        return value

    async def _wait(self, queue):
        woken = []
        node = self.node
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
                deadline = time.perf_counter() + self.spin_s
                while not woken and time.perf_counter() < deadline:
                    node.poll_devices()
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
    gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
    until = engine.now + gap if gap < math.inf else math.inf
    stops = engine.stops
    engine.run_until_stop(until)
    return bool(done) and engine.stops == stops + 1 and clock.only_runnable_task()


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


class SyncDP:
    """The same calls, blocking. In modeled time a blocking call drives the engine."""

    def __init__(self, dp: DP):
        self._dp = dp
        self.node = dp.node
        self.proc = dp.proc

    def dp_open(self, ep):
        return self._call(lambda e: self.node.syscall_path(self.proc, "dp_open", (ep,), e), None, 0.0)

    def dp_target(self, fd, nid, ep):
        return self._call(lambda e: self.node.syscall_path(self.proc, "dp_target", (fd, nid, ep), e), None, 0.0)

    def dp_write(self, fd, data):
        data = _bytes(data)
        return self._call(lambda e: self.node.callgate_path(self.proc, "dp_write", (fd, data), e),
                          fd, self._dp._wake_cost)

    def write(self, fd, data):
        data = _bytes(data)
        return self._call(lambda e: self.node.syscall_path(self.proc, "write", (fd, data), e), fd,
                          self._dp._wake_cost)

    def read(self, fd, nbytes):
        _check_count(nbytes)
        return self._call(lambda e: self.node.syscall_path(self.proc, "read", (fd, nbytes), e), fd,
                          self._dp._wake_cost)

    def dp_read(self, fd, nbytes=65536):
        _check_count(nbytes)
        ep = self._dp._endpoint(fd)
        return self._call(lambda e: ep.dp.read_path(ep, nbytes), fd, self._dp._poll_cost)

    def dp_read_token(self, fd):
        ep = self._dp._endpoint(fd)
        return self._call(lambda e: ep.dp.take_path(ep), fd, self._dp._poll_cost)

    def close(self, fd):
        return self._call(lambda e: self.node.syscall_path(self.proc, "close", (fd,), e), None, 0.0)

    def set_blocking(self, fd, blocking):
        self._dp.set_blocking(fd, blocking)

    def _call(self, make_path, fd, wake_cost):
        node = self.node
        path = make_path(True)
        while True:
            try:
                return node.run_now(path)
            except WouldBlock as wb:
                if fd is not None and self.proc.fds.get(fd).nonblocking:
                    raise BlockingIOError(errno.EAGAIN, str(wb.strerror)) from None
                self._wait(wb.queue)
                path = _after(wake_cost, make_path(False))

    def _wait(self, queue):
        node = self.node
        woken = []
        queue.add(lambda: woken.append(True))
        if node.modeled:
            while not woken:
                if not node.engine.step():
                    raise OSError(errno.EDEADLK, "modeled deadlock: nothing can ever wake this call")
            return
        while not woken:
            deadline = time.perf_counter() + self._dp.spin_s
            while not woken and time.perf_counter() < deadline:
                node.poll_devices()
            if woken:
                break
            ports = node.real_ports
            if all(p.prepare_to_sleep() for p in ports) and not woken:
                select.select([p.fileno() for p in ports], [], [])
                for p in ports:
                    p.drain()


class Endpoint:
    """A Pythonic DP endpoint over the same calls: ``await ep.send(b"..")``."""

    def __init__(self, dp: DP, fd: int, ep: int):
        self.dp = dp
        self.fd = fd
        self.ep = ep

    def fileno(self) -> int:
        return self.fd

    async def target(self, nid: int, ep: int) -> None:
        await self.dp.dp_target(self.fd, nid, ep)

    async def send(self, data) -> int:
        return await self.dp.dp_write(self.fd, data)

    async def recv(self, nbytes: int = 65536) -> bytes:
        return await self.dp.dp_read(self.fd, nbytes)

    async def recv_token(self):
        return await self.dp.dp_read_token(self.fd)

    async def aclose(self) -> None:
        await self.dp.close(self.fd)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        return await self.recv()


def _bytes(data) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise OSError(errno.EFAULT, f"a message is a bytes-like object, not {type(data).__name__}")


def _check_count(n) -> None:
    if not isinstance(n, int) or n < 0:
        raise OSError(errno.EINVAL, f"byte count must be a non-negative int, not {n!r}")
