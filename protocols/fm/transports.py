"""FM's transports as one context sees them: the Myrinet port and the shared-memory port.

Both offer the same steps to ``context.py`` -- claim a packet (slot or frame), write
data into it, commit it with its header; poll for the next arrived packet, expose its
bytes, release it -- each a path fragment that takes the CPU time not yet yielded
(``pend``) and returns what it adds, yielding first whenever its effect must happen at
the modeled instant it is reached (a bus transaction, a frame published).

* `NetPort`: this context's send ring in LANai SRAM and its slice of the pinned receive
  region (``board.py``). PIO goes through the node's modeled PCI bus and host bridge
  when the profile has one (``kernelsim._pcibus``), paced in chunks when the module
  paces (FM-C13); reads of LANai words likewise.
* `SmtPort`: the context's place in its job's shared-memory region (``_smt.pyx``), on
  this host: modeled (the region in node memory, each atomic and copy charged) or real
  (POSIX shared memory between real processes, see `SmtHost`).
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os

from protocols.fm import _wire
from protocols.fm._smt import SmtRegion, layout_bytes
from protocols.fm._smtport import SmtPort
from protocols.fm.lcp import CB_TX_WAIT, CX_DELIVERED, CX_SEND_PROD, MAX_INSTANCES, ROUTE_AREA, TRAILER_FULL

__all__ = ["NetPort", "SmtPort", "SmtHost", "RealSmtHost", "FRAME_BYTES", "process_start_time"]

HDR = _wire.HDR_BYTES
FRAME_BYTES = HDR + _wire.DATA_BYTES           # an SMT frame carries one FM packet
MASK32 = 0xFFFFFFFF


class NetPort:
    """Context `k`'s part of the Myrinet board (see ``board.FmBoard``)."""

    def __init__(self, board, k, ring, slots, slot_bytes, txdone, credits_at):
        self.board = board
        self.k = k
        self.ni = board.ni
        self.mem = board.node.mem
        self.entry = board.ctx_entry(k)
        self.ring = ring
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.txdone = txdone
        self.credits_at = credits_at
        self.send_slots = board.send_slots
        self.cons = 0                  # region slots consumed
        self.known = 0                 # notify=pci: packets the LCP has told us of
        self.posted = 0                # send slots handed to streams
        self.prod = 0                  # ... of which the doorbell has announced (committed in order)
        self.committed: set = set()
        self.hdr_buf = bytearray(HDR)
        self.polling = False           # notify=pci: a poll chain is running
        self.wait_bit = False
        self.pci_polls = 0

    # -- send ring ---------------------------------------------------------------------------

    def _tx_done(self) -> int:
        return self.mem.rd32(self.txdone)

    def slot_free(self) -> bool:
        return ((self.posted - self._tx_done()) & MASK32) < self.send_slots

    def open_slot(self):
        if not self.slot_free():
            return None
        i = self.posted
        self.posted = (self.posted + 1) & MASK32
        return i

    def want_slot(self, pend):
        """Tell the LCP we wait for a send slot (it reports its done count at once)."""
        if not self.wait_bit:
            self.wait_bit = True
            pend = yield from self.board.pio_word(CB_TX_WAIT, self.board.tx_wait_bits(self.k, True), pend)
        return pend

    def write(self, ctx, slot, at, data, pend):
        off = self.board.lcp.send_slot(self.k, slot) + ROUTE_AREA + at
        return (yield from self.board.pio(off, data, pend))

    def header(self, ctx, slot, h, pend):
        """The packet's header by PIO, ahead of its data."""
        h.pack_into(self.hdr_buf, 0)
        return (yield from self.write(ctx, slot, 0, self.hdr_buf, pend))

    def commit(self, ctx, peer, slot, plen, pend):
        """The doorbell, once every earlier slot is committed."""
        self.committed.add(slot)
        prod = self.prod
        while prod in self.committed:
            self.committed.discard(prod)
            prod = (prod + 1) & MASK32
        if prod != self.prod:
            self.prod = prod
            pend = yield from self.board.pio_word(self.entry + CX_SEND_PROD, prod, pend)
        if self.wait_bit and self.slot_free():
            self.wait_bit = False
            pend = yield from self.board.pio_word(CB_TX_WAIT, self.board.tx_wait_bits(self.k, False), pend)
        return pend

    def credit_word(self, peer) -> int:
        return int.from_bytes(self.mem.read(self.credits_at + 4 * (peer.host * MAX_INSTANCES + peer.inst), 4), "big")

    # -- receive region ------------------------------------------------------------------------

    def _slot_end(self) -> int:
        return self.ring + (self.cons % self.slots + 1) * self.slot_bytes

    def poll(self, ctx, pend):
        c = ctx.c
        if self.board.notify_pci:
            if self.known == self.cons:
                if pend:
                    yield pend
                pend = 0.0
                t = self.board.read_time()
                self.known = self.ni.rd32(self.entry + CX_DELIVERED)
                self.pci_polls += 1
                ctx.stats_c["pci_polls"] += 1
                pend += t
                if self.known == self.cons:
                    return None, pend
            w = self.mem.rd32(self._slot_end() - 4)
            return self._slot_end(), pend + c.miss           # the packet's first line is not in the cache
        w = self.mem.rd32(self._slot_end() - 4)
        if not w & TRAILER_FULL:
            return None, pend + c.poll                        # a hit in the cache: no bus traffic
        return self._slot_end(), pend + c.poll + c.miss       # the DMA invalidated the line: one miss

    def has_packet(self, ctx) -> bool:
        return bool(self.mem.rd32(self._slot_end() - 4) & TRAILER_FULL)

    def packet(self, ctx, end):
        n = self.mem.rd32(end - 4) & 0xFFFF
        if n > self.slot_bytes - 4:
            n = 0
        return self.mem.view, end - 4 - n, n

    def release(self, ctx, end, peer, pend):
        self.mem.wr32(end - 4, 0)
        self.cons = (self.cons + 1) & MASK32
        return pend
        yield  # pragma: no cover

    # -- waiting ---------------------------------------------------------------------------------

    def arm(self, ctx) -> None:
        """Memory notification needs nothing (the DMA's write wakes us); PCI
        notification polls the LCP's count across the bus until it moves."""
        if self.board.notify_pci and not self.polling and ctx.node.modeled:
            self.polling = True
            self.board.engine.after(0.0, self._poll_issue, ctx)

    def _poll_issue(self, ctx):
        if not ctx._waiting:
            self.polling = False
            return
        board = self.board
        done = board.bus.read(board.engine.now) if board.bus is not None else board.engine.now + board.read_s
        sample = board.bus.sampled_at if board.bus is not None else done
        self.pci_polls += 1
        ctx.stats_c["pci_polls"] += 1
        board.engine.at(sample, self._poll_sample, (ctx, done))

    def _poll_sample(self, item):
        ctx, done = item
        v = self.ni.rd32(self.entry + CX_DELIVERED)
        if v != self.known:
            self.known = v
            self.polling = False
            self.board.engine.at(done, self._poll_wake, ctx)
        else:
            self.board.engine.at(done + ctx.poll_round() - ctx.c.poll, self._poll_issue, ctx)

    def _poll_wake(self, ctx):
        ctx.wake("pci")

    def stats(self) -> dict:
        return {"region_slots": self.slots, "consumed": self.cons, "send_slots": self.send_slots,
                "posted": self.posted, "pci_polls": self.pci_polls}


