# cython: language_level=3, annotation_typing=False, binding=True
"""The host's side of the TB2 FIFOs, and the user-level FIFO API built on it.

`HostFifos` is what any owner of the card keeps in host memory and in its head: the
send FIFO (128 entries) and the receive FIFO (64 entries per active node), its send
and receive pointers, the adapter's transmit-done count as last read, and how many
received entries it has popped. Both owners use it: the kernel driver when DP runs
over the card, and `UserFifos` when one user process drives the card itself, as SP AM
does (SP-A18: one process per node).

The costs charged are the host's, as SP-C03/SP-C04 list them:

* send: write the packet into the next send entry (in the cache), flush its lines
  and sync, because memory is not coherent with I/O (SP-A24), then store its length
  into the packet-length array -- one MicroChannel access, about 1 µs (SP-A17). A bulk
  send flushes all its packets, syncs once, and stores their lengths in halfword or
  word stores: several packets per MicroChannel access.
* the send FIFO's fill level is not read across the bus on every send: the host
  counts what it wrote and reads the adapter's transmit-done counter only when its
  count says the FIFO is full.
* poll: invalidate the head entry's status line and load it (an empty poll must not
  see a stale cached copy); a hit copies the data out, clears the status word and
  flushes the entry's lines so the next lap of the FIFO is read from memory; the
  entries are popped back to the adapter only every `pop_every` messages, since each
  pop is a MicroChannel access (SP-C04; N7 leaves the number open).
"""
from __future__ import annotations

import errno

from kernelsim import WouldBlock

from nic_drivers.tb2 import _model as hw
from nic_drivers.tb2._model cimport RX_VALID_BIT
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from libc.string cimport memcpy, memset
cimport cython

# The entry layout (nic_drivers.tb2._model), as C constants for the per-packet code.
DEF HDR_BYTES = 32
DEF H_DST = 0
DEF H_ROUTE = 2
DEF H_LEN = 6
DEF H_PROTO = 8
DEF H_USER = 12
DEF USER_BYTES = 16
DEF LEN_UNIT = 4
DEF ENTRY_BYTES = 256
DEF H_STATUS = 28
DEF H_SRC = 4
DEF DATA_MAX = 224
DEF REG_LEN = 0x000
DEF REG_RX_POP = 0x404
assert (hw.HDR_BYTES, hw.H_DST, hw.H_ROUTE, hw.H_LEN, hw.H_PROTO, hw.H_USER, hw.USER_BYTES, hw.LEN_UNIT,
        hw.ENTRY_BYTES, hw.H_STATUS, hw.H_SRC, hw.DATA_MAX, hw.RX_VALID, hw.REG_LEN, hw.REG_RX_POP) == \
    (HDR_BYTES, H_DST, H_ROUTE, H_LEN, H_PROTO, H_USER, USER_BYTES, LEN_UNIT,
     ENTRY_BYTES, H_STATUS, H_SRC, DATA_MAX, RX_VALID_BIT, REG_LEN, REG_RX_POP)

__all__ = ["HostFifos", "UserFifos", "Packet", "open_fifos", "DEFAULT_POP_EVERY"]

DEFAULT_POP_EVERY = 8
U32 = 0xFFFFFFFF


