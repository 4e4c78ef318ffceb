# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The IBM SP switch adapter "TB2": the hardware side.

The TB2 sits on the RS/6000's 32-bit MicroChannel (80 MB/s peak, SP-A15) and joins
its node to the SP high-performance switch. On the card an Intel i860 runs the
adapter firmware; a custom Memory and Switch Management Unit (MSMU) talks to the
switch; two DMA engines move packets between host memory and a 4 KB FIFO in front of
the MSMU (SP-A14, SP-A16). The standard firmware gives one process per node direct,
memory-mapped use of the card (SP-A18, SP-C02):

* a **send FIFO** of 128 entries in host memory (SP-A19), each one 256-byte packet:
  32 bytes of header naming the destination node and route, 224 bytes of data
  (SP-A21, SP-A22);
* a **packet-length array** in adapter memory, one byte per send entry, reached across
  the MicroChannel. The i860 watches it: when the byte of the entry at its send
  pointer becomes non-zero it DMAs that entry out of host memory and hands the packet
  to the switch, then clears the byte and moves on (SP-A23, SP-C02). One store can
  carry several bytes -- a halfword or a word of the array -- which is how a bulk
  send hands over several packets for one MicroChannel access (SP-C03);
* a **receive FIFO** in host memory, 64 entries per active node (SP-A20): the i860
  DMAs each arriving packet into the next entry and then writes the entry's status
  word, which the host polls in its own memory -- no MicroChannel access on the
  receive path -- and pops entries back to the adapter through a register, lazily,
  because every MicroChannel access costs about a microsecond (SP-A17, SP-C04).

What is modeled, and when each effect becomes visible:

* Register file (``reg_write``/``reg_read`` through a write-semantics table): the
  length array (byte, halfword or word stores, aligned, big-endian as on the bus),
  the transmit-done counter the host reads when it thinks the send FIFO is full, the
  receive pop register, the arrival-interrupt enable and write-1-to-clear status
  (arrival interrupts exist but are off unless enabled, SP-A39), the FIFO bases and
  sizes the owner programs when it claims the card, and the node id.
* One i860 shared by both directions: per-packet firmware time on send and receive,
  and a notice latency (half its polling loop) when it was idle. It works ahead of
  the DMA engines, so in a stream the i860, the DMA and the switch link overlap.
* DMA across the MicroChannel: a transaction set-up (about one MicroChannel access),
  re-arbitration between bursts, and the effective byte rate; one engine per
  direction. On receive the status word is a second, separate transaction written
  after the packet, so the host never sees a half-written entry.
* The 4 KB FIFO between MicroChannel and MSMU holds whole packets; when the switch
  link is backed up it fills and the send DMA waits for a packet to leave. The MSMU
  starts a packet onto the link once its first DMA burst is in the FIFO (cut-through),
  so a full packet's DMA and its link transfer overlap; the link never overtakes the
  DMA (the switch is told when the last byte will be in). On
  receive the MSMU's buffering is not bounded here: the i860 and the receive DMA
  each take less per full packet than the link (6.4 µs), so arrivals never pile up
  there, and the losses are where SP-C05 puts them -- the host's receive FIFO.
* Receive-side losses are dropped and counted, never raised: a failed link CRC, a
  malformed or misrouted packet, the card not enabled, and -- the loss the SP AM
  paper names, SP-C05 -- a full receive FIFO.

The host's caches are not coherent with MicroChannel DMA (SP-A24): that is the host's
business (it flushes before storing a length and before an entry is reused), so it is
charged in the host-side paths (``fifos.pyx``), not here.
"""
import errno

cimport cython
from kernelsim._engine cimport Engine, EventTarget
from kernelsim._waits cimport WaitQueue
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy


cdef inline int _copy_in(PhysMem mem, Py_ssize_t addr, bytes data) except -1:
    """``mem.write(addr, data)`` of a packet's bytes: the same check, no buffer view per packet."""
    cdef Py_ssize_t n = len(data)
    if not span_ok(addr, n, mem.size):
        span_check(addr, n, mem.size, "physical memory")
    memcpy(&mem.buf[addr], PyBytes_AS_STRING(data), n)
    return 0
from nic_drivers._nic cimport NicModel

