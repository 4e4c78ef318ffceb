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
    KIND_MAX = 10
    KIND_MASK = 0x0F
    AM_HDR = 16
    CHECKSUM_BYTES = 4
    MAX_WORDS = 4
    # Header.parse()
    MAL_KIND = 1
    MAL_LENGTH = 2
    MAL_OFFSET = 3
    MAL_SHORT = 4
    # RxChannel.where()
    W_HERE = 0
    W_AHEAD = 1
    W_BEHIND = 2
    # RxChannel.take()
    T_PART = 0
    T_COMPLETE = 1
    T_DUP = 2
    T_BAD = 3
    # the endpoint's counters (`Window.counts`), in the order of endpoint.STAT_KEYS
    S_REQUESTS = 0
    S_STORES = 1
    S_GETS = 2
    S_POLLS = 3
    S_EMPTY_POLLS = 4
    S_IDLE_POLLS = 5
    S_RX_PACKETS = 6
    S_PACKETS_SENT = 7
    S_RETRANSMITTED_PACKETS = 8
    S_GOBACKS = 9
    S_NACKS_SENT = 10
    S_NACKS_RECEIVED = 11
    S_ACKS_SENT = 12
    S_ACKS_RECEIVED = 13
    S_KEEPALIVES_SENT = 14
    S_KEEPALIVES_RECEIVED = 15
    S_REJECTS_SENT = 16
    S_REJECTS_RECEIVED = 17
    S_DUPLICATES = 18
    S_OUT_OF_ORDER = 19
    S_HANDLERS_RUN = 20
    S_CHUNKS_RECEIVED = 21
    S_STORES_RECEIVED = 22
    S_BYTES_STORED = 23
    S_STORES_COMPLETED = 24
    S_GETS_SERVED = 25
    S_GETS_COMPLETED = 26
    S_FIFO_FULL = 27
    S_ABANDONED = 28
    S_CHECKSUM_ERRORS = 29
    N_STATS = 30
