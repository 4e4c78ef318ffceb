# cython: language_level=3, annotation_typing=False
"""The ATM driver: the kernel side, in the manner of Linux's ``fore200e``.

Open restarts the card's firmware (HCR reset) and checks its boot status, reads where
the cp-resident queues are, lays out the host side of every queue in physical memory
-- transmit PDU descriptors and their status words, receive PDU descriptors and
theirs, receive-buffer descriptor blocks, the small and large receive buffers -- writes
each queue entry's status address into card memory, hands every receive descriptor to
the card, supplies the receive buffers in blocks, enables the interrupt and opens the
VCs with activate commands. Any failure stops the card and frees what was taken.

Addressing (the NART entry for ATM is a VPI/VCI, HW-ATM): every ordered pair of
nodes has its own VC. Node d is reached on VPI 0, VCI 32 + d (VCIs 0-31 are reserved
for signalling and OAM), the same VCI for every sender -- so ``hwaddr_for(d)`` does not
depend on who asks, as the NART filled from the cluster description needs. On a cell
switch the VC from s to d is VCI 32 + d on s's fiber and VCI 32 + s on d's fiber (the
switch translates), so a receiver tells its senders apart by VCI and AAL5 reassembly
never mixes two senders' cells. Back to back, a fiber carries one ordered pair only,
so VCI 32 + d on it names the pair just as well. The driver therefore opens an
outgoing VC to every other node's address and an incoming VC on every address of the
cluster description, which covers both topologies.

Encapsulation: the link protocol number (DP's 0x88B5) travels in front of the payload
so that receive can dispatch. ``encap=vcmux`` (default) puts just the 2-byte protocol
id there, DP's spirit of using the frame fully; ``encap=llc`` uses RFC 2684's 8-byte
LLC/SNAP header (AA-AA-03, OUI 00-00-00, EtherType), the standard multiprotocol form.
Either way one AAL5 PDU carries header + Directed Message, and its cell count --
what a message costs on the wire -- is ceil((header + 8 + n + 8) / 48).

Transmit: DP builds the frame in the entry's transmit buffer; commit writes the TPD
(cell header with the destination VPI/VCI, length, one segment, AAL5, and the
interrupt flag only at the half-queue point and when nearly full), sets the status
word PENDING and writes the TPD's address into the card's transmit queue entry --
that PIO write is the doorbell.

Receive: the interrupt handler reads the host control register, acknowledges, and
walks the receive queue while status words say COMPLETE: it reads the RPD, joins the
PDU if the card split it (the first 384 bytes are always in a small buffer: the driver
copies them into headroom kept in front of every large buffer, so the PDU is
contiguous for the protocol, at the cost of one copy of at most 384 bytes), hands it
to the protocol by its link protocol id, frees the buffers, and gives the RPD back to
the card. Freed buffers go back to the card in blocks through the buffer supply
queues; finished transmit entries are reclaimed.

The per-frame paths (transmit commit, interrupt, receive walk, buffer supply, reclaim)
are C: `NetDevice`'s transmit interface as C calls, the interrupt path a C state machine
(`_AtmIrq`) that reaches the card (`Pca200e`, `_model.pxd`) and physical memory by typed
calls; probe, set-up and tear-down stay plain.
"""
import errno

from libc.string cimport memcmp, memcpy
from kernelsim._node cimport Costs
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from kernelsim._waits cimport WaitQueue
from kernelsim._netdev cimport RxWalk
from kernelsim._path cimport Path, spent
from nic_drivers._nic cimport NicDriver

from nic_drivers.atm import _model as hw
from nic_drivers.atm._model cimport (
    Pca200e, REG_HCR, REG_IMASK, HCR_RESET, HCR_CLR_INTR, HCR_INTR, STATUS_PENDING, STATUS_COMPLETE, STATUS_FREE,
    STATUS_ERROR, OPCODE_ACTIVATE_VCIN, OPCODE_ACTIVATE_VCOUT, AAL5, TPD_BYTES, TPD_HEADER, TPD_SPEC, TPD_RATE,
    TPD_TSD, RPD_BYTES, RPD_NSEG, RPD_RSD, RBD_BYTES, RSD_MAX_PER_RPD, CMDQ_ENTRY, QENTRY)

