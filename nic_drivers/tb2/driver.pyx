# cython: language_level=3, annotation_typing=False, binding=True
"""The TB2 driver: the kernel side, so that DP runs over the SP switch.

The standard TB2 firmware serves one client of its FIFOs per node (SP-A18). The
driver registers a network device (``tb0``) at load, but takes the FIFOs only when a
protocol attaches to it -- DP's module does at its own load -- and gives them back
when the last one detaches, like an interface going up and down. While the kernel
has them, a user process asking for them gets EBUSY; while a user process has them,
loading DP fails with EBUSY. Unload DP to run raw FIFO programs, and the other way
round.

Transmit: DP builds its frame straight in the next send-FIFO entry (`tx_reserve`
gives its address; the 32-byte TB2 header is the link header and carries DP's
protocol id); `tx_commit_path` flushes the entry's cache lines, syncs, and stores its
length into the packet-length array: one MicroChannel access (SP-C03).

Receive: the kernel cannot spin, so the driver enables the adapter's arrival
interrupt (SP-A39: there, but not used by SP AM). The handler walks the receive FIFO
in host memory, hands each packet to its protocol, clears and flushes each entry,
pops lazily, then acknowledges the interrupt and looks once more for a packet that
raced the acknowledgement. A handler that spends its budget leaves the interrupt
pending, so the level-triggered line brings it back.
"""
import errno

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from libc.string cimport memset
from kernelsim._node cimport Costs
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from kernelsim._path cimport Path, reuse, spent
from kernelsim._netdev cimport RxWalk
from nic_drivers._nic cimport NicDriver
from nic_drivers.tb2._model cimport RX_VALID_BIT, Tb2Adapter
from nic_drivers.tb2.fifos cimport HostFifos
from kernelsim import LEVEL_IRQ, WouldBlock

from nic_drivers.tb2 import _model as hw
from nic_drivers.tb2.fifos import HostFifos, UserFifos

# The header layout and registers the per-packet paths use, as C constants (checked
# against the model's Python names below, as fifos.pyx does).
DEF HDR_BYTES = 32
DEF H_DST = 0
DEF H_ROUTE = 2
DEF H_LEN = 6
DEF H_PROTO = 8
DEF H_STATUS = 28
DEF DATA_MAX = 224
DEF LEN_UNIT = 4
DEF REG_LEN = 0x000
DEF REG_INT_ENABLE = 0x408
DEF REG_INT_STATUS = 0x40C
DEF INT_RX = 1
assert (hw.HDR_BYTES, hw.H_DST, hw.H_ROUTE, hw.H_LEN, hw.H_PROTO, hw.H_STATUS, hw.DATA_MAX, hw.LEN_UNIT,
        hw.RX_VALID, hw.REG_LEN, hw.REG_INT_ENABLE, hw.REG_INT_STATUS, hw.INT_RX) == \
    (HDR_BYTES, H_DST, H_ROUTE, H_LEN, H_PROTO, H_STATUS, DATA_MAX, LEN_UNIT,
     RX_VALID_BIT, REG_LEN, REG_INT_ENABLE, REG_INT_STATUS, INT_RX)


