# cython: language_level=3, annotation_typing=False
"""The Myrinet driver: the kernel side of a LANai board running DP's control program.

Open allocates, in pinned host memory, one transmit buffer per send descriptor, the
kernel receive ring, the bulk receive ring of the EPOS pipeline and the word the NI
reports send completions into; takes an IRQ line; loads DP's control program into the
board; writes the ring addresses into the control block in SRAM; unmasks the interrupts
the receive mode wants and starts the LANai. Anything that fails unwinds in reverse.

Addresses. The NART holds the destination's Myrinet node id (``hwaddr_for``); the route
to it -- one byte per switch -- comes from the NI's route table, which the mapper loaded
when the network was built (``fabric.map_routes``); the driver reads it from the NI, as
GM's driver reads the routes its mapper computed (``stats()`` shows the routes used).
``write_link_header`` puts the
route right-aligned in a fixed 16-byte route area, then the Myrinet packet type and the
link protocol number; the NI sends from the first route byte.

Transmit (DP-C03, EP-C08, LCI-C15). The protocol builds its frame in the reserved host
buffer. A frame of at most ``pio_max`` bytes (256 by default, EP-A19) is then copied
into the NI's send buffer by PIO -- write-combined into 32-byte PCI bursts, on the
host CPU's time -- and its descriptor says so; a longer one is left where it is and its
descriptor gives the host address for the NI to fetch by DMA. Writing the descriptor
and bumping the producer word are PIO writes too. Send completions come back as a
count the NI DMAs into host memory; the driver reads it when the ring looks full and,
if still full, asks the NI for an interrupt (kernel writers) or for a prompt report
(user-level pollers) before sleeping.

Receive. The NI places each packet at the end of a slot of the kernel ring with its
length and a full flag in the slot's last word (FM-C07). The interrupt handler, or
``poll_path`` when interrupts are off, walks the ring while the flag is set, hands each
frame to its protocol (``deliver_path``), clears the flag, and tells the NI how far it
got -- which frees the slots and is also what the polling watchdog looks at (LCI-C09).
"""
from __future__ import annotations

import errno

from kernelsim import WaitQueue, WouldBlock

from kernelsim._node cimport Costs
from libc.string cimport memcpy
from kernelsim._physmem cimport PhysMem, mem_rd32, mem_wr32, span_check, span_ok
from kernelsim._waits cimport WaitQueue as _WaitQueue
from nic_drivers._nic cimport NicDriver
from nic_drivers.myrinet import _model as hw
from nic_drivers.myrinet._model cimport HostWriteSink, LanaiNI
from nic_drivers.myrinet.firmware cimport DPFirmware
from kernelsim._path cimport Path, reuse, spent
from kernelsim._netdev cimport RxWalk
from nic_drivers.myrinet.fabric import RouteTable
from nic_drivers.myrinet.firmware import (
    CB_BULK_CONS, CB_BULK_RING, CB_BULK_SLOTS, CB_RX_CONS, CB_RX_MODE, CB_RX_RING, CB_RX_SLOTS,
    CB_SEND_PROD, CB_SLOT_BYTES, CB_TX_DONE, CB_TX_WAIT, CB_TXDONE_ADDR, CB_WATCHDOG_NS, DESC_BASE, DESC_BYTES,
    DESC_PIO, MYRI_TYPE_DP, ROUTE_MAX, RX_MODES, TRAILER_FULL, DPFirmware)

__all__ = ["MyrinetNetDevice"]

MASK32 = 0xFFFFFFFF
TX_WAIT_POLL = 1
TX_WAIT_IRQ = 2


