# cython: language_level=3
"""The calls a DP process makes per message, compiled: `dp_write`, `dp_read` and the
endpoint check they share. `DP` (libdp/_api.py) is this class and the rest of the calls.

Written in Python, each of these spent about as long finding its way -- the process's fd
table, the file's kind, the node's services, the endpoint's pool and wait queue, the
call's costs, each an attribute of a Python object -- as making the coroutine that runs
the call (~0.5 us a call, four calls a ping-pong round trip). Here they are C fields,
looked up once when the process is bound.
"""
import errno
from time import perf_counter

from kernelsim._node cimport FdTable, Node, OpenFile
from kernelsim._dictver cimport dict_version
from cpython.ref cimport PyObject, Py_XDECREF
from kernelsim._trio cimport call_now, entry_call_pair, entry_pair_now, user_call_pair, user_pair_now
from dpcore._services cimport Endpoint
from dpcore._services import user_read      # `DirectedPoint.read_path` as a KernelRoutine

__all__ = ["DPCalls", "pingpong_rounds", "echo_rounds"]


cdef class DPCalls:
    """The per-message calls of one process's DP (the base of `libdp.DP`)."""
    cdef public object _proc, spin_s
    cdef public Node _node
    cdef public double _poll_cost, _wake_cost
    cdef FdTable _fds
    cdef dict _services
    cdef unsigned long long _dp_seen     # `_services`' version when "dp" was last found in it

    def __init__(self, proc, spin_s):
        self._proc = proc
        self._node = node = proc.node
        self.spin_s = spin_s
        self._fds = proc.fds
        self._services = node.services
        self._poll_cost = node.costs.cycles(node.profile["dp.poll_cycles"])
        self._wake_cost = node.costs.wakeup

    def now(self):
        """Seconds on this process's clock: modeled time, or the host's in real time."""
        return self._now()

    def dp_write(self, fd, data):
        """Send `data` as one message through the call gate (DP-C04, DP-C05); return its length.

        Returns once the frame is in the NIC's transmit ring: DP is unreliable, delivery is
        not confirmed. EDESTADDRREQ before `dp_target`, EMSGSIZE above ``dp.max_message``,
        EFAULT if `data` is not bytes-like; waits (or EAGAIN non-blocking) while the ring is full.

        Await it like any async call. (It returns the call itself, an awaitable
        (`kernelsim.run_entry`), rather than being a coroutine around it: a call that ends
        without parking makes no coroutine at all, and misuse is still raised by the
        ``await``.)
        """
        return self._write(fd, data)

    def dp_read(self, fd, nbytes=65536):
        """Copy the next message out of the endpoint's TBP (user-level; polls while empty).

        Await it like any async call (see `dp_write` for why it is not a coroutine).
        """
        return self._read(fd, nbytes)

    cdef object _write(self, fd, data):
        if type(data) is not bytes:
            try:
                data = _bytes(data)
            except OSError as exc:
                return _raise(exc)
        return entry_call_pair(self._node, self._proc, True, "dp_write", fd, data, fd, self._wake_cost, self.spin_s)

    cdef object _read(self, fd, nbytes):
        cdef Endpoint ep
        f = self._fds.peek(fd) if type(nbytes) is int and nbytes >= 0 else None
        if isinstance(f, Endpoint) and self._dp_loaded():
            # A good call, told without a `try` block (one per read cost more than the test).
            ep = <Endpoint> f
            return user_call_pair(self._node, self._proc, user_read, ep, nbytes, fd, self._poll_cost,
                              ep.tbp, ep.readers, self.spin_s)
        try:
            if type(nbytes) is not int or nbytes < 0:
                _check_count(nbytes)
            ep = self._ep(fd)
        except OSError as exc:
            return _raise(exc)
        # The TBP is mapped into the process: its count is looked at before anything is
        # entered; an empty pool is waited on first (the poll then takes _poll_cost more).
        return user_call_pair(self._node, self._proc, user_read, ep, nbytes, fd, self._poll_cost,
                          ep.tbp, ep.readers, self.spin_s)

    cdef inline bint _dp_loaded(self) except -1:
        """``"dp" in self._services``, asked per read: answered again without the lookup
        while the table is as it was when "dp" was found (`kernelsim._dictver`)."""
        cdef unsigned long long v = dict_version(self._services)
        if v != 0 and v == self._dp_seen:
            return True
        if "dp" in self._services:
            self._dp_seen = v
            return True
        return False

    cdef object _write_now(self, fd, data, PyObject** later):
        """``call_now(self._write(fd, data), later)``, the call made only if it must give
        trio a pass (`kernelsim._trio.entry_pair_now`)."""
        if type(data) is not bytes:
            return call_now(self._write(fd, data), later)
        return entry_pair_now(self._node, self._proc, True, "dp_write", fd, data, fd, self._wake_cost, self.spin_s,
                              later)

    cdef object _read_now(self, fd, nbytes, PyObject** later):
        """``call_now(self._read(fd, nbytes), later)``, likewise (`user_pair_now`)."""
        cdef Endpoint ep
        f = self._fds.peek(fd) if type(nbytes) is int and nbytes >= 0 else None
        if isinstance(f, Endpoint) and self._dp_loaded():
            ep = <Endpoint> f
            return user_pair_now(self._node, self._proc, user_read, ep, nbytes, fd, self._poll_cost, ep.tbp,
                                 ep.readers, self.spin_s, later)
        return call_now(self._read(fd, nbytes), later)

    cdef double _now(self):
        return self._node.engine.now if self._node.modeled else perf_counter()

    def _endpoint(self, fd):
        """The DP endpoint open on `fd`: EBADF if nothing is, EINVAL if it is another file
        (or DP is not loaded)."""
        return self._ep(fd)

    cdef Endpoint _ep(self, fd):
        # A cdef method, not a cpdef one: `DP`, a Python subclass, would make every call
        # of a cpdef method look its name up in the instance first (an override?).
        cdef OpenFile f = self._fds.get(fd)
        if not isinstance(f, Endpoint) or "dp" not in self._services:
            raise OSError(errno.EINVAL, f"fd {fd} is not a DP endpoint")
        return <Endpoint> f


