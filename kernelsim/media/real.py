"""Real transports for frames between OS processes.

Every transport here exposes the same *port* interface, so the polling
watchdog (:func:`wait_frame` / :func:`wait_frame_sync`) works with any of
them::

    send(frame) -> bool          # False: frame dropped (ring full / socket buffer full)
    recv_into(buf) -> int        # frame length, -1 if nothing pending
    pending() -> bool            # cheap, non-blocking
    fileno() -> int              # fd that becomes readable when a frame arrives
    prepare_to_sleep() -> bool   # True: still empty, safe to block on fileno()
    cancel_sleep() -> None       # withdraw prepare_to_sleep()
    drain() -> None              # consume doorbell bytes after waking
    close() -> None
    stats() -> dict
    max_frame: int

* :class:`ShmEnd` -- one side of a :class:`ShmLink`: two
  :class:`~kernelsim.media._shmring.ShmRing` s (a->b, b->a) in POSIX shared
  memory, with a FIFO doorbell per direction.
* :class:`UdpPort` -- frames as UDP datagrams (loopback), the socket itself is
  the doorbell.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import time

import trio

from kernelsim.media._shmring import ShmRing, dgram_pending, dgram_recv_into

__all__ = [
    "SocketPort",
    "ShmRing",
    "ShmLink",
    "ShmEnd",
    "UdpPort",
    "wait_frame",
    "wait_frame_sync",
]

_perf_counter = time.perf_counter


# ---------------------------------------------------------------- shared memory


class ShmEnd:
    """One endpoint of a full-duplex shared-memory link.

    ``send`` goes to the peer's receive ring, ``recv_into``/``pending``/the
    sleep methods act on this side's receive ring.  The hot-path methods are
    the rings' own (Cython) bound methods, so calling them costs no extra
    Python frame.
    """

    __slots__ = (
        "side", "names", "tx", "rx", "max_frame", "_owns",
        "send", "recv_into", "pending", "prepare_to_sleep", "cancel_sleep",
    )

    def __init__(self, tx: ShmRing, rx: ShmRing, side: int,
                 names: tuple[str, str], owns: bool):
        self.side = side
        self.names = names
        self.tx = tx
        self.rx = rx
        self.max_frame = tx.max_frame
        self._owns = owns
        self.send = tx.send
        self.recv_into = rx.recv_into
        self.pending = rx.pending
        self.prepare_to_sleep = rx.prepare_to_sleep
        self.cancel_sleep = rx.cancel_sleep

    def fileno(self) -> int:
        """The receive doorbell (a FIFO): readable after the peer rang it."""
        return self.rx.doorbell_fileno()

    def drain(self) -> None:
        self.rx.drain_doorbell()

    def stats(self) -> dict:
        t, r = self.tx.stats(), self.rx.stats()
        return {
            "sent": t["sent"],
            "dropped_full": t["dropped_full"],
            "wakeups_sent": t["wakeups"],
            "received": r["received"],
            "wakeups_received": r["wakeups"],
            "rx_depth": r["depth"],
            "tx_depth": t["depth"],
        }

    def close(self) -> None:
        """Detach (only if this end attached its own rings; ends obtained
        from :meth:`ShmLink.end` share the link's rings -- close the link)."""
        if self._owns:
            self.tx.close()
            self.rx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<ShmEnd side={self.side} names={self.names!r}>"


class ShmLink:
    """Two :class:`ShmRing` s forming a full-duplex link between two sides.

    ``names[0]`` carries side 0 -> side 1, ``names[1]`` side 1 -> side 0.
    The creating process owns the segments and must :meth:`unlink` them.
    """

    def __init__(self, rings: tuple[ShmRing, ShmRing]):
        self._rings = rings

    @classmethod
    def create(cls, slots: int = 256, slot_bytes: int = 2048,
               name: str | None = None) -> "ShmLink":
        if name is None:
            name = f"dplink_{os.getpid()}_{secrets.token_hex(6)}"
        a2b = ShmRing.create(f"{name}.a2b", slots, slot_bytes)
        try:
            b2a = ShmRing.create(f"{name}.b2a", slots, slot_bytes)
        except BaseException:
            a2b.close()
            a2b.unlink()
            raise
        return cls((a2b, b2a))

    @property
    def names(self) -> tuple[str, str]:
        return (self._rings[0].name, self._rings[1].name)

    @property
    def rings(self) -> tuple[ShmRing, ShmRing]:
        return self._rings

    def end(self, side: int) -> ShmEnd:
        """View of side 0 or 1 over this process's own mappings."""
        a2b, b2a = self._rings
        if side == 0:
            return ShmEnd(a2b, b2a, 0, self.names, owns=False)
        if side == 1:
            return ShmEnd(b2a, a2b, 1, self.names, owns=False)
        raise ValueError("side must be 0 or 1")

    @staticmethod
    def attach(names, side: int) -> ShmEnd:
        """Attach (from any process) to side 0 or 1 of a link by its names."""
        n_a2b, n_b2a = names
        if side not in (0, 1):
            raise ValueError("side must be 0 or 1")
        a2b = ShmRing.attach(n_a2b)
        try:
            b2a = ShmRing.attach(n_b2a)
        except BaseException:
            a2b.close()
            raise
        names = (n_a2b, n_b2a)
        if side == 0:
            return ShmEnd(a2b, b2a, 0, names, owns=True)
        return ShmEnd(b2a, a2b, 1, names, owns=True)

    def close(self) -> None:
        for r in self._rings:
            r.close()

    def unlink(self) -> None:
        """Remove both segments and doorbells (idempotent)."""
        for r in self._rings:
            r.unlink()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            self.unlink()

    def __repr__(self):
        return f"<ShmLink names={self.names!r}>"


# ---------------------------------------------------------------- UDP


class SocketPort:
    """What every datagram-socket transport shares: a non-blocking socket that is its own
    doorbell (the kernel makes it readable), counters, close. Subclasses send and receive."""

    def __init__(self, sock: socket.socket):
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._sent = 0
        self._received = 0
        self._dropped = 0
        self._truncated = 0

    @property
    def socket(self) -> socket.socket:
        return self._sock

    def pending(self) -> bool:
        return dgram_pending(self._fd)

    def fileno(self) -> int:
        return self._fd

    def prepare_to_sleep(self) -> bool:
        return True

    def cancel_sleep(self) -> None:
        pass

    def drain(self) -> None:
        pass

    def stats(self) -> dict:
        return {"sent": self._sent, "received": self._received, "dropped": self._dropped,
                "truncated": self._truncated}

    def close(self) -> None:
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class UdpPort(SocketPort):
    """Frames as UDP datagrams on a non-blocking socket (one frame per datagram).

    Built with :meth:`bind`.  ``send`` needs :meth:`connect` first;
    :meth:`send_to` does not.  ``recv_into`` raises ValueError if the
    datagram did not fit (unlike ShmRing the datagram is then lost: kernel
    datagram semantics; counted in ``stats()['truncated']``).
    """

    max_frame = 65507  # IPv4 UDP payload limit

    def __init__(self, sock: socket.socket):
        super().__init__(sock)
        self._peer = None

    @classmethod
    def bind(cls, host: str = "127.0.0.1", port: int = 0, *,
             rcvbuf: int | None = None, sndbuf: int | None = None) -> "UdpPort":
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if sndbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()

    @property
    def peer(self):
        return self._peer


    def connect(self, peer_address) -> None:
        self._sock.connect(tuple(peer_address))
        self._peer = self._sock.getpeername()

    def _send_failed(self, exc: OSError, frame) -> bool:
        if exc.errno == errno.EMSGSIZE:
            raise ValueError(
                f"frame of {memoryview(frame).nbytes} bytes exceeds max_frame={self.max_frame}"
            ) from None
        if isinstance(exc, (BlockingIOError, InterruptedError, ConnectionRefusedError)) \
                or exc.errno == errno.ENOBUFS:
            self._dropped += 1
            return False
        raise exc

    def send(self, frame) -> bool:
        """Send one frame to the connected peer; False if it was dropped
        (socket buffer full, or an ICMP 'port unreachable' was pending)."""
        try:
            self._sock.send(frame)
        except OSError as exc:
            return self._send_failed(exc, frame)
        self._sent += 1
        return True

    def send_to(self, frame, addr) -> bool:
        try:
            self._sock.sendto(frame, tuple(addr))
        except OSError as exc:
            return self._send_failed(exc, frame)
        self._sent += 1
        return True

    def recv_into(self, buf) -> int:
        """Next datagram into buf; its length, or -1 if none is queued."""
        try:
            n = dgram_recv_into(self._fd, buf)
        except ValueError:
            self._truncated += 1
            raise
        if n >= 0:
            self._received += 1
        return n

    def recv_from_into(self, buf):
        """(length, sender address), or (-1, None) if nothing is queued."""
        try:
            n, addr = self._sock.recvfrom_into(buf)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError):
            return -1, None
        self._received += 1
        return n, addr

    def __repr__(self):
        try:
            addr = self.address
        except OSError:
            addr = "closed"
        return f"<UdpPort {addr} peer={self._peer}>"


