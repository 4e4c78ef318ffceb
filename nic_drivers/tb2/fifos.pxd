# The host's side of the TB2 FIFOs: declarations (the implementation is in fifos.pyx).
from kernelsim._node cimport Costs, OpenFile
from kernelsim._physmem cimport PhysMem
from kernelsim._waits cimport WaitQueue
from nic_drivers.tb2._model cimport Tb2Adapter


cdef class HostFifos:
    cdef public object node, owner
    cdef public PhysMem mem
    cdef public Tb2Adapter adapter
    cdef public int pop_every, line, send_count, recv_count
    cdef public double mc_read, mc_write, c_flush, c_sync, c_miss
    cdef public Py_ssize_t send_base, recv_base
    cdef public unsigned int tx_next          # packets written into the send FIFO (mod 2^32)
    cdef public unsigned int tx_done          # the adapter's transmit-done counter, as last read
    cdef public long long tx_refreshes, rx_consumed, rx_popped
    cdef public int rx_head
    cdef public bint attached, draining

    cpdef unsigned int outstanding(self)
    cpdef int free_entries(self)
    cpdef refresh_tx_done(self)
    cpdef Py_ssize_t send_entry(self, int k=*)
    cpdef Py_ssize_t recv_entry(self, int i)
    cpdef double flush_cost(self, Py_ssize_t nbytes)
    cpdef consume(self, Py_ssize_t addr)
    cpdef bint pop_due(self)
    cpdef pop(self)


cdef class Packet:
    cdef public object src, data, route, user
    cdef public int proto       # the 16-bit protocol id: tested by C compare per packet, never boxed


cdef class UserFifos(OpenFile):
    cdef public object netdev, proc
    cdef public Tb2Adapter adapter
    cdef public HostFifos fifos
    cdef public Costs costs
    cdef public double c_send, c_recv, c_poll
    cdef public double rx_cost                 # the host's cost of taking the packet `take` returned
    cdef public WaitQueue arrivals, tx_space
    cdef public int fd
    cdef public long long sent, received, polls, empty_polls
    cdef public bint closed

    # C calls only (cdef: an open file's class has Python subclasses, which makes every call
    # of a cpdef method look its name up in the instance first, for an override)
    cdef int write_entry(self, Py_ssize_t addr, unsigned int dest, unsigned int route, unsigned int proto,
                         bytes user, bytes data) except -1
    cdef double look(self, object spun_since) except? -1.0
    cdef object take(self)
