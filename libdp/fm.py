"""Fast Messages as a process sees them: the FM 2.x streamed API, trio-async and blocking.

    from libdp import Cluster
    from libdp.fm import FM

    cluster = Cluster(nodes=2, platform="hpvm19", load=["fm"])   # fm takes the LANai boards

    async def program(dp, rank, size):
        fm = await FM.open(dp)                       # FM node `rank` of a job over every host
        got = []

        async def on_msg(stream, src):               # a handler receives its message piece by piece
            got.append(await stream.receive(stream.length))

        fm.set_handler(1, on_msg)
        if rank == 0:
            await fm.send(1, 1, b"hello")            # begin_message + send_piece + end_message
        else:
            await fm.extract_until(lambda: got)      # run handlers for what has arrived
        await fm.close()
        return got
    print(cluster.run_spmd(program))                 # [[], [b'hello']]

The calls (FM 2.x, FM-B19a):

* ``begin_message(dest, length, handler)`` -> a stream; ``send_piece(stream, data)`` (any
  number, gathering the message from the caller's buffers); ``end_message(stream)``.
  ``send(dest, handler, data)`` is the three at once. A sender out of credits extracts
  while it waits (FM-C03).
* ``extract(max_bytes=None)`` runs handlers for the packets that have arrived, up to
  about `max_bytes` of data; ``extract_until(pred)`` extracts until ``pred()`` holds.
* ``set_handler(hid, fn)``: ``async def fn(stream, src)`` receives with ``await
  stream.receive(n)`` (bytes) or ``await stream.receive_into(buf)``; ``stream.length``
  is the message's length. A handler that asks for data not yet arrived waits for the
  message's next packet; what it leaves is dropped when it returns. Handlers may not
  send or extract (EDEADLK).

Errors are OSError: EHOSTUNREACH (no such FM node, or no transport to it), EMSGSIZE (a
piece past the message's declared length), EBADF (a piece after ``end_message``),
EINVAL (``end_message`` before all declared bytes were sent -- the stream stays open),
EBUSY (a second open message to the same node).

The job: ``FM.open(dp, program=1, placement=None, vnode=None)``. `placement` gives the
host of each FM node (default: one node per host, every host of the cluster); `vnode`
is this process's node (default: its host's place in `placement`). Several nodes of a
job on one host talk over the shared-memory transport.

Real time: ``FM.open_real(vnode, nodes, program=1)`` makes a real node in this OS
process with ``fm`` loaded for shared memory only (``net=null``) and opens node `vnode`
of a job of `nodes` processes on this host: run it in each of `nodes` processes (the
first to come lays out the shared region, in POSIX shared memory).
"""
from __future__ import annotations

import errno
import os
import time

import trio

from kernelsim import WouldBlock, run_path, wait_on, wait_on_sync
from protocols.fm.context import HandlerRuleError, RecvStream, SendStream

__all__ = ["FM", "SyncFM", "SendStream", "RecvStream", "HandlerRuleError", "real_node"]

REAL_CHECK_SPINS = 20000        # real time: empty polls between checks for dead peers
YIELD_EVERY = 16                # real time: empty polls between offers of the CPU to another process


