# The PCI bus of one node and the host bridge's posted-write queue (see _pcibus.pyx).

cdef enum:
    PWQ_MAX = 64              # deepest posted-write queue the model holds (lines)

cdef class PciBus:
    # geometry and costs (seconds)
    cdef readonly double clk, burst_s, retry_s, post_s, read_s, read_bus_s, lt_s, dma_setup_s, dma_rate
    cdef readonly int bus_bytes, line_bytes, pwq_lines, burst_lines
    cdef object _params
    # the bridge's posted-write queue: drain times of the lines in it, oldest first
    cdef double _drain[PWQ_MAX]
    cdef int _qh, _qn
    cdef double _last_drain            # when the bridge's newest line is (or was) on the target
    cdef Py_ssize_t _next_addr         # address right after that line (merging needs contiguity)
    cdef int _chain                    # lines in the bridge's current PCI burst
    cdef readonly bint collapsed       # a CPU write was retried: every line goes alone until the queue empties
    # the bus timeline
    cdef readonly double free_at       # the bus is reserved up to here
    cdef readonly double drained_at    # after post(): when the last posted byte reached the target
    cdef readonly double sampled_at    # after read(): when the read's data phase took the value
    # the bus-master DMA engine (one per bus in this model: the NI's host DMA engine)
    cdef readonly bint dma_busy
    cdef readonly double dma_end       # when the running DMA completes (moves when it is preempted)
    cdef double _dma_tenure            # when the DMA (re)gained the bus: its latency timer starts here
    # statistics
    cdef readonly long long lines, bursts, retries, collapsed_lines, reads, dma_transfers, dma_preempted
    cdef readonly double pio_bus_s, read_bus_total_s, dma_bus_s, cpu_stall_s, read_stall_s, dma_wait_s

    cpdef double post(self, double now, Py_ssize_t addr, Py_ssize_t n)
    cpdef double read(self, double now)
    cpdef double dma_start(self, double now, Py_ssize_t n)
    cpdef dma_finish(self)
    cdef double _grant(self, double t, double dur)
    cdef void _retire(self, double t)
