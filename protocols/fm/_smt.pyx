# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""FM's shared-memory transport (SMT): lock-free queues of message frames in one region.

The HPVM paper's design (FACTS FM-C09..C12, FM-A10..A13), built on real atomic
instructions over whatever memory holds the region -- a mapped POSIX shared-memory
segment between real processes, or a block of a modeled node's memory, where the same
code runs and FM charges each step's modeled cost.

**Structures** (all arrays, no pointers: the region is mapped at different addresses,
FM-C09). For each process (SMT ID) the region holds a *receiver area*: a free list --
a ring of F message frames, each with an in-use flag, and a free-list head -- and M
receive queues of frame indices (1 <= M <= N, FM-A13), each with a head and a tail.
Frames, queue lengths and the free ring are powers of two: indices are masked, never
checked for overflow (FM-A11); FM's credits guarantee room (FM-C10). A receiver owns
every frame of its area. SMT IDs are handed out by fetch-and-increment of a shared
counter, and a map from the process's place in its job (its instance) to its SMT ID
lives in the region (FM-C09).

**Send** (FM-C10; ``claim``, the caller's copy, ``publish``):
  (1) look the receiver's area up in the map; (2) fetch-and-increment the head of its
  free list to claim a frame; (3) test-and-set the frame's in-use flag -- if it was
  set, back to (2); (4) copy the data into the frame; (5) fetch-and-increment the tail
  of receive queue (sender mod M); (6) write the frame's index at the fetched tail.

**Receive** (FM-C11; ``poll``, ``take``, the caller's copy, ``release``):
  (1) poll until the frame at the head of a receive queue is in use; (2) fetch-and-
  increment the head of the receive queue; (3) index into the free list and copy the
  data up; (4) clear the frame's in-use flag.

Details the paper leaves to the implementation: a queue entry holds index + 1 and the
receiver clears it as it takes it, so a stale index can never look like a new one;
the test-and-set of the in-use flag is a compare-and-swap from 0 to the claimant's
SMT ID + 1 -- it fails, as a test-and-set does, on a flag already set, and a set flag
names its holder (an exchange would overwrite the holder's mark with the loser's); receivers return credits by counting, per sender,
the frames they have consumed (a word only the receiver writes, read by the sender).

**Faults.** A process only ever writes a frame it has claimed, a queue position it
has fetched, or its own receiver area's heads, flags and counters: a stalled or killed
peer cannot corrupt anyone's queues -- at worst it holds what it claimed. `reclaim`
gives that back once the holder is known to be dead: frames it claimed but never
published return to the free list, and the one queue position it may have fetched
without writing (it marks its intent before step 5 and clears it after step 6) is
skipped, so the receiver's queue moves on.
"""
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from kernelsim._atomics cimport (dp_cas32, dp_fetch_add64, dp_load_acq32, dp_load_acq64, dp_load_rlx64,
                                 dp_store_rel32, dp_store_rel64, dp_store_rlx64)

import errno

__all__ = ["SmtRegion", "layout_bytes", "SMT_MAGIC"]

DEF LINE = 64
SMT_MAGIC = 0x31544D534D4650     # "PFMSMT1"
cdef uint64_t MAGIC = SMT_MAGIC
cdef uint32_t VERSION = 1

# Line 0: magic u64, version, nproc, nqueues, nframes, frame_bytes, qlen, ready (u32 each).
# Line 1: next_id u64 (fetch-and-increment hands out SMT IDs).
# Then the map (instance -> SMT ID + 1, u32 each), the process records (a line each:
# state u32, pid u32, start u64, publishing u32, instance u32), and the receiver areas.
DEF H_MAGIC = 0
DEF H_VERSION = 8
DEF H_NPROC = 12
DEF H_NQUEUES = 16
DEF H_NFRAMES = 20
DEF H_FRAME_BYTES = 24
DEF H_QLEN = 28
DEF H_READY = 32
DEF H_NEXT_ID = LINE
DEF P_STATE = 0
DEF P_PID = 4
DEF P_START = 8
DEF P_PUBLISHING = 16
DEF P_INSTANCE = 20
# In a frame's first line: in-use flag (holder's SMT ID + 1), length, sender's SMT ID.
DEF F_INUSE = 0
DEF F_LEN = 4
DEF F_SRC = 8

STATE_FREE = 0
STATE_LIVE = 1
STATE_DEAD = 2


cdef inline Py_ssize_t _lines(Py_ssize_t nbytes) noexcept nogil:
    return (nbytes + LINE - 1) // LINE * LINE


cdef inline uint32_t _pow2(uint32_t n) noexcept nogil:
    cdef uint32_t p = 1
    while p < n:
        p <<= 1
    return p


def _geometry(uint32_t nproc, uint32_t nqueues, uint32_t nframes, uint32_t frame_bytes):
    if nproc < 1 or nproc > 4096 or nqueues < 1 or nqueues > nproc or nframes < 2 or nframes & (nframes - 1) \
            or nframes > 65536 or frame_bytes < 64 or frame_bytes > 1 << 20:
        raise OSError(errno.EINVAL, "SMT: 1 <= M queues <= N processes <= 4096, F frames a power of two 2..65536, "
                                    "frames of 64 bytes to 1 MB")
    cdef Py_ssize_t qlen = _pow2(nframes)            # a queue can hold every frame of its area
    cdef Py_ssize_t map_off = 2 * LINE
    cdef Py_ssize_t proc_off = map_off + _lines(4 * nproc)
    cdef Py_ssize_t area_off = proc_off + LINE * nproc
    cdef Py_ssize_t queue_bytes = 2 * LINE + _lines(8 * qlen)
    cdef Py_ssize_t consumed_off = LINE + nqueues * queue_bytes
    cdef Py_ssize_t frames_off = consumed_off + _lines(8 * nproc)
    cdef Py_ssize_t stride = LINE + _lines(frame_bytes)
    cdef Py_ssize_t area_bytes = frames_off + nframes * stride
    return (qlen, map_off, proc_off, area_off, queue_bytes, consumed_off, frames_off, stride, area_bytes,
            area_off + nproc * area_bytes)


def layout_bytes(nproc, nqueues, nframes, frame_bytes) -> int:
    """Bytes a region for N processes, M queues each, F frames of `frame_bytes` needs."""
    return _geometry(nproc, nqueues, nframes, frame_bytes)[9]


cdef class SmtRegion:
    """The SMT queues in the writable buffer of `obj` (see the module essay).

    ``SmtRegion(obj, nproc, nqueues, nframes, frame_bytes, create=True)`` lays a region
    out (zeroed); ``SmtRegion(obj)`` attaches to one laid out already and takes its
    geometry from it (EINVAL if the buffer holds no region).
    """

    def __cinit__(self, obj, uint32_t nproc=0, uint32_t nqueues=1, uint32_t nframes=0, uint32_t frame_bytes=0,
                  bint create=False):
        cdef Py_buffer pb
        PyObject_GetBuffer(obj, &pb, PyBUF_WRITABLE)
        try:
            self.size = pb.len
            self._base = <unsigned char*> pb.buf
        finally:
            PyBuffer_Release(&pb)                # the owner keeps the memory; we keep the owner
        self._obj = obj
        self.view = memoryview(obj).cast("B")
        cdef unsigned char* b = self._base
        if create:
            g = _geometry(nproc, nqueues, nframes, frame_bytes)
            if g[9] > self.size:
                raise OSError(errno.ENOMEM, f"SMT: the region needs {g[9]} bytes, the buffer has {self.size}")
            memset(b, 0, g[9])
            (<uint32_t*> (b + H_VERSION))[0] = VERSION
            (<uint32_t*> (b + H_NPROC))[0] = nproc
            (<uint32_t*> (b + H_NQUEUES))[0] = nqueues
            (<uint32_t*> (b + H_NFRAMES))[0] = nframes
            (<uint32_t*> (b + H_FRAME_BYTES))[0] = frame_bytes
            (<uint32_t*> (b + H_QLEN))[0] = <uint32_t> g[0]
            dp_store_rel64(<uint64_t*> (b + H_MAGIC), MAGIC)
            dp_store_rel32(<uint32_t*> (b + H_READY), 1)
        elif self.size < 2 * LINE or dp_load_acq64(<uint64_t*> (b + H_MAGIC)) != MAGIC \
                or dp_load_acq32(<uint32_t*> (b + H_READY)) != 1 \
                or (<uint32_t*> (b + H_VERSION))[0] != VERSION:
            raise OSError(errno.EINVAL, "SMT: the buffer holds no shared-memory transport region")
        self.nproc = (<uint32_t*> (b + H_NPROC))[0]
        self.nqueues = (<uint32_t*> (b + H_NQUEUES))[0]
        self.nframes = (<uint32_t*> (b + H_NFRAMES))[0]
        self.frame_bytes = (<uint32_t*> (b + H_FRAME_BYTES))[0]
        g = _geometry(self.nproc, self.nqueues, self.nframes, self.frame_bytes)
        if g[9] > self.size:
            raise OSError(errno.EINVAL, "SMT: the region is larger than the buffer holding it")
        (self.qlen, self._map_off, self._proc_off, self._area_off, self._queue_bytes, self._consumed_off,
         self._frames_off, self._frame_stride, self._area_bytes, _) = g
        self._fmask = self.nframes - 1
        self._qmask = self.qlen - 1

    def close(self):
        """Let go of the buffer (its owner can then be closed)."""
        if self.view is not None:
            self.view.release()
            self.view = None
            self._obj = None
            self._base = NULL

    cdef int _check(self) except -1:
        if self._base == NULL:
            raise OSError(errno.EBADF, "SMT: the region has been closed")
        return 0

    # -- addresses ---------------------------------------------------------------------------

    cdef unsigned char* _area(self, uint32_t rid) noexcept nogil:
        return self._base + self._area_off + rid * self._area_bytes

    cdef unsigned char* _frame(self, uint32_t rid, uint32_t idx) noexcept nogil:
        return self._area(rid) + self._frames_off + idx * self._frame_stride

    cdef unsigned char* _queue(self, uint32_t rid, uint32_t q) noexcept nogil:
        return self._area(rid) + LINE + q * self._queue_bytes

    cdef unsigned char* _proc(self, uint32_t pid) noexcept nogil:
        return self._base + self._proc_off + pid * LINE

    # -- processes -----------------------------------------------------------------------------

    def attach(self, uint32_t instance, uint32_t pid, uint64_t start):
        """Take an SMT ID (fetch-and-increment of the shared counter) for the process at
        `instance` of its job; EADDRINUSE if a live process holds that instance, ENOSPC
        when all N IDs have been handed out."""
        if instance >= self.nproc:
            raise OSError(errno.EINVAL, f"SMT: instance {instance} outside the region's {self.nproc} processes")
        cdef uint32_t* slot = <uint32_t*> (self._base + self._map_off + 4 * instance)
        cdef uint32_t old = dp_load_acq32(slot)
        if old and dp_load_acq32(<uint32_t*> (self._proc(old - 1) + P_STATE)) == STATE_LIVE:
            raise OSError(errno.EADDRINUSE, f"SMT: instance {instance} is held by SMT process {old - 1} "
                                            f"(pid {(<uint32_t*> (self._proc(old - 1) + P_PID))[0]})")
        cdef uint64_t me = dp_fetch_add64(<uint64_t*> (self._base + H_NEXT_ID), 1)
        if me >= self.nproc:
            raise OSError(errno.ENOSPC, f"SMT: all {self.nproc} process IDs of the region are taken")
        cdef unsigned char* p = self._proc(<uint32_t> me)
        (<uint32_t*> (p + P_PID))[0] = pid
        (<uint64_t*> (p + P_START))[0] = start
        (<uint32_t*> (p + P_INSTANCE))[0] = instance
        dp_store_rel32(<uint32_t*> (p + P_PUBLISHING), 0)
        dp_store_rel32(<uint32_t*> (p + P_STATE), STATE_LIVE)
        dp_store_rel32(slot, <uint32_t> me + 1)
        return <int> me

    def detach(self, uint32_t me):
        """The process leaves: no new message can be sent to it."""
        cdef unsigned char* p = self._proc(me)
        cdef uint32_t inst = (<uint32_t*> (p + P_INSTANCE))[0]
        dp_cas32(<uint32_t*> (self._base + self._map_off + 4 * inst), me + 1, 0)
        dp_store_rel32(<uint32_t*> (p + P_STATE), STATE_FREE)

    def process(self, uint32_t sid):
        """(state, pid, start, instance) of SMT process `sid`."""
        if sid >= self.nproc:
            raise OSError(errno.EINVAL, f"SMT: no process {sid}")
        cdef unsigned char* p = self._proc(sid)
        return (dp_load_acq32(<uint32_t*> (p + P_STATE)), (<uint32_t*> (p + P_PID))[0],
                (<uint64_t*> (p + P_START))[0], (<uint32_t*> (p + P_INSTANCE))[0])

    def ids_handed_out(self):
        return min(dp_load_acq64(<uint64_t*> (self._base + H_NEXT_ID)), self.nproc)

    # -- send (FM-C10) ---------------------------------------------------------------------------

    cpdef int lookup(self, uint32_t instance):
        """Step 1: the SMT ID -- the receiver area -- of the process at `instance`, or -1."""
        self._check()
        if instance >= self.nproc:
            return -1
        cdef uint32_t v = dp_load_acq32(<uint32_t*> (self._base + self._map_off + 4 * instance))
        if v == 0 or dp_load_acq32(<uint32_t*> (self._proc(v - 1) + P_STATE)) != STATE_LIVE:
            return -1
        return <int> v - 1

    cpdef int claim(self, uint32_t rid, uint32_t me):
        """Steps 2-3: a frame of `rid`'s free list for sender `me`, or -1 if none is free.
        `last_tries` counts the frames tried (each one fetch-and-increment and one
        test-and-set)."""
        self._check()
        cdef unsigned char* area = self._area(rid)
        cdef uint64_t h
        cdef uint32_t idx
        cdef int tries = 0
        with nogil:
            while tries < <int> (2 * self.nframes):
                tries += 1
                h = dp_fetch_add64(<uint64_t*> area, 1)                                   # (2)
                idx = <uint32_t> h & self._fmask
                if dp_cas32(<uint32_t*> (self._frame(rid, idx) + F_INUSE), 0, me + 1):   # (3)
                    break
                idx = 0xFFFFFFFF
        self.last_tries = tries
        return -1 if idx == 0xFFFFFFFF else <int> idx

    cpdef unclaim(self, uint32_t rid, uint32_t me, uint32_t idx):
        """Give back a frame `me` claimed and never published (its in-use flag names `me`)."""
        self._check()
        dp_cas32(<uint32_t*> (self._frame(rid, idx) + F_INUSE), me + 1, 0)

    cpdef Py_ssize_t frame_offset(self, uint32_t rid, uint32_t idx):
        """Offset in `view` of frame `idx`'s data (step 4 copies there)."""
        return <Py_ssize_t> (self._frame(rid, idx) - self._base) + LINE

    cpdef publish(self, uint32_t rid, uint32_t me, uint32_t idx, uint32_t nbytes):
        """Steps 5-6: hand the filled frame over on queue (me mod M) of `rid`."""
        self._check()
        cdef unsigned char* f = self._frame(rid, idx)
        cdef uint32_t q = me % self.nqueues
        cdef unsigned char* qp = self._queue(rid, q)
        cdef uint32_t* publishing = <uint32_t*> (self._proc(me) + P_PUBLISHING)
        cdef uint64_t t
        if nbytes > self.frame_bytes:
            raise OSError(errno.EMSGSIZE, f"SMT: {nbytes} bytes do not fit a {self.frame_bytes}-byte frame")
        (<uint32_t*> (f + F_LEN))[0] = nbytes
        (<uint32_t*> (f + F_SRC))[0] = me
        with nogil:
            dp_store_rel32(publishing, rid * self.nqueues + q + 1)                     # intent, for reclaim
            t = dp_fetch_add64(<uint64_t*> (qp + LINE), 1)                             # (5) tail
            dp_store_rel64(<uint64_t*> (qp + 2 * LINE + 8 * (t & self._qmask)), <uint64_t> idx + 1)   # (6)
            dp_store_rel32(publishing, 0)

    cpdef uint64_t consumed(self, uint32_t rid, uint32_t sender):
        """Frames from `sender` that receiver `rid` has consumed (its credits back)."""
        self._check()
        return dp_load_acq64(<uint64_t*> (self._area(rid) + self._consumed_off + 8 * sender))

    # -- receive (FM-C11) -------------------------------------------------------------------------

    cpdef int poll(self, uint32_t me):
        """Step 1 over my M queues, one after another: the frame at a queue's head if
        it is published and in use (`last_queue` says which queue), else -1."""
        self._check()
        cdef uint32_t k, q
        cdef unsigned char* qp
        cdef uint64_t h, e
        for k in range(self.nqueues):
            q = (self._rr + k) % self.nqueues
            qp = self._queue(me, q)
            h = dp_load_rlx64(<uint64_t*> qp)
            e = dp_load_acq64(<uint64_t*> (qp + 2 * LINE + 8 * (h & self._qmask)))
            if e and e <= self.nframes and dp_load_acq32(<uint32_t*> (self._frame(me, <uint32_t> e - 1) + F_INUSE)):
                self.last_queue = q
                self._rr = (q + 1) % self.nqueues
                return <int> e - 1
        return -1

    cpdef take(self, uint32_t me, uint32_t q):
        """Step 2: fetch-and-increment the head of my queue `q` (and empty the entry it passed)."""
        self._check()
        cdef unsigned char* qp = self._queue(me, q)
        cdef uint64_t h = dp_fetch_add64(<uint64_t*> qp, 1)
        dp_store_rlx64(<uint64_t*> (qp + 2 * LINE + 8 * (h & self._qmask)), 0)

    cpdef uint32_t frame_len(self, uint32_t rid, uint32_t idx):
        return (<uint32_t*> (self._frame(rid, idx) + F_LEN))[0]

    cpdef uint32_t frame_src(self, uint32_t rid, uint32_t idx):
        return (<uint32_t*> (self._frame(rid, idx) + F_SRC))[0]

    cpdef release(self, uint32_t me, uint32_t idx):
        """Step 4: clear the frame's in-use flag; its sender has one credit back."""
        self._check()
        cdef unsigned char* f = self._frame(me, idx)
        cdef uint32_t src = (<uint32_t*> (f + F_SRC))[0]
        cdef uint64_t* c
        dp_store_rel32(<uint32_t*> (f + F_INUSE), 0)
        if src < self.nproc:
            c = <uint64_t*> (self._area(me) + self._consumed_off + 8 * src)
            dp_store_rel64(c, dp_load_rlx64(c) + 1)              # only the receiver writes it

    def fill(self, uint32_t rid, uint32_t idx, Py_ssize_t at, const unsigned char[::1] data):
        """Step 4 of a send: copy `data` into the frame at offset `at`."""
        cdef Py_ssize_t n = data.shape[0]
        if at < 0 or at + n > self.frame_bytes:
            raise OSError(errno.EMSGSIZE, f"SMT: {at}+{n} bytes do not fit a {self.frame_bytes}-byte frame")
        if n:
            memcpy(self._frame(rid, idx) + LINE + at, &data[0], n)

    def copy_out(self, uint32_t rid, uint32_t idx, Py_ssize_t at, Py_ssize_t n):
        """Step 3 of a receive: `n` bytes of the frame from offset `at`."""
        if at < 0 or n < 0 or at + n > self.frame_bytes:
            raise OSError(errno.EINVAL, "SMT: read outside the frame")
        return PyBytes_FromStringAndSize(<char*> (self._frame(rid, idx) + LINE + at), n)

    # -- faults ----------------------------------------------------------------------------------

    def queue_state(self, uint32_t rid, uint32_t q):
        """(head, tail, entry at head) of queue `q` of `rid`."""
        cdef unsigned char* qp = self._queue(rid, q)
        cdef uint64_t h = dp_load_acq64(<uint64_t*> qp)
        return h, dp_load_acq64(<uint64_t*> (qp + LINE)), dp_load_acq64(<uint64_t*> (qp + 2 * LINE + 8 * (h & self._qmask)))

    def frames_held_by(self, uint32_t rid, uint32_t sid):
        """Frames of `rid`'s area whose in-use flag names `sid`."""
        cdef uint32_t i
        return [i for i in range(self.nframes) if dp_load_acq32(<uint32_t*> (self._frame(rid, i) + F_INUSE)) == sid + 1]

    def mark_dead(self, uint32_t sid):
        """Record that process `sid` has died (whoever notices first); its instance is
        free for a new process."""
        cdef unsigned char* p = self._proc(sid)
        cdef uint32_t inst
        if dp_cas32(<uint32_t*> (p + P_STATE), STATE_LIVE, STATE_DEAD):
            inst = (<uint32_t*> (p + P_INSTANCE))[0]
            dp_cas32(<uint32_t*> (self._base + self._map_off + 4 * inst), sid + 1, 0)
            return True
        return False

    def reclaim(self, uint32_t me, uint32_t dead):
        """Give back, in my area, what dead process `dead` held: frames it claimed and
        never published, and a queue position it fetched (step 5) and never wrote
        (step 6). Returns (frames reclaimed, positions skipped); nothing unless `dead`
        has been marked dead (`mark_dead`): a live one may still complete its steps."""
        cdef uint32_t i, q, k
        cdef unsigned char* qp
        cdef uint64_t h, t, e, pos
        cdef uint32_t pub = dp_load_acq32(<uint32_t*> (self._proc(dead) + P_PUBLISHING))
        cdef int frames = 0, holes = 0
        if dead >= self.nproc or dp_load_acq32(<uint32_t*> (self._proc(dead) + P_STATE)) != STATE_DEAD:
            return 0, 0                           # a live process may still complete its steps
        published = set()
        for q in range(self.nqueues):
            qp = self._queue(me, q)
            h = dp_load_acq64(<uint64_t*> qp)
            t = dp_load_acq64(<uint64_t*> (qp + LINE))
            pos = h
            while pos < t:
                e = dp_load_acq64(<uint64_t*> (qp + 2 * LINE + 8 * (pos & self._qmask)))
                if e:
                    published.add(e - 1)
                pos += 1
        for i in range(self.nframes):
            if dp_load_acq32(<uint32_t*> (self._frame(me, i) + F_INUSE)) == dead + 1 and i not in published:
                dp_store_rel32(<uint32_t*> (self._frame(me, i) + F_INUSE), 0)
                frames += 1
        if pub and (pub - 1) // self.nqueues == me:
            q = (pub - 1) % self.nqueues
            qp = self._queue(me, q)
            h = dp_load_acq64(<uint64_t*> qp)
            t = dp_load_acq64(<uint64_t*> (qp + LINE))
            if h < t and dp_load_acq64(<uint64_t*> (qp + 2 * LINE + 8 * (h & self._qmask))) == 0 \
                    and not self._someone_publishing(me, q, dead):
                self.take(me, q)                  # the dead process's unwritten position
                holes += 1
            dp_store_rel32(<uint32_t*> (self._proc(dead) + P_PUBLISHING), 0)
        return frames, holes

    def fault_fetch_tail_only(self, uint32_t rid, uint32_t me):
        """Fault injection: steps 5 without 6 -- what a sender killed between them leaves
        in `rid`'s queue (its intent marked, a tail position fetched, no index written)."""
        cdef uint32_t q = me % self.nqueues
        dp_store_rel32(<uint32_t*> (self._proc(me) + P_PUBLISHING), rid * self.nqueues + q + 1)
        dp_fetch_add64(<uint64_t*> (self._queue(rid, q) + LINE), 1)

    def _someone_publishing(self, uint32_t me, uint32_t q, uint32_t dead):
        """Is a live process between steps 5 and 6 on my queue `q` (its position may be the hole)?"""
        cdef uint32_t s
        for s in range(self.ids_handed_out()):
            if s != dead and dp_load_acq32(<uint32_t*> (self._proc(s) + P_STATE)) == STATE_LIVE \
                    and dp_load_acq32(<uint32_t*> (self._proc(s) + P_PUBLISHING)) == me * self.nqueues + q + 1:
                return True
        return False
