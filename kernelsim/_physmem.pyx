# cython: language_level=3, boundscheck=False, wraparound=False
"""A node's physical memory: what kernel, user and device DMA share.

Descriptor rings, frame buffers and Token Buffer Pools are allocated here and named by
physical address, as on the real machine: the driver writes a descriptor's buffer
address, the device model reads it back and DMAs through it. Allocation is a bump
allocator with a free list per size: kernel memory of a simulated node is set up once
at module load and returned at unload.

The bytes are anonymous pages (``anonymous_pages``), not a zero-filled bytearray: a
node's 16 MB of physical memory and a LANai's SRAM become resident only where they are
touched, so an idle modeled node costs little host memory and a 1024-node cluster fits.
"""
import errno
import mmap

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy, memmove, memset
from posix.mman cimport MADV_DONTNEED, madvise

cdef Py_ssize_t PAGE = mmap.PAGESIZE


cdef int span_check(Py_ssize_t off, Py_ssize_t n, Py_ssize_t size, str what) except -1:
    if n < 0:
        raise OSError(errno.EINVAL, f"{what}: negative length {n}")
    if not span_ok(off, n, size):
        raise OSError(errno.EFAULT, f"{what}: {n} bytes at {off:#x} are outside its {size} bytes")
    return 0


def anonymous_pages(Py_ssize_t nbytes):
    """A writable memoryview of `nbytes` zero bytes that take host memory only once touched.

    Private anonymous mmap: the kernel maps every page to the shared zero page until the
    first write, and a fork copies on write exactly as it would a bytearray.
    """
    if nbytes <= 0:
        raise OSError(errno.EINVAL, f"anonymous memory needs a positive size, not {nbytes}")
    return memoryview(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                                prot=mmap.PROT_READ | mmap.PROT_WRITE))


cdef void zero_span(unsigned char* base, Py_ssize_t addr, Py_ssize_t n) noexcept:
    """Zero [addr, addr+n) of page-aligned anonymous memory at `base`: its whole pages go
    back to the kernel (they read as zeros and take no host memory until written again),
    the ragged ends are cleared by hand. A reused receive FIFO, sized by the node count,
    then costs host memory only where packets land."""
    cdef Py_ssize_t lo = (addr + PAGE - 1) // PAGE * PAGE
    cdef Py_ssize_t hi = (addr + n) // PAGE * PAGE
    if hi > lo and madvise(base + lo, hi - lo, MADV_DONTNEED) == 0:
        memset(base + addr, 0, lo - addr)
        memset(base + hi, 0, addr + n - hi)
    else:
        memset(base + addr, 0, n)


