"""Real transports: shared-memory frame rings and UDP ports between OS processes.

Every test that creates a shared-memory segment does so through the
``rings`` fixture, whose teardown closes and unlinks it (and checks that the
segment and its doorbell FIFO are really gone) even when the test failed.
Cross-process tests bound every wait by a generous timeout so they cannot
hang; none asserts anything about speed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import random
import select
import subprocess
import sys
import textwrap
import time
from collections import deque
from multiprocessing import shared_memory
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings, strategies as st, HealthCheck

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernelsim.media._shmring import ShmRing  # noqa: E402
from kernelsim.media.real import (  # noqa: E402
    ShmEnd,
    ShmLink,
    UdpPort,
    wait_frame,
    wait_frame_sync,
)

TIMEOUT = 60.0  # generous bound on any cross-process wait


def _shm_path(name: str) -> str:
    return "/dev/shm/" + name


def _segment_exists(name: str) -> bool:
    return os.path.exists(_shm_path(name))


class _Registry:
    """Creates rings/links and guarantees their removal."""

    def __init__(self):
        self.rings: list[ShmRing] = []
        self.links: list[ShmLink] = []
        self.extra: list[ShmRing] = []  # attached views to close

    def ring(self, name=None, slots=8, slot_bytes=64) -> ShmRing:
        r = ShmRing.create(name, slots, slot_bytes)
        self.rings.append(r)
        return r

    def attach(self, name) -> ShmRing:
        r = ShmRing.attach(name)
        self.extra.append(r)
        return r

    def link(self, slots=16, slot_bytes=256) -> ShmLink:
        link = ShmLink.create(slots, slot_bytes)
        self.links.append(link)
        self.rings.extend(link.rings)
        return link

    def cleanup(self):
        for r in self.extra:
            r.close()
        paths = []
        for r in self.rings:
            paths.append((r.name, r.doorbell_path))
            r.close()
            r.unlink()
        for name, bell in paths:
            assert not _segment_exists(name), f"segment {name} leaked"
            assert not os.path.exists(bell), f"doorbell {bell} leaked"


@pytest.fixture
def rings():
    reg = _Registry()
    try:
        yield reg
    finally:
        reg.cleanup()


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


# A child process started from scratch (not a multiprocessing child): it shares
# nothing with the test process but the names passed on its command line.
CHILD_SRC = textwrap.dedent(
    r"""
    import json, sys, time
    from kernelsim.media.real import ShmLink, UdpPort, wait_frame_sync

    mode, args = sys.argv[1], json.loads(sys.argv[2])
    buf = bytearray(65536)

    def fail(msg):
        print("FAIL " + msg, flush=True)
        sys.exit(3)

    def echo(port, count, spin):
        for _ in range(count):
            if not wait_frame_sync(port, spin, timeout=60):
                fail("timeout waiting for a frame")
            n = port.recv_into(buf)
            if n < 0:
                fail("pending() but nothing received")
            reply = bytes(buf[:n])[::-1]          # prove we touched the bytes
            deadline = time.monotonic() + 60
            while not port.send(reply):
                if time.monotonic() > deadline:
                    fail("tx ring stayed full")

    if mode == "shm-echo":
        end = ShmLink.attach(args["names"], 1)
        print("ready", flush=True)
        echo(end, args["count"], args["spin"])
        end.close()
    elif mode == "udp-echo":
        port = UdpPort.bind("127.0.0.1", 0)
        port.connect(tuple(args["peer"]))
        print(json.dumps(list(port.address)), flush=True)
        echo(port, args["count"], args["spin"])
        port.close()
    elif mode == "shm-send-when-peer-sleeps":
        end = ShmLink.attach(args["names"], 1)
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        # Wait until the consumer (the test process) announced it sleeps.
        while not end.tx.stats()["receiver_sleeping"]:
            if time.monotonic() > deadline:
                fail("peer never went to sleep")
            time.sleep(0.001)
        time.sleep(0.05)                          # it is blocked in the kernel by now
        if not end.send(bytes.fromhex(args["payload"])):
            fail("send failed")
        end.close()
    else:
        fail("unknown mode " + mode)
    print("done", flush=True)
    """
)


class _Child:
    def __init__(self, mode: str, **args):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD_SRC, mode, json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
            env=_child_env(),
        )

    def readline(self, timeout=TIMEOUT) -> str:
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise AssertionError("child produced no output in time")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"child died: {self.proc.wait(5)} {self.proc.stderr.read()}")
        assert not line.startswith("FAIL"), line
        return line.strip()

    def finish(self, timeout=TIMEOUT):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"child did not finish: {out} {err}")
        assert self.proc.returncode == 0, (out, err)
        assert "done" in out, (out, err)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()


# ------------------------------------------------------------------ ShmRing basics


def test_factories_only_and_geometry_validation(rings):
    with pytest.raises(TypeError):
        ShmRing()
    for bad in (0, 3, 6, 100):
        with pytest.raises(ValueError):
            ShmRing.create(None, bad, 64)
    with pytest.raises(ValueError):
        ShmRing.create(None, 8, 7)
    with pytest.raises(ValueError):
        ShmRing.create("a/b", 8, 64)
    r = rings.ring(slots=16, slot_bytes=128)
    assert (r.slots, r.slot_bytes, r.max_frame) == (16, 128, 124)
    assert os.path.exists(_shm_path(r.name))
    assert os.path.exists(r.doorbell_path)
    # a second create under the same name fails and leaves the first intact
    assert r.send(b"keep")
    with pytest.raises(FileExistsError):
        ShmRing.create(r.name, 16, 128)
    buf = bytearray(128)
    assert r.recv_into(buf) == 4 and buf[:4] == b"keep"
    with pytest.raises(FileNotFoundError):
        ShmRing.attach(r.name + "_nonexistent")


def test_attach_rejects_foreign_segment():
    shm = shared_memory.SharedMemory(create=True, size=4096)
    try:
        with pytest.raises(ValueError):
            ShmRing.attach(shm.name)
    finally:
        shm.close()
        shm.unlink()


def test_round_trip_every_size_exact_bytes(rings):
    slot_bytes = 256
    r = rings.ring(slots=4, slot_bytes=slot_bytes)
    rng = random.Random(1)
    for n in range(0, slot_bytes - 4 + 1):
        frame = rng.randbytes(n)
        assert r.send(frame)
        buf = bytearray(b"\xaa" * slot_bytes)
        assert r.recv_into(buf) == n
        assert bytes(buf[:n]) == frame
        assert buf[n:] == b"\xaa" * (slot_bytes - n)  # nothing written past the frame
        assert r.recv_into(buf) == -1
    st_ = r.stats()
    assert st_["sent"] == st_["received"] == slot_bytes - 4 + 1
    assert st_["dropped_full"] == 0


def test_round_trip_default_geometry_boundaries(rings):
    r = rings.ring(slots=256, slot_bytes=2048)
    sizes = [0, 1, 2, 3, 4, 5, 1000, 2043, 2044]
    frames = [os.urandom(n) for n in sizes]
    for f in frames:
        assert r.send(f)
    buf = bytearray(2048)
    for f in frames:
        n = r.recv_into(buf)
        assert bytes(buf[:n]) == f
    # buffer-protocol variety: memoryview in, memoryview slice out
    assert r.send(memoryview(b"xyz"))
    out = bytearray(10)
    assert r.recv_into(memoryview(out)[5:]) == 3
    assert out == b"\0" * 5 + b"xyz\0\0"


def test_fifo_order_with_wraparound(rings):
    r = rings.ring(slots=8, slot_bytes=32)
    rng = random.Random(7)
    expected = deque()
    seq_out = 0
    got = 0
    buf = bytearray(32)
    total = 20_000  # 2500 trips around an 8-slot ring
    while got < total:
        for _ in range(rng.randint(0, 9)):
            if seq_out == total:
                break
            frame = seq_out.to_bytes(4, "little") * rng.randint(0, 7)
            if r.send(frame):
                expected.append(frame)
                seq_out += 1
            else:
                assert len(expected) == 8
        for _ in range(rng.randint(0, 9)):
            n = r.recv_into(buf)
            if n < 0:
                assert not expected
                break
            assert bytes(buf[:n]) == expected.popleft()
            got += 1
    assert r.recv_into(buf) == -1
    s = r.stats()
    assert s["sent"] == s["received"] == total


def test_full_ring_drops_and_does_not_corrupt(rings):
    r = rings.ring(slots=8, slot_bytes=64)
    frames = [bytes([i]) * (i * 7) for i in range(8)]
    for f in frames:
        assert r.send(f)
    assert not r.send(b"overflow-1")
    assert not r.send(b"overflow-2" * 6)
    s = r.stats()
    assert s["dropped_full"] == 2 and s["sent"] == 8 and s["depth"] == 8
    buf = bytearray(64)
    for f in frames:
        n = r.recv_into(buf)
        assert bytes(buf[:n]) == f
    assert r.recv_into(buf) == -1
    assert r.send(b"after")  # usable again
    assert r.recv_into(buf) == 5 and buf[:5] == b"after"


def test_too_large_frame_raises_and_leaves_ring_unchanged(rings):
    r = rings.ring(slots=4, slot_bytes=64)
    assert r.send(b"first")
    before = r.stats()
    with pytest.raises(ValueError):
        r.send(b"x" * 61)
    with pytest.raises(ValueError):
        r.send(b"x" * 5000)
    assert r.stats() == before
    assert r.send(b"y" * 60)  # exactly max_frame fits
    buf = bytearray(64)
    assert r.recv_into(buf) == 5 and buf[:5] == b"first"
    assert r.recv_into(buf) == 60 and buf[:60] == b"y" * 60
    assert r.recv_into(buf) == -1


def test_send2_publishes_head_and_body_as_one_frame(rings):
    """A call-gate entry is header + message in one slot, no joined copy made first."""
    r = rings.ring(slots=2, slot_bytes=64)
    assert r.send2(b"\x01\x08dp_write", memoryview(b"hello"))
    assert r.send2(b"", bytearray(b"body only"))
    assert not r.send2(b"h", b"full")                  # two slots taken: dropped, counted
    with pytest.raises(ValueError):
        r.send2(b"x" * 30, b"y" * 31)                   # 61 > max_frame together
    assert r.stats()["dropped_full"] == 1 and r.stats()["sent"] == 2
    buf = bytearray(64)
    assert r.recv_into(buf) == 15 and buf[:15] == b"\x01\x08dp_writehello"
    assert r.recv_into(buf) == 9 and buf[:9] == b"body only"
    assert r.send2(b"x" * 30, b"y" * 30)                # exactly max_frame fits
    assert r.recv_into(buf) == 60 and buf[:60] == b"x" * 30 + b"y" * 30


def test_small_buffer_leaves_frame_in_ring(rings):
    r = rings.ring(slots=4, slot_bytes=64)
    assert r.send(b"0123456789")
    with pytest.raises(ValueError):
        r.recv_into(bytearray(9))
    assert r.pending() and r.peek_len() == 10
    assert r.stats()["received"] == 0
    buf = bytearray(10)
    assert r.recv_into(buf) == 10 and buf == b"0123456789"
    # zero-length buffer is fine for a zero-length frame
    assert r.send(b"")
    assert r.recv_into(bytearray()) == 0
    assert r.send(b"x")
    with pytest.raises((TypeError, BufferError)):
        r.recv_into(b"read-only bytes")
    with pytest.raises(TypeError):
        r.send(None)
    assert r.recv_into(buf) == 1


def test_attached_view_shares_state_and_pickles_by_name(rings):
    r = rings.ring(slots=8, slot_bytes=64)
    a = rings.attach(r.name)
    assert not a.creator and r.creator
    assert (a.slots, a.slot_bytes, a.doorbell_path) == (r.slots, r.slot_bytes, r.doorbell_path)
    assert a.send(b"via attach")
    buf = bytearray(64)
    assert r.recv_into(buf) == 10 and buf[:10] == b"via attach"
    p = pickle.loads(pickle.dumps(r))
    rings.extra.append(p)
    assert p.name == r.name and not p.creator
    assert p.stats()["received"] == 1


def test_closed_ring_raises(rings):
    r = rings.ring()
    a = rings.attach(r.name)
    a.close()
    a.close()  # idempotent
    assert a.closed
    for call in (lambda: a.send(b"x"), lambda: a.recv_into(bytearray(8)),
                 a.pending, a.stats, a.doorbell_fileno, a.prepare_to_sleep):
        with pytest.raises(ValueError):
            call()
    assert r.send(b"still fine")  # the creator's mapping is unaffected


def test_unlink_removes_segment_and_fifo():
    r = ShmRing.create(None, 4, 64)
    name, bell = r.name, r.doorbell_path
    try:
        assert os.path.exists(_shm_path(name)) and os.path.exists(bell)
        assert r.send(b"x")
    finally:
        r.unlink()
        r.unlink()  # idempotent
    assert not os.path.exists(_shm_path(name)) and not os.path.exists(bell)
    assert r.pending()  # existing mapping stays valid until close
    r.close()
    with pytest.raises(FileNotFoundError):
        ShmRing.attach(name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slots_log2=st.integers(0, 3),
    slot_bytes=st.sampled_from([8, 9, 16, 64]),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("send"), st.integers(0, 70)),
            st.tuples(st.just("recv"), st.integers(0, 70)),
        ),
        max_size=80,
    ),
)
def test_ring_matches_queue_model(slots_log2, slot_bytes, ops):
    slots = 1 << slots_log2
    r = ShmRing.create(None, slots, slot_bytes)
    try:
        model = deque()
        dropped = 0
        counter = 0
        for op, n in ops:
            if op == "send":
                counter += 1
                frame = bytes([counter & 0xFF]) * n
                if n > slot_bytes - 4:
                    with pytest.raises(ValueError):
                        r.send(frame)
                elif len(model) == slots:
                    assert r.send(frame) is False
                    dropped += 1
                else:
                    assert r.send(frame) is True
                    model.append(frame)
            else:
                buf = bytearray(n)
                if not model:
                    assert r.recv_into(buf) == -1
                elif len(model[0]) > n:
                    with pytest.raises(ValueError):
                        r.recv_into(buf)
                else:
                    f = model.popleft()
                    assert r.recv_into(buf) == len(f)
                    assert bytes(buf[: len(f)]) == f
            assert r.pending() == bool(model)
            assert r.stats()["depth"] == len(model)
        assert r.stats()["dropped_full"] == dropped
    finally:
        r.close()
        r.unlink()


# ------------------------------------------------------------------ sleep / wake handshake


def _readable(fd, timeout=0.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_doorbell_rung_only_for_a_sleeping_consumer(rings):
    r = rings.ring(slots=8, slot_bytes=64)
    fd = r.doorbell_fileno()
    buf = bytearray(64)
    # not sleeping: no doorbell
    assert r.send(b"a")
    assert r.stats()["wakeups"] == 0 and not _readable(fd)
    # pending frame: prepare_to_sleep refuses and withdraws the flag
    assert r.prepare_to_sleep() is False
    assert not r.stats()["receiver_sleeping"]
    assert r.recv_into(buf) == 1
    # empty: sleep announced; the next frame rings exactly once
    assert r.prepare_to_sleep() is True
    assert r.stats()["receiver_sleeping"]
    assert r.send(b"b") and r.send(b"c")
    s = r.stats()
    assert s["wakeups"] == 1 and not s["receiver_sleeping"]
    assert _readable(fd)
    assert r.drain_doorbell() == 1
    assert not _readable(fd)
    assert r.drain_doorbell() == 0
    # cancelled sleep: no doorbell
    assert r.recv_into(buf) == 1 and r.recv_into(buf) == 1
    assert r.prepare_to_sleep() is True
    r.cancel_sleep()
    assert r.send(b"d")
    assert r.stats()["wakeups"] == 1 and not _readable(fd)


def test_a_quiet_send_leaves_a_sleeping_consumer_asleep(rings):
    r = rings.ring(slots=8, slot_bytes=64)
    fd = r.doorbell_fileno()
    buf = bytearray(64)
    assert r.prepare_to_sleep() is True
    assert r.send(b"later", False)                  # published, no doorbell, still asleep
    s = r.stats()
    assert s["wakeups"] == 0 and s["receiver_sleeping"] and not _readable(fd)
    assert r.send(b"now")                           # the next ordinary send rings
    assert r.stats()["wakeups"] == 1 and _readable(fd)
    assert r.recv_into(buf) == 5 and bytes(buf[:5]) == b"later"
    assert r.recv_into(buf) == 3


def test_wait_frame_sync_timeout_and_wake(rings):
    link = rings.link(slots=4, slot_bytes=64)
    e0, e1 = link.end(0), link.end(1)
    assert wait_frame_sync(e1, 0.001, timeout=0.05) is False
    assert not e1.rx.stats()["receiver_sleeping"]
    e0.send(b"now")
    assert wait_frame_sync(e1, 0.0, timeout=0.0) is True
    assert e1.recv_into(bytearray(8)) == 3


@pytest.mark.trio
async def test_wait_frame_in_process_sleep_and_wake(rings):
    link = rings.link(slots=4, slot_bytes=64)
    e0, e1 = link.end(0), link.end(1)
    buf = bytearray(64)

    async def later():
        await trio.sleep(0.1)
        assert e1.rx.stats()["receiver_sleeping"]
        assert e0.send(b"wake up")

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            await wait_frame(e1, spin_seconds=0.001)
            assert e1.recv_into(buf) == 7 and buf[:7] == b"wake up"
    assert e1.rx.stats()["wakeups"] == 1


@pytest.mark.trio
@pytest.mark.parametrize("spin", [0.0, 0.01])
async def test_wait_frame_is_a_checkpoint_when_frame_already_pending(rings, spin):
    link = rings.link(slots=4, slot_bytes=64)
    e0, e1 = link.end(0), link.end(1)
    assert e0.send(b"x")
    with trio.CancelScope() as cs:
        cs.cancel()
        await wait_frame(e1, spin)
        pytest.fail("wait_frame did not checkpoint")  # pragma: no cover
    assert cs.cancelled_caught
    assert e1.pending()


@pytest.mark.trio
async def test_wait_frame_cancelled_while_sleeping_withdraws_flag(rings):
    link = rings.link(slots=4, slot_bytes=64)
    e0, e1 = link.end(0), link.end(1)
    with trio.move_on_after(0.05) as cs:
        await wait_frame(e1, 0.0)
    assert cs.cancelled_caught
    assert not e1.rx.stats()["receiver_sleeping"]
    assert e0.send(b"late")
    assert e1.rx.stats()["wakeups"] == 0


# ------------------------------------------------------------------ ShmLink


def test_shm_link_full_duplex_in_process(rings):
    link = rings.link(slots=8, slot_bytes=128)
    e0, e1 = link.end(0), link.end(1)
    assert isinstance(e0, ShmEnd) and e0.max_frame == 124
    assert e0.fileno() != e1.fileno()
    buf = bytearray(128)
    for i in range(50):
        assert e0.send(b"ping%d" % i)
        assert e1.send(b"pong%d" % i)
        n = e1.recv_into(buf)
        assert bytes(buf[:n]) == b"ping%d" % i
        n = e0.recv_into(buf)
        assert bytes(buf[:n]) == b"pong%d" % i
    assert not e0.pending() and not e1.pending()
    s = e0.stats()
    assert s["sent"] == 50 and s["received"] == 50
    with pytest.raises(ValueError):
        link.end(2)


def _drive_echo(end, frames, window, timeout=TIMEOUT):
    """Send frames (at most `window` outstanding), check every reversed echo."""
    buf = bytearray(65536)
    sent = got = 0
    deadline = time.monotonic() + timeout
    while got < len(frames):
        if time.monotonic() > deadline:
            raise AssertionError(f"echo stalled at {got}/{len(frames)}")
        if sent < len(frames) and sent - got < window and end.send(frames[sent]):
            sent += 1
            continue
        n = end.recv_into(buf)
        if n >= 0:
            assert bytes(buf[:n]) == frames[got][::-1], f"frame {got} corrupted"
            got += 1
        elif sent == len(frames) or sent - got >= window:
            wait_frame_sync(end, 0.0005, timeout=1.0)
    return got


def test_shm_echo_with_independent_process(rings):
    """A freshly started python process attaches by name and echoes frames."""
    link = rings.link(slots=16, slot_bytes=512)
    e0 = link.end(0)
    rng = random.Random(3)
    frames = [rng.randbytes(rng.randint(0, 508)) for _ in range(3000)]
    child = _Child("shm-echo", names=list(link.names), count=len(frames), spin=0.0002)
    try:
        assert child.readline() == "ready"
        # window > slots: both rings run full and both sides sleep/wake a lot
        assert _drive_echo(e0, frames, window=40) == len(frames)
        child.finish()
    finally:
        child.kill()
    # the child's exit must not have removed the segments (resource tracker)
    for name in link.names:
        assert os.path.exists(_shm_path(name))
    s = e0.stats()
    assert s["sent"] == s["received"] == len(frames)
    assert e0.send(b"still usable")


@pytest.mark.trio
async def test_consumer_sleeps_and_is_woken_by_other_process(rings):
    link = rings.link(slots=4, slot_bytes=64)
    e0 = link.end(0)
    payload = os.urandom(33)
    child = _Child("shm-send-when-peer-sleeps", names=list(link.names), payload=payload.hex())
    try:
        assert child.readline() == "ready"
        with trio.fail_after(TIMEOUT):
            await wait_frame(e0, spin_seconds=0.0)  # straight to the doorbell
        buf = bytearray(64)
        assert e0.recv_into(buf) == 33 and bytes(buf[:33]) == payload
        assert e0.rx.stats()["wakeups"] == 1  # it really was the doorbell
        child.finish()
    finally:
        child.kill()


@pytest.mark.trio
async def test_trio_ping_pong_with_other_process_through_doorbells(rings):
    link = rings.link(slots=8, slot_bytes=128)
    e0 = link.end(0)
    count = 200
    child = _Child("shm-echo", names=list(link.names), count=count, spin=0.0)
    buf = bytearray(128)
    try:
        assert child.readline() == "ready"
        with trio.fail_after(TIMEOUT):
            for i in range(count):
                frame = b"%06d" % i + b"-" * (i % 100)
                assert e0.send(frame)
                await wait_frame(e0, spin_seconds=0.0)
                n = e0.recv_into(buf)
                assert bytes(buf[:n]) == frame[::-1]
        child.finish()
    finally:
        child.kill()
    # Neither side spins, so frames cross via doorbells -- unless the scheduler
    # ran the woken peer before the waiter got to sleep (wake-up preemption on a
    # busy CPU), which is legal; over 200 round trips some doorbells must ring.
    assert e0.tx.stats()["wakeups"] + e0.rx.stats()["wakeups"] > 0


def _mp_echo_child(names, count):
    end = ShmLink.attach(names, 1)
    buf = bytearray(4096)
    try:
        for _ in range(count):
            if not wait_frame_sync(end, 0.0001, timeout=TIMEOUT):
                raise SystemExit(4)
            n = end.recv_into(buf)
            while not end.send(bytes(buf[:n])[::-1]):
                time.sleep(0.0001)
    finally:
        end.close()


def test_shm_echo_with_multiprocessing_spawn_child(rings):
    link = rings.link(slots=8, slot_bytes=2048)
    frames = [os.urandom(n) for n in (0, 1, 2044, 17, 1000) * 40]
    proc = multiprocessing.get_context("spawn").Process(
        target=_mp_echo_child, args=(link.names, len(frames))
    )
    proc.start()
    try:
        assert _drive_echo(link.end(0), frames, window=12) == len(frames)
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)


# ------------------------------------------------------------------ UDP


@pytest.fixture
def udp_pair():
    a = UdpPort.bind("127.0.0.1", 0)
    b = UdpPort.bind("127.0.0.1", 0)
    try:
        a.connect(b.address)
        b.connect(a.address)
        yield a, b
    finally:
        a.close()
        b.close()


def _wait_pending(port, timeout=5.0):
    assert wait_frame_sync(port, 0.0, timeout=timeout), "datagram did not arrive"


def test_udp_round_trip_exact_bytes(udp_pair):
    a, b = udp_pair
    assert a.address[0] == "127.0.0.1" and a.peer == b.address
    buf = bytearray(65536)
    assert b.recv_into(buf) == -1 and not b.pending()
    for n in (0, 1, 2, 1400, 2044, 9000, UdpPort.max_frame):
        frame = os.urandom(n)
        assert a.send(frame)
        _wait_pending(b)
        assert b.pending()
        assert b.recv_into(buf) == n
        assert bytes(buf[:n]) == frame
        assert b.recv_into(buf) == -1
    with pytest.raises(ValueError):
        a.send(b"x" * (UdpPort.max_frame + 1))
    assert a.stats()["sent"] == 7 and b.stats()["received"] == 7


def test_udp_order_truncation_and_send_to(udp_pair):
    a, b = udp_pair
    buf = bytearray(64)
    for i in range(20):
        assert a.send(b"%d" % i)
    for i in range(20):
        _wait_pending(b)
        n = b.recv_into(buf)
        assert bytes(buf[:n]) == b"%d" % i  # loopback keeps order
    assert a.send(b"z" * 100)
    _wait_pending(b)
    with pytest.raises(ValueError):
        b.recv_into(buf)
    assert b.stats()["truncated"] == 1
    # unconnected ports: send_to / recv_from_into (a connected port filters
    # out datagrams from anyone but its peer)
    c, d = UdpPort.bind(), UdpPort.bind()
    try:
        assert c.send_to(b"unconnected", d.address)
        _wait_pending(d)
        n, addr = d.recv_from_into(buf)
        assert bytes(buf[:n]) == b"unconnected" and addr == c.address
        assert d.recv_from_into(buf) == (-1, None)
    finally:
        c.close()
        d.close()
    assert b.prepare_to_sleep() is True and b.fileno() == b.socket.fileno()


@pytest.mark.trio
async def test_udp_wait_frame(udp_pair):
    a, b = udp_pair
    buf = bytearray(64)

    async def later():
        await trio.sleep(0.05)
        a.send(b"udp wake")

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            await wait_frame(b, spin_seconds=0.001)
    assert b.recv_into(buf) == 8 and buf[:8] == b"udp wake"


def test_udp_echo_with_independent_process():
    port = UdpPort.bind("127.0.0.1", 0)
    rng = random.Random(5)
    frames = [rng.randbytes(rng.randint(0, 3000)) for _ in range(500)]
    child = _Child("udp-echo", peer=list(port.address), count=len(frames), spin=0.0002)
    try:
        peer = tuple(json.loads(child.readline()))
        assert peer[0] == "127.0.0.1"
        port.connect(peer)
        # lock-step (window 1): UDP may drop on overflow, a window of 1 never overflows
        assert _drive_echo(port, frames, window=1) == len(frames)
        child.finish()
    finally:
        child.kill()
        port.close()


# --------------------------------------------------------------------------- event rings, batched


def test_event_ring_batched_posts_stay_invisible_until_published():
    """A node's deliveries of one pass wake the process once: while batching, a posted record
    is invisible to the consumer (the eventfd not readable) until publish_posts; the node's
    own consumer side (a generic read) publishes first; turning batching off publishes."""
    import select as _select
    from kernelsim.daemon import EventRing, batch_posts, event_ring_bytes, publish_posts
    memfd = os.memfd_create("t-events")
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    os.ftruncate(memfd, event_ring_bytes(8))
    node, user = EventRing(memfd, efd, 8), None
    try:
        user = EventRing(memfd, efd)
        batch_posts(True)
        try:
            assert node.post(1, 10, 0, 5) and node.post(2, 20, 0, 5)
            assert not user.pending() and _select.select([user.fileno()], [], [], 0)[0] == []
            assert publish_posts() == 1 and publish_posts() == 0
            assert _select.select([user.fileno()], [], [], 0)[0] == [user.fileno()]
            assert user.pop() == (1, 10, 0, 5) and user.pop() == (2, 20, 0, 5) and user.pop() is None
            assert _select.select([user.fileno()], [], [], 0)[0] == []      # drained: not readable
            node.post(3, 30, 1, 6)
            assert node.pop() == (3, 30, 1, 6)                  # the node's own read publishes first
            for i in range(8):
                assert node.post(i, 1, 0, 0)
            assert not node.post(9, 1, 0, 0)                    # full counts the unpublished records
        finally:
            batch_posts(False)                                  # publishes what is pending
        assert user.pending() and [user.pop()[0] for _ in range(8)] == list(range(8))
        assert node.post(7, 7, 7, 7) and user.pending()         # not batching: visible at once
    finally:
        if user is not None:
            user.close()
        node.close()
        os.close(memfd)
        os.close(efd)
