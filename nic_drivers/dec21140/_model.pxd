from nic_drivers._nic cimport NicModel


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
    cdef set _filter                      # perfect filter: MACs loaded by a setup frame
    cdef set _rx_inflight                 # descriptors holding a frame not yet handed over
    cdef readonly bytes hwaddr
    # statistics
    cdef readonly long long tx_frames, rx_frames, rx_missed, rx_crc_errors, rx_too_long
    cdef readonly long long tx_bytes, rx_bytes, rx_filtered


    cdef _reset(self)
    cpdef unsigned int csr_read(self, int n)
    cpdef csr_write(self, int n, unsigned int value)
    cdef _raise(self, unsigned int bits)
    cdef _update_irq(self)
    cdef _tx_kick(self)
    cdef Py_ssize_t _next_desc(self, Py_ssize_t cur, unsigned int des1, unsigned int end_bit,
                               unsigned int chain_bit, Py_ssize_t base) except? -1
    cdef int on_event(self, int what, object arg) except -1
    cdef _tx_fetched(self)
    cdef _tx_setup_done(self, Py_ssize_t d)
    cdef _tx_loaded(self, Py_ssize_t d)
    cdef _tx_wire_done(self, Py_ssize_t d)
    cdef _tx_complete(self, Py_ssize_t d, unsigned int des1)
    cdef _tx_advance(self, Py_ssize_t d, double t)
    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok)
    cdef bint _accepts(self, const unsigned char[::1] frame) except -1
    cdef _rx_done(self, arg)
