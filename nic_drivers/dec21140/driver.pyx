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
from kernelsim._physmem cimport PhysMem, mem_rd32, mem_wr32, span_check, span_ok
from libc.string cimport memcpy
from kernelsim._waits cimport WaitQueue
from kernelsim._path cimport Path, reuse, spent
from kernelsim._netdev cimport RxWalk
from nic_drivers._nic cimport NicDriver

from nic_drivers.dec21140._model cimport (
    Dec21140, OWN, NIS, AIS, TI, TPS, UNF, FBE, RI, RU, SR, ST, SF, RDES0_FS, RDES0_LS, RDES0_ES, RDES1_RER,
    TDES1_IC, TDES1_LS, TDES1_FS, TDES1_SET, TDES1_TER)

cdef enum:
    RX_BUF_BYTES = 1536
    ETH_HLEN = 14
    FCS = 4


cdef list _commits = [None] * 4     # spare `_TulipCommit`s and interrupt paths (kernelsim._path.reuse)
cdef list _irqs = [None] * 4


cdef class TulipNetDevice(NicDriver):
    # The rings and the knobs every frame reads: typed fields, not the instance dict.
    cdef public Py_ssize_t nrx, budget, pbl, tx_ring, rx_ring
    cdef public bint store_forward
    cdef public list rx_bufs
    cdef bytes _hdr_dst, _hdr               # the last link header built (a ping-pong's only one)
    cdef int _hdr_proto
    # The last commit and interrupt paths made, made again once nothing else holds them
    # (`tx_commit`, `irq_path`: one of each per frame).

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
                mem.wr32(d + 4, RX_BUF_BYTES | (RDES1_RER if i == self.nrx - 1 else 0))
                mem.wr32(d + 8, buf)
                mem.wr32(d, OWN)
            self.tx_ring = self.alloc(16 * self.ntx)
            self.tx_bufs = [self.alloc(RX_BUF_BYTES) for _ in range(self.ntx)]
            for i, buf in enumerate(self.tx_bufs):
                d = self.tx_ring + 16 * i
                mem.wr32(d + 4, TDES1_TER if i == self.ntx - 1 else 0)
                mem.wr32(d + 8, buf)
            self.attach_irq()
        except BaseException:
            self.stop()
            raise
        dev = self.dev
        dev.csr_write(0, (self.pbl & 0x3F) << 8)
        dev.csr_write(3, self.rx_ring)
        dev.csr_write(4, self.tx_ring)
        dev.csr_write(7, TI | RI | RU | TPS | UNF | FBE | NIS | AIS)
        dev.csr_write(6, SR | ST | (SF if self.store_forward else 0) | (1 << 9))
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
        mem.wr32(self.tx_ring + 4, TDES1_SET | 192 | (TDES1_TER if self.ntx == 1 else 0))
        mem.wr32(self.tx_ring, OWN)
        self.cur_tx += 1
        self.dev.csr_write(1, 0)

    def stop(self) -> None:
        self.dev.csr_write(6, 0)
        self.dev.csr_write(7, 0)
        self.detach_irq()
        self.release_resources()

    # -- transmit ----------------------------------------------------------------------

    # NetDevice's transmit interface (DP calls it by C; its Python-level tx_reserve,
    # write_link_header and tx_commit_path call these).

    cdef Py_ssize_t tx_buffer(self) except -1:
        return self.ring_reserve()

    cdef Py_ssize_t tx_header(self, Py_ssize_t addr, object dst_hw, int proto) except -1:
        # Destination, our address, EtherType: built once per destination and reused.
        cdef PhysMem mem = self.host_mem
        cdef Py_ssize_t n
        if self._hdr is None or proto != self._hdr_proto or not (dst_hw is self._hdr_dst or dst_hw == self._hdr_dst):
            self._hdr = bytes(dst_hw) + bytes(self.hwaddr) + proto.to_bytes(2, "big")
            self._hdr_dst = bytes(dst_hw)
            self._hdr_proto = proto
        n = len(self._hdr)
        if not span_ok(addr, n, mem.size):
            span_check(addr, n, mem.size, "physical memory")
        memcpy(&mem.buf[addr], <const char*> self._hdr, n)
        return addr + ETH_HLEN

    cdef object tx_commit(self, Py_ssize_t payload_bytes, double pending):
        """Hand the frame to the NIC: `_TulipCommit` (a C state machine), for reading::

            yield pending + self.c_desc + pci_write
            fill the next descriptor (length, FS|LS, IC at the half-ring point, near full
            and at the ring's end), OWN last; cur_tx += 1; transmit poll demand
        """
        cdef _TulipCommit path = <_TulipCommit> reuse(_commits, _TulipCommit)
        path.value = None
        path.state = 0
        path.nd = self
        path.payload_bytes = payload_bytes
        path.pending = pending
        return path

    # -- interrupt -----------------------------------------------------------------------

    # Interrupt paths carry `pending`: CPU time spent since the last device access,
    # yielded just before the next one, so that each register access happens at its
    # modeled time without an engine event for every stretch of plain code.

    def interrupt_path(self, double pending=0.0):
        """The interrupt handler's path (`_TulipIrq`: the generator it is, for reading)."""
        return self.irq_path(pending)

    cdef object irq_path(self, double pending):
        cdef _TulipIrq path = <_TulipIrq> reuse(_irqs, _TulipIrq)
        path.value = None
        path.proto_path = None
        path.passes = path.walked = path.d = path.give_back = 0
        path.csr5 = 0
        path.nd = self
        path.dev = <Dec21140> self.dev
        path.mem = self.host_mem
        path.pci_read = (<Costs> self.c).pci_read
        path.pci_write = (<Costs> self.c).pci_write
        path.mem_miss = (<Costs> self.c).mem_miss
        path.pending = pending
        path.state = IRQ_TOP
        return path

    cdef double _tx_reclaim(self) except? -1.0:
        """Free the transmit descriptors the NIC is done with; return the time it took."""
        cdef PhysMem mem = self.host_mem
        cdef Py_ssize_t freed = 0, ntx = self.ntx, d
        while self.dirty_tx < self.cur_tx:
            d = self.tx_ring + 16 * (self.dirty_tx % ntx)
            if mem_rd32(mem, d) & OWN:
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


