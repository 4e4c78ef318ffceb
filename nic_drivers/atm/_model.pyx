# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""An OC-3c ATM adapter in the style of the FORE PCA-200E: the hardware side.

The PCA-200E that DP ran on is not a dumb framer. An Intel i960 on the card (the
"cell processor", cp) runs FORE's firmware: it reads transmit PDU descriptors from
host memory, DMAs the PDU onto the card, segments it into 53-byte cells (AAL5: the
payload, 0-47 bytes of pad and an 8-byte trailer -- UU, CPI, length, CRC-32 -- make a
whole number of 48-byte cell payloads; the last cell is marked by bit 0 of the
header's PTI field) and hands the cells to the SONET framer, which adds each cell's
HEC and clocks it out at the cell rate. On receive, the framer checks the HEC, the cp
looks the VPI/VCI up in its connection table, reassembles each connection's PDU in
card memory, checks the CRC-32 and the length when the last cell arrives, DMAs the
payload into buffers the host supplied beforehand -- the first part into one *small*
buffer, the rest into *large* ones, as the firmware does (HW-ATM; the sizing
comment of Linux's fore200e.h) -- writes a receive PDU descriptor and a completion
status word into host memory, and interrupts the host. (HW-ATM.)

Host and cp talk through queues that live in *card* memory and are written by the
host with programmed I/O across PCI: a command queue (16 entries), a transmit queue
(256), a receive queue (64) and two buffer-supply queues (32 each, small and large).
Every entry names host memory: a transmit PDU descriptor (TPD: the 4-byte cell header
without HEC, then a word holding length, number of segments, AAL type and an
interrupt flag, then {DMA address, length} segments), a receive PDU descriptor (RPD:
cell header, number of segments, {buffer handle, length} per segment), a block of
receive buffer descriptors, and always the address of a status word that the cp sets
to COMPLETE (or COMPLETE|ERROR) by DMA when it is done. Writing an entry's trigger
word -- the TPD address, the RPD address, the buffer-block address, a command's
status address -- hands it to the cp; that is the only "doorbell" this card has. The
register file is the write-semantics table below (`reg_write`), as in the 21140 model.

Connections: VPI 0 bits and VCI 10 bits are decoded, 1024 connections; the driver
opens each direction with an activate command naming AAL, VPI/VCI and MTU. A cell on
a VPI/VCI that is out of range or not open is dropped and counted, as the card's ATM
statistics do.

What is timed (profile keys in brackets) and why:

* The i960 is one processor shared by both directions: each cell it segments or
  reassembles costs it [atm.sar_cell_cycles], each PDU [atm.sar_pdu_cycles], each
  command [atm.cmd_cycles], at [atm.cp_hz]; a posted transmit entry is noticed by its
  polling loop after [atm.cp_poll_cycles]. Transmit work and receive work queue for it.
* One DMA engine moves TPDs, PDUs, RPDs and status words across PCI at the profile's
  PCI rate with a set-up cost per transfer and a re-arbitration every
  [atm.dma_burst_bytes].
* Transmit is store-and-forward per PDU with two PDU slots in card memory: while one
  PDU's cells go out, the next one is fetched, so back-to-back PDUs keep the line busy.
  The framer's transmit FIFO holds [atm.tx_fifo_cells] cells: the i960 may run that far
  ahead of the line and no further. The line sends one cell per cell time.
* Receive: a cell that finds the i960 more than [atm.rx_fifo_cells] cells behind
  overflows the framer's FIFO and is lost (the PDU it belonged to then fails its
  check); the payload reaches host memory after the last cell's reassembly, the PDU
  work and the DMA, and only then is the status word written and the interrupt raised.

Bad input never raises: a cell with a bad HEC, an idle or OAM cell, a cell for a
closed or out-of-range connection, a PDU whose length field does not fit its cell
count, whose CRC-32 fails, or that outgrows its connection's MTU (e.g. because its
last cell was lost and it ran into the next PDU), a PDU with no receive descriptor or
buffer to go to, and a malformed TPD are each dropped and counted.

