# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Single-producer / single-consumer ring of frames in POSIX shared memory.

Layout of the segment (all offsets in bytes, native byte order)::

    0     line 0   magic, version, slots, slot_bytes, header_bytes  (read-only after create)
    64    line 1   head      producer index (written by the producer only)
    128   line 2   tail      consumer index (written by the consumer only)
    192   line 3   receiver_sleeping flag (set by consumer, cleared by either)
    256   line 4   sent, dropped_full, wakeups   (producer-owned counters)
    320   line 5   received                      (consumer-owned counter)
    384   4 lines  NUL-terminated path of the doorbell FIFO
    640   slots * slot_bytes; slot i = [u32 length][frame bytes ...]

Indices are free-running 64-bit counters; slot = index & (slots - 1).
The producer publishes a slot with a release store of ``head``; the consumer
frees it with a release store of ``tail``.

Sleep/wake ("polling watchdog") handshake -- a Dekker pair of seq_cst fences:

    consumer: sleeping = 1; fence; if head != tail: sleeping = 0 (don't sleep)
    producer: head = h + 1 (release); fence; if sleeping and xchg(sleeping, 0):
              write one byte to the doorbell FIFO

At least one side observes the other's store, so a frame can never be
published while the consumer blocks on the doorbell without the doorbell
being written.

Two ways to make one: by name (:meth:`ShmRing.create` / :meth:`ShmRing.attach`: a
POSIX shared-memory segment and a FIFO doorbell in /dev/shm, for processes that find
each other by name), or over file descriptors (:meth:`ShmRing.over_fd`: an anonymous
memory file and an eventfd doorbell, handed from process to process over a UNIX socket
-- nothing appears in /dev/shm, and nothing is left there if a process dies).
"""

cimport cython
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy, memset, strlen
from libc.errno cimport errno, EINTR, EAGAIN, ECONNREFUSED
from posix.unistd cimport read, write, close as c_close
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release,
                             PyBUF_SIMPLE, PyBUF_WRITABLE)
from kernelsim._atomics cimport (dp_bump64, dp_fence_seq_cst, dp_load_acq64, dp_load_rlx32, dp_load_rlx64,
                                 dp_store_rel64, dp_store_rlx32, dp_xchg32)

import os
import secrets
import stat as _stat
import sys
import threading
from multiprocessing import shared_memory as _shared_memory
from multiprocessing import resource_tracker as _resource_tracker

try:
    import _posixshmem
except ImportError:  # pragma: no cover - non-POSIX
    _posixshmem = None


cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>

    #define DP_RING_MAGIC   0x31474E5248535044ULL  /* "DPSHRNG1" */
    #define DP_RING_VERSION 1u
    #define DP_LINE         64
    #define DP_PATH_BYTES   256

    typedef struct {
        /* line 0: geometry, immutable after creation */
        uint64_t magic;
        uint32_t version;
        uint32_t slots;
        uint32_t slot_bytes;
        uint32_t header_bytes;
        uint8_t  _pad0[DP_LINE - 24];
        /* line 1: producer index */
        uint64_t head;
        uint8_t  _pad1[DP_LINE - 8];
        /* line 2: consumer index */
        uint64_t tail;
        uint8_t  _pad2[DP_LINE - 8];
        /* line 3: sleep flag */
        uint32_t receiver_sleeping;
        uint8_t  _pad3[DP_LINE - 4];
        /* line 4: producer-owned counters */
        uint64_t sent;
        uint64_t dropped_full;
        uint64_t wakeups;
        uint8_t  _pad4[DP_LINE - 24];
        /* line 5: consumer-owned counters */
        uint64_t received;
        uint8_t  _pad5[DP_LINE - 8];
        /* lines 6..9: doorbell path */
        char     bell_path[DP_PATH_BYTES];
    } dp_ring_hdr;

    _Static_assert(offsetof(dp_ring_hdr, head) == 1 * DP_LINE, "head line");
    _Static_assert(offsetof(dp_ring_hdr, tail) == 2 * DP_LINE, "tail line");
    _Static_assert(offsetof(dp_ring_hdr, receiver_sleeping) == 3 * DP_LINE, "sleep line");
    _Static_assert(offsetof(dp_ring_hdr, sent) == 4 * DP_LINE, "producer counters line");
    _Static_assert(offsetof(dp_ring_hdr, received) == 5 * DP_LINE, "consumer counters line");
    _Static_assert(sizeof(dp_ring_hdr) == 10 * DP_LINE, "header size");

    """
    ctypedef struct dp_ring_hdr:
        uint64_t magic
        uint32_t version
        uint32_t slots
        uint32_t slot_bytes
        uint32_t header_bytes
        uint64_t head
        uint64_t tail
        uint32_t receiver_sleeping
        uint64_t sent
        uint64_t dropped_full
        uint64_t wakeups
        uint64_t received
        char bell_path[256]

    uint64_t DP_RING_MAGIC
    uint32_t DP_RING_VERSION
    int DP_PATH_BYTES



cdef extern from "<errno.h>":
    int EWOULDBLOCK


cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    struct sockaddr:
        pass
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    ssize_t recvfrom(int fd, void *buf, size_t n, int flags, sockaddr *addr, socklen_t *addrlen)
    int MSG_PEEK
    int MSG_DONTWAIT
    int MSG_TRUNC


cdef extern from "<linux/if_packet.h>" nogil:
    struct sockaddr_ll:
        unsigned char sll_pkttype
    int PACKET_OUTGOING


HEADER_BYTES = sizeof(dp_ring_hdr)


def ring_bytes(Py_ssize_t slots, Py_ssize_t slot_bytes):
    """Bytes a ring of `slots` slots of `slot_bytes` bytes takes (header included)."""
    return sizeof(dp_ring_hdr) + slots * slot_bytes


class _FdMapping:
    """A shared mapping of a memory file, shaped like multiprocessing's SharedMemory
    (``buf``, ``size``, ``close``) so a ring maps either the same way."""

    def __init__(self, fd, size):
        import mmap
        self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.buf = memoryview(self._mm)
        self.size = size

    def close(self):
        if self.buf is not None:
            self.buf.release()
            self.buf = None
            self._mm.close()
DEFAULT_SLOTS = 256
DEFAULT_SLOT_BYTES = 2048
MAX_SLOT_BYTES = 1 << 24

cdef object _TOKEN = object()
_track_lock = threading.Lock()


def _doorbell_dir():
    """Directory for doorbell FIFOs: /dev/shm when present (tmpfs, same
    lifetime as the segments), else the temp dir.  The path actually used is
    stored in the segment header, so attachers never recompute it."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    import tempfile
    return tempfile.gettempdir()


def _check_name(name):
    if not isinstance(name, str):
        raise TypeError("ring name must be a str")
    if name.startswith("/"):
        name = name[1:]
    if not name or "/" in name or "\0" in name or len(name) > 200:
        raise ValueError(f"invalid shared-memory ring name {name!r}")
    return name


def _attach_untracked(name):
    """Open an existing segment without registering it with this process's
    multiprocessing resource tracker (which would otherwise unlink the
    segment -- owned by another process -- when this process exits)."""
    if sys.version_info >= (3, 13):
        return _shared_memory.SharedMemory(name=name, track=False)
    full = "/" + name
    with _track_lock:
        orig = _resource_tracker.register

        def register(rname, rtype, _orig=orig):
            if rname == full and rtype == "shared_memory":
                return
            _orig(rname, rtype)

        _resource_tracker.register = register
        try:
            return _shared_memory.SharedMemory(name=name, create=False)
        finally:
            _resource_tracker.register = orig


cdef inline dp_ring_hdr* _hdr(ShmRing r) noexcept nogil:
    return <dp_ring_hdr*>r._base


cdef object _closed_error(ShmRing r):
    return ValueError(f"ShmRing {r._name!r} is closed")


@cython.final
cdef class ShmRing:
    """SPSC frame ring in POSIX shared memory.

    Build with :meth:`create` (owner; call :meth:`unlink` when done) or
    :meth:`attach` (by name, from any process).  One process/thread produces
    (``send``), one consumes (``recv_into``/``pending``/sleep methods).
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("use ShmRing.create(...) or ShmRing.attach(name)")
        self._bell_fd = -1
        self._bell_eventfd = False
        self._have_view = False
        self._base = NULL
        self._data = NULL

    def __dealloc__(self):
        self._release()

    cdef void _release(self):
        if self._have_view:
            self._base = NULL
            self._data = NULL
            self._have_view = False
            PyBuffer_Release(&self._view)
        if self._bell_fd >= 0:
            c_close(self._bell_fd)
            self._bell_fd = -1

    cdef _map(self, shm, bint init, uint32_t slots, uint32_t slot_bytes, bell_path):
        """Take a buffer export of shm.buf and validate/initialise the header."""
        cdef dp_ring_hdr* h
        cdef bytes bpath
        cdef Py_ssize_t size = shm.size
        if size < <Py_ssize_t>sizeof(dp_ring_hdr):
            raise ValueError("shared memory segment too small for a ShmRing")
        PyObject_GetBuffer(shm.buf, &self._view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        self._have_view = True
        self._shm = shm
        self._base = <unsigned char*>self._view.buf
        h = _hdr(self)
        if bell_path is None:
            bell_path = ""
        if init:
            bpath = os.fsencode(bell_path)
            if len(bpath) >= DP_PATH_BYTES:
                raise ValueError("doorbell path too long")
            memset(self._base, 0, sizeof(dp_ring_hdr))
            h.version = DP_RING_VERSION
            h.slots = slots
            h.slot_bytes = slot_bytes
            h.header_bytes = sizeof(dp_ring_hdr)
            memcpy(h.bell_path, <const char*>bpath, len(bpath))
            # publish the initialised header last
            dp_store_rel64(&h.magic, DP_RING_MAGIC)
        else:
            if dp_load_acq64(&h.magic) != DP_RING_MAGIC:
                raise ValueError(f"{self._name!r} is not an initialised ShmRing segment")
            if h.version != DP_RING_VERSION:
                raise ValueError(f"ShmRing version mismatch ({h.version} != {DP_RING_VERSION})")
            slots = h.slots
            slot_bytes = h.slot_bytes
            if (slots == 0 or (slots & (slots - 1)) != 0 or slot_bytes < 8
                    or slot_bytes > MAX_SLOT_BYTES or h.header_bytes != sizeof(dp_ring_hdr)):
                raise ValueError("corrupt ShmRing header")
            if <Py_ssize_t>sizeof(dp_ring_hdr) + <Py_ssize_t>slots * slot_bytes > size:
                raise ValueError("ShmRing segment smaller than its header claims")
            h.bell_path[DP_PATH_BYTES - 1] = 0
            bell_path = os.fsdecode(h.bell_path[:strlen(h.bell_path)])
        self._nslots = slots
        self._mask = slots - 1
        self._slot_bytes = slot_bytes
        self._max_frame = slot_bytes - 4
        self._data = self._base + sizeof(dp_ring_hdr)
        self._bell_path = bell_path

    cdef _open_bell(self):
        fd = os.open(self._bell_path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not _stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise ValueError(f"doorbell {self._bell_path!r} is not a FIFO")
        except BaseException:
            os.close(fd)
            raise
        self._bell_fd = fd

    # ------------------------------------------------------------ factories

    @staticmethod
    def create(name=None, Py_ssize_t slots=DEFAULT_SLOTS,
               Py_ssize_t slot_bytes=DEFAULT_SLOT_BYTES):
        """Create a new ring segment (and its doorbell FIFO).

        ``name=None`` generates a unique name.  ``slots`` must be a power of
        two; each slot holds one frame of at most ``slot_bytes - 4`` bytes.
        """
        if slots < 1 or slots > (1 << 24) or (slots & (slots - 1)) != 0:
            raise ValueError("slots must be a power of two in [1, 2**24]")
        if slot_bytes < 8 or slot_bytes > MAX_SLOT_BYTES:
            raise ValueError(f"slot_bytes must be in [8, {MAX_SLOT_BYTES}]")
        size = sizeof(dp_ring_hdr) + slots * slot_bytes
        generated = name is None
        while True:
            if generated:
                name = f"dpring_{os.getpid()}_{secrets.token_hex(6)}"
            name = _check_name(name)
            try:
                shm = _shared_memory.SharedMemory(name=name, create=True, size=size)
            except FileExistsError:
                if generated:
                    continue
                raise
            break
        cdef ShmRing self = ShmRing.__new__(ShmRing, _TOKEN)
        self._name = name
        self._creator = True
        self._tracked = True
        bell_path = os.path.join(_doorbell_dir(), name + ".dpbell")
        try:
            # The segment name was free (O_EXCL), so a FIFO of that name is a
            # leftover from a crashed owner: replace it.
            try:
                os.unlink(bell_path)
            except FileNotFoundError:
                pass
            os.mkfifo(bell_path, 0o600)
            self._map(shm, True, <uint32_t>slots, <uint32_t>slot_bytes, bell_path)
            self._open_bell()
        except BaseException:
            self._release()
            shm.close()
            shm.unlink()
            try:
                os.unlink(bell_path)
            except FileNotFoundError:
                pass
            raise
        return self

    @staticmethod
    def attach(name):
        """Attach to an existing ring by name (from any process)."""
        name = _check_name(name)
        shm = _attach_untracked(name)
        cdef ShmRing self = ShmRing.__new__(ShmRing, _TOKEN)
        self._name = name
        self._creator = False
        self._tracked = False
        try:
            self._map(shm, False, 0, 0, None)
            self._open_bell()
        except BaseException:
            self._release()
            shm.close()
            raise
        return self

    @staticmethod
    def over_fd(int fd, int bell_fd, bint init, Py_ssize_t slots=DEFAULT_SLOTS,
                Py_ssize_t slot_bytes=DEFAULT_SLOT_BYTES):
        """A ring in the memory file `fd` (at least ``ring_bytes(slots, slot_bytes)`` long)
        whose doorbell is the eventfd `bell_fd`; both are duplicated, the caller keeps its own.

        ``init=True`` lays the ring out (its maker); ``init=False`` maps one made by
        another process, geometry read from the header."""
        cdef ShmRing self = ShmRing.__new__(ShmRing, _TOKEN)
        cdef Py_ssize_t size
        if init:
            if slots < 1 or slots > (1 << 24) or (slots & (slots - 1)) != 0:
                raise ValueError("slots must be a power of two in [1, 2**24]")
            if slot_bytes < 8 or slot_bytes > MAX_SLOT_BYTES:
                raise ValueError(f"slot_bytes must be in [8, {MAX_SLOT_BYTES}]")
        size = os.fstat(fd).st_size
        if size < <Py_ssize_t>sizeof(dp_ring_hdr) or (init and size < ring_bytes(slots, slot_bytes)):
            raise ValueError(f"a memory file of {size} bytes cannot hold this ring")
        self._name = None
        self._creator = init
        self._tracked = False
        shm = _FdMapping(fd, size)
        try:
            self._map(shm, init, <uint32_t>slots, <uint32_t>slot_bytes, "")
            self._bell_fd = os.dup(bell_fd)
            self._bell_eventfd = True
        except BaseException:
            self._release()
            shm.close()
            raise
        return self

    def __reduce__(self):
        # Pickling (e.g. to a spawned process) re-attaches by name.
        if self._name is None:
            raise TypeError("a ring made over a file descriptor is passed by its descriptors, not pickled")
        return (ShmRing.attach, (self._name,))

    # ------------------------------------------------------------ properties

    @property
    def name(self):
        return self._name

    @property
    def slots(self):
        return self._nslots

    @property
    def slot_bytes(self):
        return self._slot_bytes

    @property
    def max_frame(self):
        return self._max_frame

    @property
    def doorbell_path(self):
        return self._bell_path

    @property
    def closed(self):
        return self._base == NULL

    @property
    def creator(self):
        return self._creator

    def __repr__(self):
        state = "closed" if self._base == NULL else "open"
        return (f"<ShmRing {self._name!r} slots={self._nslots} "
                f"slot_bytes={self._slot_bytes} {state}>")

    # ------------------------------------------------------------ raw (C) API

    cdef int send_raw(self, const unsigned char* data, size_t n) noexcept nogil:
        return self._publish(data, n, True)

    cdef int _publish(self, const unsigned char* data, size_t n, bint wake) noexcept nogil:
        return self._publish2(data, n, NULL, 0, wake)

    cdef int _publish2(self, const unsigned char* data, size_t n, const unsigned char* more, size_t m,
                       bint wake) noexcept nogil:
        cdef dp_ring_hdr* h = _hdr(self)
        cdef uint64_t head, tail
        cdef uint32_t n32
        cdef unsigned char* slot
        if h == NULL:
            return RING_CLOSED
        if n + m > self._max_frame:
            return RING_TOO_LARGE
        head = dp_load_rlx64(&h.head)          # own index
        tail = dp_load_acq64(&h.tail)          # slot reuse ordered after consumer's copy-out
        if head - tail >= self._nslots:
            dp_bump64(&h.dropped_full)
            return RING_FULL
        slot = self._data + (head & self._mask) * self._slot_bytes
        n32 = <uint32_t>(n + m)
        memcpy(slot, &n32, 4)
        if n:
            memcpy(slot + 4, data, n)
        if m:
            memcpy(slot + 4 + n, more, m)
        dp_bump64(&h.sent)                     # counted before publishing: whoever
        dp_store_rel64(&h.head, head + 1)      # sees the frame sees the count
        dp_fence_seq_cst()                     # order head store before sleeping load
        if wake and dp_load_rlx32(&h.receiver_sleeping) and dp_xchg32(&h.receiver_sleeping, 0):
            self._ring_doorbell()
        return RING_OK

    cdef void _ring_doorbell(self) noexcept nogil:
        cdef dp_ring_hdr* h = _hdr(self)
        cdef unsigned char one = 1
        cdef uint64_t eight = 1
        cdef ssize_t r
        dp_bump64(&h.wakeups)                  # counted before the consumer can wake
        while True:
            if self._bell_eventfd:
                r = write(self._bell_fd, &eight, 8)
            else:
                r = write(self._bell_fd, &one, 1)
            if r < 0 and errno == EINTR:
                continue
            break
        # r < 0 with EAGAIN: the FIFO already holds >= 64 KiB of unread
        # doorbell bytes, so the consumer will wake anyway.

    cdef Py_ssize_t recv_raw(self, unsigned char* buf, size_t cap) noexcept nogil:
        cdef dp_ring_hdr* h = _hdr(self)
        cdef uint64_t head, tail
        cdef uint32_t n32
        cdef unsigned char* slot
        if h == NULL:
            return RING_CLOSED
        tail = dp_load_rlx64(&h.tail)          # own index
        head = dp_load_acq64(&h.head)          # frame contents visible after this
        if head == tail:
            return RING_EMPTY
        slot = self._data + (tail & self._mask) * self._slot_bytes
        memcpy(&n32, slot, 4)
        if n32 > self._max_frame:
            return RING_CORRUPT
        if n32 > cap:
            return RING_BUF_SMALL
        if n32:
            memcpy(buf, slot + 4, n32)
        dp_bump64(&h.received)
        dp_store_rel64(&h.tail, tail + 1)      # hand the slot back
        return n32

    cdef bint pending_raw(self) noexcept nogil:
        cdef dp_ring_hdr* h = _hdr(self)
        if h == NULL:
            return False
        return dp_load_acq64(&h.head) != dp_load_rlx64(&h.tail)

    cdef int prepare_to_sleep_raw(self) noexcept nogil:
        cdef dp_ring_hdr* h = _hdr(self)
        if h == NULL:
            return RING_CLOSED
        dp_store_rlx32(&h.receiver_sleeping, 1)
        dp_fence_seq_cst()                     # order sleeping store before head load
        if dp_load_acq64(&h.head) != dp_load_rlx64(&h.tail):
            dp_store_rlx32(&h.receiver_sleeping, 0)
            return 0
        return 1

    cdef void cancel_sleep_raw(self) noexcept nogil:
        cdef dp_ring_hdr* h = _hdr(self)
        if h != NULL:
            dp_store_rlx32(&h.receiver_sleeping, 0)

    # ------------------------------------------------------------ Python API

    def send(self, frame, bint wake=True):
        """send(frame: bytes-like, C-contiguous, wake=True) -> bool

        Copy one frame into the next slot.  False (and dropped_full += 1) if
        the ring is full; ValueError if len(frame) > max_frame.  wake=False
        leaves a sleeping consumer asleep (no doorbell): for entries that can
        wait until it wakes for something else -- a doorbell costs a system
        call here and, on a busy core, a context switch.

        The buffer is borrowed with PyObject_GetBuffer (a raw pointer; no
        Python object is created per frame -- a typed-memoryview argument
        would allocate one per call and cost ~3x more)."""
        cdef Py_buffer view
        cdef int r
        cdef Py_ssize_t n
        PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
        n = view.len
        r = self._publish(<const unsigned char*>view.buf, <size_t>n, wake)
        PyBuffer_Release(&view)
        if r == RING_OK:
            return True
        if r == RING_FULL:
            return False
        if r == RING_TOO_LARGE:
            raise ValueError(f"frame of {n} bytes exceeds max_frame={self._max_frame}")
        raise _closed_error(self)

    def send2(self, head, body, bint wake=True):
        """send2(head, body, wake=True) -> bool

        One frame made of two parts, `head` then `body` (bytes-like, C-contiguous),
        copied straight into the slot: a caller that prefixes a header to a payload
        (a call-gate entry: gate name, then the message) builds no joined copy first.
        Otherwise as `send`."""
        cdef Py_buffer hv, bv
        cdef int r
        cdef Py_ssize_t n
        PyObject_GetBuffer(head, &hv, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(body, &bv, PyBUF_SIMPLE)
        except BaseException:
            PyBuffer_Release(&hv)
            raise
        n = hv.len + bv.len
        r = self._publish2(<const unsigned char*>hv.buf, <size_t>hv.len,
                           <const unsigned char*>bv.buf, <size_t>bv.len, wake)
        PyBuffer_Release(&bv)
        PyBuffer_Release(&hv)
        if r == RING_OK:
            return True
        if r == RING_FULL:
            return False
        if r == RING_TOO_LARGE:
            raise ValueError(f"frame of {n} bytes exceeds max_frame={self._max_frame}")
        raise _closed_error(self)

    def recv_into(self, buf):
        """recv_into(buf: writable bytes-like, C-contiguous) -> int

        Copy the next frame into buf; return its length, or -1 if empty.
        ValueError (and the frame stays in the ring) if buf is too small."""
        cdef Py_buffer view
        cdef Py_ssize_t r, cap
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        cap = view.len
        r = self.recv_raw(<unsigned char*>view.buf, <size_t>cap)
        PyBuffer_Release(&view)
        if r >= -1:
            return r
        if r == RING_BUF_SMALL:
            raise ValueError(f"buffer of {cap} bytes too small for the next frame "
                             f"({self.peek_len()} bytes)")
        if r == RING_CORRUPT:
            raise RuntimeError(f"ShmRing {self._name!r}: corrupt slot length")
        raise _closed_error(self)

    def peek_len(self):
        """Length of the next frame without consuming it, -1 if empty."""
        cdef dp_ring_hdr* h = _hdr(self)
        cdef uint64_t tail
        cdef uint32_t n32
        if h == NULL:
            raise _closed_error(self)
        tail = dp_load_rlx64(&h.tail)
        if dp_load_acq64(&h.head) == tail:
            return -1
        memcpy(&n32, self._data + (tail & self._mask) * self._slot_bytes, 4)
        return n32

    def pending(self):
        """True if a frame is waiting (one acquire load)."""
        if self._base == NULL:
            raise _closed_error(self)
        return self.pending_raw()

    def prepare_to_sleep(self):
        """Announce that the consumer is about to block on the doorbell.

        True: the ring is still empty and the producer will ring the doorbell
        for the next frame -- block on doorbell_fileno().  False: a frame is
        already pending (the flag is withdrawn again); don't block."""
        cdef int r = self.prepare_to_sleep_raw()
        if r == RING_CLOSED:
            raise _closed_error(self)
        return r == 1

    def cancel_sleep(self):
        """Withdraw a prepare_to_sleep() (e.g. on timeout or cancellation)."""
        self.cancel_sleep_raw()

    def doorbell_fileno(self):
        if self._bell_fd < 0:
            raise _closed_error(self)
        return self._bell_fd

    def drain_doorbell(self):
        """Read (non-blocking) every pending doorbell byte; return how many."""
        cdef unsigned char junk[256]
        cdef ssize_t r
        cdef Py_ssize_t total = 0
        if self._bell_fd < 0:
            raise _closed_error(self)
        with nogil:
            while True:
                r = read(self._bell_fd, junk, sizeof(junk))
                if r > 0:
                    total += r
                    if r < <ssize_t>sizeof(junk):
                        break
                    continue
                if r < 0 and errno == EINTR:
                    continue
                break
        return total

    # aliases so a bare ShmRing satisfies the port interface used by wait_frame
    def fileno(self):
        return self.doorbell_fileno()

    def drain(self):
        self.drain_doorbell()

    def stats(self):
        cdef dp_ring_hdr* h = _hdr(self)
        if h == NULL:
            raise _closed_error(self)
        return {
            "sent": dp_load_rlx64(&h.sent),
            "received": dp_load_rlx64(&h.received),
            "dropped_full": dp_load_rlx64(&h.dropped_full),
            "wakeups": dp_load_rlx64(&h.wakeups),
            "depth": dp_load_acq64(&h.head) - dp_load_acq64(&h.tail),
            "receiver_sleeping": bool(dp_load_rlx32(&h.receiver_sleeping)),
        }

    def close(self):
        """Detach this process from the segment (idempotent)."""
        self._release()
        if self._shm is not None:
            self._shm.close()

    def unlink(self):
        """Remove the segment name and the doorbell FIFO (idempotent).

        Mappings that are still open keep working until closed."""
        if self._name is None:
            return
        if self._tracked:
            self._tracked = False
            try:
                self._shm.unlink()      # also unregisters from the resource tracker
            except FileNotFoundError:
                _resource_tracker.unregister("/" + self._name, "shared_memory")
        elif _posixshmem is not None:
            try:
                _posixshmem.shm_unlink("/" + self._name)
            except FileNotFoundError:
                pass
        if self._bell_path:
            try:
                os.unlink(self._bell_path)
            except FileNotFoundError:
                pass


# ---------------------------------------------------------------- datagrams

def dgram_pending(int fd):
    """True if a datagram (possibly empty) is queued on socket fd.

    One recv(MSG_PEEK | MSG_DONTWAIT) of zero bytes; no exception on empty."""
    cdef unsigned char c
    cdef ssize_t r
    with nogil:
        r = recv(fd, &c, 0, MSG_PEEK | MSG_DONTWAIT)
    return r >= 0


def dgram_recv_into(int fd, buf):
    """Receive one datagram into buf (writable bytes-like) without blocking.

    Returns its length, or -1 if none is queued (or a queued ICMP error such
    as ECONNREFUSED was consumed).  If the datagram was longer than buf it is
    lost (datagram semantics) and ValueError is raised."""
    cdef Py_buffer view
    cdef ssize_t r
    cdef int err = 0
    cdef Py_ssize_t cap
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    cap = view.len
    with nogil:
        while True:
            r = recv(fd, view.buf, <size_t>cap, MSG_DONTWAIT | MSG_TRUNC)
            if r >= 0:
                break
            err = errno
            if err != EINTR:
                break
    PyBuffer_Release(&view)
    if r < 0:
        if err == EAGAIN or err == EWOULDBLOCK or err == ECONNREFUSED:
            return -1
        raise OSError(err, os.strerror(err))
    if r > cap:
        raise ValueError(f"datagram of {r} bytes truncated to a {cap}-byte buffer")
    return r


cdef Py_ssize_t packet_recv_raw(int fd, void* buf, Py_ssize_t cap, int* err) noexcept nogil:
    cdef ssize_t r
    cdef sockaddr_ll addr
    cdef socklen_t alen = sizeof(addr)
    while True:
        r = recvfrom(fd, buf, <size_t>cap, MSG_DONTWAIT | MSG_TRUNC, <sockaddr*>&addr, &alen)
        if r >= 0:
            break
        err[0] = errno
        if err[0] != EINTR:
            return -1 if err[0] == EAGAIN or err[0] == EWOULDBLOCK else -3
    if addr.sll_pkttype == PACKET_OUTGOING:
        return -2
    return r


cdef Py_ssize_t packet_send_raw(int fd, const void* buf, Py_ssize_t n, int* err) noexcept nogil:
    cdef ssize_t r
    while True:
        r = send(fd, buf, <size_t>n, MSG_DONTWAIT)
        if r >= 0:
            return r
        err[0] = errno
        if err[0] != EINTR:
            return -1


def packet_recv_into(int fd, buf):
    """Receive one frame from AF_PACKET socket fd into buf without blocking, in one
    system call (no peek first): its length; -1 if none is queued; -2 if it was this
    host's own transmission seen by the tap (PACKET_OUTGOING: the caller skips it). A
    frame longer than buf is lost (datagram semantics) and ValueError is raised."""
    cdef Py_buffer view
    cdef Py_ssize_t r, cap
    cdef int err = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    cap = view.len
    with nogil:
        r = packet_recv_raw(fd, view.buf, cap, &err)
    PyBuffer_Release(&view)
    if r == -3:
        raise OSError(err, os.strerror(err))
    if r > cap:
        raise ValueError(f"frame of {r} bytes truncated to a {cap}-byte buffer")
    return r


# --------------------------------------------------------------------------- AF_PACKET receive ring

cdef extern from *:
    """
    #include <linux/if_packet.h>
    #include <sys/mman.h>
    #include <sys/socket.h>
    /* A TPACKET_V2 receive ring shared with the kernel (PACKET_RX_RING): the kernel hands a
       frame slot over by setting TP_STATUS_USER in its status word, the reader hands it back
       by TP_STATUS_KERNEL -- acquire and release, as the two sides run on different CPUs. */
    static inline unsigned int dp_tp_ready(const struct tpacket2_hdr *h) {
        return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER;
    }
    static inline void dp_tp_release(struct tpacket2_hdr *h) {
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    }
    static inline unsigned char dp_tp_pkttype(const struct tpacket2_hdr *h) {
        return ((const struct sockaddr_ll *) ((const char *) h + TPACKET_ALIGN(sizeof(struct tpacket2_hdr))))->sll_pkttype;
    }
    /* PACKET_VERSION TPACKET_V2, then a ring of `nr` frames of `size` bytes in blocks of `block`. */
    static void *dp_tp_map(int fd, unsigned int size, unsigned int block, unsigned int nr) {
        int version = TPACKET_V2;
        struct tpacket_req req;
        void *p;
        if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) < 0)
            return NULL;
        req.tp_block_size = block;
        req.tp_block_nr = (unsigned int) ((unsigned long) size * nr / block);
        req.tp_frame_size = size;
        req.tp_frame_nr = nr;
        if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0)
            return NULL;
        p = mmap(NULL, (size_t) size * nr, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    static inline void dp_tp_unmap(void *p, size_t n) { munmap(p, n); }
    """
    struct tpacket2_hdr:
        unsigned int tp_len
        unsigned int tp_snaplen
        unsigned short tp_mac
    unsigned int dp_tp_ready(const tpacket2_hdr* h) noexcept nogil
    void dp_tp_release(tpacket2_hdr* h) noexcept nogil
    unsigned char dp_tp_pkttype(const tpacket2_hdr* h) noexcept nogil
    void* dp_tp_map(int fd, unsigned int size, unsigned int block, unsigned int nr) noexcept nogil
    void dp_tp_unmap(void* p, size_t n) noexcept nogil


def packet_rx_ring(int fd, Py_ssize_t max_frame, Py_ssize_t frames=1024):
    """Give AF_PACKET socket `fd` a receive ring of `frames` slots, each large enough for a
    `max_frame`-byte frame, mapped into this process (PACKET_RX_RING, TPACKET_V2). From then
    on the kernel copies each received frame into the ring and the socket's receive queue
    stays empty: read frames with the ring's `recv_raw`/`recv_into`, not recv(2). OSError
    if the kernel refuses (then the socket is as it was and recv(2) serves)."""
    cdef unsigned int size = 2048, block
    cdef int err
    cdef void* p
    # A slot holds the ring header (tpacket2_hdr, sockaddr_ll, padding: the frame starts at
    # 66 bytes for a 14-byte MAC header) and the frame, a power of two that whole pages hold.
    while size < max_frame + 128:
        size *= 2
    block = size if size > 4096 else 4096
    if frames < 1 or frames * size % block:
        raise ValueError(f"{frames} frames of {size} bytes do not fill {block}-byte blocks")
    p = dp_tp_map(fd, size, block, <unsigned int> frames)
    if p == NULL:
        err = errno
        raise OSError(err, f"no receive ring for the packet socket: {os.strerror(err)}")
    cdef PacketRxRing ring = PacketRxRing.__new__(PacketRxRing)
    ring._base = <unsigned char*> p
    ring._frame_size = size
    ring._frames = frames
    ring._head = 0
    return ring


cdef class PacketRxRing:
    """The receive ring an AF_PACKET socket shares with the kernel (made by `packet_rx_ring`).

    Taking a frame is a look at a slot's status word and a copy, no system call: a poll
    that finds nothing costs a memory read instead of a recvfrom(2). The socket stays the
    doorbell: poll/epoll report it readable while the slot at the ring's head is ready."""

    def __dealloc__(self):
        self._unmap()

    cdef void _unmap(self) noexcept:
        if self._base != NULL:
            dp_tp_unmap(self._base, <size_t> self._frame_size * self._frames)
            self._base = NULL

    def close(self):
        """Unmap the ring (before the socket closes); every later take finds nothing."""
        self._unmap()

    cdef Py_ssize_t recv_raw(self, void* buf, Py_ssize_t cap) noexcept nogil:
        # packet_recv_raw's answers: the frame's length (above `cap`: too long, dropped), -1
        # if none is ready, -2 for this host's own transmission seen by the tap.
        cdef tpacket2_hdr* h
        cdef Py_ssize_t n
        cdef unsigned char kind
        if self._base == NULL:
            return -1
        h = <tpacket2_hdr*> (self._base + self._head * self._frame_size)
        if not dp_tp_ready(h):
            return -1
        kind = dp_tp_pkttype(h)
        n = h.tp_len
        if kind != PACKET_OUTGOING and n <= cap and h.tp_snaplen == n:
            memcpy(buf, <unsigned char*> h + h.tp_mac, <size_t> n)
        elif kind != PACKET_OUTGOING and n <= cap:
            n = cap + 1                     # cut short by the slot: too long as a frame
        dp_tp_release(h)
        self._head += 1
        if self._head == self._frames:
            self._head = 0
        return -2 if kind == PACKET_OUTGOING else n

    cpdef bint pending(self):
        """Is a frame ready at the ring's head?"""
        if self._base == NULL:
            return False
        return dp_tp_ready(<tpacket2_hdr*> (self._base + self._head * self._frame_size)) != 0

    def recv_into(self, buf):
        """`packet_recv_into` from the ring: the next frame into buf, its length; -1 if none
        is ready; -2 for an own transmission; ValueError (the frame lost) if it is longer
        than buf."""
        cdef Py_buffer view
        cdef Py_ssize_t r, cap
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        cap = view.len
        r = self.recv_raw(view.buf, cap)
        PyBuffer_Release(&view)
        if r > cap:
            raise ValueError(f"frame of {r} bytes truncated to a {cap}-byte buffer")
        return r