class SmtHost:
    """A job's shared-memory region on one modeled node, and who waits on it."""

    def __init__(self, node, program, params):
        self.node = node
        self.program = program
        nproc = params["smt_procs"]
        m = params["smt_queues"] or nproc
        if m > nproc:
            raise OSError(errno.EINVAL, f"fm: smt_queues ({m}) must be at most smt_procs ({nproc}) (FM-A13)")
        self.size = layout_bytes(nproc, m, params["smt_frames"], FRAME_BYTES)
        self.addr = node.mem.alloc(self.size, 64)
        self.region = SmtRegion(node.mem.view[self.addr:self.addr + self.size], nproc, m, params["smt_frames"],
                                FRAME_BYTES, True)
        self.ctxs: dict = {}
        self.users = 0

    def attach(self, ctx) -> SmtPort:
        sid = self.region.attach(ctx.instance, ctx.proc.pid, 0)
        self.ctxs[sid] = ctx
        self.users += 1
        for other in self.ctxs.values():
            if other is not ctx:
                other.wake("smt")                       # a sender may wait for this receiver to appear
        return SmtPort(self, sid, ctx.instance, ctx.c)

    def detach(self, port) -> bool:
        """True when the region has no user left (the caller frees it)."""
        self.region.detach(port.me)
        self.ctxs.pop(port.me, None)
        self.users -= 1
        return self.users == 0

    def free(self) -> None:
        self.region.close()
        self.node.mem.release(self.addr)

    def notify(self, sid, how) -> None:
        ctx = self.ctxs.get(sid)
        if ctx is not None:
            ctx.wake(how)

    def alive(self, pid, start) -> bool:
        return any(p.pid == pid and p.alive for p in self.node.processes)