AAL5's CRC-32 is the generator of Ethernet's (zlib's) CRC-32 but in the non-reflected,
MSB-first form of ITU-T I.363.5 (init all ones, complemented, sent most significant
byte first): zlib's reflected routine would give another number, so the CRC here is
its own table-driven loop, checked against the standard test vectors in the tests.
"""
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy, memset

from kernelsim._engine cimport Engine
from kernelsim._physmem cimport PhysMem, span_ok
from nic_drivers._nic cimport NicModel, nic_dma
from nic_drivers.atm._medium cimport CellPort, CellSink

DEF CELL = 53
DEF PAYLOAD = 48
DEF TRAILER = 8
DEF TSD_MAX = 2                  # transmit segments per TPD (fore200e: TSD_FIXED)
DEF MAX_PDU = 65535
DEF SLOT_BYTES = 65535 + 47 + 8

# The register offsets, bits, opcodes and host-memory layout are C constants in
# `_model.pxd` (and module-level ints for Python). The boot status words do not fit a C
# enum (they are above 2**31): Python names, and an unsigned C copy for the model.
BSTAT_COLD_START = 0xC01DC01D
BSTAT_SELFTEST_FAIL = 0xADBADBAD
BSTAT_CP_RUNNING = 0xCE11FEED
cdef unsigned int _BSTAT_SELFTEST_FAIL = BSTAT_SELFTEST_FAIL
cdef unsigned int _BSTAT_CP_RUNNING = BSTAT_CP_RUNNING

cdef unsigned int _crc32_tab[256]
cdef unsigned char _crc8_tab[256]


cdef void _init_tables() noexcept:
    cdef unsigned int i, k, c
    for i in range(256):
        c = i << 24
        for k in range(8):
            c = ((c << 1) ^ 0x04C11DB7) if c & 0x80000000 else (c << 1)
        _crc32_tab[i] = c
        c = i
        for k in range(8):
            c = (((c << 1) ^ 0x07) if c & 0x80 else (c << 1)) & 0xFF
        _crc8_tab[i] = <unsigned char> c


_init_tables()


cdef inline unsigned int _crc32(unsigned int crc, const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        crc = (crc << 8) ^ _crc32_tab[((crc >> 24) ^ p[i]) & 0xFF]
    return crc


cdef inline unsigned char _hec(const unsigned char* h) noexcept nogil:
    cdef unsigned char c = 0
    cdef int i
    for i in range(4):
        c = _crc8_tab[c ^ h[i]]
    return c ^ 0x55


cdef inline unsigned int _be32(const unsigned char* p) noexcept nogil:
    return (<unsigned int> p[0] << 24) | (<unsigned int> p[1] << 16) | (<unsigned int> p[2] << 8) | p[3]


cdef inline void _put_be32(unsigned char* p, unsigned int v) noexcept nogil:
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


# -- the codec, for the driver's tests and tools ------------------------------------------

def aal5_crc32(const unsigned char[::1] data):
    """AAL5's CRC-32 of `data` (ITU-T I.363.5: MSB first, init and result complemented)."""
    if data.shape[0] == 0:
        return 0
    return (~_crc32(0xFFFFFFFF, &data[0], data.shape[0])) & 0xFFFFFFFF


def hec(const unsigned char[::1] header4):
    """The HEC of a cell header's first 4 bytes: CRC-8 (x^8 + x^2 + x + 1) XOR 0x55."""
    if header4.shape[0] < 4:
        raise ValueError("the HEC covers 4 header bytes")
    return _hec(&header4[0])


def cell_header(int vpi, int vci, int pti=0, int clp=0, int gfc=0):
    """The 5 header bytes of a UNI cell (GFC 4, VPI 8, VCI 16, PTI 3, CLP 1, HEC 8)."""
    cdef unsigned char h[5]
    _put_be32(h, ((gfc & 0xF) << 28) | ((vpi & 0xFF) << 20) | ((vci & 0xFFFF) << 4) | ((pti & 7) << 1) | (clp & 1))
    h[4] = _hec(h)
    return (<char*> h)[:5]


def aal5_cells(int vpi, int vci, const unsigned char[::1] payload, int uu=0):
    """The cells (concatenated) that carry `payload` as one AAL5 PDU on VPI/VCI."""
    cdef Py_ssize_t n = payload.shape[0], total, i, ncells
    if n > MAX_PDU:
        raise ValueError("an AAL5 PDU carries at most 65535 bytes")
    total = (n + TRAILER + PAYLOAD - 1) // PAYLOAD * PAYLOAD
    pdu = bytearray(total)
    cdef unsigned char[::1] p = pdu
    if n:
        memcpy(&p[0], &payload[0], n)
    p[total - 8] = uu & 0xFF
    p[total - 7] = 0
    p[total - 6] = (n >> 8) & 0xFF
    p[total - 5] = n & 0xFF
    _put_be32(&p[total - 4], (~_crc32(0xFFFFFFFF, &p[0], total - 4)) & 0xFFFFFFFF)
    ncells = total // PAYLOAD
    out = bytearray()
    for i in range(ncells):
        out += cell_header(vpi, vci, 1 if i == ncells - 1 else 0)
        out += pdu[i * PAYLOAD:(i + 1) * PAYLOAD]
    return bytes(out)


def aal5_cell_count(Py_ssize_t payload_bytes):
    """Cells an AAL5 PDU of `payload_bytes` takes: payload + trailer rounded up to 48."""
    return (payload_bytes + TRAILER + PAYLOAD - 1) // PAYLOAD


cdef class _CellInput


cdef class Pca200e(NicModel):
    """One PCA-200E-style adapter on one node's PCI bus (its fields: `_model.pxd`)."""
    vendor_id = 0x1127           # FORE Systems
    device_id = 0x0300           # PCA-200E

    def __cinit__(self, Engine engine, PhysMem mem, tuple hwaddr, profile):
        cdef int i
        self._init_nic(engine, mem, profile, True)
        self.host = &mem.buf[0]
        self.host_size = mem.size
        self.hwaddr = hwaddr
        self.cell_input = _CellInput()
        (<_CellInput> self.cell_input).card = self
        self._port = None
        self.cport = None
        self.fail_selftest = False
        if not 1 <= profile["atm.vci_bits"] <= 12:
            raise ValueError("atm.vci_bits must be 1..12")
        self.cmdq_len = profile["atm.cmdq_entries"]
        self.txq_len = profile["atm.txq_entries"]
        self.rxq_len = profile["atm.rxq_entries"]
        self.bsq_len = profile["atm.bsq_entries"]
        self.small_bytes = profile["atm.small_buffer_bytes"]
        self.large_bytes = profile["atm.large_buffer_bytes"]
        self.num_connect = 1 << profile["atm.vci_bits"]
        for name, v in (("atm.cmdq_entries", self.cmdq_len), ("atm.txq_entries", self.txq_len),
                        ("atm.rxq_entries", self.rxq_len), ("atm.bsq_entries", self.bsq_len)):
            if not 1 <= v <= 4096:
                raise ValueError(f"{name} must be 1..4096, not {v}")
        if not (PAYLOAD <= self.small_bytes <= self.large_bytes <= MAX_PDU):
            raise ValueError("receive buffers: 48 <= small <= large <= 65535 bytes")
        self.cmdq_off = QUEUES_BASE
        self.txq_off = self.cmdq_off + CMDQ_ENTRY * self.cmdq_len
        self.rxq_off = self.txq_off + QENTRY * self.txq_len
        self.bsq_small_off = self.rxq_off + QENTRY * self.rxq_len
        self.bsq_large_off = self.bsq_small_off + QENTRY * self.bsq_len
        self.bsq_off[0] = self.bsq_small_off
        self.bsq_off[1] = self.bsq_large_off
        self.ram_bytes = self.bsq_large_off + QENTRY * self.bsq_len
        self.fl_cap = self.bsq_len * RBD_BLOCK_MAX
        self.ram = <unsigned int*> calloc(self.ram_bytes // 4, sizeof(unsigned int))
        self.txq_posted = <unsigned char*> calloc(self.txq_len, 1)
        self.rxq_ready = <unsigned char*> calloc(self.rxq_len, 1)
        self.bsq_posted = <unsigned char*> calloc(2 * self.bsq_len, 1)
        self.vcs = <Vc*> calloc(self.num_connect, sizeof(Vc))
        self.fl_handle = <unsigned int*> calloc(2 * self.fl_cap, sizeof(unsigned int))
        self.fl_addr = <unsigned int*> calloc(2 * self.fl_cap, sizeof(unsigned int))
        for i in range(2):
            self.slot_buf[i] = <unsigned char*> malloc(SLOT_BYTES)
        if (self.ram == NULL or self.txq_posted == NULL or self.rxq_ready == NULL or self.bsq_posted == NULL
                or self.vcs == NULL or self.fl_handle == NULL or self.fl_addr == NULL
                or self.slot_buf[0] == NULL or self.slot_buf[1] == NULL):
            raise MemoryError()
        cp_cycle = 1.0 / profile["atm.cp_hz"]
        self.sar_cell_s = profile["atm.sar_cell_cycles"] * cp_cycle
        self.sar_pdu_s = profile["atm.sar_pdu_cycles"] * cp_cycle
        self.cmd_s = profile["atm.cmd_cycles"] * cp_cycle
        self.cp_poll_s = profile["atm.cp_poll_cycles"] * cp_cycle
        self.cell_s = CELL * 8.0 / profile["link.cell_rate_bps"]
        self.burst_bytes = profile["atm.dma_burst_bytes"]
        self.tx_fifo = max(1, profile["atm.tx_fifo_cells"])
        self.rx_fifo = max(1, profile["atm.rx_fifo_cells"])
        self.epoch = 0
        self._reset()

    def __dealloc__(self):
        cdef int i
        if self.vcs != NULL:
            for i in range(self.num_connect):
                free(self.vcs[i].buf)
        free(self.vcs)
        free(self.ram)
        free(self.txq_posted)
        free(self.rxq_ready)
        free(self.bsq_posted)
        free(self.fl_handle)
        free(self.fl_addr)
        free(self.slot_buf[0])
        free(self.slot_buf[1])

    @property
    def port(self):
        """The medium this card transmits on: a modeled fiber or a real transport."""
        return self._port

    @port.setter
    def port(self, p):
        self._port = p
        self.cport = p if isinstance(p, CellPort) else None

    cdef _reset(self):
        """HCR reset: the i960 restarts its firmware; every queue, connection and buffer is forgotten."""
        cdef int i
        for i in range(self.num_connect):
            free(self.vcs[i].buf)
        memset(self.vcs, 0, self.num_connect * sizeof(Vc))
        memset(self.ram, 0, self.ram_bytes)
        memset(self.txq_posted, 0, self.txq_len)
        memset(self.rxq_ready, 0, self.rxq_len)
        memset(self.bsq_posted, 0, 2 * self.bsq_len)
        self.epoch += 1                     # events of the previous life find a stale epoch
        self.epoch_obj = self.epoch
        self.fl_head[0] = self.fl_head[1] = 0
        self.fl_count[0] = self.fl_count[1] = 0
        self.imask = 0
        self.istat = 0
        self.bstat = _BSTAT_SELFTEST_FAIL if self.fail_selftest else _BSTAT_CP_RUNNING
        self.cp_free = self.dma_free = self.engine.now
        self.tx_head = self.rx_head = 0
        self.tx_poll_pending = self.tx_loading = False
        self.load_slot = 0
        self.seg_slot = -1
        self.seg_cell = 0
        self.slot_full[0] = self.slot_full[1] = 0
        self._acc = bytearray()
        self._update_irq()

    # -- register file -------------------------------------------------------------------

    cpdef unsigned int reg_read(self, int off):
        if off == REG_HCR:
            return HCR_INTR if self.istat else 0
        if off == REG_IMASK:
            return self.imask
        if off == REG_ISTAT:
            return self.istat
        if off == REG_BSTAT:
            return self.bstat
        if off == REG_CMDQ:
            return self.cmdq_off
        if off == REG_TXQ:
            return self.txq_off
        if off == REG_RXQ:
            return self.rxq_off
        if off == REG_BSQ_SMALL:
            return self.bsq_small_off
        if off == REG_BSQ_LARGE:
            return self.bsq_large_off
        if off == REG_CMDQ_LEN:
            return self.cmdq_len
        if off == REG_TXQ_LEN:
            return self.txq_len
        if off == REG_RXQ_LEN:
            return self.rxq_len
        if off == REG_BSQ_LEN:
            return self.bsq_len
        if off == REG_SMALL_BYTES:
            return self.small_bytes
        if off == REG_LARGE_BYTES:
            return self.large_bytes
        if off == REG_NUM_CONNECT:
            return self.num_connect
        if off == REG_RSD_MAX:
            return RSD_MAX_PER_RPD
        if QUEUES_BASE <= off < self.ram_bytes and not off & 3:
            return self.ram[off >> 2]
        return 0xFFFFFFFF

    cpdef reg_write(self, int off, unsigned int value):
        """The write-semantics table: registers, then the cp-resident queue entries."""
        cdef int rel, i
        cdef long long word
        if off == REG_HCR:
            if value & HCR_RESET:
                self._reset()
                return
            if value & HCR_CLR_INTR:
                self.istat = 0
                self._update_irq()
            return
        if off == REG_IMASK:
            self.imask = value & 1
            self._update_irq()
            return
        if off < QUEUES_BASE or off >= self.ram_bytes or off & 3 or self.bstat != _BSTAT_CP_RUNNING:
            return                                  # read-only, unmapped, or a dead cp
        self.ram[off >> 2] = value
        if off < self.txq_off:
            rel = off - self.cmdq_off
            if (rel % CMDQ_ENTRY) // 4 == 4:        # the status address is written last
                self._command(rel // CMDQ_ENTRY)
        elif off < self.rxq_off:
            rel = off - self.txq_off
            if rel % QENTRY == 0:
                self.txq_posted[rel // QENTRY] = 1
                self._tx_kick()
        elif off < self.bsq_small_off:
            rel = off - self.rxq_off
            if rel % QENTRY == 0:
                self.rxq_ready[rel // QENTRY] = 1
        else:
            rel = off - self.bsq_small_off
            if rel % QENTRY == 0:
                i = rel // QENTRY                   # 0..2*bsq_len-1: small entries, then large
                self.bsq_posted[i] = 1
                word = (<long long> self.epoch << 16) | i
                self.engine.post(self.engine.now + (self.cp_poll_s + nic_dma(self, RBD_BYTES * ((value & 31) + 1))),
                                 self, EV_BSQ_DONE, word)

    # -- interrupt -------------------------------------------------------------------------

    cdef _post_intr(self):
        self.istat = 1
        self._update_irq()

    cdef _update_irq(self):
        self._set_line((self.istat & self.imask) != 0)

    # -- host memory as the DMA engine sees it ----------------------------------------------

    cdef inline bint _ok(self, Py_ssize_t a, Py_ssize_t n):
        return a > 0 and span_ok(a, n, self.host_size)

    cdef inline unsigned int _rd(self, Py_ssize_t a):
        return (<unsigned int*> (self.host + a))[0]

    cdef inline void _wr(self, Py_ssize_t a, unsigned int v):
        (<unsigned int*> (self.host + a))[0] = v

    cdef _status(self, unsigned int haddr, unsigned int value):
        if self._ok(haddr, 4):
            self._wr(haddr, value)
        else:
            self.dma_errors += 1

    cdef inline double _cp(self, double t, double work):
        """Queue `work` seconds on the i960 no earlier than `t`; return when it is done."""
        if self.cp_free > t:
            t = self.cp_free
        self.cp_free = t + work
        return self.cp_free

    cdef inline double _dma(self, double t, double dur):
        if self.dma_free > t:
            t = self.dma_free
        self.dma_free = t + dur
        return self.dma_free

    # -- commands ---------------------------------------------------------------------------

    cdef _command(self, int i):
        """Execute command entry `i` (the cp takes commands in the order they are posted)."""
        cdef int base = (self.cmdq_off + CMDQ_ENTRY * i) >> 2
        cdef unsigned int w0 = self.ram[base], w1 = self.ram[base + 1], w2 = self.ram[base + 2]
        cdef unsigned int status_haddr = self.ram[base + 4]
        cdef int op = w0 & 0x7F
        cdef bint ok
        self.cmds += 1
        self._cp(self.engine.now, self.cmd_s)
        if op == OPCODE_ACTIVATE_VCIN or op == OPCODE_ACTIVATE_VCOUT:
            ok = self._activate(op == OPCODE_ACTIVATE_VCIN, (w0 >> 8) & 0xFF, (w1 >> 16) & 0xFF, w1 & 0xFFFF, w2)
        elif op == OPCODE_DEACTIVATE_VCIN or op == OPCODE_DEACTIVATE_VCOUT:
            ok = self._deactivate(op == OPCODE_DEACTIVATE_VCIN, (w1 >> 16) & 0xFF, w1 & 0xFFFF)
        else:
            ok = False
        if not ok:
            self.cmd_errors += 1
        self._status(status_haddr, STATUS_COMPLETE | (0 if ok else STATUS_ERROR))
        if w0 & OPCODE_REQUEST_INTR:
            self._post_intr()

    cdef bint _activate(self, bint incoming, unsigned int aal, unsigned int vpi, unsigned int vci, unsigned int mtu):
        cdef Vc* vc
        cdef int cells
        if aal != AAL5 or vpi != 0 or vci >= <unsigned int> self.num_connect or not 1 <= mtu <= MAX_PDU:
            return False
        vc = &self.vcs[vci]
        if incoming:
            if vc.in_open:
                return False
            cells = (mtu + TRAILER + PAYLOAD - 1) // PAYLOAD
            vc.buf = <unsigned char*> malloc(cells * PAYLOAD)
            if vc.buf == NULL:
                return False
            vc.in_open = 1
            vc.in_mtu = mtu
            vc.max_cells = cells
            vc.ncells = 0
            vc.dropping = 0
        else:
            if vc.out_open:
                return False
            vc.out_open = 1
            vc.out_mtu = mtu
        return True

    cdef bint _deactivate(self, bint incoming, unsigned int vpi, unsigned int vci):
        cdef Vc* vc
        if vpi != 0 or vci >= <unsigned int> self.num_connect:
            return False
        vc = &self.vcs[vci]
        if incoming:
            if not vc.in_open:
                return False
            free(vc.buf)
            vc.buf = NULL
            vc.in_open = 0
            vc.ncells = 0
        else:
            if not vc.out_open:
                return False
            vc.out_open = 0
        return True

    def vc_state(self, int vci):
        """(incoming MTU or 0, outgoing MTU or 0) of a connection on VPI 0."""
        cdef Vc* vc
        if not 0 <= vci < self.num_connect:
            return (0, 0)
        vc = &self.vcs[vci]
        return (vc.in_mtu if vc.in_open else 0, vc.out_mtu if vc.out_open else 0)

    # -- buffer supply -----------------------------------------------------------------------

    cdef int on_event(self, int what, object arg) except -1:
        """The card's own engine events (bound once: no bound method per event)."""
        if what == EV_TX_CELL:
            self._tx_cell(arg)
        elif what == EV_TX_LOAD:
            self._tx_load(arg)
        elif what == EV_TX_LOADED:
            self._tx_loaded(arg)
        elif what == EV_TX_DONE:
            self._tx_done(arg)
        elif what == EV_RX_DONE:
            self._rx_done(arg)
        else:
            self._bsq_done(arg)
        return 0

    cdef _bsq_done(self, long long word):
        """The cp has fetched a block of receive buffer descriptors: add them to its pool."""
        cdef int i = word & 0xFFFF, magn, k, n, idx
        cdef unsigned int w0, block, handle, addr, size
        if (word >> 16) != self.epoch or not self.bsq_posted[i]:
            return
        self.bsq_posted[i] = 0
        magn = 0 if i < self.bsq_len else 1
        w0 = self.ram[(self.bsq_small_off >> 2) + 2 * i]
        block = w0 & ~(<unsigned int> 31)
        n = (w0 & 31) + 1
        size = self.small_bytes if magn == 0 else self.large_bytes
        ok = self._ok(block, RBD_BYTES * n)
        if ok:
            for k in range(n):
                handle = self._rd(block + RBD_BYTES * k)
                addr = self._rd(block + RBD_BYTES * k + 4)
                if not self._ok(addr, size):
                    self.dma_errors += 1
                    continue
                if self.fl_count[magn] >= self.fl_cap:
                    self.supply_overflow += 1
                    continue
                idx = magn * self.fl_cap + (self.fl_head[magn] + self.fl_count[magn]) % self.fl_cap
                self.fl_handle[idx] = handle
                self.fl_addr[idx] = addr
                self.fl_count[magn] += 1
                self.buffers_supplied += 1
        else:
            self.dma_errors += 1
        self._status(self.ram[(self.bsq_small_off >> 2) + 2 * i + 1], STATUS_COMPLETE | (0 if ok else STATUS_ERROR))

    def free_buffers(self):
        """(small, large) receive buffers the cp holds."""
        return (self.fl_count[0], self.fl_count[1])

    cdef inline int _take_buffer(self, int magn, unsigned int* handle, unsigned int* addr):
        cdef int idx = magn * self.fl_cap + self.fl_head[magn]
        handle[0] = self.fl_handle[idx]
        addr[0] = self.fl_addr[idx]
        self.fl_head[magn] = (self.fl_head[magn] + 1) % self.fl_cap
        self.fl_count[magn] -= 1
        return 0

    # -- transmit: queue walker, loader, segmenter --------------------------------------------

    cdef _tx_kick(self):
        if not self.tx_poll_pending and not self.tx_loading:
            self.tx_poll_pending = True
            self.engine.post(self.engine.now + self.cp_poll_s, self, EV_TX_LOAD, self.epoch_obj)

    cdef _tx_load(self, object epoch):
        if epoch != self.epoch:
            return
        self.tx_poll_pending = False
        self._tx_try_load()

    cdef _tx_fail(self, int e, unsigned int spec):
        self.tx_errors += 1
        self._status(self.ram[(self.txq_off >> 2) + 2 * e + 1], STATUS_COMPLETE | STATUS_ERROR)
        if spec >> 28:
            self._post_intr()

    cdef _tx_try_load(self):
        """Take the next posted TPD into the free card slot (one load in flight at a time)."""
        cdef int e, slot, nseg, k
        cdef unsigned int tpd, hdr, spec, vpi, vci, length, buf, seglen, total_seg, pad_total
        cdef Py_ssize_t total
        cdef unsigned char* p
        cdef double t, dur
        while not self.tx_loading and not self.slot_full[self.load_slot]:
            e = self.tx_head
            if not self.txq_posted[e]:
                return
            self.txq_posted[e] = 0
            self.tx_head = (e + 1) % self.txq_len
            tpd = self.ram[(self.txq_off >> 2) + 2 * e] & ~(<unsigned int> 31)
            if not self._ok(tpd, TPD_BYTES):
                self.dma_errors += 1
                self._tx_fail(e, 0)
                continue
            hdr = self._rd(tpd + TPD_HEADER)
            spec = self._rd(tpd + TPD_SPEC)
            length = spec & 0xFFFF
            nseg = (spec >> 16) & 0xFF
            vpi = (hdr >> 20) & 0xFF
            vci = (hdr >> 4) & 0xFFFF
            if ((spec >> 24) & 0xF) != AAL5 or not 1 <= nseg <= TSD_MAX or length == 0 or vpi != 0 \
                    or vci >= <unsigned int> self.num_connect or not self.vcs[vci].out_open \
                    or length > <unsigned int> self.vcs[vci].out_mtu:
                self._tx_fail(e, spec)
                continue
            slot = self.load_slot
            p = self.slot_buf[slot]
            total_seg = 0
            dur = nic_dma(self, TPD_BYTES)
            for k in range(nseg):
                buf = self._rd(tpd + TPD_TSD + 8 * k)
                seglen = self._rd(tpd + TPD_TSD + 8 * k + 4)
                if seglen > length - total_seg or not self._ok(buf, seglen):
                    total_seg = 0xFFFFFFFF
                    break
                memcpy(p + total_seg, self.host + buf, seglen)
                total_seg += seglen
                dur += nic_dma(self, seglen)
            if total_seg != length:
                self.dma_errors += 1
                self._tx_fail(e, spec)
                continue
            # AAL5 CPCS: pad to a whole number of cells, trailer UU=0 CPI=0 length CRC-32.
            total = (length + TRAILER + PAYLOAD - 1) // PAYLOAD * PAYLOAD
            memset(p + length, 0, total - length - 4)
            p[total - 6] = (length >> 8) & 0xFF
            p[total - 5] = length & 0xFF
            _put_be32(p + total - 4, (~_crc32(0xFFFFFFFF, p, total - 4)) & 0xFFFFFFFF)
            self.slot_cells[slot] = <int> (total // PAYLOAD)
            self.slot_entry[slot] = e
            self.slot_intr[slot] = 1 if spec >> 28 else 0
            self.slot_hdr[slot] = hdr & ~(<unsigned int> 0xE)       # user data cell; the SAR sets PTI bit 0
            t = self._cp(self.engine.now, self.sar_pdu_s)
            self.tx_loading = True
            self.engine.post(self._dma(t, dur), self, EV_TX_LOADED, self.epoch_obj)

    cdef _tx_loaded(self, object epoch):
        cdef int slot = self.load_slot
        if epoch != self.epoch:
            return
        self.tx_loading = False
        self.slot_full[slot] = 1
        self.load_slot = slot ^ 1
        if self.seg_slot < 0:
            self.seg_slot = slot
            self.seg_cell = 0
            self._tx_cell(epoch)
        self._tx_try_load()                         # fetch the next PDU while this one goes out

    cdef _tx_cell(self, object epoch):
        """The i960 segments one cell and hands it to the framer's FIFO."""
        cdef int slot = self.seg_slot, k = self.seg_cell
        cdef bint last
        cdef unsigned char cell[CELL]
        cdef double t, end, nxt
        if epoch != self.epoch or slot < 0:
            return
        last = k == self.slot_cells[slot] - 1
        t = self._cp(self.engine.now, self.sar_cell_s)
        _put_be32(cell, self.slot_hdr[slot] | (2 if last else 0))
        cell[4] = _hec(cell)
        memcpy(cell + 5, self.slot_buf[slot] + k * PAYLOAD, PAYLOAD)
        self.cells_tx += 1
        if self.cport is not None:
            end = self.cport.send_cell(cell, t)
        else:
            end = t
            self._acc += (<char*> cell)[:CELL]
            if last:
                if self._port is not None:
                    self._port.transmit(bytes(self._acc), t)
                self._acc = bytearray()
        # The FIFO holds tx_fifo cells: the next one may be built once the line has
        # room for it (and not before this one is done).
        nxt = end - self.tx_fifo * self.cell_s
        if nxt < t:
            nxt = t
        if not last:
            self.seg_cell = k + 1
            self.engine.post(nxt, self, EV_TX_CELL, self.epoch_obj)
            return
        self.pdus_tx += 1
        self.engine.post(self._dma(t, nic_dma(self, 4)), self, EV_TX_DONE,
                         (<long long> self.epoch << 24) | (self.slot_entry[slot] << 1) | self.slot_intr[slot])
        self.slot_full[slot] = 0
        self.seg_slot = -1
        if self.slot_full[slot ^ 1]:
            self.seg_slot = slot ^ 1
            self.seg_cell = 0
            self.engine.post(nxt, self, EV_TX_CELL, self.epoch_obj)
        self._tx_try_load()

    cdef _tx_done(self, long long word):
        cdef int e = (word >> 1) & 0x7FFFFF
        if (word >> 24) != self.epoch:
            return
        self._status(self.ram[(self.txq_off >> 2) + 2 * e + 1], STATUS_COMPLETE)
        if word & 1:
            self._post_intr()

    # -- receive: framer, connection lookup, reassembly ---------------------------------------

    def rx_frame(self, const unsigned char[::1] frame, bint crc_ok=True):
        """Cells from a transport (one or more 53-byte cells back to back); never raises.

        A transport hands over a train of cells at once, paced by itself: the framer's
        FIFO limit applies to cells from a modeled fiber (`rx_cell`), not to these.
        """
        cdef Py_ssize_t n = frame.shape[0], i
        for i in range(0, n - CELL + 1, CELL):
            self._rx(&frame[i], False)
        if n % CELL or n == 0:
            self.runts += 1                         # a trailing fragment is no cell

    cdef int _rx(self, const unsigned char* c, bint paced) except -1:
        cdef unsigned int hdr, vpi, vci, pti
        cdef Vc* vc
        cdef double now = self.engine.now, t
        self.cells_in += 1
        if _hec(c) != c[4]:
            self.hec_errors += 1                    # detection mode: an errored header is dropped
            return 0
        hdr = _be32(c)
        vpi = (hdr >> 20) & 0xFF
        vci = (hdr >> 4) & 0xFFFF
        pti = (hdr >> 1) & 7
        if vpi == 0 and vci == 0:
            self.idle_cells += 1                    # idle / unassigned cells fill the line
            return 0
        if paced and self.cp_free - now > self.rx_fifo * self.cell_s:
            self.rx_fifo_overflow += 1              # the i960 is too far behind: the FIFO is full
            return 0
        if pti & 4:
            self.oam_cells += 1                     # OAM and resource-management cells
            return 0
        if vpi != 0:
            self.vpi_bad_range += 1                 # VPI: 0 bits decoded
            return 0
        if vci >= <unsigned int> self.num_connect:
            self.vci_bad_range += 1
            return 0
        vc = &self.vcs[vci]
        if not vc.in_open:
            self.vci_no_conn += 1
            return 0
        t = self._cp(now, self.sar_cell_s)
        self.cells_rx += 1
        if vc.dropping:
            self.cells_dropped += 1
            if pti & 1:
                vc.dropping = 0
            return 0
        if vc.ncells >= vc.max_cells:
            # Longer than the connection's MTU allows -- typically a PDU whose last cell
            # was lost, running into the next one: discard it up to the next last cell.
            self.pdus_too_long += 1
            self.cells_dropped += vc.ncells + 1
            vc.ncells = 0
            vc.dropping = 0 if pti & 1 else 1
            return 0
        memcpy(vc.buf + vc.ncells * PAYLOAD, c + 5, PAYLOAD)
        vc.ncells += 1
        if pti & 1:
            self._rx_pdu(hdr, vc, t)
        return 0

    cdef _rx_pdu(self, unsigned int hdr, Vc* vc, double t):
        """The last cell is in: check the PDU and hand it to the host."""
        cdef int n = vc.ncells, nlarge, nseg, k, e
        cdef Py_ssize_t total = n * PAYLOAD
        cdef unsigned char* tr
        cdef unsigned int length, rpd, handle, addr, part, done
        cdef double dur
        vc.ncells = 0
        tr = vc.buf + total - TRAILER
        length = (<unsigned int> tr[2] << 8) | tr[3]
        if length == 0 or length + TRAILER > total or total - length - TRAILER >= PAYLOAD:
            self.protocol_errors += 1               # the length does not fit the cell count
            self.cells_dropped += n
            return
        if (~_crc32(0xFFFFFFFF, vc.buf, total - 4)) & 0xFFFFFFFF != _be32(tr + 4):
            self.crc_errors += 1
            self.cells_dropped += n
            return
        if length > <unsigned int> vc.in_mtu:
            self.pdus_too_long += 1
            self.cells_dropped += n
            return
        e = self.rx_head
        nlarge = 0 if length <= <unsigned int> self.small_bytes else \
            (length - self.small_bytes + self.large_bytes - 1) // self.large_bytes
        nseg = 1 + nlarge
        rpd = self.ram[(self.rxq_off >> 2) + 2 * e]
        if not self.rxq_ready[e]:
            self.rpd_failed += 1
        elif nseg > RSD_MAX_PER_RPD or not self._ok(rpd, RPD_RSD + 8 * nseg):
            self.dma_errors += 1
        elif self.fl_count[0] < 1:
            self.small_failed += 1
        elif self.fl_count[1] < nlarge:
            self.large_failed += 1
        else:
            # The host cannot look before the status word says COMPLETE, so the bytes
            # may land now; what the host waits for is the DMA's end, below.
            self.rxq_ready[e] = 0
            self.rx_head = (e + 1) % self.rxq_len
            dur = 0.0
            done = 0
            for k in range(nseg):
                self._take_buffer(0 if k == 0 else 1, &handle, &addr)
                part = length - done
                if k == 0 and part > <unsigned int> self.small_bytes:
                    part = self.small_bytes
                elif k > 0 and part > <unsigned int> self.large_bytes:
                    part = self.large_bytes
                memcpy(self.host + addr, vc.buf + done, part)
                self._wr(rpd + RPD_RSD + 8 * k, handle)
                self._wr(rpd + RPD_RSD + 8 * k + 4, part)
                done += part
                dur += nic_dma(self, part)
            self._wr(rpd + RPD_HEADER, hdr & ~(<unsigned int> 0xE))
            self._wr(rpd + RPD_NSEG, nseg)
            dur += nic_dma(self, RPD_RSD + 8 * nseg) + nic_dma(self, 4)
            self.pdus_rx += 1
            t = self._cp(t, self.sar_pdu_s)
            self.engine.post(self._dma(t, dur), self, EV_RX_DONE, (<long long> self.epoch << 24) | e)
            return
        self.pdus_dropped += 1
        self.cells_dropped += n

    cdef _rx_done(self, long long word):
        cdef int e = word & 0xFFFFFF
        if (word >> 24) != self.epoch:
            return
        self._status(self.ram[(self.rxq_off >> 2) + 2 * e + 1], STATUS_COMPLETE)
        self._post_intr()

    def stats(self):
        return {
            "phy": {"cells_in": self.cells_in, "hec_errors": self.hec_errors, "idle_cells": self.idle_cells,
                    "runts": self.runts, "rx_fifo_overflow": self.rx_fifo_overflow},
            "atm": {"cells_transmitted": self.cells_tx, "cells_received": self.cells_rx,
                    "vpi_bad_range": self.vpi_bad_range, "vci_bad_range": self.vci_bad_range,
                    "vci_no_conn": self.vci_no_conn, "oam_cells": self.oam_cells},
            "aal5": {"pdus_transmitted": self.pdus_tx, "pdus_received": self.pdus_rx,
                     "crc_errors": self.crc_errors, "protocol_errors": self.protocol_errors,
                     "too_long": self.pdus_too_long, "pdus_dropped": self.pdus_dropped,
                     "cells_dropped": self.cells_dropped, "tx_errors": self.tx_errors},
            "aux": {"small_buffer_failed": self.small_failed, "large_buffer_failed": self.large_failed,
                    "rpd_failed": self.rpd_failed, "dma_errors": self.dma_errors,
                    "buffers_supplied": self.buffers_supplied, "supply_overflow": self.supply_overflow,
                    "free_small": self.fl_count[0], "free_large": self.fl_count[1],
                    "commands": self.cmds, "command_errors": self.cmd_errors},
            "dma_bytes": self.dma_bytes, "interrupts_raised": self.irq_raised,
            "i960_busy_until_us": self.cp_free * 1e6,
        }


cdef class _CellInput(CellSink):
    """The adapter's end of a modeled fiber: each cell goes to the framer (`Pca200e._rx`)."""
    cdef Pca200e card

    cdef int rx_cell(self, const unsigned char* c) except -1:
        return self.card._rx(c, True)
