"""LCI as its process sees it: packets, upcalls, release, RCPY (LCI-C01, C02, C16).

    from libdp import Cluster
    from libdp.lci import LCI

    cluster = Cluster(nodes=2, nic="myrinet", load=[("lci", {"variant": "I-pio"})])

    async def program(dp, rank, size):
        lci = await LCI.open(dp)
        got = []
        lci.set_upcall(lambda pkt: got.append(pkt.data))      # runs inside poll
        if rank == 0:
            await lci.send(1, b"hello")
        else:
            await lci.poll_until(lambda: got)
        await lci.close()
        return got
    print(cluster.run_spmd(program))                          # [[], [b'hello']]

The calls (each async; ``lci.sync`` has the blocking twins):

* ``send(dest, data)`` -- one packet of at most an MTU (EMSGSIZE beyond) to node
  `dest`: allocate an NI send buffer, fill it the variant's way, hand it to the NI
  (LCI-C02 steps 1-3). `data` is bytes, or ``(buf, offset, nbytes)`` of a user buffer.
  Returns when the data may be reused; waits while no NI send buffer is free (and,
  with I-hrx, while the window is closed).
* ``poll()`` -- take every packet that has arrived, in FIFO order per sender, each to
  the upcall ``fn(pkt)`` (``pkt.src``, ``pkt.data``, ``pkt.copy_to(buf, off)``); an
  upcall returning True keeps the packet, which ``release(pkt)`` gives back later, in
  any order. Returns the number of packets handled.
* ``poll_until(pred)`` -- poll until ``pred()`` holds, as a program spins.
* ``set_interrupts(on)`` and ``wait(pred)`` -- receive by interrupt: with network
  interrupts on, ``wait`` sleeps until the NI's polling watchdog (LCI-C09: 70 µs on
  the PPro, 30 µs on the P3) interrupts, then polls (the signal handler's poll).
* ``alloc(nbytes)`` -- a buffer in the process's virtual memory (`UserBuffer`).
* ``bcast(data)`` -- one packet to every other member of this node's multicast group
  (one group of all nodes unless the module's ``groups=`` says otherwise), down a
  spanning tree rooted here (``tree=`` binary, binomial or k=F), forwarded by the NIs
  or, with I-sdma-hmc and I-hrx, by the hosts as they poll (LCI-C10, C12, C20). The
  receivers' upcalls see ``pkt.src`` = this node; FIFO per sender.
* ``fetch_add(node, inc=1)`` -- atomically add `inc` to the variable of `node`'s NI and
  return the value before (LCI-C11; the host answers with I-hrx, and must poll).
* ``group`` -- ``{"members", "tree", "parent", "children"}`` of this node's group, or None.
* ``rcpy(dest, buf, offset, remote_vaddr, nbytes)`` -- remote memory copy (I-rcpy):
  non-blocking, 4-byte aligned (LCI-A44), no notification at the receiver, which must
  still poll so that TLB misses are handled (LCI-C19); ``rcpy_done(h)`` and
  ``rcpy_wait(h)`` check and wait for completion at the sender.

Misuse is an OSError: EINVAL (bad arguments, a packet released twice), EMSGSIZE,
EHOSTUNREACH, EFAULT (memory outside the process's buffers), EOPNOTSUPP (rcpy without
transfer=rcpy), EBADF (a closed endpoint), EBUSY (a second process on the node), ENOSYS
(no lci module); EIO when a variant without retransmission meets a fault it cannot
survive (LCI-C03).
"""
from __future__ import annotations

import errno
import inspect
import math

import trio

from kernelsim import WouldBlock, callable_spin, run_path, spin, wait_on, wait_on_sync
from protocols.lci.host import Packet, RcpyHandle
from protocols.lci.memory import UserBuffer

__all__ = ["LCI", "SyncLCI", "Packet", "RcpyHandle", "UserBuffer"]


