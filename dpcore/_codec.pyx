# cython: language_level=3, boundscheck=False, wraparound=False
"""The Directed Message header.

Eight bytes in network byte order, so the data part of each frame is used fully
(DP-C01): the destination endpoint, the source node and endpoint, and one word
holding the message type (4 bits) and the message length (12 bits). The length is
needed because short frames are padded to the link's minimum frame.

    0      2       4       6          8
    +------+-------+-------+----------+
    |dst_ep|src_nid|src_ep |type:len  |  data ...
    +------+-------+-------+----------+
"""

import errno

from kernelsim._physmem cimport span_check, span_ok

DM_HEADER_BYTES = 8
DM_MAX_LENGTH = 0xFFF
DM_MAX_TYPE = 0xF
DM_TYPE_DATA = 0


cdef int dm_parse(const unsigned char* p, Py_ssize_t avail, DmHeader* h) noexcept nogil:
    """Fill `h` from `avail` bytes at `p`; -1 if they cannot be a header + its data."""
    cdef int tl
    if avail < 8:
        return -1
    h.dst_ep = (p[0] << 8) | p[1]
    h.src_nid = (p[2] << 8) | p[3]
    h.src_ep = (p[4] << 8) | p[5]
    tl = (p[6] << 8) | p[7]
    h.mtype = tl >> 12
    h.length = tl & 0xFFF
    if h.length > avail - 8:
        return -1
    return 0


cdef void dm_build(unsigned char* p, int dst_ep, int src_nid, int src_ep, int mtype, int length) noexcept nogil:
    cdef int tl = (mtype << 12) | length
    p[0] = dst_ep >> 8
    p[1] = dst_ep & 0xFF
    p[2] = src_nid >> 8
    p[3] = src_nid & 0xFF
    p[4] = src_ep >> 8
    p[5] = src_ep & 0xFF
    p[6] = tl >> 8
    p[7] = tl & 0xFF


def dm_pack(unsigned char[::1] buf, Py_ssize_t off, dst_ep, src_nid, src_ep, mtype, length):
    """Write a header at buf[off:off+8]; ValueError for a field out of range."""
    for v in (dst_ep, src_nid, src_ep, mtype, length):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"header fields are ints, not {v!r}")
    if not (0 <= dst_ep <= 0xFFFF and 0 <= src_nid <= 0xFFFF and 0 <= src_ep <= 0xFFFF):
        raise ValueError("endpoint and node numbers are 16-bit")
    if not 0 <= mtype <= DM_MAX_TYPE:
        raise ValueError(f"message type {mtype} out of range 0..{DM_MAX_TYPE}")
    if not 0 <= length <= DM_MAX_LENGTH:
        raise ValueError(f"message length {length} out of range 0..{DM_MAX_LENGTH}")
    if not span_ok(off, 8, buf.shape[0]):
        raise ValueError("no room for the header")
    dm_build(&buf[off], dst_ep, src_nid, src_ep, mtype, length)


def dm_unpack(const unsigned char[::1] buf, Py_ssize_t off=0):
    """Return (dst_ep, src_nid, src_ep, mtype, length); ValueError if malformed."""
    cdef DmHeader h
    if off < 0 or off > buf.shape[0] or dm_parse(&buf[off] if off < buf.shape[0] else NULL,
                                                 buf.shape[0] - off, &h) < 0:
        raise ValueError("malformed Directed Message header")
    return (h.dst_ep, h.src_nid, h.src_ep, h.mtype, h.length)


def dm_parse_at(const unsigned char[::1] mem, Py_ssize_t addr, Py_ssize_t avail):
    """MDR's parse of a received frame's payload in physical memory; None if malformed.

    A span outside `mem` is the caller's error, not the frame's: EINVAL for a negative
    length, EFAULT for bytes that are not there.
    """
    cdef DmHeader h
    if not span_ok(addr, avail, mem.shape[0]):
        span_check(addr, avail, mem.shape[0], "dm_parse_at")
    if avail < 8 or dm_parse(&mem[addr], avail, &h) < 0:
        return None
    return (h.dst_ep, h.src_nid, h.src_ep, h.mtype, h.length)


def dm_build_at(unsigned char[::1] mem, Py_ssize_t addr, int dst_ep, int src_nid, int src_ep, int mtype, int length):
    """Transmit path: write the header in place in a TX buffer; EFAULT/EINVAL on bad input."""
    if not span_ok(addr, 8, mem.shape[0]):
        span_check(addr, 8, mem.shape[0], "dm_build_at")
    if not (0 <= dst_ep <= 0xFFFF and 0 <= src_nid <= 0xFFFF and 0 <= src_ep <= 0xFFFF
            and 0 <= mtype <= 0xF and 0 <= length <= 0xFFF):
        raise OSError(errno.EINVAL, "Directed Message header field out of range")
    dm_build(&mem[addr], dst_ep, src_nid, src_ep, mtype, length)
