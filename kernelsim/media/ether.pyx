# cython: language_level=3, annotation_typing=False
"""Modeled Fast Ethernet: a full-duplex cable between two NICs (back to back).

Per frame on the wire (HW-ETH): preamble and start delimiter,
the frame padded to the 64-byte minimum, the FCS, then the inter-frame gap before the
next frame may start. The last bit reaches the far end one propagation delay after it
left. Each direction is its own wire (full duplex), so no collisions.

Every frame crosses a port, so ports are Cython: typed timing, the arrival a typed
engine event on the far port (the frame its argument, whether its CRC checks its `what`:
no tuple per frame), and the frame handed to the device model by a C call
(`FrameSink.frame_in`, the receive entry a real transport's port uses too).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport memcpy
from kernelsim._engine cimport Engine
from kernelsim.media._port cimport FramePort, FrameSink
from kernelsim.media.faults import FaultInjector
from kernelsim.media.faults cimport faults_active

__all__ = ["EtherLink", "EtherPort"]


cdef class EtherPort(FramePort):
    """One end of the cable: what a NIC's transmitter drives."""

    cdef public EtherLink link
    cdef public EtherPort peer
    cdef bytearray _buf                  # a frame handed to _sink is copied here: its bytes
    cdef unsigned char[::1] _mv          # as a typed view cost no buffer request per frame
    cdef public double free_at
    cdef public long long frames, bytes
    cdef public double busy_s

    def __init__(self, EtherLink link):
        self.link = link
        self.peer = None
        self.device = None
        self.free_at = 0.0
        self.frames = 0
        self.bytes = 0
        self.busy_s = 0.0
        self._buf = bytearray(2048)      # a descriptor's longest buffer (11 bits); grows if need be
        self._mv = self._buf

    cpdef tuple transmit(self, frame, double t):
        """Put `frame` (without FCS) on the wire no earlier than `t`; return (start, end)."""
        cdef double start, end
        self.send_frame(frame, t, &start, &end)
        return start, end

    cdef int send_frame(self, object frame, double t, double* start_out, double* end_out) except -1:
        """`transmit` as a C call (`FramePort`): the device model's per-frame path."""
        cdef EtherLink link = self.link
        cdef Py_ssize_t n = len(frame)
        cdef double on_wire = link.preamble + max(n + link.fcs, link.min_frame)
        cdef double start = t if t > self.free_at else self.free_at
        cdef double end = start + on_wire * link.byte_s
        cdef double arrive
        self.free_at = end + link.ifg * link.byte_s
        self.frames += 1
        self.bytes += n
        self.busy_s += end - start
        arrive = end + link.prop_s
        if faults_active(link.faults):
            for data, delay, ok in link.faults.apply(frame):
                link.engine.post(arrive + delay, self.peer, 1 if ok else 0, data)
        else:
            link.engine.post(arrive, self.peer, 1, frame)
        start_out[0] = start
        end_out[0] = end
        return 0

    cdef int on_event(self, int what, object frame) except -1:
        """The frame's last bit is here; `what`: 1 if its CRC checks."""
        cdef Py_ssize_t n
        if self._sink is not None:
            if type(frame) is bytes:
                # The sink takes a typed view; one of the port's buffer, not a new one of
                # the frame (it copies what it keeps, as from a real transport's port).
                n = PyBytes_GET_SIZE(frame)
                if n > self._mv.shape[0]:
                    self._buf = bytearray(n)
                    self._mv = self._buf
                memcpy(&self._mv[0], PyBytes_AS_STRING(frame), n)
                self._sink.frame_in(self._mv[:n], what != 0, True)   # the event's last thing
            else:
                self._sink.frame_in(frame, what != 0, True)
        elif self._device is not None:
            self._device.rx_frame(frame, what != 0)
        return 0

    def stats(self) -> dict:
        return {"frames": self.frames, "bytes": self.bytes, "busy_us": self.busy_s * 1e6}


cdef class EtherLink:
    cdef public Engine engine
    cdef public object faults
    cdef public double byte_s, preamble, ifg, min_frame, fcs, prop_s
    cdef public tuple ends

    def __init__(self, Engine engine, profile, rng=None):
        self.engine = engine
        self.faults = FaultInjector(profile, rng)
        self.byte_s = 8.0 / profile["link.rate_bps"]
        self.preamble = profile["link.preamble_bytes"]
        self.ifg = profile["link.ifg_bytes"]
        self.min_frame = profile["link.min_frame_bytes"]
        self.fcs = profile["link.fcs_bytes"]
        self.prop_s = profile["link.propagation_s"]
        a, b = EtherPort(self), EtherPort(self)
        a.peer, b.peer = b, a
        self.ends = (a, b)

    def attach(self, side: int, device) -> EtherPort:
        port = self.ends[side]
        port.device = device
        device.port = port
        return port

    def stats(self) -> dict:
        return {"a_to_b": self.ends[0].stats(), "b_to_a": self.ends[1].stats(), "faults": self.faults.stats()}