class LCI:
    """LCI for the node's LCI process (async calls; ``.sync`` for blocking ones)."""

    def __init__(self, dp, fd: int):
        self.dp = dp
        self.fd = fd
        self.ep = dp._proc.fds.get(fd)
        self.lib = self.ep.lib
        self.sync = SyncLCI(self)

    @classmethod
    async def open(cls, dp, upcall=None) -> "LCI":
        """lci_open: this process gets the node's NI (ENOSYS without the lci module,
        EBUSY if another process has it). A process attached to a real node drives the NI
        itself: ``dp`` becomes its own kernel's process (`libdp.attach`, LCI-A54)."""
        dp = await dp.user_level("lci") if hasattr(dp, "user_level") else dp
        fd = await dp._syscall("lci_open", ())
        lci = cls(dp, fd)
        lci.set_upcall(upcall)
        return lci

    @classmethod
    def open_sync(cls, dp, upcall=None) -> "LCI":
        dp = dp.sync.user_level("lci") if hasattr(dp, "user_level") else dp
        fd = dp.sync._call(lambda e: dp._node.syscall_path(dp._proc, "lci_open", (), e), None, 0.0)
        lci = cls(dp, fd)
        lci.set_upcall(upcall)
        return lci

    # -- state ----------------------------------------------------------------------------

    @property
    def nid(self) -> int:
        return self.dp.nid

    @property
    def variant(self) -> str:
        return self.lib.variant.name

    @property
    def mtu(self) -> int:
        return self.lib.mtu

    def set_upcall(self, fn) -> None:
        self._check_open()
        if fn is not None and (not callable(fn) or inspect.iscoroutinefunction(fn)):
            raise OSError(errno.EINVAL, "an upcall is a plain function fn(packet) (it runs inside poll)")
        self.lib.upcall = fn

    def alloc(self, nbytes: int) -> UserBuffer:
        self._check_open()
        return self.lib.vm.alloc(nbytes)

    def free(self, buf: UserBuffer) -> None:
        self.lib.vm.free(buf)

    def stats(self) -> dict:
        return self.lib.stats()

    @property
    def group(self):
        g = self.lib.mc.group
        if g is None:
            return None
        me = self.nid
        return {"members": list(g.members), "tree": g.tree.name, "children": g.children(me, me)}

    def rcpy_done(self, h: RcpyHandle) -> bool:
        """Has every page transfer of `h` left the sending NI? (No modeled time: it reads
        what the last poll, send or wait reclaimed.)"""
        if not isinstance(h, RcpyHandle):
            raise OSError(errno.EINVAL, f"not an rcpy handle: {h!r}")
        return h.done

    # -- the calls ----------------------------------------------------------------------------

    def send(self, dest: int, data):
        data = self._message(dest, data)
        return self._run(lambda since: self.lib.send_path(dest, data, since))

    def poll(self):
        self._check_open()
        return run_path(self.dp._node, self.lib.poll_path())

    def bcast(self, data):
        """One packet (at most an MTU) to the rest of the group; returns when `data` may be reused."""
        data = self._message(None, data)
        op = self.lib.mc.bcast_start(data)
        return self._run(lambda since: self.lib.mc.bcast_path(op, since))

    def fetch_add(self, node: int, inc: int = 1):
        """The value of `node`'s fetch-and-add variable, which grows by `inc` (LCI-C11)."""
        self._check_open()
        op = self.lib.mc.fa_start(node, inc)
        return self._run(lambda since: self.lib.mc.fa_path(op, since))

    async def poll_until(self, pred) -> None:
        """Poll until ``pred()`` is true (checked first)."""
        self._check_open()
        if pred():
            return
        node, lib = self.dp._node, self.lib
        if node.modeled:
            # The engine runs the loop, each poll at the instant the task would have run it
            # (kernelsim/_spin.pyx): no task switch per poll.
            await spin(callable_spin(node, lib.events, lib.poll_path, pred, lib.ready, lib.arm_timer),
                       node, self.dp.spin_s)
            return
        # `_run`'s loop, but a poll after which pred() is still false -- one per packet
        # of a stream -- says so by its value, not by WouldBlock: an exception raised
        # through the CPU and run_path builds a traceback of frames every time.
        since = None
        while not await run_path(node, self._poll_check_path(pred, since)):
            since = self.dp.now()
            if not lib.ready():
                lib.arm_timer()
                await wait_on(node, lib.events, self.dp.spin_s)

    def release(self, pkt: Packet):
        self._check_open()
        return run_path(self.dp._node, self.lib.release_path(pkt))

    def set_interrupts(self, on: bool):
        self._check_open()
        return run_path(self.dp._node, self.lib.set_interrupts_path(on))

    async def wait(self, pred=None) -> int:
        """Sleep until the NI interrupts, then poll; until ``pred()`` (or one packet)."""
        self._check_open()
        if not self.lib.interrupts:
            raise OSError(errno.EINVAL, "wait() receives by interrupt: call set_interrupts(True) first "
                                        "(or poll_until to receive by polling)")
        got = 0
        while True:
            if pred is not None and pred():
                return got
            if not self.lib.head_full():
                await self._sleep()
            got += await run_path(self.dp._node, self._signal_poll_path())
            if pred is None and got:
                return got

    async def rcpy(self, dest: int, buf: UserBuffer, offset: int, remote_vaddr: int, nbytes: int) -> RcpyHandle:
        self._check_open()
        h = self.lib.rcpy_start(dest, buf, offset, remote_vaddr, nbytes)
        await self._run(lambda since: self.lib.rcpy_path(h, since))
        return h

    async def rcpy_wait(self, h: RcpyHandle) -> RcpyHandle:
        if not isinstance(h, RcpyHandle):
            raise OSError(errno.EINVAL, f"not an rcpy handle: {h!r}")
        await self._run(lambda since: self.lib.rcpy_wait_path(h, since))
        return h

    async def flush(self) -> None:
        """Poll (running upcalls) until every send this process made has completed: its
        descriptor reclaimed, and under I-hrx every packet acknowledged (bounded: a peer
        that stopped answering makes the library give up, see close)."""
        self._check_open()
        await self._run(self._drain_path)

    async def close(self) -> None:
        """Wait (bounded) until the NI has sent what we gave it, then give the NI up."""
        if self.ep.closed:
            return
        if trio.current_effective_deadline() == -math.inf:
            # Cancelled (a failed run is being torn down): no waiting for the NI, but the
            # endpoint is given back all the same.
            self.dp.sync.close(self.fd)
            return
        await self._run(self._drain_path)
        await self.dp.close(self.fd)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- machinery ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.ep.closed:
            raise OSError(errno.EBADF, "the LCI endpoint is closed")

    def _message(self, dest, data):
        self._check_open()
        lib = self.lib
        if dest is not None:
            lib.check_dest(dest)
        if isinstance(data, tuple):
            if len(data) != 3 or not isinstance(data[0], UserBuffer) or data[0].vm is not lib.vm:
                raise OSError(errno.EFAULT, "a message in user memory is (buffer, offset, nbytes) of this process")
            data[0]._span(data[1], data[2])
            n = data[2]
        elif isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data)
            n = len(data)
        else:
            raise OSError(errno.EINVAL, f"a message is bytes or (buffer, offset, nbytes), not {type(data).__name__}")
        if n > lib.mtu:
            raise OSError(errno.EMSGSIZE, f"{n} bytes do not fit one {lib.mtu}-byte LCI packet")
        return data

    def _poll_check_path(self, pred, since):
        """Poll; then is ``pred()`` true? (asked as the poll ends, as `_poll_until_path` does)"""
        yield from self.lib.poll_path(since)
        return pred()

    def _poll_until_path(self, pred, since):
        yield from self.lib.poll_path(since)
        if not pred():
            raise WouldBlock(self.lib.events, "waiting for LCI packets")

    def _signal_poll_path(self):
        """After an interrupt: the signal reaches the process and its handler polls."""
        lib = self.lib
        if lib.signalled:
            lib.signalled = False
            lib.st["signals"] += 1
            yield lib.c.signal_s
        return (yield from lib.poll_path())

    def _drain_path(self, since=None):
        lib = self.lib
        yield from lib.poll_path(since)
        yield from lib.reclaim_path()
        if lib.outstanding() and not _gave_up(lib):
            lib.want_completion = True
            raise WouldBlock(lib.events, "LCI endpoint draining")
        lib.want_completion = False
        return 0

    async def _sleep(self) -> None:
        lib = self.lib
        lib.arm_timer()
        await wait_on(self.dp._node, lib.sleepers, self.dp.spin_s)

    async def _run(self, make_path):
        """Submit a path; while it says "not yet" (WouldBlock), spin -- modeled as a wait
        on the library's events (a DMA into host memory, an interrupt, a timer)."""
        node, lib = self.dp._node, self.lib
        since = None
        while True:
            try:
                return await run_path(node, make_path(since))
            except WouldBlock:
                since = self.dp.now()
                if not lib.ready():
                    lib.arm_timer()
                    await wait_on(node, lib.events, self.dp.spin_s)


