# cython: language_level=3, boundscheck=False, wraparound=False
"""The Token Buffer Pool (DP-C02).

Per endpoint, a pre-allocated area of fixed-size slots shared by the kernel (which
deposits) and the user process (which reads in place through a read-only view). The
slots live in a region the node hands out for exactly this -- kernel memory a user
process may map (`Node.alloc_shared`): a private buffer in modeled time, a POSIX
shared-memory segment the owning process maps read-only when the real-node allocator
is installed. Slot ``i`` is bytes ``[i * slot_bytes, (i + 1) * slot_bytes)`` of the
region; the books (lengths, sources, the arrival FIFO) stay in the kernel.

The interrupt path copies an arriving message straight into a free slot from the
buffer it arrived in; with no free slot the message is dropped and counted -- DP is
unreliable and never tells the sender.

A slot handed to the user (a *token*) stays out of circulation until released, in
any order; messages are taken in arrival order.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
import errno

from libc.stdlib cimport malloc, free
from libc.string cimport memmove

from kernelsim._physmem cimport span_check, span_ok, window_on
from kernelsim._waits cimport Pool


cdef class TokenBufferPool(Pool):
    def __cinit__(self, region, int nslots, int slot_bytes):
        cdef int i
        if nslots <= 0 or slot_bytes <= 0:
            raise ValueError("a TBP needs at least one slot of at least one byte")
        self._fifo = <int*> malloc(nslots * sizeof(int))
        self._free = <int*> malloc(nslots * sizeof(int))
        self._len = <int*> malloc(nslots * sizeof(int))
        self._src_nid = <int*> malloc(nslots * sizeof(int))
        self._src_ep = <int*> malloc(nslots * sizeof(int))
        self._held = <unsigned char*> malloc(nslots)
        if not (self._fifo and self._free and self._len and self._src_nid and self._src_ep and self._held):
            raise MemoryError()
        self._buf = region.buf
        if self._buf.shape[0] < <Py_ssize_t> nslots * slot_bytes:
            raise ValueError(f"a region of {self._buf.shape[0]} bytes cannot hold {nslots} slots of {slot_bytes}")
        self.region = region
        self._pinned = True
        self.nslots = nslots
        self.slot_bytes = slot_bytes
        for i in range(nslots):
            self._free[i] = nslots - 1 - i
            self._held[i] = 0
        self._nfree = nslots
        self._head = 0
        self.count = 0

    def __dealloc__(self):
        free(self._fifo); free(self._free); free(self._len)
        free(self._src_nid); free(self._src_ep); free(self._held)

    def unpin(self):
        """Give the pool's region back (endpoint close); deposits after this are dropped."""
        if self._pinned:
            self._pinned = False
            self._buf = None
            self.region.release()

    @property
    def region_name(self):
        """The name a user process maps the slots by (None for a private modeled region)."""
        return self.region.name

    cpdef bint deposit(self, const unsigned char[::1] src, Py_ssize_t off, Py_ssize_t n,
                       int src_nid, int src_ep) except -1:
        """Copy `n` bytes at `src[off:]` into a free slot; False if dropped (full, too long).

        EINVAL for a negative `n`, EFAULT if the bytes are not in `src`.
        """
        cdef int slot
        if not span_ok(off, n, src.shape[0]):
            span_check(off, n, src.shape[0], "TBP deposit source")
        if not self._pinned:
            return False
        slot = self._claim(n)
        if slot < 0:
            return False
        if n:
            memmove(&self._buf[<Py_ssize_t> slot * self.slot_bytes], &src[off], n)
        self._queue(slot, <int> n, src_nid, src_ep)
        return True

    cdef int _claim(self, Py_ssize_t n):
        if n > self.slot_bytes:
            self.dropped_too_long += 1
            return -1
        if self._nfree == 0:
            self.dropped_full += 1
            return -1
        self._nfree -= 1
        return self._free[self._nfree]

    cdef void _queue(self, int slot, int n, int src_nid, int src_ep):
        self._len[slot] = n
        self._src_nid[slot] = src_nid
        self._src_ep[slot] = src_ep
        self._fifo[(self._head + self.count) % self.nslots] = slot
        self.count += 1
        if self.count > self.high_water:
            self.high_water = self.count
        self.deposited += 1

    cpdef int take(self):
        """Hand out the oldest message's slot as a token; -1 if the pool is empty."""
        cdef int slot
        if self.count == 0:
            return -1
        slot = self._fifo[self._head]
        self._head = (self._head + 1) % self.nslots
        self.count -= 1
        self._held[slot] = 1
        self.taken += 1
        return slot

    cpdef int length(self, int slot) except -1:
        self._check_held(slot)
        return self._len[slot]

    def source(self, int slot):
        self._check_held(slot)
        return (self._src_nid[slot], self._src_ep[slot])

    def view(self, int slot):
        """The user's read-only view of a held slot's message (its ``.obj`` a ReadOnlyWindow:
        revoke it when the slot goes back to the pool)."""
        self._check_held(slot)
        self._check_pinned()
        cdef Py_ssize_t a = <Py_ssize_t> slot * self.slot_bytes
        return window_on(self._buf, a, self._len[slot])

    cpdef bytes copy_out(self, int slot, Py_ssize_t nbytes):
        self._check_held(slot)
        self._check_pinned()
        cdef Py_ssize_t a = <Py_ssize_t> slot * self.slot_bytes
        cdef Py_ssize_t n = min(nbytes, <Py_ssize_t> self._len[slot])
        if n < 0:
            raise OSError(errno.EINVAL, f"byte count must be non-negative, not {nbytes}")
        return PyBytes_FromStringAndSize(<char*> &self._buf[a], n)

    cpdef release(self, int slot):
        self._check_held(slot)
        self._held[slot] = 0
        self._free[self._nfree] = slot
        self._nfree += 1
        self.released += 1

    cdef int _check_held(self, int slot) except -1:
        if slot < 0 or slot >= self.nslots or not self._held[slot]:
            raise ValueError(f"slot {slot} is not a held token")
        return 0

    cdef int _check_pinned(self) except -1:
        if not self._pinned:
            raise OSError(errno.EBADF, "the pool's endpoint was closed")
        return 0

    @property
    def free_slots(self):
        return self._nfree

    def stats(self):
        return {"slots": self.nslots, "slot_bytes": self.slot_bytes, "queued": self.count,
                "free": self._nfree, "deposited": self.deposited, "taken": self.taken,
                "released": self.released, "dropped_full": self.dropped_full,
                "dropped_too_long": self.dropped_too_long, "high_water": self.high_water}
