"""The user side of an attached endpoint in C (libdp._endpoint_rings), without a node:
the rings and mappings a node would hand over, made here, with the node's side played
by reading the gate ring and posting delivery records directly."""
import errno
import mmap
import os
import struct

import pytest

from kernelsim.daemon import EventRing, event_ring_bytes
from kernelsim.media._shmring import ShmRing, ring_bytes
from libdp._endpoint_rings import Spinner, endpoint_rings

SLOT_BYTES = 64
POOL_SLOTS = 40
GATE_FILEOP, OP_RELEASE = 2, 1
HEAD = bytes([1, 8]) + b"dp_write"


class _Node:
    """The node's ends of one endpoint's rings, and the user's EndpointRings over them."""

    def __init__(self, gate_slots=8, gate_slot_bytes=256):
        self.fds = []
        gate_mem, gate_bell = self._fd(os.memfd_create("t-gate")), self._fd(os.eventfd(0, os.EFD_NONBLOCK))
        os.ftruncate(gate_mem, ring_bytes(gate_slots, gate_slot_bytes) + 64)
        self.gate = ShmRing.over_fd(gate_mem, gate_bell, True, gate_slots, gate_slot_bytes)
        self.err_at = ring_bytes(gate_slots, gate_slot_bytes)
        self.user_gate = ShmRing.over_fd(gate_mem, gate_bell, False)
        self.err = mmap.mmap(gate_mem, self.err_at + 64)
        dlv_mem, dlv_bell = self._fd(os.memfd_create("t-dlv")), self._fd(os.eventfd(0, os.EFD_NONBLOCK))
        os.ftruncate(dlv_mem, event_ring_bytes(64))
        self.deliveries = EventRing(dlv_mem, dlv_bell, 64)
        self.user_deliveries = EventRing(dlv_mem, dlv_bell)
        self.pool = mmap.mmap(-1, SLOT_BYTES * POOL_SLOTS)
        self.spinner = Spinner(0.0)                 # sleeps at once; tests that poll swap in their own
        self.rings = endpoint_rings(self.user_gate, self.user_deliveries, self.pool, self.err, self.err_at,
                                    fd=7, ep=5, slot_bytes=SLOT_BYTES, max_message=100, write_head=HEAD,
                                    gate_fileop=GATE_FILEOP, op_release=OP_RELEASE, spinner=self.spinner)

    def _fd(self, fd):
        self.fds.append(fd)
        return fd

    def polling(self, cap):
        """The same rings read by a process whose waits poll up to `cap` seconds."""
        self.rings.close()
        self.spinner = Spinner(cap)
        self.rings = endpoint_rings(self.user_gate, self.user_deliveries, self.pool, self.err, self.err_at,
                                    fd=7, ep=5, slot_bytes=SLOT_BYTES, max_message=100, write_head=HEAD,
                                    gate_fileop=GATE_FILEOP, op_release=OP_RELEASE, spinner=self.spinner)
        return self.rings

    def deliver(self, slot, payload, src=(3, 9)):
        self.pool[slot * SLOT_BYTES:slot * SLOT_BYTES + len(payload)] = payload
        assert self.deliveries.post(slot, len(payload), *src)

    def entries(self):
        buf, out = bytearray(512), []
        while (n := self.gate.recv_into(buf)) >= 0:
            out.append(bytes(buf[:n]))
        return out

    def close(self):
        self.rings.close()
        for r in (self.user_gate, self.gate, self.user_deliveries, self.deliveries):
            r.close()
        self.err.close()
        self.pool.close()
        for fd in self.fds:
            os.close(fd)


@pytest.fixture
def node():
    n = _Node()
    yield n
    n.close()


def _released(entries):
    out = []
    for e in entries:
        assert e[:2] == bytes([GATE_FILEOP, OP_RELEASE]) and (len(e) - 2) % 4 == 0
        out += [s for (s,) in struct.iter_unpack("<I", e[2:])]
    return out