cdef class MyrinetNetDevice(NicDriver):
    # What every frame reads, typed (public: the EPOS pipeline, pipeline.py, reads them too).
    cdef public Py_ssize_t nrx, nbulk, budget, pio_max, slot_bytes
    cdef public Py_ssize_t rx_ring, bulk_ring, txdone, cur_bulk, _rlen
    cdef public unsigned int eimr
    cdef public int _tx_wait
    cdef public double _owed, desc_pio_s
    cdef public long long tx_pio, tx_dma, polls
    cdef public object fw, routes
    cdef public _WaitQueue bulk_tx_space, bulk_rx_space, rx_poll_space    # (every packet wakes one)
    cdef readonly PhysMem hostmem        # the node's memory (the rings, the transmit buffers)
    cdef object _hdr_dst
    cdef object _known_of                # the RouteTable whose `known` dict _known_routes is
    cdef dict _known_routes
    cdef bytes _hdr_route
    cdef int _hdr_proto

    kind = "myrinet"
    link_header_bytes = ROUTE_MAX + 4          # route area, Myrinet packet type, link protocol
    driver_module = "myrinet"

    def __init__(self, node, dev, name, *, tx_ring, rx_ring, bulk_ring, rx_mode, watchdog_us, pio_max, budget, abandon_s: float = 1.0):
        super().__init__(node, dev, name, node.nid)
        p = node.profile
        self.abandon_s = abandon_s
        self.ntx = tx_ring
        self.nrx = rx_ring
        self.nbulk = bulk_ring
        if rx_mode not in RX_MODES:
            raise OSError(errno.EINVAL, f"myrinet: rx_mode must be one of {', '.join(RX_MODES)}")
        self.rx_mode = rx_mode
        self.watchdog_s = watchdog_us * 1e-6 if watchdog_us > 0 else p["lanai.watchdog_s"]
        self.pio_max = pio_max if pio_max >= 0 else int(p["lanai.pio_max_bytes"])
        self.budget = budget
        self.max_payload = dev.buffer_bytes - self.link_header_bytes
        self.slot_bytes = (dev.buffer_bytes + 4 + 63) // 64 * 64
        self.desc_pio_s = dev.pio_time(12) + dev.pio_time(4)    # descriptor words, then the producer word
        self.routes = RouteTable(None, ())
        self.cur_bulk = 0
        self.eimr = 0
        self._rlen = 0
        self._tx_wait = 0
        self._owed = 0.0                 # CPU time of register writes made outside a path
        self.fw = None
        self.hostmem = <PhysMem?> node.mem
        self.bulk_tx_space = WaitQueue(node.engine)
        self.bulk_rx_space = WaitQueue(node.engine)
        self.rx_poll_space = WaitQueue(node.engine)
        self.tx_pio = self.tx_dma = 0
        self.polls = 0
        self.bulk = None

    # -- open / stop ---------------------------------------------------------------------

    def open(self) -> None:
        node, dev = self.node, self.dev
        try:
            self.tx_bufs = [self.alloc(dev.buffer_bytes, 64) for _ in range(self.ntx)]
            self.rx_ring = self.alloc(self.nrx * self.slot_bytes, 64)
            self.bulk_ring = self.alloc(self.nbulk * self.slot_bytes, 64) if self.nbulk else 0
            self.txdone = self.alloc(64, 64)
            self.attach_irq()
            fw = DPFirmware(node.profile, self.ntx, self.abandon_s)
            dev.load_firmware(fw)
            self.fw = fw
        except MemoryError:
            self.stop()
            raise OSError(errno.ENOMEM, f"{self.name}: no host memory for the rings") from None
        except BaseException:
            self.stop()
            raise
        table = dev.route_table
        if not table:
            # No mapper ran (a real transport carries the packets): one crossbar, node n
            # on port n, for every node of the cluster description.
            table = RouteTable(lambda nid: bytes([0x80 | nid]),
                               [nid for nid, addrs in node.hosts.items()
                                if self.kind in addrs and isinstance(nid, int) and 0 <= nid < 0x80])
        elif not isinstance(table, RouteTable):         # routes written by hand: a plain mapping
            table = RouteTable(table.get, list(table))
        self.routes = table
        self._known_of = table
        self._known_routes = table.known
        sink = _HostWrite.__new__(_HostWrite)
        (<_HostWrite> sink).nd = self
        dev.host_write_sink = sink
        w = dev.pio_write32
        for off, value in ((CB_SEND_PROD, 0), (CB_RX_CONS, 0), (CB_BULK_CONS, 0), (CB_TX_WAIT, 0),
                           (CB_RX_RING, self.rx_ring), (CB_RX_SLOTS, self.nrx), (CB_BULK_RING, self.bulk_ring),
                           (CB_BULK_SLOTS, self.nbulk), (CB_SLOT_BYTES, self.slot_bytes),
                           (CB_TXDONE_ADDR, self.txdone), (CB_RX_MODE, RX_MODES.index(self.rx_mode)),
                           (CB_WATCHDOG_NS, int(round(self.watchdog_s * 1e9))), (CB_TX_DONE, 0)):
            w(off, value)
        self.eimr = hw.ISR_TX | hw.ISR_ERR | (0 if self.rx_mode == "poll" else hw.ISR_RX)
        dev.csr_write(hw.REG_EIMR, self.eimr)
        dev.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
        from nic_drivers.myrinet.pipeline import BulkEngine
        self.bulk = BulkEngine(self) if self.nbulk else None

    def stop(self) -> None:
        dev = self.dev
        dev.csr_write(hw.REG_CTRL, 0)
        dev.csr_write(hw.REG_EIMR, 0)
        self.detach_irq()
        dev.host_write_sink = None
        if self.fw is not None and dev.firmware is self.fw:
            dev.unload_firmware()
        self.fw = None
        self.release_resources()
        self.bulk = None

    # -- transmit ------------------------------------------------------------------------

    def _reclaim(self):
        """Take the NI's completion count from host memory; free those descriptors."""
        return self._reclaim_c()

    cdef long long _reclaim_c(self) except -1:
        cdef long long done = mem_rd32(self.hostmem, self.txdone), freed
        # The counts are 32-bit words: the difference modulo 2**32 (C arithmetic, no Python int).
        freed = <unsigned int> (<unsigned int> done - <unsigned int> self.dirty_tx)
        if 0 < freed <= self.cur_tx - self.dirty_tx:
            self.dirty_tx += freed
            if self._tx_wait:
                self._tx_wait = 0
                (<LanaiNI> self.dev).pio_write32(CB_TX_WAIT, 0)
                self._owed += self.c.pci_write
            (<_WaitQueue> self.tx_space).wake()
            self.bulk_tx_space.wake()
            return freed
        return 0

    def _reserve(self, int wait_level, queue) -> int:
        """Index of the next free send descriptor, or WouldBlock on `queue`."""
        return self._reserve_c(wait_level, queue)

    cdef Py_ssize_t _reserve_c(self, int wait_level, object queue) except -1:
        if self.cur_tx - self.dirty_tx >= self.ntx:
            self._reclaim_c()
            if self.cur_tx - self.dirty_tx >= self.ntx:
                self.tx_busy += 1
                if self._tx_wait < wait_level:
                    self._tx_wait = wait_level
                    self.dev.pio_write32(CB_TX_WAIT, wait_level)
                    self._owed += self.c.pci_write
                raise WouldBlock(queue, f"{self.name}: send ring full")
        return self.cur_tx % self.ntx

    cdef Py_ssize_t tx_buffer(self) except -1:
        return self.tx_bufs[self._reserve_c(TX_WAIT_IRQ, self.tx_space)]

    def route(self, nid: int) -> bytes:
        r = self.routes.get(nid)
        if r is None:
            raise OSError(errno.EHOSTUNREACH, f"{self.name}: no route to Myrinet node {nid!r}")
        if len(r) > ROUTE_MAX:
            raise OSError(errno.EHOSTUNREACH, f"{self.name}: route to node {nid} has {len(r)} hops (at most {ROUTE_MAX})")
        return r

    cdef Py_ssize_t tx_header(self, Py_ssize_t addr, object dst_hw, int proto) except -1:
        """`write_link_header` (NetDevice's C transmit interface): the route, right-aligned
        in the route area, then the packet type and the link protocol."""
        cdef object r = None
        cdef Py_ssize_t at, n
        if self.routes is self._known_of:       # looked up every time: the mapper may re-route
            r = self._known_routes.get(dst_hw)
        if r is None or len(r) > _ROUTE_MAX:
            r = self.route(dst_hw)              # not asked for yet (or refused: it raises)
        if self._hdr_route is None or proto != self._hdr_proto or r != self._hdr_dst:
            self._hdr_route = r + MYRI_TYPE_DP.to_bytes(2, "big") + proto.to_bytes(2, "big")
            self._hdr_dst = r
            self._hdr_proto = proto
        at = addr + _ROUTE_MAX - len(r)
        n = len(self._hdr_route)
        if not span_ok(at, n, self.hostmem.size):
            span_check(at, n, self.hostmem.size, "physical memory")
        memcpy(&self.hostmem.buf[at], <const unsigned char*> self._hdr_route, n)
        self._rlen = len(r)
        return addr + (_ROUTE_MAX + 4)

    cdef object tx_commit(self, Py_ssize_t payload_bytes, double pending):
        """Hand the frame to the NI: `_MyriCommit` (a C state machine); for reading::

            entry = self.cur_tx % self.ntx
            off = ROUTE_MAX - self._rlen
            flen = self._rlen + 4 + payload_bytes
            host = self.tx_bufs[entry] + off
            owed, self._owed = self._owed, 0.0
            if flen <= self.pio_max:             # copied into the NI's send buffer by PIO
                yield pending + owed + self.c_desc + dev.pio_time(flen) + self.desc_pio_s
                dev.pio_write(self.fw.send_buffer(entry) + off, mem.view[host:host + flen])
                self.tx_pio += 1
                self._post(entry, DESC_PIO | flen, 0, off)
            else:                                # fetched by the NI's host DMA
                yield pending + owed + self.c_desc + self.desc_pio_s
                self.tx_dma += 1
                self._post(entry, flen, host, off)
            self.tx_frames += 1
            self.tx_bytes += flen
        """
        cdef _MyriCommit path = <_MyriCommit> reuse(_commits, _MyriCommit)
        path.value = None
        path.state = 0
        path.nd = self
        path.payload_bytes = payload_bytes
        path.pending = pending
        return path

    def _post(self, Py_ssize_t entry, unsigned int w0, Py_ssize_t host, Py_ssize_t off):
        """Write descriptor `entry` and bump the producer word (the NI watches it)."""
        self._post_desc(entry, w0, host, off)

    cdef int _post_desc(self, Py_ssize_t entry, unsigned int w0, Py_ssize_t host, Py_ssize_t off) except -1:
        cdef LanaiNI dev = <LanaiNI> self.dev
        cdef Py_ssize_t d = _DESC_BASE + _DESC_BYTES * entry
        dev.pio_write32(d, w0)
        dev.pio_write32(d + 4, <unsigned int> host)
        dev.pio_write32(d + 8, <unsigned int> off)
        self.cur_tx += 1
        dev.pio_write32(_CB_SEND_PROD, <unsigned int> self.cur_tx)      # the count modulo 2**32
        return 0

    def pio_path(self, sram_off: int, data, pending: float = 0.0):
        """Write `data` into NI SRAM by PIO on this CPU's time (write-combined bursts)."""
        yield pending + self.dev.pio_time(len(data))
        self.dev.pio_write(sram_off, data)
        return len(data)

    # -- receive -------------------------------------------------------------------------

    def interrupt_path(self, double pending=0.0):
        """The interrupt handler's path: `_MyriIrq` (a C state machine; the generator it
        is, for reading, in its docstring)."""
        return self.irq_path(pending)

    cdef object irq_path(self, double pending):
        # The interrupt controller's C call for `interrupt_path`.
        cdef _MyriIrq path = <_MyriIrq> reuse(_irqs, _MyriIrq)
        path.value = None
        path.state = IRQ_TOP
        path.passes = 0
        path.isr = 0
        path.walk = None
        path.nd = self
        path.dev = <LanaiNI> self.dev
        path.pending = pending
        return path

    def poll_path(self, pending: float = 0.0):
        """Walk the kernel ring without an interrupt (rx_mode poll, or a protocol's poll)."""
        self.polls += 1
        owed, self._owed = self._owed, 0.0
        pending = yield from self._rx_path(pending + owed)
        pending += self.c_desc * self._reclaim_c()
        return pending

    def _rx_path(self, double pending):
        """The walk of the kernel ring: `_MyriRxWalk` (a C state machine)."""
        return _rx_walk(self, pending)

    def _host_write(self, Py_ssize_t addr, Py_ssize_t n) -> None:
        """The NI's DMA wrote host memory: a modeled poll of that word notices it now (FM-C06)."""
        self._host_wrote(addr)

    cdef int _host_wrote(self, Py_ssize_t addr) except -1:
        if addr == self.txdone:
            self.bulk_tx_space.wake()
        elif self.bulk_ring and self.bulk_ring <= addr < self.bulk_ring + self.nbulk * self.slot_bytes:
            self.bulk_rx_space.wake()
        elif self.rx_ring <= addr < self.rx_ring + self.nrx * self.slot_bytes:
            self.rx_poll_space.wake()
        return 0

    # -- the EPOS bulk-transfer interface (EP-A01..A20, EP-C01..C08): see pipeline.py ------------------

    def bulk_send_op(self, dest_nid: int, data, packet_bytes="adaptive"):
        """A bulk message to `dest_nid` (bytes, or a byte count of zeros), cut into packets of
        `packet_bytes` ("adaptive", "fixed:N" or N). Run it with ``pipeline.run_op`` (trio)
        or ``run_op_sync``: its ``path()`` raises WouldBlock when the send ring is full and
        continues where it stopped when called again."""
        if self.bulk is None:
            raise OSError(errno.ENODEV, f"{self.name}: loaded with bulk_ring=0: no bulk transfers")
        return self.bulk.send_op(dest_nid, data, packet_bytes)

    def bulk_recv_op(self):
        """The next complete bulk message, as (source node, bytes), polled from the bulk ring."""
        if self.bulk is None:
            raise OSError(errno.ENODEV, f"{self.name}: loaded with bulk_ring=0: no bulk transfers")
        return self.bulk.recv_op()

    def stats(self) -> dict:
        out = super().stats()
        out.update(tx_ring=self.ntx, rx_ring=self.nrx, bulk_ring=self.nbulk, rx_mode=self.rx_mode,
                   tx_queued=self.cur_tx - self.dirty_tx, tx_pio=self.tx_pio, tx_dma=self.tx_dma,
                   polls=self.polls, irq=self.irq_line, routes={k: v.hex() for k, v in sorted(self.routes.used().items())},
                   device=self.dev.stats(), firmware=self.fw.stats() if self.fw else None,
                   bulk=self.bulk.stats() if self.bulk else None)
        return out


