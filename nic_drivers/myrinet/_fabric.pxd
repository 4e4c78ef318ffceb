# The packet-moving core of the Myrinet network (see _fabric.pyx): channels, packets in
# flight, and the wire that moves heads from switch to switch on the event engine.

from kernelsim._engine cimport Engine, EventTarget
from nic_drivers.myrinet._model cimport LanaiNI, Medium


cdef class Channel:
    cdef readonly str name
    cdef readonly bint to_ni             # the far end is an NI (else the switch `switch`)
    cdef readonly object target          # the LANai board, or the switch index
    cdef readonly int switch             # -1 toward an NI
    cdef bint busy
    cdef double free_at                  # >= 0: the holder's tail is known to pass then
    cdef bint release_posted             # a release event is pending (someone waits)
    cdef object waiters                  # deque of _Packet, in the order heads asked
    cdef double t_acq
    cdef readonly long long packets, bytes, waits
    cdef readonly double busy_s, wait_s

    cdef void settle(self, double now)


cdef class Packet:
    cdef bytes data
    cdef Py_ssize_t pos                  # the next route byte
    cdef object src                      # the sending board
    cdef object token
    cdef list chans                      # every channel held, in path order
    cdef Channel want                    # the channel the head is on or asks for
    cdef double dur                      # the whole packet's time on a link
    cdef double t_ask
    cdef Py_ssize_t nbytes


cdef class Wire(Medium):
    cdef readonly Engine engine
    cdef public object faults
    cdef public double byte_s, prop_s, hop_s
    cdef public int crc_bytes
    cdef public list switch_out          # switch -> port -> Channel or None
    cdef readonly dict inject_ch         # nid -> Channel from that node's NI (`cable_in` adds)
    cdef public long long packets, delivered, misrouted, lost
    cdef public double ni_wait_s

    cdef int inject_packet(self, object ni, bytes data, object token, bint last) except -1
    cdef int on_event(self, int what, object arg) except -1
    cdef Channel _in(self, LanaiNI ni)
    cdef _take(self, Channel ch, Packet p)
    cdef _hop(self, Packet p, bint last)
    cdef _ask(self, Packet p, bint last)
    cdef _forward(self, Packet p, bint last)
    cdef _free_at(self, Channel ch, double t)
    cdef _release(self, Channel ch, bint last)
    cdef _at_ni(self, Packet p, bint last)
    cdef _stream(self, Packet p, bint last)
    cdef _sender_done(self, Packet p, bint last)
    cdef _tail(self, Packet p)
    cdef _misroute(self, Packet p, double start)
