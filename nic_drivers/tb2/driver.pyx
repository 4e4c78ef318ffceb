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
from __future__ import annotations

import errno

from kernelsim import LEVEL_IRQ, WouldBlock
from nic_drivers._nic import NicDriver

from nic_drivers.tb2 import _model as hw
from nic_drivers.tb2.fifos import HostFifos, UserFifos


class Tb2NetDevice(NicDriver):
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
        self.fifos: HostFifos | None = None
        self.user: UserFifos | None = None
        self._owed = 0.0            # a transmit-done read done in tx_reserve, paid at commit

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
        dev.on_tx_space = self.tx_space.wake
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

    def tx_reserve(self) -> int:
        f = self.fifos
        if f is None:
            raise OSError(errno.ENETDOWN, f"{self.name}: no protocol has brought the TB2 up")
        if f.free_entries() <= 0:
            self._owed += self.c.pci_read               # load the transmit-done counter
            f.refresh_tx_done()
            if f.free_entries() <= 0:
                self.tx_busy += 1
                raise WouldBlock(self.tx_space, f"{self.name}: send FIFO full")
        return f.send_entry()

    def write_link_header(self, addr: int, dst_hw: bytes, proto: int) -> None:
        hdr = bytearray(hw.HDR_BYTES)
        hdr[hw.H_DST] = dst_hw[0]
        hdr[hw.H_DST + 1] = dst_hw[1]
        hdr[hw.H_ROUTE] = dst_hw[2] if len(dst_hw) > 2 else 0
        hdr[hw.H_PROTO:hw.H_PROTO + 2] = proto.to_bytes(2, "big")
        self.node.mem.write(addr, bytes(hdr))

    def tx_commit_path(self, payload_bytes: int, pending: float = 0.0):
        f = self.fifos
        if f is None:
            raise OSError(errno.ENETDOWN, f"{self.name}: the TB2 is down")
        if not 0 <= payload_bytes <= hw.DATA_MAX:
            raise OSError(errno.EMSGSIZE, f"{self.name}: {payload_bytes} bytes exceed a TB2 packet's {hw.DATA_MAX}")
        idx = f.tx_next % f.send_count
        addr = f.send_entry()
        mem = self.node.mem
        mem.write(addr + hw.H_LEN, payload_bytes.to_bytes(2, "big"))
        nbytes = hw.HDR_BYTES + payload_bytes
        owed, self._owed = self._owed, 0.0
        yield pending + owed + self.c_entry + f.flush_cost(nbytes) + f.c_sync + self.c.pci_write
        self.dev.reg_write(hw.REG_LEN + idx, (nbytes + hw.LEN_UNIT - 1) // hw.LEN_UNIT, 1)
        f.tx_next = (f.tx_next + 1) & 0xFFFFFFFF
        self.tx_frames += 1
        self.tx_bytes += nbytes

    # -- interrupt ---------------------------------------------------------------------------

    def interrupt_path(self, pending: float = 0.0):
        f = self.fifos
        if f is None:
            return pending
        mem = self.node.mem
        c = self.c
        done = 0
        while True:
            while done < self.budget:
                addr = f.recv_entry(f.rx_head)
                yield pending + c.mem_miss              # the status line: DMA'd, not in the cache
                pending = 0.0
                status = mem.rd32(addr + hw.H_STATUS)
                if not status & hw.RX_VALID:
                    break
                n = status & 0xFFFF
                if n > hw.DATA_MAX:
                    self.rx_errors += 1
                    n = 0
                else:
                    pending = yield from self.deliver_path(mem.rd16be(addr + hw.H_PROTO), addr + hw.HDR_BYTES, n)
                f.consume(addr)
                pending += self.c_entry + f.flush_cost(hw.HDR_BYTES + n)
                done += 1
                if f.pop_due():
                    yield pending + c.pci_write
                    pending = 0.0
                    f.pop()
            else:
                return pending + self.c_isr             # budget spent: still pending, we come back
            if self.holdoff_s > 0 and done >= 2:
                # A backlog: packets come faster than one interrupt each can take
                # (receive livelock). Mask arrivals for a while instead of
                # acknowledging; they wait in the FIFO and are taken in one batch when
                # the holdoff timer unmasks (the status bit is still set then).
                yield pending + self.c_isr + c.pci_write
                self.dev.reg_write(hw.REG_INT_ENABLE, 0, 4)
                self.holdoffs += 1
                self._holdoff_ev = self.node.engine.after(self.holdoff_s, self._holdoff_expired, None)
                return 0.0
            # Empty: acknowledge, then look again for a packet that raced the acknowledgement.
            yield pending + self.c_isr + c.pci_write
            pending = 0.0
            self.dev.reg_write(hw.REG_INT_STATUS, hw.INT_RX, 4)
            yield c.mem_miss
            if not mem.rd32(f.recv_entry(f.rx_head) + hw.H_STATUS) & hw.RX_VALID:
                return 0.0

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
