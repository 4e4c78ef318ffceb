from kernelsim._engine cimport EventTarget


cdef class FrameSink(EventTarget):
    # A device model a port feeds: frame_in(frame, crc_ok, last) is its receive entry by C
    # call (the default calls the model's Python-level rx_frame, so any model works behind a
    # port). ``last``: the caller is an engine event that does nothing more at this instant,
    # so the model may run its own next event at once (`Engine.advance`).
    cdef int frame_in(self, const unsigned char[::1] frame, bint crc_ok, bint last) except -1
    # 1 if it can take another frame now with no host action (its next receive buffer is
    # free): a real port may take the next one in before it runs the engine. Default 0.
    cdef int rx_room(self) except -1


cdef class FramePort(EventTarget):
    # What a device model's transmitter drives -- a modeled medium's end (`EtherPort`) or
    # the adapter to a real transport (`DevicePort`) -- as a C call: put `frame` (bytes,
    # padded as the device sends it) on the medium no earlier than `t`; the medium's
    # (start, end) in `start[0]`, `end[0]`.
    cdef int send_frame(self, object frame, double t, double* start, double* end) except -1
    # The same for a frame still in the sender's memory (`n` bytes at `p`, padded already):
    # a real transport's port sends it from there (no bytes object per frame); the default
    # makes the bytes and calls send_frame.
    cdef int send_raw(self, const unsigned char* p, Py_ssize_t n, double t, double* start,
                      double* end) except -1
    # The device model this port delivers to (the `device` property sets both).
    cdef object _device
    cdef FrameSink _sink                # the same, when it takes frames by C call; else None
