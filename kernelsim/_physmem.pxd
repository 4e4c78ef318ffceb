cimport cython

# Bounds that cannot overflow: every accessor that takes an offset and a length checks
# 0 <= off <= size first, then n <= size - off (never off + n, which can wrap).

cdef inline bint span_ok(Py_ssize_t off, Py_ssize_t n, Py_ssize_t size) noexcept nogil:
    """True when [off, off + n) lies inside [0, size)."""
    return off >= 0 and n >= 0 and off <= size and n <= size - off

cdef int span_check(Py_ssize_t off, Py_ssize_t n, Py_ssize_t size, str what) except -1
    # EINVAL for a negative length, EFAULT for a span outside [0, size)


# Final: nothing subclasses it, so its cpdef accessors called from C (the drivers' and
# devices' rd32/wr32 on descriptors, a dozen per frame) are direct calls, without the
# check for a Python override.
@cython.final
cdef class PhysMem:
    cdef readonly unsigned char[::1] buf
    cdef readonly Py_ssize_t size
    cdef Py_ssize_t _top
    cdef dict _free
    cdef dict _live
    cdef readonly object view

    cpdef unsigned int rd32(self, Py_ssize_t addr) except? 0xFFFFFFFF
    cpdef wr32(self, Py_ssize_t addr, unsigned int value)
    cpdef write(self, Py_ssize_t addr, const unsigned char[::1] src)
    cpdef bytes read(self, Py_ssize_t addr, Py_ssize_t n)
    cpdef move(self, Py_ssize_t dst, Py_ssize_t src, Py_ssize_t n)
    cpdef unsigned int rd16be(self, Py_ssize_t addr) except? 0xFFFFFFFF


cdef class ReadOnlyWindow:
    # a user's read-only window on kernel memory (see _physmem.pyx)
    cdef unsigned char[::1] _mv
    cdef Py_ssize_t _len
    cdef Py_ssize_t _stride
    cdef bint _revoked

cdef object window_on(unsigned char[::1] mv, Py_ssize_t offset, Py_ssize_t n)
    # a read-only memoryview of mv[offset:offset + n] whose .obj is a ReadOnlyWindow


# rd32/wr32 inlined in the caller: a device model's or a driver's descriptor words, a dozen
# per frame, without a call through the type's table. The methods are these.
@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline unsigned int mem_rd32(PhysMem mem, Py_ssize_t addr) except? 0xFFFFFFFF:
    if not span_ok(addr, 4, mem.size):
        span_check(addr, 4, mem.size, "physical memory")
    return (<unsigned int*> &mem.buf[addr])[0]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int mem_wr32(PhysMem mem, Py_ssize_t addr, unsigned int value) except -1:
    if not span_ok(addr, 4, mem.size):
        span_check(addr, 4, mem.size, "physical memory")
    (<unsigned int*> &mem.buf[addr])[0] = value
    return 0