def _gave_up(lib) -> bool:
    """Closing does not wait forever on a peer that stopped answering (I-hrx: its
    packets time out ``lci.retx_give_up`` times in a row) or a broken variant."""
    return lib.aborted is not None or lib.peer_gone()


class SyncLCI:
    """The same calls, blocking (modeled time moves inside each call)."""

    def __init__(self, lci: LCI):
        self._lci = lci
        self.lib = lci.lib

    def _run(self, make_path):
        lci, lib = self._lci, self.lib
        node = lci.dp._node
        since = None
        while True:
            try:
                return node.run_now(make_path(since))
            except WouldBlock:
                since = node.engine.now
                if not lib.ready():
                    lib.arm_timer()
                    wait_on_sync(node, lib.events, lci.dp.spin_s)

    def send(self, dest, data):
        data = self._lci._message(dest, data)
        return self._run(lambda since: self.lib.send_path(dest, data, since))

    def poll(self) -> int:
        self._lci._check_open()
        return self._lci.dp._node.run_now(self.lib.poll_path())

    def bcast(self, data):
        data = self._lci._message(None, data)
        op = self.lib.mc.bcast_start(data)
        return self._run(lambda since: self.lib.mc.bcast_path(op, since))

    def fetch_add(self, node: int, inc: int = 1) -> int:
        self._lci._check_open()
        op = self.lib.mc.fa_start(node, inc)
        return self._run(lambda since: self.lib.mc.fa_path(op, since))

    @property
    def group(self):
        return self._lci.group

    def poll_until(self, pred) -> None:
        self._lci._check_open()
        if pred():
            return
        self._run(lambda since: self._lci._poll_until_path(pred, since))

    def release(self, pkt) -> None:
        self._lci._check_open()
        self._lci.dp._node.run_now(self.lib.release_path(pkt))

    def set_interrupts(self, on: bool) -> None:
        self._lci._check_open()
        self._lci.dp._node.run_now(self.lib.set_interrupts_path(on))

    def wait(self, pred=None) -> int:
        lci = self._lci
        lci._check_open()
        if not self.lib.interrupts:
            raise OSError(errno.EINVAL, "wait() receives by interrupt: call set_interrupts(True) first")
        node = lci.dp._node
        got = 0
        while True:
            if pred is not None and pred():
                return got
            if not self.lib.head_full():
                self.lib.arm_timer()
                wait_on_sync(node, self.lib.sleepers, lci.dp.spin_s)
            got += node.run_now(lci._signal_poll_path())
            if pred is None and got:
                return got

    def rcpy(self, dest, buf, offset, remote_vaddr, nbytes):
        self._lci._check_open()
        h = self.lib.rcpy_start(dest, buf, offset, remote_vaddr, nbytes)
        self._run(lambda since: self.lib.rcpy_path(h, since))
        return h

    def rcpy_wait(self, h):
        if not isinstance(h, RcpyHandle):
            raise OSError(errno.EINVAL, f"not an rcpy handle: {h!r}")
        self._run(lambda since: self.lib.rcpy_wait_path(h, since))
        return h

    def flush(self) -> None:
        self._lci._check_open()
        self._run(self._lci._drain_path)

    def close(self) -> None:
        lci = self._lci
        if lci.ep.closed:
            return
        self._run(lci._drain_path)
        lci.dp.sync.close(lci.fd)

    # Calls without modeled time are the async object's.
    def set_upcall(self, fn):
        self._lci.set_upcall(fn)

    def alloc(self, nbytes):
        return self._lci.alloc(nbytes)

    def rcpy_done(self, h):
        return self._lci.rcpy_done(h)

    def stats(self):
        return self._lci.stats()