class FM:
    """One process's FM context (async calls; ``.sync`` for blocking ones)."""

    def __init__(self, dp, fd: int):
        self.dp = dp
        self.fd = fd
        self.ctx = dp._proc.fds.get(fd)
        self._node = dp._node
        self.sync = SyncFM(self)

    # -- opening -------------------------------------------------------------------------------

    @staticmethod
    def _job(dp, program, placement, vnode):
        node = dp._node
        if placement is None:
            placement = sorted(h for h in node.hosts) or [node.nid]
        placement = tuple(placement)
        if vnode is None:
            if placement.count(node.nid) != 1:
                raise OSError(errno.EINVAL, f"FM.open: host {node.nid} has {placement.count(node.nid)} nodes of "
                                            "the job: say which one this process is (vnode=)")
            vnode = placement.index(node.nid)
        return (program, placement, vnode)

    @classmethod
    async def open(cls, dp, program: int = 1, placement=None, vnode=None, handlers=None) -> "FM":
        """fm_open: a context for node `vnode` of job `program` (ENOSYS without the fm module)."""
        fd = await dp._syscall("fm_open", cls._job(dp, program, placement, vnode))
        fm = cls(dp, fd)
        fm._install(handlers)
        while not fm.ctx.peers_ready():          # FM_initialize: the whole job is up
            if fm._node.modeled:
                await wait_on(fm._node, fm.ctx.service.grm.events)
            else:
                await trio.sleep(0.0005)
        return fm

    @classmethod
    def open_sync(cls, dp, program: int = 1, placement=None, vnode=None, handlers=None) -> "FM":
        args = cls._job(dp, program, placement, vnode)
        fd = dp.sync._call(lambda e: dp._node.syscall_path(dp._proc, "fm_open", args, e), None, 0.0)
        fm = cls(dp, fd)
        fm._install(handlers)
        while not fm.ctx.peers_ready():          # FM_initialize: the whole job is up
            if fm._node.modeled:
                wait_on_sync(fm._node, fm.ctx.service.grm.events)
            else:
                time.sleep(0.0005)
        return fm

    @classmethod
    def open_real(cls, vnode: int, nodes: int, program: int = 1, handlers=None, **fm_params) -> "FM":
        """Real time: node `vnode` of a `nodes`-process job on this host, over shared memory."""
        dp = real_node(fm_params)
        return cls.open_sync(dp, program, (dp.nid,) * nodes, vnode, handlers)

    def _install(self, handlers) -> None:
        if handlers:
            items = handlers.items() if isinstance(handlers, dict) else enumerate(handlers)
            for i, fn in items:
                if fn is not None:
                    self.set_handler(i, fn)

    # -- the job -------------------------------------------------------------------------------

    @property
    def vnode(self) -> int:
        return self.ctx.vnode

    @property
    def nodes(self) -> int:
        return len(self.ctx.placement)

    def set_handler(self, hid: int, fn) -> None:
        self.ctx.set_handler(hid, fn)

    def stats(self) -> dict:
        return self.ctx.stats()

    # -- sending -------------------------------------------------------------------------------

    async def begin_message(self, dest: int, length: int, handler: int) -> SendStream:
        s = self.ctx.begin(dest, length, handler)
        await trio.lowlevel.checkpoint()
        return s

    async def send_piece(self, stream: SendStream, data) -> None:
        self.ctx.piece(stream, data)
        await self._run(lambda since: self.ctx.send_path(stream, False))

    async def end_message(self, stream: SendStream) -> None:
        self.ctx._check_stream(stream)
        await self._run(lambda since: self.ctx.send_path(stream, True))

    async def send(self, dest: int, handler: int, data) -> None:
        """A whole message: begin_message, one send_piece, end_message."""
        data = memoryview(data).cast("B")
        s = self.ctx.begin(dest, len(data), handler)
        self.ctx.piece(s, data)
        await self._run(lambda since: self.ctx.send_path(s, True))

    # -- receiving -----------------------------------------------------------------------------

    async def extract(self, max_bytes: int | None = None) -> int:
        """FM_extract: handle what has arrived (up to about `max_bytes`); packets handled."""
        _check_budget(max_bytes)
        self.ctx.check_caller("extract")
        return await run_path(self._node, self.ctx.extract_path(max_bytes), self.ctx.cpu)

    async def extract_until(self, pred) -> None:
        """Extract until ``pred()`` is true (checked after each extract)."""
        self.ctx.check_caller("extract")
        await self._run(lambda since: self.ctx.wait_path(pred, since))

    async def close(self) -> None:
        """Wait until what was sent has left the NI, then end the context."""
        # A kernel path cannot be abandoned half-way, so a cancelled caller (a run ended
        # by a modeled deadlock, a timeout) must not start one it could never finish.
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self.ctx.closed:
            self.ctx.check_caller("close")
            await self._run(lambda since: self.ctx.close_path(since))
            await self.dp.close(self.fd)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- machinery -----------------------------------------------------------------------------

    async def _run(self, make_path):
        """Run a path; while it says "not yet" (WouldBlock), wait: in modeled time on the
        context's events (an arrival, a credit, a send slot), in real time by spinning."""
        node, ctx = self._node, self.ctx
        since = None
        spins = 0
        while True:
            try:
                return await run_path(node, make_path(since), ctx.cpu)
            except WouldBlock as wb:
                since = node.engine.now
                if ctx.wakes != ctx.wakes_seen:
                    continue                     # something came while the path ran: look again
                if node.modeled:
                    await wait_on(node, wb.queue, self.dp.spin_s)
                else:
                    spins = _spin(ctx, spins)
                    await trio.lowlevel.checkpoint()


