"""Raw Ethernet frames on a Linux interface: the AF_PACKET transport.

:class:`PacketPort` is one ``AF_PACKET``/``SOCK_RAW`` socket bound to one interface
and one EtherType (DP's 0x88B5 by default: HW-ETH, the IEEE 802 "local
experimental" EtherType). It has the port interface of :mod:`kernelsim.media.real`
(``send``, ``recv_into``, ``pending``, ``fileno``, ``prepare_to_sleep``, ...), so a
:class:`~kernelsim.media.backend.DevicePort` can put a DEC 21140 model on a real wire:
the device model's frames (destination MAC, source MAC, EtherType, payload; no FCS)
go out as they are, and whatever the interface receives with that EtherType is fed to
the device, whose address filter decides -- as on a shared Ethernet.

* ``send`` writes one whole Ethernet frame; short frames are padded (or not) by the
  kernel and the interface, as a NIC would; a frame longer than the interface's MTU
  plus the 14-byte header is a ValueError (EMSGSIZE), a full socket buffer a drop.
* ``recv_into`` returns whole frames, header included. Frames this socket's own
  interface transmitted (``PACKET_OUTGOING``, seen by packet taps) are skipped.
* ``open(..., rx_ring=True)`` gives the socket a receive ring shared with the kernel
  (``PACKET_RX_RING``, `kernelsim.media._shmring.PacketRxRing`): a frame is taken by a
  look at a status word and a copy, and a poll that finds nothing costs a memory read,
  not a recvfrom(2). Nodes open theirs so; without it (the default: a plain socket, as
  a bare Python program has) every take is one system call.
* The socket is the doorbell: ``prepare_to_sleep()`` is always True.

Opening one needs ``CAP_NET_RAW`` (root). Which network namespace the interface is
looked up in is the opening thread's (see :mod:`kernelsim.media.netns`).
"""
from __future__ import annotations

import errno
import fcntl
import socket
import struct

from kernelsim.media._shmring import packet_recv_into, packet_rx_ring
from kernelsim.media.real import SocketPort

__all__ = ["PacketPort", "DP_ETHERTYPE", "ETH_HLEN"]

DP_ETHERTYPE = 0x88B5          # HW-ETH: IEEE 802 local experimental EtherType 1
ETH_HLEN = 14

_SOL_PACKET = getattr(socket, "SOL_PACKET", 263)
_PACKET_IGNORE_OUTGOING = 23   # linux/if_packet.h (Linux >= 4.20); not in the socket module
_PACKET_STATISTICS = 6         # struct tpacket_stats {tp_packets, tp_drops}; reading resets it
_SIOCGIFMTU = 0x8921
_SIOCGIFHWADDR = 0x8927


def _ifreq(sock: socket.socket, request: int, ifname: str) -> bytes:
    """One SIOCGIF* ioctl on `sock` (answered in the socket's network namespace)."""
    req = struct.pack("16s16x", ifname.encode())
    return fcntl.ioctl(sock.fileno(), request, req)