cdef class _HostWrite(HostWriteSink):
    # The board's host-write hook: MyrinetNetDevice._host_write by a C call.
    cdef MyrinetNetDevice nd

    cdef int wrote(self, Py_ssize_t addr, Py_ssize_t n) except -1:
        return self.nd._host_wrote(addr)


cdef unsigned int _ISR_RX = hw.ISR_RX, _ISR_TX = hw.ISR_TX, _ISR_ERR = hw.ISR_ERR
cdef int _REG_ISR = hw.REG_ISR
cdef unsigned int _TRAILER_FULL = TRAILER_FULL
cdef Py_ssize_t _CB_RX_CONS = CB_RX_CONS, _CB_SEND_PROD = CB_SEND_PROD
cdef Py_ssize_t _DESC_BASE = DESC_BASE, _DESC_BYTES = DESC_BYTES, _ROUTE_MAX = ROUTE_MAX
cdef unsigned int _DESC_PIO = DESC_PIO


# Spare paths, made again once nothing else holds them (kernelsim._path.reuse): one
# commit, one interrupt path and one ring walk per frame.
cdef list _commits = [None] * 4
cdef list _irqs = [None] * 4
cdef list _walks = [None] * 4


cdef _MyriRxWalk _rx_walk(MyrinetNetDevice nd, double pending):
    cdef _MyriRxWalk walk = <_MyriRxWalk> reuse(_walks, _MyriRxWalk)
    walk.value = None
    walk.proto_path = None
    walk.state = WALK_TOP
    walk.walked = walk.consumed = walk.end = 0
    walk.nd = nd
    walk.mem = nd.hostmem
    walk.pending = pending
    return walk