def test_write_is_one_gate_entry_and_checks_like_the_python_layer(node):
    r = node.rings
    with pytest.raises(OSError) as e:
        r.write(b"x")
    assert e.value.errno == errno.EDESTADDRREQ
    r.targeted = True
    assert r.write(b"hello") == 5 and r.write(bytearray(b"ab")) == 2 and r.write(memoryview(b"")) == 0
    assert node.entries() == [HEAD + b"hello", HEAD + b"ab", HEAD]
    for bad, code in (("text", errno.EFAULT), (b"y" * 101, errno.EMSGSIZE)):
        with pytest.raises(OSError) as e:
            r.write(bad)
        assert e.value.errno == code
    assert node.entries() == []                                 # nothing written by a refused call
    for _ in range(8):
        assert r.write(b"z") == 1
    assert r.write(b"z") == -1                                  # the ring is full: nothing written
    assert len(node.entries()) == 8


def test_an_error_the_node_left_is_raised_once_by_the_next_call(node):
    node.rings.targeted = True
    struct.pack_into("<I", node.err, node.err_at, errno.ENETUNREACH)
    with pytest.raises(OSError) as e:
        node.rings.write(b"x")
    assert e.value.errno == errno.ENETUNREACH and "earlier call-gate entry on fd 7" in str(e.value)
    assert node.rings.write(b"x") == 1 and node.entries() == [HEAD + b"x"]


def test_read_copies_the_slot_and_gives_it_back(node):
    r = node.rings
    assert r.read(100) is None and r.take() is None
    node.deliver(3, b"abcdef")
    node.deliver(39, b"last slot")
    assert r.read(4) == b"abcd"                                 # at most nbytes of it
    assert node.entries() == []                                 # another delivery waits: batched
    assert r.take() == (39, 9, (3, 9))                          # a token's read: no copy, no release
    assert r.copy_out(39, 9, 100) == b"last slot"
    assert _released(node.entries()) == [3, 39]                 # nothing waits: both go back at once


def test_releases_are_batched_sixteen_to_an_entry_while_deliveries_wait(node):
    r = node.rings
    for slot in range(20):
        node.deliver(slot, bytes([slot]))
    got = [r.read(10) for _ in range(20)]
    assert got == [bytes([s]) for s in range(20)]
    entries = node.entries()
    assert [len(_released([e])) for e in entries] == [16, 4]
    assert _released(entries) == list(range(20))


def test_releases_wait_in_the_batch_while_the_gate_is_full(node):
    r = node.rings
    r.targeted = True
    for _ in range(8):
        r.write(b"z")                                           # the node has not taken these
    node.deliver(1, b"a")
    assert r.read(10) == b"a"                                   # released, but the gate is full
    assert r.releases_pending == 1
    assert len(node.entries()) == 8
    r.flush_releases()
    assert r.releases_pending == 0 and _released(node.entries()) == [1]


@pytest.mark.parametrize("slot,n", [(POOL_SLOTS, 1), (2, SLOT_BYTES + 1)])
def test_a_record_naming_a_slot_outside_the_pool_is_eio(node, slot, n):
    assert node.deliveries.post(slot, n, 0, 0)
    with pytest.raises(OSError) as e:
        node.rings.read(10)
    assert e.value.errno == errno.EIO


def test_after_close_every_call_is_ebadf_and_the_mappings_can_close(node):
    node.rings.targeted = True
    node.rings.close()
    with pytest.raises(OSError) as e:
        node.rings.write(b"x")
    assert e.value.errno == errno.EBADF
    node.err.close()                                            # no buffer export left behind
    node.pool.close()
    node.err = mmap.mmap(-1, node.err_at + 64)
    node.pool = mmap.mmap(-1, 64)


# -- a blocking read that sleeps in C (read_sleeping / read_wait) -----------------------

@pytest.fixture
def waitset(node):
    """The wait set a script's blocking read sleeps on: the endpoint's delivery eventfd and
    one end of a socketpair standing in for the node's control socket."""
    import select
    import socket
    ctl, node_end = socket.socketpair()
    ep = select.epoll()
    ep.register(node.user_deliveries.fileno(), select.EPOLLIN)
    ep.register(ctl.fileno(), select.EPOLLIN)
    yield ep, ctl, node_end
    ep.close()
    ctl.close()
    node_end.close()


def _later(seconds, fn, *args):
    import threading
    t = threading.Timer(seconds, fn, args)
    t.start()
    return t