cdef class HostFifos:
    """Host memory, pointers and per-operation costs of one owner of the FIFOs (fields: fifos.pxd)."""

    def __init__(self, node, adapter, owner, pop_every: int):
        p = node.profile
        c = node.costs
        self.node = node
        self.mem = node.mem
        self.adapter = adapter
        self.owner = owner
        self.pop_every = pop_every
        self.mc_read = c.pci_read
        self.mc_write = c.pci_write
        self.line = max(1, int(p["cache.line_bytes"]))
        self.c_flush = p["cache.flush_line_s"]
        self.c_sync = p["cache.sync_s"]
        self.c_miss = c.mem_miss
        self.send_count = int(p["tb2.send_fifo_entries"])
        active = max(1, len(node.hosts))
        self.recv_count = int(p["tb2.recv_fifo_entries_per_node"]) * active
        if not 1 <= self.send_count <= hw.LEN_ARRAY_MAX:
            raise OSError(errno.EINVAL, f"tb2.send_fifo_entries must be 1..{hw.LEN_ARRAY_MAX}")
        if self.recv_count < 1:
            raise OSError(errno.EINVAL, "tb2.recv_fifo_entries_per_node must be at least 1")
        self.send_base = 0
        self.recv_base = 0
        self.tx_next = 0            # packets written into the send FIFO (mod 2^32)
        self.tx_done = 0            # the adapter's transmit-done counter, as last read
        self.tx_refreshes = 0
        self.rx_head = 0
        self.rx_consumed = 0
        self.rx_popped = 0
        self.attached = False
        self.draining = False

    # -- claim and release ---------------------------------------------------------------

    def attach(self) -> None:
        """Claim the card (EBUSY if someone else has it), lay out the FIFOs, start it."""
        self.adapter.claim(self.owner)
        mem = self.mem
        try:
            self.send_base = mem.alloc(self.send_count * hw.ENTRY_BYTES, self.line)
            self.recv_base = mem.alloc(self.recv_count * hw.ENTRY_BYTES, self.line)
        except MemoryError:
            self.detach()
            raise OSError(errno.ENOMEM, "tb2: no host memory for the FIFOs") from None
        a = self.adapter
        a.reg_write(hw.REG_CONTROL, 0, 4)
        a.reg_write(hw.REG_SEND_BASE, self.send_base, 4)
        a.reg_write(hw.REG_SEND_COUNT, self.send_count, 4)
        a.reg_write(hw.REG_RECV_BASE, self.recv_base, 4)
        a.reg_write(hw.REG_RECV_COUNT, self.recv_count, 4)
        a.reg_write(hw.REG_CONTROL, hw.CTL_ENABLE, 4)
        if not a.reg_read(hw.REG_CONTROL) & hw.CTL_ENABLE:
            self.detach()
            raise OSError(errno.EIO, "tb2: the adapter refused the FIFO layout")
        self.attached = True

    def detach(self) -> None:
        """Give the card back. Packets already handed over (their lengths stored) still
        go out: until the adapter has taken them the FIFOs stay mapped and the card
        stays claimed (`draining`), as an unmap waits for the adapter to let go."""
        self.attached = False
        a = self.adapter
        a.reg_write(hw.REG_INT_ENABLE, 0, 4)
        if self.send_base and a.owner is self.owner and a.reg_read(hw.REG_CONTROL) & hw.CTL_ENABLE:
            self.tx_done = a.reg_read(hw.REG_TX_DONE)
            if self.outstanding():
                self.draining = True
                a.on_rx = None
                a.on_tx_space = self._drained
                return
        self._finish_detach()

    def _drained(self) -> None:
        self.tx_done = self.adapter.reg_read(hw.REG_TX_DONE)
        if not self.outstanding():
            self._finish_detach()

    def _finish_detach(self) -> None:
        self.draining = False
        self.adapter.release(self.owner)
        if self.send_base:
            self.mem.release(self.send_base)
            self.send_base = 0
        if self.recv_base:
            self.mem.release(self.recv_base)
            self.recv_base = 0

    # -- costs ---------------------------------------------------------------------------

    cpdef double flush_cost(self, Py_ssize_t nbytes):
        """dcbf of every cache line `nbytes` from an entry's start touch."""
        return ((nbytes + self.line - 1) // self.line) * self.c_flush

    # -- send side -----------------------------------------------------------------------

    cpdef unsigned int outstanding(self):
        return self.tx_next - self.tx_done          # unsigned: modulo 2^32

    cpdef int free_entries(self):
        return self.send_count - <int> self.outstanding()

    cpdef refresh_tx_done(self):
        """Load the adapter's transmit-done counter (the caller pays a MicroChannel read)."""
        self.tx_done = self.adapter.reg_read(hw.REG_TX_DONE)
        self.tx_refreshes += 1

    cpdef Py_ssize_t send_entry(self, int k=0):
        """Address of the k-th send entry after the next one to fill."""
        return self.send_base + ((<long long> self.tx_next + k) % self.send_count) * ENTRY_BYTES

    def length_stores(self, first: int, values: list[int]) -> list[tuple[int, int, int]]:
        """Split a run of length bytes into aligned MicroChannel stores of 4, 2 or 1 bytes.

        A store never covers an entry outside the run: an older entry's length may
        still be waiting for the i860, and writing it again would disturb it.
        """
        # C integers: a bulk chunk (up to 36 packets) makes a few stores per call, and
        # each step in Python ints was boxed arithmetic.
        cdef list stores = []
        cdef Py_ssize_t i = 0, k, n = len(values)
        cdef long long idx, start = first, count = self.send_count, v
        cdef int width
        while i < n:
            idx = (start + i) % count
            width = 1
            if idx % 4 == 0 and i + 4 <= n and idx + 4 <= count:
                width = 4
            elif idx % 2 == 0 and i + 2 <= n and idx + 2 <= count:
                width = 2
            v = 0
            for k in range(width):
                v = (v << 8) | <long long> values[i + k]
            stores.append((REG_LEN + idx, v, width))
            i += width
        return stores

    # -- receive side --------------------------------------------------------------------

    cpdef Py_ssize_t recv_entry(self, int i):
        return self.recv_base + i * ENTRY_BYTES

    cpdef consume(self, Py_ssize_t addr):
        """The host is done with the head entry: clear its status word, advance."""
        self.mem.wr32(addr + H_STATUS, 0)
        self.rx_head = (self.rx_head + 1) % self.recv_count
        self.rx_consumed += 1

    cpdef bint pop_due(self):
        return self.rx_consumed - self.rx_popped >= self.pop_every

    cpdef pop(self):
        """Give the consumed entries back (the caller pays a MicroChannel store)."""
        cdef long long n = self.rx_consumed - self.rx_popped
        if n:
            self.adapter.reg_write(REG_RX_POP, n, 4)
            self.rx_popped = self.rx_consumed

    def stats(self) -> dict:
        return {"send_entries": self.send_count, "recv_entries": self.recv_count, "pop_every": self.pop_every,
                "tx_written": self.tx_next, "tx_outstanding": self.outstanding(),
                "tx_done_reads": self.tx_refreshes, "rx_consumed": self.rx_consumed,
                "rx_unpopped": self.rx_consumed - self.rx_popped}


cdef inline bytes _as_bytes(data):
    return data if type(data) is bytes else bytes(data)


@cython.freelist(8)
cdef class Packet:
    """One packet taken from the receive FIFO."""

    def __init__(self, src: int, data: bytes, proto: int, route: int, user: bytes):
        self.src = src
        self.data = data
        self.proto = proto
        self.route = route
        self.user = user

    def __repr__(self):
        return f"<Packet from node {self.src}, {len(self.data)} bytes, proto {self.proto:#x}, route {self.route}>"


cdef class UserFifos(OpenFile):
    """The send and receive FIFOs mapped into one user process (SP-A18, SP-C02).

    Paths (generators yielding CPU seconds) do the work; the async methods submit
    them to the node's CPU for a process, the way ``libdp``'s calls do, and wait on
    the adapter where a caller would spin (a poll loop, a full send FIFO).
    """

    kind = "TB2 user FIFOs"

    def __init__(self, netdev, proc, pop_every: int):
        super().__init__(netdev.node)
        node = netdev.node
        self.netdev = netdev
        self.proc = proc
        self.adapter = netdev.dev
        self.fifos = HostFifos(node, self.adapter, self, pop_every)
        p = node.profile
        c = node.costs
        self.costs = c
        self.c_send = c.cycles(p["tb2.send_cycles"])
        self.c_recv = c.cycles(p["tb2.recv_cycles"])
        # One poll: flush (invalidate) the head's status line, load it, loop overhead.
        self.c_poll = c.cycles(p["tb2.poll_cycles"]) + p["cache.flush_line_s"] + c.mem_miss
        self.arrivals = WaitQueue(node.engine)
        self.tx_space = WaitQueue(node.engine)
        self.fd = -1
        self.sent = 0
        self.received = 0
        self.polls = 0
        self.empty_polls = 0
        self.closed = False

    def __repr__(self):
        return f"user FIFOs of pid {self.proc.pid}"

    # -- open / close ---------------------------------------------------------------------

    def _open(self) -> None:
        self.fifos.attach()
        # the queues themselves: the adapter wakes them by a C call
        self.adapter.on_rx = self.arrivals
        self.adapter.on_tx_space = self.tx_space

    def release(self, proc) -> None:
        """Last close (or process exit): the card goes back to nobody."""
        if self.closed:
            return
        self.closed = True
        self.fifos.detach()
        self.netdev._user_closed(self)
        self.arrivals.wake()
        self.tx_space.wake()

    def close(self) -> None:
        """Unmap the FIFOs now (the same as closing the fd, without modeled cost)."""
        if self.closed:
            return
        try:
            self.proc.fds.remove(self.fd)
        except OSError:
            pass
        self.release(self.proc)
        self._close_efd()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise OSError(errno.EBADF, "the TB2 FIFOs are closed")

    # -- send ----------------------------------------------------------------------------

    def _check_packet(self, dest, data, route, proto, user):
        if not isinstance(dest, int) or isinstance(dest, bool) or not 0 <= dest <= 0xFFFF:
            raise OSError(errno.EINVAL, f"destination node must be 0..65535, not {dest!r}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise OSError(errno.EFAULT, f"packet data is a bytes-like object, not {type(data).__name__}")
        if len(data) > hw.DATA_MAX:
            raise OSError(errno.EMSGSIZE, f"a TB2 packet carries at most {hw.DATA_MAX} data bytes, not {len(data)}")
        if route is None:
            route = dest % 4                    # the cluster's default route (as in the NART)
        if not isinstance(route, int) or not 0 <= route <= 3:
            raise OSError(errno.EINVAL, f"route must be 0..3 (SP-A11), not {route!r}")
        if not isinstance(proto, int) or not 0 <= proto <= 0xFFFF:
            raise OSError(errno.EINVAL, f"protocol id must be 0..65535, not {proto!r}")
        if len(user) > hw.USER_BYTES:
            raise OSError(errno.EINVAL, f"the user header holds {hw.USER_BYTES} bytes, not {len(user)}")
        return route

    cdef int write_entry(self, Py_ssize_t addr, unsigned int dest, unsigned int route, unsigned int proto,
                          bytes user, bytes data) except -1:
        """Write one send entry; the length-array units it takes (its length byte).

        The header is written in place (every field checked by _check_packet): big-endian
        destination, route, length and protocol, the user bytes, zeros elsewhere."""
        cdef PhysMem mem = self.fifos.mem
        cdef Py_ssize_t n = len(data)
        cdef Py_ssize_t nu = len(user)
        cdef unsigned char* h
        if not span_ok(addr, HDR_BYTES + n, mem.size):
            span_check(addr, HDR_BYTES + n, mem.size, "TB2 send entry")
        h = &mem.buf[addr]
        memset(h, 0, HDR_BYTES)
        h[H_DST] = (dest >> 8) & 0xFF
        h[H_DST + 1] = dest & 0xFF
        h[H_ROUTE] = route & 0xFF
        h[H_LEN] = (n >> 8) & 0xFF
        h[H_LEN + 1] = n & 0xFF
        h[H_PROTO] = (proto >> 8) & 0xFF
        h[H_PROTO + 1] = proto & 0xFF
        if nu:
            memcpy(h + H_USER, <const char*> user, min(nu, USER_BYTES))
        if n:
            memcpy(h + HDR_BYTES, <const char*> data, n)
        return (HDR_BYTES + n + LEN_UNIT - 1) // LEN_UNIT

    def _room_path(self, k: int):
        """Make sure `k` send entries are free; read the adapter's counter only if needed."""
        f = self.fifos
        if k > f.send_count:
            raise OSError(errno.EMSGSIZE, f"{k} packets exceed the {f.send_count}-entry send FIFO")
        if f.free_entries() < k:
            yield self.costs.pci_read           # load the transmit-done counter across the bus
            f.refresh_tx_done()
            if f.free_entries() < k:
                raise WouldBlock(self.tx_space, "TB2 send FIFO full")

    def send_path(self, dest: int, data=b"", route: int | None = None, proto: int = 0, user=b""):
        """Send one packet (SP-C03): entry, flush, sync, one length store."""
        self._check_open()
        route = self._check_packet(dest, data, route, proto, user)
        f = self.fifos
        yield from self._room_path(1)
        idx = f.tx_next % f.send_count
        n = len(data)
        units = self.write_entry(f.send_entry(), dest, route, proto, _as_bytes(user), _as_bytes(data))
        cost = self.c_send + f.flush_cost(hw.HDR_BYTES + n) + f.c_sync + self.costs.pci_write
        if n:
            cost += self.costs.copy(n)
        yield cost
        self.adapter.reg_write(REG_LEN + idx, units, 1)
        f.tx_next = (f.tx_next + 1) & U32
        self.sent += 1
        return n

    def bulk_send_path(self, dest: int, chunks, route: int | None = None, proto: int = 0, user=b""):
        """Send several packets and hand them over with as few length stores as the
        length array's alignment allows (SP-C03: several lengths in one store)."""
        self._check_open()
        chunks = list(chunks)
        if not chunks:
            return 0
        for ch in chunks:
            route = self._check_packet(dest, ch, route, proto, user)
        f = self.fifos
        yield from self._room_path(len(chunks))
        first = f.tx_next % f.send_count
        units, cost = [], f.c_sync
        for k, ch in enumerate(chunks):
            units.append(self.write_entry(f.send_entry(k), dest, route, proto, _as_bytes(user), _as_bytes(ch)))
            cost += self.c_send + f.flush_cost(hw.HDR_BYTES + len(ch)) + (self.costs.copy(len(ch)) if ch else 0.0)
        for off, value, width in f.length_stores(first, units):
            yield cost + self.costs.pci_write
            cost = 0.0
            self.adapter.reg_write(off, value, width)
        f.tx_next = (f.tx_next + len(chunks)) & U32
        self.sent += len(chunks)
        return len(chunks)

    # -- receive -------------------------------------------------------------------------

    def poll_path(self, spun_since: float | None = None):
        """Look at the receive FIFO's head once; the packet, or None (SP-C04).

        `spun_since`: the caller has been spinning on empty polls since that time (the
        end of its last one) and something has just arrived. Where an arrival falls
        in the poll loop is as good as random on the machine (the adapter's timing
        does not follow the host's loop), so the poll that finds it ends, on average,
        half a poll after the arrival -- charged as such, like the i860's notice
        latency, rather than from an exact phase no real run would reproduce.
        """
        cdef HostFifos f = self.fifos
        cdef double cost
        yield self.look(spun_since)
        pkt = self.take()
        if pkt is None:
            return None
        cost = self.rx_cost
        if f.pop_due():
            yield cost + self.costs.pci_write
            cost = 0.0
            f.pop()
        self.received += 1
        yield cost
        return pkt

    # The two halves of a poll, for a caller that inlines `poll_path` in its own path (SP AM's
    # am_poll): `look`, the CPU time of one look at the head; then, that time spent, `take`.

    cdef double look(self, object spun_since) except? -1.0:
        """A poll's look at the head: its cost (counting, after a spin, the empty polls made)."""
        cdef long long spun
        if self.closed:
            self._check_open()
        if spun_since is None:
            return self.c_poll
        spun = <long long> ((self.arrivals.engine.now - <double> spun_since) / self.c_poll) if self.c_poll > 0 else 0
        self.polls += spun
        self.empty_polls += spun
        return 0.5 * self.c_poll

    cdef object take(self):
        """The head entry once the look is spent: the packet (the host's cost of taking it in
        `rx_cost`: the caller spends it, and pops the entries when `fifos.pop_due()`), or None."""
        cdef HostFifos f = self.fifos
        cdef PhysMem mem = f.mem
        cdef Py_ssize_t addr
        cdef unsigned int status, n
        cdef Packet pkt
        self.polls += 1
        addr = f.recv_entry(f.rx_head)
        status = mem.rd32(addr + H_STATUS)
        if not status & RX_VALID_BIT:
            self.empty_polls += 1
            return None
        n = status & 0xFFFF
        if n > DATA_MAX:                         # cannot come from the adapter; never trust it
            n = DATA_MAX
        pkt = Packet.__new__(Packet)
        pkt.src = mem.rd16be(addr + H_SRC)
        pkt.data = mem.read(addr + HDR_BYTES, n)
        pkt.proto = mem.rd16be(addr + H_PROTO)
        pkt.route = mem.buf[addr + H_ROUTE]
        pkt.user = mem.read(addr + H_USER, USER_BYTES)
        f.consume(addr)
        self.rx_cost = self.c_recv + f.flush_cost(HDR_BYTES + n) + (self.costs.copy(n) if n else 0.0)
        return pkt

    # -- async conveniences (a process's view) ---------------------------------------------

    async def send(self, dp, dest: int, data=b"", route: int | None = None, proto: int = 0, user=b"") -> int:
        """Send one packet, waiting (as a spinning sender would) while the FIFO is full."""
        while True:
            try:
                return await dp._submit(self.send_path(dest, data, route, proto, user))
            except WouldBlock as wb:
                await dp._wait(wb.queue)

    async def bulk_send(self, dp, dest: int, chunks, route: int | None = None, proto: int = 0, user=b"") -> int:
        chunks = list(chunks)
        while True:
            try:
                return await dp._submit(self.bulk_send_path(dest, chunks, route, proto, user))
            except WouldBlock as wb:
                await dp._wait(wb.queue)

    async def poll(self, dp):
        """One poll: the packet at the head, or None."""
        return await dp._submit(self.poll_path())

    async def recv(self, dp) -> Packet:
        """Poll until a packet is there (a spin loop; its polls are charged, not simulated one by one)."""
        pkt = await dp._submit(self.poll_path())
        while pkt is None:
            self._check_open()
            since = dp.now()
            await dp._wait(self.arrivals)
            pkt = await dp._submit(self.poll_path(since))
        return pkt

    def stats(self) -> dict:
        out = {"sent": self.sent, "received": self.received, "polls": self.polls, "empty_polls": self.empty_polls}
        out.update(self.fifos.stats())
        return out


def open_fifos(who, pop_every: int | None = None) -> UserFifos:
    """Map the TB2 FIFOs into one process: `who` is a Process, or a Node (a new process on it).

    ENODEV without the tb2 module; EBUSY while DP (or any protocol) runs over the
    card, or while another process has the FIFOs (one user per node, SP-A18).
    """
    from kernelsim import Node
    proc = who.spawn("tb2-user") if isinstance(who, Node) else who
    node = proc.node
    devs = [d for d in node.netdevs.values() if getattr(d, "kind", None) == "tb2"]
    if not devs:
        raise OSError(errno.ENODEV, f"node {node.nid} has no TB2 adapter driven by the tb2 module (modprobe tb2)")
    return devs[0].open_user(proc, pop_every)