cdef enum:
    WALK_TOP            # look at the next slot
    WALK_SLOT           # the memory miss is spent: read the slot's trailer
    WALK_PROTO          # a protocol's path runs
    WALK_CONSUMED       # the consumer word's PCI write is spent: write it
    WALK_OVER


cdef class _MyriRxWalk(RxWalk):
    """The kernel ring walk (`MyrinetNetDevice._rx_path`) as a C state machine; the
    generator it replaces, for reading::

        consumed = 0
        for _ in range(self.nrx):
            end = self.rx_ring + (self.cur_rx % self.nrx + 1) * self.slot_bytes
            yield pending + c.mem_miss            # the NI wrote it: not in the cache
            pending = 0.0
            w = mem.rd32(end - 4)
            if not w & TRAILER_FULL:
                break
            n = w & 0xFFFF
            if n < 4 or n > self.slot_bytes - 4:
                self.rx_errors += 1
            else:
                start = end - 4 - n
                pending = yield from self.deliver_path(mem.rd16be(start + 2), start + 4, n - 4)
            mem.wr32(end - 4, 0)
            self.cur_rx += 1
            consumed += 1
            pending += self.c_desc
        if consumed:
            yield pending + c.pci_write
            pending = 0.0
            self.dev.pio_write32(CB_RX_CONS, self.cur_rx & MASK32)   # slots free; we polled
        return pending
    """
    cdef MyrinetNetDevice nd
    cdef PhysMem mem
    cdef int state
    cdef Py_ssize_t walked, consumed, end

    cdef int step(self, double* cost) except -1:
        cdef MyrinetNetDevice nd = self.nd
        cdef PhysMem mem = self.mem
        cdef unsigned int w
        cdef Py_ssize_t n, start
        while True:
            if self.state == WALK_TOP:
                if self.walked == nd.nrx:
                    self._finish(cost)
                    if self.state == WALK_CONSUMED:
                        if not spent(cost[0]):
                            return 1
                        continue
                    return 0
                self.walked += 1
                self.end = nd.rx_ring + (nd.cur_rx % nd.nrx + 1) * nd.slot_bytes
                cost[0] = self.pending + nd.c.mem_miss  # the NI wrote it: not in the cache
                self.state = WALK_SLOT
                if not spent(cost[0]):
                    return 1
            elif self.state == WALK_SLOT:
                self.pending = 0.0
                w = mem_rd32(mem, self.end - 4)
                if not w & _TRAILER_FULL:
                    self._finish(cost)
                    if self.state == WALK_CONSUMED:
                        if not spent(cost[0]):
                            return 1
                        continue
                    return 0
                n = w & 0xFFFF
                if n < 4 or n > nd.slot_bytes - 4:
                    nd.rx_errors += 1
                else:
                    start = self.end - 4 - n
                    if self.give_frame(nd, mem.rd16be(start + 2), start + 4, n - 4):
                        self.state = WALK_PROTO
                        continue
                self._next_slot(nd)
            elif self.state == WALK_PROTO:
                if self.step_proto(cost):
                    return 1
                self._next_slot(nd)
            elif self.state == WALK_CONSUMED:
                self.pending = 0.0
                # Slots free; we polled. The count modulo 2**32 (a C cast: no Python int).
                (<LanaiNI> nd.dev).pio_write32(_CB_RX_CONS, <unsigned int> nd.cur_rx)
                self.state = WALK_OVER
                self.value = self.pending
                return 0
            else:
                self.value = self.pending
                return 0

    cdef void _finish(self, double* cost) noexcept:
        # The walk is over: the consumer word goes to the NI if anything was taken.
        if self.consumed:
            cost[0] = self.pending + nd_pci_write(self.nd)
            self.state = WALK_CONSUMED
        else:
            self.state = WALK_OVER
            self.value = self.pending

    cdef void _next_slot(self, MyrinetNetDevice nd) except *:
        mem_wr32(self.mem, self.end - 4, 0)
        nd.cur_rx += 1
        self.consumed += 1
        self.pending += nd.c_desc
        self.state = WALK_TOP


