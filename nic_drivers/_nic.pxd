# What the four NIC models share (declared here; `_nic.pyx` implements it): the
# interrupt line, the bus-master DMA timing and the counters of both.
cimport cython
from kernelsim._engine cimport Engine, EventTarget
from kernelsim.media._port cimport FrameSink
from kernelsim._netdev cimport NetDevice
from kernelsim._node cimport Costs
from kernelsim._physmem cimport PhysMem


cdef class NicModel(FrameSink):
    cdef public object driver           # the kernel netdev bound to this card, or None
    cdef object _irq_sink               # callable(bool): the interrupt line (`irq_sink`)
    cdef NetDevice _irq_dev             # when that is a netdev's set_irq: the netdev, called by C
    cdef Engine engine
    cdef PhysMem mem                    # host physical memory: reached only by DMA
    cdef bint _line                     # the level the card drives on its interrupt line
    # bus-master DMA timing (profile): a set-up per transfer, a re-arbitration every
    # `burst_bytes` (0: one burst, however long), the sustained byte rate
    cdef readonly double dma_setup, burst_overhead, dma_rate
    cdef readonly Py_ssize_t burst_bytes
    cdef readonly long long dma_bytes, irq_raised

    cdef _init_nic(self, Engine engine, PhysMem mem, profile, bint bursts)
    cdef _set_line(self, bint line, bint last=*)
    cdef double dma_span(self, Py_ssize_t nbytes) noexcept
    cpdef double dma_time(self, Py_ssize_t nbytes)


cdef class NicDriver(NetDevice):
    # The kernel side of one card: what every driver's per-frame paths read, typed.
    cdef public object dev              # the card (a NicModel)
    cdef public Costs c                 # the node's cost table
    cdef readonly PhysMem host_mem      # the node's physical memory (rings, buffers)
    cdef public double c_desc, c_isr    # CPU time per descriptor / per interrupt
    cdef public Py_ssize_t cur_tx, dirty_tx, cur_rx   # ring producer / consumer counts
    # The transmit ring of a driver that sends from host buffers: `ntx` of them, `tx_bufs`
    # their physical addresses, used in turn as `cur_tx` counts frames handed to the card.
    cdef public Py_ssize_t ntx
    cdef public list tx_bufs

    cdef Py_ssize_t ring_reserve(self) except -1


@cython.cdivision(True)
cdef inline double dma_span_of(NicModel m, Py_ssize_t nbytes) noexcept:
    """`NicModel.dma_span` in the caller (a card's per-frame DMA, several per frame)."""
    cdef Py_ssize_t bursts = 1
    if m.burst_bytes > 0 and nbytes > m.burst_bytes:
        bursts = (nbytes + m.burst_bytes - 1) // m.burst_bytes
    return m.dma_setup + (bursts - 1) * m.burst_overhead + nbytes / m.dma_rate


cdef inline double nic_dma(NicModel m, Py_ssize_t nbytes) noexcept:
    """`NicModel.dma_time` in the caller: the transfer's time, its bytes counted."""
    m.dma_bytes += nbytes
    return dma_span_of(m, nbytes)
