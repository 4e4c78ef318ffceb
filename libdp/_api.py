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
from collections.abc import Awaitable

from kernelsim import (DEFAULT_SPIN_S, run_blocking, run_blocking_sync, run_entry_sync, run_path,
                       run_user, run_user_sync, wait_on)
from libdp._calls import DPCalls, _bytes, _check_count, _raise

__all__ = ["DP", "SyncDP", "Endpoint", "NodeView"]


class NodeView:
    """What a program may ask of its node (``dp.node``): id, profile, statistics.

    Never the node itself: its memory, devices and other processes' files are the
    kernel's. A process reaches them only through the calls, which check ownership.
    """

    __slots__ = ("nid", "profile", "modeled", "_stats")

    def __init__(self, nid: int, profile, modeled: bool, stats):
        self.nid = nid
        self.profile = profile
        self.modeled = modeled
        self._stats = stats

    def stats(self) -> dict:
        """The node's statistics (a fresh snapshot)."""
        return self._stats()

    def __getattr__(self, name):
        raise AttributeError(f"dp.node is a process's view of its node (nid, profile, modeled, stats()); "
                             f"it has no {name!r}: kernel objects are reached only through the calls "
                             f"(library code inside libdp uses dp._node)")

    def __repr__(self):
        return f"<node {self.nid} ({'modeled' if self.modeled else 'real'} time)>"


class DP(DPCalls):
    """DP for one process (async): the calls of the DP paper (DP-C07) as trio checkpoints.

    Made by `Cluster.process(nid)` (or for a process on a real node). ``spin_s``: how
    long a waiting call polls before it sleeps (the polling watchdog, LCI-C09).
    """

    def __init__(self, proc, *, spin_s: float = DEFAULT_SPIN_S):
        super().__init__(proc, spin_s)     # the per-message calls' state (libdp/_calls.pyx)
        node = self._node
        self.node = NodeView(node.nid, node.profile, node.modeled, node.stats)
        self.sync = SyncDP(self)

    @property
    def nid(self) -> int:
        """This process's node id (its key in every node's NART)."""
        return self.node.nid

    # -- the calls ---------------------------------------------------------------------

    async def dp_open(self, ep: int) -> int:
        """Create endpoint `ep` (0..65535) with its Token Buffer Pool; return its fd.

        The one new system call of DP. EADDRINUSE if `ep` is open on this node, EINVAL
        for a bad number, ENOMEM when the pool cannot be pinned, ENODEV without DP.
        """
        return await self._syscall("dp_open", (ep,))

    async def dp_target(self, fd: int, nid: int, ep: int) -> int:
        """Send what is written on `fd` to endpoint `ep` of node `nid` (a directed edge).

        EBADF for a bad fd, EHOSTUNREACH if `nid` is not in the NART, EINVAL for bad numbers.
        """
        return await self._syscall("dp_target", (fd, nid, ep))

    async def write(self, fd: int, data) -> int:
        """`dp_write` through the generic system-call entry (UNIX ``write``), at its higher cost."""
        data = _bytes(data)
        return await self._call(lambda entry: self._node.syscall_path(self._proc, "write", (fd, data), entry),
                                fd, self._wake_cost)

    async def read(self, fd: int, nbytes: int) -> bytes:
        """The next message (at most `nbytes` of it) through the generic system call (UNIX ``read``).

        Waits while the pool is empty (BlockingIOError when non-blocking; in modeled time
        OSError(EDEADLK) if nothing could ever arrive).
        """
        _check_count(nbytes)
        return await self._call(lambda entry: self._node.syscall_path(self._proc, "read", (fd, nbytes), entry),
                                fd, self._wake_cost)

    def dp_read_token(self, fd: int) -> Awaitable:
        """Zero-copy read: a Token whose `.data` is a read-only view of the TBP slot."""
        try:
            ep = self._endpoint(fd)
        except OSError as exc:
            return _raise(exc)
        return run_user(self._node, self._proc, ep.dp.take_path, (ep,), fd, self._poll_cost,
                        ep.tbp, ep.readers, self.spin_s)

    async def close(self, fd: int) -> int:
        """Close `fd`: an endpoint's pool is freed and its messages dropped; EBADF if not open."""
        return await self._syscall("close", (fd,))

    def set_blocking(self, fd: int, blocking: bool) -> None:
        """Blocking (the default) or not: a non-blocking call that would wait raises BlockingIOError."""
        self._proc.fds.get(fd).nonblocking = not blocking

    async def endpoint(self, ep: int, target: tuple | None = None) -> "Endpoint":
        """Open endpoint `ep` as an `Endpoint` object, targeted at ``(nid, ep)`` if given."""
        fd = await self.dp_open(ep)
        e = Endpoint(self, fd, ep)
        if target is not None:
            await e.target(*target)
        return e

    # -- machinery ---------------------------------------------------------------------

    def _syscall(self, name, args):
        return self._call(lambda entry: self._node.syscall_path(self._proc, name, args, entry), None, 0.0)

    def _call(self, make_path, fd, wake_cost, before: float = 0.0):
        # Not a coroutine itself: the caller awaits run_blocking's, one layer less for
        # every resume of a task parked in a call.
        return run_blocking(self._node, make_path, wake_cost=wake_cost, spin_s=self.spin_s,
                            nonblocking=self._nonblocking(fd), before=before)

    def _nonblocking(self, fd):
        return lambda: fd is not None and self._proc.fds.get(fd).nonblocking

    # What protocol user halves build on: run one path, wait on one queue.

    def _submit(self, path):
        return run_path(self._node, path)

    def _wait(self, queue):
        return wait_on(self._node, queue, self.spin_s)


