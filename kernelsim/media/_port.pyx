# cython: language_level=3, annotation_typing=False
"""The transmit side of a medium port as a C call (`FramePort.send_frame`).

A device model transmits through a *port*: ``transmit(frame, t) -> (start, end)`` at the
Python level. Every frame of a ping-pong crosses one, so a port that is a `FramePort`
is also reached by a C call with no tuple made; a port written in Python that only has
``transmit`` is reached through the default below.
"""


cdef class FramePort(EventTarget):
    cdef int send_frame(self, object frame, double t, double* start, double* end) except -1:
        s, e = self.transmit(frame, t)
        start[0] = s
        end[0] = e
        return 0