def process_start_time(pid: int) -> int:
    """The kernel's start time of process `pid` (with the pid, it names one process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    return int(stat[stat.rindex(b")") + 2:].split()[19])


class RealSmtHost(SmtHost):
    """A job's shared-memory region between real processes: POSIX shared memory named
    after the job, laid out by the first process to come (under an flock), unlinked by
    the last to leave. A region whose processes are all dead is laid out anew."""

    def __init__(self, node, program, params):
        import _posixshmem
        self.node = node
        self.program = program
        self.name = params["smt_name"] or f"/dp-fm-{os.getuid()}-{program}"
        if not self.name.startswith("/") or "/" in self.name[1:] or len(self.name) > 200:
            raise OSError(errno.EINVAL, f"fm: smt_name {self.name!r} is not a POSIX shared-memory name (/NAME)")
        nproc = params["smt_procs"]
        m = params["smt_queues"] or nproc
        if m > nproc:
            raise OSError(errno.EINVAL, f"fm: smt_queues ({m}) must be at most smt_procs ({nproc}) (FM-A13)")
        size = layout_bytes(nproc, m, params["smt_frames"], FRAME_BYTES)
        fd = _posixshmem.shm_open(self.name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                have = os.fstat(fd).st_size
                region = None
                if have:
                    m_map = mmap.mmap(fd, have)
                    try:
                        region = SmtRegion(m_map)
                    except OSError:
                        region = None
                    if region is not None and not self._anyone_alive(region):
                        region.close()
                        region = None
                    if region is None:
                        m_map.close()
                if region is None:
                    os.ftruncate(fd, size)
                    m_map = mmap.mmap(fd, size)
                    region = SmtRegion(m_map, nproc, m, params["smt_frames"], FRAME_BYTES, True)
                self.map = m_map
                self.region = region
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self.fd = fd
        self.ctxs = {}
        self.users = 0
        self.size = self.region.size

    def _anyone_alive(self, region) -> bool:
        for sid in range(region.ids_handed_out()):
            state, pid, start, _ = region.process(sid)
            if state == 1 and self.alive(pid, start):
                return True
        return False

    def attach(self, ctx) -> SmtPort:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            for sid in range(self.region.ids_handed_out()):        # an instance a dead process left
                state, pid, start, _inst = self.region.process(sid)
                if state == 1 and not self.alive(pid, start):
                    self.region.mark_dead(sid)
            sid = self.region.attach(ctx.instance, os.getpid(), process_start_time(os.getpid()))
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.ctxs[sid] = ctx
        self.users += 1
        return SmtPort(self, sid, ctx.instance, ctx.c)

    def detach(self, port) -> bool:
        self.region.detach(port.me)
        self.ctxs.pop(port.me, None)
        self.users -= 1
        return self.users == 0

    def free(self) -> None:
        import _posixshmem
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            last = not self._anyone_alive(self.region)
            if last:
                try:
                    _posixshmem.shm_unlink(self.name)
                except FileNotFoundError:
                    pass
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.region.close()
            self.map.close()
            os.close(self.fd)

    def notify(self, sid, how) -> None:
        ctx = self.ctxs.get(sid)
        if ctx is not None:
            ctx.wake(how)

    def alive(self, pid, start) -> bool:
        if pid == 0:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return start == 0 or process_start_time(pid) == start
