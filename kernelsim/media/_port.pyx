# cython: language_level=3, annotation_typing=False
"""A medium port as C calls: its transmit side (`FramePort.send_frame`) and the device
model it delivers to (`FrameSink.frame_in`).

A device model transmits through a *port*: ``transmit(frame, t) -> (start, end)`` at the
Python level. Every frame of a ping-pong crosses one, so a port that is a `FramePort`
is also reached by a C call with no tuple made; a port written in Python that only has
``transmit`` is reached through the default below.

Every port delivers received frames to one device model, its ``device``; a model that is
a `FrameSink` takes them by C call (``frame_in``), so the port keeps it typed as well.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize

__all__ = ["FramePort", "FrameSink"]


cdef class FrameSink(EventTarget):
    """A device model behind a port: ``frame_in`` is its receive entry by C call.
    A model overrides it to take the frame without a Python-level call; by default it
    calls the model's ``rx_frame(frame, crc_ok)``."""

    cdef int frame_in(self, const unsigned char[::1] frame, bint crc_ok, bint last) except -1:
        self.rx_frame(frame, crc_ok)
        return 0

    cdef int rx_room(self) except -1:
        return 0


cdef class FramePort(EventTarget):
    cdef int send_frame(self, object frame, double t, double* start, double* end) except -1:
        s, e = self.transmit(frame, t)
        start[0] = s
        end[0] = e
        return 0

    cdef int send_raw(self, const unsigned char* p, Py_ssize_t n, double t, double* start,
                      double* end) except -1:
        return self.send_frame(PyBytes_FromStringAndSize(<const char*> p, n), t, start, end)

    @property
    def device(self):
        """The device model this port delivers received frames to (None: none yet)."""
        return self._device

    @device.setter
    def device(self, device):
        self._device = device
        self._sink = device if isinstance(device, FrameSink) else None