class SyncDP:
    """The same calls, blocking (``dp.sync``). In modeled time a blocking call drives the engine.

    Each method has the semantics and errors of the `DP` method of the same name.
    """

    def __init__(self, dp: DP):
        self._dp = dp
        self._node = dp._node
        self._proc = dp._proc

    def dp_open(self, ep):
        """Blocking `DP.dp_open`."""
        return self._call(lambda e: self._node.syscall_path(self._proc, "dp_open", (ep,), e), None, 0.0)

    def dp_target(self, fd, nid, ep):
        """Blocking `DP.dp_target`."""
        return self._call(lambda e: self._node.syscall_path(self._proc, "dp_target", (fd, nid, ep), e), None, 0.0)

    def dp_write(self, fd, data):
        """Blocking `DP.dp_write`."""
        if type(data) is not bytes:
            data = _bytes(data)
        return run_entry_sync(self._node, self._proc, True, "dp_write", (fd, data), fd, self._dp._wake_cost,
                              self._dp.spin_s)

    def write(self, fd, data):
        """Blocking `DP.write`."""
        data = _bytes(data)
        return self._call(lambda e: self._node.syscall_path(self._proc, "write", (fd, data), e), fd,
                          self._dp._wake_cost)

    def read(self, fd, nbytes):
        """Blocking `DP.read`."""
        _check_count(nbytes)
        return self._call(lambda e: self._node.syscall_path(self._proc, "read", (fd, nbytes), e), fd,
                          self._dp._wake_cost)

    def dp_read(self, fd, nbytes=65536):
        """Blocking `DP.dp_read`."""
        if type(nbytes) is not int or nbytes < 0:
            _check_count(nbytes)
        ep = self._dp._endpoint(fd)
        return run_user_sync(self._node, self._proc, ep.dp.read_path, (ep, nbytes), fd, self._dp._poll_cost,
                             ep.tbp, ep.readers, self._dp.spin_s)

    def dp_read_token(self, fd):
        """Blocking `DP.dp_read_token`."""
        ep = self._dp._endpoint(fd)
        return run_user_sync(self._node, self._proc, ep.dp.take_path, (ep,), fd, self._dp._poll_cost,
                             ep.tbp, ep.readers, self._dp.spin_s)

    def close(self, fd):
        """Blocking `DP.close`."""
        return self._call(lambda e: self._node.syscall_path(self._proc, "close", (fd,), e), None, 0.0)

    def set_blocking(self, fd, blocking):
        """`DP.set_blocking`."""
        self._dp.set_blocking(fd, blocking)

    def _call(self, make_path, fd, wake_cost):
        return run_blocking_sync(self._node, make_path, wake_cost=wake_cost, spin_s=self._dp.spin_s,
                                 nonblocking=self._dp._nonblocking(fd))


class Endpoint:
    """A Pythonic DP endpoint over the same calls: ``await ep.send(b"..")``."""

    def __init__(self, dp: DP, fd: int, ep: int):
        """Wrap an open endpoint: its `DP`, fd and endpoint number (`DP.endpoint` makes one)."""
        self.dp = dp
        self.fd = fd
        self.ep = ep

    def fileno(self) -> int:
        """The fd, for select/poll in real mode and trio's wait_readable."""
        return self.fd

    async def target(self, nid: int, ep: int) -> None:
        """`DP.dp_target` on this endpoint."""
        await self.dp.dp_target(self.fd, nid, ep)

    async def send(self, data) -> int:
        """`DP.dp_write` on this endpoint."""
        return await self.dp.dp_write(self.fd, data)

    async def recv(self, nbytes: int = 65536) -> bytes:
        """`DP.dp_read` on this endpoint."""
        return await self.dp.dp_read(self.fd, nbytes)

    async def recv_token(self):
        """`DP.dp_read_token` on this endpoint."""
        return await self.dp.dp_read_token(self.fd)

    async def aclose(self) -> None:
        """Close the endpoint (also at the end of ``async with``)."""
        await self.dp.close(self.fd)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        return await self.recv()
