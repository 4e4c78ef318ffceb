# cython: language_level=3, boundscheck=False, wraparound=False
"""The backend adapter between a device model and a real transport.

A device model transmits through a *port* (``transmit(frame, t) -> (start, end)``)
and receives by having ``rx_frame(frame, crc_ok)`` called. Modeled media time each
frame; this adapter hands frames to a real transport (a shared-memory ring, a UDP
socket) at once and, when the node polls, feeds what the transport has to the device.

Faults on a real transport: where the transport itself cannot lose or damage frames
on request (shared memory, UDP on one host), the adapter passes every received frame
through the same seeded `FaultInjector` the modeled media use -- lost, duplicated,
corrupted (the device sees a failed CRC, as after a real wire's FCS check) or held
back so that later frames overtake it (reordering). Held frames are due at a wall
time; until then the port never lets its node sleep.

A frame is received by C calls only, as often as frames arrive: when the transport is a
shared-memory ring (`ShmRing`, or a mesh with one peer), the port takes the frame
straight into its buffer (``recv_raw``), hands it to the device model's C entry
(`FrameSink.frame_in`) and runs the node's engine (``Engine.run``) -- no Python-level call,
attribute lookup or memoryview object per frame. Any other transport or device is
reached through its Python-level methods, with the same effect.
"""
from __future__ import annotations

import heapq
import os
import time

from kernelsim._engine cimport Engine
from kernelsim.media._port cimport FramePort
from kernelsim.media._shmring cimport RING_EMPTY, ShmRing, packet_recv_raw, packet_send_raw
from libc.errno cimport EAGAIN, ENOBUFS
from cpython.bytes cimport PyBytes_FromStringAndSize
from kernelsim.media.mesh cimport MeshSender
from kernelsim.media.packet import PacketPort

__all__ = ["DevicePort"]              # FrameSink: kernelsim.media._port


cdef class PortTx(FramePort):
    """`DevicePort`'s transmit side as a C call (`FramePort.send_frame`): a frame from the
    device model to a shared-memory mesh by C calls (`MeshSender.send_c`), to an AF_PACKET
    socket by one send(2) (`packet_send_raw`, counted on the `PacketPort` as its ``send``
    counts), to any other transport by its ``send``."""

    def __cinit__(self):
        self._packet_fd = -1

    cdef int _look_up(self) except -1:
        """What the port uses of its transport by C, looked up once per transport (the
        transport can be swapped), not per frame or pass."""
        transport = self.transport
        self._packet_fd = transport.fileno() if isinstance(transport, PacketPort) else -1
        self._looked_up_for = transport
        return 0

    cdef int send_frame(self, object frame, double t, double* start, double* end) except -1:
        if isinstance(frame, bytes):
            return self._send(frame, <const unsigned char*> (<bytes> frame), len(<bytes> frame), t, start, end)
        return self._send(frame, NULL, 0, t, start, end)

    cdef int send_raw(self, const unsigned char* p, Py_ssize_t n, double t, double* start,
                      double* end) except -1:
        """`send_frame` for a frame still in the device's memory: to a mesh or an AF_PACKET
        socket straight from there, no bytes object made per frame (the mesh makes one
        only if its router or an error needs it)."""
        return self._send(None, p, n, t, start, end)

    cdef int _send(self, object frame, const unsigned char* p, Py_ssize_t n, double t, double* start,
                   double* end) except -1:
        """One frame to the transport: `frame`, or, where it is None, the `n` bytes at `p`
        (made a bytes object only for a transport that needs one); `p` NULL: a frame that
        is no bytes object, for the transport's ``send``."""
        cdef bint sent
        cdef int err = 0
        transport = self.transport
        if transport is not self._looked_up_for:
            self._look_up()
        if p != NULL and isinstance(transport, MeshSender):
            sent = (<MeshSender> transport).send_c(frame, p, n)
        elif p != NULL and self._packet_fd >= 0:
            sent = packet_send_raw(self._packet_fd, p, n, &err) >= 0     # never blocks: keeps the GIL
            if sent:
                transport._sent += 1
            elif err == EAGAIN or err == ENOBUFS:
                transport._dropped += 1         # the queue is full: lost, as PacketPort.send counts it
            else:                               # raises what the port raises for it (EMSGSIZE: ValueError)
                sent = transport.send(frame if frame is not None else PyBytes_FromStringAndSize(<const char*> p, n))
        else:
            sent = transport.send(frame if frame is not None or p == NULL else PyBytes_FromStringAndSize(<const char*> p, n))
        if sent:
            self.tx_frames += 1
        else:
            self.tx_dropped += 1          # transport full: lost, as on a congested wire
        start[0] = t                      # real time: the medium's (start, end) are both now
        end[0] = t
        return 0


