# The TB2 adapter model: declarations (the implementation is in _model.pyx). Declared here
# so the per-packet code of its owners (nic_drivers.tb2.fifos, protocols.am) reads the
# counters and stores the lengths by C calls.
from kernelsim._engine cimport Engine, EventTarget
from kernelsim._physmem cimport PhysMem
from nic_drivers._nic cimport NicModel

# The receive status word's valid bit (_model.RX_VALID) as a C constant for the per-packet
# tests of its owners: 0x80000000 fits neither a DEF (Cython keeps it a Python int, so each
# test of it was Python arithmetic) nor an enum.
cdef extern from *:
    """
    #define DP_TB2_RX_VALID 0x80000000u
    """
    const unsigned int RX_VALID_BIT "DP_TB2_RX_VALID"


cdef class Tb2Port(EventTarget):
    # What an adapter's MSMU drives, by C call: `send` is `transmit(packet, t, ready)`
    # without the (start, end) tuple (the default calls the Python-level `transmit`, so
    # any port works; the modeled switch's `SwitchPort` overrides it).
    cdef int send(self, bytes packet, double t, double ready, double* start, double* end) except -1


cdef class Tb2Adapter(NicModel):
    cdef public object owner            # who has the FIFOs: None, the netdev, or user FIFOs
    cdef readonly int nid
    cdef readonly bytes hwaddr
    cdef public object port             # switch port: transmit(packet, t) -> (start, end)
    # The polling owner's hooks: a callable(), or a WaitQueue the card wakes by a C call.
    cdef public object on_rx            # an entry was written
    cdef public object on_tx_space      # a send entry became free
    # registers
    cdef unsigned char lengths[256]
    cdef Py_ssize_t send_base, recv_base
    cdef int send_count, recv_count
    cdef unsigned int control, int_enable, int_status
    # send side
    cdef int tx_head                    # the i860's send pointer
    cdef readonly unsigned int tx_done  # entries taken out of the send FIFO
    cdef bint tx_active                 # the i860 is working through the send FIFO
    cdef double dma_tx_free
    cdef double fifo_out[64]            # when each MSMU FIFO slot's packet has left
    cdef int fifo_slots, fifo_i
    # receive side
    cdef int rx_tail, rx_used
    cdef double dma_rx_free
    # shared
    cdef double i860_free
    cdef unsigned int epoch             # bumps on every reset: stale events are ignored
    # timing (profile)
    cdef double notice_s, i860_tx_s, i860_rx_s
    # statistics
    cdef readonly long long tx_packets, tx_bytes, tx_errors, fifo_stalls
    cdef readonly long long rx_packets, rx_bytes, rx_overflow, rx_crc_errors, rx_malformed
    cdef readonly long long rx_misrouted, rx_disabled, pops, pop_errors
    cdef readonly long long reg_writes, reg_reads

    cdef _reset(self)
    cdef int _then(self, double t, int what, object arg) except -1
    cdef int on_event(self, int what, object arg) except -1
    cdef _tx_take(self, unsigned int epoch)
    cdef _tx_dma_start(self, arg)
    cdef _tx_next(self, unsigned int epoch)
    cdef _tx_skip(self, arg)
    cdef _tx_link(self, arg)
    cdef _tx_dma_done(self, arg)
    cdef _rx_take(self, arg)
    cdef _rx_commit(self, arg)
    cpdef unsigned int reg_read(self, unsigned int off)
    cpdef reg_write(self, unsigned int off, unsigned int value, int width=*)
    cdef bint _fifos_valid(self)
    cdef _pop(self, unsigned int n)
    cdef _update_irq(self, bint last=*)
    cdef _tx_check(self)
    cdef _send_entry(self, int entry, Py_ssize_t nbytes, int slot, double ready, bint free)
    cdef _tx_free_entry(self, int entry)
    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok)
    cdef _rx_bytes(self, bytes frame, bint crc_ok)
    cdef _rx(self, const unsigned char* frame, Py_ssize_t n, object whole, bint crc_ok, bint last)