async def _raise(exc):
    """A call's misuse, raised where the call is awaited (as an ``async def`` would)."""
    raise exc


def _bytes(data) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise OSError(errno.EFAULT, f"a message is a bytes-like object, not {type(data).__name__}")


def _check_count(n) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise OSError(errno.EINVAL, f"byte count must be a non-negative int, not {n!r}")


# -- the ping-pong benchmark's loops (`libdp._bench`), compiled ----------------------------
#
# A modeled round trip costs the simulator a few tens of thousands of instructions; the
# benchmark's own loop, as Python, was some 3k of them (its bytecode, a frame more on every
# resume of the echoing task, the calls' lookups on a Python subclass). For a `DPCalls`
# whose dp_write and dp_read are these (not overridden), the loops make the calls by C;
# any other `dp` (a real node's library, a wrapper) is awaited as Python would.

cdef bint _plain(dp) except -1:
    cls = type(dp)
    return isinstance(dp, DPCalls) and getattr(cls, "dp_write", None) is _DP_WRITE \
        and getattr(cls, "dp_read", None) is _DP_READ and getattr(cls, "now", None) is _DP_NOW

_DP_WRITE = DPCalls.dp_write
_DP_READ = DPCalls.dp_read
_DP_NOW = DPCalls.now


async def pingpong_rounds(dp, fd, msg, n, Py_ssize_t warmup, Py_ssize_t iters, list samples):
    """`warmup + iters` round trips of `msg` on `fd` (each a dp_write, then a dp_read of `n`
    bytes) with nothing lost; returns the time the measured ones began. `samples` (or None):
    each measured round trip's time is appended."""
    cdef Py_ssize_t i
    cdef DPCalls c
    if not _plain(dp):
        t0 = dp.now()
        for i in range(warmup + iters):
            if i == warmup:
                t0 = dp.now()
            ts = dp.now()
            await dp.dp_write(fd, msg)
            await dp.dp_read(fd, n)
            if i >= warmup and samples is not None:
                samples.append(dp.now() - ts)
        return t0
    c = <DPCalls> dp
    cdef double t, start = c._now()
    cdef PyObject* later = NULL
    for i in range(warmup + iters):
        if i == warmup:
            start = c._now()
        t = c._now()
        # Each call as ``await``, run now by C (`_write_now`, `_read_now`): awaited only if
        # it must give trio a pass.
        c._write_now(fd, msg, &later)
        if later != NULL:
            await _take(later)
        c._read_now(fd, n, &later)
        if later != NULL:
            await _take(later)
        if i >= warmup and samples is not None:
            samples.append(c._now() - t)
    return start


async def echo_rounds(dp, fd, Py_ssize_t count):
    """Read `count` messages on `fd` (up to 65536 bytes each) and send each back; returns
    `count`."""
    cdef Py_ssize_t echoed = 0
    cdef DPCalls c
    if not _plain(dp):
        while echoed < count:
            m = await dp.dp_read(fd, 65536)
            await dp.dp_write(fd, m)
            echoed += 1
        return echoed
    c = <DPCalls> dp
    cdef PyObject* later = NULL
    while echoed < count:
        m = c._read_now(fd, 65536, &later)
        if later != NULL:
            m = await _take(later)
        c._write_now(fd, m, &later)
        if later != NULL:
            await _take(later)
        echoed += 1
    return echoed


cdef inline object _take(PyObject* ref):
    """The object a new reference points to, that reference given up."""
    o = <object> ref
    Py_XDECREF(ref)
    return o
