# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""FM's packet header: 32 bytes in front of at most 2048 bytes of data (FM-A04).

Every FM packet -- on Myrinet, and as a frame of the shared-memory transport -- starts
with it, big-endian::

     0  u16  Myrinet packet type (FM_TYPE; its first byte has the top bit clear)
     2  u8   kind: DATA, or CREDIT (a refill, consumed by the LANai control program)
     3  u8   flags: FIRST / LAST packet of its message
     4  u16  source host      6  u16  destination host
     8  u16  program ID: the job, from the global resource manager (FM-C05)
    10  u8   source instance  11  u8  destination instance (context on its host)
    12  u16  handler ID       14  u16  data bytes in this packet (0..2048)
    16  u32  message length   20  u32  offset of this packet's data in the message
    24  u32  message number (per sender and receiver)
    28  u32  credits: packets the sender of this packet has consumed from its receiver
             (cumulative, so a refill is never counted twice)

`Header` is one reusable object per user: `pack_into` writes the fields at an offset of
a buffer, `parse` reads them and checks what a receiver can check without state
(length, kind, offsets); nothing is allocated per packet.
"""

cdef inline unsigned int _u16(const unsigned char* b) noexcept nogil:
    return (b[0] << 8) | b[1]

cdef inline unsigned int _u32(const unsigned char* b) noexcept nogil:
    return (<unsigned int> b[0] << 24) | (<unsigned int> b[1] << 16) | (<unsigned int> b[2] << 8) | b[3]

cdef inline void _w16(unsigned char* b, unsigned int v) noexcept nogil:
    b[0] = (v >> 8) & 0xFF
    b[1] = v & 0xFF

cdef inline void _w32(unsigned char* b, unsigned int v) noexcept nogil:
    b[0] = (v >> 24) & 0xFF
    b[1] = (v >> 16) & 0xFF
    b[2] = (v >> 8) & 0xFF
    b[3] = v & 0xFF


HDR_BYTES = FM_HDR
DATA_BYTES = FM_DATA
MYRI_TYPE_FM = FM_TYPE
DATA = KIND_DATA
CREDIT = KIND_CREDIT
FIRST = FLAG_FIRST
LAST = FLAG_LAST
MALFORMED = ("ok", "runt", "bad_type", "bad_kind", "bad_length", "bad_offset")


cdef class Header:
    """The fields of one FM header (see the module essay)."""

    def __init__(self, kind=KIND_DATA, flags=0, src=0, dst=0, program=0, src_inst=0, dst_inst=0, handler=0,
                 plen=0, mlen=0, offset=0, seq=0, credits=0):
        self.kind = kind
        self.flags = flags
        self.src = src
        self.dst = dst
        self.program = program
        self.src_inst = src_inst
        self.dst_inst = dst_inst
        self.handler = handler
        self.plen = plen
        self.mlen = mlen
        self.offset = offset
        self.seq = seq
        self.credits = credits

    cpdef pack_into(self, unsigned char[::1] buf, Py_ssize_t off):
        if off < 0 or off + FM_HDR > buf.shape[0]:
            raise ValueError("FM header does not fit the buffer")
        self.pack_at(&buf[off])

    cpdef int parse(self, const unsigned char[::1] buf, Py_ssize_t off, Py_ssize_t n):
        """Read the header of the `n`-byte packet at `buf[off]`; PKT_OK or why it is malformed."""
        if n < FM_HDR or off < 0 or off + n > buf.shape[0]:
            return PKT_RUNT
        return self.parse_at(&buf[off], n)

    cdef void pack_at(self, unsigned char* b) noexcept nogil:
        """`pack_into` at an address the caller has checked (FM_HDR bytes)."""
        _w16(b, FM_TYPE)
        b[2] = self.kind & 0xFF
        b[3] = self.flags & 0xFF
        _w16(b + 4, self.src)
        _w16(b + 6, self.dst)
        _w16(b + 8, self.program)
        b[10] = self.src_inst & 0xFF
        b[11] = self.dst_inst & 0xFF
        _w16(b + 12, self.handler)
        _w16(b + 14, self.plen)
        _w32(b + 16, self.mlen)
        _w32(b + 20, self.offset)
        _w32(b + 24, self.seq)
        _w32(b + 28, self.credits)

    cdef int parse_at(self, const unsigned char* b, Py_ssize_t n) noexcept nogil:
        """`parse` of the `n`-byte packet at an address the caller has checked."""
        if n < FM_HDR:
            return PKT_RUNT
        if _u16(b) != FM_TYPE:
            return PKT_TYPE
        self.kind = b[2]
        self.flags = b[3]
        self.src = _u16(b + 4)
        self.dst = _u16(b + 6)
        self.program = _u16(b + 8)
        self.src_inst = b[10]
        self.dst_inst = b[11]
        self.handler = _u16(b + 12)
        self.plen = _u16(b + 14)
        self.mlen = _u32(b + 16)
        self.offset = _u32(b + 20)
        self.seq = _u32(b + 24)
        self.credits = _u32(b + 28)
        if self.kind != KIND_DATA and self.kind != KIND_CREDIT:
            return PKT_KIND
        if self.plen > FM_DATA or self.plen != n - FM_HDR or (self.kind == KIND_CREDIT and self.plen):
            return PKT_LENGTH
        if self.kind == KIND_DATA and (<unsigned long long> self.offset + self.plen > self.mlen
                                       or ((self.flags & FLAG_FIRST) != 0) != (self.offset == 0)
                                       or ((self.flags & FLAG_LAST) != 0)
                                       != (<unsigned long long> self.offset + self.plen == self.mlen)):
            return PKT_OFFSET
        return PKT_OK

    def __repr__(self):
        return (f"<FM header kind={self.kind} flags={self.flags} {self.src}.{self.src_inst}->{self.dst}.{self.dst_inst}"
                f" prog={self.program} h={self.handler} {self.offset}+{self.plen}/{self.mlen} seq={self.seq}"
                f" credits={self.credits}>")
