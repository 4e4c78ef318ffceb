# The backend adapter between a device model and a real transport (backend.pyx): the
# receive side is a C call chain -- the port takes a frame out of a shared-memory ring
# into its buffer and hands it to the device model by C (`FrameSink.frame_in`, declared with
# the port in _port.pxd and cimported from here too), then runs the node's engine by C, once
# per frame.
from kernelsim._engine cimport Engine
from kernelsim.media._port cimport FramePort, FrameSink
from kernelsim.media._shmring cimport PacketRxRing, ShmRing


cdef class PortTx(FramePort):
    # The transmit side (backend.pyx): send_frame to the transport by C where it is a mesh
    # or an AF_PACKET socket.
    cdef public object transport
    cdef public long long tx_frames, tx_dropped
    cdef object _looked_up_for          # the transport the fields below were looked up for
    cdef int _packet_fd                 # its AF_PACKET socket, when it is a PacketPort; else -1

    cdef int _look_up(self) except -1
    cdef int _send(self, object frame, const unsigned char* p, Py_ssize_t n, double t, double* start,
                   double* end) except -1


cdef class DevicePort(PortTx):
    cdef public Engine settle           # the node's engine: run after each `settle_every` frames, or None
    cdef public Py_ssize_t settle_every # frames a poll takes in before it runs `settle` (1: after each)
    cdef Py_ssize_t _unsettled          # frames taken in since `settle` last ran
    cdef public object divert           # frames go to this callable instead (a process drives the card)
    cdef public object faults
    cdef public object faults_elsewhere
    cdef bytearray _buf
    cdef unsigned char[::1] _mv         # the buffer, typed
    cdef object _view                   # and as a Python memoryview (the Python-level paths)
    cdef public long long rx_frames
    cdef list _held                     # (due wall time, sequence, frame, crc_ok): frames held back
    cdef long long _held_seq
    cdef ShmRing _rx_ring               # its receive ring, when frames come from one; else None
    cdef PacketRxRing _packet_ring      # its AF_PACKET socket's receive ring, if it has one; else None

    cpdef int poll(self) except -1
    cdef int _poll_packet(self) except -1
    cdef int _frame_in(self, Py_ssize_t k) except -1
    cdef int _settle_rest(self) except -1
