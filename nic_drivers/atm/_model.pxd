# The PCA-200E-style adapter model: declarations (`_model.pyx` implements it). Declared
# here so the driver's per-frame paths reach the register file by C calls and test the
# register, status and queue-layout bits as C constants (as Python ints every bit test
# on a per-frame path would be an object operation).
from kernelsim._engine cimport Engine
from kernelsim._physmem cimport PhysMem
from nic_drivers._nic cimport NicModel
from nic_drivers.atm._medium cimport CellPort, CellSink

# Register file offsets, host-control bits, status words, commands and the layout of
# the host-memory structures (HW-ATM; the names of Linux's fore200e.h). `cpdef`: Python
# code (tests, tools) sees them as module-level ints too.
cpdef enum:
    # -- register file (32-bit, PCI memory space) --
    REG_HCR = 0x00          # host control: write RESET / CLR_INTR; read INTR
    REG_IMASK = 0x04        # 1: the cp may interrupt the host
    REG_ISTAT = 0x08        # 1: an interrupt is posted
    REG_BSTAT = 0x0C        # boot status of the i960 monitor / firmware
    REG_CMDQ = 0x10         # card-memory offsets of the cp-resident queues ("cp_queues")
    REG_TXQ = 0x14
    REG_RXQ = 0x18
    REG_BSQ_SMALL = 0x1C
    REG_BSQ_LARGE = 0x20
    REG_CMDQ_LEN = 0x24
    REG_TXQ_LEN = 0x28
    REG_RXQ_LEN = 0x2C
    REG_BSQ_LEN = 0x30
    REG_SMALL_BYTES = 0x34
    REG_LARGE_BYTES = 0x38
    REG_NUM_CONNECT = 0x3C
    REG_RSD_MAX = 0x40
    QUEUES_BASE = 0x100

    HCR_RESET = 1 << 0
    HCR_CLR_INTR = 1 << 1
    HCR_INTR = 1 << 2

    STATUS_PENDING = 1 << 0
    STATUS_COMPLETE = 1 << 1
    STATUS_FREE = 1 << 2
    STATUS_ERROR = 1 << 3

    OPCODE_ACTIVATE_VCIN = 2
    OPCODE_ACTIVATE_VCOUT = 3
    OPCODE_DEACTIVATE_VCIN = 4
    OPCODE_DEACTIVATE_VCOUT = 5
    OPCODE_REQUEST_INTR = 1 << 7

    AAL0 = 0
    AAL34 = 4
    AAL5 = 5

    # -- host-memory structures (byte offsets, host byte order) --
    TPD_BYTES = 32          # header, spec, rate, pad, 2 x {buffer, length}
    TPD_HEADER = 0
    TPD_SPEC = 4
    TPD_RATE = 8
    TPD_TSD = 16
    RSD_MAX_PER_RPD = 18    # receive segments per RPD: 1 small + 17 large hold 65535 bytes
    RPD_HEADER = 0
    RPD_NSEG = 4
    RPD_RSD = 8
    RPD_BYTES = 8 + 8 * RSD_MAX_PER_RPD
    RBD_BYTES = 8
    RBD_BLOCK_MAX = 32
    CMDQ_ENTRY = 32         # command words 0-3, status address (word 4, the trigger), pad
    QENTRY = 8              # tx/rx/bs queue entry: trigger word, status address


# What each engine event of the card is (EventTarget.on_event's `what`).
cdef enum:
    EV_TX_LOAD = 0      # the cp's poll loop notices a posted TPD
    EV_TX_LOADED = 1    # a PDU is in a card slot
    EV_TX_CELL = 2      # the SAR segments the next cell
    EV_TX_DONE = 3      # a PDU's status word is written back
    EV_RX_DONE = 4      # a received PDU's status word is written back
    EV_BSQ_DONE = 5     # a block of receive buffer descriptors is fetched


cdef struct Vc:
    unsigned char in_open
    unsigned char out_open
    unsigned char dropping
    int in_mtu
    int out_mtu
    int max_cells
    int ncells
    unsigned char* buf