# -- packet format (SP-A21, SP-A22): 32-byte header, 224 bytes of data -----------------
ENTRY_BYTES = 256
HDR_BYTES = 32
DATA_MAX = 224
# Header fields (big-endian, as they travel on the switch). The adapter stamps the
# source node on send; the last word of the header is the receive status word that
# the receiving adapter writes last.
H_DST = 0            # u16 destination node
H_ROUTE = 2          # u8 route (0..3 on the SP switch, SP-A11)
H_FLAGS = 3          # u8 reserved
H_SRC = 4            # u16 source node, stamped by the sending adapter
H_LEN = 6            # u16 data bytes (0..224)
H_PROTO = 8          # u16 link-level protocol id (DP: 0x88B5), 0 for raw user packets
H_USER = 12          # 16 bytes the user library may use (SP AM puts its header here)
USER_BYTES = 16
H_STATUS = 28        # u32 receive status: RX_VALID | data bytes (host byte order)
RX_VALID = 0x80000000

# -- register map (adapter memory across the MicroChannel) ---------------------------
REG_LEN = 0x000          # .. 0x0FF packet-length array, one byte per send entry
REG_TX_DONE = 0x400      # r: packets the adapter has taken out of the send FIFO (mod 2^32)
REG_RX_POP = 0x404       # w: receive entries the host is done with
REG_INT_ENABLE = 0x408   # rw: INT_RX enables the arrival interrupt
REG_INT_STATUS = 0x40C   # r, write 1 to clear: INT_RX an entry was written since the last clear
REG_SEND_BASE = 0x410    # rw: host physical address of the send FIFO
REG_SEND_COUNT = 0x414   # rw: send FIFO entries
REG_RECV_BASE = 0x418    # rw: host physical address of the receive FIFO
REG_RECV_COUNT = 0x41C   # rw: receive FIFO entries
REG_CONTROL = 0x420      # rw: CTL_ENABLE starts the i860's FIFO service; 0 stops and resets it
REG_NODE_ID = 0x424      # r: this adapter's switch node number
REG_RX_USED = 0x428      # r: receive entries written and not yet popped
CTL_ENABLE = 1
INT_RX = 1

LEN_ARRAY_MAX = 256      # bytes of adapter memory given to the length array
LEN_UNIT = 4             # a length byte counts 32-bit words of header + data
MAX_FIFO_SLOTS = 64      # bound of the MSMU FIFO model (packets)

# The same layout and registers as C constants, for the per-packet code below (a module's
# Python name is a dictionary lookup and a boxed compare on every use).
cdef enum:
    C_ENTRY_BYTES = 256
    C_HDR_BYTES = 32
    C_DATA_MAX = 224
    C_H_DST = 0
    C_H_SRC = 4
    C_H_LEN = 6
    C_H_STATUS = 28
    C_CTL_ENABLE = 1
    C_INT_RX = 1
    C_LEN_ARRAY_MAX = 256
    C_LEN_UNIT = 4
    C_REG_LEN = 0x000
    C_REG_TX_DONE = 0x400
    C_REG_RX_POP = 0x404
    C_REG_INT_ENABLE = 0x408
    C_REG_INT_STATUS = 0x40C
    C_REG_SEND_BASE = 0x410
    C_REG_SEND_COUNT = 0x414
    C_REG_RECV_BASE = 0x418
    C_REG_RECV_COUNT = 0x41C
    C_REG_CONTROL = 0x420
    C_REG_NODE_ID = 0x424
    C_REG_RX_USED = 0x428
assert (ENTRY_BYTES, HDR_BYTES, DATA_MAX, H_DST, H_SRC, H_LEN, H_STATUS, CTL_ENABLE, INT_RX, RX_VALID) == \
    (C_ENTRY_BYTES, C_HDR_BYTES, C_DATA_MAX, C_H_DST, C_H_SRC, C_H_LEN, C_H_STATUS, C_CTL_ENABLE, C_INT_RX, RX_VALID_BIT)
assert (LEN_ARRAY_MAX, LEN_UNIT, REG_LEN, REG_TX_DONE, REG_RX_POP, REG_INT_ENABLE, REG_INT_STATUS, REG_SEND_BASE,
        REG_SEND_COUNT, REG_RECV_BASE, REG_RECV_COUNT, REG_CONTROL, REG_NODE_ID, REG_RX_USED) == \
    (C_LEN_ARRAY_MAX, C_LEN_UNIT, C_REG_LEN, C_REG_TX_DONE, C_REG_RX_POP, C_REG_INT_ENABLE, C_REG_INT_STATUS,
     C_REG_SEND_BASE, C_REG_SEND_COUNT, C_REG_RECV_BASE, C_REG_RECV_COUNT, C_REG_CONTROL, C_REG_NODE_ID, C_REG_RX_USED)

