"""Real transports joining N nodes: a node's port onto the whole cluster.

A point-to-point port (`ShmEnd`, a connected `UdpPort`) carries every frame to its one
peer. With more nodes, the transport must do what a switch does: send each frame to the
node its link-level destination names. The NIC package knows how its frames are
addressed, so the mesh is given ``dest_of(frame) -> node id or None`` (None: no such
station, the frame is dropped and counted, as a switch drops a frame for an address it
cannot reach).

* `ShmMesh` -- one shared-memory ring per ordered pair of nodes on one host, named
  ``dpm-{cluster}-{src}to{dst}``. Each node creates the rings *into* it (and removes them
  when it stops); a sender attaches to a peer's ring the first time it sends there (a
  frame for a node that has not started is dropped, as on a wire). Its descriptor is an
  epoll set of every inbound ring's doorbell.
* `UdpMesh` -- one UDP socket per node, frames sent to the peer's address from the
  cluster file; a datagram from an address that is not a node of the cluster is dropped
  and counted (``rx_foreign``). This is what joins real hosts.

Both have the port interface of `kernelsim.media.real` (``send``, ``recv_into``,
``pending``, ``fileno``, ``prepare_to_sleep``, ``cancel_sleep``, ``drain``, ``close``,
``stats``, ``max_frame``), so a `DevicePort` puts any NIC on them.
"""
from __future__ import annotations

import errno
import os
import select
import socket
import time

from kernelsim.media._shmring import ShmRing
from kernelsim.media.real import UdpPort
from kernelsim.media._shmring cimport ShmRing as CShmRing, RING_OK, RING_FULL
from cpython.bytes cimport PyBytes_FromStringAndSize

__all__ = ["ShmMesh", "UdpMesh", "OnlyPeer", "mesh_ring_name", "MESH_PREFIX"]

MESH_PREFIX = "dpm-"
_RETRY_ATTACH_S = 0.05


def mesh_ring_name(cluster: str, src: int, dst: int) -> str:
    return f"{MESH_PREFIX}{cluster}-{src}to{dst}"


cdef class OnlyPeer:
    """``dest_of`` of a cluster of two nodes: node `nid`, whatever the frame (a mesh reads
    it by C, without a call per frame)."""

    def __cinit__(self, long nid):
        self.nid = nid

    def __call__(self, frame):
        return self.nid

    def __repr__(self):
        return f"OnlyPeer({self.nid})"


cdef class MeshSender:
    """`ShmMesh.send`'s per-frame work as a C call (`send_c`): the destination, the
    peer's ring, the copy into its next slot; what `DevicePort` calls for every frame."""

    cdef int send_c(self, object frame, const unsigned char* p, Py_ssize_t n) except -1:
        """Send `frame` (its bytes at `p`, `n` long; None: made from them only if a router
        or an error needs it): 1 if it is in the peer's ring, 0 if dropped (and counted);
        the ring's errors (too large, closed) raised as `send` does."""
        cdef int r
        if type(self.dest_of) is OnlyPeer:
            dst = (<OnlyPeer> self.dest_of).nid
        else:
            if frame is None:
                frame = PyBytes_FromStringAndSize(<const char*> p, n)
            dst = self.dest_of(frame)
        if dst is None or dst == self.nid:
            self.tx_no_station += 1
            return 0
        ring = self._out.get(dst)
        if ring is None:
            ring = self._attach(dst)
            if ring is None:
                self.tx_no_peer += 1
                return 0
        r = (<CShmRing?> ring)._publish(p, <size_t> n, True)
        if r == RING_OK:
            return 1
        if r != RING_FULL:
            if frame is None:
                frame = PyBytes_FromStringAndSize(<const char*> p, n)
            if ring.send(frame):                    # raises what went wrong, as the ring's own send
                return 1
        self.tx_full += 1
        return 0

    def send(self, frame) -> bool:
        cdef const unsigned char[::1] view
        if isinstance(frame, bytes):
            return self.send_c(frame, <const unsigned char*> (<bytes> frame), len(<bytes> frame)) == 1
        view = frame
        return self.send_c(frame, &view[0] if view.shape[0] else NULL, view.shape[0]) == 1


