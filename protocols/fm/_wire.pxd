# FM's 32-byte packet header (see _wire.pyx).

cdef enum:
    FM_HDR = 32               # header bytes (FM-A04: 2080 = 2048 data + 32 header)
    FM_DATA = 2048            # data bytes per packet (FM-A04)
    FM_TYPE = 0x0F4D          # the Myrinet packet type FM's packets carry (locally assigned)
    KIND_DATA = 1
    KIND_CREDIT = 2
    FLAG_FIRST = 1            # the packet starts a message
    FLAG_LAST = 2             # the packet ends it

    # parse() results
    PKT_OK = 0
    PKT_RUNT = 1
    PKT_TYPE = 2
    PKT_KIND = 3
    PKT_LENGTH = 4
    PKT_OFFSET = 5

cdef class Header:
    cdef public int kind, flags, src, dst, program, src_inst, dst_inst, handler, plen
    cdef public unsigned int mlen, offset, seq, credits

    cpdef pack_into(self, unsigned char[::1] buf, Py_ssize_t off)
    cpdef int parse(self, const unsigned char[::1] buf, Py_ssize_t off, Py_ssize_t n)
    cdef void pack_at(self, unsigned char* b) noexcept nogil
    cdef int parse_at(self, const unsigned char* b, Py_ssize_t n) noexcept nogil
