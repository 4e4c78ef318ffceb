# DP's LANai control program, typed (firmware.pyx implements it): the board's processor
# starts its handlers by a C call and steps their paths by a C call.
from kernelsim._path cimport Path
from nic_drivers.myrinet._model cimport LanaiNI, NiHandler


cdef class Firmware:
    cdef dict __dict__                  # a control program may keep anything (Python ones do)
    cdef public object ni               # the board it is attached to, or None


cdef class _Ring:
    # A host receive ring as the control program keeps it.
    cdef readonly str name
    cdef readonly Py_ssize_t cons_word  # the SRAM word the host bumps as it consumes
    cdef public unsigned int base, slots, slot_bytes, prod, cons
    cdef public unsigned int cons_mark  # `cons` when the hold timer started
    cdef public object pending          # deque of (buffer, length) held in SRAM
    cdef public object hold_timer       # runs while the ring holds packets

    cdef bint full(self)


cdef class DPFirmware(Firmware):
    cdef readonly Py_ssize_t ntx, buffer_bytes, send0
    cdef readonly double abandon_s, watchdog_s
    cdef readonly double c_poll, c_desc, c_xmit, c_txdone, c_recv, c_rxdone   # NI cycles
    cdef LanaiNI board                  # `ni`, typed for the handlers' C calls
    cdef readonly list send_buf, rx_buffers, free_rx
    cdef readonly _Ring kring, bring
    cdef public unsigned int seen, done, reported
    cdef public Py_ssize_t txdone_addr
    cdef int rx_code                    # index in RX_MODES
    cdef public object wd_timer
    # the handlers the board runs (watched doorbells, timers, the receive hook)
    cdef readonly NiHandler on_host_send, on_consumed, on_tx_wait, on_watchdog, on_hold_timeout
    cdef object _on_packet              # `on_packet` (a property: its setter tells the board)
    # counters (the `counters` property shows them as a dict)
    cdef public long long n_sent, n_sent_pio, n_sent_dma, n_bad_descriptors, n_received
    cdef public long long n_to_kernel, n_to_bulk, n_held, n_dropped_abandoned, n_runts
    cdef public long long n_unknown_type, n_no_ring, n_watchdog_interrupts, n_rx_interrupts
    cdef public long long n_done_reports

    cdef LanaiNI _ni(self)
    cdef Py_ssize_t buffer_at(self, Py_ssize_t i) except -1
    cdef _reset_state(self)
    cdef _tell_board(self)
    cdef int _complete(self) except -1
    cdef int _report(self, unsigned int wait) except -1
    cdef int _arm(self) except -1
    cdef int _free(self, object buf) except -1
    cdef int _to_host(self, _Ring ring, object buf, Py_ssize_t n) except -1
    cdef int _watch_holder(self, _Ring ring) except -1