cdef class Pca200e(NicModel):
    # One PCA-200E-style adapter on one node's PCI bus (`_model.pyx` says what it models).
    cdef public bint fail_selftest      # a card whose self-test fails (driver probe tests)
    cdef readonly CellSink cell_input   # where a modeled fiber delivers its cells
    cdef object _port
    cdef CellPort cport
    cdef object _acc                    # real transports: the cells of the PDU being sent
    cdef unsigned char* host
    cdef Py_ssize_t host_size
    cdef readonly tuple hwaddr
    # geometry
    cdef readonly int cmdq_len, txq_len, rxq_len, bsq_len, small_bytes, large_bytes, num_connect
    cdef readonly int cmdq_off, txq_off, rxq_off, bsq_small_off, bsq_large_off, ram_bytes
    cdef int bsq_off[2]
    cdef unsigned int* ram
    cdef unsigned char* txq_posted
    cdef unsigned char* rxq_ready
    cdef unsigned char* bsq_posted
    cdef Vc* vcs
    cdef int fl_cap
    cdef unsigned int* fl_handle
    cdef unsigned int* fl_addr
    cdef int fl_head[2]
    cdef int fl_count[2]
    # registers and cp state
    cdef unsigned int imask, istat, bstat
    cdef int epoch
    cdef object epoch_obj
    cdef double cp_free, dma_free
    cdef int tx_head, rx_head
    cdef bint tx_poll_pending, tx_loading
    cdef int load_slot, seg_slot, seg_cell
    cdef unsigned char* slot_buf[2]
    cdef int slot_full[2]
    cdef int slot_cells[2]
    cdef int slot_entry[2]
    cdef int slot_intr[2]
    cdef unsigned int slot_hdr[2]
    # timing
    cdef readonly double cell_s, sar_cell_s, sar_pdu_s, cmd_s, cp_poll_s
    cdef int tx_fifo, rx_fifo
    # statistics (the card's own counters: phy, atm, aal5, aux)
    cdef readonly long long cells_in, hec_errors, idle_cells, oam_cells, runts
    cdef readonly long long vpi_bad_range, vci_bad_range, vci_no_conn, rx_fifo_overflow
    cdef readonly long long cells_tx, cells_rx, cells_dropped
    cdef readonly long long pdus_tx, pdus_rx, crc_errors, protocol_errors, pdus_too_long
    cdef readonly long long pdus_dropped, small_failed, large_failed, rpd_failed, dma_errors
    cdef readonly long long tx_errors, cmds, cmd_errors, buffers_supplied, supply_overflow

    cdef _reset(self)
    cpdef unsigned int reg_read(self, int off)
    cpdef reg_write(self, int off, unsigned int value)
    cdef _post_intr(self)
    cdef _update_irq(self)
    cdef bint _ok(self, Py_ssize_t a, Py_ssize_t n)
    cdef unsigned int _rd(self, Py_ssize_t a)
    cdef void _wr(self, Py_ssize_t a, unsigned int v)
    cdef _status(self, unsigned int haddr, unsigned int value)
    cdef double _cp(self, double t, double work)
    cdef double _dma(self, double t, double dur)
    cdef _command(self, int i)
    cdef bint _activate(self, bint incoming, unsigned int aal, unsigned int vpi, unsigned int vci, unsigned int mtu)
    cdef bint _deactivate(self, bint incoming, unsigned int vpi, unsigned int vci)
    cdef int _take_buffer(self, int magn, unsigned int* handle, unsigned int* addr)
    cdef int on_event(self, int what, object arg) except -1
    cdef _bsq_done(self, long long word)
    cdef _tx_kick(self)
    cdef _tx_load(self, object epoch)
    cdef _tx_loaded(self, object epoch)
    cdef _tx_cell(self, object epoch)
    cdef _tx_done(self, long long word)
    cdef _rx_done(self, long long word)
    cdef _tx_fail(self, int e, unsigned int spec)
    cdef _tx_try_load(self)
    cdef int _rx(self, const unsigned char* c, bint paced) except -1
    cdef _rx_pdu(self, unsigned int hdr, Vc* vc, double t)