cdef class Tb2NetDevice(NicDriver):
    # What the per-packet paths read, typed.
    cdef public int pop_every, budget
    cdef public double holdoff_s, c_entry
    cdef public long long holdoffs
    cdef public HostFifos fifos
    cdef public object user
    cdef public double _owed            # a transmit-done read done in tx_reserve, paid at commit

    kind = "tb2"
    link_header_bytes = hw.HDR_BYTES
    max_payload = hw.DATA_MAX
    driver_module = "tb2"

    def __init__(self, node, dev, name, *, pop_every: int, budget: int, irq_holdoff_us: float = 0.0):
        super().__init__(node, dev, name, dev.hwaddr, desc_cycles=None, isr_cycles="tb2.isr_cycles")
        self.pop_every = pop_every
        self.budget = budget
        self.holdoff_s = irq_holdoff_us * 1e-6
        self._holdoff_ev = -1
        self.holdoffs = 0
        self.c_entry = self.cycles("tb2.entry_cycles")
        self.fifos = None
        self.user = None
        self._owed = 0.0

    def __repr__(self):
        return f"the kernel ({self.name}: {', '.join(f'{p:#x}' for p in self.protocols) or 'no protocol'})"

    # -- up and down with the protocols attached -----------------------------------------

    def add_protocol(self, proto: int, handler) -> None:
        if proto in self.protocols:
            raise OSError(errno.EEXIST, f"{self.name}: protocol {proto:#x} already has a handler")
        if not self.protocols:
            self._bring_up()
        super().add_protocol(proto, handler)

    def remove_protocol(self, proto: int) -> None:
        super().remove_protocol(proto)
        if not self.protocols and self.fifos is not None:
            self._bring_down()

    def _bring_up(self) -> None:
        if self.user is not None:
            raise OSError(errno.EBUSY, f"{self.name}: the TB2 FIFOs are mapped by user process "
                                       f"{self.user.proc.pid} (one client per node, SP-A18); close them first")
        fifos = HostFifos(self.node, self.dev, self, self.pop_every)
        fifos.attach()                                  # EBUSY if anyone else holds the card
        try:
            self.attach_irq()
        except BaseException:
            fifos.detach()
            raise
        self.fifos = fifos
        dev = self.dev
        dev.on_tx_space = getattr(self.tx_space, "wake")     # the bound method (a C method would need converting)
        dev.reg_write(hw.REG_INT_ENABLE, hw.INT_RX, 4)

    def _bring_down(self) -> None:
        dev = self.dev
        if self._holdoff_ev >= 0:
            self.node.engine.cancel(self._holdoff_ev)
            self._holdoff_ev = -1
        dev.reg_write(hw.REG_INT_ENABLE, 0, 4)
        self.release_resources()
        if self.fifos is not None:
            self.fifos.detach()
            self.fifos = None
        self._owed = 0.0
        self.tx_space.wake()

    def stop(self) -> None:
        """Module unload: whatever is still up goes down."""
        if self.fifos is not None:
            self._bring_down()
        self.protocols.clear()

    # -- the user-level FIFOs ---------------------------------------------------------------

    def open_user(self, proc, pop_every: int | None = None) -> UserFifos:
        if self.protocols:
            raise OSError(errno.EBUSY, f"{self.name}: the kernel runs {', '.join(f'{p:#x}' for p in self.protocols)} "
                                       "over the TB2 FIFOs (rmmod dp first: one client per node, SP-A18)")
        if self.user is not None:
            raise OSError(errno.EBUSY, f"{self.name}: the TB2 FIFOs are already mapped by process "
                                       f"{self.user.proc.pid} (one user process per node, SP-A18)")
        k = self.pop_every if pop_every is None else pop_every
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise OSError(errno.EINVAL, f"pop_every must be a positive int, not {k!r}")
        uf = UserFifos(self, proc, k)
        try:
            uf._open()
        except BaseException:
            uf._close_efd()
            raise
        self.user = uf
        self.node.modules.module_get("tb2")             # the card's driver stays while it is mapped
        uf.fd = proc.fds.install(uf)
        return uf

    def _user_closed(self, uf: UserFifos) -> None:
        if self.user is uf:
            self.user = None
            self.node.modules.module_put("tb2")

    # -- transmit --------------------------------------------------------------------------

    # NetDevice's transmit interface (DP calls it by C; its Python-level tx_reserve,
    # write_link_header and tx_commit_path call these).

    cdef Py_ssize_t tx_buffer(self) except -1:
        cdef HostFifos f = self.fifos
        if f is None:
            raise OSError(errno.ENETDOWN, f"{self.name}: no protocol has brought the TB2 up")
        if f.free_entries() <= 0:
            self._owed += self.c.pci_read               # load the transmit-done counter
            f.refresh_tx_done()
            if f.free_entries() <= 0:
                self.tx_busy += 1
                raise WouldBlock(self.tx_space, f"{self.name}: send FIFO full")
        return f.send_entry()

    cdef Py_ssize_t tx_header(self, Py_ssize_t addr, object dst_hw, int proto) except -1:
        """The 32-byte TB2 header: destination node, route, link protocol; the rest zero."""
        cdef PhysMem mem = self.host_mem
        cdef const unsigned char* d
        cdef unsigned char* h
        cdef Py_ssize_t n
        if not 0 <= proto <= 0xFFFF:
            raise OverflowError(f"link protocol {proto} does not fit the header's 2 bytes")
        if not span_ok(addr, HDR_BYTES, mem.size):
            span_check(addr, HDR_BYTES, mem.size, "physical memory")
        h = &mem.buf[addr]
        if PyBytes_CheckExact(dst_hw):
            n = PyBytes_GET_SIZE(dst_hw)
            if n < 2:
                dst_hw[1]                               # the IndexError a short address gave
            d = <const unsigned char*> PyBytes_AS_STRING(dst_hw)
            memset(h, 0, HDR_BYTES)
            h[H_DST] = d[0]
            h[H_DST + 1] = d[1]
            h[H_ROUTE] = d[2] if n > 2 else 0
        else:
            b0, b1, b2 = dst_hw[0], dst_hw[1], (dst_hw[2] if len(dst_hw) > 2 else 0)
            memset(h, 0, HDR_BYTES)
            h[H_DST] = b0
            h[H_DST + 1] = b1
            h[H_ROUTE] = b2
        h[H_PROTO] = (proto >> 8) & 0xFF
        h[H_PROTO + 1] = proto & 0xFF
        return addr + HDR_BYTES

    cdef object tx_commit(self, Py_ssize_t payload_bytes, double pending):
        """Hand the packet to the adapter: `_Tb2Commit` (a C state machine), for reading::

            f = self.fifos
            if f is None:
                raise OSError(errno.ENETDOWN, ...)
            if not 0 <= payload_bytes <= DATA_MAX:
                raise OSError(errno.EMSGSIZE, ...)
            idx = f.tx_next % f.send_count
            addr = f.send_entry()
            mem.write(addr + H_LEN, payload_bytes.to_bytes(2, "big"))
            nbytes = HDR_BYTES + payload_bytes
            owed, self._owed = self._owed, 0.0
            yield pending + owed + self.c_entry + f.flush_cost(nbytes) + f.c_sync + self.c.pci_write
            self.dev.reg_write(REG_LEN + idx, (nbytes + LEN_UNIT - 1) // LEN_UNIT, 1)
            f.tx_next = (f.tx_next + 1) & 0xFFFFFFFF
            self.tx_frames += 1
            self.tx_bytes += nbytes
        """
        cdef _Tb2Commit path = _Tb2Commit.__new__(_Tb2Commit)
        path.nd = self
        path.payload_bytes = payload_bytes
        path.pending = pending
        return path

    # -- interrupt ---------------------------------------------------------------------------

    def interrupt_path(self, double pending=0.0):
        """The interrupt handler's path (`_Tb2Irq`: the generator it is, for reading)."""
        return self.irq_path(pending)

    cdef object irq_path(self, double pending):
        # The interrupt controller's C call for `interrupt_path` (the default is a Python
        # call of it, with `pending` as a float object); the path is a spare when one is free.
        cdef _Tb2Irq path = <_Tb2Irq> reuse(_irqs, _Tb2Irq)
        path.value = None
        path.proto_path = None
        path.state = IRQ_START
        path.done = path.addr = path.n = 0
        path.nd = self
        path.f = self.fifos
        path.pending = pending
        return path

    def _holdoff_expired(self, _) -> None:
        """The kernel timer that ends a holdoff: a short interrupt-level path unmasks."""
        self._holdoff_ev = -1
        if self.fifos is not None:
            self.node.cpu.submit(LEVEL_IRQ, self._unmask_path(), self._unmasked)

    def _unmask_path(self):
        yield self.c.irq_entry + self.c_isr + self.c.pci_write
        if self.fifos is not None:
            self.dev.reg_write(hw.REG_INT_ENABLE, hw.INT_RX, 4)
        yield self.c.irq_exit

    @staticmethod
    def _unmasked(value, exc) -> None:
        if exc is not None:
            raise exc

    def stats(self) -> dict:
        out = super().stats()
        out.update(up=self.fifos is not None, irq=self.irq_line, irq_holdoffs=self.holdoffs,
                   user=None if self.user is None else self.user.proc.pid,
                   fifos=None if self.fifos is None else self.fifos.stats(), device=self.dev.stats())
        return out


