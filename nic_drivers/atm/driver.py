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
"""
from __future__ import annotations

import errno

from kernelsim import NetDevice
from nic_drivers._nic import NicDriver

from nic_drivers.atm import _model as hw

LLC_SNAP = bytes([0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00])
ENCAP_BYTES = {"vcmux": 2, "llc": 8}
LARGE_HANDLE = 0x10000
RPD_STRIDE = (hw.RPD_BYTES + 31) // 32 * 32


class AtmNetDevice(NicDriver):
    kind = "atm"
    driver_module = "atm"

    def __init__(self, node, dev, name, *, mtu, encap, small_buffers, large_buffers, supply_block, budget):
        super().__init__(node, dev, name, dev.hwaddr)
        self.mtu = mtu
        self.encap = encap
        self.link_header_bytes = ENCAP_BYTES[encap]
        self.max_payload = mtu - self.link_header_bytes
        self.nsmall = small_buffers
        self.nlarge = large_buffers
        self.block = supply_block
        self.budget = budget
        self.cmd_next = 0
        self.tx_errors = 0
        self.rx_joined = 0
        self.rx_gathered = 0
        self.vcs_in: list = []
        self.vcs_out: list = []

    # -- open / stop (probe and unwind) ---------------------------------------------------

    def open(self) -> None:
        dev = self.dev
        try:
            dev.reg_write(hw.REG_HCR, hw.HCR_RESET)
            bstat = dev.reg_read(hw.REG_BSTAT)
            if bstat != hw.BSTAT_CP_RUNNING:
                raise OSError(errno.EIO, f"{self.name}: the adapter's cell processor did not start "
                                         f"(boot status {bstat:#010x})")
            self._geometry()
            self._alloc_queues()
            self.attach_irq()
            self._init_queues()
            dev.reg_write(hw.REG_IMASK, 1)
            for magn in (0, 1):
                while self._post_supply(magn, partial=True):
                    pass
            self._open_vcs()
        except BaseException:
            self.stop()
            raise

    def _geometry(self) -> None:
        dev = self.dev
        rd = dev.reg_read
        self.cmdq_off, self.txq_off, self.rxq_off = rd(hw.REG_CMDQ), rd(hw.REG_TXQ), rd(hw.REG_RXQ)
        self.bsq_off = (rd(hw.REG_BSQ_SMALL), rd(hw.REG_BSQ_LARGE))
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

    def _alloc_queues(self) -> None:
        self.tpds = self.alloc(hw.TPD_BYTES * self.ntx, 32)
        self.tx_status = self.alloc(4 * self.ntx)
        self.tx_bufs = [self.alloc(self.mtu) for _ in range(self.ntx)]
        self.rpds = self.alloc(RPD_STRIDE * self.nrx, 32)
        self.rx_status = self.alloc(4 * self.nrx)
        self.cmd_status = self.alloc(4 * self.ncmd)
        self.rbd_blocks = [[self.alloc(hw.RBD_BYTES * self.block, 32) for _ in range(self.nbsq)]
                           for _magn in (0, 1)]
        self.bsq_status = [self.alloc(4 * self.nbsq), self.alloc(4 * self.nbsq)]
        self.bsq_head = [0, 0]
        self.small = [self.alloc(self.small_bytes) for _ in range(self.nsmall)]
        # Every large buffer keeps small_bytes of headroom in front of what the card is
        # given, so a PDU split small + large can be joined by copying the small part.
        self.large = [self.alloc(self.small_bytes + self.large_bytes) + self.small_bytes
                      for _ in range(self.nlarge)]
        self.bounce = self.alloc(self.mtu)
        self.free_bufs = [list(range(self.nsmall)), [LARGE_HANDLE | j for j in range(self.nlarge)]]
        # Freed buffers go back a block at a time (fewer PIO writes), or half a pool if
        # the pool is smaller than two blocks, so it can never starve the card.
        self.supply_min = [min(self.block, max(1, n // 2)) for n in (self.nsmall, self.nlarge)]

    def _init_queues(self) -> None:
        mem, dev = self.node.mem, self.dev
        for e in range(self.ntx):
            mem.wr32(self.tx_status + 4 * e, hw.STATUS_FREE)
            dev.reg_write(self.txq_off + hw.QENTRY * e + 4, self.tx_status + 4 * e)
        for e in range(self.nrx):
            mem.wr32(self.rx_status + 4 * e, hw.STATUS_FREE)
            dev.reg_write(self.rxq_off + hw.QENTRY * e + 4, self.rx_status + 4 * e)
            dev.reg_write(self.rxq_off + hw.QENTRY * e, self.rpds + RPD_STRIDE * e)    # the card's now
        for magn in (0, 1):
            for i in range(self.nbsq):
                mem.wr32(self.bsq_status[magn] + 4 * i, hw.STATUS_FREE)
                dev.reg_write(self.bsq_off[magn] + hw.QENTRY * i + 4, self.bsq_status[magn] + 4 * i)
        for i in range(self.ncmd):
            mem.wr32(self.cmd_status + 4 * i, hw.STATUS_FREE)

    def _command(self, w0: int, w1: int, w2: int = 0) -> bool:
        """Post one command and read its status (the card executes commands as they come)."""
        mem, dev = self.node.mem, self.dev
        i = self.cmd_next
        self.cmd_next = (i + 1) % self.ncmd
        base = self.cmdq_off + hw.CMDQ_ENTRY * i
        st = self.cmd_status + 4 * i
        mem.wr32(st, hw.STATUS_PENDING)
        dev.reg_write(base, w0)
        dev.reg_write(base + 4, w1)
        dev.reg_write(base + 8, w2)
        dev.reg_write(base + 16, st)                 # the status address posts the command
        s = mem.rd32(st)
        return bool(s & hw.STATUS_COMPLETE) and not s & hw.STATUS_ERROR

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
        op = hw.OPCODE_ACTIVATE_VCIN if incoming else hw.OPCODE_ACTIVATE_VCOUT
        if not (0 <= vpi <= 0xFF and 0 <= vci <= 0xFFFF) or \
                not self._command(op | hw.AAL5 << 8, (vpi << 16) | vci, self.mtu):
            raise OSError(errno.EINVAL, f"{self.name}: the adapter refused to open {'incoming' if incoming else 'outgoing'}"
                                        f" VPI/VCI {vpi}/{vci} (it decodes VPI 0, VCI 0..{self.num_connect - 1})")
        (self.vcs_in if incoming else self.vcs_out).append((vpi, vci))

    def stop(self) -> None:
        """Stop the card (a reset closes every VC and forgets every buffer) and free what open took."""
        dev = self.dev
        dev.reg_write(hw.REG_IMASK, 0)
        dev.reg_write(hw.REG_HCR, hw.HCR_RESET)
        self.detach_irq()
        self.vcs_in.clear()
        self.vcs_out.clear()
        self.release_resources()

    # -- transmit ----------------------------------------------------------------------

    tx_reserve = NetDevice.ring_reserve

    def write_link_header(self, addr: int, dst_hw, proto: int) -> None:
        vpi, vci = dst_hw
        mem = self.node.mem
        # The VC goes into the TPD's cell header; the protocol id in front of the payload.
        mem.wr32(self.tpds + hw.TPD_BYTES * (self.cur_tx % self.ntx) + hw.TPD_HEADER,
                 ((vpi & 0xFF) << 20) | ((vci & 0xFFFF) << 4))
        if self.encap == "llc":
            mem.write(addr, LLC_SNAP + proto.to_bytes(2, "big"))
        else:
            mem.write(addr, proto.to_bytes(2, "big"))

    def tx_commit_path(self, payload_bytes: int, pending: float = 0.0):
        mem = self.node.mem
        yield pending + self.c_desc + self.c.pci_write
        e = self.cur_tx % self.ntx
        tpd = self.tpds + hw.TPD_BYTES * e
        length = self.link_header_bytes + payload_bytes
        queued = self.cur_tx - self.dirty_tx
        intr = queued == self.ntx // 2 or queued >= self.ntx - 2
        mem.wr32(tpd + hw.TPD_SPEC, length | 1 << 16 | hw.AAL5 << 24 | (1 << 28 if intr else 0))
        mem.wr32(tpd + hw.TPD_RATE, 0)
        mem.wr32(tpd + hw.TPD_TSD, self.tx_bufs[e])
        mem.wr32(tpd + hw.TPD_TSD + 4, length)
        mem.wr32(self.tx_status + 4 * e, hw.STATUS_PENDING)
        self.cur_tx += 1
        self.tx_frames += 1
        self.tx_bytes += length
        self.dev.reg_write(self.txq_off + hw.QENTRY * e, tpd | 1)     # one 32-byte block: the doorbell

    # -- interrupt -----------------------------------------------------------------------

    # `pending` is CPU time spent since the last device access, yielded just before the
    # next one (as in the tulip driver): each access happens at its modeled time.

    def interrupt_path(self, pending: float = 0.0):
        dev = self.dev
        c = self.c
        for _ in range(self.budget):
            yield pending + c.pci_read
            if not dev.reg_read(hw.REG_HCR) & hw.HCR_INTR:
                return 0.0
            yield c.pci_write
            dev.reg_write(hw.REG_HCR, hw.HCR_CLR_INTR)     # acknowledge, then look at the queues
            pending = yield from self._rx_path(self.c_isr)
            pending += self._tx_reclaim()
            pending = yield from self._supply_path(pending)
        return pending

    def _rx_path(self, pending):
        mem = self.node.mem
        c = self.c
        for _ in range(self.nrx):
            e = self.cur_rx % self.nrx
            st = self.rx_status + 4 * e
            yield pending + c.mem_miss                       # written by the card's DMA: not cached
            pending = 0.0
            if not mem.rd32(st) & hw.STATUS_COMPLETE:
                return pending
            rpd = self.rpds + RPD_STRIDE * e
            pending = c.mem_miss + self.c_desc
            segs = self._segments(rpd)
            if segs is None:
                self.rx_errors += 1
            else:
                addr, length, cost = self._contiguous(segs)
                pending += cost
                hdr = self.link_header_bytes
                if length < hdr or (self.encap == "llc" and mem.read(addr, 6) != LLC_SNAP):
                    self.rx_errors += 1
                else:
                    proto = mem.rd16be(addr + hdr - 2)
                    pending += yield from self.deliver_path(proto, addr + hdr, length - hdr)
                for handle, _a, _n in segs:
                    self.free_bufs[1 if handle & LARGE_HANDLE else 0].append(handle)
            mem.wr32(st, hw.STATUS_FREE)
            self.cur_rx += 1
            yield pending + c.pci_write
            pending = 0.0
            self.dev.reg_write(self.rxq_off + hw.QENTRY * e, rpd)   # the RPD goes back to the card
        return pending

    def _segments(self, rpd):
        """[(handle, address, length)] of a received PDU, or None if the RPD makes no sense."""
        mem = self.node.mem
        nseg = mem.rd32(rpd + hw.RPD_NSEG)
        if not 1 <= nseg <= hw.RSD_MAX_PER_RPD:
            return None
        segs = []
        for k in range(nseg):
            handle = mem.rd32(rpd + hw.RPD_RSD + 8 * k)
            n = mem.rd32(rpd + hw.RPD_RSD + 8 * k + 4)
            if handle & LARGE_HANDLE:
                j = handle & ~LARGE_HANDLE
                if j >= self.nlarge or n > self.large_bytes:
                    return None
                segs.append((handle, self.large[j], n))
            else:
                if handle >= self.nsmall or n > self.small_bytes:
                    return None
                segs.append((handle, self.small[handle], n))
        return segs

    def _contiguous(self, segs):
        """(address, length, CPU time) of the PDU as one piece of memory."""
        mem = self.node.mem
        if len(segs) == 1:
            return segs[0][1], segs[0][2], 0.0
        h0, a0, n0 = segs[0]
        if len(segs) == 2 and not h0 & LARGE_HANDLE and segs[1][0] & LARGE_HANDLE:
            _h1, a1, n1 = segs[1]
            mem.move(a1 - n0, a0, n0)                        # into the large buffer's headroom
            self.rx_joined += 1
            return a1 - n0, n0 + n1, self.c.copy(n0)
        total = 0
        for _h, a, n in segs:
            n = min(n, self.mtu - total)
            mem.move(self.bounce + total, a, n)
            total += n
        self.rx_gathered += 1
        return self.bounce, total, self.c.copy(total)

    def _post_supply(self, magn: int, partial: bool = False) -> bool:
        """Give the card one block of free buffers if enough are free and a supply entry is."""
        free = self.free_bufs[magn]
        if not free or (len(free) < self.supply_min[magn] and not partial):
            return False
        i = self.bsq_head[magn]
        st = self.bsq_status[magn] + 4 * i
        mem = self.node.mem
        if mem.rd32(st) & hw.STATUS_PENDING:
            return False                                     # the card has not taken that entry yet
        n = min(self.block, len(free))
        block = self.rbd_blocks[magn][i]
        bufs = self.small if magn == 0 else self.large
        for k in range(n):
            handle = free.pop(0)
            mem.wr32(block + hw.RBD_BYTES * k, handle)
            mem.wr32(block + hw.RBD_BYTES * k + 4, bufs[handle & ~LARGE_HANDLE])
        mem.wr32(st, hw.STATUS_PENDING)
        self.bsq_head[magn] = (i + 1) % self.nbsq
        self.dev.reg_write(self.bsq_off[magn] + hw.QENTRY * i, block | (n - 1))
        return True

    def _supply_path(self, pending):
        for magn in (0, 1):
            while len(self.free_bufs[magn]) >= self.supply_min[magn]:
                yield pending + self.c_desc + self.c.pci_write
                pending = 0.0
                if not self._post_supply(magn):
                    break
        return pending

    def _tx_reclaim(self) -> float:
        """Free the transmit entries the card is done with; return the time it took."""
        mem = self.node.mem
        freed = 0
        while self.dirty_tx < self.cur_tx:
            s = mem.rd32(self.tx_status + 4 * (self.dirty_tx % self.ntx))
            if not s & hw.STATUS_COMPLETE:
                break
            if s & hw.STATUS_ERROR:
                self.tx_errors += 1
            self.dirty_tx += 1
            freed += 1
        if freed:
            self.tx_space.wake()
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