# The interrupt path's instants (`_TulipIrq.state`): where it goes on after a yield.
cdef enum:
    IRQ_TOP             # a pass of the handler loop: read CSR5
    IRQ_READ_CSR5       # the PCI read's time is spent: look at CSR5
    IRQ_ACK             # the PCI write's time is spent: acknowledge
    RX_TOP              # the receive walk: look at the next descriptor
    RX_DESC             # the memory miss is spent: read the descriptor
    RX_PROTO            # a protocol's path runs (a frame of a message type with a path)
    RX_GIVE_LAST        # after the walk: the last buffer goes back
    IRQ_RX_DONE         # the walk returned
    IRQ_POLL_DEMAND     # receive poll demand written after RU


cdef class _TulipIrq(RxWalk):
    """The 21140's interrupt path as a C state machine: the generators it replaces, for
    reading (`Path`, kernelsim/_path.pyx, says why)::

        def interrupt_path(self, pending=0.0):
            for _ in range(self.budget):
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

        def _rx_path(self, pending):
            give_back = -1
            for _ in range(self.nrx):
                i = self.cur_rx % self.nrx
                d = self.rx_ring + 16 * i
                yield pending + mem_miss             # the NIC wrote it: not in the cache
                pending = 0.0
                if give_back >= 0:
                    mem.wr32(give_back, OWN)         # the last buffer goes back to the NIC
                    give_back = -1
                des0 = mem.rd32(d)
                if des0 & OWN:
                    return pending
                flen = ((des0 >> 16) & 0x3FFF) - FCS
                if des0 & RDES0_ES or not (FS and LS) or flen < ETH_HLEN:
                    self.rx_errors += 1
                else:
                    buf = self.rx_bufs[i]
                    pending = yield from self.deliver_path(mem.rd16be(buf + 12), buf + ETH_HLEN,
                                                           flen - ETH_HLEN)
                give_back = d
                self.cur_rx += 1
                pending += c_desc
            if give_back >= 0:
                yield pending
                pending = 0.0
                mem.wr32(give_back, OWN)
            return pending

    A protocol registered as an `RxHandler` (DP's MDR) is handed its frame by a C call
    (`NetDevice.hand_over`).
    """
    cdef TulipNetDevice nd
    cdef Dec21140 dev
    cdef PhysMem mem
    cdef double pci_read, pci_write, mem_miss
    cdef int state
    cdef Py_ssize_t passes              # handler loop passes made (of nd.budget)
    cdef unsigned int csr5
    cdef Py_ssize_t walked              # descriptors looked at in this receive walk (of nd.nrx)
    cdef Py_ssize_t d, give_back

    cdef int step(self, double* cost) except -1:
        cdef TulipNetDevice nd = self.nd
        cdef PhysMem mem = self.mem
        cdef unsigned int des0
        cdef Py_ssize_t flen, buf, i
        while True:
            if self.state == IRQ_TOP:
                if self.passes == nd.budget:
                    self.value = self.pending
                    return 0
                self.passes += 1
                cost[0] = self.pending + self.pci_read
                self.state = IRQ_READ_CSR5
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_READ_CSR5:
                self.csr5 = self.dev.csr_read(5)
                if not self.csr5 & (NIS | AIS):
                    self.value = 0.0
                    return 0
                cost[0] = self.pci_write
                self.state = IRQ_ACK
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_ACK:
                self.dev.csr_write(5, self.csr5 & 0x0001FFFF)   # acknowledge what we saw
                self.pending = nd.c_isr
                if self.csr5 & (RI | RU):
                    self.walked = 0
                    self.give_back = -1
                    self.state = RX_TOP
                else:
                    self.pending += nd._tx_reclaim()
                    self.state = IRQ_TOP
            elif self.state == RX_TOP:
                if self.walked == nd.nrx:
                    if self.give_back >= 0:
                        cost[0] = self.pending
                        self.state = RX_GIVE_LAST
                        if not spent(cost[0]):
                            return 1
                        continue
                    self.state = IRQ_RX_DONE
                    continue
                self.walked += 1
                i = nd.cur_rx % nd.nrx
                self.d = nd.rx_ring + 16 * i
                cost[0] = self.pending + self.mem_miss  # the NIC wrote it: not in the cache
                self.state = RX_DESC
                if not spent(cost[0]):
                    return 1
            elif self.state == RX_DESC:
                self.pending = 0.0
                if self.give_back >= 0:
                    mem_wr32(mem, self.give_back, OWN)       # the last buffer goes back to the NIC
                    self.give_back = -1
                des0 = mem_rd32(mem, self.d)
                if des0 & OWN:
                    self.state = IRQ_RX_DONE
                    continue
                flen = <Py_ssize_t> ((des0 >> 16) & 0x3FFF) - FCS
                if des0 & RDES0_ES or (des0 & (RDES0_FS | RDES0_LS)) != (RDES0_FS | RDES0_LS) \
                        or flen < ETH_HLEN:
                    nd.rx_errors += 1
                else:
                    buf = nd.rx_bufs[nd.cur_rx % nd.nrx]
                    if self.give_frame(nd, mem.rd16be(buf + 12), buf + ETH_HLEN, flen - ETH_HLEN):
                        self.state = RX_PROTO
                        continue
                self._next_desc(nd)
            elif self.state == RX_PROTO:
                if self.step_proto(cost):
                    return 1
                self._next_desc(nd)
            elif self.state == RX_GIVE_LAST:
                self.pending = 0.0
                mem_wr32(mem, self.give_back, OWN)
                self.state = IRQ_RX_DONE
            elif self.state == IRQ_RX_DONE:
                if self.csr5 & RU:
                    cost[0] = self.pending + self.pci_write
                    self.state = IRQ_POLL_DEMAND
                    if not spent(cost[0]):
                        return 1
                    continue
                self.pending += nd._tx_reclaim()
                self.state = IRQ_TOP
            elif self.state == IRQ_POLL_DEMAND:
                self.pending = 0.0
                self.dev.csr_write(2, 0)                # buffers are back: receive poll demand
                self.pending += nd._tx_reclaim()
                self.state = IRQ_TOP
            else:
                raise AssertionError(f"interrupt path in state {self.state}")

    cdef inline void _next_desc(self, TulipNetDevice nd) noexcept:
        self.give_back = self.d
        nd.cur_rx += 1
        self.pending += nd.c_desc
        self.state = RX_TOP


