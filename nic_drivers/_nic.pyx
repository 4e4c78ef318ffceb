# cython: language_level=3, cdivision=True
"""What every NIC here shares, once: the hardware side's `NicModel`, the kernel side's `NicDriver`.

A device model (the 21140, the PCA-200E, the LANai board, the TB2) is a `NicModel`:
it drives one interrupt line and masters host memory by DMA. The line is a level the
card computes from its own status and mask registers; `_set_line` passes a change of
level -- and only a change -- to the sink the driver installed (its `set_irq`, then
called by C: an interrupt's raise and lower are per message), and counts the rising
edges. A DMA transfer costs a set-up, a re-arbitration for every
burst after the first, and its bytes at the sustained rate (HW-21140, HW-ATM,
HW-MYRI, SP-A16); the four cards differ only in their burst length and in the bus the
profile describes. Everything else -- register files, rings, firmware -- is the
model's own.

A driver (`NicDriver`) binds one such card: it keeps the node's costs, the per-
descriptor and per-interrupt CPU costs from the profile, the transmit/receive ring
counters, the transmit ring's buffers (`ring_reserve`, the next free one by C call), and
wires the card's line to its IRQ.
"""
import errno

from kernelsim._node import WouldBlock

from kernelsim._engine cimport Engine, EventTarget
from kernelsim.media._port cimport FrameSink
from kernelsim._physmem cimport PhysMem
from kernelsim._irq cimport drive_line

__all__ = ["NicModel", "NicDriver"]


cdef class NicModel(FrameSink):
    """The part of a NIC model every card has: its interrupt line and its DMA engine's timing
    (and, as a `FrameSink`, a receive entry a real transport's port calls by C)."""

    cdef _init_nic(self, Engine engine, PhysMem mem, profile, bint bursts):
        """Bind to the node and read the DMA timing; `bursts`: the card re-arbitrates
        (pci.burst_overhead_s applies; the burst length is the model's to set)."""
        self.engine = engine
        self.mem = mem
        self.driver = None
        self._irq_sink = None
        self._irq_dev = None
        self._line = False
        self.dma_setup = profile["pci.dma_setup_s"]
        self.dma_rate = profile["pci.dma_rate_Bps"]
        self.burst_overhead = profile["pci.burst_overhead_s"] if bursts else 0.0
        self.burst_bytes = 0
        if not self.dma_rate > 0:
            raise OSError(errno.EINVAL, "pci.dma_rate_Bps must be positive")

    @property
    def irq_sink(self):
        """What the card's interrupt line drives: a callable(level), or None."""
        return self._irq_sink

    @irq_sink.setter
    def irq_sink(self, sink):
        owner = getattr(sink, "__self__", None)
        self._irq_sink = sink
        self._irq_dev = owner if isinstance(owner, NetDevice) and getattr(sink, "__name__", "") == "set_irq" else None

    cdef _set_line(self, bint line, bint last=False):
        """Drive the card's interrupt line. ``last=True``: the card's own engine event does
        nothing more at this instant (see IrqController.set_level)."""
        cdef NetDevice dev = self._irq_dev
        if line != self._line:
            self._line = line
            if line:
                self.irq_raised += 1
            if dev is not None:
                # `dev.drive_irq` without its method call (a raise and a lower per message).
                if dev.irq_line >= 0:
                    drive_line(dev._irq, dev.irq_line, line, last)
            elif self._irq_sink is not None:
                self._irq_sink(line)

    cdef double dma_span(self, Py_ssize_t nbytes) noexcept:
        return dma_span_of(self, nbytes)

    cpdef double dma_time(self, Py_ssize_t nbytes):
        """One DMA transfer of `nbytes`: its time on the bus (the bytes are counted)."""
        return nic_dma(self, nbytes)


cdef class NicDriver(NetDevice):
    """The kernel side of one card: its costs and its interrupt wiring.

    `desc_cycles`/`isr_cycles` name the profile keys of the driver's CPU cost per
    descriptor and per interrupt (None: the driver has no such cost).
    """

    def __init__(self, node, dev, name, hwaddr, *, desc_cycles="drv.desc_cycles",
                 isr_cycles="drv.isr_cycles"):
        super().__init__(node, name, hwaddr)
        self.dev = dev
        self.c = node.costs
        self.host_mem = node.mem
        self.c_desc = self.cycles(desc_cycles) if desc_cycles else 0.0
        self.c_isr = self.cycles(isr_cycles) if isr_cycles else 0.0
        self.cur_tx = self.dirty_tx = 0         # ring producer / consumer counts (ring_reserve)
        self.cur_rx = 0

    cdef Py_ssize_t ring_reserve(self) except -1:
        """The next free buffer of the transmit ring (`ntx` buffers at `tx_bufs`), or
        WouldBlock on `tx_space` when every one is still the card's. A ring driver's
        `tx_buffer`."""
        if self.cur_tx - self.dirty_tx >= self.ntx:
            self.tx_busy += 1
            raise WouldBlock(self.tx_space, f"{self.name}: transmit ring full")
        return self.tx_bufs[self.cur_tx % self.ntx]

    def cycles(self, key: str) -> float:
        """CPU seconds of the profile's cycle count `key` on this node."""
        return self.c.cycles(self.node.profile[key])

    def attach_irq(self) -> None:
        """Take a free IRQ line and let the card drive it (open, after the rings exist)."""
        self.take_irq()
        # The Python-level bound method (`self.set_irq` in a cdef class would convert the
        # C method of the base type to a callable through a cast gcc flags as incompatible);
        # the card recognises it and calls set_irq by C.
        self.dev.irq_sink = getattr(self, "set_irq")

    def detach_irq(self) -> None:
        """The card's line goes nowhere (stop, before the resources go back)."""
        self.dev.irq_sink = None