cdef class _Tb2Commit(Path):
    """`Tb2NetDevice.tx_commit_path` (its docstring has the generator it replaces)."""
    cdef Tb2NetDevice nd
    cdef HostFifos f
    cdef Py_ssize_t payload_bytes, idx, nbytes
    cdef double pending
    cdef int state

    cdef int step(self, double* cost) except -1:
        cdef Tb2NetDevice nd = self.nd
        cdef HostFifos f
        cdef PhysMem mem
        cdef Py_ssize_t addr
        cdef double owed
        if self.state == 0:
            self.state = 2                              # an error below ends the path
            f = nd.fifos
            if f is None:
                raise OSError(errno.ENETDOWN, f"{nd.name}: the TB2 is down")
            if not 0 <= self.payload_bytes <= DATA_MAX:
                raise OSError(errno.EMSGSIZE, f"{nd.name}: {self.payload_bytes} bytes exceed a TB2 packet's {DATA_MAX}")
            self.f = f
            self.idx = f.tx_next % f.send_count
            addr = f.send_entry()
            mem = f.mem
            if not span_ok(addr + H_LEN, 2, mem.size):
                span_check(addr + H_LEN, 2, mem.size, "physical memory")
            mem.buf[addr + H_LEN] = (self.payload_bytes >> 8) & 0xFF
            mem.buf[addr + H_LEN + 1] = self.payload_bytes & 0xFF
            self.nbytes = HDR_BYTES + self.payload_bytes
            owed = nd._owed
            nd._owed = 0.0
            cost[0] = self.pending + owed + nd.c_entry + f.flush_cost(self.nbytes) + f.c_sync + nd.c.pci_write
            self.state = 1
            if not spent(cost[0]):
                return 1
        if self.state == 1:
            self.state = 2
            f = self.f
            self.f = None
            (<Tb2Adapter> nd.dev).reg_write(REG_LEN + self.idx, (self.nbytes + LEN_UNIT - 1) // LEN_UNIT, 1)
            f.tx_next += 1                      # (a C unsigned int: mod 2**32, no Python `& 0xFFFFFFFF`)
            nd.tx_frames += 1
            nd.tx_bytes += self.nbytes
        self.value = None
        return 0


cdef list _irqs = [None] * 4        # spare interrupt paths (`kernelsim._path.reuse`)


# The interrupt path's instants (`_Tb2Irq.state`): where it goes on after a yield.
cdef enum:
    IRQ_START           # not started
    RX_TOP              # the walk's loop: the next entry, or the budget is spent
    RX_STATUS           # the memory miss is spent: read the entry's status line
    RX_PROTO            # a protocol's path runs
    RX_POP              # the MicroChannel store's time is spent: pop
    IRQ_EMPTY           # the FIFO looked empty: hold off, or acknowledge
    IRQ_HOLDOFF         # the store's time is spent: mask arrivals, start the timer
    IRQ_ACK             # the store's time is spent: acknowledge
    IRQ_RECHECK         # the memory miss is spent: look once more
    IRQ_OVER


cdef class _Tb2Irq(RxWalk):
    """The TB2 driver's interrupt path as a C state machine: the generator it replaces,
    for reading (`Path`, kernelsim/_path.pyx, says why)::

        def interrupt_path(self, pending=0.0):
            f = self.fifos
            if f is None:
                return pending
            done = 0
            while True:
                while done < self.budget:
                    addr = f.recv_entry(f.rx_head)
                    yield pending + c.mem_miss          # the status line: DMA'd, not in the cache
                    pending = 0.0
                    status = mem.rd32(addr + H_STATUS)
                    if not status & RX_VALID_BIT:
                        break
                    n = status & 0xFFFF
                    if n > DATA_MAX:
                        self.rx_errors += 1
                        n = 0
                    else:
                        pending = yield from self.deliver_path(mem.rd16be(addr + H_PROTO), addr + HDR_BYTES, n)
                    f.consume(addr)
                    pending += self.c_entry + f.flush_cost(HDR_BYTES + n)
                    done += 1
                    if f.pop_due():
                        yield pending + c.pci_write
                        pending = 0.0
                        f.pop()
                else:
                    return pending + self.c_isr         # budget spent: still pending, we come back
                if self.holdoff_s > 0 and done >= 2:
                    # A backlog: packets come faster than one interrupt each can take
                    # (receive livelock). Mask arrivals for a while instead of
                    # acknowledging; they wait in the FIFO and are taken in one batch when
                    # the holdoff timer unmasks (the status bit is still set then).
                    yield pending + self.c_isr + c.pci_write
                    self.dev.reg_write(REG_INT_ENABLE, 0, 4)
                    self.holdoffs += 1
                    self._holdoff_ev = self.node.engine.after(self.holdoff_s, self._holdoff_expired, None)
                    return 0.0
                # Empty: acknowledge, then look again for a packet that raced the acknowledgement.
                yield pending + self.c_isr + c.pci_write
                pending = 0.0
                self.dev.reg_write(REG_INT_STATUS, INT_RX, 4)
                yield c.mem_miss
                if not mem.rd32(f.recv_entry(f.rx_head) + H_STATUS) & RX_VALID_BIT:
                    return 0.0

    A protocol registered as an `RxHandler` (DP's MDR) is handed its packet by a C call
    (`NetDevice.hand_over`). A segment the walking CPU can spend in place goes on at once
    (`kernelsim._path.spent`) instead of yielding up through the line's `_IrqPath`.
    """
    cdef Tb2NetDevice nd
    cdef HostFifos f
    cdef int state
    cdef Py_ssize_t done                # packets taken (of nd.budget)
    cdef Py_ssize_t addr, n             # the entry being taken, its data bytes

    cdef int step(self, double* cost) except -1:
        cdef Tb2NetDevice nd = self.nd
        cdef HostFifos f = self.f
        cdef Costs c = nd.c
        cdef PhysMem mem
        cdef unsigned int status
        while True:
            if self.state == RX_TOP:
                if self.done < nd.budget:
                    self.addr = f.recv_entry(f.rx_head)
                    cost[0] = self.pending + c.mem_miss     # the status line: DMA'd, not in the cache
                    self.state = RX_STATUS
                    if not spent(cost[0]):
                        return 1
                    continue
                self.state = IRQ_OVER
                self.value = self.pending + nd.c_isr        # budget spent: still pending, we come back
                return 0
            elif self.state == RX_STATUS:
                self.pending = 0.0
                mem = f.mem
                status = mem.rd32(self.addr + H_STATUS)
                if not status & RX_VALID_BIT:
                    self.state = IRQ_EMPTY
                    continue
                self.n = status & 0xFFFF
                if self.n > DATA_MAX:
                    nd.rx_errors += 1
                    self.n = 0
                elif self.give_frame(nd, mem.rd16be(self.addr + H_PROTO), self.addr + HDR_BYTES, self.n):
                    self.state = RX_PROTO
                    continue
                if self._taken(cost) and not spent(cost[0]):
                    return 1
            elif self.state == RX_PROTO:
                if self.step_proto(cost):
                    return 1
                if self._taken(cost) and not spent(cost[0]):
                    return 1
            elif self.state == RX_POP:
                self.pending = 0.0
                f.pop()
                self.state = RX_TOP
            elif self.state == IRQ_EMPTY:
                cost[0] = self.pending + nd.c_isr + c.pci_write
                if nd.holdoff_s > 0 and self.done >= 2:
                    self.state = IRQ_HOLDOFF
                else:
                    self.state = IRQ_ACK
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_HOLDOFF:
                (<Tb2Adapter> nd.dev).reg_write(REG_INT_ENABLE, 0, 4)
                nd.holdoffs += 1
                nd._holdoff_ev = nd.node.engine.after(nd.holdoff_s, nd._holdoff_expired, None)
                self.state = IRQ_OVER
                self.value = 0.0
                return 0
            elif self.state == IRQ_ACK:
                self.pending = 0.0
                (<Tb2Adapter> nd.dev).reg_write(REG_INT_STATUS, INT_RX, 4)
                cost[0] = c.mem_miss
                self.state = IRQ_RECHECK
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_RECHECK:
                if not f.mem.rd32(f.recv_entry(f.rx_head) + H_STATUS) & RX_VALID_BIT:
                    self.state = IRQ_OVER
                    self.value = 0.0
                    return 0
                self.state = RX_TOP
            elif self.state == IRQ_START:
                if f is None:
                    self.state = IRQ_OVER
                    self.value = self.pending
                    return 0
                self.state = RX_TOP
            else:
                raise AssertionError(f"interrupt path in state {self.state}")

    cdef int _taken(self, double* cost) except -1:
        """The entry is consumed; 1 if a pop is due (its store's time in `cost[0]`)."""
        cdef Tb2NetDevice nd = self.nd
        cdef HostFifos f = self.f
        f.consume(self.addr)
        self.pending += nd.c_entry + f.flush_cost(HDR_BYTES + self.n)
        self.done += 1
        if f.pop_due():
            cost[0] = self.pending + nd.c.pci_write
            self.state = RX_POP
            return 1
        self.state = RX_TOP
        return 0