class PacketPort(SocketPort):
    """Ethernet frames of one EtherType on one interface, on a non-blocking raw socket.

    Built with :meth:`open`. ``max_frame`` is the interface MTU plus the Ethernet
    header (no FCS: the kernel and the NIC add and strip it).
    """

    def __init__(self, sock: socket.socket, ifname: str, ethertype: int, rx_ring: bool = False):
        super().__init__(sock)
        self.ifname = ifname
        self.ethertype = ethertype
        self.mtu = struct.unpack_from("i", _ifreq(sock, _SIOCGIFMTU, ifname), 16)[0]
        self.max_frame = self.mtu + ETH_HLEN
        self.hwaddr = _ifreq(sock, _SIOCGIFHWADDR, ifname)[18:24]
        self._outgoing = 0
        self._kernel_drops = 0
        # The receive ring, or None: frames then come by recvfrom(2).
        self.rx_ring = packet_rx_ring(self._fd, self.max_frame) if rx_ring else None

    @classmethod
    def open(cls, ifname: str, ethertype: int = DP_ETHERTYPE, *, netns: str | None = None,
             rcvbuf: int | None = None, sndbuf: int | None = None, rx_ring: bool = False) -> "PacketPort":
        """Bind a raw socket to `ifname` for frames of `ethertype` (`rx_ring`: frames come
        through a receive ring shared with the kernel, see the module's notes).

        The interface is looked up in this thread's network namespace, or -- with
        `netns` -- in that named namespace (the socket is made there by a pyroute2
        helper process; this process stays where it is). OSError(EPERM) without
        CAP_NET_RAW; OSError(ENODEV) if there is no such interface.
        """
        if not 0x0600 <= ethertype <= 0xFFFF:
            raise ValueError(f"EtherType must be 0x0600..0xFFFF (an Ethernet II type), not {ethertype:#x}")
        try:
            if netns is None:
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype))
            else:
                from pyroute2.netns import create_socket
                sock = create_socket(netns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype), flags=0)
        except PermissionError as exc:
            raise PermissionError(
                errno.EPERM,
                f"cannot open an AF_PACKET raw socket ({exc.strerror}): the packet transport needs "
                "CAP_NET_RAW -- run as root") from None
        except AttributeError:
            raise OSError(errno.EAFNOSUPPORT, "AF_PACKET raw sockets are Linux-only") from None
        try:
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if sndbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            try:
                # Own transmissions never reach this socket at all (the recv filter stays).
                sock.setsockopt(_SOL_PACKET, _PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                pass
            try:
                sock.bind((ifname, ethertype))
            except OSError as exc:
                if exc.errno in (errno.ENODEV, errno.ENXIO):
                    raise OSError(errno.ENODEV, f"no network interface {ifname!r} in this network namespace") \
                        from None
                raise
            return cls(sock, ifname, ethertype, rx_ring)
        except BaseException:
            sock.close()
            raise

    def send(self, frame) -> bool:
        """Transmit one whole Ethernet frame; False if it was dropped (queue full)."""
        try:
            self._sock.send(frame)
        except OSError as exc:
            if isinstance(exc, (BlockingIOError, InterruptedError)) or exc.errno == errno.ENOBUFS:
                self._dropped += 1
                return False
            n = memoryview(frame).nbytes
            if exc.errno == errno.EMSGSIZE:
                raise ValueError(f"frame of {n} bytes exceeds max_frame={self.max_frame} "
                                 f"({self.ifname} MTU {self.mtu})") from None
            if exc.errno == errno.EINVAL and n < ETH_HLEN:
                raise ValueError(f"frame of {n} bytes is shorter than an Ethernet header") from None
            raise
        self._sent += 1
        return True

    def recv_into(self, buf) -> int:
        """Next received frame into buf; its length, or -1 if none is queued.

        A frame longer than buf is lost (datagram semantics) and ValueError is raised
        (counted in ``stats()['truncated']``).
        """
        fd, ring = self._fd, self.rx_ring
        while True:
            try:
                # From the ring, or one system call a frame; none raised when empty.
                n = ring.recv_into(buf) if ring is not None else packet_recv_into(fd, buf)
            except ValueError:
                self._truncated += 1
                raise ValueError(f"a frame did not fit a {len(buf)}-byte buffer") from None
            if n == -2:                             # our own transmission, seen by a tap
                self._outgoing += 1
                continue
            if n >= 0:
                self._received += 1
            return n

    def pending(self) -> bool:
        if self.rx_ring is not None:
            return self.rx_ring.pending()
        return super().pending()

    def close(self) -> None:
        if self.rx_ring is not None:
            self.rx_ring.close()            # unmapped before the socket goes
        super().close()

    def stats(self) -> dict:
        """Counters; ``rx_dropped_kernel`` are frames the kernel dropped because this
        socket's receive buffer was full (PACKET_STATISTICS)."""
        try:
            _, drops = struct.unpack("II", self._sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8))
            self._kernel_drops += drops
        except OSError:
            pass
        return {**super().stats(), "own_skipped": self._outgoing, "rx_dropped_kernel": self._kernel_drops}

    def __repr__(self):
        return f"<PacketPort {self.ifname} type={self.ethertype:#06x} mtu={self.mtu}>"
