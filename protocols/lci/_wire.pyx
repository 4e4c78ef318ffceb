# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""LCI's packet header: written by the sending NI, read by the receiving NI and host.

On the wire an LCI packet is the Myrinet route (consumed by the switches), LCI's
Myrinet packet type (two bytes, most significant bit clear: HW-MYRI), then this
16-byte header, then at most one MTU of payload:

    0  kind      u8    DATA, ACK, NACK, RCPY, MCAST, FA_REQ, FA_REPLY (the receive
                       dispatch is open to more)
    1  flags     u8
    2  src       u16   the sending node
    4  length    u16   payload bytes
    6  credits   u16   NI receive buffers released for the packet's destination (LCI-C07)
    8  seq       u16   sequence number (I-nirx, I-hrx: LCI-C12/C13)
    10 ack       u16   cumulative acknowledgement for the reverse direction
    12 aux       u32   RCPY: the destination's virtual address (LCI-C16); MCAST: the
                       root (the sender of the multicast); FA_REQ: the increment;
                       FA_REPLY: the value fetched (LCI-C10, C11)

Big-endian, as Myrinet's type field. `Header.parse` checks everything a packet off the
wire can get wrong and returns a reason code (never raises): the NI and the host drop
and count, by reason.
"""

MYRI_TYPE_LCI = 0x0C15        # a locally assigned Myrinet packet type (HW-MYRI: MSB clear)
HDR_BYTES = 16
TYPE_BYTES = 2

K_DATA = 1
K_ACK = 2
K_NACK = 3
K_RCPY = 4
K_MCAST = 5                   # a multicast packet, forwarded down the root's tree (LCI-C10)
K_FA_REQ = 6                  # fetch-and-add request and its reply (LCI-C11)
K_FA_REPLY = 7

F_MISS = 1 << 0               # RCPY: the receiving NI had no translation (anonymous page)
F_HAS_ACK = 1 << 1            # the ack field carries an acknowledgement
F_NOTIFY = 1 << 2             # RCPY: the receiver asked to be told of each page's arrival

OK = 0
E_RUNT = 1
E_TYPE = 2
E_KIND = 3
E_LENGTH = 4
REASONS = ("ok", "runt", "unknown_type", "unknown_kind", "bad_length")


cdef inline unsigned int _u16(const unsigned char[::1] m, Py_ssize_t o):
    return (m[o] << 8) | m[o + 1]


cdef inline void _put16(unsigned char[::1] m, Py_ssize_t o, unsigned int v):
    m[o] = (v >> 8) & 0xFF
    m[o + 1] = v & 0xFF


cdef class Header:
    """One parsed header, reused packet after packet (no object per packet)."""

    cpdef int parse(self, const unsigned char[::1] mem, Py_ssize_t off, Py_ssize_t n, int mtu):
        """NI side: the packet of `n` bytes at `off` (Myrinet type, header, payload)."""
        if n < TYPE_BYTES + HDR_BYTES or off < 0 or off + n > mem.shape[0]:
            return E_RUNT
        if _u16(mem, off) != MYRI_TYPE_LCI:
            return E_TYPE
        return self._fields(mem, off + TYPE_BYTES, n - TYPE_BYTES, mtu)

    cpdef int parse_body(self, const unsigned char[::1] mem, Py_ssize_t off, Py_ssize_t n, int mtu):
        """Host side: header and payload (`n` bytes at `off`) as the NI DMA'd them up. An
        RCPY miss notification (F_MISS) is a header alone; its payload is elsewhere."""
        if n < HDR_BYTES or off < 0 or off + n > mem.shape[0]:
            return E_RUNT
        return self._fields(mem, off, n, mtu)

    cdef int _fields(self, const unsigned char[::1] mem, Py_ssize_t h, Py_ssize_t n, int mtu):
        self.kind = mem[h]
        if self.kind == 0:
            return E_KIND                # kinds the dispatch does not know are its to count
        self.flags = mem[h + 1]
        self.src = _u16(mem, h + 2)
        self.length = _u16(mem, h + 4)
        if self.length > mtu:
            return E_LENGTH
        if self.length != n - HDR_BYTES and not (self.kind == K_RCPY and self.flags & F_MISS and n == HDR_BYTES):
            return E_LENGTH
        self.credits = _u16(mem, h + 6)
        self.seq = _u16(mem, h + 8)
        self.ack = _u16(mem, h + 10)
        self.aux = (<unsigned int> mem[h + 12] << 24) | (mem[h + 13] << 16) | (mem[h + 14] << 8) | mem[h + 15]
        return OK


cpdef write_header(unsigned char[::1] mem, Py_ssize_t off, int kind, int flags, int src, int length,
                   int credits, int seq, int ack, unsigned int aux):
    """The Myrinet type and the LCI header at `off` (the payload follows at off + 18)."""
    if off < 0 or off + TYPE_BYTES + HDR_BYTES > mem.shape[0]:
        raise ValueError("LCI header outside memory")
    _put16(mem, off, MYRI_TYPE_LCI)
    off += TYPE_BYTES
    mem[off] = kind
    mem[off + 1] = flags
    _put16(mem, off + 2, src)
    _put16(mem, off + 4, length)
    _put16(mem, off + 6, credits)
    _put16(mem, off + 8, seq & 0xFFFF)
    _put16(mem, off + 10, ack & 0xFFFF)
    mem[off + 12] = (aux >> 24) & 0xFF
    mem[off + 13] = (aux >> 16) & 0xFF
    mem[off + 14] = (aux >> 8) & 0xFF
    mem[off + 15] = aux & 0xFF


cpdef int seq_diff(int a, int b):
    """a - b on 16-bit sequence numbers, in -32768..32767."""
    cdef int d = (a - b) & 0xFFFF
    return d - 0x10000 if d >= 0x8000 else d