cdef class PhysMem:
    # buf: the bytes; view: a memoryview of them for slicing; _free: size -> [addr];
    # _live: addr -> size (declared in _physmem.pxd)

    def __cinit__(self, Py_ssize_t size=4 << 20):
        self.size = size
        self.view = anonymous_pages(size)
        self.buf = self.view
        self._top = 64          # address 0 stays unused so that 0 can mean "none"
        self._free = {}
        self._live = {}

    def alloc(self, Py_ssize_t nbytes, Py_ssize_t align=16):
        """Return the physical address of `nbytes` of zeroed memory."""
        cdef Py_ssize_t addr
        if nbytes <= 0:
            raise ValueError("allocation of no memory")
        if align <= 0 or align > self.size:
            raise OSError(errno.EINVAL, f"alignment must be 1..{self.size}, not {align}")
        if nbytes > self.size:
            raise MemoryError(f"node physical memory exhausted ({self.size} bytes)")
        nbytes = (nbytes + align - 1) // align * align
        lst = self._free.get(nbytes)
        if lst:
            addr = lst.pop()
            zero_span(&self.buf[0], addr, nbytes)
        else:
            addr = (self._top + align - 1) // align * align
            if nbytes > self.size - addr:
                raise MemoryError(f"node physical memory exhausted ({self.size} bytes)")
            self._top = addr + nbytes
        self._live[addr] = nbytes
        return addr

    def release(self, Py_ssize_t addr):
        nbytes = self._live.pop(addr, None)
        if nbytes is None:
            raise OSError(errno.EINVAL, f"no allocation at {addr:#x}")
        self._free.setdefault(nbytes, []).append(addr)

    def in_use(self):
        return sum(self._live.values())

    cpdef unsigned int rd32(self, Py_ssize_t addr) except? 0xFFFFFFFF:
        return mem_rd32(self, addr)

    cpdef wr32(self, Py_ssize_t addr, unsigned int value):
        mem_wr32(self, addr, value)

    cpdef write(self, Py_ssize_t addr, const unsigned char[::1] src):
        if not span_ok(addr, src.shape[0], self.size):
            span_check(addr, src.shape[0], self.size, "physical memory")
        if src.shape[0]:
            memcpy(&self.buf[addr], &src[0], src.shape[0])

    cpdef bytes read(self, Py_ssize_t addr, Py_ssize_t n):
        if not span_ok(addr, n, self.size):
            span_check(addr, n, self.size, "physical memory")
        if n == 0:
            return b""
        return PyBytes_FromStringAndSize(<const char*> &self.buf[addr], n)   # no memoryview slice made

    cpdef move(self, Py_ssize_t dst, Py_ssize_t src, Py_ssize_t n):
        if not (span_ok(dst, n, self.size) and span_ok(src, n, self.size)):
            span_check(src, n, self.size, "physical memory")
            span_check(dst, n, self.size, "physical memory")
        if n:
            memmove(&self.buf[dst], &self.buf[src], n)

    cpdef unsigned int rd16be(self, Py_ssize_t addr) except? 0xFFFFFFFF:
        if not span_ok(addr, 2, self.size):
            span_check(addr, 2, self.size, "physical memory")
        return (self.buf[addr] << 8) | self.buf[addr + 1]


cdef class ReadOnlyWindow:
    """A user's window on kernel memory: bytes it may read in place and never write.

    ``memoryview(buf[a:b]).toreadonly()`` is not enough: its ``.obj`` is the writable
    object underneath (a process holding a token could write the whole pool through
    ``tok.data.obj``). A window is that ``.obj`` instead: it exports read-only buffers
    only, and once revoked (the kernel took the memory back) it exports nothing.
    Made only by `read_only_window`.
    """

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if self._revoked:
            raise OSError(errno.EBADF, "the kernel took this memory back")
        if flags & PyBUF_WRITABLE:
            raise BufferError("a window on kernel memory is read-only")
        buffer.buf = NULL
        if self._len:
            buffer.buf = <void*> &self._mv[0]
        buffer.len = self._len
        buffer.readonly = 1
        buffer.itemsize = 1
        buffer.format = NULL
        if flags & PyBUF_FORMAT:
            buffer.format = "B"
        buffer.ndim = 1
        buffer.shape = NULL
        if flags & PyBUF_ND:
            buffer.shape = &self._len
        buffer.strides = NULL
        if flags & PyBUF_STRIDES:
            buffer.strides = &self._stride
        buffer.suboffsets = NULL
        buffer.internal = NULL
        buffer.obj = self

    def __releasebuffer__(self, Py_buffer *buffer):
        pass

    def revoke(self) -> None:
        """No new views from now on (views already taken must be released by their holder)."""
        self._revoked = True

    def __len__(self):
        return self._len


def read_only_window(memory, Py_ssize_t offset, Py_ssize_t n):
    """A read-only memoryview of `n` bytes of `memory` at `offset`, whose ``.obj`` is a
    `ReadOnlyWindow` (revoke it with ``view.obj.revoke()`` before the memory is reused)."""
    return window_on(memory, offset, n)


cdef object window_on(unsigned char[::1] mv, Py_ssize_t offset, Py_ssize_t n):
    span_check(offset, n, mv.shape[0], "read-only window")
    cdef ReadOnlyWindow w = ReadOnlyWindow.__new__(ReadOnlyWindow)
    w._mv = mv[offset:offset + n]
    w._len = n
    w._stride = 1
    w._revoked = False
    return memoryview(w)