def test_read_sleeping_wakes_for_a_delivery_and_sends_the_batched_releases_first(node, waitset):
    ep, ctl, _ = waitset
    r = node.rings
    for slot in (1, 2):
        node.deliver(slot, b"old")
    assert r.read(10) == b"old"                                 # another waits: its release is batched
    assert r.read(10) == b"old" and r.releases_pending == 0     # nothing waits: both sent
    node.entries()
    r.release(7)                                                # a token given back, batch of one... sent
    t = _later(0.05, node.deliver, 5, b"pong")
    try:
        assert r.read_sleeping(100, ep.fileno(), ctl.fileno()) == b"pong"
    finally:
        t.join()
    assert _released(node.entries()) == [7, 5]


def test_read_sleeping_returns_none_when_the_control_socket_is_readable(node, waitset):
    ep, ctl, node_end = waitset
    t = _later(0.05, node_end.send, b"!")                      # an answer, or the node gone (EOF)
    try:
        assert node.rings.read_sleeping(100, ep.fileno(), ctl.fileno()) is None
    finally:
        t.join()


def test_read_sleeping_raises_the_error_the_node_left_when_woken(node, waitset):
    ep, ctl, _ = waitset

    def fail():
        struct.pack_into("<I", node.err, node.err_at, errno.ENETDOWN)
        os.eventfd_write(node.user_deliveries.fileno(), 1)     # a wake-up with no record
    t = _later(0.05, fail)
    try:
        with pytest.raises(OSError) as e:
            node.rings.read_sleeping(100, ep.fileno(), ctl.fileno())
    finally:
        t.join()
    assert e.value.errno == errno.ENETDOWN


def test_a_signal_handler_that_raises_ends_the_sleep(node, waitset):
    import signal
    ep, ctl, _ = waitset

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(Interrupted):
            node.rings.read_sleeping(100, ep.fileno(), ctl.fileno())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_read_wait_sleeps_only_once_armed_and_never_after_close(node, waitset):
    ep, ctl, _ = waitset
    r = node.rings
    assert r.read_wait(100) is None                             # not armed: an empty ring is None at once
    r.sleep_on(ep.fileno(), ctl.fileno())
    t = _later(0.05, node.deliver, 4, b"armed")
    try:
        assert r.read_wait(100) == b"armed"
    finally:
        t.join()
    r.sleep_on(-1, -1)                                          # set_blocking(False) disarms it
    assert r.read_wait(100) is None
    r.sleep_on(ep.fileno(), ctl.fileno())
    r.close()                                                   # close disarms it too:
    assert r.read_wait(100) is None                             # no sleep on a wait set that may be gone


# -- a wait that polls first (a crossed script: libdp.attach's CROSSED_SPIN_S) ------------

def test_poll_read_takes_a_delivery_that_comes_while_it_polls(node):
    r = node.polling(5.0)                           # a cap no delivery below outlasts
    t = _later(0.01, node.deliver, 3, b"polled")
    try:
        got = r.poll_read(100)                      # (the poll lets the delivering thread run)
    finally:
        t.join()
    if got is None:                                 # a busy host: a yield waited out someone's time
        assert node.spinner.crowded                 # slice, and the poll stopped for the caller to sleep
        got = r.read(100)
    else:
        assert node.spinner.misses == 0
    assert got == b"polled"


def test_poll_read_gives_up_after_the_cap_and_the_sleep_counts_the_whole_wait(node, waitset):
    ep, ctl, _ = waitset
    r = node.polling(0.001)
    assert r.poll_read(100) is None                 # nothing within the millisecond
    t = _later(0.1, node.deliver, 2, b"late")
    try:
        assert r.read_sleeping(100, ep.fileno(), ctl.fileno()) == b"late"   # polled, then slept
    finally:
        t.join()
    assert node.spinner.misses == 1                 # the wait outlasted the poll


def test_a_crowded_core_makes_the_next_waits_sleep_at_once(node):
    import time
    r = node.polling(5.0)
    now = time.perf_counter()
    assert not node.spinner.yielded(now - 0.004, now - 0.002)   # someone's long step, once: no matter
    assert node.spinner.yielded(now - 0.002, now)   # twice within CROWDED_WINDOW_S: a CPU-bound neighbour
    assert node.spinner.limit() == 0.0              # the next waits do not poll (the cap is 5 s)...
    assert r.poll_read(100) is None                 # ... one try, and the caller sleeps
    node.deliver(1, b"now")
    assert r.poll_read(100) == b"now"               # what is there is still taken