# What each engine event of the card is (EventTarget.on_event's `what`).
cdef enum:
    EV_TX_TAKE = 0
    EV_TX_DMA_START = 1
    EV_TX_SKIP = 3
    EV_TX_LINK = 4
    EV_TX_DMA_DONE = 5
    EV_RX_TAKE = 6
    EV_RX_COMMIT = 7
    EV_TX_START_NEXT = 8    # the DMA's start, then the i860 on to its next entry (see `_tx_take`)


cdef inline unsigned int _be16(const unsigned char[::1] b, Py_ssize_t i):
    return (b[i] << 8) | b[i + 1]


cdef class Tb2Port(EventTarget):
    """A port an adapter transmits on, reached by a C call (`_model.pxd`)."""

    cdef int send(self, bytes packet, double t, double ready, double* start, double* end) except -1:
        start[0], end[0] = self.transmit(packet, t, ready)
        return 0


@cython.freelist(16)
cdef class _TxJob:
    """One send entry on its way through the DMA engine and the MSMU FIFO (the argument
    of its engine events: typed, not a tuple per event)."""
    cdef unsigned int epoch
    cdef int entry, slot
    cdef Py_ssize_t nbytes          # 0 for a DMA-done event whose packet the link already took
    cdef double end                 # when the DMA has brought the whole entry in


cdef _TxJob _tx_job(unsigned int epoch, int entry, Py_ssize_t nbytes, int slot, double end):
    cdef _TxJob job = _TxJob.__new__(_TxJob)
    job.epoch = epoch
    job.entry = entry
    job.nbytes = nbytes
    job.slot = slot
    job.end = end
    return job


@cython.freelist(16)
cdef class _RxJob:
    """One arriving packet on its way through the i860 and the receive DMA (the argument
    of its two engine events, as `_TxJob` is of a send's)."""
    cdef unsigned int epoch
    cdef bytes pkt                  # the packet, header and data
    cdef Py_ssize_t dlen            # its data bytes
    cdef Py_ssize_t entry           # the receive entry it goes to (once the i860 has taken it)


cdef inline int _hook(object hook) except -1:
    # An owner's hook (`on_rx`, `on_tx_space`): a wait queue is woken by a C call (once a
    # transfer on a polling owner's card), anything else is called.
    if type(hook) is WaitQueue or isinstance(hook, WaitQueue):
        (<WaitQueue> hook).wake()
    else:
        hook()
    return 0