class ShmMesh(MeshSender):
    def __init__(self, cluster: str, nid: int, peers, dest_of, *, slots: int = 256, slot_bytes: int = 8192):
        self.cluster = cluster
        self.nid = nid
        self.peers = sorted(p for p in peers if p != nid)
        self.dest_of = dest_of
        self.max_frame = slot_bytes - 4
        self._in: list[ShmRing] = []
        self._out: dict[int, ShmRing] = {}
        self._next_try: dict[int, float] = {}
        self._rr = 0
        self.tx_no_peer = 0
        self.tx_no_station = 0
        self.tx_full = 0
        self._epoll = select.epoll()
        try:
            for p in self.peers:
                name = mesh_ring_name(cluster, p, nid)
                try:
                    ring = ShmRing.create(name, slots, slot_bytes)
                except FileExistsError:
                    # A node of this name crashed and left its ring: take the name back.
                    _unlink_ring(name)
                    ring = ShmRing.create(name, slots, slot_bytes)
                self._in.append(ring)
                self._epoll.register(ring.doorbell_fileno(), select.EPOLLIN)
        except BaseException:
            self.close()
            raise
        if len(self._in) == 1:              # one peer: its ring's own methods, no loop per poll
            self.recv_into = self._in[0].recv_into
            self.pending = self._in[0].pending

    # -- sending (`MeshSender.send`) --------------------------------------------------

    def _attach(self, dst: int):
        if dst not in self.peers:
            return None
        now = time.monotonic()
        if now < self._next_try.get(dst, 0.0):
            return None
        try:
            ring = ShmRing.attach(mesh_ring_name(self.cluster, self.nid, dst))
        except (FileNotFoundError, ValueError, OSError):
            self._next_try[dst] = now + _RETRY_ATTACH_S
            return None
        self._out[dst] = ring
        return ring

    # -- receiving -------------------------------------------------------------------

    def recv_into(self, buf) -> int:
        rings = self._in
        n = len(rings)
        for i in range(n):
            k = rings[(self._rr + i) % n].recv_into(buf)
            if k >= 0:
                self._rr = (self._rr + i + 1) % n
                return k
        return -1

    def pending(self) -> bool:
        for r in self._in:
            if r.pending():
                return True
        return False

    def fileno(self) -> int:
        return self._epoll.fileno()

    def prepare_to_sleep(self) -> bool:
        for i, r in enumerate(self._in):
            if not r.prepare_to_sleep():
                for q in self._in[:i]:
                    q.cancel_sleep()
                return False
        return True

    def cancel_sleep(self) -> None:
        for r in self._in:
            r.cancel_sleep()

    def drain(self) -> None:
        for r in self._in:
            r.drain_doorbell()

    def stats(self) -> dict:
        rx = [r.stats() for r in self._in]
        tx = {p: r.stats() for p, r in self._out.items()}
        return {"received": sum(s["received"] for s in rx), "sent": sum(s["sent"] for s in tx.values()),
                "tx_dropped_full": self.tx_full, "tx_no_peer": self.tx_no_peer, "tx_no_station": self.tx_no_station,
                "rx_depth": sum(s["depth"] for s in rx), "peers_reached": sorted(self._out)}

    def close(self) -> None:
        """Detach from the peers' rings, remove this node's own (idempotent)."""
        for r in self._out.values():
            r.close()
        self._out.clear()
        for r in self._in:
            r.unlink()
            r.close()
        self._in = []
        self.__dict__.pop("recv_into", None)    # back to the loop over no rings
        self.__dict__.pop("pending", None)
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None


def _unlink_ring(name: str) -> None:
    for path in (f"/dev/shm/{name}", f"/dev/shm/{name}.dpbell"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def remove_cluster_rings(cluster: str) -> list[str]:
    """Remove every ring (and doorbell) of `cluster` left in /dev/shm; the names removed."""
    gone = []
    prefix = f"{MESH_PREFIX}{cluster}-"
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return gone
    for n in names:
        if n.startswith(prefix):
            try:
                os.unlink(f"/dev/shm/{n}")
                gone.append(n)
            except FileNotFoundError:
                pass
    return gone


class UdpMesh(UdpPort):
    """One UDP socket per node; frames to the peer that `dest_of` names, by the cluster file's address."""

    def __init__(self, sock, nid: int, addrs: dict, dest_of):
        super().__init__(sock)
        self.nid = nid
        self.dest_of = dest_of
        self._addr = {}
        for p, a in addrs.items():
            if p != nid:
                self._addr[p] = _resolve(a)
        self._known = set(self._addr.values())
        self._scratch = None
        self.rx_foreign = 0
        self.tx_no_station = 0

    @classmethod
    def open(cls, nid: int, addrs: dict, dest_of, *, rcvbuf: int = 4 << 20):
        host, port = _resolve(addrs[nid])
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"node {nid}: cannot bind UDP {host}:{port}: {exc.strerror}") from None
        return cls(sock, nid, addrs, dest_of)

    def send(self, frame) -> bool:
        dst = self.dest_of(frame)
        addr = self._addr.get(dst)
        if addr is None:
            self.tx_no_station += 1
            return False
        return self.send_to(frame, addr)

    def recv_into(self, buf) -> int:
        while True:
            n, addr = self.recv_from_into(buf)
            if n < 0:
                return -1
            if addr in self._known:
                return n
            self.rx_foreign += 1                # not a node of this cluster: dropped, counted

    def stats(self) -> dict:
        return {**super().stats(), "rx_foreign": self.rx_foreign, "tx_no_station": self.tx_no_station}


def _resolve(addr) -> tuple[str, int]:
    if isinstance(addr, str):
        host, _, port = addr.rpartition(":")
        addr = (host, int(port))
    host, port = addr
    try:
        return socket.gethostbyname(host), int(port)
    except OSError as exc:
        raise OSError(errno.EINVAL, f"cannot resolve node address {host!r}: {exc}") from None