# ---------------------------------------------------------------- waiting


def _spin(pending, spin_seconds: float) -> bool:
    """Busy-poll pending() for up to spin_seconds; True if a frame showed up."""
    if spin_seconds <= 0:
        return False
    deadline = _perf_counter() + spin_seconds
    while True:
        if pending():
            return True
        if _perf_counter() >= deadline:
            return False


async def wait_frame(port, spin_seconds: float = 0.0) -> None:
    """Polling watchdog (trio): return once ``port.pending()`` is true.

    Spins on ``pending()`` for up to ``spin_seconds`` of wall time (this
    blocks the trio thread -- that is the point of polling), then announces
    sleep with ``prepare_to_sleep()`` and blocks in
    ``trio.lowlevel.wait_readable(port.fileno())``.  Always a trio checkpoint.
    On cancellation the sleep announcement is withdrawn.
    """
    pending = port.pending
    if pending() or _spin(pending, spin_seconds):
        await trio.lowlevel.checkpoint()
        return
    fd = port.fileno()
    while True:
        if not port.prepare_to_sleep():
            await trio.lowlevel.checkpoint()
            return
        try:
            await trio.lowlevel.wait_readable(fd)
        finally:
            port.cancel_sleep()
        port.drain()
        if pending():
            return
        # Woken by a stale doorbell byte (a race the protocol tolerates): sleep again.


def wait_frame_sync(port, spin_seconds: float = 0.0, timeout: float | None = None) -> bool:
    """Blocking polling watchdog using select.select.

    True once a frame is pending; False if ``timeout`` seconds (spin
    included) passed without one.
    """
    pending = port.pending
    if pending():
        return True
    start = _perf_counter()
    if timeout is not None:
        spin_seconds = min(spin_seconds, timeout)
    if _spin(pending, spin_seconds):
        return True
    end = None if timeout is None else start + timeout
    fd = port.fileno()
    while True:
        if not port.prepare_to_sleep():
            return True
        if end is None:
            remaining = None
        else:
            remaining = end - _perf_counter()
            if remaining < 0:
                remaining = 0
        try:
            readable, _, _ = select.select([fd], [], [], remaining)
        finally:
            port.cancel_sleep()
        if readable:
            port.drain()
        if pending():
            return True
        if not readable:
            return False