cdef class Tb2Adapter(NicModel):
    """One TB2 adapter on one node's MicroChannel."""

    # fields and C methods: _model.pxd

    def __cinit__(self, Engine engine, PhysMem mem, int nid, bytes hwaddr, profile):
        self._init_nic(engine, mem, profile, True)
        self.nid = nid
        self.hwaddr = hwaddr
        self.owner = None
        self.port = None
        self.on_rx = None
        self.on_tx_space = None
        self.notice_s = profile["tb2.notice_s"]
        self.i860_tx_s = profile["tb2.i860_tx_s"]
        self.i860_rx_s = profile["tb2.i860_rx_s"]
        self.burst_bytes = int(profile["tb2.dma_burst_bytes"])
        self.fifo_slots = max(1, min(MAX_FIFO_SLOTS, int(profile["tb2.fifo_bytes"]) // ENTRY_BYTES))
        self.epoch = 0
        self._reset()

    cdef _reset(self):
        cdef int i
        for i in range(LEN_ARRAY_MAX):
            self.lengths[i] = 0
        for i in range(MAX_FIFO_SLOTS):
            self.fifo_out[i] = 0.0
        self.epoch += 1
        self.send_base = self.recv_base = 0
        self.send_count = self.recv_count = 0
        self.control = self.int_enable = self.int_status = 0
        self.tx_head = 0
        self.tx_done = 0
        self.tx_active = False
        self.dma_tx_free = self.dma_rx_free = self.i860_free = 0.0
        self.fifo_i = 0
        self.rx_tail = self.rx_used = 0
        self._set_line(False)

    # -- claiming the FIFOs (one owner per node, SP-A18) ---------------------------------

    def claim(self, owner):
        """Give the FIFOs to `owner` (the kernel driver or one user process)."""
        if self.owner is not None and self.owner is not owner:
            raise OSError(errno.EBUSY, f"tb2 on node {self.nid}: the FIFOs are in use by {self.owner!r}")
        self.owner = owner

    def release(self, owner):
        if self.owner is owner:
            self.reg_write(REG_CONTROL, 0, 4)
            self.owner = None
            self.on_rx = None
            self.on_tx_space = None
            self.irq_sink = None

    # -- register file -------------------------------------------------------------------

    cpdef unsigned int reg_read(self, unsigned int off):
        self.reg_reads += 1
        if off == C_REG_TX_DONE:
            return self.tx_done
        if off == C_REG_INT_STATUS:
            return self.int_status
        if off == C_REG_INT_ENABLE:
            return self.int_enable
        if off == C_REG_SEND_BASE:
            return <unsigned int> self.send_base
        if off == C_REG_SEND_COUNT:
            return <unsigned int> self.send_count
        if off == C_REG_RECV_BASE:
            return <unsigned int> self.recv_base
        if off == C_REG_RECV_COUNT:
            return <unsigned int> self.recv_count
        if off == C_REG_CONTROL:
            return self.control
        if off == C_REG_NODE_ID:
            return <unsigned int> self.nid
        if off == C_REG_RX_USED:
            return <unsigned int> self.rx_used
        if off < C_LEN_ARRAY_MAX:
            return self.lengths[off]
        return 0xFFFFFFFF

    cpdef reg_write(self, unsigned int off, unsigned int value, int width=4):
        """One MicroChannel store of `width` bytes (1, 2 or 4, aligned) at `off`."""
        cdef int k
        self.reg_writes += 1
        if off < C_LEN_ARRAY_MAX:
            # Byte enables: a halfword or word store writes 2 or 4 lengths at once,
            # most significant byte at the lowest address (the bus is big-endian).
            if width not in (1, 2, 4) or off % width or off + width > C_LEN_ARRAY_MAX:
                return
            for k in range(width):
                self.lengths[off + k] = (value >> (8 * (width - 1 - k))) & 0xFF
            self._tx_check()
        elif off == C_REG_RX_POP:
            self._pop(value)
        elif off == C_REG_INT_ENABLE:
            self.int_enable = value & C_INT_RX
            self._update_irq()
        elif off == C_REG_INT_STATUS:
            self.int_status &= ~value
            self._update_irq()
        elif off == C_REG_SEND_BASE:
            self.send_base = value
        elif off == C_REG_SEND_COUNT:
            self.send_count = min(<int> value, C_LEN_ARRAY_MAX)
        elif off == C_REG_RECV_BASE:
            self.recv_base = value
        elif off == C_REG_RECV_COUNT:
            self.recv_count = <int> value
        elif off == C_REG_CONTROL:
            if value & C_CTL_ENABLE:
                if not self.control & C_CTL_ENABLE and self._fifos_valid():
                    self.control = C_CTL_ENABLE
                    self._tx_check()
            else:
                self._reset()

    cdef bint _fifos_valid(self):
        """The firmware refuses to start on FIFOs outside host memory."""
        cdef Py_ssize_t size = self.mem.size
        return (self.send_count > 0 and self.recv_count > 0 and self.send_base > 0 and self.recv_base > 0
                and self.send_base + <Py_ssize_t> self.send_count * C_ENTRY_BYTES <= size
                and self.recv_base + <Py_ssize_t> self.recv_count * C_ENTRY_BYTES <= size)

    cdef _pop(self, unsigned int n):
        if n > <unsigned int> self.rx_used:
            self.pop_errors += 1            # the host popped what was never written
            n = self.rx_used
        self.rx_used -= n
        self.pops += 1

    # -- interrupt (SP-A39: available, off unless enabled) -------------------------------

    cdef _update_irq(self, bint last=False):
        # `last`: the card's event does nothing more at this instant (NicModel._set_line)
        self._set_line((self.int_enable & self.int_status) != 0, last)

    # -- send side: the i860 walks the send FIFO ------------------------------------------

    cdef _tx_check(self):
        """A length may have become non-zero: wake the i860 if it is idle."""
        if self.tx_active or not self.control & C_CTL_ENABLE:
            return
        if self.lengths[self.tx_head] == 0:
            return
        self.tx_active = True
        cdef double t = self.engine.now + self.notice_s
        if t < self.i860_free:
            t = self.i860_free
        self.engine.post(t, self, EV_TX_TAKE, self.epoch)

    cdef int _then(self, double t, int what, object arg) except -1:
        """The last thing one of the card's events does (`_tx_take`, `_rx_take`, and `_rx` of a
        packet the switch delivers): its next event, at `t`. Run at once when nothing else
        can happen before it (`Engine.advance`: the same effects at the same instant, in the
        same order), posted otherwise."""
        if self.engine.advance(t):
            self.on_event(what, arg)
        else:
            self.engine.post(t, self, what, arg)
        return 0

    cdef int on_event(self, int what, object arg) except -1:
        """The card's own engine events (bound once: no bound method per event)."""
        if what == EV_TX_TAKE:
            self._tx_take(arg)
        elif what == EV_TX_DMA_START:
            self._tx_dma_start(arg)
        elif what == EV_TX_LINK:
            self._tx_link(arg)
        elif what == EV_TX_DMA_DONE:
            self._tx_dma_done(arg)
        elif what == EV_RX_TAKE:
            self._rx_take(arg)
        elif what == EV_RX_COMMIT:
            self._rx_commit(arg)
        elif what == EV_TX_START_NEXT:
            self._tx_dma_start(arg)
            self._tx_next((<_TxJob> arg).epoch)
        else:
            self._tx_skip(arg)
        return 0

    cdef _tx_take(self, unsigned int epoch):
        """The i860 takes the entry at its send pointer: firmware work, then the DMA."""
        cdef int entry, slot
        cdef Py_ssize_t nbytes
        cdef double t
        if epoch != self.epoch:
            return
        entry = self.tx_head
        nbytes = self.lengths[entry] * C_LEN_UNIT
        if nbytes == 0:                       # cannot happen: only non-zero lengths wake it
            self.tx_active = False
            return
        t = self.engine.now
        if t < self.i860_free:
            t = self.i860_free
        self.i860_free = t + self.i860_tx_s
        self.tx_head = (entry + 1) % self.send_count
        if nbytes < C_HDR_BYTES or nbytes > C_ENTRY_BYTES:
            # A length no packet can have: the firmware skips the entry and counts it.
            self.engine.post(self.i860_free, self, EV_TX_SKIP, (epoch, entry))
            return
        slot = self.fifo_i
        self.fifo_i = (slot + 1) % self.fifo_slots
        # The DMA's start and the i860's next entry come at the same instant, one posted
        # right after the other: nothing can run between them, and whatever the first
        # posts for this instant runs after the second either way. One event does both, in
        # that order (the DMA's start keeps its own event when it has to wait for the engine).
        self._then(self.i860_free, EV_TX_START_NEXT, _tx_job(epoch, entry, nbytes, slot, 0.0))

    cdef _tx_dma_start(self, arg):
        """The i860 has programmed the DMA: it runs once the engine is free and the
        MSMU FIFO slot it fills has been emptied onto the switch link. The MSMU starts
        the packet onto the link as soon as the first burst is in the FIFO (cut-through:
        the DMA keeps filling while the link drains), so a packet's DMA and its link
        transfer overlap; the link is never allowed to overtake the DMA."""
        cdef _TxJob job = <_TxJob?> arg
        cdef unsigned int epoch = job.epoch
        cdef int entry = job.entry, slot = job.slot
        cdef Py_ssize_t nbytes = job.nbytes
        cdef double start, first, end
        if epoch != self.epoch:
            return
        if self.engine.now < self.dma_tx_free:
            self.engine.post(self.dma_tx_free, self, EV_TX_DMA_START, arg)
            return
        start = self.engine.now
        if start < self.fifo_out[slot]:
            start = self.fifo_out[slot]
            self.fifo_stalls += 1
        end = start + self.dma_time(nbytes)
        self.dma_tx_free = end
        first = start + self.dma_span(nbytes if nbytes < self.burst_bytes or self.burst_bytes <= 0
                                       else self.burst_bytes)
        if first < end:
            job.end = end                     # (the start event's job goes on as the link's)
            self.engine.post(first, self, EV_TX_LINK, job)
            self.engine.post(end, self, EV_TX_DMA_DONE, _tx_job(epoch, entry, 0, slot, end))
        else:                                 # one burst: the whole packet is in before it starts
            job.end = end
            self.engine.post(end, self, EV_TX_DMA_DONE, job)

    cdef _tx_next(self, unsigned int epoch):
        """The i860 is done with one entry: on to the next if its length is there."""
        if epoch != self.epoch:
            return
        if self.control & C_CTL_ENABLE and self.lengths[self.tx_head] != 0:
            self._tx_take(epoch)
        else:
            self.tx_active = False

    cdef _tx_skip(self, arg):
        epoch, entry = arg
        if epoch != self.epoch:
            return
        self.tx_errors += 1
        self._tx_free_entry(entry)
        self._tx_next(epoch)

    cdef _tx_link(self, arg):
        """The packet's head is in the MSMU FIFO: onto the link (cut-through)."""
        cdef _TxJob job = <_TxJob?> arg
        if job.epoch == self.epoch:
            self._send_entry(job.entry, job.nbytes, job.slot, job.end, False)

    cdef _tx_dma_done(self, arg):
        """The DMA has read the whole entry: it is free for the host again (and a packet
        of one burst starts onto the link now)."""
        cdef _TxJob job = <_TxJob?> arg
        if job.epoch != self.epoch:
            return
        if job.nbytes:
            self._send_entry(job.entry, job.nbytes, job.slot, job.end, True)
        else:
            self._tx_free_entry(job.entry)

    cdef _send_entry(self, int entry, Py_ssize_t nbytes, int slot, double ready, bint free):
        """Stamp the source and hand the packet to the switch (its last byte leaves no
        earlier than `ready`, when the DMA has brought it all in)."""
        cdef Py_ssize_t dlen, addr
        cdef const unsigned char* src
        cdef unsigned char* p
        cdef bytes pkt = None
        cdef double start, end
        addr = self.send_base + <Py_ssize_t> entry * C_ENTRY_BYTES
        if not span_ok(addr, nbytes, self.mem.size):
            span_check(addr, nbytes, self.mem.size, "TB2 send entry")
        src = &self.mem.buf[addr]
        dlen = (src[C_H_LEN] << 8) | src[C_H_LEN + 1]
        if dlen <= C_DATA_MAX and C_HDR_BYTES + dlen <= nbytes:
            # The packet as the MSMU sends it, copied out of the entry before it is freed.
            pkt = PyBytes_FromStringAndSize(<const char*> src, C_HDR_BYTES + dlen)
            p = <unsigned char*> PyBytes_AS_STRING(pkt)
            p[C_H_SRC] = (self.nid >> 8) & 0xFF
            p[C_H_SRC + 1] = self.nid & 0xFF
            p[C_H_STATUS] = p[C_H_STATUS + 1] = p[C_H_STATUS + 2] = p[C_H_STATUS + 3] = 0
        if free:
            self._tx_free_entry(entry)
        if pkt is None:
            self.tx_errors += 1               # header and length array disagree: not sent
            return
        if self.port is None:
            self.tx_errors += 1
            return
        if isinstance(self.port, Tb2Port):
            (<Tb2Port> self.port).send(pkt, self.engine.now, ready, &start, &end)
        else:
            start, end = self.port.transmit(pkt, self.engine.now, ready)
        self.fifo_out[slot] = end             # the slot is empty once the link has taken it all
        self.tx_packets += 1
        self.tx_bytes += dlen

    cdef _tx_free_entry(self, int entry):
        self.lengths[entry] = 0
        self.tx_done += 1
        if self.on_tx_space is not None:
            _hook(self.on_tx_space)

    # -- receive side: the switch delivers a packet's last byte ----------------------------

    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok):
        """A packet from the switch. Everything that cannot be delivered is counted."""
        return self._rx(&frame[0] if frame.shape[0] else NULL, frame.shape[0], None, crc_ok, False)

    cdef _rx_bytes(self, bytes frame, bint crc_ok):
        """`rx_frame` of a packet the switch delivers as bytes (no buffer view per packet), as
        the last thing its arrival event does."""
        return self._rx(<const unsigned char*> PyBytes_AS_STRING(frame), len(frame), frame, crc_ok, True)

    cdef _rx(self, const unsigned char* frame, Py_ssize_t n, object whole, bint crc_ok, bint last):
        """`rx_frame` of the `n` bytes at `frame` (`whole`: the same bytes as an object, or None);
        `last`: called as the last thing of the engine event that delivers it."""
        cdef Py_ssize_t dlen
        cdef double t
        cdef _RxJob job
        if not self.control & C_CTL_ENABLE:
            self.rx_disabled += 1
            return
        if not crc_ok:
            self.rx_crc_errors += 1
            return
        if n < C_HDR_BYTES or n > C_ENTRY_BYTES:
            self.rx_malformed += 1
            return
        dlen = (frame[C_H_LEN] << 8) | frame[C_H_LEN + 1]
        if dlen > C_DATA_MAX or C_HDR_BYTES + dlen > n:
            self.rx_malformed += 1
            return
        if <int> ((frame[C_H_DST] << 8) | frame[C_H_DST + 1]) != self.nid:
            self.rx_misrouted += 1
            return
        t = self.engine.now
        if t >= self.i860_free:
            t += self.notice_s                # the idle i860 notices the MSMU on its next pass
        else:
            t = self.i860_free
        self.i860_free = t + self.i860_rx_s
        if whole is None or C_HDR_BYTES + dlen != n:
            whole = PyBytes_FromStringAndSize(<const char*> frame, C_HDR_BYTES + dlen)
        job = _RxJob.__new__(_RxJob)
        job.epoch = self.epoch
        job.pkt = whole
        job.dlen = dlen
        if last:
            self._then(t, EV_RX_TAKE, job)
        else:
            self.engine.post(t, self, EV_RX_TAKE, job)

    cdef _rx_take(self, arg):
        """The i860 takes the packet: a free receive entry, or the packet is lost."""
        cdef _RxJob job = <_RxJob?> arg
        cdef unsigned int epoch = job.epoch
        cdef Py_ssize_t dlen = job.dlen, entry, nbytes
        cdef double start, t
        if epoch != self.epoch or not self.control & C_CTL_ENABLE:
            self.rx_disabled += 1
            return
        if self.rx_used >= self.recv_count:
            self.rx_overflow += 1             # SP-C05: input-buffer overflow
            return
        entry = self.rx_tail
        self.rx_tail = (self.rx_tail + 1) % self.recv_count
        self.rx_used += 1
        nbytes = C_HDR_BYTES + dlen
        start = self.engine.now + self.i860_rx_s
        if start < self.dma_rx_free:
            start = self.dma_rx_free
        t = start + self.dma_time(nbytes)      # the packet
        t += self.dma_time(4)                 # then the status word, its own transaction
        self.dma_rx_free = t
        job.entry = entry
        self._then(t, EV_RX_COMMIT, job)

    cdef _rx_commit(self, arg):
        cdef _RxJob job = <_RxJob?> arg
        cdef Py_ssize_t dlen = job.dlen, addr
        if job.epoch != self.epoch:
            self.rx_disabled += 1             # reset while the DMA ran: lost, but counted
            return
        addr = self.recv_base + job.entry * C_ENTRY_BYTES
        _copy_in(self.mem, addr, job.pkt)
        self.mem.wr32(addr + C_H_STATUS, RX_VALID_BIT | <unsigned int> dlen)
        self.rx_packets += 1
        self.rx_bytes += dlen
        self.int_status |= C_INT_RX
        self._update_irq(self.on_rx is None)      # (the last thing of the commit's event)
        if self.on_rx is not None:
            _hook(self.on_rx)

    def stats(self):
        return {"tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes, "tx_errors": self.tx_errors,
                "tx_fifo_stalls": self.fifo_stalls, "tx_done": self.tx_done,
                "rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes, "rx_overflow": self.rx_overflow,
                "rx_crc_errors": self.rx_crc_errors, "rx_malformed": self.rx_malformed,
                "rx_misrouted": self.rx_misrouted, "rx_disabled": self.rx_disabled, "rx_used": self.rx_used,
                "pops": self.pops, "pop_errors": self.pop_errors, "dma_bytes": self.dma_bytes,
                "interrupts_raised": self.irq_raised, "mc_writes": self.reg_writes, "mc_reads": self.reg_reads,
                "enabled": bool(self.control & CTL_ENABLE),
                "owner": None if self.owner is None else repr(self.owner)}
