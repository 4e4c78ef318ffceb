"""The DEC 21140 driver: the kernel side, in the manner of Linux's ``tulip``.

Open sets up the descriptor rings in physical memory (32 transmit entries, 128
receive entries with 1536-byte buffers: HW-21140's Linux driver practice), writes
the bus mode, list bases, interrupt mask and operating mode, and takes an IRQ line.
Transmit fills the next descriptor's buffer (the protocol writes the frame there
itself), sets the length with FS|LS, asks for an interrupt only at the half-ring
point, near full and at the ring's end, sets OWN last and writes the poll demand.
The interrupt handler acknowledges CSR5 by writing it back and loops with a work
budget: receive ring walk (each frame to its protocol, buffer handed back), then
transmit reclaim. Failures unwind in reverse.
"""
from __future__ import annotations

from kernelsim import NetDevice

from nic_drivers.dec21140 import _model as hw

RX_BUF_BYTES = 1536
ETH_HLEN = 14
FCS = 4


class TulipNetDevice(NetDevice):
    kind = "ether"
    link_header_bytes = ETH_HLEN
    max_payload = RX_BUF_BYTES - ETH_HLEN - FCS
    driver_module = "dec21140"

    def __init__(self, node, dev, name, *, tx_ring, rx_ring, budget, store_forward, burst_longwords):
        super().__init__(node, name, dev.hwaddr)
        self.dev = dev
        self.ntx = tx_ring
        self.nrx = rx_ring
        self.budget = budget
        self.store_forward = store_forward
        self.pbl = burst_longwords
        c = node.costs
        p = node.profile
        self.c = c
        self.c_desc = c.cycles(p["drv.desc_cycles"])
        self.c_isr = c.cycles(p["drv.isr_cycles"])
        self.cur_tx = self.dirty_tx = 0
        self.cur_rx = 0

    # -- open / stop (probe and unwind) ---------------------------------------------------

    def open(self) -> None:
        mem = self.node.mem
        try:
            self.rx_ring = self.alloc(16 * self.nrx)
            self.rx_bufs = [self.alloc(RX_BUF_BYTES) for _ in range(self.nrx)]
            for i, buf in enumerate(self.rx_bufs):
                d = self.rx_ring + 16 * i
                mem.wr32(d + 4, RX_BUF_BYTES | (hw.RDES1_RER if i == self.nrx - 1 else 0))
                mem.wr32(d + 8, buf)
                mem.wr32(d, hw.OWN)
            self.tx_ring = self.alloc(16 * self.ntx)
            self.tx_bufs = [self.alloc(RX_BUF_BYTES) for _ in range(self.ntx)]
            for i, buf in enumerate(self.tx_bufs):
                d = self.tx_ring + 16 * i
                mem.wr32(d + 4, hw.TDES1_TER if i == self.ntx - 1 else 0)
                mem.wr32(d + 8, buf)
            self.take_irq()
        except BaseException:
            self.stop()
            raise
        dev = self.dev
        dev.irq_sink = self.set_irq
        dev.csr_write(0, (self.pbl & 0x3F) << 8)
        dev.csr_write(3, self.rx_ring)
        dev.csr_write(4, self.tx_ring)
        dev.csr_write(7, hw.TI | hw.RI | hw.RU | hw.TPS | hw.UNF | hw.FBE | hw.NIS | hw.AIS)
        dev.csr_write(6, hw.SR | hw.ST | (hw.SF if self.store_forward else 0) | (1 << 9))
        self._load_address_filter()

    def _load_address_filter(self) -> None:
        """Queue a setup frame: the 21140 receives unicast only for addresses it was given.

        Sixteen perfect-filter entries of three longwords, two address bytes in the low
        half of each (HW-21140); ours first, broadcast in every other entry.
        """
        mem = self.node.mem
        buf = self.tx_bufs[0]
        for i, mac in enumerate([self.hwaddr] + [b"\xff" * 6] * 15):
            for w in range(3):
                mem.wr32(buf + 12 * i + 4 * w, int.from_bytes(mac[2 * w:2 * w + 2], "little"))
        mem.wr32(self.tx_ring + 4, hw.TDES1_SET | 192 | (hw.TDES1_TER if self.ntx == 1 else 0))
        mem.wr32(self.tx_ring, hw.OWN)
        self.cur_tx += 1
        self.dev.csr_write(1, 0)

    def stop(self) -> None:
        self.dev.csr_write(6, 0)
        self.dev.csr_write(7, 0)
        self.dev.irq_sink = None
        self.release_resources()

    # -- transmit ----------------------------------------------------------------------

    tx_reserve = NetDevice.ring_reserve

    def write_link_header(self, addr: int, dst_hw: bytes, proto: int) -> None:
        self.node.mem.write(addr, dst_hw + self.hwaddr + proto.to_bytes(2, "big"))

    def tx_commit_path(self, payload_bytes: int, pending: float = 0.0):
        mem = self.node.mem
        yield pending + self.c_desc + self.c.pci_write
        entry = self.cur_tx % self.ntx
        d = self.tx_ring + 16 * entry
        length = ETH_HLEN + payload_bytes
        flags = hw.TDES1_FS | hw.TDES1_LS | length
        queued = self.cur_tx - self.dirty_tx
        if queued == self.ntx // 2 or queued >= self.ntx - 2:
            flags |= hw.TDES1_IC
        if entry == self.ntx - 1:
            flags |= hw.TDES1_TER | hw.TDES1_IC
        mem.wr32(d + 4, flags)
        mem.wr32(d, hw.OWN)                      # OWN last: the descriptor is the NIC's now
        self.cur_tx += 1
        self.tx_frames += 1
        self.tx_bytes += length
        self.dev.csr_write(1, 0)                 # transmit poll demand

    # -- interrupt -----------------------------------------------------------------------

    # Interrupt paths carry `pending`: CPU time spent since the last device access,
    # yielded just before the next one, so that each register access happens at its
    # modeled time without an engine event for every stretch of plain code.

    def interrupt_path(self, pending: float = 0.0):
        dev = self.dev
        c = self.c
        for _ in range(self.budget):
            yield pending + c.pci_read
            csr5 = dev.csr_read(5)
            if not csr5 & (hw.NIS | hw.AIS):
                return 0.0
            yield c.pci_write
            dev.csr_write(5, csr5 & 0x0001FFFF)  # acknowledge what we saw
            pending = self.c_isr
            if csr5 & (hw.RI | hw.RU):
                pending = yield from self._rx_path(pending)
                if csr5 & hw.RU:
                    yield pending + c.pci_write
                    pending = 0.0
                    dev.csr_write(2, 0)          # buffers are back: receive poll demand
            pending += self._tx_reclaim()
        return pending

    def _rx_path(self, pending):
        mem = self.node.mem
        c = self.c
        give_back = -1
        for _ in range(self.nrx):
            i = self.cur_rx % self.nrx
            d = self.rx_ring + 16 * i
            yield pending + c.mem_miss           # the NIC wrote it: not in the cache
            pending = 0.0
            if give_back >= 0:
                mem.wr32(give_back, hw.OWN)      # the last buffer goes back to the NIC
                give_back = -1
            des0 = mem.rd32(d)
            if des0 & hw.OWN:
                return pending
            flen = ((des0 >> 16) & 0x3FFF) - FCS
            if des0 & hw.RDES0_ES or (des0 & (hw.RDES0_FS | hw.RDES0_LS)) != (hw.RDES0_FS | hw.RDES0_LS) \
                    or flen < ETH_HLEN:
                self.rx_errors += 1
            else:
                buf = self.rx_bufs[i]
                pending = yield from self.deliver_path(mem.rd16be(buf + 12), buf + ETH_HLEN, flen - ETH_HLEN)
            give_back = d
            self.cur_rx += 1
            pending += self.c_desc
        if give_back >= 0:
            yield pending
            pending = 0.0
            mem.wr32(give_back, hw.OWN)
        return pending

    def _tx_reclaim(self) -> float:
        """Free the transmit descriptors the NIC is done with; return the time it took."""
        mem = self.node.mem
        freed = 0
        while self.dirty_tx < self.cur_tx:
            d = self.tx_ring + 16 * (self.dirty_tx % self.ntx)
            if mem.rd32(d) & hw.OWN:
                break
            self.dirty_tx += 1
            freed += 1
        if freed:
            self.tx_space.wake()
        return self.c_desc * freed

    def stats(self) -> dict:
        out = super().stats()
        out.update(tx_ring=self.ntx, rx_ring=self.nrx, tx_queued=self.cur_tx - self.dirty_tx,
                   irq=self.irq_line, device=self.dev.stats())
        return out
