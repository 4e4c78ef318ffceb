from nic_drivers._nic cimport NicModel

# Register and descriptor bits (HW-21140), C constants for the model and the driver:
# a bit test against a Python int would be an object operation on every frame.
cdef extern from *:
    """
    #define DEC21140_BIT31 0x80000000u
    """
    # Bit 31, unsigned: an enum constant is an int to Cython, and 1 << 31 is not one.
    const unsigned int OWN "DEC21140_BIT31"          # descriptor owned by the card
    const unsigned int TDES1_IC "DEC21140_BIT31"     # interrupt on completion

cdef enum:
    # CSR5 status bits (write 1 to clear) and CSR7 enables: same positions.
    TI = 1 << 0
    TPS = 1 << 1
    TU = 1 << 2
    UNF = 1 << 5
    RI = 1 << 6
    RU = 1 << 7
    RPS = 1 << 8
    ETI = 1 << 10
    GTE = 1 << 11
    FBE = 1 << 13
    ERI = 1 << 14
    AIS = 1 << 15
    NIS = 1 << 16

    # CSR6 operating mode
    SR = 1 << 1
    PR = 1 << 6
    PM = 1 << 7
    ST = 1 << 13
    SF = 1 << 21
    # CSR0 bus mode
    SWR = 1 << 0

    # Descriptor bits
    RDES0_FS = 1 << 9
    RDES0_LS = 1 << 8
    RDES0_ES = 1 << 15
    RDES0_TL = 1 << 7  # frame too long (> 1518)
    RDES0_CE = 1 << 1  # CRC error
    RDES0_RF = 1 << 11  # runt frame
    RDES1_RER = 1 << 25
    RDES1_RCH = 1 << 24
    TDES1_LS = 1 << 30
    TDES1_FS = 1 << 29
    TDES1_SET = 1 << 27
    TDES1_TER = 1 << 25
    TDES1_TCH = 1 << 24
    TDES0_ES = 1 << 15

    # Transmit / receive process states (CSR5 TS bits 20-22, RS bits 17-19)
    TS_STOPPED = 0
    TS_FETCHING = 1
    TS_WAITING = 2
    TS_READING = 3
    TS_SUSPENDED = 6
    RS_STOPPED = 0
    RS_WAITING = 3
    RS_SUSPENDED = 4

    ETH_MIN_FRAME = 60  # without FCS: the 21140 pads short frames
    ETH_MAX_FRAME = 1514  # without FCS
    NIS_SOURCES = TI | TU | RI | GTE | ERI
    AIS_SOURCES = TPS | UNF | RU | RPS | ETI | FBE
    W1C_MASK = 0x0001FFFF


cdef struct RxDma:
    # A received frame whose final DMA burst and status write are under way: the descriptor
    # it went to and the status the card writes there when done.
    Py_ssize_t desc
    unsigned int status
    int tag                             # the engine event's `what` that completes it


cdef class Dec21140(NicModel):
    # One 21140 on one node's PCI bus (declared here; `_model.pyx` implements it).
    # The INTA# line and the DMA timing are NicModel's; the burst length is CSR0's PBL.
    cdef unsigned int csr[16]
    cdef public object port                # medium backend: transmit(frame, t) -> (start, end)
    cdef double tx_poll_s
    # ring walkers
    cdef Py_ssize_t tx_cur, rx_cur
    cdef int tx_state, rx_state
    cdef bint tx_pending_kick
    cdef double rx_free_at
    cdef unsigned long long _perfect[16]  # perfect filter: MACs loaded by a setup frame (_mac48)
    cdef int _nperfect                    # entries loaded (0 or 16)
    # Frames not yet handed over, in arrival order (they complete in that order: rx_free_at):
    # a ring of `_rxq_cap` records from `_rxq_head`, `_rxq_len` long; the last `_rxq_live`
    # hold descriptors the card still owns (a reset lets go of the earlier ones).
    cdef RxDma* _rxq
    cdef Py_ssize_t _rxq_cap, _rxq_head, _rxq_len, _rxq_live
    cdef int _rxq_tag                     # the last record's tag
    cdef list _d_boxes                    # transmit descriptors' addresses as event args (`_boxed`)
    cdef readonly bytes hwaddr
    # statistics
    cdef readonly long long tx_frames, rx_frames, rx_missed, rx_crc_errors, rx_too_long
    cdef readonly long long tx_bytes, rx_bytes, rx_filtered


    cdef _reset(self)
    cpdef unsigned int csr_read(self, int n)
    cpdef csr_write(self, int n, unsigned int value)
    cdef _raise(self, unsigned int bits, bint last=*)
    cdef _update_irq(self, bint last=*)
    cdef _tx_kick(self)
    cdef Py_ssize_t _next_desc(self, Py_ssize_t cur, unsigned int des1, unsigned int end_bit,
                               unsigned int chain_bit, Py_ssize_t base) except? -1
    cdef int _then(self, double t, int what, Py_ssize_t d) except -1
    cdef int on_event(self, int what, object arg) except -1
    cdef object _boxed(self, Py_ssize_t d)
    cdef _tx_fetched(self)
    cdef _tx_setup_done(self, Py_ssize_t d)
    cdef _tx_loaded(self, Py_ssize_t d)
    cdef _tx_wire_done(self, Py_ssize_t d, bint last)
    cdef _tx_complete(self, Py_ssize_t d, unsigned int des1, bint last=*)
    cdef _tx_advance(self, Py_ssize_t d, double t)
    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok)
    cdef int frame_in(self, const unsigned char[::1] frame, bint crc_ok, bint last) except -1
    cdef bint _accepts(self, const unsigned char[::1] frame) except -1
    cdef bint _rx_busy(self, Py_ssize_t d) noexcept
    cdef int rx_room(self) except -1
    cdef int _rx_done(self, int tag) except -1