class SyncFM:
    """The same calls, blocking."""

    def __init__(self, fm: FM):
        self._fm = fm
        self.ctx = fm.ctx
        # Real time over shared memory alone: the caller's own poll walks the queues
        # (`FmContext.send_now` / `extract_now`); everything else takes the paths.
        self._fast = not fm._node.modeled and fm.ctx.net is None and fm.ctx.smt is not None

    def _run(self, make_path):
        fm, ctx = self._fm, self.ctx
        node = fm._node
        since = None
        spins = 0
        while True:
            try:
                if not node.modeled:
                    return _straight(make_path(since))
                return node.run_now(make_path(since), ctx.cpu)
            except WouldBlock as wb:
                since = node.engine.now
                if ctx.wakes != ctx.wakes_seen:
                    continue                     # something came while the path ran: look again
                if node.modeled:
                    wait_on_sync(node, wb.queue, fm.dp.spin_s)
                else:
                    spins = _spin(ctx, spins)

    def begin_message(self, dest, length, handler) -> SendStream:
        return self.ctx.begin(dest, length, handler)

    def send_piece(self, stream, data) -> None:
        self.ctx.piece(stream, data)
        self._run(lambda since: self.ctx.send_path(stream, False))

    def end_message(self, stream) -> None:
        self.ctx._check_stream(stream)
        self._run(lambda since: self.ctx.send_path(stream, True))

    def send(self, dest, handler, data) -> None:
        if self._fast:
            core = self.ctx.core
            sent = core.send_now(dest, handler, data)
            if sent == 0:                        # no credit or frame yet: extract while waiting (FM-C03)
                ctx, spins = self.ctx, 0
                ctx.stats_c["credit_waits"] += 1
                extract, smt = core.extract_smt, ctx.smt
                while sent == 0:
                    extract(smt, 1 << 62)
                    sent = core.send_now(dest, handler, data)
                    spins = _idle(ctx, spins)
            if sent > 0:
                return
        data = memoryview(data).cast("B")
        s = self.ctx.begin(dest, len(data), handler)
        self.ctx.piece(s, data)
        self._run(lambda since: self.ctx.send_path(s, True))

    def extract(self, max_bytes=None) -> int:
        _check_budget(max_bytes)
        if self._fast:
            return self.ctx.extract_now(max_bytes)
        self.ctx.check_caller("extract")
        if not self._fm._node.modeled:
            return _straight(self.ctx.extract_path(max_bytes))
        return self._fm._node.run_now(self.ctx.extract_path(max_bytes), self.ctx.cpu)

    def extract_until(self, pred) -> None:
        self.ctx.check_caller("extract")
        if self._fast:
            ctx, spins = self.ctx, 0
            extract, smt = ctx.core.extract_smt, ctx.smt
            while True:
                extract(smt, 1 << 62)
                if pred():
                    return
                spins = _spin(ctx, spins)
        self._run(lambda since: self.ctx.wait_path(pred, since))

    def set_handler(self, hid, fn) -> None:
        self.ctx.set_handler(hid, fn)

    def close(self) -> None:
        if not self.ctx.closed:
            self.ctx.check_caller("close")
            self._run(lambda since: self.ctx.close_path(since))
            self._fm.dp.sync.close(self._fm.fd)


def _check_budget(max_bytes) -> None:
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 1):
        raise OSError(errno.EINVAL, f"extract takes a positive byte budget or None, not {max_bytes!r}")


def _straight(path):
    """Real time: run a path straight through in the calling process -- what the node's
    CPU does with a path in real time (its yields are costs, spent by the host itself),
    without a round of the engine per call."""
    try:
        while True:
            next(path)
    except StopIteration as stop:
        return stop.value


def _spin(ctx, spins: int) -> int:
    """Real time: poll until something may have come (FM is a polling library); now and
    then look for dead peers, and let another process have the CPU between polls."""
    while not ctx.ready():
        spins = _idle(ctx, spins)
        if spins < 0:
            return 0                     # a dead peer's frames came back
        if spins % 256 == 0:
            break                        # run the path again: credits may have come back
    return spins


def _idle(ctx, spins: int) -> int:
    """One empty poll more: now and then look for dead peers (-1 if one's frames were
    reclaimed) and let another process have the CPU."""
    spins += 1
    if spins % REAL_CHECK_SPINS == 0 and ctx.smt is not None and ctx.smt.reclaim():
        return -1
    if spins % YIELD_EVERY == 0:
        os.sched_yield()
    return spins


def real_node(fm_params=None):
    """A real node in this OS process, bare but for ``fm`` (shared memory only), and a
    process on it: the `libdp.DP` to open FM with."""
    from kernelsim import Engine, Node
    from libdp._api import DP
    from libdp._cluster import build_profile

    params = {"net": "null", **(fm_params or {})}
    node = Node(0, build_profile("hpvm19"), Engine(realtime=True), modeled=False)
    node.modules.insmod("fm", **params)
    return DP(node.spawn("fm"))
