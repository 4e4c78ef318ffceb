# The SP AM endpoint's state: declarations. The endpoint is one chain of cdef classes,
# one per mechanism -- Window (window.pyx) < KeepAlive (keepalive.pyx) < Bulk (bulk.pyx)
# < AmEndpoint (endpoint.pyx) -- and every field any of them touches per packet is
# declared here, on the first, so each mechanism's code reads it as a C field.
from kernelsim._engine cimport Engine
from kernelsim._node cimport Costs, OpenFile
from kernelsim._physmem cimport PhysMem
from kernelsim._waits cimport SpinnerQueue, WaitQueue, Waiter
from nic_drivers.tb2._model cimport Tb2Adapter
from nic_drivers.tb2.fifos cimport HostFifos, UserFifos
from protocols.am._wire cimport Header, Msg, Peer, RxChannel, TxChannel
from kernelsim._path cimport Path
from protocols.am._codes cimport N_STATS


cdef class Events(SpinnerQueue):
    # The endpoint's wait queue (window.pyx): a spinner is a program's am_poll loop.
    pass


cdef class Window(OpenFile):
    # endpoint.pyx: the process, its card, its costs
    cdef public object service, proc
    cdef public UserFifos uf
    cdef public Tb2Adapter adapter
    cdef public PhysMem mem
    cdef public Engine engine
    cdef public Costs costs
    cdef public bint closed, closing, checksum
    cdef public int fd, pkt_data, _handler_depth
    cdef public double c_poll_own, c_dispatch, c_hdr, c_word, c_post, c_request, c_bulk, full_poll
    cdef public double c_sum_byte, c_sum_packet
    cdef public list handlers, segments, _starts, _ends
    cdef public Header hdr
    cdef public WaitQueue events
    cdef public long long polls
    cdef public object pending_errors          # collections.deque of OSError
    cdef long long counts[N_STATS]             # the statistics (endpoint.STAT_KEYS), as C counters
    cdef public dict malformed
    # window.pyx
    cdef public int req_window, rep_window, ack_div, tx_need
    cdef public dict peers                     # node id -> Peer, made on first contact
    cdef Peer work_head, work_tail             # peers with something to send, linked by Peer.next_work
    # keepalive.pyx
    cdef public bint wall_clock
    cdef public double _opened_at, _ka_due
    cdef public long long keepalive_polls, max_keepalives, linger_polls, heard, _timer
    cdef public dict settling                  # peers with unacked messages (an ordered set)
    cdef public set gone
    cdef object _on_timer
    # bulk.pyx
    cdef public int chunk_packets, chunk_bytes

    # C callers call the cpdef methods of this chain class-qualified (``Window.peer(self, d)``,
    # ``AmEndpoint.ready(ep)``): an endpoint has a __dict__ (an open file's class has Python
    # subclasses), so a plain call would look the name up in it first, for an override, and
    # nothing overrides them.
    cpdef Peer peer(self, object dest)
    cdef int _kick(self, Peer peer) except -1
    cdef Peer _next_work(self)
    cdef int _work_first(self, Peer peer) except -1
    cdef object blocked(self, str why)
    cdef int _acked(self, Peer peer, TxChannel ch, int cum) except -1
    cpdef bint in_segments(self, object lo, object hi) except -1
    cdef bint in_segments_c(self, long long lo, long long hi) except -1
    # implemented further down the chain (keepalive.pyx, bulk.pyx), called from window.pyx
    cdef int _settled(self, Peer peer) except -1
    cdef int _unsettled(self, Peer peer) except -1
    cdef int _keepalive_check(self) except -1
    cdef int _keepalive_due(self, Peer peer) except -1
    cdef int _finish(self, object x) except -1
    cdef object _local_range(self, object buf, object nbytes)
    cdef int _run_handler(self, Peer peer, object fn, bint request, tuple args) except -1


cdef class Pump(Path):
    # Sends what one peer is owed (window.pyx): a C state machine a poll steps.
    cdef Window ep
    cdef Peer peer
    cdef int phase, ss, what
    cdef TxChannel ch
    cdef Msg m                       # the message being sent (None: a control packet)
    cdef bytes hdr, data
    cdef double pre, post
    cdef bint first
    cdef int idx, units
    cdef object gen                  # a bulk chunk's send (Window._send_chunk)

    cdef int start(self, Window ep, Peer peer) except -1
    cdef int _ctl(self, int kindflags, int seq, unsigned int arg, unsigned int addr) except -1
    cdef int _msg(self, TxChannel ch, Msg m) except -1
    cdef int _choose(self) except -1
    cdef int _write(self, double* cost) except -1
    cdef int _handed_over(self) except -1
    cdef int _sent(self) except -1