cdef class DevicePort(PortTx):
    """One device model on one real transport (see the module's essay).

    ``settle`` is the node's engine, run after each frame (each frame is handled before
    the next) -- or after every ``settle_every`` frames a poll finds waiting, and once more
    when it has taken what there was: a burst is then handed to the device as it would
    have come off the wire, and its frames' DMA, one interrupt and one receive walk handle
    them together (a real node's, `libdp._cluster.Cluster.real_node`). The engine still
    runs before a frame the device has no free receive buffer for (`FrameSink.rx_room`):
    a burst never overruns the ring where one frame at a time would not.
    ``faults_elsewhere`` describes faults the transport itself applies (netem), for the
    statistics."""

    def __init__(self, transport, faults=None):
        self.transport = transport
        self.device = None
        self._buf = bytearray(transport.max_frame)
        self._mv = self._buf
        self._view = memoryview(self._buf)
        self.tx_frames = 0
        self.tx_dropped = 0
        self.rx_frames = 0
        self.settle = None
        self.settle_every = 1
        self._unsettled = 0
        self.divert = None
        self.faults = None
        self.faults_elsewhere = None
        self._held = []
        self._held_seq = 0
        if faults is not None:
            self.inject_faults(faults)

    def inject_faults(self, faults) -> None:
        """Pass every received frame through `faults` (a FaultInjector) from now on. (Not
        ``inject``: a medium with ``inject(ni, data, token)`` is a Myrinet fabric to the NI.)"""
        self.faults = faults if faults.active else None

    def attach(self, device) -> None:
        self.device = device
        device.port = self

    def transmit(self, frame, t: float, ready: float = 0.0):
        """Send `frame` now (real time: `ready`, when a cut-through sender has the whole
        frame, has passed already); the medium's (start, end) -- both now (`send_frame`)."""
        cdef double start, end
        self.send_frame(frame, t, &start, &end)
        return t, t

    cdef int _look_up(self) except -1:
        PortTx._look_up(self)
        owner = getattr(self.transport.recv_into, "__self__", None)
        self._rx_ring = owner if type(owner) is ShmRing else None
        self._packet_ring = self.transport.rx_ring if self._packet_fd >= 0 else None
        return 0

    cpdef int poll(self) except -1:
        """Feed what the transport holds to the device, one frame at a time.

        Each frame is handled -- DMA, interrupt, driver, protocol -- before the next is
        taken, as frames that arrive microseconds apart on a wire would be; a transport
        burst therefore never overruns the receive ring unseen.
        """
        cdef Py_ssize_t k, n = 0
        cdef ShmRing ring
        if self.faults is not None or self._held or self.divert is not None:
            return self._poll_faulty()
        if self.transport is not self._looked_up_for:
            self._look_up()
        if self._packet_fd >= 0:
            return self._poll_packet()
        ring = self._rx_ring
        if ring is not None:                    # the ring itself: frames by C, straight into the buffer
            while True:
                k = ring.recv_raw(&self._mv[0], <size_t> self._mv.shape[0])
                if k < 0:
                    if k != RING_EMPTY:
                        self._settle_rest()
                        ring.recv_into(self._buf)       # raises what went wrong (closed, corrupt)
                    return self._settle_rest() + n
                self._frame_in(k)
                n += 1
        recv = self.transport.recv_into
        while True:
            k = recv(self._buf)
            if k < 0:
                return self._settle_rest() + n
            self._frame_in(k)
            n += 1

    cdef int _settle_rest(self) except -1:
        """Run `settle` for the frames taken in since it last ran (0: nothing to add)."""
        if self._unsettled:
            self._unsettled = 0
            self.settle.run()
        return 0

    cdef int _poll_packet(self) except -1:
        """`poll` from a `PacketPort` by C: a frame from its receive ring, or one recvfrom(2)
        a frame (and one a pass that finds none), straight into the buffer, counted on the
        port as its recv_into would."""
        cdef Py_ssize_t k, n = 0, cap = self._mv.shape[0]
        cdef int err = 0
        cdef PacketRxRing ring = self._packet_ring
        port = self.transport
        while True:
            if ring is not None:                # a look at the slot's status word, a copy
                k = ring.recv_raw(&self._mv[0], cap)
            else:
                k = packet_recv_raw(self._packet_fd, &self._mv[0], cap, &err)     # never blocks: keeps the GIL
            if k == -1:
                return self._settle_rest() + n
            if k == -2:                         # our own transmission, seen by a tap
                port._outgoing += 1
                continue
            if k == -3:
                self._settle_rest()
                raise OSError(err, os.strerror(err))
            if k > cap:
                port._truncated += 1
                raise ValueError(f"a frame did not fit a {cap}-byte buffer")
            port._received += 1
            self._frame_in(k)
            n += 1

    cdef int _frame_in(self, Py_ssize_t k) except -1:
        """The `k` bytes in the buffer to the device, then the node's engine: the frame is
        handled -- DMA, interrupt, driver, protocol -- before the next is taken."""
        if self._sink is not None:
            self._sink.frame_in(self._mv[:k], True, False)
        else:
            self._device.rx_frame(self._view[:k], True)
        self.rx_frames += 1
        if self.settle is not None:
            self._unsettled += 1
            if self._unsettled >= self.settle_every or self._sink is None or not self._sink.rx_room():
                self._unsettled = 0
                self.settle.run()
        return 0

    def _poll_faulty(self) -> int:
        """`poll` through the fault injector: frames held back whose time has come go
        first (they are older), then what the transport has, each as the injector says."""
        held, settle, faults = self._held, self.settle, self.faults
        rx = self.divert or self._device.rx_frame
        n = 0
        now = time.perf_counter()
        while held and held[0][0] <= now:
            _, _, frame, ok = heapq.heappop(held)
            rx(frame, ok)
            n += 1
            if settle is not None:
                settle.run()
        while True:
            k = self.transport.recv_into(self._buf)
            if k < 0:
                return n
            self.rx_frames += 1
            deliveries = faults.apply(bytes(self._view[:k])) if faults is not None else [(bytes(self._view[:k]), 0.0,
                                                                                              True)]
            for frame, delay, ok in deliveries:
                if delay > 0.0:
                    self._held_seq += 1
                    heapq.heappush(held, (now + delay, self._held_seq, frame, ok))
                    continue
                rx(frame, ok)
                n += 1
                if settle is not None:
                    settle.run()

    def fileno(self) -> int:
        return self.transport.fileno()

    def prepare_to_sleep(self) -> bool:
        if self._held:              # a held-back frame falls due without any doorbell
            return False
        return self.transport.prepare_to_sleep()

    def cancel_sleep(self) -> None:
        self.transport.cancel_sleep()

    def drain(self) -> None:
        self.transport.drain()

    def stats(self) -> dict:
        out = {"tx_frames": self.tx_frames, "tx_dropped": self.tx_dropped, "rx_frames": self.rx_frames,
               "transport": self.transport.stats()}
        if self.faults is not None:
            out["faults"] = {"applied_by": "injector", **self.faults.stats(), "held": len(self._held)}
        elif self.faults_elsewhere is not None:
            out["faults"] = dict(self.faults_elsewhere)
        return out
