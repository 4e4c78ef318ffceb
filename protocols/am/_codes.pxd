# SP AM's packet kinds, flags and channel answers as C constants, for the per-packet code
# of the endpoint chain (window, keepalive, bulk, endpoint .pyx): a comparison with one of
# them is a C compare, not a module attribute lookup. The Python names and what each one
# means are in _wire.pyx; _wire.pyx asserts that the two agree.
cdef enum:
    K_REQ = 1
    K_REP = 2
    K_STORE = 3
    K_GETREQ = 4
    K_GETDATA = 5
    K_ACK = 6
    K_NACK = 7
    K_KEEPALIVE = 8
    K_REJECT = 9
    K_NOP = 10
    F_FIRST = 0x10
    F_LAST = 0x20
    F_REPCH = 0x40
    AM_HDR = 16
    CHECKSUM_BYTES = 4
    # RxChannel.where()
    W_HERE = 0
    W_AHEAD = 1
    W_BEHIND = 2
    # RxChannel.take()
    T_PART = 0
    T_COMPLETE = 1
    T_DUP = 2
    T_BAD = 3
