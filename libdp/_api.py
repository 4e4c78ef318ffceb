"""The DP calls, as a process sees them: UNIX-I/O-like, async (trio) and sync.

`DP` is the library bound to one simulated process. Its async methods are trio
checkpoints; `DP.sync` offers the same calls as blocking functions. In modeled time a
call submits its path (library code, a system-call or call-gate entry, the kernel's
work) to the node's CPU and parks the task until the path returns; in real time the
path runs straight through. A call that finds nothing to do yet (an empty pool, a full
transmit ring) waits: in modeled time on the kernel's wait queue; in real time by
polling the devices for a bounded time and then blocking on their file descriptors --
the LCI paper's polling watchdog (LCI-C09).

Every misuse raises OSError with the errno a UNIX programmer expects; a non-blocking
fd raises BlockingIOError instead of waiting.
"""
from __future__ import annotations

import errno
import time

from kernelsim import DEFAULT_SPIN_S, after, run_blocking, run_blocking_sync, run_path, wait_on

__all__ = ["DP", "SyncDP", "Endpoint"]




class DP:
    """DP for one process (async)."""

    def __init__(self, proc, *, spin_s: float = DEFAULT_SPIN_S):
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
        if before:                  # time the caller spent before the first try (a poll)
            inner = make_path
            make_path = lambda entry: after(before, inner(entry)) if entry else inner(entry)  # noqa: E731
        return await run_blocking(self.node, make_path, wake_cost=wake_cost, spin_s=self.spin_s,
                                  nonblocking=self._nonblocking(fd))

    def _nonblocking(self, fd):
        return lambda: fd is not None and self.proc.fds.get(fd).nonblocking

    # What protocol user halves build on: run one path, wait on one queue.

    async def _submit(self, path):
        return await run_path(self.node, path)

    async def _wait(self, queue):
        await wait_on(self.node, queue, self.spin_s)


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
        return run_blocking_sync(self.node, make_path, wake_cost=wake_cost, spin_s=self._dp.spin_s,
                                 nonblocking=self._dp._nonblocking(fd))


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
