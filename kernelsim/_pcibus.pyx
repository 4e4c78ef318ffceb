# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A node's PCI bus as one shared resource, and the host bridge's posted-write queue.

Why a bus model: two effects the HPVM paper reports live on the PCI bus, not in any
one device (FM-C06, FM-C13, FM-A15..A17, FM-B20..B23):

* a host that polls a register of its network interface across PCI takes the bus for
  every poll, and the NI's DMA engine -- which wants the same bus to bring packets
  into host memory -- has to give it up: polls add bus "turns" and slow the DMAs
  down. Polling a word in host memory instead costs the bus nothing;
* the CPU's programmed-I/O writes to the NI do not go to the bus directly: the host
  bridge posts them in a small queue and drains the queue onto the bus. How the
  bridge behaves when that queue fills decides whether PIO throughput keeps rising
  with message length (the Kayak's 440LX) or collapses past it (the LPR's 440BX,
  whose queue the paper's "working theory" puts at 5 cache lines, FM-A15).

What is modeled:

* **One timeline.** The bus carries one transaction at a time: the bridge's write
  bursts, the CPU's reads, the bus-master DMA engine's transfers. Each is granted in
  the order it asks, except that a master waiting behind a running DMA gets the bus
  once that DMA's *latency timer* has run out: the DMA is cut, the other transaction
  goes, and the DMA pays a new arbitration and address phase (``pci.dma_setup_s``)
  to resume -- a bus turn. Its completion moves later by both.
* **Posted writes.** The CPU writes a line (the write-combining buffer's 32 bytes)
  into the bridge's queue in ``fsb.line_clocks`` front-side-bus clocks and goes on;
  the bridge drains the queue onto PCI. A line that follows the previous one in
  address and reaches the queue before that one has left continues the same PCI
  burst (data phases only), up to ``chipset.burst_lines`` lines per burst; any other
  line starts a burst (``pci.pio_burst_clocks`` of address phase, bridge latency and
  turnaround). When the CPU writes into a full queue, one of two things happens:
  ``chipset.retry_clocks = 0`` -- the bridge holds the CPU with wait states until a
  line has left (the 440LX, robust); ``> 0`` -- the bridge retries the CPU's write and
  breaks its burst, and until the queue has run empty every line goes as a burst of
  its own and loses that many PCI clocks more (the 440BX's collapse).
* **Reads** are not posted: a CPU read waits until every posted write has reached
  the target (PCI ordering), takes the bus for ``pci.read_clocks``, and the CPU sees
  the value after the rest of ``pci.read_s`` (the front-side bus and the bridge).

Every call takes the time it happens and returns when its effect is done; the model
keeps no events of its own (the device that owns a DMA asks `dma_end` again when its
completion event fires, since a later read may have pushed it). A transaction asked
for while later ones are already reserved goes after them (first come, first served):
a posted write's drain times are fixed when the CPU posts it.
"""
from libc.math cimport ceil

__all__ = ["PciBus", "PCI_BUS_KEYS"]

# The profile keys a machine with a modeled PCI bus has (besides pci.* of its NIC).
PCI_BUS_KEYS = ("pci.clock_hz", "pci.bus_bytes", "pci.wc_burst_bytes", "pci.pio_burst_clocks", "pci.read_s",
                "pci.read_clocks", "pci.latency_timer_clocks", "pci.dma_setup_s", "pci.dma_rate_Bps",
                "chipset.pwq_lines", "chipset.burst_lines", "chipset.retry_clocks", "fsb.hz", "fsb.line_clocks")


cdef class PciBus:
    """The PCI bus of one node with its host bridge (see the module essay)."""

    def __cinit__(self, profile):
        cdef dict p = {k: profile[k] for k in PCI_BUS_KEYS}
        self._params = p
        self.clk = 1.0 / p["pci.clock_hz"]
        self.bus_bytes = int(p["pci.bus_bytes"])
        self.line_bytes = int(p["pci.wc_burst_bytes"])
        self.pwq_lines = int(p["chipset.pwq_lines"])
        self.burst_lines = int(p["chipset.burst_lines"])
        if self.bus_bytes < 1 or self.line_bytes < 1 or not 1 <= self.pwq_lines <= PWQ_MAX or self.burst_lines < 1:
            raise ValueError(f"PCI bus: bus_bytes, wc_burst_bytes and burst_lines must be positive and "
                             f"chipset.pwq_lines 1..{PWQ_MAX}")
        self.burst_s = p["pci.pio_burst_clocks"] * self.clk
        self.retry_s = p["chipset.retry_clocks"] * self.clk
        self.post_s = p["fsb.line_clocks"] / p["fsb.hz"]
        self.read_s = p["pci.read_s"]
        self.read_bus_s = p["pci.read_clocks"] * self.clk
        if self.read_bus_s > self.read_s:
            raise ValueError("PCI bus: pci.read_clocks cannot take longer than the whole read (pci.read_s)")
        self.lt_s = p["pci.latency_timer_clocks"] * self.clk
        self.dma_setup_s = p["pci.dma_setup_s"]
        self.dma_rate = p["pci.dma_rate_Bps"]
        self._last_drain = -1.0
        self._next_addr = -1

    def idle_copy(self):
        """A bus like this one with nothing on it (for a start-up micro-benchmark)."""
        return PciBus(self._params)

    # -- the bridge's posted-write queue -----------------------------------------------------

    cdef void _retire(self, double t):
        """Lines that have reached the target by `t` leave the queue."""
        while self._qn and self._drain[self._qh] <= t:
            self._qh = (self._qh + 1) % PWQ_MAX
            self._qn -= 1
        if self._qn == 0:
            self.collapsed = False

    cdef double _grant(self, double t, double dur):
        """When a transaction of `dur` seconds, ready at `t`, gets the bus (and reserve it)."""
        cdef double g, timer
        if self.dma_busy and t < self.dma_end and self.free_at <= self.dma_end:
            timer = self._dma_tenure + self.lt_s
            g = t if t > timer else timer
            if g < self.dma_end:
                # The DMA's latency timer has run out and we are waiting: it gives the bus up.
                self.dma_preempted += 1
                self.dma_end += dur + self.dma_setup_s
                self._dma_tenure = g + dur + self.dma_setup_s
                self.free_at = self.dma_end
                return g
        g = t if t > self.free_at else self.free_at
        self.free_at = g + dur
        return g

    cpdef double post(self, double now, Py_ssize_t addr, Py_ssize_t n):
        """The CPU writes `n` bytes at bus address `addr` by PIO, starting at `now`.

        Returns when the CPU has handed the last line to the bridge (it goes on then);
        `drained_at` tells when the last byte reaches the target.
        """
        cdef Py_ssize_t a = addr, end = addr + n, line_end
        cdef double t = now, p, d, start, dur, data
        if n <= 0:
            self.drained_at = now if now > self._last_drain else self._last_drain
            return now
        while a < end:
            line_end = (a // self.line_bytes + 1) * self.line_bytes
            if line_end > end:
                line_end = end
            self._retire(t)
            if self._qn >= self.pwq_lines:
                if self.retry_s > 0.0:
                    self.retries += 1
                    self.collapsed = True
                t = self._drain[self._qh]             # held (or retried) until the oldest line leaves
                self._retire(t)
            p = t
            data = ceil(<double> (line_end - a) / self.bus_bytes) * self.clk
            if (not self.collapsed and self._chain < self.burst_lines and a == self._next_addr
                    and p < self._last_drain and self.free_at == self._last_drain):
                d = self._last_drain + data           # the burst goes on: data phases only
                self._chain += 1
                self.free_at = d
                self.pio_bus_s += data
            else:
                dur = self.burst_s + data
                if self.collapsed:
                    dur += self.retry_s
                    self.collapsed_lines += 1
                start = self._grant(p, dur)
                d = start + dur
                self._chain = 1
                self.bursts += 1
                self.pio_bus_s += dur
            self._drain[(self._qh + self._qn) % PWQ_MAX] = d
            self._qn += 1
            self._last_drain = d
            self._next_addr = line_end
            self.lines += 1
            a = line_end
            t = p + self.post_s
        self.cpu_stall_s += t - now
        self.drained_at = self._last_drain
        return t

    # -- CPU reads across the bus ------------------------------------------------------------

    cpdef double read(self, double now):
        """A CPU read of a device register or memory across PCI, issued at `now`.

        Returns when the CPU has the value; `sampled_at` is when the target gave it.
        """
        cdef double t = now if now > self._last_drain else self._last_drain    # posted writes first
        cdef double g = self._grant(t, self.read_bus_s)
        cdef double done
        self.sampled_at = g + self.read_bus_s
        done = self.sampled_at + (self.read_s - self.read_bus_s)
        self.reads += 1
        self.read_bus_total_s += self.read_bus_s
        self.read_stall_s += done - now
        return done

    # -- the bus-master DMA engine -----------------------------------------------------------

    cpdef double dma_start(self, double now, Py_ssize_t n):
        """A DMA of `n` bytes asks for the bus at `now`: when it will be done (`dma_end`
        moves later if other transactions cut in)."""
        cdef double start, dur
        if self.dma_busy:
            raise RuntimeError("PCI bus: one DMA at a time per bus master")
        dur = self.dma_setup_s + n / self.dma_rate
        start = now if now > self.free_at else self.free_at
        self.dma_busy = True
        self._dma_tenure = start
        self.dma_end = start + dur
        self.free_at = self.dma_end
        self.dma_transfers += 1
        self.dma_wait_s += start - now
        self.dma_bus_s += dur
        return self.dma_end

    cpdef dma_finish(self):
        self.dma_busy = False

    def stats(self):
        return {
            "pio": {"lines": self.lines, "bursts": self.bursts, "retries": self.retries,
                    "collapsed_lines": self.collapsed_lines, "bus_us": self.pio_bus_s * 1e6,
                    "cpu_us": self.cpu_stall_s * 1e6},
            "reads": {"count": self.reads, "bus_us": self.read_bus_total_s * 1e6, "cpu_us": self.read_stall_s * 1e6},
            "dma": {"transfers": self.dma_transfers, "bus_us": self.dma_bus_s * 1e6,
                    "wait_us": self.dma_wait_s * 1e6, "preempted": self.dma_preempted},
        }
