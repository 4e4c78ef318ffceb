# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The user side of an attached endpoint's round trip, in C.

A script attached to a real node (`libdp._attach`) writes a message by appending a gate
entry to the endpoint's submission ring and reads one by taking a record off its
delivery ring and copying the slot of the Token Buffer Pool it names; the slot goes back
to the node in a batched gate entry. Written as Python methods that was ~34k instructions
per round trip in each script (callgrind, benchmarks/bench_real_nodes.py's round trip):
two scripts of one round trip spent about as much CPU as one node pass. Here the checks,
the copy, the release batch and the gate entries are C, and so is the delivery ring's pop
(by C call into kernelsim.daemon._rings, where the ring protocol is written once).

A blocking read waits here too (`read_sleeping`): it polls the delivery ring for as long
as the process's `Spinner` allows, offering the CPU with sched_yield(2) between polls --
a crossed script shares its core with another node, whose work alternates with this
wait -- and then sleeps in epoll_wait(2) on the file's wait set (its delivery eventfd and
the node's control socket): the poll, the wake-up, the pop, the copy and the release are
one C call. A Python poll loop took about a microsecond a turn, and every turn is a
stretch in which the core's other process waits for the yield. Only what needs the
Python layer -- the control socket readable (an answer, or the node gone) -- returns to it.

Errors and their messages are those of the Python layer they replace: EFAULT for a
message that is not bytes-like, EDESTADDRREQ before ``dp_target``, EMSGSIZE over the
endpoint's limit, the node's deferred call-gate error (the file's error word) on the next
call, EIO for a delivery record that names a slot outside the pool.
"""
from libc.stdint cimport uint32_t
from libc.string cimport memcpy
from libc.stdlib cimport malloc, free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport errno as c_errno, EINTR

from kernelsim._engine cimport wall_now

import errno
import os

from libdp._calls import _check_count

from kernelsim.media._shmring cimport ShmRing, RING_OK, RING_FULL, RING_CLOSED
from kernelsim.daemon._rings cimport CrowdedCore, EventRing, epoll_event, epoll_wait, sched_yield

from kernelsim._atomics cimport dp_load_acq32, dp_store_rel32

DEF RELEASE_HEAD = 2            # u8 GATE_FILEOP, u8 OP_RELEASE, then u32 slot numbers (little endian)
DEF RELEASE_BATCH = 16          # releases sent at once while more deliveries wait
DEF SLEEP_MS = 500              # a sleeping read looks at the file's error word this often
DEF MISSES = 3                  # waits in a row that outlast the poll before waits sleep at once (`Spinner`)


cdef class Spinner:
    """Bounded adaptive polling before a wait sleeps (see libdp._attach's essay).

    A wait polls for up to `cap` seconds -- unless the last `MISSES_TO_SLEEP` waits all
    outlasted the cap (polling could not have caught them: an idle server, a slow peer),
    and then it sleeps at once until a wait ends within the cap again. A count, not an
    average: one wait stretched by a preempting neighbour must not switch polling off.
    And none for `CROWDED_BACKOFF_S` after yields found the core crowded (`yielded`):
    on a pinned core shared with a CPU-bound process, every poll's yield queued behind a
    whole time slice of it (measured, 2-core host with a compiler running: a crossed
    round trip took 1.3 ms polling, 85 µs sleeping). One per attached process, shared by
    its endpoints' C waits and its Python ones.
    """

    MISSES_TO_SLEEP = MISSES

    def __cinit__(self, double cap):
        self.cap = cap
        self.misses = 0
        self.crowding = CrowdedCore()

    cdef double limit_s(self) noexcept:
        if self.cap <= 0.0 or self.misses >= MISSES:
            return 0.0
        return self.cap if wall_now() >= self.crowding.until else 0.0

    cdef void waited_s(self, double seconds) noexcept:
        self.misses = self.misses + 1 if seconds > self.cap else 0

    cpdef bint yielded(self, double before, double after) noexcept:
        # A poll's yield took from `before` to `after`: True if it found the core crowded
        # (the node loop's rule, kernelsim.daemon._rings.CrowdedCore).
        return self.crowding.late_yield(before, after)

    @property
    def crowded(self):
        """How many times yields found the core crowded."""
        return self.crowding.count

    def limit(self) -> float:
        """How long the next wait polls: the cap, or 0 after a run of misses."""
        return self.limit_s()

    def waited(self, double seconds) -> None:
        """A wait took `seconds` from its first poll to what it got."""
        self.waited_s(seconds)

    def spin(self, attempt):
        """Try `attempt` until it gives something or the limit has passed, yielding the CPU
        between tries; None then (one try only when the limit is 0), or as soon as a yield
        found the core crowded."""
        got = attempt()
        if got:
            return got
        cdef double limit = self.limit_s()
        if limit <= 0.0:
            return None
        cdef double now = wall_now()
        cdef double end = now + limit
        cdef double then
        while now < end:
            then = now
            with nogil:                         # another thread of this process may run meanwhile
                sched_yield()
            now = wall_now()
            got = attempt()
            if got:
                return got
            if self.yielded(then, now):
                break
        return None


def endpoint_rings(ShmRing gate, EventRing deliveries, pool, err_map, Py_ssize_t err_at, *, int fd, int ep,
                   Py_ssize_t slot_bytes, Py_ssize_t max_message, bytes write_head, int gate_fileop,
                   int op_release, Spinner spinner):
    """The C side of an attached endpoint (`EndpointRings`): `gate` its submission ring,
    `deliveries` its delivery `EventRing`, `pool` the read-only mapping of its Token Buffer
    Pool, `err_map` the mapping holding its u32 error word at `err_at`; `spinner` how its
    waits poll (the process's)."""
    cdef EndpointRings r = EndpointRings.__new__(EndpointRings)
    cdef Py_ssize_t slots
    r.sleep_waitset = r.sleep_sock = -1
    r.spinner = spinner
    r.gate = gate
    r.deliveries = deliveries
    r.fd = fd
    r.ep = ep
    r.slot_bytes = slot_bytes
    r.max_message = max_message
    r.write_head = write_head
    PyObject_GetBuffer(pool, &r._pool, PyBUF_SIMPLE)
    r._have_pool = True
    PyObject_GetBuffer(err_map, &r._err, PyBUF_SIMPLE | PyBUF_WRITABLE)
    r._have_err = True
    if err_at < 0 or err_at + 4 > r._err.len or slot_bytes <= 0:
        r.close()
        raise ValueError("bad endpoint layout")
    r.err_word = <uint32_t*> (<char*> r._err.buf + err_at)
    r.pool_bytes = r._pool.len
    # Every slot of the pool can wait for its release at most once; a gate entry carries
    # as many as fit in a ring slot.
    slots = r.pool_bytes // slot_bytes
    r.release_cap = slots if slots > 0 else 1
    r.per_entry = (gate._max_frame - RELEASE_HEAD) // 4
    r.entry = <unsigned char*> malloc(RELEASE_HEAD + 4 * r.release_cap)
    if r.entry == NULL:
        r.close()
        raise MemoryError()
    r.entry[0] = <unsigned char> gate_fileop
    r.entry[1] = <unsigned char> op_release
    return r


cdef class EndpointRings:
    """Built by `endpoint_rings` only."""

    def __dealloc__(self):
        self.close()

    def close(self):
        """Let go of the mappings (before they are unmapped) and the release buffer."""
        if self._have_pool:
            self._have_pool = False
            PyBuffer_Release(&self._pool)
        if self._have_err:
            self._have_err = False
            self.err_word = NULL
            PyBuffer_Release(&self._err)
        if self.entry != NULL:
            free(self.entry)
            self.entry = NULL
        self.n_releases = 0
        self.sleep_waitset = self.sleep_sock = -1

    # -- the call gate ------------------------------------------------------------------

    cpdef int check_error(self) except -1:
        """Raise (once) what the node found wrong with an earlier call-gate entry."""
        cdef uint32_t err
        if self.err_word == NULL:
            raise OSError(errno.EBADF, f"bad file descriptor {self.fd}")
        err = dp_load_acq32(self.err_word)
        if err:
            dp_store_rel32(self.err_word, 0)
            raise OSError(err, f"{os.strerror(err)} (an earlier call-gate entry on fd {self.fd})")
        return 0

    cpdef Py_ssize_t write(self, data) except -2:
        """``dp_write``'s entry: the message's length once the gate took it, -1 if the
        submission ring is full (nothing written: wait and call again)."""
        cdef Py_ssize_t n
        cdef int r
        self.check_error()
        if type(data) is not bytes:
            if not isinstance(data, (bytearray, memoryview)):
                raise OSError(errno.EFAULT, f"a message is a bytes-like object, not {type(data).__name__}")
            data = bytes(data)
        if not self.targeted:
            raise OSError(errno.EDESTADDRREQ, f"endpoint {self.ep} has no target: call dp_target first")
        n = PyBytes_GET_SIZE(data)
        if n > self.max_message:
            raise OSError(errno.EMSGSIZE, f"message of {n} bytes exceeds DP's {self.max_message}-byte limit")
        r = self.gate._publish2(<const unsigned char*> PyBytes_AS_STRING(self.write_head),
                                <size_t> PyBytes_GET_SIZE(self.write_head),
                                <const unsigned char*> PyBytes_AS_STRING(data), <size_t> n, True)
        if r == RING_OK:
            return n
        if r == RING_FULL:
            return -1
        raise OSError(errno.EBADF, f"bad file descriptor {self.fd}")

    # -- reading from the mapped pool ---------------------------------------------------

    cpdef object take(self):
        """The next delivery as (slot, length, (node, endpoint)), or None."""
        cdef uint32_t rec[4]
        if not self.deliveries.pop_into(rec):
            return None
        self._check_slot(rec[0], rec[1])
        return rec[0], rec[1], (rec[2], rec[3])

    cdef int _check_slot(self, Py_ssize_t slot, Py_ssize_t n) except -1:
        if n > self.slot_bytes or (slot + 1) * self.slot_bytes > self.pool_bytes or not self._have_pool:
            raise OSError(errno.EIO, f"endpoint {self.ep}: a delivery names slot {slot} of {n} bytes")
        return 0

    cpdef object read(self, Py_ssize_t nbytes):
        """The next delivered message (at most `nbytes` of it) copied out, its slot given
        back; None if none is waiting."""
        cdef uint32_t rec[4]
        if not self.deliveries.pop_into(rec):
            return None
        return self.copy_out(rec[0], rec[1], nbytes)

    def sleep_on(self, int waitset_fd, int sock_fd):
        """Let `read_wait` sleep on `waitset_fd` (see `read_sleeping`); -1: it never sleeps
        (a process that polls first, a non-blocking file, a wait set closed)."""
        self.sleep_waitset = waitset_fd
        self.sleep_sock = sock_fd if waitset_fd >= 0 else -1

    cpdef object read_wait(self, Py_ssize_t nbytes):
        """A blocking read's one C call: `read`, and if nothing is waiting and the process
        sleeps at once (`sleep_on`), `read_sleeping`; None for the caller to wait its way."""
        got = self.read(nbytes)
        if got is None and self.sleep_waitset >= 0:
            return self.read_sleeping(nbytes, self.sleep_waitset, self.sleep_sock)
        return got

    cdef object _poll_read(self, Py_ssize_t nbytes, double start):
        # `read`, retried with a yield between tries until the spinner's limit has passed
        # since `start`; a wait that ends here is counted by the spinner.
        cdef double end, now, then
        got = self.read(nbytes)
        if got is None:
            end = start + self.spinner.limit_s()
            now = wall_now()
            while now < end:
                then = now
                with nogil:                     # another thread of this process may run meanwhile
                    sched_yield()
                now = wall_now()
                got = self.read(nbytes)
                if got is not None:
                    break
                PyErr_CheckSignals()            # a handler that raises ends the wait
                if self.spinner.yielded(then, now):
                    return None
            else:
                return None
        self.spinner.waited_s(wall_now() - start)
        return got

    cpdef object poll_read(self, Py_ssize_t nbytes):
        """`read`, polling (yielding the CPU between polls) for as long as the process's
        spinner allows: the releases batched so far go to the node first. None if nothing
        came: the caller sleeps, and tells the spinner how long the whole wait took."""
        self.flush_releases()
        return self._poll_read(nbytes, wall_now())

    cpdef object read_sleeping(self, Py_ssize_t nbytes, int waitset_fd, int sock_fd):
        """`read` that polls as `poll_read` does and then sleeps until a message comes, on
        the epoll descriptor `waitset_fd` (this endpoint's delivery eventfd and the node's
        control socket `sock_fd`): the releases batched so far go to the node first, the
        error word is looked at on every wake-up. None when the control socket is readable:
        the caller reads it (an answer, or ENETDOWN -- the node died) and waits again its
        own way."""
        cdef epoll_event evs[2]
        cdef int n, i
        cdef double start = wall_now()
        self.flush_releases()
        got = self._poll_read(nbytes, start)
        if got is not None:
            return got
        while True:
            got = self.read(nbytes)
            if got is not None:
                self.spinner.waited_s(wall_now() - start)
                return got
            self.check_error()
            with nogil:
                n = epoll_wait(waitset_fd, evs, 2, SLEEP_MS)
            if n < 0:
                if c_errno != EINTR:
                    raise OSError(c_errno, os.strerror(c_errno))
                PyErr_CheckSignals()        # a handler that raises ends the read (PEP 475)
                continue
            for i in range(n):
                if evs[i].data.fd == sock_fd:
                    return self.read(nbytes)

    cpdef bytes copy_out(self, Py_ssize_t slot, Py_ssize_t n, Py_ssize_t nbytes):
        """The message in `slot` (`n` bytes, at most `nbytes` of them); the slot given back."""
        self._check_slot(slot, n)
        out = PyBytes_FromStringAndSize(<const char*> self._pool.buf + slot * self.slot_bytes,
                                        n if n < nbytes else nbytes)
        self.release(slot)
        return out

    cpdef int release(self, Py_ssize_t slot) except -1:
        """Give `slot` back: batched, sent when the batch is full or nothing else waits (the
        node takes releases before frames, so a full pool is refilled in time)."""
        cdef unsigned char* at
        cdef uint32_t s = <uint32_t> slot
        if self.entry == NULL:
            return 0
        if self.n_releases >= self.release_cap:     # only if the gate has stayed full throughout
            self.flush_releases()
            if self.n_releases >= self.release_cap:
                raise OSError(errno.ENOBUFS, f"endpoint {self.ep}: the node takes no slots back")
        at = self.entry + RELEASE_HEAD + 4 * self.n_releases
        at[0] = s & 0xff
        at[1] = (s >> 8) & 0xff
        at[2] = (s >> 16) & 0xff
        at[3] = s >> 24
        self.n_releases += 1
        if self.n_releases >= RELEASE_BATCH or not self.deliveries.pending():
            self.flush_releases()
        return 0

    cpdef int flush_releases(self) except -1:
        """Send the batched releases in gate entries, without a doorbell (the node takes them
        when it next wakes); what a full ring refuses stays batched."""
        cdef Py_ssize_t k, left
        cdef int r
        while self.n_releases > 0 and self.entry != NULL:
            k = self.n_releases if self.n_releases < self.per_entry else self.per_entry
            r = self.gate._publish(self.entry, RELEASE_HEAD + 4 * k, False)
            if r != RING_OK:
                return 0
            left = self.n_releases - k
            if left:
                memcpy(self.entry + RELEASE_HEAD, self.entry + RELEASE_HEAD + 4 * k, 4 * left)
            self.n_releases = left
        return 0

    @property
    def releases_pending(self):
        return self.n_releases


cdef class EndpointTable:
    """An attached process's live endpoints by fd, for the no-wait calls (``dp_write_nowait``,
    ``dp_read_nowait``) of a loop that posts or drains a batch: one C call per message. As
    Python methods they ran two interpreted frames per message (the call and the endpoint
    lookup), as much as the gate entry or the copy itself. An fd not in the table -- closed,
    not this process's, not an endpoint -- goes to `slow` (``AttachedDP._fast_endpoint``),
    which raises what it always has."""
    cdef dict rings                 # fd -> EndpointRings of every endpoint not yet closed
    cdef object slow
    cdef object wait_write, wait_read   # the blocking calls' waits (`blocking_waits`)

    def __cinit__(self, slow):
        self.rings = {}
        self.slow = slow

    def blocking_waits(self, wait_write, wait_read):
        """Where `write` and `read` go when they must wait: ``wait_write(fd, data)`` (the
        submission ring is full) and ``wait_read(fd, nbytes)`` (nothing came while the
        process polled, or it must not sleep in C): ``SyncAttachedDP``'s Python waits."""
        self.wait_write = wait_write
        self.wait_read = wait_read

    def add(self, int fd, EndpointRings rings):
        self.rings[fd] = rings

    def discard(self, fd):
        self.rings.pop(fd, None)

    cdef EndpointRings _get(self, fd):
        r = self.rings.get(fd) if type(fd) is int else None
        if r is None:
            return <EndpointRings?> self.slow(fd).rings
        return <EndpointRings> r

    def write(self, fd, data):
        """The blocking ``dp_write`` (``SyncAttachedDP``): one C call while the call gate
        takes the message at once; the Python frames of the call and the endpoint lookup
        ran on every round trip as long as the gate entry itself."""
        cdef Py_ssize_t n = self._get(fd).write(data)
        return n if n >= 0 else self.wait_write(fd, data)

    def read(self, fd, nbytes=65536):
        """The blocking ``dp_read`` (``SyncAttachedDP``): one C call for a message that is
        there, comes while the process polls, or wakes its sleep in C (`read_wait`)."""
        if type(nbytes) is not int or nbytes < 0:
            _check_count(nbytes)
        got = self._get(fd).read_wait(nbytes)
        return got if got is not None else self.wait_read(fd, nbytes)

    def write_nowait(self, fd, data):
        """``dp_write`` that neither waits nor yields: True if the call gate took the
        message, False (nothing written) if the endpoint's submission ring is full. For a
        loop that posts a batch and then checkpoints (or awaits ``dp_write``) once: the
        per-call trio checkpoint costs more than the gate itself."""
        return self._get(fd).write(data) >= 0

    def read_polled(self, fd, nbytes=65536):
        """The next delivered message, polling for it as long as the process's waits poll
        (`Spinner`, none if they sleep at once), or None; never sleeps, never yields to
        trio. For a loop that bounds its waits with a timeout: a message that comes while
        it polls needs no cancel scope, which costs a trio program more than the round
        trip it bounds."""
        if type(nbytes) is not int or nbytes < 0:
            _check_count(nbytes)
        return self._get(fd).poll_read(nbytes)

    def read_nowait(self, fd, nbytes=65536):
        """The next delivered message (as ``dp_read``), or None at once if none is waiting;
        never yields. A loop that drains what has arrived and then awaits once per batch
        pays no cancel scope or checkpoint per message."""
        if type(nbytes) is not int or nbytes < 0:
            _check_count(nbytes)
        return self._get(fd).read(nbytes)