cdef inline double nd_pci_write(MyrinetNetDevice nd) noexcept:
    return nd.c.pci_write


cdef enum:
    IRQ_TOP             # a pass of the handler loop: read the ISR
    IRQ_READ_ISR        # the PCI read's time is spent: look at the ISR
    IRQ_ACK             # the PCI write's time is spent: acknowledge
    IRQ_WALK            # the ring walk runs
    IRQ_AFTER_WALK


cdef class _MyriIrq(Path):
    """The Myrinet interrupt path as a C state machine; the generator it replaces::

        for _ in range(self.budget):
            owed, self._owed = self._owed, 0.0
            yield pending + owed + c.pci_read
            isr = dev.csr_read(hw.REG_ISR) & self.eimr
            if not isr:
                return 0.0
            yield c.pci_write
            dev.csr_write(hw.REG_ISR, isr)          # acknowledge what we saw
            pending = self.c_isr
            if isr & hw.ISR_RX:
                pending = yield from self._rx_path(pending)
            if isr & hw.ISR_TX:
                pending += self.c_desc * self._reclaim_c()
            if isr & hw.ISR_ERR:
                self.rx_errors += 1
        return pending
    """
    cdef MyrinetNetDevice nd
    cdef LanaiNI dev
    cdef double pending
    cdef int state
    cdef Py_ssize_t passes
    cdef unsigned int isr
    cdef _MyriRxWalk walk

    cdef int step(self, double* cost) except -1:
        cdef MyrinetNetDevice nd = self.nd
        cdef double owed
        while True:
            if self.state == IRQ_TOP:
                if self.passes == nd.budget:
                    self.value = self.pending
                    return 0
                self.passes += 1
                owed = nd._owed
                nd._owed = 0.0
                cost[0] = self.pending + owed + nd.c.pci_read
                self.state = IRQ_READ_ISR
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_READ_ISR:
                self.isr = self.dev.csr_read(_REG_ISR) & nd.eimr
                if not self.isr:
                    self.value = 0.0
                    return 0
                cost[0] = nd.c.pci_write
                self.state = IRQ_ACK
                if not spent(cost[0]):
                    return 1
            elif self.state == IRQ_ACK:
                self.dev.csr_write(_REG_ISR, self.isr)  # acknowledge what we saw
                self.pending = nd.c_isr
                if self.isr & _ISR_RX:
                    self.walk = _rx_walk(nd, self.pending)
                    self.state = IRQ_WALK
                else:
                    self.state = IRQ_AFTER_WALK
            elif self.state == IRQ_WALK:
                if self.walk.step(cost):
                    return 1
                self.pending = self.walk.value
                self.walk = None
                self.state = IRQ_AFTER_WALK
            else:
                if self.isr & _ISR_TX:
                    self.pending += nd.c_desc * nd._reclaim_c()
                if self.isr & _ISR_ERR:
                    nd.rx_errors += 1
                self.state = IRQ_TOP


