# cython: language_level=3, annotation_typing=False
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

The per-frame paths (transmit commit, interrupt, receive walk, reclaim) reach the card
and physical memory through typed C calls; set-up and tear-down stay plain.
"""
from kernelsim._node cimport Costs
from kernelsim._physmem cimport PhysMem
from kernelsim._waits cimport WaitQueue
from nic_drivers._nic cimport NicDriver
from kernelsim import WouldBlock

from nic_drivers.dec21140 import _model as hw
from nic_drivers.dec21140._model cimport Dec21140

cdef unsigned int OWN = 1u << 31
cdef unsigned int NIS = 1u << 16
cdef unsigned int AIS = 1u << 15
cdef unsigned int RI = 1u << 6
cdef unsigned int RU = 1u << 7
cdef unsigned int RDES0_FS = 1u << 9
cdef unsigned int RDES0_LS = 1u << 8
cdef unsigned int RDES0_ES = 1u << 15
cdef unsigned int TDES1_IC = 1u << 31
cdef unsigned int TDES1_LS = 1u << 30
cdef unsigned int TDES1_FS = 1u << 29
cdef unsigned int TDES1_TER = 1u << 25

RX_BUF_BYTES = 1536
ETH_HLEN = 14
FCS = 4


cdef class TulipNetDevice(NicDriver):
    # The rings and the knobs every frame reads: typed fields, not the instance dict.
    cdef public Py_ssize_t ntx, nrx, budget, pbl, tx_ring, rx_ring
    cdef public bint store_forward
    cdef public list tx_bufs, rx_bufs
    cdef bytes _hdr_dst, _hdr               # the last link header built (a ping-pong's only one)
    cdef int _hdr_proto

    kind = "ether"
    link_header_bytes = ETH_HLEN
    max_payload = RX_BUF_BYTES - ETH_HLEN - FCS
    driver_module = "dec21140"

    def __init__(self, node, dev, name, *, tx_ring, rx_ring, budget, store_forward, burst_longwords):
        super().__init__(node, dev, name, dev.hwaddr)
        self.ntx = tx_ring
        self.nrx = rx_ring
        self.budget = budget
        self.store_forward = store_forward
        self.pbl = burst_longwords

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
            self.attach_irq()
        except BaseException:
            self.stop()
            raise
        dev = self.dev
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
        self.detach_irq()
        self.release_resources()

    # -- transmit ----------------------------------------------------------------------

    def tx_reserve(self):
        """The next free transmit buffer, or WouldBlock when the ring is full
        (`NetDevice.ring_reserve`, on typed fields)."""
        if self.cur_tx - self.dirty_tx >= self.ntx:
            self.tx_busy += 1
            raise WouldBlock(self.tx_space, f"{self.name}: transmit ring full")
        return self.tx_bufs[self.cur_tx % self.ntx]

    def write_link_header(self, Py_ssize_t addr, dst_hw, int proto) -> None:
        # Destination, our address, EtherType: built once per destination and reused.
        if self._hdr is None or proto != self._hdr_proto or dst_hw != self._hdr_dst:
            self._hdr = bytes(dst_hw) + bytes(self.hwaddr) + proto.to_bytes(2, "big")
            self._hdr_dst = bytes(dst_hw)
            self._hdr_proto = proto
        (<PhysMem> self.node.mem).write(addr, self._hdr)

    def tx_commit_path(self, Py_ssize_t payload_bytes, double pending=0.0):
        cdef PhysMem mem = self.node.mem
        cdef Dec21140 dev = self.dev
        cdef Py_ssize_t ntx = self.ntx, entry, d, length, queued
        cdef unsigned int flags
        yield pending + self.c_desc + (<Costs> self.c).pci_write
        entry = self.cur_tx % ntx
        d = self.tx_ring + 16 * entry
        length = ETH_HLEN + payload_bytes
        flags = TDES1_FS | TDES1_LS | <unsigned int> length
        queued = self.cur_tx - self.dirty_tx
        if queued == ntx // 2 or queued >= ntx - 2:
            flags |= TDES1_IC
        if entry == ntx - 1:
            flags |= TDES1_TER | TDES1_IC
        mem.wr32(d + 4, flags)
        mem.wr32(d, OWN)                         # OWN last: the descriptor is the NIC's now
        self.cur_tx += 1
        self.tx_frames += 1
        self.tx_bytes += length
        dev.csr_write(1, 0)                      # transmit poll demand

    # -- interrupt -----------------------------------------------------------------------

    # Interrupt paths carry `pending`: CPU time spent since the last device access,
    # yielded just before the next one, so that each register access happens at its
    # modeled time without an engine event for every stretch of plain code.

    def interrupt_path(self, double pending=0.0):
        cdef Dec21140 dev = self.dev
        cdef unsigned int csr5
        cdef double pci_read = (<Costs> self.c).pci_read, pci_write = (<Costs> self.c).pci_write
        cdef int i
        for i in range(self.budget):
            yield pending + pci_read
            csr5 = dev.csr_read(5)
            if not csr5 & (NIS | AIS):
                return 0.0
            yield pci_write
            dev.csr_write(5, csr5 & 0x0001FFFF)  # acknowledge what we saw
            pending = self.c_isr
            if csr5 & (RI | RU):
                pending = yield from self._rx_path(pending)
                if csr5 & RU:
                    yield pending + pci_write
                    pending = 0.0
                    dev.csr_write(2, 0)          # buffers are back: receive poll demand
            pending += self._tx_reclaim()
        return pending

    def _rx_path(self, double pending):
        cdef PhysMem mem = self.node.mem
        cdef double mem_miss = (<Costs> self.c).mem_miss, c_desc = self.c_desc
        cdef Py_ssize_t nrx = self.nrx, d, give_back = -1, flen, buf, i
        cdef unsigned int des0
        cdef int k
        cdef list rx_bufs = self.rx_bufs
        for k in range(nrx):
            i = self.cur_rx % nrx
            d = self.rx_ring + 16 * i
            yield pending + mem_miss             # the NIC wrote it: not in the cache
            pending = 0.0
            if give_back >= 0:
                mem.wr32(give_back, OWN)         # the last buffer goes back to the NIC
                give_back = -1
            des0 = mem.rd32(d)
            if des0 & OWN:
                return pending
            flen = <Py_ssize_t> ((des0 >> 16) & 0x3FFF) - FCS
            if des0 & RDES0_ES or (des0 & (RDES0_FS | RDES0_LS)) != (RDES0_FS | RDES0_LS) \
                    or flen < ETH_HLEN:
                self.rx_errors += 1
            else:
                buf = rx_bufs[i]
                pending = yield from self.deliver_path(mem.rd16be(buf + 12), buf + ETH_HLEN, flen - ETH_HLEN)
            give_back = d
            self.cur_rx += 1
            pending += c_desc
        if give_back >= 0:
            yield pending
            pending = 0.0
            mem.wr32(give_back, OWN)
        return pending

    def _tx_reclaim(self):
        """Free the transmit descriptors the NIC is done with; return the time it took."""
        cdef PhysMem mem = self.node.mem
        cdef Py_ssize_t freed = 0, ntx = self.ntx, d
        while self.dirty_tx < self.cur_tx:
            d = self.tx_ring + 16 * (self.dirty_tx % ntx)
            if mem.rd32(d) & OWN:
                break
            self.dirty_tx += 1
            freed += 1
        if freed:
            (<WaitQueue> self.tx_space).wake()
        return self.c_desc * freed

    def stats(self) -> dict:
        out = super().stats()
        out.update(tx_ring=self.ntx, rx_ring=self.nrx, tx_queued=self.cur_tx - self.dirty_tx,
                   irq=self.irq_line, device=self.dev.stats())
        return out
