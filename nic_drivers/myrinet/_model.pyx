# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The Myrinet network interface (a LANai 4.x / 9.x board): the hardware side.

A Myrinet NI is a small computer on a PCI card (HW-MYRI; LCI-A22..A26,
EP-A05). Its SRAM (1 MB on the LANai 4.1, 2 MB on the LANai 9.2) holds the control
program and every packet in transit: nothing reaches the wire except from SRAM, and
nothing reaches the host except through SRAM (LCI-C25, FM-C01). Three DMA engines work
in parallel with each other and with the NI processor (LCI-A26): one moves data between
host memory and SRAM across PCI, one streams SRAM onto the link, one streams the link
into SRAM. The processor -- a slow RISC core, an order of magnitude slower than the host
(LCI-A27) -- only programs them and keeps the books.

What is modeled, and why each piece is there:

* **SRAM** as real bytes (anonymous pages: an idle board's SRAM costs no host memory). The host writes into it by programmed I/O (the SRAM is
  mapped into the host's address space); write-combining turns a stream of stores into
  32-byte PCI bursts (EP-A20, LCI-A47/C15), so a PIO costs the host CPU one bus burst
  per 32 bytes. PIO reads are modeled but dear, which is why nobody uses them (LCI-A48).
* **The host DMA engine**: one transfer at a time, each costing a set-up plus the bytes
  at the board's sustained PCI DMA rate (LCI-A17/A18, EP-A07). Transfers queue FIFO, so
  a stream of packets moves through it as through one pipeline stage (EP-C04).
* **The send and receive DMA engines**: the send engine streams a packet -- route bytes
  first -- onto the link through the medium; the receive engine accepts a packet only
  when the control program has *armed* it with a free SRAM buffer. An unarmed engine
  does not drop: the link's flow control holds the packet in the network, which is how
  Myrinet's back-pressure reaches the sender (LCI-C25). The CRC is checked in hardware
  as the packet's tail comes in; a bad packet is dropped and counted and the buffer
  stays armed. A control program that must know (LCI's base variant aborts on a bad
  CRC, LCI-C03) defines ``on_crc_error``: the board posts it, with the packet's length,
  as it posts ``on_packet`` for a good one.
* **The NI processor** runs the control program's event handlers one at a time. A
  handler is a generator that yields the NI cycles its work takes (at the LANai clock);
  its effects -- programming a DMA, raising a host interrupt -- take place when those
  cycles have passed. Packet arrivals go ahead of other work, as in a real control
  program's event loop. Host doorbells are SRAM words the control program watches.
  A typed control program (DP's) gives the processor `NiHandler`s, started by a C
  call, whose paths are `kernelsim._path.Path` state machines stepped by a C call; and
  it may hand ``host_dma``/``net_send`` a ready Path to run when the transfer is done.
  A Python control program's generators are resumed as before: same cycles either way.
* **The firmware slot.** The control program is not part of the board: protocol
  modules load one (``load_firmware``), then the host starts the processor through the
  control register. DP's firmware is in ``firmware.py``; its hooks are the contract.
* **Host-visible registers**: the interrupt status (write 1 to clear), the external
  interrupt mask, the control register (run/halt). The PCI interrupt line follows
  ISR & EIMR, so interrupts are optional: a host that polls leaves EIMR clear.

Memory-based notification (FM-C06/C07) needs no register: a DMA into host memory is
reported to ``host_write_sink`` so that a modeled host poll can notice it at once.

**The PCI bus.** On a machine whose profile models its bus and host bridge
(``kernelsim._pcibus``, the ``chipset.*`` keys), the board's host DMA engine is a bus
master on it: each transfer waits for the bus and is cut when a CPU read or a posted
write burst has waited out its latency timer, so its completion can move (``bus``;
None elsewhere, where a transfer takes ``dma_time`` on a bus of its own).
"""
import errno
from collections import deque

cimport cython

from libc.string cimport memcpy, memmove
from libc.stdlib cimport realloc, free
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from kernelsim._pyiter cimport resume, take_raised

from kernelsim._engine cimport Engine, EventTarget
from kernelsim._path cimport Path
from kernelsim._pcibus cimport PciBus
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from kernelsim._physmem import anonymous_pages
from nic_drivers._nic cimport NicModel

# Host-visible registers (byte offsets in the register window)
REG_ISR = 0x00
REG_EIMR = 0x04
REG_CTRL = 0x08
REG_VERSION = 0x0C

# ISR / EIMR bits
ISR_RX = 1 << 0          # the firmware delivered packets to a host ring
ISR_TX = 1 << 1          # the firmware reports send completions to a waiting host
ISR_ERR = 1 << 7         # the control program faulted or a DMA address was bad
cdef unsigned int ISR_MASK = 0xFF

CTRL_RUN = 1 << 0

ROUTE_BIT = 0x80         # a route byte has its most significant bit set

# The same, typed for the C code (a module global is a dict lookup per use).
cdef int _REG_ISR = REG_ISR, _REG_EIMR = REG_EIMR, _REG_CTRL = REG_CTRL, _REG_VERSION = REG_VERSION
cdef unsigned int _ISR_ERR = ISR_ERR, _CTRL_RUN = CTRL_RUN
cdef unsigned char _ROUTE_BIT = ROUTE_BIT


# What the engine calls this board back for (`LanaiNI.on_event`).
cdef enum:
    EV_RESUME       # the processor's handler has spent its cycles: go on
    EV_H_DONE       # a host DMA transfer ends
    EV_S_GO         # the send DMA's set-up is over: the packet goes onto the link
    EV_S_DONE       # a packet's tail has left over a real transport


cdef Fifo _fifo():
    cdef Fifo q = Fifo.__new__(Fifo)
    q.items = [None] * 8
    q.mask = 7
    return q


# The processor loop's calls into control-program code. `_run` and `_step` make them
# through pointers that do not say they can fail, and look at the -1 themselves
# (`take_raised`): a `try` block walks the thread's stack of handled exceptions, one
# entry per coroutine the engine runs inside of, and would cost more than a step (see
# `kernelsim._cpu._advance`). An `Exception` is the control program's fault; anything
# else goes on up.
cdef int _start_item(object item, PyObject** started) except -1:
    """Start a queued item's handler (a watched word's or a (fn, arg) pair's; a ready
    Path needs no start): a new reference to what runs it (a Path, a generator, or None
    for nothing to run) in `started[0]`."""
    cdef object gen, fn, arg
    cdef _Watch w
    if type(item) is _Watch:
        w = <_Watch> item
        w.queued = False
        fn = w.fn
        arg = w.off
    else:
        fn = (<tuple> item)[0]
        arg = (<tuple> item)[1]
    if isinstance(fn, NiHandler):
        gen = (<NiHandler> fn).start(arg)
    else:
        gen = fn(arg)
    Py_INCREF(gen)
    started[0] = <PyObject*> gen
    return 0


cdef int _step_handler(object gen, bint is_path, double* cycles) except -1:
    """Run a handler up to its next cycles: 1 and `cycles[0]`, or 0 when it has ended."""
    cdef PyObject* res = NULL
    cdef object c
    cdef int r
    if is_path:
        return (<Path> gen).step(cycles)
    r = resume(gen, &res)
    c = <object> res
    Py_XDECREF(res)
    if r == 1:
        cycles[0] = <double> c if c is not None else 0.0
    return r


ctypedef int (*_StartItemFn)(object, PyObject**) noexcept
ctypedef int (*_StepHandlerFn)(object, bint, double*) noexcept
cdef _StartItemFn _start_item_unchecked = <_StartItemFn> _start_item
cdef _StepHandlerFn _step_handler_unchecked = <_StepHandlerFn> _step_handler


cdef class Medium(EventTarget):
    """A network for LANai boards: ``inject(ni, data, token)`` starts streaming `data`
    (route bytes first) from `ni` now; it calls ``ni.net_sent(token)`` when the tail has left."""

    cdef int inject_packet(self, object ni, bytes data, object token, bint last) except -1:
        raise NotImplementedError

    def inject(self, ni, bytes data, token):
        self.inject_packet(ni, data, token, False)


cdef class HostWriteSink:
    """A driver's hook for the board's host-memory writes, called by C; from Python it
    is ``sink(addr, n)``, as a plain callable sink is."""

    cdef int wrote(self, Py_ssize_t addr, Py_ssize_t n) except -1:
        raise NotImplementedError

    def __call__(self, Py_ssize_t addr, Py_ssize_t n):
        self.wrote(addr, n)


cdef class NiHandler:
    """A control program's handler as an object the processor starts by a C call:
    ``start(arg)`` gives the path that runs it -- a `Path` (stepped by a C call) or any
    iterator of NI cycles -- or None when there is nothing to run. Called from Python it
    is ``handler(arg)``, as a generator function handler is."""

    cdef object start(self, object arg):
        raise NotImplementedError

    cdef object start_packet(self, Py_ssize_t off, Py_ssize_t n):
        """As ``on_packet``, the path of ``start((off, n))`` made when the packet is posted
        rather than when the processor takes it up -- for a handler whose start does nothing
        else (no tuple, no item per packet); None: not such a handler, post ``(off, n)``."""
        return None

    def __call__(self, arg=None):
        return self.start(arg)


cdef class _Watch:
    # A watched doorbell word: `fn(off)` runs when the host writes it; `queued` while a
    # look is waiting for the processor (a burst of writes costs one look).
    cdef object fn
    cdef object off
    cdef bint queued


@cython.freelist(8)
cdef class _HostDma:
    # One request to the host DMA engine; `then(arg)` is posted when it is done, or
    # `then` itself when it is a Path and `arg` is None.
    cdef bint to_host
    cdef Py_ssize_t host_addr, sram_off, n
    cdef object then, arg


@cython.freelist(8)
cdef class _SendDma:
    # One packet for the send DMA engine (the token the medium hands back in net_sent).
    cdef Py_ssize_t sram_off, n
    cdef object then, arg


cdef inline Py_ssize_t _watch_at(LanaiNI ni, Py_ssize_t off) noexcept:
    """The index of `ni`'s first watched word at or above `off`."""
    cdef Py_ssize_t lo = 0, hi = ni._nwatch, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if ni._watch_words[mid] < off:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef class LanaiNI(NicModel):
    """One LANai board on one node's PCI bus."""
    vendor_id = 0x14C1      # Myricom
    device_id = 0x8043      # Myrinet LANai board


    def __cinit__(self, Engine engine, PhysMem host, int nid, profile):
        self._init_nic(engine, host, profile, False)
        self.nid = nid
        self.port = None
        self.host_write_sink = None
        self.route_table = {}
        self.bus = None
        self.firmware = None
        self.sram_bytes = int(profile["lanai.sram_bytes"])
        self.buffer_bytes = int(profile["lanai.buffer_bytes"])
        self.firmware_bytes = int(profile["lanai.firmware_bytes"])
        if self.sram_bytes < 4096 or self.buffer_bytes < 64 or self.firmware_bytes < 1024 \
                or self.firmware_bytes + 2 * self.buffer_bytes > self.sram_bytes:
            raise ValueError("lanai.sram_bytes must hold the control program and at least two packet buffers")
        self.sram_view = anonymous_pages(self.sram_bytes)     # resident only where touched
        self.sram = self.sram_view
        self.hz = profile["lanai.hz"]
        self.cycle_s = 1.0 / self.hz
        self.pci_clock_s = 1.0 / profile["pci.clock_hz"]
        self.bus_bytes = int(profile["pci.bus_bytes"])
        self.wc_burst = int(profile["pci.wc_burst_bytes"])
        self.pio_burst_clocks = profile["pci.pio_burst_clocks"]
        if self.bus_bytes <= 0 or self.wc_burst <= 0:
            raise ValueError("pci.bus_bytes and pci.wc_burst_bytes must be positive")
        self.send_setup_s = profile["lanai.send_setup_cycles"] * self.cycle_s
        self._q_hi = _fifo()
        self._q_lo = _fifo()
        self._hq = _fifo()
        self._sq = _fifo()
        self._rx_waiters = deque()
        self._watch_entries = []
        self._timers = {}
        self.last_fault = None
        self._reset()

    def __dealloc__(self):
        free(self._watch_words)

    cdef _reset(self):
        cdef object fn, arg
        cdef long long h
        for h in self._timers.values():
            self.engine.cancel(h)
        self._timers.clear()
        self._q_hi.clear()
        self._q_lo.clear()
        self._cur = None
        self._hq.clear()
        if self._h_cur is not None and self.bus is not None:
            self.bus.dma_finish()
        self._h_cur = None
        self._sq.clear()
        self._s_cur = None
        self._nwatch = 0
        del self._watch_entries[:]
        self._watch_hi = 0
        self.rx_armed = False
        self.isr = 0
        self.ctrl = 0
        self._update_irq()
        # Packets held in the network by our flow control are let in and discarded.
        while self._rx_waiters and not self.rx_busy:
            self.rx_busy = True
            fn, arg = self._rx_waiters.popleft()
            fn(arg)

    # -- host-visible registers (the write-semantics table) -------------------------------

    cpdef unsigned int csr_read(self, int off):
        if off == _REG_ISR:
            return self.isr
        if off == _REG_EIMR:
            return self.eimr
        if off == _REG_CTRL:
            return self.ctrl
        if off == _REG_VERSION:
            return 0x0401 if self.hz < 60e6 else 0x0902
        return 0xFFFFFFFF

    cpdef csr_write(self, int off, unsigned int value):
        if off == _REG_ISR:
            self.isr &= ~(value & ISR_MASK)             # write 1 to clear
            self._update_irq()
        elif off == _REG_EIMR:
            self.eimr = value & ISR_MASK
            self._update_irq()
        elif off == _REG_CTRL:
            if value & _CTRL_RUN and not self.ctrl & _CTRL_RUN:
                self._start()
            elif not value & _CTRL_RUN and self.ctrl & _CTRL_RUN:
                self._reset()

    cdef _update_irq(self):
        self._set_line((self.isr & self.eimr) != 0)

    cpdef raise_host(self, unsigned int bits):
        """Firmware: set ISR bits (the line rises if the host enabled them in EIMR)."""
        self.isr |= bits & ISR_MASK
        self._update_irq()

    # -- the firmware slot ---------------------------------------------------------------

    def load_firmware(self, fw):
        """Put a control program into SRAM; the host starts it by setting CTRL_RUN."""
        if self.ctrl & _CTRL_RUN:
            raise OSError(errno.EBUSY, "LANai: halt the processor before loading a control program")
        if self.firmware is not None:
            self.unload_firmware()
        self._on_packet = None
        fw.attach(self)                  # may refuse (the layout does not fit): nothing kept
        self.firmware = fw

    def unload_firmware(self):
        if self.ctrl & _CTRL_RUN:
            self._reset()
        fw = self.firmware
        self.firmware = None
        if fw is not None:
            fw.detach(self)

    cdef _start(self):
        if self.firmware is None:
            self.isr |= _ISR_ERR
            self._update_irq()
            return
        self.ctrl |= _CTRL_RUN
        self.post(self._fw_start, None, True)

    def _fw_start(self, _):
        return self.firmware.start(self)

    # -- the NI processor ----------------------------------------------------------------

    cpdef post(self, object fn, object arg=None, bint urgent=False):
        """Queue `fn(arg)` -- a handler generator yielding NI cycles, or an `NiHandler`
        -- on the processor."""
        self._queue((fn, arg), urgent)

    cpdef post_path(self, Path path, bint urgent=False):
        """Queue a handler's path, ready to step (a typed control program's C call)."""
        self._queue(path, urgent)

    cdef _queue(self, object item, bint urgent):
        # An item is a (fn, arg) pair, a ready Path, or a watched word's _Watch.
        if not self.ctrl & _CTRL_RUN:
            return
        if self._cur is None and self._q_hi.count == 0 and self._q_lo.count == 0:
            # The processor is idle and nothing is queued: this item is the one `_run`
            # would take next, started without going through a queue.
            self._run_item(item)
            if self._cur is None:
                self._run()
            return
        if urgent:
            self._q_hi.push(item)
        else:
            self._q_lo.push(item)
        if self._cur is None:
            self._run()

    cdef _then(self, object then, object arg):
        # A DMA is done: what the control program asked to run next.
        if then is None:
            return
        if arg is None and isinstance(then, Path):
            self._queue(then, False)
        else:
            self._queue((then, arg), False)

    cdef _run(self):
        while self._cur is None and self.ctrl & _CTRL_RUN:
            if not self._q_hi.empty():
                item = self._q_hi.pop()
            elif not self._q_lo.empty():
                item = self._q_lo.pop()
            else:
                return
            self._run_item(item)

    cdef _run_item(self, object item):
        # Start the item's handler on the idle processor and run it up to its first cycles.
        cdef PyObject* started = NULL
        cdef object gen
        cdef bint last
        self.ni_events += 1
        if isinstance(item, Path):
            gen = item                          # ready: starting it runs no code
        else:
            last = self._last
            self._last = False                  # starting a handler runs its code: not ours
            if _start_item_unchecked(item, &started) == -1:
                exc = take_raised()
                self._last = last
                if not isinstance(exc, Exception):
                    raise exc
                self._fault(exc)
                return
            gen = <object> started
            Py_XDECREF(started)
            self._last = last
            if gen is None:
                return
        self._cur = gen
        self._step()

    cdef _step(self):
        # Run the current handler up to its next cycles (a Path by its C call, a
        # generator by a resume); those cycles are one engine event later -- or none,
        # when this loop is the last thing its engine event does and nothing else can
        # happen before they are spent (`Engine.advance`): the handler goes on at once,
        # at the same modeled instant, in the same order.
        cdef object gen = self._cur
        cdef double cycles, t
        cdef int r
        cdef bint is_path = isinstance(gen, Path)
        while True:
            r = _step_handler_unchecked(gen, is_path, &cycles)
            if r == -1:
                exc = take_raised()
                if not isinstance(exc, Exception):
                    raise exc
                self._cur = None
                self._fault(exc)
                return
            if r == 0:
                self._cur = None
                return
            if cycles > 0:
                t = cycles * self.cycle_s
                self.ni_cycles += cycles
                self.ni_busy_s += t
                if self._last and self.engine.advance(self.engine.now + t):
                    continue
                self.engine.post(self.engine.now + t, self, EV_RESUME, gen)
                return

    cdef int on_event(self, int what, object arg) except -1:
        # The engine's events for this board, dispatched by a C call (no bound method
        # and no Python call per event).
        if what == EV_RESUME:
            self._last = True
            try:
                self._resume(arg)
            finally:
                self._last = False
        elif what == EV_H_DONE:
            self._h_done(arg)
        elif what == EV_S_GO:
            self._s_go(arg)
        else:
            self._s_done(arg, False)
        return 0

    cdef _resume(self, gen):
        if gen is not self._cur:
            return                       # the processor was halted meanwhile
        self._step()
        if self._cur is None:
            self._run()

    cdef _fault(self, exc):
        # A control program that throws hangs a real board; here it is counted and shown.
        self.fw_faults += 1
        self.last_fault = repr(exc)
        self.isr |= _ISR_ERR
        self._update_irq()

    def watch(self, Py_ssize_t off, fn):
        """Firmware: run `fn(off)` on the processor when the host writes SRAM word `off`.

        The control program's event loop polls these words; a burst of host writes
        while a look is already queued costs one look.
        """
        cdef _Watch entry = _Watch.__new__(_Watch)
        cdef Py_ssize_t i
        cdef Py_ssize_t* grown
        off &= ~3
        entry.fn = fn
        entry.off = off
        i = _watch_at(self, off)
        if i < self._nwatch and self._watch_words[i] == off:
            self._watch_entries[i] = entry          # watched again: the new function
        else:
            if self._nwatch == self._watch_cap:
                grown = <Py_ssize_t*> realloc(self._watch_words, (self._watch_cap * 2 + 8) * sizeof(Py_ssize_t))
                if grown == NULL:
                    raise MemoryError()
                self._watch_words = grown
                self._watch_cap = self._watch_cap * 2 + 8
            memmove(&self._watch_words[i + 1], &self._watch_words[i], (self._nwatch - i) * sizeof(Py_ssize_t))
            self._watch_words[i] = off
            self._watch_entries.insert(i, entry)
            self._nwatch += 1
        if off + 4 > self._watch_hi:
            self._watch_hi = off + 4

    cdef _poke(self, Py_ssize_t off, Py_ssize_t n):
        cdef Py_ssize_t i, w
        cdef _Watch entry
        if off >= self._watch_hi:
            return
        # the watched words in [off & ~3, off + n), in ascending order
        i = _watch_at(self, off & ~3)
        while i < self._nwatch and self._watch_words[i] < off + n:
            w = self._watch_words[i]
            entry = <_Watch> self._watch_entries[i]
            if not entry.queued:
                entry.queued = True
                self._queue(entry, False)
                i = _watch_at(self, w + 4)       # (what ran may have watched words, or reset)
            else:
                i += 1

    cpdef double rtc(self):
        """Firmware: the board's real-time clock (seconds), for time stamps."""
        return self.engine.now

    def timer(self, double delay, fn, arg=None):
        """Firmware: post `fn(arg)` after `delay` seconds (the LANai's interval timer)."""
        self._next_timer += 1
        tid = self._next_timer
        self._timers[tid] = self.engine.after(delay, self._timer_fire, (tid, fn, arg))
        return tid

    def cancel_timer(self, tid):
        h = self._timers.pop(tid, None)
        if h is not None:
            self.engine.cancel(h)

    def _timer_fire(self, item):
        tid, fn, arg = item
        if self._timers.pop(tid, None) is not None:
            self.post(fn, arg)

    # -- SRAM: host PIO and firmware access ----------------------------------------------

    cpdef double pio_time(self, Py_ssize_t n):
        """Host CPU time of a PIO write of `n` bytes: one PCI burst per write-combined line."""
        cdef Py_ssize_t full, rem
        cdef double clocks
        if n <= 0:
            return 0.0
        full = n // self.wc_burst
        rem = n - full * self.wc_burst
        clocks = full * (self.pio_burst_clocks + (self.wc_burst + self.bus_bytes - 1) // self.bus_bytes)
        if rem:
            clocks += self.pio_burst_clocks + (rem + self.bus_bytes - 1) // self.bus_bytes
        return clocks * self.pci_clock_s

    cpdef pio_write(self, Py_ssize_t off, const unsigned char[::1] data):
        cdef Py_ssize_t n = data.shape[0]
        self._check(off, n)
        if n:
            memcpy(&self.sram[off], &data[0], n)
        self.pio_writes += 1
        self.pio_bytes += n
        self._poke(off, n)

    cdef int pio_write_from(self, Py_ssize_t off, PhysMem mem, Py_ssize_t addr, Py_ssize_t n) except -1:
        """``pio_write(off, mem.view[addr:addr + n])`` without the slice: the host CPU's
        stores from its own memory."""
        self._check(off, n)
        if not span_ok(addr, n, mem.size):
            span_check(addr, n, mem.size, "host memory")
        if n:
            memcpy(&self.sram[off], &mem.buf[addr], n)
        self.pio_writes += 1
        self.pio_bytes += n
        self._poke(off, n)
        return 0

    cpdef pio_write32(self, Py_ssize_t off, unsigned int value):
        self._check(off, 4)
        (<unsigned int*> &self.sram[off])[0] = value
        self.pio_writes += 1
        self.pio_bytes += 4
        self._poke(off, 4)

    cpdef unsigned int pio_read32(self, Py_ssize_t off):
        self._check(off, 4)
        self.pio_reads += 1
        return (<unsigned int*> &self.sram[off])[0]

    cpdef unsigned int rd32(self, Py_ssize_t off):
        """Firmware-side SRAM read (its cost is in the handler's cycles)."""
        self._check(off, 4)
        return (<unsigned int*> &self.sram[off])[0]

    cpdef wr32(self, Py_ssize_t off, unsigned int value):
        self._check(off, 4)
        (<unsigned int*> &self.sram[off])[0] = value

    cpdef unsigned int rd16be(self, Py_ssize_t off):
        self._check(off, 2)
        return (self.sram[off] << 8) | self.sram[off + 1]

    cpdef bytes read(self, Py_ssize_t off, Py_ssize_t n):
        self._check(off, n)
        return bytes(self.sram[off:off + n])

    cpdef write(self, Py_ssize_t off, const unsigned char[::1] data):
        self._check(off, data.shape[0])
        if data.shape[0]:
            memcpy(&self.sram[off], &data[0], data.shape[0])

    # -- host DMA engine (host memory <-> SRAM over PCI) ----------------------------------

    cpdef host_dma(self, bint to_host, Py_ssize_t host_addr, Py_ssize_t sram_off, Py_ssize_t n,
                   object then=None, object arg=None):
        """Firmware: queue a host DMA; `then(arg)` is posted to the processor when it is done
        (`then` itself if it is a `Path` and `arg` is None)."""
        cdef _HostDma req = _HostDma.__new__(_HostDma)
        req.to_host = to_host
        req.host_addr = host_addr
        req.sram_off = sram_off
        req.n = n
        req.then = then
        req.arg = arg
        self._hq.push(req)
        if self._h_cur is None:
            self._h_start()

    cdef _h_start(self):
        cdef _HostDma req
        cdef double t
        if self._hq.empty() or not self.ctrl & _CTRL_RUN:
            return
        req = <_HostDma> self._hq.pop()
        self._h_cur = req
        if self.bus is not None:
            t = self.bus.dma_start(self.engine.now, req.n) - self.engine.now
        else:
            t = self.dma_span(req.n)
        self.h_busy_s += t
        self.h_transfers += 1
        self.h_bytes += req.n
        self.engine.post(self.engine.now + t, self, EV_H_DONE, req)

    cdef _h_done(self, req_obj):
        cdef _HostDma req = <_HostDma> req_obj
        cdef bint to_host = req.to_host
        cdef Py_ssize_t host_addr = req.host_addr, off = req.sram_off, n = req.n
        if req is not self._h_cur:
            return
        if self.bus is not None:
            if self.bus.dma_end > self.engine.now:      # cut by other bus transactions meanwhile
                self.engine.post(self.bus.dma_end, self, EV_H_DONE, req)
                return
            self.bus.dma_finish()
        self._h_cur = None
        if not span_ok(off, n, self.sram_bytes) or host_addr <= 0 or not span_ok(host_addr, n, self.mem.size):
            self.dma_errors += 1
            self.isr |= _ISR_ERR
            self._update_irq()
        elif n:
            if to_host:
                memcpy(&self.mem.buf[host_addr], &self.sram[off], n)
            else:
                memcpy(&self.sram[off], &self.mem.buf[host_addr], n)
        self._h_start()
        if to_host and self.host_write_sink is not None:
            if isinstance(self.host_write_sink, HostWriteSink):
                (<HostWriteSink> self.host_write_sink).wrote(host_addr, n)
            else:
                self.host_write_sink(host_addr, n)
        self._last = True                       # the last thing of the EV_H_DONE event
        try:
            self._then(req.then, req.arg)
        finally:
            self._last = False

    # -- send DMA engine (SRAM -> link) ----------------------------------------------------

    cpdef net_send(self, Py_ssize_t sram_off, Py_ssize_t n, object then=None, object arg=None):
        """Firmware: queue a packet (route bytes first) for the link; `then` as for host_dma."""
        cdef _SendDma req = _SendDma.__new__(_SendDma)
        req.sram_off = sram_off
        req.n = n
        req.then = then
        req.arg = arg
        self._sq.push(req)
        if self._s_cur is None:
            self._s_start()

    cdef _s_start(self):
        cdef object req
        if self._sq.empty() or not self.ctrl & _CTRL_RUN:
            return
        req = self._sq.pop()
        self._s_cur = req
        self._s_t0 = self.engine.now
        self.engine.post(self.engine.now + self.send_setup_s, self, EV_S_GO, req)

    cdef _s_go(self, req):
        cdef Py_ssize_t off, n, i
        if req is not self._s_cur:
            return
        off = (<_SendDma> req).sram_off
        n = (<_SendDma> req).n
        if n <= 0 or not span_ok(off, n, self.sram_bytes):
            self.dma_errors += 1
            self._s_done(req, False)
            return
        data = PyBytes_FromStringAndSize(<char*> &self.sram[off], n)
        port = self.port
        if isinstance(port, Medium):
            # The medium calls net_sent(req) when the tail has left; this is the last
            # thing the EV_S_GO event does.
            (<Medium> port).inject_packet(self, data, req, True)
            return
        inject = getattr(port, "inject", None)
        if inject is not None:
            inject(self, data, req)      # the medium calls net_sent(req) when the tail has left
        elif port is not None:
            # A real transport carries the packet straight to its node: the network's
            # switches would have consumed the route.
            i = 0
            while i < n and data[i] & _ROUTE_BIT:
                i += 1
            limit = getattr(getattr(port, "transport", None), "max_frame", None)
            if limit is not None and n - i > limit:
                self.tx_too_long += 1        # the transport cannot carry it: lost, counted
                self._s_done(req, False)
                return
            start, end = port.transmit(data[i:], self.engine.now)
            self.engine.post(end, self, EV_S_DONE, req)
        else:
            self.tx_no_link += 1
            self._s_done(req, False)

    cpdef net_sent(self, object token):
        """Medium: the packet's tail has left this NI."""
        self._s_done(token, False)

    cdef int tail_left(self, object token, bint last) except -1:
        """`net_sent` for the fabric's C call; `last`: it is the last thing the medium's
        engine event does (the processor may move time on: `_step`)."""
        self._s_done(token, last)
        return 0

    cdef _s_done(self, req, bint last):
        if req is None or req is not self._s_cur:
            return
        self._s_cur = None
        self.s_packets += 1
        self.s_bytes += (<_SendDma> req).n
        self.s_busy_s += self.engine.now - self._s_t0
        self._s_start()
        self._last = last
        try:
            self._then((<_SendDma> req).then, (<_SendDma> req).arg)
        finally:
            self._last = False

    # -- receive DMA engine (link -> SRAM) -------------------------------------------------

    cpdef rx_arm(self, Py_ssize_t sram_off, Py_ssize_t cap):
        """Firmware: the next packet from the link goes into SRAM[sram_off:sram_off+cap]."""
        self._check(sram_off, cap)
        self.rx_off = sram_off
        self.rx_cap = cap
        self.rx_armed = True
        self._rx_grant()

    cpdef bint net_head(self):
        """Medium: a packet's head is at our input; may it stream in now?"""
        if self.rx_busy or self._rx_waiters:
            return False
        if self.rx_armed or not self.ctrl & _CTRL_RUN:
            self.rx_busy = True
            return True
        return False

    cpdef rx_wait(self, object fn, object arg):
        """Medium: call `fn(arg)` when the receive engine can take the waiting packet."""
        self._rx_waiters.append((fn, arg))
        self.rx_blocked += 1

    cdef _rx_grant(self):
        cdef object fn, arg
        if self.rx_busy or not self._rx_waiters:
            return
        if self.rx_armed or not self.ctrl & _CTRL_RUN:
            self.rx_busy = True
            fn, arg = self._rx_waiters.popleft()
            fn(arg)

    cpdef net_tail(self, const unsigned char[::1] data, bint crc_ok):
        """Medium: the packet's last byte is in; `crc_ok` is the hardware CRC check."""
        self.rx_busy = False
        self._rx_store(&data[0] if data.shape[0] else NULL, data.shape[0], crc_ok)
        self._rx_grant()

    cdef int net_tail_at(self, const unsigned char* data, Py_ssize_t n, bint crc_ok) except -1:
        """`net_tail` for the fabric's C call: the packet is the `n` bytes at `data`."""
        self.rx_busy = False
        self._rx_store(data, n, crc_ok)
        self._rx_grant()
        return 0

    cpdef net_abort(self):
        """Medium: the packet that was streaming in never completed (a fault took it)."""
        self.rx_busy = False
        self._rx_grant()

    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok):
        """A whole packet from a transport without flow control: dropped if no buffer is armed."""
        if self.rx_busy or not self.rx_armed:
            self.rx_no_buffer += 1
            return
        self._rx_store(&frame[0] if frame.shape[0] else NULL, frame.shape[0], crc_ok)

    cdef _rx_store(self, const unsigned char* data, Py_ssize_t n, bint crc_ok):
        if not self.ctrl & _CTRL_RUN or not self.rx_armed:
            self.rx_halted += 1
            return
        if not crc_ok:
            self.rx_crc_errors += 1          # hardware CRC check: dropped, buffer stays armed
            hook = getattr(self.firmware, "on_crc_error", None)
            if hook is not None:
                self.post(hook, n, True)
            return
        if n == 0 or data[0] & _ROUTE_BIT:
            self.rx_misrouted += 1           # route bytes left over: not for this NI
            return
        if n > self.rx_cap:
            self.rx_too_long += 1
            return
        memcpy(&self.sram[self.rx_off], data, n)
        self.rx_armed = False
        self.rx_packets += 1
        self.rx_bytes += n
        on_packet = self._on_packet
        if on_packet is None:
            on_packet = self.firmware.on_packet
        if isinstance(on_packet, NiHandler):
            path = (<NiHandler> on_packet).start_packet(self.rx_off, n)
            if path is not None:
                self._queue(path, True)
                return
        self.post(on_packet, (self.rx_off, n), True)

    # -- statistics --------------------------------------------------------------------

    def stats(self):
        return {
            "running": bool(self.ctrl & _CTRL_RUN),
            "firmware": getattr(self.firmware, "name", None),
            "isr": hex(self.isr), "eimr": hex(self.eimr),
            "interrupts_raised": self.irq_raised,
            "ni_events": self.ni_events, "ni_cycles": self.ni_cycles, "ni_busy_us": self.ni_busy_s * 1e6,
            "fw_faults": self.fw_faults, "last_fault": self.last_fault, "dma_errors": self.dma_errors,
            "host_dma": {"transfers": self.h_transfers, "bytes": self.h_bytes, "busy_us": self.h_busy_s * 1e6},
            "send_dma": {"packets": self.s_packets, "bytes": self.s_bytes, "busy_us": self.s_busy_s * 1e6,
                         "no_link": self.tx_no_link, "too_long_for_transport": self.tx_too_long},
            "recv_dma": {"packets": self.rx_packets, "bytes": self.rx_bytes, "crc_errors": self.rx_crc_errors,
                         "misrouted": self.rx_misrouted, "too_long": self.rx_too_long,
                         "no_buffer": self.rx_no_buffer, "halted_drops": self.rx_halted,
                         "blocked_heads": self.rx_blocked, "armed": self.rx_armed},
            "pio": {"writes": self.pio_writes, "bytes": self.pio_bytes, "reads": self.pio_reads},
            **({"pci_bus": self.bus.stats()} if self.bus is not None else {}),
        }
