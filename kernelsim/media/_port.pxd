from kernelsim._engine cimport EventTarget


cdef class FramePort(EventTarget):
    # What a device model's transmitter drives -- a modeled medium's end (`EtherPort`) or
    # the adapter to a real transport (`DevicePort`) -- as a C call: put `frame` (bytes,
    # padded as the device sends it) on the medium no earlier than `t`; the medium's
    # (start, end) in `start[0]`, `end[0]`.
    cdef int send_frame(self, object frame, double t, double* start, double* end) except -1
