# The LANai board's state and its C methods, declared for the driver's per-frame paths
# (nic_drivers/myrinet/driver.pyx reaches the card by C calls); _model.pyx implements them.
cimport cython
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from kernelsim._engine cimport Engine, EventTarget
from kernelsim._path cimport Path
from kernelsim._pcibus cimport PciBus
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from nic_drivers._nic cimport NicModel


cdef class NiHandler:
    # A control program's handler that the NI processor starts by a C call (see _model.pyx).
    cdef object start(self, object arg)
    cdef object start_packet(self, Py_ssize_t off, Py_ssize_t n)


cdef inline void _put(list table, Py_ssize_t i, object value) noexcept:
    # ``table[i] = value`` for a slot that exists, without the checks.
    cdef PyObject* old = PyList_GET_ITEM(table, i)
    Py_INCREF(value)
    PyList_SET_ITEM(table, i, value)
    Py_XDECREF(old)


@cython.final
cdef class Fifo:
    # A first-in first-out queue the board's C code uses without a Python method call
    # per item (its processor and DMA engines queue a few items per packet): a ring
    # over a list whose length, a power of two, only grows. Its slots are read and
    # written by the list's C macros: every index is masked into the list already.
    cdef list items
    cdef Py_ssize_t head, count, mask

    cdef inline bint empty(self) noexcept:
        return self.count == 0

    cdef inline int push(self, object item) except -1:
        if self.count > self.mask:
            self.items = self.items[self.head:] + self.items[:self.head] + [None] * len(self.items)
            self.head = 0
            self.mask = len(self.items) - 1
        _put(self.items, (self.head + self.count) & self.mask, item)
        self.count += 1
        return 0

    cdef inline object pop(self):
        # The caller checked `empty()`.
        cdef object item = <object> PyList_GET_ITEM(self.items, self.head)
        _put(self.items, self.head, None)
        self.head = (self.head + 1) & self.mask
        self.count -= 1
        return item

    cdef inline int clear(self) except -1:
        while self.count:
            self.pop()
        return 0


cdef class Medium(EventTarget):
    # A network that carries the packets of LANai boards (the fabric's Wire): the send
    # DMA engine hands it a packet by a C call. `last`: the caller's engine event does
    # nothing more after it (the medium may move time on itself: `Engine.advance`).
    cdef int inject_packet(self, object ni, bytes data, object token, bint last) except -1


cdef class HostWriteSink:
    # Told of every host-memory write the board's DMA makes (a modeled poll notices it).
    cdef int wrote(self, Py_ssize_t addr, Py_ssize_t n) except -1