LLC_SNAP = bytes([0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00])
ENCAP_BYTES = {"vcmux": 2, "llc": 8}

cdef enum:
    LARGE_HANDLE = 0x10000
    RPD_STRIDE = (RPD_BYTES + 31) & ~31     # RPDs 32-byte aligned
    LLC_SNAP_BYTES = 6

cdef const unsigned char* _LLC = b"\xAA\xAA\x03\x00\x00\x00"     # LLC_SNAP, for memcmp / memcpy

globals().update(LARGE_HANDLE=LARGE_HANDLE, RPD_STRIDE=RPD_STRIDE)   # the names driver.py had


cdef class AtmNetDevice(NicDriver):
    # What the per-frame paths read, typed (set-up state the paths never touch stays in
    # the instance dict).
    cdef public Py_ssize_t mtu, nsmall, nlarge, block, budget, cmd_next
    cdef public long long tx_errors, rx_joined, rx_gathered
    cdef public str encap
    cdef bint _llc                                  # encap == "llc"
    cdef Py_ssize_t _hdr_bytes                      # link_header_bytes
    cdef public Py_ssize_t nrx, ncmd, nbsq, small_bytes, large_bytes, num_connect
    cdef public Py_ssize_t cmdq_off, txq_off, rxq_off
    cdef public Py_ssize_t tpds, tx_status, rpds, rx_status, cmd_status, bounce
    cdef public list small, large, free_bufs, rbd_blocks, vcs_in, vcs_out
    cdef Py_ssize_t _bsq_off[2], _bsq_status[2], _bsq_head[2], _supply_min[2]
    cdef Pca200e card                               # self.dev, typed
    cdef object _hdr_dst                            # the last destination's VPI/VCI ...
    cdef unsigned int _hdr_word                     # ... and its TPD cell header

    kind = "atm"
    driver_module = "atm"

    def __init__(self, node, dev, name, *, mtu, encap, small_buffers, large_buffers, supply_block, budget):
        super().__init__(node, dev, name, dev.hwaddr)
        self.card = <Pca200e?> dev
        self.mtu = mtu
        self.encap = encap
        self._llc = encap == "llc"
        self.link_header_bytes = ENCAP_BYTES[encap]
        self._hdr_bytes = self.link_header_bytes
        self.max_payload = mtu - self.link_header_bytes
        self.nsmall = small_buffers
        self.nlarge = large_buffers
        self.block = supply_block
        self.budget = budget
        self.cmd_next = 0
        self.tx_errors = 0
        self.rx_joined = 0
        self.rx_gathered = 0
        self.vcs_in = []
        self.vcs_out = []

    # -- open / stop (probe and unwind) ---------------------------------------------------

    def open(self) -> None:
        dev = self.dev
        try:
            dev.reg_write(REG_HCR, HCR_RESET)
            bstat = dev.reg_read(hw.REG_BSTAT)
            if bstat != hw.BSTAT_CP_RUNNING:
                raise OSError(errno.EIO, f"{self.name}: the adapter's cell processor did not start "
                                         f"(boot status {bstat:#010x})")
            self._geometry()
            self._alloc_queues()
            self.attach_irq()
            self._init_queues()
            dev.reg_write(REG_IMASK, 1)
            for magn in (0, 1):
                while self._post_supply(magn, True):
                    pass
            self._open_vcs()
        except BaseException:
            self.stop()
            raise

    def _geometry(self) -> None:
        dev = self.dev
        rd = dev.reg_read
        self.cmdq_off, self.txq_off, self.rxq_off = rd(hw.REG_CMDQ), rd(hw.REG_TXQ), rd(hw.REG_RXQ)
        self._bsq_off[0], self._bsq_off[1] = rd(hw.REG_BSQ_SMALL), rd(hw.REG_BSQ_LARGE)
        self.ncmd, self.ntx, self.nrx, self.nbsq = (rd(hw.REG_CMDQ_LEN), rd(hw.REG_TXQ_LEN), rd(hw.REG_RXQ_LEN),
                                                    rd(hw.REG_BSQ_LEN))
        self.small_bytes, self.large_bytes = rd(hw.REG_SMALL_BYTES), rd(hw.REG_LARGE_BYTES)
        self.num_connect = rd(hw.REG_NUM_CONNECT)
        need = 1 + max(0, -(-(self.mtu - self.small_bytes) // self.large_bytes))
        if need > rd(hw.REG_RSD_MAX):
            raise OSError(errno.EINVAL, f"{self.name}: an MTU of {self.mtu} needs {need} receive segments")
        blocks = -(-self.nsmall // self.block), -(-self.nlarge // self.block)
        if max(blocks) > self.nbsq:
            raise OSError(errno.EINVAL, f"{self.name}: {self.nsmall}/{self.nlarge} buffers in blocks of "
                                        f"{self.block} need more than the {self.nbsq} buffer supply entries")
        if self.nlarge < need - 1 or (self.mtu > self.small_bytes and self.nlarge == 0):
            raise OSError(errno.EINVAL, f"{self.name}: no large receive buffers for PDUs over {self.small_bytes} bytes")

    @property
    def bsq_off(self):
        """Card-memory offsets of the (small, large) buffer supply queues."""
        return (self._bsq_off[0], self._bsq_off[1])

    @property
    def bsq_status(self):
        return [self._bsq_status[0], self._bsq_status[1]]

    @property
    def bsq_head(self):
        return [self._bsq_head[0], self._bsq_head[1]]

    @property
    def supply_min(self):
        return [self._supply_min[0], self._supply_min[1]]

    def _alloc_queues(self) -> None:
        self.tpds = self.alloc(TPD_BYTES * self.ntx, 32)
        self.tx_status = self.alloc(4 * self.ntx)
        self.tx_bufs = [self.alloc(self.mtu) for _ in range(self.ntx)]
        self.rpds = self.alloc(RPD_STRIDE * self.nrx, 32)
        self.rx_status = self.alloc(4 * self.nrx)
        self.cmd_status = self.alloc(4 * self.ncmd)
        self.rbd_blocks = [[self.alloc(RBD_BYTES * self.block, 32) for _ in range(self.nbsq)]
                           for _magn in (0, 1)]
        self._bsq_status[0] = self.alloc(4 * self.nbsq)
        self._bsq_status[1] = self.alloc(4 * self.nbsq)
        self._bsq_head[0] = self._bsq_head[1] = 0
        self.small = [self.alloc(self.small_bytes) for _ in range(self.nsmall)]
        # Every large buffer keeps small_bytes of headroom in front of what the card is
        # given, so a PDU split small + large can be joined by copying the small part.
        self.large = [self.alloc(self.small_bytes + self.large_bytes) + self.small_bytes
                      for _ in range(self.nlarge)]
        self.bounce = self.alloc(self.mtu)
        self.free_bufs = [list(range(self.nsmall)), [LARGE_HANDLE | j for j in range(self.nlarge)]]
        # Freed buffers go back a block at a time (fewer PIO writes), or half a pool if
        # the pool is smaller than two blocks, so it can never starve the card.
        self._supply_min[0] = min(self.block, max(1, self.nsmall // 2))
        self._supply_min[1] = min(self.block, max(1, self.nlarge // 2))

    def _init_queues(self) -> None:
        mem, dev = self.node.mem, self.dev
        for e in range(self.ntx):
            mem.wr32(self.tx_status + 4 * e, STATUS_FREE)
            dev.reg_write(self.txq_off + QENTRY * e + 4, self.tx_status + 4 * e)
        for e in range(self.nrx):
            mem.wr32(self.rx_status + 4 * e, STATUS_FREE)
            dev.reg_write(self.rxq_off + QENTRY * e + 4, self.rx_status + 4 * e)
            dev.reg_write(self.rxq_off + QENTRY * e, self.rpds + RPD_STRIDE * e)    # the card's now
        for magn in (0, 1):
            for i in range(self.nbsq):
                mem.wr32(self._bsq_status[magn] + 4 * i, STATUS_FREE)
                dev.reg_write(self._bsq_off[magn] + QENTRY * i + 4, self._bsq_status[magn] + 4 * i)
        for i in range(self.ncmd):
            mem.wr32(self.cmd_status + 4 * i, STATUS_FREE)

    def _command(self, w0: int, w1: int, w2: int = 0) -> bool:
        """Post one command and read its status (the card executes commands as they come)."""
        mem, dev = self.node.mem, self.dev
        i = self.cmd_next
        self.cmd_next = (i + 1) % self.ncmd
        base = self.cmdq_off + CMDQ_ENTRY * i
        st = self.cmd_status + 4 * i
        mem.wr32(st, STATUS_PENDING)
        dev.reg_write(base, w0)
        dev.reg_write(base + 4, w1)
        dev.reg_write(base + 8, w2)
        dev.reg_write(base + 16, st)                 # the status address posts the command
        s = mem.rd32(st)
        return bool(s & STATUS_COMPLETE) and not s & STATUS_ERROR

    def _open_vcs(self) -> None:
        me = self.node.nid
        wanted_in, wanted_out = [], []
        for nid, addrs in sorted(self.node.hosts.items()):
            if self.kind not in addrs:
                continue
            vpi, vci = addrs[self.kind]
            if (vpi, vci) not in wanted_in:
                wanted_in.append((vpi, vci))
            if nid != me:
                wanted_out.append((vpi, vci))
        for (vpi, vci) in wanted_in:
            self._activate(True, vpi, vci)
        for (vpi, vci) in wanted_out:
            if (vpi, vci) not in self.vcs_out:
                self._activate(False, vpi, vci)

    def _activate(self, incoming: bool, vpi: int, vci: int) -> None:
        op = OPCODE_ACTIVATE_VCIN if incoming else OPCODE_ACTIVATE_VCOUT
        if not (0 <= vpi <= 0xFF and 0 <= vci <= 0xFFFF) or \
                not self._command(op | AAL5 << 8, (vpi << 16) | vci, self.mtu):
            raise OSError(errno.EINVAL, f"{self.name}: the adapter refused to open {'incoming' if incoming else 'outgoing'}"
                                        f" VPI/VCI {vpi}/{vci} (it decodes VPI 0, VCI 0..{self.num_connect - 1})")
        (self.vcs_in if incoming else self.vcs_out).append((vpi, vci))

    def stop(self) -> None:
        """Stop the card (a reset closes every VC and forgets every buffer) and free what open took."""
        dev = self.dev
        dev.reg_write(REG_IMASK, 0)
        dev.reg_write(REG_HCR, HCR_RESET)
        self.detach_irq()
        self.vcs_in.clear()
        self.vcs_out.clear()
        self.release_resources()

    # -- transmit ----------------------------------------------------------------------

    # NetDevice's transmit interface (DP calls it by C; its Python-level tx_reserve,
    # write_link_header and tx_commit_path call these).

    cdef Py_ssize_t tx_buffer(self) except -1:
        return self.ring_reserve()

    cdef Py_ssize_t tx_header(self, Py_ssize_t addr, object dst_hw, int proto) except -1:
        # The VC goes into the TPD's cell header; the protocol id in front of the payload.
        cdef PhysMem mem = self.host_mem
        cdef unsigned char* p
        if dst_hw is not self._hdr_dst:         # a ping-pong's only destination: unpacked once
            vpi, vci = dst_hw
            self._hdr_word = ((<unsigned int> vpi & 0xFF) << 20) | ((<unsigned int> vci & 0xFFFF) << 4)
            self._hdr_dst = dst_hw
        mem.wr32(self.tpds + TPD_BYTES * (self.cur_tx % self.ntx) + TPD_HEADER, self._hdr_word)
        if not 0 <= proto <= 0xFFFF:
            raise OverflowError(f"link protocol {proto} does not fit the 2-byte protocol id")
        if not span_ok(addr, self._hdr_bytes, mem.size):
            span_check(addr, self._hdr_bytes, mem.size, "physical memory")
        p = &mem.buf[addr]
        if self._llc:
            memcpy(p, _LLC, LLC_SNAP_BYTES)
        p[self._hdr_bytes - 2] = (proto >> 8) & 0xFF
        p[self._hdr_bytes - 1] = proto & 0xFF
        return addr + self._hdr_bytes

    cdef object tx_commit(self, Py_ssize_t payload_bytes, double pending):
        """Hand the PDU to the card: `_AtmCommit` (a C state machine), for reading::

            yield pending + self.c_desc + self.c.pci_write
            e = self.cur_tx % self.ntx
            tpd = self.tpds + TPD_BYTES * e
            length = self.link_header_bytes + payload_bytes
            queued = self.cur_tx - self.dirty_tx
            intr = queued == self.ntx // 2 or queued >= self.ntx - 2
            mem.wr32(tpd + TPD_SPEC, length | 1 << 16 | AAL5 << 24 | (1 << 28 if intr else 0))
            mem.wr32(tpd + TPD_RATE, 0)
            mem.wr32(tpd + TPD_TSD, self.tx_bufs[e])
            mem.wr32(tpd + TPD_TSD + 4, length)
            mem.wr32(self.tx_status + 4 * e, STATUS_PENDING)
            self.cur_tx += 1; self.tx_frames += 1; self.tx_bytes += length
            self.dev.reg_write(self.txq_off + QENTRY * e, tpd | 1)   # one 32-byte block: the doorbell
        """
        cdef _AtmCommit path = _AtmCommit.__new__(_AtmCommit)
        path.nd = self
        path.payload_bytes = payload_bytes
        path.pending = pending
        return path

    cdef int _post_tpd(self, Py_ssize_t payload_bytes) except -1:
        """Fill the next TPD and its status word, then ring the doorbell."""
        cdef PhysMem mem = self.host_mem
        cdef Py_ssize_t e = self.cur_tx % self.ntx
        cdef Py_ssize_t tpd = self.tpds + TPD_BYTES * e
        cdef Py_ssize_t length = self._hdr_bytes + payload_bytes
        cdef Py_ssize_t queued = self.cur_tx - self.dirty_tx
        cdef bint intr = queued == self.ntx // 2 or queued >= self.ntx - 2
        mem.wr32(tpd + TPD_SPEC, <unsigned int> length | 1 << 16 | AAL5 << 24 | ((1 << 28) if intr else 0))
        mem.wr32(tpd + TPD_RATE, 0)
        mem.wr32(tpd + TPD_TSD, self.tx_bufs[e])
        mem.wr32(tpd + TPD_TSD + 4, <unsigned int> length)
        mem.wr32(self.tx_status + 4 * e, STATUS_PENDING)
        self.cur_tx += 1
        self.tx_frames += 1
        self.tx_bytes += length
        self.card.reg_write(self.txq_off + QENTRY * e, <unsigned int> (tpd | 1))   # one 32-byte block: the doorbell
        return 0

    # -- interrupt -----------------------------------------------------------------------

    # `pending` is CPU time spent since the last device access, yielded just before the
    # next one (as in the tulip driver): each access happens at its modeled time.

    def interrupt_path(self, double pending=0.0):
        """The interrupt handler's path (`_AtmIrq`: the generator it is, for reading)."""
        return self.irq_path(pending)

    cdef object irq_path(self, double pending):
        # The interrupt controller's C call for `interrupt_path` (the default is a Python
        # call of it, with `pending` as a float object).
        cdef _AtmIrq path = _AtmIrq.__new__(_AtmIrq)
        path.nd = self
        path.card = self.card
        path.mem = self.host_mem
        path.pci_read = self.c.pci_read
        path.pci_write = self.c.pci_write
        path.mem_miss = self.c.mem_miss
        path.pending = pending
        path.state = IRQ_TOP
        return path

    cdef Py_ssize_t _segments(self, Py_ssize_t rpd, unsigned int* handles, Py_ssize_t* addrs,
                              Py_ssize_t* lens) except -2:
        """The segments of a received PDU (handle, address, length), their number, or -1
        if the RPD makes no sense."""
        cdef PhysMem mem = self.host_mem
        cdef unsigned int nseg = mem.rd32(rpd + RPD_NSEG), handle, n, j
        cdef Py_ssize_t k
        if not 1 <= nseg <= RSD_MAX_PER_RPD:
            return -1
        for k in range(nseg):
            handle = mem.rd32(rpd + RPD_RSD + 8 * k)
            n = mem.rd32(rpd + RPD_RSD + 8 * k + 4)
            if handle & LARGE_HANDLE:
                j = handle & ~(<unsigned int> LARGE_HANDLE)
                if j >= self.nlarge or n > self.large_bytes:
                    return -1
                addrs[k] = self.large[j]
            else:
                if handle >= self.nsmall or n > self.small_bytes:
                    return -1
                addrs[k] = self.small[handle]
            handles[k] = handle
            lens[k] = n
        return nseg

    cdef double _contiguous(self, Py_ssize_t nseg, unsigned int* handles, Py_ssize_t* addrs, Py_ssize_t* lens,
                            Py_ssize_t* where, Py_ssize_t* length) except? -1.0:
        """The PDU as one piece of memory (`where`, `length`); returns the CPU time it took."""
        cdef PhysMem mem = self.host_mem
        cdef Py_ssize_t total = 0, k, n, n0
        if nseg == 1:
            where[0] = addrs[0]
            length[0] = lens[0]
            return 0.0
        if nseg == 2 and not handles[0] & LARGE_HANDLE and handles[1] & LARGE_HANDLE:
            n0 = lens[0]
            mem.move(addrs[1] - n0, addrs[0], n0)            # into the large buffer's headroom
            self.rx_joined += 1
            where[0] = addrs[1] - n0
            length[0] = n0 + lens[1]
            return self.c.copy(n0)
        for k in range(nseg):
            n = min(lens[k], self.mtu - total)
            mem.move(self.bounce + total, addrs[k], n)
            total += n
        self.rx_gathered += 1
        where[0] = self.bounce
        length[0] = total
        return self.c.copy(total)

    cdef bint _post_supply(self, int magn, bint partial) except -1:
        """Give the card one block of free buffers if enough are free and a supply entry is."""
        cdef list free = self.free_bufs[magn]
        cdef PhysMem mem = self.host_mem
        cdef Py_ssize_t i, st, n, k, block, handle
        cdef list bufs
        if not free or (len(free) < self._supply_min[magn] and not partial):
            return False
        i = self._bsq_head[magn]
        st = self._bsq_status[magn] + 4 * i
        if mem.rd32(st) & STATUS_PENDING:
            return False                                     # the card has not taken that entry yet
        n = min(self.block, len(free))
        block = self.rbd_blocks[magn][i]
        bufs = self.small if magn == 0 else self.large
        for k in range(n):
            handle = free.pop(0)
            mem.wr32(block + RBD_BYTES * k, <unsigned int> handle)
            mem.wr32(block + RBD_BYTES * k + 4, bufs[handle & ~(<Py_ssize_t> LARGE_HANDLE)])
        mem.wr32(st, STATUS_PENDING)
        self._bsq_head[magn] = (i + 1) % self.nbsq
        self.card.reg_write(self._bsq_off[magn] + QENTRY * i, <unsigned int> (block | (n - 1)))
        return True

    cpdef double _tx_reclaim(self) except? -1.0:
        """Free the transmit entries the card is done with; return the time it took."""
        cdef PhysMem mem = self.host_mem
        cdef Py_ssize_t freed = 0
        cdef unsigned int s
        while self.dirty_tx < self.cur_tx:
            s = mem.rd32(self.tx_status + 4 * (self.dirty_tx % self.ntx))
            if not s & STATUS_COMPLETE:
                break
            if s & STATUS_ERROR:
                self.tx_errors += 1
            self.dirty_tx += 1
            freed += 1
        if freed:
            (<WaitQueue> self.tx_space).wake()
        return self.c_desc * freed

    def stats(self) -> dict:
        out = super().stats()
        out.update(tx_queue=self.ntx, rx_queue=self.nrx, tx_queued=self.cur_tx - self.dirty_tx,
                   tx_errors=self.tx_errors, rx_joined=self.rx_joined, rx_gathered=self.rx_gathered,
                   encap=self.encap, mtu=self.mtu, vcs_in=list(self.vcs_in), vcs_out=list(self.vcs_out),
                   free_small=len(self.free_bufs[0]) if self._allocs else 0,
                   free_large=len(self.free_bufs[1]) if self._allocs else 0,
                   irq=self.irq_line, device=self.dev.stats())
        return out


cdef class _AtmCommit(Path):
    """`AtmNetDevice.tx_commit_path`: the TPD write's time, then the TPD and the doorbell."""
    cdef AtmNetDevice nd
    cdef Py_ssize_t payload_bytes
    cdef double pending
    cdef int state

    cdef int step(self, double* cost) except -1:
        cdef AtmNetDevice nd = self.nd
        if self.state == 0:
            self.state = 1
            cost[0] = self.pending + nd.c_desc + nd.c.pci_write
            if not spent(cost[0]):
                return 1
        if self.state == 1:
            self.state = 2
            nd._post_tpd(self.payload_bytes)
        self.value = None
        return 0


# The interrupt path's instants (`_AtmIrq.state`): where it goes on after a yield.
cdef enum:
    IRQ_TOP             # a pass of the handler loop: read the host control register
    IRQ_READ_HCR        # the PCI read's time is spent: look at HCR
    IRQ_ACK             # the PCI write's time is spent: acknowledge
    RX_TOP              # the receive walk: look at the next status word
    RX_STATUS           # the memory miss is spent: read the status word
    RX_PROTO            # a protocol's path runs
    RX_GIVE             # the PCI write's time is spent: the RPD goes back to the card
    IRQ_AFTER_RX        # the walk is over: reclaim, then supply buffers
    SUPPLY_CHECK        # look whether pool `magn` has a block to give back
    SUPPLY_POST         # the PIO write's time is spent: post the block


cdef class _AtmIrq(RxWalk):
    """The ATM driver's interrupt path as a C state machine: the generators it replaces,
    for reading (`Path`, kernelsim/_path.pyx, says why)::

        def interrupt_path(self, pending=0.0):
            for _ in range(self.budget):
                yield pending + pci_read
                if not dev.reg_read(REG_HCR) & HCR_INTR:
                    return 0.0
                yield pci_write
                dev.reg_write(REG_HCR, HCR_CLR_INTR)     # acknowledge, then look at the queues
                pending = yield from self._rx_path(self.c_isr)
                pending += self._tx_reclaim()
                pending = yield from self._supply_path(pending)
            return pending

        def _rx_path(self, pending):
            for _ in range(self.nrx):
                e = self.cur_rx % self.nrx
                st = self.rx_status + 4 * e
                yield pending + mem_miss                 # written by the card's DMA: not cached
                pending = 0.0
                if not mem.rd32(st) & STATUS_COMPLETE:
                    return pending
                rpd = self.rpds + RPD_STRIDE * e
                pending = mem_miss + self.c_desc
                segs = self._segments(rpd)
                if segs is None:
                    self.rx_errors += 1
                else:
                    addr, length, cost = self._contiguous(segs)
                    pending += cost
                    hdr = self.link_header_bytes
                    if length < hdr or (llc and mem.read(addr, 6) != LLC_SNAP):
                        self.rx_errors += 1
                    else:
                        proto = mem.rd16be(addr + hdr - 2)
                        pending += yield from self.deliver_path(proto, addr + hdr, length - hdr)
                    for handle, _a, _n in segs:
                        self.free_bufs[1 if handle & LARGE_HANDLE else 0].append(handle)
                mem.wr32(st, STATUS_FREE)
                self.cur_rx += 1
                yield pending + pci_write
                pending = 0.0
                dev.reg_write(self.rxq_off + QENTRY * e, rpd)   # the RPD goes back to the card
            return pending

        def _supply_path(self, pending):
            for magn in (0, 1):
                while len(self.free_bufs[magn]) >= self.supply_min[magn]:
                    yield pending + self.c_desc + pci_write
                    pending = 0.0
                    if not self._post_supply(magn):
                        break
            return pending

    A protocol registered as an `RxHandler` (DP's MDR) is handed its PDU by a C call
    (`NetDevice.hand_over`).
    """
    cdef AtmNetDevice nd
    cdef Pca200e card
    cdef PhysMem mem
    cdef double pci_read, pci_write, mem_miss
    cdef double before_proto            # `pending` when the protocol was handed its PDU
    cdef int state, magn
    cdef Py_ssize_t passes              # handler loop passes made (of nd.budget)
    cdef Py_ssize_t walked              # status words looked at in this walk (of nd.nrx)
    cdef Py_ssize_t e, st, rpd
    cdef Py_ssize_t nseg                # the PDU's buffers, freed once it is delivered
    cdef unsigned int handles[RSD_MAX_PER_RPD]

    cdef int step(self, double* cost) except -1:
        cdef AtmNetDevice nd = self.nd
        cdef PhysMem mem = self.mem
        cdef Py_ssize_t addrs[RSD_MAX_PER_RPD]
        cdef Py_ssize_t lens[RSD_MAX_PER_RPD]
        cdef Py_ssize_t where = 0, length = 0, hdr
        cdef double before
        while True:
            if self.state == IRQ_TOP:
                if self.passes == nd.budget:
                    self.value = self.pending
                    return 0
                self.passes += 1
                cost[0] = self.pending + self.pci_read
                self.state = IRQ_READ_HCR
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_READ_HCR:
                if not self.card.reg_read(REG_HCR) & HCR_INTR:
                    self.value = 0.0
                    return 0
                cost[0] = self.pci_write
                self.state = IRQ_ACK
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_ACK:
                self.card.reg_write(REG_HCR, HCR_CLR_INTR)     # acknowledge, then look at the queues
                self.pending = nd.c_isr
                self.walked = 0
                self.state = RX_TOP
            elif self.state == RX_TOP:
                if self.walked == nd.nrx:
                    self.state = IRQ_AFTER_RX
                    continue
                self.walked += 1
                self.e = nd.cur_rx % nd.nrx
                self.st = nd.rx_status + 4 * self.e
                cost[0] = self.pending + self.mem_miss        # written by the card's DMA: not cached
                self.state = RX_STATUS
                if not spent(cost[0]):
                    return 1
            elif self.state == RX_STATUS:
                self.pending = 0.0
                if not mem.rd32(self.st) & STATUS_COMPLETE:
                    self.state = IRQ_AFTER_RX
                    continue
                self.rpd = nd.rpds + RPD_STRIDE * self.e
                self.pending = self.mem_miss + nd.c_desc
                self.nseg = nd._segments(self.rpd, self.handles, addrs, lens)
                if self.nseg < 0:
                    self.nseg = 0
                    nd.rx_errors += 1
                else:
                    self.pending += nd._contiguous(self.nseg, self.handles, addrs, lens, &where, &length)
                    hdr = nd._hdr_bytes
                    if length < hdr or (nd._llc and memcmp(&mem.buf[where], _LLC, LLC_SNAP_BYTES) != 0):
                        nd.rx_errors += 1
                    else:
                        before = self.pending
                        if self.give_frame(nd, mem.rd16be(where + hdr - 2), where + hdr, length - hdr):
                            self.before_proto = before
                            self.state = RX_PROTO
                            continue
                        self.pending = before + self.pending
                self._give_back(cost)
                if not spent(cost[0]):
                    return 1
            elif self.state == RX_PROTO:
                if self.step_proto(cost):
                    return 1
                self.pending = self.before_proto + self.pending
                self._give_back(cost)
                if not spent(cost[0]):
                    return 1
            elif self.state == RX_GIVE:
                self.pending = 0.0
                self.card.reg_write(nd.rxq_off + QENTRY * self.e, <unsigned int> self.rpd)   # the RPD goes back
                self.state = RX_TOP
            elif self.state == IRQ_AFTER_RX:
                self.pending += nd._tx_reclaim()
                self.magn = 0
                self.state = SUPPLY_CHECK
            elif self.state == SUPPLY_CHECK:
                if self.magn == 2:
                    self.state = IRQ_TOP
                    continue
                if len(<list> nd.free_bufs[self.magn]) >= nd._supply_min[self.magn]:
                    cost[0] = self.pending + nd.c_desc + self.pci_write
                    self.state = SUPPLY_POST
                    if not spent(cost[0]):
                        return 1
                    continue
                self.magn += 1
            elif self.state == SUPPLY_POST:
                self.pending = 0.0
                if not nd._post_supply(self.magn, False):
                    self.magn += 1
                self.state = SUPPLY_CHECK
            else:
                raise AssertionError(f"interrupt path in state {self.state}")

    cdef int _give_back(self, double* cost) except -1:
        """The PDU is done with: its buffers go back to the free pools, its status word
        to FREE; then the RPD's PIO write (yielded here, written at RX_GIVE)."""
        cdef AtmNetDevice nd = self.nd
        cdef Py_ssize_t k
        cdef unsigned int handle
        for k in range(self.nseg):
            handle = self.handles[k]
            (<list> nd.free_bufs[1 if handle & LARGE_HANDLE else 0]).append(handle)
        self.nseg = 0
        self.mem.wr32(self.st, STATUS_FREE)
        nd.cur_rx += 1
        cost[0] = self.pending + self.pci_write
        self.state = RX_GIVE
        return 1