cdef class _TulipCommit(Path):
    """`TulipNetDevice.tx_commit_path`: the descriptor write's time, then the descriptor."""
    cdef TulipNetDevice nd
    cdef Py_ssize_t payload_bytes
    cdef double pending
    cdef int state

    cdef int step(self, double* cost) except -1:
        cdef TulipNetDevice nd = self.nd
        cdef PhysMem mem
        cdef Py_ssize_t ntx, entry, d, length, queued
        cdef unsigned int flags
        if self.state == 0:
            self.state = 1
            cost[0] = self.pending + nd.c_desc + (<Costs> nd.c).pci_write
            if not spent(cost[0]):
                return 1
        if self.state == 1:
            self.state = 2
            mem = nd.host_mem
            ntx = nd.ntx
            entry = nd.cur_tx % ntx
            d = nd.tx_ring + 16 * entry
            length = ETH_HLEN + self.payload_bytes
            flags = TDES1_FS | TDES1_LS | <unsigned int> length
            queued = nd.cur_tx - nd.dirty_tx
            if queued == ntx // 2 or queued >= ntx - 2:
                flags |= TDES1_IC
            if entry == ntx - 1:
                flags |= TDES1_TER | TDES1_IC
            mem_wr32(mem, d + 4, flags)
            mem_wr32(mem, d, OWN)                         # OWN last: the descriptor is the NIC's now
            nd.cur_tx += 1
            nd.tx_frames += 1
            nd.tx_bytes += length
            (<Dec21140> nd.dev).csr_write(1, 0)       # transmit poll demand
        self.value = None
        return 0