cdef class _MyriCommit(Path):
    """`MyrinetNetDevice.tx_commit_path` (its docstring has the generator it replaces)."""
    cdef MyrinetNetDevice nd
    cdef Py_ssize_t payload_bytes, entry, off, flen, host
    cdef double pending
    cdef int state          # 0: not started, 1: PIO copy owed, 2: DMA descriptor owed, 3: over

    cdef int step(self, double* cost) except -1:
        cdef MyrinetNetDevice nd = self.nd
        cdef LanaiNI dev = <LanaiNI> nd.dev
        cdef double owed
        if self.state == 0:
            self.entry = nd.cur_tx % nd.ntx
            self.off = _ROUTE_MAX - nd._rlen
            self.flen = nd._rlen + 4 + self.payload_bytes
            self.host = <Py_ssize_t> nd.tx_bufs[self.entry] + self.off
            owed = nd._owed
            nd._owed = 0.0
            if self.flen <= nd.pio_max:
                cost[0] = self.pending + owed + nd.c_desc + dev.pio_time(self.flen) + nd.desc_pio_s
                self.state = 1
            else:
                cost[0] = self.pending + owed + nd.c_desc + nd.desc_pio_s
                self.state = 2
            if not spent(cost[0]):
                return 1
        if self.state == 1:
            if nd.fw is None:
                raise AttributeError(f"{nd.name}: no control program loaded")
            dev.pio_write_from((<DPFirmware> nd.fw).buffer_at(self.entry) + self.off, nd.hostmem, self.host, self.flen)
            nd.tx_pio += 1
            nd._post_desc(self.entry, _DESC_PIO | <unsigned int> self.flen, 0, self.off)
        elif self.state == 2:
            nd.tx_dma += 1
            nd._post_desc(self.entry, self.flen, self.host, self.off)
        if self.state != 3:
            self.state = 3
            nd.tx_frames += 1
            nd.tx_bytes += self.flen
        self.value = None
        return 0
