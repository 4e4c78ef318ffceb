# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The event ring: fixed-size records from a node to one user process, in shared memory.

A node tells an attached process what happened -- for DP, "message in slot S, N bytes,
from node/endpoint" -- by appending 16-byte records (four u32) to a single-producer /
single-consumer ring in a memory file both have mapped. Its eventfd is the process's
**file descriptor** for the object: readable exactly while records are waiting, so the
fd works with ``select``/``poll``/trio ``wait_readable`` like a socket's, without the
process having to announce that it is about to sleep (contrast `ShmRing`'s doorbell,
rung only for a consumer that said so).

Layout (bytes)::

    0    line 0  magic, version, slots, record bytes      (fixed after creation)
    64   line 1  head    records posted   (producer)
    128  line 2  tail    records taken    (consumer)
    192  line 3  armed   1 while the eventfd holds a count
    256  line 4  posted, full  (producer counters)
    320  slots * 16 bytes of records

Level-triggered readiness -- two stores, each followed by a seq_cst fence::

    producer: head = h + 1; fence; if xchg(armed, 1) == 0: eventfd += 1
    consumer, on taking the last record:
              drain eventfd; armed = 0 (release); fence;
              if head != tail and xchg(armed, 1) == 0: eventfd += 1

Whichever of the two runs its exchange second sees the other's store, so a record is
never waiting while the eventfd reads empty, and an empty ring never leaves it readable
for longer than the consumer takes to notice. The consumer's side also runs in the node
(a generic ``read()`` consumes on the blocked process's behalf); both never at once.

**One wake-up per node pass, not per record** (`batch_posts`): a node that delivers a
burst of frames in one pass would otherwise wake the consumer at the first record -- and
a woken consumer on the node's own core preempts it, takes that one record and sleeps
again, once per message. While batching is on, ``post`` writes the record but keeps the
new head to itself; `publish_posts` (the node calls it at the end of every pass, before
it polls again or sleeps) stores each ring's head once and wakes its consumer once. An
unpublished record is invisible to the consumer, so the readiness protocol above is
unchanged: the producer's "head = h + 1" is just done for several records at a time.
The node's own consumer side (``pop`` for a generic ``read()``) publishes first.
"""
from libc.stdint cimport uint32_t, uint64_t
from libc.errno cimport errno, EINTR
from posix.unistd cimport read, write
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from kernelsim._atomics cimport dp_fence_seq_cst, dp_load_acq32, dp_load_acq64, dp_load_rlx64, dp_store_rel32, dp_store_rel64, dp_xchg32

import mmap
import os

DEF REC = 16
HEADER_BYTES = 320

cdef bint _batching = False
cdef list _unpublished = []         # rings with records posted but not yet published (batching)


def batch_posts(bint on):
    """Batch every ring's posts in this process until `publish_posts` (see the essay); off:
    publish what is pending and post record by record again."""
    global _batching
    if not on:
        publish_posts()
    _batching = on


def publish_posts():
    """Publish every ring's batched records and wake each consumer once; the rings published."""
    global _unpublished
    cdef EventRing r
    cdef list todo = _unpublished
    if not todo:
        return 0
    _unpublished = []
    for r in todo:
        r._publish()
    return len(todo)


def event_ring_bytes(Py_ssize_t slots):
    """Bytes an event ring of `slots` records takes."""
    return sizeof(ev_hdr) + slots * REC


cdef inline void _kick(int fd) noexcept nogil:
    cdef uint64_t one = 1
    while write(fd, &one, 8) < 0 and errno == EINTR:
        pass


cdef inline void _drain(int fd) noexcept nogil:
    cdef uint64_t junk
    while read(fd, &junk, 8) < 0 and errno == EINTR:
        pass


cdef class EventRing:
    """One side's mapping of an event ring (see the module's essay).

    ``EventRing(fd, efd, slots)`` lays a new ring out in memory file `fd` (its maker,
    the producer); ``EventRing(fd, efd)`` maps an existing one. `efd` is the eventfd;
    both descriptors are duplicated (the caller keeps its own).
    """
    def __cinit__(self, int fd, int efd, Py_ssize_t slots=0):
        cdef Py_ssize_t size = os.fstat(fd).st_size
        self._efd = -1
        if slots:
            if slots < 1 or slots > (1 << 24) or (slots & (slots - 1)):
                raise ValueError("slots must be a power of two in [1, 2**24]")
            if size < event_ring_bytes(slots):
                raise ValueError(f"a memory file of {size} bytes cannot hold {slots} records")
        elif size < <Py_ssize_t> sizeof(ev_hdr):
            raise ValueError("memory file too small for an event ring")
        self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        PyObject_GetBuffer(self._mm, &self._view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        self._mapped = True
        self._h = <ev_hdr*> self._view.buf
        if slots:
            self._h.version = 1
            self._h.slots = <uint32_t> slots
            self._h.rec_bytes = REC
            dp_store_rel64(&self._h.magic, EV_MAGIC)
        else:
            if dp_load_acq64(&self._h.magic) != EV_MAGIC or self._h.rec_bytes != REC:
                self._unmap()
                raise ValueError("not an event ring")
            slots = self._h.slots
            if slots == 0 or (slots & (slots - 1)) or event_ring_bytes(slots) > size:
                self._unmap()
                raise ValueError("corrupt event ring header")
        self.slots = <uint32_t> slots
        self._mask = slots - 1
        self._recs = <uint32_t*> (<char*> self._view.buf + sizeof(ev_hdr))
        self._efd = os.dup(efd)

    def __dealloc__(self):
        self._unmap()
        if self._efd >= 0:
            os.close(self._efd)

    cdef _unmap(self):
        if self._mapped:
            self._mapped = False
            self._h = NULL
            PyBuffer_Release(&self._view)
            self._mm.close()

    def close(self):
        """Unmap and close this side's descriptors (idempotent)."""
        self._unmap()
        if self._efd >= 0:
            os.close(self._efd)
            self._efd = -1

    def fileno(self):
        """The eventfd: readable while records are waiting."""
        return self._efd

    @property
    def closed(self):
        return self._h == NULL

    # -- producer --------------------------------------------------------------------------

    cpdef bint post(self, uint32_t a, uint32_t b, uint32_t c, uint32_t d) except -1:
        """Append a record; False if the ring is full (the caller decides what that means).
        While batching (`batch_posts`) it is published by the next `publish_posts`."""
        cdef ev_hdr* h = self._h
        cdef uint64_t head
        cdef uint32_t* r
        if h == NULL:
            raise ValueError("event ring is closed")
        head = self._local_head if self._queued else dp_load_rlx64(&h.head)
        if head - dp_load_acq64(&h.tail) >= self.slots:
            h.full += 1
            return False
        r = self._recs + (head & self._mask) * 4
        r[0] = a; r[1] = b; r[2] = c; r[3] = d
        h.posted += 1
        if _batching:
            self._local_head = head + 1
            if not self._queued:
                self._queued = True
                _unpublished.append(self)
            return True
        self._publish_head(head + 1)
        return True

    cdef void _publish(self):
        if self._queued:
            self._queued = False
            if self._h != NULL:
                self._publish_head(self._local_head)

    cdef void _publish_head(self, uint64_t head):
        cdef ev_hdr* h = self._h
        dp_store_rel64(&h.head, head)
        dp_fence_seq_cst()
        if dp_load_acq32(&h.armed) == 0 and dp_xchg32(&h.armed, 1) == 0:
            _kick(self._efd)

    # -- consumer --------------------------------------------------------------------------

    cpdef bint pending(self):
        cdef ev_hdr* h = self._h
        return h != NULL and dp_load_acq64(&h.head) != dp_load_rlx64(&h.tail)

    cpdef object pop(self):
        """The oldest record as (a, b, c, d), or None if there is none."""
        cdef uint32_t rec[4]
        if not self.pop_into(rec):
            return None
        return (rec[0], rec[1], rec[2], rec[3])

    cdef int pop_into(self, uint32_t* out) except -1:
        """`pop` for C callers: the oldest record into out[0..3]; 1, or 0 if there is none."""
        cdef ev_hdr* h = self._h
        cdef uint64_t tail, head
        cdef uint32_t* r
        if h == NULL:
            raise ValueError("event ring is closed")
        if self._queued:                       # the node consuming its own batch: publish it first
            self._publish()
        tail = dp_load_rlx64(&h.tail)
        head = dp_load_acq64(&h.head)
        if head == tail:
            return 0
        if head - tail > self.slots:          # a producer cannot do this; never trust memory
            raise OSError(5, "event ring indices are corrupt")
        r = self._recs + (tail & self._mask) * 4
        out[0] = r[0]; out[1] = r[1]; out[2] = r[2]; out[3] = r[3]
        dp_store_rel64(&h.tail, tail + 1)
        if head == tail + 1:
            self._disarm()
        return 1

    cdef void _disarm(self):
        cdef ev_hdr* h = self._h
        _drain(self._efd)
        dp_store_rel32(&h.armed, 0)
        dp_fence_seq_cst()
        if dp_load_acq64(&h.head) != dp_load_rlx64(&h.tail) and dp_xchg32(&h.armed, 1) == 0:
            _kick(self._efd)

    def stats(self):
        cdef ev_hdr* h = self._h
        if h == NULL:
            return {"closed": True}
        return {"slots": self.slots, "posted": h.posted, "full": h.full,
                "waiting": dp_load_acq64(&h.head) - dp_load_acq64(&h.tail), "armed": bool(dp_load_acq32(&h.armed))}


cdef class RingExport:
    """The base of an open file's export whose ring operations the node's gate drain runs
    by C call (``ring_op_raw``, the entry's payload still in the gate's buffer); the
    Python entry ``ring_op(payload)`` is the same operation for bytes; ``deliver`` posts
    what the file has queued to its owner's ring (called on every deposit)."""

    cdef int deliver(self) except -1:
        return 0

    cdef int ring_op_raw(self, const unsigned char* p, Py_ssize_t n) except -1:
        raise OSError(22, f"{type(self).__name__} has no ring operations")

    def ring_op(self, payload) -> None:
        cdef const unsigned char[::1] view = payload
        self.ring_op_raw(&view[0] if view.shape[0] else <const unsigned char*> b"", view.shape[0])


# A yield that returns this much later waited out a time slice of another process (EEVDF's
# are 0.75 ms and more; a node pass or a script's turn is tens of µs). Twice within
# CROWDED_WINDOW_S means a CPU-bound process shares this pinned core -- once is also a
# neighbour's odd long step (a garbage collection, a request) -- and then every poll queues
# behind a slice of it, and the CPU polls burn make the poller the scheduler's last choice
# when its doorbell wakes it. So the poller -- a node (_server), or a script attached to it
# (libdp._endpoint_rings.Spinner) -- sleeps at once for CROWDED_BACKOFF_S before it polls again.
CROWDED_YIELD_S = 0.5e-3
CROWDED_WINDOW_S = 0.05
CROWDED_BACKOFF_S = 0.1
cdef double _crowded_yield_s = CROWDED_YIELD_S, _crowded_window_s = CROWDED_WINDOW_S
cdef double _crowded_backoff_s = CROWDED_BACKOFF_S


cdef class CrowdedCore:
    """One poller's count of late yields: polling is off until `until` after two within
    `CROWDED_WINDOW_S`; `count` says how often."""

    def __cinit__(self):
        self.last_late = -1.0
        self.until = 0.0
        self.count = 0

    cdef bint late_yield(self, double before, double after) noexcept:
        # A poll's yield took from `before` to `after`: True if that stopped the polls.
        cdef double late = self.last_late
        if after - before < _crowded_yield_s:
            return False
        self.last_late = after
        if after - late >= _crowded_window_s:
            return False
        self.until = after + _crowded_backoff_s
        self.count += 1
        return True