cdef class LanaiNI(NicModel):
    cdef public object port              # the medium: inject(ni, data, token) or transmit(frame, t)
    cdef public object host_write_sink   # callable(addr, n): a DMA wrote host memory
    cdef public object route_table       # nid -> route bytes, written by the mapper
    cdef public PciBus bus               # the node's modeled PCI bus, or None (see the essay)
    cdef readonly object firmware
    cdef readonly int nid
    cdef unsigned char[::1] sram
    cdef readonly object sram_view
    cdef readonly Py_ssize_t sram_bytes, buffer_bytes, firmware_bytes
    cdef readonly double hz, cycle_s
    # PCI (the DMA timing is NicModel's: one burst per transfer)
    cdef readonly double pci_clock_s, pio_burst_clocks
    cdef readonly int wc_burst, bus_bytes
    cdef readonly double send_setup_s
    # registers
    cdef unsigned int isr, eimr, ctrl
    # processor
    cdef Fifo _q_hi, _q_lo
    cdef object _cur
    cdef bint _last                      # the processor loop running is its event's last act (_step)
    # Watched words (`watch`): their offsets sorted in a C array and their entries in the
    # same order, so a host write finds its words by a C search, not a boxed dict key each.
    cdef Py_ssize_t* _watch_words
    cdef list _watch_entries
    cdef Py_ssize_t _nwatch, _watch_cap
    cdef Py_ssize_t _watch_hi
    cdef dict _timers
    cdef long long _next_timer
    # host DMA engine
    cdef Fifo _hq
    cdef object _h_cur
    # send DMA engine
    cdef Fifo _sq
    cdef object _s_cur
    cdef double _s_t0
    # receive DMA engine
    cdef Py_ssize_t rx_off, rx_cap
    cdef readonly bint rx_armed, rx_busy
    cdef object _rx_waiters
    # statistics
    cdef readonly long long ni_events, fw_faults, dma_errors
    cdef readonly double ni_cycles, ni_busy_s
    cdef readonly long long h_transfers, h_bytes, s_packets, s_bytes, tx_no_link, tx_too_long
    cdef readonly double h_busy_s, s_busy_s
    cdef readonly long long rx_packets, rx_bytes, rx_crc_errors, rx_misrouted, rx_too_long
    cdef readonly long long rx_no_buffer, rx_halted, rx_blocked
    cdef readonly long long pio_writes, pio_bytes, pio_reads
    cdef readonly object last_fault
    # The channel this board's packets enter the wire `_in_wire` by (`Wire.cable_in` sets
    # both): the wire finds it without a boxed node id and a dict lookup per packet.
    cdef object _in_wire, _in_ch
    # The firmware's `on_packet` when the firmware keeps it here (DP's does: its setter
    # refreshes it), else None and it is looked up per packet.
    cdef object _on_packet

    cdef _reset(self)
    cpdef unsigned int csr_read(self, int off)
    cpdef csr_write(self, int off, unsigned int value)
    cdef _update_irq(self)
    cpdef raise_host(self, unsigned int bits)
    cdef _start(self)
    cpdef post(self, object fn, object arg=*, bint urgent=*)
    cpdef post_path(self, Path path, bint urgent=*)
    cdef _queue(self, object item, bint urgent)
    cdef _then(self, object then, object arg)
    cdef _run(self)
    cdef _run_item(self, object item)
    cdef _step(self)
    cdef _fault(self, exc)
    cdef int on_event(self, int what, object arg) except -1
    cdef _resume(self, gen)
    cdef _h_done(self, req)
    cdef _s_go(self, req)
    cdef _s_done(self, req, bint last)
    cdef _poke(self, Py_ssize_t off, Py_ssize_t n)
    cpdef double rtc(self)
    cpdef double pio_time(self, Py_ssize_t n)
    cdef inline int _check(self, Py_ssize_t off, Py_ssize_t n) except -1:
        # Every SRAM access checks its span (a few per handler): inline, not a C call.
        if not span_ok(off, n, self.sram_bytes):
            span_check(off, n, self.sram_bytes, "LANai SRAM")
        return 0

    cpdef pio_write(self, Py_ssize_t off, const unsigned char[::1] data)
    cdef int pio_write_from(self, Py_ssize_t off, PhysMem mem, Py_ssize_t addr, Py_ssize_t n) except -1
    cpdef pio_write32(self, Py_ssize_t off, unsigned int value)
    cpdef unsigned int pio_read32(self, Py_ssize_t off)
    cpdef unsigned int rd32(self, Py_ssize_t off)
    cpdef wr32(self, Py_ssize_t off, unsigned int value)
    cpdef unsigned int rd16be(self, Py_ssize_t off)
    cpdef bytes read(self, Py_ssize_t off, Py_ssize_t n)
    cpdef write(self, Py_ssize_t off, const unsigned char[::1] data)
    cpdef host_dma(self, bint to_host, Py_ssize_t host_addr, Py_ssize_t sram_off, Py_ssize_t n, object then=*, object arg=*)
    cdef _h_start(self)
    cpdef net_send(self, Py_ssize_t sram_off, Py_ssize_t n, object then=*, object arg=*)
    cdef _s_start(self)
    cpdef net_sent(self, object token)
    cdef int tail_left(self, object token, bint last) except -1
    cpdef rx_arm(self, Py_ssize_t sram_off, Py_ssize_t cap)
    cpdef bint net_head(self)
    cpdef rx_wait(self, object fn, object arg)
    cdef _rx_grant(self)
    cpdef net_tail(self, const unsigned char[::1] data, bint crc_ok)
    cdef int net_tail_at(self, const unsigned char* data, Py_ssize_t n, bint crc_ok) except -1
    cpdef net_abort(self)
    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok)
    cdef _rx_store(self, const unsigned char* data, Py_ssize_t n, bint crc_ok)
